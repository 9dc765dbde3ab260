// Package launch starts coding agents (Claude Code, Codex, opencode, any command) pointed at a
// running lithos server through process-local environment variables and command-line flags
// only: it never reads or writes the clients' configuration files (lithos-metal.md §7.10 is
// the reference design; ARCHITECTURE.md §3.6).
//
// The steps: Resolve finds the server and its model (GET /v1/models), a client function
// (Claude, Codex, OpenCode, Generic) builds a Command, and Exec replaces this process with
// the client (so the terminal, signals and exit status are the client's own).
//
// The package imports the standard library only.
package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Environment variables and defaults.
const (
	// EnvURL is the server URL when --url is not given.
	EnvURL = "LITHOS_URL"
	// EnvAPIKey is the API key when --api-key is not given; Codex reads the key from it too.
	EnvAPIKey = "LITHOS_API_KEY"
	// DefaultURL is where lithos-run serve listens by default.
	DefaultURL = "http://127.0.0.1:8000"
	// DefaultAPIKey is sent when no key is configured: the clients refuse to start without
	// one, and a server without --api-key accepts any.
	DefaultAPIKey = "lithos-local"
	// DefaultContext is the context window assumed when /v1/models does not report one
	// (tokens).
	DefaultContext = 32768
	// ProviderID names lithos in the clients' provider tables (Codex reserves "openai",
	// "ollama" and "lmstudio").
	ProviderID = "lithos"
	// discoverTimeout bounds GET /v1/models.
	discoverTimeout = 5 * time.Second
)

// Target is the served model the clients are pointed at.
type Target struct {
	// URL is the server's base URL without /v1, e.g. http://127.0.0.1:8000.
	URL string
	// APIKey is sent as the clients' key (never empty).
	APIKey string
	// Model is the served model id.
	Model string
	// Context is the model's context window (tokens).
	Context int
}

// OutputTokens is the output limit given to clients that need one: min(4096, Context/4)
// tokens, as lithos-metal's launchers do (§7.10).
func (t Target) OutputTokens() int { return max(1, min(4096, t.Context/4)) }

// Options are what Resolve starts from; empty fields take the environment's or the defaults.
type Options struct {
	URL, APIKey, Model string
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
	// HTTP is the client for /v1/models (a 5 s timeout when nil).
	HTTP *http.Client
}

// NormalizeURL checks a server URL and returns it without a trailing slash or /v1: it must
// be http or https with a host, and carry no credentials, query or fragment.
func NormalizeURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case err != nil && !strings.Contains(raw, "://"), err == nil && u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("server URL %q: want http:// or https://, e.g. %s", raw, DefaultURL)
	case err != nil:
		return "", fmt.Errorf("server URL %q: %w", raw, err)
	case u.Host == "":
		return "", fmt.Errorf("server URL %q: no host", raw)
	case u.User != nil:
		return "", fmt.Errorf("server URL %q: credentials do not belong in the URL (use --api-key or $%s)", redactURL(u), EnvAPIKey)
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "", fmt.Errorf("server URL %q: no query or fragment allowed", raw)
	}
	path := strings.TrimRight(u.Path, "/")
	path = strings.TrimSuffix(path, "/v1")
	return u.Scheme + "://" + u.Host + strings.TrimRight(path, "/"), nil
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = url.User("***")
	return c.String()
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID string `json:"id"`
	// ContextWindow is lithos' (and lithos-metal's) extension: the context in tokens.
	ContextWindow int `json:"context_window"`
}

// ErrNoServer: nothing answered at the URL.
var ErrNoServer = errors.New("no lithos server answers")

// Discover lists the models the server at base (a normalized URL) serves. Errors name the
// URL and say what to do: start a server, give a key, or fix the URL.
func Discover(ctx context.Context, hc *http.Client, base, apiKey string) ([]Model, error) {
	if hc == nil {
		hc = &http.Client{Timeout: discoverTimeout}
	}
	ctx, cancel := context.WithTimeout(ctx, discoverTimeout)
	defer cancel()
	endpoint := base + "/v1/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", endpoint, err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w at %s (GET /v1/models: %v): start one with `lithos-run serve BUNDLE`, or point --url (or $%s) at it", ErrNoServer, base, err, EnvURL)
		}
		return nil, fmt.Errorf("GET %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", endpoint, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("GET %s: %s: the server wants an API key: give --api-key or set $%s", endpoint, resp.Status, EnvAPIKey)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET %s: %s: %.200s (is this a lithos server?)", endpoint, resp.Status, body)
	}
	var list struct {
		Data []Model `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET %s: not a model list (is this a lithos server?): %w", endpoint, err)
	}
	return list.Data, nil
}

// Resolve finds the target: the URL (Options, else $LITHOS_URL, else DefaultURL), the key
// (Options, else $LITHOS_API_KEY, else DefaultAPIKey) and the model, which must be among the
// ones the server lists; without Options.Model the server must serve exactly one.
func Resolve(ctx context.Context, o Options) (Target, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	raw := firstNonEmpty(o.URL, getenv(EnvURL), DefaultURL)
	base, err := NormalizeURL(raw)
	if err != nil {
		return Target{}, err
	}
	t := Target{URL: base, APIKey: firstNonEmpty(o.APIKey, getenv(EnvAPIKey), DefaultAPIKey)}
	models, err := Discover(ctx, o.HTTP, base, t.APIKey)
	if err != nil {
		return Target{}, err
	}
	ids := make([]string, len(models))
	for i, m := range models {
		ids[i] = m.ID
	}
	var m *Model
	switch {
	case o.Model != "":
		i := slices.Index(ids, o.Model)
		if i < 0 {
			return Target{}, fmt.Errorf("the server at %s does not serve %q; it serves %s", base, o.Model, quoteList(ids))
		}
		m = &models[i]
	case len(models) == 1:
		m = &models[0]
	case len(models) == 0:
		return Target{}, fmt.Errorf("the server at %s lists no model", base)
	default:
		return Target{}, fmt.Errorf("the server at %s serves %d models (%s): pick one with --model", base, len(models), quoteList(ids))
	}
	if m.ID == "" {
		return Target{}, fmt.Errorf("the server at %s lists a model without an id", base)
	}
	t.Model, t.Context = m.ID, m.ContextWindow
	if t.Context <= 0 {
		t.Context = DefaultContext
	}
	return t, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return strings.Join(q, ", ")
}

// Var is one environment variable.
type Var struct{ Name, Value string }

// Command is a client to start: a program found on PATH, its arguments, and the changes to
// this process's environment that the client gets.
type Command struct {
	// Program is the executable's name (looked up on PATH) or path.
	Program string
	// Args follow the program name.
	Args []string
	// Set are the variables set for the client, in order.
	Set []Var
	// Unset are the variables removed from the client's environment.
	Unset []string
	// Install says how to get the program when it is missing ("" for any command).
	Install string
}

// Environ is base (os.Environ() form, NAME=value) with Unset removed and Set applied; each
// name appears once.
func (c Command) Environ(base []string) []string {
	drop := map[string]bool{}
	for _, n := range c.Unset {
		drop[n] = true
	}
	for _, v := range c.Set {
		drop[v.Name] = true
	}
	out := make([]string, 0, len(base)+len(c.Set))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !drop[name] {
			out = append(out, kv)
		}
	}
	for _, v := range c.Set {
		out = append(out, v.Name+"="+v.Value)
	}
	return out
}

// Script is the command as a POSIX shell script that does the same (for --print-config):
// unset lines, export lines, then the command line. Every occurrence of key in values is
// written as "$LITHOS_API_KEY" (when key is not empty), so the key is not printed.
func (c Command) Script(key string) string {
	var sb strings.Builder
	if len(c.Unset) > 0 {
		sb.WriteString("unset " + strings.Join(c.Unset, " ") + "\n")
	}
	for _, v := range c.Set {
		sb.WriteString("export " + v.Name + "=" + shellValue(v.Value, key) + "\n")
	}
	sb.WriteString("exec " + ShellQuote(c.Program))
	for _, a := range c.Args {
		sb.WriteString(" " + shellValue(a, key))
	}
	sb.WriteString("\n")
	return sb.String()
}

// shellValue quotes s for a POSIX shell, writing key as a reference to $LITHOS_API_KEY.
func shellValue(s, key string) string {
	if key == "" || !strings.Contains(s, key) {
		return ShellQuote(s)
	}
	parts := strings.Split(s, key)
	var sb strings.Builder
	for i, p := range parts {
		if i > 0 {
			sb.WriteString(`"$` + EnvAPIKey + `"`)
		}
		if p != "" {
			sb.WriteString(ShellQuote(p))
		}
	}
	return sb.String()
}

// ShellQuote quotes s for a POSIX shell: bare when it is made of safe characters only, else
// in single quotes (a single quote inside closes the quotes, is escaped and reopens them).
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:@%+=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Exports are `export NAME=value` lines for vars, for `eval "$(lithos-run env)"`.
func Exports(vars []Var) string {
	var sb strings.Builder
	for _, v := range vars {
		sb.WriteString("export " + v.Name + "=" + ShellQuote(v.Value) + "\n")
	}
	return sb.String()
}

// ErrNotFound: the client's program is not on PATH.
var ErrNotFound = errors.New("not found on PATH")

// Path finds the command's program on PATH, with an install hint when it is missing.
func (c Command) Path() (string, error) {
	p, err := exec.LookPath(c.Program)
	if err != nil {
		hint := ""
		if c.Install != "" {
			hint = ": install it with `" + c.Install + "`"
		}
		return "", fmt.Errorf("%s %w%s", c.Program, ErrNotFound, hint)
	}
	return p, nil
}
