package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"lithos/formats"
	"lithos/formats/bf16"
	"lithos/runtime/backend"
	"lithos/runtime/model"
)

// The priority-4 ops (GDN with its gates, conv, attention, gather, L2 norm, the step control and the
// DSpark Markov chain) in the fiber runtime against the CPU backend's functions.

// TestFiberGDNGates: Gates 1 (β and g computed in the delta rule's launch from the in_proj_ab
// rows, a then b, as the 27B lays them out) against the CPU backend — β, g (model.GDNGates,
// written by each head's first threadgroup), the output and the new state (model.GDNRecurrent
// with those gates) — and bit for bit a Gates 0 launch fed with the β and g it wrote (the
// commit replay's path), over 3 and 11 rows (two staging batches) and heads of 64 columns (two
// threadgroups each).
func TestFiberGDNGates(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	s := model.GDNShape{KHeads: 2, VHeads: 4, KDim: 16, VDim: 64}
	for _, rows := range []int{3, 11} {
		t.Run(fmt.Sprint(rows), func(t *testing.T) {
			h := s.VHeads
			q := randVec(r, rows*s.KHeads*s.KDim, 0.3)
			k := randVec(r, rows*s.KHeads*s.KDim, 0.3)
			v := randVec(r, rows*s.VHeads*s.VDim, 1)
			ab := randVec(r, rows*2*h, 6) // [rows, 2·VHeads]: a, then b
			negA, dt := model.NegExp(randVec(r, h, 1)), randVec(r, h, 1)
			a, b := make([]float32, rows*h), make([]float32, rows*h)
			for row := range rows {
				copy(a[row*h:(row+1)*h], ab[row*2*h:])
				copy(b[row*h:(row+1)*h], ab[row*2*h+h:])
			}
			wb, wg := make([]float32, rows*h), make([]float32, rows*h)
			model.GDNGates(wb, wg, a, b, negA, dt, rows)
			st0 := randVec(r, s.StateLen(), 1)
			want := make([]float32, rows*s.VHeads*s.VDim)
			wantState := make([]float32, s.StateLen())
			if err := model.GDNRecurrent(s, want, q, k, v, wb, wg, rows, st0, wantState); err != nil {
				t.Fatal(err)
			}
			state := append(slices.Clone(st0), st0...) // slot 0 read, slot 1 written
			vd := s.VHeads * s.VDim
			p := GDNParams{DoneWord: NoWord, Rows: uint32(rows), RowsWord: NoWord, KHeads: uint32(s.KHeads), VHeads: uint32(h), KDim: uint32(s.KDim),
				VDim: uint32(s.VDim), WriteOut: 1, LdQK: uint32(s.KHeads * s.KDim), LdV: uint32(vd), LdGate: uint32(h), LdOut: uint32(vd),
				Gates: 1, LdAB: uint32(2 * h)}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			var j job
			bb, gb, sb, out := j.poison(rows*h), j.poison(rows*h), j.f32(state), j.poison(len(want))
			// ga: the rows from their a columns; gb the same rows from their b columns.
			j.launch(t, "lithos_gdn", p.Grid(), j.buf(zeroCtl), j.buf(Record(p)), j.f32(q), j.f32(k), j.f32(v), bb, gb, sb, out,
				j.f32(ab), j.f32(ab[h:]), j.f32(negA), j.f32(dt))
			res := j.mustRun(t)
			gotB, gotG := bytesF32(res[bb]), bytesF32(res[gb])
			closeTo(t, "beta", gotB, wb, 1e-6, 1e-30)
			closeTo(t, "g", gotG, wg, 2e-6, 1e-7) // softplus in float32 against float64 log1p
			closeTo(t, "gdn out", bytesF32(res[out]), want, 1e-5, 1e-6)
			closeTo(t, "gdn state", bytesF32(res[sb])[s.StateLen():], wantState, 1e-5, 1e-6)
			// The same launch reading those gates.
			p0 := p
			p0.Gates, p0.LdAB = 0, 0
			var j0 job
			sb0, out0 := j0.f32(state), j0.poison(len(want))
			j0.launch(t, "lithos_gdn", p0.Grid(), j0.buf(zeroCtl), j0.buf(Record(p0)), j0.f32(q), j0.f32(k), j0.f32(v), j0.f32(gotB), j0.f32(gotG), sb0, out0,
				sb0, sb0, sb0, sb0)
			res0 := j0.mustRun(t)
			for i, x := range bytesF32(res0[out0]) {
				if y := bytesF32(res[out])[i]; math.Float32bits(x) != math.Float32bits(y) {
					t.Fatalf("out[%d] = %g with Gates 1, %g with its gates read", i, y, x)
				}
			}
		})
	}
}

func TestFiberGDNTwoSlots(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	s := model.GDNShape{KHeads: 2, VHeads: 4, KDim: 16, VDim: 40}
	const rows = 3
	q := randVec(r, rows*s.KHeads*s.KDim, 0.3)
	k := randVec(r, rows*s.KHeads*s.KDim, 0.3)
	v := randVec(r, rows*s.VHeads*s.VDim, 1)
	beta := randVec(r, rows*s.VHeads, 0.5)
	g := randVec(r, rows*s.VHeads, 1)
	for i := range beta {
		beta[i] = 0.5 + beta[i]
		g[i] = -float32(math.Abs(float64(g[i])))
	}
	st0 := randVec(r, s.StateLen(), 1)
	// Reference: the full pass over 3 rows, then the commit replay of 2 rows from the same state.
	want := make([]float32, rows*s.VHeads*s.VDim)
	wantState := make([]float32, s.StateLen())
	if err := model.GDNRecurrent(s, want, q, k, v, beta, g, rows, st0, wantState); err != nil {
		t.Fatal(err)
	}
	want2 := make([]float32, 2*s.VHeads*s.VDim)
	wantState2 := make([]float32, s.StateLen())
	if err := model.GDNRecurrent(s, want2, q, k, v, beta, g, 2, st0, wantState2); err != nil {
		t.Fatal(err)
	}
	ctl := make([]uint32, 64)
	ctl[0] = 7 // Step: odd → read slot 1
	ctl[5] = 2 // a Committed word
	state := make([]float32, 2*s.StateLen())
	for i := range state[:s.StateLen()] {
		state[i] = float32(math.NaN()) // slot 0 is written first; poison it
	}
	copy(state[s.StateLen():], st0)
	p := GDNParams{DoneWord: NoWord, Rows: rows, RowsWord: NoWord, KHeads: 2, VHeads: 4, KDim: 16, VDim: 40,
		Slot: 0, SlotWord: 0, WriteOut: 1, LdQK: 32, LdV: 160, LdGate: 4, LdOut: 160}
	var j job
	c := j.buf(u32Bytes(ctl))
	sb, out := j.f32(state), j.poison(len(want))
	args := func(rec int) []int {
		return []int{c, rec, j.f32(q), j.f32(k), j.f32(v), j.f32(beta), j.f32(g), sb, out, sb, sb, sb, sb}
	}
	j.launch(t, "lithos_gdn", p.Grid(), args(j.buf(Record(p)))...)
	res := j.mustRun(t)
	// Products of O(1) values over d_k = 16 terms; exp float32 vs float64-rounded.
	closeTo(t, "gdn out", bytesF32(res[out]), want, 1e-5, 1e-6)
	got := bytesF32(res[sb])
	closeTo(t, "gdn state slot 0 (written)", got[:s.StateLen()], wantState, 1e-5, 1e-6)
	closeTo(t, "gdn state slot 1 (read, untouched)", got[s.StateLen():], st0, 0, 0)

	// The commit replay: Step advanced to 8 (read slot (8&1)^1 = 1 again), rows from ctl[5].
	ctl[0] = 8
	p2 := p
	p2.RowsWord, p2.SlotXor, p2.WriteOut = 5, 1, 0
	var j2 job
	c = j2.buf(u32Bytes(ctl))
	sb, out = j2.f32(got), j2.poison(len(want))
	j2.launch(t, "lithos_gdn", p2.Grid(), c, j2.buf(Record(p2)), j2.f32(q), j2.f32(k), j2.f32(v), j2.f32(beta), j2.f32(g), sb, out, sb, sb, sb, sb)
	res = j2.mustRun(t)
	closeTo(t, "gdn commit replay of 2 rows", bytesF32(res[sb])[:s.StateLen()], wantState2, 1e-5, 1e-6)
	for i, x := range bytesF32(res[out]) {
		if !math.IsNaN(float64(x)) {
			t.Fatalf("commit pass wrote output %d", i)
		}
	}
}

// TestFiberConv: the conv (one thread per channel, each chunk's window of inputs loaded once)
// against runtime/model.CausalConv1D for kernel sizes 1 (no state), 2, 4 (the models') and
// ConvMaxKernel, rows fewer than the state's (the new state partly the old), a chunk of
// CONV_NORM_CHUNK = 8 and more (11, 16); with WriteOut 0 (the commit replay) only the state is
// written.
func TestFiberConv(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	const C = 300
	for _, c := range []struct{ rows, K, out int }{{3, 4, 1}, {1, 4, 1}, {2, 4, 0}, {11, 4, 1}, {16, 4, 0}, {5, 1, 1}, {1, 2, 1}, {9, 2, 1}, {3, ConvMaxKernel, 1}, {12, ConvMaxKernel, 1}} {
		rows, K := c.rows, c.K
		x := randVec(r, rows*C, 2)
		w := randVec(r, C*K, 1)
		st := randVec(r, (K-1)*C, 2)
		want := make([]float32, rows*C)
		wantSt := make([]float32, (K-1)*C)
		if err := model.CausalConv1D(want, x, rows, st, wantSt, w, K); err != nil {
			t.Fatal(err)
		}
		state := append(append([]float32(nil), st...), make([]float32, (K-1)*C)...) // slot 0 read, slot 1 written
		if K == 1 {
			state = []float32{0} // no state: any buffer
		}
		p := ConvParams{DoneWord: NoWord, Rows: uint32(rows), RowsWord: NoWord, Channels: C, KernelSize: uint32(K), Slot: 0, SlotWord: NoWord,
			WriteOut: uint32(c.out), LdX: C, LdY: C}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		var j job
		sb, y := j.f32(state), j.poison(rows*C)
		j.launch(t, "lithos_conv", p.Grid(), j.buf(zeroCtl), j.buf(Record(p)), j.f32(x), j.f32(w), sb, y, sb, sb, sb, sb, sb)
		res := j.mustRun(t)
		name := fmt.Sprintf("conv, %d rows, kernel %d, out %d", rows, K, c.out)
		if c.out != 0 {
			closeTo(t, name, bytesF32(res[y]), want, 1e-6, 1e-6)
		} else {
			for i, v := range bytesF32(res[y]) {
				if !math.IsNaN(float64(v)) {
					t.Fatalf("%s: wrote output %d", name, i)
				}
			}
		}
		if K > 1 {
			closeTo(t, name+": new state", bytesF32(res[sb])[(K-1)*C:], wantSt, 0, 0)
			closeTo(t, name+": old state", bytesF32(res[sb])[:(K-1)*C], st, 0, 0)
		}
	}
}

// TestFiberConvOrder: the taps are summed in ascending order from 0, as runtime/model's
// CausalConv1D (and the kernel before its inputs were loaded per chunk): with inputs 2²⁷, −2²⁷,
// 1, 0.5 and unit weights that order gives 1.5 (every product and partial sum exact), any order
// that adds the small terms to ±2²⁷ first loses them (0 or 2²⁷ − …). One row from the state,
// and the normed path (the same sums) in a second launch.
func TestFiberConvOrder(t *testing.T) {
	const C, K = 256, 4
	st := make([]float32, (K-1)*C)
	x := make([]float32, C)
	w := make([]float32, C*K)
	for ch := 0; ch < C; ch++ {
		st[ch], st[C+ch], st[2*C+ch], x[ch] = 1<<27, -(1 << 27), 1, 0.5
		for j := 0; j < K; j++ {
			w[ch*K+j] = 1
		}
	}
	want := make([]float32, C)
	wantSt := make([]float32, (K-1)*C)
	if err := model.CausalConv1D(want, x, 1, st, wantSt, w, K); err != nil {
		t.Fatal(err)
	}
	if d := want[0] - model.SiLU(1.5); d > 1e-6 || d < -1e-6 {
		t.Fatalf("CPU conv %v, want silu(1.5) = %v: the reference does not sum in ascending order", want[0], model.SiLU(1.5))
	}
	state := append(append([]float32(nil), st...), make([]float32, (K-1)*C)...)
	p := ConvParams{DoneWord: NoWord, Rows: 1, RowsWord: NoWord, Channels: C, KernelSize: K, Slot: 0, SlotWord: NoWord, WriteOut: 1, LdX: C, LdY: C}
	var j job
	sb, y := j.f32(state), j.poison(C)
	j.launch(t, "lithos_conv", p.Grid(), j.buf(zeroCtl), j.buf(Record(p)), j.f32(x), j.f32(w), sb, y, sb, sb, sb, sb, sb)
	closeTo(t, "conv of 2²⁷, −2²⁷, 1, 0.5", bytesF32(j.mustRun(t)[y]), want, 1e-6, 1e-6)
	// The normed path: each group of 128 has unit norm after, so all outputs are equal: 1/√128.
	pn := p
	pn.NormGroups, pn.NormD, pn.NormEps, pn.NormPost = 2, 128, 1e-6, 1
	if err := pn.Validate(); err != nil {
		t.Fatal(err)
	}
	var k job
	sb2, y2 := k.f32(state), k.poison(C)
	k.launch(t, "lithos_conv", pn.Grid(), k.buf(zeroCtl), k.buf(Record(pn)), k.f32(x), k.f32(w), sb2, y2, sb2, sb2, sb2, sb2, sb2)
	got := bytesF32(k.mustRun(t)[y2])
	want2 := make([]float32, C)
	for i := range want2 {
		want2[i] = float32(1 / math.Sqrt(128))
	}
	closeTo(t, "normed conv of 2²⁷, −2²⁷, 1, 0.5", got, want2, 1e-6, 1e-7)
	// A zero sum (another order) would have made the normed values 0/√eps = 0, not 1/√128.
}

// TestFiberConvNorm: the conv with the q/k L2 norm in its launch (ConvParams.NormGroups) writes
// bit for bit what the conv and then lithos_l2norm write, for groups of 32, 64 and 128 channels
// (the golden models' 64, the 27B's 128), the first groups scaled by Post; the other channels
// and the new state are the conv's alone. 3 rows (part of one chunk of CONV_NORM_CHUNK = 8) and
// 19 (two full chunks and a part: the third reuses the first's half of the warp sums).
func TestFiberConvNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	const K = 4
	for _, c := range []struct{ rows, C, D, groups, post uint32 }{{3, 640, 128, 4, 2}, {3, 512, 64, 4, 2}, {3, 256, 32, 8, 3}, {19, 640, 128, 4, 2}, {19, 256, 32, 8, 3}} {
		rows := int(c.rows)
		x := randVec(r, rows*int(c.C), 2)
		w := randVec(r, int(c.C)*K, 1)
		st := randVec(r, (K-1)*int(c.C), 2)
		state := append(append([]float32(nil), st...), make([]float32, (K-1)*int(c.C))...)
		base := ConvParams{DoneWord: NoWord, Rows: c.rows, RowsWord: NoWord, Channels: c.C, KernelSize: K, Slot: 0, SlotWord: NoWord,
			WriteOut: 1, LdX: c.C, LdY: c.C}
		l2 := L2NormParams{DoneWord: NoWord, Rows: c.rows, RowsWord: NoWord, Groups: c.groups, D: c.D, Ld: c.C, Eps: 1e-6,
			Post: float32(1 / math.Sqrt(float64(c.D))), PostGroups: c.post}
		var j job
		sb, y := j.f32(state), j.poison(rows*int(c.C))
		j.launch(t, "lithos_conv", base.Grid(), j.buf(zeroCtl), j.buf(Record(base)), j.f32(x), j.f32(w), sb, y, sb, sb, sb, sb, sb)
		j.launch(t, "lithos_l2norm", l2.Grid(), j.buf(zeroCtl), j.buf(Record(l2)), y)
		res := j.mustRun(t)
		want, wantSt := bytesF32(res[y]), bytesF32(res[sb])

		fused := base
		fused.NormGroups, fused.NormD, fused.NormPostGroups, fused.NormEps, fused.NormPost = c.groups, c.D, c.post, l2.Eps, l2.Post
		if err := fused.Validate(); err != nil {
			t.Fatal(err)
		}
		var k job
		sb2, y2 := k.f32(state), k.poison(rows*int(c.C))
		k.launch(t, "lithos_conv", fused.Grid(), k.buf(zeroCtl), k.buf(Record(fused)), k.f32(x), k.f32(w), sb2, y2, sb2, sb2, sb2, sb2, sb2)
		res2 := k.mustRun(t)
		name := fmt.Sprintf("conv + L2 norm, %d rows, groups of %d", rows, c.D)
		closeTo(t, name, bytesF32(res2[y2]), want, 0, 0)
		closeTo(t, name+": new state", bytesF32(res2[sb2]), wantSt, 0, 0)
		// The normalized groups have unit norm (times Post): the norm ran.
		g := bytesF32(res2[y2])[:c.D]
		var ss float64
		for _, v := range g {
			ss += float64(v) * float64(v)
		}
		if d := ss*float64(c.D) - 1; d > 1e-4 || d < -1e-4 {
			t.Fatalf("%s: the first group's Σy²·D = %v, want 1", name, ss*float64(c.D))
		}
	}
}

// TestFiberConvAB: the conv with the in_proj_ab product in its launch (ConvParams.ABOut)
// writes the conv's outputs and state bit for bit as the conv alone, and the product of the BF16
// weights with the rows — RMSNormed first with ABNorm — times the row scales, within float32
// rounding of a float64 sum over runtime/model.RMSNorm's rows: 3 rows (part of one chunk of CONV_AB_ROWS = 8) and 11
// (a chunk and a part), the rows strided. 300 inputs (not a multiple of the threads) with rows of
// 304 and 10 outputs (the last threadgroup's 2 of 4) read the inputs, the norm weights and the
// BF16 weights as 16- and 8-byte loads; 302 inputs end inside a quad, so the weights' rows are
// not 8-byte multiples (the element-wise weight loads, with 12 outputs so that the last row ends
// at the fiber runtime's inaccessible page: a load past it faults), and rows of 306 inputs the
// element-wise input loads. 3,078 inputs are 770 quads, more than a thread's one at 300: with
// CONV_AB_QUADS 1, 2 and 3 (4, 2 and 2 passes, a thread's second and third slots filled) the
// same bits (a loop that takes a quad twice or skips one fails).
func TestFiberConvAB(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	const C, K, lday = 512, 4, 12
	for _, c := range []struct {
		rows            int
		norm            uint32
		nin, ldax, nout int
	}{{3, 0, 300, 304, 10}, {3, 1, 302, 306, 12}, {11, 1, 300, 304, 10}, {11, 0, 302, 304, 12}, {11, 1, 302, 306, 12},
		{3, 1, 3078, 3080, 12}} {
		rows, nin, ldax, nout := c.rows, c.nin, c.ldax, c.nout
		x := randVec(r, rows*C, 2)
		w := randVec(r, C*K, 1)
		st := randVec(r, (K-1)*C, 2)
		state := append(append([]float32(nil), st...), make([]float32, (K-1)*C)...)
		ax := randVec(r, rows*ldax, 3)
		nw := randVec(r, nin, 1)
		rs := randVec(r, nout, 2)
		aw := make([]byte, 2*nout*nin)
		awf := make([]float32, nout*nin)
		for i := range awf {
			h := bf16.FromFloat32(float32(r.NormFloat64()) * 0.1)
			binary.LittleEndian.PutUint16(aw[2*i:], h)
			awf[i] = bf16.ToFloat32(h)
		}
		base := ConvParams{DoneWord: NoWord, Rows: uint32(rows), RowsWord: NoWord, Channels: C, KernelSize: K, Slot: 0, SlotWord: NoWord,
			WriteOut: 1, LdX: C, LdY: C}
		var j job
		sb, y := j.f32(state), j.poison(rows*C)
		j.launch(t, "lithos_conv", base.Grid(), j.buf(zeroCtl), j.buf(Record(base)), j.f32(x), j.f32(w), sb, y, sb, sb, sb, sb, sb)
		res := j.mustRun(t)
		want, wantSt := bytesF32(res[y]), bytesF32(res[sb])

		p := base
		p.ABOut, p.ABIn, p.ABLdX, p.ABLdY, p.ABNorm = uint32(nout), uint32(nin), uint32(ldax), lday, c.norm
		if c.norm != 0 {
			p.ABEps = 1e-6
		}
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		if g := p.Grid(); g[0] != C/256+3 {
			t.Fatalf("grid %v, want %d threadgroups (the conv's 2, then 3 of up to 4 outputs each)", g, C/256+3)
		}
		var k job
		sb2, y2, ay := k.f32(state), k.poison(rows*C), k.poison(rows*lday)
		k.launch(t, "lithos_conv", p.Grid(), k.buf(zeroCtl), k.buf(Record(p)), k.f32(x), k.f32(w), sb2, y2, k.f32(ax), k.buf(aw), k.f32(nw), k.f32(rs), ay)
		res2 := k.mustRun(t)
		name := fmt.Sprintf("conv + in_proj_ab, %d rows, norm %d, %d inputs in rows of %d", rows, c.norm, nin, ldax)
		// CONV_AB_QUADS 3 (two passes over the 27B's inputs instead of three) and 1: each
		// thread adds the same quads in the same order, so the same bits.
		for _, d := range []string{"CONV_AB_QUADS 3u", "CONV_AB_QUADS 1u"} {
			r3, err := k.runSchedules(t, mmaFiberExeDefines(t, d))
			if err != nil {
				t.Fatalf("%s, %s: %v", name, d, err)
			}
			if !bytes.Equal(r3[ay], res2[ay]) {
				t.Fatalf("%s, %s: in_proj_ab's outputs differ from CONV_AB_QUADS 2's", name, d)
			}
		}
		closeTo(t, name+": conv", bytesF32(res2[y2]), want, 0, 0)
		closeTo(t, name+": new state", bytesF32(res2[sb2]), wantSt, 0, 0)

		// The reference: the rows (normed), then float64 dot products rounded once.
		xr := make([]float32, rows*nin)
		for i := 0; i < rows; i++ {
			copy(xr[i*nin:], ax[i*ldax:i*ldax+nin])
		}
		if c.norm != 0 {
			model.RMSNorm(xr, xr, nw, rows, p.ABEps)
		}
		got := bytesF32(res2[ay])
		wantY := make([]float32, 0, rows*nout)
		gotY := make([]float32, 0, rows*nout)
		for i := 0; i < rows; i++ {
			for o := 0; o < nout; o++ {
				var d float64
				for kk := 0; kk < nin; kk++ {
					d += float64(xr[i*nin+kk]) * float64(awf[o*nin+kk])
				}
				wantY = append(wantY, float32(d)*rs[o])
				gotY = append(gotY, got[i*lday+o])
			}
			for o := nout; o < lday; o++ {
				if !math.IsNaN(float64(got[i*lday+o])) {
					t.Fatalf("%s: ay[%d, %d] = %v past ABOut, want it untouched", name, i, o, got[i*lday+o])
				}
			}
		}
		closeTo(t, name+": in_proj_ab", gotY, wantY, 1e-5, 1e-5)
	}
}

// TestFiberAttention: the KV append, the partials and the merge of 3 causal rows against
// runtime/model.Attend, at a head width of 48 and at 264 (past the partial's ATTN_HQ·32 = 256
// elements per key in registers, so its loop over the rest runs too).
func TestFiberAttention(t *testing.T) {
	for _, hd := range []int{48, 264} {
		t.Run(fmt.Sprintf("head_dim%d", hd), func(t *testing.T) { testFiberAttention(t, hd) })
	}
}

func testFiberAttention(t *testing.T, hd int) {
	r := rand.New(rand.NewPCG(25, uint64(hd)))
	s := model.AttnShape{Heads: 4, KVHeads: 2, HeadDim: hd}
	const rows, p0, part, capacity = 3, 70, 32, 80
	kvRow := s.KVHeads * s.HeadDim
	kc := randVec(r, capacity*kvRow, 1)
	vc := randVec(r, capacity*kvRow, 1)
	newK := randVec(r, rows*kvRow, 1)
	newV := randVec(r, rows*kvRow, 1)
	q := randVec(r, rows*s.Heads*s.HeadDim, 1)
	scale := float32(1 / math.Sqrt(float64(s.HeadDim)))
	// Reference: the rows' keys written at p0…, then attention.
	rk, rv := append([]float32(nil), kc...), append([]float32(nil), vc...)
	copy(rk[p0*kvRow:], newK)
	copy(rv[p0*kvRow:], newV)
	want := make([]float32, rows*s.Heads*s.HeadDim)
	if err := model.Attend(s, want, q, rows, p0, rk, rv, scale, model.DefaultKeyPartition); err != nil {
		t.Fatal(err)
	}
	ctl := make([]uint32, 64)
	ctl[1] = p0
	parts := uint32((p0 + rows + part - 1) / part)
	kp := KVAppendParams{DoneWord: NoWord, Rows: rows, RowsWord: NoWord, PosWord: 1, Width: uint32(kvRow), LdK: uint32(kvRow), LdV: uint32(kvRow), LdC: uint32(kvRow),
		Capacity: capacity}
	ap := AttnParams{DoneWord: NoWord, Rows: rows, RowsWord: NoWord, PosWord: 1, Heads: 4, KVHeads: 2, HeadDim: uint32(hd),
		LdQ: uint32(4 * hd), LdO: uint32(4 * hd), LdKV: uint32(kvRow), Part: part, Parts: parts, Scale: scale}
	var j job
	c := j.buf(u32Bytes(ctl))
	kb, vb := j.f32(kc), j.f32(vc)
	n := rows * s.Heads * int(parts)
	pm, pl, po, out := j.poison(n), j.poison(n), j.poison(n*s.HeadDim), j.poison(len(want))
	j.launch(t, "lithos_kv_append", kp.Grid(), c, j.buf(Record(kp)), j.f32(newK), j.f32(newV), kb, vb)
	rec := j.buf(Record(ap))
	j.launch(t, "lithos_attn_partial", ap.GridPartial(), c, rec, j.f32(q), kb, vb, pm, pl, po)
	j.launch(t, "lithos_attn_merge", ap.GridMerge(), c, rec, pm, pl, po, out, out)
	res := j.mustRun(t)
	closeTo(t, "kv cache", bytesF32(res[kb]), rk, 0, 0)
	// Different partitions (32 vs 64 keys) and dot-product orders: float32 rounding of softmax
	// weights in [0, 1] times |v| ≤ 1.
	closeTo(t, "attention", bytesF32(res[out]), want, 1e-5, 2e-6)
}

// TestFiberAttentionBlock: Block 1 (the drafter's non-causal block): every one of 5 rows attends
// keys 0 … P, against the CPU reference row by row (model.Attend of one row at position P), and
// each row bit for bit the causal 1-row launch of the same query at P.
func TestFiberAttentionBlock(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	s := model.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 48}
	const rows, last, part, capacity = 5, 75, 32, 80
	kvRow, qRow := s.KVHeads*s.HeadDim, s.Heads*s.HeadDim
	kc := randVec(r, capacity*kvRow, 1)
	vc := randVec(r, capacity*kvRow, 1)
	q := randVec(r, rows*qRow, 1)
	scale := float32(1 / math.Sqrt(float64(s.HeadDim)))
	want := make([]float32, rows*qRow)
	for row := range rows {
		if err := model.Attend(s, want[row*qRow:(row+1)*qRow], q[row*qRow:(row+1)*qRow], 1, last, kc, vc, scale, model.DefaultKeyPartition); err != nil {
			t.Fatal(err)
		}
	}
	ctl := make([]uint32, 64)
	ctl[1] = last
	parts := uint32((capacity + part - 1) / part)
	run := func(n int, block uint32, qs []float32) []float32 {
		ap := AttnParams{DoneWord: NoWord, Rows: uint32(n), RowsWord: NoWord, PosWord: 1, Heads: 4, KVHeads: 2, HeadDim: 48,
			LdQ: uint32(qRow), LdO: uint32(qRow), LdKV: uint32(kvRow), Part: part, Parts: parts, Scale: scale, Block: block}
		return runAttention(t, ap, ctl, kc, vc, qs)
	}
	got := run(rows, 1, q)
	closeTo(t, "block attention", got, want, 1e-5, 2e-6)
	for row := range rows {
		one := run(1, 0, q[row*qRow:(row+1)*qRow])
		for i := range one {
			if math.Float32bits(one[i]) != math.Float32bits(got[row*qRow+i]) {
				t.Fatalf("row %d: out[%d] = %g in the block, %g as a 1-row launch", row, i, got[row*qRow+i], one[i])
			}
		}
	}
	// A block past the partitions is refused: Pos = Parts·Part.
	bad := AttnParams{DoneWord: NoWord, Rows: 2, RowsWord: NoWord, Pos: parts * part, PosWord: NoWord, Heads: 4, KVHeads: 2, HeadDim: 48,
		LdQ: uint32(qRow), LdO: uint32(qRow), LdKV: uint32(kvRow), Part: part, Parts: parts, Scale: scale, Block: 1}
	if err := bad.Validate(); err == nil {
		t.Fatal("Validate accepted a block at Pos = Parts·Part")
	}
}

// runAttention validates ap, then runs lithos_attn_partial and lithos_attn_merge over the
// float32 caches kc, vc with queries q ([ap.Rows, LdQ]) and the control words ctl, the scratch
// and out poisoned, and returns out ([ap.Rows, LdO]).
func runAttention(t *testing.T, ap AttnParams, ctl []uint32, kc, vc, q []float32) []float32 {
	t.Helper()
	if err := ap.Validate(); err != nil {
		t.Fatal(err)
	}
	var j job
	c := j.buf(u32Bytes(ctl))
	kb, vb := j.f32(kc), j.f32(vc)
	m := int(ap.Rows * ap.Heads * ap.Parts)
	pm, pl, po, out := j.poison(m), j.poison(m), j.poison(m*int(ap.HeadDim)), j.poison(int(ap.Rows*ap.LdO))
	rec := j.buf(Record(ap))
	j.launch(t, "lithos_attn_partial", ap.GridPartial(), c, rec, j.f32(q), kb, vb, pm, pl, po)
	j.launch(t, "lithos_attn_merge", ap.GridMerge(), c, rec, pm, pl, po, out, out)
	return bytesF32(j.mustRun(t)[out])
}

// TestFiberAttentionRows: the partials' threadgroups of 16 queries of one KV head (3 heads of
// a KV head here, so a threadgroup holds rows whose causal key counts differ, and its last
// slice a part of a row) against runtime/model.Attend, at 11 causal rows whose key counts in
// their last partition straddle the value loop's 32-key batches, all of them and a dynamic 7
// of them (the last slice empty); and each row bit for bit its 1-row launch at its position, as
// a speculative round's verify rows must be a decode step's.
func TestFiberAttentionRows(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	s := model.AttnShape{Heads: 6, KVHeads: 2, HeadDim: 40}
	// Partitions of 64 keys (gpu.AttnPartition): in the second, rows see 27 … 37 keys, across the
	// value loop's batches of 32.
	const rows, p0, part, capacity = 11, 90, 64, 128
	kvRow, qRow := s.KVHeads*s.HeadDim, s.Heads*s.HeadDim
	kc := randVec(r, capacity*kvRow, 1)
	vc := randVec(r, capacity*kvRow, 1)
	q := randVec(r, rows*qRow, 1)
	scale := float32(1 / math.Sqrt(float64(s.HeadDim)))
	parts := uint32(capacity / part)
	run := func(n, dyn int, pos uint32, qs []float32) []float32 {
		ctl := make([]uint32, 64)
		ctl[1], ctl[2] = pos, uint32(dyn)
		ap := AttnParams{DoneWord: NoWord, Rows: uint32(n), RowsWord: 2, PosWord: 1, Heads: 6, KVHeads: 2, HeadDim: 40,
			LdQ: uint32(qRow), LdO: uint32(qRow), LdKV: uint32(kvRow), Part: part, Parts: parts, Scale: scale}
		if n == rows && ap.AttnSlices() != 3 {
			t.Fatalf("%d slices of 16 queries for 3·%d, want 3", ap.AttnSlices(), n)
		}
		return runAttention(t, ap, ctl, kc, vc, qs)
	}
	for _, dyn := range []int{rows, 7} {
		want := make([]float32, dyn*qRow)
		if err := model.Attend(s, want, q[:dyn*qRow], dyn, p0, kc, vc, scale, model.DefaultKeyPartition); err != nil {
			t.Fatal(err)
		}
		got := run(rows, dyn, p0, q)
		closeTo(t, fmt.Sprintf("%d of %d rows", dyn, rows), got[:dyn*qRow], want, 1e-5, 2e-6)
		for i := dyn * qRow; i < len(got); i++ {
			if !math.IsNaN(float64(got[i])) {
				t.Fatalf("%d of %d rows: out[%d] = %g past the dynamic rows, want it untouched", dyn, rows, i, got[i])
			}
		}
		if dyn != rows {
			continue
		}
		for row := range rows {
			one := run(1, 1, uint32(p0+row), q[row*qRow:(row+1)*qRow])
			for i := range one {
				if math.Float32bits(one[i]) != math.Float32bits(got[row*qRow+i]) {
					t.Fatalf("row %d: out[%d] = %g among %d rows, %g as a 1-row launch", row, i, got[row*qRow+i], rows, one[i])
				}
			}
		}
	}
}

func TestFiberGatherL2(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	t.Run("gather_bf16", func(t *testing.T) {
		const vocab, width = 50, 70
		tab := make([]byte, 2*vocab*width)
		for i := 0; i < len(tab); i += 2 {
			binary.LittleEndian.PutUint16(tab[i:], bf16.FromFloat32(float32(r.NormFloat64())))
		}
		ctl := make([]uint32, 64)
		ids := []int32{3, 49, -1, 50}
		for i, id := range ids {
			ctl[3+i] = uint32(id) // Pending words
		}
		p := GatherParams{DoneWord: NoWord, Rows: 4, RowsWord: NoWord, Width: width, Vocab: vocab, IdsOff: 3, DType: 1, LdY: width}
		var j job
		c := j.buf(u32Bytes(ctl))
		y := j.poison(4 * width)
		j.launch(t, "lithos_gather", p.Grid(), c, j.buf(Record(p)), c, j.buf(tab), y)
		got := bytesF32(j.mustRun(t)[y])
		want := make([]float32, 4*width)
		for row, id := range ids {
			if id >= 0 && id < vocab {
				if err := bf16.Decode(want[row*width:(row+1)*width], tab[2*int(id)*width:2*(int(id)+1)*width]); err != nil {
					t.Fatal(err)
				}
			}
		}
		closeTo(t, "gather", got, want, 0, 0)
	})
	t.Run("l2norm", func(t *testing.T) {
		// Groups 0 and 1 scaled by post, group 2 by 1 (the GDN queries, then the keys), and
		// every group scaled (PostGroups = Groups).
		const rows, groups, d = 2, 3, 128
		x := randVec(r, rows*groups*d, 2)
		post := float32(1 / math.Sqrt(d))
		for _, pg := range []uint32{2, groups} {
			want := append([]float32(nil), x...)
			for row := 0; row < rows; row++ {
				for g := 0; g < groups; g++ {
					s := float32(1)
					if uint32(g) < pg {
						s = post
					}
					model.L2Normalize(want[(row*groups+g)*d:(row*groups+g+1)*d], d, 1e-6, s)
				}
			}
			p := L2NormParams{DoneWord: NoWord, Rows: rows, RowsWord: NoWord, Groups: groups, D: d, Ld: groups * d, Eps: 1e-6, Post: post, PostGroups: pg}
			var j job
			xb := j.f32(x)
			j.launch(t, "lithos_l2norm", p.Grid(), j.buf(zeroCtl), j.buf(Record(p)), xb)
			closeTo(t, fmt.Sprintf("l2norm, PostGroups %d", pg), bytesF32(j.mustRun(t)[xb]), want, 2e-6, 1e-9)
		}
	})
}

// stepWords finds the word index of each StepState field by marshalling a state whose fields
// hold distinct values: the test follows runtime/backend's layout, whatever it is.
func stepWords(t *testing.T, tmax int) (StepParams, *backend.StepState) {
	t.Helper()
	ss := backend.NewStepState(tmax, 0)
	ss.Step, ss.Position, ss.Rows = 1001, 1002, 1003
	for i := range ss.Pending {
		ss.Pending[i] = int32(2000 + i)
	}
	ss.Anchor, ss.Accepted, ss.Committed, ss.PrefillLeft = 1004, 1005, 1006, 1007
	ss.Done, ss.Error, ss.RingHead, ss.RingTail, ss.StopAt = 1008, 1009, 1010, 1011, 1012
	b, err := ss.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	w := bytesU32(b)
	find := func(v uint32) uint32 {
		for i, x := range w {
			if x == v {
				return uint32(i)
			}
		}
		t.Fatalf("step state: value %d not found", v)
		return 0
	}
	p := StepParams{DoneWord: NoWord, WStep: find(1001), WPosition: find(1002), WRows: find(1003), WPending: find(2000),
		WAnchor: find(1004), WAccepted: find(1005), WCommitted: find(1006), WPrefillLeft: find(1007), WDone: find(1008),
		WError: find(1009), WRingHead: find(1010), WRingTail: find(1011), WStopAt: find(1012)}
	return p, backend.NewStepState(tmax, 0)
}

// refAccept is the CPU session's greedy round after the verify pass (runtime/backend/cpu
// session.go: accept scan, ring pushes stopping after an EOS or at StopAt, commit), in Go.
func refAccept(ss *backend.StepState, ring *backend.Ring, targets []int32, eos []int32) {
	if ss.Done != 0 {
		ss.Committed, ss.Accepted = 0, 0
		return
	}
	L := int(ss.Rows) - 1
	var toks []int32
	a := 0
	for k := 0; k <= L; k++ {
		toks = append(toks, targets[k])
		if k == L || targets[k] != ss.Pending[1+k] {
			break
		}
		a++
	}
	c := 0
	for _, tok := range toks {
		if !ring.Push(ss, tok) {
			break
		}
		c++
		stop := ss.StopAt != 0 && ss.RingHead >= ss.StopAt
		for _, e := range eos {
			stop = stop || e == tok
		}
		if stop {
			ss.Done = 1
			break
		}
	}
	ss.Accepted, ss.Committed = uint32(a), uint32(c)
	if c == 0 {
		return
	}
	ss.Position += uint32(c)
	ss.Step++
	ss.Anchor = toks[c-1]
}

func TestFiberStepAccept(t *testing.T) {
	const tmax, ringCap = 8, 6
	eos := []int32{99}
	type tc struct {
		name    string
		drafts  []int32 // Pending[1…]
		targets []int32
		head    uint32 // RingHead (tail 0)
		stopAt  uint32
		done    uint32
	}
	cases := []tc{
		{"all accepted", []int32{5, 6, 7}, []int32{5, 6, 7, 8}, 0, 0, 0},
		{"first rejected", []int32{5, 6, 7}, []int32{4, 6, 7, 8}, 0, 0, 0},
		{"two accepted", []int32{5, 6, 7}, []int32{5, 6, 1, 8}, 0, 0, 0},
		{"eos inside", []int32{5, 99, 7}, []int32{5, 99, 7, 8}, 0, 0, 0},
		{"stop at", []int32{5, 6, 7}, []int32{5, 6, 7, 8}, 1, 3, 0},
		{"ring fills", []int32{5, 6, 7}, []int32{5, 6, 7, 8}, 4, 0, 0},
		{"ring full", []int32{5}, []int32{5, 6}, 6, 0, 0},
		{"done already", []int32{5}, []int32{5, 6}, 0, 0, 1},
		{"plain decode", nil, []int32{42}, 2, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, ss := stepWords(t, tmax)
			p.Mode, p.RingCap, p.EOSCount = StepAccept, ringCap, uint32(len(eos))
			p.Capacity, p.Block = 64, tmax-1 // an accept verifies 1 … 1 + Block rows (GuardStepRows)
			ss.Step, ss.Position, ss.Rows, ss.Anchor = 3, 10, uint32(1+len(c.drafts)), 4
			ss.Pending[0] = 4
			copy(ss.Pending[1:], c.drafts)
			ss.RingHead, ss.StopAt, ss.Done, ss.Committed = c.head, c.stopAt, c.done, 9
			ring := backend.NewRing(ringCap)
			ctlBytes, _ := ss.MarshalBinary()
			refAccept(ss, ring, c.targets, eos)
			want, _ := ss.MarshalBinary()

			var j job
			cb := j.buf(ctlBytes)
			rb := j.buf(make([]byte, 8*ringCap))
			j.launch(t, "lithos_step", p.Grid(), cb, j.buf(Record(p)), j.buf(i32Bytes(c.targets)), j.buf(i32Bytes(eos)), rb)
			res := j.mustRun(t)
			if got := bytesU32(res[cb]); !equalU32(got, bytesU32(want)) {
				t.Fatalf("step state\n got %v\nwant %v", got, bytesU32(want))
			}
			// The ring: the reference's tokens (drained from the Go ring) in the kernel's slots as
			// (sequence << 32) | token.
			w1 := ring.Drain(&backend.StepState{Pending: make([]int32, tmax), RingTail: c.head}, nil)
			for i, tok := range w1 {
				h := c.head + uint32(i)
				if got := binary.LittleEndian.Uint64(res[rb][8*(h%ringCap):]); got != uint64(h+1)<<32|uint64(uint32(tok)) {
					t.Fatalf("ring slot %d = %#x, want sequence %d token %d", h%ringCap, got, h+1, tok)
				}
			}
			t.Logf("accepted %d, committed %d, done %d, ring %v", ss.Accepted, ss.Committed, ss.Done, w1)
		})
	}
}

func TestFiberStepBeginAndPrefill(t *testing.T) {
	p, ss := stepWords(t, 8)
	p.Mode, p.Capacity, p.Block, p.RingCap = StepBegin, 20, 7, 4
	ss.Position, ss.Anchor = 15, 33
	b, _ := ss.MarshalBinary()
	var j job
	cb := j.buf(b)
	j.launch(t, "lithos_step", p.Grid(), cb, j.buf(Record(p)), j.buf(i32Bytes([]int32{0})), j.buf(i32Bytes([]int32{0})), j.buf(make([]byte, 32)))
	got := bytesU32(j.mustRun(t)[cb])
	if got[p.WRows] != 5 || got[p.WPending] != 33 {
		t.Fatalf("begin: rows %d pending[0] %d, want 5 (capacity 20 − position 15) and the anchor 33", got[p.WRows], got[p.WPending])
	}
	// Prefill: the last chunk of 3 rows commits and pushes targets[0].
	p.Mode = StepPrefill
	ss.Position, ss.Rows, ss.PrefillLeft, ss.Step = 4, 3, 0, 1
	b, _ = ss.MarshalBinary()
	var j2 job
	cb = j2.buf(b)
	rb := j2.buf(make([]byte, 32))
	j2.launch(t, "lithos_step", p.Grid(), cb, j2.buf(Record(p)), j2.buf(i32Bytes([]int32{77})), j2.buf(i32Bytes([]int32{0})), rb)
	res := j2.mustRun(t)
	got = bytesU32(res[cb])
	if got[p.WPosition] != 7 || got[p.WStep] != 2 || got[p.WCommitted] != 3 || got[p.WAnchor] != 77 || got[p.WRingHead] != 1 ||
		binary.LittleEndian.Uint64(res[rb]) != 1<<32|77 {
		t.Fatalf("prefill: position %d step %d committed %d anchor %d head %d ring %#x", got[p.WPosition], got[p.WStep],
			got[p.WCommitted], got[p.WAnchor], got[p.WRingHead], binary.LittleEndian.Uint64(res[rb]))
	}
}

// TestFiberMarkovChain runs the DSpark Markov head of a block on the device side: for k = 0…B−1,
// gather W1[prev] (BF16 [V, r]) → W2 (NVFP4 [V, r], BLM) × that row added onto the base logits
// row k (EpiAdd) → argmax → draft k, written into the step state's Pending[1+k] where the next
// gather reads it (prev_0 = the anchor in Pending[0]). Compared with the same chain in Go over
// the CPU backend (cpu.Packed, model.Argmax).
func TestFiberMarkovChain(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	const V, R, B = 96, 64, 3
	c := newBLMCase(t, r, formats.NVFP4, V, R, 0, false)
	w1 := make([]byte, 2*V*R)
	w1f := make([]float32, V*R)
	for i := range w1f {
		h := bf16.FromFloat32(float32(r.NormFloat64()))
		binary.LittleEndian.PutUint16(w1[2*i:], h)
		w1f[i] = bf16.ToFloat32(h)
	}
	base := randVec(r, B*V, 4)
	const anchor = 17
	// Go reference.
	m, _ := c.ref.All()
	logits := append([]float32(nil), base...)
	prev := int32(anchor)
	var want []int32
	bias := make([]float32, V)
	for k := 0; k < B; k++ {
		if err := m.Mul(bias, w1f[int(prev)*R:(int(prev)+1)*R], 1); err != nil {
			t.Fatal(err)
		}
		row := logits[k*V : (k+1)*V]
		model.Add(row, bias)
		prev = int32(model.Argmax(row))
		want = append(want, prev)
	}
	// Device chain.
	_, ss := stepWords(t, 8)
	ss.Pending[0] = anchor
	ctlB, _ := ss.MarshalBinary()
	pw, _ := stepWords(t, 8)
	var j job
	cb := j.buf(ctlB)
	xb := j.poison(R)
	w1b, w2b, sb := j.buf(w1), j.buf(c.packed), j.f32(c.scales)
	am := NewArgmaxParams(1, V)
	pv, pi := j.poison(int(am.Parts)), j.poison(int(am.Parts))
	kern, _ := BLMKernel(formats.NVFP4, 1)
	for k := 0; k < B; k++ {
		gp := GatherParams{DoneWord: NoWord, Rows: 1, RowsWord: NoWord, Width: R, Vocab: V, IdsOff: pw.WPending + uint32(k), DType: 1, LdY: R}
		j.launch(t, "lithos_gather", gp.Grid(), cb, j.buf(Record(gp)), cb, w1b, xb)
		bp, _ := NewBLMParams(c.g, 1, EpiAdd)
		// Base logits row k in its own buffer (a job has no buffer views): W2·x is added onto it.
		row := j.f32(base[k*V : (k+1)*V])
		j.launch(t, kern, bp.Grid(), cb, j.buf(Record(bp)), w2b, sb, xb, row)
		ap := am
		ap.OutOff = pw.WPending + 1 + uint32(k)
		rec := j.buf(Record(ap))
		j.launch(t, "lithos_argmax_partial", ap.GridPartial(), cb, rec, row, pv, pi)
		j.launch(t, "lithos_argmax_final", ap.GridFinal(), cb, rec, pv, pi, cb)
	}
	got := bytesU32(j.mustRun(t)[cb])
	for k := 0; k < B; k++ {
		if int32(got[pw.WPending+1+uint32(k)]) != want[k] {
			t.Fatalf("draft %d = %d, want %d (all: %v)", k, int32(got[pw.WPending+1+uint32(k)]), want[k], want)
		}
	}
	t.Logf("drafts %v after anchor %d", want, anchor)
}

func i32Bytes(v []int32) []byte {
	b := make([]byte, 4*max(len(v), 1))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFiberGDNShapes: the register-resident GDN step (gdnLanesPerColumn = 4 lanes per state
// column, ⌈KDim/4⌉ rows per lane, the threadgroup memory's slots past them zero) against
// runtime/model.GDNRecurrent on shapes the 27B does not have: KDim not a multiple of 4, KDim 1
// and 3 (lanes with no rows), 5 and 13 (a lane with one), KDim at the limit 128 (the full GDN_KS
// array) and 127, VDim below a simdgroup's 8 columns and past a threadgroup's 32; 3 rows, 11 and 16 (past
// the GDN_RB = 8 rows staged in threadgroup memory at a time).
func TestFiberGDNShapes(t *testing.T) {
	for _, sh := range [][3]int{{5, 7, 3}, {13, 33, 3}, {1, 3, 3}, {3, 40, 3}, {6, 32, 3}, {9, 2, 3}, {128, 9, 3}, {127, 65, 3}, {128, 40, 11}, {13, 33, 11}, {128, 17, 16}} {
		t.Run(fmt.Sprint(sh), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(sh[0]), uint64(sh[1])))
			s := model.GDNShape{KHeads: 1, VHeads: 2, KDim: sh[0], VDim: sh[1]}
			rows := sh[2]
			q := randVec(r, rows*s.KHeads*s.KDim, 0.3)
			k := randVec(r, rows*s.KHeads*s.KDim, 0.3)
			v := randVec(r, rows*s.VHeads*s.VDim, 1)
			beta := randVec(r, rows*s.VHeads, 0.5)
			g := randVec(r, rows*s.VHeads, 1)
			for i := range beta {
				beta[i] = 0.5 + beta[i]
				g[i] = -float32(math.Abs(float64(g[i])))
			}
			st0 := randVec(r, s.StateLen(), 1)
			want := make([]float32, rows*s.VHeads*s.VDim)
			wantState := make([]float32, s.StateLen())
			if err := model.GDNRecurrent(s, want, q, k, v, beta, g, rows, st0, wantState); err != nil {
				t.Fatal(err)
			}
			ctl := make([]uint32, 64)
			state := make([]float32, 2*s.StateLen())
			copy(state, st0)
			for i := range state[s.StateLen():] {
				state[s.StateLen()+i] = float32(math.NaN())
			}
			kd, vd := uint32(s.KHeads*s.KDim), uint32(s.VHeads*s.VDim)
			p := GDNParams{DoneWord: NoWord, Rows: uint32(rows), RowsWord: NoWord, KHeads: uint32(s.KHeads), VHeads: uint32(s.VHeads), KDim: uint32(s.KDim), VDim: uint32(s.VDim),
				Slot: 0, SlotWord: NoWord, WriteOut: 1, LdQK: kd, LdV: vd, LdGate: uint32(s.VHeads), LdOut: vd}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			var j job
			c := j.buf(u32Bytes(ctl))
			sb, out := j.f32(state), j.poison(len(want))
			j.launch(t, "lithos_gdn", p.Grid(), c, j.buf(Record(p)), j.f32(q), j.f32(k), j.f32(v), j.f32(beta), j.f32(g), sb, out, sb, sb, sb, sb)
			res := j.mustRun(t)
			closeTo(t, "out", bytesF32(res[out]), want, 1e-5, 1e-6)
			closeTo(t, "state", bytesF32(res[sb])[s.StateLen():], wantState, 1e-5, 1e-6)
		})
	}
}

// TestGDNRowsPerLane: ops/gdn.kern takes its lanes per column and rows per lane from the
// registry (GDN_LANES, GDN_KS: kernels.gdnLanesPerColumn, gdnRowsPerLane), which Validate's
// KDim ≤ GDNMaxKDim rule and Grid use; the lanes must divide GDNMaxKDim (fewer rows would drop
// state rows silently) and be a power of two within a simdgroup (the xor shuffles), and the
// staging must give every thread whole entries of q and k (which rules out 2 lanes).
func TestGDNRowsPerLane(t *testing.T) {
	k, _ := Lookup("lithos_gdn")
	if k.Defines["GDN_LANES"] != fmt.Sprintf("%du", gdnLanesPerColumn) || k.Defines["GDN_KS"] != fmt.Sprintf("%du", gdnRowsPerLane) {
		t.Fatalf("lithos_gdn defines %v, want GDN_LANES %d, GDN_KS %d", k.Defines, gdnLanesPerColumn, gdnRowsPerLane)
	}
	h, body := splitTemplate("gdn")
	for _, d := range []string{"GDN_LANES", "GDN_KS"} {
		if strings.Contains(h, "#define "+d+" ") {
			t.Fatalf("ops/gdn.kern defines %s itself; it comes from the registry", d)
		}
		if !strings.Contains(body, d) {
			t.Fatalf("ops/gdn.kern's body does not use %s", d)
		}
	}
	if GDNMaxKDim%gdnLanesPerColumn != 0 || gdnLanesPerColumn&(gdnLanesPerColumn-1) != 0 || gdnLanesPerColumn < 4 || gdnLanesPerColumn > 32 {
		t.Fatalf("%d lanes: want a power of two in [4, 32] that divides %d", gdnLanesPerColumn, GDNMaxKDim)
	}
	if pk := gdnLanesPerColumn * (gdnRowsPerLane + 4); 8*pk%gdnThreads != 0 || !strings.Contains(h, "#define GDN_RB 8u") {
		t.Fatalf("GDN_RB·GDN_PK = 8·%d is not a multiple of the %d threads (or GDN_RB is not 8)", pk, gdnThreads)
	}
	if GDNMaxKDim != 128 {
		t.Fatalf("GDNMaxKDim %d, want 128 (the 27B's linear_key_head_dim)", GDNMaxKDim)
	}
	if err := (GDNParams{Rows: 1, KHeads: 1, VHeads: 1, KDim: GDNMaxKDim + 1, VDim: 8, LdQK: GDNMaxKDim + 1, LdV: 8, LdGate: 1, LdOut: 8,
		DoneWord: NoWord, RowsWord: NoWord, SlotWord: NoWord}).Validate(); err == nil || !strings.Contains(err.Error(), "KDim") {
		t.Fatalf("Validate of KDim %d: %v, want a KDim error", GDNMaxKDim+1, err)
	}
}

// TestFiberReplayLayers: the commit replay of several GDN layers in one launch each
// (GDNParams.Layers, ConvParams.Layers: grid z, each layer's buffers a stride past the one
// before) leaves every layer's conv and recurrent state bit for bit as that layer's own launch
// does, reads the rows from the commit-rows word, and touches nothing between the layers'
// regions (the gaps hold NaN: read, they would reach a state; written, they would change).
// The conv's weights are a one-float buffer in the layered launch: the replay writes no
// outputs and so reads no taps.
func TestFiberReplayLayers(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	s := model.GDNShape{KHeads: 2, VHeads: 4, KDim: 16, VDim: 40}
	const L, rows, K = 3, 5, 4
	kd := s.KHeads * s.KDim
	cd := 2*kd + s.VHeads*s.VDim // the conv's channels: q, k, v
	nz, off := cd+96, 64         // in_proj_zqkv's rows (z first), the conv's columns from off
	// Per layer, with gaps: x (the kept in_proj_zqkv rows), the kept conv output (q, k, v), β
	// and g, the conv state [2, K−1, cd], the recurrent state [2, VHeads, KDim, VDim].
	sx, sc, sg, scs, sst := rows*nz+7, rows*cd+5, rows*s.VHeads+3, 2*(K-1)*cd+9, 2*s.StateLen()+11
	nan := float32(math.NaN())
	fill := func(n, region, stride int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = nan
			if i%stride < region {
				v[i] = scale * (2*r.Float32() - 1)
			}
		}
		return v
	}
	xs := fill(L*sx, rows*nz, sx, 2)
	kc := fill(L*sc, rows*cd, sc, 0.3)
	beta := fill(L*sg, rows*s.VHeads, sg, 0.5)
	g := fill(L*sg, rows*s.VHeads, sg, 1)
	for i := range beta {
		if i%sg < rows*s.VHeads {
			beta[i] += 0.5
			g[i] = -float32(math.Abs(float64(g[i])))
		}
	}
	cst := fill(L*scs, 2*(K-1)*cd, scs, 2)
	gst := fill(L*sst, 2*s.StateLen(), sst, 1)
	w := randVec(r, cd*K, 1)
	ctl := make([]uint32, 64)
	ctl[0] = 8 // Step: even, and SlotXor 1 → read slot 1, write slot 0
	ctl[5] = 3 // the commit-rows word: 3 of the 5 kept rows
	cv := ConvParams{DoneWord: NoWord, Rows: rows, RowsWord: 5, Channels: uint32(cd), KernelSize: K, Slot: 0, SlotWord: 0, SlotXor: 1,
		LdX: uint32(nz), LdY: uint32(cd)}
	gd := GDNParams{DoneWord: NoWord, Rows: rows, RowsWord: 5, KHeads: uint32(s.KHeads), VHeads: uint32(s.VHeads), KDim: uint32(s.KDim),
		VDim: uint32(s.VDim), Slot: 0, SlotWord: 0, SlotXor: 1, LdQK: uint32(cd), LdV: uint32(cd), LdGate: uint32(s.VHeads),
		LdOut: uint32(s.VHeads * s.VDim)}
	cvL, gdL := cv, gd
	cvL.Layers, cvL.LayerX, cvL.LayerState = L, uint32(sx), uint32(scs)
	gdL.Layers, gdL.LayerQKV, gdL.LayerGate, gdL.LayerState = L, uint32(sc), uint32(sg), uint32(sst)
	for _, v := range []validator{cv, gd, cvL, gdL} {
		if err := v.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if gdL.Grid()[2] != L || cvL.Grid()[2] != L {
		t.Fatalf("grids %v, %v: want %d layers in z", gdL.Grid(), cvL.Grid(), L)
	}
	var j job
	c := j.buf(u32Bytes(ctl))
	cb, gb := j.f32(cst), j.f32(gst)
	j.launch(t, "lithos_conv", cvL.Grid(), c, j.buf(Record(cvL)), j.f32(xs[off:]), j.f32([]float32{nan}), cb, cb, cb, cb, cb, cb, cb)
	kcb := j.f32(kc)
	j.launch(t, "lithos_gdn", gdL.Grid(), c, j.buf(Record(gdL)), kcb, j.f32(kc[kd:]), j.f32(kc[2*kd:]), j.f32(beta), j.f32(g), gb, gb,
		gb, gb, gb, gb)
	res := j.mustRun(t)
	gotC, gotG := bytesF32(res[cb]), bytesF32(res[gb])
	same := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s[%d] = %g, want %g", what, i, got[i], want[i])
			}
		}
	}
	for l := range L {
		// Layer l alone, from its own copies.
		var o job
		c := o.buf(u32Bytes(ctl))
		cb1, gb1 := o.f32(cst[l*scs:l*scs+2*(K-1)*cd]), o.f32(gst[l*sst:l*sst+2*s.StateLen()])
		o.launch(t, "lithos_conv", cv.Grid(), c, o.buf(Record(cv)), o.f32(xs[l*sx+off:(l+1)*sx]), o.f32(w), cb1, cb1, cb1, cb1, cb1, cb1, cb1)
		k1 := kc[l*sc : (l+1)*sc]
		o.launch(t, "lithos_gdn", gd.Grid(), c, o.buf(Record(gd)), o.f32(k1), o.f32(k1[kd:]), o.f32(k1[2*kd:]), o.f32(beta[l*sg:(l+1)*sg]),
			o.f32(g[l*sg:(l+1)*sg]), gb1, gb1, gb1, gb1, gb1, gb1)
		one := o.mustRun(t)
		same(fmt.Sprintf("layer %d conv state", l), gotC[l*scs:], bytesF32(one[cb1]))
		same(fmt.Sprintf("layer %d recurrent state", l), gotG[l*sst:], bytesF32(one[gb1]))
		// The read slot (1) is as it was, the written one (0) is not: the replay ran.
		same(fmt.Sprintf("layer %d conv state, read slot", l), gotC[l*scs+(K-1)*cd:], cst[l*scs+(K-1)*cd:l*scs+2*(K-1)*cd])
		if slices.Equal(gotG[l*sst:l*sst+s.StateLen()], gst[l*sst:l*sst+s.StateLen()]) {
			t.Fatalf("layer %d: the recurrent state's write slot is unchanged", l)
		}
	}
	// The gaps between the layers' states are as they were (NaN).
	for i := range gotC {
		if i%scs >= 2*(K-1)*cd && !math.IsNaN(float64(gotC[i])) {
			t.Fatalf("conv state gap [%d] = %g, want NaN (untouched)", i, gotC[i])
		}
	}
	for i := range gotG {
		if i%sst >= 2*s.StateLen() && !math.IsNaN(float64(gotG[i])) {
			t.Fatalf("recurrent state gap [%d] = %g, want NaN (untouched)", i, gotG[i])
		}
	}
	// And against the CPU: layer 2's recurrent state after its 3 committed rows.
	q2, k2, v2 := make([]float32, 3*kd), make([]float32, 3*kd), make([]float32, 3*s.VHeads*s.VDim)
	for t0 := range 3 {
		row := kc[2*sc+t0*cd:]
		copy(q2[t0*kd:], row[:kd])
		copy(k2[t0*kd:], row[kd:2*kd])
		copy(v2[t0*s.VHeads*s.VDim:], row[2*kd:cd])
	}
	want := make([]float32, s.StateLen())
	out := make([]float32, 3*s.VHeads*s.VDim)
	if err := model.GDNRecurrent(s, out, q2, k2, v2, beta[2*sg:], g[2*sg:], 3, gst[2*sst+s.StateLen():2*sst+2*s.StateLen()], want); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "layer 2's state against the CPU", gotG[2*sst:2*sst+s.StateLen()], want, 1e-5, 1e-6)
}
