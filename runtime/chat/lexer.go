package chat

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer follows jinja2's (lexer.py, jinja2 3.1) with the settings transformers uses:
// trim_blocks and lstrip_blocks on, keep_trailing_newline off, default delimiters.

type tokKind int

const (
	tEOF tokKind = iota
	tData
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	val  string  // data, name, operator, or the decoded string literal
	num  int64   // tInt
	fnum float64 // tFloat
	line int
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tData:
		return "template data"
	case tVarBegin:
		return "'{{'"
	case tVarEnd:
		return "'}}'"
	case tBlockBegin:
		return "'{%'"
	case tBlockEnd:
		return "'%}'"
	case tString:
		return "string " + strconv.Quote(t.val)
	}
	return "'" + t.val + "'"
}

// SyntaxError is a template that does not parse; Line is 1-based.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("chat template line %d: %s", e.Line, e.Msg) }

type lexer struct {
	src          string
	pos          int
	line         int
	lineStarting bool
	toks         []token
}

// normalizeSource applies jinja2's newline handling: \r\n and \r become \n, and one trailing
// newline is dropped (keep_trailing_newline=False).
func normalizeSource(src string) string {
	if strings.ContainsRune(src, '\r') {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

func lex(src string) ([]token, error) {
	lx := &lexer{src: normalizeSource(src), line: 1, lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{kind: tEOF, line: lx.line})
	return lx.toks, nil
}

func (lx *lexer) errorf(format string, args ...any) error {
	return &SyntaxError{Line: lx.line, Msg: fmt.Sprintf(format, args...)}
}

func (lx *lexer) emit(kind tokKind, val string) {
	lx.toks = append(lx.toks, token{kind: kind, val: val, line: lx.line})
}

// isPySpace is Python's str.isspace for one character (what \s and str.strip() use).
func isPySpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	return r > 0x7f && unicode.IsSpace(r)
}

func trimRightPySpace(s string) string { return strings.TrimRightFunc(s, isPySpace) }

// skipPySpace returns the index after the whitespace that starts at i.
func skipPySpace(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isPySpace(r) {
			break
		}
		i += n
	}
	return i
}

// stripBeforeTag applies '-' (strip all whitespace before the tag) or lstrip_blocks (strip the
// spaces and tabs between the last newline and a block or comment tag) to the data before a tag.
func (lx *lexer) stripBeforeTag(text, sign string, variable bool) string {
	if sign == "-" {
		return trimRightPySpace(text)
	}
	if sign == "+" || variable {
		return text
	}
	lpos := strings.LastIndexByte(text, '\n') + 1
	if lpos > 0 || lx.lineStarting {
		tail := text[lpos:]
		if tail != "" && strings.TrimLeftFunc(tail, isPySpace) == "" {
			return text[:lpos]
		}
	}
	return text
}

func (lx *lexer) addData(text string) {
	if text != "" {
		lx.emit(tData, text)
		lx.line += strings.Count(text, "\n")
	}
}

func (lx *lexer) run() error {
	src := lx.src
	for lx.pos < len(src) {
		start := indexTagStart(src, lx.pos)
		if start < 0 {
			lx.addData(src[lx.pos:])
			lx.pos = len(src)
			return nil
		}
		kind := src[start+1] // '{', '%' or '#'
		sign := ""
		if start+2 < len(src) && (src[start+2] == '-' || src[start+2] == '+') {
			sign = src[start+2 : start+3]
		}
		text := src[lx.pos:start]
		// {% raw %} (jinja2 tries it before the plain block tag)
		if kind == '%' {
			if end, ok := matchRawBegin(src, start); ok {
				lx.addData(lx.stripBeforeTag(text, sign, false))
				lx.line += strings.Count(src[start:end], "\n")
				lx.lineStarting = strings.HasSuffix(src[start:end], "\n")
				lx.pos = end
				if err := lx.raw(); err != nil {
					return err
				}
				continue
			}
		}
		lx.addData(lx.stripBeforeTag(text, sign, kind == '{'))
		lx.pos = start + 2 + len(sign)
		var err error
		switch kind {
		case '#':
			err = lx.comment()
		case '%':
			lx.emit(tBlockBegin, "{%")
			err = lx.tag(false)
		default:
			lx.emit(tVarBegin, "{{")
			err = lx.tag(true)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func indexTagStart(src string, from int) int {
	for i := from; i+1 < len(src); i++ {
		if src[i] == '{' {
			switch src[i+1] {
			case '{', '%', '#':
				return i
			}
		}
	}
	return -1
}

// matchRawBegin matches {%(-|+|)\s*raw\s*(-%}\s*|%}) at start.
func matchRawBegin(src string, start int) (int, bool) {
	i := start + 2
	if i < len(src) && (src[i] == '-' || src[i] == '+') {
		i++
	}
	i = skipPySpace(src, i)
	if !strings.HasPrefix(src[i:], "raw") {
		return 0, false
	}
	i = skipPySpace(src, i+3)
	switch {
	case strings.HasPrefix(src[i:], "-%}"):
		return skipPySpace(src, i+3), true
	case strings.HasPrefix(src[i:], "%}"):
		return i + 2, true
	}
	return 0, false
}

// blockEnd matches jinja2's block end at i: "+%}", "-%}" + whitespace, or "%}" + one
// optional newline (trim_blocks). It returns the end index.
func blockEnd(src string, i int) (int, bool) {
	switch {
	case strings.HasPrefix(src[i:], "+%}"):
		return i + 3, true
	case strings.HasPrefix(src[i:], "-%}"):
		return skipPySpace(src, i+3), true
	case strings.HasPrefix(src[i:], "%}"):
		if i+2 < len(src) && src[i+2] == '\n' {
			return i + 3, true
		}
		return i + 2, true
	}
	return 0, false
}

func (lx *lexer) raw() error {
	src := lx.src
	for i := lx.pos; i+1 < len(src); i++ {
		if src[i] != '{' || src[i+1] != '%' {
			continue
		}
		j := i + 2
		sign := ""
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			sign = src[j : j+1]
			j++
		}
		j = skipPySpace(src, j)
		if !strings.HasPrefix(src[j:], "endraw") {
			continue
		}
		j = skipPySpace(src, j+6)
		end, ok := blockEnd(src, j)
		if !ok {
			continue
		}
		lx.addData(lx.stripBeforeTag(src[lx.pos:i], sign, false))
		lx.lineStarting = strings.HasSuffix(src[i:end], "\n")
		lx.line += strings.Count(src[i:end], "\n")
		lx.pos = end
		return nil
	}
	return lx.errorf("missing end of raw directive")
}

func (lx *lexer) comment() error {
	src := lx.src
	q := strings.Index(src[lx.pos:], "#}")
	if q < 0 {
		return lx.errorf("missing end of comment tag")
	}
	q += lx.pos
	end := q + 2
	switch {
	case q > lx.pos && src[q-1] == '+':
	case q > lx.pos && src[q-1] == '-':
		end = skipPySpace(src, end)
	default:
		if end < len(src) && src[end] == '\n' {
			end++
		}
	}
	lx.line += strings.Count(src[lx.pos:end], "\n")
	lx.lineStarting = strings.HasSuffix(src[lx.pos:end], "\n")
	lx.pos = end
	return nil
}

// operators, longest first.
var operators = []string{"//", "**", "==", "!=", ">=", "<=",
	"+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"}

// tag lexes the inside of {{ }} or {% %} up to and including its end delimiter.
func (lx *lexer) tag(variable bool) error {
	src := lx.src
	var balance []byte
	for {
		if lx.pos >= len(src) {
			if variable {
				return lx.errorf("unexpected end of template, expected '}}'")
			}
			return lx.errorf("unexpected end of template, expected '%%}'")
		}
		if len(balance) == 0 {
			if variable {
				end := -1
				switch {
				case strings.HasPrefix(src[lx.pos:], "-}}"):
					end = skipPySpace(src, lx.pos+3)
				case strings.HasPrefix(src[lx.pos:], "}}"):
					end = lx.pos + 2
				}
				if end >= 0 {
					lx.emit(tVarEnd, "}}")
					lx.finishTag(end)
					return nil
				}
			} else if end, ok := blockEnd(src, lx.pos); ok {
				lx.emit(tBlockEnd, "%}")
				lx.finishTag(end)
				return nil
			}
		}
		r, _ := utf8.DecodeRuneInString(src[lx.pos:])
		if isPySpace(r) {
			end := skipPySpace(src, lx.pos)
			lx.line += strings.Count(src[lx.pos:end], "\n")
			lx.pos = end
			continue
		}
		if n, ok := matchFloat(src, lx.pos); ok {
			lit := strings.ReplaceAll(src[lx.pos:lx.pos+n], "_", "")
			f, err := strconv.ParseFloat(lit, 64)
			if err != nil && !isRangeErr(err) {
				return lx.errorf("bad float literal %q", lit)
			}
			lx.toks = append(lx.toks, token{kind: tFloat, val: lit, fnum: f, line: lx.line})
			lx.pos += n
			continue
		}
		if n, ok := matchInt(src, lx.pos); ok {
			lit := strings.ReplaceAll(src[lx.pos:lx.pos+n], "_", "")
			v, err := strconv.ParseInt(lit, 0, 64)
			if err != nil {
				return lx.errorf("integer literal %q does not fit in 64 bits", lit)
			}
			lx.toks = append(lx.toks, token{kind: tInt, val: lit, num: v, line: lx.line})
			lx.pos += n
			continue
		}
		if isNameStart(src[lx.pos]) {
			j := lx.pos + 1
			for j < len(src) && isNameChar(src[j]) {
				j++
			}
			lx.emit(tName, src[lx.pos:j])
			lx.pos = j
			continue
		}
		if c := src[lx.pos]; c == '\'' || c == '"' {
			s, n, err := lexString(src[lx.pos:])
			if err != nil {
				return lx.errorf("%v", err)
			}
			lx.emit(tString, s)
			lx.line += strings.Count(src[lx.pos:lx.pos+n], "\n")
			lx.pos += n
			continue
		}
		op := ""
		for _, o := range operators {
			if strings.HasPrefix(src[lx.pos:], o) {
				op = o
				break
			}
		}
		if op == "" {
			return lx.errorf("unexpected char %q", r)
		}
		switch op {
		case "(":
			balance = append(balance, ')')
		case "[":
			balance = append(balance, ']')
		case "{":
			balance = append(balance, '}')
		case ")", "]", "}":
			if len(balance) == 0 {
				return lx.errorf("unexpected '%s'", op)
			}
			if want := balance[len(balance)-1]; want != op[0] {
				return lx.errorf("unexpected '%s', expected '%c'", op, want)
			}
			balance = balance[:len(balance)-1]
		}
		lx.emit(tOp, op)
		lx.pos += len(op)
	}
}

func (lx *lexer) finishTag(end int) {
	lx.line += strings.Count(lx.src[lx.pos:end], "\n")
	lx.lineStarting = end > lx.pos && lx.src[end-1] == '\n'
	lx.pos = end
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func isNameStart(c byte) bool { return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isNameChar(c byte) bool  { return isNameStart(c) || (c >= '0' && c <= '9') }
func isDigit(c byte) bool     { return c >= '0' && c <= '9' }

// digits matches (\d+_)*\d+ at i and returns its length.
func digits(s string, i int) int {
	j := i
	for {
		k := j
		for k < len(s) && isDigit(s[k]) {
			k++
		}
		if k == j {
			return j - i
		}
		if k < len(s) && s[k] == '_' && k+1 < len(s) && isDigit(s[k+1]) {
			j = k + 1
			continue
		}
		return k - i
	}
}

// matchFloat matches jinja2's float_re: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)
func matchFloat(s string, i int) (int, bool) {
	if i > 0 && s[i-1] == '.' {
		return 0, false
	}
	n := digits(s, i)
	if n == 0 {
		return 0, false
	}
	j := i + n
	frac := 0
	if j < len(s) && s[j] == '.' {
		frac = digits(s, j+1)
	}
	// exponent form, optionally with a fraction
	k := j
	if frac > 0 {
		k = j + 1 + frac
	}
	if k < len(s) && (s[k] == 'e' || s[k] == 'E') {
		m := k + 1
		if m < len(s) && (s[m] == '+' || s[m] == '-') {
			m++
		}
		if e := digits(s, m); e > 0 {
			return m + e - i, true
		}
	}
	if frac > 0 {
		return j + 1 + frac - i, true
	}
	return 0, false
}

// matchInt matches jinja2's integer_re (binary, octal, hex, decimal with underscores).
func matchInt(s string, i int) (int, bool) {
	if i+1 < len(s) && s[i] == '0' {
		var ok func(byte) bool
		switch s[i+1] | 0x20 {
		case 'b':
			ok = func(c byte) bool { return c == '0' || c == '1' }
		case 'o':
			ok = func(c byte) bool { return c >= '0' && c <= '7' }
		case 'x':
			ok = func(c byte) bool { return isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }
		}
		if ok != nil {
			j := i + 2
			for j < len(s) {
				if ok(s[j]) {
					j++
				} else if s[j] == '_' && j+1 < len(s) && ok(s[j+1]) {
					j += 2
				} else {
					break
				}
			}
			if j > i+2 {
				return j - i, true
			}
		}
	}
	n := digits(s, i)
	if n == 0 {
		return 0, false
	}
	if s[i] == '0' { // 0(_?0)*
		j := i + 1
		for j < len(s) {
			if s[j] == '0' {
				j++
			} else if s[j] == '_' && j+1 < len(s) && s[j+1] == '0' {
				j += 2
			} else {
				break
			}
		}
		return j - i, true
	}
	return n, true
}

// lexString reads a quoted literal at the start of s and decodes it as jinja2 does
// (value.encode("ascii", "backslashreplace").decode("unicode-escape")).
func lexString(s string) (string, int, error) {
	q := s[0]
	i := 1
	for i < len(s) {
		switch s[i] {
		case '\\':
			i += 2
			continue
		case q:
			v, err := unescapePython(s[1:i])
			return v, i + 1, err
		}
		i++
	}
	return "", 0, fmt.Errorf("unterminated string literal")
}

// unescapePython decodes Python unicode-escape sequences; unknown escapes stay as written.
func unescapePython(s string) (string, error) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			if c == '\\' {
				return "", fmt.Errorf("\\ at end of string")
			}
			sb.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			sb.WriteByte(e)
		case 'a':
			sb.WriteByte(7)
		case 'b':
			sb.WriteByte(8)
		case 'f':
			sb.WriteByte(12)
		case 'n':
			sb.WriteByte('\n')
		case 'r':
			sb.WriteByte('\r')
		case 't':
			sb.WriteByte('\t')
		case 'v':
			sb.WriteByte(11)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n > len(s) {
				return "", fmt.Errorf("truncated \\%c escape", e)
			}
			v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return "", fmt.Errorf("bad \\%c escape", e)
			}
			sb.WriteRune(rune(v))
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			v := 0
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				v = v*8 + int(s[j]-'0')
				j++
			}
			sb.WriteRune(rune(v))
			i = j - 1
		default:
			sb.WriteByte('\\')
			sb.WriteByte(e)
		}
	}
	return sb.String(), nil
}
