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
// Speculative decoding (docs/speculative.md) enters the contract as a Drafter bound to the
// target (Target.LoadDraft: the bundle's DSpark head; tests plug their own) and passed to a
// session in SessionOptions; the session's decode program then runs rounds — draft, verify
// B+1 rows, accept scan, commit — and keeps RoundStats.
//
// Imports: lithos/runtime/bundle, lithos/runtime/model (the model's Config), lithos/runtime/sample.
package backend

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

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
	// state that does not fit, a drafter the target cannot feed.
	NewSession(opt SessionOptions) (Session, error)
	// LoadDraft binds the bundle's draft head (manifest "draft") to this target and returns
	// it, or nil, nil when the bundle has none. Errors name the config field or tensor that
	// does not fit the target (vocabulary, hidden size, tap layers, shapes, formats).
	LoadDraft(ctx context.Context, b *bundle.Bundle) (Drafter, error)
	// Close releases the target's device buffers (not the bundle).
	Close() error
}

// Defaults of SessionOptions.
const (
	DefaultPrefillChunk = 128  // rows per prefill step (lithos-metal.md §6.4's default)
	DefaultRingCapacity = 4096 // token ring slots (lithos-metal.md §6.3)
	DecodeRows          = 8    // rows of step state reserved for decode/verify: the anchor and 7 drafts (sessions with a larger draft block reserve block + 1)
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

	// Drafter, when set, makes each decode step a speculative round with a Proposer of it
	// (nil: one row per step). A round needs BlockSize()+1 free positions; nearer the end of
	// the context the steps are single rows again.
	Drafter Drafter
	// DraftSampling is how drafts are chosen at temperature > 0: DraftArgmax ("" means it:
	// the argmax of the drafter's logits, accepted iff it equals the target's sampled token —
	// the point-mass rule) or DraftSample (drawn from the drafter's distribution after the
	// same temperature/top-k/top-p, accepted with min(1, p/q)). Greedy sampling always
	// drafts the argmax.
	DraftSampling string
	// ConfidenceStop, in [0, 1], shortens a round to the leading drafts whose confidence
	// head output is at least this value (0: off, every round verifies BlockSize drafts; no
	// effect for a drafter without a confidence head).
	ConfidenceStop float64
	// KVCache is the element type of the attention layers' KV cache: KVFloat32 ("" means it)
	// or KVBF16 — every key and value rounded to the nearest BF16 (ties to even) as it is
	// written (ARCHITECTURE §3.4): on a GPU half the cache's bytes, so half the memory per
	// position and half the bytes attention reads per pass at long contexts; the CPU backend
	// keeps float32 storage with the same rounded values (the reference for the GPU's). Not
	// transformers' float32 numerics: ~1e-3 relative on the logits (docs/runtime.md).
	KVCache string
}

// KV cache element types (SessionOptions.KVCache).
const (
	KVFloat32 = "f32"
	KVBF16    = "bf16"
)

// DraftSampling values.
const (
	DraftArgmax = "argmax"
	DraftSample = "sample"
)

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
	switch o.DraftSampling {
	case "":
		o.DraftSampling = DraftArgmax
	case DraftArgmax, DraftSample:
	default:
		return fmt.Errorf("session: draft sampling %q: want %q or %q", o.DraftSampling, DraftArgmax, DraftSample)
	}
	switch o.KVCache {
	case "":
		o.KVCache = KVFloat32
	case KVFloat32, KVBF16:
	default:
		return fmt.Errorf("session: KV cache type %q: want %q or %q", o.KVCache, KVFloat32, KVBF16)
	}
	if !(o.ConfidenceStop >= 0 && o.ConfidenceStop <= 1) {
		return fmt.Errorf("session: confidence stop %v: want a number in [0, 1] (0 = off)", o.ConfidenceStop)
	}
	if o.Drafter != nil {
		if b := o.Drafter.BlockSize(); b < 1 || b > MaxBlockSize {
			return fmt.Errorf("session: the drafter's block size %d is out of range [1, %d]", b, MaxBlockSize)
		}
	}
	return o.Sampling.Validate()
}

// MaxBlockSize bounds a drafter's block (DSpark: 7; DFlash checkpoints: 16).
const MaxBlockSize = 64

// Drafter is a speculative draft model bound to a loaded target (the bundle's DSpark head,
// or a test's proposer): read-only and shared by the sessions that use it; each session
// holds its own Proposer.
type Drafter interface {
	// TapLayers are the target's decoder layers whose output rows are the drafter's context
	// features (DSpark target_layer_ids; −1 is the embeddings), in the order the drafter
	// concatenates them.
	TapLayers() []int
	// BlockSize is B, the drafts per round (DSpark block_size: 7); a round verifies B+1 rows.
	BlockSize() int
	// NewProposer allocates one sequence's drafter state for a context of capacity positions.
	NewProposer(capacity int) (Proposer, error)
}

// Proposer is one sequence's drafter state: the context rows of the committed positions and
// the drafting of a block after the anchor.
type Proposer interface {
	// Len returns the context rows held: the positions 0…Len()−1 whose features were appended.
	Len() int
	// Append adds the context features of n committed positions Len()…Len()+n−1: feats is
	// [n, len(TapLayers)·Hidden], row r the target's tapped layer outputs for that position,
	// concatenated in TapLayers order.
	Append(ctx context.Context, feats []float32, n int) error
	// Draft proposes BlockSize tokens after anchor, the sampled token that will occupy
	// position Len(): for k = 0…B−1 it computes the drafter's logits row k ([Vocab], the
	// prediction for position Len()+k+1 given the anchor and drafts 0…k−1), calls choose(k,
	// row) (which may modify row) and takes its answer as draft k. out.Tokens gets the B
	// drafts; out.Confidence the confidence head outputs, one per draft, or nil.
	Draft(ctx context.Context, anchor int32, choose func(k int, logits []float32) int32, out *Proposal) error
}

// Proposal is a drafted block.
type Proposal struct {
	Tokens     []int32   // [B]
	Confidence []float32 // [B] σ of the confidence head, or nil without one
}

// RoundStats are a session's decode telemetry, kept by the decode program (a device keeps the
// counts in a buffer next to the step state; the CPU backend measures the times on the host).
type RoundStats struct {
	// Rounds is the speculative rounds run (one target pass over 1+L rows each); PlainSteps
	// the single-row decode steps (no drafter, or too few free positions for a round).
	Rounds, PlainSteps int
	// RoundTokens is the tokens the rounds committed.
	RoundTokens int
	// Committed[n−1] counts the rounds that committed n tokens (n = 1…B+1).
	Committed []int
	// Drafted[k] counts the rounds that verified a draft k (k < L); Accepted[k] those whose
	// draft k was accepted (the accept scan's prefix, before EOS/StopAt cut it).
	Drafted, Accepted []int
	// ConfidenceSum[k] sums draft k's confidence over the ConfidenceRounds rounds whose
	// drafter reported one.
	ConfidenceSum    []float64
	ConfidenceRounds int
	// DraftTime is the drafter's time (Draft and Append) and VerifyTime the target's (the
	// verify step, the accept scan and the commit), summed over the rounds.
	DraftTime, VerifyTime time.Duration
}

// Clone returns a copy of r that shares no slice with it (what Session.Stats returns).
func (r RoundStats) Clone() RoundStats {
	r.Committed, r.Drafted, r.Accepted = slices.Clone(r.Committed), slices.Clone(r.Drafted), slices.Clone(r.Accepted)
	r.ConfidenceSum = slices.Clone(r.ConfidenceSum)
	return r
}

// Session is one sequence on the device. Its methods are called from one goroutine; each
// returns with the device idle.
//
// A sequence may go on after a stop: between calls the host may clear Done, Error and StopAt
// (after draining the ring) and Prefill more tokens, which are fed at Position, after the
// committed ones. The last sampled token (Anchor, the last one in the ring) is not committed: a
// host that wants it in the sequence feeds it as the first token of that prompt. After
// ErrRingOverflow the token that did not fit is lost and Anchor still names the one before, so
// such a sequence goes on with a Prefill, never a Decode. A server continues a finished
// conversation this way (docs/serving.md §4).
//
// Optional capabilities, found by type assertion, let a host reuse state: Snapshotter (copy the
// committed state out and back: prefix checkpoints), NoSamplePrefiller (a prefill that samples
// nothing, to split a prompt at a checkpoint boundary) and Resetter (an empty sequence in the
// same buffers).
type Session interface {
	// State is the host's view of the step state: read it, and write StopAt and RingTail (and
	// clear Done, Error and StopAt, above), only between calls.
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
	// sampled token), commits it and samples the next token into the ring — or, with a
	// drafter, runs a round: feeds the anchor and B drafts, commits the accepted prefix and
	// pushes 1…B+1 tokens. It returns early when a step sets done (EOS, StopAt reached, ring
	// full, context full). A cancelled ctx is returned, the state left as of the last
	// completed step.
	Decode(ctx context.Context, steps int) error
	// Stats returns the decode telemetry so far (a copy).
	Stats() RoundStats
	// Close releases the session's device state.
	Close() error
}

// Snapshotter is a Session that can copy its committed state out and back (prefix checkpoints,
// docs/serving.md §4; docs/runtime.md §2.1): the committed slot's GDN conv and recurrent states,
// the KV rows [0, Position), Position and the step count (whose parity names the committed GDN
// slot), and with a drafter its context rows [0, Position). A GDN state cannot be rewound, so a
// snapshot is taken at the current position; the host splits a prefill at the positions it wants
// (NoSamplePrefiller).
type Snapshotter interface {
	// Snapshot copies the session's committed state (the session idle, between calls; a done
	// session's committed state is copied too). Errors: a closed session, a drafter whose
	// Proposer cannot copy its context (ContextSnapshotter).
	Snapshot() (Snapshot, error)
	// Restore makes the session's state a copy of s (s stays valid and may be restored again):
	// Position = s.Position(), the step count and committed GDN slot are s's, KV rows [0,
	// s.Position()) and the drafter's context rows are s's; Done, Error and StopAt are cleared,
	// the ring is empty (RingTail = RingHead) and there is no anchor (Anchor = −1: the next call
	// is a Prefill); the seed words stay. Errors, the session unchanged: s from another
	// backend or model, s longer than the session's capacity, a session with a drafter and s
	// without its context, a closed session.
	Restore(s Snapshot) error
}

// Snapshot is a saved committed state of a session (Snapshotter), immutable.
type Snapshot interface {
	// Position is the number of tokens the state has consumed.
	Position() int
	// Bytes is the memory the copy holds (bytes).
	Bytes() int64
}

// NoSamplePrefiller is a Session whose prefill can stop without sampling.
type NoSamplePrefiller interface {
	// PrefillNoSample is Prefill (same chunks, same errors, same state after it) except that
	// no step samples: the host writes PrefillLeft ≥ 1 on every chunk, the last one included,
	// so the program commits the rows and returns (docs/runtime.md §4.1) — no ring slot, no
	// done. It leaves no anchor (Anchor = −1): the sequence goes on with a Prefill. A server
	// uses it to stop a prompt's prefill at a checkpoint boundary.
	PrefillNoSample(ctx context.Context, prompt []int32) error
}

// Resetter is a Session that can start over in its own buffers.
type Resetter interface {
	// Reset empties the sequence without reallocating: Position 0, zero GDN states, the step
	// state as NewSession made it (seed words from SessionOptions.Sampling), an empty ring
	// (slots cleared, head and tail 0), zero RoundStats, an empty drafter context. Errors: a
	// closed session.
	Reset() error
}

// ContextSnapshotter is a Proposer that can copy its context rows out and back, which a
// session's Snapshotter needs when it has a drafter.
type ContextSnapshotter interface {
	// SnapshotContext copies the context rows [0, rows) (rows ≤ Len()). Snapshot.Position is
	// rows.
	SnapshotContext(rows int) (Snapshot, error)
	// RestoreContext makes the context a copy of s: Len() = s.Position(). Errors, the context
	// unchanged: s from another drafter, longer than the capacity.
	RestoreContext(s Snapshot) error
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
	// DraftLen is L, the drafts in Pending after the anchor in the current/last round (0 for
	// a single-row step); Rows = 1 + L.
	DraftLen uint32
	// DraftContext is the positions whose features the drafter holds (= Position after
	// every step of a session with a drafter; 0 without).
	DraftContext uint32
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
	stepStateTail = 13 // SeedLo … StopAt, DraftLen, DraftContext
)

// Size returns the bytes of the binary form: 4·(16 + TMax), rounded up to 16.
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
		s.Done, s.Error, s.RingHead, s.RingTail, s.StopAt, s.DraftLen, s.DraftContext} {
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
	s.DraftLen, s.DraftContext = r(o+11), r(o+12)
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

// Reset clears every slot (a fresh ring: for a step state whose RingHead and RingTail restart
// at 0; Resetter).
func (r *Ring) Reset() { clear(r.slots) }

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

// ErrDone is returned by Session.Prefill on a session whose step state says done (a stop
// condition was met: EOS, a stop sequence, a full ring or context).
var ErrDone = errors.New("session: done (a stop condition was met)")

// CheckPrompt returns the error a Session's Prefill gives before any work for a prompt it
// cannot take: an empty prompt, a token outside [0, vocab) (naming the token and its prompt
// position), or more tokens than the context of capacity positions has left after position.
// Shared by the CPU and GPU sessions.
func CheckPrompt(prompt []int32, vocab int, position uint32, capacity int) error {
	if len(prompt) == 0 {
		return errors.New("prefill: empty prompt")
	}
	for i, t := range prompt {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("prefill: token %d (prompt position %d) is outside the vocabulary [0, %d)", t, i, vocab)
		}
	}
	if int(position)+len(prompt) > capacity {
		return fmt.Errorf("prefill: %d prompt tokens at position %d exceed the context of %d", len(prompt), position, capacity)
	}
	return nil
}
