package generate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"lithos/runtime/backend"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/backend/metal"
	"lithos/runtime/bundle"
	"lithos/runtime/sample"
)

// The first-use self-check (docs/runtime.md §7): before --backend auto hands a bundle to a
// GPU backend, it runs a short greedy generation on that GPU and on the CPU backend over the
// same mapped bundle and keeps the GPU only when they agree. The verdict is cached per
// (backend, device, executable, bundle manifest, draft head or not) under SelfCheckDir, a
// failed one too.

// SelfCheckEnv is the environment variable that sets the self-check mode when
// Options.SelfCheck is empty: "" or "1" or "on" (check when no verdict is cached), "0" or "off"
// (never check), "force" (check even when a verdict is cached, and cache the new one).
const SelfCheckEnv = "LITHOS_SELFCHECK"

// SelfCheckTolerance bounds each checked step's logits: max|GPU − CPU| ÷ max|CPU| over the
// vocabulary row the step sampled from. It is ten times the bound the GPU session tests hold
// against transformers on the golden models (1e-4: runtime/backend/cuda/session_test.go,
// runtime/backend/metal/emulator_session_linux_test.go; measured there 1.45e-6 and 8.4e-7,
// docs/performance.md), leaving room for the rounding that a deeper model accumulates; the
// faults the check is for (a wrong offset, a missing barrier, a calling-convention slip) move
// logits by O(1).
const SelfCheckTolerance = 1e-3

// Self-check modes (Options.SelfCheck, SelfCheckEnv).
const (
	SelfCheckOn    = "on"
	SelfCheckOff   = "off"
	SelfCheckForce = "force"
)

// The check's size: a prompt of ids 0…selfCheckPrompt−1 (at most the vocabulary), its prefill
// and selfCheckSteps greedy single-row decode steps, each step's token and logits compared;
// with a draft head, then greedy speculative rounds after the same prefill (at most
// selfCheckSteps, until both hold as many tokens), their tokens compared with the CPU's over
// the positions the plain steps verified.
const (
	selfCheckPrompt  = 8
	selfCheckSteps   = 4
	selfCheckVersion = 1 // bump when the check changes: older verdicts are then not used
)

// selfCheckMode returns the mode of opt ("" → $LITHOS_SELFCHECK). Errors: a value that is not
// a mode, naming where it came from.
func selfCheckMode(opt string) (string, error) {
	v, src := opt, "Options.SelfCheck"
	if v == "" {
		v, src = os.Getenv(SelfCheckEnv), SelfCheckEnv
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "1", SelfCheckOn:
		return SelfCheckOn, nil
	case "0", SelfCheckOff:
		return SelfCheckOff, nil
	case SelfCheckForce:
		return SelfCheckForce, nil
	}
	return "", fmt.Errorf("%s=%q: want 1 (or on: check once, cache the verdict), 0 (or off: never check) or force (check again)", src, v)
}

// checkKey identifies what a verdict holds for: a change of any field runs the check again.
type checkKey struct {
	Version int    `json:"version"` // selfCheckVersion
	Backend string `json:"backend"` // "metal", "cuda"
	// Device describes the GPU (metal.Profile.String, cuda Info.String; "" when the target
	// does not say).
	Device string `json:"device"`
	// Executable is the SHA-256 of the running binary (a rebuilt binary checks again).
	Executable string `json:"executable"`
	// Bundle is the SHA-256 of the bundle's manifest re-encoded as JSON: every tensor's
	// SHA-256, offset and format, the configs.
	Bundle string `json:"bundle"`
	// Draft tells whether the draft head was loaded, so its rounds checked (--no-draft is
	// checked on its own).
	Draft bool `json:"draft"`
}

// verdict is a self-check's outcome, as cached (one JSON file per key).
type verdict struct {
	Key  checkKey `json:"key"`
	Pass bool     `json:"pass"`
	// Detail says what differed (a failure) or what agreed (a pass).
	Detail string `json:"detail"`
	// MaxRelErr is the largest step's max|GPU − CPU| ÷ max|CPU| (null when not finite or
	// the sessions do not give logits); Tolerance the bound it was held to.
	MaxRelErr *float64 `json:"max_rel_err"`
	Tolerance float64  `json:"tolerance"`
	// CPUTokens and GPUTokens are the greedy tokens of the prefill and the plain steps.
	CPUTokens []int32   `json:"cpu_tokens"`
	GPUTokens []int32   `json:"gpu_tokens"`
	Seconds   float64   `json:"seconds"` // the check's wall time, the CPU reference's load included
	Checked   time.Time `json:"checked_at"`
	BundleDir string    `json:"bundle_dir"`
}

// key returns the runner's check key (its backend, device, the executable and the bundle).
// Errors: the executable cannot be read, the manifest cannot be encoded.
func (r *Runner) key() (checkKey, error) {
	exe, err := executableHash()
	if err != nil {
		return checkKey{}, err
	}
	m, err := json.Marshal(r.Bundle.Manifest)
	if err != nil {
		return checkKey{}, fmt.Errorf("bundle %s: manifest: %w", r.Bundle.Dir, err)
	}
	h := sha256.Sum256(m)
	return checkKey{Version: selfCheckVersion, Backend: r.Backend.Name(), Device: deviceName(r.Target),
		Executable: exe, Bundle: hex.EncodeToString(h[:]), Draft: r.Draft != nil}, nil
}

// file returns the verdict file of k in dir: <backend>-<16 hex digits of the key's SHA-256>.json.
func (k checkKey) file(dir string) string {
	b, _ := json.Marshal(k) // a struct of strings and an int: cannot fail
	h := sha256.Sum256(b)
	return filepath.Join(dir, k.Backend+"-"+hex.EncodeToString(h[:8])+".json")
}

// executableHash is the hex SHA-256 of the running executable, computed once per process.
var executableHash = sync.OnceValues(func() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("self-check: the executable: %w", err)
	}
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("self-check: the executable: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("self-check: read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
})

// deviceName describes a GPU target's device: a Metal device's profile (chip, cores, family,
// working set), a device that is a fmt.Stringer (CUDA: name, compute capability, memory,
// driver), else its Name; "" for a target that is not the GPU runtime's.
func deviceName(t backend.Target) string {
	gt, ok := t.(*gpu.Target)
	if !ok || gt.Device == nil {
		return ""
	}
	switch d := gt.Device.(type) {
	case interface{ Profile() metal.Profile }:
		return d.Profile().String()
	case fmt.Stringer:
		return d.String()
	}
	return gt.Device.Name()
}

// defaultSelfCheckDir returns os.UserCacheDir()/lithos/selfcheck (a variable: the package's
// tests point it at a temporary directory).
var defaultSelfCheckDir = func() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "lithos", "selfcheck"), nil
}

// readVerdict returns the verdict cached at path for k; false when there is none, it does not
// parse, or it holds another key (a collision, an older check version).
func readVerdict(path string, k checkKey) (*verdict, bool) {
	data, err := os.ReadFile(path)
	if err != nil || len(data) > 1<<20 {
		return nil, false
	}
	var v verdict
	if err := json.Unmarshal(data, &v); err != nil || v.Key != k {
		return nil, false
	}
	return &v, true
}

// writeVerdict writes v to path atomically: a temporary file in the same directory (created
// with it), renamed over path.
func writeVerdict(path string, v *verdict) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".verdict-*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// firstUseCheck returns the self-check verdict of the runner's GPU target against ref (the CPU
// backend): the cached one (mode on), else a new one, which it caches. cached says which;
// path is the verdict file ("" when verdicts cannot be cached: no cache directory, the
// executable unreadable). Errors are the check's (selfCheck).
func (r *Runner) firstUseCheck(ctx context.Context, opt Options, mode string, ref backend.Backend) (v *verdict, path string, cached bool, err error) {
	key, kerr := r.key()
	dir := opt.SelfCheckDir
	var derr error
	if dir == "" {
		dir, derr = defaultSelfCheckDir()
	}
	switch {
	case kerr != nil:
		r.Log.Debug("backend auto: self-check verdicts not cached", "reason", kerr)
	case derr != nil:
		r.Log.Debug("backend auto: self-check verdicts not cached: no cache directory", "reason", derr)
	default:
		path = key.file(dir)
	}
	if mode == SelfCheckOn && path != "" {
		if v, ok := readVerdict(path, key); ok {
			return v, path, true, nil
		}
	}
	if v, err = selfCheck(ctx, r.Bundle, r.Target, r.Draft, ref); err != nil {
		return nil, "", false, err
	}
	v.Key, v.Checked, v.BundleDir = key, time.Now().UTC(), r.Bundle.Dir
	if path != "" {
		if err := writeVerdict(path, v); err != nil {
			r.Log.Warn("backend auto: self-check verdict not cached (the check runs again next time)", "file", path, "reason", err)
			path = ""
		}
	}
	return v, path, false, nil
}

// logitsReader is a session that can copy out the logits row its last sampled token came from
// (cpu.Session, gpu.Session): the self-check compares them.
type logitsReader interface {
	LastLogits(dst []float32) ([]float32, error)
}

// selfCheck runs the check of g (a GPU target of b, with its draft head gd or nil) against
// ref's target of the same bundle: greedy sessions without EOS on both, the prefill of
// selfCheckPrompt ids and selfCheckSteps single-row decode steps, each step's token and (when
// both sessions are logitsReaders) logits compared (compareStep); with gd, speculative rounds
// after the same prefill, tokens compared. A difference is a failed
// verdict; an error (ref cannot load the bundle or its draft head, a session or step of
// either fails, ctx is done) is returned, wrapped as "self-check: <backend>: …".
func selfCheck(ctx context.Context, b *bundle.Bundle, g backend.Target, gd backend.Drafter, ref backend.Backend) (*verdict, error) {
	start := time.Now()
	v := &verdict{Tolerance: SelfCheckTolerance}
	fail := func(format string, a ...any) (*verdict, error) {
		v.Detail = fmt.Sprintf(format, a...)
		v.Seconds = time.Since(start).Seconds()
		return v, nil
	}
	rt, err := ref.Load(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("self-check: %s: %w", ref.Name(), err)
	}
	defer rt.Close()
	vocab := g.Config().Vocab
	if rv := rt.Config().Vocab; rv != vocab {
		return fail("the vocabulary is %d on the GPU, %d on %s", vocab, rv, ref.Name())
	}
	prompt := make([]int32, min(selfCheckPrompt, vocab))
	for i := range prompt {
		prompt[i] = int32(i)
	}
	opt := backend.SessionOptions{Capacity: len(prompt) + selfCheckSteps + 1, Sampling: sample.Params{TopP: 1}}
	pair, err := newSessionPair(g, rt, ref.Name(), opt)
	if err != nil {
		return nil, err
	}
	defer pair.close()
	var gl, cl []float32
	maxRel, compared := 0.0, false
	agreed := 0 // tokens whose position both verified (a near tie ends it early)
	var tie string
	for k := 0; k <= selfCheckSteps; k++ {
		what := "the prefill"
		if k > 0 {
			what = fmt.Sprintf("decode step %d", k)
		}
		gt, ct, err := pair.step(ctx, k == 0, prompt, 1)
		if err != nil {
			return nil, err
		}
		if len(gt) != 1 || len(ct) != 1 {
			return fail("%s: the GPU gave %d tokens %v, %s %v (want one)", what, len(gt), gt, ref.Name(), ct)
		}
		var withLogits bool
		if gl, cl, withLogits, err = pair.logits(gl, cl); err != nil {
			return nil, err
		}
		v.GPUTokens, v.CPUTokens = append(v.GPUTokens, gt[0]), append(v.CPUTokens, ct[0])
		res := compareStep(gt[0], ct[0], gl, cl, withLogits)
		if withLogits {
			compared = true
			if !(res.rel <= maxRel) {
				maxRel = res.rel
			}
		}
		if res.fail != "" {
			v.setRel(maxRel, compared)
			return fail("%s: %s", what, res.fail)
		}
		if res.tie {
			tie = fmt.Sprintf("; %s: the GPU chose token %d, %s %d, a near tie (logits within tolerance), later tokens not compared", what, gt[0], ref.Name(), ct[0])
			break
		}
		agreed++
	}
	v.setRel(maxRel, compared)
	logitsNote := fmt.Sprintf("logits within %.3g relative (tolerance %g)", maxRel, SelfCheckTolerance)
	if !compared {
		logitsNote = "logits not compared (a session does not give them)"
	}
	v.Detail = fmt.Sprintf("the first %d greedy tokens %v identical (the prefill of ids 0…%d, then single-row decode steps), %s%s",
		agreed, v.GPUTokens[:agreed], len(prompt)-1, logitsNote, tie)
	pair.close()

	if gd != nil && agreed > 0 {
		cd, err := rt.LoadDraft(ctx, b)
		if err != nil {
			return nil, fmt.Errorf("self-check: %s: %w", ref.Name(), err)
		}
		if cd != nil {
			bs := gd.BlockSize()
			sopt := opt
			sopt.Capacity = len(prompt) + (selfCheckSteps+1)*(bs+1)
			sopt.Drafter = gd
			if pair, err = newSessionPairDrafters(g, rt, ref.Name(), sopt, cd); err != nil {
				return nil, err
			}
			defer pair.close()
			gt, ct, err := pair.step(ctx, true, prompt, 0)
			if err != nil {
				return nil, err
			}
			rounds := 0
			for ; rounds < agreed-1 && min(len(gt), len(ct)) < agreed; rounds++ {
				g2, c2, err := pair.step(ctx, false, nil, 1)
				if err != nil {
					return nil, err
				}
				gt, ct = append(gt, g2...), append(ct, c2...)
			}
			n := min(len(gt), len(ct), agreed)
			if i := firstDiff(gt[:n], ct[:n]); i >= 0 {
				return fail("speculative rounds (block %d): token %d is %d on the GPU, %d on %s (GPU %v, %s %v)", bs, i, gt[i], ct[i], ref.Name(), gt, ref.Name(), ct)
			}
			v.Detail += fmt.Sprintf("; the same prefill then %d speculative rounds (block %d): the first %d tokens identical", rounds, bs, n)
		}
	}
	v.Pass = true
	v.Seconds = time.Since(start).Seconds()
	return v, nil
}

// setRel records the largest relative logits difference (null when none was compared or it
// is not finite: JSON has no NaN).
func (v *verdict) setRel(rel float64, compared bool) {
	v.MaxRelErr = nil
	if compared && !math.IsNaN(rel) && !math.IsInf(rel, 0) {
		v.MaxRelErr = &rel
	}
}

// stepResult is compareStep's outcome: fail says what differed ("" when the step agrees); tie
// that the tokens differ on a near tie (the rest of the sequences cannot be compared); rel the
// step's relative logits difference (NaN when a logit is not finite).
type stepResult struct {
	fail string
	tie  bool
	rel  float64
}

// compareStep compares a step of the GPU (token gt, logits gl) with the CPU's (ct, cl); with
// withLogits false only the tokens. The logits must agree within SelfCheckTolerance (relDiff).
// Different tokens fail, except when the logits agree and gt is the argmax of gl (the GPU
// sampled what its own logits say): then both rows hold a near tie within the tolerance, a
// difference of rounding, and the step passes with tie set.
func compareStep(gt, ct int32, gl, cl []float32, withLogits bool) stepResult {
	var res stepResult
	if withLogits {
		if len(gl) != len(cl) {
			res.fail = fmt.Sprintf("the GPU gave %d logits, the CPU %d", len(gl), len(cl))
			return res
		}
		res.rel = relDiff(gl, cl)
		if !(res.rel <= SelfCheckTolerance) {
			i := worstLogit(gl, cl)
			res.fail = fmt.Sprintf("logits differ from the CPU's by %.3g relative (max|Δ| ÷ max|CPU|; tolerance %g; worst at token %d: GPU %g, CPU %g); tokens GPU %d, CPU %d",
				res.rel, SelfCheckTolerance, i, gl[i], cl[i], gt, ct)
			return res
		}
	}
	if gt == ct {
		return res
	}
	if withLogits && int(gt) >= 0 && int(gt) < len(gl) && gl[gt] >= slices.Max(gl) {
		res.tie = true
		return res
	}
	res.fail = fmt.Sprintf("the GPU chose token %d, the CPU %d", gt, ct)
	if withLogits {
		res.fail += fmt.Sprintf(" (the logits agree within %.3g relative, but %d is not the argmax of the GPU's own logits)", res.rel, gt)
	}
	return res
}

// relDiff is max|g − c| ÷ max|c| (the absolute difference when c is all zero); NaN when a
// value is NaN.
func relDiff(g, c []float32) float64 {
	var num, den float64
	for i := range c {
		d, m := math.Abs(float64(g[i])-float64(c[i])), math.Abs(float64(c[i]))
		if math.IsNaN(d) || math.IsNaN(m) {
			return math.NaN()
		}
		num, den = max(num, d), max(den, m)
	}
	if den == 0 {
		return num
	}
	return num / den
}

// worstLogit is the index of the largest |g − c| (the first NaN if any).
func worstLogit(g, c []float32) int {
	w, wd := 0, -1.0
	for i := range c {
		d := math.Abs(float64(g[i]) - float64(c[i]))
		if math.IsNaN(d) {
			return i
		}
		if d > wd {
			w, wd = i, d
		}
	}
	return w
}

// firstDiff is the first index where a and b (of equal length) differ, −1 when none.
func firstDiff(a, b []int32) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// sessionPair is a GPU session and the reference's, driven in step.
type sessionPair struct {
	g, c    backend.Session
	refName string
}

func newSessionPair(g, ref backend.Target, refName string, opt backend.SessionOptions) (*sessionPair, error) {
	return newSessionPairDrafters(g, ref, refName, opt, nil)
}

// newSessionPairDrafters opens the sessions of opt on g and ref; with refDraft, ref's session
// gets it as its drafter (opt.Drafter is g's).
func newSessionPairDrafters(g, ref backend.Target, refName string, opt backend.SessionOptions, refDraft backend.Drafter) (*sessionPair, error) {
	gs, err := g.NewSession(opt)
	if err != nil {
		return nil, fmt.Errorf("self-check: GPU session: %w", err)
	}
	if refDraft != nil {
		opt.Drafter = refDraft
	}
	cs, err := ref.NewSession(opt)
	if err != nil {
		gs.Close()
		return nil, fmt.Errorf("self-check: %s session: %w", refName, err)
	}
	return &sessionPair{g: gs, c: cs, refName: refName}, nil
}

// step runs the prefill of prompt (prefill) or steps decode steps on both sessions and drains
// their rings.
func (p *sessionPair) step(ctx context.Context, prefill bool, prompt []int32, steps int) (gt, ct []int32, err error) {
	run := func(s backend.Session) error {
		if prefill {
			return s.Prefill(ctx, prompt)
		}
		return s.Decode(ctx, steps)
	}
	if err := run(p.g); err != nil {
		return nil, nil, fmt.Errorf("self-check: GPU: %w", err)
	}
	if err := run(p.c); err != nil {
		return nil, nil, fmt.Errorf("self-check: %s: %w", p.refName, err)
	}
	return p.g.Ring().Drain(p.g.State(), nil), p.c.Ring().Drain(p.c.State(), nil), nil
}

// logits reads both sessions' last logits into gl and cl; ok is false when either session is
// not a logitsReader.
func (p *sessionPair) logits(gl, cl []float32) ([]float32, []float32, bool, error) {
	gr, gok := p.g.(logitsReader)
	cr, cok := p.c.(logitsReader)
	if !gok || !cok {
		return gl, cl, false, nil
	}
	var err error
	if gl, err = gr.LastLogits(gl); err != nil {
		return nil, nil, false, fmt.Errorf("self-check: GPU: %w", err)
	}
	if cl, err = cr.LastLogits(cl); err != nil {
		return nil, nil, false, fmt.Errorf("self-check: %s: %w", p.refName, err)
	}
	return gl, cl, true, nil
}

// close closes both sessions (a second close does nothing).
func (p *sessionPair) close() {
	if p.g != nil {
		p.g.Close()
		p.c.Close()
		p.g, p.c = nil, nil
	}
}
