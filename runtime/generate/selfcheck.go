package generate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"lithos/internal/atomicfile"
	"lithos/runtime/backend"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
	"lithos/runtime/sample"
)

// The first-use self-check (docs/runtime.md §7): before --backend auto hands a bundle to a
// GPU backend, it runs a short greedy generation on that GPU and on the CPU backend over the
// same mapped bundle and keeps the GPU only when they agree. A GPU-side error during the check
// (a kernel fault, a command-buffer error, a device that stays busy) is a failed check too.
// The verdict is cached per (check version, backend, device and its compiler, executable,
// bundle manifest, draft head or not) under SelfCheckDir, a failed one too.

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

// SelfCheckToleranceBF16 bounds the logits of a BF16-cache check's BF16 part (its float32
// part, which runs first, is held to SelfCheckTolerance). Rounding each key and value to BF16
// (2⁻⁸ relative steps) turns the GPU's and the CPU's float32 differences before the rounding
// (≈ 10⁻⁶–10⁻⁵ relative) into whole steps in a few entries, which a deep model amplifies:
// measured on the 27B-shaped bundle (random weights, CPU backend, 11 prompt tokens, every key
// and value moved by ±1e-6, ±4e-6 or ±1.6e-5 relative before the rounding), the last row's
// logits moved 9.6e-4, 1.4e-3 and 1.8e-3 (the whole BF16 cache against float32: 4.1e-3); the
// H100's BF16 check against the CPU gave 1.78e-3 (docs/performance.md §8.20;
// TestBF16CacheSensitivity repeats the CPU measurement on a bundle). A fault in the
// BF16 attention kernels (a wrong widening, offset or row) moves logits by O(1).
const SelfCheckToleranceBF16 = 1e-2

// checkTolerance is the bound a check with a KV cache of type kv holds its (last part's)
// logits to: SelfCheckToleranceBF16 for backend.KVBF16, else SelfCheckTolerance.
func checkTolerance(kv string) float64 {
	if kv == backend.KVBF16 {
		return SelfCheckToleranceBF16
	}
	return SelfCheckTolerance
}

// Self-check modes (Options.SelfCheck, SelfCheckEnv).
const (
	SelfCheckOn    = "on"
	SelfCheckOff   = "off"
	SelfCheckForce = "force"
)

// The check's size: a prompt of ids 0…selfCheckPrompt−1 (at most the vocabulary), its prefill
// and selfCheckSteps greedy single-row decode steps, each step's token and logits compared;
// with a draft head, then selfCheckRounds greedy speculative rounds after the same prefill,
// their tokens compared with a plain greedy run on the CPU as long as they are. Eleven ids
// make one prefill chunk on the GPU (at most 16 rows: runtime/backend/gpu/program.go), which
// runs the r16 BLM row variant (kernels.BLMRowVariants; before the 16-row kernels, an 8-row
// and a 3-row chunk); the decode steps run r1, a round of block B runs the variant holding B+1
// rows (r8 for B = 7). The goldens of the tests are this prompt's.
const (
	selfCheckPrompt  = 11
	selfCheckSteps   = 4
	selfCheckRounds  = 3
	selfCheckVersion = 4 // bump when the check or the key changes: older verdicts are then not used
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
	// Device describes the GPU and the compiler of its kernels: Metal's chip profile
	// (metal.Profile.String) and macOS version (metal.OSVersion: the OS compiles the Metal
	// source), CUDA's device string (name, compute capability, memory, driver, NVRTC version);
	// "" when the target does not say.
	Device string `json:"device"`
	// Executable is the SHA-256 of the running binary (a rebuilt binary checks again).
	Executable string `json:"executable"`
	// Bundle is the SHA-256 of the bundle's manifest re-encoded as JSON: every tensor's
	// SHA-256, offset and format, the configs.
	Bundle string `json:"bundle"`
	// Draft tells whether the draft head was loaded, so its rounds checked (--no-draft is
	// checked on its own).
	Draft bool `json:"draft"`
	// KVCache is the sessions' KV cache type when it is not the float32 default
	// (backend.KVBF16: the check runs the BF16 kernels); omitted for float32, whose keys'
	// JSON is then what it was before the field (no selfCheckVersion bump was needed for it;
	// version 4 re-checks every verdict once, for the BF16 check's float32 part).
	KVCache string `json:"kv_cache,omitempty"`
}

// verdict is a self-check's outcome, as cached (one JSON file per key).
type verdict struct {
	Key  checkKey `json:"key"`
	Pass bool     `json:"pass"`
	// Detail says what differed (a failure) or what agreed (a pass).
	Detail string `json:"detail"`
	// MaxRelErr is the largest step's max|GPU − CPU| ÷ max|CPU| (null when not finite or
	// the sessions do not give logits); Tolerance the bound of the key's cache type
	// (checkTolerance). A BF16 check's float32 part is held to SelfCheckTolerance: when it is
	// the part that failed, MaxRelErr and the tokens are its, and Detail names that cache and
	// its bound.
	MaxRelErr *float64 `json:"max_rel_err"`
	Tolerance float64  `json:"tolerance"`
	// CPUTokens and GPUTokens are the greedy tokens of the prefill and the plain steps.
	CPUTokens []int32 `json:"cpu_tokens"`
	GPUTokens []int32 `json:"gpu_tokens"`
	// RoundGPUTokens are the GPU's tokens of the speculative part (the prefill's, then the
	// rounds'), RoundCPUTokens the CPU's plain greedy run over as many positions; empty
	// without a draft head or when the check ended before the rounds.
	RoundGPUTokens []int32 `json:"round_gpu_tokens,omitempty"`
	RoundCPUTokens []int32 `json:"round_cpu_tokens,omitempty"`
	// Error is the GPU-side error that failed the check ("" when none did).
	Error     string    `json:"error,omitempty"`
	Seconds   float64   `json:"seconds"` // the check's wall time, the CPU reference's load included
	Checked   time.Time `json:"checked_at"`
	BundleDir string    `json:"bundle_dir"`
}

// key returns the runner's check key (its backend, device, the executable and the bundle) for
// sessions with a KV cache of type kv (checkKV). Errors: the executable cannot be read, the
// manifest cannot be encoded.
func (r *Runner) key(kv string) (checkKey, error) {
	return keyFor(r.Bundle, r.Backend.Name(), deviceName(r.Target), r.Draft != nil, kv)
}

// checkKV is the KV cache type the self-check runs for the sessions opt describes:
// backend.KVBF16 when they ask for it, else "" (float32).
func checkKV(opt Options) string {
	if opt.Session != nil && opt.Session.KVCache == backend.KVBF16 {
		return backend.KVBF16
	}
	return ""
}

// keyFor is the check key of a target of backend on device (deviceName's string) for bundle b,
// with or without its draft head, for KV caches of type kv (checkKV).
func keyFor(b *bundle.Bundle, backend, device string, draft bool, kv string) (checkKey, error) {
	exe, err := executableHash()
	if err != nil {
		return checkKey{}, err
	}
	m, err := json.Marshal(b.Manifest)
	if err != nil {
		return checkKey{}, fmt.Errorf("bundle %s: manifest: %w", b.Dir, err)
	}
	h := sha256.Sum256(m)
	return checkKey{Version: selfCheckVersion, Backend: backend, Device: device,
		Executable: exe, Bundle: hex.EncodeToString(h[:]), Draft: draft, KVCache: kv}, nil
}

// cachedFailure returns the cached verdict and its file when the self-check of a target of
// backend on device for bundle b (with its draft head when draft) failed before and mode
// trusts cached verdicts (SelfCheckOn): OpenWith then passes the GPU over without loading the
// weights. nil when there is no such verdict, it passed, or it cannot be read.
func cachedFailure(b *bundle.Bundle, opt Options, mode, backend, device string, draft bool) (*verdict, string) {
	if mode != SelfCheckOn {
		return nil, ""
	}
	key, err := keyFor(b, backend, device, draft, checkKV(opt))
	if err != nil {
		return nil, ""
	}
	dir := opt.SelfCheckDir
	if dir == "" {
		if dir, err = defaultSelfCheckDir(); err != nil {
			return nil, ""
		}
	}
	path := key.file(dir)
	if v, ok := readVerdict(path, key); ok && !v.Pass {
		return v, path
	}
	return nil, ""
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
// working set) and the macOS version, a device that is a fmt.Stringer (CUDA: name, compute
// capability, memory, driver, NVRTC), else its Name; "" for a target that is not the GPU
// runtime's.
func deviceName(t backend.Target) string {
	gt, ok := t.(*gpu.Target)
	if !ok || gt.Device == nil {
		return ""
	}
	switch d := gt.Device.(type) {
	case interface{ Description() string }: // metal.Device
		return d.Description()
	case fmt.Stringer: // the CUDA runtime device
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

// maxVerdictBytes bounds a verdict file: a larger one is not read (not trusted).
const maxVerdictBytes = 1 << 20

// readVerdict returns the verdict cached at path for k; false when there is none, it is not a
// regular file (a symlink, a FIFO, a device: not followed, never opened for a blocking read),
// it is larger than maxVerdictBytes, it does not parse, it holds another key (a collision, an
// older check version) or it was held to another tolerance than its cache type's
// (checkTolerance).
func readVerdict(path string, k checkKey) (*verdict, bool) {
	li, err := os.Lstat(path)
	if err != nil || !li.Mode().IsRegular() || li.Size() > maxVerdictBytes {
		return nil, false
	}
	// openVerdictFlags: no symlink followed, no blocking open of a FIFO swapped in after the
	// Lstat (selfcheck_unix.go); the handle must then be the regular file that was checked.
	f, err := os.OpenFile(path, os.O_RDONLY|openVerdictFlags, 0)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !os.SameFile(li, fi) {
		return nil, false
	}
	data, err := io.ReadAll(io.LimitReader(f, maxVerdictBytes+1))
	if err != nil || len(data) > maxVerdictBytes {
		return nil, false
	}
	var v verdict
	if err := json.Unmarshal(data, &v); err != nil || v.Key != k || v.Tolerance != checkTolerance(k.KVCache) {
		return nil, false
	}
	return &v, true
}

// staleTemp is the age past which writeVerdict removes a temporary verdict file left behind
// (a process killed between its create and rename).
const staleTemp = time.Hour

// writeVerdict writes v to path atomically (atomicfile.Write: a temporary file in the same
// directory, created with it, synced, renamed over path). It first removes the directory's
// temporary files older than staleTemp.
func writeVerdict(path string, v *verdict) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	removeStaleTemps(dir, time.Now())
	return atomicfile.Write(path, append(data, '\n'), 0o644)
}

// removeStaleTemps removes dir's temporary verdict files (atomicfile.TempGlob, and the older
// .verdict-*.tmp; regular files) last modified more than staleTemp before now; errors are
// ignored (another process may remove them first).
func removeStaleTemps(dir string, now time.Time) {
	names, _ := filepath.Glob(atomicfile.TempGlob(dir))
	// The names the verdicts' temporary files had before atomicfile (lithos ≤ 46ca8cc).
	old, _ := filepath.Glob(filepath.Join(dir, ".verdict-*.tmp"))
	names = append(names, old...)
	for _, n := range names {
		if fi, err := os.Lstat(n); err == nil && fi.Mode().IsRegular() && now.Sub(fi.ModTime()) > staleTemp {
			os.Remove(n)
		}
	}
}

// firstUseCheck returns the self-check verdict of the runner's GPU target against ref (the CPU
// backend): the cached one (mode on), else a new one, which it caches. cached says which;
// path is the verdict file ("" when verdicts cannot be cached: no cache directory, the
// executable unreadable). Errors are the check's (selfCheck).
func (r *Runner) firstUseCheck(ctx context.Context, opt Options, mode string, ref backend.Backend) (v *verdict, path string, cached bool, err error) {
	kv := checkKV(opt)
	key, kerr := r.key(kv)
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
	if v, err = selfCheck(ctx, r.Bundle, r.Target, r.Draft, ref, kv); err != nil {
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
// (cpu.Session, gpu.Session, without a drafter): the self-check compares them.
type logitsReader interface {
	LastLogits(dst []float32) ([]float32, error)
}

// gpuSideError is an error of the GPU's side of the check: opening, running, reading or closing
// one of its sessions. selfCheck turns it into a failed verdict (unless ctx is done).
type gpuSideError struct{ err error }

func (e *gpuSideError) Error() string { return "self-check: GPU: " + e.err.Error() }
func (e *gpuSideError) Unwrap() error { return e.err }

// selfCheck runs the check of g (a GPU target of b, with its draft head gd or nil) against
// ref's target of the same bundle (runSelfCheck), every session of both with a KV cache of type
// kv (backend.KVBF16, or "" for float32), its logits held to checkTolerance(kv). A BF16 check
// first runs the float32 check (every kernel but the BF16 cache's, at SelfCheckTolerance) and
// fails with it (Detail names that part), so that only the cache's own rounding gets the looser
// bound; when it passes, the verdict holds the BF16 part's figures. A difference is a failed verdict; so is an
// error of the GPU's side (a kernel fault, a command-buffer error, a wait that gave up:
// gpu.ErrDeviceBusy, a session whose Close fails), recorded in the verdict's Error and Detail.
// Other errors are returned, wrapped as "self-check: <backend>: …": ref cannot load the bundle,
// a session or step of ref fails, ctx is done (on either side).
func selfCheck(ctx context.Context, b *bundle.Bundle, g backend.Target, gd backend.Drafter, ref backend.Backend, kv string) (*verdict, error) {
	start := time.Now()
	v := &verdict{Tolerance: SelfCheckTolerance}
	var err error
	f32Part := kv == backend.KVBF16 // the part running: a BF16 check's float32 one first
	const f32Label = "with the float32 KV cache (checked first): "
	if f32Part {
		err = runSelfCheck(ctx, b, g, gd, ref, "", v)
		if err == nil && !v.Pass {
			v.Detail = f32Label + v.Detail
		}
	}
	if err == nil && (kv != backend.KVBF16 || v.Pass) {
		f32Part = false
		*v = verdict{Tolerance: checkTolerance(kv)}
		err = runSelfCheck(ctx, b, g, gd, ref, kv, v)
	}
	v.Tolerance = checkTolerance(kv)
	v.Seconds = time.Since(start).Seconds()
	if err == nil {
		return v, nil
	}
	var ge *gpuSideError
	if !errors.As(err, &ge) || ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	msg := "the GPU failed during the check: " + err.Error()
	if v.Detail != "" { // a difference found first, then the error (closing the sessions)
		msg = v.Detail + "; then " + msg
	}
	if f32Part {
		msg = f32Label + msg
	}
	v.Pass, v.Detail, v.Error = false, msg, err.Error()
	return v, nil
}

// runSelfCheck fills v: greedy sessions without EOS on g and on ref's target, the prefill of
// selfCheckPrompt ids and selfCheckSteps single-row decode steps, each step's token and (when
// both sessions are logitsReaders) logits compared (compareStep); with gd, selfCheckRounds
// speculative rounds on g after the same prefill, their tokens compared with ref's plain
// greedy run continued as far (compareRounds). It sets v.Pass only when every session closed
// without an error. A difference sets v.Detail and returns nil; errors are the sessions' (a
// gpuSideError for g's) and ref's Load.
func runSelfCheck(ctx context.Context, b *bundle.Bundle, g backend.Target, gd backend.Drafter, ref backend.Backend, kv string, v *verdict) (err error) {
	refName := ref.Name()
	fail := func(format string, a ...any) error {
		v.Detail = fmt.Sprintf(format, a...)
		return nil
	}
	rt, err := ref.Load(ctx, b)
	if err != nil {
		return fmt.Errorf("self-check: %s: %w", refName, err)
	}
	defer rt.Close()
	vocab := g.Config().Vocab
	if rv := rt.Config().Vocab; rv != vocab {
		return fail("the vocabulary is %d on the GPU, %d on %s", vocab, rv, refName)
	}
	prompt := make([]int32, min(selfCheckPrompt, vocab))
	for i := range prompt {
		prompt[i] = int32(i)
	}
	// Tokens the CPU's plain greedy run must reach: the plain steps', and with a draft head
	// the most the rounds can commit (B+1 each) after the prefill's token.
	need := selfCheckSteps + 1
	if gd != nil {
		need = max(need, 1+selfCheckRounds*(gd.BlockSize()+1))
	}
	var open []*checkSession
	defer func() { // every session closed; the first error is the check's
		for _, s := range open {
			if cerr := s.close(); err == nil {
				err = cerr
			}
		}
	}()
	newSession := func(t backend.Target, gpuSide bool, name string, opt backend.SessionOptions) (*checkSession, error) {
		s := &checkSession{gpu: gpuSide, name: name}
		opt.KVCache = kv // both sides' caches of the same type: the CPU's is the reference
		ss, err := t.NewSession(opt)
		if err != nil {
			return nil, s.wrap(fmt.Errorf("session: %w", err))
		}
		s.s = ss
		open = append(open, s)
		return s, nil
	}
	argmax := sample.Params{TopP: 1} // greedy
	cs, err := newSession(rt, false, refName, backend.SessionOptions{Capacity: len(prompt) + need + 1, Sampling: argmax})
	if err != nil {
		return err
	}
	ref0 := &refRun{s: cs, prompt: prompt}
	gs, err := newSession(g, true, "GPU", backend.SessionOptions{Capacity: len(prompt) + selfCheckSteps + 1, Sampling: argmax})
	if err != nil {
		return err
	}
	var gl []float32
	maxRel, compared := 0.0, false
	agreed := 0 // tokens whose position both verified (a near tie ends it early)
	var tie string
	for k := 0; k <= selfCheckSteps; k++ {
		what := "the prefill"
		if k > 0 {
			what = fmt.Sprintf("decode step %d", k)
		}
		gt, err := gs.step(ctx, k == 0, prompt)
		if err != nil {
			return err
		}
		if err := ref0.extend(ctx, k+1); err != nil {
			return err
		}
		ct, cl := ref0.tokens[k], ref0.rows[k]
		if len(gt) != 1 {
			return fail("%s: the GPU gave %d tokens %v (want one); %s %d", what, len(gt), gt, refName, ct)
		}
		withLogits := false
		if gr, ok := gs.s.(logitsReader); ok && cl != nil {
			if gl, err = gr.LastLogits(gl); err != nil {
				return gs.wrap(fmt.Errorf("LastLogits: %w", err))
			}
			withLogits = true
		}
		v.GPUTokens, v.CPUTokens = append(v.GPUTokens, gt[0]), append(v.CPUTokens, ct)
		res := compareStep(gt[0], ct, gl, cl, withLogits, v.Tolerance)
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
			tie = fmt.Sprintf("; %s: the GPU chose token %d, %s %d, a near tie (logits within tolerance), later tokens not compared", what, gt[0], refName, ct)
			break
		}
		agreed++
	}
	if err := gs.close(); err != nil {
		return err
	}
	v.setRel(maxRel, compared)
	logitsNote := fmt.Sprintf("logits within %.3g relative (tolerance %g)", maxRel, v.Tolerance)
	if !compared {
		logitsNote = "logits not compared (a session does not give them)"
	}
	detail := fmt.Sprintf("the first %d greedy tokens %v identical (the prefill of ids 0…%d, then single-row decode steps), %s%s",
		agreed, v.GPUTokens[:agreed], len(prompt)-1, logitsNote, tie)

	if gd != nil {
		note, failed, err := compareRounds(ctx, g, gd, ref0, newSession, v)
		if err != nil || failed {
			return err
		}
		detail += note
	}
	// Close every session now: a GPU session whose Close fails (busy) must not pass.
	for _, s := range open {
		if err := s.close(); err != nil {
			return err
		}
	}
	v.Detail, v.Pass = detail, true
	return nil
}

// compareRounds runs selfCheckRounds greedy speculative rounds of g with gd after the check's
// prefill and compares their tokens with the CPU's plain greedy run (ref, continued as far):
// token by token, a difference failing (v.Detail set, failed true) unless it is a near tie on
// the CPU's row (nearTie), which ends the comparison. It returns the detail's note: the rounds,
// their commits and how many rounds and tokens were compared; "speculative rounds not checked
// (reason)" when no round's token was.
func compareRounds(ctx context.Context, g backend.Target, gd backend.Drafter, ref *refRun,
	newSession func(backend.Target, bool, string, backend.SessionOptions) (*checkSession, error), v *verdict) (note string, failed bool, err error) {
	bs := gd.BlockSize()
	gs, err := newSession(g, true, "GPU", backend.SessionOptions{
		Capacity: len(ref.prompt) + (selfCheckRounds+1)*(bs+1) + 1, Sampling: sample.Params{TopP: 1}, Drafter: gd})
	if err != nil {
		return "", false, err
	}
	toks, err := gs.step(ctx, true, ref.prompt)
	if err != nil {
		return "", false, err
	}
	if len(toks) != 1 {
		v.Detail = fmt.Sprintf("speculative rounds (block %d): the prefill gave %d tokens %v on the GPU (want one)", bs, len(toks), toks)
		return "", true, nil
	}
	ends := []int{1} // ends[r]: the tokens after round r (round 0: the prefill)
	for r := 1; r <= selfCheckRounds; r++ {
		t, err := gs.step(ctx, false, nil)
		if err != nil {
			return "", false, err
		}
		if len(t) < 1 || len(t) > bs+1 {
			v.Detail = fmt.Sprintf("speculative round %d (block %d): the GPU committed %d tokens %v (want 1 to %d)", r, bs, len(t), t, bs+1)
			return "", true, nil
		}
		toks = append(toks, t...)
		ends = append(ends, len(toks))
	}
	st := gs.s.Stats()
	if err := gs.close(); err != nil {
		return "", false, err
	}
	if err := ref.extend(ctx, len(toks)); err != nil {
		return "", false, err
	}
	v.RoundGPUTokens, v.RoundCPUTokens = toks, ref.tokens[:len(toks)]
	round := func(i int) string { // which part of the run token i came from
		r := 0
		for ends[r] <= i {
			r++
		}
		if r == 0 {
			return "the prefill's"
		}
		return fmt.Sprintf("round %d's", r)
	}
	n, stop := 0, ""
	for ; n < len(toks); n++ {
		gt, ct := toks[n], ref.tokens[n]
		if gt == ct {
			continue
		}
		if nearTie(gt, ref.rows[n], v.Tolerance) {
			stop = fmt.Sprintf("token %d (%s) is %d on the GPU, %d in the plain %s run, a near tie on %s's logits", n, round(n), gt, ct, ref.s.name, ref.s.name)
			break
		}
		v.Detail = fmt.Sprintf("speculative rounds (block %d): token %d (%s) is %d on the GPU, %d in a plain %s greedy run (GPU %v, %s %v)",
			bs, n, round(n), gt, ct, ref.s.name, toks, ref.s.name, ref.tokens[:len(toks)])
		return "", true, nil
	}
	full := 0 // rounds all of whose tokens were compared
	commits := make([]string, selfCheckRounds)
	accepted := 0
	for r := 1; r <= selfCheckRounds; r++ {
		if ends[r] <= n {
			full++
		}
		c := ends[r] - ends[r-1]
		commits[r-1] = fmt.Sprint(c)
		accepted += c - 1
	}
	ran := fmt.Sprintf("%d decode passes after the same prefill", selfCheckRounds)
	if st.Rounds != selfCheckRounds {
		ran += fmt.Sprintf(" (%d of them speculative rounds, %d single-row steps)", st.Rounds, st.PlainSteps)
	}
	if n <= ends[0] {
		return fmt.Sprintf("; speculative rounds not checked (%s)", stop), false, nil
	}
	note = fmt.Sprintf("; speculative (block %d): %s committed %s tokens (%d drafts accepted), compared with a plain %s greedy run: %d of %d rounds and the first %d tokens identical",
		bs, ran, strings.Join(commits, "+"), accepted, ref.s.name, full, selfCheckRounds, n)
	if stop != "" {
		note += "; then " + stop + ", later tokens not compared"
	}
	if accepted == 0 {
		note += "; no draft accepted, so the commit of accepted rows was not exercised"
	}
	return note, false, nil
}

// nearTie tells whether token t is within tol (the check's tolerance) of the top of the logits
// row c (c[t] ≥ max(c) − tol·max|c|): a GPU choosing t where the CPU chose the argmax
// differs by rounding. False without a row (nil) or for t outside it.
func nearTie(t int32, c []float32, tol float64) bool {
	if len(c) == 0 || t < 0 || int(t) >= len(c) {
		return false
	}
	var top, scale float64 = math.Inf(-1), 0
	for _, x := range c {
		top, scale = max(top, float64(x)), max(scale, math.Abs(float64(x)))
	}
	return float64(c[t]) >= top-tol*scale
}

// refRun is the CPU's plain greedy run of the check's prompt: tokens[i] and the logits row it
// came from (rows[i]; nil when the session is not a logitsReader), as far as extend ran it.
type refRun struct {
	s      *checkSession
	prompt []int32
	tokens []int32
	rows   [][]float32
}

// extend runs the prefill (first) and single-row decode steps until the run holds n tokens.
// Errors: the session's (wrapped), a step that did not give exactly one token.
func (r *refRun) extend(ctx context.Context, n int) error {
	for len(r.tokens) < n {
		t, err := r.s.step(ctx, len(r.tokens) == 0, r.prompt)
		if err != nil {
			return err
		}
		if len(t) != 1 {
			return r.s.wrap(fmt.Errorf("step %d gave %d tokens %v (want one)", len(r.tokens), len(t), t))
		}
		var row []float32
		if lr, ok := r.s.s.(logitsReader); ok {
			if row, err = lr.LastLogits(nil); err != nil {
				return r.s.wrap(fmt.Errorf("LastLogits: %w", err))
			}
		}
		r.tokens, r.rows = append(r.tokens, t[0]), append(r.rows, row)
	}
	return nil
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
// withLogits false only the tokens. The logits must agree within tol (relDiff).
// Different tokens fail, except when the logits agree and gt is the argmax of gl (the GPU
// sampled what its own logits say): then both rows hold a near tie within the tolerance, a
// difference of rounding, and the step passes with tie set.
func compareStep(gt, ct int32, gl, cl []float32, withLogits bool, tol float64) stepResult {
	var res stepResult
	if withLogits {
		if len(gl) != len(cl) {
			res.fail = fmt.Sprintf("the GPU gave %d logits, the CPU %d", len(gl), len(cl))
			return res
		}
		res.rel = relDiff(gl, cl)
		if !(res.rel <= tol) {
			i := worstLogit(gl, cl)
			res.fail = fmt.Sprintf("logits differ from the CPU's by %.3g relative (max|Δ| ÷ max|CPU|; tolerance %g; worst at token %d: GPU %g, CPU %g); tokens GPU %d, CPU %d",
				res.rel, tol, i, gl[i], cl[i], gt, ct)
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

// checkSession is a session of the check and the side it runs on (gpu: the GPU's, whose errors
// are gpuSideErrors; else the reference called name).
type checkSession struct {
	s    backend.Session // nil once closed
	gpu  bool
	name string
}

// wrap marks err as this side's: a gpuSideError, or "self-check: <name>: …".
func (c *checkSession) wrap(err error) error {
	if c.gpu {
		return &gpuSideError{err}
	}
	return fmt.Errorf("self-check: %s: %w", c.name, err)
}

// step runs the prefill of prompt (prefill) or one decode step (a round with a drafter) and
// drains the ring.
func (c *checkSession) step(ctx context.Context, prefill bool, prompt []int32) ([]int32, error) {
	var err error
	if prefill {
		err = c.s.Prefill(ctx, prompt)
	} else {
		err = c.s.Decode(ctx, 1)
	}
	if err != nil {
		return nil, c.wrap(err)
	}
	return c.s.Ring().Drain(c.s.State(), nil), nil
}

// close closes the session (a second close does nothing) and returns its error, wrapped.
func (c *checkSession) close() error {
	if c.s == nil {
		return nil
	}
	err := c.s.Close()
	c.s = nil
	if err != nil {
		return c.wrap(fmt.Errorf("close: %w", err))
	}
	return nil
}
