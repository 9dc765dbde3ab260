package blm

import (
	"fmt"
	"math"
)

// StackMode says how the rows of several source matrices are ordered in one packed matrix.
type StackMode string

// Stack modes.
const (
	// Concat puts the segments one after the other (fused QKV+Z: in_proj_z then in_proj_qkv,
	// lithos-metal.md §2.4).
	Concat StackMode = "concat"
	// Interleave takes Chunk rows of each segment in turn: segment 0 rows 0…Chunk−1, segment 1
	// rows 0…Chunk−1, …, segment 0 rows Chunk…2·Chunk−1, … With two segments (gate, up) and
	// Chunk = Rows/2 every block holds 8 gate rows and the same 8 up rows, so a kernel can
	// apply silu(gate)·up in its epilogue (lithos-metal.md §2.4).
	Interleave StackMode = "interleave"
)

// Segment is one source matrix of a stack.
type Segment struct {
	Name string `json:"name"` // source tensor, for errors and manifests
	Rows int64  `json:"rows"` // its N
	// TensorScale is the segment's per-tensor scale, applied to each of its output rows:
	// NVFP4 weight_scale_2, FP8 weight_scale; 1 for formats without one. Finite and positive.
	TensorScale float32 `json:"tensor_scale"`
}

// Stack is the row order of a packed matrix built from one or more source matrices of the
// same format, K, group size and scale type. Packed row p comes from one segment's row
// (Source); its tensor scale is that segment's (RowScales).
type Stack struct {
	Mode     StackMode `json:"mode"`
	Chunk    int       `json:"chunk,omitempty"` // Interleave: rows per turn
	Segments []Segment `json:"segments"`
}

// Single is the stack of one matrix.
func Single(name string, rows int64, tensorScale float32) Stack {
	return Stack{Mode: Concat, Segments: []Segment{{Name: name, Rows: rows, TensorScale: tensorScale}}}
}

// GateUp is the stack of a SwiGLU MLP's gate and up projections interleaved in chunks of
// BlockRows/2 rows.
func GateUp(gate, up Segment) Stack {
	return Stack{Mode: Interleave, Chunk: BlockRows / 2, Segments: []Segment{gate, up}}
}

// Check validates the stack: at least one segment, rows ≥ 0 with a total ≤ MaxN, finite
// positive tensor scales, and for Interleave a positive chunk, segments of equal rows and
// rows a multiple of the chunk. Errors name the segment and rule.
func (s Stack) Check() error {
	if len(s.Segments) == 0 {
		return fmt.Errorf("blm: stack has no segments")
	}
	var total int64
	for i, g := range s.Segments {
		if g.Rows < 0 || g.Rows > MaxN {
			return fmt.Errorf("blm: stack segment %d (%s): rows %d out of range", i, g.Name, g.Rows)
		}
		total += g.Rows
		if t := float64(g.TensorScale); !(t > 0) || math.IsInf(t, 0) {
			return fmt.Errorf("blm: stack segment %d (%s): tensor scale %v is not finite and positive", i, g.Name, g.TensorScale)
		}
	}
	if total > MaxN {
		return fmt.Errorf("blm: stack of %d rows exceeds %d", total, int64(MaxN))
	}
	switch s.Mode {
	case Concat:
		if s.Chunk != 0 {
			return fmt.Errorf("blm: concat stack has chunk %d, want 0", s.Chunk)
		}
	case Interleave:
		if s.Chunk <= 0 {
			return fmt.Errorf("blm: interleave stack needs a positive chunk, got %d", s.Chunk)
		}
		for i, g := range s.Segments {
			if g.Rows != s.Segments[0].Rows {
				return fmt.Errorf("blm: interleave stack segment %d (%s) has %d rows, segment 0 (%s) %d: they must be equal",
					i, g.Name, g.Rows, s.Segments[0].Name, s.Segments[0].Rows)
			}
		}
		if s.Segments[0].Rows%int64(s.Chunk) != 0 {
			return fmt.Errorf("blm: interleave stack: %d rows per segment is not a multiple of the chunk %d",
				s.Segments[0].Rows, s.Chunk)
		}
	default:
		return fmt.Errorf("blm: stack mode %q, want %q or %q", s.Mode, Concat, Interleave)
	}
	return nil
}

// Rows returns the packed matrix's N: the sum of the segments' rows.
func (s Stack) Rows() int64 {
	var n int64
	for _, g := range s.Segments {
		n += g.Rows
	}
	return n
}

// Source returns the segment and the row within it that packed row p comes from, for
// 0 ≤ p < Rows(). It returns an error for an invalid stack or p out of range.
func (s Stack) Source(p int64) (seg int, row int64, err error) {
	if err := s.Check(); err != nil {
		return 0, 0, err
	}
	if p < 0 || p >= s.Rows() {
		return 0, 0, fmt.Errorf("blm: packed row %d outside [0, %d)", p, s.Rows())
	}
	seg, row, _ = s.run(p)
	return seg, row, nil
}

// run returns the source of packed row p of a checked stack and how many packed rows from p
// on come from consecutive rows of the same segment.
func (s Stack) run(p int64) (seg int, row, n int64) {
	if s.Mode == Interleave {
		c := int64(s.Chunk)
		k := int64(len(s.Segments))
		turn := p / c
		return int(turn % k), (turn/k)*c + p%c, c - p%c
	}
	for i, g := range s.Segments {
		if p < g.Rows {
			return i, p, g.Rows - p
		}
		p -= g.Rows
	}
	return len(s.Segments), 0, 0 // unreachable for p < Rows()
}

// RowScales returns the tensor scale of every packed row ([Rows()] float32): the manifest's
// per-row scale table, applied once per output row by GEMV and the kernels. It returns an
// error for an invalid stack.
func (s Stack) RowScales() ([]float32, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	out := make([]float32, 0, s.Rows())
	for p := int64(0); p < s.Rows(); {
		seg, _, n := s.run(p)
		for range n {
			out = append(out, s.Segments[seg].TensorScale)
		}
		p += n
	}
	return out, nil
}
