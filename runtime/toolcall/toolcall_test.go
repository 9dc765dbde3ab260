package toolcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

var testTools = []Tool{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type": "object", "properties": {
		"city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"type": "string", "enum": ["c", "f"]}},
		"required": ["city"]}`)},
	{Name: "run_query", Parameters: json.RawMessage(`{"type": "object", "properties": {
		"query": {"type": "string"}, "limit": {"type": "integer"}, "ratio": {"type": "number"},
		"dry": {"type": "boolean"}, "filters": {"type": "object"}, "cols": {"type": "array"},
		"maybe": {"type": ["integer", "null"]}, "either": {"anyOf": [{"type": "boolean"}, {"type": "string"}]},
		"free": {}}}`)},
	{Name: "write_file", Parameters: json.RawMessage(`{"type": "object", "properties": {
		"path": {"type": "string"}, "content": {"type": "string"}}}`)},
	{Name: "no_args"},
}

func testOpts(thinking bool) Options {
	return Options{Tools: testTools, Thinking: thinking, NewID: func(i int) string { return fmt.Sprintf("call_%d", i) }}
}

// show writes events compactly: adjacent deltas of one kind and index are merged first, so
// the result does not depend on how the output was cut into pieces.
func show(evs []Event) []string {
	var out []string
	for i := 0; i < len(evs); i++ {
		ev := evs[i]
		switch ev.Kind {
		case Text, Reasoning, CallArgs:
			text := ev.Text
			for i+1 < len(evs) && evs[i+1].Kind == ev.Kind && evs[i+1].Index == ev.Index {
				i++
				text += evs[i].Text
			}
			switch ev.Kind {
			case Text:
				out = append(out, "T:"+text)
			case Reasoning:
				out = append(out, "R:"+text)
			default:
				out = append(out, fmt.Sprintf("A%d:%s", ev.Index, text))
			}
		case CallStart:
			out = append(out, fmt.Sprintf("S%d:%s:%s", ev.Index, ev.ID, ev.Name))
		case CallEnd:
			out = append(out, fmt.Sprintf("E%d:%s:%s:%s|%s", ev.Index, ev.ID, ev.Name, ev.Arguments, ev.Text))
		case Invalid:
			kind := "?"
			for _, e := range []error{ErrUnterminated, ErrUnknownTool, ErrSyntax, ErrTooLong} {
				if errors.Is(ev.Err, e) {
					kind = e.Error()
				}
			}
			out = append(out, fmt.Sprintf("I%d:%v:%s:%s", ev.Index, ev.Started, kind, ev.Text))
		default:
			out = append(out, "bad kind "+ev.Kind.String())
		}
	}
	return out
}

// feed parses pieces with a fresh parser and returns all events.
func feed(t testing.TB, opts Options, pieces []string) []Event {
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	for _, s := range pieces {
		evs = append(evs, p.Feed(s)...)
	}
	return append(evs, p.Close()...)
}

// checkInvariants checks what every event sequence must satisfy.
func checkInvariants(t testing.TB, input string, evs []Event) {
	t.Helper()
	args := map[int]string{}
	started := map[int]bool{}
	ended := map[int]bool{}
	for _, ev := range evs {
		switch ev.Kind {
		case Text, Reasoning:
			if ev.Text == "" {
				t.Fatalf("empty %v delta", ev.Kind)
			}
			if utf8.ValidString(input) && !utf8.ValidString(ev.Text) {
				t.Fatalf("%v delta %q is not valid UTF-8 (input is)", ev.Kind, ev.Text)
			}
		case CallStart:
			if started[ev.Index] || ev.Name == "" || ev.ID == "" {
				t.Fatalf("bad CallStart %+v", ev)
			}
			started[ev.Index] = true
		case CallArgs:
			if !started[ev.Index] || ended[ev.Index] || ev.Text == "" {
				t.Fatalf("CallArgs %+v outside its call", ev)
			}
			args[ev.Index] += ev.Text
		case CallEnd:
			if !started[ev.Index] || ended[ev.Index] {
				t.Fatalf("CallEnd %+v without its start", ev)
			}
			ended[ev.Index] = true
			if args[ev.Index]+ev.Text != ev.Arguments || ev.Text == "" || !strings.HasSuffix(ev.Text, "}") {
				t.Fatalf("call %d: deltas %q + rest %q != arguments %q", ev.Index, args[ev.Index], ev.Text, ev.Arguments)
			}
			var obj map[string]any
			if err := json.Unmarshal([]byte(ev.Arguments), &obj); err != nil {
				t.Fatalf("call %d: arguments %q: %v", ev.Index, ev.Arguments, err)
			}
		case Invalid:
			if ev.Err == nil || ev.Started != started[ev.Index] || ended[ev.Index] {
				t.Fatalf("bad Invalid %+v", ev)
			}
			if ev.Started {
				ended[ev.Index] = true
			}
		default:
			t.Fatalf("bad kind %v", ev.Kind)
		}
	}
	for i := range started {
		if !ended[i] {
			t.Fatalf("call %d started and never ended", i)
		}
	}
}

type parseCase struct {
	name     string
	thinking bool
	noTools  bool
	in       string
	want     []string
}

var cases = []parseCase{
	{name: "plain", in: "Hello, world! a < b, x<y>z, <tool> </tool_call> <think", want: []string{"T:Hello, world! a < b, x<y>z, <tool> </tool_call> <think"}},
	{name: "trailing whitespace kept", in: "Hi there \n", want: []string{"T:Hi there \n"}},
	{name: "partial tag at the end is text", in: "see <tool_ca", want: []string{"T:see <tool_ca"}},
	{name: "no tools: tags are text", noTools: true, in: `x <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>`,
		want: []string{`T:x <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>`}},
	{name: "json", in: "I'll check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
		want: []string{"T:I'll check.", "S0:call_0:get_weather", `A0:{"city": "Paris", "days": 3`,
			`E0:call_0:get_weather:{"city": "Paris", "days": 3}|}`}},
	{name: "json nested braces and tags in strings", in: `<tool_call>{"name":"run_query","arguments":{"query":"a } </tool_call> \" {","filters":{"a":[1,{"b":2}]}}}</tool_call>`,
		want: []string{"S0:call_0:run_query", `A0:{"query":"a } </tool_call> \" {","filters":{"a":[1,{"b":2}]}`,
			`E0:call_0:run_query:{"query":"a } </tool_call> \" {","filters":{"a":[1,{"b":2}]}}|}`}},
	{name: "json string arguments", in: `<tool_call>{"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}</tool_call>`,
		want: []string{"S0:call_0:get_weather", `E0:call_0:get_weather:{"city":"Oslo"}|{"city":"Oslo"}`}},
	{name: "json other key order", in: `<tool_call>{"arguments": {"city": "Rome"}, "name": "get_weather"}</tool_call>`,
		want: []string{"S0:call_0:get_weather", `E0:call_0:get_weather:{"city":"Rome"}|{"city":"Rome"}`}},
	{name: "json parameters alias and no arguments", in: `<tool_call>{"name": "get_weather", "parameters": {"city": "Bern"}}</tool_call><tool_call>{"name": "no_args"}</tool_call>`,
		want: []string{"S0:call_0:get_weather", `A0:{"city": "Bern"`, `E0:call_0:get_weather:{"city": "Bern"}|}`,
			"S1:call_1:no_args", "E1:call_1:no_args:{}|{}"}},
	{name: "json escaped name", in: `<tool_call>{"name": "get_w\u0065ather", "arguments": {}}</tool_call>`,
		want: []string{"S0:call_0:get_weather", "A0:{", "E0:call_0:get_weather:{}|}"}},
	{name: "json unknown tool", in: "ok <tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call> done",
		want: []string{"T:ok", `I0:false:unknown tool:<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>`, "T: done"}},
	{name: "json invalid arguments after streaming", in: `<tool_call>{"name": "get_weather", "arguments": {"city" "x"}}</tool_call>`,
		want: []string{"S0:call_0:get_weather", `A0:{"city" "x"`, `I0:true:malformed tool call:<tool_call>{"name": "get_weather", "arguments": {"city" "x"}}</tool_call>`}},
	{name: "json arguments not an object", in: `<tool_call>{"arguments": [1], "name": "get_weather"}</tool_call>`,
		want: []string{`I0:false:malformed tool call:<tool_call>{"arguments": [1], "name": "get_weather"}</tool_call>`}},
	{name: "xml", in: "<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
		want: []string{"S0:call_0:get_weather", `A0:{"city":"São Paulo","days":3`, `E0:call_0:get_weather:{"city":"São Paulo","days":3}|}`}},
	{name: "xml typed values", in: "<tool_call><function=run_query><parameter=query>SELECT \"a\"\n\tFROM t\n</parameter>" +
		"<parameter=limit>\n10\n</parameter><parameter=ratio>2.5e-1</parameter><parameter=dry>True</parameter>" +
		"<parameter=filters>\n{\"a\": [1, 2],\n \"b\": null}\n</parameter><parameter=cols>[\"x\", \"y\"]</parameter>" +
		"<parameter=maybe>null</parameter><parameter=either>false</parameter><parameter=free>7</parameter>" +
		"<parameter=extra>\n42\n</parameter></function></tool_call>",
		want: []string{"S0:call_0:run_query",
			`A0:{"query":"SELECT \"a\"\n\tFROM t","limit":10,"ratio":2.5e-1,"dry":true,"filters":{"a":[1,2],"b":null},"cols":["x","y"],"maybe":null,"either":false,"free":"7","extra":"42"`,
			`E0:call_0:run_query:{"query":"SELECT \"a\"\n\tFROM t","limit":10,"ratio":2.5e-1,"dry":true,"filters":{"a":[1,2],"b":null},"cols":["x","y"],"maybe":null,"either":false,"free":"7","extra":"42"}|}`}},
	{name: "xml values that do not parse stay strings", in: "<tool_call><function=run_query><parameter=limit>ten</parameter>" +
		"<parameter=dry>yes</parameter><parameter=filters>{oops</parameter><parameter=either>maybe</parameter><parameter=maybe>3.0</parameter></function></tool_call>",
		want: []string{"S0:call_0:run_query", `A0:{"limit":"ten","dry":"yes","filters":"{oops","either":"maybe","maybe":3`,
			`E0:call_0:run_query:{"limit":"ten","dry":"yes","filters":"{oops","either":"maybe","maybe":3}|}`}},
	{name: "xml value holding the closing tags", in: "<tool_call>\n<function=write_file>\n<parameter=path>\na.go\n</parameter>\n<parameter=content>\n" +
		"s := \"</parameter>\" + \"</function></tool_call>\"\n</parameter> x\n\n</parameter>\n</function>\n</tool_call>",
		want: []string{"S0:call_0:write_file",
			`A0:{"path":"a.go","content":"s := \"</parameter>\" + \"</function></tool_call>\"\n</parameter> x\n"`,
			`E0:call_0:write_file:{"path":"a.go","content":"s := \"</parameter>\" + \"</function></tool_call>\"\n</parameter> x\n"}|}`}},
	{name: "xml parallel calls and text between", in: "Two calls:\n<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n</parameter>\n</function>\n</tool_call>\n" +
		"<tool_call>\n<function=no_args>\n</function>\n</tool_call>\nThen text.\n",
		want: []string{"T:Two calls:", "S0:call_0:get_weather", `A0:{"city":"Lyon"`, `E0:call_0:get_weather:{"city":"Lyon"}|}`,
			"S1:call_1:no_args", "E1:call_1:no_args:{}|{}", "T:\nThen text.\n"}},
	{name: "xml two functions in one block, no </tool_call>", in: "<tool_call><function=no_args></function><function=get_weather><parameter=city>A</parameter></function> and more",
		want: []string{"S0:call_0:no_args", "E0:call_0:no_args:{}|{}", "S1:call_1:get_weather", `A1:{"city":"A"`, `E1:call_1:get_weather:{"city":"A"}|}`, "T: and more"}},
	{name: "xml without </function>", in: "<tool_call>\n<function=get_weather>\n<parameter=city>\nRiga\n</parameter>\n</tool_call>\n<tool_call><function=no_args></tool_call>x",
		want: []string{"S0:call_0:get_weather", `A0:{"city":"Riga"`, `E0:call_0:get_weather:{"city":"Riga"}|}`, "S1:call_1:no_args", "E1:call_1:no_args:{}|{}", "T:x"}},
	{name: "xml unknown tool", in: "<tool_call>\n<function=nope>\n</function>\n</tool_call>",
		want: []string{"I0:false:unknown tool:<tool_call>\n<function=nope>\n</function>\n</tool_call>"}},
	{name: "xml duplicate parameter", in: "<tool_call><function=get_weather><parameter=city>A</parameter><parameter=city>B</parameter></function></tool_call>after",
		want: []string{"S0:call_0:get_weather", `A0:{"city":"A"`,
			"I0:true:malformed tool call:<tool_call><function=get_weather><parameter=city>A</parameter><parameter=city>B</parameter></function></tool_call>", "T:after"}},
	{name: "xml stray text between parameters", in: "<tool_call><function=get_weather>hello</function></tool_call>",
		want: []string{"S0:call_0:get_weather", "I0:true:malformed tool call:<tool_call><function=get_weather>hello</function></tool_call>"}},
	{name: "unterminated call", in: "<tool_call>\n<function=write_file>\n<parameter=content>\nabc",
		want: []string{"S0:call_0:write_file", `A0:{"content":"abc`, "I0:true:tool call not terminated before the end of the output:<tool_call>\n<function=write_file>\n<parameter=content>\nabc"}},
	{name: "unterminated before the name", in: "x<tool_call>\n<funct", want: []string{"T:x", "I0:false:tool call not terminated before the end of the output:<tool_call>\n<funct"}},
	{name: "neither format", in: "a <tool_call>hello</tool_call> b", want: []string{"T:a", "I0:false:malformed tool call:<tool_call>hello</tool_call>", "T: b"}},
	{name: "thinking", thinking: true, in: "\nLet me think.\n</think>\n\nAnswer.", want: []string{"R:Let me think.", "T:Answer."}},
	{name: "thinking with repeated <think>", thinking: true, in: "<think>\nHm.\n</think>\n\nOK", want: []string{"R:Hm.", "T:OK"}},
	{name: "leading think in text mode", in: "<think>\nplan\n</think>\n\ndone <think>x</think>", want: []string{"R:plan", "T:done <think>x</think>"}},
	{name: "tool call ends thinking", thinking: true, in: "I need the weather.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nKyiv\n</parameter>\n</function>\n</tool_call>",
		want: []string{"R:I need the weather.", "S0:call_0:get_weather", `A0:{"city":"Kyiv"`, `E0:call_0:get_weather:{"city":"Kyiv"}|}`}},
	{name: "unterminated thinking", thinking: true, in: "still thinking \n", want: []string{"R:still thinking"}},
	{name: "only whitespace after think", thinking: true, in: "r</think>\n\n", want: []string{"R:r"}},
}

func TestParse(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := testOpts(c.thinking)
			if c.noTools {
				opts.Tools = nil
			}
			evs := feed(t, opts, []string{c.in})
			checkInvariants(t, c.in, evs)
			if got := show(evs); strings.Join(got, "\n~~\n") != strings.Join(c.want, "\n~~\n") {
				t.Errorf("events:\n got  %q\n want %q", got, c.want)
			}
		})
	}
}

// TestChunking feeds every example cut at every split point, byte by byte, and in random
// pieces: the merged events must be those of one piece.
func TestChunking(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range cases {
		opts := testOpts(c.thinking)
		if c.noTools {
			opts.Tools = nil
		}
		want := strings.Join(show(feed(t, opts, []string{c.in})), "\n~~\n")
		check := func(how string, pieces []string) {
			t.Helper()
			evs := feed(t, opts, pieces)
			checkInvariants(t, c.in, evs)
			if got := strings.Join(show(evs), "\n~~\n"); got != want {
				t.Fatalf("%s: %s: events differ from one piece:\n got  %q\n want %q", c.name, how, got, want)
			}
		}
		for i := 0; i <= len(c.in); i++ {
			for j := i; j <= len(c.in); j += 11 {
				check(fmt.Sprintf("split at %d and %d", i, j), []string{c.in[:i], c.in[i:j], c.in[j:]})
			}
		}
		bytes := make([]string, len(c.in))
		for i := range len(c.in) {
			bytes[i] = c.in[i : i+1]
		}
		check("byte by byte", bytes)
		for r := 0; r < 50; r++ {
			check(fmt.Sprintf("random %d", r), randomPieces(rng, c.in))
		}
	}
}

func randomPieces(rng *rand.Rand, s string) []string {
	var out []string
	for len(s) > 0 {
		n := 1 + rng.IntN(min(len(s), 12))
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func TestNoPartialTagInText(t *testing.T) {
	// a Feed never returns text that ends inside a tag that may still complete
	p, err := New(testOpts(false))
	if err != nil {
		t.Fatal(err)
	}
	in := "Let me look <tool_call>\n<function=no_args>\n</function>\n</tool_call>"
	var text string
	for i := range len(in) {
		for _, ev := range p.Feed(in[i : i+1]) {
			if ev.Kind == Text {
				text += ev.Text
			}
		}
		if strings.Contains(text, "<") {
			t.Fatalf("after %q the text is %q", in[:i+1], text)
		}
	}
	if text != "Let me look" {
		t.Fatalf("text %q", text)
	}
	// and holds back no more than could begin a tag
	p, _ = New(testOpts(false))
	if got := show(p.Feed("a <b <tool_c")); len(got) != 1 || got[0] != "T:a <b" {
		t.Fatalf("held back too much: %q", got)
	}
}

func TestUTF8Split(t *testing.T) {
	// a rune cut between two pieces is sent whole, in text and in streamed string arguments
	in := "héllo → 東京 <tool_call><function=get_weather><parameter=city>東京 ✓</parameter></function></tool_call>"
	p, err := New(testOpts(false))
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(in) {
		for _, ev := range p.Feed(in[i : i+1]) {
			if (ev.Kind == Text || ev.Kind == CallArgs) && !utf8.ValidString(ev.Text) {
				t.Fatalf("after %d bytes: %v delta %q is not valid UTF-8", i+1, ev.Kind, ev.Text)
			}
		}
	}
}

func TestTooLong(t *testing.T) {
	opts := testOpts(false)
	opts.MaxCallBytes = 64
	in := "<tool_call><function=write_file><parameter=content>" + strings.Repeat("x", 200) + "</parameter></function></tool_call>tail"
	evs := feed(t, opts, []string{in})
	checkInvariants(t, in, evs)
	got := show(evs)
	if len(got) != 4 || !strings.HasPrefix(got[2], "I0:true:tool call too long:") || len(got[2]) > 100 || got[3] != "T:tail" {
		t.Fatalf("events %q", got)
	}
}

func TestNewErrors(t *testing.T) {
	for _, tools := range [][]Tool{
		{{Name: ""}},
		{{Name: "a"}, {Name: "a"}},
		{{Name: "a", Parameters: json.RawMessage(`[1]`)}},
		{{Name: "a", Parameters: json.RawMessage(`{"type": "string"}`)}},
		{{Name: "a", Parameters: json.RawMessage(`{"properties": []}`)}},
		{{Name: "a", Parameters: json.RawMessage(`{`)}},
	} {
		if _, err := New(Options{Tools: tools}); err == nil || !strings.HasPrefix(err.Error(), "toolcall: tools[") {
			t.Errorf("tools %+v: err %v", tools, err)
		}
	}
}

func TestDefaultIDs(t *testing.T) {
	res, err := Parse("<tool_call><function=no_args></function></tool_call><tool_call><function=no_args></function></tool_call>", Options{Tools: testTools})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Calls) != 2 || res.Calls[0].ID == res.Calls[1].ID || len(res.Calls[0].ID) != len("call_")+24 || !strings.HasPrefix(res.Calls[0].ID, "call_") {
		t.Fatalf("calls %+v", res.Calls)
	}
}

func TestParseResult(t *testing.T) {
	res, err := Parse("<think>why</think>Sure. <tool_call>{\"name\": \"nope\"}</tool_call><tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\"}}</tool_call>", testOpts(false))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reasoning != "why" || res.Content != "Sure." || len(res.Calls) != 1 || res.Calls[0].Arguments != `{"city": "Nice"}` ||
		res.Calls[0].ID != "call_0" || len(res.Invalid) != 1 || res.Invalid[0].Text != `<tool_call>{"name": "nope"}</tool_call>` {
		t.Fatalf("%+v", res)
	}
}

func TestClosedParser(t *testing.T) {
	p, _ := New(testOpts(false))
	p.Feed("a ")
	if evs := p.Close(); len(evs) != 1 || evs[0].Text != " " {
		t.Fatalf("close: %v", evs)
	}
	if p.Feed("b") != nil || p.Close() != nil {
		t.Fatal("events after Close")
	}
}

func FuzzParser(f *testing.F) {
	for _, c := range cases {
		f.Add(c.in, uint64(1), c.thinking)
	}
	f.Add("<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"\\\"}}</tool_call>", uint64(7), false)
	f.Add("<tool_call><function=run_query><parameter=filters>{\"a\":\xff}</parameter></function></tool_call>", uint64(3), false)
	f.Fuzz(func(t *testing.T, in string, seed uint64, thinking bool) {
		opts := testOpts(thinking)
		opts.MaxCallBytes = 512
		one := feed(t, opts, []string{in})
		checkInvariants(t, in, one)
		many := feed(t, opts, randomPieces(rand.New(rand.NewPCG(seed, 0)), in))
		checkInvariants(t, in, many)
		if a, b := strings.Join(show(one), "\n~~\n"), strings.Join(show(many), "\n~~\n"); a != b {
			t.Fatalf("chunking changed the events:\n one  %q\n many %q", a, b)
		}
	})
}
