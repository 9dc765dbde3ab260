package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"

	"lithos/runtime/chat"
)

// The inverse direction: tool schemas, tool calls and tool results as the chat template reads
// them. Qwen templates take OpenAI-shaped values (testdata/tokenizer/qwen3 and
// testdata/chat/templates/qwen35_style.jinja): tools as {"type": "function", "function": {name,
// description, parameters}} rendered with tojson; assistant messages with tool_calls
// [{id, type, function: {name, arguments}}] where arguments is a mapping (the XML templates
// iterate arguments|items, the JSON one renders arguments|tojson); tool results as
// {"role": "tool", "content", "tool_call_id", "name"} messages, which the templates wrap in
// <tool_response>. Key order is kept (chat.Dict), as transformers keeps the request's.

// TemplateArguments parses a call's arguments JSON into the ordered mapping templates iterate.
// An empty string is an empty mapping (some clients send "" for a call without arguments);
// anything but a JSON object is an error.
func TemplateArguments(args string) (*chat.Dict, error) {
	if len(bytes.TrimSpace([]byte(args))) == 0 {
		return chat.NewDict(), nil
	}
	v, err := chat.ParseJSON([]byte(args))
	if err != nil {
		return nil, fmt.Errorf("tool call arguments: %w", err)
	}
	d, ok := v.(*chat.Dict)
	if !ok {
		return nil, fmt.Errorf("tool call arguments must be a JSON object, not %.40s", args)
	}
	return d, nil
}

// TemplateToolCall is one entry of an assistant message's tool_calls:
// {"id": id, "type": "function", "function": {"name": name, "arguments": mapping}}.
func TemplateToolCall(id, name, args string) (*chat.Dict, error) {
	a, err := TemplateArguments(args)
	if err != nil {
		return nil, fmt.Errorf("tool call %q: %w", name, err)
	}
	fn := chat.NewDict()
	_ = fn.Set("name", name)
	_ = fn.Set("arguments", a)
	d := chat.NewDict()
	_ = d.Set("id", id)
	_ = d.Set("type", "function")
	_ = d.Set("function", fn)
	return d, nil
}

// TemplateTool is one entry of the template's tools:
// {"type": "function", "function": {"name", "description" (when not empty), "parameters"}}.
// parameters must be a JSON object (a JSON schema); empty means
// {"type": "object", "properties": {}}.
func TemplateTool(name, description string, parameters json.RawMessage) (*chat.Dict, error) {
	if name == "" {
		return nil, fmt.Errorf("tool with an empty name")
	}
	if len(bytes.TrimSpace(parameters)) == 0 || string(bytes.TrimSpace(parameters)) == "null" {
		parameters = json.RawMessage(`{"type": "object", "properties": {}}`)
	}
	v, err := chat.ParseJSON(parameters)
	if err != nil {
		return nil, fmt.Errorf("tool %q: parameters: %w", name, err)
	}
	params, ok := v.(*chat.Dict)
	if !ok {
		return nil, fmt.Errorf("tool %q: parameters must be a JSON object (a JSON schema)", name)
	}
	fn := chat.NewDict()
	_ = fn.Set("name", name)
	if description != "" {
		_ = fn.Set("description", description)
	}
	_ = fn.Set("parameters", params)
	d := chat.NewDict()
	_ = d.Set("type", "function")
	_ = d.Set("function", fn)
	return d, nil
}
