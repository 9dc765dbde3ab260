//go:build linux && amd64

package cuda

import (
	"fmt"
	"math"
	"testing"

	"lithos/kernels"
	"lithos/runtime/sample"
)

// The kernels of sampling and of the speculative round against runtime/sample and the CPU
// session's rules, outputs poisoned before each run.

// readI32 reads n int32 values of a buffer.
func (e *opEnv) readI32(b *Buffer, n int) []int32 {
	e.t.Helper()
	f := e.read(b, n)
	out := make([]int32, n)
	for i, v := range f {
		out[i] = int32(math.Float32bits(v))
	}
	return out
}

// sampleLogits makes rows of n logits: normal(0, scale), some rows quantized to quarters (ties
// at every cut), with −Inf and NaN entries sprinkled in.
func (e *opEnv) sampleLogits(rows, n, ld int) []float32 {
	x := make([]float32, rows*ld)
	for r := 0; r < rows; r++ {
		scale := []float64{1, 3, 0.3, 6}[r%4]
		for i := 0; i < n; i++ {
			v := e.r.NormFloat64() * scale
			if r%2 == 1 {
				v = math.Round(v*4) / 4
			}
			x[r*ld+i] = float32(v)
		}
		for j := 0; j < 3; j++ {
			x[r*ld+e.r.IntN(n)] = float32(math.Inf(-1))
		}
		x[r*ld+e.r.IntN(n)] = float32(math.NaN())
	}
	return x
}

// TestOpSample: lithos_sample draws exactly runtime/sample's token — Sample for stream 0,
// Draw(Probs, UniformStream) for the speculative streams — for temperatures, top-k and top-p
// cuts (through ties, −Inf and NaN logits), many positions and seeds, with a dynamic row count
// (rows past it untouched) and the seed read from step-state words.
func TestOpSample(t *testing.T) {
	e := newOpEnv(t, 31)
	sizes := []int{700, 4099}
	if !emulatorEnabled() {
		sizes = append(sizes, 248320)
	}
	type cfg struct {
		temp  float64
		topK  int
		topP  float64
		strm  uint32
		seed  uint64
		pos0  uint32
		label string
	}
	cfgs := []cfg{
		{1, 0, 1, 0, 7, 100, "T1"},
		{0.7, 0, 1, 0, 1 << 40, 3, "T0.7"},
		{1, 5, 1, 0, 99, 17, "topk5"},
		{0.8, 1, 1, 0, 5, 8, "topk1"},
		{1.3, 0, 0.9, 0, 12345, 60, "topp0.9"},
		{0.6, 0, 0.5, sample.StreamDraft, 77, 1000, "topp0.5/stream1"},
		{1, 50, 0.8, sample.StreamResidual, 3, 4095, "topk50+topp0.8/stream3"},
		{2, 300, 0.97, 0, 0xdeadbeefcafe, 1 << 20, "topk300+topp0.97"},
	}
	const rows, live = 6, 5
	for _, n := range sizes {
		ld := n + 3
		logits := e.sampleLogits(rows, n, ld)
		bx := e.f32(logits)
		for _, c := range cfgs {
			t.Run(fmt.Sprintf("n%d/%s", n, c.label), func(t *testing.T) {
				e.t = t
				rec, err := kernels.NewSampleParams(rows, n, c.temp, c.topK, c.topP, 40, c.pos0)
				if err != nil {
					t.Fatal(err)
				}
				rec.Ld, rec.Stream, rec.PosAdd, rec.OutOff = uint32(ld), c.strm, 2, 1
				rec.RowsWord = wordRows
				ctl := make([]uint32, 64)
				ctl[wordRows] = live
				ctl[40], ctl[41] = uint32(c.seed), uint32(c.seed>>32)
				e.setCtl(ctl)
				defer e.setCtl(make([]uint32, 64))
				out := e.alloc(4 * (rows + 2))
				if err := e.s.Fill32(out, 0, rows+2, 0xFFFFFFF9); err != nil {
					t.Fatal(err)
				}
				e.run("lithos_sample", rec, rec.Grid(), bx, out)
				got := e.readI32(out, rows+2)
				smp, err := sample.New(sample.Params{Temperature: c.temp, TopK: c.topK, TopP: c.topP, Seed: c.seed})
				if err != nil {
					t.Fatal(err)
				}
				for r := 0; r < rows+2; r++ {
					if r == 0 || r > live {
						if got[r] != -7 {
							t.Fatalf("out[%d] = %d written (rows %d, out offset 1)", r, got[r], live)
						}
						continue
					}
					row := logits[(r-1)*ld : (r-1)*ld+n]
					pos := int(c.pos0) + 2 + r - 1
					var want int
					if c.strm == 0 {
						want = smp.Sample(row, pos)
					} else {
						want = sample.Draw(smp.Probs(nil, row), sample.UniformStream(c.seed, c.strm, pos))
					}
					if int(got[r]) != want {
						t.Errorf("row %d (position %d): token %d, runtime/sample %d", r-1, pos, got[r], want)
					}
				}
			})
		}
	}
	// Many positions of one row: the draws follow the counter-based stream position by position.
	t.Run("positions", func(t *testing.T) {
		e.t = t
		const n, P = 1000, 64
		row := e.sampleLogits(1, n, n)
		x := make([]float32, 0, P*n)
		for range P {
			x = append(x, row...)
		}
		for _, c := range []cfg{{0.9, 0, 1, 0, 11, 0, ""}, {1.1, 20, 0.9, 0, 12, 500, ""}} {
			rec, err := kernels.NewSampleParams(P, n, c.temp, c.topK, c.topP, 40, c.pos0)
			if err != nil {
				t.Fatal(err)
			}
			ctl := make([]uint32, 64)
			ctl[40], ctl[41] = uint32(c.seed), uint32(c.seed>>32)
			e.setCtl(ctl)
			out := e.alloc(4 * P)
			e.run("lithos_sample", rec, rec.Grid(), e.f32(x), out)
			got := e.readI32(out, P)
			smp, _ := sample.New(sample.Params{Temperature: c.temp, TopK: c.topK, TopP: c.topP, Seed: c.seed})
			distinct := map[int32]bool{}
			for r := range P {
				if want := smp.Sample(row, int(c.pos0)+r); int(got[r]) != want {
					t.Errorf("position %d: token %d, runtime/sample %d", int(c.pos0)+r, got[r], want)
				}
				distinct[got[r]] = true
			}
			if len(distinct) < 3 {
				t.Errorf("%d distinct tokens over %d positions: the draw does not follow the position", len(distinct), P)
			}
		}
		e.setCtl(make([]uint32, 64))
	})
}
