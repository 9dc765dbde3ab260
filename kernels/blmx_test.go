package kernels

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"lithos/formats"
	"lithos/pack/blm"
)

// TestBLMXCopyLayout reads BLMXCopy's output back by the layout its doc comment gives — which
// lane word and bits hold which code, where each block scale is, zeros past N and K — and
// compares every code and scale with the stored rows the BLM bytes were packed from.
func TestBLMXCopyLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	for _, c := range []struct {
		f     formats.Format
		n, k  int64
		lanes int
	}{
		{formats.NVFP4, 37, 1024, 0},
		{formats.NVFP4, 16, 336, 32}, // 6 chunks padded to 8
		{formats.FP8, 21, 1000, 0},
		{formats.FP8, 48, 5120, 0},
	} {
		g, err := blm.NewGeometry(blm.Spec{Format: c.f, N: c.n, K: c.k, Lanes: c.lanes})
		if err != nil {
			t.Fatal(err)
		}
		src := g.NewRows(int(c.n))
		for i := range src.Codes {
			src.Codes[i] = byte(r.IntN(256))
		}
		for i := range src.Scales {
			src.Scales[i] = byte(r.IntN(256))
		}
		packed := make([]byte, g.TotalBytes)
		if err := g.PackRows(packed, src); err != nil {
			t.Fatal(err)
		}
		cp, err := BLMXCopy(g, packed)
		if err != nil {
			t.Fatal(err)
		}
		nch := BLMXChunks(g)
		if int64(len(cp)) != BLMXCopyBytes(g) || BLMXCopyBytes(g) > g.TotalBytes || nch%BLMXGroup != 0 {
			t.Fatalf("%s [%d, %d]: copy of %d bytes (BLMXCopyBytes %d, packed %d), %d chunks", c.f, c.n, c.k, len(cp), BLMXCopyBytes(g), g.TotalBytes, nch)
		}
		crb, groups := g.CodeRowBytes(), g.ScaleRowBytes()
		code := func(row, col int64) byte {
			if row >= c.n || col >= c.k {
				return 0
			}
			if c.f == formats.NVFP4 {
				return src.Codes[row*crb+col/2] >> (4 * (col % 2)) & 15
			}
			return src.Codes[row*crb+col]
		}
		ks, cb := int64(4), int64(576)
		if c.f == formats.FP8 {
			ks, cb = 2, 512
		}
		for b := int64(0); b < g.Blocks; b++ {
			for ch := int64(0); ch < nch; ch++ {
				base := (b*nch + ch) * cb
				for lane := int64(0); lane < 32; lane++ {
					gg, q := lane/4, lane%4
					for j := int64(0); j < ks; j++ {
						col := 16*(ks*ch+j) + 4*q
						var got, want [8]byte
						for i := 0; i < 4; i++ {
							if c.f == formats.NVFP4 {
								// Byte i: (g+8, 4q), (g, 4q), (g+8, 4q+1), (g, 4q+1) — P_i with its
								// magnitude at bits 1–3 and sign at bit 7; Q_i at +2, bits 4–6 and 0.
								rr := 16*b + gg + 8*int64(1-i%2)
								v := cp[base+lane*16+4*j+int64(i)]
								got[i] = (v>>1)&7 | (v>>4)&8
								got[4+i] = (v>>4)&7 | (v&1)<<3
								want[i] = code(rr, col+int64(i/2))
								want[4+i] = code(rr, col+2+int64(i/2))
							} else {
								// Word 2j: (g+8, 4q), (g, 4q), (g+8, 4q+1), (g, 4q+1); word 2j+1 at +2.
								rr := 16*b + gg + 8*int64(1-i%2)
								got[i] = cp[base+lane*16+8*j+int64(i)]
								got[4+i] = cp[base+lane*16+8*j+4+int64(i)]
								want[i] = code(rr, col+int64(i/2))
								want[4+i] = code(rr, col+2+int64(i/2))
							}
						}
						if got != want {
							t.Fatalf("%s [%d, %d]: block %d chunk %d lane %d k-step %d: codes %v, want %v", c.f, c.n, c.k, b, ch, lane, j, got, want)
						}
					}
				}
				if c.f != formats.NVFP4 {
					continue
				}
				for gg := int64(0); gg < 8; gg++ {
					for j := int64(0); j < 4; j++ {
						for h := int64(0); h < 2; h++ {
							row, grp := 16*b+gg+8*h, 4*ch+j
							var want byte
							if row < c.n && grp < groups {
								want = src.Scales[row*groups+grp]
							}
							if got := cp[base+512+8*gg+2*j+h]; got != want {
								t.Fatalf("nvfp4 [%d, %d]: block %d chunk %d: scale of row %d group %d = %#x, want %#x", c.n, c.k, b, ch, row, grp, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// TestBLMXCopyRefusals: formats without a kernel, a wrong buffer size, BLM padding that is not
// zero (named by block), a copy that would not fit the BLM bytes.
func TestBLMXCopyRefusals(t *testing.T) {
	bf, _ := blm.NewGeometry(blm.Spec{Format: formats.BF16, N: 16, K: 64})
	nv, _ := blm.NewGeometry(blm.Spec{Format: formats.NVFP4, N: 32, K: 1024, Lanes: 32})
	small, _ := blm.NewGeometry(blm.Spec{Format: formats.NVFP4, N: 16, K: 336})
	bad := make([]byte, nv.TotalBytes)
	bad[nv.BlockBytes+512+15] = 1 // byte 31 of block 1's first unit (its second word): padding
	for _, c := range []struct {
		name string
		g    blm.Geometry
		b    []byte
		want string
	}{
		{"bf16", bf, make([]byte, bf.TotalBytes), "no MMA-layout kernel for the format"},
		{"size", nv, make([]byte, nv.TotalBytes-1), "packed bytes, want"},
		{"padding", nv, bad, "block 1"},
		{"larger", small, make([]byte, small.TotalBytes), "is larger than the"},
	} {
		if _, err := BLMXCopy(c.g, c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestBLMXSplit27B: the split NewBLMXParams chooses for the 27B's matrices on an H200 (132
// multiprocessors, clusters of 8) fits, covers every chunk, is the same for 1, 8 and 16 rows in
// one tile per threadgroup (OneTile), and is the measured one (blmxOrder, docs/performance.md §8.10): NVFP4 in clusters of 2, down
// (whose activations need K in at least 4 parts) 4, FP8 4; every shape but the LM head, whose
// slots leave no room for a receive area, pushes its partial sums (Push). ClusterFirst 2 gives
// the earlier sessions' splits (2 wherever it fits), 8 clusters of 8 where they fit. 9 and 16
// rows take two tiles per threadgroup where a split fits twice the memory (every shape but the
// LM head), each with the split TestBLMXSplit27B's table names (docs/performance.md §3.3z).
func TestBLMXSplit27B(t *testing.T) {
	h200 := BLMXDevice{SMs: 132, MaxCluster: 8}
	for _, c := range []struct {
		name string
		f    formats.Format
		n, k int64
		epi  uint32
		cl   uint32
		push uint32
		cl2  uint32 // with ClusterFirst 2
		cl8  uint32 // with ClusterFirst 8 (K in 8 parts of whole groups does not fit K = 5120 of NVFP4)
		// Two tiles per threadgroup (9–16 rows): clusters and Push; cl2t 0: no two-tile split
		// fits (the LM head's slots), so 9–16 rows take one tile per threadgroup, as 1–8.
		cl2t, push2t uint32
	}{
		{"gate_up", formats.NVFP4, 34816, 5120, EpiSwiGLU, 2, 1, 2, 2, 2, 0},
		{"down", formats.NVFP4, 5120, 17408, EpiStore, 4, 1, 4, 8, 8, 1},
		{"lm_head", formats.NVFP4, 248320, 5120, EpiStore, 2, 0, 2, 2, 0, 0},
		{"gdn in_proj_qkvz", formats.FP8, 16384, 5120, EpiStore, 4, 1, 2, 8, 4, 1},
		{"attention qkv", formats.FP8, 14336, 5120, EpiStore, 4, 1, 2, 8, 4, 1},
		{"out_proj / o_proj", formats.FP8, 5120, 6144, EpiAdd, 4, 1, 2, 8, 4, 1},
	} {
		g, err := blm.NewGeometry(blm.Spec{Format: c.f, N: c.n, K: c.k})
		if err != nil {
			t.Fatal(err)
		}
		if BLMXCopyBytes(g) > g.TotalBytes {
			t.Fatalf("%s: the copy (%d bytes) is larger than the BLM bytes (%d)", c.name, BLMXCopyBytes(g), g.TotalBytes)
		}
		var first BLMXParams
		oneTile := h200
		oneTile.OneTile = true
		for _, r := range []struct {
			rows int
			d    BLMXDevice
		}{{1, h200}, {8, h200}, {16, oneTile}, {9, h200}, {16, h200}} {
			rows := r.rows
			p, err := NewBLMXParams(g, rows, c.epi, r.d)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Validate(); err != nil {
				t.Fatalf("%s, %d rows: %v", c.name, rows, err)
			}
			sh, _ := blmxShape(p.Format, p.Blocks, p.Chunks, p.PartChunks, p.Cl, p.Groups, p.Tiles)
			if rows > 8 && !r.d.OneTile && c.cl2t > 0 {
				// Two tiles per threadgroup: a split of its own (its threadgroup memory twice
				// one tile's for the same part), within BLMXShared.
				if p.Tiles != 2 || p.Cl != c.cl2t || p.Push != c.push2t || sh.shared+int64(p.Push)*sh.recv > BLMXShared {
					t.Fatalf("%s, %d rows: %d tiles, clusters of %d, Push %d (%d + %d bytes), want 2 tiles, clusters of %d, Push %d", c.name, rows, p.Tiles, p.Cl, p.Push, sh.shared, sh.recv, c.cl2t, c.push2t)
				}
				if g := p.Grid(); g[1] != 1 {
					t.Fatalf("%s, %d rows in two tiles: grid %v, want one threadgroup per K part and cluster", c.name, rows, g)
				}
				t.Logf("%-18s two tiles: clusters of %d × %3d, K part %3d chunks, %2d slots, %6d bytes of threadgroup memory, Push %d (receive area %d bytes)",
					c.name, p.Cl, p.Groups, p.PartChunks, p.Slots, sh.shared, p.Push, sh.recv)
				continue
			}
			if p.Tiles != 1 || p.Cl != c.cl || p.Push != c.push {
				t.Fatalf("%s, %d rows: %d tiles, clusters of %d, Push %d, want 1, %d, %d", c.name, rows, p.Tiles, p.Cl, p.Push, c.cl, c.push)
			}
			if rows == 1 {
				first = p
				t.Logf("%-18s clusters of %d × %3d (%3d multiprocessors), K part %3d chunks, %3d items per simdgroup, %2d slots, %6d bytes of threadgroup memory, Push %d (receive area %d bytes)",
					c.name, p.Cl, p.Groups, p.Cl*p.Groups, p.PartChunks, sh.itemsPerSG, p.Slots, sh.shared, p.Push, sh.recv)
				continue
			}
			if p.Cl != first.Cl || p.Groups != first.Groups || p.PartChunks != first.PartChunks || p.Slots != first.Slots || p.Push != first.Push {
				t.Fatalf("%s: %d rows split %+v, 1 row %+v", c.name, rows, p, first)
			}
		}
		for _, f := range []struct{ first, want uint32 }{{2, c.cl2}, {8, c.cl8}} {
			d := h200
			d.ClusterFirst = int(f.first)
			p, err := NewBLMXParams(g, 8, c.epi, d)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Validate(); err != nil || p.Cl != f.want {
				t.Fatalf("%s with clusters of %d first: clusters of %d (%v), want %d", c.name, f.first, p.Cl, err, f.want)
			}
		}
	}
	g, _ := blm.NewGeometry(blm.Spec{Format: formats.NVFP4, N: 5120, K: 17408})
	if _, err := NewBLMXParams(g, 8, EpiStore, BLMXDevice{SMs: 132, MaxCluster: 1}); err == nil || !strings.Contains(err.Error(), "no work split fits") {
		t.Fatalf("down without clusters: %v, want no split that fits", err)
	}
}

// TestBLMXParamsValidate: each rule of BLMXParams.Validate with a record that breaks it.
func TestBLMXParamsValidate(t *testing.T) {
	g, _ := blm.NewGeometry(blm.Spec{Format: formats.NVFP4, N: 640, K: 5120})
	ok, err := NewBLMXParams(g, 8, EpiStore, BLMXDevice{SMs: 16, MaxCluster: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok.Cl < 2 || ok.Push != 1 {
		t.Fatalf("the base record: clusters of %d, Push %d, want a cluster that pushes", ok.Cl, ok.Push)
	}
	mut := func(f func(p *BLMXParams)) BLMXParams { p := ok; f(&p); return p }
	for _, c := range []struct {
		name string
		p    BLMXParams
		want string
	}{
		{"rows 0", mut(func(p *BLMXParams) { p.Rows = 0 }), "BLMXParams.Rows: is 0"},
		{"rows 17", mut(func(p *BLMXParams) { p.Rows = 17 }), "BLMXParams.Rows: is 17"},
		{"tiles 0", mut(func(p *BLMXParams) { p.Tiles = 0 }), "BLMXParams.Tiles: is 0"},
		{"tiles 3", mut(func(p *BLMXParams) { p.Tiles = 3 }), "BLMXParams.Tiles: is 3"},
		{"two tiles' memory", mut(func(p *BLMXParams) { p.Tiles, p.Push = 2, 0; p.Slots = (BLMXShared/2-p.PartChunks*64*32)/(16*512) + 1 }), "more than BLMXShared"},
		{"format", mut(func(p *BLMXParams) { p.Format = 3 }), "BLMXParams.Format: is 3"},
		{"blocks", mut(func(p *BLMXParams) { p.Blocks++ }), "BLMXParams.Blocks"},
		{"chunks", mut(func(p *BLMXParams) { p.Chunks += 4 }), "BLMXParams.Chunks"},
		{"part not a step", mut(func(p *BLMXParams) { p.PartChunks++ }), "a multiple of BLMXGroup"},
		{"empty part", mut(func(p *BLMXParams) { p.PartChunks = p.Chunks }), "every part of the"},
		{"cluster 9", mut(func(p *BLMXParams) { p.Cl = 9 }), "BLMXParams.Cl: is 9"},
		{"groups", mut(func(p *BLMXParams) { p.Groups = p.Blocks + 1 }), "BLMXParams.Groups"},
		{"slots", mut(func(p *BLMXParams) { p.Slots = 0 }), "BLMXParams.Slots: is 0"},
		{"shared", mut(func(p *BLMXParams) { p.Slots = 64 }), "more than BLMXShared"},
		{"epilogue", mut(func(p *BLMXParams) { p.Epilogue = 3 }), "BLMXParams.Epilogue"},
		{"ldy", mut(func(p *BLMXParams) { p.LdY = 10 }), "BLMXParams.LdY"},
		{"done word", mut(func(p *BLMXParams) { p.DoneWord = NoWord - 1 }), "BLMXParams.DoneWord"},
		{"norm 2", mut(func(p *BLMXParams) { p.Norm, p.Eps = 2, 1e-6 }), "BLMXParams.Norm: is 2"},
		{"norm without eps", mut(func(p *BLMXParams) { p.Norm = 1 }), "BLMXParams.Eps: is 0"},
		{"norm eps NaN", mut(func(p *BLMXParams) { p.Norm, p.Eps = 1, float32(math.NaN()) }), "BLMXParams.Eps: is NaN"},
		{"eps without norm", mut(func(p *BLMXParams) { p.Eps = 1e-6 }), "BLMXParams.Eps: is 1e-06 without Norm"},
		{"push 2", mut(func(p *BLMXParams) { p.Push = 2 }), "BLMXParams.Push: is 2"},
		{"push without a cluster", mut(func(p *BLMXParams) { p.Cl, p.PartChunks, p.Push = 1, p.Chunks, 1 }), "BLMXParams.Push: is 1 with Cl 1"},
		{"push without room", mut(func(p *BLMXParams) { p.Slots = (BLMXShared - p.PartChunks*64*32) / (16 * 512) }), "BLMXParams.Push: needs"},
	} {
		if err := c.p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
