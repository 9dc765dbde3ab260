package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	"lithos/runtime/backend"
	"lithos/runtime/bundle"
	"lithos/runtime/chat"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/model"
	"lithos/runtime/tokenizer"
)

// The scripted backend: a backend.Target whose sessions follow the step-state contract
// (prefill chunks, ring, StopAt, EOS, capacity, cancellation between steps) but whose
// "model" answers a script: the output for a history is the tokens of script(history text)
// followed by the EOS. It makes the server's API layers testable with exact outputs (tool
// calls, thinking, stop sequences), and counts what the engine asks of it.

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
		var data []byte
		if data, fixtureErr = os.ReadFile(filepath.Join(gentest.GoldenDir("b"), "config.json")); fixtureErr != nil {
			return
		}
		if fixtureCfg, fixtureErr = model.ParseConfig(data); fixtureErr != nil {
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

type fakeTarget struct {
	cfg       model.Config
	tok       *tokenizer.Tokenizer
	script    func(history string) string
	snapshots bool          // sessions implement backend.Snapshotter
	resets    bool          // sessions implement backend.Resetter (not with snapshots)
	gate      chan struct{} // when set, every decode step takes one value from it
	gateRun   chan struct{} // when set, a value is sent on it before a step waits on gate

	mu               sync.Mutex
	prefilled        int // prompt tokens prefilled, all sessions
	sessions, closed int
	restores, snaps  int
	resetCount       int
	lastHist         string   // the text of the whole history at the last Prefill
	order            []string // the last user message of each generation, in order
}

func (t *fakeTarget) Config() model.Config { return t.cfg }
func (t *fakeTarget) Close() error         { return nil }

func (t *fakeTarget) LoadDraft(context.Context, *bundle.Bundle) (backend.Drafter, error) {
	return nil, nil
}

func (t *fakeTarget) NewSession(opt backend.SessionOptions) (backend.Session, error) {
	if err := opt.Normalize(t.cfg.Vocab); err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.sessions++
	t.mu.Unlock()
	s := &fakeSession{t: t, opt: opt, ss: backend.NewStepState(max(opt.PrefillChunk, backend.DecodeRows), opt.Sampling.Seed),
		ring: backend.NewRing(opt.RingCapacity)}
	if t.snapshots {
		return &snapSession{s}, nil
	}
	if t.resets {
		return &resetSession{s}, nil
	}
	return s, nil
}

func (t *fakeTarget) counts() (prefilled, sessions, closed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.prefilled, t.sessions, t.closed
}

type fakeSession struct {
	t      *fakeTarget
	opt    backend.SessionOptions
	ss     *backend.StepState
	ring   *backend.Ring
	hist   []int32
	out    []int32
	next   int
	closed bool
}

func (s *fakeSession) State() *backend.StepState { return s.ss }
func (s *fakeSession) Ring() *backend.Ring       { return s.ring }
func (s *fakeSession) Stats() backend.RoundStats { return backend.RoundStats{} }

func (s *fakeSession) Close() error {
	if !s.closed {
		s.closed = true
		s.t.mu.Lock()
		s.t.closed++
		s.t.mu.Unlock()
	}
	return nil
}

func (s *fakeSession) Prefill(ctx context.Context, prompt []int32) error {
	ss := s.ss
	switch {
	case s.closed:
		return errors.New("closed")
	case ss.Done != 0:
		return errors.New("fake: prefill on a done session")
	case len(prompt) == 0:
		return errors.New("fake: empty prompt")
	case int(ss.Position)+len(prompt) > s.opt.Capacity:
		return fmt.Errorf("fake: %d tokens at %d exceed %d", len(prompt), ss.Position, s.opt.Capacity)
	}
	for i := 0; i < len(prompt); i += s.opt.PrefillChunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := prompt[i:min(i+s.opt.PrefillChunk, len(prompt))]
		s.hist = append(s.hist, chunk...)
		ss.Position += uint32(len(chunk))
		ss.Step++
		s.t.mu.Lock()
		s.t.prefilled += len(chunk)
		s.t.mu.Unlock()
	}
	ids := make([]int, len(s.hist))
	for i, id := range s.hist {
		ids[i] = int(id)
	}
	text, err := s.t.tok.Decode(ids, false)
	if err != nil {
		return err
	}
	enc, err := s.t.tok.Encode(s.t.script(text))
	if err != nil {
		return err
	}
	s.out = s.out[:0]
	for _, id := range enc {
		s.out = append(s.out, int32(id))
	}
	s.out = append(s.out, gentest.IMEnd)
	s.next = 0
	s.t.mu.Lock()
	s.t.lastHist = text
	s.t.order = append(s.t.order, lastUser(text))
	s.t.mu.Unlock()
	s.push()
	return nil
}

// push samples the next scripted token into the ring, as the device step does.
func (s *fakeSession) push() {
	tok := int32(gentest.IMEnd)
	if s.next < len(s.out) {
		tok = s.out[s.next]
	}
	s.next++
	if !s.ring.Push(s.ss, tok) {
		return
	}
	s.ss.Anchor = tok
	if slices.Contains(s.opt.EOS, tok) || (s.ss.StopAt != 0 && s.ss.RingHead >= s.ss.StopAt) {
		s.ss.Done = 1
	}
}

func (s *fakeSession) Decode(ctx context.Context, steps int) error {
	ss := s.ss
	for i := 0; i < steps && ss.Done == 0; i++ {
		if s.t.gate != nil {
			if s.t.gateRun != nil {
				select {
				case s.t.gateRun <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			select {
			case <-s.t.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if int(ss.Position)+1 > s.opt.Capacity {
			ss.Error, ss.Done = backend.ErrContextFull, 1
			return nil
		}
		s.hist = append(s.hist, ss.Anchor)
		ss.Position++
		ss.Step++
		s.push()
	}
	return nil
}

// snapSession adds the Snapshotter hook.
type snapSession struct{ *fakeSession }

type fakeSnap struct{ hist []int32 }

func (f *fakeSnap) Position() int { return len(f.hist) }
func (f *fakeSnap) Bytes() int64  { return int64(4 * len(f.hist)) }

func (s *snapSession) Snapshot() (backend.Snapshot, error) {
	s.t.mu.Lock()
	s.t.snaps++
	s.t.mu.Unlock()
	return &fakeSnap{slices.Clone(s.hist)}, nil
}

func (s *snapSession) Restore(sn backend.Snapshot) error {
	f := sn.(*fakeSnap)
	if len(f.hist) > s.opt.Capacity {
		return errors.New("too long")
	}
	s.t.mu.Lock()
	s.t.restores++
	s.t.mu.Unlock()
	s.hist = slices.Clone(f.hist)
	s.ss.Position = uint32(len(f.hist))
	s.ss.Done, s.ss.Error = 0, 0
	_ = s.ring.Drain(s.ss, nil)
	return nil
}

// resetSession adds the Resetter hook.
type resetSession struct{ *fakeSession }

func (s *resetSession) Reset() error {
	if s.closed {
		return errors.New("closed")
	}
	s.t.mu.Lock()
	s.t.resetCount++
	s.t.mu.Unlock()
	s.hist, s.out, s.next = nil, nil, 0
	pending := s.ss.Pending
	*s.ss = *backend.NewStepState(0, s.opt.Sampling.Seed)
	s.ss.Pending = pending
	s.ring.Reset()
	return nil
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
}

// newTestServer starts a server on the scripted backend over loopback.
func newTestServer(t testing.TB, opt Options, mod func(*fakeTarget)) *testServer {
	t.Helper()
	tok, cfg, tpl := fixture(t)
	ft := &fakeTarget{cfg: cfg, tok: tok, script: defaultScript}
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
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		s.Close()
	})
	return &testServer{Server: s, url: ts.URL, ts: ts, ft: ft}
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
