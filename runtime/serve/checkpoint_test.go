package serve

import (
	"fmt"
	"strings"
	"testing"

	"lithos/runtime/chat"
	"lithos/runtime/generate"
)

// turn posts an agent's conversation — a user message, then assistant answers alternating
// with tool results — and returns the answer, the prompt tokens and the cached tokens.
func turn(t *testing.T, ts *testServer, extra string, texts ...string) (string, int, int) {
	t.Helper()
	var msgs []string
	for i, s := range texts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		} else if i > 0 {
			role = "tool"
		}
		msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, s))
	}
	code, _, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny",`+extra+`"messages":[`+strings.Join(msgs, ",")+`]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	m := obj(t, string(body))
	return path(m, "choices", 0, "message", "content").(string), int(path(m, "usage", "prompt_tokens").(float64)),
		int(path(m, "usage", "prompt_tokens_details", "cached_tokens").(float64))
}

// TestParkedSessions: the live state at the end of each generation is kept (LRU, at most
// Checkpoints); a request extending one of those histories (an agent's tool loop, which the
// template renders by appending) prefills only its new tokens; a different sampling setting,
// a diverging conversation or an evicted entry prefill all.
func TestParkedSessions(t *testing.T) {
	ts := newTestServer(t, Options{Checkpoints: 2}, func(ft *fakeTarget) { ft.Script = echoScript })
	a1, pa1, c := turn(t, ts, "", "a1")
	if a1 != "echo: a1" || c != 0 {
		t.Fatalf("a1: %q cached %d", a1, c)
	}
	outA1 := countTokens(t, a1) // generated tokens but the EOS: fed to the state
	turn(t, ts, "", "b1")
	prefilled0 := ts.ft.Counts().Prefilled
	a2, pa2, c := turn(t, ts, "", "a1", a1, "a2")
	prefilled1 := ts.ft.Counts().Prefilled
	if a2 != "echo: a2" || c != pa1+outA1 || prefilled1-prefilled0 != pa2-c {
		t.Fatalf("a2: %q cached %d, want %d; prefilled %d of %d", a2, c, pa1+outA1, prefilled1-prefilled0, pa2)
	}
	// Held: b1's and a2's sessions. The same conversation sampled differently cannot continue
	// the greedy session; its own session evicts b1's, the least recently used.
	if _, _, c := turn(t, ts, `"temperature":0.5,"seed":7,`, "a1", a1, "a2", a2, "a3"); c != 0 {
		t.Fatalf("another temperature reused the session: cached %d", c)
	}
	if _, _, c := turn(t, ts, "", "b1", "echo: b1", "b2"); c != 0 {
		t.Fatalf("an evicted checkpoint was used: cached %d", c)
	}
	// b2's session evicted a2's (then the least recently used), so a greedy a3 starts over.
	if _, _, c := turn(t, ts, "", "a1", a1, "a2", a2, "a3"); c != 0 {
		t.Fatalf("an evicted checkpoint was used: cached %d", c)
	}
	_, _, m := ts.get(t, "/metrics")
	for _, want := range []string{"lithos_checkpoint_hits_total 1\n", "lithos_checkpoint_misses_total 5\n",
		"lithos_checkpoints 2\n", "lithos_checkpoint_evictions_total 3\n",
		fmt.Sprintf("lithos_checkpoint_bytes %d\n", 2*StateBytes(&ts.ft.Cfg, 4096))} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
	// Every session the backend opened is closed or held.
	if n := ts.ft.Counts(); n.Sessions-n.Closed != 2 {
		t.Errorf("%d sessions opened, %d closed: want 2 held", n.Sessions, n.Closed)
	}
	// No checkpoints: nothing reused, nothing held.
	ts0 := newTestServer(t, Options{Checkpoints: -1}, func(ft *fakeTarget) { ft.Script = echoScript })
	turn(t, ts0, "", "a1")
	if _, _, c := turn(t, ts0, "", "a1", a1, "a2"); c != 0 {
		t.Fatalf("checkpoints off, cached %d", c)
	}
	if n := ts0.ft.Counts(); n.Sessions != n.Closed {
		t.Errorf("checkpoints off: %d sessions opened, %d closed", n.Sessions, n.Closed)
	}
}

// TestSnapshots: with a backend whose sessions can copy their state (Snapshotter), the engine
// saves a checkpoint at the end of the system prefix inside the prompt; a new conversation with
// the same system prompt restores it and prefills only the rest — with the answer a fresh
// prefill gives.
func TestSnapshots(t *testing.T) {
	// The answer depends on the whole history: its length in bytes.
	script := func(h string) string { return fmt.Sprintf("%s has %d bytes before it", lastUser(h), len(h)) }
	snap := newTestServer(t, Options{Checkpoints: 4}, func(ft *fakeTarget) { ft.Script, ft.Snapshots = script, true })
	fresh := newTestServer(t, Options{Checkpoints: -1}, func(ft *fakeTarget) { ft.Script = script })
	sys := `{"role":"system","content":"You are a careful assistant."}`
	ask := func(ts *testServer, user string) (string, int) { return askWithSystem(t, ts, sys, user) }
	sysTokens := countTokens(t, "<|im_start|>system\nYou are a careful assistant.<|im_end|>\n")
	for i, user := range []string{"first question", "second question", "third one"} {
		got, cached := ask(snap, user)
		want, _ := ask(fresh, user)
		if got != want {
			t.Fatalf("%s: %q from a checkpoint, %q fresh", user, got, want)
		}
		if wantCached := min(i, 1) * sysTokens; cached != wantCached {
			t.Fatalf("%s: cached %d, want %d", user, cached, wantCached)
		}
	}
	n := snap.ft.Counts()
	restores, snaps := n.Restores, n.Snapshots
	// Saved: the system prefix once, the end of each conversation's messages (and the
	// server's probe of the hook at start).
	if restores != 2 || snaps != 1+4 {
		t.Fatalf("%d restores, %d snapshots: want 2 and 1+4", restores, snaps)
	}

	// A new user turn: the template renders the earlier answer without its think block, so the
	// state after the answer is no prefix; the checkpoint before the assistant header is.
	code, _, body := snap.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[`+sys+`,{"role":"user","content":"third one"},
		{"role":"assistant","content":"an answer"},{"role":"user","content":"and then?"}]}`)
	m := obj(t, string(body))
	before := countTokens(t, "<|im_start|>system\nYou are a careful assistant.<|im_end|>\n<|im_start|>user\nthird one<|im_end|>\n")
	if code != 200 || path(m, "usage", "prompt_tokens_details", "cached_tokens") != float64(before) {
		t.Fatalf("next turn: %d %s: want %d cached", code, body, before)
	}
}

// TestSnapshotRestoreFails: when a Restore fails (a GPU session's can fail after it began
// copying, its state then undefined), the engine closes that session and answers from a new
// one: the same answer a server without checkpoints gives, no cached tokens, and every opened
// session closed or held.
func TestSnapshotRestoreFails(t *testing.T) {
	script := func(h string) string { return fmt.Sprintf("%s has %d bytes before it", lastUser(h), len(h)) }
	snap := newTestServer(t, Options{Checkpoints: 4}, func(ft *fakeTarget) { ft.Script, ft.Snapshots, ft.FailRestore = script, true, true })
	fresh := newTestServer(t, Options{Checkpoints: -1}, func(ft *fakeTarget) { ft.Script = script })
	sys := `{"role":"system","content":"You are a careful assistant."}`
	for _, user := range []string{"first question", "second question"} {
		got, cached := askWithSystem(t, snap, sys, user)
		want, _ := askWithSystem(t, fresh, sys, user)
		if got != want || cached != 0 {
			t.Fatalf("%s: %q (cached %v) with a failing restore, %q fresh", user, got, cached, want)
		}
	}
	n := snap.ft.Counts()
	if n.Restores != 0 || n.Sessions-n.Closed > 4 {
		t.Fatalf("counts %+v: want no restore and at most the 4 checkpoints held", n)
	}
}

// askWithSystem posts a chat completion of the system message sys (a JSON message object) and
// one user message; it returns the answer and the prompt tokens served from a checkpoint.
func askWithSystem(t *testing.T, ts *testServer, sys, user string) (string, int) {
	t.Helper()
	code, _, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[`+sys+`,{"role":"user","content":"`+user+`"}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	m := obj(t, string(body))
	return path(m, "choices", 0, "message", "content").(string), int(path(m, "usage", "prompt_tokens_details", "cached_tokens").(float64))
}

// metric returns the value of an unlabelled metric in ts's exposition.
func metric(t *testing.T, ts *testServer, name string) string {
	t.Helper()
	_, _, m := ts.get(t, "/metrics")
	for _, line := range strings.Split(string(m), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("metrics lack %s:\n%s", name, m)
	return ""
}

// TestCheckpointBudget: --checkpoint bytes bound the checkpoints together besides their count:
// parked sessions (StateBytes of the context each) beyond the budget are evicted least recently
// used first; a checkpoint larger than the budget alone is not kept (and evicts nothing);
// snapshots and parked sessions share the budget.
func TestCheckpointBudget(t *testing.T) {
	tok, cfg, tpl := fixture(t)
	S := StateBytes(&cfg, 4096)
	echo := func(ft *fakeTarget) { ft.Script = echoScript }

	ts := newTestServer(t, Options{Checkpoints: 10, CheckpointBytes: 2 * S}, echo)
	for _, u := range []string{"a1", "b1", "c1"} {
		turn(t, ts, "", u)
	}
	if _, _, c := turn(t, ts, "", "a1", "echo: a1", "a2"); c != 0 {
		t.Fatalf("a1's session was kept past the budget: cached %d", c)
	}
	if _, _, c := turn(t, ts, "", "c1", "echo: c1", "c2"); c == 0 {
		t.Fatal("c1's session, within the budget, was not reused")
	}
	// Evicted: a1's session (by c1's) and b1's (by a2's); held: a2's and c2's.
	for name, want := range map[string]string{"lithos_checkpoints": "2", "lithos_checkpoint_bytes": fmt.Sprint(2 * S),
		"lithos_checkpoint_budget_bytes": fmt.Sprint(2 * S), "lithos_checkpoint_evictions_total": "2", "lithos_checkpoints_refused_total": "0"} {
		if got := metric(t, ts, name); got != want {
			t.Errorf("%s %s, want %s", name, got, want)
		}
	}

	small := newTestServer(t, Options{Checkpoints: 10, CheckpointBytes: S - 1}, echo)
	turn(t, small, "", "a1")
	if _, _, c := turn(t, small, "", "a1", "echo: a1", "a2"); c != 0 {
		t.Fatalf("a session larger than the budget was kept: cached %d", c)
	}
	if n := small.ft.Counts(); n.Sessions != n.Closed || metric(t, small, "lithos_checkpoints_refused_total") != "2" || metric(t, small, "lithos_checkpoints") != "0" {
		t.Fatalf("budget below a session: %d sessions opened, %d closed; metrics refused %s, held %s", n.Sessions, n.Closed,
			metric(t, small, "lithos_checkpoints_refused_total"), metric(t, small, "lithos_checkpoints"))
	}

	// Snapshots (4 bytes a token in the scripted backend) and one parked session at most.
	script := func(h string) string { return fmt.Sprintf("%s has %d bytes before it", lastUser(h), len(h)) }
	budget := S + 400
	snap := newTestServer(t, Options{Checkpoints: 10, CheckpointBytes: budget}, func(ft *fakeTarget) { ft.Script, ft.Snapshots = script, true })
	sysTokens := countTokens(t, "<|im_start|>system\nYou are a careful assistant.<|im_end|>\n")
	for i, user := range []string{"first question", "second question", "third one"} {
		code, _, body := snap.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"system","content":"You are a careful assistant."},{"role":"user","content":"`+user+`"}]}`)
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		if c := path(obj(t, string(body)), "usage", "prompt_tokens_details", "cached_tokens"); c != float64(min(i, 1)*sysTokens) {
			t.Fatalf("%s: cached %v, want %d", user, c, min(i, 1)*sysTokens)
		}
		var held int64
		sessions := 0
		for _, e := range snap.eng.entries {
			held += e.bytes
			if e.sess != nil {
				sessions++
			}
		}
		if held > budget || sessions != 1 || metric(t, snap, "lithos_checkpoint_bytes") != fmt.Sprint(held) {
			t.Fatalf("%s: %d checkpoints hold %d bytes (%d parked sessions), budget %d", user, len(snap.eng.entries), held, sessions, budget)
		}
	}

	if _, err := New(Model{Target: &fakeTarget{Cfg: cfg, Tok: tok}, Tokenizer: tok, Chat: &chat.Config{Templates: map[string]string{"default": tpl}}},
		Options{Names: []string{"x"}, CheckpointBytes: -1}); err == nil || !strings.Contains(err.Error(), "checkpoint budget") {
		t.Error("a negative checkpoint budget was accepted")
	}
	for _, k := range []int{-1, generate.MaxRoundsPerCall + 1} {
		if _, err := New(Model{Target: &fakeTarget{Cfg: cfg, Tok: tok}, Tokenizer: tok, Chat: &chat.Config{Templates: map[string]string{"default": tpl}}},
			Options{Names: []string{"x"}, RoundsPerCall: k}); err == nil || !strings.Contains(err.Error(), "rounds per call") {
			t.Errorf("rounds per call %d accepted (%v)", k, err)
		}
	}
}

// TestRecycle: when parking the next session would evict the least recently used parked
// session anyway, and its sampling constants are the request's, the engine resets that session
// (backend.Resetter) and uses it instead of allocating one — its answer is a fresh session's —
// and keeps it parked afterwards; a request with other sampling constants gets a new session.
func TestRecycle(t *testing.T) {
	ts := newTestServer(t, Options{Checkpoints: 1}, func(ft *fakeTarget) { ft.Script, ft.Resets = echoScript, true })
	turn(t, ts, "", "a1") // the probe's session and a1's: 2 opened, the probe closed
	if a, _, c := turn(t, ts, "", "b1"); a != "echo: b1" || c != 0 {
		t.Fatalf("b1 on a recycled session: %q, cached %d", a, c)
	}
	if n := ts.ft.Counts(); n.Sessions != 2 || n.Closed != 1 || n.Resets != 1 {
		t.Fatalf("%d sessions opened, %d closed, %d resets: want 2, 1, 1", n.Sessions, n.Closed, n.Resets)
	}
	if a, _, c := turn(t, ts, "", "b1", "echo: b1", "b2"); a != "echo: b2" || c == 0 {
		t.Fatalf("b2 after the recycled b1: %q, cached %d", a, c)
	}
	if _, _, c := turn(t, ts, `"temperature":0.5,`, "c1"); c != 0 {
		t.Fatalf("c1: cached %d", c)
	}
	if n := ts.ft.Counts(); n.Sessions != 3 || n.Closed != 2 || metric(t, ts, "lithos_sessions_reused_total") != "1" {
		t.Fatalf("another temperature: %d sessions opened, %d closed, %s reused: want 3, 2, 1", n.Sessions, n.Closed, metric(t, ts, "lithos_sessions_reused_total"))
	}
	// With room for both, nothing is recycled.
	roomy := newTestServer(t, Options{Checkpoints: 2}, func(ft *fakeTarget) { ft.Script, ft.Resets = echoScript, true })
	turn(t, roomy, "", "a1")
	turn(t, roomy, "", "b1")
	if n := roomy.ft.Counts(); n.Sessions != 3 {
		t.Fatalf("with room for two: %d sessions opened, want 3", n.Sessions)
	}
}
