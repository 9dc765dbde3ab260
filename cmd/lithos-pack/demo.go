package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"lithos/convert"
	"lithos/hub"
	"lithos/hub/hubtest"
	"lithos/manifests"
	"lithos/pack"
	"lithos/runtime/generate"
	"lithos/runtime/sample"
)

// demoRepo is the embedded default: a tiny Qwen3.5-hybrid coder in the ModelOpt mixed layout
// (NVFP4 MLP and LM head, FP8 projections, BF16 rest), trained by tools/tinypair on the Python
// standard library; the model registry (manifests/registry.go) pairs it with its DSpark head
// lithos-test/tiny-coder-DSpark (BF16).
const demoRepo = "lithos-test/tiny-coder-NVFP4"

// demoPrompt is the fixed held-out code prompt (194 tokens): the end of parse() and the
// signature of literal_eval() from the standard library's ast.py, a file the pair never saw in
// training. It is goldens.json prompt_text of testdata/goldens/tinypair (tools/tinypair/run.py
// chose it; its rule is prompt_rule there), byte for byte, final newline included.
const demoPrompt = "    Pass type_comments=True to get back type comments where the syntax allows.\n" +
	"    \"\"\"\n" +
	"    flags = PyCF_ONLY_AST\n" +
	"    if type_comments:\n" +
	"        flags |= PyCF_TYPE_COMMENTS\n" +
	"    if feature_version is None:\n" +
	"        feature_version = -1\n" +
	"    elif isinstance(feature_version, tuple):\n" +
	"        major, minor = feature_version  # Should be a 2-tuple.\n" +
	"        if major != 3:\n" +
	"            raise ValueError(f\"Unsupported major version: {major}\")\n" +
	"        feature_version = minor\n" +
	"    # Else it should be an int giving the minor version for 3.x.\n" +
	"    return compile(source, filename, mode, flags,\n" +
	"                   _feature_version=feature_version)\n" +
	"\n" +
	"\n" +
	"def literal_eval(node_or_string):\n"

// demoMaxTokens is the default completion length: long enough for a stable tokens-per-round
// figure (2.35 on the held-out prompt at 128 tokens), short enough for the demo to finish in
// seconds on two cores.
const demoMaxTokens = 128

// demoOptions are the demo's inputs.
type demoOptions struct {
	// HubDir is the folder of repos served as a Hub (testdata/hub).
	HubDir string
	// MaxTokens is the completion length of both generations.
	MaxTokens int
	// Runs is how many times each mode is timed (alternating, after a warm-up); the fastest
	// run of each is reported.
	Runs int
	// Skip27B leaves out the remote audit of the header-only 27B.
	Skip27B bool
}

// demoRun is what the demo did, for its test: the snapshots fetched, the audit, the bundle's
// manifest and verify report, and the two generations of the held-out prompt.
type demoRun struct {
	TargetSnap, DraftSnap string
	Audit, Audit27B       *convert.Report
	Bundle                *manifests.Bundle
	Verify                *pack.VerifyReport
	PromptIDs             []int32
	// Spec is the generation with the DSpark drafter, Plain the one with --no-draft.
	// SpecRuns and PlainRuns are every timed run of each mode (after a warm-up, alternating);
	// Spec and Plain the fastest of each by decode rate.
	Spec, Plain         *generate.Result
	SpecRuns, PlainRuns []*generate.Result
}

func newDemoCmd() *cobra.Command {
	opt := demoOptions{HubDir: filepath.Join("testdata", "hub"), MaxTokens: demoMaxTokens, Runs: 1}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline on the embedded default pair: serve, fetch, audit, pack, verify, generate",
		Long: `demo runs lithos end to end, offline, on 127.0.0.1, on the trained tiny pair in testdata/hub
(` + demoRepo + ` and its DSpark draft head lithos-test/tiny-coder-DSpark):
  1. serves testdata/hub as a Hugging Face Hub (what "lithos-pack hub serve" does);
  2. fetches the target, and the draft head the model registry pairs with it, into a temporary
     HF cache (parallel, every file checked against the Hub's hashes);
  3. audits them: the bytes one decode pass reads, the draft block, the break-even acceptance;
  4. audits nvidia/Qwen3.8-27B-NVFP4 and its DSpark head remotely from header-only copies
     (sparse files served locally), reproducing the byte budget of the audit article;
  5. packs target + draft into a bundle (the BF16 head re-quantized to NVFP4) and verifies it
     against its sources (verify --deep);
  6. completes a held-out code prompt greedily on the CPU backend with the drafter, printing the
     text, tokens per round, acceptance per draft position and tok/s;
  7. does the same with --no-draft, checks that the tokens are identical, and says which was
     faster on this machine and why (each mode timed --runs times, alternating, after a warm-up).
Everything it writes goes to a temporary directory that is removed at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := runDemo(cmd.Context(), cmd.OutOrStdout(), opt)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.HubDir, "hub-dir", opt.HubDir, "folder of repos to serve (run from the repository root)")
	f.IntVar(&opt.MaxTokens, "max-tokens", opt.MaxTokens, "tokens to generate in each generation")
	f.IntVar(&opt.Runs, "runs", opt.Runs, "timed runs of each mode (alternating, after a warm-up; the fastest of each is reported)")
	f.BoolVar(&opt.Skip27B, "skip-27b", false, "leave out the remote audit of the header-only 27B")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, opt demoOptions) (*demoRun, error) {
	if _, err := os.Stat(filepath.Join(opt.HubDir, demoRepo)); err != nil {
		return nil, fmt.Errorf("demo: %s not found under %s: run from the repository root or pass --hub-dir", demoRepo, opt.HubDir)
	}
	if opt.MaxTokens < 1 || opt.Runs < 1 {
		return nil, fmt.Errorf("demo: --max-tokens %d, --runs %d: want at least 1 of each", opt.MaxTokens, opt.Runs)
	}
	work, err := os.MkdirTemp("", "lithos-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	run := &demoRun{}
	t0 := time.Now()
	var stages []string
	last := t0
	lap := func(name string) {
		stages = append(stages, fmt.Sprintf("%s %.1f s", name, time.Since(last).Seconds()))
		last = time.Now()
	}

	serve := func(root string) (string, func(), error) {
		srv, err := hubtest.New(root, hubtest.Options{})
		if err != nil {
			return "", nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { srv.Serve(sctx, ln); close(done) }()
		return "http://" + ln.Addr().String(), func() { stop(); <-done }, nil
	}

	// 1. serve
	fmt.Fprintf(out, "== 1. lithos-pack hub serve %s\n", opt.HubDir)
	url, stop, err := serve(opt.HubDir)
	if err != nil {
		return nil, err
	}
	defer stop()
	fmt.Fprintf(out, "a Hugging Face Hub on %s (HF_ENDPOINT for every step below; nothing else is contacted)\n\n", url)

	// 2. fetch target + the registry's draft head
	pairing, ok := manifests.DraftFor(demoRepo)
	if !ok {
		return nil, fmt.Errorf("demo: the model registry has no draft head for %s", demoRepo)
	}
	fmt.Fprintf(out, "== 2. lithos-pack fetch %s\n", demoRepo)
	cache := filepath.Join(work, "hf-cache")
	c := hub.NewClient(url, hub.WithCacheDir(cache))
	start := time.Now()
	if run.TargetSnap, err = c.Download(ctx, demoRepo, hub.DownloadOptions{}); err != nil {
		return nil, fmt.Errorf("fetch %s: %w", demoRepo, err)
	}
	if err := checkPairing(pairing, run.TargetSnap); err != nil {
		return nil, err
	}
	if run.DraftSnap, err = c.Download(ctx, pairing.Draft, hub.DownloadOptions{}); err != nil {
		return nil, fmt.Errorf("fetch draft head %s: %w", pairing.Draft, err)
	}
	fmt.Fprintf(out, "the model registry pairs it with its DSpark draft head %s: fetched too\n", pairing.Draft)
	fmt.Fprintf(out, "into a temporary HF cache, %s:\n", cache)
	for _, s := range []struct{ role, dir string }{{"target", run.TargetSnap}, {"draft ", run.DraftSnap}} {
		ents, _ := os.ReadDir(s.dir)
		rel, err := filepath.Rel(cache, s.dir)
		if err != nil {
			rel = s.dir
		}
		fmt.Fprintf(out, "  %s %s (%d files)\n", s.role, rel, len(ents))
	}
	fmt.Fprintf(out, "%.1f MB received in %v, every file checked against the Hub's sha256 (LFS) or git sha1\n",
		float64(c.BytesFetched())/1e6, time.Since(start).Round(time.Millisecond))
	if line := describePair(run.TargetSnap, run.DraftSnap); line != "" {
		fmt.Fprint(out, line)
	}
	lap("serve+fetch")

	// 3. audit the pair
	fmt.Fprintf(out, "\n== 3. lithos-pack audit %s --draft auto\n", demoRepo)
	if run.Audit, err = convert.RunAudit(ctx, nil, convert.AuditRequest{Target: run.TargetSnap, Draft: run.DraftSnap}); err != nil {
		return nil, err
	}
	writeAuditSummary(out, demoRepo, run.Audit)
	lap("audit")

	// 4. the 27B, remotely, from header-only copies
	if !opt.Skip27B {
		fmt.Fprintf(out, "\n== 4. lithos-pack audit nvidia/Qwen3.8-27B-NVFP4 --draft auto --remote (header-only copies, served locally)\n")
		if run.Audit27B, err = demoAudit27B(ctx, work, serve); err != nil {
			return nil, err
		}
		writeAuditSummary(out, "nvidia/Qwen3.8-27B-NVFP4 + LithosAI/Qwen3.8-27B-DSpark-NVFP4", run.Audit27B)
		lap("audit 27B")
	}

	// 5. pack + verify --deep
	fmt.Fprintf(out, "\n== 5. lithos-pack pack %s --draft auto -o tiny-coder.lithos && lithos-pack verify --deep tiny-coder.lithos\n", demoRepo)
	bundleDir := filepath.Join(work, "tiny-coder.lithos")
	start = time.Now()
	run.Bundle, err = pack.Build(ctx, pack.Options{Target: demoRepo, Draft: pack.DraftAuto, Hub: c, Out: bundleDir, ToolVersion: version, Log: quiet})
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", demoRepo, err)
	}
	m := run.Bundle
	var draftN int
	for _, t := range m.Tensors {
		if t.Model == manifests.ModelDraft {
			draftN++
		}
	}
	requant := "kept as stored"
	if m.Draft != nil && len(m.Draft.Requantized) > 0 {
		requant = "re-quantized from BF16 to NVFP4 (the default; --draft-format bf16 keeps it)"
	}
	fmt.Fprintf(out, "bundle: %d target + %d draft tensors, %.1f MB of weights, every tensor on a 16 KiB boundary, packed in %v\n",
		len(m.Tensors)-draftN, draftN, float64(m.Weights.Bytes)/1e6, time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(out, "draft head %s; %d tensors left out (multi-token prediction, activation scales)\n", requant, len(m.Skipped))
	run.Verify, err = pack.Verify(ctx, bundleDir, pack.VerifyOptions{Deep: true, CacheDir: cache, TempDir: work})
	if run.Verify == nil {
		return nil, fmt.Errorf("verify %s: %w", bundleDir, err)
	}
	if len(run.Verify.Problems) > 0 || err != nil {
		writeVerifyText(out, run.Verify)
		return nil, fmt.Errorf("verify %s: %d problems: %v", bundleDir, len(run.Verify.Problems), err)
	}
	if d := run.Verify.Deep; d == nil || d.NotCompared > 0 {
		writeVerifyText(out, run.Verify)
		return nil, fmt.Errorf("verify --deep %s: not every tensor was compared with its source", bundleDir)
	}
	fmt.Fprintf(out, "verify --deep: OK, all %d tensors re-hashed, unpacked and compared byte for byte with the fetched sources (the draft re-quantized again)\n",
		run.Verify.Deep.Compared)

	lap("pack+verify")

	// 6. generate with the drafter, 7. without
	runner, err := generate.OpenWith(ctx, bundleDir, generate.Options{Backend: "cpu", Log: quiet})
	if err != nil {
		return nil, err
	}
	defer runner.Close()
	req := generate.Request{Prompt: demoPrompt, MaxTokens: opt.MaxTokens, Sampling: sample.Params{TopP: 1}}
	if run.PromptIDs, err = runner.Tokens(&req); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\n== 6. lithos-run tiny-coder.lithos --prompt \"$HELD_OUT\" --max-tokens %d --temperature 0   (CPU backend, with the drafter)\n", opt.MaxTokens)
	fmt.Fprintf(out, "prompt, %d tokens: the end of parse() and the signature of literal_eval() from ast.py, a file held out of training:\n", len(run.PromptIDs))
	lines := strings.Split(strings.TrimSuffix(demoPrompt, "\n"), "\n")
	fmt.Fprintf(out, "  | [… %d lines]\n", len(lines)-4)
	for _, l := range lines[len(lines)-4:] {
		fmt.Fprintf(out, "  | %s\n", l)
	}
	// A short warm-up in each mode (the first generation of a process pays one-time costs),
	// then the two modes alternate, opt.Runs times each; the best decode rate of each is kept.
	warm := generate.Request{PromptIDs: run.PromptIDs[:min(32, len(run.PromptIDs))], MaxTokens: 24, Sampling: req.Sampling}
	for _, noDraft := range []bool{false, true} {
		warm.NoDraft = noDraft
		if _, err := runner.Generate(ctx, warm); err != nil {
			return nil, fmt.Errorf("demo: warm-up: %w", err)
		}
	}
	var specT, plainT time.Duration
	for i := 0; i < opt.Runs; i++ {
		for _, noDraft := range []bool{false, true} {
			req.NoDraft = noDraft
			t := time.Now()
			res, err := runner.Generate(ctx, req)
			if err != nil {
				return nil, err
			}
			if noDraft {
				plainT += time.Since(t)
				run.PlainRuns = append(run.PlainRuns, res)
			} else {
				specT += time.Since(t)
				run.SpecRuns = append(run.SpecRuns, res)
			}
		}
	}
	stages = append(stages, fmt.Sprintf("generate %.1f s", specT.Seconds()), fmt.Sprintf("generate --no-draft %.1f s", plainT.Seconds()))
	run.Spec, run.Plain = fastest(run.SpecRuns), fastest(run.PlainRuns)
	s, p := run.Spec, run.Plain
	fmt.Fprintf(out, "completion, %d tokens (%s):\n", len(s.Tokens), s.FinishReason)
	for _, l := range strings.Split(s.Text, "\n") {
		fmt.Fprintf(out, "  > %s\n", l)
	}
	sp := s.Speculative
	if sp == nil {
		return nil, fmt.Errorf("demo: bundle %s: the generation ran without a draft head", bundleDir)
	}
	if sp.Rounds == 0 {
		return run, fmt.Errorf("demo: --max-tokens %d: no decode round ran (the first token comes from the prefill): give more tokens", opt.MaxTokens)
	}
	fmt.Fprintf(out, "rounds: %d (each: the drafter proposes %d tokens, the target checks them in one pass of %d rows and adds one of its own)\n",
		sp.Rounds, sp.BlockSize, sp.BlockSize+1)
	fmt.Fprintf(out, "tokens per round: mean %.2f; rounds that committed 1…%d tokens: %s\n", sp.TokensPerRound, sp.BlockSize+1, joinInts(sp.Histogram))
	fmt.Fprintf(out, "draft k accepted (k = 1…%d), fraction of rounds: %s\n", sp.BlockSize, joinFloats(sp.Acceptance))
	fmt.Fprintf(out, "decode %.1f tok/s (%.1f ms drafting + %.1f ms verifying per round), prefill %.0f tok/s%s\n",
		s.DecodeTokPerS, sp.DraftMSPerRound, sp.VerifyMSPerRound, s.PrefillTokPerS, runsNote(run.SpecRuns))

	fmt.Fprintf(out, "\n== 7. the same with --no-draft (one token per target pass)\n")
	same := true
	for _, r := range append(slices.Clone(run.SpecRuns), run.PlainRuns...) {
		same = same && slices.Equal(r.Tokens, s.Tokens)
	}
	fmt.Fprintf(out, "decode %.1f tok/s (%.1f ms per pass), prefill %.0f tok/s%s\nthe same %d tokens as with the drafter: %v\n",
		p.DecodeTokPerS, 1000/p.DecodeTokPerS, p.PrefillTokPerS, runsNote(run.PlainRuns), len(p.Tokens), yesNo(same))
	if !same {
		return run, fmt.Errorf("demo: greedy decoding with the drafter gave %v, without it %v: speculative decoding must not change greedy output", s.Tokens, p.Tokens)
	}
	writeVerdict(out, run, runner)
	fmt.Fprintf(out, "\ndemo finished in %.1f s (%s). More: README.md (Results), docs/tinypair.md, docs/speculative.md.\n",
		time.Since(t0).Seconds(), strings.Join(stages, ", "))
	return run, nil
}

// demoAudit27B writes header-only copies of nvidia/Qwen3.8-27B-NVFP4 and its DSpark head
// (sparse files: 21.9 GB apparent, almost nothing on disk), serves them and audits them
// through range requests, as "lithos-pack audit REPO --remote" does against the real Hub.
func demoAudit27B(ctx context.Context, work string, serve func(string) (string, func(), error)) (*convert.Report, error) {
	root := filepath.Join(work, "synth-hub")
	for _, x := range []struct{ spec, repo string }{
		{"qwen3.8-27b-nvfp4", "nvidia/Qwen3.8-27B-NVFP4"},
		{"dspark-qwen3.8-27b-nvfp4", "LithosAI/Qwen3.8-27B-DSpark-NVFP4"},
	} {
		dir := filepath.Join(root, filepath.FromSlash(x.repo))
		if _, err := convert.SynthHeadersFromArg(ctx, x.spec, dir); err != nil {
			return nil, err
		}
		// The copies are holes: declare their LFS ids instead of hashing 22 GB of zeros.
		declared := map[string]string{}
		shards, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		for _, p := range shards {
			sum := sha256.Sum256([]byte(x.repo + "/" + filepath.Base(p)))
			declared[filepath.Base(p)] = hex.EncodeToString(sum[:])
		}
		org, name, _ := strings.Cut(x.repo, "/")
		if err := hubtest.WriteSettings(root, org, name, hubtest.RepoSettings{DeclaredSHA256: declared}); err != nil {
			return nil, err
		}
	}
	url, stop, err := serve(root)
	if err != nil {
		return nil, err
	}
	defer stop()
	c := hub.NewClient(url, hub.WithCacheDir(filepath.Join(work, "hf-cache-27b")))
	return convert.RunAudit(ctx, c, convert.AuditRequest{Target: "nvidia/Qwen3.8-27B-NVFP4", Draft: convert.DraftAuto,
		Remote: true, Context: 32768, Accept: 3.39, MaxContext: 32768})
}

// describePair prints what the fetched pair is, from the training logs tools/tinypair wrote
// into both repos (nothing when they are absent or unreadable: the demo runs on any pair).
func describePair(target, draft string) string {
	var tl struct {
		Corpus struct {
			Python  string `json:"python"`
			NTrain  int    `json:"n_train"`
			NHeld   int    `json:"n_heldout"`
			License string `json:"license"`
		} `json:"corpus"`
		Target struct {
			Params      int64   `json:"params"`
			HeldoutLoss float64 `json:"heldout_loss_fp32_dequantized"`
			Tokens      int     `json:"heldout_tokens_scored"`
		} `json:"target"`
	}
	var dl struct {
		Drafter struct {
			Params int64 `json:"params"`
		} `json:"drafter"`
		Acceptance struct {
			NVFP4 struct {
				Sequences      int     `json:"sequences"`
				TokensPerRound float64 `json:"tokens_per_round_mean"`
			} `json:"nvfp4_drafter"`
		} `json:"acceptance"`
	}
	if readJSONFile(filepath.Join(target, "training_log.json"), &tl) != nil || tl.Target.Params == 0 {
		return ""
	}
	py, _, _ := strings.Cut(tl.Corpus.Python, " ")
	s := fmt.Sprintf("the pair (tools/tinypair): a %.1f M-parameter target trained on %d files of the Python %s standard library (%d held out);\n"+
		"  held-out loss %.3f nats/token over %d tokens\n", float64(tl.Target.Params)/1e6, tl.Corpus.NTrain, py, tl.Corpus.NHeld,
		tl.Target.HeldoutLoss, tl.Target.Tokens)
	if readJSONFile(filepath.Join(draft, "training_log.json"), &dl) == nil && dl.Drafter.Params > 0 {
		s += fmt.Sprintf("  and a %.1f M-parameter DSpark head; on the GPU, on %d held-out prompts, it gave %.2f tokens per round (NVFP4 head)\n",
			float64(dl.Drafter.Params)/1e6, dl.Acceptance.NVFP4.Sequences, dl.Acceptance.NVFP4.TokensPerRound)
	}
	return s
}

func readJSONFile(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return json.NewDecoder(io.LimitReader(f, 16<<20)).Decode(v)
}

// writeAuditSummary prints the few figures of an audit a newcomer needs; "lithos-pack audit"
// prints the full tables.
func writeAuditSummary(w io.Writer, name string, r *convert.Report) {
	md := r.Model
	fmt.Fprintf(w, "%s: %s, %d layers (%d Gated DeltaNet, %d full attention), hidden %d, vocabulary %d\n",
		name, md.Architecture, md.Layers, md.GDNLayers, md.FullAttentionLayers, md.HiddenSize, md.VocabSize)
	how := "from the fetched snapshot"
	if r.Source.Kind == "remote" {
		how = fmt.Sprintf("through range requests (%s fetched)", fmtBytes(r.Source.BytesFetched))
	}
	fmt.Fprintf(w, "%s; %s of tensors, %d safetensors header(s) read %s\n", md.Quantization, fmtBytes(r.TensorBytes), len(r.Source.Files), how)
	var parts []string
	for _, g := range r.Groups {
		if g.ID.PerPass() && g.Bytes > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", shortGroup(g), fmtBytes(g.Bytes)))
		}
	}
	fmt.Fprintf(w, "weights read on every decode pass: %s (%s)\n", fmtBytes(r.PerPassWeightsBytes), strings.Join(parts, ", "))
	if c := r.Ceilings; c != nil {
		fmt.Fprintf(w, "ceiling on %s at %g GB/s: %s per pass -> %.1f tok/s", c.ChipName, c.BandwidthGBps, fmtBytes(c.ShortContext.PassBytes), c.ShortContext.TokPerS)
		if a := c.AtContext; a != nil {
			fmt.Fprintf(w, "; at %d tokens of context %s -> %.1f tok/s", a.ContextTokens, fmtBytes(a.PassBytes), a.TokPerS)
		}
		fmt.Fprintln(w)
	}
	if d := r.Draft; d != nil {
		fmt.Fprintf(w, "DSpark head: %s, block of %d, Markov rank %d, taps from target layers %v\n",
			fmtBytes(d.FileBytes), d.BlockSize, d.MarkovRank, d.TargetLayerIDs)
		for _, g := range d.Groups {
			if g.ID == convert.GroupDraftMLP && strings.Contains(g.Format, "BF16") {
				fmt.Fprintln(w, "(the head as fetched, in BF16; pack re-quantizes it to NVFP4: 4.5 bits per weight instead of 16)")
				break
			}
		}
		if c := r.Ceilings; c != nil && c.ShortContext.Round != nil {
			rd := c.ShortContext.Round
			fmt.Fprintf(w, "a round (draft block %s + verify pass %s) pays off above %.2f tokens per round", fmtBytes(rd.DraftBlockBytes), fmtBytes(rd.VerifyPassBytes), rd.BreakEvenAccept)
			if rd.AcceptTokens > 0 {
				fmt.Fprintf(w, "; at %g tokens per round: %.1f tok/s", rd.AcceptTokens, rd.TokPerS)
			}
			fmt.Fprintln(w)
		}
	}
	if n := len(r.Warnings) + len(r.Unknown); n > 0 {
		fmt.Fprintf(w, "%d warning(s):\n", n)
		for _, x := range r.Warnings {
			fmt.Fprintf(w, "  %s\n", x)
		}
		for _, t := range r.Unknown {
			fmt.Fprintf(w, "  unclassified tensor %s\n", t.Name)
		}
	} else {
		fmt.Fprintln(w, "no warnings: every tensor classified and budgeted")
	}
}

// writeVerdict says which generation was faster on this machine and why, from the two runs'
// own timings, and what a memory-bound device would gain from the bytes each pass reads.
func writeVerdict(w io.Writer, run *demoRun, runner *generate.Runner) {
	s, p, sp := run.Spec, run.Plain, run.Spec.Speculative
	if s.DecodeTokPerS <= 0 || p.DecodeTokPerS <= 0 {
		fmt.Fprintf(w, "\n(too few tokens decoded to compare speeds: give --max-tokens 32 or more)\n")
		return
	}
	ratio := s.DecodeTokPerS / p.DecodeTokPerS
	fmt.Fprintf(w, "\n== Which was faster on this machine (%d cores, %s/%s, CPU backend)\n", runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	switch {
	case ratio > 0.95 && ratio < 1.05:
		fmt.Fprintf(w, "NEITHER, within timing noise: %.1f tok/s with the drafter, %.1f tok/s without (%.2fx).\n", s.DecodeTokPerS, p.DecodeTokPerS, ratio)
	case ratio >= 1.05:
		fmt.Fprintf(w, "WITH the drafter: %.1f tok/s vs %.1f tok/s without, %.2fx.\n", s.DecodeTokPerS, p.DecodeTokPerS, ratio)
	default:
		fmt.Fprintf(w, "WITHOUT the drafter: %.1f tok/s vs %.1f tok/s with it; the drafter made decoding %.2fx as fast.\n", p.DecodeTokPerS, s.DecodeTokPerS, ratio)
	}
	step := 1000 / p.DecodeTokPerS // ms per plain pass
	verify, draft := sp.VerifyMSPerRound/step, sp.DraftMSPerRound/step
	fmt.Fprintf(w, "Why: a round committed %.2f tokens and took the time of %.1f plain passes\n"+
		"(verifying %d rows %.1f, %.0f ms; drafting %.1f, %.0f ms): %.2f tokens / %.1f passes = %.2fx, the measured ratio up to timing noise.\n",
		sp.TokensPerRound, verify+draft, sp.BlockSize+1, verify, sp.VerifyMSPerRound, draft, sp.DraftMSPerRound,
		sp.TokensPerRound, verify+draft, sp.TokensPerRound/(verify+draft))
	bound := ""
	if verify >= 1.5 {
		bound = ": on this CPU the work grows with the rows (compute-bound)"
	}
	fmt.Fprintf(w, "Verifying %d rows cost %.1fx one row here, where a memory-bound device pays about 1x%s.\n", sp.BlockSize+1, verify, bound)
	tb, db := generate.PassBytes(runner.Bundle.Manifest)
	if tb > 0 {
		gain := sp.TokensPerRound * float64(tb) / float64(tb+db)
		fmt.Fprintf(w, "On a device bound by memory bandwidth (the GPU backends' case) a pass costs the bytes it reads: %s per token\n"+
			"plain, %s per round (target %s + drafter %s) for %.2f tokens with the drafter: up to %.2fx faster (docs/speculative.md §6).\n",
			fmtBytes(tb), fmtBytes(tb+db), fmtBytes(tb), fmtBytes(db), sp.TokensPerRound, gain)
	}
}

// shortGroup is a tensor group's name in one or two words.
func shortGroup(g convert.GroupReport) string {
	switch g.ID {
	case convert.GroupMLPCodes:
		return "MLP"
	case convert.GroupMLPBlockScales:
		return "MLP block scales"
	case convert.GroupGDNProj:
		return "DeltaNet projections"
	case convert.GroupAttnProj:
		return "attention projections"
	case convert.GroupSmall:
		return "norms and small tensors"
	case convert.GroupVocabHead:
		return "LM head"
	}
	return g.Label
}

// fastest returns the result with the highest decode rate.
func fastest(rs []*generate.Result) *generate.Result {
	best := rs[0]
	for _, r := range rs[1:] {
		if r.DecodeTokPerS > best.DecodeTokPerS {
			best = r
		}
	}
	return best
}

// runsNote lists the decode rates of several runs ("" for one).
func runsNote(rs []*generate.Result) string {
	if len(rs) < 2 {
		return " (one timed run after a warm-up; --runs N for the best of N)"
	}
	x := make([]string, len(rs))
	for i, r := range rs {
		x[i] = fmt.Sprintf("%.1f", r.DecodeTokPerS)
	}
	return fmt.Sprintf("; best of %d runs: %s tok/s", len(rs), strings.Join(x, ", "))
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.3f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d bytes", n)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " ")
}

func joinFloats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}
