package model

import (
	"errors"
	"fmt"
)

// StateSnapshot is a copy of a State's committed state at one position (State.Snapshot): for
// every GDN layer the conv state ([ConvKernel−1, ConvDim] float32) and the recurrent state
// ([VHeads, KDim, VDim] float32) of the committed slot only, for every attention layer the K and
// V rows of positions 0 … Pos()−1 ([Pos(), KVHeads·HeadDim] float32 each), the position and the
// slot parity. It is what a server needs to resume a sequence at a prompt boundary: a Gated
// DeltaNet state cannot be truncated to an earlier position (lithos-metal.md §4.5, §6.5), so a
// checkpoint is a copy taken when the sequence is exactly there. It is immutable once taken and
// may be restored any number of times, into any State of the same Model (State.Restore).
type StateSnapshot struct {
	cfg       *Config // identity of the Model whose State was copied
	pos, slot int
	conv, rec [][]float32 // per GDN layer
	k, v      [][]float32 // per attention layer, [pos, KVHeads·HeadDim]
	kvBF16    bool        // the state's KV rows are BF16-rounded (State.SetKVBF16)
}

// Pos returns the position of the copied state: the tokens it has consumed.
func (sn *StateSnapshot) Pos() int { return sn.pos }

// Slot returns the slot (0 or 1) that held the committed GDN state when the copy was taken;
// Restore puts the state back into that slot, so a session's step parity (Step & 1) stays valid.
func (sn *StateSnapshot) Slot() int { return sn.slot }

// Bytes returns the memory the copy holds (bytes): SnapshotBytes of its model and position.
func (sn *StateSnapshot) Bytes() int64 {
	var n int64
	for _, set := range [][][]float32{sn.conv, sn.rec, sn.k, sn.v} {
		for _, x := range set {
			n += 4 * int64(len(x))
		}
	}
	return n
}

// SnapshotBytes is the memory of a StateSnapshot of c at position rows (bytes, float32 as the
// CPU state holds it): per GDN layer one slot of the recurrent state (VHeads·KDim·VDim values)
// and of the conv state ((ConvKernel−1)·ConvDim values), per attention layer the K and V rows of
// the rows positions (2·rows·KVHeads·HeadDim values). For the 27B target (48 GDN layers, 48
// value heads of 128, 16 key heads of 128, kernel 4; 16 attention layers with 4 KV heads of 256)
// that is 156,893,184 + rows·131,072 bytes (docs/serving.md §4).
func SnapshotBytes(c *Config, rows int) int64 {
	gdn := int64(c.Count(GDN)) * int64(c.VHeads*c.KDim*c.VDim+(c.ConvKernel-1)*c.ConvDim()) * 4
	kv := int64(c.Count(Attention)) * int64(rows) * int64(c.KVHeads*c.HeadDim) * 8
	return gdn + kv
}

// Snapshot copies the committed state at position rows, which must be the current position
// Pos(): KV rows could be cut to any rows ≤ Pos(), but the GDN conv and recurrent states hold the
// whole history and cannot be rewound, and rows past Pos() are not committed. A step run but not
// committed is ignored (the committed slot is copied). Memory: SnapshotBytes(cfg, rows), newly
// allocated. Errors: rows ≠ Pos().
func (s *State) Snapshot(rows int) (*StateSnapshot, error) {
	if rows != s.pos {
		if rows < s.pos {
			return nil, fmt.Errorf("state snapshot of %d rows at position %d: the GDN conv and recurrent states cannot be truncated to an earlier position; take the snapshot when the sequence is at %d (rows = Pos())", rows, s.pos, rows)
		}
		return nil, fmt.Errorf("state snapshot of %d rows at position %d: only the first %d positions are committed (rows = Pos())", rows, s.pos, s.pos)
	}
	sn := &StateSnapshot{cfg: s.cfg, pos: s.pos, slot: s.slot, kvBF16: s.kvBF16}
	for gi := range s.rec {
		sn.conv = append(sn.conv, clone32(s.conv[gi][s.slot]))
		sn.rec = append(sn.rec, clone32(s.rec[gi][s.slot]))
	}
	kvRow := s.cfg.KVHeads * s.cfg.HeadDim
	for ai := range s.k {
		sn.k = append(sn.k, clone32(s.k[ai][:rows*kvRow]))
		sn.v = append(sn.v, clone32(s.v[ai][:rows*kvRow]))
	}
	return sn, nil
}

// Restore makes s's committed state a copy of sn (sn is not modified and stays valid): the GDN
// conv and recurrent states go into slot sn.Slot(), which becomes the committed slot, KV rows
// 0 … sn.Pos()−1 are sn's, the position is sn.Pos(); a pending step, its taps and its kept rows
// are dropped. The other slot and the KV rows past sn.Pos() keep stale values that the next step
// overwrites before reading (it writes the other slot; attention reads rows below the row's
// position only). Errors, the state unchanged: a nil snapshot, a snapshot of another Model's
// state, of a state whose KV rows are rounded otherwise (SetKVBF16), a position past s's
// capacity.
func (s *State) Restore(sn *StateSnapshot) error {
	if sn == nil {
		return errors.New("state restore: nil snapshot")
	}
	if sn.cfg != s.cfg {
		return errors.New("state restore: the snapshot was taken from a state of another model")
	}
	if sn.kvBF16 != s.kvBF16 {
		return fmt.Errorf("state restore: the snapshot's KV cache is %s, the state's %s", KVName(sn.kvBF16), KVName(s.kvBF16))
	}
	if sn.pos > s.capacity {
		return fmt.Errorf("state restore: the snapshot holds %d positions, the state's capacity is %d", sn.pos, s.capacity)
	}
	if len(sn.conv) != len(s.conv) || len(sn.k) != len(s.k) { // same Config: not reached
		return fmt.Errorf("state restore: the snapshot has %d GDN and %d attention layers, the state %d and %d", len(sn.conv), len(sn.k), len(s.conv), len(s.k))
	}
	for gi := range sn.conv {
		copy(s.conv[gi][sn.slot], sn.conv[gi])
		copy(s.rec[gi][sn.slot], sn.rec[gi])
	}
	for ai := range sn.k {
		copy(s.k[ai], sn.k[ai])
		copy(s.v[ai], sn.v[ai])
	}
	s.pos, s.slot, s.pending = sn.pos, sn.slot, -1
	s.tapRows, s.keepRows = 0, 0
	return nil
}

// KV returns views of the cache rows 0 … rows−1 of the ai-th attention layer: K and V, each
// [rows, KVHeads·HeadDim] float32 (K after k_norm and RoPE). For tests and debugging; do not
// modify. Errors: ai or rows out of range.
func (s *State) KV(ai, rows int) (k, v []float32, err error) {
	if ai < 0 || ai >= len(s.k) {
		return nil, nil, fmt.Errorf("state: attention layer %d of %d", ai, len(s.k))
	}
	if rows < 0 || rows > s.capacity {
		return nil, nil, fmt.Errorf("state: %d KV rows, capacity %d", rows, s.capacity)
	}
	kvRow := s.cfg.KVHeads * s.cfg.HeadDim
	return s.k[ai][:rows*kvRow], s.v[ai][:rows*kvRow], nil
}

// AttentionLayers returns the number of attention layers (the range of KV's ai).
func (s *State) AttentionLayers() int { return len(s.k) }

func clone32(x []float32) []float32 {
	out := make([]float32, len(x))
	copy(out, x)
	return out
}

// KVName names a KV cache's element type in errors: "bf16" or "f32" (the spellings of
// backend.KVBF16 and KVFloat32, which this package does not import).
func KVName(bf16 bool) string {
	if bf16 {
		return "bf16"
	}
	return "f32"
}

// KVBF16 reports whether the copied state's KV rows are BF16-rounded (State.SetKVBF16): it
// restores only into a state that rounds the same way.
func (sn *StateSnapshot) KVBF16() bool { return sn.kvBF16 }
