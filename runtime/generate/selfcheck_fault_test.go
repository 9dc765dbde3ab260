package generate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"lithos/pack"
	"lithos/runtime/backend"
	"lithos/runtime/backend/gpu"
)

// faultySession is a GPU session of the check (not the probe) that goes wrong: decode, when
// set, runs before each Decode and its error is returned instead of decoding; Close also
// returns closeErr.
type faultySession struct {
	backend.Session
	decode   func(ctx context.Context) error
	closeErr error
}

func (s *faultySession) Decode(ctx context.Context, n int) error {
	if s.decode != nil {
		if err := s.decode(ctx); err != nil {
			return err
		}
	}
	return s.Session.Decode(ctx, n)
}

func (s *faultySession) Close() error { return errors.Join(s.Session.Close(), s.closeErr) }

func (s *faultySession) LastLogits(dst []float32) ([]float32, error) {
	return s.Session.(logitsReader).LastLogits(dst)
}

// faulty wraps the check's sessions (not the probe's: Capacity probeCapacity) in faultySessions.
func faulty(decode func(ctx context.Context) error, closeErr error) func(backend.Session, backend.SessionOptions, int) backend.Session {
	return func(s backend.Session, opt backend.SessionOptions, _ int) backend.Session {
		if opt.Capacity == probeCapacity {
			return s
		}
		return &faultySession{Session: s, decode: decode, closeErr: closeErr}
	}
}

// busy is an error of a device whose work may still be running.
var busy = fmt.Errorf("fake: wait: command buffer still running after 30 s: %w", gpu.ErrDeviceBusy)

// TestSelfCheckGPUError: a GPU session that fails in Decode (a kernel fault) fails the check
// instead of aborting auto: one warning with the error's text, the GPU target closed, the run on
// the CPU, the failed verdict cached with the error (the next open warns from the cache and runs
// no check). When the fault leaves the device busy (the session's and the target's Close report
// gpu.ErrDeviceBusy), auto still runs on the CPU, and the bundle stays mapped after the runner's
// Close.
func TestSelfCheckGPUError(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	fault := errors.New("fake: command buffer 3: MTLCommandBufferErrorPageFault")
	cache := t.TempDir()
	g := &fakeGPU{wrap: faulty(func(context.Context) error { return fault }, nil)}
	var logs bytes.Buffer
	r := openAuto(t, dir, cache, "", g, &logs)
	warn := warnings(&logs)
	if r.Backend.Name() != "cpu" || g.closes != 1 || len(warn) != 1 || !strings.Contains(warn[0], "the GPU failed during the check: self-check: GPU: "+fault.Error()) {
		t.Fatalf("backend %s, %d GPU closes, warnings %q: want cpu, 1, one naming the fault", r.Backend.Name(), g.closes, warn)
	}
	_, v := onlyVerdict(t, cache)
	if v.Pass || !strings.Contains(v.Error, fault.Error()) || len(v.GPUTokens) != 1 || v.GPUTokens[0] != v.CPUTokens[0] {
		t.Errorf("verdict %+v: want a failure recording the fault after the prefill's token", v)
	}
	logs.Reset()
	before, loads := g.sessions, g.loads
	r2 := openAuto(t, dir, cache, "", g, &logs)
	if warn := warnings(&logs); r2.Backend.Name() != "cpu" || g.sessions != before || g.loads != loads || len(warn) != 1 || !strings.Contains(warn[0], "cached verdict") || !strings.Contains(warn[0], fault.Error()) {
		t.Errorf("second open: backend %s, %d sessions, %d loads, warnings %q: want cpu from the cached failure, the GPU not loaded", r2.Backend.Name(), g.sessions-before, g.loads-loads, warn)
	}

	// The device stays busy after the fault.
	cache = t.TempDir()
	g = &fakeGPU{wrap: faulty(func(context.Context) error { return busy }, busy), closeErr: busy}
	logs.Reset()
	r, err := openWith(context.Background(), dir, Options{SelfCheckDir: cache, Log: logTo(&logs, slog.LevelDebug)}, autoCands(g, nil))
	if err != nil {
		t.Fatal(err)
	}
	warn = warnings(&logs)
	if r.Backend.Name() != "cpu" || len(warn) != 2 || !strings.Contains(warn[0], "failed its first-use self-check") ||
		!strings.Contains(warn[1], "closing fakegpu after its failed self-check failed; the bundle stays mapped") {
		t.Fatalf("busy: backend %s, warnings %q: want cpu, the failed check, then the busy close", r.Backend.Name(), warn)
	}
	if _, err := r.Generate(context.Background(), Request{PromptIDs: []int32{1, 2}, MaxTokens: 3, Sampling: greedy}); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if r.Bundle.Weights() == nil {
		t.Fatal("busy: the runner's Close unmapped the bundle a busy GPU target may still read")
	}
	r.Bundle.Close()
}

// TestSelfCheckSessionCloseBusy: a check whose comparisons all agree but whose GPU session
// reports gpu.ErrDeviceBusy on Close does not pass: the verdict fails naming the close.
func TestSelfCheckSessionCloseBusy(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	cache := t.TempDir()
	g := &fakeGPU{wrap: faulty(nil, busy)}
	var logs bytes.Buffer
	r := openAuto(t, dir, cache, "", g, &logs)
	_, v := onlyVerdict(t, cache)
	if r.Backend.Name() != "cpu" || v.Pass || !strings.Contains(v.Error, "close: ") || !strings.Contains(v.Error, gpu.ErrDeviceBusy.Error()) {
		t.Errorf("backend %s, verdict %+v: want cpu and a failure naming the busy close", r.Backend.Name(), v)
	}
}

// TestSelfCheckNotGPUErrors: ctx cancelled during the check, or the CPU reference failing, is
// an error of OpenWith (not a failed verdict: nothing cached); the GPU target is closed and
// the bundle unmapped.
func TestSelfCheckNotGPUErrors(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cache := t.TempDir()
	g := &fakeGPU{wrap: faulty(func(ctx context.Context) error { cancel(); return ctx.Err() }, nil)}
	_, err := openWith(ctx, dir, Options{SelfCheckDir: cache, Log: quiet()}, autoCands(g, nil))
	if !errors.Is(err, context.Canceled) || len(verdicts(t, cache)) != 0 || g.closes != 1 || g.bundle.Weights() != nil {
		t.Errorf("cancelled: error %v, %d verdicts, %d GPU closes, mapped %v: want context.Canceled, none, 1, unmapped", err, len(verdicts(t, cache)), g.closes, g.bundle.Weights() != nil)
	}

	broken := errors.New("fake: the CPU reference cannot load")
	g = &fakeGPU{}
	ref := &fakeGPU{name: "cpu", loadErr: broken}
	_, err = openWith(context.Background(), dir, Options{SelfCheckDir: cache, Log: quiet()}, []candidate{{g, func() (string, error) { return "", nil }}, {be: ref}})
	if !errors.Is(err, broken) || !strings.Contains(err.Error(), "self-check: cpu: ") || len(verdicts(t, cache)) != 0 || g.closes != 1 {
		t.Errorf("CPU failure: error %v, %d verdicts, %d GPU closes: want the CPU's error, none, 1", err, len(verdicts(t, cache)), g.closes)
	}
}

// TestAutoBusyCloseKeepsMapping: under auto, a GPU target whose Close reports
// gpu.ErrDeviceBusy after it refused the session options (the fallback path) ends OpenWith
// with that error and leaves the bundle mapped.
func TestAutoBusyCloseKeepsMapping(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	g := &fakeGPU{refuse: func(backend.SessionOptions) error { return backend.Unsupported(errors.New("fake: refused")) }, closeErr: busy}
	_, err := openWith(context.Background(), dir, Options{Log: quiet()}, autoCands(g, nil))
	if !errors.Is(err, gpu.ErrDeviceBusy) || g.closes != 1 {
		t.Fatalf("error %v after %d GPU closes: want gpu.ErrDeviceBusy after 1", err, g.closes)
	}
	if g.bundle.Weights() == nil {
		t.Fatal("the bundle was unmapped under a busy GPU target")
	}
	g.bundle.Close()
}

// flatLogits reports a logits row of equal values (every token a near tie) and optionally
// shifts tokens from the from-th on (from < 0: never).
func flatLogits(from int) func(backend.Session, backend.SessionOptions, int) backend.Session {
	return func(s backend.Session, opt backend.SessionOptions, vocab int) backend.Session {
		if from >= 0 && opt.Drafter != nil {
			s = shiftFrom(from)(s, opt, vocab)
		}
		return &flatSession{s}
	}
}

type flatSession struct{ backend.Session }

func (s *flatSession) LastLogits(dst []float32) ([]float32, error) {
	l, err := s.Session.(logitsReader).LastLogits(dst)
	for i := range l {
		l[i] = 1
	}
	return l, err
}

// TestSelfCheckRoundsNearTie: GPU rounds whose token differs from the plain CPU run's on a near
// tie (the CPU's logits row flat) end the comparison there, and the detail says how much was
// compared: at the prefill's token, "speculative rounds not checked (…)"; at token 2 (round 2),
// 1 of 3 rounds and 2 tokens.
func TestSelfCheckRoundsNearTie(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	for _, c := range []struct {
		from int
		want string
	}{
		{0, "; speculative rounds not checked (token 0 (the prefill's) is "},
		{2, "compared with a plain cpu greedy run: 1 of 3 rounds and the first 2 tokens identical; then token 2 (round 2's) is "},
	} {
		cache := t.TempDir()
		g := &fakeGPU{wrap: flatLogits(c.from)}
		ref := &fakeGPU{name: "cpu", wrap: flatLogits(-1)}
		r, err := openWith(context.Background(), dir, Options{SelfCheckDir: cache, Log: quiet()}, []candidate{{g, func() (string, error) { return "", nil }}, {be: ref}})
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		_, v := onlyVerdict(t, cache)
		if r.Backend.Name() != "fakegpu" || !v.Pass || !strings.Contains(v.Detail, c.want) || !strings.Contains(v.Detail, "a near tie on cpu's logits") {
			t.Errorf("from %d: backend %s, verdict %+v: want a pass whose detail says %q", c.from, r.Backend.Name(), v, c.want)
		}
		if i := c.from; v.RoundGPUTokens[i] == v.RoundCPUTokens[i] || !slices.Equal(v.RoundGPUTokens[:i], v.RoundCPUTokens[:i]) {
			t.Errorf("from %d: round tokens GPU %v CPU %v", i, v.RoundGPUTokens, v.RoundCPUTokens)
		}
	}
}

// TestNearTie: a token within SelfCheckTolerance·max|row| of the row's top is a near tie; one
// further down, outside the row, or without a row is not; the BF16 check's looser tolerance
// makes the further one a near tie too.
func TestNearTie(t *testing.T) {
	row := []float32{1, 5, 4.996, -10} // tolerance 1e-3 · 10 = 0.01 below the top 5
	for _, c := range []struct {
		tok  int32
		row  []float32
		want bool
	}{{1, row, true}, {2, row, true}, {0, row, false}, {3, row, false}, {4, row, false}, {-1, row, false}, {1, nil, false}, {2, []float32{1, 5, 4.98, -10}, false}} {
		if got := nearTie(c.tok, c.row, SelfCheckTolerance); got != c.want {
			t.Errorf("nearTie(%d, %v) = %v, want %v", c.tok, c.row, got, c.want)
		}
	}
	if !nearTie(2, []float32{1, 5, 4.98, -10}, SelfCheckToleranceBF16) {
		t.Error("4.98 against the top 5 of max|row| 10: not a near tie within 1e-2")
	}
}
