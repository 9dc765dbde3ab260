package kernels

import (
	"regexp"
	"strings"
	"testing"
)

// TestEntryWaitsFirst: every kernel's CUDA entry waits for the kernel before it (GRID_WAIT,
// exactly once, then GRID_LAUNCH_DEPENDENTS, its step-state reads and the done check) before it touches ctl or any
// buffer but its read-only weight tables (Buffer.NoAlias): a kernel launched with programmatic
// dependent launch may start while its predecessor still writes those, or still reads what it
// writes. The text before the wait may read the record (p) and the weights only — the
// MMA-layout kernels issue their first weight loads there (entryMarker). A template with two
// entry markers is refused.
func TestEntryWaitsFirst(t *testing.T) {
	// name as an identifier (not a member: tg.x is not x).
	ident := func(name string) *regexp.Regexp {
		return regexp.MustCompile(`(?:^|[^.\w])` + regexp.QuoteMeta(name) + `\b`)
	}
	early := 0
	for _, k := range Kernels() {
		src := entry(CUDA, k)
		if n := strings.Count(src, "GRID_WAIT();"); n != 1 {
			t.Errorf("%s: %d GRID_WAIT() in its entry, want 1", k.Name, n)
			continue
		}
		// The body starts after the record copy and the thread ids.
		i := strings.Index(src, "LITHOS_THREAD_IDS;")
		w := strings.Index(src, "GRID_WAIT();")
		if i < 0 || w < i {
			t.Errorf("%s: GRID_WAIT() before the thread ids", k.Name)
			continue
		}
		// Between the wait and the done check: only step-state reads and threadgroup
		// declarations (entryReads), so nothing is written before a done step returns.
		if !strings.HasPrefix(src[w:], entryWait+"\n") {
			t.Errorf("%s: the entry is not GRID_WAIT, GRID_LAUNCH_DEPENDENTS", k.Name)
		} else if d := strings.Index(src[w:], "\n    "+entryDone+"\n"); d < 0 {
			t.Errorf("%s: no done check after the entry's wait", k.Name)
		} else {
			for _, line := range strings.Split(src[w+len(entryWait):w+d], "\n") {
				if !entryRead.MatchString(line) && !entryBlank.MatchString(line) {
					t.Errorf("%s: %q between the entry's wait and its done check", k.Name, line)
				}
			}
		}
		pre := regexp.MustCompile(`//[^\n]*`).ReplaceAllString(src[i+len("LITHOS_THREAD_IDS;"):w], "")
		if strings.TrimSpace(pre) != "" {
			early++
		}
		if ident("ctl").MatchString(pre) {
			t.Errorf("%s: reads ctl before GRID_WAIT", k.Name)
		}
		for _, b := range k.Buffers {
			if b.NoAlias && !b.Write {
				continue
			}
			if ident(b.Name).MatchString(pre) {
				t.Errorf("%s: touches buffer %s before GRID_WAIT", k.Name, b.Name)
			}
		}
		if strings.Contains(src, entryMarker) {
			t.Errorf("%s: %s left in the generated entry", k.Name, entryMarker)
		}
	}
	// The MMA-layout kernels (two formats) load weights before the wait.
	if early < 2 {
		t.Errorf("%d kernels with work before GRID_WAIT, want at least the 2 MMA-layout kernels", early)
	}
	// Two markers in one body: refused.
	defer func() {
		if recover() == nil {
			t.Errorf("a body with two %s lines was accepted", entryMarker)
		}
	}()
	entryBody(Kernel{Name: "lithos_twice", Op: "twice"}, "    "+entryMarker+"\n    "+entryMarker+"\n")
}
