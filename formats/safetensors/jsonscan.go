package safetensors

import (
	"fmt"
	"strings"
	"unicode/utf16"
)

// parser is a strict reader for the JSON subset of a safetensors header
// (RFC 8259 syntax; the only values read are objects, arrays of unsigned
// integers and strings). It exists instead of encoding/json because the
// format needs what encoding/json does not give: duplicate keys detected,
// lone surrogate escapes rejected (encoding/json turns them into U+FFFD,
// serde_json rejects them), integers kept exact up to 2^64−1, and errors
// naming the tensor. It never recurses beyond the fixed header schema, so
// hostile nesting cannot exhaust the stack. Input must be valid UTF-8.
type parser struct {
	b   []byte
	i   int
	src string // what b is, for messages: "" means the header
}

// where describes the current position for error messages.
func (p *parser) where() string {
	src := p.src
	if src == "" {
		src = "header"
	}
	return fmt.Sprintf("%s offset %d", src, p.i)
}

// rawTensor is one header entry as written, before validation.
type rawTensor struct {
	name       string
	dtype      string
	shape      []uint64
	begin, end uint64
}

const metadataKey = "__metadata__"

func (p *parser) syntaxErr(format string, args ...any) *FormatError {
	return fileErr(RuleJSON, "%s at %s", fmt.Sprintf(format, args...), p.where())
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next byte, or 0 at the end of input.
func (p *parser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *parser) expect(c byte, what string) *FormatError {
	if p.peek() != c {
		return p.syntaxErr("expected %q %s, found %s", c, what, p.found())
	}
	p.i++
	return nil
}

// found describes the next byte for error messages.
func (p *parser) found() string {
	if p.i >= len(p.b) {
		return "end of header"
	}
	return fmt.Sprintf("%q", p.b[p.i])
}

// kind names the JSON value starting at the next byte.
func (p *parser) kind() string {
	switch c := p.peek(); {
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	default:
		return p.found()
	}
}

// literal consumes the keyword lit ("null") if it is next.
func (p *parser) literal(lit string) bool {
	if strings.HasPrefix(string(p.b[p.i:min(len(p.b), p.i+len(lit))]), lit) {
		p.i += len(lit)
		return true
	}
	return false
}

// header parses the whole header: one object, JSON whitespace around it.
func (p *parser) header() ([]rawTensor, map[string]string, error) {
	p.ws()
	if p.peek() != '{' {
		return nil, nil, p.syntaxErr("header must be a JSON object, found %s", p.kind())
	}
	p.i++
	var (
		tensors  []rawTensor
		meta     map[string]string
		seenMeta bool
		seen     = map[string]struct{}{}
	)
	p.ws()
	if p.peek() == '}' {
		p.i++
	} else {
		for {
			p.ws()
			if p.peek() != '"' {
				return nil, nil, p.syntaxErr("expected a string key, found %s", p.found())
			}
			key, err := p.str()
			if err != nil {
				return nil, nil, err
			}
			p.ws()
			if err := p.expect(':', "after key"); err != nil {
				return nil, nil, err
			}
			p.ws()
			if key == metadataKey {
				if seenMeta {
					return nil, nil, tensorErr(key, RuleDuplicate, "key %q appears twice in the header", key)
				}
				seenMeta = true
				meta, err = p.stringMap(metadataKey, RuleMetadata, true, false)
				if err != nil {
					return nil, nil, err
				}
			} else {
				if _, dup := seen[key]; dup {
					return nil, nil, tensorErr(key, RuleDuplicate, "tensor appears twice in the header")
				}
				seen[key] = struct{}{}
				t, err := p.tensor(key)
				if err != nil {
					return nil, nil, err
				}
				tensors = append(tensors, t)
			}
			p.ws()
			if p.peek() == ',' {
				p.i++
				continue
			}
			if err := p.expect('}', "or ',' after a header entry"); err != nil {
				return nil, nil, err
			}
			break
		}
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, nil, p.syntaxErr("trailing bytes after the header object (only JSON whitespace may pad it), found %s", p.found())
	}
	return tensors, meta, nil
}

// stringMap parses an object of string values (the __metadata__ map, an
// index weight_map). owner names it in errors; null is accepted as a nil
// map when allowNull. A repeated key is a RuleDuplicate error, a non-string
// value a `rule` error; both name the key, as FormatError.Tensor when
// keysAreTensors (a weight_map), else in the detail with Tensor = owner.
func (p *parser) stringMap(owner string, rule Rule, allowNull, keysAreTensors bool) (map[string]string, error) {
	keyErr := func(k string, rule Rule, format string, args ...any) error {
		if keysAreTensors {
			return tensorErr(k, rule, "in %s: %s", owner, fmt.Sprintf(format, args...))
		}
		return tensorErr(owner, rule, "key %q: %s", k, fmt.Sprintf(format, args...))
	}
	if allowNull && p.literal("null") {
		return nil, nil
	}
	if p.peek() != '{' {
		return nil, tensorErr(owner, rule, "must be an object of strings, found %s at %s", p.kind(), p.where())
	}
	p.i++
	m := map[string]string{}
	p.ws()
	if p.peek() == '}' {
		p.i++
		return m, nil
	}
	for {
		p.ws()
		if p.peek() != '"' {
			return nil, p.syntaxErr("expected a string key in %s, found %s", owner, p.found())
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.ws()
		if err := p.expect(':', "after key"); err != nil {
			return nil, err
		}
		p.ws()
		if p.peek() != '"' {
			return nil, keyErr(k, rule, "value must be a string, found %s at %s", p.kind(), p.where())
		}
		v, err := p.str()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, keyErr(k, RuleDuplicate, "key appears twice")
		}
		m[k] = v
		p.ws()
		if p.peek() == ',' {
			p.i++
			continue
		}
		if err := p.expect('}', "or ',' in "+owner); err != nil {
			return nil, err
		}
		return m, nil
	}
}

// tensor parses one tensor entry {"dtype": s, "shape": [u...], "data_offsets": [u, u]}.
func (p *parser) tensor(name string) (rawTensor, error) {
	t := rawTensor{name: name}
	if p.peek() != '{' {
		return t, tensorErr(name, RuleField, "entry must be an object with dtype, shape, data_offsets; found %s", p.kind())
	}
	p.i++
	var hasDType, hasShape, hasOffsets bool
	p.ws()
	if p.peek() == '}' {
		p.i++
		return t, tensorErr(name, RuleField, "entry has no dtype, shape or data_offsets")
	}
	for {
		p.ws()
		if p.peek() != '"' {
			return t, p.syntaxErr("expected a field name in tensor %q, found %s", name, p.found())
		}
		field, err := p.str()
		if err != nil {
			return t, err
		}
		p.ws()
		if err := p.expect(':', "after field name"); err != nil {
			return t, err
		}
		p.ws()
		switch field {
		case "dtype":
			if hasDType {
				return t, tensorErr(name, RuleField, "field dtype appears twice")
			}
			hasDType = true
			if p.peek() != '"' {
				return t, tensorErr(name, RuleDType, "dtype must be a string, found %s", p.kind())
			}
			if t.dtype, err = p.str(); err != nil {
				return t, err
			}
		case "shape":
			if hasShape {
				return t, tensorErr(name, RuleField, "field shape appears twice")
			}
			hasShape = true
			if t.shape, err = p.uints(name, RuleShape, "shape", -1); err != nil {
				return t, err
			}
		case "data_offsets":
			if hasOffsets {
				return t, tensorErr(name, RuleField, "field data_offsets appears twice")
			}
			hasOffsets = true
			off, err := p.uints(name, RuleOffsets, "data_offsets", 2)
			if err != nil {
				return t, err
			}
			t.begin, t.end = off[0], off[1]
		default:
			return t, tensorErr(name, RuleField, "unknown field %q (a tensor entry has only dtype, shape, data_offsets)", field)
		}
		p.ws()
		if p.peek() == ',' {
			p.i++
			continue
		}
		if err := p.expect('}', "or ',' in a tensor entry"); err != nil {
			return t, err
		}
		break
	}
	switch {
	case !hasDType:
		return t, tensorErr(name, RuleField, "missing field dtype")
	case !hasShape:
		return t, tensorErr(name, RuleField, "missing field shape")
	case !hasOffsets:
		return t, tensorErr(name, RuleField, "missing field data_offsets")
	}
	return t, nil
}

// uints parses an array of unsigned integers; want >= 0 requires exactly
// that many elements. Errors name the tensor and rule.
func (p *parser) uints(name string, rule Rule, field string, want int) ([]uint64, error) {
	bad := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		if want >= 0 {
			return tensorErr(name, rule, "%s must be [begin, end], non-negative integers: %s", field, msg)
		}
		return tensorErr(name, rule, "%s must be an array of non-negative integers: %s", field, msg)
	}
	if p.peek() != '[' {
		return nil, bad("found %s", p.kind())
	}
	p.i++
	var out []uint64
	p.ws()
	if p.peek() == ']' {
		p.i++
	} else {
		for {
			p.ws()
			v, problem := p.uint()
			if problem != "" {
				return nil, bad("element %d %s", len(out), problem)
			}
			out = append(out, v)
			if want >= 0 && len(out) > want {
				return nil, bad("more than %d elements", want)
			}
			p.ws()
			if p.peek() == ',' {
				p.i++
				continue
			}
			if p.peek() != ']' {
				return nil, p.syntaxErr("expected ',' or ']' in %s of tensor %q, found %s", field, name, p.found())
			}
			p.i++
			break
		}
	}
	if want >= 0 && len(out) != want {
		return nil, bad("%d elements", len(out))
	}
	return out, nil
}

// uint parses a JSON number that must be an unsigned integer below 2^64.
// It returns a description of the problem instead when it is not.
func (p *parser) uint() (uint64, string) {
	c := p.peek()
	if c == '-' {
		return 0, "is negative"
	}
	if c < '0' || c > '9' {
		return 0, "is " + p.kind()
	}
	start := p.i
	var v uint64
	overflow := false
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		d := uint64(p.b[p.i] - '0')
		if v > (1<<64-1-d)/10 {
			overflow = true
		}
		v = v*10 + d
		p.i++
	}
	if p.b[start] == '0' && p.i-start > 1 {
		return 0, "has a leading zero (invalid JSON number)"
	}
	if c := p.peek(); c == '.' || c == 'e' || c == 'E' {
		return 0, "is not an integer"
	}
	if overflow {
		return 0, fmt.Sprintf("%s exceeds 2^64-1", p.b[start:p.i])
	}
	return v, ""
}

// str parses a JSON string starting at '"'. Raw control characters and lone
// UTF-16 surrogate escapes are errors.
func (p *parser) str() (string, error) {
	p.i++ // opening quote
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := string(p.b[start:p.i])
			p.i++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.syntaxErr("raw control character %#02x in string", c)
		}
		p.i++
	}
	var sb strings.Builder
	sb.Write(p.b[start:p.i])
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return sb.String(), nil
		case c < 0x20:
			return "", p.syntaxErr("raw control character %#02x in string", c)
		case c != '\\':
			sb.WriteByte(c)
			p.i++
			continue
		}
		p.i++ // backslash
		if p.i >= len(p.b) {
			break
		}
		e := p.b[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			sb.WriteByte(e)
		case 'b':
			sb.WriteByte('\b')
		case 'f':
			sb.WriteByte('\f')
		case 'n':
			sb.WriteByte('\n')
		case 'r':
			sb.WriteByte('\r')
		case 't':
			sb.WriteByte('\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.syntaxErr("bad \\u escape")
			}
			switch {
			case utf16.IsSurrogate(r) && r < 0xDC00:
				if !(p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u') {
					return "", p.syntaxErr("lone surrogate \\u%04x", r)
				}
				p.i += 2
				r2, ok := p.hex4()
				if !ok || r2 < 0xDC00 || r2 > 0xDFFF {
					return "", p.syntaxErr("surrogate \\u%04x not followed by a low surrogate", r)
				}
				sb.WriteRune(utf16.DecodeRune(r, r2))
			case utf16.IsSurrogate(r):
				return "", p.syntaxErr("lone surrogate \\u%04x", r)
			default:
				sb.WriteRune(r)
			}
		default:
			return "", p.syntaxErr("invalid escape \\%c", e)
		}
	}
	return "", p.syntaxErr("unterminated string")
}

func (p *parser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}
