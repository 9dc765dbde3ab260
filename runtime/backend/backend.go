// Package backend is the contract between the lithos runtime and the devices that run a
// bundle's models (ARCHITECTURE.md §3.4; docs/runtime.md is the written form): a Backend loads
// a bundle's target model as device buffers (views of the mapped weights where the device can
// read host memory) and opens Sessions; a Session is one sequence — KV cache, GDN conv and
// recurrent state in two slots, a StepState and a token Ring — on which the device runs the
// prefill and decode programs.
//
// The contract is shaped for a device that records a whole round once and replays it (Metal
// indirect command buffers, CUDA graphs, lithos-metal.md §6.1): every value a step needs that
// changes between steps lives in the StepState, which the device owns and the programs read
// (position, rows, pending tokens, seed words) and write (sampled token into the Ring, done,
// error, ring head); the host only writes the StepState between calls (stop_at, ring tail) and
// drains the Ring. A Session's Prefill and Decode are the host's only ways to make the device
// work, and they return with the device idle, so the host may read and write the StepState in
// between. The CPU backend (lithos/runtime/backend/cpu) honours exactly this contract, so a GPU
// backend is a translation of it, not a redesign.
//
// Imports: lithos/runtime/bundle, lithos/runtime/model (the model's Config), lithos/runtime/sample.
package backend

import (
	"context"
	"encoding/binary"
	"fmt"

	"lithos/runtime/bundle"
	"lithos/runtime/model"
	"lithos/runtime/sample"
)

// Backend is a device kind that runs bundles: "cpu" now; "metal" and "cuda" later.
type Backend interface {
	// Name is the backend's name as --backend spells it.
	Name() string
	// Load binds the target model of an opened bundle: its weights become device buffers
	// (on the CPU: the mapped bytes themselves) and its programs are built. The bundle must
	// stay open while the Target is used. Errors name the tensor or config field that the
	// backend cannot run (another architecture, a format without a kernel, …).
	Load(ctx context.Context, b *bundle.Bundle) (Target, error)
}

// Target is a loaded target model.
type Target interface {
	// Config is the model's geometry (runtime/model.Config parsed from the bundle).
	Config() model.Config
	// NewSession allocates a sequence's state on the device. Errors: options out of range,
	// state that does not fit.
	NewSession(opt SessionOptions) (Session, error)
	// Close releases the target's device buffers (not the bundle).
	Close() error
}

// Defaults of SessionOptions.
const (
	DefaultPrefillChunk = 128  // rows per prefill step (lithos-metal.md §6.4's default)
	DefaultRingCapacity = 4096 // token ring slots (lithos-metal.md §6.3)
	DecodeRows          = 8    // rows a decode/verify step may take: the anchor and 7 drafts
)

// SessionOptions are a session's program constants: what a device bakes into its recorded
// programs. Values that change per step are in StepState instead.
type SessionOptions struct {
	// Capacity is the context: the most positions (prompt and generated tokens) the session
	// holds. It sizes the KV cache. > 0.
	Capacity int
	// PrefillChunk is the rows per prefill step (0: DefaultPrefillChunk).
	PrefillChunk int
	// Sampling is how the programs choose tokens (temperature, top-k, top-p); its Seed is
	// copied into the StepState's seed words, which is where the programs read it.
	Sampling sample.Params
	// EOS are the token ids that end generation: a program that samples one writes it to the
	// ring and sets done.
	EOS []int32
	// RingCapacity is the ring's slot count (0: DefaultRingCapacity).
	RingCapacity int
}

// Normalize fills defaults and checks the ranges; errors name the option.
func (o *SessionOptions) Normalize(vocab int) error {
	if o.Capacity <= 0 {
		return fmt.Errorf("session: context capacity %d must be positive", o.Capacity)
	}
	if o.PrefillChunk == 0 {
		o.PrefillChunk = DefaultPrefillChunk
	}
	if o.PrefillChunk < 1 || o.PrefillChunk > 1<<16 {
		return fmt.Errorf("session: prefill chunk %d out of range [1, %d]", o.PrefillChunk, 1<<16)
	}
	if o.RingCapacity == 0 {
		o.RingCapacity = DefaultRingCapacity
	}
	if o.RingCapacity < 1 || o.RingCapacity > 1<<24 {
		return fmt.Errorf("session: ring capacity %d out of range [1, %d]", o.RingCapacity, 1<<24)
	}
	for _, id := range o.EOS {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("session: EOS token %d is outside the vocabulary [0, %d)", id, vocab)
		}
	}
	return o.Sampling.Validate()
}

// Session is one sequence on the device. Its methods are called from one goroutine; each
// returns with the device idle.
type Session interface {
	// State is the host's view of the step state: read it, and write StopAt and RingTail,
	// only between calls.
	State() *StepState
	// Ring is the token ring the programs write; the host drains it (Ring.Drain).
	Ring() *Ring
	// Prefill runs the prompt through the prefill program, PrefillChunk rows per step; the
	// last step samples the first new token into the ring (and may set done). Errors before
	// any work: an empty prompt, a token outside the vocabulary, a prompt that does not fit
	// the remaining context, a session that is done. A cancelled ctx stops between steps
	// (committed chunks stay committed) and is returned.
	Prefill(ctx context.Context, prompt []int32) error
	// Decode runs up to steps steps of the decode program: each feeds the anchor (the last
	// sampled token), commits it and samples the next token into the ring. It returns early
	// when a step sets done (EOS, StopAt reached, ring full, context full). A cancelled ctx is
	// returned, the state left as of the last completed step.
	Decode(ctx context.Context, steps int) error
	// Close releases the session's device state.
	Close() error
}

// Error codes of StepState.Error.
const (
	ErrNone         = 0
	ErrRingOverflow = 1 // the host did not drain the ring fast enough
	ErrContextFull  = 2 // a step needed a position past Capacity
)

// StepState is the device-resident control block of a session (lithos-metal.md §6.2, our
// layout): every field a recorded program reads or writes between steps. All fields are
// 4-byte little-endian words in this order (MarshalBinary; docs/runtime.md §4 lists offsets),
// Pending holding TMax entries.
type StepState struct {
	Step     uint32  // steps completed; GDN layers read slot Step&1 and write slot (Step+1)&1
	Position uint32  // committed length: the position of the next row fed
	Rows     uint32  // rows of the current/last step (t_this_step)
	Pending  []int32 // the rows' tokens: a prompt chunk, or [anchor, drafts…]; len = TMax
	SeedLo   uint32  // sampling seed, low word
	SeedHi   uint32  // sampling seed, high word
	Anchor   int32   // the last sampled token, fed by the next decode step (−1: none yet)
	Accepted uint32  // drafts accepted by the last verify (0 without a drafter)
	// Committed is the rows the last step committed (the GDN commit replays that many; =
	// Rows without a drafter).
	Committed   uint32
	PrefillLeft uint32 // prefill steps still to run after this one; tokens are sampled only at 0
	Done        uint32 // 1: a stop condition was met; programs return at once
	Error       uint32 // ErrNone, ErrRingOverflow, ErrContextFull
	RingHead    uint32 // next ring slot the device writes (tokens written so far)
	RingTail    uint32 // next ring slot the host reads (host-written)
	StopAt      uint32 // host-written ring head at which the device sets done (0: never)
}

// NewStepState returns a zero step state with tmax pending slots and the given seed.
func NewStepState(tmax int, seed uint64) *StepState {
	return &StepState{Pending: make([]int32, tmax), SeedLo: uint32(seed), SeedHi: uint32(seed >> 32), Anchor: -1}
}

// Seed returns the 64-bit sampling seed of the seed words.
func (s *StepState) Seed() uint64 { return uint64(s.SeedHi)<<32 | uint64(s.SeedLo) }

// stepStateWords is the number of 4-byte words before and after Pending.
const (
	stepStateHead = 3  // Step, Position, Rows
	stepStateTail = 12 // SeedLo … StopAt
)

// Size returns the bytes of the binary form: 4·(15 + TMax), rounded up to 16.
func (s *StepState) Size() int {
	return (4*(stepStateHead+len(s.Pending)+stepStateTail) + 15) / 16 * 16
}

// MarshalBinary writes the device layout: the fields in declaration order as little-endian
// 4-byte words, Pending inline, zero-padded to Size.
func (s *StepState) MarshalBinary() ([]byte, error) {
	b := make([]byte, s.Size())
	w := func(i int, v uint32) { binary.LittleEndian.PutUint32(b[4*i:], v) }
	w(0, s.Step)
	w(1, s.Position)
	w(2, s.Rows)
	for i, t := range s.Pending {
		w(stepStateHead+i, uint32(t))
	}
	o := stepStateHead + len(s.Pending)
	for i, v := range []uint32{s.SeedLo, s.SeedHi, uint32(s.Anchor), s.Accepted, s.Committed, s.PrefillLeft,
		s.Done, s.Error, s.RingHead, s.RingTail, s.StopAt, 0} {
		w(o+i, v)
	}
	return b, nil
}

// UnmarshalBinary reads the device layout for len(s.Pending) pending slots (set Pending's
// length first; NewStepState does).
func (s *StepState) UnmarshalBinary(b []byte) error {
	if len(b) != s.Size() {
		return fmt.Errorf("step state: %d bytes, want %d for %d pending slots", len(b), s.Size(), len(s.Pending))
	}
	r := func(i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }
	s.Step, s.Position, s.Rows = r(0), r(1), r(2)
	for i := range s.Pending {
		s.Pending[i] = int32(r(stepStateHead + i))
	}
	o := stepStateHead + len(s.Pending)
	s.SeedLo, s.SeedHi, s.Anchor, s.Accepted = r(o), r(o+1), int32(r(o+2)), r(o+3)
	s.Committed, s.PrefillLeft, s.Done, s.Error = r(o+4), r(o+5), r(o+6), r(o+7)
	s.RingHead, s.RingTail, s.StopAt = r(o+8), r(o+9), r(o+10)
	return nil
}

// Ring is the token ring (lithos-metal.md §6.3): the device writes each sampled token into
// slot head mod capacity as one 64-bit word (sequence << 32 | token, sequence = head + 1, so a
// stale slot is never mistaken for a new one) and advances StepState.RingHead; the host reads
// from RingTail while the stored sequence matches and publishes the new tail.
type Ring struct {
	slots []uint64
}

// NewRing returns a ring of capacity slots (at least 1).
func NewRing(capacity int) *Ring { return &Ring{slots: make([]uint64, max(capacity, 1))} }

// Capacity returns the slot count.
func (r *Ring) Capacity() int { return len(r.slots) }

// Push is the device side: it writes token at st.RingHead and advances it. When the host has
// not drained enough (head − tail = capacity) it sets st.Error = ErrRingOverflow and st.Done
// instead and returns false.
func (r *Ring) Push(st *StepState, token int32) bool {
	if int(st.RingHead-st.RingTail) >= len(r.slots) {
		st.Error, st.Done = ErrRingOverflow, 1
		return false
	}
	seq := st.RingHead + 1
	r.slots[int(st.RingHead)%len(r.slots)] = uint64(seq)<<32 | uint64(uint32(token))
	st.RingHead = seq
	return true
}

// Drain is the host side: it appends the tokens from st.RingTail on whose slots carry the
// expected sequence number to dst, publishes the new tail in st and returns dst.
func (r *Ring) Drain(st *StepState, dst []int32) []int32 {
	for {
		v := r.slots[int(st.RingTail)%len(r.slots)]
		if uint32(v>>32) != st.RingTail+1 {
			return dst
		}
		dst = append(dst, int32(uint32(v)))
		st.RingTail++
	}
}
