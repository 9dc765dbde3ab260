package generate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"lithos/pack"
	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/bundle"
)

// TestMain points the default verdict directory at a temporary one, so that no test writes
// into the user's cache.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lithos-selfcheck-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defaultSelfCheckDir = func() (string, error) { return dir, nil }
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// driftSession scales the logits LastLogits reports by 1+eps (a GPU whose numerics drift but
// whose tokens are right).
type driftSession struct {
	backend.Session
	eps float32
}

func (s *driftSession) LastLogits(dst []float32) ([]float32, error) {
	l, err := s.Session.(logitsReader).LastLogits(dst)
	for i := range l {
		l[i] *= 1 + s.eps
	}
	return l, err
}

// shiftedTokens reports every sampled token from the from-th on as token+1 (mod vocab) in its
// own ring, the logits unchanged (a GPU whose argmax or ring write is wrong).
type shiftedTokens struct {
	backend.Session
	vocab      int32
	ss         *backend.StepState
	ring       *backend.Ring
	from, seen int
}

func shift(s backend.Session, opt backend.SessionOptions, vocab int) backend.Session {
	return shiftFrom(0)(s, opt, vocab)
}

// shiftFrom returns a wrap that shifts the tokens of speculative sessions and of plain ones
// from the from-th sampled token on.
func shiftFrom(from int) func(backend.Session, backend.SessionOptions, int) backend.Session {
	return func(s backend.Session, _ backend.SessionOptions, vocab int) backend.Session {
		return &shiftedTokens{Session: s, vocab: int32(vocab), ss: backend.NewStepState(1, 0), ring: backend.NewRing(64), from: from}
	}
}

func (s *shiftedTokens) State() *backend.StepState { return s.ss }
func (s *shiftedTokens) Ring() *backend.Ring       { return s.ring }
func (s *shiftedTokens) relay() {
	for _, t := range s.Session.Ring().Drain(s.Session.State(), nil) {
		if s.seen >= s.from {
			t = (t + 1) % s.vocab
		}
		s.seen++
		s.ring.Push(s.ss, t)
	}
}
func (s *shiftedTokens) Prefill(ctx context.Context, p []int32) error {
	err := s.Session.Prefill(ctx, p)
	s.relay()
	return err
}
func (s *shiftedTokens) Decode(ctx context.Context, n int) error {
	err := s.Session.Decode(ctx, n)
	s.relay()
	return err
}
func (s *shiftedTokens) LastLogits(dst []float32) ([]float32, error) {
	return s.Session.(logitsReader).LastLogits(dst)
}

// openAuto opens dir under auto with g as the GPU, verdicts in cache, logs at debug level
// into logs.
func openAuto(t *testing.T, dir, cache, mode string, g *fakeGPU, logs *bytes.Buffer) *Runner {
	t.Helper()
	r, err := openWith(context.Background(), dir, Options{SelfCheck: mode, SelfCheckDir: cache, Log: logTo(logs, slog.LevelDebug)}, autoCands(g, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// verdicts reads the verdict files of cache.
func verdicts(t *testing.T, cache string) map[string]verdict {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cache, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]verdict{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v verdict
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[f] = v
	}
	return out
}

// onlyVerdict returns the single verdict file of cache and its verdict.
func onlyVerdict(t *testing.T, cache string) (string, verdict) {
	t.Helper()
	vs := verdicts(t, cache)
	if len(vs) != 1 {
		t.Fatalf("%d verdict files in %s: want 1", len(vs), cache)
	}
	for f, v := range vs {
		return f, v
	}
	panic("unreachable")
}

// checkPrompt is the check's prompt on the fixtures (vocabularies of 608 and 1024): ids 0…10.
var checkPrompt = []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}

// cpuGreedy returns the CPU backend's greedy tokens of the check's prompt (checkPrompt, no
// EOS): the prefill's token and steps decode steps'.
func cpuGreedy(t *testing.T, dir string, steps int) []int32 {
	t.Helper()
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tg, err := cpu.Backend{}.Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tg.NewSession(backend.SessionOptions{Capacity: len(checkPrompt) + steps + 1, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Prefill(context.Background(), checkPrompt); err != nil {
		t.Fatal(err)
	}
	if err := s.Decode(context.Background(), steps); err != nil {
		t.Fatal(err)
	}
	return s.Ring().Drain(s.State(), nil)
}

// TestSelfCheckPass: a GPU that computes what the CPU does is kept, with one info line; the
// verdict is cached (pass, the CPU's greedy tokens on both sides, zero logits difference); a
// second open reads it (debug line) and opens no check session — only the probe's.
func TestSelfCheckPass(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	cache := t.TempDir()
	g := &fakeGPU{}
	var logs bytes.Buffer
	r := openAuto(t, dir, cache, "", g, &logs)
	if r.Backend.Name() != "fakegpu" || g.closes != 0 {
		t.Fatalf("backend %s, %d GPU closes: want fakegpu kept", r.Backend.Name(), g.closes)
	}
	// The probe, the plain check session and the speculative one.
	if g.sessions != 3 {
		t.Errorf("%d GPU sessions: want 3 (probe, plain check, speculative check)", g.sessions)
	}
	lines := autoLines(&logs)
	info := slices.IndexFunc(lines, func(l string) bool {
		return strings.Contains(l, "level=INFO") && strings.Contains(l, "passed its first-use self-check")
	})
	if info < 0 || len(warnings(&logs)) != 0 {
		t.Errorf("log %q: want an info line saying it passed, no warning", logs.String())
	}
	f, v := onlyVerdict(t, cache)
	want := cpuGreedy(t, dir, selfCheckSteps)
	if !v.Pass || v.Key.Backend != "fakegpu" || v.Key.Executable == "" || v.Key.Bundle == "" || v.Key.Version != selfCheckVersion {
		t.Errorf("verdict %+v: want a pass keyed by backend, executable, bundle", v)
	}
	if !slices.Equal(v.CPUTokens, want) || !slices.Equal(v.GPUTokens, want) || v.MaxRelErr == nil || *v.MaxRelErr != 0 {
		t.Errorf("verdict tokens CPU %v GPU %v, max rel %v: want %v on both, 0", v.CPUTokens, v.GPUTokens, v.MaxRelErr, want)
	}
	// The rounds' tokens against an independent plain CPU run of the same length (the random
	// head accepts no draft here: 1 token a round).
	long := cpuGreedy(t, dir, 3*8)
	n := len(v.RoundGPUTokens)
	if n < 1+selfCheckRounds || !slices.Equal(v.RoundGPUTokens, long[:n]) || !slices.Equal(v.RoundCPUTokens, long[:n]) {
		t.Errorf("round tokens GPU %v CPU %v: want at least %d, the plain CPU run's %v", v.RoundGPUTokens, v.RoundCPUTokens, 1+selfCheckRounds, long)
	}
	rounds := fmt.Sprintf("speculative (block 7): 3 decode passes after the same prefill committed %s tokens (%d drafts accepted), compared with a plain cpu greedy run: 3 of 3 rounds and the first %d tokens identical",
		"1+1+1", n-4, n)
	if !strings.Contains(v.Detail, rounds) || !strings.Contains(v.Detail, "the prefill of ids 0…10") || !strings.Contains(lines[info], f) {
		t.Errorf("detail %q, info line %q: want %q and the verdict file named", v.Detail, lines[info], rounds)
	}
	if n == 4 && !strings.Contains(v.Detail, "no draft accepted, so the commit of accepted rows was not exercised") {
		t.Errorf("detail %q: no draft was accepted and it does not say so", v.Detail)
	}
	t.Logf("self-check on golden b with a BF16 draft head: %.1f ms (%s)", 1e3*v.Seconds, v.Detail)

	logs.Reset()
	r2 := openAuto(t, dir, cache, "", g, &logs)
	if r2.Backend.Name() != "fakegpu" || g.sessions != 4 {
		t.Errorf("second open: backend %s after %d GPU sessions: want fakegpu after 4 (the probe only)", r2.Backend.Name(), g.sessions)
	}
	if s := strings.Join(autoLines(&logs), "\n"); !strings.Contains(s, "level=DEBUG") || !strings.Contains(s, "cached verdict") || strings.Contains(s, "level=INFO") || strings.Contains(s, "level=WARN") {
		t.Errorf("second open log %q: want a debug line about the cached verdict only", s)
	}
	if _, v2 := onlyVerdict(t, cache); !v2.Checked.Equal(v.Checked) {
		t.Errorf("verdict rewritten at %v (first %v)", v2.Checked, v.Checked)
	}
}

// TestSelfCheckWrongTokens: a GPU whose tokens differ (logits right) is passed over for the
// CPU with one warning naming the step and tokens; the GPU target is closed; the failed
// verdict is cached, so a second open warns again (saying the verdict is cached) without
// loading the GPU target at all (no upload of the weights, no probe, no check).
func TestSelfCheckWrongTokens(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	cache := t.TempDir()
	g := &fakeGPU{wrap: shift}
	var logs bytes.Buffer
	r := openAuto(t, dir, cache, "", g, &logs)
	if r.Backend.Name() != "cpu" || g.loads != 1 || g.closes != 1 || g.sessions != 2 {
		t.Fatalf("backend %s, GPU loads %d closes %d sessions %d: want cpu, 1, 1, 2 (probe, plain check)", r.Backend.Name(), g.loads, g.closes, g.sessions)
	}
	want := cpuGreedy(t, dir, selfCheckSteps)
	warn := warnings(&logs)
	if len(warn) != 1 {
		t.Fatalf("warnings %q: want one", warn)
	}
	for _, s := range []string{"fakegpu failed its first-use self-check against cpu", "running on cpu", "--backend fakegpu",
		"the prefill: the GPU chose token " + fmt.Sprint(want[0]+1) + ", the CPU " + fmt.Sprint(want[0]), "is not the argmax"} {
		if !strings.Contains(warn[0], s) {
			t.Errorf("warning %q lacks %q", warn[0], s)
		}
	}
	_, v := onlyVerdict(t, cache)
	if v.Pass || len(v.GPUTokens) != 1 || v.GPUTokens[0] != want[0]+1 || v.CPUTokens[0] != want[0] {
		t.Errorf("verdict %+v: want a failure at the first token", v)
	}
	// A generation on the CPU runner works (the GPU's draft head is not the runner's).
	if _, err := r.Generate(context.Background(), Request{PromptIDs: []int32{1, 2}, MaxTokens: 3, Sampling: greedy}); err != nil {
		t.Fatal(err)
	}

	logs.Reset()
	r2 := openAuto(t, dir, cache, "", g, &logs)
	warn = warnings(&logs)
	if r2.Backend.Name() != "cpu" || g.loads != 1 || g.sessions != 2 || g.closes != 1 || len(warn) != 1 || !strings.Contains(warn[0], "cached verdict") ||
		!strings.Contains(warn[0], "the GPU chose token") {
		t.Errorf("second open: backend %s, GPU loads %d, %d GPU sessions, %d closes, warnings %q: want cpu, 1, 2, 1 (nothing new), one about the cached verdict", r2.Backend.Name(), g.loads, g.sessions, g.closes, warn)
	}
	// When the device's description before loading is not the loaded target's (the verdict
	// key differs), the cached failure is found after the load, with the same warning.
	logs.Reset()
	r3, err := openWith(context.Background(), dir, Options{SelfCheckDir: cache, Log: logTo(&logs, slog.LevelDebug)},
		[]candidate{{g, func() (string, error) { return "another description", nil }}, {be: cpu.Backend{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	warn = warnings(&logs)
	if r3.Backend.Name() != "cpu" || g.loads != 2 || g.closes != 2 || len(warn) != 1 ||
		!strings.Contains(warn[0], "fakegpu failed (cached verdict; "+SelfCheckEnv+"=force checks again) its first-use self-check against cpu; running on cpu") {
		t.Errorf("pre-load key missed: backend %s, GPU loads %d, closes %d, warnings %q: want cpu, 2, 2, the cached-verdict warning", r3.Backend.Name(), g.loads, g.closes, warn)
	}
	// With the check forced the GPU is loaded and checked again; with it off the GPU runs
	// unchecked, the cached failure notwithstanding.
	logs.Reset()
	openAuto(t, dir, cache, SelfCheckForce, g, &logs)
	if g.loads != 3 || g.closes != 3 {
		t.Errorf("forced check: GPU loads %d, closes %d: want 3, 3", g.loads, g.closes)
	}
	if r4 := openAuto(t, dir, cache, SelfCheckOff, g, &logs); r4.Backend.Name() != "fakegpu" || g.loads != 4 {
		t.Errorf("check off: backend %s, GPU loads %d: want fakegpu, 4", r4.Backend.Name(), g.loads)
	}
}

// TestSelfCheckRounds: a GPU whose plain steps agree but whose speculative rounds give other
// tokens fails on the rounds; with the draft head left out (no rounds to check) it passes.
func TestSelfCheckRounds(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	roundsWrong := func(s backend.Session, opt backend.SessionOptions, vocab int) backend.Session {
		if opt.Drafter == nil {
			return s
		}
		return shift(s, opt, vocab)
	}
	cache := t.TempDir()
	var logs bytes.Buffer
	g := &fakeGPU{wrap: roundsWrong}
	r := openAuto(t, dir, cache, "", g, &logs)
	warn := warnings(&logs)
	if r.Backend.Name() != "cpu" || len(warn) != 1 || !strings.Contains(warn[0], "speculative rounds (block 7): token 0 (the prefill's) is") {
		t.Fatalf("backend %s, warnings %q: want cpu and the rounds named", r.Backend.Name(), warn)
	}
	// Rounds that go wrong only from the second on (the replay of the first round's commit,
	// the drafter's append) fail too: token 2 is round 2's.
	later := func(s backend.Session, opt backend.SessionOptions, vocab int) backend.Session {
		if opt.Drafter == nil {
			return s
		}
		return shiftFrom(2)(s, opt, vocab)
	}
	logs.Reset()
	r = openAuto(t, dir, t.TempDir(), "", &fakeGPU{wrap: later}, &logs)
	warn = warnings(&logs)
	if r.Backend.Name() != "cpu" || len(warn) != 1 || !strings.Contains(warn[0], "speculative rounds (block 7): token 2 (round 2's) is") {
		t.Fatalf("later rounds wrong: backend %s, warnings %q: want cpu and round 2 named", r.Backend.Name(), warn)
	}
	g = &fakeGPU{wrap: roundsWrong}
	r, err := openWith(context.Background(), dir, Options{NoDraft: true, SelfCheckDir: cache, Log: quiet()}, autoCands(g, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Backend.Name() != "fakegpu" || g.sessions != 2 {
		t.Errorf("no draft head: backend %s after %d sessions: want fakegpu after 2 (probe, plain check)", r.Backend.Name(), g.sessions)
	}
}

// warnings returns the warning lines of logs about the auto choice.
func warnings(logs *bytes.Buffer) []string {
	var out []string
	for _, l := range autoLines(logs) {
		if strings.Contains(l, "level=WARN") {
			out = append(out, l)
		}
	}
	return out
}

// TestSelfCheckLogitsDrift: a GPU with the CPU's tokens whose logits are off by 2e-3 relative
// fails (CPU, a warning with the measured difference and the tolerance); one off by 5e-4
// passes, the verdict recording 5e-4.
func TestSelfCheckLogitsDrift(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	for _, c := range []struct {
		eps  float32
		want string
	}{{2e-3, "cpu"}, {5e-4, "fakegpu"}} {
		t.Run(fmt.Sprint(c.eps), func(t *testing.T) {
			cache := t.TempDir()
			g := &fakeGPU{wrap: func(s backend.Session, _ backend.SessionOptions, _ int) backend.Session {
				return &driftSession{s, c.eps}
			}}
			var logs bytes.Buffer
			r := openAuto(t, dir, cache, "", g, &logs)
			_, v := onlyVerdict(t, cache)
			if r.Backend.Name() != c.want || v.Pass != (c.want == "fakegpu") {
				t.Fatalf("backend %s, verdict %+v: want %s", r.Backend.Name(), v, c.want)
			}
			if v.MaxRelErr == nil || math.Abs(*v.MaxRelErr-float64(c.eps)) > 0.01*float64(c.eps) {
				t.Errorf("max relative error %v: want %g ± 1%%", v.MaxRelErr, c.eps)
			}
			warn := warnings(&logs)
			if c.want == "cpu" {
				if len(warn) != 1 || !strings.Contains(warn[0], "the prefill: logits differ from the CPU's by 0.002 relative") || !strings.Contains(warn[0], "tolerance 0.001") {
					t.Errorf("warnings %q: want one naming the difference and the tolerance", warn)
				}
				if !slices.Equal(v.GPUTokens, v.CPUTokens) {
					t.Errorf("tokens GPU %v CPU %v: the drift keeps them", v.GPUTokens, v.CPUTokens)
				}
			} else if len(warn) != 0 {
				t.Errorf("warnings %q", warn)
			}
		})
	}
}

// TestSelfCheckCacheFiles: a verdict file that does not parse, or holds another key, or (with
// force) a valid one, does not stop the check from running again; the file then holds the new
// verdict. A cached failure with force and a GPU that now agrees keeps the GPU.
func TestSelfCheckCacheFiles(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	cache := t.TempDir()
	g := &fakeGPU{wrap: shift}
	var logs bytes.Buffer
	openAuto(t, dir, cache, "", g, &logs) // a failed verdict
	f, _ := onlyVerdict(t, cache)
	g.wrap = nil // the GPU is fixed; the cached verdict still says it fails
	if r := openAuto(t, dir, cache, "", g, &logs); r.Backend.Name() != "cpu" {
		t.Fatalf("cached failure: backend %s", r.Backend.Name())
	}
	otherKey := func() []byte {
		_, v := onlyVerdict(t, cache)
		v.Key.Version = selfCheckVersion - 1
		v.Pass = true
		b, _ := json.Marshal(v)
		return b
	}()
	otherTolerance := func() []byte { // a failure with the key, held to another tolerance
		_, v := onlyVerdict(t, cache)
		v.Tolerance = 2 * SelfCheckTolerance
		b, _ := json.Marshal(v)
		return b
	}()
	// The cached failure as it is (it would be trusted), after 1 MiB of spaces (valid JSON).
	_, cachedFailure := onlyVerdict(t, cache)
	tooLarge := append(bytes.Repeat([]byte(" "), maxVerdictBytes), mustJSON(t, cachedFailure)...)
	for _, c := range []struct {
		name, mode string
		data       []byte // written to the verdict file first (nil: keep it)
	}{
		{"corrupt", "", []byte(`{"key": {"version": 1, "backend": "fakeg`)},
		{"empty", "", []byte{}},
		{"another key", "", otherKey},
		{"another tolerance", "", otherTolerance},
		{"larger than 1 MiB", "", tooLarge},
		{"force", SelfCheckForce, nil},
		{"force via the environment", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.data != nil {
				if err := os.WriteFile(f, c.data, 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				// A cached failure that force must not trust.
				if err := os.WriteFile(f, mustJSON(t, verdict{Key: readKey(t, f), Pass: false, Detail: "stale"}), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if c.name == "force via the environment" {
				t.Setenv(SelfCheckEnv, "force")
			}
			before := g.sessions
			r := openAuto(t, dir, cache, c.mode, g, &logs)
			if r.Backend.Name() != "fakegpu" || g.sessions != before+3 {
				t.Fatalf("backend %s after %d GPU sessions: want fakegpu after 3 (the check ran again)", r.Backend.Name(), g.sessions-before)
			}
			if f2, v := onlyVerdict(t, cache); f2 != f || !v.Pass || v.Key.Version != selfCheckVersion {
				t.Errorf("verdict file %s: %+v: want a pass at %s", f2, v, f)
			}
		})
	}
}

// TestVerdictStaleTemps: writing a verdict removes the temporary verdict files older than an
// hour (a process killed before its rename), not a newer one (a concurrent writer's) nor other
// files.
func TestVerdictStaleTemps(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * time.Hour)
	files := map[string]bool{".k1.json.tmp-1": false, ".k2.json.tmp-2": true, ".verdict-1.tmp": false, ".verdict-2.tmp": true, "notes.tmp": true} // name: kept
	for name, kept := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("{"), 0o644); err != nil {
			t.Fatal(err)
		}
		if !kept || name == "notes.tmp" {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	path := filepath.Join(dir, "x.json")
	v := &verdict{Key: checkKey{Version: selfCheckVersion, Backend: "x"}, Pass: true, Tolerance: SelfCheckTolerance}
	if err := writeVerdict(path, v); err != nil {
		t.Fatal(err)
	}
	for name, kept := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != kept {
			t.Errorf("%s: stat %v: want kept %v", name, err, kept)
		}
	}
	if got, ok := readVerdict(path, v.Key); !ok || !got.Pass {
		t.Errorf("readVerdict after writeVerdict: %+v, %v", got, ok)
	}
}

// readKey reads the key of the current verdict in file f.
func readKey(t *testing.T, f string) checkKey {
	t.Helper()
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var v verdict
	if json.Unmarshal(data, &v) != nil || v.Key.Version != selfCheckVersion {
		t.Fatalf("%s holds no current verdict", f)
	}
	return v.Key
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSelfCheckNotRun: an explicit backend is never checked (a GPU that computes wrong is
// kept, no session opened, nothing cached); neither is auto's with the check off (Options or
// the environment); a bad mode is an error naming it.
func TestSelfCheckNotRun(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	cache := t.TempDir()
	g := &fakeGPU{wrap: shift}
	var logs bytes.Buffer
	r, err := openWith(context.Background(), dir, Options{SelfCheckDir: cache, Log: logTo(&logs, slog.LevelDebug)}, []candidate{{be: g}})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if r.Backend.Name() != "fakegpu" || g.sessions != 0 || len(autoLines(&logs)) != 0 || len(verdicts(t, cache)) != 0 {
		t.Errorf("explicit: backend %s, %d sessions, log %q, %d verdicts: want fakegpu, none", r.Backend.Name(), g.sessions, logs.String(), len(verdicts(t, cache)))
	}
	for _, c := range []struct{ opt, env string }{{SelfCheckOff, ""}, {"0", ""}, {"", "0"}, {"", "off"}} {
		t.Setenv(SelfCheckEnv, c.env)
		g := &fakeGPU{wrap: shift}
		r := openAuto(t, dir, cache, c.opt, g, &logs)
		if r.Backend.Name() != "fakegpu" || g.sessions != 1 || len(verdicts(t, cache)) != 0 {
			t.Errorf("SelfCheck %q, %s=%q: backend %s after %d sessions: want fakegpu after the probe, nothing cached", c.opt, SelfCheckEnv, c.env, r.Backend.Name(), g.sessions)
		}
	}
	t.Setenv(SelfCheckEnv, "yes")
	if _, err := openWith(context.Background(), dir, Options{SelfCheckDir: cache, Log: quiet()}, autoCands(&fakeGPU{}, nil)); err == nil || !strings.Contains(err.Error(), `LITHOS_SELFCHECK="yes"`) {
		t.Errorf("bad mode: error %v", err)
	}
}

// TestCompareStep: the step comparison on made-up rows — equal; within the tolerance; beyond
// it; a NaN; different tokens on a near tie (the GPU's token its own argmax: passes, tie) and
// not (fails).
func TestCompareStep(t *testing.T) {
	c := []float32{1, 5, 4.999, -10}
	within := []float32{1, 4.998, 4.999, -10} // |Δ| = 0.002 ≤ 1e-3·10: 2e-4 relative
	for _, k := range []struct {
		name   string
		gt, ct int32
		g      []float32
		fail   string
		tie    bool
	}{
		{"equal", 1, 1, c, "", false},
		{"within", 1, 1, within, "", false},
		{"beyond", 1, 1, []float32{1, 5, 4.999, -10.02}, "logits differ from the CPU's by 0.002 relative", false},
		{"NaN", 1, 1, []float32{1, float32(math.NaN()), 4.999, -10}, "by NaN relative", false},
		{"near tie", 2, 1, within, "", true},
		{"not the GPU's argmax", 0, 1, within, "the GPU chose token 0, the CPU 1 (the logits agree within 0.0002 relative, but 0 is not the argmax", false},
	} {
		res := compareStep(k.gt, k.ct, k.g, c, true, SelfCheckTolerance)
		if (k.fail == "") != (res.fail == "") || !strings.Contains(res.fail, k.fail) || res.tie != k.tie {
			t.Errorf("%s: %+v: want fail %q, tie %v", k.name, res, k.fail, k.tie)
		}
	}
	if res := compareStep(2, 1, nil, nil, false, SelfCheckTolerance); res.fail != "the GPU chose token 2, the CPU 1" {
		t.Errorf("tokens only: %+v", res)
	}
	// The BF16 check's tolerance: 2e-3 passes, 2e-2 does not.
	beyond := []float32{1, 5, 4.999, -10.02}
	if res := compareStep(1, 1, beyond, c, true, SelfCheckToleranceBF16); res.fail != "" {
		t.Errorf("2e-3 within the BF16 tolerance: %+v", res)
	}
	if res := compareStep(1, 1, []float32{1, 5, 4.999, -10.2}, c, true, SelfCheckToleranceBF16); !strings.Contains(res.fail, "by 0.02 relative") || !strings.Contains(res.fail, "tolerance 0.01") {
		t.Errorf("2e-2 beyond the BF16 tolerance: %+v", res)
	}
}
