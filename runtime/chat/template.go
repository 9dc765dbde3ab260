// Package chat renders a checkpoint's chat template (Jinja) for messages, tools and
// add_generation_prompt, byte-for-byte as HF transformers does with jinja2.
//
// No Go Jinja engine renders Qwen templates exactly (hub-and-go.md §B15): gonja v2.8.0 cannot
// parse messages[::-1] and its tojson sorts keys, packs separators and escapes '<' and '>'.
// So this package is a small Jinja interpreter of its own, covering what chat templates use:
// the jinja2 lexer rules with transformers' settings (trim_blocks, lstrip_blocks, no trailing
// newline), if/for/set/macro/filter/with/break/continue/generation, namespace(), loop.*,
// slicing with steps, Python str/dict/list methods allowed by an ImmutableSandboxedEnvironment,
// the usual filters and tests, and transformers' tojson (Python json.dumps with
// ensure_ascii=False: ", " and ": " separators, insertion order, no HTML escaping),
// raise_exception and strftime_now. Values keep JSON key order: decode request JSON with
// ParseJSON. Tags it does not know (include, import, extends, call, do, ...) are refused
// at Parse with the tag named. Rendering is bounded by Limits.
//
// The package imports only the standard library.
package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Template is a parsed chat template. It is safe for concurrent use.
type Template struct {
	body []node
	// Now is the clock for strftime_now (time.Now when nil).
	Now func() time.Time
	// Limits bound each render (zero values take the defaults).
	Limits Limits
}

// Parse parses template source. Errors are *SyntaxError with the line.
func Parse(src string) (t *Template, err error) {
	defer func() {
		if p := recover(); p != nil { // a bug here must not take the server down
			t, err = nil, fmt.Errorf("chat template: internal error while parsing: %v", p)
		}
	}()
	body, err := parse(src)
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// Render renders the template with vars (converted with FromGo; *Dict and *List values from
// ParseJSON keep their key order). Errors are *TemplateError.
func (t *Template) Render(vars map[string]any) (out string, err error) {
	now := t.Now
	if now == nil {
		now = time.Now
	}
	r := &renderer{out: &strings.Builder{}, limits: t.Limits.withDefaults(), now: now}
	defer func() {
		if p := recover(); p != nil {
			out, err = "", fmt.Errorf("chat template: internal error while rendering: %v", p)
		}
	}()
	g := newFrame(nil)
	for k, v := range globals(now) {
		g.vars[k] = v
	}
	top := newFrame(g)
	for k, v := range vars {
		c, err := FromGo(v)
		if err != nil {
			return "", err
		}
		top.vars[k] = c
	}
	err = r.execBody(t.body, top)
	if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
		err = r.errorf("break or continue outside a loop")
	}
	if err != nil {
		return "", err
	}
	return r.out.String(), nil
}

// Input is what transformers' apply_chat_template hands the template.
type Input struct {
	// Messages is the conversation: a *List of *Dict (from ParseJSON, so keys keep their order).
	Messages any
	// Tools is the list of tool schemas, or nil (the template then sees tools = None).
	Tools any
	// Documents for RAG templates, or nil (documents = None).
	Documents any
	// AddGenerationPrompt appends the assistant turn header.
	AddGenerationPrompt bool
	// Vars are the other variables: the special tokens (bos_token, eos_token, ...) and
	// template kwargs such as enable_thinking. A key here overrides the fields above.
	Vars map[string]any
}

// Apply renders the template as transformers' render_jinja_template does:
// render(messages=..., tools=..., documents=..., add_generation_prompt=..., **vars).
func (t *Template) Apply(in Input) (string, error) {
	vars := map[string]any{
		"messages":              in.Messages,
		"tools":                 in.Tools,
		"documents":             in.Documents,
		"add_generation_prompt": in.AddGenerationPrompt,
	}
	for k, v := range in.Vars {
		vars[k] = v
	}
	return t.Render(vars)
}

// Config is the chat-template part of a checkpoint's tokenizer_config.json (plus
// chat_template.jinja when the checkpoint ships one).
type Config struct {
	// Templates by name; a single unnamed template is "default".
	Templates map[string]string
	// SpecialTokens are the special_tokens_map transformers passes to the template:
	// bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token (strings,
	// only those set) and additional_special_tokens (a list of strings).
	SpecialTokens map[string]any
}

// LoadConfig reads dir/tokenizer_config.json and, when present, dir/chat_template.jinja
// (which takes precedence for "default", as in transformers).
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if src, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		c.Templates["default"] = string(src)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chat: %w", err)
	}
	return c, nil
}

// ParseConfig reads the chat_template and special tokens of a tokenizer_config.json.
func ParseConfig(data []byte) (*Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("chat: parse tokenizer_config.json: %w", err)
	}
	c := &Config{Templates: map[string]string{}, SpecialTokens: map[string]any{}}
	if tpl, ok := raw["chat_template"]; ok && string(tpl) != "null" {
		var s string
		if err := json.Unmarshal(tpl, &s); err == nil {
			c.Templates["default"] = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(tpl, &named); err != nil {
				return nil, fmt.Errorf("chat: chat_template must be a string or a list of {name, template}")
			}
			for _, n := range named {
				c.Templates[n.Name] = n.Template
			}
		}
	}
	for _, key := range []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"} {
		m, ok := raw[key]
		if !ok || string(m) == "null" {
			continue
		}
		s, err := tokenContent(m)
		if err != nil {
			return nil, fmt.Errorf("chat: %s: %w", key, err)
		}
		c.SpecialTokens[key] = s
	}
	if m, ok := raw["additional_special_tokens"]; ok && string(m) != "null" {
		var list []json.RawMessage
		if err := json.Unmarshal(m, &list); err != nil {
			return nil, fmt.Errorf("chat: additional_special_tokens: %w", err)
		}
		out := make([]any, 0, len(list))
		for i, e := range list {
			s, err := tokenContent(e)
			if err != nil {
				return nil, fmt.Errorf("chat: additional_special_tokens[%d]: %w", i, err)
			}
			out = append(out, s)
		}
		c.SpecialTokens["additional_special_tokens"] = &List{Items: out}
	}
	return c, nil
}

// tokenContent reads a special token written as a string or as an AddedToken object.
func tokenContent(m json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(m, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(m, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("must be a string or an object with content")
	}
	return *obj.Content, nil
}

// Template picks the template as transformers' get_chat_template does: "tool_use" when
// tools are given and the checkpoint has one, else "default".
func (c *Config) Template(withTools bool) (string, error) {
	if withTools {
		if s, ok := c.Templates["tool_use"]; ok {
			return s, nil
		}
	}
	if s, ok := c.Templates["default"]; ok {
		return s, nil
	}
	if len(c.Templates) == 0 {
		return "", fmt.Errorf("chat: the checkpoint has no chat_template")
	}
	return "", fmt.Errorf("chat: no \"default\" chat template among %d named ones", len(c.Templates))
}
