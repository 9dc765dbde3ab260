package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// OpenAI Chat Completions (POST /v1/chat/completions), as the openai SDKs send and read it
// (https://platform.openai.com/docs/api-reference/chat; lithos-metal.md §7.3–7.6).

// chatRequest is the request body. Unknown fields are ignored; known ones must have their type.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N                  *int                       `json:"n"`
	Tools              []chatTool                 `json:"tools"`
	ToolChoice         json.RawMessage            `json:"tool_choice"`
	ParallelToolCalls  *bool                      `json:"parallel_tool_calls"`
	ReasoningEffort    *string                    `json:"reasoning_effort"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	ResponseFormat     *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	Logprobs *bool `json:"logprobs"`
}

type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCalls        []chatToolCall  `json:"tool_calls"`
	ToolCallID       string          `json:"tool_call_id"`
	ReasoningContent *string         `json:"reasoning_content"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// stopList reads "stop": a string, a list of strings, or null.
func stopList(raw json.RawMessage, param string) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, checkStops([]string{one}, param)
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest(param, "%s: want a string or a list of strings, got %s", param, kindOf(raw))
	}
	return many, checkStops(many, param)
}

// thinkingEffort reads a reasoning effort: "" and "none" leave thinking off, the OpenAI levels
// turn it on (the template's enable_thinking; the effort itself has no other effect).
func thinkingEffort(effort *string, param string) (bool, *apiError) {
	if effort == nil {
		return false, nil
	}
	switch *effort {
	case "", "none":
		return false, nil
	case "minimal", "low", "medium", "high", "xhigh":
		return true, nil
	}
	return false, badRequest(param, "%s %q: want none, minimal, low, medium or high", param, *effort)
}

// toGen checks the request and converts it.
func (req *chatRequest) toGen() (*genRequest, *apiError) {
	g := &genRequest{callID: func(int) string { return newID("call_") }}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must hold at least one message")
	}
	if req.N != nil && *req.N != 1 {
		return nil, badRequest("n", "n %d: only one choice per request (n = 1)", *req.N)
	}
	if req.Logprobs != nil && *req.Logprobs {
		return nil, badRequest("logprobs", "logprobs are not supported")
	}
	if rf := req.ResponseFormat; rf != nil && rf.Type != "text" && rf.Type != "" {
		return nil, badRequest("response_format", "response_format %q is not supported (only text)", rf.Type)
	}
	var err *apiError
	if g.params, err = params(req.Temperature, req.TopP, req.TopK, req.Seed, 2); err != nil {
		return nil, err
	}
	if req.MaxCompletionTokens != nil {
		g.maxTokens, err = maxTokensOf(req.MaxCompletionTokens, "max_completion_tokens")
	} else {
		g.maxTokens, err = maxTokensOf(req.MaxTokens, "max_tokens")
	}
	if err != nil {
		return nil, err
	}
	if g.stops, err = stopList(req.Stop, "stop"); err != nil {
		return nil, err
	}
	c := &g.conv
	if c.thinking, err = thinkingEffort(req.ReasoningEffort, "reasoning_effort"); err != nil {
		return nil, err
	}
	if raw, ok := req.ChatTemplateKwargs["enable_thinking"]; ok {
		if json.Unmarshal(raw, &c.thinking) != nil {
			return nil, badRequest("chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking: want a boolean")
		}
	}
	c.parallel = req.ParallelToolCalls == nil || *req.ParallelToolCalls
	for i, t := range req.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return nil, badRequest(p+".type", "%s: tool type %q is not supported (only function)", p, t.Type)
		}
		if t.Function == nil {
			return nil, badRequest(p+".function", "%s: a function tool needs \"function\"", p)
		}
		c.tools = append(c.tools, toolDef{name: t.Function.Name, description: t.Function.Description, params: t.Function.Parameters})
	}
	if err := checkTools(c.tools, "tools"); err != nil {
		return nil, err
	}
	if c.toolChoice, err = chatToolChoice(req.ToolChoice, c.tools); err != nil {
		return nil, err
	}
	names := map[string]string{} // tool call id → function name, for tool results without a name
	for i, m := range req.Messages {
		p := fmt.Sprintf("messages[%d]", i)
		text, err := textContent(m.Content, p+".content")
		if err != nil {
			return nil, err
		}
		msg := message{role: m.Role, content: text}
		switch m.Role {
		case "system", "developer":
			msg.role = "system"
		case "user":
		case "assistant":
			if m.ReasoningContent != nil {
				msg.reasoning = *m.ReasoningContent
			}
			for k, tc := range m.ToolCalls {
				tp := fmt.Sprintf("%s.tool_calls[%d]", p, k)
				if tc.Type != "" && tc.Type != "function" {
					return nil, badRequest(tp+".type", "%s: tool call type %q is not supported (only function)", tp, tc.Type)
				}
				if tc.Function.Name == "" {
					return nil, badRequest(tp+".function.name", "%s: the call has no function name", tp)
				}
				args, err := argumentsJSON(tc.Function.Arguments, tp+".function.arguments")
				if err != nil {
					return nil, err
				}
				msg.toolCalls = append(msg.toolCalls, toolCall{id: tc.ID, name: tc.Function.Name, args: args})
				names[tc.ID] = tc.Function.Name
			}
		case "tool":
			msg.toolCallID, msg.name = m.ToolCallID, m.Name
			if msg.name == "" {
				msg.name = names[m.ToolCallID]
			}
		default:
			return nil, badRequest(p+".role", "%s: role %q: want system, developer, user, assistant or tool", p, m.Role)
		}
		c.messages = append(c.messages, msg)
	}
	return g, nil
}

// chatToolChoice reads tool_choice: "auto", "none", "required" or
// {"type": "function", "function": {"name": NAME}} naming one of the tools.
func chatToolChoice(raw json.RawMessage, tools []toolDef) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return choiceAuto, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case choiceAuto, choiceNone, choiceRequired:
			if s == choiceRequired && len(tools) == 0 {
				return "", badRequest("tool_choice", "tool_choice \"required\" needs tools")
			}
			return s, nil
		}
		return "", badRequest("tool_choice", "tool_choice %q: want auto, none, required or a function", s)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
		Name string `json:"name"` // the Responses API's flat form
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" {
		return "", badRequest("tool_choice", "tool_choice: want auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	name := named.Function.Name
	if name == "" {
		name = named.Name
	}
	return namedChoice(name, tools, "tool_choice")
}

// namedChoice checks that a named tool choice names one of the tools.
func namedChoice(name string, tools []toolDef, param string) (string, *apiError) {
	for _, t := range tools {
		if t.name == name {
			return name, nil
		}
	}
	return "", badRequest(param, "%s names the function %q, which is not among the tools", param, name)
}

// Response shapes.
type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             chatUsage    `json:"usage"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatOutMessage `json:"message"`
	Logprobs     *struct{}      `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
}

type chatOutMessage struct {
	Role             string        `json:"role"`
	Content          *string       `json:"content"`
	ReasoningContent string        `json:"reasoning_content,omitempty"`
	ToolCalls        []outToolCall `json:"tool_calls,omitempty"`
	Refusal          *string       `json:"refusal"`
}

type outToolCall struct {
	ID       string      `json:"id"`
	Type     string      `json:"type"`
	Function outFunction `json:"function"`
}

type outFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type chatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	Usage             *chatUsage    `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        chatDelta `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []deltaToolCall `json:"tool_calls,omitempty"`
}

type deltaToolCall struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function deltaFunction `json:"function"`
}

type deltaFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

const fingerprint = "lithos"

// chatFinish maps a finish reason to OpenAI's.
func chatFinish(res *genResult) string {
	switch res.finish {
	case finishLength, finishContext:
		return "length"
	}
	if res.toolCalls > 0 {
		return "tool_calls"
	}
	return "stop"
}

func usageOf(res *genResult) chatUsage {
	u := chatUsage{PromptTokens: res.promptTokens, CompletionTokens: res.completionTokens,
		TotalTokens: res.promptTokens + res.completionTokens}
	u.PromptTokensDetails.CachedTokens = res.cachedTokens
	return u
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) *apiError {
	var req chatRequest
	if err := decodeBody(r.Body, &req); err != nil {
		return err
	}
	if err := s.checkModel(req.Model); err != nil {
		return err
	}
	g, aerr := req.toGen()
	if aerr != nil {
		return aerr
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	j, aerr := s.prepare(ctx, g)
	if aerr != nil {
		return aerr
	}
	if aerr := s.submit(j); aerr != nil {
		return aerr
	}
	id, created := newID("chatcmpl-"), time.Now().Unix()
	if req.Stream {
		usage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		s.chatStream(ctx, w, j, id, created, req.Model, usage)
		return nil
	}
	var col collected
	res := s.await(ctx, j, col.add, nil)
	if res == nil {
		return nil // the client is gone
	}
	if err := resultError(res); err != nil {
		return err
	}
	msg := chatOutMessage{Role: "assistant", ReasoningContent: col.reasoning.String()}
	if text := col.text.String(); text != "" || len(col.calls) == 0 {
		msg.Content = &text
	}
	for _, c := range col.calls {
		msg.ToolCalls = append(msg.ToolCalls, outToolCall{ID: c.id, Type: "function", Function: outFunction{Name: c.name, Arguments: c.args}})
	}
	statsHeaders(w, res)
	writeJSON(w, http.StatusOK, chatCompletion{
		ID: id, Object: "chat.completion", Created: created, Model: req.Model, SystemFingerprint: fingerprint,
		Choices: []chatChoice{{Message: msg, FinishReason: chatFinish(res)}}, Usage: usageOf(res),
	})
	return nil
}

// chatStream answers with chat.completion.chunk events: the assistant role first, then
// content, reasoning_content and tool-call deltas (a call's id, type and name first, then
// argument fragments), a last chunk with the finish reason, a usage chunk with include_usage,
// and "data: [DONE]". A failure after the stream started is a data frame {"error": {...}}.
func (s *Server) chatStream(ctx context.Context, w http.ResponseWriter, j *job, id string, created int64, model string, includeUsage bool) {
	st, err := startSSE(w)
	if err != nil {
		return
	}
	chunk := func(d chatDelta, finish *string) error {
		return st.event("", chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
			SystemFingerprint: fingerprint, Choices: []chunkChoice{{Delta: d, FinishReason: finish}}})
	}
	empty := ""
	if chunk(chatDelta{Role: "assistant", Content: &empty}, nil) != nil {
		return
	}
	on := func(m jobMsg) error {
		for _, e := range m.evs {
			var d chatDelta
			switch e.kind {
			case evText:
				d.Content = &e.text
			case evReasoning:
				d.ReasoningContent = e.text
			case evToolStart:
				d.ToolCalls = []deltaToolCall{{Index: e.index, ID: e.id, Type: "function", Function: deltaFunction{Name: e.name}}}
			case evToolArgs, evToolEnd:
				if e.text == "" {
					continue
				}
				d.ToolCalls = []deltaToolCall{{Index: e.index, Function: deltaFunction{Arguments: e.text}}}
			}
			if err := chunk(d, nil); err != nil {
				return err
			}
		}
		return nil
	}
	res := s.await(ctx, j, on, st.keepAlive)
	if res == nil {
		return
	}
	if aerr := resultError(res); aerr != nil {
		st.event("", aerr.body(flavorOpenAI))
		return
	}
	finish := chatFinish(res)
	if chunk(chatDelta{}, &finish) != nil {
		return
	}
	if includeUsage {
		u := usageOf(res)
		if st.event("", chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
			SystemFingerprint: fingerprint, Choices: []chunkChoice{}, Usage: &u}) != nil {
			return
		}
	}
	st.done()
}
