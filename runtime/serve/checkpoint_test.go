package serve

import (
	"fmt"
	"strings"
	"testing"
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
	ts := newTestServer(t, Options{Checkpoints: 2}, func(ft *fakeTarget) { ft.script = echoScript })
	a1, pa1, c := turn(t, ts, "", "a1")
	if a1 != "echo: a1" || c != 0 {
		t.Fatalf("a1: %q cached %d", a1, c)
	}
	outA1 := countTokens(t, a1) // generated tokens but the EOS: fed to the state
	turn(t, ts, "", "b1")
	prefilled0, _, _ := ts.ft.counts()
	a2, pa2, c := turn(t, ts, "", "a1", a1, "a2")
	prefilled1, _, _ := ts.ft.counts()
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
		fmt.Sprintf("lithos_checkpoint_bytes %d\n", 2*StateBytes(&ts.ft.cfg, 4096))} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
	// Every session the backend opened is closed or held.
	_, sessions, closed := ts.ft.counts()
	if sessions-closed != 2 {
		t.Errorf("%d sessions opened, %d closed: want 2 held", sessions, closed)
	}
	// No checkpoints: nothing reused, nothing held.
	ts0 := newTestServer(t, Options{Checkpoints: -1}, func(ft *fakeTarget) { ft.script = echoScript })
	turn(t, ts0, "", "a1")
	if _, _, c := turn(t, ts0, "", "a1", a1, "a2"); c != 0 {
		t.Fatalf("checkpoints off, cached %d", c)
	}
	if _, sessions, closed := ts0.ft.counts(); sessions != closed {
		t.Errorf("checkpoints off: %d sessions opened, %d closed", sessions, closed)
	}
}

// TestSnapshots: with a backend whose sessions can copy their state (Snapshotter), the engine
// saves a checkpoint at the end of the system prefix inside the prompt; a new conversation with
// the same system prompt restores it and prefills only the rest — with the answer a fresh
// prefill gives.
func TestSnapshots(t *testing.T) {
	// The answer depends on the whole history: its length in bytes.
	script := func(h string) string { return fmt.Sprintf("%s has %d bytes before it", lastUser(h), len(h)) }
	snap := newTestServer(t, Options{Checkpoints: 4}, func(ft *fakeTarget) { ft.script, ft.snapshots = script, true })
	fresh := newTestServer(t, Options{Checkpoints: -1}, func(ft *fakeTarget) { ft.script = script })
	sys := `{"role":"system","content":"You are a careful assistant."}`
	ask := func(ts *testServer, user string) (string, int) {
		code, _, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[`+sys+`,{"role":"user","content":"`+user+`"}]}`)
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		m := obj(t, string(body))
		return path(m, "choices", 0, "message", "content").(string), int(path(m, "usage", "prompt_tokens_details", "cached_tokens").(float64))
	}
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
	snap.ft.mu.Lock()
	restores, snaps := snap.ft.restores, snap.ft.snaps
	snap.ft.mu.Unlock()
	// Saved: the system prefix once, the end of each conversation's messages.
	if restores != 2 || snaps != 4 {
		t.Fatalf("%d restores, %d snapshots: want 2 and 4", restores, snaps)
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
