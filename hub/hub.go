// Package hub is a Hugging Face Hub client that speaks the protocol as
// huggingface_hub does (../shared/reference/hub-and-go.md, Part A): it resolves
// revisions to commits, lists repository files with their LFS sha256, reads
// byte ranges of remote files (so safetensors headers can be audited without a
// download), and downloads snapshots into the standard HF cache layout
// (models--org--name/{blobs,snapshots/<commit>,refs}) that huggingface_hub
// itself reads offline.
//
// Downloads are parallel over byte ranges, resumable across runs (progress is
// persisted next to the partial blob), verified against the LFS sha256 (or the
// git blob sha1 of small files) before the blob is published by an atomic
// rename, and retried with backoff on 408/429/5xx honouring Retry-After.
//
// The package imports only the standard library, golang.org/x/sync,
// golang.org/x/sys and the progress bar; nothing in lithos imports it except
// the command-line tools and the checkpoint readers in convert.
package hub

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultEndpoint is the Hub used when HF_ENDPOINT is unset.
const DefaultEndpoint = "https://huggingface.co"

// Version is sent in the User-Agent header.
var Version = "0.1.0"

// Client talks to one Hub endpoint. The zero value is not usable; build one
// with NewClient or NewClientFromEnv. A Client is safe for concurrent use.
type Client struct {
	endpoint string // no trailing slash
	token    string
	cacheDir string // HF_HUB_CACHE
	offline  bool
	http     *http.Client
	ua       string

	// retry policy
	maxRetries   int
	retryBase    time.Duration // first backoff; doubles up to retryMax
	retryMax     time.Duration
	stallTimeout time.Duration // a body read that sees no byte for this long is aborted
	partSize     int64         // bytes per range request for large files
	log          *slog.Logger

	fetched atomic.Int64 // body bytes received

	// writeAt writes downloaded bytes; tests replace it to simulate a full disk.
	writeAt func(f *os.File, p []byte, off int64) (int, error)
}

// Option configures a Client.
type Option func(*Client)

// WithToken sets the bearer token sent to the Hub (never to another host).
func WithToken(tok string) Option { return func(c *Client) { c.token = cleanToken(tok) } }

// WithCacheDir sets the HF hub cache directory (what HF_HUB_CACHE names).
func WithCacheDir(dir string) Option { return func(c *Client) { c.cacheDir = dir } }

// WithHTTPClient replaces the HTTP client. Its CheckRedirect is ignored: the
// client follows redirects itself to drop credentials on cross-host hops.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithOffline makes every call resolve from the local cache only, as
// HF_HUB_OFFLINE=1 does.
func WithOffline(off bool) Option { return func(c *Client) { c.offline = off } }

// WithRetry sets the number of retries and the first backoff (doubling, capped
// at 8× base). huggingface_hub uses 5 retries starting at 1 s (hub-and-go.md A7).
func WithRetry(retries int, base time.Duration) Option {
	return func(c *Client) { c.maxRetries, c.retryBase, c.retryMax = retries, base, 8*base }
}

// WithStallTimeout sets how long a download may receive no byte before the
// request is aborted and retried (default 30 s, as ollama's pull does).
func WithStallTimeout(d time.Duration) Option { return func(c *Client) { c.stallTimeout = d } }

// WithPartSize sets the byte size of each parallel range request (default 64 MiB).
func WithPartSize(n int64) Option { return func(c *Client) { c.partSize = n } }

// WithLogger sets the logger for retries and progress notes (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// NewClient returns a client for endpoint ("" means DefaultEndpoint) with the
// cache directory taken from the environment unless an option sets it.
func NewClient(endpoint string, opts ...Option) *Client {
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	c := &Client{
		endpoint:     strings.TrimRight(endpoint, "/"),
		cacheDir:     CacheDirFromEnv(),
		http:         &http.Client{Transport: defaultTransport()},
		ua:           "lithos/" + Version + "; go; hf_hub/compatible",
		maxRetries:   5,
		retryBase:    time.Second,
		retryMax:     8 * time.Second,
		stallTimeout: 30 * time.Second,
		partSize:     64 << 20,
		log:          slog.Default(),
		writeAt:      (*os.File).WriteAt,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func defaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.ResponseHeaderTimeout = 60 * time.Second
	return t
}

// NewClientFromEnv builds a client from the variables huggingface_hub reads
// (hub-and-go.md A8–A9): HF_ENDPOINT, HF_HOME, HF_HUB_CACHE (or the legacy
// HUGGINGFACE_HUB_CACHE), HF_TOKEN (or HUGGING_FACE_HUB_TOKEN, or the token
// file at HF_TOKEN_PATH / $HF_HOME/token), HF_HUB_OFFLINE (or
// TRANSFORMERS_OFFLINE), HF_HUB_DOWNLOAD_TIMEOUT (seconds a body may deliver
// nothing before the request is aborted and retried: the stall timeout). It
// fails on a malformed HF_HUB_DOWNLOAD_TIMEOUT.
func NewClientFromEnv(opts ...Option) (*Client, error) {
	base := []Option{WithToken(TokenFromEnv()), WithOffline(envBool("HF_HUB_OFFLINE") || envBool("TRANSFORMERS_OFFLINE"))}
	if v := os.Getenv("HF_HUB_DOWNLOAD_TIMEOUT"); v != "" {
		secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || secs <= 0 {
			return nil, fmt.Errorf("HF_HUB_DOWNLOAD_TIMEOUT=%q: want a positive number of seconds", v)
		}
		base = append(base, WithStallTimeout(time.Duration(secs*float64(time.Second))))
	}
	return NewClient(os.Getenv("HF_ENDPOINT"), append(base, opts...)...), nil
}

// Endpoint returns the Hub base URL without a trailing slash.
func (c *Client) Endpoint() string { return c.endpoint }

// CacheDir returns the HF hub cache directory this client writes to.
func (c *Client) CacheDir() string { return c.cacheDir }

// Offline reports whether the client makes no network calls.
func (c *Client) Offline() bool { return c.offline }

// BytesFetched returns the body bytes this client has received over HTTP.
func (c *Client) BytesFetched() int64 { return c.fetched.Load() }

// HomeDir returns HF_HOME: $HF_HOME, else $XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface.
func HomeDir() string {
	if h := os.Getenv("HF_HOME"); h != "" {
		return expandHome(h)
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(expandHome(x), "huggingface")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "huggingface")
}

// CacheDirFromEnv returns HF_HUB_CACHE (or HUGGINGFACE_HUB_CACHE), else $HF_HOME/hub.
func CacheDirFromEnv() string {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if v := os.Getenv(k); v != "" {
			return expandHome(v)
		}
	}
	return filepath.Join(HomeDir(), "hub")
}

// TokenFromEnv returns the token huggingface_hub would use: HF_TOKEN, then
// HUGGING_FACE_HUB_TOKEN, then the file at HF_TOKEN_PATH or $HF_HOME/token.
// Tokens are cleaned of CR, LF and surrounding spaces; "" means anonymous.
func TokenFromEnv() string {
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := cleanToken(os.Getenv(k)); t != "" {
			return t
		}
	}
	path := os.Getenv("HF_TOKEN_PATH")
	if path == "" {
		path = filepath.Join(HomeDir(), "token")
	}
	b, err := os.ReadFile(expandHome(path))
	if err != nil {
		return ""
	}
	return cleanToken(string(b))
}

func cleanToken(s string) string {
	s = strings.ReplaceAll(s, "\r", "")
	s = strings.ReplaceAll(s, "\n", "")
	return strings.TrimSpace(s)
}

func envBool(k string) bool {
	switch strings.ToUpper(strings.TrimSpace(os.Getenv(k))) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return os.ExpandEnv(p)
}
