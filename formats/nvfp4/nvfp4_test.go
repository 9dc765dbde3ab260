package nvfp4

import (
	"bytes"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"lithos/formats/bf16"
	"lithos/formats/fp8"
)

// ---- an independent reference of ModelOpt's rule, written without the package's codecs ----

var e2m1Mags = [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// refE4M3 rounds a non-negative float32 to E4M3 by brute force over the finite codes (ties to
// the even code); values past 464 never occur in these tests.
func refE4M3(x float32) (code uint8, value float32) {
	best, bestD := 0, math.Inf(1)
	for c := 0; c < 0x7F; c++ {
		d := math.Abs(float64(fp8.E4M3ToFloat32(uint8(c))) - float64(x))
		if d < bestD || (d == bestD && c%2 == 0) {
			best, bestD = c, d
		}
	}
	return uint8(best), fp8.E4M3ToFloat32(uint8(best))
}

// refCode is the E2M1 code of x: nearest magnitude (ties to even), saturating at 6, sign when
// x < 0; NaN → 7 and ±Inf → 7/15 as ModelOpt's searchsorted gives.
func refCode(x float32) uint8 {
	if math.IsNaN(float64(x)) {
		return 7
	}
	var sign uint8
	a := float64(x)
	if a < 0 {
		sign, a = 8, -a
	}
	a = min(a, 6)
	best, bestD := 0, math.Inf(1)
	for i, m := range e2m1Mags {
		if d := math.Abs(m - a); d < bestD || (d == bestD && i%2 == 0) {
			best, bestD = i, d
		}
	}
	return sign | uint8(best)
}

func refQuantize(w []float32, k int, s2 float32) (codes, scales []byte) {
	codes = make([]byte, len(w)/2)
	scales = make([]byte, len(w)/16)
	d6 := 6 * s2
	for b := range scales {
		blk := w[16*b : 16*b+16]
		var bmax float32
		for _, x := range blk {
			bmax = max(bmax, float32(math.Abs(float64(x))))
		}
		sb := bmax / d6
		if sb == 0 {
			sb = 1
		}
		c, v := refE4M3(sb)
		scales[b] = c
		den := v * s2
		for i := 0; i < 16; i += 2 {
			codes[8*b+i/2] = refCode(blk[i+1]/den)<<4 | refCode(blk[i]/den)
		}
	}
	return codes, scales
}

// testMatrix is a BF16-valued [n, k] matrix with an outlier, an all-zero block, a row of tiny
// values (block scales below E4M3's range) and a row of small ones (subnormal block scales).
func testMatrix(seed uint64, n, k int) []float32 {
	r := rand.New(rand.NewPCG(seed, 99))
	w := make([]float32, n*k)
	for i := range w {
		w[i] = bf16.ToFloat32(bf16.FromFloat32(float32(r.NormFloat64() * 0.02)))
	}
	w[3*k+5] = 1.5
	clear(w[k : k+16])
	for j := 0; j < k; j++ {
		w[2*k+j] = bf16.ToFloat32(bf16.FromFloat32(float32(r.NormFloat64() * 1e-8)))
		w[(n-1)*k+j] = bf16.ToFloat32(bf16.FromFloat32(float32(r.NormFloat64() * 2e-5)))
	}
	return w
}

func TestQuantizeMatchesReference(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		n, k := 24, 256
		w := testMatrix(seed, n, k)
		for _, d := range []Division{DivideExact, DivideByReciprocal} {
			q, err := Quantize(w, n, k, d)
			if err != nil {
				t.Fatal(err)
			}
			codes, scales := refQuantize(w, k, q.TensorScale)
			if !bytes.Equal(q.Scales, scales) {
				t.Fatalf("seed %d %v: block scales differ from the reference", seed, d)
			}
			if !bytes.Equal(q.Codes, codes) {
				for i := range codes {
					if codes[i] != q.Codes[i] {
						t.Fatalf("seed %d %v: code byte %d = %#02x, reference %#02x", seed, d, i, q.Codes[i], codes[i])
					}
				}
			}
		}
	}
}

func TestQuantizeHandExample(t *testing.T) {
	// Row 0 holds the amax 21·2^-6 = 0.328125, so s2 = amax/2688 = 2^-13 exactly. Row 1's block
	// has block amax 6·2^-9, so s_b = 6·2^-9 / (6·2^-13) = 16 (E4M3 0x58: exponent field 4+7) and den = 2^-9:
	// x equals the listed multipliers exactly, and the codes follow the tie table of §B.4.
	const k = 16
	w := make([]float32, 2*k)
	w[0] = 0.328125
	mult := []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5, -6}
	for i, m := range mult {
		w[k+i] = m / 512
	}
	q, err := Quantize(w, 2, k, DivideExact)
	if err != nil {
		t.Fatal(err)
	}
	if q.TensorScale != 0x1p-13 {
		t.Fatalf("tensor scale = %g, want 2^-13", q.TensorScale)
	}
	if q.Scales[1] != 0x58 {
		t.Fatalf("block scale = %#02x, want 0x58 (16)", q.Scales[1])
	}
	// codes 0,2,2,4,4,6,6,7 and their negatives 8,10,10,12,12,14,14,15, two per byte, low first.
	want := []byte{0x20, 0x42, 0x64, 0x76, 0xA8, 0xCA, 0xEC, 0xFE}
	if !bytes.Equal(q.Codes[8:], want) {
		t.Fatalf("codes % x, want % x", q.Codes[8:], want)
	}
	// Row 0: block amax 0.328125 gives s_b = 448 exactly (0x7E) and x = 6 → code 7 for w[0].
	if q.Scales[0] != 0x7E || q.Codes[0] != 0x07 {
		t.Fatalf("row 0: block scale %#02x, first code byte %#02x; want 0x7e, 0x07", q.Scales[0], q.Codes[0])
	}
}

func TestTinyBlockScaleRoundsToZero(t *testing.T) {
	// Block amax 2^-10·6·s2 gives s_b = 2^-10 exactly, an E4M3 tie that rounds to 0: den = 0, so
	// the quotients are +Inf (code 7), −Inf (15) and 0/0 = NaN (7), and the block decodes to 0.
	const k = 16
	w := make([]float32, 2*k)
	w[0] = 0.328125 // s2 = 2^-13
	b := float32(0x1p-10) * 6 * 0x1p-13
	copy(w[k:], []float32{b, -b, 0, float32(math.Copysign(0, -1)), b / 2})
	q, err := Quantize(w, 2, k, DivideExact)
	if err != nil {
		t.Fatal(err)
	}
	if q.Scales[1] != 0 {
		t.Fatalf("block scale %#02x, want 0", q.Scales[1])
	}
	want := []byte{0xF7, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77} // b/2 and the zeros: 7
	if !bytes.Equal(q.Codes[8:], want) {
		t.Fatalf("codes % x, want % x", q.Codes[8:], want)
	}
	dq := make([]float32, 2*k)
	if err := DecodeRows(dq, q.Codes, q.Scales, k, q.TensorScale); err != nil {
		t.Fatal(err)
	}
	for i := k; i < 2*k; i++ {
		if dq[i] != 0 {
			t.Fatalf("element %d decodes to %g, want 0", i, dq[i])
		}
	}
}

func TestAllZero(t *testing.T) {
	w := make([]float32, 4*32)
	q, err := Quantize(w, 4, 32, DivideExact)
	if err != nil {
		t.Fatal(err)
	}
	if q.TensorScale != float32(1)/2688 {
		t.Errorf("tensor scale %g, want 1/2688", q.TensorScale)
	}
	for i, s := range q.Scales {
		if s != 0x38 { // 1.0
			t.Fatalf("block scale %d = %#02x, want 0x38 (1.0)", i, s)
		}
	}
	for i, c := range q.Codes {
		if c != 0 {
			t.Fatalf("code byte %d = %#02x, want 0", i, c)
		}
	}
	// A zero block inside a non-zero tensor also gets block scale 1.0.
	w[40] = 1
	q, err = Quantize(w, 4, 32, DivideExact)
	if err != nil {
		t.Fatal(err)
	}
	if q.Scales[0] != 0x38 || q.Scales[2] != 0x7E {
		t.Errorf("block scales % x: want 0x38 for zero blocks and 0x7e for the amax block", q.Scales)
	}
}

func TestRoundTripBound(t *testing.T) {
	n, k := 32, 512
	w := testMatrix(7, n, k)
	for _, d := range []Division{DivideExact, DivideByReciprocal} {
		q, err := Quantize(w, n, k, d)
		if err != nil {
			t.Fatal(err)
		}
		dq := make([]float32, n*k)
		if err := DecodeRows(dq, q.Codes, q.Scales, k, q.TensorScale); err != nil {
			t.Fatal(err)
		}
		for b := 0; b < n*k/16; b++ {
			den := float64(fp8.E4M3ToFloat32(q.Scales[b])) * float64(q.TensorScale)
			for i := 16 * b; i < 16*b+16; i++ {
				// Half the E2M1 step at |x| (0.25 below 2, 0.5 below 4, 1 up to 6 and in the
				// saturated band just past 6), in units of den; a block whose scale rounded to
				// zero decodes to 0, off by at most its own amax < 2^-10·6·s2.
				x := math.Abs(float64(w[i])) / den
				half := 0.25
				switch {
				case x > 4:
					half = 1
				case x > 2:
					half = 0.5
				}
				bound := half*den*(1+1e-6) + 1e-30
				if den == 0 {
					bound = 0x1p-10 * 6 * float64(q.TensorScale)
				}
				if err := math.Abs(float64(dq[i] - w[i])); err > bound {
					t.Fatalf("%v: element %d: %g → %g, error %g > %g", d, i, w[i], dq[i], err, bound)
				}
			}
		}
		// The amax element is reproduced to within float32 rounding: 6·448·s2 ≈ amax.
		if math.Abs(float64(dq[3*k+5]-1.5)) > 1e-6 {
			t.Errorf("%v: amax element decodes to %g, want 1.5", d, dq[3*k+5])
		}
	}
}

func TestRowsAreIndependent(t *testing.T) {
	n, k := 12, 128
	w := testMatrix(11, n, k)
	whole, err := Quantize(w, n, k, DivideExact)
	if err != nil {
		t.Fatal(err)
	}
	codes := make([]byte, n*k/2)
	scales := make([]byte, n*k/16)
	for r0 := 0; r0 < n; r0 += 5 { // chunks of 5, 5, 2 rows
		r1 := min(n, r0+5)
		if err := QuantizeRows(codes[r0*k/2:r1*k/2], scales[r0*k/16:r1*k/16], w[r0*k:r1*k], k, whole.TensorScale); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(codes, whole.Codes) || !bytes.Equal(scales, whole.Scales) {
		t.Fatal("chunked QuantizeRows differs from Quantize")
	}
}

// roundQuotient rounds num/den to float32 with arbitrary-precision arithmetic (one rounding).
func roundQuotient(num, den float64) float32 {
	q := new(big.Float).SetPrec(256).Quo(new(big.Float).SetPrec(256).SetFloat64(num), new(big.Float).SetPrec(256).SetFloat64(den))
	f, _ := q.Float32()
	return f
}

func TestTensorScaleRounding(t *testing.T) {
	inv := roundQuotient(1, 2688)
	differ := 0
	for h := uint16(0x0080); h < 0x7F80; h++ { // every positive normal BF16 amax
		a := bf16.ToFloat32(h)
		if got, want := TensorScale(a, DivideExact), roundQuotient(float64(a), 2688); got != want {
			t.Fatalf("TensorScale(%g, exact) = %#08x, correctly rounded %#08x", a, math.Float32bits(got), math.Float32bits(want))
		}
		p := new(big.Float).SetPrec(256).Mul(new(big.Float).SetFloat64(float64(a)), new(big.Float).SetFloat64(float64(inv)))
		want, _ := p.Float32()
		got := TensorScale(a, DivideByReciprocal)
		if got != want {
			t.Fatalf("TensorScale(%g, reciprocal) = %#08x, want %#08x", a, math.Float32bits(got), math.Float32bits(want))
		}
		if got != TensorScale(a, DivideExact) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("the two division rules never differ on BF16 amax values; expected about one in six")
	}
	if TensorScale(3.0625, DivideExact) == TensorScale(3.0625, DivideByReciprocal) {
		t.Error("amax 3.0625 (used by the golden) should give different scales under the two rules")
	}
}

func TestDecodeExample(t *testing.T) {
	// Block scale 0x38 (1.0), tensor scale 0.5: codes 0x21 → [0.5, 1.0]·0.5, 0xF9 → [−0.5, −6]·0.5.
	codes := []byte{0x21, 0xF9, 0, 0, 0, 0, 0, 0}
	scales := []byte{0x38}
	dst := make([]float32, 16)
	if err := DecodeRows(dst, codes, scales, 16, 0.5); err != nil {
		t.Fatal(err)
	}
	want := []float32{0.25, 0.5, -0.25, -3}
	for i, v := range want {
		if dst[i] != v {
			t.Fatalf("decoded %v, want prefix %v", dst[:4], want)
		}
	}
	mlx := make([]float32, 16)
	if err := DecodeMLXRows(mlx, codes, scales, 16); err != nil || mlx[3] != -6 {
		t.Fatalf("DecodeMLXRows = %v, %v; want element 3 = −6 (tensor scale 1)", mlx[:4], err)
	}
}

func TestShapeErrors(t *testing.T) {
	dst := make([]float32, 32)
	cases := []struct {
		name           string
		dst            []float32
		codes, scales  []byte
		k              int
		wantSubstrings string
	}{
		{"k not multiple of 16", dst, make([]byte, 16), make([]byte, 2), 24, "multiple of 16"},
		{"partial row", dst[:24], make([]byte, 12), make([]byte, 1), 16, "whole number of rows"},
		{"codes short", dst, make([]byte, 15), make([]byte, 2), 16, "code bytes"},
		{"scales short", dst, make([]byte, 16), make([]byte, 1), 16, "block-scale bytes"},
	}
	for _, c := range cases {
		err := DecodeRows(c.dst, c.codes, c.scales, c.k, 1)
		if err == nil || !strings.Contains(err.Error(), c.wantSubstrings) {
			t.Errorf("%s: DecodeRows error %v, want one mentioning %q", c.name, err, c.wantSubstrings)
		}
		err = QuantizeRows(c.codes, c.scales, c.dst, c.k, 1)
		if err == nil || !strings.Contains(err.Error(), c.wantSubstrings) {
			t.Errorf("%s: QuantizeRows error %v, want one mentioning %q", c.name, err, c.wantSubstrings)
		}
	}
	w := make([]float32, 32)
	w[3] = float32(math.NaN())
	if _, err := Quantize(w, 2, 16, DivideExact); err == nil || !strings.Contains(err.Error(), "element 3") {
		t.Errorf("Quantize with NaN: %v", err)
	}
	if _, err := Quantize(w, 3, 16, DivideExact); err == nil {
		t.Error("Quantize accepted a shape that does not match the data")
	}
	// A tensor scale far too small for the data: block scale past 448.
	if err := QuantizeRows(make([]byte, 8), make([]byte, 1), []float32{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 16, 1e-6); err == nil || !strings.Contains(err.Error(), "> 448") {
		t.Errorf("QuantizeRows with a too-small tensor scale: %v", err)
	}
	if err := QuantizeRows(make([]byte, 8), make([]byte, 1), make([]float32, 16), 16, 0); err == nil {
		t.Error("QuantizeRows accepted tensor scale 0")
	}
}

func FuzzDecodeRows(f *testing.F) {
	f.Add([]byte{0x21, 0xF9, 0, 0, 0, 0, 0, 0, 0x38}, 16, float32(0.5))
	f.Add([]byte{}, 0, float32(1))
	f.Fuzz(func(t *testing.T, data []byte, k int, s2 float32) {
		if k < 0 || k > 1<<12 {
			return
		}
		// Split the input into codes and scales the way a caller with rows of k would.
		n := len(data) * 2 / 17 // elements such that n/2 + n/16 ≤ len(data)
		if k > 0 {
			n -= n % max(k, 1)
		}
		codes := data[:n/2]
		scales := data[n/2 : n/2+n/16]
		dst := make([]float32, n)
		if err := DecodeRows(dst, codes, scales, k, s2); err != nil {
			return
		}
		if k%16 != 0 || k == 0 {
			t.Fatalf("DecodeRows accepted K=%d", k)
		}
	})
}
