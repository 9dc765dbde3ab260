package toolcall

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"lithos/runtime/chat"
)

// The chat-template goldens (testdata/chat/goldens.json, rendered by jinja2 through
// transformers' environment; see testdata/chat/README.md) are the oracle here: the helpers
// must build messages that render byte-for-byte as jinja2 rendered the golden's, and the
// parser must read back, from jinja2's own bytes, the calls those messages hold.

const repoRoot = "../.."

type golden struct {
	Templates map[string]string `json:"templates"`
	Cases     []struct {
		Name     string          `json:"name"`
		Template string          `json:"template"`
		Vars     json.RawMessage `json:"vars"`
		Output   *string         `json:"output"`
	} `json:"cases"`
}

// goldenVars are the parts of a case's vars the helpers rebuild, with raw JSON kept.
type goldenVars struct {
	Messages []struct {
		Role      string `json:"role"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

func loadGolden(t *testing.T) *golden {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "testdata/chat/goldens.json"))
	if err != nil {
		t.Fatalf("read the chat goldens (made by python3 tools/chat_template_goldens.py --out testdata/chat): %v", err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func loadTemplate(t *testing.T, rel string) *chat.Template {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	src := string(data)
	if strings.HasSuffix(rel, ".json") {
		c, err := chat.ParseConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		if src, err = c.Template(true); err != nil {
			t.Fatal(err)
		}
	}
	tpl, err := chat.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// toolCases are the golden cases whose assistant messages carry tool calls with mapping
// arguments (what the server sends).
var toolCases = []string{
	"qwen3/tools-full/gen", "qwen3/tools-full/think-off", "qwen3/tools-pending/gen",
	"qwen35_style/tools-full/gen", "qwen35_style/tools-full/think-off", "qwen35_style/tools-pending/gen",
}

func TestTemplateHelpersMatchJinja2(t *testing.T) {
	g := loadGolden(t)
	found := 0
	for _, c := range g.Cases {
		if !contains(toolCases, c.Name) {
			continue
		}
		found++
		t.Run(c.Name, func(t *testing.T) {
			vars, err := chat.ParseJSON(c.Vars)
			if err != nil {
				t.Fatal(err)
			}
			var raw goldenVars
			if err := json.Unmarshal(c.Vars, &raw); err != nil {
				t.Fatal(err)
			}
			vd := vars.(*chat.Dict)
			msgs, _ := vd.Get("messages")
			// rebuild every tool call from an OpenAI-style JSON string of its arguments
			for i, m := range raw.Messages {
				if len(m.ToolCalls) == 0 {
					continue
				}
				md := msgs.(*chat.List).Items[i].(*chat.Dict)
				var calls []any
				for _, tc := range m.ToolCalls {
					d, err := TemplateToolCall(tc.ID, tc.Function.Name, string(tc.Function.Arguments))
					if err != nil {
						t.Fatal(err)
					}
					if tc.ID == "" { // the golden call had no id: drop it, as the golden did
						d = withoutKey(d, "id")
					}
					calls = append(calls, d)
				}
				_ = md.Set("tool_calls", chat.NewList(calls...))
			}
			var tools []any
			for _, tl := range raw.Tools {
				d, err := TemplateTool(tl.Function.Name, tl.Function.Description, tl.Function.Parameters)
				if err != nil {
					t.Fatal(err)
				}
				tools = append(tools, d)
			}
			_ = vd.Set("tools", chat.NewList(tools...))
			in := map[string]any{}
			for _, k := range vd.Keys() {
				v, _ := vd.Get(k)
				in[k.(string)] = v
			}
			out, err := loadTemplate(t, g.Templates[c.Template]).Render(in)
			if err != nil {
				t.Fatal(err)
			}
			if c.Output == nil || out != *c.Output {
				t.Fatalf("render differs from jinja2:\n got  %q\n want %q", out, deref(c.Output))
			}
		})
	}
	if found != len(toolCases) {
		t.Fatalf("found %d of the %d golden cases %v", found, len(toolCases), toolCases)
	}
}

// TestParseJinja2ToolCalls parses the assistant turns jinja2 rendered (the format the model
// learned) and expects the calls the golden's messages hold, arguments typed by the schema.
func TestParseJinja2ToolCalls(t *testing.T) {
	g := loadGolden(t)
	for _, c := range g.Cases {
		if !contains(toolCases, c.Name) || c.Output == nil {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			var raw goldenVars
			if err := json.Unmarshal(c.Vars, &raw); err != nil {
				t.Fatal(err)
			}
			var tools []Tool
			for _, tl := range raw.Tools {
				tools = append(tools, Tool{Name: tl.Function.Name, Parameters: tl.Function.Parameters})
			}
			// the first assistant turn holding a call, as rendered
			const head = "<|im_start|>assistant\n"
			var turn string
			for _, part := range strings.Split(*c.Output, head)[1:] {
				if strings.Contains(part, "<tool_call>") {
					turn, _, _ = strings.Cut(part, "<|im_end|>")
					break
				}
			}
			var want []map[string]any
			var names []string
			for _, m := range raw.Messages {
				if len(m.ToolCalls) > 0 {
					for _, tc := range m.ToolCalls {
						var a map[string]any
						if err := json.Unmarshal(tc.Function.Arguments, &a); err != nil {
							t.Fatal(err)
						}
						want = append(want, a)
						names = append(names, tc.Function.Name)
					}
					break
				}
			}
			res, err := Parse(turn, Options{Tools: tools})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Invalid) > 0 || len(res.Calls) != len(want) {
				t.Fatalf("parsed %+v from %q; want %d calls", res, turn, len(want))
			}
			for i, call := range res.Calls {
				var got map[string]any
				if err := json.Unmarshal([]byte(call.Arguments), &got); err != nil {
					t.Fatal(err)
				}
				if call.Name != names[i] || !reflect.DeepEqual(got, want[i]) {
					t.Errorf("call %d: %s %v, want %s %v", i, call.Name, got, names[i], want[i])
				}
			}
			if strings.Contains(res.Content, "<") {
				t.Errorf("markup left in the content %q", res.Content)
			}
		})
	}
}

func TestTemplateHelperErrors(t *testing.T) {
	if _, err := TemplateArguments(`[1, 2]`); err == nil {
		t.Error("array arguments accepted")
	}
	if _, err := TemplateArguments(`{"a": `); err == nil {
		t.Error("broken JSON accepted")
	}
	if d, err := TemplateArguments("  "); err != nil || d.Len() != 0 {
		t.Errorf("empty arguments: %v %v", d, err)
	}
	if _, err := TemplateToolCall("c", "f", `"x"`); err == nil || !strings.Contains(err.Error(), `"f"`) {
		t.Errorf("string arguments: %v", err)
	}
	if _, err := TemplateTool("f", "", json.RawMessage(`"object"`)); err == nil {
		t.Error("non-object parameters accepted")
	}
	if _, err := TemplateTool("", "", nil); err == nil {
		t.Error("empty name accepted")
	}
	d, err := TemplateTool("f", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	fn, _ := d.Get("function")
	if keys := fn.(*chat.Dict).Keys(); !reflect.DeepEqual(keys, []any{"name", "parameters"}) {
		t.Errorf("keys %v", keys)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func withoutKey(d *chat.Dict, key string) *chat.Dict {
	out := chat.NewDict()
	for _, k := range d.Keys() {
		if k != key {
			v, _ := d.Get(k)
			_ = out.Set(k, v)
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return "<no output: jinja2 raised>"
	}
	return *s
}
