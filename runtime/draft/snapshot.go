package draft

import (
	"errors"
	"fmt"
)

// StateSnapshot is a copy of the context rows 0 … Len()−1 of a drafter State (State.Snapshot):
// per draft layer the context K (after k_norm and RoPE at its position) and V, each [Len(),
// KVHeads·HeadDim] float32. Context rows depend only on their own position's features, so —
// unlike the target's GDN state — a snapshot may hold any prefix of the rows held. It is
// immutable once taken and may be restored any number of times into States of the same Drafter.
type StateSnapshot struct {
	d    *Drafter
	n    int
	k, v [][]float32
}

// Len returns the context rows the copy holds.
func (sn *StateSnapshot) Len() int { return sn.n }

// Bytes returns the memory the copy holds (bytes): ContextBytes(Len()).
func (sn *StateSnapshot) Bytes() int64 {
	var n int64
	for l := range sn.k {
		n += 4 * int64(len(sn.k[l])+len(sn.v[l]))
	}
	return n
}

// ContextBytes is the memory of rows context rows (bytes, float32 as the CPU holds them):
// 2·rows·Layers·KVHeads·HeadDim·4. For the 27B DSpark head (5 layers, 8 KV heads of 128,
// qwen35-and-quant.md §D.4) that is 40,960 bytes a row (half in BF16: lithos-metal.md §5's
// "≈20 KiB per committed token").
func (d *Drafter) ContextBytes(rows int) int64 {
	c := &d.Cfg
	return 2 * int64(rows) * int64(c.Layers) * int64(c.KVHeads*c.HeadDim) * 4
}

// Snapshot copies the context rows 0 … rows−1 (0 ≤ rows ≤ Len()). Memory: ContextBytes(rows),
// newly allocated. Errors: rows out of range.
func (s *State) Snapshot(rows int) (*StateSnapshot, error) {
	if rows < 0 || rows > s.n {
		return nil, fmt.Errorf("draft state snapshot of %d rows: it holds %d", rows, s.n)
	}
	kvRow := s.d.Cfg.KVHeads * s.d.Cfg.HeadDim
	sn := &StateSnapshot{d: s.d, n: rows}
	for l := range s.k {
		sn.k = append(sn.k, append([]float32(nil), s.k[l][:rows*kvRow]...))
		sn.v = append(sn.v, append([]float32(nil), s.v[l][:rows*kvRow]...))
	}
	return sn, nil
}

// Restore makes s's context a copy of sn (sn is not modified and stays valid): rows 0 …
// sn.Len()−1 are sn's and Len() = sn.Len(); cache rows past them keep stale values that Append
// and Draft overwrite before reading. Errors, the state unchanged: a nil snapshot, a snapshot of
// another Drafter's state, more rows than s's capacity.
func (s *State) Restore(sn *StateSnapshot) error {
	if sn == nil {
		return errors.New("draft state restore: nil snapshot")
	}
	if sn.d != s.d {
		return errors.New("draft state restore: the snapshot was taken from a state of another drafter")
	}
	if sn.n > s.capacity {
		return fmt.Errorf("draft state restore: the snapshot holds %d context rows, the state's capacity is %d", sn.n, s.capacity)
	}
	for l := range sn.k {
		copy(s.k[l], sn.k[l])
		copy(s.v[l], sn.v[l])
	}
	s.n = sn.n
	return nil
}
