package blm

import (
	"context"
	"fmt"
	"io"
)

// batchBytes bounds the packed bytes one streaming call holds at a time (at least one block).
const batchBytes = 1 << 18

// Source is one matrix's stored tensors as byte streams in row-major order, e.g.
// io.SectionReaders over a safetensors file's `weight`, `weight_scale` (NVFP4, INT8) or
// `scales` and `biases` (INT4). Scales is nil for BF16, F16, FP8; Biases is nil except for
// INT4. Rows are read in order, each stream exactly once; Pack reads exactly the matrix's
// bytes from each.
type Source struct {
	Codes, Scales, Biases io.Reader
}

// Sink receives one matrix's stored tensors in row-major order, as Source provides them.
type Sink struct {
	Codes, Scales, Biases io.Writer
}

// Pack streams one matrix (g.N stored rows from src) into w in BLM order and returns the bytes
// written (g.TotalBytes on success). Memory is one batch of blocks (about 1 MiB, at least one
// block), whatever the matrix size. It returns an error for a geometry that fails Check, a
// missing stream, a short read (naming the stream and rows) or a write error; ctx is checked
// between batches.
func Pack(ctx context.Context, w io.Writer, g Geometry, src Source) (int64, error) {
	return PackStack(ctx, w, g, Single("matrix", g.N, 1), []Source{src})
}

// Unpack streams one packed matrix (g.TotalBytes read from r) back into its stored tensors.
// Errors as UnpackBlock, and for a short read or a write error.
func Unpack(ctx context.Context, dst Sink, g Geometry, r io.Reader) error {
	return UnpackStack(ctx, []Sink{dst}, g, Single("matrix", g.N, 1), r)
}

// PackStack streams the segments of st (srcs[i] holds segment i's stored rows) into w as one
// packed matrix whose rows are in st's order; g.N must equal st.Rows(). Each source is read
// sequentially. Returns and errors as Pack, and for an invalid stack.
func PackStack(ctx context.Context, w io.Writer, g Geometry, st Stack, srcs []Source) (int64, error) {
	s, err := newStreamer(g, st, len(srcs))
	if err != nil {
		return 0, err
	}
	for i, src := range srcs {
		if err := s.checkStreams(i, src.Codes != nil, src.Scales != nil, src.Biases != nil); err != nil {
			return 0, err
		}
	}
	var written int64
	for b0 := int64(0); b0 < g.Blocks; b0 += s.nb {
		if err := ctx.Err(); err != nil {
			return written, err
		}
		nb, rows := s.batch(b0)
		err := s.runs(b0, rows, func(seg int, r0, srow int64, n int) error {
			src := srcs[seg]
			part := s.p.slice(s.stage, int(r0), n)
			what := func(t string) string {
				return fmt.Sprintf("blm: read %s of %s rows %d…%d", t, st.Segments[seg].Name, srow, srow+int64(n)-1)
			}
			if _, err := io.ReadFull(src.Codes, part.Codes); err != nil {
				return fmt.Errorf("%s: %w", what("codes"), err)
			}
			if part.Scales != nil {
				if _, err := io.ReadFull(src.Scales, part.Scales); err != nil {
					return fmt.Errorf("%s: %w", what("scales"), err)
				}
			}
			if part.Biases != nil {
				if _, err := io.ReadFull(src.Biases, part.Biases); err != nil {
					return fmt.Errorf("%s: %w", what("biases"), err)
				}
			}
			return nil
		})
		if err != nil {
			return written, err
		}
		for i := range nb {
			b := b0 + int64(i)
			n := g.blockRows(b)
			s.p.packBlock(s.out[int64(i)*g.BlockBytes:int64(i+1)*g.BlockBytes], s.p.slice(s.stage, i*g.Rows, n), n)
		}
		m, err := w.Write(s.out[:int64(nb)*g.BlockBytes])
		written += int64(m)
		if err != nil {
			return written, fmt.Errorf("blm: write blocks %d…%d: %w", b0, b0+int64(nb)-1, err)
		}
	}
	return written, nil
}

// UnpackStack streams one packed matrix from r back into the stored rows of st's segments
// (dsts[i] receives segment i's). Errors as Unpack, and for an invalid stack.
func UnpackStack(ctx context.Context, dsts []Sink, g Geometry, st Stack, r io.Reader) error {
	s, err := newStreamer(g, st, len(dsts))
	if err != nil {
		return err
	}
	for i, d := range dsts {
		if err := s.checkStreams(i, d.Codes != nil, d.Scales != nil, d.Biases != nil); err != nil {
			return err
		}
	}
	for b0 := int64(0); b0 < g.Blocks; b0 += s.nb {
		if err := ctx.Err(); err != nil {
			return err
		}
		nb, rows := s.batch(b0)
		if _, err := io.ReadFull(r, s.out[:int64(nb)*g.BlockBytes]); err != nil {
			return fmt.Errorf("blm: read blocks %d…%d: %w", b0, b0+int64(nb)-1, err)
		}
		for i := range nb {
			b := b0 + int64(i)
			n := g.blockRows(b)
			if err := s.p.unpackBlock(s.p.slice(s.stage, i*g.Rows, n), s.out[int64(i)*g.BlockBytes:int64(i+1)*g.BlockBytes], b, n); err != nil {
				return err
			}
		}
		err := s.runs(b0, rows, func(seg int, r0, srow int64, n int) error {
			d := dsts[seg]
			part := s.p.slice(s.stage, int(r0), n)
			what := func(t string) string {
				return fmt.Sprintf("blm: write %s of %s rows %d…%d", t, st.Segments[seg].Name, srow, srow+int64(n)-1)
			}
			if _, err := d.Codes.Write(part.Codes); err != nil {
				return fmt.Errorf("%s: %w", what("codes"), err)
			}
			if part.Scales != nil {
				if _, err := d.Scales.Write(part.Scales); err != nil {
					return fmt.Errorf("%s: %w", what("scales"), err)
				}
			}
			if part.Biases != nil {
				if _, err := d.Biases.Write(part.Biases); err != nil {
					return fmt.Errorf("%s: %w", what("biases"), err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// streamer holds one batch of stored rows and packed blocks.
type streamer struct {
	p     *plan
	st    Stack
	nb    int64 // blocks per batch
	stage Rows  // nb·Rows stored rows, packed order
	out   []byte
}

func newStreamer(g Geometry, st Stack, streams int) (*streamer, error) {
	p, err := newPlan(g)
	if err != nil {
		return nil, err
	}
	if err := st.Check(); err != nil {
		return nil, err
	}
	if st.Rows() != g.N {
		return nil, fmt.Errorf("blm: stack of %d rows for a geometry of N = %d", st.Rows(), g.N)
	}
	if streams != len(st.Segments) {
		return nil, fmt.Errorf("blm: %d streams for %d stack segments", streams, len(st.Segments))
	}
	nb := max(1, min(g.Blocks, batchBytes/max(1, g.BlockBytes)))
	return &streamer{
		p:     p,
		st:    st,
		nb:    nb,
		stage: g.NewRows(int(nb) * g.Rows),
		out:   make([]byte, nb*g.BlockBytes),
	}, nil
}

func (s *streamer) checkStreams(i int, codes, scales, biases bool) error {
	name := s.st.Segments[i].Name
	if !codes {
		return fmt.Errorf("blm: %s: no codes stream", name)
	}
	if wantS := s.p.srb > 0; scales != wantS {
		return fmt.Errorf("blm: %s: format %s %s a scales stream", name, s.p.g.Format, needs(wantS))
	}
	if biases != s.p.fi.biases {
		return fmt.Errorf("blm: %s: format %s %s a biases stream", name, s.p.g.Format, needs(s.p.fi.biases))
	}
	return nil
}

func needs(b bool) string {
	if b {
		return "needs"
	}
	return "has no"
}

// batch returns the blocks and stored rows of the batch starting at block b0.
func (s *streamer) batch(b0 int64) (nb int, rows int64) {
	g := s.p.g
	nb = int(min(s.nb, g.Blocks-b0))
	rows = min(int64(nb)*int64(g.Rows), g.N-b0*int64(g.Rows))
	return nb, rows
}

// runs calls fn for each run of the batch's packed rows that comes from consecutive rows of
// one segment: r0 is the run's first row within the batch, srow its first row in the segment.
func (s *streamer) runs(b0, rows int64, fn func(seg int, r0, srow int64, n int) error) error {
	first := b0 * int64(s.p.g.Rows)
	for r := int64(0); r < rows; {
		seg, srow, n := s.st.run(first + r)
		n = min(n, rows-r)
		if err := fn(seg, r, srow, int(n)); err != nil {
			return err
		}
		r += n
	}
	return nil
}
