package kernels

import (
	"fmt"
	"strings"
	"testing"
)

// aliasable lists, per kernel, the buffers a host binds to another argument of the same launch
// or to ctl, as documented in .notes/kernels.md and the record doc comments: RMSNorm y may be x
// and z is a dummy bound to x (runtime/backend/gpu rmsEps), Ewise y may be a or b, gather ids
// may be ctl, argmax_final's and sample's out may be ctl (TestFiberMarkovChain binds out to
// ctl). None of them may be __restrict__ in the CUDA source (review item 8).
var aliasable = map[string][]string{
	"lithos_rmsnorm":      {"x", "z", "y"},
	"lithos_ewise":        {"a", "b", "y"},
	"lithos_gather":       {"ids"},
	"lithos_argmax_final": {"out"},
	"lithos_sample":       {"out"},
	"lithos_attn_merge":   {"gate"}, // Gate 0: any buffer, out included (the drafter's launches)
}

// cudaSignature returns the parameter declarations of kernel name's entry point in src.
func cudaSignature(t *testing.T, src string, k Kernel) []string {
	t.Helper()
	head := fmt.Sprintf("extern \"C\" __global__ void __launch_bounds__(%d) %s(\n", k.Threads, k.Name)
	i := strings.Index(src, head)
	if i < 0 {
		t.Fatalf("%s: entry point not found in Source(CUDA)", k.Name)
	}
	rest := src[i+len(head):]
	j := strings.Index(rest, ")\n{")
	if j < 0 {
		t.Fatalf("%s: unterminated signature", k.Name)
	}
	params := strings.Split(rest[:j], ",\n")
	if len(params) != 2+len(k.Buffers) {
		t.Fatalf("%s: %d parameters in the source, want 2 + %d buffers: %q", k.Name, len(params), len(k.Buffers), params)
	}
	return params
}

// TestCUDARestrict checks that ctl is never __restrict__, that a buffer is __restrict__ exactly
// when the registry marks it NoAlias, that the documented aliasable buffers are not, and that
// only read-only buffers are marked (the registry's conservative rule).
func TestCUDARestrict(t *testing.T) {
	src := Source(CUDA)
	restricted := 0
	for _, k := range Kernels() {
		params := cudaSignature(t, src, k)
		ctl := strings.TrimSpace(params[0])
		if !strings.HasSuffix(ctl, " ctl") || strings.Contains(ctl, "__restrict__") {
			t.Errorf("%s: ctl declared %q: want no __restrict__ (buffers may alias ctl)", k.Name, ctl)
		}
		if !strings.Contains(params[1], "__restrict__ prm") {
			t.Errorf("%s: prm declared %q: want const __restrict__", k.Name, params[1])
		}
		for i, b := range k.Buffers {
			decl := strings.TrimSpace(params[2+i])
			if !strings.HasSuffix(decl, " "+b.Name) {
				t.Fatalf("%s: parameter %d is %q, want buffer %s", k.Name, 2+i, decl, b.Name)
			}
			has := strings.Contains(decl, "__restrict__")
			if has != b.NoAlias {
				t.Errorf("%s: buffer %s declared %q with NoAlias %v", k.Name, b.Name, decl, b.NoAlias)
			}
			if has {
				restricted++
			}
			if b.NoAlias && b.Write {
				t.Errorf("%s: buffer %s is written and NoAlias: only read-only weight tables may be restrict", k.Name, b.Name)
			}
		}
	}
	// The weight tables are restrict: rmsnorm w, the BLM variants of both layouts × (w, scales),
	// the four MMA-layout kernels' (two formats, one and two tiles) w and scales, conv w and its in_proj_ab's aw, anw, ars, gather
	// table, rope_scaled inv_freq, attn_prep's qw, kw and inv_freq (both its cache types).
	if want := 1 + 2*len(blmFormats)*len(BLMRowVariants)*2 + 2*2*BLMXMaxTiles + 4 + 1 + 1 + 2*3; restricted != want {
		t.Errorf("%d restrict buffers in Source(CUDA), want %d (the weight tables)", restricted, want)
	}
	for name, bufs := range aliasable {
		k, ok := Lookup(name)
		if !ok {
			t.Fatalf("kernel %s not registered", name)
		}
		params := cudaSignature(t, src, k)
		for _, bn := range bufs {
			found := false
			for i, b := range k.Buffers {
				if b.Name != bn {
					continue
				}
				found = true
				if b.NoAlias || strings.Contains(params[2+i], "__restrict__") {
					t.Errorf("%s: aliasable buffer %s declared %q (NoAlias %v): want no __restrict__", name, bn, params[2+i], b.NoAlias)
				}
			}
			if !found {
				t.Errorf("%s: no buffer %s", name, bn)
			}
		}
	}
}

// TestGridMatchesThreads checks, for every kernel that gives one thread per element
// (the template indexes tg.x·THREADS + tid or tg.y·THREADS + tid), that the record's Grid covers
// n elements with ⌈n / Kernel.Threads⌉ threadgroups, so Grid and the registry's Threads agree
// (review item 15).
func TestGridMatchesThreads(t *testing.T) {
	cases := []struct {
		kernel string
		index  string                   // the template's element index expression
		grid   func(n uint32) [3]uint32 // the record's Grid for n elements
		axis   int
		lanes  uint32 // threads per element (GDN: gdnLanesPerColumn lanes per state column); 0 means 1
	}{
		{"lithos_ewise", "tg.x * THREADS + tid", func(n uint32) [3]uint32 { return EwiseParams{N: n, Rows: 3}.Grid() }, 0, 0},
		{"lithos_gdn", "jl = sg * (32u / GDN_LANES) + lane / GDN_LANES;\n    const u32 j = tg.y * GDN_CW + jl;", func(n uint32) [3]uint32 { return GDNParams{VHeads: 3, VDim: n}.Grid() }, 1, gdnLanesPerColumn},
		{"lithos_conv", "tg.x * THREADS + tid", func(n uint32) [3]uint32 { return ConvParams{Channels: n}.Grid() }, 0, 0},
		{"lithos_kv_append", "tg.x * THREADS + tid", func(n uint32) [3]uint32 { return KVAppendParams{Width: n, Rows: 3}.Grid() }, 0, 0},
		{"lithos_gather", "tg.x * THREADS + tid", func(n uint32) [3]uint32 { return GatherParams{Width: n, Rows: 3}.Grid() }, 0, 0},
		{"lithos_copy", "tg.x * THREADS + tid", func(n uint32) [3]uint32 { return CopyParams{N: n, Rows: 3}.Grid() }, 0, 0},
	}
	for _, c := range cases {
		k, ok := Lookup(c.kernel)
		if !ok {
			t.Fatalf("kernel %s not registered", c.kernel)
		}
		if _, body := splitTemplate(k.Op); !strings.Contains(body, c.index) {
			t.Errorf("%s: ops/%s.kern no longer indexes %q; update this test", c.kernel, k.Op, c.index)
		}
		th := uint32(k.Threads) / max(c.lanes, 1)
		for _, n := range []uint32{1, th - 1, th, th + 1, 3 * th, 3*th + 1} {
			want := (n + th - 1) / th
			g := c.grid(n)
			if g[c.axis] != want {
				t.Errorf("%s: Grid for %d elements has %d threadgroups on axis %d, want ⌈%d/%d⌉ = %d (Kernel.Threads)",
					c.kernel, n, g[c.axis], c.axis, n, th, want)
			}
		}
	}
}
