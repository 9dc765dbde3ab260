package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lithos/formats"
	"lithos/formats/bf16"
	"lithos/formats/f16"
	"lithos/formats/fp8"
	"lithos/formats/int4"
	"lithos/formats/nvfp4"
	"lithos/formats/q8"
	"lithos/pack/blm"
)

// kernelSpecs are the formats the CPU kernels serve, as blm specs (lanes chosen per case).
var kernelSpecs = []blm.Spec{
	{Format: formats.BF16},
	{Format: formats.F16},
	{Format: formats.FP8},
	{Format: formats.NVFP4},
	{Format: formats.Int8},
	{Format: formats.Int8, GroupSize: 16},
	{Format: formats.Int4, GroupSize: 64, ScaleType: "BF16"},
	{Format: formats.Int4, GroupSize: 32, ScaleType: "F16"},
	{Format: formats.Int4, GroupSize: 128, ScaleType: "F32"},
}

// testMatrix is a random matrix of one format: its stored rows (valid values: finite codes,
// positive finite block scales), packed, with per-row tensor scales.
type testMatrix struct {
	g        blm.Geometry
	stored   blm.Rows
	packed   []byte
	rowScale []float32 // [Blocks·Rows], 0 for padding rows
	table    []byte    // the row-scale table as a bundle stores it
}

func newTestMatrix(t testing.TB, r *rand.Rand, spec blm.Spec) *testMatrix {
	t.Helper()
	g, err := blm.NewGeometry(spec)
	if err != nil {
		t.Fatalf("NewGeometry(%+v): %v", spec, err)
	}
	n, k := int(g.N), int(g.K)
	rows := g.NewRows(n)
	switch g.Format {
	case formats.BF16:
		for i := 0; i < n*k; i++ {
			binary.LittleEndian.PutUint16(rows.Codes[2*i:], bf16.FromFloat32(float32(r.NormFloat64())))
		}
	case formats.F16:
		for i := 0; i < n*k; i++ {
			binary.LittleEndian.PutUint16(rows.Codes[2*i:], f16.FromFloat32(float32(r.NormFloat64())))
		}
	case formats.FP8:
		for i := range rows.Codes {
			rows.Codes[i] = fp8.E4M3FromFloat32Sat(float32(r.NormFloat64() * 50))
		}
	case formats.NVFP4:
		for i := range rows.Codes {
			rows.Codes[i] = byte(r.Uint32())
		}
		for i := range rows.Scales {
			rows.Scales[i] = fp8.E4M3FromFloat32Sat(float32(0.01 + r.Float64()*400))
		}
	case formats.Int8:
		for i := range rows.Codes {
			rows.Codes[i] = byte(int8(r.IntN(255) - 127))
		}
		for i := 0; i < len(rows.Scales)/2; i++ {
			binary.LittleEndian.PutUint16(rows.Scales[2*i:], f16.FromFloat32(float32(0.001+r.Float64()*0.05)))
		}
	case formats.Int4:
		for i := range rows.Codes {
			rows.Codes[i] = byte(r.Uint32())
		}
		st := int4.ScaleType(g.ScaleType)
		e := st.Size()
		for i := 0; i < len(rows.Scales)/e; i++ {
			putScalar(rows.Scales[i*e:], g.ScaleType, float32(r.NormFloat64()*0.1))
			putScalar(rows.Biases[i*e:], g.ScaleType, float32(r.NormFloat64()))
		}
	}
	packed := make([]byte, g.TotalBytes)
	if err := g.PackRows(packed, rows); err != nil {
		t.Fatal(err)
	}
	m := &testMatrix{g: g, stored: rows, packed: packed, rowScale: make([]float32, g.Blocks*int64(g.Rows))}
	m.table = make([]byte, 4*len(m.rowScale))
	for i := 0; i < n; i++ {
		m.rowScale[i] = 1
		if g.Format == formats.NVFP4 || g.Format == formats.FP8 {
			m.rowScale[i] = float32(math.Ldexp(0.5+r.Float64(), -r.IntN(12)))
		}
		binary.LittleEndian.PutUint32(m.table[4*i:], math.Float32bits(m.rowScale[i]))
	}
	return m
}

func putScalar(b []byte, typ string, v float32) {
	switch typ {
	case "BF16":
		binary.LittleEndian.PutUint16(b, bf16.FromFloat32(v))
	case "F16":
		binary.LittleEndian.PutUint16(b, f16.FromFloat32(v))
	case "F32":
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	}
}

// dequantize decodes the stored rows with the formats decoders (the numerics oracle,
// docs/formats.md), the row's tensor scale included, in float64.
func (m *testMatrix) dequantize(t testing.TB) []float64 {
	t.Helper()
	g := m.g
	n, k := int(g.N), int(g.K)
	w32 := make([]float32, n*k)
	cb, sb := int(g.CodeRowBytes()), int(g.ScaleRowBytes())
	var err error
	for r := 0; r < n && err == nil; r++ {
		row := w32[r*k : (r+1)*k]
		codes := m.stored.Codes[r*cb : (r+1)*cb]
		switch g.Format {
		case formats.BF16:
			err = bf16.Decode(row, codes)
		case formats.F16:
			err = f16.Decode(row, codes)
		case formats.FP8:
			err = fp8.DecodeWeights(row, codes, m.rowScale[r])
		case formats.Int8:
			err = q8.DecodeRows(row, codes, m.stored.Scales[r*sb:(r+1)*sb], k, g.GroupSize)
		case formats.NVFP4:
			err = nvfp4.DecodeRows(row, codes, m.stored.Scales[r*sb:(r+1)*sb], k, m.rowScale[r])
		}
	}
	if g.Format == formats.Int4 {
		mlx := int4.MLX{Weight: m.stored.Codes, Scales: m.stored.Scales, Biases: m.stored.Biases, N: n, K: k, GroupSize: g.GroupSize, ScaleType: int4.ScaleType(g.ScaleType)}
		groups := k / g.GroupSize
		rows := int4.Rows{K: k, GroupSize: g.GroupSize, Codes: make([]uint8, n*k), Scales: make([]float32, n*groups), Biases: make([]float32, n*groups)}
		if err = mlx.Rows(&rows, 0); err == nil {
			err = rows.Decode(w32)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float64, n*k)
	for i, v := range w32 {
		w[i] = float64(v)
	}
	return w
}

func randomX(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// kernelShapes are [N, K] cases: N not a multiple of 16, K not a multiple of 512 or of the
// stripe, narrow K (folded rows), wide K, and N ≥ 64 (the NVFP4 single-row table kernel).
var kernelShapes = [][2]int64{{1, 256}, {20, 256}, {33, 384}, {16, 1024}, {7, 2048}, {40, 5120}, {72, 512}, {130, 1536}}

// TestPackedMatchesDequantize checks the CPU kernel against dequantize-then-matmul in float64
// with the formats decoders, and against blm's reference GEMV over the same packed bytes, for
// every format, shapes, every lane count the layout allows, and 1–9 activation rows. The bound
// is the float32 summation bound γ_h·Σ|w·x| with h = K/4 + 8 (four partial sums of K/4 terms,
// the block-scale, INT4 bias and row-scale roundings); a misplaced code or scale misses by
// orders of magnitude more.
func TestPackedMatchesDequantize(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, spec := range kernelSpecs {
		for _, sh := range kernelShapes {
			s := spec
			s.N, s.K = sh[0], sh[1]
			lanes := []int{0}
			if sh[1] == 384 || sh[1] == 256 {
				lanes = []int{32, 16, 8, 4, 2}
			}
			for _, l := range lanes {
				s.Lanes = l
				if _, err := blm.NewGeometry(s); err != nil {
					continue // K not a multiple of this format's group
				}
				name := fmt.Sprintf("%s-g%d-%s/%dx%d/L%d", s.Format, s.GroupSize, s.ScaleType, s.N, s.K, l)
				t.Run(name, func(t *testing.T) { checkPacked(t, r, s) })
			}
		}
	}
}

func checkPacked(t *testing.T, r *rand.Rand, spec blm.Spec) {
	m := newTestMatrix(t, r, spec)
	g := m.g
	n, k := int(g.N), int(g.K)
	p, err := NewPacked(g, m.packed, m.table)
	if err != nil {
		t.Fatal(err)
	}
	mat, err := p.All()
	if err != nil {
		t.Fatal(err)
	}
	w := m.dequantize(t)
	for _, rows := range []int{1, 3, 4, 8, 9} {
		x := randomX(r, rows*k)
		got := make([]float32, rows*n)
		if err := mat.Mul(got, x, rows); err != nil {
			t.Fatal(err)
		}
		ref := make([]float32, rows*n)
		if err := g.GEMV(ref, m.packed, m.rowScale[:n], x, rows); err != nil {
			t.Fatal(err)
		}
		u := math.Ldexp(1, -24)
		h := float64(k/4 + 8)
		gamma := h * u / (1 - h*u)
		for tt := 0; tt < rows; tt++ {
			for o := 0; o < n; o++ {
				var want, mag float64
				for c := 0; c < k; c++ {
					v := w[o*k+c] * float64(x[tt*k+c])
					want += v
					mag += math.Abs(v)
				}
				bound := 2*gamma*mag + 1e-30
				if d := math.Abs(float64(got[tt*n+o]) - want); !(d <= bound) {
					t.Fatalf("rows %d, token %d, row %d: kernel %g, dequantize-then-matmul %g (|diff| %.3g > bound %.3g)", rows, tt, o, got[tt*n+o], want, d, bound)
				}
				if d := math.Abs(float64(got[tt*n+o]) - float64(ref[tt*n+o])); !(d <= 2*bound) {
					t.Fatalf("rows %d, token %d, row %d: kernel %g, blm reference GEMV %g (|diff| %.3g > bound %.3g)", rows, tt, o, got[tt*n+o], ref[tt*n+o], d, 2*bound)
				}
			}
		}
	}
}

// TestPackedRowsView checks a row subset (the gate half of an interleaved gate/up matrix)
// against the full product's rows.
func TestPackedRowsView(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m := newTestMatrix(t, r, blm.Spec{Format: formats.NVFP4, N: 64, K: 512})
	p, err := NewPacked(m.g, m.packed, m.table)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := p.All()
	var gate []int32
	for i := int32(0); i < 64; i++ {
		if i%16 < 8 {
			gate = append(gate, i)
		}
	}
	view, err := p.Rows(gate)
	if err != nil {
		t.Fatal(err)
	}
	if view.N != 32 || view.K != 512 {
		t.Fatalf("view is [%d, %d], want [32, 512]", view.N, view.K)
	}
	x := randomX(r, 2*512)
	full := make([]float32, 2*64)
	part := make([]float32, 2*32)
	if err := all.Mul(full, x, 2); err != nil {
		t.Fatal(err)
	}
	if err := view.Mul(part, x, 2); err != nil {
		t.Fatal(err)
	}
	for tt := 0; tt < 2; tt++ {
		for i, pr := range gate {
			if part[tt*32+i] != full[tt*64+int(pr)] {
				t.Fatalf("token %d, view row %d (packed %d): %g, full product %g", tt, i, pr, part[tt*32+i], full[tt*64+int(pr)])
			}
		}
	}
	if _, err := p.Rows([]int32{0, 64}); err == nil {
		t.Error("a view naming packed row 64 of 64 was accepted")
	}
	if err := view.Mul(part, x[:100], 2); err == nil {
		t.Error("Mul with a short x was accepted")
	}
}

// TestNewPackedRefuses checks the size checks.
func TestNewPackedRefuses(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m := newTestMatrix(t, r, blm.Spec{Format: formats.FP8, N: 16, K: 256})
	if _, err := NewPacked(m.g, m.packed[:len(m.packed)-1], m.table); err == nil {
		t.Error("short packed bytes accepted")
	}
	if _, err := NewPacked(m.g, m.packed, m.table[:4]); err == nil {
		t.Error("short row-scale table accepted")
	}
	bad := m.g
	bad.UnitBytes += 16
	if _, err := NewPacked(bad, m.packed, m.table); err == nil {
		t.Error("inconsistent geometry accepted")
	}
}
