package generate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"lithos/pack"
	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/backend/cuda"
	"lithos/runtime/bundle"
	"lithos/runtime/sample"
)

// fakeGPU is a GPU backend for the auto choice: Load fails with loadErr, or loads the CPU
// target and wraps it so that NewSession fails with refuse(opt) when that is not nil, and
// returns wrap(session, opt, vocab) when wrap is set (a GPU that computes wrong: selfcheck_test.go).
// It counts the targets it loaded and closed and the sessions it opened, and keeps the bundle
// it was last given; its targets' Close also returns closeErr. name, when set, replaces
// "fakegpu" (a fake standing in for the CPU reference).
type fakeGPU struct {
	loadErr                 error
	refuse                  func(backend.SessionOptions) error
	wrap                    func(s backend.Session, opt backend.SessionOptions, vocab int) backend.Session
	closeErr                error
	name                    string
	bundle                  *bundle.Bundle
	loads, closes, sessions int
}

func (g *fakeGPU) Name() string {
	if g.name != "" {
		return g.name
	}
	return "fakegpu"
}

func (g *fakeGPU) Load(ctx context.Context, b *bundle.Bundle) (backend.Target, error) {
	g.bundle = b
	if g.loadErr != nil {
		return nil, g.loadErr
	}
	t, err := cpu.Backend{}.Load(ctx, b)
	if err != nil {
		return nil, err
	}
	g.loads++
	return &fakeTarget{Target: t, g: g}, nil
}

type fakeTarget struct {
	backend.Target
	g *fakeGPU
}

func (t *fakeTarget) NewSession(opt backend.SessionOptions) (backend.Session, error) {
	if t.g.refuse != nil {
		if err := t.g.refuse(opt); err != nil {
			return nil, err
		}
	}
	s, err := t.Target.NewSession(opt)
	if err != nil {
		return nil, err
	}
	t.g.sessions++
	if t.g.wrap != nil {
		s = t.g.wrap(s, opt, t.Config().Vocab)
	}
	return s, nil
}

func (t *fakeTarget) Close() error { t.g.closes++; return errors.Join(t.Target.Close(), t.g.closeErr) }

// refuseSampledDrafts refuses what the GPU runtime refuses at NewSession (gpu.Target):
// drafts sampled with the min(1, p/q) rule at temperature > 0.
func refuseSampledDrafts(opt backend.SessionOptions) error {
	if opt.Drafter != nil && opt.DraftSampling == backend.DraftSample && !opt.Sampling.Greedy() {
		return backend.Unsupported(errors.New("fakegpu: session: sampled drafts (--draft-sampling sample, the min(1, p/q) rule) do not run on the FAKEGPU backend yet"))
	}
	return nil
}

// logTo returns a logger writing text lines at level and above into buf.
func logTo(buf *bytes.Buffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level}))
}

// autoLines are the lines of logs about the auto choice (not, e.g., the fixture's missing EOS).
func autoLines(logs *bytes.Buffer) []string {
	var out []string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "backend auto") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// autoCands are auto's candidates with g as the GPU (its device present when usable is nil).
func autoCands(g *fakeGPU, usable error) []candidate {
	return []candidate{{g, func() (string, error) { return "", usable }}, {be: cpu.Backend{}}}
}

// TestAutoRefusedBundle: a GPU whose Load refuses the bundle (backend.ErrUnsupported) leaves
// auto on the CPU with one warning line that names the backend, the CPU, --backend and the
// refusal's own message; the runner then generates on the CPU and says so in its result.
func TestAutoRefusedBundle(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	refusal := "bundle x: tensor layers.0.mlp.down_proj is INT8; the FAKEGPU kernels read [NVFP4 FP8 BF16]"
	g := &fakeGPU{loadErr: fmt.Errorf("load: %w", backend.Unsupported(errors.New(refusal)))}
	var logs bytes.Buffer
	r, err := openWith(context.Background(), dir, Options{Log: logTo(&logs, slog.LevelInfo)}, autoCands(g, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Backend.Name() != "cpu" || r.Draft == nil {
		t.Fatalf("backend %s, draft %v: want cpu with the draft head", r.Backend.Name(), r.Draft)
	}
	lines := autoLines(&logs)
	if len(lines) != 1 {
		t.Fatalf("want one log line, got %q", logs.String())
	}
	for _, want := range []string{"level=WARN", "fakegpu cannot run", "running on cpu", "--backend fakegpu would fail", "is INT8", "layers.0.mlp.down_proj"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("warning %q lacks %q", lines[0], want)
		}
	}
	res, err := r.Generate(context.Background(), Request{PromptIDs: []int32{1, 2, 3}, MaxTokens: 3, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if res.Backend != "cpu" || !strings.Contains(string(raw), `"backend":"cpu"`) {
		t.Errorf("result backend %q (%s): want cpu", res.Backend, raw)
	}
}

// TestAutoSampledDrafts: sampled drafts at temperature > 0, which the GPU refuses at
// NewSession, leave auto on the CPU (the GPU target loaded once and closed again); the same
// bundle with the point-mass rule, or greedy sampling, stays on the GPU and its results say so.
func TestAutoSampledDrafts(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	hot := sample.Params{Temperature: 0.8, TopP: 1, Seed: 3}
	for _, c := range []struct {
		name    string
		session *backend.SessionOptions
		want    string
	}{
		{"sample at temperature 0.8", &backend.SessionOptions{Sampling: hot, DraftSampling: backend.DraftSample}, "cpu"},
		{"argmax at temperature 0.8", &backend.SessionOptions{Sampling: hot, DraftSampling: backend.DraftArgmax}, "fakegpu"},
		{"sample, greedy", &backend.SessionOptions{Sampling: greedy, DraftSampling: backend.DraftSample}, "fakegpu"},
		{"no session options (greedy)", nil, "fakegpu"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &fakeGPU{refuse: refuseSampledDrafts}
			var logs bytes.Buffer
			r, err := openWith(context.Background(), dir, Options{Session: c.session, Log: logTo(&logs, slog.LevelWarn)}, autoCands(g, nil))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Backend.Name() != c.want || g.loads != 1 {
				t.Fatalf("backend %s after %d GPU loads: want %s after 1", r.Backend.Name(), g.loads, c.want)
			}
			warned := strings.Contains(strings.Join(autoLines(&logs), "\n"), "level=WARN")
			if c.want == "cpu" {
				if g.closes != 1 || !warned || !strings.Contains(logs.String(), "min(1, p/q)") {
					t.Errorf("GPU target closed %d times; log %q: want 1 close and a warning naming the rule", g.closes, logs.String())
				}
			} else if warned || g.closes != 0 {
				t.Errorf("GPU kept: closed %d times, log %q", g.closes, logs.String())
			}
			req := Request{PromptIDs: []int32{5, 6, 7}, MaxTokens: 4, Sampling: greedy}
			if c.session != nil {
				req.Sampling, req.DraftSampling = c.session.Sampling, c.session.DraftSampling
			}
			res, err := r.Generate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Backend != c.want || len(res.Tokens) != 4 || res.Speculative == nil {
				t.Errorf("result on %q, %d tokens, speculative %v: want %s, 4 tokens, telemetry", res.Backend, len(res.Tokens), res.Speculative, c.want)
			}
		})
	}
}

// TestExplicitRefusal: a backend named explicitly (one candidate) that refuses the bundle or
// the session options returns the refusal as the error; nothing falls back.
func TestExplicitRefusal(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	refusal := backend.Unsupported(errors.New("bundle x: no packed lm_head [608, 256] (tied embeddings do not run on FAKEGPU yet)"))
	g := &fakeGPU{loadErr: refusal}
	var logs bytes.Buffer
	if r, err := openWith(context.Background(), dir, Options{Log: logTo(&logs, slog.LevelDebug)}, []candidate{{be: g}}); err == nil {
		r.Close()
		t.Fatalf("explicit refusing backend: opened on %s", r.Backend.Name())
	} else if !errors.Is(err, backend.ErrUnsupported) || err.Error() != refusal.Error() {
		t.Errorf("error %q: want the refusal %q as is", err, refusal)
	}
	if logs.Len() != 0 {
		t.Errorf("explicit backend logged %q", logs.String())
	}
	// Sampled drafts on an explicit GPU: loaded (no probe), refused by Generate's session.
	g = &fakeGPU{refuse: refuseSampledDrafts}
	r, err := openWith(context.Background(), dir, Options{Session: &backend.SessionOptions{Sampling: sample.Params{Temperature: 1, TopP: 1}, DraftSampling: backend.DraftSample}, Log: quiet()}, []candidate{{be: g}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Generate(context.Background(), Request{PromptIDs: []int32{1}, MaxTokens: 2, Sampling: sample.Params{Temperature: 1, TopP: 1}, DraftSampling: backend.DraftSample})
	if !errors.Is(err, backend.ErrUnsupported) || !strings.Contains(err.Error(), "min(1, p/q)") || r.Backend.Name() != "fakegpu" {
		t.Errorf("Generate with sampled drafts on %s: %v", r.Backend.Name(), err)
	}
}

// TestAutoNoGPU: without a usable device auto runs on the CPU with no warning (a debug line
// only), and the GPU backend is never loaded. The real candidates on this machine do the same
// when cuda.Usable fails (no driver here); where a GPU is present they choose cuda.
func TestAutoNoGPU(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	g := &fakeGPU{}
	var logs bytes.Buffer
	r, err := openWith(context.Background(), dir, Options{Log: logTo(&logs, slog.LevelDebug)}, autoCands(g, errors.New("libcuda.so.1 not found")))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if r.Backend.Name() != "cpu" || g.loads != 0 {
		t.Errorf("backend %s, %d GPU loads: want cpu, none", r.Backend.Name(), g.loads)
	}
	if s := strings.Join(autoLines(&logs), "\n"); strings.Contains(s, "level=WARN") || !strings.Contains(s, "level=DEBUG") || !strings.Contains(s, "libcuda.so.1 not found") {
		t.Errorf("log %q: want a debug line with the reason, no warning", s)
	}

	logs.Reset()
	r, err = OpenWith(context.Background(), dir, Options{Backend: "auto", Log: logTo(&logs, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := "cpu"
	if cuda.RunsModels && cuda.Usable() == nil {
		want = "cuda"
	}
	if r.Backend.Name() != want || len(autoLines(&logs)) != 0 {
		t.Errorf("auto: backend %s, log %q: want %s without a warning", r.Backend.Name(), logs.String(), want)
	}
}

// TestAutoDeviceFailure: a GPU that fails otherwise than by refusing — at Load (a device error)
// or at the probe session — is an error under auto too, not a silent run on the CPU; the
// loaded target is closed.
func TestAutoDeviceFailure(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	oom := errors.New("cuda: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory")
	for _, g := range []*fakeGPU{
		{loadErr: fmt.Errorf("upload weights: %w", oom)},
		{refuse: func(backend.SessionOptions) error { return fmt.Errorf("session: %w", oom) }},
	} {
		var logs bytes.Buffer
		r, err := openWith(context.Background(), dir, Options{Log: logTo(&logs, slog.LevelWarn)}, autoCands(g, nil))
		if err == nil {
			r.Close()
			t.Fatalf("device failure: opened on %s", r.Backend.Name())
		}
		if !errors.Is(err, oom) || errors.Is(err, backend.ErrUnsupported) || len(autoLines(&logs)) != 0 {
			t.Errorf("error %v, log %q: want the device error, no fallback", err, logs.String())
		}
		if g.loads != g.closes {
			t.Errorf("%d GPU targets loaded, %d closed", g.loads, g.closes)
		}
	}
}
