package blm

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"lithos/formats"
)

// TestReferenceAnchors reproduces the unit sizes of the reference design's contract tests
// (lithos-metal.md §2.1, tests/contract/test_formats.py): with 32 lanes per row our units are
// the reference's inline units. (payload, scale, unit) bytes.
func TestReferenceAnchors(t *testing.T) {
	int4 := func(k int64) Spec { return Spec{Format: formats.Int4, K: k, GroupSize: 64, ScaleType: "BF16"} }
	for _, c := range []struct {
		name    string
		spec    Spec
		p, s, u int
	}{
		{"nvfp4 K=1024", Spec{Format: formats.NVFP4, K: 1024}, 16, 2, 32},
		{"fp8 K=1024", Spec{Format: formats.FP8, K: 1024}, 32, 0, 32},
		{"bf16 K=1024", Spec{Format: formats.BF16, K: 1024}, 64, 0, 64},
		{"int8 K=1024", Spec{Format: formats.Int8, K: 1024}, 32, 2, 48},
		{"int4 K=1024", int4(1024), 16, 4, 32},
		{"nvfp4 K=5120", Spec{Format: formats.NVFP4, K: 5120}, 80, 10, 96},
		{"fp8 K=5120", Spec{Format: formats.FP8, K: 5120}, 160, 0, 160},
		{"int4 K=2048", int4(2048), 32, 4, 48},
		{"int4 K=3584 (ragged stripes)", int4(3584), 56, 12, 80},
	} {
		c.spec.N, c.spec.Lanes = 16, 32
		g := mustGeometry(t, c.spec)
		if g.PayloadBytes != c.p || g.ScaleBytes != c.s || g.UnitBytes != c.u {
			t.Errorf("%s: (payload, scale, unit) = (%d, %d, %d), reference (%d, %d, %d)",
				c.name, g.PayloadBytes, g.ScaleBytes, g.UnitBytes, c.p, c.s, c.u)
		}
	}
}

// TestLanePolicy checks the lanes the policy picks against values worked out by hand
// (docs/blm.md §3), and that every choice satisfies the rule as stated, by brute force over
// all lane counts.
func TestLanePolicy(t *testing.T) {
	int4 := Spec{Format: formats.Int4, GroupSize: 64, ScaleType: "BF16"}
	for _, c := range []struct {
		spec  Spec
		k     int64
		lanes int
		unit  int
	}{
		{Spec{Format: formats.NVFP4}, 256, 2, 80},     // W=128: 64+8 → 80 (stored 144/row: +11.1 %)
		{Spec{Format: formats.NVFP4}, 512, 4, 80},     // W=128
		{Spec{Format: formats.NVFP4}, 1024, 8, 80},    // W=128 (the reference's 32 lanes: 32-byte units, +78 %)
		{Spec{Format: formats.NVFP4}, 4096, 32, 80},   // W=128: +11.1 % ≤ 12.5 %
		{Spec{Format: formats.NVFP4}, 5120, 32, 96},   // +6.7 %
		{Spec{Format: formats.NVFP4}, 17408, 32, 320}, // W=544: 272+34 → 320, +4.6 %
		{Spec{Format: formats.FP8}, 256, 16, 16},      // W=16
		{Spec{Format: formats.FP8}, 5120, 32, 160},
		{Spec{Format: formats.BF16}, 256, 32, 16},
		{Spec{Format: formats.Int8}, 256, 2, 144},  // W=128: 128+8 → 144
		{Spec{Format: formats.Int8}, 1024, 8, 144}, // the reference's 48-byte units are +41 %
		{int4, 256, 2, 80},                         // W=128: 64+2·4 → 80
		{int4, 1024, 8, 80},                        // the reference's 32-byte units are +78 %
		{Spec{Format: formats.NVFP4}, 48, 2, 16},   // the worked example: nothing ≤ 12.5 %, fewest bytes
	} {
		s := c.spec
		s.K, s.N = c.k, 1
		g := mustGeometry(t, s)
		if g.Lanes != c.lanes || g.UnitBytes != c.unit {
			t.Errorf("%s K=%d: lanes %d unit %d, want lanes %d unit %d", s.Format, c.k, g.Lanes, g.UnitBytes, c.lanes, c.unit)
		}
	}

	for _, ts := range testSpecs {
		for _, k := range kValues(ts.kq) {
			s := ts.spec
			s.K, s.N = k, 1
			chosen, err := ChooseLanes(s)
			if err != nil {
				t.Fatal(err)
			}
			row := map[int]int64{}
			var stored int64
			for _, l := range laneChoices {
				s.Lanes = l
				g := mustGeometry(t, s)
				row[l] = int64(l) * int64(g.UnitBytes)
				stored = g.StoredBytes
			}
			// The rule: the largest lanes within 12.5 %; else the fewest bytes, larger on ties.
			want := 0
			for _, l := range laneChoices {
				if row[l]*8 <= stored*9 {
					want = l
					break
				}
			}
			if want == 0 {
				for _, l := range laneChoices {
					if want == 0 || row[l] < row[want] {
						want = l
					}
				}
			}
			if chosen != want {
				t.Errorf("%s K=%d: policy chose %d lanes, the rule gives %d (row bytes %v, stored %d)", ts.name, k, chosen, want, row, stored)
			}
		}
	}
}

// TestGeometryInvariants checks the size identities for every format, shape and lane count.
func TestGeometryInvariants(t *testing.T) {
	for _, ts := range testSpecs {
		for _, k := range kValues(ts.kq) {
			for _, n := range []int64{0, 1, 15, 16, 17, 33} {
				for _, l := range append([]int{0}, laneChoices[:]...) {
					s := ts.spec
					s.K, s.N, s.Lanes = k, n, l
					g := mustGeometry(t, s)
					if err := g.Check(); err != nil {
						t.Fatalf("%s: Check of a fresh geometry: %v", ts.name, err)
					}
					w, gran := int64(g.Stripe), int64(1)
					if g.Format == formats.NVFP4 || g.Format == formats.Int4 {
						gran = 2
					}
					switch {
					case g.Lanes*g.Fold != SIMDLanes, g.Steps*g.Fold != g.Rows,
						g.UnitBytes%WordBytes != 0, g.UnitBytes < g.PayloadBytes+g.ScaleBytes, g.UnitBytes >= g.PayloadBytes+g.ScaleBytes+WordBytes,
						int64(g.Lanes)*w < k, int64(g.Lanes)*(w-gran) >= k,
						g.BlockBytes != int64(g.Steps*SIMDLanes*g.UnitBytes),
						g.Blocks*16 < n, (g.Blocks-1)*16 >= n && n > 0,
						g.TotalBytes != g.Blocks*g.BlockBytes,
						g.StoredBytes != n*g.StoredRowBytes(),
						g.PaddingBytes != g.TotalBytes-g.StoredBytes, g.PaddingBytes < 0:
						t.Fatalf("%s N=%d K=%d lanes %d: inconsistent geometry %+v", ts.name, n, k, l, g)
					}
				}
			}
		}
	}
}

func TestGeometryCheckAndJSON(t *testing.T) {
	g := mustGeometry(t, Spec{Format: formats.Int4, N: 40, K: 3584, GroupSize: 64, ScaleType: "F16"})
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var back Geometry
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != g || back.Check() != nil {
		t.Fatalf("JSON round trip: %+v → %s → %+v", g, b, back)
	}
	// Every tampered field is caught and named.
	v := reflect.ValueOf(&back).Elem()
	for i := 0; i < v.NumField(); i++ {
		back = g
		f := v.Field(i)
		name := v.Type().Field(i).Tag.Get("json")
		name, _, _ = strings.Cut(name, ",")
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 16)
		case reflect.String:
			f.SetString(f.String() + "x")
		}
		err := back.Check()
		if err == nil {
			t.Errorf("field %s changed: Check accepted %+v", name, back)
			continue
		}
		switch name {
		case "format", "n", "k", "group_size", "scale_type", "lanes":
			// These are inputs: the error is the Spec's, or the re-derived field's.
		default:
			if !strings.Contains(err.Error(), name) {
				t.Errorf("field %s changed: error %q does not name it", name, err)
			}
		}
	}
}

func TestSpecErrors(t *testing.T) {
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{K: 16}, "no format"},
		{Spec{Format: formats.F32, K: 16}, "convert it to bf16"},
		{Spec{Format: formats.Int4AWQ, K: 64}, "int4_affine"},
		{Spec{Format: formats.NVFP4, K: 24}, "multiple of the group size 16"},
		{Spec{Format: formats.NVFP4, K: 32, GroupSize: 32}, "want 16"},
		{Spec{Format: formats.NVFP4, K: 32, ScaleType: "U8"}, "F8_E4M3"},
		{Spec{Format: formats.Int8, K: 48}, "multiple of the group size 32"},
		{Spec{Format: formats.Int8, K: 48, GroupSize: -3}, "out of range"},
		{Spec{Format: formats.Int8, K: 64, ScaleType: "BF16"}, "want F16"},
		{Spec{Format: formats.Int4, K: 64, ScaleType: "BF16"}, "group size 0"},
		{Spec{Format: formats.Int4, K: 64, GroupSize: 64}, "scale type"},
		{Spec{Format: formats.BF16, K: 64, GroupSize: 16}, "no block scales"},
		{Spec{Format: formats.FP8, K: 0}, "out of range"},
		{Spec{Format: formats.FP8, K: MaxK + 1}, "out of range"},
		{Spec{Format: formats.FP8, K: 8, N: -1}, "N = -1"},
		{Spec{Format: formats.FP8, K: 8, N: MaxN + 1}, "out of range"},
		{Spec{Format: formats.FP8, K: 8, Lanes: 64}, "lanes per row 64"},
		{Spec{Format: formats.FP8, K: 8, Lanes: 1}, "lanes per row 1"},
	} {
		_, err := NewGeometry(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewGeometry(%+v) = %v, want an error containing %q", c.spec, err, c.want)
		}
	}
	// NVFP4MLX is the same bytes: recorded as NVFP4.
	g := mustGeometry(t, Spec{Format: formats.NVFP4MLX, N: 1, K: 64})
	if g.Format != formats.NVFP4 || g.Check() != nil {
		t.Errorf("nvfp4_mlx geometry %+v", g)
	}
}
