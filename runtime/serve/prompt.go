package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"lithos/runtime/chat"
	"lithos/runtime/toolcall"
)

// message is one conversation turn, API-neutral, as the chat template sees it.
type message struct {
	role       string // system, user, assistant, tool
	content    string
	reasoning  string     // assistant: earlier thinking (reasoning_content)
	toolCalls  []toolCall // assistant
	toolCallID string     // tool
	name       string     // tool: the function's name
}

// toolCall is an assistant's earlier call; args is a JSON object ("" counts as {}).
type toolCall struct {
	id, name, args string
}

// toolDef is a function tool the model may call.
type toolDef struct {
	name, description string
	params            json.RawMessage // a JSON schema object (nil: no parameters)
	custom            bool            // Responses "custom" tool: one string parameter "input"
}

// Tool choices (conversation.toolChoice); a named choice is the function name itself.
const (
	choiceAuto     = "auto"
	choiceNone     = "none"
	choiceRequired = "required"
)

// conversation is a request's input after its API's adapter: what the prompt is rendered from.
type conversation struct {
	messages   []message
	tools      []toolDef
	toolChoice string // choiceAuto, choiceNone, choiceRequired or a tool name
	parallel   bool   // several calls allowed in one answer
	thinking   bool   // enable_thinking for the template
}

// thinkOpen opens a reasoning block in Qwen templates.
const thinkOpen = "<think>"

// customToolSuffix is appended to a custom tool's description (lithos-metal.md §7.7).
const customToolSuffix = " Return the complete tool input in the input string."

// customParams is the schema a custom tool is given: one required string "input".
var customParams = json.RawMessage(`{"type":"object","properties":{"input":{"type":"string"}},"required":["input"]}`)

// checkTools checks the tools: names non-empty, unique and made of letters, digits, '_', '-'
// and '.' (a name reaches the prompt, the XML call form <function=NAME> and the answers, which
// an agent may print on a terminal: no markup, spaces, control or bidirectional-format
// characters), parameters a JSON schema object (type "object" when given) that the chat
// template can read. Errors name the tool.
func checkTools(tools []toolDef, where string) *apiError {
	seen := map[string]bool{}
	for i, t := range tools {
		param := fmt.Sprintf("%s[%d]", where, i)
		if t.name == "" {
			return badRequest(param+".name", "tool %d has no name", i)
		}
		if !validToolName(t.name) || len(t.name) > 256 {
			return badRequest(param+".name", "tool name %.40q: use letters, digits, '_', '-', '.' (at most 256 bytes)", t.name)
		}
		if seen[t.name] {
			return badRequest(param+".name", "tool name %q appears twice", t.name)
		}
		seen[t.name] = true
		if err := checkSchema(t.params); err != nil {
			return badRequest(param+".parameters", "tool %q: %v", t.name, err)
		}
	}
	return nil
}

// validToolName reports whether name holds only letters, digits (Unicode), '_', '-' and '.'.
func validToolName(name string) bool {
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '-' && r != '.' {
			return false
		}
	}
	return true
}

// checkSchema requires a JSON schema object whose "type", when present, is "object", and that
// the chat template's JSON reader accepts (chat.ParseJSON: nesting, integers within int64).
func checkSchema(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("the parameters schema must be a JSON object, got %s", kindOf(raw))
	}
	if ty, ok := m["type"]; ok {
		var s string
		if json.Unmarshal(ty, &s) != nil || s != "object" {
			return fmt.Errorf("the parameters schema must have \"type\": \"object\", not %s", ty)
		}
	}
	if p, ok := m["properties"]; ok && string(p) != "null" && (len(p) == 0 || p[0] != '{') {
		return fmt.Errorf("\"properties\" must be an object, got %s", kindOf(p))
	}
	if _, err := chat.ParseJSON(raw); err != nil {
		return fmt.Errorf("the parameters schema: %v", err)
	}
	return nil
}

// kindOf names a JSON value's kind for error messages.
func kindOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// renderer renders conversations through the bundle's chat template.
type renderer struct {
	plain, withTools *chat.Template
	vars             map[string]any // special tokens
}

func newRenderer(c *chat.Config) (*renderer, error) {
	src, err := c.Template(false)
	if err != nil {
		return nil, err
	}
	r := &renderer{vars: c.SpecialTokens}
	if r.plain, err = chat.Parse(src); err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	r.withTools = r.plain
	if tsrc, err := c.Template(true); err == nil && tsrc != src {
		if r.withTools, err = chat.Parse(tsrc); err != nil {
			return nil, fmt.Errorf("chat template tool_use: %w", err)
		}
	}
	return r, nil
}

// render returns the prompt text of c's first n messages (n < 0: all) with or without the
// assistant header. The system messages (developer included) are merged into one leading
// system message, joined by a blank line, with the tool-choice instructions appended
// (the reference enforces tool_choice by prompting: lithos-metal.md §7.4).
func (r *renderer) render(c *conversation, n int, addGen bool) (string, error) {
	msgs := c.messages
	if n >= 0 {
		msgs = msgs[:n]
	}
	var sys []string
	var rest []message
	for _, m := range msgs {
		if m.role == "system" {
			if m.content != "" {
				sys = append(sys, m.content)
			}
			continue
		}
		rest = append(rest, m)
	}
	tools := c.tools
	switch c.toolChoice {
	case choiceNone:
		tools = nil
	case choiceAuto, "":
	case choiceRequired:
		sys = append(sys, "Call one of the provided tools to answer this request.")
	default:
		for _, t := range c.tools {
			if t.name == c.toolChoice {
				tools = []toolDef{t}
			}
		}
		sys = append(sys, fmt.Sprintf("Call the %s tool to answer this request.", c.toolChoice))
	}
	if len(tools) > 0 && !c.parallel {
		sys = append(sys, "Call at most one tool in this response.")
	}
	list := chat.NewList()
	if len(sys) > 0 {
		d := chat.NewDict()
		d.Set("role", "system")
		d.Set("content", strings.Join(sys, "\n\n"))
		list.Items = append(list.Items, d)
	}
	for _, m := range rest {
		d, err := messageValue(m)
		if err != nil {
			return "", err
		}
		list.Items = append(list.Items, d)
	}
	if len(list.Items) == 0 {
		return "", fmt.Errorf("no messages")
	}
	var toolList any
	tpl := r.plain
	if len(tools) > 0 {
		tl := chat.NewList()
		for _, t := range tools {
			v, err := toolValue(t)
			if err != nil {
				return "", err
			}
			tl.Items = append(tl.Items, v)
		}
		toolList = tl
		tpl = r.withTools
	}
	vars := map[string]any{"enable_thinking": c.thinking}
	for k, v := range r.vars {
		vars[k] = v
	}
	return tpl.Apply(chat.Input{Messages: list, Tools: toolList, AddGenerationPrompt: addGen, Vars: vars})
}

// messageValue is m as the template's message dict (keys in transformers' usual order).
func messageValue(m message) (*chat.Dict, error) {
	d := chat.NewDict()
	d.Set("role", m.role)
	d.Set("content", m.content)
	if m.reasoning != "" {
		d.Set("reasoning_content", m.reasoning)
	}
	if len(m.toolCalls) > 0 {
		calls := chat.NewList()
		for _, c := range m.toolCalls {
			call, err := toolcall.TemplateToolCall(c.id, c.name, c.args)
			if err != nil {
				return nil, err
			}
			calls.Items = append(calls.Items, call)
		}
		d.Set("tool_calls", calls)
	}
	if m.role == "tool" {
		if m.toolCallID != "" {
			d.Set("tool_call_id", m.toolCallID)
		}
		if m.name != "" {
			d.Set("name", m.name)
		}
	}
	return d, nil
}

// toolValue is t in the OpenAI function-tool shape transformers templates expect:
// {"type": "function", "function": {"name", "description", "parameters"}}.
func toolValue(t toolDef) (*chat.Dict, error) {
	desc, params := t.description, t.params
	if t.custom {
		desc += customToolSuffix
		params = customParams
	}
	return toolcall.TemplateTool(t.name, desc, params)
}

// parserTools are the tools as the tool-call parser types them.
func parserTools(tools []toolDef) []toolcall.Tool {
	out := make([]toolcall.Tool, len(tools))
	for i, t := range tools {
		out[i] = toolcall.Tool{Name: t.name, Parameters: t.params}
		if t.custom {
			out[i].Parameters = customParams
		}
	}
	return out
}

// promptLeavesThinking reports whether a rendered prompt ends with an open <think> (the
// template's generation prompt with thinking on): the output then starts with reasoning.
func promptLeavesThinking(prompt string) bool {
	return strings.HasSuffix(strings.TrimRight(prompt, " \n"), thinkOpen)
}
