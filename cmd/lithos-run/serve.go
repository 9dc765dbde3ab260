package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"lithos/runtime/backend"
	"lithos/runtime/generate"
	"lithos/runtime/serve"
)

// serveFlags are the flags of lithos-run serve.
type serveFlags struct {
	host, apiKey, backend, draftSampling string
	kvCache                              string
	port, context, queue, checkpoints    int
	prefillChunk                         int
	roundsPerCall                        int
	maxBodyMB                            int
	names, allowHosts                    []string
	noDraft, verbose                     bool
	confidenceStop, checkpointGB         float64
	readTimeout, writeTimeout            time.Duration
}

// newServe returns the serve command: cobra wiring of lithos/runtime/serve.
func newServe(g *genFlags) *cobra.Command {
	f := &serveFlags{}
	c := &cobra.Command{
		Use:   "serve BUNDLE",
		Short: "Serve the bundle to coding agents: OpenAI Chat Completions and Responses, Anthropic Messages",
		Long: "Serve the bundle's model over HTTP (docs/serving.md): POST /v1/chat/completions, /v1/responses,\n" +
			"/v1/messages and /v1/messages/count_tokens, GET /v1/models, /health and /metrics, with SSE streaming\n" +
			"and tool calls. One generation runs at a time; up to --queue more wait in FIFO order (beyond that:\n" +
			"429 with Retry-After). Prefix checkpoints (--checkpoints) let a request that extends a recent\n" +
			"conversation prefill only its new tokens. Listens on 127.0.0.1:8000 unless told otherwise; with\n" +
			"--api-key (or $" + apiKeyEnv + ") every /v1 request must send the key as \"Authorization: Bearer KEY\" or\n" +
			"\"x-api-key: KEY\"; without a key only the Host names localhost and IP addresses are served (--allow-host\n" +
			"adds names: DNS rebinding) and cross-origin browser requests are refused (docs/serving.md §9). Ctrl-C\n" +
			"stops it. Start an agent on it with `lithos-run claude|codex|opencode`.",
		Args:          cobra.ExactArgs(1),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd.Context(), g, args[0])
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.host, "host", "127.0.0.1", "address to listen on (0.0.0.0: every interface — give an --api-key then)")
	fl.IntVar(&f.port, "port", 8000, "TCP port")
	fl.StringVar(&f.apiKey, "api-key", "", "require this key on /v1 requests (default $"+apiKeyEnv+"; empty: no key)")
	fl.StringArrayVar(&f.names, "served-model-name", nil, "model id clients send (repeatable: the first is listed, the others are aliases; default: the bundle's directory name)")
	fl.IntVar(&f.context, "context", 0, fmt.Sprintf("context of one conversation in tokens (0 = min(%d, the model's max_position_embeddings))", serve.DefaultContext))
	fl.IntVar(&f.queue, "queue", serve.DefaultQueue, "requests that may wait while one generates")
	fl.IntVar(&f.checkpoints, "checkpoints", serve.DefaultCheckpoints, "prefix checkpoints kept (0 = none; docs/serving.md says what each costs)")
	fl.Float64Var(&f.checkpointGB, "checkpoint-gb", 0, "bound on the prefix checkpoints' memory together, in GB = 1e9 bytes (0 = no bound)")
	fl.IntVar(&f.prefillChunk, "prefill-chunk", 0, "prompt rows per prefill step (0 = 128)")
	fl.IntVar(&f.roundsPerCall, "rounds-per-call", 0, fmt.Sprintf("decode steps (speculative rounds) queued on the device per call, events streamed between calls (0 = %d on a GPU, 1 on the CPU; at most %d)", generate.DefaultRoundsPerCall, generate.MaxRoundsPerCall))
	fl.IntVar(&f.maxBodyMB, "max-body-mb", 0, "largest request body in MiB (0 = 1 MiB + 64 bytes per context token, at most 32: 3 MiB at 32768)")
	fl.StringArrayVar(&f.allowHosts, "allow-host", nil, "without an API key, also serve this Host name (repeatable; \"*\" = any; default: localhost and IP addresses only, against DNS rebinding)")
	fl.DurationVar(&f.readTimeout, "read-timeout", serve.DefaultReadTimeout, "longest time to read one request, headers and body (0 = no limit)")
	fl.DurationVar(&f.writeTimeout, "write-timeout", serve.DefaultWriteTimeout, "a client that reads none of its answer for this long has its request cancelled (0 = never)")
	fl.StringVar(&f.backend, "backend", "auto", "backend: "+strings.Join(generate.Backends, "|"))
	fl.BoolVar(&f.noDraft, "no-draft", false, "decode without the bundle's DSpark draft head")
	fl.StringVar(&f.draftSampling, "draft-sampling", "argmax", "at temperature > 0: argmax or sample (see lithos-run generate --help)")
	fl.Float64Var(&f.confidenceStop, "confidence-stop", 0, "verify only the leading drafts whose confidence reaches this (0 = off)")
	fl.StringVar(&f.kvCache, "kv-cache", backend.KVFloat32, "KV cache element type: f32 or bf16 (see lithos-run generate --help)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "debug logs on stderr")
	return c
}

// apiKeyEnv is the environment variable of the key (the launchers send it too).
const apiKeyEnv = "LITHOS_API_KEY"

// orNone maps a flag's 0 ("no limit") to serve.Options' negative value (0 there takes the
// default).
func orNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func (f *serveFlags) run(ctx context.Context, g *genFlags, dir string) error {
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
	switch {
	case f.port < 0 || f.port > 65535:
		return fmt.Errorf("--port %d: want 0 … 65535", f.port)
	case f.context < 0 || f.prefillChunk < 0 || f.queue < 0:
		return errors.New("--context, --prefill-chunk and --queue must not be negative")
	case f.roundsPerCall < 0 || f.roundsPerCall > generate.MaxRoundsPerCall:
		return fmt.Errorf("--rounds-per-call %d: want 0 (the default) to %d", f.roundsPerCall, generate.MaxRoundsPerCall)
	case f.maxBodyMB < 0 || f.maxBodyMB > 1<<20:
		return fmt.Errorf("--max-body-mb %d: want 1 … %d MiB (0 = from the context)", f.maxBodyMB, 1<<20)
	case f.readTimeout < 0 || f.writeTimeout < 0:
		return errors.New("--read-timeout and --write-timeout must not be negative")
	case f.draftSampling != "argmax" && f.draftSampling != "sample":
		return fmt.Errorf("--draft-sampling %q: want argmax or sample", f.draftSampling)
	case !(f.confidenceStop >= 0 && f.confidenceStop <= 1):
		return fmt.Errorf("--confidence-stop %v: want a number in [0, 1]", f.confidenceStop)
	case !(f.checkpointGB >= 0 && f.checkpointGB <= 1e6):
		return fmt.Errorf("--checkpoint-gb %v: want a number of GB in [0, 1e6] (0 = no bound)", f.checkpointGB)
	}
	if err := checkKVCache(f.kvCache); err != nil {
		return err
	}
	key := f.apiKey
	if key == "" {
		key = os.Getenv(apiKeyEnv)
	}
	checkpoints := f.checkpoints
	if checkpoints == 0 {
		checkpoints = -1 // serve.Options: 0 takes the default, a negative value keeps none
	}
	opt := serve.Options{
		Names: f.names, Context: f.context, Queue: f.queue, Checkpoints: checkpoints, APIKey: key,
		MaxBodyBytes: int64(f.maxBodyMB) << 20, PrefillChunk: f.prefillChunk, RoundsPerCall: f.roundsPerCall, Log: log,
		DraftSampling: f.draftSampling, ConfidenceStop: f.confidenceStop, KVCache: f.kvCache,
		CheckpointBytes: int64(f.checkpointGB * 1e9), AllowedHosts: f.allowHosts,
		ReadTimeout: orNone(f.readTimeout), WriteTimeout: orNone(f.writeTimeout),
	}
	if f.queue == 0 {
		opt.Queue = -1 // no waiting: 429 whenever a generation runs (the reference's behaviour)
	}
	addr := net.JoinHostPort(f.host, strconv.Itoa(f.port))
	ln, err := net.Listen("tcp", addr) // before loading: a taken port fails fast
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	defer ln.Close()
	s, err := serve.Open(ctx, dir, generate.Options{Backend: f.backend, NoDraft: f.noDraft, Log: log}, opt)
	if err != nil {
		return err
	}
	defer s.Close()
	if ip := net.ParseIP(f.host); key == "" && (ip == nil || !ip.IsLoopback()) {
		log.Warn("listening beyond loopback without an API key: anyone who reaches this port can use the model "+
			"(requests by a host name other than localhost need --allow-host NAME)", "host", f.host)
	}
	// Header, body and idle timeouts, header size (serve.Server.HTTPServer); each write of an
	// answer has its own deadline (--write-timeout) inside the handler.
	srv := s.HTTPServer()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(g.stderr, "lithos-run: serving %s (context %d tokens, backend %s) on http://%s — OpenAI base URL http://%s/v1\n",
		strings.Join(s.Names(), ", "), s.Context(), s.Backend(), ln.Addr(), ln.Addr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(g.stderr, "lithos-run: stopping")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close() // streams still open after 5 s are cut
	}
	return nil
}
