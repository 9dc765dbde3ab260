package int4

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"lithos/formats/bf16"
	"lithos/formats/f16"
)

func TestUnpackMLXWord(t *testing.T) {
	// The little-endian U32 0x76543210 holds elements 0…7 = 0…7: element 0 in bits 0–3.
	packed := []byte{0x10, 0x32, 0x54, 0x76}
	codes := make([]uint8, 8)
	if err := UnpackCodes(codes, packed); err != nil {
		t.Fatal(err)
	}
	for i, c := range codes {
		if c != uint8(i) {
			t.Fatalf("codes = %v, want 0…7", codes)
		}
	}
	back := make([]byte, 4)
	if err := PackCodes(back, codes); err != nil || string(back) != string(packed) {
		t.Fatalf("PackCodes = % x, %v", back, err)
	}
	if err := PackCodes(back, []uint8{16, 0, 0, 0, 0, 0, 0, 0}); err == nil {
		t.Error("PackCodes accepted code 16")
	}
}

func TestQuantizeMLXHandExample(t *testing.T) {
	// Group of 32 from −1 to 0.5: w_max = 0.5, w_min = −1 has the larger magnitude, so
	// s = 1.5/15 = fl32(0.1) > 0, q0 = round(−1/s) = −10, s = −1/−10 = fl32(0.1), bias = −1.
	x := make([]float32, 32)
	for i := range x {
		x[i] = -1 + float32(i)*(1.5/31)
	}
	x[31] = 0.5
	packed := make([]byte, 16)
	scales := make([]byte, 2)
	biases := make([]byte, 2)
	if err := Quantize(packed, scales, biases, x, 32, 32, BF16); err != nil {
		t.Fatal(err)
	}
	if got, want := binary.LittleEndian.Uint16(scales), bf16.FromFloat32(float32(1.5)/15); got != want {
		t.Errorf("scale %#04x, want BF16(0.1) %#04x", got, want)
	}
	if got := binary.LittleEndian.Uint16(biases); got != 0xBF80 {
		t.Errorf("bias %#04x, want BF16(−1) 0xbf80", got)
	}
	codes := make([]uint8, 32)
	if err := UnpackCodes(codes, packed); err != nil {
		t.Fatal(err)
	}
	if codes[0] != 0 || codes[31] != 15 {
		t.Errorf("codes of −1 and 0.5: %d, %d; want 0, 15", codes[0], codes[31])
	}

	// The other side: w_max = 2 has the larger magnitude, so the stored scale is negative and
	// the bias is w_max: s0 = 2.5/15, q0 = round(2/−s0) = −12, s = 2/−12, bias = 2.
	y := make([]float32, 32)
	y[0], y[1] = 2, -0.5
	if err := Quantize(packed, scales, biases, y, 32, 32, F32); err == nil {
		t.Fatal("Quantize accepted F32 scales in 2-byte slices")
	}
	scales4, biases4 := make([]byte, 4), make([]byte, 4)
	if err := Quantize(packed, scales4, biases4, y, 32, 32, F32); err != nil {
		t.Fatal(err)
	}
	s := math.Float32frombits(binary.LittleEndian.Uint32(scales4))
	b := math.Float32frombits(binary.LittleEndian.Uint32(biases4))
	if s != float32(2)/-12 || b != 2 {
		t.Errorf("scale %g, bias %g; want %g, 2", s, b, float32(2)/-12)
	}
	if err := UnpackCodes(codes, packed); err != nil {
		t.Fatal(err)
	}
	if codes[0] != 0 || codes[1] != 15 || codes[2] != 12 {
		t.Errorf("codes of 2, −0.5, 0: %d, %d, %d; want 0, 15, 12", codes[0], codes[1], codes[2])
	}
}

func TestQuantizeMLXRoundTripBound(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, st := range []ScaleType{BF16, F16, F32} {
		for _, g := range []int{32, 64, 128} {
			const rows, k = 8, 512
			x := make([]float32, rows*k)
			for i := range x {
				x[i] = float32(r.NormFloat64()*0.03 + 0.01*r.Float64())
			}
			for j := 0; j < k; j++ {
				x[2*k+j] = float32(math.Abs(r.NormFloat64())) // all positive
				x[3*k+j] = 0                                  // all zero
			}
			m := MLX{N: rows, K: k, GroupSize: g, ScaleType: st,
				Weight: make([]byte, rows*k/2), Scales: make([]byte, rows*k/g*st.Size()), Biases: make([]byte, rows*k/g*st.Size())}
			if err := Quantize(m.Weight, m.Scales, m.Biases, x, k, g, st); err != nil {
				t.Fatal(err)
			}
			rw := Rows{K: k, GroupSize: g, Codes: make([]uint8, rows*k), Scales: make([]float32, rows*k/g), Biases: make([]float32, rows*k/g)}
			if err := m.Rows(&rw, 0); err != nil {
				t.Fatal(err)
			}
			dq := make([]float32, rows*k)
			if err := rw.Decode(dq); err != nil {
				t.Fatal(err)
			}
			// One step |s| (the clip at the far end; half a step elsewhere) plus the rounding of
			// the stored scale and bias to st (2^-8 relative for BF16, 2^-11 for F16).
			rel := map[ScaleType]float64{BF16: 0x1p-8, F16: 0x1p-11, F32: 0x1p-23}[st]
			for i := range x {
				gi := i / g
				s, b := math.Abs(float64(rw.Scales[gi])), math.Abs(float64(rw.Biases[gi]))
				bound := s*(1+rel) + MaxCode*s*rel + b*rel + 1e-7
				if err := math.Abs(float64(dq[i] - x[i])); err > bound {
					t.Fatalf("%s g=%d element %d: %g → %g, error %g > %g", st, g, i, x[i], dq[i], err, bound)
				}
			}
			for i := 3 * k; i < 4*k; i++ {
				if dq[i] != 0 {
					t.Fatalf("%s g=%d: zero group decodes element %d to %g", st, g, i, dq[i])
				}
			}
		}
	}
}

// awqPack packs logical codes [K, N] into AutoAWQ words from the forward description of the
// layout: slot i of each word holds column order[i] of its group of 8 (AutoAWQ AWQ_ORDER).
func awqPack(q [][]uint8, k, n int) []byte {
	order := [8]int{0, 2, 4, 6, 1, 3, 5, 7}
	out := make([]byte, 4*k*n/8)
	for r := 0; r < k; r++ {
		for w := 0; w < n/8; w++ {
			var word uint32
			for slot := 0; slot < 8; slot++ {
				word |= uint32(q[r][8*w+order[slot]]) << (4 * slot)
			}
			binary.LittleEndian.PutUint32(out[4*(r*n/8+w):], word)
		}
	}
	return out
}

func f16Bytes(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], f16.FromFloat32(x))
	}
	return out
}

func TestAWQWordOrder(t *testing.T) {
	// One word 0x76543210 (slot i holds value i) of a [1, 8] AWQ tensor unpacks to columns
	// 0…7 = slots [0,4,1,5,2,6,3,7] (AutoAWQ AWQ_REVERSE_ORDER).
	a := AWQ{N: 8, K: 1, GroupSize: 1,
		QWeight: []byte{0x10, 0x32, 0x54, 0x76}, QZeros: []byte{0x88, 0x88, 0x88, 0x88}, Scales: f16Bytes(make([]float32, 8))}
	want := []uint8{0, 4, 1, 5, 2, 6, 3, 7}
	for n := 0; n < 8; n++ {
		rw := Rows{K: 1, GroupSize: 1, Codes: make([]uint8, 1), Scales: make([]float32, 1), Biases: make([]float32, 1)}
		if err := a.Rows(&rw, n); err != nil {
			t.Fatal(err)
		}
		if rw.Codes[0] != want[n] {
			t.Errorf("column %d: code %d, want %d", n, rw.Codes[0], want[n])
		}
	}
}

func TestAWQRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	const n, k, g = 16, 256, 128
	q := make([][]uint8, k)
	for i := range q {
		q[i] = make([]uint8, n)
		for j := range q[i] {
			q[i][j] = uint8(r.IntN(16))
		}
	}
	z := make([][]uint8, k/g)
	s := make([]float32, k/g*n)
	for i := range z {
		z[i] = make([]uint8, n)
		for j := range z[i] {
			z[i][j] = uint8(r.IntN(16))
			s[i*n+j] = f16.ToFloat32(f16.FromFloat32(float32(r.Float64()*0.01 + 1e-4)))
		}
	}
	a := AWQ{N: n, K: k, GroupSize: g, QWeight: awqPack(q, k, n), QZeros: awqPack(z, k/g, n), Scales: f16Bytes(s)}
	rw := Rows{K: k, GroupSize: g, Codes: make([]uint8, 5*k), Scales: make([]float32, 5*k/g), Biases: make([]float32, 5*k/g)}
	if err := a.Rows(&rw, 9); err != nil { // output rows 9…13
		t.Fatal(err)
	}
	dq := make([]float32, 5*k)
	if err := rw.Decode(dq); err != nil {
		t.Fatal(err)
	}
	for rr := 0; rr < 5; rr++ {
		on := 9 + rr
		for i := 0; i < k; i++ {
			if rw.Codes[rr*k+i] != q[i][on] {
				t.Fatalf("row %d col %d: code %d, want %d", on, i, rw.Codes[rr*k+i], q[i][on])
			}
			// (q − z)·s is exact in float32 for an F16 s and 4-bit q, z.
			want := (float32(q[i][on]) - float32(z[i/g][on])) * s[(i/g)*n+on]
			if dq[rr*k+i] != want {
				t.Fatalf("row %d col %d: %g, want (q−z)·s = %g", on, i, dq[rr*k+i], want)
			}
		}
	}
	if err := a.Rows(&rw, 12); err == nil {
		t.Error("Rows accepted rows 12…16 of 16")
	}
}

func TestGPTQ(t *testing.T) {
	// K = 8, N = 8, one group: qweight [1, 8] word n holds rows 0…7 LSB first; the stored zero
	// 7 means z = 8 (v1); scale 0.5 → w[n, k] = 0.5·(q − 8).
	const n, k = 8, 8
	qw := make([]byte, 4*n)
	for c := 0; c < n; c++ {
		binary.LittleEndian.PutUint32(qw[4*c:], 0x76543210+uint32(c)) // row 0 of column c is c
	}
	qz := []byte{0x77, 0x77, 0x77, 0x77}
	scales := f16Bytes([]float32{0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5})
	gidx := make([]byte, 4*k)
	q := GPTQ{N: n, K: k, GroupSize: -1, QWeight: qw, QZeros: qz, Scales: scales, GIdx: gidx, ZeroOffset: 1}
	rw := Rows{K: k, GroupSize: k, Codes: make([]uint8, n*k), Scales: make([]float32, n), Biases: make([]float32, n)}
	if err := q.Rows(&rw, 0); err != nil {
		t.Fatal(err)
	}
	dq := make([]float32, n*k)
	if err := rw.Decode(dq); err != nil {
		t.Fatal(err)
	}
	for c := 0; c < n; c++ {
		for j := 0; j < k; j++ {
			qv := j
			if j == 0 {
				qv = c
			}
			if want := 0.5 * float32(qv-8); dq[c*k+j] != want {
				t.Fatalf("w[%d, %d] = %g, want %g", c, j, dq[c*k+j], want)
			}
		}
	}
	// gptq_v2 stores z itself.
	q.ZeroOffset = 0
	if err := q.Rows(&rw, 0); err != nil {
		t.Fatal(err)
	}
	if rw.Biases[0] != -3.5 {
		t.Errorf("v2 bias %g, want −0.5·7", rw.Biases[0])
	}
	// Act-order g_idx is refused.
	q.GroupSize = 4
	bad := make([]byte, 4*k)
	for j := 0; j < k; j++ {
		binary.LittleEndian.PutUint32(bad[4*j:], uint32(1-j%2)) // alternating groups
	}
	q.GIdx = bad
	q.Scales = f16Bytes(make([]float32, 2*n))
	q.QZeros = make([]byte, 2*n/2)
	if err := q.Check(); err == nil || !strings.Contains(err.Error(), "act-order") {
		t.Errorf("act-order g_idx: %v", err)
	}
}

func TestCheckErrors(t *testing.T) {
	m := MLX{N: 2, K: 64, GroupSize: 64, ScaleType: "F64", Weight: make([]byte, 64), Scales: make([]byte, 4), Biases: make([]byte, 4)}
	if err := m.Check(); err == nil || !strings.Contains(err.Error(), "scale dtype") {
		t.Errorf("F64 scales: %v", err)
	}
	m.ScaleType = BF16
	m.Weight = m.Weight[:63]
	if err := m.Check(); err == nil || !strings.Contains(err.Error(), "weight") {
		t.Errorf("short weight: %v", err)
	}
	a := AWQ{N: 12, K: 128, GroupSize: 128}
	if err := a.Check(); err == nil {
		t.Error("AWQ accepted N = 12")
	}
	rw := Rows{K: 64, GroupSize: 32, Codes: make([]uint8, 64), Scales: make([]float32, 1), Biases: make([]float32, 2)}
	if err := rw.Decode(make([]float32, 64)); err == nil {
		t.Error("Decode accepted 1 scale for 2 groups")
	}
	rw.Scales = make([]float32, 2)
	rw.Codes[5] = 16
	if err := rw.Decode(make([]float32, 64)); err == nil || !strings.Contains(err.Error(), "exceeds 15") {
		t.Errorf("code 16: %v", err)
	}
	x := make([]float32, 64)
	x[3] = float32(math.NaN())
	if err := Quantize(make([]byte, 32), make([]byte, 4), make([]byte, 4), x, 64, 32, BF16); err == nil {
		t.Error("Quantize accepted NaN")
	}
	if err := Quantize(make([]byte, 32), make([]byte, 2), make([]byte, 2), x[:64], 64, 48, BF16); err == nil {
		t.Error("Quantize accepted group size 48")
	}
}

func FuzzRows(f *testing.F) {
	f.Add([]byte{0x10, 0x32, 0x54, 0x76, 0x88, 0x88, 0x88, 0x88, 0, 0x3C}, 8, 8, 8)
	f.Fuzz(func(t *testing.T, data []byte, n, k, g int) {
		if n <= 0 || k <= 0 || g == 0 || n > 64 || k > 256 || g > 256 || g < -1 {
			return
		}
		// Whatever the geometry, a packed source either refuses it or yields codes ≤ 15.
		third := len(data) / 3
		src := []struct {
			name string
			rows func(*Rows) error
			g    int
		}{
			{"awq", func(r *Rows) error {
				return AWQ{N: n, K: k, GroupSize: g, QWeight: data[:third], QZeros: data[third : 2*third], Scales: data[2*third:]}.Rows(r, 0)
			}, g},
			{"gptq", func(r *Rows) error {
				return GPTQ{N: n, K: k, GroupSize: g, ZeroOffset: 1, QWeight: data[:third], QZeros: data[third : 2*third], Scales: data[2*third:]}.Rows(r, 0)
			}, g},
		}
		for _, s := range src {
			gg := s.g
			if gg == -1 {
				gg = k
			}
			if gg <= 0 || k%gg != 0 {
				continue
			}
			rw := Rows{K: k, GroupSize: gg, Codes: make([]uint8, n*k), Scales: make([]float32, n*k/gg), Biases: make([]float32, n*k/gg)}
			if err := s.rows(&rw); err != nil {
				continue
			}
			for _, c := range rw.Codes {
				if c > MaxCode {
					t.Fatalf("%s: code %d", s.name, c)
				}
			}
		}
	})
}
