package q8

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"lithos/formats/f16"
)

func TestHandExample(t *testing.T) {
	// amax 127·2^-7 gives the F16-exact scale 2^-7, so codes are w·128 rounded half to even.
	w := make([]float32, 32)
	w[0] = 127.0 / 128
	w[1] = 2.5 / 128  // tie → 2
	w[2] = 3.5 / 128  // tie → 4
	w[3] = -2.5 / 128 // tie → −2
	w[4] = 0.5 / 128  // tie → 0
	w[5] = -100.0 / 128
	codes := make([]byte, 32)
	scales := make([]byte, 2)
	if err := QuantizeRows(codes, scales, w, 32, GroupSize); err != nil {
		t.Fatal(err)
	}
	if h := binary.LittleEndian.Uint16(scales); f16.ToFloat32(h) != 1.0/128 {
		t.Fatalf("scale %#04x = %g, want 2^-7", h, f16.ToFloat32(h))
	}
	want := []int8{127, 2, 4, -2, 0, -100}
	for i, c := range want {
		if int8(codes[i]) != c {
			t.Errorf("code[%d] = %d, want %d", i, int8(codes[i]), c)
		}
	}
	dq := make([]float32, 32)
	if err := DecodeRows(dq, codes, scales, 32, GroupSize); err != nil {
		t.Fatal(err)
	}
	if dq[5] != -100.0/128 || dq[1] != 2.0/128 {
		t.Errorf("decoded %v", dq[:6])
	}
}

func TestRoundTripBound(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const rows, k = 16, 256
	w := make([]float32, rows*k)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.05)
	}
	for j := 0; j < k; j++ {
		w[3*k+j] *= 1e-4 // small groups: F16 subnormal scales
		w[4*k+j] *= 1e-9 // tiny groups: scales round to F16 zero
	}
	codes := make([]byte, rows*k)
	scales := make([]byte, 2*rows*k/GroupSize)
	if err := QuantizeRows(codes, scales, w, k, GroupSize); err != nil {
		t.Fatal(err)
	}
	dq := make([]float32, rows*k)
	if err := DecodeRows(dq, codes, scales, k, GroupSize); err != nil {
		t.Fatal(err)
	}
	for g := 0; g < rows*k/GroupSize; g++ {
		s := float64(f16.ToFloat32(binary.LittleEndian.Uint16(scales[2*g:])))
		for i := g * GroupSize; i < (g+1)*GroupSize; i++ {
			// Half a step, or the clip's excess where F16 rounding shrank the scale; a zero
			// scale leaves the value itself.
			bound := s/2*(1+1e-6) + max(0, math.Abs(float64(w[i]))-MaxCode*s)
			if s == 0 {
				bound = math.Abs(float64(w[i]))
			}
			if err := math.Abs(float64(dq[i] - w[i])); err > bound {
				t.Fatalf("element %d (row %d): %g → %g, error %g > %g (scale %g)", i, i/k, w[i], dq[i], err, bound, s)
			}
			if c := int8(codes[i]); c < -MaxCode || c > MaxCode {
				t.Fatalf("code %d out of ±127", c)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	codes := make([]byte, 32)
	scales := make([]byte, 2)
	w := make([]float32, 32)
	w[7] = float32(math.Inf(1))
	if err := QuantizeRows(codes, scales, w, 32, 32); err == nil || !strings.Contains(err.Error(), "element 7") {
		t.Errorf("Inf input: %v", err)
	}
	w[7] = 1e7 // amax/127 > 65504
	if err := QuantizeRows(codes, scales, w, 32, 32); err == nil || !strings.Contains(err.Error(), "F16") {
		t.Errorf("F16 overflow: %v", err)
	}
	if err := QuantizeRows(codes, scales, w[:16], 16, 32); err == nil {
		t.Error("accepted K not a multiple of the group")
	}
	if err := DecodeRows(make([]float32, 32), codes, scales[:1], 32, 32); err == nil {
		t.Error("accepted a short scale slice")
	}
	if err := DecodeRows(make([]float32, 32), codes[:31], scales, 32, 32); err == nil {
		t.Error("accepted a short code slice")
	}
	// Decode reads every I8 value, including −128, which the quantizer never writes.
	c := make([]byte, 32)
	c[0] = 0x80
	s := []byte{0x00, 0x3C} // 1.0
	dq := make([]float32, 32)
	if err := DecodeRows(dq, c, s, 32, 32); err != nil || dq[0] != -128 {
		t.Errorf("decode −128: %v, %v", dq[0], err)
	}
}
