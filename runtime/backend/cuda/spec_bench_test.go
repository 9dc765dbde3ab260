//go:build linux && amd64

package cuda

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"lithos/convert"
	"lithos/pack"
	"lithos/pack/packtest"
	"lithos/runtime/backend"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
	"lithos/runtime/sample"
)

// BenchmarkSpecRound: the speculative round on a 27B-shaped slice (LITHOS_CUDA_SLICE_LAYERS
// layers of the qwen3.8-27b-nvfp4 spec at the real widths and formats) with the 27B-shaped DSpark
// head (dspark-qwen3.8-27b-nvfp4: 5 layers, hidden 5120, 32/8 heads of 128, intermediate 17408,
// Markov rank 256, confidence head; its tap layers moved into the slice), random weights in the
// real formats. It reports, each from the device (CUDA events around queued work, and the
// round's %globaltimer counters): a plain decode step, a round (16 queued, one wait), its draft
// and verify parts, the sampled plain step at T = 0.8; and the bytes each reads. Random weights
// accept nothing, so every round commits one token: the round's cost, not its gain.
func BenchmarkSpecRound(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("LITHOS_CUDA_SLICE_LAYERS"))
	if n <= 0 {
		b.Skip("LITHOS_CUDA_SLICE_LAYERS is not set")
	}
	dir := makeSliceWithHead(b, n)
	d, ks, floor := benchDevice(b)
	bd, err := bundle.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer bd.Close()
	tg, err := gpu.LoadTarget(b.Context(), Runtime(d, ks), bd)
	if err != nil {
		b.Fatal(err)
	}
	defer tg.Close()
	dr, err := tg.LoadDraft(b.Context(), bd)
	if err != nil || dr == nil {
		b.Fatalf("LoadDraft: %v %v", dr, err)
	}
	ds := dr.(*gpu.DSpark)
	var step, head int64
	for _, name := range tg.MatrixNames() {
		m, _ := tg.Matrix(name)
		step += m.Geometry.TotalBytes + 4*m.Geometry.Blocks*int64(m.Geometry.Rows)
	}
	for _, m := range ds.Matrices() {
		head += m.Geometry.TotalBytes + 4*m.Geometry.Blocks*int64(m.Geometry.Rows)
	}
	lmm, _ := tg.Matrix("lm_head")
	lmHead := lmm.Geometry.TotalBytes
	b.Logf("slice %d layers: %.2f GB of target matrices per pass (lm_head %.2f GB), draft head %.2f GB (+ the lm_head once per round); read floor %.0f GB/s",
		n, float64(step)/1e9, float64(lmHead)/1e9, float64(head)/1e9, floor.GBps())
	prompt := make([]int32, 64)
	for i := range prompt {
		prompt[i] = int32(i * 37 % tg.Cfg.Vocab)
	}
	timeCalls := func(s *gpu.Session, steps int) time.Duration {
		ev0, _ := d.NewEvent()
		ev1, _ := d.NewEvent()
		defer ev0.Close()
		defer ev1.Close()
		if err := s.PushState(); err != nil {
			b.Fatal(err)
		}
		st := s.Queue().(*queue).s
		ev0.Record(st)
		for range steps {
			if err := s.QueueStep(); err != nil {
				b.Fatal(err)
			}
		}
		ev1.Record(st)
		if err := s.PullState(); err != nil {
			b.Fatal(err)
		}
		dt, err := ev1.Since(ev0)
		if err != nil {
			b.Fatal(err)
		}
		drain(s)
		return dt / time.Duration(steps)
	}
	newSess := func(opt backend.SessionOptions) *gpu.Session {
		opt.Capacity = 1024
		s, err := tg.NewDeviceSession(opt, true)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Prefill(b.Context(), prompt); err != nil {
			b.Fatal(err)
		}
		drain(s)
		timeCalls(s, 2) // capture the graph
		return s
	}
	const steps = 16
	plain := newSess(backend.SessionOptions{Sampling: greedySampling})
	defer plain.Close()
	tPlain := timeCalls(plain, steps)
	sampled := newSess(backend.SessionOptions{Sampling: sample.Params{Temperature: 0.8, TopK: 50, TopP: 0.95, Seed: 1}})
	defer sampled.Close()
	tSampled := timeCalls(sampled, steps)
	spec := newSess(backend.SessionOptions{Sampling: greedySampling, Drafter: dr})
	defer spec.Close()
	st0 := spec.Stats()
	tRound := timeCalls(spec, steps)
	st1 := spec.Stats()
	rounds := st1.Rounds - st0.Rounds
	if rounds != steps {
		b.Fatalf("%d rounds ran of %d (stats %+v)", rounds, steps, st1)
	}
	// A call that queued steps past the one that ends a generation (runtime/generate's
	// RoundsPerCall): StopAt one token ahead, so the first step sets Done and the other
	// steps−1 return at their kernels' done checks; their cost is what an EOS wastes.
	afterDone := func(s *gpu.Session, tStep time.Duration) time.Duration {
		ss := s.State()
		ss.StopAt = ss.RingHead + 1
		t := timeCalls(s, steps)
		if ss.Done == 0 {
			b.Fatalf("the session is not done after StopAt (state %+v)", *ss)
		}
		return (steps*t - tStep) / (steps - 1)
	}
	tPlainDone := afterDone(plain, tPlain)
	b.ReportMetric(float64(tPlainDone.Microseconds()), "us/plain-step-after-done")
	tDraft := (st1.DraftTime - st0.DraftTime) / time.Duration(rounds)
	tVerify := (st1.VerifyTime - st0.VerifyTime) / time.Duration(rounds)
	gbps := floor.GBps() * 1e9
	floorOf := func(bytes int64) time.Duration { return time.Duration(float64(bytes) / gbps * 1e9) }
	roundBytes := step + head + lmHead
	b.ReportMetric(float64(tPlain.Microseconds()), "us/plain-step")
	b.ReportMetric(float64(tRound.Microseconds()), "us/round")
	b.ReportMetric(float64(tDraft.Microseconds()), "us/draft")
	b.ReportMetric(float64(tVerify.Microseconds()), "us/verify")
	b.Logf("plain step %v (floor %v, %.3f); sampled plain step (T 0.8, top-k 50, top-p 0.95) %v; round %v (floor %v for %.2f GB, %.3f) = draft %v (floor %v, %.3f) + verify 8 rows, accept, commit %v (floor %v, %.3f); round / verify %.2f; %d rounds committed %d tokens",
		tPlain, floorOf(step), floorOf(step).Seconds()/tPlain.Seconds(), tSampled, tRound, floorOf(roundBytes), float64(roundBytes)/1e9,
		floorOf(roundBytes).Seconds()/tRound.Seconds(), tDraft, floorOf(head+lmHead), floorOf(head+lmHead).Seconds()/tDraft.Seconds(),
		tVerify, floorOf(step), floorOf(step).Seconds()/tVerify.Seconds(), tRound.Seconds()/tVerify.Seconds(), rounds, st1.RoundTokens-st0.RoundTokens)
	tRoundDone := afterDone(spec, tRound)
	b.ReportMetric(float64(tRoundDone.Microseconds()), "us/round-after-done")
	b.Logf("queued behind the step that set done: a plain step %v (%.3f of a step), a round %v (%.3f of a round)",
		tPlainDone, tPlainDone.Seconds()/tPlain.Seconds(), tRoundDone, tRoundDone.Seconds()/tRound.Seconds())
}

// makeSliceWithHead writes the first layers of the 27B-shaped target and the 27B-shaped DSpark
// head (its target_layer_ids spread over the slice's layers) and packs them into one bundle.
func makeSliceWithHead(b *testing.B, layers int) string {
	b.Helper()
	tmp, err := os.MkdirTemp("", "lithos-27b-spec-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(tmp) })
	t0 := time.Now()
	spec, err := convert.LoadSynthSpec("qwen3.8-27b-nvfp4")
	if err != nil {
		b.Fatal(err)
	}
	if spec, err = packtest.ScaleSpec(spec, layers, false, false, 2e9); err != nil {
		b.Fatal(err)
	}
	ckpt := filepath.Join(tmp, "ckpt")
	if _, err := packtest.WriteCheckpoint(b.Context(), spec, ckpt, 1); err != nil {
		b.Fatal(err)
	}
	hs, err := convert.LoadSynthSpec("dspark-qwen3.8-27b-nvfp4")
	if err != nil {
		b.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(hs.Config, &cfg); err != nil {
		b.Fatal(err)
	}
	taps := cfg["target_layer_ids"].([]any)
	for i := range taps {
		taps[i] = i * (layers - 1) / max(len(taps)-1, 1)
	}
	cfg["num_target_layers"] = layers
	if hs.Config, err = json.Marshal(cfg); err != nil {
		b.Fatal(err)
	}
	head := filepath.Join(tmp, "head")
	if _, err := packtest.WriteCheckpoint(b.Context(), hs, head, 2); err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(tmp, "slice-spec.lithos")
	if _, err := pack.Build(b.Context(), pack.Options{Target: ckpt, Draft: head, Out: out, Workers: runtime.GOMAXPROCS(0), ToolVersion: "bench",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		b.Fatal(err)
	}
	os.RemoveAll(ckpt)
	os.RemoveAll(head)
	b.Logf("27B slice of %d layers with the 27B-shaped DSpark head written and packed in %v", layers, time.Since(t0))
	return out
}
