package serve

import (
	"context"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/generate"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/model"
	"lithos/runtime/sample"
	"lithos/runtime/toolcall"
)

// These tests run the real CPU backend on the generate fixture bundle (the 4-layer Qwen3.5
// golden checkpoint, packed; its outputs match transformers, runtime/generate's tests).

func realBundle(t *testing.T, opt gentest.Options) string {
	t.Helper()
	dir, err := gentest.Bundle(context.Background(), t.TempDir(), opt)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func openReal(t *testing.T, dir string, ro generate.Options, opt Options) (*Server, string) {
	t.Helper()
	ro.Log, opt.Log = quiet(), quiet()
	s, err := Open(context.Background(), dir, ro, opt)
	if err != nil {
		t.Fatal(err)
	}
	return s, listen(t, s).URL
}

// TestRealBundle: the server's answer is the one runtime/generate gives for the same chat
// prompt (greedy), streamed or not.
func TestRealBundle(t *testing.T) {
	dir := realBundle(t, gentest.Options{})
	s, url := openReal(t, dir, generate.Options{Backend: "cpu"}, Options{Context: 256})
	if s.Names()[0] != "b" || s.Context() != 256 || s.Backend() != "cpu" {
		t.Fatalf("names %v, context %d, backend %q", s.Names(), s.Context(), s.Backend())
	}
	r, err := generate.OpenWith(context.Background(), dir, generate.Options{Backend: "cpu", Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want, err := r.Generate(context.Background(), generate.Request{Prompt: "Hello there", Chat: true, MaxTokens: 12, Sampling: sample.Params{TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, url: url}
	code, _, body := ts.post(t, "/v1/chat/completions", `{"model":"b","max_tokens":12,"messages":[{"role":"user","content":"Hello there"}]}`)
	m := obj(t, string(body))
	if code != 200 || path(m, "choices", 0, "message", "content") != want.Text || path(m, "usage", "completion_tokens") != 12.0 ||
		path(m, "usage", "prompt_tokens") != float64(want.PromptTokens) || path(m, "choices", 0, "finish_reason") != "length" {
		t.Fatalf("%d %s\nwant text %q, %d prompt tokens", code, body, want.Text, want.PromptTokens)
	}
	chunks, done := chatStream(t, ts, `{"model":"b","stream":true,"max_tokens":12,"messages":[{"role":"user","content":"Hello there"}]}`)
	var text strings.Builder
	for _, c := range chunks {
		if s, ok := path(c, "choices", 0, "delta", "content").(string); ok {
			text.WriteString(s)
		}
	}
	if !done || text.String() != want.Text {
		t.Fatalf("streamed %q, want %q", text.String(), want.Text)
	}
}

// runIDs runs a prompt of ids through the engine (greedy) and returns the result.
func runIDs(t *testing.T, s *Server, prompt []int32, maxTok int) *genResult {
	t.Helper()
	parser, err := toolcall.New(toolcall.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j := newJob(context.Background())
	j.prompt, j.params, j.maxTokens, j.out = prompt, sample.Params{TopP: 1}, maxTok, newOutput(s.tok, s.eos, nil, maxTok, parser)
	if err := s.submit(j); err != nil {
		t.Fatal(err)
	}
	var res *genResult
	for _, m := range drain(j) {
		if m.final != nil {
			res = m.final
		}
	}
	if res == nil || res.err != nil {
		t.Fatalf("generation failed: %+v", res)
	}
	return res
}

// parked returns the histories of the parked sessions (read after a job's final message,
// which the worker sends after parking).
func parked(s *Server) [][]int32 {
	var out [][]int32
	for _, e := range s.eng.entries {
		if e.sess != nil {
			out = append(out, slices.Clone(e.tokens))
		}
	}
	return out
}

// TestRealParking: a CPU session continued after a finished generation (the step state's
// stop flags cleared, the new tokens prefilled at its position) generates exactly what a fresh
// session prefilled with the whole history does — with and without a draft head, and with
// several decode steps queued per call (Options.RoundsPerCall) on the continued one.
func TestRealParking(t *testing.T) {
	for _, withDraft := range []bool{false, true} {
		opt := gentest.Options{}
		if withDraft {
			dd := filepath.Join(t.TempDir(), "draft")
			if err := gentest.WriteDraft(dd, gentest.DraftFor(gentest.VocabSize, 256, 4), 7); err != nil {
				t.Fatal(err)
			}
			opt.Draft = dd
		}
		dir := realBundle(t, opt)
		// a queues 4 decode steps per call, b one: the same histories and results.
		a, _ := openReal(t, dir, generate.Options{Backend: "cpu"}, Options{Context: 256, Checkpoints: 2, RoundsPerCall: 4})
		b, _ := openReal(t, dir, generate.Options{Backend: "cpu"}, Options{Context: 256, Checkpoints: 2})
		if a.eng.perCall != 4 || b.eng.perCall != 1 {
			t.Fatalf("steps per call %d and %d, want 4 and the CPU's 1", a.eng.perCall, b.eng.perCall)
		}
		if withDraft && a.eng.draft == nil {
			t.Fatal("the bundle's draft head was not loaded")
		}
		first := []int32{gentest.IMStart, 'u', 's', 'e', 'r', '\n', 'H', 'i', gentest.IMEnd, '\n', gentest.IMStart, 'a', '\n'}
		runIDs(t, a, first, 9)
		h := parked(a)
		if len(h) != 1 || len(h[0]) != len(first)+8 || !slices.Equal(h[0][:len(first)], first) {
			t.Fatalf("draft %v: parked %v: want the prompt and the 8 fed tokens", withDraft, h)
		}
		next := append(slices.Clone(h[0]), gentest.IMEnd, '\n', gentest.IMStart, 'u', '\n', 'O', 'k', gentest.IMEnd, '\n', gentest.IMStart, 'a', '\n')
		ra := runIDs(t, a, next, 10)
		rb := runIDs(t, b, next, 10)
		if ra.cachedTokens != len(h[0]) || rb.cachedTokens != 0 || ra.completionTokens != 10 || rb.completionTokens != 10 || ra.rounds != rb.rounds {
			t.Fatalf("draft %v: cached %d and %d, want %d and 0; %d and %d tokens in %d and %d rounds", withDraft, ra.cachedTokens, rb.cachedTokens, len(h[0]), ra.completionTokens, rb.completionTokens, ra.rounds, rb.rounds)
		}
		ha, hb := parked(a), parked(b)
		if len(ha) != 1 || len(hb) != 1 || !slices.Equal(ha[0], hb[0]) {
			t.Fatalf("draft %v: continued session's history\n%v\nfresh session's\n%v", withDraft, ha, hb)
		}
	}
}

// TestStateBytes: the memory formula of a session's state, for the 27B target (the numbers
// docs/serving.md quotes, worked by hand there) and, measured, for the fixture model: the bytes
// a CPU session allocates are the formula's, plus the step state and the ring.
func TestStateBytes(t *testing.T) {
	var c model.Config
	for i := range 64 {
		if i%4 == 3 {
			c.Layers = append(c.Layers, model.Attention)
		} else {
			c.Layers = append(c.Layers, model.GDN)
		}
	}
	c.KVHeads, c.HeadDim = 4, 256
	c.KHeads, c.VHeads, c.KDim, c.VDim, c.ConvKernel = 16, 48, 128, 128, 4
	if got := StateBytes(&c, 32768); got != 4_608_753_664 {
		t.Fatalf("27B at 32768 positions: %d bytes, docs/serving.md says 4608753664", got)
	}
	if got := StateBytes(&c, 0); got != 313_786_368 {
		t.Fatalf("27B GDN state (two slots): %d bytes, docs/serving.md says 313786368", got)
	}

	dir := realBundle(t, gentest.Options{})
	s, _ := openReal(t, dir, generate.Options{Backend: "cpu"}, Options{Context: 4096})
	cfg := s.eng.target.Config()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	sess, err := s.eng.target.NewSession(backend.SessionOptions{Capacity: 4096, Sampling: sample.Params{TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	defer sess.Close()
	want := StateBytes(&cfg, 4096)
	extra := int64(backend.DefaultRingCapacity*8 + 64<<10) // the ring, the step state, small headers
	got := int64(m1.TotalAlloc - m0.TotalAlloc)
	t.Logf("a CPU session of 4096 positions: %d bytes allocated, formula %d", got, want)
	if got < want || got > want+extra {
		t.Fatalf("a session of 4096 positions allocated %d bytes; the formula says %d (+ at most %d)", got, want, extra)
	}
}
