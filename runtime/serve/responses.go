package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// OpenAI Responses (POST /v1/responses), stateless: every request carries the whole
// conversation, nothing is stored (https://platform.openai.com/docs/api-reference/responses;
// lithos-metal.md §7.7). Codex speaks it.

type respRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	TopK               *int            `json:"top_k"`
	Seed               *int64          `json:"seed"`
	Stream             bool            `json:"stream"`
	Tools              []respTool      `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Background         *bool           `json:"background"`
	Reasoning          *struct {
		Effort *string `json:"effort"`
	} `json:"reasoning"`
	Text *struct {
		Format *struct {
			Type string `json:"type"`
		} `json:"format"`
	} `json:"text"`
}

type respTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type respItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Input     *string         `json:"input"`
	Output    json.RawMessage `json:"output"`
}

// toGen checks the request and converts it. Custom tools become functions with one string
// parameter "input" (lithos-metal.md §7.7); custom reports which names are custom.
func (req *respRequest) toGen() (*genRequest, map[string]bool, *apiError) {
	g := &genRequest{callID: func(int) string { return newID("call_") }}
	switch {
	case req.PreviousResponseID != nil && *req.PreviousResponseID != "":
		return nil, nil, badRequest("previous_response_id", "previous_response_id is not supported: this server stores nothing; send the whole conversation in input")
	case len(bytes.TrimSpace(req.Conversation)) > 0 && string(bytes.TrimSpace(req.Conversation)) != "null":
		return nil, nil, badRequest("conversation", "conversation is not supported: this server stores nothing; send the whole conversation in input")
	case req.Background != nil && *req.Background:
		return nil, nil, badRequest("background", "background responses are not supported")
	case req.Text != nil && req.Text.Format != nil && req.Text.Format.Type != "text":
		return nil, nil, badRequest("text.format", "text.format %q is not supported (only text)", req.Text.Format.Type)
	}
	var err *apiError
	if g.params, err = params(req.Temperature, req.TopP, req.TopK, req.Seed, 2); err != nil {
		return nil, nil, err
	}
	if g.maxTokens, err = maxTokensOf(req.MaxOutputTokens, "max_output_tokens"); err != nil {
		return nil, nil, err
	}
	c := &g.conv
	if req.Reasoning != nil {
		if c.thinking, err = thinkingEffort(req.Reasoning.Effort, "reasoning.effort"); err != nil {
			return nil, nil, err
		}
	}
	c.parallel = req.ParallelToolCalls == nil || *req.ParallelToolCalls
	custom := map[string]bool{}
	for i, t := range req.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		switch t.Type {
		case "function":
			c.tools = append(c.tools, toolDef{name: t.Name, description: t.Description, params: t.Parameters})
		case "custom":
			c.tools = append(c.tools, toolDef{name: t.Name, description: t.Description, custom: true})
			custom[t.Name] = true
		default:
			return nil, nil, badRequest(p+".type", "%s: tool type %q is not supported (function and custom tools only)", p, t.Type)
		}
	}
	if err := checkTools(c.tools, "tools"); err != nil {
		return nil, nil, err
	}
	if c.toolChoice, err = chatToolChoice(req.ToolChoice, c.tools); err != nil {
		return nil, nil, err
	}
	if req.Instructions != nil && *req.Instructions != "" {
		c.messages = append(c.messages, message{role: "system", content: *req.Instructions})
	}
	if err := c.addInput(req.Input); err != nil {
		return nil, nil, err
	}
	if len(c.messages) == 0 {
		return nil, nil, badRequest("input", "input is empty")
	}
	return g, custom, nil
}

// addInput reads "input": a string (one user message) or a list of items.
func (c *conversation) addInput(raw json.RawMessage) *apiError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return badRequest("input", "input is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return badRequest("input", "input: %v", err)
		}
		c.messages = append(c.messages, message{role: "user", content: s})
		return nil
	}
	var items []respItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return badRequest("input", "input: want a string or a list of items, got %s", kindOf(raw))
	}
	names := map[string]string{}
	// call appends a tool call to the assistant message that ends the conversation, or to a new one.
	call := func(tc toolCall) {
		if n := len(c.messages); n > 0 && c.messages[n-1].role == "assistant" {
			c.messages[n-1].toolCalls = append(c.messages[n-1].toolCalls, tc)
			return
		}
		c.messages = append(c.messages, message{role: "assistant", toolCalls: []toolCall{tc}})
	}
	for i, it := range items {
		p := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "message", "":
			if it.Role == "" {
				return badRequest(p+".role", "%s: a message needs a role", p)
			}
			text, err := textContent(it.Content, p+".content")
			if err != nil {
				return err
			}
			role := it.Role
			switch role {
			case "developer":
				role = "system"
			case "system", "user", "assistant":
			default:
				return badRequest(p+".role", "%s: role %q: want user, assistant, system or developer", p, it.Role)
			}
			c.messages = append(c.messages, message{role: role, content: text})
		case "function_call":
			if it.Name == "" {
				return badRequest(p+".name", "%s: a function_call needs a name", p)
			}
			args, err := argumentsJSON(it.Arguments, p+".arguments")
			if err != nil {
				return err
			}
			call(toolCall{id: it.CallID, name: it.Name, args: args})
			names[it.CallID] = it.Name
		case "custom_tool_call":
			if it.Name == "" || it.Input == nil {
				return badRequest(p, "%s: a custom_tool_call needs a name and an input", p)
			}
			call(toolCall{id: it.CallID, name: it.Name, args: string(marshal(map[string]string{"input": *it.Input}))})
			names[it.CallID] = it.Name
		case "function_call_output", "custom_tool_call_output":
			out, err := textContent(it.Output, p+".output")
			if err != nil {
				return err
			}
			c.messages = append(c.messages, message{role: "tool", content: out, toolCallID: it.CallID, name: names[it.CallID]})
		case "reasoning":
			// Earlier reasoning is not shown to the model again (Qwen templates drop it too).
		default:
			return badRequest(p+".type", "%s: input item of type %q is not supported (message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, reasoning)", p, it.Type)
		}
	}
	return nil
}

// Response shapes.
type respObject struct {
	ID                 string      `json:"id"`
	Object             string      `json:"object"`
	CreatedAt          int64       `json:"created_at"`
	Status             string      `json:"status"`
	Error              any         `json:"error"`
	IncompleteDetails  any         `json:"incomplete_details"`
	Instructions       *string     `json:"instructions"`
	MaxOutputTokens    *int        `json:"max_output_tokens"`
	Model              string      `json:"model"`
	Output             []any       `json:"output"`
	ParallelToolCalls  bool        `json:"parallel_tool_calls"`
	PreviousResponseID *string     `json:"previous_response_id"`
	Store              bool        `json:"store"`
	Temperature        float64     `json:"temperature"`
	TopP               float64     `json:"top_p"`
	ToolChoice         any         `json:"tool_choice"`
	Tools              []respTool  `json:"tools"`
	Truncation         string      `json:"truncation"`
	Text               any         `json:"text"`
	Usage              *respUsage  `json:"usage"`
	Metadata           struct{}    `json:"metadata"`
	Reasoning          respReasonC `json:"reasoning"`
}

type respReasonC struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type messageItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type reasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type reasoningItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Summary []any           `json:"summary"`
	Content []reasoningText `json:"content"`
}

type callItem struct {
	Type      string  `json:"type"`
	ID        string  `json:"id"`
	CallID    string  `json:"call_id"`
	Name      string  `json:"name"`
	Arguments *string `json:"arguments,omitempty"`
	Input     *string `json:"input,omitempty"`
	Status    string  `json:"status"`
}

// respShell is the response object without output and usage, as response.created shows it.
func (s *Server) respShell(req *respRequest, id string, created int64) respObject {
	o := respObject{ID: id, Object: "response", CreatedAt: created, Status: "in_progress", Model: req.Model,
		Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, Output: []any{},
		ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls, Store: false, TopP: 1,
		ToolChoice: "auto", Tools: req.Tools, Truncation: "disabled",
		Text: map[string]any{"format": map[string]string{"type": "text"}}}
	if o.Tools == nil {
		o.Tools = []respTool{}
	}
	if req.Temperature != nil {
		o.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		o.TopP = *req.TopP
	}
	if len(bytes.TrimSpace(req.ToolChoice)) > 0 {
		o.ToolChoice = json.RawMessage(req.ToolChoice)
	}
	if req.Reasoning != nil {
		o.Reasoning.Effort = req.Reasoning.Effort
	}
	return o
}

// finishResp sets status, incomplete_details and usage from the result.
func finishResp(o *respObject, res *genResult) {
	o.Status = "completed"
	if res.finish == finishLength || res.finish == finishContext {
		o.Status = "incomplete"
		o.IncompleteDetails = map[string]string{"reason": "max_output_tokens"}
	}
	u := &respUsage{InputTokens: res.promptTokens, OutputTokens: res.completionTokens, TotalTokens: res.promptTokens + res.completionTokens}
	u.InputTokensDetails.CachedTokens = res.cachedTokens
	o.Usage = u
}

// callItemOf is a finished call as an output item: custom_tool_call with the "input" string
// for a custom tool, function_call otherwise.
func callItemOf(c collectedCall, custom map[string]bool, status string) callItem {
	if custom[c.name] {
		var a struct {
			Input string `json:"input"`
		}
		json.Unmarshal([]byte(c.args), &a)
		return callItem{Type: "custom_tool_call", ID: "ctc_" + c.id, CallID: c.id, Name: c.name, Input: &a.Input, Status: status}
	}
	args := c.args
	return callItem{Type: "function_call", ID: "fc_" + c.id, CallID: c.id, Name: c.name, Arguments: &args, Status: status}
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) *apiError {
	var req respRequest
	if err := decodeBody(r.Body, &req); err != nil {
		return err
	}
	if err := s.checkModel(req.Model); err != nil {
		return err
	}
	g, custom, aerr := req.toGen()
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
	id, created := newID("resp_"), time.Now().Unix()
	if req.Stream {
		s.responsesStream(ctx, w, j, &req, id, created, custom)
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
	o := s.respShell(&req, id, created)
	if th := col.reasoning.String(); th != "" {
		o.Output = append(o.Output, reasoningItem{Type: "reasoning", ID: newID("rs_"), Summary: []any{}, Content: []reasoningText{{Type: "reasoning_text", Text: th}}})
	}
	if text := col.text.String(); text != "" {
		o.Output = append(o.Output, messageItem{Type: "message", ID: newID("msg_"), Status: "completed", Role: "assistant",
			Content: []outputText{{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}}})
	}
	for _, c := range col.calls {
		o.Output = append(o.Output, callItemOf(c, custom, "completed"))
	}
	finishResp(&o, res)
	statsHeaders(w, res)
	writeJSON(w, http.StatusOK, o)
	return nil
}

// responsesStream answers with the Responses API's typed events, each with an increasing
// sequence_number: response.created, response.in_progress, then per output item
// output_item.added … (reasoning_text / output_text with content_part, or
// function_call_arguments / custom_tool_call_input deltas) … output_item.done, and
// response.completed, response.incomplete (output budget) or response.failed.
func (s *Server) responsesStream(ctx context.Context, w http.ResponseWriter, j *job, req *respRequest, id string, created int64, custom map[string]bool) {
	st, err := startSSE(w)
	if err != nil {
		return
	}
	seq := 0
	emit := func(typ string, fields map[string]any) error {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		return st.event(typ, fields)
	}
	shell := s.respShell(req, id, created)
	if emit("response.created", map[string]any{"response": shell}) != nil ||
		emit("response.in_progress", map[string]any{"response": shell}) != nil {
		return
	}
	var output []any
	// the open item
	kind := "" // "", "reasoning", "message", "call"
	var itemID, text string
	var call collectedCall
	closeItem := func() error {
		idx := len(output)
		var err error
		switch kind {
		case "":
			return nil
		case "reasoning":
			item := reasoningItem{Type: "reasoning", ID: itemID, Summary: []any{}, Content: []reasoningText{{Type: "reasoning_text", Text: text}}}
			if err = emit("response.reasoning_text.done", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "text": text}); err == nil {
				err = emit("response.output_item.done", map[string]any{"output_index": idx, "item": item})
			}
			output = append(output, item)
		case "message":
			part := outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
			item := messageItem{Type: "message", ID: itemID, Status: "completed", Role: "assistant", Content: []outputText{part}}
			if err = emit("response.output_text.done", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "text": text, "logprobs": []any{}}); err == nil {
				if err = emit("response.content_part.done", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "part": part}); err == nil {
					err = emit("response.output_item.done", map[string]any{"output_index": idx, "item": item})
				}
			}
			output = append(output, item)
		case "call":
			item := callItemOf(call, custom, "completed")
			if custom[call.name] {
				err = emit("response.custom_tool_call_input.done", map[string]any{"item_id": item.ID, "output_index": idx, "input": *item.Input})
			} else {
				err = emit("response.function_call_arguments.done", map[string]any{"item_id": item.ID, "output_index": idx, "name": call.name, "arguments": call.args})
			}
			if err == nil {
				err = emit("response.output_item.done", map[string]any{"output_index": idx, "item": item})
			}
			output = append(output, item)
		}
		kind, text = "", ""
		return err
	}
	on := func(m jobMsg) error {
		for _, e := range m.evs {
			idx := len(output)
			var err error
			switch e.kind {
			case evReasoning:
				if kind != "reasoning" {
					if err = closeItem(); err != nil {
						return err
					}
					idx = len(output)
					kind, itemID = "reasoning", newID("rs_")
					if err = emit("response.output_item.added", map[string]any{"output_index": idx,
						"item": reasoningItem{Type: "reasoning", ID: itemID, Summary: []any{}, Content: []reasoningText{}}}); err != nil {
						return err
					}
				}
				text += e.text
				err = emit("response.reasoning_text.delta", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "delta": e.text})
			case evText:
				if kind != "message" {
					if err = closeItem(); err != nil {
						return err
					}
					idx = len(output)
					kind, itemID = "message", newID("msg_")
					if err = emit("response.output_item.added", map[string]any{"output_index": idx,
						"item": messageItem{Type: "message", ID: itemID, Status: "in_progress", Role: "assistant", Content: []outputText{}}}); err != nil {
						return err
					}
					if err = emit("response.content_part.added", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0,
						"part": outputText{Type: "output_text", Text: "", Annotations: []any{}, Logprobs: []any{}}}); err != nil {
						return err
					}
				}
				text += e.text
				err = emit("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "delta": e.text, "logprobs": []any{}})
			case evToolStart:
				if err = closeItem(); err != nil {
					return err
				}
				idx = len(output)
				kind, call = "call", collectedCall{id: e.id, name: e.name}
				item := callItemOf(call, custom, "in_progress")
				if custom[call.name] {
					empty := ""
					item.Input = &empty
				} else {
					empty := ""
					item.Arguments = &empty
				}
				err = emit("response.output_item.added", map[string]any{"output_index": idx, "item": item})
			case evToolArgs, evToolEnd:
				if kind != "call" {
					continue
				}
				if e.kind == evToolEnd {
					call.args = e.args
				}
				// A custom tool's input is sent whole when the call ends (its JSON string
				// fragments are not input text); a function's arguments stream.
				if custom[call.name] {
					if e.kind == evToolEnd {
						item := callItemOf(call, custom, "completed")
						err = emit("response.custom_tool_call_input.delta", map[string]any{"item_id": item.ID, "output_index": idx, "delta": *item.Input})
					}
				} else if e.text != "" {
					err = emit("response.function_call_arguments.delta", map[string]any{"item_id": "fc_" + call.id, "output_index": idx, "delta": e.text})
				}
				if err == nil && e.kind == evToolEnd {
					err = closeItem()
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
	final := shell
	if aerr := resultError(res); aerr != nil {
		final.Status = "failed"
		final.Error = map[string]string{"code": aerr.code, "message": aerr.msg}
		final.Output = append([]any{}, output...)
		emit("response.failed", map[string]any{"response": final})
		return
	}
	if closeItem() != nil {
		return
	}
	final.Output = append([]any{}, output...)
	finishResp(&final, res)
	typ := "response.completed"
	if final.Status == "incomplete" {
		typ = "response.incomplete"
	}
	emit(typ, map[string]any{"response": final})
}
