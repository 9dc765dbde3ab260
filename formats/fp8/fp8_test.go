package fp8

import (
	"math"
	"math/rand/v2"
	"testing"

	"lithos/formats/internal/golden"
)

// spec describes a format independently of the package's tables.
type spec struct {
	name       string
	ebits      int
	mbits      int
	bias       int
	decode     func(uint8) float32
	encode     func(float32) uint8
	encodeSat  func(float32) uint8
	max        float64
	overflow   uint8 // magnitude code of the non-saturating cast past max
	isNaN      func(c uint8) bool
	isInfinity func(c uint8) bool
}

var specs = []spec{
	{name: "e4m3", ebits: 4, mbits: 3, bias: 7, decode: E4M3ToFloat32, encode: E4M3FromFloat32, encodeSat: E4M3FromFloat32Sat,
		max: 448, overflow: 0x7F,
		isNaN:      func(c uint8) bool { return c&0x7F == 0x7F },
		isInfinity: func(uint8) bool { return false }},
	{name: "e5m2", ebits: 5, mbits: 2, bias: 15, decode: E5M2ToFloat32, encode: E5M2FromFloat32, encodeSat: E5M2FromFloat32Sat,
		max: 57344, overflow: 0x7C,
		isNaN:      func(c uint8) bool { return c&0x7F > 0x7C },
		isInfinity: func(c uint8) bool { return c&0x7F == 0x7C }},
}

// value is the textbook decode: (−1)^s · 2^(e−bias) · (1 + m/2^M), subnormal 2^(1−bias) · m/2^M.
func (s spec) value(c uint8) float64 {
	e := int(c>>s.mbits) & (1<<s.ebits - 1)
	m := float64(int(c) & (1<<s.mbits - 1))
	frac := m / float64(int(1)<<s.mbits)
	var v float64
	if e == 0 {
		v = math.Pow(2, float64(1-s.bias)) * frac
	} else {
		v = math.Pow(2, float64(e-s.bias)) * (1 + frac)
	}
	if c&0x80 != 0 {
		v = -v
	}
	return v
}

func TestDecodeMatchesFormula(t *testing.T) {
	for _, s := range specs {
		for c := 0; c < 256; c++ {
			got := s.decode(uint8(c))
			switch {
			case s.isNaN(uint8(c)):
				if !math.IsNaN(float64(got)) || math.Signbit(float64(got)) != (c&0x80 != 0) {
					t.Errorf("%s code %#02x = %g, want NaN with sign %d", s.name, c, got, c>>7)
				}
			case s.isInfinity(uint8(c)):
				if !math.IsInf(float64(got), 1-2*(c>>7)) {
					t.Errorf("%s code %#02x = %g, want Inf", s.name, c, got)
				}
			default:
				if want := s.value(uint8(c)); float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
					t.Errorf("%s code %#02x = %g, want %g", s.name, c, got, want)
				}
			}
		}
	}
	if E4M3ToFloat32(0x7E) != E4M3Max || E5M2ToFloat32(0x7B) != E5M2Max {
		t.Errorf("largest finite codes decode to %g and %g", E4M3ToFloat32(0x7E), E5M2ToFloat32(0x7B))
	}
}

// nearest rounds x by brute force over the finite codes: the closest value, ties to the even
// code, then the overflow policy for magnitudes at or past the tie with the next (virtual) value.
func (s spec) nearest(x float32, saturate bool) uint8 {
	f := float64(x)
	var sign uint8
	if math.Signbit(f) {
		sign, f = 0x80, -f
	}
	if math.IsNaN(f) {
		return sign | 0x7F
	}
	var maxCode uint8
	for c := 0; c < 0x80; c++ {
		if !s.isNaN(uint8(c)) && !s.isInfinity(uint8(c)) {
			maxCode = uint8(c)
		}
	}
	// Past the midpoint with the first value beyond max (code maxCode+1), or at it when that
	// code is the even one, the rounded magnitude leaves the finite range.
	step := s.value(maxCode) - s.value(maxCode-1)
	if mid := s.max + step/2; f > mid || (f == mid && maxCode&1 == 1) {
		if saturate {
			return sign | maxCode
		}
		return sign | s.overflow
	}
	best := uint8(0)
	bestD := math.Inf(1)
	for c := uint8(0); c <= maxCode; c++ {
		d := math.Abs(s.value(c) - f)
		if d < bestD || (d == bestD && c&1 == 0) {
			best, bestD = c, d
		}
	}
	return sign | best
}

func TestEncodeMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, s := range specs {
		var inputs []float32
		for c := uint8(0); c < 0x7F; c++ { // every value, every midpoint and the float32s around it
			v := s.value(c)
			mid := float32((v + s.value(c+1)) / 2)
			for _, x := range []float32{float32(v), mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1e30)} {
				inputs = append(inputs, x, -x)
			}
		}
		for i := 0; i < 20000; i++ {
			e := r.Float64()*44 - 22
			x := float32(math.Pow(2, e))
			if i%2 == 1 {
				x = -x
			}
			inputs = append(inputs, x)
		}
		inputs = append(inputs, 0, float32(math.Copysign(0, -1)), 1e-45, float32(math.Inf(1)), float32(math.Inf(-1)),
			float32(math.NaN()), 3e38, 1e6)
		for _, x := range inputs {
			if got, want := s.encode(x), s.nearest(x, false); got != want {
				t.Fatalf("%s encode(%g) = %#02x, want %#02x", s.name, x, got, want)
			}
			if got, want := s.encodeSat(x), s.nearest(x, true); got != want {
				t.Fatalf("%s saturating encode(%g) = %#02x, want %#02x", s.name, x, got, want)
			}
		}
	}
}

func TestEncodeTies(t *testing.T) {
	cases := []struct {
		x       float32
		e4m3    uint8
		e4m3Sat uint8
	}{
		{464, 0x7E, 0x7E},       // tie between 448 (0x7E, even) and the next code (NaN): 448
		{464.00003, 0x7F, 0x7E}, // just above the tie: NaN / saturated 448
		{480, 0x7F, 0x7E},       // 480 and beyond: NaN in PyTorch's cast
		{1.0625, 0x38, 0x38},    // 1 + 2^-4: tie between 1.0 (0x38) and 1.125 (0x39) → even 0x38
		{1.1875, 0x3A, 0x3A},    // tie between 1.125 (0x39) and 1.25 (0x3A) → even 0x3A
		{0.0009765625, 0, 0},    // 2^-10: tie between 0 and the smallest subnormal → 0
		{0.0029296875, 2, 2},    // 3·2^-10: tie between codes 1 and 2 → 2
		{-0.0029296875, 0x82, 0x82},
	}
	for _, c := range cases {
		if got := E4M3FromFloat32(c.x); got != c.e4m3 {
			t.Errorf("E4M3FromFloat32(%g) = %#02x, want %#02x", c.x, got, c.e4m3)
		}
		if got := E4M3FromFloat32Sat(c.x); got != c.e4m3Sat {
			t.Errorf("E4M3FromFloat32Sat(%g) = %#02x, want %#02x", c.x, got, c.e4m3Sat)
		}
	}
	if got := E5M2FromFloat32(61440); got != 0x7C { // tie between 57344 and 65536 → Inf
		t.Errorf("E5M2FromFloat32(61440) = %#02x, want 0x7c", got)
	}
	if got := E5M2FromFloat32Sat(float32(math.Inf(-1))); got != 0xFB {
		t.Errorf("E5M2FromFloat32Sat(-Inf) = %#02x, want 0xfb", got)
	}
}

func TestRoundTripAllCodes(t *testing.T) {
	for _, s := range specs {
		for c := 0; c < 256; c++ {
			if s.isNaN(uint8(c)) {
				continue
			}
			v := s.decode(uint8(c))
			if got := s.encode(v); got != uint8(c) {
				t.Errorf("%s encode(decode(%#02x) = %g) = %#02x", s.name, c, v, got)
			}
		}
	}
}

type fp8Golden struct {
	Decode []uint32    `json:"decode"`
	Encode [][3]uint32 `json:"encode"`
	CUDAEn []uint32    `json:"cuda_encode_mismatches"`
	CUDADe []int       `json:"cuda_decode_mismatches"`
}

func TestGolden(t *testing.T) {
	for _, s := range specs {
		t.Run(s.name, func(t *testing.T) {
			var g fp8Golden
			golden.JSON(t, s.name+".json", &g)
			if len(g.Decode) != 256 || len(g.Encode) < 1000 {
				t.Fatalf("%s.json holds %d decodes and %d encodes; regenerate with `%s`", s.name, len(g.Decode), len(g.Encode), golden.Command)
			}
			for c, bits := range g.Decode {
				got := s.decode(uint8(c))
				want := math.Float32frombits(bits)
				if math.IsNaN(float64(want)) {
					if !math.IsNaN(float64(got)) {
						t.Errorf("decode(%#02x) = %g, torch gives NaN", c, got)
					}
					continue
				}
				if math.Float32bits(got) != bits {
					t.Errorf("decode(%#02x) = %g (%#08x), torch gives %g (%#08x)", c, got, math.Float32bits(got), want, bits)
				}
			}
			bad := 0
			for _, e := range g.Encode {
				x := math.Float32frombits(e[0])
				got, gotSat := s.encode(x), s.encodeSat(x)
				if got != uint8(e[1]) || gotSat != uint8(e[2]) {
					if bad++; bad < 20 {
						t.Errorf("encode(%g = %#08x) = %#02x / saturating %#02x; torch gives %#02x / %#02x", x, e[0], got, gotSat, e[1], e[2])
					}
				}
			}
			if len(g.CUDAEn) > 0 || len(g.CUDADe) > 0 {
				t.Errorf("PyTorch's CUDA casts disagree with its CPU casts on %d inputs / %d codes (first %v): the contract follows CPU", len(g.CUDAEn), len(g.CUDADe), g.CUDAEn)
			}
		})
	}
}
