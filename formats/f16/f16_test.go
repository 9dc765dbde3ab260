package f16

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"lithos/formats/internal/golden"
)

func isNaN16(h uint16) bool { return h&0x7C00 == 0x7C00 && h&0x3FF != 0 }

// formula decodes an F16 code from the IEEE definition in float64.
func formula(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 0x1F
	m := float64(h & 0x3FF)
	switch e {
	case 0x1F:
		if m == 0 {
			return s * math.Inf(1)
		}
		return math.NaN()
	case 0:
		return s * m * math.Pow(2, -24)
	}
	return s * (1 + m/1024) * math.Pow(2, float64(e-15))
}

func TestToFloat32MatchesFormula(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got := ToFloat32(uint16(h))
		want := formula(uint16(h))
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("ToFloat32(%#04x) = %g, want NaN", h, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("ToFloat32(%#04x) = %g, want %g", h, got, want)
		}
	}
}

// nearest rounds f to F16 by searching the sorted finite values (ties to the even code).
type table struct {
	vals  []float64
	codes []uint16
}

func newTable() table {
	var tb table
	for h := uint16(0); h < 0x7C00; h++ {
		tb.vals = append(tb.vals, formula(h))
		tb.codes = append(tb.codes, h)
	}
	return tb
}

func (tb table) nearest(f float64) uint16 {
	sign := uint16(0)
	if math.Signbit(f) {
		sign, f = 0x8000, -f
	}
	top := tb.vals[len(tb.vals)-1]
	step := top - tb.vals[len(tb.vals)-2]
	if f >= top+step/2 { // at or past the tie with the virtual next value (an even code: Inf)
		return sign | 0x7C00
	}
	i := sort.SearchFloat64s(tb.vals, f)
	if i == len(tb.vals) {
		return sign | tb.codes[i-1]
	}
	if tb.vals[i] == f || i == 0 {
		return sign | tb.codes[i]
	}
	lo, hi := tb.vals[i-1], tb.vals[i]
	switch {
	case f-lo < hi-f:
		return sign | tb.codes[i-1]
	case hi-f < f-lo:
		return sign | tb.codes[i]
	case tb.codes[i-1]&1 == 0:
		return sign | tb.codes[i-1]
	}
	return sign | tb.codes[i]
}

func TestFromFloat32MatchesNearestSearch(t *testing.T) {
	tb := newTable()
	r := rand.New(rand.NewPCG(3, 4))
	check := func(b uint32) {
		f := math.Float32frombits(b)
		if math.IsNaN(float64(f)) {
			return
		}
		if got, want := FromFloat32(f), tb.nearest(float64(f)); got != want {
			t.Fatalf("FromFloat32(%#08x = %g) = %#04x, want %#04x", b, f, got, want)
		}
	}
	// Random magnitudes across and beyond F16's range.
	for i := 0; i < 200000; i++ {
		e := uint32(r.IntN(60) + 127 - 30)
		check(r.Uint32()&0x807FFFFF | e<<23)
	}
	// Every midpoint between neighbouring codes and its float32 neighbours.
	for h := uint16(0); h < 0x7BFF; h++ {
		m := float32((formula(h) + formula(h+1)) / 2)
		b := math.Float32bits(m)
		check(b)
		check(b + 1)
		check(b - 1)
		check(b | 0x80000000)
	}
	for _, f := range []float32{65504, 65519.996, 65520, 65536, 1e10, 0, 1e-45, 5.960464477539063e-08, 2.9802322387695312e-08} {
		check(math.Float32bits(f))
	}
}

func TestSpecialValues(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3C00}, {-2, 0xC000}, {65504, 0x7BFF}, {65520, 0x7C00}, {65519.996, 0x7BFF},
		{float32(math.Inf(-1)), 0xFC00}, {5.960464477539063e-08, 0x0001}, // 2^-24
		{2.9802322387695312e-08, 0x0000}, // 2^-25: tie between 0 and the smallest subnormal
		{8.940696716308594e-08, 0x0002},  // 3·2^-25: tie, rounds to the even code 2
		{6.103515625e-05, 0x0400},        // 2^-14, the smallest normal
	}
	for _, c := range cases {
		if got := FromFloat32(c.in); got != c.want {
			t.Errorf("FromFloat32(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if got := FromFloat32(float32(math.NaN())); !isNaN16(got) {
		t.Errorf("FromFloat32(NaN) = %#04x, want NaN", got)
	}
}

func TestGolden(t *testing.T) {
	var g struct {
		Decode [][2]uint32 `json:"decode"`
		Encode [][2]uint32 `json:"encode"`
	}
	golden.JSON(t, "f16.json", &g)
	if len(g.Decode) < 1000 || len(g.Encode) < 1000 {
		t.Fatalf("f16.json holds %d decodes and %d encodes; regenerate with `%s`", len(g.Decode), len(g.Encode), golden.Command)
	}
	for _, d := range g.Decode {
		got := math.Float32bits(ToFloat32(uint16(d[0])))
		if isNaN16(uint16(d[0])) {
			if !math.IsNaN(float64(math.Float32frombits(d[1]))) {
				t.Errorf("golden decode of NaN code %#04x is %#08x", d[0], d[1])
			}
			continue
		}
		if got != d[1] {
			t.Errorf("ToFloat32(%#04x) = %#08x, torch.float16 gives %#08x", d[0], got, d[1])
		}
	}
	bad := 0
	for _, e := range g.Encode {
		got, want := FromFloat32(math.Float32frombits(e[0])), uint16(e[1])
		if isNaN16(want) && isNaN16(got) {
			continue
		}
		if got != want {
			if bad++; bad < 20 {
				t.Errorf("FromFloat32(%#08x) = %#04x, torch.float16 gives %#04x", e[0], got, want)
			}
		}
	}
}

func TestDecodeEncodeLengths(t *testing.T) {
	dst := make([]float32, 2)
	if err := Decode(dst, []byte{0, 0x3C, 0, 0xC0}); err != nil || dst[0] != 1 || dst[1] != -2 {
		t.Fatalf("Decode = %v, %v; want [1 -2]", dst, err)
	}
	if err := Decode(dst, []byte{0, 0x3C, 0}); err == nil {
		t.Error("Decode accepted 3 bytes for 2 values")
	}
	buf := make([]byte, 4)
	if err := Encode(buf, []float32{1, -2}); err != nil || buf[1] != 0x3C || buf[3] != 0xC0 {
		t.Fatalf("Encode = % x, %v", buf, err)
	}
	if err := Encode(buf[:3], []float32{1, -2}); err == nil {
		t.Error("Encode accepted 3 bytes for 2 values")
	}
}
