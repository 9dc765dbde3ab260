package metal

import (
	"strings"
	"testing"
	"time"

	"lithos/kernels"
)

// TestArgAlign: every argument of every kernel has an alignment (a new element type fails
// here), ctl 4, the record RecordAlign, BLM weights 16 (uint4 loads), the rest their element.
func TestArgAlign(t *testing.T) {
	for _, k := range kernels.Kernels() {
		for i := 0; i < 2+len(k.Buffers); i++ {
			a, err := ArgAlign(k, i)
			if err != nil {
				t.Fatal(err)
			}
			want := map[int]int{0: 4, 1: RecordAlign}[i]
			if i >= 2 {
				want = elemBytes[k.Buffers[i-2].Elem]
				if k.Op == "blm" && k.Buffers[i-2].Name == "w" {
					want = 16
				}
			}
			if a != want {
				t.Errorf("%s argument %d (%s): align %d, want %d", k.Name, i, argName(k, i), a, want)
			}
		}
		if _, err := ArgAlign(k, 2+len(k.Buffers)); err == nil {
			t.Errorf("%s: argument past the end accepted", k.Name)
		}
	}
	bad := kernels.Kernel{Name: "x", Buffers: []kernels.Buffer{{Name: "h", Elem: "f16"}}}
	if _, err := ArgAlign(bad, 2); err == nil || !strings.Contains(err.Error(), `"f16"`) {
		t.Fatalf("unknown element type: %v", err)
	}
}

// TestVectorLoadsListed: a kernel whose generated MSL loads uint4 vectors has its op in
// vectorLoads (with buffers that exist), so Dispatch checks 16-byte offsets for it. The CUDA-only
// kernels (MMAOnly) are never dispatched on Metal (kernelPipe does not know them).
func TestVectorLoadsListed(t *testing.T) {
	src := kernels.Source(kernels.Metal)
	sections := strings.Split(src, "\n// ---- ")
	found := map[string]bool{}
	for _, k := range kernels.Kernels() {
		if k.MMAOnly {
			if _, _, ok := kernelPipe(k.Name); ok {
				t.Errorf("%s (MMAOnly) is a Metal pipeline", k.Name)
			}
			continue
		}
		var body string
		for _, s := range sections {
			if strings.HasPrefix(s, k.Name+" ") {
				body = s
			}
		}
		if body == "" {
			t.Fatalf("no section for %s in the generated source", k.Name)
		}
		if strings.Contains(body, "uint4*") {
			found[k.Op] = true
			if len(vectorLoads[k.Op]) == 0 {
				t.Errorf("%s loads uint4 but op %s is not in vectorLoads", k.Name, k.Op)
			}
		}
		for name := range vectorLoads[k.Op] {
			ok := false
			for _, b := range k.Buffers {
				ok = ok || b.Name == name
			}
			if !ok {
				t.Errorf("vectorLoads[%s] names buffer %s, which %s does not have", k.Op, name, k.Name)
			}
		}
	}
	for op := range vectorLoads {
		if !found[op] {
			t.Errorf("vectorLoads lists op %s, whose kernels load no uint4", op)
		}
	}
}

// TestCheckDispatch: each rule of checkDispatch, on lithos_blm_nvfp4_r1 (ctl, params, w, scales,
// x, y) with fake buffers; errors name the kernel and the argument.
func TestCheckDispatch(t *testing.T) {
	k, ok := kernels.Lookup("lithos_blm_nvfp4_r1")
	if !ok {
		t.Fatal("no lithos_blm_nvfp4_r1")
	}
	d, other := &Device{}, &Device{}
	buf := func(n int) *Buffer { return &Buffer{id: 1, dev: d, Len: n} }
	rec := len(kernels.Record(k.Params))
	good := func() []Arg {
		return []Arg{{buf(256), 0}, {buf(1024), 512}, {buf(4096), 32}, {buf(64), 4}, {buf(64), 0}, {buf(64), 60}}
	}
	grid := [3]uint32{4, 1, 1}
	if err := checkDispatch(d, k, grid, time.Second, good()); err != nil {
		t.Fatalf("valid dispatch refused: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(a []Arg) ([]Arg, [3]uint32, time.Duration)
		want string
	}{
		{"nil buffer", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { a[4].Buf = nil; return a, grid, time.Second }, "argument 4 (x): nil buffer"},
		{"released", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { a[3].Buf.id = 0; return a, grid, time.Second }, "argument 3 (scales): the buffer was released"},
		{"other device", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { a[5].Buf.dev = other; return a, grid, time.Second }, "argument 5 (y): the buffer belongs to another device"},
		{"offset at end", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { a[5].Off = 64; return a, grid, time.Second }, "argument 5 (y): offset 64 bytes outside the 64-byte buffer"},
		{"negative offset", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { a[0].Off = -4; return a, grid, time.Second }, "argument 0 (ctl): offset -4 bytes outside"},
		{"w not 16-aligned", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { a[2].Off = 8; return a, grid, time.Second }, "argument 2 (w): offset 8 bytes is not a multiple of 16"},
		{"f32 not 4-aligned", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { a[4].Off = 2; return a, grid, time.Second }, "argument 4 (x): offset 2 bytes is not a multiple of 4"},
		{"record not 256-aligned", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { a[1].Off = 16; return a, grid, time.Second }, "argument 1 (params): offset 16 bytes is not a multiple of 256"},
		{"record truncated", func(a []Arg) ([]Arg, [3]uint32, time.Duration) {
			a[1].Buf.Len = 512 + rec - 4
			return a, grid, time.Second
		}, "want at least"},
		{"too few args", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { return a[:5], grid, time.Second }, "takes 6 arguments (ctl, params, w, scales, x, y), got 5"},
		{"empty grid", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { return a, [3]uint32{4, 0, 1}, time.Second }, "has an empty dimension"},
		{"no timeout", func(a []Arg) ([]Arg, [3]uint32, time.Duration) { return a, grid, 0 }, "timeout 0s: want > 0"},
	} {
		a, g, to := c.edit(good())
		err := checkDispatch(d, k, g, to, a)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), k.Name) {
			t.Errorf("%s: error %v, want one naming %s and containing %q", c.name, err, k.Name, c.want)
		}
	}
}
