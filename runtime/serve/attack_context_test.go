package serve

import (
	"strings"
	"testing"
)

// Attack tests (security review): a prompt that cannot fit the context is refused, and the
// refusal must not cost much more than reading the body. Bodies may be 32 MiB; the
// rendering and tokenization before the queue run on the handler's goroutine, for any
// number of clients at once (the queue bounds only the requests that passed them), so each
// byte of a hopeless prompt is multiplied by the number of concurrent clients.

// TestAttackOverContextCost: a chat request whose one message is 4 MiB of digits (one token
// per byte) against a context of 4096 tokens. Expected: 400 context_length_exceeded with a
// cost of a few times the body — the tokenizer can stop once the prompt passes the context
// (or a prompt whose bytes exceed context × the longest token's bytes can be refused without
// tokenizing it). Observed: the whole text is tokenized into 4 M ids ([]int, then a copy as
// []int32) and pre-tokenizer pieces: 70× the body allocated; with 32 MiB bodies ~1 GB resident a
// request (measured on `lithos-run serve`: 3 concurrent 30 MB count_tokens requests took the
// server from 0.7 to 2.2 GB resident).
func TestAttackOverContextCost(t *testing.T) {
	// The body limit the server derives from a context of 4096 tokens (MaxBodyBytesFor: 1.25 MiB)
	// refuses this body with 413 before reading it; the limit is raised to the old default
	// (what --max-body-mb 32 still allows) so that the prompt reaches the tokenizer.
	ts := newTestServer(t, Options{Context: 4096, MaxBodyBytes: 32 << 20}, nil)
	const n = 4 << 20
	body := []byte(`{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("7", n) + `"}]}`)
	alloc, code := allocBytes(t, ts.Handler(), "/v1/chat/completions", body)
	t.Logf("%d B body refused with %d after allocating %d B (%.1f× the body)", len(body), code, alloc, float64(alloc)/float64(len(body)))
	if code != 400 {
		t.Fatalf("status %d, want 400 context_length_exceeded", code)
	}
	if limit := 16 * uint64(len(body)); alloc > limit {
		t.Errorf("a prompt of %d bytes that cannot fit 4096 tokens allocates %d B, over %d B (16× the body: decoding, rendering and a bounded tokenization): "+
			"it is tokenized to the end before the context check", n, alloc, limit)
	}
}
