package model

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"lithos/formats/bf16"
)

// TestKVBF16: with SetKVBF16 every cached key and value is a BF16 value — in the first
// attention layer's first step, whose inputs do not depend on the cache yet, FromFloat32 of what
// the float32 state caches for the same tokens (the rounding is the last thing written) — the
// logits move from the float32 state's by more than float32 noise and stay close (the rounding
// is 2⁻⁹ relative), and a snapshot of one kind does not restore into the other.
func TestKVBF16(t *testing.T) {
	raw := randomRaw(testConfig(), 41)
	m := raw.model(t)
	ctx := context.Background()
	toks := randomTokens(rand.New(rand.NewPCG(42, 42)), 13, raw.cfg.Vocab)
	run := func(bf bool) (*State, []float32) {
		st := newState(t, m, 32)
		st.SetKVBF16(bf)
		if st.KVBF16() != bf {
			t.Fatalf("KVBF16() = %v after SetKVBF16(%v)", st.KVBF16(), bf)
		}
		// The prompt in two steps: the second reads the first's cached rows.
		l, err := m.Forward(ctx, st, toks[:9], false)
		if err != nil {
			t.Fatal(err)
		}
		if l, err = m.Forward(ctx, st, toks[9:], false); err != nil {
			t.Fatal(err)
		}
		return st, l
	}
	s16, l16 := run(true)
	s32, l32 := run(false)
	if s16.AttentionLayers() == 0 {
		t.Fatal("the test config has no attention layer")
	}
	exact := 0
	for ai := range s16.AttentionLayers() {
		k16, v16, err := s16.KV(ai, 13)
		if err != nil {
			t.Fatal(err)
		}
		for i := range k16 {
			for _, v := range []float32{k16[i], v16[i]} {
				if bf16.ToFloat32(bf16.FromFloat32(v)) != v {
					t.Fatalf("layer %d cache value %d: %g is not a BF16 value", ai, i, v)
				}
			}
		}
		if ai > 0 {
			continue // its inputs went through the first layer's attention over the rounded cache
		}
		k16, v16, _ = s16.KV(ai, 9) // the first step's rows: the same inputs in both states
		k32, v32, _ := s32.KV(ai, 9)
		for i := range k16 {
			for _, p := range [][2]float32{{k16[i], k32[i]}, {v16[i], v32[i]}} {
				if want := bf16.ToFloat32(bf16.FromFloat32(p[1])); math.Float32bits(p[0]) != math.Float32bits(want) {
					t.Fatalf("layer %d value %d: cached %g, FromFloat32 of the float32 state's %g is %g", ai, i, p[0], p[1], want)
				}
				if p[0] == p[1] {
					exact++
				}
			}
		}
	}
	var num, den float64
	for i := range l16 {
		num = max(num, math.Abs(float64(l16[i]-l32[i])))
		den = max(den, math.Abs(float64(l32[i])))
	}
	t.Logf("logits %.3g relative from the float32 cache's; %d cached values unchanged by the rounding", num/den, exact)
	if !(num/den > 1e-6 && num/den < 0.05) {
		t.Fatalf("logits %.3g relative from the float32 cache's: want the rounding's effect, between 1e-6 and 0.05", num/den)
	}
	sn, err := s32.Snapshot(s32.Pos())
	if err != nil {
		t.Fatal(err)
	}
	if err := s16.Restore(sn); err == nil || !strings.Contains(err.Error(), "KV cache") {
		t.Fatalf("a float32 state's snapshot restored into a BF16 one: %v", err)
	}
}
