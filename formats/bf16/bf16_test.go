package bf16

import (
	"math"
	"math/rand/v2"
	"testing"

	"lithos/formats/internal/golden"
)

func isNaN16(h uint16) bool { return h&0x7F80 == 0x7F80 && h&0x7F != 0 }

// reference rounds f32 bits to BF16 by comparing the two candidate neighbours in float64.
func reference(b uint32) uint16 {
	f := float64(math.Float32frombits(b))
	lo := uint16(b >> 16) // truncation toward zero in magnitude
	hi := lo + 1
	vlo := float64(math.Float32frombits(uint32(lo) << 16))
	vhi := float64(math.Float32frombits(uint32(hi) << 16))
	dlo, dhi := math.Abs(f-vlo), math.Abs(vhi-f)
	switch {
	case dlo < dhi:
		return lo
	case dhi < dlo:
		return hi
	case lo&1 == 0:
		return lo
	default:
		return hi
	}
}

func TestFromFloat32MatchesNeighbourComparison(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500000; i++ {
		b := r.Uint32()
		if b&0x7FFFFFFF >= 0x7F7F8000 { // NaN/Inf and the overflow edge are covered by the golden
			continue
		}
		if got, want := FromFloat32(math.Float32frombits(b)), reference(b); got != want {
			t.Fatalf("FromFloat32(%#08x) = %#04x, want %#04x", b, got, want)
		}
	}
	// Every exact tie, both parities.
	for h := uint32(0); h < 0x7F7F; h += 13 {
		for _, low := range []uint32{0x7FFF, 0x8000, 0x8001} {
			b := h<<16 | low
			if got, want := FromFloat32(math.Float32frombits(b)), reference(b); got != want {
				t.Fatalf("FromFloat32(%#08x) = %#04x, want %#04x", b, got, want)
			}
		}
	}
}

func TestSpecialValues(t *testing.T) {
	cases := []struct {
		in   uint32
		want uint16
	}{
		{0x00000000, 0x0000},
		{0x80000000, 0x8000},
		{0x7F800000, 0x7F80},
		{0xFF800000, 0xFF80},
		{0x7F7F8000, 0x7F80}, // tie above the largest finite (odd) rounds to Inf
		{0x7F7F7FFF, 0x7F7F},
		{0x3F808000, 0x3F80}, // 1 + 2^-8: tie, 0x3F80 even stays
		{0x3F818000, 0x3F82}, // tie, 0x3F81 odd rounds up
		{0x00008000, 0x0000}, // subnormal tie to even zero
		{0x00018000, 0x0002},
	}
	for _, c := range cases {
		if got := FromFloat32(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("FromFloat32(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if got := FromFloat32(float32(math.NaN())); !isNaN16(got) {
		t.Errorf("FromFloat32(NaN) = %#04x, want a NaN", got)
	}
	if got := FromFloat32(math.Float32frombits(0xFF800001)); !isNaN16(got) || got&0x8000 == 0 {
		t.Errorf("FromFloat32(-sNaN) = %#04x, want a negative quiet NaN", got)
	}
}

func TestRoundTripAllCodes(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		if isNaN16(uint16(h)) {
			continue
		}
		if got := FromFloat32(ToFloat32(uint16(h))); got != uint16(h) {
			t.Fatalf("FromFloat32(ToFloat32(%#04x)) = %#04x", h, got)
		}
	}
}

func TestGolden(t *testing.T) {
	var g struct {
		Decode [][2]uint32 `json:"decode"`
		Encode [][2]uint32 `json:"encode"`
	}
	golden.JSON(t, "bf16.json", &g)
	if len(g.Decode) < 1000 || len(g.Encode) < 1000 {
		t.Fatalf("bf16.json holds %d decodes and %d encodes; regenerate with `%s`", len(g.Decode), len(g.Encode), golden.Command)
	}
	for _, d := range g.Decode {
		got := math.Float32bits(ToFloat32(uint16(d[0])))
		if isNaN16(uint16(d[0])) {
			if !math.IsNaN(float64(math.Float32frombits(d[1]))) || got>>31 != d[1]>>31 {
				t.Errorf("ToFloat32(%#04x) = %#08x; torch gives %#08x", d[0], got, d[1])
			}
			continue
		}
		if got != d[1] {
			t.Errorf("ToFloat32(%#04x) = %#08x, torch gives %#08x", d[0], got, d[1])
		}
	}
	bad := 0
	for _, e := range g.Encode {
		got := FromFloat32(math.Float32frombits(e[0]))
		want := uint16(e[1])
		if isNaN16(want) && isNaN16(got) { // NaN bits differ between torch's own code paths
			continue
		}
		if got != want {
			if bad++; bad < 20 {
				t.Errorf("FromFloat32(%#08x) = %#04x, torch.bfloat16 gives %#04x", e[0], got, want)
			}
		}
	}
}

func TestDecodeEncode(t *testing.T) {
	src := []float32{1, -2.5, 3.140625, 0}
	buf := make([]byte, 8)
	if err := Encode(buf, src); err != nil {
		t.Fatal(err)
	}
	want := []byte{0x80, 0x3F, 0x20, 0xC0, 0x49, 0x40, 0x00, 0x00} // little-endian BF16
	for i := range want {
		if buf[i] != want[i] {
			t.Fatalf("Encode = % x, want % x", buf, want)
		}
	}
	dst := make([]float32, 4)
	if err := Decode(dst, buf); err != nil {
		t.Fatal(err)
	}
	for i := range src {
		if dst[i] != src[i] {
			t.Fatalf("Decode = %v, want %v", dst, src)
		}
	}
	if err := Decode(dst, buf[:7]); err == nil {
		t.Error("Decode accepted 7 bytes for 4 values")
	}
	if err := Encode(buf[:6], src); err == nil {
		t.Error("Encode accepted 6 bytes for 4 values")
	}
}
