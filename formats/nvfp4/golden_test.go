package nvfp4

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"lithos/formats/bf16"
	"lithos/formats/internal/golden"
)

const goldenFile = "nvfp4_golden.safetensors"

type goldenCase struct {
	name string
	n, k int
	x    []float32                // the BF16 input, widened
	want map[string]golden.Tensor // by suffix: weight, weight_scale, …, cuda.weight_scale_2
}

func f32s(t *testing.T, tn golden.Tensor, what string) []float32 {
	t.Helper()
	if tn.DType != "F32" || len(tn.Data)%4 != 0 {
		t.Fatalf("%s: dtype %s with %d bytes, want F32", what, tn.DType, len(tn.Data))
	}
	out := make([]float32, len(tn.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(tn.Data[4*i:]))
	}
	return out
}

func loadGolden(t *testing.T) ([]goldenCase, map[string]string) {
	t.Helper()
	ts, meta := golden.Safetensors(t, goldenFile)
	var cases []goldenCase
	for i := 0; ; i++ {
		name := fmt.Sprintf("x.%d", i)
		x, ok := ts[name]
		if !ok {
			break
		}
		if x.DType != "BF16" || len(x.Shape) != 2 {
			t.Fatalf("%s: %s %v, want a 2-D BF16 matrix", name, x.DType, x.Shape)
		}
		c := goldenCase{name: name, n: int(x.Shape[0]), k: int(x.Shape[1]), want: map[string]golden.Tensor{}}
		c.x = make([]float32, c.n*c.k)
		if err := bf16.Decode(c.x, x.Data); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, suffix := range []string{"weight", "weight_scale", "weight_scale_2", "dequant", "cuda.weight", "cuda.weight_scale", "cuda.weight_scale_2"} {
			tn, ok := ts[name+"."+suffix]
			if !ok {
				t.Fatalf("golden %s lacks %s.%s; regenerate with `%s`", goldenFile, name, suffix, golden.Command)
			}
			c.want[suffix] = tn
		}
		cases = append(cases, c)
	}
	if len(cases) < 2 {
		t.Fatalf("golden %s holds %d input matrices, want at least 2; regenerate with `%s`", goldenFile, len(cases), golden.Command)
	}
	return cases, meta
}

func compareQuantized(t *testing.T, label string, q *Tensor, codes, scales, s2 golden.Tensor) {
	t.Helper()
	if codes.DType != "U8" || scales.DType != "F8_E4M3" || s2.DType != "F32" {
		t.Fatalf("%s: golden dtypes %s/%s/%s, want U8/F8_E4M3/F32", label, codes.DType, scales.DType, s2.DType)
	}
	if want := binary.LittleEndian.Uint32(s2.Data); math.Float32bits(q.TensorScale) != want {
		t.Errorf("%s: weight_scale_2 = %#08x, golden %#08x", label, math.Float32bits(q.TensorScale), want)
	}
	if !bytes.Equal(q.Scales, scales.Data) {
		bad := 0
		for i := range q.Scales {
			if q.Scales[i] != scales.Data[i] {
				if bad++; bad <= 10 {
					t.Errorf("%s: weight_scale[%d, %d] = %#02x, golden %#02x", label, i/(q.K/16), i%(q.K/16), q.Scales[i], scales.Data[i])
				}
			}
		}
		t.Errorf("%s: %d block scales differ", label, bad)
	}
	if !bytes.Equal(q.Codes, codes.Data) {
		bad := 0
		for i := range q.Codes {
			if q.Codes[i] != codes.Data[i] {
				if bad++; bad <= 10 {
					t.Errorf("%s: weight byte [%d, %d] = %#02x, golden %#02x", label, i/(q.K/2), i%(q.K/2), q.Codes[i], codes.Data[i])
				}
			}
		}
		t.Errorf("%s: %d code bytes differ", label, bad)
	}
}

// TestGoldenQuantize checks the quantizer against the golden script's PyTorch implementation of
// ModelOpt's rule: DivideExact against the CPU run, DivideByReciprocal against the CUDA run.
func TestGoldenQuantize(t *testing.T) {
	cases, meta := loadGolden(t)
	for _, c := range cases {
		q, err := Quantize(c.x, c.n, c.k, DivideExact)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		compareQuantized(t, c.name+" (exact, CPU)", q, c.want["weight"], c.want["weight_scale"], c.want["weight_scale_2"])
		qc, err := Quantize(c.x, c.n, c.k, DivideByReciprocal)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		compareQuantized(t, c.name+" (reciprocal, CUDA)", qc, c.want["cuda.weight"], c.want["cuda.weight_scale"], c.want["cuda.weight_scale_2"])
	}
	// x.1's amax was chosen so that the two rules differ; the golden must show it.
	if meta["x.1.cuda_s2_differs"] != "true" {
		t.Errorf("golden metadata x.1.cuda_s2_differs = %q: PyTorch's CUDA division no longer multiplies by the reciprocal, "+
			"so DivideByReciprocal no longer describes ModelOpt on CUDA", meta["x.1.cuda_s2_differs"])
	}
}

func TestGoldenDecode(t *testing.T) {
	cases, _ := loadGolden(t)
	for _, c := range cases {
		want := f32s(t, c.want["dequant"], c.name+".dequant")
		s2 := math.Float32frombits(binary.LittleEndian.Uint32(c.want["weight_scale_2"].Data))
		got := make([]float32, c.n*c.k)
		if err := DecodeRows(got, c.want["weight"].Data, c.want["weight_scale"].Data, c.k, s2); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		bad := 0
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				if bad++; bad <= 10 {
					t.Errorf("%s: element [%d, %d] decodes to %g, golden %g", c.name, i/c.k, i%c.k, got[i], want[i])
				}
			}
		}
		st, err := CheckConvention(c.want["weight_scale"].Data, s2)
		if err != nil {
			t.Errorf("%s: CheckConvention on ModelOpt-rule output: %v", c.name, err)
		}
		if st.MaxBlockScale != 448 {
			t.Errorf("%s: largest block scale %g, want 448 (the block holding the tensor's amax)", c.name, st.MaxBlockScale)
		}
		// Read as a divisor, the same tensor must be refused.
		if _, err := CheckConvention(c.want["weight_scale"].Data, 1/s2); err == nil || !strings.Contains(err.Error(), "divisor") {
			t.Errorf("%s: CheckConvention with the reciprocal tensor scale: %v, want a divisor-convention error", c.name, err)
		}
	}
}

func TestGoldenTensorScales(t *testing.T) {
	var g struct {
		Amax  []uint32 `json:"amax"`
		Exact []uint32 `json:"exact"`
		CUDA  []uint32 `json:"cuda"`
	}
	golden.JSON(t, "nvfp4_s2.json", &g)
	if len(g.Amax) < 100 || len(g.Exact) != len(g.Amax) || len(g.CUDA) != len(g.Amax) {
		t.Fatalf("nvfp4_s2.json: %d amax, %d exact, %d cuda entries; regenerate with `%s`", len(g.Amax), len(g.Exact), len(g.CUDA), golden.Command)
	}
	differ := 0
	for i, ab := range g.Amax {
		a := math.Float32frombits(ab)
		if got := math.Float32bits(TensorScale(a, DivideExact)); got != g.Exact[i] {
			t.Errorf("TensorScale(%g, exact) = %#08x, PyTorch CPU %#08x", a, got, g.Exact[i])
		}
		if got := math.Float32bits(TensorScale(a, DivideByReciprocal)); got != g.CUDA[i] {
			t.Errorf("TensorScale(%g, reciprocal) = %#08x, ModelOpt's expression on CUDA %#08x", a, got, g.CUDA[i])
		}
		if g.Exact[i] != g.CUDA[i] {
			differ++
		}
	}
	t.Logf("CPU and CUDA tensor scales differ for %d of %d BF16 amax values", differ, len(g.Amax))
}
