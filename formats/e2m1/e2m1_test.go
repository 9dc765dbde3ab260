package e2m1

import (
	"math"
	"testing"

	"lithos/formats/internal/golden"
)

// nearestEven is an independent statement of the rule for finite x: the closest of the eight
// magnitudes to |x| (ties to the even index), saturating at 6; sign bit when x < 0.
func nearestEven(x float32) uint8 {
	var sign uint8
	a := float64(x)
	if a < 0 {
		sign, a = 8, -a
	}
	a = min(a, Max) // saturate first: far magnitudes are equally far from 4 and 6 in float64
	best, bestD := 0, math.Inf(1)
	for i, m := range magnitudes {
		d := math.Abs(float64(m) - a)
		if d < bestD || (d == bestD && i%2 == 0) {
			best, bestD = i, d
		}
	}
	return sign | uint8(best)
}

func TestFromFloat32MatchesNearestEven(t *testing.T) {
	var xs []float32
	for i := -1024; i <= 1024; i++ { // every multiple of 1/128 in [−8, 8]: all ties included
		xs = append(xs, float32(i)/128)
	}
	for _, b := range []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5} {
		xs = append(xs, math.Nextafter32(b, 0), math.Nextafter32(b, 10), -math.Nextafter32(b, 0), -math.Nextafter32(b, 10))
	}
	xs = append(xs, 1e30, -1e30, 1e-45, -1e-45)
	for _, x := range xs {
		if got, want := FromFloat32(x), nearestEven(x); got != want {
			t.Errorf("FromFloat32(%g) = %d, want %d", x, got, want)
		}
	}
}

func TestFromFloat32Ties(t *testing.T) {
	// The table of qwen35-and-quant.md §B.4: ties go to the even code.
	cases := map[float32]uint8{0.25: 0, 0.75: 2, 1.25: 2, 1.75: 4, 2.5: 4, 3.5: 6, 5: 6, 6: 7, 6.5: 7, -0.75: 10, -5: 14}
	for x, want := range cases {
		if got := FromFloat32(x); got != want {
			t.Errorf("FromFloat32(%g) = %d, want %d", x, got, want)
		}
	}
}

func TestFromFloat32Specials(t *testing.T) {
	cases := []struct {
		x    float32
		want uint8
		why  string
	}{
		{float32(math.Copysign(0, -1)), 0, "−0.0 is not < 0"},
		{-1e-30, 8, "tiny negatives keep the sign bit"},
		{float32(math.Inf(1)), 7, "+Inf saturates"},
		{float32(math.Inf(-1)), 15, "−Inf saturates"},
		{float32(math.NaN()), 7, "NaN sorts after every threshold and is not < 0"},
		{float32(-math.NaN()), 7, "a negative NaN is not < 0 either"},
	}
	for _, c := range cases {
		if got := FromFloat32(c.x); got != c.want {
			t.Errorf("FromFloat32(%g) = %d, want %d (%s)", c.x, got, c.want, c.why)
		}
	}
}

func TestToFloat32(t *testing.T) {
	for c := uint8(0); c < 16; c++ {
		want := float64(magnitudes[c&7])
		if c&8 != 0 {
			want = -want
		}
		got := ToFloat32(c)
		if float64(got) != want || math.Signbit(float64(got)) != (c&8 != 0) {
			t.Errorf("ToFloat32(%d) = %g, want %g", c, got, want)
		}
		if FromFloat32(got) != c && c != 8 { // −0 encodes as 0
			t.Errorf("FromFloat32(ToFloat32(%d)) = %d", c, FromFloat32(got))
		}
		if Magnitude(c) != float32(math.Abs(want)) {
			t.Errorf("Magnitude(%d) = %g", c, Magnitude(c))
		}
	}
}

func TestGolden(t *testing.T) {
	var g struct {
		Decode      []uint32    `json:"decode"`
		Encode      [][2]uint32 `json:"encode"`
		TorchDecode []uint32    `json:"torch_decode"`
		TorchCast   []uint32    `json:"torch_cast"`
	}
	golden.JSON(t, "e2m1.json", &g)
	if len(g.Decode) != 16 || len(g.Encode) < 50 {
		t.Fatalf("e2m1.json holds %d decodes and %d encodes; regenerate with `%s`", len(g.Decode), len(g.Encode), golden.Command)
	}
	for c, bits := range g.Decode {
		if got := math.Float32bits(ToFloat32(uint8(c))); got != bits {
			t.Errorf("ToFloat32(%d) = %#08x, ModelOpt's table gives %#08x", c, got, bits)
		}
	}
	for _, e := range g.Encode {
		x := math.Float32frombits(e[0])
		if got := FromFloat32(x); uint32(got) != e[1] {
			t.Errorf("FromFloat32(%g = %#08x) = %d, ModelOpt's rule gives %d", x, e[0], got, e[1])
		}
	}
	// PyTorch's own float4 dtype, when it converts: the same table; the same codes except where
	// the package comment says ModelOpt's rule differs from a sign-bit cast (−0.0, NaN).
	if g.TorchDecode != nil {
		for c := range 16 {
			if g.TorchDecode[c] != g.Decode[c] {
				t.Errorf("torch float4_e2m1fn_x2 decodes code %d to %#08x, ModelOpt's table to %#08x", c, g.TorchDecode[c], g.Decode[c])
			}
		}
	}
	if g.TorchCast != nil {
		for i, e := range g.Encode {
			x := math.Float32frombits(e[0])
			if math.IsNaN(float64(x)) || x == 0 {
				continue
			}
			if g.TorchCast[i] != e[1] {
				t.Errorf("torch float4 cast of %g gives %d, ModelOpt's rule %d", x, g.TorchCast[i], e[1])
			}
		}
	}
}

// TestFromFloat32Sweep compares FromFloat32 with the brute-force statement on every 251st
// float32 bit pattern and around every threshold, both signs, and checks every NaN pattern
// class (code 7 whatever the sign).
func TestFromFloat32Sweep(t *testing.T) {
	check := func(b uint32) {
		x := math.Float32frombits(b)
		want := uint8(7)
		if !math.IsNaN(float64(x)) {
			want = nearestEven(x)
		}
		if got := FromFloat32(x); got != want {
			t.Fatalf("FromFloat32(%g = %#08x) = %d, want %d", x, b, got, want)
		}
	}
	for b := uint64(0); b < 1<<32; b += 251 {
		check(uint32(b))
	}
	for _, th := range []float32{0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, float32(math.Inf(1))} {
		for d := int32(-2); d <= 2; d++ {
			b := uint32(int32(math.Float32bits(th)) + d)
			check(b)
			check(b | 0x80000000)
		}
	}
	for _, b := range []uint32{0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0xFF800001, 0xFFC00000, 0xFFFFFFFF} {
		check(b)
	}
}
