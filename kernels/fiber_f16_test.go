package kernels

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/formats/f16"
	"lithos/formats/fp8"
)

// The tensor-core build's f16 emulation (prelude/metal.h: blmx_f32_to_f16, blmx_f16_to_f32,
// blmx_e4m3x2), which the fiber runtime runs for the MMA-layout kernels' decode and
// activation split, against PyTorch's casts: testdata/formats/f16.json (tools/formats_goldens.py:
// float32 → float16 at ties, overflow and subnormals, code → float32) and e4m3.json (every E4M3
// code → float32, whose f16 is exact).
const f16Kernels = `#define LITHOS_BLM_MMA 1
#include <metal_stdlib>
using namespace metal;
%PRELUDE%
kernel void enc(device const uint* in, device uint* out, uint tid, uint3 tg) { const uint i = tg.x * 64u + tid; out[i] = blmx_f32_to_f16(as_type<float>(in[i])); }
kernel void dec(device const uint* in, device uint* out, uint tid, uint3 tg) { const uint i = tg.x * 64u + tid; out[i] = as_type<uint>(blmx_f16_to_f32(in[i])); }
kernel void e4m3(device const uint* in, device uint* out, uint tid, uint3 tg) { const uint i = tg.x * 64u + tid; out[i] = blmx_e4m3x2(in[i]); }
`

func TestFiberF16Emulation(t *testing.T) {
	pre, err := sources.ReadFile("prelude/metal.h")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(f16Kernels, "%PRELUDE%", string(pre), 1)
	order := []string{"enc", "dec", "e4m3"}
	calls := map[string]string{}
	for _, n := range order {
		calls[n] = n + "((const uint*)a[0], (uint*)a[1], ids.tid, ids.tg)"
	}
	exe, err := buildFiber(t, t.TempDir(), "f16", src, calls, order)
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string, in []uint32) []uint32 {
		n := (len(in) + 63) / 64 * 64
		in = append(in, make([]uint32, n-len(in))...)
		var j job
		a, b := j.buf(u32Bytes(in)), j.buf(make([]byte, 4*n))
		j.disps = append(j.disps, dispatch{name: name, grid: [3]uint32{uint32(n / 64), 1, 1}, threads: 64, args: []int{a, b}})
		res, err := j.run(t, exe)
		if err != nil {
			t.Fatal(err)
		}
		return bytesU32(res[b])
	}
	var g struct {
		Decode [][2]uint32 `json:"decode"`
		Encode [][2]uint32 `json:"encode"`
	}
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "formats", "f16.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &g); err != nil || len(g.Decode) < 1000 || len(g.Encode) < 1000 {
		t.Fatalf("f16.json: %v (%d decodes, %d encodes)", err, len(g.Decode), len(g.Encode))
	}
	in := make([]uint32, len(g.Encode))
	for i, e := range g.Encode {
		in[i] = e[0]
	}
	for i, got := range run("enc", in)[:len(in)] {
		want := g.Encode[i][1]
		if math.IsNaN(float64(math.Float32frombits(in[i]))) {
			if got&0x7C00 != 0x7C00 || got&0x3FF == 0 {
				t.Fatalf("f32 %#08x (NaN) → f16 %#04x: want a NaN", in[i], got)
			}
			continue
		}
		if got != want {
			t.Fatalf("f32 %#08x (%g) → f16 %#04x, PyTorch %#04x", in[i], math.Float32frombits(in[i]), got, want)
		}
	}
	in = in[:0]
	for _, d := range g.Decode {
		in = append(in, d[0])
	}
	for i, got := range run("dec", in)[:len(in)] {
		want := g.Decode[i][1]
		if math.IsNaN(float64(math.Float32frombits(want))) {
			if !math.IsNaN(float64(math.Float32frombits(got))) {
				t.Fatalf("f16 %#04x → %#08x: want a NaN", in[i], got)
			}
			continue
		}
		if got != want {
			t.Fatalf("f16 %#04x → f32 %#08x, PyTorch %#08x", in[i], got, want)
		}
	}
	// Every pair of E4M3 codes: both halves the f16 of PyTorch's E4M3 value (exact in f16).
	in = in[:0]
	for c := uint32(0); c < 1<<16; c++ {
		in = append(in, c)
	}
	for c, got := range run("e4m3", in)[:1<<16] {
		for h := 0; h < 2; h++ {
			code := byte(c >> (8 * h))
			v := fp8.E4M3ToFloat32(code)
			half := uint16(got >> (16 * h))
			if math.IsNaN(float64(v)) {
				if half&0x7C00 != 0x7C00 || half&0x3FF == 0 {
					t.Fatalf("E4M3 %#02x (NaN) → f16 %#04x: want a NaN", code, half)
				}
				continue
			}
			if want := f16.FromFloat32(v); half != want || f16.ToFloat32(half) != v {
				t.Fatalf("E4M3 %#02x (%g) → f16 %#04x, want %#04x", code, v, half, want)
			}
		}
	}
}
