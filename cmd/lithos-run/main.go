// Command lithos-run is the lithos runtime: it memory-maps a bundle made by lithos-pack and
// generates text on a backend (--backend auto: Metal on a Mac or CUDA on a usable NVIDIA GPU
// once it passes a first-use self-check against the CPU, else the pure-Go CPU backend), with
// the bundle's DSpark draft head as a speculative drafter unless --no-draft (docs/speculative.md); `lithos-run bench`
// measures plain and speculative decoding against the memory-bandwidth floor. This file is
// cobra wiring only: flags become a lithos/runtime/generate.Request.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"lithos/runtime/backend"
	"lithos/runtime/generate"
	"lithos/runtime/sample"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitInterrupted = 130
)

// run executes the command line and returns the exit code. stdout gets the generated text (or
// the one JSON object with --json); everything else goes to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	g := &genFlags{stdout: stdout, stderr: stderr}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(stdout) // help and --version; errors go to stderr
	root.SetErr(stderr)
	defer func() {
		if p := recover(); p != nil { // never a stack trace for a bad command line
			code = g.fail(fmt.Errorf("internal error: %v", p))
		}
	}()
	if err := root.ExecuteContext(ctx); err != nil {
		if g.code != exitOK {
			return g.code
		}
		return g.fail(err)
	}
	return g.code
}

func newRoot(g *genFlags) *cobra.Command {
	root := &cobra.Command{
		Use:   "lithos-run [BUNDLE] [flags]",
		Short: "Run lithos bundles: generate text from a prompt",
		Long: "lithos-run loads a bundle packed by lithos-pack (mapped read-only, checked before use) and\n" +
			"generates text on a backend (--backend auto: Metal on a Mac or CUDA on a usable NVIDIA GPU once it passes a first-use self-check against the CPU, else the CPU). `lithos-run BUNDLE --prompt ...` is `lithos-run generate BUNDLE --prompt ...`.",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return g.run(cmd, args[0])
		},
	}
	g.register(root)
	gen := &cobra.Command{
		Use:   "generate BUNDLE",
		Short: "Generate text from a prompt (streamed to stdout; --json for one JSON object)",
		Long: "Generate text from --prompt (or --prompt-ids) with the bundle's target model. Text streams to\n" +
			"stdout as it is decoded; with --json stdout gets exactly one JSON object at the end:\n" +
			`{"prompt_tokens", "tokens", "text", "finish_reason", "prefill_tok_per_s", "decode_tok_per_s", "rounds", "tokens_per_round", "backend", "speculative"}` + "\n" +
			"(on an error: {\"error\": ...}). Logs and statistics go to stderr. Generation stops on the EOS ids of\n" +
			"generation_config.json (finish_reason eos), a --stop string (stop), --max-tokens (length), a full\n" +
			"context (context) or Ctrl-C (cancelled, exit status 130).",
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.run(cmd, args[0])
		},
	}
	g.register(gen)
	root.AddCommand(gen)
	root.AddCommand(newBench(g))
	addLaunchers(root, g) // claude, codex, opencode, env, run (launch.go)
	root.AddCommand(newServe(g))
	return root
}

// genFlags are the generate flags (shared by the root command and generate).
type genFlags struct {
	prompt, promptIDs, backend string
	chat, noDraft, json        bool
	maxTokens, topK, context   int
	prefillChunk               int
	roundsPerCall              int
	temperature, topP          float64
	seed                       uint64
	stop                       []string
	verbose                    bool
	draftSampling              string
	confidenceStop             float64
	kvCache                    string
	bench                      bool
	runs                       int
	snapshot                   int
	promptTokens               int

	stdout, stderr io.Writer
	code           int
}

func (g *genFlags) register(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&g.prompt, "prompt", "", "prompt text (with --chat: the user message)")
	f.StringVar(&g.promptIDs, "prompt-ids", "", "prompt as comma-separated token ids, e.g. 1,2,3")
	f.BoolVar(&g.chat, "chat", false, "apply the bundle's chat template to --prompt (one user message, generation prompt appended)")
	f.IntVar(&g.maxTokens, "max-tokens", 256, "most tokens to generate")
	f.Float64Var(&g.temperature, "temperature", 0, "sampling temperature; 0 = greedy")
	f.Float64Var(&g.topP, "top-p", 1, "nucleus sampling: keep the most probable tokens up to this probability mass (1 = off)")
	f.IntVar(&g.topK, "top-k", 0, "keep the K most probable tokens (0 = off)")
	f.Uint64Var(&g.seed, "seed", 0, "sampling seed: a fixed seed gives a fixed output")
	f.StringArrayVar(&g.stop, "stop", nil, "stop when the text contains this string (repeatable); the text is cut before it")
	f.BoolVar(&g.noDraft, "no-draft", false, "decode without the bundle's DSpark draft head (not even loaded: a draft that does not fit is ignored)")
	f.StringVar(&g.draftSampling, "draft-sampling", "argmax", "at temperature > 0: argmax (drafts are the drafter's argmax, accepted iff they equal the sampled token) or sample (drafts sampled, accepted with min(1, p/q))")
	f.Float64Var(&g.confidenceStop, "confidence-stop", 0, "verify only the leading drafts whose confidence head output is at least this (0 = off)")
	f.StringVar(&g.kvCache, "kv-cache", backend.KVFloat32, "KV cache element type: f32, or bf16 (keys and values rounded to BF16: on a GPU half the cache's memory and half the bytes attention reads at long contexts; ~1e-3 relative on the logits)")
	f.StringVar(&g.backend, "backend", "auto", "backend: "+strings.Join(generate.Backends, "|")+" (auto = metal on a Mac or cuda on a usable NVIDIA GPU that runs the bundle and these options and passes a first-use self-check against cpu, cached; else cpu with a warning saying why; "+generate.SelfCheckEnv+"=0|force turns the check off or reruns it)")
	f.BoolVar(&g.json, "json", false, "print exactly one JSON object on stdout instead of streaming text")
	f.IntVar(&g.context, "context", 0, "context length in tokens (0 = the model's max_position_embeddings)")
	f.IntVar(&g.prefillChunk, "prefill-chunk", 0, "prompt rows per prefill step (0 = 128)")
	f.IntVar(&g.roundsPerCall, "rounds-per-call", 0, fmt.Sprintf("decode steps (speculative rounds) queued on the device per call, text streamed between calls (0 = %d on a GPU, 1 on the CPU; at most %d)", generate.DefaultRoundsPerCall, generate.MaxRoundsPerCall))
	f.BoolVarP(&g.verbose, "verbose", "v", false, "debug logs on stderr")
}

// fail reports err (as {"error": ...} on stdout with --json, always on stderr) and returns the
// exit code.
func (g *genFlags) fail(err error) int {
	fmt.Fprintln(g.stderr, "lithos-run:", err)
	if g.json {
		writeJSON(g.stdout, map[string]string{"error": err.Error()})
	}
	g.code = exitError
	return exitError
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func (g *genFlags) run(cmd *cobra.Command, dir string) error {
	level := slog.LevelInfo
	if g.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
	fl := cmd.Flags()
	req := generate.Request{
		Chat: g.chat, MaxTokens: g.maxTokens, Stop: g.stop, Context: g.context, PrefillChunk: g.prefillChunk,
		RoundsPerCall: g.roundsPerCall,
		Sampling:      sample.Params{Temperature: g.temperature, TopK: g.topK, TopP: g.topP, Seed: g.seed},
	}
	switch {
	case fl.Changed("prompt") && fl.Changed("prompt-ids"):
		return errors.New("give --prompt or --prompt-ids, not both")
	case fl.Changed("prompt-ids"):
		ids, err := generate.ParseIDs(g.promptIDs)
		if err != nil {
			return fmt.Errorf("--prompt-ids: %w", err)
		}
		req.PromptIDs = ids
	case fl.Changed("prompt"):
		req.Prompt = g.prompt
		if req.Prompt == "" {
			return errors.New("empty prompt: --prompt is empty")
		}
	case g.bench: // bench's default prompt (runBench)
	default:
		return errors.New("no prompt: give --prompt TEXT or --prompt-ids 1,2,3")
	}
	if g.maxTokens < 1 {
		return fmt.Errorf("--max-tokens %d: want at least 1", g.maxTokens)
	}
	if g.context < 0 || g.prefillChunk < 0 {
		return errors.New("--context and --prefill-chunk must not be negative")
	}
	if g.roundsPerCall < 0 || g.roundsPerCall > generate.MaxRoundsPerCall {
		return fmt.Errorf("--rounds-per-call %d: want 0 (the default) to %d", g.roundsPerCall, generate.MaxRoundsPerCall)
	}
	// bench's flags before the bundle loads (minutes for a 27B).
	if g.bench && g.runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", g.runs)
	}
	if g.bench && g.snapshot < 0 {
		return fmt.Errorf("--snapshot %d: want a token count (0 = off)", g.snapshot)
	}
	if g.bench && (g.promptTokens < 1 || g.promptTokens > generate.MaxContext) {
		return fmt.Errorf("--prompt-tokens %d: want 1 … %d", g.promptTokens, generate.MaxContext)
	}
	if g.bench && fl.Changed("prompt-tokens") && (fl.Changed("prompt") || fl.Changed("prompt-ids")) {
		return errors.New("--prompt-tokens makes bench's own prompt: give it or --prompt/--prompt-ids, not both")
	}
	if g.bench && !fl.Changed("prompt") && !fl.Changed("prompt-ids") && g.context > 0 && g.promptTokens >= g.context {
		return fmt.Errorf("--prompt-tokens %d leaves no room in --context %d", g.promptTokens, g.context)
	}
	if err := req.Sampling.Validate(); err != nil {
		return err
	}
	if g.draftSampling != "argmax" && g.draftSampling != "sample" {
		return fmt.Errorf("--draft-sampling %q: want argmax or sample", g.draftSampling)
	}
	if !(g.confidenceStop >= 0 && g.confidenceStop <= 1) {
		return fmt.Errorf("--confidence-stop %v: want a number in [0, 1] (0 = off)", g.confidenceStop)
	}
	if err := checkKVCache(g.kvCache); err != nil {
		return err
	}
	req.DraftSampling, req.ConfidenceStop, req.KVCache = g.draftSampling, g.confidenceStop, g.kvCache
	ctx := cmd.Context()
	r, err := generate.OpenWith(ctx, dir, generate.Options{Backend: g.backend, NoDraft: g.noDraft, Session: req.SessionOptions(), Log: log})
	if err != nil {
		return err
	}
	defer r.Close()
	if r.Draft != nil {
		log.Debug("speculative decoding with the bundle's draft head", "block", r.Draft.BlockSize(), "taps", r.Draft.TapLayers())
	}
	if g.bench {
		return g.runBench(ctx, r, req)
	}
	if !g.json {
		if r.Tokenizer != nil {
			req.OnText = func(s string) error { _, err := io.WriteString(g.stdout, s); return err }
		} else {
			req.OnToken = func(id int32) error { _, err := fmt.Fprintf(g.stdout, "%d ", id); return err }
		}
	}
	res, err := r.Generate(ctx, req)
	if res == nil {
		return err
	}
	if g.json {
		writeJSON(g.stdout, res)
	} else {
		fmt.Fprintln(g.stdout)
	}
	fmt.Fprintf(g.stderr, "lithos-run: %d prompt tokens, %d generated (%s); prefill %.1f tok/s, decode %.2f tok/s over %d rounds (%.2f tokens/round); backend %s\n",
		res.PromptTokens, len(res.Tokens), res.FinishReason, res.PrefillTokPerS, res.DecodeTokPerS, res.Rounds, res.TokensPerRound, r.Backend.Name())
	if s := res.Speculative; s != nil {
		fmt.Fprintf(g.stderr, "lithos-run: speculative (%s): %d rounds + %d single steps, %.2f tokens/round, histogram %v, acceptance by position %s, draft %.2f ms + verify %.2f ms per round\n",
			s.DraftSampling, s.Rounds, s.PlainSteps, s.TokensPerRound, s.Histogram, fractions(s.Acceptance), s.DraftMSPerRound, s.VerifyMSPerRound)
	}
	if err != nil {
		if res.FinishReason == generate.FinishCancelled {
			fmt.Fprintln(g.stderr, "lithos-run: interrupted")
			g.code = exitInterrupted
			return err
		}
		return err
	}
	return nil
}

// fractions formats a list of fractions with two decimals.
func fractions(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// newBench returns the bench command (runBench).
func newBench(g *genFlags) *cobra.Command {
	bench := &cobra.Command{
		Use:   "bench BUNDLE",
		Short: "Measure plain decoding and speculative rounds against the memory-bandwidth floor",
		Long: "Generate from the prompt (--prompt/--prompt-ids; default --prompt-tokens 32 fixed token ids) twice: without and with the\n" +
			"bundle's draft head, each --runs times (the best decode rate kept), and report for each: decode tok/s,\n" +
			"target passes, tokens per pass, and the floor measured in the same run — the tok/s the passes would\n" +
			"reach if each were bound by reading its bytes (manifest: target weights per pass, drafter weights per\n" +
			"round) at this machine's measured memory read bandwidth — with the round telemetry. --json prints the\n" +
			"report as one JSON object (generate.BenchReport).",
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			g.bench = true
			if !cmd.Flags().Changed("max-tokens") {
				g.maxTokens = 64
			}
			return g.run(cmd, args[0])
		},
	}
	g.register(bench)
	bench.Flags().IntVar(&g.runs, "runs", 1, "runs of each mode (the best decode rate is reported)")
	bench.Flags().IntVar(&g.snapshot, "snapshot", 0, "also time a prefix checkpoint: prefill this many tokens, copy the session's state out and back --runs times (0 = off)")
	bench.Flags().IntVar(&g.promptTokens, "prompt-tokens", 32, "without --prompt or --prompt-ids: a prompt of this many token ids spread over the vocabulary (a long one times the passes at a long context: --kv-cache's effect)")
	bench.Flags().Lookup("max-tokens").DefValue = "64"
	return bench
}

// checkKVCache refuses a --kv-cache value other than f32 and bf16 (generate, bench, serve),
// before the bundle loads.
func checkKVCache(kv string) error {
	if kv != backend.KVFloat32 && kv != backend.KVBF16 {
		return fmt.Errorf("--kv-cache %q: want %s or %s", kv, backend.KVFloat32, backend.KVBF16)
	}
	return nil
}

// benchPrompt is bench's default prompt: n token ids spread over the vocabulary (a fixed
// choice, so that runs compare; --prompt-tokens, 32 by default).
func benchPrompt(vocab, n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32((i*7919 + 13) % vocab)
	}
	return ids
}

// runBench runs generate's Bench and prints its report.
func (g *genFlags) runBench(ctx context.Context, r *generate.Runner, req generate.Request) error {
	if req.PromptIDs == nil && req.Prompt == "" {
		req.PromptIDs = benchPrompt(r.Target.Config().Vocab, g.promptTokens)
	}
	rep, err := r.Bench(ctx, req, g.runs)
	if err != nil {
		return err
	}
	if g.snapshot > 0 {
		if rep.Snapshot, err = r.BenchSnapshot(ctx, g.snapshot, g.runs, g.noDraft, req.PrefillChunk, req.KVCache); err != nil {
			return err
		}
	}
	if g.json {
		writeJSON(g.stdout, rep)
		return nil
	}
	w := g.stdout
	fmt.Fprintf(w, "bundle %s, backend %s, KV cache %s, %d threads, %d prompt tokens\n", rep.Bundle, rep.Backend, rep.KVCache, rep.Threads, rep.PromptTokens)
	fmt.Fprintf(w, "floor: %s memory read bandwidth %.1f GB/s measured now; target %.1f MB per pass", rep.BandwidthOf, rep.ReadGBs, float64(rep.TargetBytesPerPass)/1e6)
	if rep.DraftBytesPerRound > 0 {
		fmt.Fprintf(w, ", drafter %.1f MB per round", float64(rep.DraftBytesPerRound)/1e6)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-12s %7s %8s %10s %8s %11s %8s %10s\n", "mode", "tokens", "passes", "tok/pass", "tok/s", "floor tok/s", "x floor", "prefill/s")
	row := func(name string, b *generate.BenchRun) {
		fmt.Fprintf(w, "%-12s %7d %8d %10.2f %8.2f %11.1f %8.4f %10.1f\n", name, b.Tokens, b.Passes, b.TokensPerPass, b.DecodeTokPerS, b.FloorTokPerS, b.XFloor, b.PrefillTokPerS)
	}
	row("plain", &rep.Plain)
	if s := rep.Speculative; s != nil {
		row("speculative", s)
		t := s.Speculative
		fmt.Fprintf(w, "speculative: %.2f× plain decode; %d rounds + %d single steps, histogram of tokens per round (1…%d) %v, acceptance by position %s, draft %.2f ms + verify %.2f ms per round; output identical to plain: %v\n",
			s.DecodeTokPerS/rep.Plain.DecodeTokPerS, t.Rounds, t.PlainSteps, len(t.Histogram), t.Histogram, fractions(t.Acceptance), t.DraftMSPerRound, t.VerifyMSPerRound, rep.Identical)
		if t.Confidence != nil {
			fmt.Fprintf(w, "mean confidence by position %s\n", fractions(t.Confidence))
		}
	} else {
		fmt.Fprintln(w, "speculative: the bundle has no draft head (or --no-draft)")
	}
	pt := func(name string, p *generate.PassTime) string {
		return fmt.Sprintf("%s %.2f ms (floor %.2f ms, %.3f×)", name, p.MS, p.FloorMS, p.XFloor)
	}
	fmt.Fprintf(w, "per pass: %s", pt("plain step", &rep.Passes.PlainStep))
	if p := rep.Passes; p.Round != nil {
		fmt.Fprintf(w, "; %s; %s; %s, %.3f× the verify pass", pt("verify", p.Verify), pt("draft", p.Draft), pt("full round", p.Round), p.RoundOverVerify)
	}
	fmt.Fprintln(w)
	if s := rep.Snapshot; s != nil {
		fmt.Fprintf(w, "snapshot at %d tokens (drafter context: %v): %.1f MB; out %.1f ms (%.2f GB/s), back %.1f ms (%.2f GB/s); re-prefilling them took %.1f ms\n",
			s.Tokens, s.Drafter, float64(s.Bytes)/1e6, s.SnapshotSeconds*1e3, s.SnapshotGBs, s.RestoreSeconds*1e3, s.RestoreGBs, s.PrefillSeconds*1e3)
	}
	return nil
}
