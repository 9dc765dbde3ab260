package kernels

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The BARRIER / BARRIER_DEV lint (kernels/README.md, "Barriers and device memory"): in an op
// template, a device buffer written before a plain BARRIER() and read after it, with no
// BARRIER_DEV() in between, is flagged — on Metal BARRIER() orders threadgroup memory only, so
// another thread of the threadgroup may read the old device value; CUDA (__syncthreads orders
// both) and the fiber runtime (one OS thread, every access at once visible) never show it.
//
// It is syntactic, on the template text, and over-approximates "another thread": a write and a
// read of the same buffer are flagged even when each thread reads only what it wrote itself;
// a line containing "lint: same-thread" (a comment on the write or the read) exempts that
// pair. What it sees: writes `b[…] = / op= / ++ / --` through a buffer or a DEV pointer
// declared from it (`DEV f32* yr = y + …;`), and calls passing a buffer to a helper parameter
// declared `DEV T*` without const (a write and a read). What it does not see: writes through
// `*p = …`, pointers not declared DEV from a buffer, pointers stored in arrays, a read that
// precedes the write in the text but follows it at run time (a loop that carries the write to
// its next iteration across a barrier), barriers inside helpers, and device memory shared
// between threadgroups (no barrier orders that; kernels must not read it).

var (
	lintIdent   = regexp.MustCompile(`[A-Za-z_]\w*`)
	lintBarrier = regexp.MustCompile(`\bBARRIER(_DEV)?\s*\(\s*\)`)
	lintAlias   = regexp.MustCompile(`\bDEV\s+(const\s+)?\w+\s*\*\s*(\w+)\s*=\s*([^;]*);`)
	lintHelper  = regexp.MustCompile(`\bFN\s+[\w\s\*]*?\b(\w+)\s*\(([^)]*)\)\s*\{`)
	lintComment = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)
	lintAssign  = regexp.MustCompile(`^\s*(=[^=]|\+=|-=|\*=|/=|%=|\|=|&=|\^=|<<=|>>=|\+\+|--)`)
)

// lintFinding is one device write → plain barrier → read.
type lintFinding struct {
	Buffer                 string
	WriteLine, BarrierLine int
	ReadLine               int
	WriteText, ReadText    string
}

func (f lintFinding) String() string {
	return fmt.Sprintf("buffer %s written at line %d (%s), plain BARRIER() at line %d, read at line %d (%s): use BARRIER_DEV()",
		f.Buffer, f.WriteLine, f.WriteText, f.BarrierLine, f.ReadLine, f.ReadText)
}

// lintBarriers checks one op template (helpers, the //@@ body line, the body) whose kernels have
// the device buffers bufs (names as the template uses them, "ctl" included when it is written),
// with the shared helpers of ops/common.kern in common.
func lintBarriers(template, common string, bufs []string) []lintFinding {
	marker := strings.Index(template, bodyMarker)
	if marker < 0 {
		return nil
	}
	lines := strings.Split(template, "\n")
	lineOf := func(off int) int { return strings.Count(template[:off], "\n") + 1 }
	// Comments become spaces (offsets and lines stay), so the lint reads code only.
	blank := func(s string) string {
		return lintComment.ReplaceAllStringFunc(s, func(c string) string {
			b := []byte(c) // byte for byte: offsets into code are offsets into template
			for i := range b {
				if b[i] != '\n' {
					b[i] = ' '
				}
			}
			return string(b)
		})
	}
	code := blank(template)
	bodyStart := marker + len(bodyMarker)
	body := code[bodyStart:]

	// Helpers: which parameters are writable device pointers.
	writes := map[string][]bool{}
	for _, m := range lintHelper.FindAllStringSubmatch(blank(common)+"\n"+code[:marker], -1) {
		var w []bool
		for _, p := range strings.Split(m[2], ",") {
			p = strings.TrimSpace(p)
			w = append(w, strings.HasPrefix(p, "DEV ") && !strings.HasPrefix(strings.TrimSpace(p[4:]), "const"))
		}
		writes[m[1]] = w
	}

	// Buffers and the DEV pointers derived from them.
	owner := map[string]string{}
	for _, b := range bufs {
		owner[b] = b
	}
	type span struct{ lo, hi int }
	var derivations []span
	for _, m := range lintAlias.FindAllStringSubmatchIndex(body, -1) {
		name, rhs := body[m[4]:m[5]], body[m[6]:m[7]]
		derivations = append(derivations, span{m[6], m[7]})
		for _, id := range lintIdent.FindAllString(rhs, -1) {
			if b, ok := owner[id]; ok {
				owner[name] = b
				break
			}
		}
	}
	inDerivation := func(off int) bool {
		for _, s := range derivations {
			if off >= s.lo && off < s.hi {
				return true
			}
		}
		return false
	}

	type event struct {
		off       int
		kind      byte // 'w' write, 'r' read, 'b' plain barrier, 'd' BARRIER_DEV
		buf, text string
	}
	var ev []event
	for _, m := range lintBarrier.FindAllStringSubmatchIndex(body, -1) {
		k := byte('b')
		if m[2] >= 0 {
			k = 'd'
		}
		ev = append(ev, event{off: m[0], kind: k})
	}
	// Helper calls with buffers in writable parameter positions.
	argWrite := map[int]bool{}
	for name, w := range writes {
		re := regexp.MustCompile(`\b` + name + `\s*\(`)
		for _, m := range re.FindAllStringIndex(body, -1) {
			args, offs := splitArgs(body, m[1])
			for i, a := range args {
				if i < len(w) && w[i] {
					if _, ok := owner[strings.TrimSpace(a)]; ok {
						argWrite[offs[i]+len(a)-len(strings.TrimLeft(a, " \t\n"))] = true
					}
				}
			}
		}
	}
	for _, m := range lintIdent.FindAllStringIndex(body, -1) {
		id := body[m[0]:m[1]]
		b, ok := owner[id]
		if !ok || inDerivation(m[0]) || (m[0] > 0 && (body[m[0]-1] == '.' || body[m[0]-1] == '>')) {
			continue
		}
		rest := body[m[1]:]
		text := strings.TrimSpace(lines[lineOf(bodyStart+m[0])-1])
		switch {
		case argWrite[m[0]]:
			ev = append(ev, event{m[0], 'w', b, text}, event{m[0], 'r', b, text})
		case strings.HasPrefix(strings.TrimLeft(rest, " "), "["):
			i := strings.Index(rest, "[")
			end := matchBracket(rest, i)
			if end < 0 {
				continue
			}
			if a := lintAssign.FindString(rest[end+1:]); a != "" {
				ev = append(ev, event{m[0], 'w', b, text})
				if strings.TrimSpace(a)[0] == '=' {
					continue // a plain store reads nothing
				}
			}
			ev = append(ev, event{m[0], 'r', b, text})
		default:
			ev = append(ev, event{m[0], 'r', b, text})
		}
	}
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].off < ev[j].off })

	exempt := func(text string) bool { return strings.Contains(text, "lint: same-thread") }
	rawLine := func(off int) string { return lines[lineOf(bodyStart+off)-1] }
	var out []lintFinding
	seen := map[string]bool{}
	for i, w := range ev {
		if w.kind != 'w' || exempt(rawLine(w.off)) {
			continue
		}
		plain, dev := -1, false
		for _, e := range ev[i+1:] {
			switch e.kind {
			case 'b':
				if plain < 0 {
					plain = e.off
				}
			case 'd':
				dev = true
			case 'r':
				if e.buf != w.buf || plain < 0 || dev || exempt(rawLine(e.off)) {
					continue
				}
				f := lintFinding{w.buf, lineOf(bodyStart + w.off), lineOf(bodyStart + plain), lineOf(bodyStart + e.off), w.text, e.text}
				if k := f.String(); !seen[k] {
					seen[k] = true
					out = append(out, f)
				}
			}
		}
	}
	return out
}

// splitArgs splits the call arguments starting at s[open:] (just after '(') at top-level
// commas; offs are the arguments' offsets in s.
func splitArgs(s string, open int) (args []string, offs []int) {
	depth, start := 0, open
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(', '[':
			depth++
		case ')', ']':
			if depth == 0 {
				return append(args, s[start:i]), append(offs, start)
			}
			depth--
		case ',':
			if depth == 0 {
				args, offs = append(args, s[start:i]), append(offs, start)
				start = i + 1
			}
		}
	}
	return nil, nil
}

// matchBracket returns the index of the ']' closing s[open] == '[', or -1.
func matchBracket(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// opBuffers returns the device buffers of op's kernels: every buffer name, and ctl when a kernel
// of the op writes it.
func opBuffers(op string) []string {
	set := map[string]bool{}
	for _, k := range Kernels() {
		if k.Op != op {
			continue
		}
		for _, b := range k.Buffers {
			set[b.Name] = true
		}
		if k.CtlRW {
			set["ctl"] = true
		}
	}
	var out []string
	for b := range set {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

// TestBarrierDeviceLint runs the lint over every op template with kernels in the registry.
func TestBarrierDeviceLint(t *testing.T) {
	common, err := os.ReadFile(filepath.Join("ops", "common.kern"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join("ops", "*.kern"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no op templates: %v", err)
	}
	checked := 0
	for _, f := range files {
		op := strings.TrimSuffix(filepath.Base(f), ".kern")
		bufs := opBuffers(op)
		if len(bufs) == 0 {
			continue // common.kern, or a template not (yet) in the registry
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, x := range lintBarriers(string(src), string(common), bufs) {
			t.Errorf("%s: %s", f, x)
		}
	}
	t.Logf("%d op templates checked", checked)
}

// TestBarrierLintCatches: the lint flags a write → BARRIER() → read, through a derived pointer
// and through a helper's writable parameter, and passes BARRIER_DEV(), a read before the write,
// a write-only buffer and an exempted same-thread pair.
func TestBarrierLintCatches(t *testing.T) {
	const common = "FN u32 umin(u32 a, u32 b) { return a < b ? a : b; }\n"
	const helpers = "FN void put(DEV f32* p, u32 i, f32 v) { p[i] = v; }\nFN f32 get(DEV const f32* p, u32 i) { return p[i]; }\n//@@ body\n"
	for _, c := range []struct {
		name, body string
		want       []string // "buffer w/b/r" lines of each finding
	}{
		{"derived pointer", "    DEV f32* yr = y + 4u; // y → yr (a multi-byte comment)\n    yr[tid] = 1.0f; // a comment: BARRIER_DEV()\n    BARRIER();\n    out[tid] = y[(tid + 1u) % 32u];\n",
			[]string{"y 6/7/8"}},
		{"helper write, helper read", "    put(y, tid, 2.0f);\n    BARRIER();\n    out[tid] = get(y, tid ^ 1u);\n",
			[]string{"y 5/6/7"}},
		{"compound store reads", "    y[tid] = 1.0f;\n    BARRIER();\n    y[tid ^ 1u] += 1.0f;\n", []string{"y 5/6/7"}},
		{"BARRIER_DEV", "    y[tid] = 1.0f;\n    BARRIER_DEV();\n    out[tid] = y[tid ^ 1u];\n", nil},
		{"plain then DEV", "    y[tid] = 1.0f;\n    BARRIER();\n    BARRIER_DEV();\n    out[tid] = y[tid ^ 1u];\n", nil},
		{"read before write", "    const f32 v = y[tid ^ 1u];\n    BARRIER();\n    y[tid] = v;\n", nil},
		{"write only", "    y[tid] = 1.0f;\n    BARRIER();\n    y[tid] = 2.0f;\n", nil},
		{"no barrier", "    y[tid] = 1.0f;\n    out[tid] = y[tid];\n", nil},
		{"exempt", "    y[tid] = 1.0f;\n    BARRIER();\n    out[tid] = y[tid]; // lint: same-thread\n", nil},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			got := lintBarriers("\n"+helpers+c.body, common, []string{"out", "y"})
			var g []string
			for _, f := range got {
				g = append(g, fmt.Sprintf("%s %d/%d/%d", f.Buffer, f.WriteLine, f.BarrierLine, f.ReadLine))
			}
			if strings.Join(g, ";") != strings.Join(c.want, ";") {
				t.Fatalf("findings %q, want %q\n%v", g, c.want, got)
			}
		})
	}
}
