package serve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

const (
	hello     = "Hello there, world. How are you?"
	genHeader = "<|im_start|>assistant\n<think>\n\n</think>\n\n" // the template's generation prompt, thinking off
)

const weatherTools = `[{"type":"function","function":{"name":"get_weather","description":"Weather of a city.",
 "parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}}]`

func TestModelsHealth(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	code, _, body := ts.get(t, "/health")
	if code != 200 || obj(t, string(body))["status"] != "ok" {
		t.Fatalf("health: %d %s", code, body)
	}
	code, _, body = ts.get(t, "/v1/models")
	m := obj(t, string(body))
	if code != 200 || m["object"] != "list" || path(m, "data", 0, "id") != "tiny" || path(m, "data", 0, "object") != "model" ||
		path(m, "data", 0, "context_window") != 4096.0 || path(m, "data", 0, "type") != "model" || path(m, "data", 1) != nil {
		t.Fatalf("models: %d %s", code, body)
	}
	code, _, body = ts.get(t, "/v1/models/tiny-alias")
	if code != 200 || obj(t, string(body))["id"] != "tiny-alias" {
		t.Fatalf("model alias: %d %s", code, body)
	}
	code, _, body = ts.get(t, "/v1/models/gpt-4")
	if code != 404 || path(obj(t, string(body)), "error", "code") != "model_not_found" {
		t.Fatalf("unknown model: %d %s", code, body)
	}
}

func TestChatCompletion(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	code, hdr, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[
		{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"there"}]}]}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	m := obj(t, string(body))
	wantPrompt := countTokens(t, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi\nthere<|im_end|>\n"+genHeader)
	wantOut := countTokens(t, hello) + 1 // the EOS counts
	if m["object"] != "chat.completion" || m["model"] != "tiny" || !strings.HasPrefix(m["id"].(string), "chatcmpl-") ||
		path(m, "choices", 0, "message", "role") != "assistant" || path(m, "choices", 0, "message", "content") != hello ||
		path(m, "choices", 0, "finish_reason") != "stop" || path(m, "choices", 0, "message", "tool_calls") != nil {
		t.Fatalf("completion: %s", body)
	}
	if path(m, "usage", "prompt_tokens") != float64(wantPrompt) || path(m, "usage", "completion_tokens") != float64(wantOut) ||
		path(m, "usage", "total_tokens") != float64(wantPrompt+wantOut) || path(m, "usage", "prompt_tokens_details", "cached_tokens") != 0.0 {
		t.Fatalf("usage %v: want prompt %d, completion %d", m["usage"], wantPrompt, wantOut)
	}
	if hdr.Get("X-Lithos-Prompt-Tokens") != fmt.Sprint(wantPrompt) {
		t.Errorf("X-Lithos-Prompt-Tokens %q", hdr.Get("X-Lithos-Prompt-Tokens"))
	}
	// The model name may be an alias; the answer names what was asked for.
	_, _, body = ts.post(t, "/v1/chat/completions", `{"model":"tiny-alias","messages":[{"role":"user","content":"Hi"}]}`)
	if obj(t, string(body))["model"] != "tiny-alias" {
		t.Errorf("alias: %s", body)
	}
}

func TestChatLimits(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	// max_tokens: finish length after exactly that many tokens.
	_, _, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":3,"messages":[{"role":"user","content":"Hi"}]}`)
	m := obj(t, string(body))
	tok, _, _ := fixture(t)
	ids, _ := tok.Encode(hello)
	want, _ := tok.Decode(ids[:3], true)
	if path(m, "choices", 0, "finish_reason") != "length" || path(m, "usage", "completion_tokens") != 3.0 || path(m, "choices", 0, "message", "content") != want {
		t.Fatalf("max_tokens 3: %s (want content %q)", body, want)
	}
	// max_completion_tokens wins over max_tokens.
	_, _, body = ts.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":3,"max_completion_tokens":5,"messages":[{"role":"user","content":"Hi"}]}`)
	if path(obj(t, string(body)), "usage", "completion_tokens") != 5.0 {
		t.Fatalf("max_completion_tokens 5: %s", body)
	}
	// Stop sequences cut the text before the earliest one.
	_, _, body = ts.post(t, "/v1/chat/completions", `{"model":"tiny","stop":["How","world"],"messages":[{"role":"user","content":"Hi"}]}`)
	m = obj(t, string(body))
	if path(m, "choices", 0, "message", "content") != "Hello there, " || path(m, "choices", 0, "finish_reason") != "stop" {
		t.Fatalf("stop: %s", body)
	}
	_, _, body = ts.post(t, "/v1/chat/completions", `{"model":"tiny","stop":"?","messages":[{"role":"user","content":"Hi"}]}`)
	if path(obj(t, string(body)), "choices", 0, "message", "content") != "Hello there, world. How are you" {
		t.Fatalf("stop string: %s", body)
	}
}

// chatStream posts a streaming request and returns the chunks (without [DONE]) and whether
// [DONE] ended the stream.
func chatStream(t *testing.T, ts *testServer, body string) ([]map[string]any, bool) {
	t.Helper()
	code, hdr, data := ts.post(t, "/v1/chat/completions", body)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s: %s", code, hdr.Get("Content-Type"), data)
	}
	var chunks []map[string]any
	done := false
	for _, e := range parseSSE(t, data) {
		if e.name != "" {
			t.Fatalf("chat chunks carry no event name: %+v", e)
		}
		if done {
			t.Fatalf("data after [DONE]: %s", e.data)
		}
		if e.data == "[DONE]" {
			done = true
			continue
		}
		chunks = append(chunks, obj(t, e.data))
	}
	return chunks, done
}

// TestChatStream: a streamed chat completion (usage chunk, stop sequences never streamed), with
// one decode step per call and with 4 (Options.RoundsPerCall): the same stream.
func TestChatStream(t *testing.T) {
	for _, k := range []int{0, 4} {
		t.Run(fmt.Sprintf("rounds-per-call-%d", k), func(t *testing.T) { testChatStream(t, k) })
	}
}

func testChatStream(t *testing.T, perCall int) {
	ts := newTestServer(t, Options{RoundsPerCall: perCall}, nil)
	chunks, done := chatStream(t, ts, `{"model":"tiny","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hi"}]}`)
	if !done || len(chunks) < 4 {
		t.Fatalf("done %v, %d chunks", done, len(chunks))
	}
	first := chunks[0]
	if path(first, "choices", 0, "delta", "role") != "assistant" || path(first, "choices", 0, "delta", "content") != "" {
		t.Fatalf("first chunk %v", first)
	}
	var text strings.Builder
	id := first["id"]
	for i, c := range chunks[1 : len(chunks)-2] {
		if c["id"] != id || c["object"] != "chat.completion.chunk" || path(c, "choices", 0, "finish_reason") != nil {
			t.Fatalf("chunk %d: %v", i+1, c)
		}
		text.WriteString(path(c, "choices", 0, "delta", "content").(string))
	}
	last := chunks[len(chunks)-2]
	if path(last, "choices", 0, "finish_reason") != "stop" || len(path(last, "choices", 0, "delta").(map[string]any)) != 0 {
		t.Fatalf("finish chunk %v", last)
	}
	usage := chunks[len(chunks)-1]
	if len(usage["choices"].([]any)) != 0 || path(usage, "usage", "completion_tokens") != float64(countTokens(t, hello)+1) {
		t.Fatalf("usage chunk %v", usage)
	}
	if text.String() != hello {
		t.Fatalf("streamed %q, want %q", text.String(), hello)
	}
	// Without include_usage there is no usage chunk; stop sequences are never streamed.
	chunks, done = chatStream(t, ts, `{"model":"tiny","stream":true,"stop":["wor"],"messages":[{"role":"user","content":"Hi"}]}`)
	text.Reset()
	for _, c := range chunks[1 : len(chunks)-1] {
		text.WriteString(path(c, "choices", 0, "delta", "content").(string))
	}
	if !done || text.String() != "Hello there, " || path(chunks[len(chunks)-1], "choices", 0, "finish_reason") != "stop" || chunks[len(chunks)-1]["usage"] != nil {
		t.Fatalf("stop stream: %q %v", text.String(), chunks[len(chunks)-1])
	}
}

func TestChatToolCalls(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	req := `{"model":"tiny","tools":` + weatherTools + `,"messages":[{"role":"user","content":"What is the weather in Paris?"}]}`
	code, _, body := ts.post(t, "/v1/chat/completions", req)
	m := obj(t, string(body))
	if code != 200 || path(m, "choices", 0, "finish_reason") != "tool_calls" || path(m, "choices", 0, "message", "content") != "I will check." {
		t.Fatalf("tool call: %d %s", code, body)
	}
	usage1 := [2]int{int(path(m, "usage", "prompt_tokens").(float64)), int(path(m, "usage", "completion_tokens").(float64))}
	call := path(m, "choices", 0, "message", "tool_calls", 0)
	id, _ := path(call, "id").(string)
	if !strings.HasPrefix(id, "call_") || path(call, "type") != "function" || path(call, "function", "name") != "get_weather" {
		t.Fatalf("call %v", call)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(path(call, "function", "arguments").(string)), &args); err != nil ||
		!reflect.DeepEqual(args, map[string]any{"city": "Paris", "days": 3.0}) {
		t.Fatalf("arguments %v (%v): the integer parameter must be typed by the schema", path(call, "function", "arguments"), err)
	}

	// Streamed: the id, type and name first, then argument fragments that add up to the same
	// JSON, no tag in the content.
	chunks, done := chatStream(t, ts, strings.Replace(req, `"model":"tiny",`, `"model":"tiny","stream":true,`, 1))
	var content, streamedArgs strings.Builder
	starts := 0
	for _, c := range chunks {
		d := path(c, "choices", 0, "delta")
		if s, ok := path(d, "content").(string); ok {
			content.WriteString(s)
		}
		if tc := path(d, "tool_calls", 0); tc != nil {
			if path(tc, "index") != 0.0 {
				t.Fatalf("tool call delta %v", tc)
			}
			if path(tc, "id") != nil {
				starts++
				if path(tc, "function", "name") != "get_weather" || path(tc, "type") != "function" || starts > 1 || streamedArgs.Len() > 0 {
					t.Fatalf("call start %v", tc)
				}
			}
			streamedArgs.WriteString(path(tc, "function", "arguments").(string))
		}
	}
	if !done || starts != 1 || content.String() != "I will check." || path(chunks[len(chunks)-1], "choices", 0, "finish_reason") != "tool_calls" {
		t.Fatalf("stream: done %v, %d starts, content %q, last %v", done, starts, content.String(), chunks[len(chunks)-1])
	}
	var sargs map[string]any
	if err := json.Unmarshal([]byte(streamedArgs.String()), &sargs); err != nil || !reflect.DeepEqual(sargs, args) {
		t.Fatalf("streamed arguments %q", streamedArgs.String())
	}

	// The round trip: the call and its result go back through the template, and the prompt
	// extends the first one's history, so only the new part is prefilled.
	prefilled0 := ts.ft.Counts().Prefilled
	args1 := path(call, "function", "arguments").(string)
	req2 := `{"model":"tiny","tools":` + weatherTools + `,"messages":[{"role":"user","content":"What is the weather in Paris?"},
		{"role":"assistant","content":"I will check.","tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"get_weather","arguments":` + jsonString(args1) + `}}]},
		{"role":"tool","tool_call_id":"` + id + `","content":"sunny, 21 C"}]}`
	code, _, body = ts.post(t, "/v1/chat/completions", req2)
	m = obj(t, string(body))
	if code != 200 || path(m, "choices", 0, "message", "content") != "It is sunny in Paris." || path(m, "choices", 0, "finish_reason") != "stop" {
		t.Fatalf("round trip: %d %s", code, body)
	}
	prefilled1 := ts.ft.Counts().Prefilled
	prompt2 := int(path(m, "usage", "prompt_tokens").(float64))
	cached := int(path(m, "usage", "prompt_tokens_details", "cached_tokens").(float64))
	// The first request's history: its prompt and every generated token but the EOS.
	want := usage1[0] + usage1[1] - 1
	if cached != want || prefilled1-prefilled0 != prompt2-cached {
		t.Fatalf("cached %d of %d prompt tokens (want %d), prefilled %d", cached, prompt2, want, prefilled1-prefilled0)
	}
	hist := ts.lastHistory(t)
	if !strings.Contains(hist, "<|im_start|>assistant\n<think>\n\n</think>\n\nI will check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>\n"+genHeader) {
		t.Fatalf("the round trip's prompt does not render the call and its result: %q", hist)
	}
}

// lastHistory returns the text of the whole history of the last generation's prompt (the
// scripted backend keeps it).
func (ts *testServer) lastHistory(t *testing.T) string {
	t.Helper()
	hist := ts.ft.LastHistory()
	if hist == "" {
		t.Fatal("no prefill recorded")
	}
	return hist
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestChatThinking(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	// Thinking off (the default): the template closes the think block; the output is all answer.
	_, _, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"Hi"}]}`)
	if path(obj(t, string(body)), "choices", 0, "message", "reasoning_content") != nil {
		t.Fatalf("thinking off: %s", body)
	}
	// On: the prompt ends inside <think>; the text before </think> is reasoning.
	for _, on := range []string{`"reasoning_effort":"high"`, `"chat_template_kwargs":{"enable_thinking":true}`} {
		_, _, body = ts.post(t, "/v1/chat/completions", `{"model":"tiny",`+on+`,"messages":[{"role":"user","content":"think about it"}]}`)
		m := obj(t, string(body))
		if path(m, "choices", 0, "message", "reasoning_content") != "The user wants a number." || path(m, "choices", 0, "message", "content") != "The answer is 42." {
			t.Fatalf("%s: %s", on, body)
		}
		if h := ts.lastHistory(t); !strings.Contains(h, "<|im_start|>assistant\n<think>\n") || strings.Contains(h, "<think>\n\n</think>") {
			t.Fatalf("%s: the prompt does not open a think block: %q", on, h)
		}
	}
	chunks, _ := chatStream(t, ts, `{"model":"tiny","stream":true,"reasoning_effort":"low","messages":[{"role":"user","content":"think about it"}]}`)
	var reasoning, content strings.Builder
	for _, c := range chunks {
		if s, ok := path(c, "choices", 0, "delta", "reasoning_content").(string); ok {
			reasoning.WriteString(s)
		}
		if s, ok := path(c, "choices", 0, "delta", "content").(string); ok {
			content.WriteString(s)
		}
	}
	if reasoning.String() != "The user wants a number." || content.String() != "The answer is 42." {
		t.Fatalf("streamed reasoning %q, content %q", reasoning.String(), content.String())
	}
}

func TestMessages(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	code, _, body := ts.post(t, "/v1/messages", `{"model":"tiny","max_tokens":100,"system":[{"type":"text","text":"Be brief."}],
		"messages":[{"role":"user","content":"Hi"}]}`, "anthropic-version", "2023-06-01")
	m := obj(t, string(body))
	wantPrompt := countTokens(t, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"+genHeader)
	if code != 200 || m["type"] != "message" || m["role"] != "assistant" || !strings.HasPrefix(m["id"].(string), "msg_") ||
		path(m, "content", 0, "type") != "text" || path(m, "content", 0, "text") != hello || path(m, "content", 1) != nil ||
		m["stop_reason"] != "end_turn" || m["stop_sequence"] != nil ||
		path(m, "usage", "input_tokens") != float64(wantPrompt) || path(m, "usage", "output_tokens") != float64(countTokens(t, hello)+1) {
		t.Fatalf("messages: %d %s (want %d input tokens)", code, body, wantPrompt)
	}
	// stop_sequences → stop_reason stop_sequence naming it; max_tokens → max_tokens.
	_, _, body = ts.post(t, "/v1/messages", `{"model":"tiny","max_tokens":100,"stop_sequences":["world"],"messages":[{"role":"user","content":"Hi"}]}`)
	m = obj(t, string(body))
	if m["stop_reason"] != "stop_sequence" || m["stop_sequence"] != "world" || path(m, "content", 0, "text") != "Hello there, " {
		t.Fatalf("stop sequence: %s", body)
	}
	_, _, body = ts.post(t, "/v1/messages", `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"Hi"}]}`)
	if m = obj(t, string(body)); m["stop_reason"] != "max_tokens" || path(m, "usage", "output_tokens") != 2.0 {
		t.Fatalf("max_tokens: %s", body)
	}
	// count_tokens is the prompt's length.
	code, _, body = ts.post(t, "/v1/messages/count_tokens", `{"model":"tiny","system":"Be brief.","messages":[{"role":"user","content":"Hi"}]}`)
	if code != 200 || obj(t, string(body))["input_tokens"] != float64(wantPrompt) {
		t.Fatalf("count_tokens: %d %s", code, body)
	}
	// Claude Code sends part of its system prompt as a role "system" message after the first
	// user turn: it joins the top-level system prompt (Qwen templates take one, first).
	wantJoined := countTokens(t, "<|im_start|>system\nBe brief.\n\n# Env\nlinux<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"+genHeader)
	code, _, body = ts.post(t, "/v1/messages/count_tokens", `{"model":"tiny","system":"Be brief.",
		"messages":[{"role":"user","content":"Hi"},{"role":"system","content":[{"type":"text","text":"# Env\nlinux"}]}]}`)
	if code != 200 || obj(t, string(body))["input_tokens"] != float64(wantJoined) || wantJoined == wantPrompt {
		t.Fatalf("count_tokens with a system message inside messages: %d %s (want %d)", code, body, wantJoined)
	}
}

func TestMessagesToolUse(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	tools := `[{"name":"get_weather","description":"Weather of a city.","input_schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}]`
	_, _, body := ts.post(t, "/v1/messages", `{"model":"tiny","max_tokens":200,"tools":`+tools+`,"messages":[{"role":"user","content":"weather in Paris?"}]}`)
	m := obj(t, string(body))
	use := path(m, "content", 1)
	id, _ := path(use, "id").(string)
	if m["stop_reason"] != "tool_use" || path(m, "content", 0, "text") != "I will check." || path(use, "type") != "tool_use" ||
		!strings.HasPrefix(id, "toolu_") || path(use, "name") != "get_weather" ||
		!reflect.DeepEqual(path(use, "input"), map[string]any{"city": "Paris", "days": 3.0}) {
		t.Fatalf("tool_use: %s", body)
	}
	// The round trip: assistant tool_use blocks and a user tool_result block.
	req2 := `{"model":"tiny","max_tokens":200,"tools":` + tools + `,"messages":[{"role":"user","content":"weather in Paris?"},
		{"role":"assistant","content":[{"type":"text","text":"I will check."},{"type":"tool_use","id":"` + id + `","name":"get_weather","input":{"city":"Paris","days":3}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":[{"type":"text","text":"sunny"}]}]}]}`
	_, _, body = ts.post(t, "/v1/messages", req2)
	m = obj(t, string(body))
	if path(m, "content", 0, "text") != "It is sunny in Paris." || m["stop_reason"] != "end_turn" {
		t.Fatalf("round trip: %s", body)
	}
	// Anthropic counts input_tokens without the checkpointed part.
	in, cached := path(m, "usage", "input_tokens").(float64), path(m, "usage", "cache_read_input_tokens").(float64)
	if cached == 0 || in <= 0 {
		t.Fatalf("usage %v: want a cache read and the rest as input", m["usage"])
	}
	if h := ts.lastHistory(t); !strings.Contains(h, "<tool_response>\nsunny\n</tool_response>") {
		t.Fatalf("the tool result is not in the prompt: %q", h)
	}
}

func TestMessagesStream(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	tools := `[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}]`
	code, _, data := ts.post(t, "/v1/messages", `{"model":"tiny","max_tokens":200,"stream":true,"tools":`+tools+`,"messages":[{"role":"user","content":"weather?"}]}`)
	if code != 200 {
		t.Fatalf("%d %s", code, data)
	}
	evs := parseSSE(t, data)
	var names []string
	var text, js strings.Builder
	for _, e := range evs {
		m := obj(t, e.data)
		if m["type"] != e.name {
			t.Fatalf("event %q carries type %v", e.name, m["type"])
		}
		names = append(names, e.name)
		switch e.name {
		case "message_start":
			if path(m, "message", "usage", "input_tokens") == nil || path(m, "message", "role") != "assistant" {
				t.Fatalf("message_start %v", m)
			}
		case "content_block_delta":
			switch path(m, "delta", "type") {
			case "text_delta":
				text.WriteString(path(m, "delta", "text").(string))
			case "input_json_delta":
				js.WriteString(path(m, "delta", "partial_json").(string))
			}
		case "content_block_start":
			if path(m, "index") == 1.0 && (path(m, "content_block", "type") != "tool_use" || path(m, "content_block", "name") != "get_weather") {
				t.Fatalf("tool block %v", m)
			}
		case "message_delta":
			if path(m, "delta", "stop_reason") != "tool_use" || path(m, "usage", "output_tokens") == nil {
				t.Fatalf("message_delta %v", m)
			}
		}
	}
	want := []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	got := compress(names)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v, want %v (runs of deltas merged)", got, want)
	}
	var input map[string]any
	if err := json.Unmarshal([]byte(js.String()), &input); err != nil || !reflect.DeepEqual(input, map[string]any{"city": "Paris", "days": 3.0}) {
		t.Fatalf("input_json_delta adds up to %q", js.String())
	}
	if text.String() != "I will check." {
		t.Fatalf("text %q", text.String())
	}
	// Thinking on: a thinking block with its signature, then the text.
	_, _, data = ts.post(t, "/v1/messages", `{"model":"tiny","max_tokens":200,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"think"}]}`)
	names = names[:0]
	var thinking strings.Builder
	for _, e := range parseSSE(t, data) {
		names = append(names, e.name)
		m := obj(t, e.data)
		if path(m, "delta", "type") == "thinking_delta" {
			thinking.WriteString(path(m, "delta", "thinking").(string))
		}
	}
	if thinking.String() != "The user wants a number." || !strings.Contains(string(data), `"signature_delta"`) ||
		!reflect.DeepEqual(compress(names), []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
			"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}) {
		t.Fatalf("thinking stream: %q %v", thinking.String(), compress(names))
	}
}

// compress merges runs of the same name.
func compress(names []string) []string {
	var out []string
	for _, n := range names {
		if len(out) == 0 || out[len(out)-1] != n {
			out = append(out, n)
		}
	}
	return out
}

func TestResponses(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	code, _, body := ts.post(t, "/v1/responses", `{"model":"tiny","instructions":"Be brief.","input":"Hi","store":false}`)
	m := obj(t, string(body))
	wantPrompt := countTokens(t, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"+genHeader)
	if code != 200 || m["object"] != "response" || m["status"] != "completed" || !strings.HasPrefix(m["id"].(string), "resp_") ||
		path(m, "output", 0, "type") != "message" || path(m, "output", 0, "content", 0, "type") != "output_text" ||
		path(m, "output", 0, "content", 0, "text") != hello || m["store"] != false ||
		path(m, "usage", "input_tokens") != float64(wantPrompt) || path(m, "usage", "output_tokens") != float64(countTokens(t, hello)+1) {
		t.Fatalf("responses: %d %s", code, body)
	}
	_, _, body = ts.post(t, "/v1/responses", `{"model":"tiny","input":"Hi","max_output_tokens":2}`)
	if m = obj(t, string(body)); m["status"] != "incomplete" || path(m, "incomplete_details", "reason") != "max_output_tokens" {
		t.Fatalf("max_output_tokens: %s", body)
	}
	// Function and custom tools; items in, items out.
	tools := `[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}},
		{"type":"custom","name":"apply_patch","description":"Apply a patch."}]`
	_, _, body = ts.post(t, "/v1/responses", `{"model":"tiny","tools":`+tools+`,"input":[{"role":"user","content":[{"type":"input_text","text":"weather?"}]}]}`)
	m = obj(t, string(body))
	fc := path(m, "output", 1)
	callID, _ := path(fc, "call_id").(string)
	if path(m, "output", 0, "content", 0, "text") != "I will check." || path(fc, "type") != "function_call" || path(fc, "name") != "get_weather" ||
		path(fc, "arguments") != `{"city":"Paris","days":3}` || !strings.HasPrefix(callID, "call_") || path(fc, "status") != "completed" {
		t.Fatalf("function call: %s", body)
	}
	_, _, body = ts.post(t, "/v1/responses", `{"model":"tiny","tools":`+tools+`,"input":[{"type":"message","role":"user","content":"patch it"}]}`)
	m = obj(t, string(body))
	if ct := path(m, "output", 0); path(ct, "type") != "custom_tool_call" || path(ct, "name") != "apply_patch" || path(ct, "input") != "*** Begin Patch\n*** End Patch" {
		t.Fatalf("custom tool call: %s", body)
	}
	// The round trip with function_call and function_call_output items.
	_, _, body = ts.post(t, "/v1/responses", `{"model":"tiny","tools":`+tools+`,"input":[{"role":"user","content":"weather?"},
		{"type":"function_call","call_id":"`+callID+`","name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":3}"},
		{"type":"function_call_output","call_id":"`+callID+`","output":"sunny"}]}`)
	if m = obj(t, string(body)); path(m, "output", 0, "content", 0, "text") != "It is sunny in Paris." {
		t.Fatalf("round trip: %s", body)
	}
}

func TestResponsesStream(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	tools := `[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}}]`
	code, _, data := ts.post(t, "/v1/responses", `{"model":"tiny","stream":true,"tools":`+tools+`,"input":"weather?"}`)
	if code != 200 {
		t.Fatalf("%d %s", code, data)
	}
	var names []string
	var text, args strings.Builder
	var final map[string]any
	for i, e := range parseSSE(t, data) {
		m := obj(t, e.data)
		if m["type"] != e.name || m["sequence_number"] != float64(i) {
			t.Fatalf("event %d %q: type %v, sequence_number %v", i, e.name, m["type"], m["sequence_number"])
		}
		names = append(names, e.name)
		switch e.name {
		case "response.output_text.delta":
			text.WriteString(m["delta"].(string))
		case "response.function_call_arguments.delta":
			args.WriteString(m["delta"].(string))
		case "response.function_call_arguments.done":
			if m["arguments"] != `{"city":"Paris","days":3}` {
				t.Fatalf("arguments.done %v", m)
			}
		case "response.completed":
			final = m
		}
	}
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done",
		"response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
		"response.output_item.done", "response.completed"}
	if got := compress(names); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %v\nwant %v", got, want)
	}
	if text.String() != "I will check." || args.String() != `{"city":"Paris","days":3}` {
		t.Fatalf("text %q, args %q", text.String(), args.String())
	}
	if path(final, "response", "status") != "completed" || path(final, "response", "output", 1, "type") != "function_call" ||
		path(final, "response", "usage", "output_tokens") == nil {
		t.Fatalf("response.completed %v", final)
	}
}

// TestErrors sends bad requests to every endpoint: each gets the right status and a JSON error
// in its API's shape, and the server answers a good request afterwards.
func TestErrors(t *testing.T) {
	ts := newTestServer(t, Options{MaxBodyBytes: 4096, Context: 64}, nil)
	big := `{"model":"tiny","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	long := `{"model":"tiny","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 60) + `"}]}`
	cases := []struct {
		path, body string
		status     int
		param      string // OpenAI param, or the Anthropic error type
	}{
		{"/v1/chat/completions", `{"model":"tiny","messages":[`, 400, ""},
		{"/v1/chat/completions", ``, 400, ""},
		{"/v1/chat/completions", `[1,2]`, 400, ""},
		{"/v1/chat/completions", `{"model":"tiny","messages":[]} {}`, 400, ""},
		{"/v1/chat/completions", `{"model":"tiny","messages":"hi"}`, 400, "messages"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, 400, "temperature"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"temperature":3}`, 400, "temperature"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"top_p":0}`, 400, "top_p"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"n":2}`, 400, "n"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400, "max_tokens"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stop":["a",""]}`, 400, "stop"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages[0].role"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0].type"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":42}]}`, 400, "messages[0].content"},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 404, "model"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, 400, "model"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":[1]}}]}`, 400, "tools[0].parameters"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"string"}}}]}`, 400, "tools[0].parameters"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`, 400, "tools[1].name"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "tool_choice"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"not json"}}]}]}`, 400, "messages[0].tool_calls[0].function.arguments"},
		{"/v1/chat/completions", big, 413, ""},
		{"/v1/chat/completions", long, 400, "messages"},
		{"/v1/responses", `{"model":"tiny","input":"hi","previous_response_id":"resp_1"}`, 400, "previous_response_id"},
		{"/v1/responses", `{"model":"tiny","input":[{"type":"item_reference","id":"x"}]}`, 400, "input[0].type"},
		{"/v1/responses", `{"model":"tiny","input":"hi","tools":[{"type":"web_search"}]}`, 400, "tools[0].type"},
		{"/v1/responses", `{"model":"nope","input":"hi"}`, 404, "model"},
		{"/v1/responses", `{"model":"tiny","input":5}`, 400, "input"},
		{"/v1/messages", `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"/v1/messages", `{"model":"tiny","max_tokens":"many","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"/v1/messages", `{"model":"claude-sonnet-4","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, 404, "not_found_error"},
		{"/v1/messages", `{"model":"tiny","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, 400, "invalid_request_error"},
		{"/v1/messages", `{"model":"tiny","max_tokens":10,"temperature":1.5,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"/v1/messages", `{"model":"tiny","max_tokens":10,"tools":[{"name":"f","input_schema":"object"}],"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"/v1/messages", `{"model":"tiny","max_tokens":10,"tools":[{"type":"bash_20250124","name":"bash"}],"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"/v1/messages", `{"model":"tiny","max_tokens":10,"messages":[{"role":"tool","content":"hi"}]}`, 400, "invalid_request_error"},
		{"/v1/messages", `{"model":"tiny","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"system","content":5}]}`, 400, "invalid_request_error"},
		{"/v1/messages", `{"model":"tiny","max_tokens":10,"messages":{`, 400, "invalid_request_error"},
		{"/v1/messages", big, 413, "request_too_large"},
		{"/v1/messages", strings.Replace(long, `"max_tokens":10`, `"max_tokens":10`, 1), 400, "invalid_request_error"},
		{"/v1/messages/count_tokens", `{"model":"tiny","messages":5}`, 400, "invalid_request_error"},
	}
	for i, c := range cases {
		code, hdr, body := ts.post(t, c.path, c.body)
		if code != c.status || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Errorf("case %d %s %.80s: status %d (%s), want %d: %s", i, c.path, c.body, code, hdr.Get("Content-Type"), c.status, body)
			continue
		}
		m := obj(t, string(body))
		if strings.HasPrefix(c.path, "/v1/messages") {
			if m["type"] != "error" || path(m, "error", "type") != c.param || path(m, "error", "message") == "" {
				t.Errorf("case %d: Anthropic error %s, want type %s", i, body, c.param)
			}
			continue
		}
		e, ok := m["error"].(map[string]any)
		if !ok || e["message"] == "" || e["type"] == nil {
			t.Errorf("case %d: OpenAI error %s", i, body)
			continue
		}
		if _, has := e["param"]; !has {
			t.Errorf("case %d: no param key: %s", i, body)
		}
		if c.param != "" && e["param"] != c.param {
			t.Errorf("case %d: param %v, want %s: %s", i, e["param"], c.param, body)
		}
	}
	// Wrong method, unknown path: JSON too.
	code, hdr, body := ts.get(t, "/v1/chat/completions")
	if code != 405 || hdr.Get("Allow") != "POST" || path(obj(t, string(body)), "error", "message") == nil {
		t.Errorf("GET chat: %d %s", code, body)
	}
	code, _, body = ts.get(t, "/v2/whatever")
	if code != 404 || path(obj(t, string(body)), "error", "message") == nil {
		t.Errorf("unknown path: %d %s", code, body)
	}
	// Still serving.
	code, _, body = ts.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":3,"messages":[{"role":"user","content":"Hi"}]}`)
	if code != 200 {
		t.Fatalf("after the bad requests: %d %s", code, body)
	}
}

func TestAPIKey(t *testing.T) {
	ts := newTestServer(t, Options{APIKey: "sekret"}, nil)
	body := `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"Hi"}]}`
	for _, c := range []struct {
		path   string
		hdr    []string
		status int
	}{
		{"/v1/chat/completions", nil, 401},
		{"/v1/chat/completions", []string{"Authorization", "Bearer wrong"}, 401},
		{"/v1/chat/completions", []string{"Authorization", "Bearer sekret"}, 200},
		{"/v1/chat/completions", []string{"x-api-key", "sekret"}, 200},
		{"/v1/messages", []string{"x-api-key", "nope"}, 401},
		{"/v1/messages", []string{"x-api-key", "sekret"}, 200},
	} {
		code, _, data := ts.post(t, c.path, body, c.hdr...)
		if code != c.status {
			t.Errorf("%s %v: %d, want %d: %s", c.path, c.hdr, code, c.status, data)
		}
		if code == 401 {
			m := obj(t, string(data))
			if c.path == "/v1/messages" && path(m, "error", "type") != "authentication_error" ||
				c.path != "/v1/messages" && path(m, "error", "code") != "invalid_api_key" {
				t.Errorf("401 shape: %s", data)
			}
		}
	}
	if code, _, _ := ts.get(t, "/v1/models"); code != 401 {
		t.Errorf("models without a key: %d", code)
	}
	if code, _, _ := ts.get(t, "/health"); code != 200 {
		t.Errorf("health needs no key: %d", code)
	}
}

func TestMetrics(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	ts.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"Hi"}]}`)
	ts.post(t, "/v1/chat/completions", `{"model":"x","messages":[{"role":"user","content":"Hi"}]}`)
	code, hdr, body := ts.get(t, "/metrics")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("metrics: %d %s", code, hdr.Get("Content-Type"))
	}
	out := string(body)
	gen := countTokens(t, hello) + 1
	for _, want := range []string{
		`lithos_requests_total{endpoint="chat",code="200"} 1`,
		`lithos_requests_total{endpoint="chat",code="404"} 1`,
		fmt.Sprintf("lithos_generated_tokens_total %d", gen),
		fmt.Sprintf("lithos_decode_tokens_total %d", gen-1), // the first token comes from the prefill
		fmt.Sprintf("lithos_decode_rounds_total %d", gen-1),
		"lithos_tokens_per_round 1\n",
		"lithos_queue_depth 0\n",
		"lithos_running 0\n",
		"lithos_checkpoints 1\n",
		"# TYPE lithos_prefill_tokens_per_second gauge",
		"# TYPE lithos_decode_tokens_per_second gauge",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Every sample line is NAME{labels} VALUE or NAME VALUE; the names are ours, or the
	// process gauges under Prometheus' standard names.
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "# ") {
			continue
		}
		if f := strings.Fields(line); len(f) != 2 || !strings.HasPrefix(f[0], "lithos_") &&
			f[0] != "go_goroutines" && f[0] != "process_resident_memory_bytes" {
			t.Errorf("bad sample line %q", line)
		}
	}
	gauges := []string{"go_goroutines "}
	if _, ok := residentBytes(); ok { // Linux (/proc/self/statm)
		gauges = append(gauges, "process_resident_memory_bytes ")
	}
	for _, want := range gauges {
		i := strings.Index(out, "\n"+want)
		if i < 0 {
			t.Errorf("metrics lack %s", want)
			continue
		}
		var v float64
		if _, err := fmt.Sscan(out[i+1+len(want):], &v); err != nil || v < 1 {
			t.Errorf("%s: %v %v", want, v, err)
		}
	}
	if _, _, b := ts.get(t, "/metrics"); !strings.Contains(string(b), `lithos_requests_total{endpoint="metrics",code="200"} 1`) {
		t.Errorf("the metrics request itself is not counted")
	}
	_ = http.StatusOK
}
