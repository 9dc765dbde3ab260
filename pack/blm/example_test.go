package blm

import (
	"testing"

	"lithos/formats"
	"lithos/formats/nvfp4"
)

// TestWorkedExampleNVFP4 is docs/blm.md §8.1, worked out by hand there: NVFP4 [3, 48], whose
// every byte and the GEMV result can be checked on paper.
func TestWorkedExampleNVFP4(t *testing.T) {
	g := mustGeometry(t, Spec{Format: formats.NVFP4, N: 3, K: 48})
	want := Geometry{Format: formats.NVFP4, N: 3, K: 48, Rows: 16, Lanes: 2, Fold: 16, Steps: 1, Stripe: 24,
		GroupSize: 16, ScaleType: "F8_E4M3", ScaleSlotBytes: 1, ScaleSlots: 2, PayloadBytes: 12, ScaleBytes: 2,
		UnitBytes: 16, BlockBytes: 512, Blocks: 1, TotalBytes: 512, StoredBytes: 81, PaddingBytes: 431}
	if g != want {
		t.Fatalf("geometry\n got %+v\nwant %+v", g, want)
	}
	// Stored rows: rows 0 and 2 all-zero codes with block scales 1.0 (E4M3 0x38); row 1 has
	// col 0 → code 0x2 (1.0), col 20 → 0x4 (2.0), col 30 → 0x7 (6.0), col 31 → 0xA (−1.0),
	// col 47 → 0x6 (4.0), block scales 1.0, 2.0, 0.5 (0x38, 0x40, 0x30).
	src := g.NewRows(3)
	for i := range src.Scales {
		src.Scales[i] = 0x38
	}
	row1 := src.Codes[24:48]
	row1[0], row1[10], row1[15], row1[23] = 0x02, 0x04, 0xA7, 0x60
	copy(src.Scales[3:6], []byte{0x38, 0x40, 0x30})

	packed := make([]byte, g.TotalBytes)
	if err := g.PackRows(packed, src); err != nil {
		t.Fatal(err)
	}
	wantBytes := map[int]byte{
		12: 0x38, 13: 0x38, 28: 0x38, 29: 0x38, // row 0: lane 0 (groups 0, 1), lane 1 (groups 1, 2)
		32: 0x02, 42: 0x04, 44: 0x38, 45: 0x40, // row 1, stripe 0 = lane 2 at byte 32
		51: 0xA7, 59: 0x60, 60: 0x40, 61: 0x30, // row 1, stripe 1 = lane 3 at byte 48
		76: 0x38, 77: 0x38, 92: 0x38, 93: 0x38, // row 2: lanes 4 and 5
	}
	for i, b := range packed {
		if b != wantBytes[i] {
			t.Errorf("packed byte %d = 0x%02x, want 0x%02x", i, b, wantBytes[i])
		}
	}
	for _, c := range []struct {
		row, col int64
		off      int64
		shift    uint
	}{{1, 30, 51, 0}, {1, 31, 51, 4}, {2, 5, 66, 4}, {1, 0, 32, 0}, {0, 47, 27, 4}} {
		off, shift, err := g.Element(c.row, c.col)
		if err != nil || off != c.off || shift != c.shift {
			t.Errorf("Element(%d, %d) = %d, %d, %v; want %d, %d", c.row, c.col, off, shift, err, c.off, c.shift)
		}
	}
	for _, c := range []struct{ row, col, off int64 }{{1, 30, 60}, {1, 20, 45}, {0, 47, 29}, {1, 5, 44}} {
		off, err := g.Scale(c.row, c.col)
		if err != nil || off != c.off {
			t.Errorf("Scale(%d, %d) = %d, %v; want %d", c.row, c.col, off, err, c.off)
		}
	}

	// GEMV with x = 1 and tensor scale 0.5: lane 2 gives 1·1.0 + 2·2.0 = 5, lane 3 gives
	// (6 − 1)·2.0 + 4·0.5 = 12; (5 + 12)·0.5 = 8.5.
	x := make([]float32, 48)
	for i := range x {
		x[i] = 1
	}
	y := make([]float32, 3)
	if err := g.GEMV(y, packed, []float32{0.5, 0.5, 0.5}, x, 1); err != nil {
		t.Fatal(err)
	}
	if y[0] != 0 || y[1] != 8.5 || y[2] != 0 {
		t.Errorf("GEMV = %v, want [0 8.5 0]", y)
	}
	// The same through the formats decoder.
	w := make([]float32, 48)
	if err := nvfp4.DecodeRows(w, row1, src.Scales[3:6], 48, 0.5); err != nil {
		t.Fatal(err)
	}
	var sum float32
	for _, v := range w {
		sum += v
	}
	if sum != 8.5 {
		t.Errorf("dequantized row 1 sums to %v, want 8.5", sum)
	}
}

// TestWorkedExampleFP8 is docs/blm.md §8.2: FP8 [20, 1024], the reference geometry (32 lanes),
// two blocks, addresses worked out by hand.
func TestWorkedExampleFP8(t *testing.T) {
	g := mustGeometry(t, Spec{Format: formats.FP8, N: 20, K: 1024})
	if g.Lanes != 32 || g.Stripe != 32 || g.UnitBytes != 32 || g.BlockBytes != 16384 || g.Blocks != 2 ||
		g.TotalBytes != 32768 || g.StoredBytes != 20480 || g.PaddingBytes != 12288 {
		t.Fatalf("geometry %+v", g)
	}
	for _, c := range []struct{ row, col, off int64 }{
		{0, 0, 0}, {0, 16, 512}, {0, 32, 16}, {1, 0, 1024}, {17, 100, 17460}, {17, 127, 17983}, {19, 1023, 16384 + (3*2*32+31)*16 + 512 + 15},
	} {
		off, _, err := g.Element(c.row, c.col)
		if err != nil || off != c.off {
			t.Errorf("Element(%d, %d) = %d, %v; want %d", c.row, c.col, off, err, c.off)
		}
	}
}

// TestLaneUnit checks that (block, step, lane) and (row, stripe) name the same units, each
// once, and that a step's word j is one 512-byte run over lanes 0 … 31.
func TestLaneUnit(t *testing.T) {
	for _, s := range []Spec{{Format: formats.NVFP4, N: 20, K: 256}, {Format: formats.FP8, N: 17, K: 1024}, {Format: formats.Int8, N: 40, K: 512}} {
		g := mustGeometry(t, s)
		seen := map[int64]bool{}
		for b := int64(0); b < g.Blocks; b++ {
			for st := 0; st < g.Steps; st++ {
				for l := 0; l < SIMDLanes; l++ {
					u, err := g.LaneUnit(b, st, l)
					if err != nil {
						t.Fatal(err)
					}
					v, err := g.Unit(u.Row, u.Stripe)
					if err != nil || v != u || u.Block != b || u.Step != st || u.Lane != l {
						t.Fatalf("LaneUnit(%d, %d, %d) = %+v; Unit(%d, %d) = %+v, %v", b, st, l, u, u.Row, u.Stripe, v, err)
					}
					if want := b*g.BlockBytes + int64(st*g.UnitBytes/WordBytes*StepStride+l*WordBytes); u.Offset != want {
						t.Fatalf("LaneUnit(%d, %d, %d) at %d, want %d", b, st, l, u.Offset, want)
					}
					if seen[u.Offset] {
						t.Fatalf("two units at %d", u.Offset)
					}
					seen[u.Offset] = true
				}
			}
		}
		if int64(len(seen))*int64(g.UnitBytes) != g.TotalBytes {
			t.Errorf("%s: %d units of %d bytes for %d packed bytes", g.Format, len(seen), g.UnitBytes, g.TotalBytes)
		}
		if _, err := g.LaneUnit(g.Blocks, 0, 0); err == nil {
			t.Error("LaneUnit past the last block: no error")
		}
		if _, err := g.LaneUnit(0, 0, 32); err == nil {
			t.Error("LaneUnit lane 32: no error")
		}
	}
}
