package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// jsonCall reads the JSON form {"name": NAME, "arguments": {...}}. When the object starts
// with exactly that header (any whitespace), the call starts as soon as the arguments' '{' is
// read and the arguments' bytes stream as they arrive; otherwise the object is read whole and
// then checked.
type jsonCall struct {
	buf        []byte // the object's raw bytes from its '{'
	depth      int
	inStr, esc bool

	hstep  int    // header grammar step (see headerByte); -1: not the header, done
	hstr   []byte // a string of the header being read
	hesc   bool   // the last byte of hstr is an escaping backslash
	hname  string // the name read in the header
	argBeg int    // buf offset of the arguments' '{' when they stream (else 0)
	argEnd int    // buf offset just past the arguments' '}' when they have streamed
}

// jsonByte reads one byte of the object.
func (p *Parser) jsonByte(b byte) {
	j := p.js
	j.buf = append(j.buf, b)
	closing := false
	switch {
	case j.inStr:
		switch {
		case j.esc:
			j.esc = false
		case b == '\\':
			j.esc = true
		case b == '"':
			j.inStr = false
		}
	case b == '"':
		j.inStr = true
	case b == '{' || b == '[':
		if j.depth++; j.depth > maxJSONDepth {
			p.fail(fmt.Errorf("%w: JSON nested deeper than %d", ErrSyntax, maxJSONDepth))
			return
		}
	case b == '}' || b == ']':
		j.depth--
		closing = true
	}
	if j.hstep >= 0 {
		if !p.headerByte(b) {
			return
		}
	} else if j.argBeg > 0 && j.argEnd == 0 {
		if closing && j.depth == 1 {
			j.argEnd = len(j.buf) // the arguments' last '}' is held back until CallEnd
		} else {
			p.args(string([]byte{b}))
		}
	}
	if j.depth == 0 {
		p.endJSON()
	}
}

// headerByte advances the header grammar
//
//	ws "name" ws : ws STRING ws , ws ("arguments"|"parameters") ws : ws {
//
// and returns false when the byte made the call fail.
func (p *Parser) headerByte(b byte) bool {
	j := p.js
	str := func(next int) { // reading a string; its '"' already read
		switch {
		case len(j.hstr) > maxNameBytes:
			j.hstep = -1
		case j.hesc:
			j.hesc = false
		case b == '\\':
			j.hesc = true
		case b == '"':
			j.hstep = next
			return
		}
		j.hstr = append(j.hstr, b)
	}
	expect := func(c byte, next int) {
		switch {
		case isSpace(b):
		case b == c:
			j.hstep = next
			j.hstr = j.hstr[:0]
		default:
			j.hstep = -1 // not the header: read the whole object
		}
	}
	switch j.hstep {
	case 0:
		expect('"', 1)
	case 1:
		if str(2); j.hstep == 2 && j.key() != "name" {
			j.hstep = -1
		}
	case 2:
		expect(':', 3)
	case 3:
		expect('"', 4)
	case 4:
		if str(5); j.hstep == 5 {
			j.hname = j.key()
		}
	case 5:
		expect(',', 6)
	case 6:
		expect('"', 7)
	case 7:
		if str(8); j.hstep == 8 {
			if k := j.key(); k != "arguments" && k != "parameters" {
				j.hstep = -1
			}
		}
	case 8:
		expect(':', 9)
	case 9:
		if expect('{', 10); j.hstep == 10 {
			j.hstep = -1
			info := p.tools[j.hname]
			if info == nil {
				p.fail(fmt.Errorf("%w %q", ErrUnknownTool, j.hname))
				return false
			}
			p.startCall(j.hname, info)
			j.argBeg = len(j.buf) - 1
			p.args("{")
		}
	}
	return true
}

// key decodes the header string just read.
func (j *jsonCall) key() string {
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, j.hstr...), '"'), &s) != nil {
		return "\x00" // matches no key and no tool
	}
	return s
}

// endJSON checks the complete object and ends the call.
func (p *Parser) endJSON() {
	j := p.js
	var obj struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal(j.buf, &obj); err != nil {
		p.fail(fmt.Errorf("%w: %v", ErrSyntax, err))
		return
	}
	if obj.Name == nil {
		p.fail(fmt.Errorf("%w: no \"name\"", ErrSyntax))
		return
	}
	if p.cur != nil { // the arguments streamed
		if j.argEnd == 0 || *obj.Name != p.cur.name {
			p.fail(fmt.Errorf("%w: the object does not end after its arguments", ErrSyntax))
			return
		}
		args := j.buf[j.argBeg:j.argEnd]
		if !json.Valid(args) {
			p.fail(fmt.Errorf("%w: the arguments are not valid JSON", ErrSyntax))
			return
		}
		p.finishCall(string(args), "}")
		return
	}
	info := p.tools[*obj.Name]
	if info == nil {
		p.fail(fmt.Errorf("%w %q", ErrUnknownTool, *obj.Name))
		return
	}
	raw := obj.Arguments
	if raw == nil {
		raw = obj.Parameters
	}
	args, err := argumentsObject(raw)
	if err != nil {
		p.fail(err)
		return
	}
	p.startCall(*obj.Name, info)
	p.finishCall(args, args)
}

// argumentsObject is the compact JSON object of a JSON-form call's arguments: an object, a
// JSON string holding one, or absent/null (no arguments).
func argumentsObject(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%w: arguments: %v", ErrSyntax, err)
		}
		raw = bytes.TrimSpace([]byte(s))
		if len(raw) == 0 {
			return "{}", nil
		}
	}
	if raw[0] != '{' {
		return "", fmt.Errorf("%w: arguments must be a JSON object", ErrSyntax)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", fmt.Errorf("%w: arguments: %v", ErrSyntax, err)
	}
	return buf.String(), nil
}
