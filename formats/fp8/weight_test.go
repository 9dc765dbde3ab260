package fp8

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestWeightRoundTripBound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	w := make([]float32, 64*256)
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.02)
	}
	w[100] = 0.75 // amax
	var amax float32
	for _, x := range w {
		amax = max(amax, float32(math.Abs(float64(x))))
	}
	scale := WeightScale(amax)
	if scale != float32(0.75)/448 {
		t.Fatalf("WeightScale(0.75) = %g, want %g", scale, float32(0.75)/448)
	}
	codes := make([]byte, len(w))
	if err := QuantizeWeights(codes, w, scale); err != nil {
		t.Fatal(err)
	}
	dq := make([]float32, len(w))
	if err := DecodeWeights(dq, codes, scale); err != nil {
		t.Fatal(err)
	}
	if math.Abs(float64(dq[100]-0.75)) > 2e-7 { // 448·fl(0.75/448): within an ulp of 0.75
		t.Errorf("amax element decodes to %g, want 0.75", dq[100])
	}
	for i := range w {
		// E4M3 has 3 mantissa bits: half-ulp relative error 2^-4 for normals; below 2^-6·scale
		// the subnormal step 2^-9·scale gives an absolute half-step of 2^-10·scale.
		bound := max(math.Abs(float64(w[i]))*0x1p-4, float64(scale)*0x1p-10) * (1 + 1e-6)
		if err := math.Abs(float64(dq[i] - w[i])); err > bound {
			t.Fatalf("element %d: %g → %g, error %g > bound %g", i, w[i], dq[i], err, bound)
		}
	}
}

func TestWeightExample(t *testing.T) {
	// scale 0.5: w = 1.75 → 3.5 → E4M3 3.5 = 0x46; w = −224 → −448 = 0xFE; w = 240 → 480 saturates to 0x7E.
	codes := make([]byte, 3)
	if err := QuantizeWeights(codes, []float32{1.75, -224, 240}, 0.5); err != nil {
		t.Fatal(err)
	}
	if codes[0] != 0x46 || codes[1] != 0xFE || codes[2] != 0x7E {
		t.Fatalf("codes = % x, want 46 fe 7e", codes)
	}
	dq := make([]float32, 3)
	if err := DecodeWeights(dq, codes, 0.5); err != nil {
		t.Fatal(err)
	}
	if dq[0] != 1.75 || dq[1] != -224 || dq[2] != 224 {
		t.Fatalf("decoded %v, want [1.75 -224 224]", dq)
	}
}

func TestWeightErrors(t *testing.T) {
	codes := make([]byte, 2)
	if err := QuantizeWeights(codes, []float32{1, float32(math.NaN())}, 1); err == nil {
		t.Error("QuantizeWeights accepted NaN")
	}
	if err := QuantizeWeights(codes, []float32{1, 2}, 0); err == nil {
		t.Error("QuantizeWeights accepted scale 0")
	}
	if err := QuantizeWeights(codes, []float32{1}, 1); err == nil {
		t.Error("QuantizeWeights accepted mismatched lengths")
	}
	dst := make([]float32, 2)
	if err := DecodeWeights(dst, codes, float32(math.Inf(1))); err == nil {
		t.Error("DecodeWeights accepted an infinite scale")
	}
	if err := DecodeWeights(dst[:1], codes, 1); err == nil {
		t.Error("DecodeWeights accepted mismatched lengths")
	}
	if WeightScale(0) != 1 {
		t.Errorf("WeightScale(0) = %g, want 1", WeightScale(0))
	}
}
