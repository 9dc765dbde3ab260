package hubtest

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// Options configure a Server. The zero value is usable.
type Options struct {
	// PageSize is the number of entries per page of a tree listing (default 1000, the Hub's page size
	// without expand). Tests use a small value to exercise `Link: <…>; rel="next"` pagination.
	PageSize int
	// LFSThreshold: files of at least this many bytes are LFS files (default 1 MiB = 1<<20).
	LFSThreshold int64
	// LFSExtensions: files with these extensions (lower case, with the dot) are LFS files whatever their
	// size (default: .safetensors, .bin, .pt, .pth, .ckpt, .gguf, .h5, .msgpack, .onnx, .model, .npy,
	// .npz, .pkl, .pickle, .parquet, .arrow, .tar, .tgz, .gz, .zip, .zst, .xz).
	LFSExtensions []string
	// BaseURL is the public base URL of the server ("http://host:port", no trailing slash) used in
	// absolute URLs (pagination Link, LFS Location). Default: "http://" + the request's Host.
	BaseURL string
	// BlobBaseURL is the base URL that LFS redirects point to (Location = BlobBaseURL +
	// "/cdn/<org>/<name>/<sha256>"). It must be served by this same Server (e.g. a second listener, see
	// StartWithBlobHost) so that a client's cross-host redirect handling can be tested. Default: BaseURL.
	BlobBaseURL string
	// Token is a bearer token granted access to every gated or private repo (in addition to the repos'
	// own tokens, see RepoSettings).
	Token string
	// ValidTokens, when not empty, lists the bearer tokens the server knows (Options.Token is always
	// known). Any other bearer token is rejected on every endpoint with 401 and the message "Invalid
	// credentials in Authorization header" (no X-Error-Code), as the Hub answers an expired or revoked
	// token (huggingface_hub then does not report RepositoryNotFound; hub-and-go.md A6). Repo tokens
	// must be listed here too.
	ValidTokens []string
	// Repos holds per-repo settings by repo id "org/name"; they override .hubtest.json field by field.
	Repos map[string]RepoSettings
	// Renames maps an old repo id to a new one ("old-org/old" → "org/new"); see RepoSettings.RenamedTo.
	Renames map[string]string
	// Logger receives one debug record per request (default slog.Default()). Tokens are never logged.
	Logger *slog.Logger
	// MaxRecords bounds the request log returned by Server.Requests (default 10000).
	MaxRecords int
}

// Server is a Hugging Face Hub-compatible HTTP handler over a directory of model repos; see the package
// documentation for the layout and the endpoints.
type Server struct {
	// URL is the base URL of the listener started by Start or Serve ("http://127.0.0.1:port"); empty for
	// a Server used only as an http.Handler.
	URL string
	// BlobURL is the base URL LFS redirects point to when StartWithBlobHost started a second listener.
	BlobURL string

	root   string
	opts   Options
	log    *slog.Logger
	secret []byte // HMAC key signing blob URLs of gated/private repos
	faults Faults
	rec    recorder
	reqID  atomic.Uint64
	// inflight counts running handlers (see settle).
	inflight atomic.Int64

	hashMu    sync.Mutex
	hashes    map[hashKey]hashVal
	hashGroup singleflight.Group
}

// New returns a Server over root, a directory holding ROOT/<org>/<name>/ repos. It returns an error when
// root is not a directory or a .hubtest.json / Options.Repos setting is invalid.
func New(root string, opts Options) (*Server, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("hubtest: root: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("hubtest: root %s is not a directory", root)
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 1000
	}
	if opts.LFSThreshold <= 0 {
		opts.LFSThreshold = 1 << 20
	}
	if opts.LFSExtensions == nil {
		opts.LFSExtensions = defaultLFSExtensions
	}
	opts.BaseURL = strings.TrimSuffix(opts.BaseURL, "/")
	opts.BlobBaseURL = strings.TrimSuffix(opts.BlobBaseURL, "/")
	if opts.MaxRecords <= 0 {
		opts.MaxRecords = defaultMaxRecords
	}
	s := &Server{root: root, opts: opts, log: opts.Logger, hashes: map[hashKey]hashVal{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.rec.max = opts.MaxRecords
	s.secret = make([]byte, 32)
	if _, err := rand.Read(s.secret); err != nil {
		return nil, fmt.Errorf("hubtest: blob url key: %w", err)
	}
	for id, set := range opts.Repos {
		org, name, ok := strings.Cut(id, "/")
		if !ok || !validRepoPart(org) || !validRepoPart(name) {
			return nil, fmt.Errorf("hubtest: Options.Repos: invalid repo id %q", id)
		}
		if err := set.validate(); err != nil {
			return nil, fmt.Errorf("hubtest: Options.Repos[%q]: %w", id, err)
		}
	}
	for from, to := range opts.Renames {
		org, name, ok := strings.Cut(from, "/")
		if !ok || !validRepoPart(org) || !validRepoPart(name) {
			return nil, fmt.Errorf("hubtest: Options.Renames: invalid repo id %q", from)
		}
		if err := (RepoSettings{RenamedTo: to}).validate(); err != nil {
			return nil, fmt.Errorf("hubtest: Options.Renames[%q]: %w", from, err)
		}
	}
	// Check every settings file now, so a typo fails at start rather than on the first request.
	orgs, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("hubtest: %w", err)
	}
	for _, o := range orgs {
		if !validRepoPart(o.Name()) {
			continue
		}
		repos, err := os.ReadDir(path.Join(root, o.Name()))
		if err != nil {
			continue // not a directory
		}
		for _, r := range repos {
			if !validRepoPart(r.Name()) {
				continue
			}
			if _, err := s.repoSettings(o.Name(), r.Name()); err != nil {
				return nil, fmt.Errorf("hubtest: %w", err)
			}
		}
	}
	return s, nil
}

// Faults returns the server's fault-injection table (goroutine-safe; see Faults).
func (s *Server) Faults() *Faults { return &s.faults }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s.inflight.Add(1)
	sw := &statusWriter{ResponseWriter: w}
	rec := Record{
		Method: r.Method, Host: r.Host, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery,
		Authorization: r.Header.Get("Authorization"), Range: r.Header.Get("Range"),
	}
	id := "hubtest-" + strconv.FormatUint(s.reqID.Add(1), 10)
	sw.Header().Set("X-Request-Id", id)
	defer func() {
		p := recover()
		rec.Status = sw.status
		rec.BodyBytes = sw.bytes
		if p != nil {
			rec.Aborted = true
		}
		s.rec.add(rec)
		s.inflight.Add(-1)
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "hubtest request",
			slog.String("id", id), slog.String("method", r.Method), slog.String("host", r.Host),
			slog.String("path", rec.Path), slog.String("range", rec.Range), slog.Int("status", rec.Status),
			slog.Int64("bytes", rec.BodyBytes), slog.String("fault", rec.Fault), slog.Bool("aborted", rec.Aborted),
			slog.Bool("auth", rec.Authorization != ""), slog.Duration("dur", time.Since(start)))
		if p != nil {
			panic(p)
		}
	}()
	s.serve(sw, r, &rec)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, rec *Record) {
	rt, perr := parseRoute(r.URL.EscapedPath())
	targets := []string{rec.Path, ""}

	// Load the repo (when the route names one) before fault matching: a blob path only maps to a file
	// key through the listing.
	var snap *snapshot
	var lerr error
	var entry *fileEntry
	if perr == nil {
		snap, lerr = s.loadRepo(rt.org, rt.name)
		if lerr == nil && snap.Settings.RenamedTo == "" {
			switch rt.kind {
			case routeResolve:
				entry = snap.byPath[rt.path]
			case routeBlob:
				entry = snap.bySHA[rt.sha]
			}
			if entry != nil && !entry.Dir {
				rec.FileKey = snap.fileKey(entry)
				targets[1] = rec.FileKey
			} else {
				entry = nil
			}
		}
	}
	if ft, ok := s.faults.claim(targets, nil, FaultStatus); ok {
		rec.Fault = ft.Kind.String()
		s.writeFault(w, r, ft)
		return
	}
	if tok, has := bearer(r); has && len(s.opts.ValidTokens) > 0 && !s.knownToken(tok) {
		writeError(w, http.StatusUnauthorized, "", "Invalid credentials in Authorization header")
		return
	}

	switch {
	case errors.Is(perr, errNoRoute), errors.Is(perr, errNotBlob):
		writeError(w, http.StatusNotFound, "", "Not Found")
		return
	case errors.Is(perr, errBadPath):
		writeError(w, http.StatusBadRequest, "", "Invalid path: "+rec.Path)
		return
	case errors.Is(perr, errNoRev):
		writeError(w, http.StatusBadRequest, "", "Missing revision in "+rec.Path)
		return
	case errors.Is(perr, errBadRepo):
		s.repoNotFound(w, r)
		return
	}

	allow, ok := "GET, HEAD", r.Method == http.MethodGet || r.Method == http.MethodHead
	if rt.kind == routePathsInfo {
		allow, ok = "POST", r.Method == http.MethodPost
	}
	if !ok {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "", "Method "+r.Method+" not allowed")
		return
	}

	switch {
	case errors.Is(lerr, errRepoNotFound):
		s.repoNotFound(w, r)
		return
	case lerr != nil:
		s.log.Error("hubtest: load repo", "repo", rt.org+"/"+rt.name, "err", lerr)
		writeError(w, http.StatusInternalServerError, "", lerr.Error())
		return
	}
	if to := snap.Settings.RenamedTo; to != "" {
		loc := "/" + to + rt.rest
		if rt.kind != routeResolve {
			loc = "/api/models/" + to + rt.rest
		}
		if rt.kind == routeBlob {
			writeError(w, http.StatusNotFound, "", "Not Found")
			return
		}
		if r.URL.RawQuery != "" {
			loc += "?" + r.URL.RawQuery
		}
		w.Header().Set("Location", loc)
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}

	if rt.kind == routeBlob {
		s.serveBlob(w, r, rec, snap, rt, entry, targets)
		return
	}

	// Private repos are invisible to everyone but their token holders; gated repos show their metadata
	// and gate only file contents.
	granted, hasAuth := s.granted(snap, r)
	if snap.Settings.Private && !granted {
		s.repoNotFound(w, r)
		return
	}
	if rt.rev != "" && rt.rev != "main" && rt.rev != snap.Commit {
		writeError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rt.rev)
		return
	}
	switch rt.kind {
	case routeInfo:
		s.serveInfo(w, r, snap)
	case routeTree:
		s.serveTree(w, r, snap, rt)
	case routePathsInfo:
		s.servePathsInfo(w, r, snap)
	case routeResolve:
		if snap.Settings.Gated != "" && !granted {
			s.gated(w, r, snap, hasAuth)
			return
		}
		w.Header().Set("X-Repo-Commit", snap.Commit)
		if entry == nil {
			writeError(w, http.StatusNotFound, "EntryNotFound", "Entry not found")
			return
		}
		s.serveResolve(w, r, rec, snap, entry, targets)
	}
}

// bearer returns the token of an "Authorization: Bearer <token>" header and whether any Authorization
// header was sent.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:]), true
	}
	return "", true
}

// knownToken reports whether tok is in Options.ValidTokens or is Options.Token.
func (s *Server) knownToken(tok string) bool {
	if tok == "" {
		return false
	}
	for _, k := range append([]string{s.opts.Token}, s.opts.ValidTokens...) {
		if k != "" && subtle.ConstantTimeCompare([]byte(k), []byte(tok)) == 1 {
			return true
		}
	}
	return false
}

// granted reports whether the request's token opens the repo (always true for a public, ungated repo).
func (s *Server) granted(snap *snapshot, r *http.Request) (granted, hasAuth bool) {
	tok, has := bearer(r)
	set := snap.Settings
	if !set.Private && set.Gated == "" {
		return true, has
	}
	allowed := append([]string{set.Token, s.opts.Token}, set.Tokens...)
	configured := false
	for _, a := range allowed {
		if a == "" {
			continue
		}
		configured = true
		if tok != "" && subtle.ConstantTimeCompare([]byte(a), []byte(tok)) == 1 {
			return true, has
		}
	}
	return !configured && tok != "", has
}

// repoNotFound answers as the Hub does for a repo that does not exist or that the caller may not see:
// 401 without credentials (it could be private), 404 with credentials; X-Error-Code: RepoNotFound.
func (s *Server) repoNotFound(w http.ResponseWriter, r *http.Request) {
	code := http.StatusNotFound
	if _, has := bearer(r); !has {
		code = http.StatusUnauthorized
	}
	writeError(w, code, "RepoNotFound", "Repository not found")
}

// gated answers GatedRepo: 401 without a token, 403 with a token not on the authorized list
// (hub-and-go.md A6).
func (s *Server) gated(w http.ResponseWriter, r *http.Request, snap *snapshot, hasAuth bool) {
	if !hasAuth {
		writeError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+snap.ID()+
			" is restricted. You must have access to it and be authenticated to access it. Please log in.")
		return
	}
	writeError(w, http.StatusForbidden, "GatedRepo", "Access to model "+snap.ID()+
		" is restricted and you are not in the authorized list. Visit "+s.baseURL(r)+"/"+snap.ID()+
		" to ask for access.")
}

// writeError writes a Hub-style error: JSON body {"error": msg}, X-Error-Message, and X-Error-Code when
// code is not empty.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	h := w.Header()
	if code != "" {
		h.Set("X-Error-Code", code)
	}
	h.Set("X-Error-Message", headerSafe(msg))
	writeJSON(w, status, map[string]string{"error": msg})
}

// headerSafe drops bytes that may not appear in a header value.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

func (s *Server) writeFault(w http.ResponseWriter, r *http.Request, ft Fault) {
	bucket := rateLimitBucket(r.URL.EscapedPath())
	for k, vs := range ft.Header {
		for _, v := range vs {
			w.Header().Add(k, strings.ReplaceAll(v, "{bucket}", bucket))
		}
	}
	msg := http.StatusText(ft.Status)
	if ft.Status == http.StatusTooManyRequests {
		msg = "You have been rate-limited; you can retry this action later (hubtest fault)."
	}
	writeJSON(w, ft.Status, map[string]string{"error": msg})
}

// baseURL is the server's public base URL for this request.
func (s *Server) baseURL(r *http.Request) string {
	if s.opts.BaseURL != "" {
		return s.opts.BaseURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func (s *Server) blobBaseURL(r *http.Request) string {
	if s.opts.BlobBaseURL != "" {
		return s.opts.BlobBaseURL
	}
	return s.baseURL(r)
}

func isTrue(v string) bool { return v == "1" || strings.EqualFold(v, "true") }
