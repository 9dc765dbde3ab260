// Package toolcall parses a Qwen model's output, as it is decoded, into text, reasoning and
// tool calls, for the OpenAI and Anthropic servers (issue 9).
//
// Two tool-call formats are read (lithos-metal.md §7.5, hub-and-go.md §B5):
//
//   - JSON (Qwen2.5, Qwen3): <tool_call>{"name": NAME, "arguments": {...}}</tool_call>; the
//     arguments may also be a JSON-encoded string, and "parameters" is accepted for "arguments".
//   - XML (Qwen3-Coder, Qwen3.5): <tool_call><function=NAME><parameter=KEY>VALUE</parameter>...
//     </function></tool_call>. One leading and one trailing newline of a value are dropped; the
//     value is typed by the tool's JSON schema (a "string" property stays a string; integer,
//     number, boolean, null, object and array values are parsed; an unknown type, or a value
//     that does not parse, stays a string). A "</parameter>" counts as the end of the value
//     only when "<parameter=" or "</function>" follows it (after whitespace), so values may
//     contain the tag itself (source code that mentions it, for example). A </tool_call> where
//     </function> should be ends the call too.
//
// Reasoning is the text inside <think>...</think>: the output starts inside it when the
// prompt's generation header opened it (Options.Thinking), or when the output begins with
// <think>; a <tool_call> inside it ends it (Qwen3.5 models sometimes skip </think>, as
// Ollama's qwen3.5 parser notes).
//
// A Parser is fed the text pieces the generator produces and returns events. Text deltas never
// contain a partial tag: only a suffix that could still begin a tag is held back, plus trailing
// whitespace, which is dropped when a tool call follows, and an incomplete UTF-8 sequence.
// Malformed tool calls become Invalid events carrying their raw text; nothing the model writes
// makes the parser panic, and its memory is bounded by Options.MaxCallBytes per call.
//
// The package imports the standard library and lithos/runtime/chat (for the template values of
// the inverse helpers in template.go).
package toolcall

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Kind is the kind of an Event.
type Kind uint8

// Event kinds.
const (
	// Text is a delta of the visible content.
	Text Kind = iota + 1
	// Reasoning is a delta of the text inside <think>...</think>.
	Reasoning
	// CallStart opens tool call Index with its ID and Name.
	CallStart
	// CallArgs is a fragment of call Index's arguments JSON. The fragments never include the
	// final '}' (some SDKs act on the first complete JSON object they see).
	CallArgs
	// CallEnd closes call Index: Arguments is the complete JSON object, Text the part of it
	// that the CallArgs fragments have not sent (at least the final '}').
	CallEnd
	// Invalid is a malformed <tool_call> block: Text is its raw text (up to MaxCallBytes),
	// Err says what is wrong. Started reports whether a CallStart for Index was sent before
	// the error was found; when it was not, Text may be shown as content.
	Invalid
)

var kindNames = [...]string{Text: "text", Reasoning: "reasoning", CallStart: "call_start", CallArgs: "call_args", CallEnd: "call_end", Invalid: "invalid"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Event is one piece of parsed output; which fields are set depends on Kind.
type Event struct {
	Kind Kind
	// Text: the delta (Text, Reasoning, CallArgs), the unsent rest of the arguments
	// (CallEnd), or the raw block (Invalid).
	Text string
	// Index numbers the tool calls of one output from 0 (call events and Invalid).
	Index int
	// ID and Name of the call (CallStart, CallEnd; Invalid when the name was read).
	ID, Name string
	// Arguments is the complete arguments JSON object (CallEnd).
	Arguments string
	// Started reports that a CallStart for Index was sent (Invalid).
	Started bool
	// Err says why a block is malformed (Invalid).
	Err error
}

// Errors in Invalid events (wrapped with details; test with errors.Is).
var (
	// ErrUnterminated: the output ended inside a tool call (the output budget ran out).
	ErrUnterminated = errors.New("tool call not terminated before the end of the output")
	// ErrUnknownTool: the call names a function that is not among the tools.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrSyntax: the block is neither of the two formats.
	ErrSyntax = errors.New("malformed tool call")
	// ErrTooLong: the block exceeds Options.MaxCallBytes.
	ErrTooLong = errors.New("tool call too long")
)

// DefaultMaxCallBytes bounds one tool-call block when Options.MaxCallBytes is 0 (bytes).
const DefaultMaxCallBytes = 4 << 20

// Options configure a Parser.
type Options struct {
	// Tools are the functions the model may call. Without tools, tool-call tags are text.
	Tools []Tool
	// Thinking: the output starts inside a <think> block (the rendered prompt ended with the
	// template's "<think>\n" generation header).
	Thinking bool
	// NewID makes the ID of call index (default: "call_" + 24 random hex digits).
	NewID func(index int) string
	// MaxCallBytes bounds the raw bytes of one <tool_call> block (0: DefaultMaxCallBytes).
	// A longer block becomes an Invalid event with ErrTooLong.
	MaxCallBytes int
}

// Call is a complete tool call.
type Call struct {
	ID, Name string
	// Arguments is a JSON object.
	Arguments string
}

// Result is a whole output parsed at once (Parse).
type Result struct {
	// Content is the concatenated Text deltas; Reasoning the concatenated Reasoning deltas.
	Content, Reasoning string
	// Calls are the complete tool calls, in order.
	Calls []Call
	// Invalid are the malformed blocks (their raw text is not in Content).
	Invalid []Event
}

// Parse parses a complete output: New, one Feed and Close. Errors come from New only.
func Parse(text string, opts Options) (*Result, error) {
	p, err := New(opts)
	if err != nil {
		return nil, err
	}
	res := &Result{}
	var content, reasoning []byte
	for _, ev := range append(p.Feed(text), p.Close()...) {
		switch ev.Kind {
		case Text:
			content = append(content, ev.Text...)
		case Reasoning:
			reasoning = append(reasoning, ev.Text...)
		case CallEnd:
			res.Calls = append(res.Calls, Call{ID: ev.ID, Name: ev.Name, Arguments: ev.Arguments})
		case Invalid:
			res.Invalid = append(res.Invalid, ev)
		}
	}
	res.Content, res.Reasoning = string(content), string(reasoning)
	return res, nil
}

type state uint8

const (
	sText       state = iota
	sThink            // inside <think>
	sCallOpen         // after <tool_call>: whitespace, then '{' or "<function="
	sFuncName         // after "<function=", up to '>'
	sParams           // between parameters: "<parameter=" or "</function>"
	sParamName        // after "<parameter=", up to '>'
	sValue            // a parameter value, up to a "</parameter>" candidate
	sValueClose       // after a "</parameter>" candidate: is "<parameter=" or "</function>" next?
	sJSON             // inside the JSON object of a JSON-form call
	sCallClose        // after a call: whitespace, then "</tool_call>", "<function=", or text again
	sSkip             // inside a malformed block, up to "</tool_call>"
	sClosed
)

// Tags.
const (
	tagCall      = "<tool_call>"
	tagCallEnd   = "</tool_call>"
	tagThink     = "<think>"
	tagThinkEnd  = "</think>"
	tagFunc      = "<function="
	tagFuncEnd   = "</function>"
	tagParam     = "<parameter="
	tagParamEnd  = "</parameter>"
	maxNameBytes = 256
	maxJSONDepth = 512
)

// Parser is a streaming parser of one model output. It is not safe for concurrent use.
type Parser struct {
	opts  Options
	tools map[string]*toolInfo
	max   int

	st      state
	pend    []byte // text/think: a suffix that may begin a tag
	ws      []byte // text/think: trailing whitespace held back
	content bool   // some non-whitespace text or reasoning was sent, or a call
	dropWS  bool   // the held whitespace is leading whitespace to drop (after </think>)
	afterWS bool   // the held whitespace follows a block: drop it at the end of the output

	// the current <tool_call> block
	raw    []byte // its raw bytes, up to max
	look   []byte // bytes read ahead in sCallOpen, sParams, sValueClose, sCallClose
	lit    []byte // the non-whitespace part of look
	skipM  int    // sSkip: bytes of "</tool_call>" matched
	err    error  // sSkip: why
	index  int    // index of the next call
	cur    *call
	name   []byte // sFuncName, sParamName
	vhold  []byte // sValue: a suffix that may begin "\n</parameter>"
	vfirst bool   // sValue: no byte of the value read yet (one leading newline is dropped)
	js     *jsonCall

	// pending delta
	dk   Kind
	di   int
	dbuf []byte
	out  []Event
}

// call is a tool call being read.
type call struct {
	id, name string
	info     *toolInfo
	started  bool
	args     []byte // the arguments JSON written so far
	sent     int    // bytes of args sent as CallArgs
	keys     map[string]bool
	key      string
	types    []string
	stream   bool   // the value is a string streamed as it arrives
	val      []byte // the value read so far (not yet escaped when stream)
}

// New returns a Parser. It fails when a tool has no name, a name repeats, or a tool's
// parameters are not a JSON schema object.
func New(opts Options) (*Parser, error) {
	p := &Parser{opts: opts, tools: map[string]*toolInfo{}, max: opts.MaxCallBytes}
	if p.max <= 0 {
		p.max = DefaultMaxCallBytes
	}
	for i, t := range opts.Tools {
		info, err := newToolInfo(t)
		if err != nil {
			return nil, fmt.Errorf("toolcall: tools[%d]: %w", i, err)
		}
		if p.tools[t.Name] != nil {
			return nil, fmt.Errorf("toolcall: tools[%d]: duplicate tool name %q", i, t.Name)
		}
		p.tools[t.Name] = info
	}
	if opts.Thinking {
		p.st, p.dropWS = sThink, true
	}
	return p, nil
}

// Feed parses the next piece of output and returns the events it completes. The returned
// slice is the caller's.
func (p *Parser) Feed(s string) []Event {
	if p.st == sClosed {
		return nil
	}
	for i := 0; i < len(s); i++ {
		p.step(s[i])
	}
	p.flush(true)
	out := p.out
	p.out = nil
	return out
}

// Close ends the output and returns the last events: held-back text, and an Invalid event for
// a tool call the output ended in. Feed and Close do nothing after Close.
func (p *Parser) Close() []Event {
	switch p.st {
	case sClosed:
		return nil
	case sText, sThink:
		kind := Text
		if p.st == sThink {
			kind = Reasoning
		}
		if len(p.pend) > 0 { // a partial tag is text after all
			pend := p.pend
			p.pend = nil
			for _, b := range pend {
				p.contentByte(kind, b)
			}
		}
		if kind == Text && !p.dropWS && !p.afterWS {
			p.delta(Text, 0, p.ws)
		}
	case sCallClose:
		// a partial "</tool_call>" or whitespace after a complete call: markup, dropped
	case sSkip:
		p.invalid(p.err)
	default:
		p.invalid(ErrUnterminated)
	}
	p.flush(false)
	p.st = sClosed
	out := p.out
	p.out = nil
	return out
}

// step consumes one byte.
func (p *Parser) step(b byte) {
	switch p.st {
	case sText, sThink:
		p.textByte(b)
		return
	}
	if len(p.raw) < p.max {
		p.raw = append(p.raw, b)
	} else if p.st != sSkip {
		p.fail(fmt.Errorf("%w: more than %d bytes", ErrTooLong, p.max))
		p.skipByte(b)
		return
	}
	p.dispatch(b)
}

// dispatch consumes one byte of a tool-call block that is already in raw.
func (p *Parser) dispatch(b byte) {
	switch p.st {
	case sText, sThink:
		p.textByte(b)
	case sCallOpen:
		switch i, ok := p.lookStep(b, "{", tagFunc); {
		case !ok:
			p.fail(fmt.Errorf("%w: %q after <tool_call> is neither JSON nor <function=", ErrSyntax, p.lit))
		case i == 0:
			p.js = &jsonCall{buf: []byte{'{'}, depth: 1}
			p.st = sJSON
		case i == 1:
			p.name, p.st = p.name[:0], sFuncName
		}
	case sFuncName, sParamName:
		p.nameByte(b)
	case sParams:
		switch i, ok := p.lookStep(b, tagParam, tagFuncEnd, tagCallEnd); {
		case !ok:
			p.fail(fmt.Errorf("%w: %q where <parameter= or </function> should be", ErrSyntax, p.lit))
		case i == 0:
			p.name, p.st = p.name[:0], sParamName
		case i == 1:
			p.endCall()
		case i == 2: // </function> left out
			p.endCall()
			p.endBlock()
		}
	case sValue:
		p.valueByte(b)
	case sValueClose:
		switch i, ok := p.lookStep(b, tagParam, tagFuncEnd, tagCallEnd); {
		case !ok: // that "</parameter>" was part of the value
			p.cur.val = p.valueBytes(p.cur.val, p.vhold)
			p.vhold = p.vhold[:0]
			look := append([]byte(nil), p.look...)
			p.look, p.lit = p.look[:0], p.lit[:0]
			p.st = sValue
			for _, c := range look {
				p.dispatch(c)
			}
		case i == 0:
			p.endParam()
			p.name, p.st = p.name[:0], sParamName
		case i == 1:
			p.endParam()
			p.endCall()
		case i == 2: // </function> left out
			p.endParam()
			p.endCall()
			p.endBlock()
		}
	case sJSON:
		p.jsonByte(b)
	case sCallClose:
		switch i, ok := p.lookStep(b, tagCallEnd, tagFunc); {
		case !ok: // text again, without </tool_call>
			look := append([]byte(nil), p.look...)
			p.look, p.lit, p.raw = p.look[:0], p.lit[:0], p.raw[:0]
			p.st = sText
			for _, c := range look {
				p.step(c)
			}
		case i == 0:
			p.endBlock()
		case i == 1: // another call in the same block
			p.raw = append(p.raw[:0], tagCall+tagFunc...)
			p.name, p.st = p.name[:0], sFuncName
		}
	case sSkip:
		p.skipByte(b)
	}
}

// lookStep reads b after optional whitespace and reports which alternative the non-space
// bytes read complete (i, ok), -1 while they are still a prefix of one (ok), or !ok when
// they cannot begin any. On a complete match or a failure, look and lit are reset.
func (p *Parser) lookStep(b byte, alts ...string) (int, bool) {
	p.look = append(p.look, b)
	if len(p.lit) == 0 && isSpace(b) {
		return -1, true
	}
	p.lit = append(p.lit, b)
	prefix := false
	for i, a := range alts {
		if string(p.lit) == a {
			p.look, p.lit = p.look[:0], p.lit[:0]
			return i, true
		}
		if len(p.lit) < len(a) && a[:len(p.lit)] == string(p.lit) {
			prefix = true
		}
	}
	if !prefix {
		return -1, false
	}
	return -1, true
}

// --- text and reasoning ---

// textByte reads one byte of text or reasoning, matching tags.
func (p *Parser) textByte(b byte) {
	p.pend = append(p.pend, b)
	for len(p.pend) > 0 {
		tag, full, prefix := p.matchTag(p.pend)
		if full {
			p.pend = p.pend[:0]
			p.onTag(tag)
			return
		}
		if prefix {
			return
		}
		kind := Text
		if p.st == sThink {
			kind = Reasoning
		}
		c := p.pend[0]
		p.pend = append(p.pend[:0], p.pend[1:]...)
		p.contentByte(kind, c)
	}
}

// matchTag reports whether s is a whole active tag (which) or a proper prefix of one.
func (p *Parser) matchTag(s []byte) (tag string, full, prefix bool) {
	var tags [3]string
	n := 0
	if p.st == sThink {
		tags[n] = tagThinkEnd
		n++
	}
	if len(p.tools) > 0 {
		tags[n] = tagCall
		n++
	}
	if !p.content { // in sThink: a <think> the model repeats after the template's
		tags[n] = tagThink
		n++
	}
	for _, t := range tags[:n] {
		if string(s) == t {
			return t, true, false
		}
		if len(s) < len(t) && t[:len(s)] == string(s) {
			prefix = true
		}
	}
	return "", false, prefix
}

func (p *Parser) onTag(tag string) {
	switch tag {
	case tagThink:
		p.ws, p.st, p.dropWS = p.ws[:0], sThink, true
	case tagThinkEnd:
		p.ws, p.st, p.dropWS, p.afterWS, p.content = p.ws[:0], sText, true, true, true
	case tagCall:
		p.ws, p.content, p.dropWS = p.ws[:0], true, false
		p.raw = append(p.raw[:0], tagCall...)
		p.look, p.lit = p.look[:0], p.lit[:0]
		p.st = sCallOpen
	}
}

// contentByte adds one byte of text or reasoning, holding trailing whitespace back.
func (p *Parser) contentByte(kind Kind, b byte) {
	if isSpace(b) {
		p.ws = append(p.ws, b)
		return
	}
	if !p.dropWS {
		p.delta(kind, 0, p.ws)
	}
	p.ws = p.ws[:0]
	p.dropWS, p.afterWS = false, false
	p.content = true
	p.delta(kind, 0, []byte{b})
}

func isSpace(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

// --- XML form ---

// nameByte reads a function or parameter name up to '>'.
func (p *Parser) nameByte(b byte) {
	if b != '>' {
		if b == '<' || b == '\n' || len(p.name) >= maxNameBytes {
			p.fail(fmt.Errorf("%w: bad name %q", ErrSyntax, p.name))
			return
		}
		p.name = append(p.name, b)
		return
	}
	name := string(trimSpace(p.name))
	if p.st == sFuncName {
		info := p.tools[name]
		if info == nil {
			p.fail(fmt.Errorf("%w %q", ErrUnknownTool, name))
			return
		}
		p.startCall(name, info)
		p.st = sParams
		return
	}
	c := p.cur
	if c.keys[name] {
		p.fail(fmt.Errorf("%w: parameter %q given twice", ErrSyntax, name))
		return
	}
	c.keys[name] = true
	c.key, c.types = name, c.info.types[name]
	c.stream = streamable(c.types)
	c.val = c.val[:0]
	if c.stream {
		p.args(p.keyPrefix(name) + `"`)
	}
	p.vhold, p.vfirst = p.vhold[:0], true
	p.st = sValue
}

// keyPrefix is what goes before a value in the arguments object.
func (p *Parser) keyPrefix(key string) string {
	sep := ","
	if len(p.cur.args) == 0 {
		sep = "{"
	}
	return sep + quote(key) + ":"
}

// valueByte reads one byte of a parameter value, holding back a suffix that may begin
// "\n</parameter>" (the newline before the tag is not part of the value).
func (p *Parser) valueByte(b byte) {
	if p.vfirst {
		p.vfirst = false
		if b == '\n' {
			return
		}
	}
	p.vhold = append(p.vhold, b)
	for _, t := range []string{"\n" + tagParamEnd, tagParamEnd} {
		if string(p.vhold[max(0, len(p.vhold)-len(t)):]) == t {
			// a candidate end: the value is what precedes it; look at what follows
			p.cur.val = p.valueBytes(p.cur.val, p.vhold[:len(p.vhold)-len(t)])
			p.vhold = append(p.vhold[:0], t...)
			p.look, p.lit = p.look[:0], p.lit[:0]
			p.st = sValueClose
			return
		}
	}
	keep := 0 // the longest suffix of vhold that begins "\n</parameter>" or "</parameter>"
	for n := min(len(p.vhold), len(tagParamEnd)); n > 0; n-- {
		s := string(p.vhold[len(p.vhold)-n:])
		if s == ("\n" + tagParamEnd)[:n] || s == tagParamEnd[:n] {
			keep = n
			break
		}
	}
	p.cur.val = p.valueBytes(p.cur.val, p.vhold[:len(p.vhold)-keep])
	p.vhold = append(p.vhold[:0], p.vhold[len(p.vhold)-keep:]...)
}

// valueBytes appends b to the value; a streamed value sends its complete runes as CallArgs.
func (p *Parser) valueBytes(val, b []byte) []byte {
	val = append(val, b...)
	if !p.cur.stream || len(val) == 0 {
		return val
	}
	cut := len(val) - partialRune(val)
	if cut > 0 {
		p.args(string(appendEscaped(nil, val[:cut])))
		val = append(val[:0], val[cut:]...)
	}
	return val
}

// endParam finishes the current parameter (its "</parameter>" is confirmed).
func (p *Parser) endParam() {
	c := p.cur
	p.vhold = p.vhold[:0]
	if c.stream {
		p.args(string(appendEscaped(nil, c.val)) + `"`)
	} else {
		p.args(p.keyPrefix(c.key) + typedValue(string(c.val), c.types))
	}
	c.val = c.val[:0]
}

// --- calls ---

func (p *Parser) startCall(name string, info *toolInfo) {
	id := ""
	if p.opts.NewID != nil {
		id = p.opts.NewID(p.index)
	} else {
		var r [12]byte
		_, _ = rand.Read(r[:])
		id = "call_" + hex.EncodeToString(r[:])
	}
	p.cur = &call{id: id, name: name, info: info, started: true, keys: map[string]bool{}}
	p.event(Event{Kind: CallStart, Index: p.index, ID: id, Name: name})
}

// args appends s to the current call's arguments and sends it as a CallArgs delta.
func (p *Parser) args(s string) {
	c := p.cur
	c.args = append(c.args, s...)
	p.delta(CallArgs, p.index, []byte(s))
	c.sent = len(c.args)
}

// endCall closes the current XML-form call.
func (p *Parser) endCall() {
	c := p.cur
	rest := "}"
	if len(c.args) == 0 {
		rest = "{}"
	}
	p.finishCall(string(c.args)+rest, rest)
}

func (p *Parser) finishCall(args, rest string) {
	c := p.cur
	p.event(Event{Kind: CallEnd, Index: p.index, ID: c.id, Name: c.name, Arguments: args, Text: rest})
	p.index++
	p.cur, p.js = nil, nil
	p.look, p.lit = p.look[:0], p.lit[:0]
	p.st = sCallClose
	p.afterWS = true
}

// endBlock: "</tool_call>" was read; text follows.
func (p *Parser) endBlock() {
	p.raw = p.raw[:0]
	p.st = sText
}

// fail marks the current block malformed: it is skipped up to "</tool_call>" and reported
// as one Invalid event.
func (p *Parser) fail(err error) {
	p.err = err
	p.st = sSkip
	p.skipM = 0
	// the bytes already read may hold the start of "</tool_call>" (or all of it)
	for n := min(len(p.raw), len(tagCallEnd)); n > 0; n-- {
		if string(p.raw[len(p.raw)-n:]) == tagCallEnd[:n] {
			p.skipM = n
			break
		}
	}
	if p.skipM == len(tagCallEnd) {
		p.endSkip()
	}
}

func (p *Parser) skipByte(b byte) {
	switch {
	case b == tagCallEnd[p.skipM]:
		p.skipM++
	case b == tagCallEnd[0]:
		p.skipM = 1
	default:
		p.skipM = 0
	}
	if p.skipM == len(tagCallEnd) {
		p.endSkip()
	}
}

func (p *Parser) endSkip() {
	p.invalid(p.err)
	p.raw = p.raw[:0]
	p.st = sText
	p.afterWS = true
}

// invalid reports the current block as malformed.
func (p *Parser) invalid(err error) {
	ev := Event{Kind: Invalid, Index: p.index, Text: string(p.raw), Err: err}
	if c := p.cur; c != nil {
		ev.Name, ev.ID, ev.Started = c.name, c.id, c.started
		p.index++
	}
	p.event(ev)
	p.cur, p.js = nil, nil
	p.look, p.lit = p.look[:0], p.lit[:0]
}

// --- events ---

// delta appends b to the pending delta of (kind, index).
func (p *Parser) delta(kind Kind, index int, b []byte) {
	if len(b) == 0 {
		return
	}
	if p.dk != kind || p.di != index {
		p.flush(false)
		p.dk, p.di = kind, index
	}
	p.dbuf = append(p.dbuf, b...)
}

// event sends a non-delta event after the pending delta.
func (p *Parser) event(ev Event) {
	p.flush(false)
	p.out = append(p.out, ev)
}

// flush sends the pending delta; with keepRune, an incomplete UTF-8 sequence at its end stays.
func (p *Parser) flush(keepRune bool) {
	if len(p.dbuf) == 0 {
		return
	}
	cut := len(p.dbuf)
	if keepRune {
		cut -= partialRune(p.dbuf)
	}
	if cut > 0 {
		p.out = append(p.out, Event{Kind: p.dk, Index: p.di, Text: string(p.dbuf[:cut])})
	}
	p.dbuf = append(p.dbuf[:0], p.dbuf[cut:]...)
}

// partialRune is the length of an incomplete UTF-8 sequence at the end of b (0 if none).
func partialRune(b []byte) int {
	for n := 1; n <= utf8.UTFMax-1 && n <= len(b); n++ {
		c := b[len(b)-n]
		if c < 0x80 {
			return 0
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-n:]) {
				return 0
			}
			return n
		}
	}
	return 0
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// appendEscaped appends s JSON-escaped (without quotes) as Python's json.dumps with
// ensure_ascii=False does: '"', '\\' and control characters escaped, everything else raw;
// invalid UTF-8 becomes U+FFFD.
func appendEscaped(dst, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		switch {
		case r == utf8.RuneError && n <= 1:
			dst = append(dst, `\ufffd`...)
		case r == '"':
			dst = append(dst, `\"`...)
		case r == '\\':
			dst = append(dst, `\\`...)
		case r == '\n':
			dst = append(dst, `\n`...)
		case r == '\r':
			dst = append(dst, `\r`...)
		case r == '\t':
			dst = append(dst, `\t`...)
		case r == '\b':
			dst = append(dst, `\b`...)
		case r == '\f':
			dst = append(dst, `\f`...)
		case r < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&15])
		default:
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst
}
