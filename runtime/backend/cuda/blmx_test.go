//go:build linux && amd64

package cuda

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"lithos/formats"
	"lithos/kernels"
	"lithos/pack/blm"
	"lithos/runtime/model"
)

// The MMA-layout matrix kernels (kernels/ops/blmx.kern, lithos_blmx_*) on the device: against the
// CPU backend at the 27B's widths for every cluster size the device launches, their row
// invariance, and their speed per shape against the read floor (BenchmarkBLMXShapes). They run
// without LITHOS_CUDA_MMA (that switch only puts them in the sessions' programs).

// blmxDevice is the split's description of the test device, as runtimeDevice.MMALayout makes it
// (without the switch).
func blmxDevice(e *opEnv) kernels.BLMXDevice { return mmaDevice(e.d, e.ks, e.clusters()) }

// TestBLMX: every cluster size 1, 2, 4, 8 the device launches (clusters spread over its
// multiprocessors), 1, 3, 8 and 16 rows, against the CPU backend — tolerance TestOpBLM's plus
// 2⁻²¹·|s|·Σ|w·x| for the activations' two f16 pieces — and bit for bit: token t of an 8-row launch
// is the 1-row launch of token t, rows 8–15 of a 16-row launch are the 8-row launch of those rows,
// in one tile per threadgroup and in two (lithos_blmx_*_t2, 11 and 16 rows, in the same split);
// at 8 rows and in two tiles the folded RMSNorm too (Norm 1) against the CPU's RMSNorm then
// product, the two tiles' first 8 rows bit for bit the 8-row launch's; in clusters
// all of it both ways of adding the ranks' sums (Push 1, the split's, and 0, the LM head's).
func TestBLMX(t *testing.T) {
	if emulatorEnabled() && !emulateTensorCore() {
		t.Skip("SKIP: the emulator runs the MMA-layout kernels only in its tensor-core build (LITHOS_CUDA_EMULATE_MMA=1)")
	}
	e := newOpEnv(t, 41)
	if e.d.Info.SharedOptin < kernels.BLMXShared+kernels.BLMXStatic {
		t.Skipf("SKIP: %d bytes of shared memory per block; the MMA-layout kernels need %d", e.d.Info.SharedOptin, kernels.BLMXShared+kernels.BLMXStatic)
	}
	outer := e.t
	defer func() { e.t = outer }()
	dev := blmxDevice(e)
	specs := []blm.Spec{
		{Format: formats.NVFP4, N: 96, K: 5120},
		{Format: formats.NVFP4, N: 64, K: 17408},
		{Format: formats.NVFP4, N: 40, K: 1008}, // 16 chunks (15.75 of columns)
		{Format: formats.FP8, N: 80, K: 6144},
		{Format: formats.FP8, N: 33, K: 1000},
	}
	twoTiles := map[string]int{} // per shape, the two-tile launches checked
	for _, spec := range specs {
		e.t = outer
		m := newBLMMatrix(t, e.r, spec)
		cp, err := kernels.BLMXCopy(m.g, m.packed)
		if err != nil {
			t.Fatal(err)
		}
		bw, bs := e.bytes(cp), e.bytes(m.table)
		n, k := int(m.g.N), int(m.g.K)
		all := make([]int32, n)
		for i := range all {
			all[i] = int32(i)
		}
		x := e.randn(16*k, 1)
		bx := e.f32(x)
		want, tol := m.ref(t, all, x, 16)
		u := 0x1p-24
		gamma := float64(k) * u / (1 - float64(k)*u)
		for i := range tol {
			tol[i] += (tol[i] - 4*u*math.Abs(want[i])) / (2 * gamma) * 0x1p-21
		}
		// RMSNorm(x) of the 16 rows (weights 1 + w, the checkpoint's), its product on the CPU
		// and the bound plus the fold's roundings (x·nw and r·y: 2⁻²² of Σ|W·xn|; r from a
		// float32 Σx²: γ_K/2 relative).
		nw := model.OnePlus(e.randn(k, 0.5))
		xn := make([]float32, 16*k)
		model.RMSNorm(xn, x, nw, 16, 1e-6)
		wantN, tolN := m.ref(t, all, xn, 16)
		for i := range tolN {
			tolN[i] += (tolN[i] - 4*u*math.Abs(wantN[i])) / (2 * gamma) * (0x1p-21 + gamma/2 + 0x1p-22)
		}
		bnw := e.f32(nw)
		name8, _ := kernels.BLMXKernel(m.g.Format)
		for _, cl := range []int{1, 2, 4, 8} {
			if cl > dev.MaxCluster {
				continue
			}
			t.Run(fmt.Sprintf("%s_%dx%d/cl%d", m.g.Format, n, k, cl), func(t *testing.T) {
				e.t = t
				pushes := []uint32{0}
				if cl > 1 {
					pushes = []uint32{1, 0}
				}
				for _, push := range pushes {
					var r1 [][]float32  // token t alone
					var norm8 []float32 // the 8-row launch of RMSNorm(x) in one tile
					for _, rt := range [][2]int{{1, 1}, {3, 1}, {8, 1}, {16, 1}, {16, 2}, {11, 2}} {
						rows, tiles := rt[0], uint32(rt[1])
						d := dev
						d.OneTile = tiles == 1
						rec, err := kernels.NewBLMXParams(m.g, rows, kernels.EpiStore, d)
						if err != nil {
							t.Fatal(err)
						}
						rec.Tiles = tiles // (NewBLMXParams takes one where its own split of two does not fit)
						groups, _ := dev.Groups(cl)
						if !rec.TrySplit(cl, max(groups, 1)) {
							if tiles > 1 {
								t.Logf("clusters of %d, %d rows in two tiles: no split fits (two tiles' threadgroup memory)", cl, rows)
								continue
							}
							t.Logf("clusters of %d: no split fits (a K part without chunks or too much threadgroup memory)", cl)
							return
						}
						name, err := kernels.BLMXKernelTiles(m.g.Format, tiles)
						if err != nil {
							t.Fatal(err)
						}
						if rec.Push != uint32(min(cl-1, 1)) {
							if tiles > 1 && push == 1 {
								t.Logf("clusters of %d, %d rows in two tiles: no room to push", cl, rows)
								continue
							}
							if tiles == 1 {
								t.Fatalf("clusters of %d: Push %d, want the test's shapes to push in clusters", cl, rec.Push)
							}
						}
						rec.Push = push
						if rows == 1 {
							for tt := 0; tt < 16; tt++ {
								by := e.poisoned(n)
								e.run(name, rec, rec.Grid(), bw, bs, e.f32(x[tt*k:(tt+1)*k]), by, bs)
								got := e.read(by, n)
								check(t, fmt.Sprintf("token %d alone", tt), got, f32s(want[tt*n:(tt+1)*n]), func(i int) float64 { return tol[tt*n+i] })
								r1 = append(r1, got)
							}
							continue
						}
						by := e.poisoned(rows * n)
						e.run(name, rec, rec.Grid(), bw, bs, bx, by, bs)
						got := e.read(by, rows*n)
						check(t, fmt.Sprintf("%d rows in %d tiles per threadgroup, Push %d", rows, tiles, push), got, f32s(want[:rows*n]), func(i int) float64 { return tol[i] })
						if rows == 8 || tiles > 1 {
							// The same rows through the folded RMSNorm (Norm 1: the ranks' Σx² added
							// through distributed shared memory) against RMSNorm then the product;
							// in two tiles each tile's Σx² its own, so the first 8 rows bit for bit
							// the 8-row launch's in one tile.
							rn := rec
							rn.Norm, rn.Eps = 1, 1e-6
							byn := e.poisoned(rows * n)
							e.run(name, rn, rn.Grid(), bw, bs, bx, byn, bnw)
							gotN := e.read(byn, rows*n)
							check(t, fmt.Sprintf("%d rows of RMSNorm(x) in %d tiles, Push %d", rows, tiles, push), gotN, f32s(wantN[:rows*n]), func(i int) float64 { return tolN[i] })
							if tiles == 1 {
								norm8 = gotN
							} else {
								for i := range norm8 {
									if math.Float32bits(gotN[i]) != math.Float32bits(norm8[i]) {
										t.Fatalf("Push %d, RMSNorm(x) in %d rows, two tiles: y[%d, %d] = %g, the 8-row launch in one tile gave %g", push, rows, i/n, i%n, gotN[i], norm8[i])
									}
								}
							}
						}
						for tt := 0; tt < rows; tt++ {
							for i := 0; i < n; i++ {
								if math.Float32bits(got[tt*n+i]) != math.Float32bits(r1[tt][i]) {
									t.Fatalf("Push %d, %d rows in %d tiles per threadgroup: y[%d, %d] = %g, the 1-row launch of token %d gave %g", push, rows, tiles, tt, i, got[tt*n+i], tt, r1[tt][i])
								}
							}
						}
						if tiles > 1 {
							twoTiles[fmt.Sprintf("%s %dx%d", m.g.Format, n, k)]++
						}
						if rows == 16 && tiles == 1 {
							// Rows 8–15 as an 8-row launch of their own.
							by8 := e.poisoned(8 * n)
							rec8, _ := kernels.NewBLMXParams(m.g, 8, kernels.EpiStore, dev)
							groups, _ := dev.Groups(cl)
							if !rec8.TrySplit(cl, max(groups, 1)) {
								t.Fatalf("8 rows: no split with clusters of %d", cl)
							}
							rec8.Push = push
							e.run(name8, rec8, rec8.Grid(), bw, bs, e.f32(slices.Clone(x[8*k:16*k])), by8, bs)
							got8 := e.read(by8, 8*n)
							for i := range got8 {
								if math.Float32bits(got[8*n+i]) != math.Float32bits(got8[i]) {
									t.Fatalf("Push %d, 16 rows: y[%d, %d] = %g, the 8-row launch of rows 8–15 gave %g", push, 8+i/n, i%n, got[8*n+i], got8[i])
								}
							}
						}
					}
				}
			})
		}
	}
	// Every shape has a cluster size whose split fits two tiles (its K part within half the
	// threadgroup memory).
	for _, spec := range specs {
		if key := fmt.Sprintf("%s %dx%d", spec.Format, spec.N, spec.K); twoTiles[key] == 0 {
			t.Errorf("%s: no two-tile launch was checked", key)
		}
	}
	t.Logf("two-tile launches checked: %v", twoTiles)
}

// BenchmarkBLMXShapes times lithos_blmx_* on the 27B's NVFP4 and FP8 matrices as
// BenchmarkBLMShapes times the BLM kernels (≥ 1 GB of copies of random bytes in one captured
// graph, median of 7 replays, against the read floor of the same run), at 1, 8 and 16 rows, with
// NewBLMXParams's split ("d") and every other cluster size that fits, and the BLM kernel the
// sessions use now (fragment-major copy, cluster split: "blm") beside it in the same run, and
// NewBLMXParams's split without pushing its partial sums ("d-nopush", BLMXParams.Push). Reports
// GB/s and × floor per shape, rows and split; the lines also give µs per matrix.
// LITHOS_CUDA_BENCH_SHAPES (a regexp on the names below) and LITHOS_CUDA_BENCH_ROWS (e.g.
// "8" or "1,8") narrow it, and LITHOS_CUDA_BENCH_DEFAULT=1 times NewBLMXParams's split only,
// and it without Push (no other cluster size, no BLM kernel): the first launches are that
// split's alone, for Nsight Compute.
func BenchmarkBLMXShapes(b *testing.B) {
	d, ks, floor := benchDevice(b)
	if d.Info.SharedOptin < kernels.BLMXShared+kernels.BLMXStatic {
		b.Skipf("SKIP: %d bytes of shared memory per block; the MMA-layout kernels need %d", d.Info.SharedOptin, kernels.BLMXShared+kernels.BLMXStatic)
	}
	chk, s := benchStream(b, d)
	dev := mmaDevice(d, ks, d.LaunchesClusters())
	for c := 2; c <= dev.MaxCluster; c *= 2 {
		b.Logf("clusters of %d: %d at once (0: unknown, -1: none)", c, dev.Active[c])
	}
	shapes := []benchShape{
		{"nvfp4-gate_up", formats.NVFP4, 34816, 5120, kernels.EpiSwiGLU},
		{"nvfp4-down", formats.NVFP4, 5120, 17408, kernels.EpiStore},
		{"nvfp4-lm_head", formats.NVFP4, 248320, 5120, kernels.EpiStore},
		{"fp8-qkvz", formats.FP8, 16384, 5120, kernels.EpiStore},
		{"fp8-attn_qkv", formats.FP8, 14336, 5120, kernels.EpiStore},
		{"fp8-out", formats.FP8, 5120, 6144, kernels.EpiStore},
	}
	shapes, rowsList, onlyDefault := benchFilter(b, shapes, []int{1, 8, 16})
	ctl, x, y := benchIO(b, d, s, 16*17408, 16*248320)
	benchX(b, d, x, 16*17408)
	timeGraph := func(launch func() error) []time.Duration { return timeReplays(b, d, s, launch) }
	var summary []string
	report := func(key, line string, total int64, copies int, times []time.Duration) {
		bw := newBandwidth(total, times)
		b.ReportMetric(bw.GBps()/floor.GBps(), key+"-xfloor")
		l := fmt.Sprintf("%-44s median %8.1f us/matrix: %5.0f GB/s = %.3f × floor", line, float64(bw.Median.Microseconds())/float64(copies), bw.GBps(), bw.GBps()/floor.GBps())
		b.Log(l)
		summary = append(summary, l)
	}
	for _, sh := range shapes {
		g, err := blm.NewGeometry(blm.Spec{Format: sh.f, N: sh.n, K: sh.k})
		if err != nil {
			b.Fatal(err)
		}
		rowsTab := g.Blocks * int64(g.Rows)
		// Each copy holds the BLM bytes (the MMA layout is a rewrite within them): both kernels
		// read their own layout from the same buffers, so both stream the same allocations.
		mats, per, freeMats := benchMatrices(b, d, s, chk, g.TotalBytes, rowsTab)
		copies := len(mats)
		mmaBytes := int64(copies) * (kernels.BLMXCopyBytes(g) + 4*rowsTab)
		for _, rows := range rowsList {
			p0, err := kernels.NewBLMXParams(g, rows, sh.epi, dev)
			if err != nil {
				b.Fatal(err)
			}
			// cl 0: NewBLMXParams's split (two tiles per threadgroup for 9–16 rows where they
			// fit); −1: the same with Push 0 (where it pushes); else clusters of cl. Each launch
			// takes the kernel of its record's tiles.
			for _, cl := range []int{0, -1, 1, 2, 4, 8} {
				p, mark := p0, "d"
				if cl < 0 {
					if p0.Push == 0 {
						continue
					}
					p.Push, mark = 0, "d-nopush"
				}
				if cl > 0 {
					if onlyDefault || cl == int(p0.Cl) || cl > dev.MaxCluster {
						continue
					}
					groups, ok := dev.Groups(cl)
					if !ok {
						continue
					}
					if !p.TrySplit(cl, groups) {
						continue
					}
					mark = ""
				}
				name, err := kernels.BLMXKernelTiles(g.Format, p.Tiles)
				if err != nil {
					b.Fatal(err)
				}
				var recs Records
				off := recs.Add(p)
				if err := recs.Upload(d); err != nil {
					b.Fatal(err)
				}
				times := timeGraph(func() error {
					for _, m := range mats {
						var err error
						if p.Cl > 1 {
							err = ks.LaunchCluster(s, name, p.Grid(), p.ClusterDims(), ctl.Ptr, recs.At(off), m.w.Ptr, m.s.Ptr, x.Ptr, y.Ptr, m.s.Ptr)
						} else {
							err = ks.Launch(s, name, p.Grid(), ctl.Ptr, recs.At(off), m.w.Ptr, m.s.Ptr, x.Ptr, y.Ptr, m.s.Ptr)
						}
						if err != nil {
							return err
						}
					}
					return nil
				})
				key := sh.name + "-r" + strconv.Itoa(rows) + "-mma-cl" + strconv.Itoa(int(p.Cl)) + mark
				report(key, fmt.Sprintf("%-14s rows %2d mma cl %d×%-3d%s", sh.name, rows, p.Cl, p.Groups, mark), mmaBytes, copies, times)
				recs.Free()
			}
			if onlyDefault {
				continue
			}
			// The BLM kernel the sessions run now: fragment-major, the cluster split.
			bp, err := kernels.NewBLMParams(g, rows, sh.epi)
			if err != nil {
				b.Fatal(err)
			}
			if d.LaunchesClusters() {
				bp = bp.WithClusters()
			}
			bp.Layout = kernels.BLMLayoutFragment
			bname, _ := kernels.BLMKernelLayout(g.Format, rows, kernels.BLMLayoutFragment)
			var recs Records
			off := recs.Add(bp)
			if err := recs.Upload(d); err != nil {
				b.Fatal(err)
			}
			times := timeGraph(func() error {
				for _, m := range mats {
					var err error
					if bp.Clusters > 1 {
						err = ks.LaunchCluster(s, bname, bp.Grid(), bp.ClusterDims(), ctl.Ptr, recs.At(off), m.w.Ptr, m.s.Ptr, x.Ptr, y.Ptr)
					} else {
						err = ks.Launch(s, bname, bp.Grid(), ctl.Ptr, recs.At(off), m.w.Ptr, m.s.Ptr, x.Ptr, y.Ptr)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			report(sh.name+"-r"+strconv.Itoa(rows)+"-blm", fmt.Sprintf("%-14s rows %2d blm fragment-major cl %d", sh.name, rows, max(bp.Clusters, 1)), int64(copies)*per, copies, times)
			recs.Free()
		}
		freeMats()
	}
	b.Logf("summary (floor %.0f GB/s):", floor.GBps())
	for _, l := range summary {
		b.Log(l)
	}
}
