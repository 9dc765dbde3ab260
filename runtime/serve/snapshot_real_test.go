package serve

import (
	"context"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/draft"
	"lithos/runtime/generate"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/model"
	"lithos/runtime/sample"
	"lithos/runtime/toolcall"
)

// These tests run the CPU backend's Snapshotter (runtime/backend/cpu: a copy of the committed
// model state and of the DSpark context) through the engine, on runtime/generate/gentest's bundle.

// realBundles returns the fixture bundle without and with a draft head (gentest.DraftFor: the
// tiny head's geometry for this target, random weights), keyed by "plain" and "draft".
func realBundles(t *testing.T) map[string]string {
	t.Helper()
	dd := filepath.Join(t.TempDir(), "draft")
	if err := gentest.WriteDraft(dd, gentest.DraftFor(gentest.VocabSize, 256, 4), 7); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"plain": realBundle(t, gentest.Options{}), "draft": realBundle(t, gentest.Options{Draft: dd})}
}

// runJob runs a prompt of ids through the engine (greedy) with checkpoint boundaries; it
// returns the result and the answer's text.
func runJob(t *testing.T, s *Server, prompt []int32, boundaries []int, maxTok int) (*genResult, string) {
	t.Helper()
	parser, err := toolcall.New(toolcall.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j := newJob(context.Background())
	j.prompt, j.boundaries, j.params, j.maxTokens = prompt, boundaries, sample.Params{TopP: 1}, maxTok
	j.out = newOutput(s.tok, s.eos, nil, maxTok, parser)
	if err := s.submit(j); err != nil {
		t.Fatal(err)
	}
	var res *genResult
	var text strings.Builder
	for _, m := range drain(j) {
		for _, ev := range m.evs {
			text.WriteString(ev.text)
		}
		if m.final != nil {
			res = m.final
		}
	}
	if res == nil || res.err != nil {
		t.Fatalf("generation failed: %+v", res)
	}
	return res, text.String()
}

// snapshotEntries returns the positions of the snapshot checkpoints held.
func snapshotEntries(s *Server) []int {
	var out []int
	for _, e := range s.eng.entries {
		if e.snap != nil {
			out = append(out, len(e.tokens))
		}
	}
	slices.Sort(out)
	return out
}

// snapshotBytes is what a CPU snapshot at pos holds on s's model: the model state's copy and,
// with a draft head, its context rows.
func snapshotBytes(t *testing.T, s *Server, pos int) int64 {
	t.Helper()
	cfg := s.eng.target.Config()
	n := model.SnapshotBytes(&cfg, pos)
	if s.eng.draft != nil {
		d, ok := s.eng.draft.(cpu.DSpark)
		if !ok {
			t.Fatalf("draft head %T", s.eng.draft)
		}
		n += d.D.ContextBytes(pos)
	}
	return n
}

// TestRealSnapshots: on the CPU backend, with and without a draft head, a prompt whose prefill
// is split at checkpoint boundaries saves a snapshot at each (the splits sample nothing: the
// answer is the unsplit prompt's); a later prompt that shares the first 30 tokens and then
// diverges (so the parked session is no prefix of it) restores the snapshot at 30, prefills
// exactly its other tokens (the prefill metric) and answers what a server without checkpoints
// answers; the checkpoint bytes are the snapshots' formula plus the parked sessions'.
func TestRealSnapshots(t *testing.T) {
	for name, dir := range realBundles(t) {
		t.Run(name, func(t *testing.T) {
			a, _ := openReal(t, dir, generate.Options{Backend: "cpu"}, Options{Context: 256, Checkpoints: 4})
			// The reference: no boundaries are given to it, so it prefills every prompt whole;
			// its one checkpoint, a parked session, records the tokens it generated.
			f, _ := openReal(t, dir, generate.Options{Backend: "cpu"}, Options{Context: 256, Checkpoints: 1})
			if !a.eng.snapshots.Load() {
				t.Fatal("the CPU backend's sessions were not found to implement backend.Snapshotter")
			}
			if (name == "draft") != (a.eng.draft != nil) {
				t.Fatalf("draft head loaded: %v", a.eng.draft != nil)
			}
			text := func(s string) []int32 {
				var ids []int32
				for _, c := range []byte(s) {
					ids = append(ids, int32(c))
				}
				return ids
			}
			sys := append(append([]int32{gentest.IMStart}, text("system\nBe brief and exact.")...), gentest.IMEnd, '\n')
			turn1 := append(append([]int32{gentest.IMStart}, text("user\nWhat is two and two?")...), gentest.IMEnd, '\n')
			head := []int32{gentest.IMStart, 'a', '\n'}
			p1 := slices.Concat(sys, turn1, head)
			b := []int{len(sys), len(sys) + len(turn1)}
			r1, t1 := runJob(t, a, p1, b, 8)
			if got := snapshotEntries(a); !slices.Equal(got, b) {
				t.Fatalf("snapshots at %v, want %v", got, b)
			}
			w1, u1 := runJob(t, f, p1, nil, 8)
			if t1 != u1 || r1.completionTokens != w1.completionTokens || r1.cachedTokens != 0 || !slices.Equal(parked(a)[0], parked(f)[0]) {
				t.Fatalf("split prefill answered %q (%d tokens), unsplit %q (%d); histories\n%v\n%v", t1, r1.completionTokens, u1, w1.completionTokens, parked(a), parked(f))
			}

			// Another question in the same conversation, after an edited answer.
			turn2 := append(append([]int32{gentest.IMStart}, text("user\nAnd three and three?")...), gentest.IMEnd, '\n')
			p2 := slices.Concat(sys, turn1, []int32{gentest.IMStart, 'a', '\n', '4', gentest.IMEnd, '\n'}, turn2, head)
			if h := parked(a); len(h) != 1 || slices.Equal(h[0], p2[:len(h[0])]) {
				t.Fatalf("the parked session's history is a prefix of the next prompt: the test would not reach the snapshot")
			}
			before := a.m.prefillTokens.Load()
			r2, t2 := runJob(t, a, p2, nil, 10)
			prefilled := int(a.m.prefillTokens.Load() - before)
			w2, u2 := runJob(t, f, p2, nil, 10)
			if r2.cachedTokens != b[1] || prefilled != len(p2)-b[1] || w2.cachedTokens != 0 {
				t.Fatalf("cached %d, prefilled %d of %d: want %d restored and %d prefilled (reference: %d cached)", r2.cachedTokens, prefilled, len(p2), b[1], len(p2)-b[1], w2.cachedTokens)
			}
			var ha []int32
			for _, h := range parked(a) {
				if len(h) > len(p2) && slices.Equal(h[:len(p2)], p2) {
					ha = h
				}
			}
			if t2 != u2 || r2.completionTokens != w2.completionTokens || r2.finish != w2.finish || !slices.Equal(ha, parked(f)[0]) {
				t.Fatalf("from the snapshot: %q (%d tokens, %s); fresh: %q (%d, %s); histories\n%v\n%v", t2, r2.completionTokens, r2.finish, u2, w2.completionTokens, w2.finish, ha, parked(f))
			}

			// Memory accounting: every entry's bytes, and the gauge.
			var sum int64
			for _, e := range a.eng.entries {
				want := a.eng.sessionBytes
				if e.snap != nil {
					want = snapshotBytes(t, a, len(e.tokens))
				}
				if e.bytes != want {
					t.Fatalf("checkpoint of %d tokens (snapshot %v): %d bytes, want %d", len(e.tokens), e.snap != nil, e.bytes, want)
				}
				sum += e.bytes
			}
			if got := a.m.checkpointBytes.Load(); got != sum || len(a.eng.entries) != 4 {
				t.Fatalf("gauge %d bytes for %d checkpoints, entries hold %d", got, len(a.eng.entries), sum)
			}
			t.Logf("%s: %d prompt tokens, %d restored; snapshot at %d: %d bytes; %d checkpoints hold %d bytes",
				name, len(p2), r2.cachedTokens, b[1], snapshotBytes(t, a, b[1]), len(a.eng.entries), sum)
		})
	}
}

// TestRealSnapshotsHTTP: the same through the Chat Completions API, where the engine finds the
// boundaries in the rendered conversation: the next user turn after an answer the client edited
// restores the end of the earlier messages, prefills the rest (the metric) and answers what a
// server without checkpoints answers — with and without a draft head.
func TestRealSnapshotsHTTP(t *testing.T) {
	for name, dir := range realBundles(t) {
		t.Run(name, func(t *testing.T) {
			a, aurl := openReal(t, dir, generate.Options{Backend: "cpu"}, Options{Context: 256, Checkpoints: 4})
			f, furl := openReal(t, dir, generate.Options{Backend: "cpu"}, Options{Context: 256, Checkpoints: -1})
			ta, tf := &testServer{Server: a, url: aurl}, &testServer{Server: f, url: furl}
			msgs := `{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}`
			ask := func(ts *testServer, msgs string) (string, int, int) {
				code, _, body := ts.post(t, "/v1/chat/completions", `{"model":"b","max_tokens":9,"messages":[`+msgs+`]}`)
				m := obj(t, string(body))
				if code != 200 {
					t.Fatalf("%d %s", code, body)
				}
				return path(m, "choices", 0, "message", "content").(string), int(path(m, "usage", "prompt_tokens").(float64)),
					int(path(m, "usage", "prompt_tokens_details", "cached_tokens").(float64))
			}
			ask(ta, msgs)
			next := msgs + `,{"role":"assistant","content":"Hi."},{"role":"user","content":"How are you?"}`
			before := a.m.prefillTokens.Load()
			got, prompt, cached := ask(ta, next)
			prefilled := int(a.m.prefillTokens.Load() - before)
			want, _, _ := ask(tf, next)
			end := countTokens(t, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n")
			if cached != end || prefilled != prompt-end || got != want {
				t.Fatalf("cached %d (want %d), prefilled %d of %d; answer %q, fresh %q", cached, end, prefilled, prompt, got, want)
			}
			_, _, m := ta.get(t, "/metrics")
			if !strings.Contains(string(m), "lithos_checkpoint_hits_total 1\n") {
				t.Fatalf("metrics:\n%s", m)
			}
		})
	}
}

// TestSnapshotBytesDocs: the snapshot sizes docs/serving.md §4 quotes for the 27B target and its
// DSpark head, and the fixture model's real snapshot: its Bytes is the formula and what
// Snapshot allocates.
func TestSnapshotBytesDocs(t *testing.T) {
	c := config27B()
	for _, x := range []struct {
		rows int
		want int64
	}{{0, 156_893_184}, {1, 156_893_184 + 131_072}, {8192, 1_230_635_008}, {30000, 4_089_053_184}, {32768, 4_451_860_480}} {
		if got := model.SnapshotBytes(&c, x.rows); got != x.want {
			t.Errorf("27B snapshot at %d positions: %d bytes, docs/serving.md says %d", x.rows, got, x.want)
		}
	}
	head := &draft.Drafter{Cfg: draft.Config{Layers: 5, KVHeads: 8, HeadDim: 128}}
	if got := head.ContextBytes(1); got != 40_960 {
		t.Errorf("27B DSpark context row: %d bytes, docs/serving.md says 40960", got)
	}
	if got := head.ContextBytes(8192); got != 335_544_320 {
		t.Errorf("27B DSpark context at 8192: %d bytes, docs/serving.md says 335544320", got)
	}

	dir := realBundle(t, gentest.Options{})
	s, _ := openReal(t, dir, generate.Options{Backend: "cpu"}, Options{Context: 4096})
	sess, err := s.eng.target.NewSession(backend.SessionOptions{Capacity: 4096, Sampling: sample.Params{TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	q := sess.(backend.NoSamplePrefiller)
	prompt := make([]int32, 300)
	for i := range prompt {
		prompt[i] = int32(i % 600)
	}
	if err := q.PrefillNoSample(context.Background(), prompt); err != nil {
		t.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	snap, err := sess.(backend.Snapshotter).Snapshot()
	runtime.ReadMemStats(&m1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.eng.target.Config()
	want := model.SnapshotBytes(&cfg, 300)
	// The allocator rounds each object up to its size class, at most a page (8 KiB) for a
	// large one: allow that much per allocation.
	alloc, objects := int64(m1.TotalAlloc-m0.TotalAlloc), int64(m1.Mallocs-m0.Mallocs)
	if snap.Bytes() != want || alloc < want || alloc > want+objects*8192 {
		t.Fatalf("a snapshot at 300 positions: Bytes %d, allocated %d in %d objects; the formula says %d", snap.Bytes(), alloc, objects, want)
	}
	t.Logf("fixture model: a snapshot at 300 positions holds %d bytes (%d allocated); a parked session of 4096 positions %d", snap.Bytes(), alloc, StateBytes(&cfg, 4096))
}

// config27B is the 27B target's geometry (qwen35-and-quant.md §A): 48 GDN layers (16 key heads,
// 48 value heads of 128, conv kernel 4) and 16 attention layers (4 KV heads of 256), one in four.
func config27B() model.Config {
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
	return c
}

// TestSessionBytesWithDraft: with a draft head a parked session also holds the drafter's
// context cache of its capacity (cpu.DSpark.StateBytes), which the engine counts; a CPU session
// with the head allocates that, plus the target state, plus the ring, the step state and the
// drafter's activation scratch.
func TestSessionBytesWithDraft(t *testing.T) {
	s, _ := openReal(t, realBundles(t)["draft"], generate.Options{Backend: "cpu"}, Options{Context: 4096})
	d := s.eng.draft.(cpu.DSpark)
	cfg := s.eng.target.Config()
	B := d.D.Cfg.BlockSize
	want := StateBytes(&cfg, 4096) + d.D.ContextBytes(4096+B)
	if s.eng.sessionBytes != want {
		t.Fatalf("engine counts %d bytes a session, want %d", s.eng.sessionBytes, want)
	}
	// The drafter's scratch (runtime/draft NewState): B rows of 4 hidden, 2 query, 2 KV, 2
	// intermediate and 1 vocabulary widths, a vocabulary row, 64 append rows of hidden + 2 KV —
	// allowed twice over, since its layout follows runtime/draft's kernels.
	c := d.D.Cfg
	qd, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	scratch := int64(4 * (B*(4*c.Hidden+2*qd+2*kv+2*c.Intermediate+c.Vocab) + c.Vocab + 64*(c.Hidden+2*kv)))
	extra := int64(backend.DefaultRingCapacity*8+64<<10) + 2*scratch
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	sess, err := s.eng.target.NewSession(backend.SessionOptions{Capacity: 4096, Sampling: sample.Params{TopP: 1}, Drafter: s.eng.draft})
	runtime.ReadMemStats(&m1)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	got := int64(m1.TotalAlloc - m0.TotalAlloc)
	t.Logf("a CPU session of 4096 positions with the draft head: %d bytes allocated, counted %d (+ at most %d)", got, want, extra)
	if got < want || got > want+extra {
		t.Fatalf("allocated %d bytes; counted %d (+ at most %d)", got, want, extra)
	}
}
