package kernels

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"lithos/formats"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/model"
)

// The MMA-layout kernels (ops/blmx.kern) in the fiber runtime's tensor-core build: their data
// flow — the copy's lane order and bit placement (BLMXCopy), the f16 decode, the activations'
// per-token scale and two-piece split, the work split over clusters, simdgroups and groups of
// items, the slots and their reduction — checked against the CPU backend on random matrices;
// the hardware MMA and the real cluster launch on the GPU only (runtime/backend/cuda).

// blmxRun runs one lithos_blmx_* launch of record p over c's copy and returns y (rows × outN,
// poisoned before unless y0 is given).
func blmxRun(t *testing.T, p BLMXParams, c blmCase, x []float32, rows, outN int, y0 []float32) []float32 {
	t.Helper()
	return blmxRunNorm(t, p, c, x, rows, outN, y0, nil)
}

// blmxRunNorm is blmxRun with the launch's RMSNorm weights nw [K] (nil: c's scales, which a
// record without Norm does not read).
func blmxRunNorm(t *testing.T, p BLMXParams, c blmCase, x []float32, rows, outN int, y0, nw []float32) []float32 {
	t.Helper()
	return blmxRunExe(t, mmaFiberExe(t), p, c, x, rows, outN, y0, nw)
}

// blmxRunExe is blmxRunNorm on the fiber executable exe (a build with other compile-time
// constants: mmaFiberExeDefines).
func blmxRunExe(t *testing.T, exe string, p BLMXParams, c blmCase, x []float32, rows, outN int, y0, nw []float32) []float32 {
	t.Helper()
	if nw == nil {
		nw = c.scales
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	cp, err := BLMXCopy(c.g, c.packed)
	if err != nil {
		t.Fatal(err)
	}
	kern, err := BLMXKernelTiles(c.g.Format, p.Tiles) // two tiles per threadgroup: the _t2 kernel
	if err != nil {
		t.Fatal(err)
	}
	var j job
	y := 0
	if y0 != nil {
		y = j.f32(y0)
	} else {
		y = j.poison(rows * outN)
	}
	j.launchCluster(t, kern, p.Grid(), p.ClusterDims()[0], j.buf(zeroCtl), j.buf(Record(p)), j.buf(cp), j.f32(c.scales), j.f32(x), y, j.f32(nw))
	r, err := j.runSchedules(t, exe)
	if err != nil {
		t.Fatalf("fiber run: %v", err)
	}
	return bytesF32(r[y])
}

// blmxBound is the bound of blmCase.bound plus the activations' split: each product's
// activation is exact to 2⁻²² of itself, so 2⁻²¹·|s_n|·Σ_k |W[n,k]·x[t,k]| more.
func blmxBound(c blmCase, x []float32, rows int) []float64 {
	b := c.bound(x, rows)
	// bound is 2γ_h·|s|·Σ|Wx| with γ_h ≈ h·2⁻²⁴: recover Σ and add the split's share.
	h := float64(c.g.K + 64)
	gam := h * 0x1p-24 / (1 - h*0x1p-24)
	for i := range b {
		b[i] += b[i] / (2 * gam) * 0x1p-21
	}
	return b
}

func checkBLMX(t *testing.T, what string, got, want []float32, bound []float64) {
	t.Helper()
	worst := 0.0
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(float64(got[i])) || d > bound[i]+1e-30 {
			t.Fatalf("%s: y[%d] = %g, want %g: |Δ| %.3g > bound %.3g", what, i, got[i], want[i], d, bound[i])
		}
		worst = max(worst, d/(bound[i]+1e-30))
	}
	t.Logf("%s: worst |Δ| at %.3f of the bound", what, worst)
}

// TestFiberBLMX: shapes with N not a multiple of 16 and K not a multiple of a chunk (zero
// padding), each row count in one and two tiles, every cluster size, against the CPU backend.
func TestFiberBLMX(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	type shape struct {
		f     formats.Format
		n, k  int64
		lanes int
	}
	for _, sh := range []shape{
		{formats.NVFP4, 40, 2048, 0}, // 32 chunks per block
		{formats.NVFP4, 17, 336, 32}, // 6 chunks, padded to 8; N = 17: a block of one row
		{formats.NVFP4, 24, 1792, 0}, // 28 chunks: clusters of 2 have parts of 16 and 12
		{formats.FP8, 33, 1000, 0},   // 32 chunks (31.25 of columns)
		{formats.FP8, 64, 256, 0},
		// 132 blocks: in one threadgroup, simdgroups 0–3 finish 9 blocks, one past the BLMX_OWN
		// whose scales the kernel loads ahead.
		{formats.FP8, 2100, 256, 0},
	} {
		c := newBLMCase(t, r, sh.f, sh.n, sh.k, sh.lanes, false)
		k, n := int(sh.k), int(sh.n)
		m, err := c.ref.All()
		if err != nil {
			t.Fatal(err)
		}
		// (rows, cluster size, clusters)
		for _, cs := range [][3]int{{1, 1, 2}, {3, 2, 2}, {8, 4, 1}, {8, 1, 3}, {11, 2, 1}, {16, 8, 1}, {8, 1, 1}} {
			rows, cl, groups := cs[0], cs[1], cs[2]
			t.Run(fmt.Sprintf("%s_%dx%d_rows%d_cl%d_g%d", sh.f, n, k, rows, cl, groups), func(t *testing.T) {
				p, err := NewBLMXParams(c.g, rows, EpiStore, BLMXDevice{SMs: 4, MaxCluster: 1})
				if err != nil {
					t.Fatal(err)
				}
				if !p.TrySplit(cl, groups) {
					// Refused only when some K part would get no step of chunks.
					if part := ((int(p.Chunks)+cl-1)/cl + BLMXGroup - 1) / BLMXGroup * BLMXGroup; int(p.Chunks) > (cl-1)*part {
						t.Fatalf("trySplit refused clusters of %d for %d chunks", cl, p.Chunks)
					}
					t.Logf("clusters of %d for %d chunks: refused, as it must be (a K part without chunks)", cl, p.Chunks)
					return
				}
				x := randVec(r, rows*k, 1)
				want := make([]float32, rows*n)
				if err := m.Mul(want, x, rows); err != nil {
					t.Fatal(err)
				}
				for _, pp := range pushVariants(t, p) {
					got := blmxRun(t, pp, c, x, rows, n, nil)
					checkBLMX(t, fmt.Sprintf("store, Push %d", pp.Push), got, want, blmxBound(c, x, rows))
				}
			})
		}
	}
}

// TestFiberBLMXStrides: the staging's loads of x rows that are not 16-byte aligned (LdX not a
// multiple of 4: every row but the first, so the launch takes its scalar loads) and of a k-step
// that K ends inside (K not a multiple of 4 with aligned rows: 16-byte loads, then the scalar
// ones for the entry across K), against the CPU backend; the gaps between the rows hold NaN,
// which a load past a row's K would carry into the outputs. The other tests' x rows are
// aligned and K a multiple of 4 (16-byte loads only).
func TestFiberBLMXStrides(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	for _, c := range []struct {
		f      formats.Format
		n, k   int64
		ld, cl int
	}{
		{formats.FP8, 40, 1001, 1001, 1}, // rows 1, 2 start 4 and 8 bytes past 16-byte alignment
		{formats.FP8, 40, 1000, 1002, 1}, // 8-byte aligned rows (LdX even), not 16: still scalar loads
		{formats.FP8, 40, 1001, 1004, 2}, // aligned rows, K ends inside a k-step's third column
		{formats.NVFP4, 24, 1792, 1793, 2},
	} {
		t.Run(fmt.Sprintf("%s_K%d_ld%d", c.f, c.k, c.ld), func(t *testing.T) {
			bc := newBLMCase(t, r, c.f, c.n, c.k, 0, false)
			m, err := bc.ref.All()
			if err != nil {
				t.Fatal(err)
			}
			const rows = 3
			k, n := int(c.k), int(c.n)
			x := randVec(r, rows*k, 1)
			want := make([]float32, rows*n)
			if err := m.Mul(want, x, rows); err != nil {
				t.Fatal(err)
			}
			xs := make([]float32, rows*c.ld)
			for i := range xs {
				xs[i] = float32(math.NaN())
			}
			for tk := range rows {
				copy(xs[tk*c.ld:], x[tk*k:(tk+1)*k])
			}
			p, err := NewBLMXParams(bc.g, rows, EpiStore, BLMXDevice{SMs: 4, MaxCluster: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !p.TrySplit(c.cl, 2) {
				t.Fatalf("no split in clusters of %d", c.cl)
			}
			p.LdX = uint32(c.ld)
			for _, pp := range pushVariants(t, p) {
				got := blmxRun(t, pp, bc, xs, rows, n, nil)
				checkBLMX(t, fmt.Sprintf("LdX %d, Push %d", c.ld, pp.Push), got, want, blmxBound(bc, x, rows))
			}
		})
	}
}

// pushVariants returns p (split by TrySplit) and, for a cluster that pushes its partial sums
// (Push 1), p with Push 0: the kernel's two ways of adding the ranks' sums. Two tiles' receive
// area may not fit beside their activations and slots (Push 0 alone then).
func pushVariants(t *testing.T, p BLMXParams) []BLMXParams {
	t.Helper()
	if p.Cl < 2 {
		return []BLMXParams{p}
	}
	if p.Push != 1 && p.Tiles > 1 {
		t.Logf("clusters of %d, two tiles: no room to push", p.Cl)
		return []BLMXParams{p}
	}
	if p.Push != 1 {
		t.Fatalf("clusters of %d without Push: the tests' shapes leave room for the receive area", p.Cl)
	}
	q := p
	q.Push = 0
	return []BLMXParams{p, q}
}

// TestFiberBLMXRowsInvariant: a token's outputs do not depend on the launch's other rows, its
// row count or its tile (bit for bit), for every cluster size and both ways of adding the
// ranks' sums (Push): a verify pass of 8 rows and a decode step of 1 give the same logits. The
// two-tile kernel (11 and 16 rows, one threadgroup for both tiles) in the same split gives
// them too, and so does 16 rows in one tile per threadgroup.
func TestFiberBLMXRowsInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	for _, f := range []formats.Format{formats.NVFP4, formats.FP8} {
		c := newBLMCase(t, r, f, 48, 512, 0, false)
		k, n := int(c.g.K), int(c.g.N)
		x := randVec(r, 16*k, 2)
		for _, cp := range [][2]int{{1, 0}, {2, 1}, {2, 0}} {
			cl, push := cp[0], uint32(cp[1])
			var ref [][]float32 // ref[t]: token t alone in a 1-row launch
			for _, rt := range [][2]int{{1, 1}, {3, 1}, {8, 1}, {16, 1}, {16, 2}, {11, 2}} {
				rows, tiles := rt[0], uint32(rt[1])
				p, err := NewBLMXParams(c.g, rows, EpiStore, BLMXDevice{SMs: 4, MaxCluster: 1, OneTile: tiles == 1})
				if err != nil {
					t.Fatal(err)
				}
				if !p.TrySplit(cl, 2) {
					t.Fatalf("no split with clusters of %d", cl)
				}
				if p.Tiles != tiles {
					t.Fatalf("%d rows: %d tiles per threadgroup, want %d", rows, p.Tiles, tiles)
				}
				p.Push = push
				if rows == 1 {
					for tt := 0; tt < 16; tt++ {
						ref = append(ref, blmxRun(t, p, c, x[tt*k:(tt+1)*k], 1, n, nil))
					}
					continue
				}
				got := blmxRun(t, p, c, x[:rows*k], rows, n, nil)
				for tt := 0; tt < rows; tt++ {
					for i := 0; i < n; i++ {
						if math.Float32bits(got[tt*n+i]) != math.Float32bits(ref[tt][i]) {
							t.Fatalf("%s, clusters of %d, Push %d, %d rows in %d tiles per threadgroup: y[%d, %d] = %g, the 1-row launch of token %d gave %g", f, cl, push, rows, tiles, tt, i, got[tt*n+i], tt, ref[tt][i])
						}
					}
				}
			}
		}
	}
}

// TestFiberBLMXEpilogues: the add and SwiGLU epilogues, in one tile and two, with clusters.
func TestFiberBLMXEpilogues(t *testing.T) {
	r := rand.New(rand.NewPCG(45, 46))
	c := newBLMCase(t, r, formats.NVFP4, 48, 512, 0, true)
	k, n := int(c.g.K), int(c.g.N)
	m, _ := c.ref.All()
	for _, rc := range [][2]int{{3, 1}, {13, 2}} {
		rows, cl := rc[0], rc[1]
		x := randVec(r, rows*k, 1)
		full := make([]float32, rows*n)
		if err := m.Mul(full, x, rows); err != nil {
			t.Fatal(err)
		}
		bound := blmxBound(c, x, rows)
		t.Run(fmt.Sprintf("rows%d_cl%d", rows, cl), func(t *testing.T) {
			res := randVec(r, rows*n, 3)
			p, err := NewBLMXParams(c.g, rows, EpiAdd, BLMXDevice{SMs: 2, MaxCluster: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !p.TrySplit(cl, 1) {
				t.Fatalf("no split with clusters of %d", cl)
			}
			want := make([]float32, len(res))
			for i := range want {
				want[i] = res[i] + full[i]
				bound[i] += 2e-7 * math.Abs(float64(want[i]))
			}
			for _, pp := range pushVariants(t, p) {
				got := blmxRun(t, pp, c, x, rows, n, slices.Clone(res))
				checkBLMX(t, fmt.Sprintf("add, Push %d", pp.Push), got, want, bound)
			}
			half := n / 2
			ps, err := NewBLMXParams(c.g, rows, EpiSwiGLU, BLMXDevice{SMs: 2, MaxCluster: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !ps.TrySplit(cl, 1) {
				t.Fatalf("no split with clusters of %d", cl)
			}
			for _, pp := range pushVariants(t, ps) {
				checkSwiGLU(t, blmxRun(t, pp, c, x, rows, half, nil), full, bound, rows, n)
			}
		})
	}
}

// TestFiberBLMXDynamicRowsAndGuard: a row count read from the step state writes those rows
// only (a tile with none leaves at once; in the two-tile kernel, which 16 rows take, a second
// tile with none computes but writes nothing), and the rows of x past it (NaN here: rows the
// record allows but the step does not use) reach no output; a record with clusters launched
// without them writes nothing and reports GuardBLMCluster, a record of one tile given to the
// two-tile kernel (or of two to the one-tile kernel) GuardBLMXTiles.
func TestFiberBLMXDynamicRowsAndGuard(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 48))
	c := newBLMCase(t, r, formats.FP8, 32, 512, 0, false)
	k, n := int(c.g.K), int(c.g.N)
	m, _ := c.ref.All()
	cp, err := BLMXCopy(c.g, c.packed)
	if err != nil {
		t.Fatal(err)
	}
	kern, _ := BLMXKernel(formats.FP8)
	kern2, _ := BLMXKernelTiles(formats.FP8, 2)
	const rowsW, doneW = 5, 10
	x := randVec(r, 16*k, 1)
	for _, dyn := range []uint32{5, 9} {
		p, err := NewBLMXParams(c.g, 16, EpiStore, BLMXDevice{SMs: 2, MaxCluster: 2})
		if err != nil {
			t.Fatal(err)
		}
		if p.Tiles != 2 {
			t.Fatalf("16 rows: %d tiles per threadgroup, want 2", p.Tiles)
		}
		p.RowsWord = rowsW
		ctl := make([]uint32, 64)
		ctl[rowsW] = dyn
		// The rows past the dynamic count are NaN: whatever x holds there must reach no output
		// (a staging that loads them before it reads the count, as docs/performance.md §3.3u
		// tried, included).
		xd := slices.Clone(x)
		for i := int(dyn) * k; i < len(xd); i++ {
			xd[i] = float32(math.NaN())
		}
		var j job
		y := j.buf(canary(4 * 16 * n))
		j.launchCluster(t, kern2, p.Grid(), p.ClusterDims()[0], j.buf(u32Bytes(ctl)), j.buf(Record(p)), j.buf(cp), j.f32(c.scales), j.f32(xd), y, j.f32(c.scales))
		res, err := j.runSchedules(t, mmaFiberExe(t))
		if err != nil {
			t.Fatal(err)
		}
		got := bytesF32(res[y])
		want := make([]float32, int(dyn)*n)
		if err := m.Mul(want, x[:int(dyn)*k], int(dyn)); err != nil {
			t.Fatal(err)
		}
		checkBLMX(t, fmt.Sprintf("%d dynamic rows", dyn), got[:int(dyn)*n], want, blmxBound(c, x[:int(dyn)*k], int(dyn)))
		if !bytes.Equal(res[y][4*int(dyn)*n:], canary(4 * 16 * n)[4*int(dyn)*n:]) {
			t.Fatalf("%d dynamic rows: rows past them were written", dyn)
		}
	}
	p, err := NewBLMXParams(c.g, 3, EpiStore, BLMXDevice{SMs: 2, MaxCluster: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !p.TrySplit(2, 1) {
		t.Fatal("no split with clusters of 2")
	}
	p.DoneWord = doneW
	var j job
	ctlB := j.buf(make([]byte, 256))
	y := j.buf(canary(4 * 3 * n))
	j.launch(t, kern, p.Grid(), ctlB, j.buf(Record(p)), j.buf(cp), j.f32(c.scales), j.f32(x[:3*k]), y, j.f32(c.scales))
	res, err := j.runSchedules(t, mmaFiberExe(t))
	if err != nil {
		t.Fatal(err)
	}
	if ctl := bytesU32(res[ctlB]); ctl[doneW] != 1 || ctl[doneW+1] != GuardBLMCluster {
		t.Fatalf("clusters of 2 launched without: Done %d, Error %d, want 1, GuardBLMCluster", ctl[doneW], ctl[doneW+1])
	}
	if !bytes.Equal(res[y], canary(4*3*n)) {
		t.Fatal("y was written")
	}
	// The tiles guard, both ways: a one-tile record (3 rows) on the two-tile kernel and a
	// two-tile record (16 rows, its grid) on the one-tile kernel.
	q, err := NewBLMXParams(c.g, 16, EpiStore, BLMXDevice{SMs: 2, MaxCluster: 1})
	if err != nil || q.Tiles != 2 {
		t.Fatalf("16 rows: %d tiles (%v), want 2", q.Tiles, err)
	}
	p.Cl, p.PartChunks, p.Push, p.Groups = 1, p.Chunks, 0, 1
	q.DoneWord = doneW
	for _, g := range []struct {
		kern string
		p    BLMXParams
	}{{kern2, p}, {kern, q}} {
		var j job
		ctlB := j.buf(make([]byte, 256))
		y := j.buf(canary(4 * 16 * n))
		j.launch(t, g.kern, g.p.Grid(), ctlB, j.buf(Record(g.p)), j.buf(cp), j.f32(c.scales), j.f32(x), y, j.f32(c.scales))
		res, err := j.runSchedules(t, mmaFiberExe(t))
		if err != nil {
			t.Fatal(err)
		}
		if ctl := bytesU32(res[ctlB]); ctl[doneW] != 1 || ctl[doneW+1] != GuardBLMXTiles {
			t.Fatalf("%s given a record of %d tiles: Done %d, Error %d, want 1, GuardBLMXTiles", g.kern, g.p.Tiles, ctl[doneW], ctl[doneW+1])
		}
		if !bytes.Equal(res[y], canary(4*16*n)) {
			t.Fatalf("%s given a record of %d tiles: y was written", g.kern, g.p.Tiles)
		}
	}
}

// TestFiberBLMXActivationRange: tokens whose activations span many orders of magnitude (one
// element 10⁹ times the others, a token of zeros, one of tiny values, one with zero weights'
// columns at its outlier) stay within the bound: the split's lo pieces, kept 2¹¹ larger, stay
// normal f16 far below the token's largest value.
func TestFiberBLMXActivationRange(t *testing.T) {
	r := rand.New(rand.NewPCG(49, 50))
	for _, f := range []formats.Format{formats.NVFP4, formats.FP8} {
		c := newBLMCase(t, r, f, 32, 512, 0, false)
		k, n := int(c.g.K), int(c.g.N)
		const rows = 6
		x := make([]float32, rows*k)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 1e-6)
		}
		x[0*k+17] = 3e4  // token 0: an outlier 3·10¹⁰ times the rest
		x[1*k+300] = 1e3 // token 1: 10⁹
		for i := 0; i < k; i++ {
			x[2*k+i] = 0      // token 2: zeros
			x[3*k+i] *= 1e-25 // token 3: tiny values (≈ 10⁻³¹)
		}
		x[4*k+5] = -7e3 // token 4: one outlier, with every weight of its column zeroed below
		for i := range x[5*k : 6*k] {
			x[5*k+i] = float32(r.NormFloat64()) // token 5: ordinary
		}
		// Zero column 5 of every row (codes 0: the outlier of token 4 contributes nothing).
		cz := c
		cz.packed = zeroColumn(t, c, 5)
		var err error
		if cz.ref, err = cpu.NewPacked(cz.g, cz.packed, f32Bytes(cz.scales)); err != nil {
			t.Fatal(err)
		}
		m, err := cz.ref.All()
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, rows*n)
		if err := m.Mul(want, x, rows); err != nil {
			t.Fatal(err)
		}
		p, err := NewBLMXParams(cz.g, rows, EpiStore, BLMXDevice{SMs: 2, MaxCluster: 1})
		if err != nil {
			t.Fatal(err)
		}
		got := blmxRun(t, p, cz, x, rows, n, nil)
		checkBLMX(t, string(f), got, want, blmxBound(cz, x, rows))
	}
}

// zeroColumn returns c's packed bytes with column col of every row zero.
func zeroColumn(t *testing.T, c blmCase, col int64) []byte {
	t.Helper()
	rows := c.g.NewRows(int(c.g.N))
	if err := c.g.UnpackRows(rows, c.packed); err != nil {
		t.Fatal(err)
	}
	crb := c.g.CodeRowBytes()
	for rI := int64(0); rI < c.g.N; rI++ {
		if c.g.Format == formats.NVFP4 {
			rows.Codes[rI*crb+col/2] &^= 0xF << (4 * (col % 2))
		} else {
			rows.Codes[rI*crb+col] = 0
		}
	}
	out := make([]byte, c.g.TotalBytes)
	if err := c.g.PackRows(out, rows); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFiberBLMXNorm: Norm 1 (the product of RMSNorm(x), the norm folded into the staging and
// the outputs' factor) against the CPU backend's RMSNorm then product, one and two tiles, with
// clusters (the ranks' Σx² added through distributed shared memory, read from each rank or, with
// Push, pushed to each), K not a multiple of a chunk; each token's outputs bit for bit those of
// its 1-row launch.
func TestFiberBLMXNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 48))
	const eps = 1e-6
	for _, sh := range []struct {
		f     formats.Format
		n, k  int64
		lanes int
	}{{formats.NVFP4, 48, 1808, 32}, {formats.FP8, 33, 1000, 0}} { // 28.25 and 31.25 chunks
		c := newBLMCase(t, r, sh.f, sh.n, sh.k, sh.lanes, false)
		k, n := int(c.g.K), int(c.g.N)
		m, _ := c.ref.All()
		nw := model.OnePlus(randVec(r, k, 0.5))
		for _, rc := range [][2]int{{1, 1}, {3, 2}, {11, 4}, {16, 2}} {
			rows, cl := rc[0], rc[1]
			t.Run(fmt.Sprintf("%s_%dx%d_rows%d_cl%d", sh.f, n, k, rows, cl), func(t *testing.T) {
				x := randVec(r, rows*k, 3)
				xn := make([]float32, len(x))
				model.RMSNorm(xn, x, nw, rows, eps)
				want := make([]float32, rows*n)
				if err := m.Mul(want, xn, rows); err != nil {
					t.Fatal(err)
				}
				// blmxBound of the normed rows, plus the fold's roundings: x·nw and r·y
				// (2⁻²² of Σ|W·xn| between them) and r from a float32 Σx² (γ_K/2 relative).
				bound := blmxBound(c, xn, rows)
				h := float64(k + 64)
				gam := h * 0x1p-24 / (1 - h*0x1p-24)
				for i := range bound {
					bound[i] += bound[i] / (2 * gam) * (gam/2 + 0x1p-22)
				}
				rec := func(rows int, push uint32) BLMXParams {
					p, err := NewBLMXParams(c.g, rows, EpiStore, BLMXDevice{SMs: 2, MaxCluster: 1})
					if err != nil {
						t.Fatal(err)
					}
					if !p.TrySplit(cl, 1) {
						t.Fatalf("no split with clusters of %d", cl)
					}
					p.Norm, p.Eps, p.Push = 1, eps, push
					return p
				}
				pushes := []uint32{0}
				if cl > 1 {
					pushes = []uint32{1, 0}
				}
				for _, push := range pushes {
					got := blmxRunNorm(t, rec(rows, push), c, x, rows, n, nil, nw)
					checkBLMX(t, fmt.Sprintf("norm, Push %d", push), got, want, bound)
					if rows == 1 {
						continue
					}
					for tt := range rows {
						one := blmxRunNorm(t, rec(1, push), c, x[tt*k:(tt+1)*k], 1, n, nil, nw)
						for i := range n {
							if math.Float32bits(one[i]) != math.Float32bits(got[tt*n+i]) {
								t.Fatalf("Push %d, token %d: y[%d] = %g in %d rows, %g alone", push, tt, i, got[tt*n+i], rows, one[i])
							}
						}
					}
				}
			})
		}
	}
}

// TestFiberBLMXStagingInRegisters: the staging's entries kept in registers until the split
// (BLMX_RX of them per thread) and those passed through threadgroup memory as float32 give the
// same staged pieces, so the same outputs bit for bit: the default build (BLMX_RX 0: every entry
// through memory), BLMX_RX 12 (every entry of these shapes in registers) and 5 (the first five,
// fewer than a loading step, the rest through memory where a thread has more: 6 or 8 here),
// each against the CPU backend —
// with and without Norm (whose Σx² must be gathered in the same entry order either way: a
// thread's register entries, then its memory ones), with the rotation of several clusters,
// threads with different entry counts (NE not a multiple of 512) and rows that end inside a
// tile.
func TestFiberBLMXStagingInRegisters(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	exes := []struct {
		name, exe string
	}{
		{"default", mmaFiberExe(t)},
		{"BLMX_RX 12", mmaFiberExeDefines(t, "BLMX_RX 12u")},
		{"BLMX_RX 5", mmaFiberExeDefines(t, "BLMX_RX 5u")},
	}
	const eps = 1e-6
	for _, sh := range []struct {
		f          formats.Format
		n, k       int64
		lanes      int
		cl, groups int
		norm       bool
	}{
		{formats.NVFP4, 40, 1808, 32, 1, 3, false}, // 8 entries per thread, rotated by cluster
		{formats.NVFP4, 40, 1808, 32, 1, 1, true},  // Norm, 8 entries: BLMX_RX 5 mixed
		{formats.NVFP4, 40, 1808, 32, 2, 1, true},  // Norm, 4 entries, clusters of 2
		{formats.FP8, 33, 2000, 0, 1, 2, false},    // 8 entries per thread, K inside a chunk
		{formats.FP8, 33, 1000, 0, 1, 1, true},     // 4 entries, K inside a k-step
		{formats.FP8, 33, 1400, 0, 1, 1, true},     // 44 chunks, NE 2816: 6 or 5 entries, Norm
		{formats.FP8, 33, 1400, 0, 1, 2, false},    // the same, rotated
	} {
		c := newBLMCase(t, r, sh.f, sh.n, sh.k, sh.lanes, false)
		k, n := int(c.g.K), int(c.g.N)
		m, err := c.ref.All()
		if err != nil {
			t.Fatal(err)
		}
		nw := model.OnePlus(randVec(r, k, 0.5))
		for _, rows := range []int{3, 8} {
			t.Run(fmt.Sprintf("%s_%dx%d_cl%d_groups%d_norm%v_rows%d", sh.f, n, k, sh.cl, sh.groups, sh.norm, rows), func(t *testing.T) {
				x := randVec(r, rows*k, 3)
				xin := x
				if sh.norm {
					xin = make([]float32, len(x))
					model.RMSNorm(xin, x, nw, rows, eps)
				}
				want := make([]float32, rows*n)
				if err := m.Mul(want, xin, rows); err != nil {
					t.Fatal(err)
				}
				bound := blmxBound(c, xin, rows)
				if sh.norm { // the fold's roundings, as TestFiberBLMXNorm
					h := float64(k + 64)
					gam := h * 0x1p-24 / (1 - h*0x1p-24)
					for i := range bound {
						bound[i] += bound[i] / (2 * gam) * (gam/2 + 0x1p-22)
					}
				}
				p, err := NewBLMXParams(c.g, rows, EpiStore, BLMXDevice{SMs: 4, MaxCluster: 1})
				if err != nil {
					t.Fatal(err)
				}
				if !p.TrySplit(sh.cl, sh.groups) {
					t.Fatalf("no split in %d clusters of %d", sh.groups, sh.cl)
				}
				if sh.norm {
					p.Norm, p.Eps = 1, eps
				}
				var first []float32
				for _, e := range exes {
					got := blmxRunExe(t, e.exe, p, c, x, rows, n, nil, nw)
					checkBLMX(t, e.name, got, want, bound)
					if first == nil {
						first = got
						continue
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(first[i]) {
							t.Fatalf("%s: y[%d] = %g, the default build's %g", e.name, i, got[i], first[i])
						}
					}
				}
			})
		}
	}
}
