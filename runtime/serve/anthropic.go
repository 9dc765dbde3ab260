package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Anthropic Messages (POST /v1/messages, /v1/messages/count_tokens), as @anthropic-ai/sdk and
// Claude Code send and read it (https://docs.anthropic.com/en/api/messages,
// .../messages-streaming; lithos-metal.md §7.7).

type msgRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	Messages      []msgMessage    `json:"messages"`
	System        json.RawMessage `json:"system"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Tools         []msgTool       `json:"tools"`
	ToolChoice    *struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	} `json:"tool_choice"`
	Thinking *struct {
		Type string `json:"type"`
	} `json:"thinking"`
}

type msgMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type msgBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Thinking  string          `json:"thinking"`
}

type msgTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// blocksOf reads a content: a string (one text block) or a list of blocks.
func blocksOf(raw json.RawMessage, param string) ([]msgBlock, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest(param, "%s: %v", param, err)
		}
		return []msgBlock{{Type: "text", Text: &s}}, nil
	}
	var blocks []msgBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, badRequest(param, "%s: want a string or a list of content blocks, got %s", param, kindOf(raw))
	}
	return blocks, nil
}

// blockText reads a text-only content (system, tool_result): a string or text blocks, joined
// by "\n".
func blockText(raw json.RawMessage, param string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	blocks, err := blocksOf(raw, param)
	if err != nil {
		return "", err
	}
	var texts []string
	for i, b := range blocks {
		if b.Type != "text" || b.Text == nil {
			return "", badRequest(fmt.Sprintf("%s[%d]", param, i), "%s[%d]: block of type %q: only text is supported here", param, i, b.Type)
		}
		texts = append(texts, *b.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// toConversation checks the request (all but max_tokens) and converts it.
func (req *msgRequest) toConversation() (*conversation, *apiError) {
	c := &conversation{parallel: true, toolChoice: choiceAuto}
	if len(req.Messages) == 0 {
		return nil, badRequest("messages", "messages must hold at least one message")
	}
	if t := req.Thinking; t != nil {
		switch t.Type {
		case "enabled", "adaptive":
			c.thinking = true
		case "disabled", "":
		default:
			return nil, badRequest("thinking.type", "thinking.type %q: want enabled or disabled", t.Type)
		}
	}
	for i, t := range req.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t.Type != "" && t.Type != "custom" {
			return nil, badRequest(p+".type", "%s: tool type %q is not supported: only client tools (with input_schema) run here", p, t.Type)
		}
		if is := bytes.TrimSpace(t.InputSchema); len(is) == 0 || string(is) == "null" {
			return nil, badRequest(p+".input_schema", "%s: tool %q needs input_schema", p, t.Name)
		}
		c.tools = append(c.tools, toolDef{name: t.Name, description: t.Description, params: t.InputSchema})
	}
	if err := checkTools(c.tools, "tools"); err != nil {
		// checkTools names the field "parameters"; Anthropic calls it input_schema.
		err.param = strings.Replace(err.param, ".parameters", ".input_schema", 1)
		return nil, err
	}
	if tc := req.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto", "":
		case "any":
			c.toolChoice = choiceRequired
		case "none":
			c.toolChoice = choiceNone
		case "tool":
			name, err := namedChoice(tc.Name, c.tools, "tool_choice.name")
			if err != nil {
				return nil, err
			}
			c.toolChoice = name
		default:
			return nil, badRequest("tool_choice.type", "tool_choice.type %q: want auto, any, tool or none", tc.Type)
		}
		c.parallel = !tc.DisableParallelToolUse
	}
	if c.toolChoice == choiceRequired && len(c.tools) == 0 {
		return nil, badRequest("tool_choice", "tool_choice \"any\" needs tools")
	}
	text, err := blockText(req.System, "system")
	if err != nil {
		return nil, err
	}
	// Claude Code (2.1.x) sends part of its system prompt as a {"role": "system"} message
	// inside messages, after the first user turn (tools/sdkcheck/README.md). Qwen chat
	// templates accept a system message only first, so such messages are appended to the
	// top-level system prompt, in order. The pieces are joined once (appending to a string
	// would copy it for every piece: quadratic in the number of messages).
	var sys []string
	if text != "" {
		sys = append(sys, text)
	}
	for i, m := range req.Messages {
		if m.Role != "system" {
			continue
		}
		text, err := blockText(m.Content, fmt.Sprintf("messages[%d].content", i))
		if err != nil {
			return nil, err
		}
		if text != "" {
			sys = append(sys, text)
		}
	}
	if len(sys) > 0 {
		c.messages = append(c.messages, message{role: "system", content: strings.Join(sys, "\n\n")})
	}
	names := map[string]string{}
	for i, m := range req.Messages {
		p := fmt.Sprintf("messages[%d]", i)
		if m.Role == "system" {
			continue
		}
		if m.Role != "user" && m.Role != "assistant" {
			return nil, badRequest(p+".role", "%s: role %q: want user, assistant or system", p, m.Role)
		}
		blocks, err := blocksOf(m.Content, p+".content")
		if err != nil {
			return nil, err
		}
		var text, reasoning []string // joined once at flush (see sys above)
		cur := message{role: m.Role}
		flush := func() {
			cur.reasoning = strings.Join(reasoning, "")
			if len(text) > 0 || (m.Role == "assistant" && (cur.reasoning != "" || len(cur.toolCalls) > 0)) {
				cur.content = strings.Join(text, "\n")
				c.messages = append(c.messages, cur)
			}
			text, reasoning, cur = nil, nil, message{role: m.Role}
		}
		for k, b := range blocks {
			bp := fmt.Sprintf("%s.content[%d]", p, k)
			switch {
			case b.Type == "text":
				if b.Text == nil {
					return nil, badRequest(bp+".text", "%s: a text block needs \"text\"", bp)
				}
				text = append(text, *b.Text)
			case b.Type == "thinking" && m.Role == "assistant":
				reasoning = append(reasoning, b.Thinking)
			case b.Type == "redacted_thinking" && m.Role == "assistant":
			case b.Type == "tool_use" && m.Role == "assistant":
				if b.Name == "" {
					return nil, badRequest(bp+".name", "%s: a tool_use block needs \"name\"", bp)
				}
				args, err := argumentsJSON(b.Input, bp+".input")
				if err != nil {
					return nil, err
				}
				cur.toolCalls = append(cur.toolCalls, toolCall{id: b.ID, name: b.Name, args: args})
				names[b.ID] = b.Name
			case b.Type == "tool_result" && m.Role == "user":
				flush()
				out, err := blockText(b.Content, bp+".content")
				if err != nil {
					return nil, err
				}
				if b.IsError {
					out = "Tool error: " + out
				}
				c.messages = append(c.messages, message{role: "tool", content: out, toolCallID: b.ToolUseID, name: names[b.ToolUseID]})
			default:
				return nil, badRequest(bp+".type", "%s: a %s message cannot hold a block of type %q here (text, tool_use, tool_result and thinking are supported)", bp, m.Role, b.Type)
			}
		}
		flush()
	}
	return c, nil
}

// Response shapes.
type msgResponse struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []outBlock     `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
}

type outBlock struct {
	Type      string           `json:"type"`
	Text      *string          `json:"text,omitempty"`
	Thinking  *string          `json:"thinking,omitempty"`
	Signature *string          `json:"signature,omitempty"`
	ID        string           `json:"id,omitempty"`
	Name      string           `json:"name,omitempty"`
	Input     *json.RawMessage `json:"input,omitempty"`
}

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// stopReason maps a finish reason to Anthropic's stop_reason and stop_sequence.
func stopReason(res *genResult) (string, *string) {
	switch {
	case res.finish == finishLength || res.finish == finishContext:
		return "max_tokens", nil
	case res.finish == finishStop:
		seq := res.stopSeq
		return "stop_sequence", &seq
	case res.toolCalls > 0:
		return "tool_use", nil
	}
	return "end_turn", nil
}

// anthropicUsageOf counts as Anthropic does: input_tokens excludes the tokens read from a
// checkpoint (cache_read_input_tokens); the total input is their sum.
func anthropicUsageOf(prompt, cached, output int) anthropicUsage {
	return anthropicUsage{InputTokens: prompt - cached, CacheReadInputTokens: cached, OutputTokens: output}
}

func (s *Server) decodeMessages(r *http.Request) (*msgRequest, *conversation, *apiError) {
	var req msgRequest
	if err := decodeBody(r.Body, &req); err != nil {
		return nil, nil, err
	}
	if err := s.checkModel(req.Model); err != nil {
		return nil, nil, err
	}
	c, err := req.toConversation()
	if err != nil {
		return nil, nil, err
	}
	return &req, c, nil
}

func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) *apiError {
	_, c, err := s.decodeMessages(r)
	if err != nil {
		return err
	}
	if err := s.acquire(r.Context()); err != nil {
		return err
	}
	defer s.release()
	// Counted exactly up to countFactor × the context; a longer prompt is refused.
	_, ids, err := s.prompt(c, countFactor*s.context)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": len(ids)})
	return nil
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) *apiError {
	req, c, aerr := s.decodeMessages(r)
	if aerr != nil {
		return aerr
	}
	if req.MaxTokens == nil {
		return badRequest("max_tokens", "max_tokens is required")
	}
	g := &genRequest{conv: *c, callID: func(int) string { return newID("toolu_") }}
	if g.maxTokens, aerr = maxTokensOf(req.MaxTokens, "max_tokens"); aerr != nil {
		return aerr
	}
	if g.params, aerr = params(req.Temperature, req.TopP, req.TopK, nil, 1); aerr != nil {
		return aerr
	}
	if aerr = checkStops(req.StopSequences, "stop_sequences"); aerr != nil {
		return aerr
	}
	g.stops = req.StopSequences
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	j, aerr := s.prepare(ctx, g)
	if aerr != nil {
		return aerr
	}
	if aerr := s.submit(j); aerr != nil {
		return aerr
	}
	id := newID("msg_")
	if req.Stream {
		s.messagesStream(ctx, w, j, id, req.Model)
		return nil
	}
	var col collected
	res := s.await(ctx, j, col.add, nil)
	if res == nil {
		return nil
	}
	if err := resultError(res); err != nil {
		return err
	}
	out := msgResponse{ID: id, Type: "message", Role: "assistant", Model: req.Model, Content: []outBlock{},
		Usage: anthropicUsageOf(res.promptTokens, res.cachedTokens, res.completionTokens)}
	if th := col.reasoning.String(); th != "" {
		sig := ""
		out.Content = append(out.Content, outBlock{Type: "thinking", Thinking: &th, Signature: &sig})
	}
	if text := col.text.String(); text != "" {
		out.Content = append(out.Content, outBlock{Type: "text", Text: &text})
	}
	for _, call := range col.calls {
		in := json.RawMessage(call.args)
		out.Content = append(out.Content, outBlock{Type: "tool_use", ID: call.id, Name: call.name, Input: &in})
	}
	reason, seq := stopReason(res)
	out.StopReason, out.StopSequence = &reason, seq
	statsHeaders(w, res)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// messagesStream answers with Anthropic's events: message_start (when generation starts, with
// the input tokens), ping, one content block per run of thinking, text or tool use
// (content_block_start, _delta — thinking_delta, text_delta, input_json_delta — and _stop),
// message_delta with the stop reason and the output tokens, message_stop. A failure after the
// stream started is an "error" event.
func (s *Server) messagesStream(ctx context.Context, w http.ResponseWriter, j *job, id, model string) {
	st, err := startSSE(w)
	if err != nil {
		return
	}
	index := -1   // the open block's index
	open := ""    // its type ("" when none is open)
	callIdx := -1 // the tool call the open tool_use block holds
	closeBlock := func() error {
		if open == "" {
			return nil
		}
		if open == "thinking" {
			if err := st.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
				"delta": map[string]string{"type": "signature_delta", "signature": ""}}); err != nil {
				return err
			}
		}
		open = ""
		return st.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
	}
	openBlock := func(typ string, block outBlock) error {
		if err := closeBlock(); err != nil {
			return err
		}
		index++
		open = typ
		return st.event("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": block})
	}
	delta := func(d any) error {
		return st.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": d})
	}
	on := func(m jobMsg) error {
		if m.started {
			msg := msgResponse{ID: id, Type: "message", Role: "assistant", Model: model, Content: []outBlock{},
				Usage: anthropicUsageOf(len(j.prompt), m.cached, 0)}
			if err := st.event("message_start", map[string]any{"type": "message_start", "message": msg}); err != nil {
				return err
			}
			return st.event("ping", map[string]string{"type": "ping"})
		}
		for _, e := range m.evs {
			var err error
			switch e.kind {
			case evReasoning:
				if open != "thinking" {
					empty := ""
					if err = openBlock("thinking", outBlock{Type: "thinking", Thinking: &empty, Signature: &empty}); err != nil {
						return err
					}
				}
				err = delta(map[string]string{"type": "thinking_delta", "thinking": e.text})
			case evText:
				if open != "text" {
					empty := ""
					if err = openBlock("text", outBlock{Type: "text", Text: &empty}); err != nil {
						return err
					}
				}
				err = delta(map[string]string{"type": "text_delta", "text": e.text})
			case evToolStart:
				in := json.RawMessage("{}")
				callIdx = e.index
				err = openBlock("tool_use", outBlock{Type: "tool_use", ID: e.id, Name: e.name, Input: &in})
			case evToolArgs, evToolEnd:
				if open == "tool_use" && callIdx == e.index && e.text != "" {
					err = delta(map[string]string{"type": "input_json_delta", "partial_json": e.text})
				}
				if err == nil && e.kind == evToolEnd {
					err = closeBlock()
				}
			}
			if err != nil {
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
		st.event("error", aerr.body(flavorAnthropic))
		return
	}
	if closeBlock() != nil {
		return
	}
	reason, seq := stopReason(res)
	if st.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": map[string]int{"output_tokens": res.completionTokens}}) != nil {
		return
	}
	st.event("message_stop", map[string]string{"type": "message_stop"})
}
