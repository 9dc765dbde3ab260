package nvfp4

import (
	"math"
	"strings"
	"testing"
)

func TestCheckConvention(t *testing.T) {
	w := testMatrix(21, 8, 256) // amax 1.5
	q, err := Quantize(w, 8, 256, DivideExact)
	if err != nil {
		t.Fatal(err)
	}
	st, err := CheckConvention(q.Scales, q.TensorScale)
	if err != nil {
		t.Fatalf("ModelOpt-rule tensor refused: %v", err)
	}
	if st.MaxBlockScale != 448 {
		t.Errorf("MaxBlockScale = %g, want 448", st.MaxBlockScale)
	}
	if math.Abs(float64(st.AbsMax)-1.5) > 1e-5 {
		t.Errorf("AbsMax = %g, want the tensor's amax 1.5", st.AbsMax)
	}
	// The divisor convention (compressed-tensors weight_global_scale = 2688/amax) read as a
	// multiplier: |w| reaches 6·448·2688/1.5 ≈ 4.8e6.
	_, err = CheckConvention(q.Scales, 2688/1.5)
	if err == nil || !strings.Contains(err.Error(), "divisor") {
		t.Errorf("divisor-convention tensor scale: err = %v, want a divisor error", err)
	}
	// A fused-group member whose block scales stop well below 448 is fine.
	low := make([]byte, len(q.Scales))
	for i := range low {
		low[i] = 0x40 // 2.0
	}
	if _, err := CheckConvention(low, q.TensorScale); err != nil {
		t.Errorf("block scales at 2.0: %v", err)
	}
	cases := []struct {
		name   string
		scales []byte
		s2     float32
		want   string
	}{
		{"NaN block scale", []byte{0x38, 0x7F}, 1e-3, "NaN"},
		{"negative NaN block scale", []byte{0xFF}, 1e-3, "NaN"},
		{"negative block scale", []byte{0x38, 0xB8}, 1e-3, "negative"},
		{"zero tensor scale", []byte{0x38}, 0, "finite positive"},
		{"negative tensor scale", []byte{0x38}, -1e-3, "finite positive"},
		{"NaN tensor scale", []byte{0x38}, float32(math.NaN()), "finite positive"},
		{"infinite tensor scale", []byte{0x38}, float32(math.Inf(1)), "finite positive"},
	}
	for _, c := range cases {
		if _, err := CheckConvention(c.scales, c.s2); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	// −0 block scales (0x80) are harmless zeros.
	if _, err := CheckConvention([]byte{0x80, 0x7E}, 1e-3); err != nil {
		t.Errorf("−0 block scale: %v", err)
	}
}
