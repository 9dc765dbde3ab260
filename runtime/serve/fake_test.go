package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lithos/runtime/chat"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/model"
	"lithos/runtime/serve/servetest"
	"lithos/runtime/tokenizer"
)

// The serve tests run on the scripted backend of servetest (a backend.Target whose "model"
// answers script(history text) followed by <|im_end|>, through the step state and token ring),
// with the gentest tokenizer and the Qwen3.5-style chat template, so that the API layers have
// exact outputs (tool calls, thinking, stop sequences) and the engine's requests are counted.

// fakeTarget is the scripted target; newTestServer sets its EOS and Script, a test's mod its
// options (Script, Snapshots, Resets, Gate, GateRun).
type fakeTarget = servetest.Target

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var (
	fixtureOnce sync.Once
	fixtureTok  *tokenizer.Tokenizer
	fixtureCfg  model.Config
	fixtureTpl  string
	fixtureErr  error
)

// fixture loads the gentest tokenizer, the golden model's config and the Qwen3.5-style
// chat template of testdata/chat (XML tool calls, <think> switch).
func fixture(t testing.TB) (*tokenizer.Tokenizer, model.Config, string) {
	t.Helper()
	fixtureOnce.Do(func() {
		if fixtureTok, fixtureErr = tokenizer.Parse(gentest.TokenizerJSON()); fixtureErr != nil {
			return
		}
		if fixtureCfg, fixtureErr = gentest.GoldenConfig("b"); fixtureErr != nil {
			return
		}
		var tpl []byte
		_, file, _, _ := runtime.Caller(0)
		tpl, fixtureErr = os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "testdata", "chat", "templates", "qwen35_style.jinja"))
		fixtureTpl = string(tpl)
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixtureTok, fixtureCfg, fixtureTpl
}

// lastUser returns the text of the last user turn in a rendered history.
func lastUser(history string) string {
	i := strings.LastIndex(history, "<|im_start|>user\n")
	if i < 0 {
		return ""
	}
	s := history[i+len("<|im_start|>user\n"):]
	if j := strings.Index(s, "<|im_end|>"); j >= 0 {
		s = s[:j]
	}
	return s
}

// defaultScript answers by keywords of the last user turn.
func defaultScript(history string) string {
	u := lastUser(history)
	switch {
	case strings.Contains(u, "weather"):
		return "I will check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
	case strings.Contains(u, "patch"):
		return "<tool_call>\n<function=apply_patch>\n<parameter=input>\n*** Begin Patch\n*** End Patch\n</parameter>\n</function>\n</tool_call>"
	case strings.Contains(u, "broken"):
		return "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
	case strings.Contains(u, "think"):
		return "The user wants a number.\n</think>\n\nThe answer is 42."
	case strings.Contains(u, "<tool_response>"):
		return "It is sunny in Paris."
	case strings.Contains(u, "long"):
		return strings.Repeat("and on ", 40) + "done."
	}
	return "Hello there, world. How are you?"
}

type testServer struct {
	*Server
	url string
	ts  *httptest.Server
	ft  *fakeTarget

	genMu sync.Mutex
	gens  []string // the last user message of each generation's history, in order
}

// newTestServer starts a server on the scripted backend over loopback; mod, when not nil,
// sets the backend's script and options.
func newTestServer(t testing.TB, opt Options, mod func(*fakeTarget)) *testServer {
	t.Helper()
	tok, cfg, tpl := fixture(t)
	ts := &testServer{}
	ft := &fakeTarget{Cfg: cfg, Tok: tok, EOS: gentest.IMEnd, Script: defaultScript, OnPrefill: func(history string) {
		ts.genMu.Lock()
		ts.gens = append(ts.gens, lastUser(history))
		ts.genMu.Unlock()
	}}
	if mod != nil {
		mod(ft)
	}
	if len(opt.Names) == 0 {
		opt.Names = []string{"tiny", "tiny-alias"}
	}
	if opt.Log == nil {
		opt.Log = quiet()
	}
	if opt.Context == 0 {
		opt.Context = 4096
	}
	s, err := New(Model{Target: ft, Tokenizer: tok, EOS: []int32{gentest.IMEnd},
		Chat: &chat.Config{Templates: map[string]string{"default": tpl}, SpecialTokens: map[string]any{"eos_token": "<|im_end|>"}}}, opt)
	if err != nil {
		t.Fatal(err)
	}
	hs := listen(t, s)
	ts.Server, ts.url, ts.ts, ts.ft = s, hs.URL, hs, ft
	return ts
}

// listen serves s over loopback until the test ends; the cleanup closes the listener, then s.
func listen(t testing.TB, s *Server) *httptest.Server {
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.Close()
		s.Close()
	})
	return hs
}

// generations returns the last user message of each generation run so far, in order.
func (ts *testServer) generations() []string {
	ts.genMu.Lock()
	defer ts.genMu.Unlock()
	return slices.Clone(ts.gens)
}

// post sends a JSON body and returns the status, headers and body.
func (ts *testServer) post(t testing.TB, path, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", ts.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, data
}

func (ts *testServer) get(t testing.TB, path string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.url+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// sseEvent is one parsed SSE frame.
type sseEvent struct {
	name string
	data string
}

// parseSSE splits a stream into frames (comments skipped), requiring the exact framing:
// optional "event:" line, one "data:" line, blank line.
func parseSSE(t testing.TB, body []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" || cur.name != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			cur.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				t.Fatalf("two data lines in one frame: %q", line)
			}
			cur.data = line[len("data: "):]
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if cur.data != "" {
		t.Fatalf("stream ends inside a frame: %+v", cur)
	}
	return out
}

// obj decodes JSON into a generic map.
func obj(t testing.TB, data string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("not a JSON object: %v: %s", err, data)
	}
	return m
}

// path walks a decoded JSON value: keys for objects, ints for arrays.
func path(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// countTokens is the number of tokens of s in the fixture tokenizer.
func countTokens(t testing.TB, s string) int {
	t.Helper()
	tok, _, _ := fixture(t)
	ids, err := tok.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	return len(ids)
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// drain waits until the worker is done with j and returns all its messages in order.
func drain(j *job) []jobMsg {
	var all, buf []jobMsg
	for {
		<-j.ready
		var over bool
		buf, over = j.take(buf)
		all = append(all, buf...)
		if over {
			return all
		}
	}
}
