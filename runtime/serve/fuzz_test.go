package serve

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// The request decoders are fuzzed through the whole handler (decode, checks, template,
// tokenizer, queue, scripted generation, answer), without the network: whatever the body, the
// answer is a 200 with JSON or SSE, or a 4xx with a JSON error in the API's shape — never a
// panic, a 5xx or a non-JSON body.

func fuzzHandler(f *testing.F, path string, seeds []string) {
	ts := newTestServer(f, Options{Context: 512, MaxBodyBytes: 1 << 16}, nil)
	h := ts.Handler()
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", path, strings.NewReader(string(body)))
		req.Host = "localhost" // httptest's default, example.com, is refused (403) without an API key
		h.ServeHTTP(rec, req)
		out := rec.Body.String()
		ct := rec.Header().Get("Content-Type")
		switch {
		case rec.Code == 200 && strings.HasPrefix(ct, "text/event-stream"):
			for _, e := range parseSSE(t, []byte(out)) {
				if e.data != "[DONE]" && !json.Valid([]byte(e.data)) {
					t.Fatalf("SSE data is not JSON: %q", e.data)
				}
			}
		case rec.Code == 200 || (rec.Code >= 400 && rec.Code < 500):
			if !strings.HasPrefix(ct, "application/json") || !json.Valid([]byte(out)) {
				t.Fatalf("status %d, %s: %q", rec.Code, ct, out)
			}
			var m map[string]any
			json.Unmarshal([]byte(out), &m)
			if rec.Code >= 400 {
				if strings.HasPrefix(path, "/v1/messages") {
					if m["type"] != "error" {
						t.Fatalf("Anthropic error shape: %s", out)
					}
				} else if _, ok := m["error"].(map[string]any); !ok {
					t.Fatalf("OpenAI error shape: %s", out)
				}
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, out)
		}
	})
}

func FuzzChatCompletions(f *testing.F) {
	fuzzHandler(f, "/v1/chat/completions", []string{
		`{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"Hi"}]}`,
		`{"model":"tiny","stream":true,"stop":["o"],"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]}]}`,
		`{"model":"tiny","tools":` + weatherTools + `,"tool_choice":"required","messages":[{"role":"user","content":"weather"}]}`,
		`{"model":"tiny","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`,
		`{"model":"tiny","reasoning_effort":"high","messages":[{"role":"user","content":"think"}]}`,
		`{"model":"tiny","messages":[`, `[]`, `{"model":1}`,
	})
}

func FuzzMessages(f *testing.F) {
	fuzzHandler(f, "/v1/messages", []string{
		`{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"Hi"}]}`,
		`{"model":"tiny","max_tokens":50,"stream":true,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"weather"}]}],
		  "tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],"tool_choice":{"type":"any"}}`,
		`{"model":"tiny","max_tokens":9,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
		  {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r","is_error":true}]}]}`,
		`{"model":"tiny","max_tokens":9,"thinking":{"type":"enabled","budget_tokens":100},"messages":[{"role":"user","content":"think"}]}`,
		`{"model":"tiny","max_tokens":-1}`, `{`,
	})
}

func FuzzResponses(f *testing.F) {
	fuzzHandler(f, "/v1/responses", []string{
		`{"model":"tiny","input":"Hi","max_output_tokens":4}`,
		`{"model":"tiny","stream":true,"instructions":"s","input":[{"role":"user","content":[{"type":"input_text","text":"patch"}]}],
		  "tools":[{"type":"custom","name":"apply_patch"},{"type":"function","name":"f","parameters":{"type":"object"}}]}`,
		`{"model":"tiny","input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"r"}]}`,
		`{"model":"tiny","input":[{"type":"reasoning","summary":[]}]}`, `{"input":null}`,
	})
}
