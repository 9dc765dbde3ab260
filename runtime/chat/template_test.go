package chat

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

func mustJSON(t testing.TB, s string) any {
	t.Helper()
	v, err := ParseJSON([]byte(s))
	if err != nil {
		t.Fatalf("ParseJSON(%s): %v", s, err)
	}
	return v
}

func render(t *testing.T, src string, vars map[string]any) string {
	t.Helper()
	tpl, err := Parse(src)
	if err != nil {
		t.Fatalf("parse %q: %v", src, err)
	}
	out, err := tpl.Render(vars)
	if err != nil {
		t.Fatalf("render %q: %v", src, err)
	}
	return out
}

// TestTinyFixtureTemplate renders the test checkpoint's template; the expected text is read
// off the template: one <|im_start|>role\ncontent<|im_end|>\n per message, then the
// assistant header when add_generation_prompt is set.
func TestTinyFixtureTemplate(t *testing.T) {
	c, err := LoadConfig("../../testdata/hub/lithos-test/tiny-sharded")
	if err != nil {
		t.Fatal(err)
	}
	src, err := c.Template(false)
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	msgs := mustJSON(t, `[{"role": "system", "content": "S"}, {"role": "user", "content": "U é <x>"}]`)
	for _, gen := range []bool{true, false} {
		out, err := tpl.Apply(Input{Messages: msgs, AddGenerationPrompt: gen, Vars: c.SpecialTokens})
		if err != nil {
			t.Fatal(err)
		}
		want := "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU é <x><|im_end|>\n"
		if gen {
			want += "<|im_start|>assistant\n"
		}
		if out != want {
			t.Errorf("gen=%v: got %q, want %q", gen, out, want)
		}
	}
	if c.SpecialTokens["eos_token"] != "<|im_end|>" || c.SpecialTokens["pad_token"] != "<|endoftext|>" {
		t.Errorf("special tokens = %v", c.SpecialTokens)
	}
	if _, ok := c.SpecialTokens["bos_token"]; ok {
		t.Errorf("bos_token is null in the fixture but was set: %v", c.SpecialTokens["bos_token"])
	}
}

// TestToJSON pins transformers' tojson = json.dumps(ensure_ascii=False): ", " and ": "
// separators, key insertion order, raw non-ASCII, no escaping of < > &, indent with ",".
func TestToJSON(t *testing.T) {
	v := mustJSON(t, `{"b": 1, "a": [1, 2.5, "é<>&'\"\n"], "c": {}, "d": [], "e": null, "f": true, "g": 1.0, "h": 1e-7}`)
	vars := map[string]any{"v": v}
	cases := map[string]string{
		"{{ v|tojson }}":                                        `{"b": 1, "a": [1, 2.5, "é<>&'\"\n"], "c": {}, "d": [], "e": null, "f": true, "g": 1.0, "h": 1e-07}`,
		"{{ v.a|tojson(indent=2) }}":                            "[\n  1,\n  2.5,\n  \"é<>&'\\\"\\n\"\n]",
		"{{ v.a|tojson(ensure_ascii=true) }}":                   `[1, 2.5, "\u00e9<>&'\"\n"]`,
		"{{ v|tojson(sort_keys=true, separators=(',', ':')) }}": `{"a":[1,2.5,"é<>&'\"\n"],"b":1,"c":{},"d":[],"e":null,"f":true,"g":1.0,"h":1e-07}`,
	}
	for src, want := range cases {
		if got := render(t, src, vars); got != want {
			t.Errorf("%s:\n got  %s\n want %s", src, got, want)
		}
	}
}

// TestPyFloatRepr checks Python's repr(float) on values whose Python spelling is well known.
func TestPyFloatRepr(t *testing.T) {
	tenth, fifth := 0.1, 0.2 // variables: the constant 0.1 + 0.2 is exactly 0.3
	cases := []struct {
		f    float64
		want string
	}{
		{1, "1.0"}, {0.1, "0.1"}, {1e-05, "1e-05"}, {0.0001, "0.0001"}, {1e16, "1e+16"},
		{1234567890123456, "1234567890123456.0"}, {1.5e-10, "1.5e-10"}, {math.Copysign(0, -1), "-0.0"},
		{123456789012345680, "1.2345678901234568e+17"}, {5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"}, {tenth + fifth, "0.30000000000000004"},
		{-2.5, "-2.5"}, {100, "100.0"}, {math.Inf(1), "inf"}, {math.NaN(), "nan"},
	}
	for _, c := range cases {
		if got := pyFloatRepr(c.f); got != c.want {
			t.Errorf("pyFloatRepr(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

// TestWhitespace: trim_blocks drops the newline after a block tag, lstrip_blocks the
// indentation before it; {{ }} is not affected; "-" strips all whitespace; "+" keeps it;
// the template's last newline is dropped.
func TestWhitespace(t *testing.T) {
	cases := map[string]string{
		"A\n  {% if true %}\n    B\n  {% endif %}\nC\n":  "A\n    B\nC",
		"a\n    {{ 'v' }}\n":                             "a\n    v",
		"x  \n {%- if true -%} \n y\n{%- endif %}":       "xy",
		"a\n    {%+ if true %}b{% endif %}":              "a\n    b",
		"{% if true +%}\nkeep{% endif %}":                "\nkeep",
		"{# c #}\nA{#- c -#}   B":                        "AB",
		"{% raw %}{{ x }}{% endraw %}":                   "{{ x }}",
		"l1\r\n{% if true %}\r\nl2\r\n{% endif %}\r\nl3": "l1\nl2\nl3",
	}
	for src, want := range cases {
		if got := render(t, src, nil); got != want {
			t.Errorf("%q: got %q, want %q", src, got, want)
		}
	}
}

// TestSemantics pins Python/jinja2 behaviour that Qwen templates depend on.
func TestSemantics(t *testing.T) {
	vars := map[string]any{
		"msgs": mustJSON(t, `[{"role": "system"}, {"role": "user"}, {"role": "tool"}]`),
		"n":    mustJSON(t, `[1, 2, 3, 4, 5]`),
	}
	cases := map[string]string{
		"{{ n[::-1] }}":                   "[5, 4, 3, 2, 1]",
		"{{ n[5:1:-2] }}":                 "[5, 3]",
		"{{ n[-2:] }}|{{ 'héllo'[1:3] }}": "[4, 5]|él",
		"{% for m in msgs[::-1] %}{{ m.role[0] }}{% endfor %}":                                                  "tus",
		"{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}[{{ x }}]{% endfor %}{{ x }}":                   "[2][3]1",
		"{% set ns = namespace(c=0) %}{% for i in n %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}":          "15",
		"{% for m in msgs %}{{ loop.previtem.role if loop.previtem is defined else '-' }}{% endfor %}":          "-systemuser",
		"{{ 'a</think>b'.split('</think>')[-1] }}|{{ '\n\nx\n'.strip('\n') }}|{{ 'x'.startswith(('a', 'x')) }}": "b|x|True",
		"{{ none }}|{{ 1.0 }}|{{ 7 / 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ {'a': [1, 'b', none, true]} }}":         "None|1.0|3.5|-4|2|{'a': [1, 'b', None, True]}",
		"{{ x is defined }}|{{ msgs is sequence }}|{{ msgs[0] is mapping }}|{{ 'a' is string }}":                "False|True|True|True",
		"{{ n|length - 1 }}|{{ not none is none }}|{{ 1 if n else 0 }}":                                         "4|False|1",
		"{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m('A') }}{{ m('a', b='b') }}":                    "ABab",
		"{{ {'k': 1}|items|list }}|{{ [3, 1, 2]|sort }}|{{ ['x', 'y']|join('-') }}":                             "[('k', 1)]|[1, 2, 3]|x-y",
	}
	for src, want := range cases {
		if got := render(t, src, vars); got != want {
			t.Errorf("%q:\n got  %q\n want %q", src, got, want)
		}
	}
}

func TestApplyToolsNone(t *testing.T) {
	tpl, err := Parse("{{ tools is defined }}/{{ tools is none }}/{{ documents is none }}/{{ add_generation_prompt }}/{{ enable_thinking }}")
	if err != nil {
		t.Fatal(err)
	}
	out, err := tpl.Apply(Input{Messages: NewList(), Vars: map[string]any{"enable_thinking": false}})
	if err != nil {
		t.Fatal(err)
	}
	if out != "True/True/True/False/False" {
		t.Errorf("got %q", out)
	}
}

func TestRaiseException(t *testing.T) {
	tpl, err := Parse("ok{% if true %}{{ raise_exception('No user query found in messages.') }}{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Render(nil)
	var te *TemplateError
	if !errors.As(err, &te) || !te.Raised || te.Msg != "No user query found in messages." || te.Line != 1 {
		t.Fatalf("err = %#v", err)
	}
	// A type error is a TemplateError that the template did not raise itself.
	tpl, _ = Parse("{{ 1 + 'a' }}")
	if _, err := tpl.Render(nil); !errors.As(err, &te) || te.Raised {
		t.Fatalf("1 + 'a': err = %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"a\n{% include 'x' %}":                   "line 2: tag 'include' is not supported",
		"{% extends 'base' %}":                   "tag 'extends' is not supported",
		"{{ x|nosuch }}":                         "no filter named 'nosuch'",
		"{{ x is nosuch }}":                      "no test named 'nosuch'",
		"{% if x %}":                             "expected 'elif' or 'else' or 'endif'",
		"{{ 'unterminated }}":                    "unterminated string literal",
		"{# open":                                "missing end of comment tag",
		"{{ (1 }}":                               "unexpected '}', expected ')'",
		"{% for x in y recursive %}{% endfor %}": "recursive loops are not supported",
		"{{ " + strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300) + " }}": "nested deeper than",
	}
	for src, want := range cases {
		_, err := Parse(src)
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want a SyntaxError containing %q", src, err, want)
		}
	}
}

// TestLimits: runaway templates stop with an error instead of running on.
func TestLimits(t *testing.T) {
	cases := map[string]string{
		"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}": "steps",
		"{{ 'x' * 100000000 }}":                                    "bytes",
		"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}":          "nested deeper",
		"{% for i in range(1000) %}{{ 'y' * 100000 }}{% endfor %}": "bytes",
		"{{ range(1000000)|length }}":                              "range too big",
	}
	for src, want := range cases {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		tpl.Limits = Limits{MaxSteps: 1_000_000, MaxOutputBytes: 1 << 20}
		_, err = tpl.Render(nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", src, err, want)
		}
	}
}

func TestParseJSONOrder(t *testing.T) {
	v := mustJSON(t, `{"b": 1, "a": {"z": 2, "y": [1.0, 2]}, "b": 3}`)
	d := v.(*Dict)
	if got := repr(d); got != "{'b': 3, 'a': {'z': 2, 'y': [1.0, 2]}}" {
		t.Errorf("repr = %s", got)
	}
	for _, bad := range []string{`{"a": 1}x`, `[1, 2`, `99999999999999999999`, `{"a" 1}`, strings.Repeat("[", 1200) + strings.Repeat("]", 1200)} {
		if _, err := ParseJSON([]byte(bad)); err == nil {
			t.Errorf("ParseJSON(%.40q) accepted", bad)
		}
	}
}

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
		"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "unk_token": null,
		"additional_special_tokens": ["<a>", {"content": "<b>"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := c.Template(true); s != "T" {
		t.Errorf("with tools: %q", s)
	}
	if s, _ := c.Template(false); s != "D" {
		t.Errorf("without tools: %q", s)
	}
	if c.SpecialTokens["bos_token"] != "<s>" || c.SpecialTokens["eos_token"] != "</s>" {
		t.Errorf("special tokens %v", c.SpecialTokens)
	}
	if _, ok := c.SpecialTokens["unk_token"]; ok {
		t.Error("null unk_token was set")
	}
	if got := repr(c.SpecialTokens["additional_special_tokens"]); got != "['<a>', '<b>']" {
		t.Errorf("additional_special_tokens = %s", got)
	}
	if _, err := ParseConfig([]byte(`{"chat_template": 3}`)); err == nil {
		t.Error("numeric chat_template accepted")
	}
	none, _ := ParseConfig([]byte(`{}`))
	if _, err := none.Template(false); err == nil {
		t.Error("missing chat_template accepted")
	}
}

// FuzzTemplate: no template text makes Parse or Render panic (both turn a panic into an
// "internal error", which fails here) or run unbounded (Limits).
func FuzzTemplate(f *testing.F) {
	for _, p := range []string{"../../testdata/chat/templates/qwen35_style.jinja"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	for _, s := range []string{
		"{% for m in messages[::-1] %}{{ loop.index0 }}{{ m.role|tojson }}{% endfor %}",
		"{%- set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}",
		"{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{{ f }}",
		"{{ tools|tojson(indent=2) }}{% raw %}{{{% endraw %}{# c #}",
		"{{ 'a' if x else b|upper }}{{ x[1:2:3] }}{{ -1 ** 2 }}",
		// Sizes whose products overflow int64, and doubling by concatenation.
		"{{ ([1, 2] * 4611686018427387904)|length }}",
		"{{ 'ab' * 4611686018427387904 }}",
		"{% set ns = namespace(x=[1]) %}{% for i in range(40) %}{% set ns.x = ns.x + ns.x %}{% endfor %}{{ ns.x|length }}",
	} {
		f.Add(s)
	}
	msgs := mustJSON(f, `[{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "t"}]},
		{"role": "assistant", "content": "a", "tool_calls": [{"function": {"name": "f", "arguments": {"k": [1, {"z": null}]}}}]}]`)
	tools := mustJSON(f, `[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]`)
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 4096 {
			return
		}
		tpl, err := Parse(src)
		if err != nil {
			if strings.Contains(err.Error(), "internal error") {
				t.Fatal(err)
			}
			return
		}
		tpl.Limits = Limits{MaxSteps: 200_000, MaxOutputBytes: 1 << 20, MaxCallDepth: 30}
		_, err = tpl.Apply(Input{Messages: msgs, Tools: tools, AddGenerationPrompt: true})
		if err != nil && strings.Contains(err.Error(), "internal error") {
			t.Fatal(err)
		}
	})
}

// FuzzParseJSON: ParseJSON never panics, and what it accepts renders through tojson.
func FuzzParseJSON(f *testing.F) {
	f.Add(`{"a": [1, 2.5, "x", null, true, {"b": {}}]}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseJSON([]byte(s))
		if err != nil {
			return
		}
		if _, err := toJSON(v, defaultJSONOptions()); err != nil {
			t.Fatalf("tojson of parsed %q: %v", s, err)
		}
	})
}

// TestHugeSequencesRefused: repetition and concatenation that would need
// gigabytes are refused with the rule, not an out-of-memory crash.
func TestHugeSequencesRefused(t *testing.T) {
	for _, src := range []string{
		"{{ ([1, 2] * 4611686018427387904)|length }}",
		"{{ 'ab' * 4611686018427387904 }}",
		"{% set ns = namespace(x=[1]) %}{% for i in range(40) %}{% set ns.x = ns.x + ns.x %}{% endfor %}{{ ns.x|length }}",
	} {
		tmpl, err := Parse(src)
		if err != nil {
			t.Fatalf("parse %q: %v", src, err)
		}
		_, err = tmpl.Render(map[string]any{})
		if err == nil || !(strings.Contains(err.Error(), "longer than")) {
			t.Errorf("%q: %v, want a length limit error", src, err)
		}
	}
}
