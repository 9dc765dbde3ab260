package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lithos/formats"
	"lithos/formats/bf16"
	"lithos/formats/fp8"
	"lithos/pack/blm"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/model"
)

// Every op of the generated MSL run by the fiber runtime on random inputs and compared with the
// Go CPU backend (runtime/model, runtime/backend/cpu). Tolerances are per op; docs/metal.md §5
// lists them with their reasons.

func randVec(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (2*r.Float32() - 1) * scale
	}
	return v
}

// TestFiberRMSNorm: every mode against runtime/model, for a group held in registers (5120, the
// 27B's hidden size: 256 < n ≤ RMS_REG·256) and for the loop that reads x twice (n = 200, not a
// multiple of the 256 threads; 6400, past RMS_REG·256 = 6144).
func TestFiberRMSNorm(t *testing.T) {
	for _, n := range []uint32{200, 5120, 6400} {
		for _, mode := range []uint32{RMSPlain, RMSOnePlus, RMSGated} {
			t.Run(fmt.Sprintf("n%d/mode%d", n, mode), func(t *testing.T) { fiberRMSNorm(t, n, mode) })
		}
	}
}

func fiberRMSNorm(t *testing.T, n, mode uint32) {
	r := rand.New(rand.NewPCG(1, uint64(n)))
	const rows, groups = 3, 2
	const eps = 1e-6
	x := randVec(r, int(rows*groups*n), 3)
	z := randVec(r, int(rows*groups*n), 4)
	w := randVec(r, int(n), 1)
	want := make([]float32, len(x))
	switch mode {
	case RMSPlain:
		model.RMSNorm(want, x, w, rows*groups, eps)
	case RMSOnePlus:
		model.RMSNorm(want, x, model.OnePlus(w), rows*groups, eps)
	case RMSGated:
		model.GatedRMSNorm(want, x, z, w, rows*groups, eps)
	}
	p := RMSNormParams{DoneWord: NoWord, Rows: rows, RowsWord: NoWord, Groups: groups, N: n,
		LdX: groups * n, LdZ: groups * n, LdY: groups * n, Mode: mode, Eps: eps}
	var j job
	y := j.poison(len(x))
	j.launch(t, "lithos_rmsnorm", p.Grid(), j.buf(zeroCtl), j.buf(Record(p)), j.f32(x), j.f32(w), j.f32(z), y)
	got := bytesF32(j.mustRun(t)[y])
	// Σx² in float32 (CPU: float64): relative error of r ≲ n·2⁻²⁴; the products add a few ulp.
	closeTo(t, "rmsnorm", got, want, 4e-6, 1e-7)
}

func TestFiberRMSNormDynamicRowsAndDone(t *testing.T) {
	// Rows from a step-state word (2 of at most 4) and the done flag: rows past the dynamic count
	// and a done step leave the output untouched.
	r := rand.New(rand.NewPCG(3, 4))
	const n = 64
	x := randVec(r, 4*n, 1)
	w := randVec(r, n, 1)
	ctl := make([]uint32, 64)
	ctl[2] = 2
	p := RMSNormParams{DoneWord: 9, Rows: 4, RowsWord: 2, Groups: 1, N: n, LdX: n, LdZ: n, LdY: n, Mode: RMSPlain, Eps: 1e-6}
	var j job
	y := j.poison(4 * n)
	c := j.buf(u32Bytes(ctl))
	j.launch(t, "lithos_rmsnorm", p.Grid(), c, j.buf(Record(p)), j.f32(x), j.f32(w), j.f32(x), y)
	got := bytesF32(j.mustRun(t)[y])
	want := make([]float32, 2*n)
	model.RMSNorm(want, x, w, 2, 1e-6)
	closeTo(t, "rows 0-1", got[:2*n], want, 4e-6, 1e-7)
	for i, v := range got[2*n:] {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("row %d element %d written (%g) past the dynamic row count", 2+i/n, i%n, v)
		}
	}
	ctl[9] = 1
	var j2 job
	y = j2.poison(4 * n)
	j2.launch(t, "lithos_rmsnorm", p.Grid(), j2.buf(u32Bytes(ctl)), j2.buf(Record(p)), j2.f32(x), j2.f32(w), j2.f32(x), y)
	for i, v := range bytesF32(j2.mustRun(t)[y]) {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("element %d written with the done flag set", i)
		}
	}
}

func TestFiberEwise(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const rows, n = 3, 300
	a := randVec(r, rows*n, 12)
	b := randVec(r, rows*n, 3)
	for _, mode := range []uint32{EwSwiGLU, EwAdd} {
		t.Run(fmt.Sprint("mode", mode), func(t *testing.T) {
			want := make([]float32, len(a))
			switch mode {
			case EwSwiGLU:
				model.SwiGLU(want, a, b)
			case EwAdd:
				copy(want, a)
				model.Add(want, b)
			}
			p := EwiseParams{DoneWord: NoWord, Rows: rows, RowsWord: NoWord, N: n, LdA: n, LdB: n, LdY: n, Mode: mode}
			var j job
			y := j.poison(len(a))
			j.launch(t, "lithos_ewise", p.Grid(), j.buf(zeroCtl), j.buf(Record(p)), j.f32(a), j.f32(b), y)
			// float32 exp and division (CPU: float64, rounded once): a few ulp.
			closeTo(t, "ewise", bytesF32(j.mustRun(t)[y]), want, 1e-6, 1e-30)
		})
	}
}

func TestFiberRope(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const rows, heads, headDim, rotDim, pos0 = 3, 40, 64, 16, 1000 // 320 (head, pair) items: 3 threadgroups per row
	rope := model.NewRope(1e7, rotDim)
	x := randVec(r, rows*heads*headDim, 2)
	want := append([]float32(nil), x...)
	cos, sin := make([]float32, rotDim/2), make([]float32, rotDim/2)
	for row := range rows {
		rope.Tables(cos, sin, pos0+row)
		rope.Apply(want[row*heads*headDim:(row+1)*heads*headDim], headDim, cos, sin)
	}
	ctl := make([]uint32, 64)
	ctl[1] = pos0 // the position from the step state's Position word
	// Partial RoPE (RotDim < HeadDim) at Scale 1: runtime/model.Rope, what lithos_attn_prep
	// rotates with.
	p := RopeScaledParams{DoneWord: NoWord, Rows: rows, RowsWord: NoWord, Pos: 0, PosWord: 1, Heads: heads, HeadDim: headDim, RotDim: rotDim,
		Ld: heads * headDim, Scale: 1}
	var j job
	xb := j.f32(x)
	j.launch(t, "lithos_rope_scaled", p.Grid(), j.buf(u32Bytes(ctl)), j.buf(Record(p)), xb, j.f32(rope.InvFreq))
	// cos/sin of the same float32 angle, float32 vs float64-rounded: 1 ulp each; |x| ≤ 2.
	closeTo(t, "rope", bytesF32(j.mustRun(t)[xb]), want, 0, 2e-6)
}

func TestFiberArgmax(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const rows, n = 5, 9000 // 3 partials of 4096
	x := randVec(r, rows*n, 5)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	x[0*n+8999] = 7 // the max in the last chunk
	x[1*n+17], x[1*n+5000] = 6, 6
	x[1*n+3] = nan // NaN skipped; ties → lowest index
	for i := range n {
		x[2*n+i] = float32(math.Inf(-1)) // nothing > −Inf → 0
	}
	x[2*n+100] = nan
	x[3*n+4095], x[3*n+4096] = inf, inf // a tie across chunks
	for i := range n {
		x[4*n+i] = 1 // all equal → 0
	}
	p := NewArgmaxParams(rows, n)
	p.OutOff = 1
	var j job
	pv, pi := j.poison(rows*int(p.Parts)), j.poison(rows*int(p.Parts))
	out := j.buf(make([]byte, 4*(rows+1)))
	c, rec := j.buf(zeroCtl), j.buf(Record(p))
	j.launch(t, "lithos_argmax_partial", p.GridPartial(), c, rec, j.f32(x), pv, pi)
	j.launch(t, "lithos_argmax_final", p.GridFinal(), c, rec, pv, pi, out)
	got := bytesU32(j.mustRun(t)[out])
	for row := range rows {
		want := model.Argmax(x[row*n : (row+1)*n])
		if int(got[1+row]) != want {
			t.Errorf("row %d: argmax %d, want %d", row, got[1+row], want)
		}
	}
	if want := []int{8999, 17, 0, 4095, 0}; fmt.Sprint(want) != fmt.Sprint([]int{int(got[1]), int(got[2]), int(got[3]), int(got[4]), int(got[5])}) {
		t.Errorf("argmax %v, want %v", got[1:], want)
	}
}

// blmCase is a random BLM matrix with its CPU reference.
type blmCase struct {
	g      blm.Geometry
	packed []byte
	scales []float32 // row-scale table, Blocks·16
	ref    *cpu.Packed
}

// randomE4M3Scale returns an E4M3 byte of a positive power-of-two-ish scale in [2⁻⁴, 2⁴).
func randomE4M3Scale(r *rand.Rand) byte {
	return fp8.E4M3FromFloat32(float32(math.Ldexp(1+r.Float64(), r.IntN(8)-4)))
}

func newBLMCase(t testing.TB, r *rand.Rand, f formats.Format, n, k int64, lanes int, gateUp bool) blmCase {
	t.Helper()
	g, err := blm.NewGeometry(blm.Spec{Format: f, N: n, K: k, Lanes: lanes})
	if err != nil {
		t.Fatal(err)
	}
	src := g.NewRows(int(n))
	switch f {
	case formats.NVFP4:
		for i := range src.Codes {
			src.Codes[i] = byte(r.IntN(256))
		}
		for i := range src.Scales {
			src.Scales[i] = randomE4M3Scale(r)
		}
	case formats.FP8:
		for i := range src.Codes {
			c := byte(r.IntN(256))
			if c&0x7F == 0x7F { // NaN codes: not in real weights
				c = 0x3F
			}
			src.Codes[i] = c
		}
	case formats.BF16:
		for i := 0; i < len(src.Codes); i += 2 {
			binary.LittleEndian.PutUint16(src.Codes[i:], bf16.FromFloat32(float32(r.NormFloat64())))
		}
	}
	packed := make([]byte, g.TotalBytes)
	if err := g.PackRows(packed, src); err != nil {
		t.Fatal(err)
	}
	scales := make([]float32, g.Blocks*int64(g.Rows))
	if gateUp {
		st := blm.GateUp(blm.Segment{Name: "gate", Rows: n / 2, TensorScale: 0.75}, blm.Segment{Name: "up", Rows: n / 2, TensorScale: 1.25})
		rs, err := st.RowScales()
		if err != nil {
			t.Fatal(err)
		}
		copy(scales, rs)
	} else {
		for i := range n {
			scales[i] = float32(0.5 + r.Float64())
		}
	}
	ref, err := cpu.NewPacked(g, packed, f32Bytes(scales))
	if err != nil {
		t.Fatal(err)
	}
	return blmCase{g, packed, scales, ref}
}

// bound returns, per output (t, n), the float32 summation bound of two differently ordered sums
// of the products: 2·γ_h·|s_n|·Σ_k |W[n,k]·x[t,k]| with h = K + 64 (γ_h = h·2⁻²⁴/(1 − h·2⁻²⁴)).
func (c blmCase) bound(x []float32, rows int) []float64 {
	k := int(c.g.K)
	n := int(c.g.N)
	h := float64(k + 64)
	gam := h * 0x1p-24 / (1 - h*0x1p-24)
	w := make([]float32, k)
	out := make([]float64, rows*n)
	for o := range n {
		c.ref.DecodeRow(w, o)
		for t := range rows {
			var s float64
			for i, v := range w {
				s += math.Abs(float64(v) * float64(x[t*k+i]))
			}
			out[t*n+o] = 2 * gam * math.Abs(float64(c.scales[o])) * s
		}
	}
	return out
}

func TestFiberBLM(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	type shape struct {
		f     formats.Format
		n, k  int64
		lanes int
	}
	shapes := []shape{
		{formats.NVFP4, 40, 1024, 32}, // aligned groups (the fast path), N not a multiple of 16
		{formats.NVFP4, 24, 256, 0},   // the policy: L = 2 (folded rows, 16 rows per step)
		{formats.NVFP4, 20, 48, 0},    // stripes start inside groups (the general path)
		{formats.NVFP4, 17, 544, 8},   // W = 68: misaligned stripes, L = 8
		{formats.FP8, 33, 1000, 32},   // K not a multiple of 512: padding columns
		{formats.FP8, 16, 256, 0},     // L = 16
		{formats.BF16, 19, 264, 32},
		{formats.BF16, 16, 64, 4},
	}
	for _, sh := range shapes {
		c := newBLMCase(t, r, sh.f, sh.n, sh.k, sh.lanes, false)
		for _, rows := range []int{1, 3, 8, 11, 16} {
			name := fmt.Sprintf("%s_%dx%d_L%d_rows%d", sh.f, sh.n, sh.k, c.g.Lanes, rows)
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
				var j job
				y := j.poison(rows * n)
				j.launch(t, kern, p.Grid(), j.buf(zeroCtl), j.buf(Record(p)), j.buf(c.packed), j.f32(c.scales), j.f32(x), y)
				got := bytesF32(j.mustRun(t)[y])
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

// TestFiberBLMEpilogues: the add and SwiGLU epilogues on the scalar (Metal) path, at 2 rows
// (r2) and at 13 (r16: the partial sums of tokens 8–12 in the second tile's layout).
func TestFiberBLMEpilogues(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	c := newBLMCase(t, r, formats.NVFP4, 48, 512, 0, true) // gate/up interleaved: 24 + 24 rows
	for _, rows := range []int{2, 13} {
		t.Run(fmt.Sprintf("rows%d", rows), func(t *testing.T) { blmScalarEpilogues(t, r, c, rows) })
	}
}

func blmScalarEpilogues(t *testing.T, r *rand.Rand, c blmCase, rows int) {
	k, n := int(c.g.K), int(c.g.N)
	x := randVec(r, rows*k, 1)
	m, _ := c.ref.All()
	full := make([]float32, rows*n)
	if err := m.Mul(full, x, rows); err != nil {
		t.Fatal(err)
	}
	bound := c.bound(x, rows)
	kern, _ := BLMKernel(formats.NVFP4, rows)

	t.Run("add", func(t *testing.T) {
		res := randVec(r, rows*n, 3)
		want := append([]float32(nil), res...)
		model.Add(want, full)
		p, _ := NewBLMParams(c.g, rows, EpiAdd)
		var j job
		y := j.f32(res)
		j.launch(t, kern, p.Grid(), j.buf(zeroCtl), j.buf(Record(p)), j.buf(c.packed), j.f32(c.scales), j.f32(x), y)
		got := bytesF32(j.mustRun(t)[y])
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); math.IsNaN(float64(got[i])) || d > bound[i]+2e-7*math.Abs(float64(want[i]))+1e-30 {
				t.Fatalf("y[%d] = %g, want %g", i, got[i], want[i])
			}
		}
	})
	t.Run("swiglu", func(t *testing.T) {
		// The CPU's gate and up halves: packed rows {16b+i} and {16b+8+i}, i < 8.
		half := n / 2
		gate, up := make([]float32, rows*half), make([]float32, rows*half)
		gb, ub := make([]float64, rows*half), make([]float64, rows*half)
		for tt := range rows {
			for o := range half {
				b, i := o/8, o%8
				gate[tt*half+o], up[tt*half+o] = full[tt*n+16*b+i], full[tt*n+16*b+8+i]
				gb[tt*half+o], ub[tt*half+o] = bound[tt*n+16*b+i], bound[tt*n+16*b+8+i]
			}
		}
		want := make([]float32, rows*half)
		model.SwiGLU(want, gate, up)
		p, _ := NewBLMParams(c.g, rows, EpiSwiGLU)
		var j job
		y := j.poison(rows * half)
		j.launch(t, kern, p.Grid(), j.buf(zeroCtl), j.buf(Record(p)), j.buf(c.packed), j.f32(c.scales), j.f32(x), y)
		got := bytesF32(j.mustRun(t)[y])
		for i := range want {
			// silu' ≤ 1.1: the gate's error moves silu(gate)·up by ≤ 1.1·|up|·δg; up's by |silu(g)|·δu.
			g64, u64 := float64(gate[i]), float64(up[i])
			silu := g64 / (1 + math.Exp(-g64))
			lim := 1.1*math.Abs(u64)*gb[i] + math.Abs(silu)*ub[i] + 1e-6*math.Abs(float64(want[i])) + 1e-30
			if d := math.Abs(float64(got[i] - want[i])); math.IsNaN(float64(got[i])) || d > lim {
				t.Fatalf("swiglu[%d] = %g, want %g (|Δ| %.3g > %.3g)", i, got[i], want[i], d, lim)
			}
		}
	})
}
