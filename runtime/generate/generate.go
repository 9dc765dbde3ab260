// Package generate is the host side of text generation (docs/runtime.md §5): it opens a bundle
// on a backend (with its DSpark draft head unless told not to), turns a prompt (text, chat
// messages through the bundle's chat template, or token ids) into tokens, runs a session's
// prefill and decode programs (speculative rounds with the draft head, docs/speculative.md),
// drains the token ring, streams the decoded text, stops on the EOS ids of
// generation_config.json, --stop strings, the token limit, a full context or a cancelled
// context, and reports the round telemetry. lithos-run's generate command is a thin wrapper
// around OpenWith and Runner.Generate; its bench command around Runner.Bench.
//
// Imports: lithos/runtime/{backend, backend/cpu, backend/cuda, backend/gpu, backend/metal,
// bundle, chat, sample, tokenizer}, lithos/manifests, log/slog.
package generate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/backend/cuda"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/backend/metal"
	"lithos/runtime/bundle"
	"lithos/runtime/chat"
	"lithos/runtime/sample"
	"lithos/runtime/tokenizer"
)

// Backends are the backend names Open accepts; "auto" tries the best GPU backend present and
// falls back to the CPU (OpenWith).
var Backends = []string{"auto", "cpu", "cuda", "metal"}

// candidate is a backend that OpenWith may load; usable, when set, says whether its device is
// present (nil error, with the device's description as the first-use self-check keys it:
// cuda.UsableDevice, metal.UsableDevice) or why not (no driver, no GPU).
type candidate struct {
	be     backend.Backend
	usable func() (string, error)
}

// candidates returns the backends OpenWith tries for name, best first. An explicit name gives
// one (no fallback). "auto" (or "") gives Metal when metal.RunsModels, CUDA when
// cuda.RunsModels (false where the platform has none), then the CPU, which is always last;
// OpenWith keeps a GPU only after its first-use self-check against the CPU.
func candidates(name string) ([]candidate, error) {
	switch name {
	case "auto", "":
		var cs []candidate
		if metal.RunsModels {
			cs = append(cs, candidate{metal.Backend{}, metal.UsableDevice})
		}
		if cuda.RunsModels {
			cs = append(cs, candidate{cuda.Backend{}, cuda.UsableDevice})
		}
		return append(cs, candidate{be: cpu.Backend{}}), nil
	case "cpu":
		return []candidate{{be: cpu.Backend{}}}, nil
	case "cuda":
		return []candidate{{be: cuda.Backend{}}}, nil
	case "metal":
		return []candidate{{be: metal.Backend{}}}, nil
	}
	return nil, fmt.Errorf("backend %q: want one of %s", name, strings.Join(Backends, ", "))
}

// NewBackend returns the backend called name ("auto", "cpu", "cuda" or "metal"). "cuda" is the
// NVIDIA backend (runtime/backend/cuda; its Load says what is missing — driver, GPU, NVRTC,
// memory); "metal" the Apple silicon backend (runtime/backend/metal; elsewhere its Load returns
// metal.ErrUnsupported). For "auto" it returns the first backend auto would try whose device is
// present (candidates); the fallback from a GPU that refuses the bundle or the session options
// to the CPU needs the bundle and happens in OpenWith.
func NewBackend(name string) (backend.Backend, error) {
	cs, err := candidates(name)
	if err != nil {
		return nil, err
	}
	for _, c := range cs[:len(cs)-1] {
		if c.usable == nil {
			return c.be, nil
		}
		if _, err := c.usable(); err == nil {
			return c.be, nil
		}
	}
	return cs[len(cs)-1].be, nil
}

// Files read from a bundle, and their size limits (bytes).
const (
	maxTokenizerBytes = tokenizer.MaxFileBytes
	maxSmallJSONBytes = 16 << 20
)

// Runner is an opened bundle with its target loaded on a backend, its tokenizer, chat
// template and EOS ids.
type Runner struct {
	Bundle  *bundle.Bundle
	Backend backend.Backend
	Target  backend.Target
	// Tokenizer is nil when the bundle has no tokenizer.json (token ids only).
	Tokenizer *tokenizer.Tokenizer
	// Chat is nil when the bundle has no tokenizer_config.json / chat template.
	Chat *chat.Config
	// EOS are the ids that end generation: generation_config.json's eos_token_id, else the
	// model config's.
	EOS []int32
	// MaxContext is the model's max_position_embeddings (0 when the config has none).
	MaxContext int
	// Draft is the bundle's draft head bound to the target, nil when the bundle has none or
	// Options.NoDraft left it out.
	Draft backend.Drafter
	Log   *slog.Logger
	// keepMapped: a GPU target that auto passed over reported gpu.ErrDeviceBusy when closed,
	// so the device may still read the bundle's mapping: Close leaves it mapped.
	keepMapped bool
}

// Options of OpenWith.
type Options struct {
	// Backend is a name of Backends ("" = auto).
	Backend string
	// NoDraft leaves the bundle's draft head out: not loaded, not checked against the target.
	NoDraft bool
	// Session describes the sessions the caller will open: their Sampling, DraftSampling,
	// ConfidenceStop, PrefillChunk and KVCache — the cache type auto's self-check runs (nil:
	// float32; sessions later opened with another type run kernels the check did not) —
	// (Capacity, EOS, RingCapacity and Drafter are OpenWith's:
	// a small context, the bundle's EOS ids and draft head). With "auto", a GPU backend is
	// kept only when it opens such a session; one that refuses it (backend.ErrUnsupported:
	// sampled drafts, the min(1, p/q) rule, at temperature > 0) is passed over. Nil: greedy
	// sampling with the point-mass rule. Unused with an explicit backend (its refusal comes
	// from Runner.Generate's session).
	Session *backend.SessionOptions
	// SelfCheck is the mode of auto's first-use self-check of a GPU backend (selfcheck.go):
	// "on" checks when no verdict is cached, "off" never checks, "force" checks even when one
	// is; "" takes $LITHOS_SELFCHECK (SelfCheckEnv; unset: on). Unused with an explicit
	// backend, which is never checked.
	SelfCheck string
	// SelfCheckDir holds the cached verdicts ("": os.UserCacheDir()/lithos/selfcheck).
	SelfCheckDir string
	// Log receives warnings and debug logs (nil: slog.Default()).
	Log *slog.Logger
}

// Open is OpenWith with the draft head loaded.
func Open(ctx context.Context, dir, backendName string, log *slog.Logger) (*Runner, error) {
	return OpenWith(ctx, dir, Options{Backend: backendName, Log: log})
}

// OpenWith opens the bundle in dir (checked and mapped: bundle.Open), loads its target on the
// named backend and, unless opt.NoDraft, its draft head (Target.LoadDraft), and reads its
// tokenizer, chat template and generation config when present. Errors name the bundle, file,
// tensor or field; a draft head that does not fit the target is refused (with NoDraft it is
// ignored).
//
// With "auto" (or "") it tries the candidates best first (a GPU backend whose RunsModels
// holds, then the CPU): a GPU backend whose device is absent (Usable fails: no driver, no GPU,
// no NVRTC) is passed over with a debug log; one that refuses the bundle — Load or LoadDraft —
// or the sessions of opt.Session — a probe session — with backend.ErrUnsupported (a tensor
// format without a kernel, no packed lm_head, weights larger than the free device memory,
// sampled drafts) is passed over with a one-line warning naming what was refused. Any other
// error of a GPU backend (a device or compile failure) is returned: auto does not hide a
// broken GPU. Runner.Backend is the backend chosen; nothing later moves the runner to another
// (a device failure while generating is an error). An explicit name never falls back.
//
// A GPU backend that auto would keep must first pass a first-use self-check (selfcheck.go,
// docs/runtime.md §7): a short greedy generation on the GPU and on the CPU backend over the
// same mapped bundle, tokens identical and each step's logits within SelfCheckTolerance (with a
// BF16 KV cache: the float32 check, then the BF16 one within SelfCheckToleranceBF16). One
// that fails is passed over with a warning saying what differed; the verdict, failed or
// passed, is cached per backend, device, executable and bundle manifest in opt.SelfCheckDir,
// so the check runs once (opt.SelfCheck, $LITHOS_SELFCHECK: off, force); a cached failure is
// read before the GPU target is loaded (the device's description from the candidate's usable:
// cuda.UsableDevice, metal.UsableDevice), so a GPU that failed is passed over without loading. A GPU-side error
// during the check (a kernel fault, a command-buffer error, a wait that gave up, a session
// that fails to close) fails it the same way, the error text in the verdict; a CPU-side error
// or ctx's is returned. A GPU target passed over after a failed check whose Close fails is
// logged and left behind; when that error wraps gpu.ErrDeviceBusy the bundle stays mapped for
// the life of the process (the runner's Close leaves it), as Runner.Close does.
func OpenWith(ctx context.Context, dir string, opt Options) (*Runner, error) {
	cs, err := candidates(opt.Backend)
	if err != nil {
		return nil, err
	}
	return openWith(ctx, dir, opt, cs)
}

// probeCapacity is the context of OpenWith's probe session (positions): room for a
// speculative round of the largest block a GPU runs.
const probeCapacity = 64

// openWith is OpenWith over the candidates cs (tests pass fakes); the last is never probed
// and its errors are returned as they are.
func openWith(ctx context.Context, dir string, opt Options, cs []candidate) (*Runner, error) {
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	var err error
	mode := SelfCheckOff
	if len(cs) > 1 {
		if mode, err = selfCheckMode(opt.SelfCheck); err != nil {
			return nil, err
		}
	}
	b, err := bundle.Open(dir)
	if err != nil {
		return nil, err
	}
	keep := false // a passed-over GPU target may still read the mapping (gpu.ErrDeviceBusy)
	for i, c := range cs {
		last := i == len(cs)-1
		name := c.be.Name()
		if !last && c.usable != nil {
			device, err := c.usable()
			if err != nil {
				log.Debug("backend auto: passed over, no usable device", "backend", name, "reason", err)
				continue
			}
			// A verdict that this GPU failed its self-check for this bundle and executable
			// passes it over before its weights are loaded (minutes for a 27B).
			if v, path := cachedFailure(b, opt, mode, name, device, !opt.NoDraft && b.Manifest.Draft != nil); v != nil {
				log.Warn(failedCheckMessage(name, true, cs[len(cs)-1].be.Name(), cs[i+1].be.Name()),
					"reason", v.Detail, "kv_cache", cmp.Or(v.Key.KVCache, backend.KVFloat32), "verdict_file", path, "checked_at", v.Checked.Format(time.RFC3339))
				continue
			}
		}
		r := &Runner{Bundle: b, Backend: c.be, Log: log}
		err := r.load(ctx, !opt.NoDraft)
		if err == nil && !last {
			err = r.probe(opt.Session)
		}
		var failed *verdict
		if err == nil && !last && mode != SelfCheckOff {
			failed, err = r.checkGPU(ctx, opt, mode, cs[len(cs)-1].be, cs[i+1].be.Name())
		}
		if failed != nil {
			// The GPU is not used whatever its Close says: the run goes on without it.
			if cerr := r.Target.Close(); cerr != nil {
				how := ""
				if errors.Is(cerr, gpu.ErrDeviceBusy) {
					keep = true
					how = "; the bundle stays mapped for the life of the process"
				}
				log.Warn(fmt.Sprintf("backend auto: closing %s after its failed self-check failed%s", name, how), "reason", cerr.Error())
			}
			continue
		}
		if err == nil {
			r.keepMapped = keep
			if len(cs) > 1 {
				log.Debug("backend auto: chosen", "backend", name)
			}
			if len(r.EOS) == 0 {
				log.Warn("the bundle names no EOS token (generation_config.json, config.json): generation stops on --stop, --max-tokens or the context only")
			}
			return r, nil
		}
		fallBack := !last && errors.Is(err, backend.ErrUnsupported)
		if r.Target != nil {
			if cerr := r.Target.Close(); cerr != nil {
				err, fallBack = errors.Join(err, cerr), false // the device failed
			}
		}
		if !fallBack {
			return nil, releaseBundle(b, err, keep)
		}
		log.Warn(fmt.Sprintf("backend auto: %s cannot run this bundle or these options; running on %s (--backend %s would fail with the reason)", name, cs[i+1].be.Name(), name),
			"reason", err.Error())
	}
	return nil, releaseBundle(b, errors.New("backend auto: no backend to try"), keep) // unreachable: the CPU is last
}

// checkGPU gets the first-use self-check verdict of the runner's GPU target against ref
// (firstUseCheck) and logs it: a new pass at info level, a cached one at debug level, a
// failure (new or cached) as a warning naming what differed, next (the backend auto tries
// instead) and the verdict file. It returns the verdict when it failed, nil when it passed.
func (r *Runner) checkGPU(ctx context.Context, opt Options, mode string, ref backend.Backend, next string) (*verdict, error) {
	name := r.Backend.Name()
	v, path, cached, err := r.firstUseCheck(ctx, opt, mode, ref)
	if err != nil {
		return nil, err
	}
	attrs := []any{"kv_cache", cmp.Or(v.Key.KVCache, backend.KVFloat32), "verdict_file", path}
	if cached {
		attrs = append(attrs, "checked_at", v.Checked.Format(time.RFC3339))
	} else {
		attrs = append(attrs, "seconds", fmt.Sprintf("%.2f", v.Seconds))
	}
	switch {
	case v.Pass && cached:
		r.Log.Debug("backend auto: "+name+" passed its first-use self-check (cached verdict)", append(attrs, "detail", v.Detail)...)
	case v.Pass:
		r.Log.Info(fmt.Sprintf("backend auto: %s passed its first-use self-check against %s", name, ref.Name()), append(attrs, "detail", v.Detail)...)
	default:
		r.Log.Warn(failedCheckMessage(name, cached, ref.Name(), next), append([]any{"reason", v.Detail}, attrs...)...)
		return v, nil
	}
	return nil, nil
}

// failedCheckMessage is the warning of a GPU backend name whose self-check against ref failed
// (cached: the verdict was read from the cache), the run going on next.
func failedCheckMessage(name string, cached bool, ref, next string) string {
	how := "failed"
	if cached {
		how = "failed (cached verdict; " + SelfCheckEnv + "=force checks again)"
	}
	return fmt.Sprintf("backend auto: %s %s its first-use self-check against %s; running on %s (--backend %s runs it unchecked)", name, how, ref, next, name)
}

// probe opens and closes a session with the options of so (nil: greedy, the point-mass rule)
// at probeCapacity positions, with the runner's EOS ids and draft head.
func (r *Runner) probe(so *backend.SessionOptions) error {
	opt := backend.SessionOptions{Sampling: sample.Params{TopP: 1}}
	if so != nil {
		opt = *so
	}
	opt.Capacity, opt.EOS, opt.RingCapacity, opt.Drafter = probeCapacity, r.EOS, 0, nil
	if r.Draft != nil {
		opt.Drafter = r.Draft
	}
	s, err := r.Target.NewSession(opt)
	if err != nil {
		return err
	}
	return s.Close()
}

func (r *Runner) load(ctx context.Context, withDraft bool) error {
	b := r.Bundle
	var err error
	if r.Target, err = r.Backend.Load(ctx, b); err != nil {
		return err
	}
	if withDraft {
		if r.Draft, err = r.Target.LoadDraft(ctx, b); err != nil {
			return fmt.Errorf("%w (--no-draft runs the target alone)", err)
		}
	} else if b.Manifest.Draft != nil {
		r.Log.Debug("draft head left out (no-draft)", "bundle", b.Dir)
	}
	vocab := r.Target.Config().Vocab
	if data, err := b.ReadFile("tokenizer.json", maxTokenizerBytes); err == nil {
		if r.Tokenizer, err = tokenizer.Parse(data); err != nil {
			return fmt.Errorf("bundle %s: tokenizer.json: %w", b.Dir, err)
		}
		if n := r.Tokenizer.VocabSize(); n > vocab {
			return fmt.Errorf("bundle %s: tokenizer.json has ids up to %d, the model's vocabulary is %d", b.Dir, n-1, vocab)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if data, err := b.ReadFile("tokenizer_config.json", maxSmallJSONBytes); err == nil {
		c, err := chat.ParseConfig(data)
		if err != nil {
			return fmt.Errorf("bundle %s: %w", b.Dir, err)
		}
		if tpl, err := b.ReadFile("chat_template.jinja", maxSmallJSONBytes); err == nil {
			c.Templates["default"] = string(tpl)
		}
		r.Chat = c
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	cfgEOS, maxPos, err := parseModelConfig(b.Manifest.Target.Config)
	if err != nil {
		return fmt.Errorf("bundle %s: target.config: %w", b.Dir, err)
	}
	r.MaxContext = maxPos
	r.EOS = cfgEOS
	if data, err := b.ReadFile("generation_config.json", maxSmallJSONBytes); err == nil {
		var gc struct {
			EOS json.RawMessage `json:"eos_token_id"`
		}
		if err := json.Unmarshal(data, &gc); err != nil {
			return fmt.Errorf("bundle %s: generation_config.json: %w", b.Dir, err)
		}
		if len(gc.EOS) > 0 && string(gc.EOS) != "null" {
			if r.EOS, err = parseIDs(gc.EOS); err != nil {
				return fmt.Errorf("bundle %s: generation_config.json: eos_token_id: %w", b.Dir, err)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, id := range r.EOS {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("bundle %s: EOS token %d is outside the vocabulary [0, %d)", b.Dir, id, vocab)
		}
	}
	return nil
}

// parseModelConfig reads eos_token_id and max_position_embeddings from a config.json, from
// text_config when there is one.
func parseModelConfig(raw json.RawMessage) ([]int32, int, error) {
	var top struct {
		EOS        json.RawMessage `json:"eos_token_id"`
		MaxPos     *int            `json:"max_position_embeddings"`
		TextConfig *struct {
			EOS    json.RawMessage `json:"eos_token_id"`
			MaxPos *int            `json:"max_position_embeddings"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, 0, err
	}
	eos, maxPos := top.EOS, top.MaxPos
	if tc := top.TextConfig; tc != nil {
		if len(tc.EOS) > 0 && string(tc.EOS) != "null" {
			eos = tc.EOS
		}
		if tc.MaxPos != nil {
			maxPos = tc.MaxPos
		}
	}
	var ids []int32
	if len(eos) > 0 && string(eos) != "null" {
		var err error
		if ids, err = parseIDs(eos); err != nil {
			return nil, 0, fmt.Errorf("eos_token_id: %w", err)
		}
	}
	mp := 0
	if maxPos != nil {
		if *maxPos < 0 {
			return nil, 0, fmt.Errorf("max_position_embeddings %d is negative", *maxPos)
		}
		mp = *maxPos
	}
	return ids, mp, nil
}

// parseIDs reads an int or a list of ints.
func parseIDs(raw json.RawMessage) ([]int32, error) {
	var one int32
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want a token id or a list of them, got %s", raw)
	}
	return many, nil
}

// Close releases the target and unmaps the bundle. When the target's Close reports
// gpu.ErrDeviceBusy (the device may still be running work that reads the bundle's mapped
// weights), or a GPU target auto passed over did (OpenWith), the bundle stays mapped for the
// life of the process; the target's error is returned.
func (r *Runner) Close() error {
	var err error
	if r.Target != nil {
		err = r.Target.Close()
	}
	return releaseBundle(r.Bundle, err, r.keepMapped)
}

// releaseBundle unmaps b once the targets on it are closed, err being what their use or
// closing ended with, and returns err joined with the unmap's error. It leaves b mapped for
// the life of the process when err wraps gpu.ErrDeviceBusy or keep is set: the GPU may still
// read the mapped weights (Metal wraps them without a copy), and unmapping them under the
// device could fault it. Every path of OpenWith and Runner.Close that ends a bundle's use goes
// through it.
func releaseBundle(b *bundle.Bundle, err error, keep bool) error {
	if keep || errors.Is(err, gpu.ErrDeviceBusy) {
		return err
	}
	return errors.Join(err, b.Close())
}

// Request is one generation.
type Request struct {
	// Prompt is the text (or, with Chat, the user message). Exactly one of Prompt and
	// PromptIDs is used: PromptIDs when it is not nil.
	Prompt string
	// PromptIDs are token ids given directly.
	PromptIDs []int32
	// Chat renders Prompt as one user message through the bundle's chat template, with the
	// assistant turn's header appended (add_generation_prompt).
	Chat bool
	// MaxTokens is the most tokens to generate (≥ 1).
	MaxTokens int
	// Sampling: temperature 0 is greedy.
	Sampling sample.Params
	// Stop strings end generation when the text contains one; the text is cut before it.
	Stop []string
	// Context is the most positions the sequence may use (0: the model's
	// max_position_embeddings, or 32768 when the config has none).
	Context int
	// PrefillChunk is the rows per prefill step (0: backend.DefaultPrefillChunk).
	PrefillChunk int
	// OnText, when set, receives the text as it becomes final (never a piece that a stop
	// string could still remove). An error it returns stops generation and is returned.
	OnText func(string) error
	// OnToken, when set, receives each generated token id as it is drained (EOS excluded).
	OnToken func(int32) error
	// NoDraft decodes one row per step even when the runner has a draft head.
	NoDraft bool
	// DraftSampling is backend.DraftArgmax ("" means it: the point-mass rule) or
	// backend.DraftSample (drafts sampled, accepted with min(1, p/q)); see
	// backend.SessionOptions.
	DraftSampling string
	// ConfidenceStop, in [0, 1], shortens rounds to the leading drafts whose confidence head
	// output reaches it (0: off).
	ConfidenceStop float64
	// KVCache is the KV cache's element type, backend.KVFloat32 ("" means it) or
	// backend.KVBF16; see backend.SessionOptions.
	KVCache string
	// RoundsPerCall is the most decode steps (speculative rounds, or single-row steps without
	// the draft head) queued on the device per Session.Decode call, in [0, MaxRoundsPerCall]
	// (0: DefaultRoundsPerCall). The host drains the ring, streams the text and checks the
	// stop strings between calls; a GPU backend's call copies the step state in, launches
	// the steps' recorded programs back to back and waits once, so queuing more steps per
	// call hides the host's share of a call (the launch, the copies, the wait) behind the
	// device's work. The costs: tokens arrive in bursts of up to RoundsPerCall steps, and up
	// to RoundsPerCall − 1 steps may be queued behind the one that ends a generation: after
	// an EOS or a full context (the device sets Done) a GPU's kernels return at their done
	// check, so such a step costs its launches only; a stop string is the host's, so the
	// steps behind it run in full and their tokens are dropped. Near MaxTokens a call queues
	// only the steps the tokens left need at the generation's rate so far (tokens per step,
	// rounded down; before the first, the most a step can push), so that without a draft
	// head MaxTokens wastes no step.
	RoundsPerCall int
}

// Decode steps per Session.Decode call (Request.RoundsPerCall): DefaultRoundsPerCall on a GPU
// backend, 1 on the CPU backend (its calls do the work themselves: nothing to overlap);
// MaxRoundsPerCall is the largest a request may ask for. docs/performance.md §8.10 has the
// measurements behind the default.
const (
	DefaultRoundsPerCall = 4
	MaxRoundsPerCall     = 64
)

// RoundsPerCall returns n when n > 0, else the decode steps per Session.Decode call that suit
// r's backend (Request.RoundsPerCall): 1 on the CPU backend, DefaultRoundsPerCall on a GPU.
func (r *Runner) RoundsPerCall(n int) int {
	switch {
	case n > 0:
		return n
	case r.Backend != nil && r.Backend.Name() == (cpu.Backend{}).Name():
		return 1
	}
	return DefaultRoundsPerCall
}

// CallSteps returns the decode steps to queue in the next Session.Decode call of a session
// whose step state is ss and ring ring (drained: the host calls it between calls): perCall,
// at most the steps whose tokens the ring's free slots hold however many each pushes (free ÷
// stepTokens, the most one step pushes: 1, or B + 1 with a drafter; at least 1), and fewer
// near StopAt — the steps the tokens left before it need at the rate so far (tokens ÷
// rounds, rounded down, at least 1; before the first round stepTokens). Without a draft head
// the steps never pass StopAt.
func CallSteps(ss *backend.StepState, ring *backend.Ring, perCall, tokens, rounds, stepTokens int) int {
	stepTokens = max(stepTokens, 1)
	steps := max(perCall, 1)
	if ring != nil {
		free := ring.Capacity() - int(ss.RingHead-ss.RingTail)
		steps = min(steps, max(1, free/stepTokens))
	}
	if ss.StopAt == 0 {
		return steps
	}
	left := int(int64(ss.StopAt) - int64(ss.RingHead))
	if left < 1 {
		return steps
	}
	rate := stepTokens
	if rounds > 0 {
		rate = max(1, tokens/rounds)
	}
	return min(steps, (left+rate-1)/rate)
}

// SessionOptions returns the options of req's sessions that do not depend on the bundle
// (sampling, draft rule, confidence stop, prefill chunk, KV cache type): what Options.Session wants, so that
// --backend auto chooses a backend that runs them.
func (req *Request) SessionOptions() *backend.SessionOptions {
	return &backend.SessionOptions{Sampling: req.Sampling, DraftSampling: req.DraftSampling,
		ConfidenceStop: req.ConfidenceStop, PrefillChunk: req.PrefillChunk, KVCache: req.KVCache}
}

// DefaultContext is the context when neither the request nor the model config gives one;
// MaxContext is the largest context a request may ask for.
const (
	DefaultContext = 32768
	MaxContext     = 1 << 24
)

// Finish reasons (Result.FinishReason).
const (
	FinishEOS       = "eos"       // the model produced an EOS token (not included in Tokens)
	FinishStop      = "stop"      // a stop string appeared (Text is cut before it)
	FinishLength    = "length"    // MaxTokens tokens were generated
	FinishContext   = "context"   // the context is full
	FinishCancelled = "cancelled" // ctx was cancelled (Ctrl-C)
)

// Result is what a generation produced, as lithos-run --json prints it.
type Result struct {
	// PromptTokens is the number of prompt tokens.
	PromptTokens int `json:"prompt_tokens"`
	// Tokens are the generated ids, without the EOS that ended generation.
	Tokens []int32 `json:"tokens"`
	// Text is the decoded text of Tokens (special tokens skipped), cut before a stop string.
	Text         string `json:"text"`
	FinishReason string `json:"finish_reason"`
	// PrefillTokPerS is prompt tokens ÷ the prefill time (which includes sampling the first
	// token); DecodeTokPerS is the tokens of the decode rounds ÷ their time (0 without any).
	PrefillTokPerS float64 `json:"prefill_tok_per_s"`
	DecodeTokPerS  float64 `json:"decode_tok_per_s"`
	// Rounds is the decode rounds run (one forward pass of the target each; the first token
	// comes from the prefill and is not a round). TokensPerRound is the tokens those rounds
	// committed ÷ Rounds: 1 without a draft head.
	Rounds         int     `json:"rounds"`
	TokensPerRound float64 `json:"tokens_per_round"`
	// Backend is the backend that ran the generation ("cpu", "cuda", "metal"): the one
	// --backend auto chose.
	Backend string `json:"backend"`
	// Speculative is the round telemetry of a generation with a draft head (null without).
	Speculative *Speculative `json:"speculative"`
}

// Speculative is the telemetry of speculative decoding (docs/speculative.md §5), from the
// session's backend.RoundStats.
type Speculative struct {
	// DraftSampling is the acceptance rule: "argmax" (point mass) or "sample" (min(1, p/q));
	// greedy generation is always "argmax".
	DraftSampling string `json:"draft_sampling"`
	// BlockSize is B, the drafts a full round verifies.
	BlockSize int `json:"block_size"`
	// Rounds is the speculative rounds; PlainSteps the single-row steps among the decode
	// steps (near the end of the context).
	Rounds     int `json:"rounds"`
	PlainSteps int `json:"plain_steps"`
	// TokensPerRound is the mean tokens a round committed (1…B+1); Histogram[n−1] counts the
	// rounds that committed n tokens.
	TokensPerRound float64 `json:"tokens_per_round"`
	Histogram      []int   `json:"tokens_per_round_histogram"`
	// Acceptance[k] is the fraction of rounds whose draft k was accepted (k = 0…B−1).
	Acceptance []float64 `json:"acceptance_by_position"`
	// Confidence[k] is the mean confidence head output for draft k (omitted without a head).
	Confidence []float64 `json:"confidence_by_position,omitempty"`
	// DraftMSPerRound and VerifyMSPerRound are the mean milliseconds a round spent in the
	// drafter (Draft and Append) and in the target (verify pass, accept scan, commit).
	DraftMSPerRound  float64 `json:"draft_ms_per_round"`
	VerifyMSPerRound float64 `json:"verify_ms_per_round"`
}

// NewSpeculative summarizes round stats (nil when st holds no drafter's counters).
func NewSpeculative(st backend.RoundStats, sampling string) *Speculative {
	if st.Committed == nil {
		return nil
	}
	s := &Speculative{DraftSampling: sampling, BlockSize: len(st.Accepted), Rounds: st.Rounds, PlainSteps: st.PlainSteps,
		Histogram: slices.Clone(st.Committed), Acceptance: make([]float64, len(st.Accepted))}
	if st.Rounds == 0 {
		return s
	}
	r := float64(st.Rounds)
	s.TokensPerRound = float64(st.RoundTokens) / r
	for k, a := range st.Accepted {
		s.Acceptance[k] = float64(a) / r
	}
	if st.ConfidenceRounds > 0 {
		s.Confidence = make([]float64, len(st.ConfidenceSum))
		for k, c := range st.ConfidenceSum {
			s.Confidence[k] = c / float64(st.ConfidenceRounds)
		}
	}
	s.DraftMSPerRound = float64(st.DraftTime) / 1e6 / r
	s.VerifyMSPerRound = float64(st.VerifyTime) / 1e6 / r
	return s
}

// Tokens returns the prompt's token ids for req, checked against the model's vocabulary (and
// the tokenizer's, when there is one). Errors: an empty prompt, text without a tokenizer,
// Chat without a chat template or with PromptIDs, an unknown id.
func (r *Runner) Tokens(req *Request) ([]int32, error) {
	vocab := r.Target.Config().Vocab
	if req.PromptIDs != nil {
		if req.Chat {
			return nil, errors.New("--chat applies to a text prompt, not to --prompt-ids")
		}
		if len(req.PromptIDs) == 0 {
			return nil, errors.New("empty prompt: no token ids")
		}
		for i, id := range req.PromptIDs {
			if id < 0 || int(id) >= vocab {
				return nil, fmt.Errorf("prompt token %d (position %d) is not a token id of this model (vocabulary [0, %d))", id, i, vocab)
			}
			if r.Tokenizer != nil {
				if !r.Tokenizer.Known(int(id)) {
					return nil, fmt.Errorf("prompt token %d (position %d) is not in the tokenizer's vocabulary", id, i)
				}
			}
		}
		return req.PromptIDs, nil
	}
	if req.Prompt == "" {
		return nil, errors.New("empty prompt: give --prompt TEXT or --prompt-ids IDS")
	}
	if r.Tokenizer == nil {
		return nil, fmt.Errorf("bundle %s has no tokenizer.json: give the prompt as --prompt-ids", r.Bundle.Dir)
	}
	text := req.Prompt
	if req.Chat {
		if r.Chat == nil {
			return nil, fmt.Errorf("bundle %s has no tokenizer_config.json with a chat template", r.Bundle.Dir)
		}
		src, err := r.Chat.Template(false)
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", r.Bundle.Dir, err)
		}
		tpl, err := chat.Parse(src)
		if err != nil {
			return nil, fmt.Errorf("bundle %s: chat template: %w", r.Bundle.Dir, err)
		}
		msg := chat.NewDict()
		msg.Set("role", "user")
		msg.Set("content", req.Prompt)
		if text, err = tpl.Apply(chat.Input{Messages: chat.NewList(msg), AddGenerationPrompt: true, Vars: r.Chat.SpecialTokens}); err != nil {
			return nil, fmt.Errorf("bundle %s: chat template: %w", r.Bundle.Dir, err)
		}
	}
	ids, err := r.Tokenizer.Encode(text)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errors.New("empty prompt: the text has no tokens")
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id >= vocab {
			return nil, fmt.Errorf("prompt token %d (position %d) from the tokenizer is outside the model's vocabulary [0, %d)", id, i, vocab)
		}
		out[i] = int32(id)
	}
	return out, nil
}

// Generate runs req to completion. Every check of the request (prompt, context, sampling,
// stop strings) happens before any model work. It returns the result so far and ctx's error
// when ctx is cancelled (FinishReason "cancelled"), and an error from the backend or a
// callback as is.
func (r *Runner) Generate(ctx context.Context, req Request) (*Result, error) {
	if req.MaxTokens < 1 {
		return nil, fmt.Errorf("max tokens %d: want at least 1", req.MaxTokens)
	}
	if err := req.Sampling.Validate(); err != nil {
		return nil, err
	}
	for i, s := range req.Stop {
		if s == "" {
			return nil, fmt.Errorf("stop string %d is empty", i)
		}
	}
	if len(req.Stop) > 0 && r.Tokenizer == nil {
		return nil, fmt.Errorf("bundle %s has no tokenizer.json: stop strings cannot be matched", r.Bundle.Dir)
	}
	if req.RoundsPerCall < 0 || req.RoundsPerCall > MaxRoundsPerCall {
		return nil, fmt.Errorf("rounds per call %d: want 0 (the default) to %d", req.RoundsPerCall, MaxRoundsPerCall)
	}
	perCall := r.RoundsPerCall(req.RoundsPerCall)
	prompt, err := r.Tokens(&req)
	if err != nil {
		return nil, err
	}
	limit := req.Context
	if limit == 0 {
		limit = r.MaxContext
	}
	if limit == 0 {
		limit = DefaultContext
	}
	if limit < 0 || limit > MaxContext {
		return nil, fmt.Errorf("context %d: want a positive length of at most %d tokens", limit, MaxContext)
	}
	if len(prompt) >= limit {
		return nil, fmt.Errorf("the prompt has %d tokens, which leaves no room in the context of %d (give a shorter prompt or a larger --context)", len(prompt), limit)
	}
	maxTok := min(req.MaxTokens, limit) // the context holds at most limit − prompt + 1 new tokens
	opt := backend.SessionOptions{
		Capacity: min(limit, len(prompt)+maxTok), PrefillChunk: req.PrefillChunk,
		Sampling: req.Sampling, EOS: r.EOS, DraftSampling: req.DraftSampling, ConfidenceStop: req.ConfidenceStop,
		KVCache: req.KVCache,
	}
	if r.Draft != nil && !req.NoDraft {
		opt.Drafter = r.Draft
		// Room for the last round's rows past the last token, within the context.
		opt.Capacity = min(limit, len(prompt)+maxTok+r.Draft.BlockSize())
	}
	sess, err := r.Target.NewSession(opt)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	ss := sess.State()
	ss.StopAt = ss.RingHead + uint32(maxTok)
	stepTokens := 1 // the most tokens one decode step pushes
	if opt.Drafter != nil {
		stepTokens = opt.Drafter.BlockSize() + 1
	}

	res := &Result{PromptTokens: len(prompt), Tokens: []int32{}, Backend: r.Backend.Name()}
	out := &output{req: &req, tok: r.Tokenizer, eos: r.EOS, res: res}
	if r.Tokenizer != nil {
		out.dec = r.Tokenizer.NewStreamDecoder(true)
	}
	var decodeTime time.Duration
	decodeTokens := 0
	// done records the statistics and finishes (every return after the session starts).
	done := func(err error) (*Result, error) {
		if res.Rounds > 0 {
			res.DecodeTokPerS = float64(decodeTokens) / decodeTime.Seconds()
			res.TokensPerRound = float64(decodeTokens) / float64(res.Rounds)
		}
		if opt.Drafter != nil {
			rule := opt.DraftSampling
			if rule == "" || req.Sampling.Greedy() {
				rule = backend.DraftArgmax
			}
			res.Speculative = NewSpeculative(sess.Stats(), rule)
		}
		return r.finish(res, out, ctx, err)
	}
	t0 := time.Now()
	if err := sess.Prefill(ctx, prompt); err != nil {
		return done(err)
	}
	res.PrefillTokPerS = float64(len(prompt)) / time.Since(t0).Seconds()
	var buf []int32
	for {
		buf = sess.Ring().Drain(ss, buf[:0])
		if err := out.add(buf); err != nil {
			return done(err)
		}
		if out.reason != "" {
			break
		}
		if ss.Done != 0 {
			switch {
			case ss.Error == backend.ErrContextFull:
				out.reason = FinishContext
			case ss.Error != backend.ErrNone:
				return done(fmt.Errorf("generation stopped with device error %d", ss.Error))
			default:
				out.reason = FinishLength // StopAt; an EOS was seen by out.add
			}
			break
		}
		if err := ctx.Err(); err != nil {
			return done(err)
		}
		head, step := ss.RingHead, ss.Step
		t := time.Now()
		err := sess.Decode(ctx, CallSteps(ss, sess.Ring(), perCall, decodeTokens, res.Rounds, stepTokens))
		decodeTime += time.Since(t)
		// A step that pushed tokens committed them (Step counts the committed steps).
		res.Rounds += int(ss.Step - step)
		decodeTokens += int(ss.RingHead - head)
		if err != nil {
			// The steps before the failed or cancelled one pushed their tokens: keep them.
			buf = sess.Ring().Drain(ss, buf[:0])
			return done(errors.Join(err, out.add(buf)))
		}
	}
	return done(nil)
}

// finish flushes the text and sets the finish reason; a cancelled ctx becomes "cancelled"
// with ctx's error returned alongside the result.
func (r *Runner) finish(res *Result, out *output, ctx context.Context, err error) (*Result, error) {
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		out.reason = FinishCancelled
		if ferr := out.flush(); ferr != nil {
			return res, ferr
		}
		res.FinishReason = out.reason
		return res, err
	}
	if err != nil {
		return nil, err
	}
	if ferr := out.flush(); ferr != nil {
		return nil, ferr
	}
	res.FinishReason = out.reason
	return res, nil
}

// output turns drained tokens into the result: EOS ends it, the stream decoder makes text,
// stop strings cut it, and text that no stop string can still remove goes to OnText.
type output struct {
	req    *Request
	tok    *tokenizer.Tokenizer
	dec    *tokenizer.StreamDecoder
	eos    []int32
	res    *Result
	text   strings.Builder // decoded so far
	sent   int             // bytes of text passed to OnText
	reason string          // set when generation is over
}

func (o *output) add(ids []int32) error {
	for _, id := range ids {
		if o.reason != "" {
			return nil
		}
		if isEOS(o.eos, id) {
			o.reason = FinishEOS
			return nil
		}
		o.res.Tokens = append(o.res.Tokens, id)
		if o.req.OnToken != nil {
			if err := o.req.OnToken(id); err != nil {
				return err
			}
		}
		// An id past the tokenizer's vocabulary (a padded embedding row) has no
		// text: it is kept in Tokens and left out of Text, as HF tokenizers'
		// decode skips ids it has no token for.
		if o.dec != nil && o.tok.Known(int(id)) {
			piece, err := o.dec.Add(int(id))
			if err != nil {
				return err
			}
			o.text.WriteString(piece)
			if err := o.emit(false); err != nil {
				return err
			}
		}
		if o.reason == "" && len(o.res.Tokens) >= o.req.MaxTokens {
			o.reason = FinishLength
		}
	}
	return nil
}

func isEOS(eos []int32, id int32) bool {
	for _, e := range eos {
		if e == id {
			return true
		}
	}
	return false
}

// emit checks the stop strings and passes on the text that is final: all of it when final,
// else all but the longest tail that begins a stop string.
func (o *output) emit(final bool) error {
	s := o.text.String()
	from := o.sent
	for _, stop := range o.req.Stop {
		from = min(from, max(0, o.sent-len(stop)+1))
	}
	cut := -1
	for _, stop := range o.req.Stop {
		if i := strings.Index(s[from:], stop); i >= 0 && (cut < 0 || from+i < cut) {
			cut = from + i
		}
	}
	end := len(s)
	if cut >= 0 {
		end = cut
		o.reason = FinishStop
		final = true
	}
	if !final {
		for _, stop := range o.req.Stop {
			for k := min(len(stop)-1, len(s)-o.sent); k > 0; k-- {
				if strings.HasSuffix(s, stop[:k]) {
					end = min(end, len(s)-k)
					break
				}
			}
		}
	}
	if end > o.sent {
		if o.req.OnText != nil {
			if err := o.req.OnText(s[o.sent:end]); err != nil {
				return err
			}
		}
		o.sent = end
	}
	if cut >= 0 {
		o.res.Text = s[:cut]
	}
	return nil
}

// flush ends the stream: the decoder's held-back bytes, then everything not yet emitted.
func (o *output) flush() error {
	if o.dec == nil {
		return nil
	}
	if o.reason != FinishStop {
		o.text.WriteString(o.dec.Flush())
		if err := o.emit(true); err != nil {
			return err
		}
	}
	if o.reason != FinishStop {
		o.res.Text = o.text.String()
	}
	return nil
}

// MaxPromptIDs bounds the ids ParseIDs accepts (a prompt longer than any context).
const MaxPromptIDs = 1 << 24

// ParseIDs reads a comma-separated list of token ids ("1,2,3"; spaces around ids are
// allowed). Errors name the entry: an empty entry, a non-integer, a negative id, an id above
// 2³¹−1, more than MaxPromptIDs ids.
func ParseIDs(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty prompt: no token ids")
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxPromptIDs {
		return nil, fmt.Errorf("%d token ids: more than %d", len(parts), MaxPromptIDs)
	}
	ids := make([]int32, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("token id %d is empty (ids are comma-separated: 1,2,3)", i)
		}
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("token id %d (%.20q) is not an integer", i, p)
		}
		if v < 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("token id %d (%d) is out of range [0, %d]", i, v, math.MaxInt32)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}
