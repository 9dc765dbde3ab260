//go:build linux && amd64

package cuda

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"

	"lithos/formats"
	"lithos/kernels"
	"lithos/pack/blm"
)

// The BLM matrix kernels (kernels/ops/blm.kern) at the 27B's shapes, per matrix, every format,
// 1, 8 and 16 rows and every K split (kernels.BLMParams.Parts), against the read bandwidth measured
// in the same run; and their correctness for each K split and row count (TestBLMParts).

// TestBLMParts: every work split (K in Parts 1, 2, 4; 1 or 2 blocks per simdgroup; and, where
// the device launches thread-block clusters, K also split across 2, 4 or 8 threadgroups of a
// cluster) of each format against the CPU backend (tolerance as TestOpBLM), and the tensor-core path's row invariance: row 0 of an 8-row launch equals the
// 1-row launch of the r1 kernel bit for bit (a verify pass and a decode step agree exactly), and
// rows 0–7 of a 16-row launch (the r16 kernel's two n-tiles; prefill chunks) equal the 8-row
// launch's bit for bit.
func TestBLMParts(t *testing.T) {
	e := newOpEnv(t, 31)
	specs := []blm.Spec{
		{Format: formats.NVFP4, N: 96, K: 5120},
		{Format: formats.NVFP4, N: 64, K: 17408},
		{Format: formats.NVFP4, N: 40, K: 256}, // the policy: L = 2 (the Markov W2 shape)
		{Format: formats.FP8, N: 80, K: 6144},
		{Format: formats.BF16, N: 48, K: 5120},
	}
	for _, spec := range specs {
		m := newBLMMatrix(t, e.r, spec)
		bw, bs := e.bytes(m.packed), e.bytes(m.table)
		n, k := int(m.g.N), int(m.g.K)
		all := make([]int32, n)
		for i := range all {
			all[i] = int32(i)
		}
		x := e.randn(16*k, 1)
		bx := e.f32(x)
		want, tol := m.ref(t, all, x, 16)
		splits := [][3]uint32{{1, 2, 1}, {2, 2, 1}, {4, 2, 1}, {4, 1, 1}, {2, 1, 1}, {1, 1, 1}}
		if ch := e.clusterChoices(); ch[len(ch)-1] {
			splits = append(splits, [][3]uint32{{1, 2, 2}, {1, 2, 4}, {1, 2, 8}, {2, 2, 2}, {4, 1, 8}, {4, 2, 8}}...)
		}
		for _, split := range splits {
			parts, wb, cl := split[0], split[1], split[2]
			name := fmt.Sprintf("%s_%dx%d_L%d/parts%d_wb%d_cl%d", m.g.Format, n, k, m.g.Lanes, parts, wb, cl)
			t.Run(name, func(t *testing.T) {
				e.t = t
				var row0, rows8 []float32
				for _, rows := range []int{1, 8, 16} {
					kname, _ := kernels.BLMKernel(m.g.Format, rows)
					rec, err := kernels.NewBLMParams(m.g, rows, kernels.EpiStore)
					if err != nil {
						t.Fatal(err)
					}
					rec.Parts, rec.WarpBlocks, rec.Clusters = parts, wb, cl
					by := e.poisoned(rows * n)
					e.run(kname, rec, rec.Grid(), bw, bs, bx, by)
					got := e.read(by, rows*n)
					check(t, fmt.Sprintf("%d rows", rows), got, f32s(want[:rows*n]), func(i int) float64 { return tol[i] })
					switch rows {
					case 1:
						row0 = got
						continue
					case 8:
						rows8 = got
					case 16:
						for i := range rows8 {
							if math.Float32bits(got[i]) != math.Float32bits(rows8[i]) {
								t.Fatalf("the 16-row launch: y[%d, %d] = %g, the 8-row launch gave %g", i/n, i%n, got[i], rows8[i])
							}
						}
						// The second n-tile computes as the first: rows 8–15 repeating rows 0–7
						// give rows 0–7's results.
						twice := append(slices.Clone(x[:8*k]), x[:8*k]...)
						by2 := e.poisoned(16 * n)
						e.run(kname, rec, rec.Grid(), bw, bs, e.f32(twice), by2)
						got2 := e.read(by2, 16*n)
						for i := range 8 * n {
							if math.Float32bits(got2[8*n+i]) != math.Float32bits(rows8[i]) {
								t.Fatalf("the 16-row launch with rows 8–15 = rows 0–7: y[%d, %d] = %g, the 8-row launch gave %g for row %d", 8+i/n, i%n, got2[8*n+i], rows8[i], i/n)
							}
						}
					}
					for i := 0; i < n; i++ {
						if math.Float32bits(got[i]) != math.Float32bits(row0[i]) {
							t.Fatalf("row 0 of the %d-row launch: y[%d] = %g, the 1-row launch gave %g", rows, i, got[i], row0[i])
						}
					}
				}
			})
		}
	}
}

func f32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// BenchmarkBLMShapes times each of the 27B's matrix shapes alone (its bundle format, and the
// GDN shapes also in BF16), at 1, 8 and 16 rows with NewBLMParams's work split and, at 8 rows, the
// other splits (K parts × blocks per simdgroup): as many copies of the matrix as
// make ≥ 1 GB (random bytes; the L2 holds 60 MB), launched back to back in one captured graph,
// median of 7 replays. The read floor is the streaming read bandwidth measured in the same run.
// Reports GB/s and × floor per shape, rows and work split (K parts, blocks per simdgroup,
// threadgroups per cluster; "d" marks NewBLMParams's own choice, "c" the cluster split
// WithClusters gives, timed where the device launches clusters).
func BenchmarkBLMShapes(b *testing.B) {
	d, ks, floor := benchDevice(b)
	chk, s := benchStream(b, d)
	shapes := []benchShape{
		{"nvfp4-gate_up", formats.NVFP4, 34816, 5120, kernels.EpiSwiGLU},
		{"nvfp4-down", formats.NVFP4, 5120, 17408, kernels.EpiStore},
		{"nvfp4-lm_head", formats.NVFP4, 248320, 5120, kernels.EpiStore},
		{"fp8-qkv", formats.FP8, 10240, 5120, kernels.EpiStore},
		{"fp8-z", formats.FP8, 6144, 5120, kernels.EpiStore},
		{"fp8-out", formats.FP8, 5120, 6144, kernels.EpiStore},
		{"bf16-qkv", formats.BF16, 10240, 5120, kernels.EpiStore},
		{"bf16-out", formats.BF16, 5120, 6144, kernels.EpiStore},
	}
	ctl, x, y := benchIO(b, d, s, 16*17408, 16*248320)
	benchX(b, d, x, 16*17408)
	var summary []string
	for _, sh := range shapes {
		g, err := blm.NewGeometry(blm.Spec{Format: sh.f, N: sh.n, K: sh.k})
		if err != nil {
			b.Fatal(err)
		}
		rowsTab := g.Blocks * int64(g.Rows)
		mats, per, freeMats := benchMatrices(b, d, s, chk, g.TotalBytes, rowsTab)
		copies := len(mats)
		total := int64(copies) * per
		for _, rows := range []int{1, 8, 16} {
			p0, err := kernels.NewBLMParams(g, rows, sh.epi)
			if err != nil {
				b.Fatal(err)
			}
			name, _ := kernels.BLMKernel(g.Format, rows)
			// NewBLMParams's split first, then (on a device with thread-block clusters) the
			// cluster split the sessions take, then the others of BLMSplit's ladder (8 rows only).
			splits := [][3]uint32{{p0.Parts, p0.WarpBlocks, 1}}
			pc := p0.WithClusters()
			if pc.Clusters > 1 && d.LaunchesClusters() {
				splits = append(splits, [3]uint32{pc.Parts, pc.WarpBlocks, pc.Clusters})
			}
			if rows == 8 {
				for _, sp := range [][3]uint32{{1, 2, 1}, {2, 2, 1}, {4, 2, 1}, {4, 1, 1}, {2, 1, 1}} {
					if sp != splits[0] {
						splits = append(splits, sp)
					}
				}
			}
			for _, split := range splits {
				parts, wb, cl := split[0], split[1], split[2]
				p := p0
				p.Parts, p.WarpBlocks, p.Clusters = parts, wb, cl
				var recs Records
				off := recs.Add(p)
				if err := recs.Upload(d); err != nil {
					b.Fatal(err)
				}
				times := timeReplays(b, d, s, func() error {
					for _, m := range mats {
						var err error
						if cl > 1 {
							err = ks.LaunchCluster(s, name, p.Grid(), p.ClusterDims(), ctl.Ptr, recs.At(off), m.w.Ptr, m.s.Ptr, x.Ptr, y.Ptr)
						} else {
							err = ks.Launch(s, name, p.Grid(), ctl.Ptr, recs.At(off), m.w.Ptr, m.s.Ptr, x.Ptr, y.Ptr)
						}
						if err != nil {
							return err
						}
					}
					return nil
				})
				bw := newBandwidth(total, times)
				mark := ""
				switch {
				case cl > 1:
					mark = "c"
				case parts == p0.Parts && wb == p0.WarpBlocks:
					mark = "d"
				}
				key := sh.name + "-r" + strconv.Itoa(rows) + "-p" + strconv.Itoa(int(parts)) + "w" + strconv.Itoa(int(wb)) + "c" + strconv.Itoa(int(cl)) + mark
				b.ReportMetric(bw.GBps()/floor.GBps(), key+"-xfloor")
				line := fmt.Sprintf("%-14s rows %d parts %d wb %d cl %d%-1s grid %5d: %d × %.1f MB, median %8.1f us/matrix: %5.0f GB/s = %.3f × floor",
					sh.name, rows, parts, wb, cl, mark, p.Grid()[0], copies, float64(per)/1e6, float64(bw.Median.Microseconds())/float64(copies), bw.GBps(), bw.GBps()/floor.GBps())
				b.Log(line)
				summary = append(summary, line)
				recs.Free()
			}
		}
		freeMats()
	}
	b.Logf("summary (floor %.0f GB/s):", floor.GBps())
	for _, l := range summary {
		b.Log(l)
	}
}
