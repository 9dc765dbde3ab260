package chat

import (
	"fmt"
	"strings"
)

// The parser follows jinja2's parser.py (precedence, tuple rules, tests binding as tightly
// as filters) for the statements chat templates use; other tags are refused by name.

// ---- statements ----

type node interface{}

type textNode struct{ text string }

type outputNode struct {
	x    expr
	line int
}

type ifNode struct {
	conds  []expr
	bodies [][]node
	els    []node
}

type forNode struct {
	target assignTarget
	iter   expr
	cond   expr // the "if" filter of the loop; nil if none
	body   []node
	els    []node
	line   int
}

type setNode struct {
	target assignTarget
	value  expr
	line   int
}

type setBlockNode struct {
	target  assignTarget
	body    []node
	filters []*filterExpr
	line    int
}

type macroNode struct {
	name     string
	params   []string
	defaults []expr // nil where a parameter has no default
	body     []node
}

type filterBlockNode struct {
	filters []*filterExpr
	body    []node
}

type withNode struct {
	targets []assignTarget
	values  []expr
	body    []node
}

type breakNode struct{ line int }
type continueNode struct{ line int }

// assignTarget is a name, a tuple of names, or namespace.attr.
type assignTarget struct {
	names []string
	tuple bool
	attr  string // with names[0] the namespace variable
}

// ---- expressions ----

type expr interface{}

type constExpr struct{ v any }
type nameExpr struct {
	name string
	line int
}
type getattrExpr struct {
	obj  expr
	name string
	line int
}
type getitemExpr struct {
	obj, key expr
	line     int
}
type sliceExpr struct{ start, stop, step expr }
type kwarg struct {
	name string
	x    expr
}
type callExpr struct {
	fn     expr
	args   []expr
	kwargs []kwarg
	star   expr // *args
	dstar  expr // **kwargs
	line   int
}
type filterExpr struct {
	x      expr // nil inside a filter block
	name   string
	args   []expr
	kwargs []kwarg
	line   int
}
type testExpr struct {
	x      expr
	name   string
	args   []expr
	kwargs []kwarg
	line   int
}
type unaryExpr struct {
	op   string // "-", "+", "not"
	x    expr
	line int
}
type binExpr struct {
	op   string // + - * / // % ** and or
	a, b expr
	line int
}
type concatExpr struct {
	parts []expr
	line  int
}
type compareExpr struct {
	first expr
	ops   []string // == != < <= > >= in notin
	rest  []expr
	line  int
}
type condExpr struct {
	test, a, b expr // b nil: Undefined
}
type listExpr struct {
	items []expr
	tuple bool
}
type dictExpr struct{ keys, vals []expr }

// maxParseDepth bounds the nesting of expressions and blocks (deeper templates are refused
// instead of exhausting the stack).
const maxParseDepth = 200

type parser struct {
	toks  []token
	i     int
	depth int
}

func parse(src string) ([]node, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	body, end, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errorf("unexpected '%s'", end)
	}
	return body, nil
}

func (p *parser) cur() token  { return p.toks[p.i] }
func (p *parser) peek() token { return p.toks[min(p.i+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

func (p *parser) errorf(format string, args ...any) error {
	return &SyntaxError{Line: p.cur().line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(op string) bool  { t := p.cur(); return t.kind == tOp && t.val == op }
func (p *parser) isName(n string) bool { t := p.cur(); return t.kind == tName && t.val == n }
func (p *parser) skipOp(op string) bool {
	ok := p.isOp(op)
	if ok {
		p.next()
	}
	return ok
}
func (p *parser) skipName(n string) bool {
	ok := p.isName(n)
	if ok {
		p.next()
	}
	return ok
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.errorf("expected '%s', got %s", op, p.cur())
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tName {
		return "", p.errorf("expected a name, got %s", t)
	}
	p.next()
	return t.val, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tBlockEnd {
		return p.errorf("expected end of statement block, got %s", p.cur())
	}
	p.next()
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxParseDepth {
		return p.errorf("template nested deeper than %d", maxParseDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// subparse parses statements until one of the end tags (consumed, with the tag's name
// returned; the rest of that tag is left for the caller).
func (p *parser) subparse(endTags []string) ([]node, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer p.leave()
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			if len(endTags) > 0 {
				return nil, "", p.errorf("unexpected end of template, expected %s", strings.Join(quoteAll(endTags), " or "))
			}
			return body, "", nil
		case tData:
			p.next()
			body = append(body, &textNode{text: t.val})
		case tVarBegin:
			p.next()
			x, err := p.parseTuple(true, nil, false)
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tVarEnd {
				return nil, "", p.errorf("expected end of print statement, got %s", p.cur())
			}
			p.next()
			body = append(body, &outputNode{x: x, line: t.line})
		case tBlockBegin:
			p.next()
			name := p.cur()
			if name.kind != tName {
				return nil, "", p.errorf("tag name expected, got %s", name)
			}
			for _, e := range endTags {
				if name.val == e {
					p.next()
					return body, e, nil
				}
			}
			st, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			body = append(body, st)
		default:
			return nil, "", p.errorf("unexpected %s", t)
		}
	}
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = "'" + x + "'"
	}
	return out
}

func (p *parser) parseStatement() (node, error) {
	t := p.next()
	switch t.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(t.line)
	case "set":
		return p.parseSet(t.line)
	case "macro":
		return p.parseMacro()
	case "filter":
		fs, err := p.parseFilterChain(nil)
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.subparse([]string{"endfilter"})
		if err != nil {
			return nil, err
		}
		return &filterBlockNode{filters: fs, body: body}, p.expectBlockEnd()
	case "with":
		return p.parseWith()
	case "break":
		return &breakNode{line: t.line}, p.expectBlockEnd()
	case "continue":
		return &continueNode{line: t.line}, p.expectBlockEnd()
	case "generation":
		// transformers' AssistantTracker extension: the body renders as is.
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.subparse([]string{"endgeneration"})
		if err != nil {
			return nil, err
		}
		return &filterBlockNode{body: body}, p.expectBlockEnd()
	}
	p.i--
	return nil, p.errorf("tag '%s' is not supported", t.val)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		cond, err := p.parseTuple(false, nil, false)
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.subparse([]string{"elif", "else", "endif"})
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			n.els, _, err = p.subparse([]string{"endif"})
			if err != nil {
				return nil, err
			}
		}
		return n, p.expectBlockEnd()
	}
}

func (p *parser) parseFor(line int) (node, error) {
	target, err := p.parseAssignTarget(false, []string{"in"})
	if err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.errorf("expected 'in', got %s", p.cur())
	}
	iter, err := p.parseTuple(false, []string{"recursive"}, false)
	if err != nil {
		return nil, err
	}
	n := &forNode{target: target, iter: iter, line: line}
	if p.skipName("if") {
		if n.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errorf("recursive loops are not supported")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	body, end, err := p.subparse([]string{"endfor", "else"})
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.els, _, err = p.subparse([]string{"endfor"}); err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseAssignTarget(withNamespace bool, extraEnd []string) (assignTarget, error) {
	if withNamespace && p.cur().kind == tName && p.peek().kind == tOp && p.peek().val == "." {
		ns := p.next().val
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return assignTarget{}, err
		}
		return assignTarget{names: []string{ns}, attr: attr}, nil
	}
	var t assignTarget
	for {
		if p.isOp("(") {
			return t, p.errorf("parenthesized assignment targets are not supported")
		}
		name, err := p.expectName()
		if err != nil {
			return t, err
		}
		switch name {
		case "true", "false", "none", "True", "False", "None":
			return t, p.errorf("cannot assign to %s", name)
		}
		t.names = append(t.names, name)
		if !p.isOp(",") {
			return t, nil
		}
		p.next()
		t.tuple = true
		if p.isEnd(extraEnd) || p.isOp("=") {
			return t, nil
		}
	}
}

func (p *parser) parseSet(line int) (node, error) {
	target, err := p.parseAssignTarget(true, nil)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		v, err := p.parseTuple(true, nil, false)
		if err != nil {
			return nil, err
		}
		return &setNode{target: target, value: v, line: line}, p.expectBlockEnd()
	}
	n := &setBlockNode{target: target, line: line}
	if p.skipOp("|") {
		if n.filters, err = p.parseFilterChain(nil); err != nil {
			return nil, err
		}
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.subparse([]string{"endset"}); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseMacro() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n := &macroNode{name: name}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(n.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		param, err := p.expectName()
		if err != nil {
			return nil, err
		}
		var def expr
		if p.skipOp("=") {
			if def, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		} else if len(n.defaults) > 0 && n.defaults[len(n.defaults)-1] != nil {
			return nil, p.errorf("non-default argument follows default argument")
		}
		n.params = append(n.params, param)
		n.defaults = append(n.defaults, def)
	}
	p.next()
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.subparse([]string{"endmacro"}); err != nil {
		return nil, err
	}
	if p.cur().kind == tName && p.cur().val == name {
		p.next()
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseWith() (node, error) {
	n := &withNode{}
	for p.cur().kind != tBlockEnd {
		if len(n.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t, err := p.parseAssignTarget(false, nil)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, t)
		n.values = append(n.values, v)
	}
	p.next()
	var err error
	if n.body, _, err = p.subparse([]string{"endwith"}); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

// isEnd is jinja2's is_tuple_end.
func (p *parser) isEnd(extra []string) bool {
	t := p.cur()
	switch t.kind {
	case tVarEnd, tBlockEnd, tEOF:
		return true
	case tOp:
		if t.val == ")" {
			return true
		}
	case tName:
		for _, e := range extra {
			if t.val == e {
				return true
			}
		}
	}
	return false
}

// parseTuple is jinja2's parse_tuple: an expression, or a tuple if commas follow.
func (p *parser) parseTuple(withCondexpr bool, extraEnd []string, explicitParens bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isEnd(extraEnd) {
			break
		}
		x, err := p.parseExpression(withCondexpr)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.errorf("expected an expression, got %s", p.cur())
		}
	}
	return &listExpr{items: items, tuple: true}, nil
}

func (p *parser) parseExpression(withCondexpr bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if !withCondexpr {
		return p.parseOr()
	}
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var b expr
		if p.skipName("else") {
			if b, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
		x = &condExpr{test: test, a: x, b: b}
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	x, err := p.parseAnd()
	for err == nil && p.isName("or") {
		line := p.next().line
		var y expr
		y, err = p.parseAnd()
		x = &binExpr{op: "or", a: x, b: y, line: line}
	}
	return x, err
}

func (p *parser) parseAnd() (expr, error) {
	x, err := p.parseNot()
	for err == nil && p.isName("and") {
		line := p.next().line
		var y expr
		y, err = p.parseNot()
		x = &binExpr{op: "and", a: x, b: y, line: line}
	}
	return x, err
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		line := p.next().line
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		return &unaryExpr{op: "not", x: x, line: line}, err
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	line := p.cur().line
	x, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{first: x, line: line}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case t.kind == tName && t.val == "in":
			op = "in"
			p.next()
		case t.kind == tName && t.val == "not" && p.peek().kind == tName && p.peek().val == "in":
			op = "notin"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		y, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, y)
	}
	if len(c.ops) == 0 {
		return x, nil
	}
	return c, nil
}

func (p *parser) parseMath1() (expr, error) {
	x, err := p.parseConcat()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		t := p.next()
		var y expr
		y, err = p.parseConcat()
		x = &binExpr{op: t.val, a: x, b: y, line: t.line}
	}
	return x, err
}

func (p *parser) parseConcat() (expr, error) {
	line := p.cur().line
	x, err := p.parseMath2()
	if err != nil || !p.isOp("~") {
		return x, err
	}
	parts := []expr{x}
	for p.skipOp("~") {
		y, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		parts = append(parts, y)
	}
	return &concatExpr{parts: parts, line: line}, nil
}

func (p *parser) parseMath2() (expr, error) {
	x, err := p.parsePow()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		t := p.next()
		var y expr
		y, err = p.parsePow()
		x = &binExpr{op: t.val, a: x, b: y, line: t.line}
	}
	return x, err
}

func (p *parser) parsePow() (expr, error) {
	x, err := p.parseUnary(true)
	for err == nil && p.isOp("**") {
		t := p.next()
		var y expr
		y, err = p.parseUnary(true)
		x = &binExpr{op: "**", a: x, b: y, line: t.line}
	}
	return x, err
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var x expr
	var err error
	if p.isOp("-") || p.isOp("+") {
		t := p.next()
		var y expr
		if y, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		x = &unaryExpr{op: t.val, x: y, line: t.line}
	} else if x, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{v: true}, nil
		case "false", "False":
			return &constExpr{v: false}, nil
		case "none", "None":
			return &constExpr{v: nil}, nil
		}
		return &nameExpr{name: t.val, line: t.line}, nil
	case tString:
		p.next()
		s := t.val
		for p.cur().kind == tString {
			s += p.next().val
		}
		return &constExpr{v: s}, nil
	case tInt:
		p.next()
		return &constExpr{v: t.num}, nil
	case tFloat:
		p.next()
		return &constExpr{v: t.fnum}, nil
	case tOp:
		switch t.val {
		case "(":
			p.next()
			x, err := p.parseTuple(true, nil, true)
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			p.next()
			l := &listExpr{}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				x, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			p.next()
			return l, nil
		case "{":
			p.next()
			d := &dictExpr{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.next()
			return d, nil
		}
	}
	return nil, p.errorf("unexpected %s", t)
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp(".") || p.isOp("["):
			x, err = p.parseSubscript(x)
		case p.isOp("("):
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp("|"):
			var fs []*filterExpr
			fs, err = p.parseFilterChain(x)
			if err == nil {
				x = fs[len(fs)-1]
			}
		case p.isName("is"):
			x, err = p.parseTest(x)
		case p.isOp("("):
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseSubscript(x expr) (expr, error) {
	t := p.next()
	if t.val == "." {
		a := p.cur()
		switch a.kind {
		case tName:
			p.next()
			return &getattrExpr{obj: x, name: a.val, line: a.line}, nil
		case tInt:
			p.next()
			return &getitemExpr{obj: x, key: &constExpr{v: a.num}, line: a.line}, nil
		}
		return nil, p.errorf("expected name or number after '.', got %s", a)
	}
	var args []expr
	for !p.isOp("]") {
		if len(args) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp("]") {
				break
			}
		}
		a, err := p.parseSubscribed()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	p.next()
	if len(args) == 0 {
		return nil, p.errorf("expected a subscript")
	}
	key := args[0]
	if len(args) > 1 {
		key = &listExpr{items: args, tuple: true}
	}
	return &getitemExpr{obj: x, key: key, line: t.line}, nil
}

func (p *parser) parseSubscribed() (expr, error) {
	var parts [3]expr
	var err error
	if !p.isOp(":") {
		if parts[0], err = p.parseExpression(true); err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return parts[0], nil
		}
	}
	p.next() // first ':'
	if !p.isOp("]") && !p.isOp(",") && !p.isOp(":") {
		if parts[1], err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.skipOp(":") {
		if !p.isOp("]") && !p.isOp(",") {
			if parts[2], err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
	}
	return &sliceExpr{start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseCallArgs() ([]expr, []kwarg, expr, expr, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, nil, nil, err
	}
	var args []expr
	var kwargs []kwarg
	var star, dstar expr
	first := true
	for !p.isOp(")") {
		if !first {
			if err := p.expectOp(","); err != nil {
				return nil, nil, nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		first = false
		var err error
		switch {
		case p.isOp("*"):
			p.next()
			star, err = p.parseExpression(true)
		case p.isOp("**"):
			p.next()
			dstar, err = p.parseExpression(true)
		case p.cur().kind == tName && p.peek().kind == tOp && p.peek().val == "=":
			name := p.next().val
			p.next()
			var x expr
			x, err = p.parseExpression(true)
			kwargs = append(kwargs, kwarg{name: name, x: x})
		default:
			if len(kwargs) > 0 || star != nil || dstar != nil {
				return nil, nil, nil, nil, p.errorf("positional argument after keyword argument")
			}
			var x expr
			x, err = p.parseExpression(true)
			args = append(args, x)
		}
		if err != nil {
			return nil, nil, nil, nil, err
		}
	}
	p.next()
	return args, kwargs, star, dstar, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	line := p.cur().line
	args, kwargs, star, dstar, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: fn, args: args, kwargs: kwargs, star: star, dstar: dstar, line: line}, nil
}

// parseFilterChain parses "| f(args) | g ..." applied to x (nil for filter blocks).
func (p *parser) parseFilterChain(x expr) ([]*filterExpr, error) {
	var out []*filterExpr
	first := x == nil
	for first || p.isOp("|") {
		if !first {
			p.next()
		}
		first = false
		t := p.cur()
		name, err := p.dottedName()
		if err != nil {
			return nil, err
		}
		if _, ok := filters[name]; !ok {
			return nil, &SyntaxError{Line: t.line, Msg: fmt.Sprintf("no filter named '%s'", name)}
		}
		f := &filterExpr{x: x, name: name, line: t.line}
		if p.isOp("(") {
			var star, dstar expr
			if f.args, f.kwargs, star, dstar, err = p.parseCallArgs(); err != nil {
				return nil, err
			}
			if star != nil || dstar != nil {
				return nil, p.errorf("*args in filter calls are not supported")
			}
		}
		out = append(out, f)
		x = f
	}
	return out, nil
}

// dottedName reads a filter or test name, which may be dotted ("a.b").
func (p *parser) dottedName() (string, error) {
	name, err := p.expectName()
	if err != nil {
		return "", err
	}
	for p.isOp(".") {
		p.next()
		n2, err := p.expectName()
		if err != nil {
			return "", err
		}
		name += "." + n2
	}
	return name, nil
}

func (p *parser) parseTest(x expr) (expr, error) {
	p.next() // "is"
	neg := p.skipName("not")
	t := p.cur()
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	if _, ok := tests[name]; !ok {
		return nil, &SyntaxError{Line: t.line, Msg: fmt.Sprintf("no test named '%s'", name)}
	}
	te := &testExpr{x: x, name: name, line: t.line}
	c := p.cur()
	switch {
	case c.kind == tOp && c.val == "(":
		var star, dstar expr
		if te.args, te.kwargs, star, dstar, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
		if star != nil || dstar != nil {
			return nil, p.errorf("*args in test calls are not supported")
		}
	case (c.kind == tName || c.kind == tString || c.kind == tInt || c.kind == tFloat ||
		(c.kind == tOp && (c.val == "[" || c.val == "{"))) &&
		!(c.kind == tName && (c.val == "else" || c.val == "or" || c.val == "and")):
		if c.kind == tName && c.val == "is" {
			return nil, p.errorf("you cannot chain multiple tests with is")
		}
		arg, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if arg, err = p.parsePostfix(arg); err != nil {
			return nil, err
		}
		te.args = []expr{arg}
	}
	if neg {
		return &unaryExpr{op: "not", x: te, line: t.line}, nil
	}
	return te, nil
}
