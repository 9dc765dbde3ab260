package kernels

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"lithos/formats"
)

// The BLM kernels' tensor-core path (ops/blm.kern, BLM_MMA: what NVRTC compiles for the GPU)
// run in the fiber runtime: the Metal source built with LITHOS_BLM_MMA, where prelude/metal.h
// emulates the PTX m16n8k16 bf16 MMA with simdgroup shuffles in the PTX fragment layout. The
// data flow of the GPU kernel — which lane loads which unit word, the K-slot permutation, the
// exact bf16 split of the activations, the block-scale decode, the K parts and the epilogue —
// is checked here against the CPU backend; the hardware MMA itself only on the GPU
// (runtime/backend/cuda TestOpBLM, TestBLMParts).

var (
	mmaMu   sync.Mutex
	mmaExes = map[string]*fiberProgram{} // by the defines, one per line
)

// mmaFiberExe returns the fiber executable of the tensor-core variant (built once, in the
// directory of the main fiber build, which TestMain removes).
func mmaFiberExe(t testing.TB) string {
	t.Helper()
	return mmaFiberExeDefines(t)
}

// mmaFiberExeDefines returns the fiber executable of the tensor-core variant (the BLM and
// MMA-layout kernels, and lithos_conv, whose CONV_AB_QUADS is overridable) with the
// compile-time constants of Overridable set by defines ("NAME VALUE", e.g. "BLMX_RX 0u"; none:
// the default build), built once per defines in the main fiber build's directory: the
// constants' other values, which the default build does not reach, under the same tests.
func mmaFiberExeDefines(t testing.TB, defines ...string) string {
	t.Helper()
	generatedFiber(t)
	var pre strings.Builder
	pre.WriteString("#define LITHOS_BLM_MMA 1\n")
	for _, d := range defines {
		name, _, _ := strings.Cut(d, " ")
		if !slices.Contains(Overridable, name) {
			t.Fatalf("define %q: %s is not in Overridable", d, name)
		}
		pre.WriteString("#define " + d + "\n")
	}
	key := strings.Join(defines, "\n")
	mmaMu.Lock()
	defer mmaMu.Unlock()
	if fp, ok := mmaExes[key]; ok {
		if fp.err != nil {
			t.Fatalf("build the tensor-core fiber variant %q: %v", key, fp.err)
		}
		return fp.exe
	}
	// Cached before the build, with an error until it succeeds: a build that stops the test
	// (t.Fatal, t.Skip inside it) leaves no entry that looks built.
	fp := &fiberProgram{err: errors.New("the build did not finish")}
	mmaExes[key] = fp
	dir, err := os.MkdirTemp(fiberDir, "mma-")
	if err != nil {
		fp.err = err
		t.Fatal(err)
	}
	calls := map[string]string{}
	var order []string
	for _, k := range Kernels() {
		if k.Op != "blm" && k.Op != "blmx" && k.Op != "conv" {
			continue
		}
		calls[k.Name] = fiberCall(k)
		order = append(order, k.Name)
	}
	fp.exe, fp.err = buildFiber(t, dir, "lithos_mma", pre.String()+Source(Metal), calls, order)
	if fp.err != nil {
		t.Fatalf("build the tensor-core fiber variant %q: %v", key, fp.err)
	}
	return fp.exe
}

// runBLM runs one BLM launch with record p on exe and returns y (rows × outN, poisoned before).
func runBLM(t *testing.T, exe string, kern string, p BLMParams, c blmCase, x []float32, rows, outN int, y0 []float32) []float32 {
	t.Helper()
	var j job
	var y int
	if y0 != nil {
		y = j.f32(y0)
	} else {
		y = j.poison(rows * outN)
	}
	j.launch(t, kern, p.Grid(), j.buf(zeroCtl), j.buf(Record(p)), j.buf(c.packed), j.f32(c.scales), j.f32(x), y)
	r, err := j.runSchedules(t, exe)
	if err != nil {
		t.Fatalf("fiber run: %v", err)
	}
	return bytesF32(r[y])
}

func TestFiberBLMTensorCorePath(t *testing.T) {
	exe := mmaFiberExe(t)
	r := rand.New(rand.NewPCG(21, 22))
	type shape struct {
		f     formats.Format
		n, k  int64
		lanes int
	}
	shapes := []shape{
		{formats.NVFP4, 40, 1024, 32}, // aligned groups, N not a multiple of 16
		{formats.NVFP4, 24, 256, 0},   // L = 2 (folded rows, 16 rows per step): the Markov W2 shape
		{formats.NVFP4, 20, 48, 0},    // stripes starting inside groups (per-code scale slots)
		{formats.NVFP4, 17, 544, 8},   // W = 68, L = 8
		{formats.NVFP4, 32, 5120, 0},  // the 27B's K: 5 payload words + a scale word per unit
		{formats.FP8, 33, 1000, 32},   // K not a multiple of 512: padding columns
		{formats.FP8, 16, 256, 0},     // L = 16
		{formats.BF16, 19, 264, 32},   // W = 9: odd stripes
		{formats.BF16, 16, 64, 4},
	}
	for _, sh := range shapes {
		c := newBLMCase(t, r, sh.f, sh.n, sh.k, sh.lanes, false)
		// (rows, parts, blocks per simdgroup): each K split, both block counts and each row
		// count on every shape; the 27B's K once.
		// The 16-row kernel (two n-tiles) at 16 rows and at 11 (tokens 11–15 of the second
		// tile unused).
		cases := [][3]int{{1, 4, 1}, {3, 1, 2}, {8, 2, 2}, {8, 4, 1}, {16, 4, 2}, {11, 2, 1}}
		if sh.k > 1024 {
			cases = [][3]int{{8, 1, 2}, {16, 4, 2}}
		}
		for _, rp := range cases {
			{
				rows, parts, wb := rp[0], uint32(rp[1]), uint32(rp[2])
				name := fmt.Sprintf("%s_%dx%d_L%d_rows%d_parts%d_wb%d", sh.f, sh.n, sh.k, c.g.Lanes, rows, parts, wb)
				t.Run(name, func(t *testing.T) {
					k, n := int(sh.k), int(sh.n)
					x := randVec(r, rows*k, 1)
					m, err := c.ref.All()
					if err != nil {
						t.Fatal(err)
					}
					want := make([]float32, rows*n)
					if err := m.Mul(want, x, rows); err != nil {
						t.Fatal(err)
					}
					bound := c.bound(x, rows)
					kern, err := BLMKernel(sh.f, rows)
					if err != nil {
						t.Fatal(err)
					}
					p, err := NewBLMParams(c.g, rows, EpiStore)
					if err != nil {
						t.Fatal(err)
					}
					p.Parts, p.WarpBlocks = parts, wb
					got := runBLM(t, exe, kern, p, c, x, rows, n, nil)
					// The fragment-major copy (BLMFragmentMajor, in a buffer of the BLM bytes'
					// size as the runtime would keep it): the same MMAs in the same order, so
					// the same results bit for bit.
					if fm, err := BLMFragmentMajor(c.g, c.packed); err == nil {
						cf := c
						cf.packed = append(fm, make([]byte, len(c.packed)-len(fm))...)
						pf := p
						pf.Layout = BLMLayoutFragment
						if err := pf.Validate(); err != nil {
							t.Fatal(err)
						}
						kf, err := BLMKernelLayout(sh.f, rows, BLMLayoutFragment)
						if err != nil {
							t.Fatal(err)
						}
						gotF := runBLM(t, exe, kf, pf, cf, x, rows, n, nil)
						for i := range got {
							if math.Float32bits(gotF[i]) != math.Float32bits(got[i]) {
								t.Fatalf("fragment-major copy: y[%d, %d] = %g, the BLM layout gave %g", i/n, i%n, gotF[i], got[i])
							}
						}
					} else if sh.f != formats.NVFP4 || c.g.GroupSize == 16 && c.g.Stripe%16 == 0 {
						t.Fatalf("no fragment-major copy: %v", err)
					}
					worst := 0.0
					for i := range want {
						d := math.Abs(float64(got[i]) - float64(want[i]))
						if math.IsNaN(float64(got[i])) || d > bound[i]+1e-30 {
							t.Fatalf("y[%d, %d] = %g, want %g: |Δ| %.3g > bound %.3g", i/n, i%n, got[i], want[i], d, bound[i])
						}
						worst = max(worst, d/(bound[i]+1e-30))
					}
					t.Logf("worst |Δ| at %.3f of the summation bound", worst)
				})
			}
		}
	}
}

// TestFiberBLMTensorCoreRowsInvariant: on the tensor-core path a row's result does not depend
// on how many rows the launch has or which kernel variant runs it (bit for bit), so a verify
// pass over 8 rows and a plain decode step of 1 row give the same logits for the same input;
// nor on its n-tile: a 16-row launch whose rows 8–15 repeat rows 0–7 gives them the same
// results bit for bit.
func TestFiberBLMTensorCoreRowsInvariant(t *testing.T) {
	exe := mmaFiberExe(t)
	r := rand.New(rand.NewPCG(23, 24))
	for _, f := range []formats.Format{formats.NVFP4, formats.FP8, formats.BF16} {
		c := newBLMCase(t, r, f, 32, 256, 32, false)
		k, n := int(c.g.K), int(c.g.N)
		x := randVec(r, BLMRowVariants[len(BLMRowVariants)-1]*k, 2)
		var first []float32
		for _, v := range BLMRowVariants {
			for _, rows := range []int{1, v} {
				kern, _ := BLMKernel(f, v)
				p, err := NewBLMParams(c.g, rows, EpiStore)
				if err != nil {
					t.Fatal(err)
				}
				got := runBLM(t, exe, kern, p, c, x[:rows*k], rows, n, nil)[:n]
				if first == nil {
					first = got
					continue
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(first[i]) {
						t.Fatalf("%s: variant r%d with %d rows: y[0, %d] = %g, the 1-row launch gave %g", f, v, rows, i, got[i], first[i])
					}
				}
			}
		}
		kern, _ := BLMKernel(f, 16)
		p, err := NewBLMParams(c.g, 16, EpiStore)
		if err != nil {
			t.Fatal(err)
		}
		twice := append(slices.Clone(x[:8*k]), x[:8*k]...)
		got := runBLM(t, exe, kern, p, c, twice, 16, n, nil)
		for i := range 8 * n {
			if math.Float32bits(got[8*n+i]) != math.Float32bits(got[i]) {
				t.Fatalf("%s: r16, rows 8–15 = rows 0–7: y[%d, %d] = %g, y[%d, %d] = %g", f, 8+i/n, i%n, got[8*n+i], i/n, i%n, got[i])
			}
		}
	}
}

// TestFiberBLMTensorCoreEpilogues: the add and SwiGLU epilogues on the tensor-core path, with
// one n-tile (r4, 3 rows) and two (r16, 13 rows: the second tile's partial sums and the
// SwiGLU's up rows i + 8 read from the tile layout).
func TestFiberBLMTensorCoreEpilogues(t *testing.T) {
	exe := mmaFiberExe(t)
	r := rand.New(rand.NewPCG(25, 26))
	c := newBLMCase(t, r, formats.NVFP4, 48, 512, 0, true)
	for _, vr := range [][2]int{{4, 3}, {16, 13}} {
		t.Run(fmt.Sprintf("r%d_rows%d", vr[0], vr[1]), func(t *testing.T) { blmEpilogues(t, exe, r, c, vr[0], vr[1]) })
	}
}

func blmEpilogues(t *testing.T, exe string, r *rand.Rand, c blmCase, variant, rows int) {
	k, n := int(c.g.K), int(c.g.N)
	x := randVec(r, rows*k, 1)
	m, _ := c.ref.All()
	full := make([]float32, rows*n)
	if err := m.Mul(full, x, rows); err != nil {
		t.Fatal(err)
	}
	bound := c.bound(x, rows)
	kern, _ := BLMKernel(formats.NVFP4, variant)
	t.Run("add", func(t *testing.T) {
		res := randVec(r, rows*n, 3)
		p, _ := NewBLMParams(c.g, rows, EpiAdd)
		got := runBLM(t, exe, kern, p, c, x, rows, n, res)
		for i := range full {
			want := res[i] + full[i]
			if d := math.Abs(float64(got[i] - want)); math.IsNaN(float64(got[i])) || d > bound[i]+2e-7*math.Abs(float64(want))+1e-30 {
				t.Fatalf("y[%d] = %g, want %g", i, got[i], want)
			}
		}
	})
	t.Run("swiglu", func(t *testing.T) {
		half := n / 2
		p, _ := NewBLMParams(c.g, rows, EpiSwiGLU)
		checkSwiGLU(t, runBLM(t, exe, kern, p, c, x, rows, half, nil), full, bound, rows, n)
	})
}

// checkSwiGLU checks got [rows, n/2], a SwiGLU epilogue's outputs, against full [rows, n], the
// same product's store outputs (blocks of 8 gate rows then 8 up rows), with bound the store's
// error bounds propagated through silu(gate)·up.
func checkSwiGLU(t *testing.T, got, full []float32, bound []float64, rows, n int) {
	t.Helper()
	half := n / 2
	for tt := range rows {
		for o := range half {
			b, i := o/8, o%8
			g64, u64 := float64(full[tt*n+16*b+i]), float64(full[tt*n+16*b+8+i])
			silu := g64 / (1 + math.Exp(-g64))
			want := silu * u64
			lim := 1.1*math.Abs(u64)*bound[tt*n+16*b+i] + math.Abs(silu)*bound[tt*n+16*b+8+i] + 1e-6*math.Abs(want) + 1e-30
			if d := math.Abs(float64(got[tt*half+o]) - want); math.IsNaN(float64(got[tt*half+o])) || d > lim {
				t.Fatalf("swiglu[%d, %d] = %g, want %g (|Δ| %.3g > %.3g)", tt, o, got[tt*half+o], want, d, lim)
			}
		}
	}
}

// TestFiberBLMLayoutGuard: a kernel given a record whose layout it cannot read — the
// fragment-major kernel on the scalar (Metal) path or for NVFP4 whose stripes start inside a
// group, or a kernel of the other layout than the record's — reports GuardBLMLayout (Error
// word, Done word) and leaves y as it was; BLMFragmentMajor and Validate refuse the NVFP4 case.
func TestFiberBLMLayoutGuard(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	const doneW = 10
	for _, cse := range []struct {
		name           string
		exe            string
		f              formats.Format
		n, k           int64
		aligned        bool
		kernel, record uint32
	}{
		{"scalar path", generatedFiber(t), formats.FP8, 32, 256, true, BLMLayoutFragment, BLMLayoutFragment},
		{"tensor-core, stripes inside groups", mmaFiberExe(t), formats.NVFP4, 20, 48, false, BLMLayoutFragment, BLMLayoutFragment},
		{"BLM kernel, fragment-major record", mmaFiberExe(t), formats.BF16, 32, 256, true, BLMLayoutBLM, BLMLayoutFragment},
		{"fragment-major kernel, BLM record", mmaFiberExe(t), formats.BF16, 32, 256, true, BLMLayoutFragment, BLMLayoutBLM},
	} {
		t.Run(cse.name, func(t *testing.T) {
			c := newBLMCase(t, r, cse.f, cse.n, cse.k, 0, false)
			_, err := BLMFragmentMajor(c.g, c.packed)
			if (err == nil) != cse.aligned {
				t.Fatalf("BLMFragmentMajor: %v", err)
			}
			const rows = 3
			k, n := int(c.g.K), int(c.g.N)
			x := randVec(r, rows*k, 1)
			kern, err := BLMKernelLayout(cse.f, rows, cse.kernel)
			if err != nil {
				t.Fatal(err)
			}
			p, err := NewBLMParams(c.g, rows, EpiStore)
			if err != nil {
				t.Fatal(err)
			}
			p.DoneWord, p.Layout = doneW, cse.record
			if err := p.Validate(); (err == nil) != (cse.aligned || cse.record == BLMLayoutBLM) {
				t.Fatalf("Validate: %v", err)
			}
			var j job
			ctlB := j.buf(make([]byte, 256))
			y := j.buf(canary(4 * rows * n))
			j.launch(t, kern, p.Grid(), ctlB, j.buf(Record(p)), j.buf(c.packed), j.f32(c.scales), j.f32(x), y)
			res, err := j.runSchedules(t, cse.exe)
			if err != nil {
				t.Fatalf("fiber run: %v", err)
			}
			ctl := bytesU32(res[ctlB])
			if ctl[doneW] != 1 || ctl[doneW+1] != GuardBLMLayout {
				t.Fatalf("Done %d, Error %d: want 1, GuardBLMLayout (%d)", ctl[doneW], ctl[doneW+1], GuardBLMLayout)
			}
			if !bytes.Equal(res[y], canary(4*rows*n)) {
				t.Fatalf("y was written")
			}
		})
	}
}

// TestFiberBLMClusters: the BLM kernels' cluster split (BLMParams.Clusters: K also split across
// the threadgroups of a thread-block cluster, their parts added through distributed shared
// memory) in the fiber runtime's clusters, against the CPU backend, every row variant's row 0
// equal to the 1-row launch bit for bit.
func TestFiberBLMClusters(t *testing.T) {
	exe := mmaFiberExe(t)
	r := rand.New(rand.NewPCG(29, 30))
	for _, f := range []formats.Format{formats.NVFP4, formats.FP8, formats.BF16} {
		c := newBLMCase(t, r, f, 48, 2048, 32, false)
		k, n := int(c.g.K), int(c.g.N)
		m, _ := c.ref.All()
		x := randVec(r, 8*k, 1)
		want := make([]float32, 8*n)
		if err := m.Mul(want, x, 8); err != nil {
			t.Fatal(err)
		}
		bound := c.bound(x, 8)
		for _, split := range [][3]uint32{{1, 2, 2}, {2, 2, 4}, {4, 1, 8}} {
			t.Run(fmt.Sprintf("%s/parts%d_wb%d_cl%d", f, split[0], split[1], split[2]), func(t *testing.T) {
				var row0 []float32
				for _, rows := range []int{1, 8} {
					kern, _ := BLMKernel(f, rows)
					p, err := NewBLMParams(c.g, rows, EpiStore)
					if err != nil {
						t.Fatal(err)
					}
					p.Parts, p.WarpBlocks, p.Clusters = split[0], split[1], split[2]
					var j job
					y := j.poison(rows * n)
					j.launchCluster(t, kern, p.Grid(), p.Clusters, j.buf(zeroCtl), j.buf(Record(p)), j.buf(c.packed), j.f32(c.scales), j.f32(x[:rows*k]), y)
					res, err := j.runSchedules(t, exe)
					if err != nil {
						t.Fatalf("fiber run: %v", err)
					}
					got := bytesF32(res[y])
					for i := range got {
						if d := math.Abs(float64(got[i]) - float64(want[i])); math.IsNaN(float64(got[i])) || d > bound[i]+1e-30 {
							t.Fatalf("%d rows: y[%d, %d] = %g, want %g (|Δ| %.3g > %.3g)", rows, i/n, i%n, got[i], want[i], d, bound[i])
						}
					}
					if rows == 1 {
						row0 = got
						continue
					}
					for i := range row0 {
						if math.Float32bits(got[i]) != math.Float32bits(row0[i]) {
							t.Fatalf("row 0 of 8: y[%d] = %g, the 1-row launch gave %g", i, got[i], row0[i])
						}
					}
				}
			})
		}
	}
}
