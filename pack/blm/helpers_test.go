package blm

import (
	"encoding/binary"
	"io"
	"math"
	"math/rand/v2"
	"testing"

	"lithos/formats"
	"lithos/formats/bf16"
	"lithos/formats/f16"
)

// testSpec is a format configuration for property tests (N, K and Lanes are set per case).
type testSpec struct {
	name string
	spec Spec
	kq   int64 // K must be a multiple of this
}

var testSpecs = []testSpec{
	{"bf16", Spec{Format: formats.BF16}, 1},
	{"f16", Spec{Format: formats.F16}, 1},
	{"fp8", Spec{Format: formats.FP8}, 1},
	{"int8-g32", Spec{Format: formats.Int8}, 32},
	{"int8-g16", Spec{Format: formats.Int8, GroupSize: 16}, 16},
	{"int4-g64-bf16", Spec{Format: formats.Int4, GroupSize: 64, ScaleType: "BF16"}, 64},
	{"int4-g32-f16", Spec{Format: formats.Int4, GroupSize: 32, ScaleType: "F16"}, 32},
	{"int4-g128-f32", Spec{Format: formats.Int4, GroupSize: 128, ScaleType: "F32"}, 128},
	{"nvfp4", Spec{Format: formats.NVFP4}, 16},
}

// mustGeometry builds a geometry or fails the test.
func mustGeometry(t testing.TB, s Spec) Geometry {
	t.Helper()
	g, err := NewGeometry(s)
	if err != nil {
		t.Fatalf("NewGeometry(%+v): %v", s, err)
	}
	return g
}

// randomRows fills stored rows with random bytes: every byte pattern is a valid stored
// tensor for the layout (the packer moves bytes; it does not interpret them).
func randomRows(r *rand.Rand, g Geometry, n int) Rows {
	rows := g.NewRows(n)
	for _, b := range [][]byte{rows.Codes, rows.Scales, rows.Biases} {
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	}
	return rows
}

// finiteRows fills stored rows with values whose decoded weights and scales are finite, for
// numeric tests: codes random except NaN patterns, scales drawn from a moderate range.
func finiteRows(r *rand.Rand, g Geometry, n int) Rows {
	rows := g.NewRows(n)
	switch g.Format {
	case formats.BF16:
		for i := 0; i < len(rows.Codes); i += 2 {
			binary.LittleEndian.PutUint16(rows.Codes[i:], bf16.FromFloat32(float32(r.NormFloat64())))
		}
	case formats.F16:
		for i := 0; i < len(rows.Codes); i += 2 {
			binary.LittleEndian.PutUint16(rows.Codes[i:], f16.FromFloat32(float32(r.NormFloat64())))
		}
	case formats.FP8:
		for i := range rows.Codes {
			c := byte(r.Uint32())
			if c&0x7F == 0x7F {
				c ^= 1
			}
			rows.Codes[i] = c
		}
	default:
		for i := range rows.Codes {
			rows.Codes[i] = byte(r.Uint32())
		}
	}
	switch g.Format {
	case formats.NVFP4:
		for i := range rows.Scales {
			rows.Scales[i] = byte(r.IntN(0x7E + 1)) // E4M3 0 … 448, no NaN, non-negative
		}
	case formats.Int8:
		for i := 0; i < len(rows.Scales); i += 2 {
			binary.LittleEndian.PutUint16(rows.Scales[i:], f16.FromFloat32(float32(r.Float64()*0.05)))
		}
	case formats.Int4:
		put := func(b []byte, v float32) {
			switch g.ScaleType {
			case "BF16":
				binary.LittleEndian.PutUint16(b, bf16.FromFloat32(v))
			case "F16":
				binary.LittleEndian.PutUint16(b, f16.FromFloat32(v))
			case "F32":
				binary.LittleEndian.PutUint32(b, math.Float32bits(v))
			}
		}
		e := 2
		if g.ScaleType == "F32" {
			e = 4
		}
		for i := 0; i < len(rows.Scales); i += e {
			put(rows.Scales[i:], float32(r.NormFloat64()*0.01))
			put(rows.Biases[i:], float32(r.NormFloat64()*0.1))
		}
	}
	return rows
}

// kValues returns column counts for a format quantum q: small, narrow, ragged and a few
// multiples of 512 and not.
func kValues(q int64) []int64 {
	var out []int64
	seen := map[int64]bool{}
	for _, k := range []int64{1, 2, 3, 7, 16, 17, 32, 48, 64, 96, 128, 200, 256, 272, 320, 384, 512, 640, 1008, 1024, 1040, 1536, 2048, 3584, 5120} {
		k = (k + q - 1) / q * q
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// nilWrap leaves a reader as it is.
func nilWrap(r io.Reader) io.Reader { return r }
