package blm

import (
	"bytes"
	"context"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"lithos/formats"
)

func TestStackOrder(t *testing.T) {
	st := GateUp(Segment{Name: "gate", Rows: 24, TensorScale: 2}, Segment{Name: "up", Rows: 24, TensorScale: 3})
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
	// Written out by hand: chunks of 8, gate first.
	want := []struct {
		p   int64
		seg int
		row int64
	}{{0, 0, 0}, {7, 0, 7}, {8, 1, 0}, {15, 1, 7}, {16, 0, 8}, {24, 1, 8}, {32, 0, 16}, {47, 1, 23}}
	for _, w := range want {
		seg, row, err := st.Source(w.p)
		if err != nil || seg != w.seg || row != w.row {
			t.Errorf("Source(%d) = %d, %d, %v; want %d, %d", w.p, seg, row, err, w.seg, w.row)
		}
	}
	if _, _, err := st.Source(48); err == nil {
		t.Error("Source(48) of 48 rows: no error")
	}
	rs, err := st.RowScales()
	if err != nil {
		t.Fatal(err)
	}
	for p, v := range rs {
		if want := []float32{2, 3}[(p/8)%2]; v != want {
			t.Fatalf("row scale %d = %v, want %v", p, v, want)
		}
	}

	cat := Stack{Mode: Concat, Segments: []Segment{{"z", 20, 0.5}, {"empty", 0, 1}, {"qkv", 37, 0.25}}}
	if cat.Rows() != 57 {
		t.Fatalf("Rows = %d", cat.Rows())
	}
	for _, w := range []struct {
		p   int64
		seg int
		row int64
	}{{0, 0, 0}, {19, 0, 19}, {20, 2, 0}, {56, 2, 36}} {
		seg, row, err := cat.Source(w.p)
		if err != nil || seg != w.seg || row != w.row {
			t.Errorf("concat Source(%d) = %d, %d, %v; want %d, %d", w.p, seg, row, err, w.seg, w.row)
		}
	}
	rs, _ = cat.RowScales()
	if len(rs) != 57 || rs[19] != 0.5 || rs[20] != 0.25 || rs[56] != 0.25 {
		t.Errorf("concat row scales %v", rs)
	}
}

func TestStackErrors(t *testing.T) {
	seg := func(n int64, s float32) Segment { return Segment{Name: "s", Rows: n, TensorScale: s} }
	for _, c := range []struct {
		st   Stack
		want string
	}{
		{Stack{Mode: Concat}, "no segments"},
		{Stack{Mode: "zip", Segments: []Segment{seg(8, 1)}}, "stack mode"},
		{Stack{Mode: Concat, Chunk: 8, Segments: []Segment{seg(8, 1)}}, "chunk 8"},
		{Stack{Mode: Concat, Segments: []Segment{seg(-1, 1)}}, "rows -1"},
		{Stack{Mode: Concat, Segments: []Segment{seg(MaxN, 1), seg(1, 1)}}, "exceeds"},
		{Stack{Mode: Concat, Segments: []Segment{seg(8, 0)}}, "tensor scale 0"},
		{Stack{Mode: Concat, Segments: []Segment{seg(8, float32(math.NaN()))}}, "finite and positive"},
		{Stack{Mode: Concat, Segments: []Segment{seg(8, float32(math.Inf(1)))}}, "finite and positive"},
		{Stack{Mode: Interleave, Segments: []Segment{seg(8, 1)}}, "positive chunk"},
		{GateUp(seg(16, 1), seg(24, 1)), "must be equal"},
		{GateUp(seg(12, 1), seg(12, 1)), "not a multiple of the chunk 8"},
	} {
		err := c.st.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: Check = %v, want %q", c.st, err, c.want)
		}
	}
}

// stackRows builds the stacked stored rows by hand from the segments' rows.
func stackRows(g Geometry, st Stack, segs []Rows) Rows {
	out := g.NewRows(int(st.Rows()))
	cb, sb, bb := g.CodeRowBytes(), g.ScaleRowBytes(), g.BiasRowBytes()
	put := func(p int64, src Rows, r int64) {
		copy(out.Codes[p*cb:], src.Codes[r*cb:(r+1)*cb])
		if sb > 0 {
			copy(out.Scales[p*sb:], src.Scales[r*sb:(r+1)*sb])
		}
		if bb > 0 {
			copy(out.Biases[p*bb:], src.Biases[r*bb:(r+1)*bb])
		}
	}
	p := int64(0)
	if st.Mode == Concat {
		for i, s := range st.Segments {
			for r := range s.Rows {
				put(p, segs[i], r)
				p++
			}
		}
		return out
	}
	c := int64(st.Chunk)
	for base := int64(0); base < st.Segments[0].Rows; base += c {
		for i := range st.Segments {
			for r := base; r < base+c; r++ {
				put(p, segs[i], r)
				p++
			}
		}
	}
	return out
}

func TestPackStack(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(9, 9))
	for _, c := range []struct {
		spec Spec
		st   Stack
	}{
		{Spec{Format: formats.NVFP4, K: 256}, GateUp(Segment{"gate", 40, 0.001}, Segment{"up", 40, 0.002})},
		{Spec{Format: formats.FP8, K: 320}, Stack{Mode: Concat, Segments: []Segment{{"in_proj_z", 20, 0.01}, {"in_proj_qkv", 37, 0.02}}}},
		{Spec{Format: formats.Int4, K: 192, GroupSize: 64, ScaleType: "F16"}, Stack{Mode: Interleave, Chunk: 4, Segments: []Segment{{"a", 8, 1}, {"b", 8, 1}, {"c", 8, 1}}}},
	} {
		s := c.spec
		s.N = c.st.Rows()
		g := mustGeometry(t, s)
		segs := make([]Rows, len(c.st.Segments))
		srcs := make([]Source, len(segs))
		for i, sg := range c.st.Segments {
			segs[i] = randomRows(r, g, int(sg.Rows))
			srcs[i] = sourceOf(segs[i], iotest.HalfReader)
		}
		want := make([]byte, g.TotalBytes)
		if err := g.PackRows(want, stackRows(g, c.st, segs)); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := PackStack(ctx, &buf, g, c.st, srcs); err != nil {
			t.Fatal(err)
		}
		if i := firstMismatch(buf.Bytes(), want); i >= 0 {
			t.Fatalf("%s: PackStack differs from packing the hand-stacked rows at byte %d", g.Format, i)
		}
		sinks := make([]Sink, len(segs))
		gets := make([]func() Rows, len(segs))
		for i := range sinks {
			sinks[i], gets[i] = newSink(g)
		}
		if err := UnpackStack(ctx, sinks, g, c.st, bytes.NewReader(want)); err != nil {
			t.Fatal(err)
		}
		for i := range segs {
			equalRows(t, gets[i](), segs[i])
		}
	}

	// The stack must match the geometry and the streams.
	g := mustGeometry(t, Spec{Format: formats.FP8, N: 16, K: 32})
	st := Single("w", 16, 1)
	if _, err := PackStack(ctx, io.Discard, g, Single("w", 15, 1), []Source{{Codes: bytes.NewReader(nil)}}); err == nil {
		t.Error("stack rows ≠ N: no error")
	}
	if _, err := PackStack(ctx, io.Discard, g, st, nil); err == nil {
		t.Error("no streams: no error")
	}
	if _, err := PackStack(ctx, io.Discard, g, st, []Source{{}}); err == nil {
		t.Error("nil codes stream: no error")
	}
}
