package serve

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// Attack tests (security review): the cost of reading a request must grow linearly with the
// request. Bodies may be 32 MiB (MaxMaxBodyBytes, --max-body-mb 32), so anything quadratic in the number of
// messages or blocks is a CPU/memory amplifier that one client can trigger without ever
// reaching the queue.

// allocBytes returns the bytes allocated while h answers body on path, and the status.
func allocBytes(t *testing.T, h http.Handler, path string, body []byte) (uint64, int) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", path, strings.NewReader(string(body)))
	req.Host = "localhost" // httptest's default, example.com, is a foreign host (TestAttackDNSRebinding: 403)
	h.ServeHTTP(rec, req)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, rec.Code
}

// messagesBody is an Anthropic body; parts are marshalled as given.
func messagesBody(t *testing.T, v map[string]any) []byte {
	t.Helper()
	v["model"] = "tiny"
	v["max_tokens"] = 1
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAttackMessagesQuadraticConcat: Anthropic requests whose system text comes in many
// {"role":"system"} messages, or whose assistant turn holds many thinking blocks, are
// joined with `s += text` (anthropic.go toConversation), which copies the whole string each
// time: n pieces cost O(n²) bytes. The same text given at once is the control; the ratio of
// the allocations must stay bounded (linear code gives about 1–3×; the concatenation gives
// hundreds at n = 20000, and a 32 MiB body of 1-byte pieces costs minutes of CPU).
func TestAttackMessagesQuadraticConcat(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	h := ts.Handler()
	const n = 20000
	user := map[string]any{"role": "user", "content": "hi"}

	sysMsgs := make([]any, 0, n+1)
	for range n {
		sysMsgs = append(sysMsgs, map[string]any{"role": "system", "content": "x"})
	}
	sysMsgs = append(sysMsgs, user)
	joined := strings.TrimSuffix(strings.Repeat("x\n\n", n), "\n\n")

	thinking := make([]any, 0, n+1)
	for range n {
		thinking = append(thinking, map[string]any{"type": "thinking", "thinking": "x", "signature": ""})
	}
	thinking = append(thinking, map[string]any{"type": "text", "text": "ok"})

	texts := make([]any, 0, n)
	for range n {
		texts = append(texts, map[string]any{"type": "text", "text": "x"})
	}

	for _, c := range []struct {
		name            string
		attack, control map[string]any
	}{
		{"system messages",
			map[string]any{"messages": sysMsgs},
			map[string]any{"system": joined, "messages": []any{user}}},
		// Calibration: text blocks are collected in a slice and joined once (linear); they must
		// pass with the same allowance.
		{"text blocks (linear, passes)",
			map[string]any{"messages": []any{map[string]any{"role": "user", "content": texts}}},
			map[string]any{"messages": []any{map[string]any{"role": "user", "content": strings.TrimSuffix(strings.Repeat("x\n", n), "\n")}}}},
		{"thinking blocks",
			map[string]any{"messages": []any{user, map[string]any{"role": "assistant", "content": thinking}, user}},
			map[string]any{"messages": []any{user, map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "thinking", "thinking": strings.Repeat("x", n), "signature": ""},
				map[string]any{"type": "text", "text": "ok"}}}, user}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ab, ac := messagesBody(t, c.attack), messagesBody(t, c.control)
			attack, code := allocBytes(t, h, "/v1/messages/count_tokens", ab)
			if code != 200 {
				t.Fatalf("attack body: status %d", code)
			}
			control, code := allocBytes(t, h, "/v1/messages/count_tokens", ac)
			if code != 200 {
				t.Fatalf("control body: status %d", code)
			}
			// Allowance: decoding the pieces (twice: the request, then the blocks) costs a bounded multiple of the body.
			limit := control + 96*uint64(len(ab))
			t.Logf("%s: attack body %d B allocates %d B; same text at once (%d B body) %d B", c.name, len(ab), attack, len(ac), control)
			if attack > limit {
				t.Errorf("%d pieces of one byte (body %d B) allocate %d B, over %d B: the text is concatenated quadratically "+
					"(collect the pieces in a []string or strings.Builder and join once)", n, len(ab), attack, limit)
			}
		})
	}
}
