//go:build linux && amd64

package metal

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/model"
	"lithos/runtime/model/goldentest"
)

// The GPU session's optional capabilities (runtime/backend/gpu/snapshot.go: Snapshotter,
// NoSamplePrefiller, Resetter) over the emulated Metal device, against an uninterrupted greedy
// run of golden model b: a state saved after a no-sample prefill of part of the prompt, or in
// the middle of decoding, and restored into another session (or the same one, after it went
// on) continues with the same tokens; Reset starts over in the same buffers.

// continueFrom runs a session on: Prefill(rest) then single-step decodes until n tokens are
// out; it returns the tokens.
func continueFrom(t *testing.T, s *gpu.Session, rest []int32, n int) []int32 {
	t.Helper()
	if err := s.Prefill(t.Context(), rest); err != nil {
		t.Fatal(err)
	}
	return decodeTo(t, s, n)[:n]
}

func TestEmulatedSnapshot(t *testing.T) {
	b := emuBundle(t, "b")
	_, i32 := goldentest.ReadTensors(t, filepath.Join("..", "..", "..", "testdata", "goldens", "qwen35-b", "goldens.safetensors"))
	prompt := i32["prompt.11"]
	const n = 10
	d, tg := emuTarget(t, b)
	ref, _, _ := emuGenerate(t, d, tg, true, prompt, n)
	opt := backend.SessionOptions{Capacity: len(prompt) + n + 8, Sampling: greedy}
	newSession := func(opt backend.SessionOptions) *gpu.Session {
		s, err := tg.NewDeviceSession(opt, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}

	// A prefix checkpoint: 8 prompt rows committed without a sample, saved, then the rest.
	a := newSession(opt)
	if err := a.PrefillNoSample(t.Context(), prompt[:8]); err != nil {
		t.Fatal(err)
	}
	if st := a.State(); st.Position != 8 || st.Anchor != -1 || st.RingHead != st.RingTail {
		t.Fatalf("after PrefillNoSample of 8 rows: position %d, anchor %d, ring %d…%d", st.Position, st.Anchor, st.RingTail, st.RingHead)
	}
	sn, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	c := &tg.Cfg
	wantBytes := int64(0)
	for range c.Count(model.GDN) { // one slot of each state
		wantBytes += 4 * int64(c.VHeads*c.KDim*c.VDim+(c.ConvKernel-1)*c.ConvDim())
	}
	wantBytes += int64(c.Count(model.Attention)) * 2 * 4 * 8 * int64(c.KVHeads*c.HeadDim)
	if sn.Position() != 8 || sn.Bytes() != wantBytes {
		t.Fatalf("snapshot: position %d, %d bytes; want 8, %d", sn.Position(), sn.Bytes(), wantBytes)
	}
	if got := continueFrom(t, a, prompt[8:], n); !slices.Equal(got, ref) {
		t.Fatalf("after the no-sample prefill: tokens %v, want %v", got, ref)
	}
	// Restored into a new session, and into the first one after it went on.
	for _, s := range []*gpu.Session{newSession(opt), a} {
		if err := s.Restore(sn); err != nil {
			t.Fatal(err)
		}
		if st := s.State(); st.Position != 8 || st.Anchor != -1 || st.Done != 0 || st.RingHead != st.RingTail {
			t.Fatalf("after Restore: %+v", *st)
		}
		if err := s.Decode(t.Context(), 1); err == nil {
			t.Fatal("Decode right after Restore (no anchor): no error")
		}
		if got := continueFrom(t, s, prompt[8:], n); !slices.Equal(got, ref) {
			t.Fatalf("restored: tokens %v, want %v", got, ref)
		}
	}

	// A checkpoint in the middle of decoding (another step parity): the prompt, the first token
	// and two decoded tokens committed; the last sampled token is fed again after Restore.
	m := newSession(opt)
	got := continueFrom(t, m, prompt, 3)
	sm, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if sm.Position() != len(prompt)+2 {
		t.Fatalf("mid-decode snapshot at position %d, want %d", sm.Position(), len(prompt)+2)
	}
	r := newSession(opt)
	if err := r.Restore(sm); err != nil {
		t.Fatal(err)
	}
	if tail := continueFrom(t, r, got[2:3], n-3); !slices.Equal(append(slices.Clone(got), tail...), ref) {
		t.Fatalf("restored mid-decode: tokens %v + %v, want %v", got, tail, ref)
	}

	// Reset: the same session starts over.
	if err := a.Reset(); err != nil {
		t.Fatal(err)
	}
	if st := a.State(); st.Position != 0 || st.Step != 0 || st.Anchor != -1 || st.RingHead != 0 {
		t.Fatalf("after Reset: %+v", *st)
	}
	if got := continueFrom(t, a, prompt, n); !slices.Equal(got, ref) {
		t.Fatalf("after Reset: tokens %v, want %v", got, ref)
	}

	// Refusals, the session unchanged: too long for the context, another target's snapshot, a
	// snapshot of another backend.
	small := newSession(backend.SessionOptions{Capacity: 9, Sampling: greedy})
	if err := small.Restore(sm); err == nil || !strings.Contains(err.Error(), "context is 9") {
		t.Fatalf("restore of %d positions into a context of 9: %v", sm.Position(), err)
	}
	_, tg2 := emuTarget(t, b)
	o, err := tg2.NewDeviceSession(opt, true)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := o.Restore(sn); err == nil || !strings.Contains(err.Error(), "another loaded target") {
		t.Fatalf("restore of another target's snapshot: %v", err)
	}
	if err := o.Restore(otherSnapshot{}); err == nil || !strings.Contains(err.Error(), "not a GPU session snapshot") {
		t.Fatalf("restore of a foreign snapshot: %v", err)
	}
}

type otherSnapshot struct{}

func (otherSnapshot) Position() int { return 1 }
func (otherSnapshot) Bytes() int64  { return 0 }
