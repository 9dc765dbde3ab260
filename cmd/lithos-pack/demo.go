package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"lithos/convert"
	"lithos/hub"
	"lithos/hub/hubtest"
	"lithos/pack"
	"lithos/runtime/generate"
	"lithos/runtime/sample"
)

// demoRepo is the embedded default: a tiny ModelOpt-style Qwen3.5 checkpoint
// (FP8 + NVFP4 + BF16, two shards) made by tools/mkfixtures.
const demoRepo = "lithos-test/tiny-sharded"

func newDemoCmd() *cobra.Command {
	var hubDir string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the pipeline on the embedded default: serve testdata/hub, fetch, audit",
		Long: `demo runs what lithos-pack does today end to end, offline, on 127.0.0.1:
  1. serves testdata/hub as a Hugging Face Hub (what "lithos-pack hub serve" does);
  2. fetches ` + demoRepo + ` from it into a temporary HF cache (parallel, verified);
  3. audits the fetched checkpoint;
  4. writes a header-only copy of nvidia/Qwen3.8-27B-NVFP4 and its DSpark head (sparse files,
     21.9 GB apparent, almost nothing on disk), serves it, and audits it remotely through range
     requests, reproducing the byte budget of the article in ../shared/reference;
  5. packs the fetched checkpoint into a bundle and verifies it;
  6. loads the bundle on the CPU backend and generates a few tokens.
Everything it writes goes to a temporary directory that is removed at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), hubDir)
		},
	}
	cmd.Flags().StringVar(&hubDir, "hub-dir", filepath.Join("testdata", "hub"), "folder of repos to serve (run from the repository root)")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, hubDir string) error {
	if _, err := os.Stat(filepath.Join(hubDir, demoRepo)); err != nil {
		return fmt.Errorf("demo: %s not found under %s: run from the repository root or pass --hub-dir", demoRepo, hubDir)
	}
	work, err := os.MkdirTemp("", "lithos-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

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

	fmt.Fprintf(out, "== 1. serve %s as a Hub\n", hubDir)
	url, stop, err := serve(hubDir)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(out, "HF_ENDPOINT=%s\n\n", url)

	fmt.Fprintf(out, "== 2. lithos-pack fetch %s\n", demoRepo)
	c := hub.NewClient(url, hub.WithCacheDir(filepath.Join(work, "hf-cache")))
	start := time.Now()
	snap, err := c.Download(ctx, demoRepo, hub.DownloadOptions{})
	if err != nil {
		return err
	}
	ents, _ := os.ReadDir(snap)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	fmt.Fprintf(out, "%s\n%d files, %d bytes received in %v, each checked against the Hub's sha256/git sha1:\n  %s\n\n",
		snap, len(ents), c.BytesFetched(), time.Since(start).Round(time.Millisecond), strings.Join(names, "\n  "))

	fmt.Fprintf(out, "== 3. lithos-pack audit %s\n", demoRepo)
	r, err := convert.RunAudit(ctx, nil, convert.AuditRequest{Target: snap, Draft: ""})
	if err != nil {
		return err
	}
	if err := r.WriteText(out); err != nil {
		return err
	}

	fmt.Fprintf(out, "\n== 4. audit nvidia/Qwen3.8-27B-NVFP4 + its DSpark head remotely (header-only copies)\n")
	synthRoot := filepath.Join(work, "synth-hub")
	for _, x := range []struct{ spec, repo string }{
		{"qwen3.8-27b-nvfp4", "nvidia/Qwen3.8-27B-NVFP4"},
		{"dspark-qwen3.8-27b-nvfp4", "LithosAI/Qwen3.8-27B-DSpark-NVFP4"},
	} {
		dir := filepath.Join(synthRoot, filepath.FromSlash(x.repo))
		if _, err := convert.SynthHeadersFromArg(ctx, x.spec, dir); err != nil {
			return err
		}
		// The copies are holes: declare their LFS ids instead of hashing 22 GB of zeros.
		declared := map[string]string{}
		shards, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		for _, p := range shards {
			sum := sha256.Sum256([]byte(x.repo + "/" + filepath.Base(p)))
			declared[filepath.Base(p)] = hex.EncodeToString(sum[:])
		}
		org, name, _ := strings.Cut(x.repo, "/")
		if err := hubtest.WriteSettings(synthRoot, org, name, hubtest.RepoSettings{DeclaredSHA256: declared}); err != nil {
			return err
		}
	}
	url2, stop2, err := serve(synthRoot)
	if err != nil {
		return err
	}
	defer stop2()
	c2 := hub.NewClient(url2, hub.WithCacheDir(filepath.Join(work, "hf-cache")))
	r, err = convert.RunAudit(ctx, c2, convert.AuditRequest{Target: "nvidia/Qwen3.8-27B-NVFP4", Draft: convert.DraftAuto,
		Remote: true, Context: 32768, Accept: 3.39, MaxContext: 32768})
	if err != nil {
		return err
	}
	if err := r.WriteText(out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n== 5. lithos-pack pack %s\n", demoRepo)
	bundleDir := filepath.Join(work, "tiny.lithos")
	m, err := pack.Build(ctx, pack.Options{Target: snap, Out: bundleDir, ToolVersion: version})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %d tensors, %d bytes of weights (every tensor on a 16 KiB boundary), %d skipped (vision, MTP, activation scales)\n",
		bundleDir, len(m.Tensors), m.Weights.Bytes, len(m.Skipped))
	rep, err := pack.Verify(ctx, bundleDir, pack.VerifyOptions{})
	if err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("verify %s: %d problems, first: %v", bundleDir, len(rep.Problems), rep.Problems[0])
	}
	fmt.Fprintf(out, "verify: sizes, alignment and the sha256 of all %d tensors OK\n", rep.Tensors)

	fmt.Fprintf(out, "\n== 6. lithos-run generate (CPU backend, greedy, 12 tokens; the fixture's weights are random, so the text is too)\n")
	runner, err := generate.Open(ctx, bundleDir, "cpu", nil)
	if err != nil {
		return err
	}
	defer runner.Close()
	res, err := runner.Generate(ctx, generate.Request{Prompt: "def fib(n):", MaxTokens: 12, Sampling: sample.Params{TopP: 1}})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "prompt %d tokens -> %d tokens %v (%s), %q\nprefill %.0f tok/s, decode %.0f tok/s\n",
		res.PromptTokens, len(res.Tokens), res.Tokens, res.FinishReason, res.Text, res.PrefillTokPerS, res.DecodeTokPerS)
	fmt.Fprintf(out, "\nSpeculative decoding with a trained DSpark pair, serving, CUDA and Metal are the next issues (README.md).\n")
	return nil
}
