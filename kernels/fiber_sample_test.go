package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"lithos/runtime/sample"
)

// lithos_sample in the fiber runtime, both ways its source reads: with float64 probabilities
// and sums (the default fiber build, as CUDA compiles it: exactly runtime/sample's token) and
// in float32 (built as Metal, LITHOS_SHIM_METAL: Metal has no float64). The CUDA driver's
// emulator and the GPU run the float64 way (runtime/backend/cuda TestOpSample); nothing else
// runs the float32 way before a Mac does.

var (
	sample32Once sync.Once
	sample32Exe  fiberProgram
)

// sampleFloat32Exe returns a fiber executable of lithos_sample alone built as Metal (float32),
// once per test binary, in the main fiber build's directory (which TestMain removes).
func sampleFloat32Exe(t testing.TB) string {
	t.Helper()
	generatedFiber(t)
	sample32Once.Do(func() {
		dir, err := os.MkdirTemp(fiberDir, "sample32-")
		if err != nil {
			sample32Exe.err = err
			return
		}
		k, ok := Lookup("lithos_sample")
		if !ok {
			sample32Exe.err = fmt.Errorf("no kernel lithos_sample")
			return
		}
		sample32Exe.exe, sample32Exe.err = buildFiber(t, dir, "lithos_sample32", "#define LITHOS_SHIM_METAL 1\n"+Source(Metal),
			map[string]string{k.Name: fiberCall(k)}, []string{k.Name})
	})
	if sample32Exe.err != nil {
		t.Fatalf("build the float32 lithos_sample: %v", sample32Exe.err)
	}
	return sample32Exe.exe
}

// sampleRows makes rows of n logits: normal(0, scale), odd rows quantized to quarters (ties at
// every cut), with −Inf and NaN entries sprinkled in (TestOpSample's rows).
func sampleRows(r *rand.Rand, rows, n, ld int) []float32 {
	x := make([]float32, rows*ld)
	for i := 0; i < rows; i++ {
		scale := []float64{1, 3, 0.3, 6}[i%4]
		for c := 0; c < n; c++ {
			v := r.NormFloat64() * scale
			if i%2 == 1 {
				v = math.Round(v*4) / 4
			}
			x[i*ld+c] = float32(v)
		}
		for j := 0; j < 3; j++ {
			x[i*ld+r.IntN(n)] = float32(math.Inf(-1))
		}
		x[i*ld+r.IntN(n)] = float32(math.NaN())
	}
	return x
}

// drawDistance is how far u lies from token tok's interval [F(tok−), F(tok)) of the
// distribution probs walked in increasing id order (runtime/sample.Draw's order): 0 inside it.
func drawDistance(probs []float64, u float64, tok int) float64 {
	if tok < 0 || tok >= len(probs) {
		return math.Inf(1)
	}
	var lo float64
	for _, q := range probs[:tok] {
		if q > 0 {
			lo += q
		}
	}
	hi := lo + max(probs[tok], 0)
	switch {
	case u < lo:
		return lo - u
	case u >= hi:
		return u - hi
	}
	return 0
}

// sampleCfg is one sampling configuration of TestFiberSampleFloat32.
type sampleCfg struct {
	temp float64
	topK int
	topP float64
	strm uint32
	seed uint64
	pos0 uint32
}

// runSample runs lithos_sample on exe once per configuration over rows rows of logits ([rows,
// ld], n each) and returns each configuration's tokens: under the schedule asc, or with all
// under every schedule of -fiber.schedules (which must agree bitwise).
func runSample(t *testing.T, exe string, logits []float32, rows, n, ld int, cfgs []sampleCfg, all bool) [][]uint32 {
	t.Helper()
	const seedWord = 40
	var j job
	x := j.f32(logits[:rows*ld])
	outs := make([]int, len(cfgs))
	for ci, c := range cfgs {
		rec, err := NewSampleParams(rows, n, c.temp, c.topK, c.topP, seedWord, c.pos0)
		if err != nil {
			t.Fatal(err)
		}
		rec.Ld, rec.Stream = uint32(ld), c.strm
		ctl := make([]uint32, 64)
		ctl[seedWord], ctl[seedWord+1] = uint32(c.seed), uint32(c.seed>>32)
		outs[ci] = j.buf(u32Bytes(poisonI32(rows)))
		j.launch(t, "lithos_sample", rec.Grid(), j.buf(u32Bytes(ctl)), j.buf(Record(rec)), x, outs[ci])
	}
	var res [][]byte
	var err error
	if all {
		res, err = j.runSchedules(t, exe)
	} else {
		res, err = j.run(t, exe)
	}
	if err != nil {
		t.Fatalf("fiber run: %v", err)
	}
	toks := make([][]uint32, len(cfgs))
	for ci := range cfgs {
		toks[ci] = bytesU32(res[outs[ci]])
	}
	return toks
}

// checkSample compares the tokens of runSample with runtime/sample's: exactly, or with f32
// within tol of u (drawDistance); it returns the draws and those that differ within tol.
func checkSample(t *testing.T, toks [][]uint32, logits []float32, rows, n, ld int, cfgs []sampleCfg, f32 bool) (draws, off int) {
	t.Helper()
	const tol = 1e-4
	for ci, c := range cfgs {
		smp, err := sample.New(sample.Params{Temperature: c.temp, TopK: c.topK, TopP: c.topP, Seed: c.seed})
		if err != nil {
			t.Fatal(err)
		}
		for i := range rows {
			row := logits[i*ld : i*ld+n]
			pos := int(c.pos0) + i
			probs := smp.Probs(nil, row)
			u := sample.UniformStream(c.seed, c.strm, pos)
			want := sample.Draw(probs, u)
			if c.strm == 0 {
				if w := smp.Sample(row, pos); w != want {
					t.Fatalf("runtime/sample: Sample %d, Draw(Probs, Uniform) %d", w, want)
				}
			}
			tok := int(int32(toks[ci][i]))
			draws++
			if tok == want {
				continue
			}
			d := drawDistance(probs, u, tok)
			if !f32 || d > tol {
				t.Errorf("config %+v row %d (position %d): token %d, runtime/sample %d (u %.9f, %.3g from the token's interval)", c, i, pos, tok, want, u, d)
				continue
			}
			off++
			t.Logf("config %+v row %d: token %d, runtime/sample %d: u %.9f lies %.3g from its interval (float32 rounding)", c, i, tok, want, u, d)
		}
	}
	return draws, off
}

// TestFiberSampleFloat32: lithos_sample's token for temperatures, top-k and top-p cuts (through
// ties, −Inf and NaN logits), streams, seeds and positions, against runtime/sample's
// (Sample for stream 0, Draw(Probs, UniformStream) for the others). The float32 build (Metal's):
// its token, or one whose interval of the cumulative distribution lies within 1e-4 of u —
// float32 rounding of the running sum over up to 1,024 threads' shares (≤ 1,024 · 2⁻²⁴ ≈ 6e-5)
// — at most 1 % of the draws that way: an off-by-one claim or a wrong cut lands a token's
// probability (≈ 1e-3 and more here) away and fails. The float64 build (the default fiber
// build, as CUDA compiles it): exactly its token. The fiber runtime's schedules (a missing
// barrier) on a few rows of each; the rest under one schedule (1,024 fibers a row: ≈ 0.2 s each).
func TestFiberSampleFloat32(t *testing.T) {
	exe64, exe32 := generatedFiber(t), sampleFloat32Exe(t)
	cfgs := []sampleCfg{
		{1, 0, 1, 0, 7, 100},
		{0.7, 0, 1, 0, 1 << 40, 3},
		{0.3, 0, 1, sample.StreamDraft, 21, 9},
		{1, 5, 1, 0, 99, 17},
		{0.8, 1, 1, 0, 5, 8},
		{1.3, 0, 0.9, 0, 12345, 60},
		{0.6, 0, 0.5, sample.StreamDraft, 77, 1000},
		{1, 50, 0.8, sample.StreamResidual, 3, 4095},
		{2, 300, 0.97, 0, 0xdeadbeefcafe, 1 << 20},
	}
	r := rand.New(rand.NewPCG(61, 62))
	draws, off := 0, 0
	for _, n := range []int{700, 4099} {
		const rows = 8
		ld := n + 3
		logits := sampleRows(r, rows, n, ld)
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			d, o := checkSample(t, runSample(t, exe32, logits, rows, n, ld, cfgs, false), logits, rows, n, ld, cfgs, true)
			sc := []sampleCfg{cfgs[5], cfgs[7]}
			d2, o2 := checkSample(t, runSample(t, exe32, logits, 2, n, ld, sc, true), logits, 2, n, ld, sc, true)
			draws, off = draws+d+d2, off+o+o2
			if n == 700 {
				checkSample(t, runSample(t, exe64, logits, 3, n, ld, cfgs, false), logits, 3, n, ld, cfgs, false)
			}
		})
	}
	t.Logf("float32: %d draws, %d of them within rounding of a boundary, the rest runtime/sample's token", draws, off)
	if off*100 > draws {
		t.Errorf("float32: %d of %d draws differ from runtime/sample (each within rounding of a boundary): more than 1 %%", off, draws)
	}
}

// poisonI32 is n int32 −7s (an output the kernel must overwrite).
func poisonI32(n int) []uint32 {
	v := make([]uint32, n)
	for i := range v {
		v[i] = 0xFFFFFFF9
	}
	return v
}
