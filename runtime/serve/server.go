package serve

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	pathpkg "path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"lithos/runtime/backend"
	"lithos/runtime/chat"
	"lithos/runtime/generate"
	"lithos/runtime/model"
	"lithos/runtime/sample"
	"lithos/runtime/tokenizer"
	"lithos/runtime/toolcall"
)

// Model is what a server serves: a loaded target with its tokenizer, chat template and EOS ids
// (what generate.Open reads from a bundle).
type Model struct {
	Target    backend.Target
	Tokenizer *tokenizer.Tokenizer
	Chat      *chat.Config
	// EOS are the ids that end a generation (generation_config.json's eos_token_id).
	EOS []int32
	// MaxContext is the model's max_position_embeddings (0: unknown).
	MaxContext int
	// Draft is the bundle's draft head bound to Target (nil: decode one token per step);
	// every session decodes in speculative rounds with it (docs/speculative.md).
	Draft backend.Drafter
}

// Options configure a Server. Zero values take the defaults named.
type Options struct {
	// Names are the model ids clients may ask for: the first is the one /v1/models lists,
	// the others are aliases. At least one.
	Names []string
	// Context is the positions (prompt and output) of one sequence. Default
	// min(DefaultContext, the model's max_position_embeddings).
	Context int
	// Queue is the most requests that may wait for the model while one runs (0:
	// DefaultQueue; negative: none may wait, as in the reference server); one more gets 429
	// with Retry-After.
	Queue int
	// Checkpoints is the most prefix checkpoints kept (docs/serving.md §4); 0 takes
	// DefaultCheckpoints, a negative value keeps none.
	Checkpoints int
	// CheckpointBytes bounds the memory of the prefix checkpoints together (bytes; 0: no
	// bound, Checkpoints alone limits them): the least recently used ones are dropped to stay
	// within it, and a checkpoint larger than it is not kept. A parked session counts
	// StateBytes(context) plus its drafter's context cache when the drafter reports it
	// (cpu.DSpark.StateBytes), a snapshot its Bytes (docs/serving.md §4 gives both for the
	// 27B). The running session is not counted.
	CheckpointBytes int64
	// APIKey, when set, must come with every /v1 request as "Authorization: Bearer KEY" or
	// "x-api-key: KEY".
	APIKey string
	// AllowedHosts are the Host names (without port, case-insensitive) served besides
	// "localhost" and IP literals while no APIKey is set; others get 403 (DNS rebinding,
	// docs/serving.md §9). "*" allows every name.
	AllowedHosts []string
	// MaxBodyBytes bounds a request body (bytes; default MaxBodyBytesFor(Context)).
	MaxBodyBytes int64
	// ReadTimeout bounds reading one request, headers and body, in HTTPServer (default
	// DefaultReadTimeout; negative: none).
	ReadTimeout time.Duration
	// WriteTimeout bounds every write of an answer (each SSE frame, a JSON body): a client
	// that reads nothing for this long has its request cancelled (default
	// DefaultWriteTimeout; negative: none).
	WriteTimeout time.Duration
	// Prepare is the most requests rendered and tokenized at once (default GOMAXPROCS);
	// Prepare + Queue more may wait for a slot, beyond that 429 (docs/serving.md §9).
	Prepare int
	// PrefillChunk is the rows per prefill step (0: the backend's default).
	PrefillChunk int
	// RoundsPerCall is the most decode steps (speculative rounds) queued on the device per
	// Session.Decode call, in [0, generate.MaxRoundsPerCall]; events are streamed between
	// calls (generate.Request.RoundsPerCall has the trade-off). 0: 1 in New, the backend's
	// default in Open (Runner.RoundsPerCall: 4 on a GPU, 1 on the CPU).
	RoundsPerCall int
	// KeepAlive is the interval of SSE keep-alive comments while a stream waits (default 5 s,
	// lithos-metal.md §7.6).
	KeepAlive time.Duration
	// RetryAfter is the Retry-After of a 429, in seconds (default 1).
	RetryAfter int
	// DraftSampling and ConfidenceStop are the sessions' speculative-decoding settings
	// (backend.SessionOptions; used only with a draft head).
	DraftSampling  string
	ConfidenceStop float64
	// KVCache is the sessions' KV cache element type (backend.SessionOptions.KVCache: "" or
	// backend.KVFloat32, backend.KVBF16).
	KVCache string
	// Log receives the server's logs (slog.Default when nil).
	Log *slog.Logger
}

// Defaults and limits of Options and requests.
const (
	DefaultContext     = 32768 // lithos-metal.md §7.1's --max-context
	DefaultQueue       = 16
	DefaultCheckpoints = 2 // the reference keeps 2 (lithos-metal.md §6.5)
	// MaxMaxBodyBytes caps the body limit MaxBodyBytesFor derives from the context (bytes).
	MaxMaxBodyBytes    = 32 << 20
	MaxStopSequences   = 16
	MaxStopBytes       = 1 << 10 // longest stop sequence (bytes)
	DefaultReadTimeout = 60 * time.Second
	// DefaultWriteTimeout is how long one write may wait for a client that reads nothing.
	DefaultWriteTimeout = 60 * time.Second
	// countFactor: count_tokens tokenizes at most countFactor × context tokens of a prompt
	// (exact counts up to there, 400 context_length_exceeded beyond); a generation request
	// stops at the context.
	countFactor = 16
)

// MaxBodyBytesFor is the default body limit for a context of n tokens: 1 MiB (tool
// definitions, JSON structure) plus 64 bytes per token — about ten times what a token of
// text takes in a JSON string, \u escapes included — at most MaxMaxBodyBytes. A body over
// it would hold a prompt far beyond the context (refused with 400 anyway), so 413 costs a
// client nothing it could have had; at the default context it is 3 MiB.
func MaxBodyBytesFor(n int) int64 {
	return min(int64(1<<20)+64*int64(n), MaxMaxBodyBytes)
}

// Server answers the OpenAI Chat Completions and Responses APIs and the Anthropic Messages API
// for one model, running one generation at a time from a bounded FIFO queue.
type Server struct {
	opt     Options
	names   []string
	tok     *tokenizer.Tokenizer
	render  *renderer
	eos     []int32
	context int
	eng     *engine
	m       *metrics
	mux     *http.ServeMux
	created int64
	log     *slog.Logger

	prep     chan struct{} // prompt preparation slots (Options.Prepare)
	prepWait atomic.Int64  // requests waiting for a slot
	prepRoom int64         // most that may wait
	csrf     *http.CrossOriginProtection
	hosts    map[string]bool // Options.AllowedHosts, lower case

	closeOnce sync.Once
	closer    io.Closer // what Open opened (nil for New)
	backend   string    // the backend's name (Open; "" for New)
}

// Backend returns the name of the backend the model runs on ("cpu", "cuda", …), as Open chose
// it; "" for a server made by New.
func (s *Server) Backend() string { return s.backend }

// New starts a server for m (its worker goroutine runs until Close). Errors: no names, a model
// without a tokenizer or chat template, a chat template that does not parse, options out of
// range.
func New(m Model, opt Options) (*Server, error) {
	if len(opt.Names) == 0 || slices.Contains(opt.Names, "") {
		return nil, errors.New("serve: give the model at least one non-empty name")
	}
	if m.Target == nil {
		return nil, errors.New("serve: no target model")
	}
	if m.Tokenizer == nil {
		return nil, errors.New("serve: the bundle has no tokenizer.json, which the chat APIs need")
	}
	if m.Chat == nil {
		return nil, errors.New("serve: the bundle has no tokenizer_config.json with a chat template, which the chat APIs need")
	}
	r, err := newRenderer(m.Chat)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if opt.Context == 0 {
		opt.Context = DefaultContext
		if m.MaxContext > 0 {
			opt.Context = min(opt.Context, m.MaxContext)
		}
	}
	if opt.Context < 2 || opt.Context > generate.MaxContext {
		return nil, fmt.Errorf("serve: context %d: want 2 … %d tokens", opt.Context, generate.MaxContext)
	}
	if opt.Queue == 0 {
		opt.Queue = DefaultQueue
	}
	if opt.Queue < 0 {
		opt.Queue = 0
	}
	if opt.Checkpoints == 0 {
		opt.Checkpoints = DefaultCheckpoints
	}
	if opt.CheckpointBytes < 0 {
		return nil, fmt.Errorf("serve: checkpoint budget %d bytes must not be negative", opt.CheckpointBytes)
	}
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = MaxBodyBytesFor(opt.Context)
	}
	if opt.ReadTimeout == 0 {
		opt.ReadTimeout = DefaultReadTimeout
	}
	if opt.WriteTimeout == 0 {
		opt.WriteTimeout = DefaultWriteTimeout
	}
	if opt.Prepare <= 0 {
		opt.Prepare = max(1, runtime.GOMAXPROCS(0))
	}
	if opt.PrefillChunk < 0 {
		return nil, fmt.Errorf("serve: prefill chunk %d must not be negative", opt.PrefillChunk)
	}
	if opt.RoundsPerCall < 0 || opt.RoundsPerCall > generate.MaxRoundsPerCall {
		return nil, fmt.Errorf("serve: rounds per call %d: want 0 (the default) to %d", opt.RoundsPerCall, generate.MaxRoundsPerCall)
	}
	if opt.KeepAlive <= 0 {
		opt.KeepAlive = 5 * time.Second
	}
	if opt.RetryAfter <= 0 {
		opt.RetryAfter = 1
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	s := &Server{
		opt: opt, names: opt.Names, tok: m.Tokenizer, render: r, eos: m.EOS, context: opt.Context,
		m: newMetrics(), created: time.Now().Unix(), log: opt.Log,
		prep: make(chan struct{}, opt.Prepare), prepRoom: int64(opt.Prepare + opt.Queue), csrf: http.NewCrossOriginProtection(),
		hosts: map[string]bool{},
	}
	for _, h := range opt.AllowedHosts {
		s.hosts[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	cfg := m.Target.Config()
	sessionBytes := StateBytes(&cfg, opt.Context)
	if d, ok := m.Draft.(interface{ StateBytes(capacity int) int64 }); ok { // cpu.DSpark
		sessionBytes += d.StateBytes(opt.Context)
	}
	s.eng = &engine{
		target: m.Target, draft: m.Draft, draftSamp: opt.DraftSampling, confStop: opt.ConfidenceStop, kvCache: opt.KVCache, eos: m.EOS, context: opt.Context, prefillChunk: opt.PrefillChunk,
		perCall: max(opt.RoundsPerCall, 1), maxEntries: max(opt.Checkpoints, 0), maxBytes: opt.CheckpointBytes, sessionBytes: sessionBytes,
		log: opt.Log, q: newQueue(opt.Queue), m: s.m,
	}
	// Check the session options once, and probe whether the backend's sessions can copy
	// their state (with the drafter's context), on a one-position session.
	probe, err := m.Target.NewSession(backend.SessionOptions{Capacity: 1, EOS: m.EOS, Sampling: sample.Params{TopP: 1},
		Drafter: m.Draft, DraftSampling: opt.DraftSampling, ConfidenceStop: opt.ConfidenceStop, KVCache: opt.KVCache})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	snaps := false
	if sn, ok := probe.(backend.Snapshotter); ok {
		_, err := sn.Snapshot()
		snaps = err == nil
		if err != nil {
			s.log.Info("prefix snapshots off: the sessions cannot copy their state", "err", err)
		}
	}
	s.eng.snapshots.Store(snaps)
	s.m.checkpointBudget.Store(opt.CheckpointBytes)
	probe.Close()
	s.eng.start()
	s.routes()
	return s, nil
}

// Open opens the bundle in dir (generate.OpenWith: the backend, and the draft head unless
// ro.NoDraft) and starts a server for it; the bundle's directory name (without ".lithos") is
// the model's name unless opt.Names gives names. With --backend auto the backend chosen must
// run the sessions of opt (its draft rule and confidence stop, at a temperature > 0, which
// requests may ask for) unless ro.Session says otherwise; Open logs the backend it runs on.
// Close releases the bundle.
func Open(ctx context.Context, dir string, ro generate.Options, opt Options) (*Server, error) {
	if ro.Log == nil {
		ro.Log = opt.Log
	}
	if ro.Session == nil {
		ro.Session = &backend.SessionOptions{Sampling: sample.Params{Temperature: 1, TopP: 1},
			DraftSampling: opt.DraftSampling, ConfidenceStop: opt.ConfidenceStop, PrefillChunk: opt.PrefillChunk, KVCache: opt.KVCache}
	}
	r, err := generate.OpenWith(ctx, dir, ro)
	if err != nil {
		return nil, err
	}
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	log.Info("model loaded", "bundle", dir, "backend", r.Backend.Name(), "draft", r.Draft != nil)
	if len(opt.Names) == 0 {
		opt.Names = []string{BundleName(dir)}
	}
	if opt.RoundsPerCall == 0 {
		opt.RoundsPerCall = r.RoundsPerCall(0)
	}
	s, err := New(Model{Target: r.Target, Tokenizer: r.Tokenizer, Chat: r.Chat, EOS: r.EOS, MaxContext: r.MaxContext, Draft: r.Draft}, opt)
	if err != nil {
		r.Close()
		return nil, err
	}
	s.closer = r
	s.backend = r.Backend.Name()
	return s, nil
}

// BundleName is the default model name of a bundle directory: its base name without a
// ".lithos" suffix.
func BundleName(dir string) string {
	base := filepath.Base(filepath.Clean(dir))
	if n := strings.TrimSuffix(base, ".lithos"); n != "" {
		return n
	}
	return base
}

// StateBytes is the memory of one sequence's state on the CPU backend for context positions
// (runtime/model.State, float32 whatever SessionOptions.KVCache; a GPU session with a BF16
// cache holds half the KV bytes, so for it this over-counts, on the safe side): per attention
// layer K and V rows of KVHeads·HeadDim (8·KVHeads·HeadDim bytes per position), per GDN layer
// two slots of the recurrent state [VHeads, KDim, VDim] and of the conv state [ConvKernel−1,
// ConvDim]. It is what a parked session holds; a snapshot at P positions holds
// model.SnapshotBytes(c, P) (one GDN slot, P KV rows) plus the drafter's context rows.
func StateBytes(c *model.Config, context int) int64 {
	kv := int64(c.Count(model.Attention)) * int64(context) * int64(c.KVHeads*c.HeadDim) * 8
	gdn := int64(c.Count(model.GDN)) * 2 * int64(c.VHeads*c.KDim*c.VDim+(c.ConvKernel-1)*c.ConvDim()) * 4
	return kv + gdn
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveRoot) }

// HTTPServer returns an http.Server for Handler with the connection limits a server facing
// untrusted clients needs: headers within 10 s and at most 64 KiB, the whole request within
// Options.ReadTimeout, idle keep-alive connections closed after 2 minutes. It sets no
// WriteTimeout (it would cut long streams): Handler bounds each write instead
// (Options.WriteTimeout).
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       max(s.opt.ReadTimeout, 0),
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// Names returns the served model names (the first is the listed id).
func (s *Server) Names() []string { return slices.Clone(s.names) }

// Context returns the context length of a sequence (tokens).
func (s *Server) Context() int { return s.context }

// Close stops the worker after the generation it runs and releases the checkpoints and what
// Open opened. Requests still waiting get no answer; close the http.Server first.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.eng.close()
		if s.closer != nil {
			err = s.closer.Close()
		}
	})
	return err
}

// serveRoot answers what http.ServeMux would answer in plain text or HTML — a CONNECT
// request, a path that is not clean (ServeMux redirects it with an HTML body) — in the API's
// JSON shape, and passes the rest to the mux.
func (s *Server) serveRoot(w http.ResponseWriter, r *http.Request) {
	f := flavorOpenAI
	if strings.HasPrefix(r.URL.Path, "/v1/messages") {
		f = flavorAnthropic
	}
	var aerr *apiError
	if r.Method == http.MethodConnect {
		aerr = &apiError{status: http.StatusMethodNotAllowed, typ: typeInvalidRequest,
			msg: "CONNECT: this server is not a proxy (see GET /v1/models, POST /v1/chat/completions, /v1/responses, /v1/messages)"}
	} else if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
		u := url.URL{Path: clean, RawQuery: r.URL.RawQuery}
		w.Header().Set("Location", u.String())
		aerr = &apiError{status: http.StatusTemporaryRedirect, typ: typeInvalidRequest, code: "moved",
			msg: fmt.Sprintf("the path %q is not canonical: use %q", r.URL.Path, clean)}
	}
	if aerr == nil {
		s.mux.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Connection", "close") // the body, if any, is not read
	aerr.write(w, f)
	s.m.request("other", aerr.status)
}

// cleanPath is http.ServeMux's canonical form of a path: rooted, without "." and ".."
// elements or repeated slashes, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := pathpkg.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// routes registers the endpoints. Each path also has a method-less pattern that answers 405
// in the API's error shape (http.ServeMux would answer in plain text).
func (s *Server) routes() {
	mux := http.NewServeMux()
	handle := func(method, path, endpoint string, f flavor, auth bool, h func(w http.ResponseWriter, r *http.Request) *apiError) {
		mux.HandleFunc(method+" "+path, s.wrap(endpoint, f, auth, h))
		mux.HandleFunc(path, s.wrap(endpoint, f, false, func(w http.ResponseWriter, r *http.Request) *apiError {
			w.Header().Set("Allow", method)
			return &apiError{status: http.StatusMethodNotAllowed, typ: typeInvalidRequest,
				msg: fmt.Sprintf("%s %s: use %s", r.Method, path, method)}
		}))
	}
	handle("POST", "/v1/chat/completions", "chat", flavorOpenAI, true, s.chatCompletions)
	handle("POST", "/v1/responses", "responses", flavorOpenAI, true, s.responses)
	handle("POST", "/v1/messages", "messages", flavorAnthropic, true, s.messages)
	handle("POST", "/v1/messages/count_tokens", "count_tokens", flavorAnthropic, true, s.countTokens)
	handle("GET", "/v1/models", "models", flavorOpenAI, true, s.models)
	handle("GET", "/v1/models/{id}", "models", flavorOpenAI, true, s.model)
	handle("GET", "/health", "health", flavorOpenAI, false, s.health)
	handle("GET", "/metrics", "metrics", flavorOpenAI, true, s.metrics)
	mux.HandleFunc("/", s.wrap("other", flavorOpenAI, false, func(w http.ResponseWriter, r *http.Request) *apiError {
		return &apiError{status: http.StatusNotFound, typ: typeNotFound,
			msg: fmt.Sprintf("no endpoint %s %s (see GET /v1/models, POST /v1/chat/completions, /v1/responses, /v1/messages)", r.Method, r.URL.Path)}
	}))
	s.mux = mux
}

// statusWriter records the status a handler answered (for the request metrics) and gives
// every write a deadline of timeout from its start (none when timeout ≤ 0), so that a client
// that stops reading fails the write instead of holding the handler; Unwrap lets
// http.ResponseController reach the connection's Flush.
type statusWriter struct {
	http.ResponseWriter
	status  int
	rc      *http.ResponseController
	timeout time.Duration
}

// extend moves the write deadline to timeout from now (a writer without deadlines, such as
// httptest.ResponseRecorder, ignores it).
func (w *statusWriter) extend() {
	if w.timeout > 0 {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.extend()
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap adds to h: the Host and cross-origin checks, the API key check, the body limit (413
// from Content-Length before reading), the write deadlines, the answer of a returned error
// in the API's shape, a recovered panic answered as a 500 (the server keeps serving), the
// request count.
func (s *Server) wrap(endpoint string, f flavor, auth bool, h func(w http.ResponseWriter, r *http.Request) *apiError) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		w := &statusWriter{ResponseWriter: rw, rc: http.NewResponseController(rw), timeout: s.opt.WriteTimeout}
		w.extend() // also covers a 100 Continue written when the body is read
		defer func() {
			w.extend() // net/http's final flush, after this returns, gets a deadline too
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("handler panic", "endpoint", endpoint, "panic", p)
				if w.status == 0 {
					serverError("internal_error", fmt.Errorf("internal error: %v", p)).write(w, f)
				}
			}
			code := w.status
			if code == 0 {
				code = 499 // the client went away before any answer (nginx's convention)
			}
			s.m.request(endpoint, code)
		}()
		if f == flavorOpenAI && strings.HasPrefix(r.URL.Path, "/v1/messages") {
			f = flavorAnthropic
		}
		// Refusals before the body is read close the connection, so that net/http does not
		// read (drain) a body nobody wants.
		var refuse *apiError
		switch {
		case !s.hostAllowed(r.Host):
			refuse = forbidden("host_not_allowed", "the Host %q is not served: without an API key only localhost and IP addresses are "+
				"(DNS rebinding protection; lithos-run serve --allow-host NAME, or --api-key)", r.Host)
		case s.csrf.Check(r) != nil:
			refuse = forbidden("cross_origin", "cross-origin browser requests are refused")
		case auth && !s.authorized(r):
			refuse = &apiError{status: http.StatusUnauthorized, typ: typeAuth, code: "invalid_api_key",
				msg: "missing or wrong API key: send it as \"Authorization: Bearer KEY\" or \"x-api-key: KEY\""}
		case r.ContentLength > s.opt.MaxBodyBytes:
			refuse = tooLarge(s.opt.MaxBodyBytes)
		}
		if refuse != nil {
			w.Header().Set("Connection", "close")
			refuse.write(w, f)
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.opt.MaxBodyBytes)
		}
		if err := h(w, r); err != nil {
			if w.status != 0 {
				return // already answering (a stream): the handler reported in-stream
			}
			err.write(w, f)
		}
	}
}

// authorized checks the API key: the SHA-256 digests are compared in constant time, so that
// neither the key's bytes nor its length show in the time of an answer.
func (s *Server) authorized(r *http.Request) bool {
	if s.opt.APIKey == "" {
		return true
	}
	want := sha256.Sum256([]byte(s.opt.APIKey))
	same := func(k string) bool {
		got := sha256.Sum256([]byte(k))
		return subtle.ConstantTimeCompare(got[:], want[:]) == 1
	}
	if k := r.Header.Get("x-api-key"); k != "" && same(k) {
		return true
	}
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return same(strings.TrimSpace(a[7:]))
	}
	return false
}

// hostAllowed reports whether a request's Host may be served: always with an API key (a web
// page cannot know it); otherwise "localhost", an IP literal (a DNS rebinding attack needs a
// name it controls, which then resolves to this machine) or an allowed host. Any port.
func (s *Server) hostAllowed(host string) bool {
	if s.opt.APIKey != "" || host == "" || s.hosts["*"] {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "localhost" || s.hosts[host] {
		return true
	}
	_, err := netip.ParseAddr(host)
	return err == nil
}

// checkModel answers an unknown model name.
func (s *Server) checkModel(name string) *apiError {
	if name == "" {
		return badRequest("model", "model is required: this server serves %s", strings.Join(quoteAll(s.names), ", "))
	}
	if !slices.Contains(s.names, name) {
		return unknownModel(name, s.names)
	}
	return nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) *apiError {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) *apiError {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	s.m.write(w, s.eng.q.len(), s.eng.running.Load(), s.names[0])
	return nil
}

// modelObject is one entry of GET /v1/models: the OpenAI fields, Anthropic's (type,
// display_name, created_at) and context_window (lithos-metal.md §7.2), so that either SDK's
// models.list reads it.
type modelObject struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Created       int64  `json:"created"`
	OwnedBy       string `json:"owned_by"`
	Type          string `json:"type"`
	DisplayName   string `json:"display_name"`
	CreatedAt     string `json:"created_at"`
	ContextWindow int    `json:"context_window"`
}

func (s *Server) modelObject(name string) modelObject {
	return modelObject{ID: name, Object: "model", Created: s.created, OwnedBy: "lithos", Type: "model", DisplayName: name,
		CreatedAt: time.Unix(s.created, 0).UTC().Format(time.RFC3339), ContextWindow: s.context}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) *apiError {
	data := []modelObject{s.modelObject(s.names[0])}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data,
		"has_more": false, "first_id": s.names[0], "last_id": s.names[0]})
	return nil
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) *apiError {
	id := r.PathValue("id")
	if !slices.Contains(s.names, id) {
		e := unknownModel(id, s.names)
		e.typ = typeNotFound
		return e
	}
	writeJSON(w, http.StatusOK, s.modelObject(id))
	return nil
}

// genRequest is a generation request after its API's adapter.
type genRequest struct {
	conv      conversation
	params    sample.Params
	maxTokens int // 0: until the context is full
	stops     []string
	callID    func(index int) string // the API's tool call ids
}

// checkSampling checks the common sampling ranges; temperature's upper bound is the API's.
func checkSampling(p sample.Params, maxTemp float64) *apiError {
	if !(p.Temperature >= 0 && p.Temperature <= maxTemp) {
		return badRequest("temperature", "temperature %v: want a number in [0, %v] (0 = greedy)", p.Temperature, maxTemp)
	}
	if !(p.TopP > 0 && p.TopP <= 1) {
		return badRequest("top_p", "top_p %v: want a number in (0, 1]", p.TopP)
	}
	if p.TopK < 0 {
		return badRequest("top_k", "top_k %d: want ≥ 0 (0 = all tokens)", p.TopK)
	}
	return nil
}

// checkStops checks stop sequences: at most MaxStopSequences, none empty, none longer than
// MaxStopBytes (each is searched for in the output after every token).
func checkStops(stops []string, param string) *apiError {
	if len(stops) > MaxStopSequences {
		return badRequest(param, "%d stop sequences: at most %d", len(stops), MaxStopSequences)
	}
	for i, s := range stops {
		if s == "" {
			return badRequest(param, "%s: stop sequence %d is empty", param, i)
		}
		if len(s) > MaxStopBytes {
			return badRequest(param, "%s: stop sequence %d has %d bytes: at most %d", param, i, len(s), MaxStopBytes)
		}
	}
	return nil
}

// acquire takes one of the Options.Prepare slots that bound the rendering and tokenizing
// done at once (CPU and memory proportional to the body, on the handlers' goroutines, before
// the queue bounds anything), waiting while fewer than Prepare + Queue others wait (as many as
// could hold a place in the queue, and a slot's worth more); release gives it back. Errors:
// 429 when the waiting room is full too, clientGone when ctx ends first.
func (s *Server) acquire(ctx context.Context) *apiError {
	select {
	case s.prep <- struct{}{}:
		return nil
	default:
	}
	if s.prepWait.Add(1) > s.prepRoom {
		s.prepWait.Add(-1)
		s.m.rejected.Add(1)
		return prepareFull(s.opt.RetryAfter)
	}
	defer s.prepWait.Add(-1)
	select {
	case s.prep <- struct{}{}:
		return nil
	case <-ctx.Done():
		return clientGone
	}
}

func (s *Server) release() { <-s.prep }

// prompt renders and tokenizes a conversation, stopping the tokenizer past limit tokens
// (tokenizer.EncodeLimit: a prompt far beyond the context costs no more than one at the
// limit). Errors: the template refuses the messages (its raise_exception message is passed
// on), more than limit tokens (context_length_exceeded).
func (s *Server) prompt(c *conversation, limit int) (string, []int32, *apiError) {
	text, err := s.render.render(c, -1, true)
	if err != nil {
		return "", nil, s.renderError(c, err)
	}
	ids, err := s.tok.EncodeLimit(text, tokenizer.EncodeOptions{}, limit)
	if errors.Is(err, tokenizer.ErrLimit) {
		return "", nil, promptTooLong(limit, s.context)
	}
	if err != nil {
		return "", nil, badRequest("messages", "tokenize the prompt: %v", err)
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return text, out, nil
}

// renderError blames a template failure on a tool when one does not convert (checkTools
// checks the schemas, so this is a safety net) and on the messages otherwise.
func (s *Server) renderError(c *conversation, err error) *apiError {
	for i, t := range c.tools {
		if _, terr := toolValue(t); terr != nil {
			return badRequest(fmt.Sprintf("tools[%d].parameters", i), "%v", terr)
		}
	}
	return badRequest("messages", "the chat template refused the conversation: %v", err)
}

// prepare turns a request into a job: prompt, context check, output budget, output pipeline
// and checkpoint boundaries. It holds a preparation slot (acquire) while it works.
func (s *Server) prepare(ctx context.Context, g *genRequest) (*job, *apiError) {
	if aerr := s.acquire(ctx); aerr != nil {
		return nil, aerr
	}
	defer s.release()
	text, ids, aerr := s.prompt(&g.conv, s.context)
	if aerr != nil {
		return nil, aerr
	}
	if len(ids) >= s.context {
		return nil, contextExceeded(len(ids), s.context)
	}
	room := s.context - len(ids) + 1 // the last sampled token needs no position
	maxTok := room
	if g.maxTokens > 0 {
		maxTok = min(g.maxTokens, room)
	}
	popt := toolcall.Options{Thinking: promptLeavesThinking(text), NewID: g.callID}
	if g.conv.toolChoice != choiceNone {
		popt.Tools = parserTools(g.conv.tools)
	}
	parser, err := toolcall.New(popt)
	if err != nil {
		return nil, badRequest("tools", "%v", err)
	}
	j := newJob(ctx)
	j.prompt, j.params, j.maxTokens = ids, g.params, maxTok
	j.out = newOutput(s.tok, s.eos, g.stops, maxTok, parser)
	if s.eng.maxEntries > 0 && s.eng.snapshots.Load() {
		j.boundaries = s.boundaries(&g.conv, ids)
	}
	return j, nil
}

// boundaries are the prompt positions where a checkpoint is likely to be reused by a later
// request, each the longest common token prefix of a rendering with the prompt: the end of
// the system/tools prefix (shared by every conversation of an agent and its subagents), the
// end of the conversation without its last message (lithos-metal.md §6.5: a client that
// retries or edits the last message), and the end of all messages without the assistant
// header (the next turn of this conversation starts with them: Qwen templates re-render
// earlier assistant turns differently, so the state after the generated answer is rarely a
// prefix of the next prompt, but the state before the header is).
func (s *Server) boundaries(c *conversation, prompt []int32) []int {
	var out []int
	for _, n := range []int{firstNonSystem(c.messages), len(c.messages) - 1, len(c.messages)} {
		if n <= 0 {
			continue
		}
		text, err := s.render.render(c, n, false)
		if err != nil {
			continue
		}
		ids, err := s.tok.EncodeLimit(text, tokenizer.EncodeOptions{}, len(prompt))
		if err != nil {
			continue // ErrLimit: not a prefix of the prompt
		}
		k := 0
		for k < len(ids) && k < len(prompt) && int32(ids[k]) == prompt[k] {
			k++
		}
		if k > 0 && k < len(prompt) && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func firstNonSystem(msgs []message) int {
	for i, m := range msgs {
		if m.role != "system" {
			return i
		}
	}
	return len(msgs)
}

// submit queues j, or answers 429 when the queue is full.
func (s *Server) submit(j *job) *apiError {
	j.enqueued = time.Now()
	if !s.eng.q.push(j) {
		s.m.rejected.Add(1)
		return queueFull(s.opt.RetryAfter)
	}
	return nil
}

// await follows a submitted job until its final result: on gets every other message (an error
// it returns means the client is gone), keepAlive (when not nil) runs every KeepAlive of
// silence. It returns nil when the client went away (or a write to it failed: its deadline
// passed) or the job ended without a result; the job is then withdrawn from the queue if it
// had not started, and the caller's cancellation of ctx stops it if it had.
func (s *Server) await(ctx context.Context, j *job, on func(jobMsg) error, keepAlive func() error) (res *genResult) {
	defer func() {
		if res == nil {
			s.eng.q.remove(j)
		}
	}()
	var tick <-chan time.Time
	if keepAlive != nil {
		t := time.NewTicker(s.opt.KeepAlive)
		defer t.Stop()
		tick = t.C
	}
	var msgs []jobMsg
	for {
		select {
		case <-j.ready:
			var over bool
			msgs, over = j.take(msgs)
			for _, m := range msgs {
				if m.final != nil {
					return m.final
				}
				if on != nil {
					if err := on(m); err != nil {
						return nil
					}
				}
			}
			if over {
				return nil
			}
		case <-tick:
			if err := keepAlive(); err != nil {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// newID returns prefix + 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
