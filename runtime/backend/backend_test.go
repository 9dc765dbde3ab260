package backend

import (
	"encoding/binary"
	"slices"
	"testing"

	"lithos/runtime/sample"
)

// TestStepStateLayout checks the binary layout against the offsets docs/runtime.md §4 lists
// (TMax = 8) and the round trip.
func TestStepStateLayout(t *testing.T) {
	s := NewStepState(8, 0x1122334455667788)
	s.Step, s.Position, s.Rows = 3, 41, 2
	copy(s.Pending, []int32{7, -1, 9})
	s.Anchor, s.Accepted, s.Committed, s.PrefillLeft = 12, 1, 2, 0
	s.Done, s.Error, s.RingHead, s.RingTail, s.StopAt = 1, ErrContextFull, 17, 15, 40
	s.DraftLen, s.DraftContext = 7, 39
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 96 || s.Size() != 96 {
		t.Fatalf("size %d (%d), want 96 for TMax 8", len(b), s.Size())
	}
	at := map[int]uint32{0: 3, 4: 41, 8: 2, 12: 7, 16: 0xFFFFFFFF, 20: 9, 44: 0x55667788, 48: 0x11223344,
		52: 12, 56: 1, 60: 2, 64: 0, 68: 1, 72: ErrContextFull, 76: 17, 80: 15, 84: 40, 88: 7, 92: 39}
	for off, want := range at {
		if got := binary.LittleEndian.Uint32(b[off:]); got != want {
			t.Errorf("offset %d: %#x, want %#x", off, got, want)
		}
	}
	r := NewStepState(8, 0)
	if err := r.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if r.Seed() != 0x1122334455667788 || !slices.Equal(r.Pending, s.Pending) || r.StopAt != 40 || r.Anchor != 12 || r.RingTail != 15 || r.DraftLen != 7 || r.DraftContext != 39 {
		t.Fatalf("round trip: %+v, want %+v", r, s)
	}
	if err := NewStepState(4, 0).UnmarshalBinary(b); err == nil {
		t.Error("a layout for TMax 8 was read as TMax 4")
	}
}

// TestRing checks push/drain order, the sequence tags and overflow.
func TestRing(t *testing.T) {
	st := NewStepState(1, 0)
	r := NewRing(4)
	for i := range 3 {
		if !r.Push(st, int32(100+i)) {
			t.Fatal("push refused")
		}
	}
	got := r.Drain(st, nil)
	if !slices.Equal(got, []int32{100, 101, 102}) || st.RingTail != 3 || st.RingHead != 3 {
		t.Fatalf("drained %v, tail %d, head %d", got, st.RingTail, st.RingHead)
	}
	if got := r.Drain(st, nil); len(got) != 0 {
		t.Fatalf("second drain %v: stale slots were read", got)
	}
	// Wrap around: 4 more fill the ring; a fifth overflows.
	for i := range 4 {
		if !r.Push(st, int32(200+i)) {
			t.Fatalf("push %d refused", i)
		}
	}
	if r.Push(st, 300) || st.Error != ErrRingOverflow || st.Done != 1 {
		t.Fatalf("overflow: error %d, done %d", st.Error, st.Done)
	}
	if got := r.Drain(st, nil); !slices.Equal(got, []int32{200, 201, 202, 203}) {
		t.Fatalf("after wrap: %v", got)
	}
}

// blockDrafter is a Drafter of a given block size that cannot propose.
type blockDrafter int

func (b blockDrafter) TapLayers() []int                  { return nil }
func (b blockDrafter) BlockSize() int                    { return int(b) }
func (b blockDrafter) NewProposer(int) (Proposer, error) { return nil, nil }

func TestSessionOptions(t *testing.T) {
	ok := SessionOptions{Capacity: 10, Sampling: sample.Params{TopP: 1}, EOS: []int32{3}}
	if err := ok.Normalize(8); err != nil || ok.PrefillChunk != DefaultPrefillChunk || ok.RingCapacity != DefaultRingCapacity || ok.DraftSampling != DraftArgmax || ok.KVCache != KVFloat32 {
		t.Fatalf("%+v, %v", ok, err)
	}
	bf := SessionOptions{Capacity: 10, Sampling: sample.Params{TopP: 1}, KVCache: KVBF16}
	if err := bf.Normalize(8); err != nil || bf.KVCache != KVBF16 {
		t.Fatalf("%+v, %v", bf, err)
	}
	for _, o := range []SessionOptions{
		{Capacity: 0, Sampling: sample.Params{TopP: 1}},
		{Capacity: 4, PrefillChunk: -1, Sampling: sample.Params{TopP: 1}},
		{Capacity: 4, RingCapacity: -2, Sampling: sample.Params{TopP: 1}},
		{Capacity: 4, EOS: []int32{8}, Sampling: sample.Params{TopP: 1}},
		{Capacity: 4, Sampling: sample.Params{TopP: 0}},
		{Capacity: 4, Sampling: sample.Params{TopP: 1}, DraftSampling: "greedy"},
		{Capacity: 4, Sampling: sample.Params{TopP: 1}, ConfidenceStop: 1.5},
		{Capacity: 4, Sampling: sample.Params{TopP: 1}, ConfidenceStop: -0.1},
		{Capacity: 4, Sampling: sample.Params{TopP: 1}, Drafter: blockDrafter(0)},
		{Capacity: 4, Sampling: sample.Params{TopP: 1}, Drafter: blockDrafter(MaxBlockSize + 1)},
		{Capacity: 4, Sampling: sample.Params{TopP: 1}, KVCache: "fp8"},
		{Capacity: 4, Sampling: sample.Params{TopP: 1}, KVCache: "BF16"},
	} {
		if err := o.Normalize(8); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
