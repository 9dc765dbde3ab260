package kernels

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// entryLineAllowed is the test's own allow-list (written apart from the generator's entryRead
// pattern, so that a widened pattern does not widen the test) of what may stand between an
// entry's wait and its done check: a blank or comment line, a threadgroup declaration
// TG_ARRAY(type, name, size); / TG_DYN_ARRAY(...), or a step-state read
// const u32 name = dyn_rows(ctl, p.field, p.field); (or dyn_value): no store, no other call.
func entryLineAllowed(line string) bool {
	l := strings.TrimSpace(line)
	if l == "" || strings.HasPrefix(l, "//") {
		return true
	}
	isIdent := func(s string) bool {
		if s == "" || unicode.IsDigit(rune(s[0])) {
			return false
		}
		for _, r := range s {
			if r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
				return false
			}
		}
		return true
	}
	for _, decl := range []string{"TG_ARRAY(", "TG_DYN_ARRAY("} {
		if rest, ok := strings.CutPrefix(l, decl); ok {
			args, ok := strings.CutSuffix(rest, ");")
			f := strings.SplitN(args, ",", 3)
			return ok && len(f) == 3 && isIdent(strings.TrimSpace(f[0])) && isIdent(strings.TrimSpace(f[1])) &&
				!strings.ContainsAny(f[2], "=;{}")
		}
	}
	rest, ok := strings.CutPrefix(l, "const u32 ")
	if !ok {
		return false
	}
	name, call, ok := strings.Cut(rest, " = ")
	if !ok || !isIdent(name) {
		return false
	}
	for _, fn := range []string{"dyn_rows(ctl, ", "dyn_value(ctl, "} {
		if args, ok := strings.CutPrefix(call, fn); ok {
			args, ok = strings.CutSuffix(args, ");")
			f := strings.Split(args, ", ")
			if !ok || len(f) != 2 {
				return false
			}
			for _, a := range f {
				if field, ok := strings.CutPrefix(a, "p."); !ok || !isIdent(field) {
					return false
				}
			}
			return true
		}
	}
	return false
}

// TestEntryLineAllowed: the allow-list takes the step-state reads and declarations the bodies
// open with and refuses a store, another call, an expression on the record and a declaration
// with an initializer.
func TestEntryLineAllowed(t *testing.T) {
	for _, l := range []string{"", "    // a comment", "    const u32 rows = dyn_rows(ctl, p.rows, p.rows_word);",
		"    const u32 pos = dyn_value(ctl, p.pos, p.pos_word);", "    TG_ARRAY(float, red, 2u * NSG);", "    TG_DYN_ARRAY(uint4, sx, BLMX_SHARED / 16u);"} {
		if !entryLineAllowed(l) {
			t.Errorf("refused %q", l)
		}
	}
	for _, l := range []string{"    y[0] = 1.0f;", "    const u32 rows = dyn_rows(ctl, p.rows, p.rows_word) + x[0];",
		"    const u32 r = ctl[p.rows_word];", "    const u32 rows = dyn_rows(ctl, p.rows, p.rows_word); y[0] = 0;",
		"    const u32 rows = other(ctl, p.rows, p.rows_word);", "    const u32 rows = dyn_rows(ctl, p.rows + 1u, p.rows_word);",
		"    TG_ARRAY(float, red, n); y[0] = 0;", "    TG_ARRAY(float, red = {0}, 4);", "    const float v = x[0];", "    if (rows == 0u) return;"} {
		if entryLineAllowed(l) {
			t.Errorf("allowed %q", l)
		}
	}
}

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
				if !entryLineAllowed(line) {
					t.Errorf("%s: %q between the entry's wait and its done check", k.Name, line)
				}
			}
		}
		// The timeline's first statement (prelude TL_BEGIN: an empty macro unless the
		// diagnostic is compiled in) is not the body's work.
		pre := regexp.MustCompile(`//[^\n]*|TL_BEGIN\(0x[0-9a-f]{8}u\);`).ReplaceAllString(src[i+len("LITHOS_THREAD_IDS;"):w], "")
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
