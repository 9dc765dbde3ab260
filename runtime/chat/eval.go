package chat

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// TemplateError is an error raised by the template itself (raise_exception) or by a
// template operation that jinja2 would refuse (undefined attribute, type error, ...).
type TemplateError struct {
	Msg    string
	Raised bool // true when the template called raise_exception
	Line   int  // 1-based, 0 when unknown
}

func (e *TemplateError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("chat template line %d: %s", e.Line, e.Msg)
	}
	return "chat template: " + e.Msg
}

// Limits bound a render so that no template text can run away (the default is generous for
// real chat templates: the Qwen templates take a few thousand steps per message).
type Limits struct {
	MaxSteps       int // expression and statement evaluations (default 20,000,000)
	MaxOutputBytes int // bytes of output, including captured macro output (default 64 MiB)
	MaxCallDepth   int // nested macro calls (default 100)
}

func (l Limits) withDefaults() Limits {
	if l.MaxSteps <= 0 {
		l.MaxSteps = 20_000_000
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = 64 << 20
	}
	if l.MaxCallDepth <= 0 {
		l.MaxCallDepth = 100
	}
	return l
}

var (
	errBreak    = errors.New("break outside a loop")
	errContinue = errors.New("continue outside a loop")
)

type frame struct {
	vars   map[string]any
	parent *frame
}

func newFrame(parent *frame) *frame { return &frame{vars: map[string]any{}, parent: parent} }

func (f *frame) lookup(name string) (any, bool) {
	for ; f != nil; f = f.parent {
		if v, ok := f.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

// Macro is a {% macro %} definition bound to the scope it was defined in.
type Macro struct {
	name     string
	params   []string
	defaults []expr
	body     []node
	closure  *frame
}

// Func is a built-in callable (a global function or a bound method).
type Func struct {
	name string
	fn   func(r *renderer, args []any, kwargs *Dict) (any, error)
}

type loopInfo struct {
	items []any
	i     int
	last  []any // loop.changed state
}

type renderer struct {
	out     *strings.Builder
	outs    []*strings.Builder
	total   int
	steps   int
	depth   int
	limits  Limits
	now     func() time.Time
	curLine int
}

func (r *renderer) errorf(format string, args ...any) error {
	return &TemplateError{Msg: fmt.Sprintf(format, args...), Line: r.curLine}
}

func (r *renderer) step() error {
	r.steps++
	if r.steps > r.limits.MaxSteps {
		return r.errorf("the template ran more than %d steps", r.limits.MaxSteps)
	}
	return nil
}

func (r *renderer) write(s string) error {
	r.total += len(s)
	if r.total > r.limits.MaxOutputBytes {
		return r.errorf("the template wrote more than %d bytes", r.limits.MaxOutputBytes)
	}
	r.out.WriteString(s)
	return nil
}

// capture runs fn with output going to a fresh buffer and returns what it wrote.
func (r *renderer) capture(fn func() error) (string, error) {
	r.outs = append(r.outs, r.out)
	r.out = &strings.Builder{}
	err := fn()
	s := r.out.String()
	r.out = r.outs[len(r.outs)-1]
	r.outs = r.outs[:len(r.outs)-1]
	return s, err
}

func (r *renderer) execBody(body []node, f *frame) error {
	for _, n := range body {
		if err := r.exec(n, f); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) exec(n node, f *frame) error {
	if err := r.step(); err != nil {
		return err
	}
	switch n := n.(type) {
	case *textNode:
		return r.write(n.text)
	case *outputNode:
		r.curLine = n.line
		v, err := r.eval(n.x, f)
		if err != nil {
			return err
		}
		return r.write(toStr(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, f)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.execBody(n.bodies[i], f)
			}
		}
		return r.execBody(n.els, f)
	case *forNode:
		return r.execFor(n, f)
	case *setNode:
		r.curLine = n.line
		v, err := r.eval(n.value, f)
		if err != nil {
			return err
		}
		return r.assign(n.target, v, f)
	case *setBlockNode:
		r.curLine = n.line
		s, err := r.capture(func() error { return r.execBody(n.body, f) })
		if err != nil {
			return err
		}
		var v any = s
		for _, fl := range n.filters {
			if v, err = r.applyFilter(fl, v, f); err != nil {
				return err
			}
		}
		return r.assign(n.target, v, f)
	case *macroNode:
		f.vars[n.name] = &Macro{name: n.name, params: n.params, defaults: n.defaults, body: n.body, closure: f}
		return nil
	case *filterBlockNode:
		s, err := r.capture(func() error { return r.execBody(n.body, newFrame(f)) })
		if err != nil {
			return err
		}
		var v any = s
		for _, fl := range n.filters {
			if v, err = r.applyFilter(fl, v, f); err != nil {
				return err
			}
		}
		return r.write(toStr(v))
	case *withNode:
		inner := newFrame(f)
		for i, t := range n.targets {
			v, err := r.eval(n.values[i], f)
			if err != nil {
				return err
			}
			if err := r.assign(t, v, inner); err != nil {
				return err
			}
		}
		return r.execBody(n.body, inner)
	case *breakNode:
		r.curLine = n.line
		return errBreak
	case *continueNode:
		r.curLine = n.line
		return errContinue
	}
	return r.errorf("internal: unknown node %T", n)
}

func (r *renderer) assign(t assignTarget, v any, f *frame) error {
	if t.attr != "" {
		obj, ok := f.lookup(t.names[0])
		ns, isNS := obj.(*Namespace)
		if !ok || !isNS {
			return r.errorf("cannot assign attribute on non-namespace object")
		}
		return ns.attrs.Set(t.attr, v)
	}
	if !t.tuple {
		f.vars[t.names[0]] = v
		return nil
	}
	items, err := r.iterate(v)
	if err != nil {
		return err
	}
	if len(items) != len(t.names) {
		if len(items) < len(t.names) {
			return r.errorf("not enough values to unpack (expected %d, got %d)", len(t.names), len(items))
		}
		return r.errorf("too many values to unpack (expected %d)", len(t.names))
	}
	for i, name := range t.names {
		f.vars[name] = items[i]
	}
	return nil
}

// iterate lists what a for loop visits: list items, dict keys, string characters; an
// undefined value is empty.
func (r *renderer) iterate(v any) ([]any, error) {
	switch v := v.(type) {
	case *List:
		return v.Items, nil
	case *Dict:
		return v.Keys(), nil
	case string:
		out := make([]any, 0, len(v))
		for _, c := range v {
			out = append(out, string(c))
		}
		return out, nil
	case Undefined:
		return nil, nil
	}
	return nil, r.errorf("'%s' object is not iterable", typeName(v))
}

func (r *renderer) execFor(n *forNode, f *frame) error {
	r.curLine = n.line
	seq, err := r.eval(n.iter, f)
	if err != nil {
		return err
	}
	items, err := r.iterate(seq)
	if err != nil {
		return err
	}
	lf := newFrame(f)
	if n.cond != nil {
		var kept []any
		for _, it := range items {
			if err := r.step(); err != nil {
				return err
			}
			cf := newFrame(f)
			if err := r.assign(n.target, it, cf); err != nil {
				return err
			}
			ok, err := r.eval(n.cond, cf)
			if err != nil {
				return err
			}
			if truthy(ok) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.execBody(n.els, f)
	}
	loop := &loopInfo{items: items}
	lf.vars["loop"] = loop
	for i, it := range items {
		if err := r.step(); err != nil {
			return err
		}
		loop.i = i
		// jinja2 gives each iteration a fresh scope: a {% set %} in one iteration is not seen
		// by the next (the reason templates use namespace()).
		itf := newFrame(lf)
		if err := r.assign(n.target, it, itf); err != nil {
			return err
		}
		err := r.execBody(n.body, itf)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	return nil
}

func (r *renderer) callMacro(m *Macro, args []any, kwargs *Dict) (any, error) {
	if r.depth >= r.limits.MaxCallDepth {
		return nil, r.errorf("macro calls nested deeper than %d", r.limits.MaxCallDepth)
	}
	r.depth++
	defer func() { r.depth-- }()
	mf := newFrame(m.closure)
	extra := kwargs
	if kwargs != nil {
		extra = NewDict()
		for i, k := range kwargs.keys {
			_ = extra.Set(k, kwargs.vals[i])
		}
	}
	var varargs []any
	for i, p := range m.params {
		switch {
		case i < len(args):
			mf.vars[p] = args[i]
			if extra != nil {
				if _, dup := extra.Get(p); dup {
					return nil, r.errorf("macro '%s' got multiple values for argument '%s'", m.name, p)
				}
			}
		case extra != nil:
			if v, ok := extra.Get(p); ok {
				mf.vars[p] = v
				extra.delete(p)
				continue
			}
			fallthrough
		default:
			if m.defaults[i] != nil {
				v, err := r.eval(m.defaults[i], mf)
				if err != nil {
					return nil, err
				}
				mf.vars[p] = v
			} else {
				mf.vars[p] = Undefined{Name: p}
			}
		}
	}
	if len(args) > len(m.params) {
		varargs = args[len(m.params):]
	}
	mf.vars["varargs"] = &List{Items: varargs, Tuple: true}
	if extra == nil {
		extra = NewDict()
	}
	mf.vars["kwargs"] = extra
	s, err := r.capture(func() error {
		err := r.execBody(m.body, mf)
		if err == errBreak || err == errContinue {
			return r.errorf("break or continue outside a loop")
		}
		return err
	})
	return s, err
}

func (d *Dict) delete(k any) {
	h, ok := hashKey(k)
	if !ok {
		return
	}
	i, ok := d.idx[h]
	if !ok {
		return
	}
	d.keys = append(d.keys[:i], d.keys[i+1:]...)
	d.vals = append(d.vals[:i], d.vals[i+1:]...)
	delete(d.idx, h)
	for j := i; j < len(d.keys); j++ {
		hk, _ := hashKey(d.keys[j])
		d.idx[hk] = j
	}
}

// ---- expressions ----

func undefinedErr(u Undefined) string {
	if u.Name == "" {
		return "value is undefined"
	}
	return fmt.Sprintf("'%s' is undefined", u.Name)
}

func (r *renderer) eval(x expr, f *frame) (any, error) {
	if err := r.step(); err != nil {
		return nil, err
	}
	switch x := x.(type) {
	case *constExpr:
		return x.v, nil
	case *nameExpr:
		if v, ok := f.lookup(x.name); ok {
			return v, nil
		}
		return Undefined{Name: x.name}, nil
	case *getattrExpr:
		obj, err := r.eval(x.obj, f)
		if err != nil {
			return nil, err
		}
		r.curLine = x.line
		return r.getattr(obj, x.name)
	case *getitemExpr:
		obj, err := r.eval(x.obj, f)
		if err != nil {
			return nil, err
		}
		r.curLine = x.line
		if s, ok := x.key.(*sliceExpr); ok {
			return r.slice(obj, s, f)
		}
		key, err := r.eval(x.key, f)
		if err != nil {
			return nil, err
		}
		return r.getitem(obj, key)
	case *callExpr:
		return r.evalCall(x, f)
	case *filterExpr:
		v, err := r.eval(x.x, f)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(x, v, f)
	case *testExpr:
		v, err := r.eval(x.x, f)
		if err != nil {
			return nil, err
		}
		args, err := r.evalList(x.args, f)
		if err != nil {
			return nil, err
		}
		r.curLine = x.line
		return tests[x.name](r, v, args)
	case *unaryExpr:
		v, err := r.eval(x.x, f)
		if err != nil {
			return nil, err
		}
		r.curLine = x.line
		switch x.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch v := v.(type) {
			case int64:
				if v == math.MinInt64 {
					return nil, r.errorf("integer overflow")
				}
				return -v, nil
			case float64:
				return -v, nil
			case bool:
				i, _ := asInt(v)
				return -i, nil
			case Undefined:
				return nil, r.errorf("%s", undefinedErr(v))
			}
			return nil, r.errorf("bad operand type for unary -: '%s'", typeName(v))
		default:
			switch v := v.(type) {
			case int64, float64:
				return v, nil
			case bool:
				i, _ := asInt(v)
				return i, nil
			case Undefined:
				return nil, r.errorf("%s", undefinedErr(v))
			}
			return nil, r.errorf("bad operand type for unary +: '%s'", typeName(v))
		}
	case *binExpr:
		a, err := r.eval(x.a, f)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "and":
			if !truthy(a) {
				return a, nil
			}
			return r.eval(x.b, f)
		case "or":
			if truthy(a) {
				return a, nil
			}
			return r.eval(x.b, f)
		}
		b, err := r.eval(x.b, f)
		if err != nil {
			return nil, err
		}
		r.curLine = x.line
		return r.arith(x.op, a, b)
	case *concatExpr:
		var sb strings.Builder
		for _, p := range x.parts {
			v, err := r.eval(p, f)
			if err != nil {
				return nil, err
			}
			sb.WriteString(toStr(v))
			if sb.Len() > r.limits.MaxOutputBytes {
				return nil, r.errorf("string longer than %d bytes", r.limits.MaxOutputBytes)
			}
		}
		return sb.String(), nil
	case *compareExpr:
		a, err := r.eval(x.first, f)
		if err != nil {
			return nil, err
		}
		for i, op := range x.ops {
			b, err := r.eval(x.rest[i], f)
			if err != nil {
				return nil, err
			}
			r.curLine = x.line
			ok, err := r.compareOp(op, a, b)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			a = b
		}
		return true, nil
	case *condExpr:
		t, err := r.eval(x.test, f)
		if err != nil {
			return nil, err
		}
		if truthy(t) {
			return r.eval(x.a, f)
		}
		if x.b == nil {
			return Undefined{}, nil
		}
		return r.eval(x.b, f)
	case *listExpr:
		items, err := r.evalList(x.items, f)
		if err != nil {
			return nil, err
		}
		if items == nil {
			items = []any{}
		}
		return &List{Items: items, Tuple: x.tuple}, nil
	case *dictExpr:
		d := NewDict()
		for i := range x.keys {
			k, err := r.eval(x.keys[i], f)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(x.vals[i], f)
			if err != nil {
				return nil, err
			}
			if err := d.Set(k, v); err != nil {
				return nil, r.errorf("%v", err)
			}
		}
		return d, nil
	case *sliceExpr:
		return nil, r.errorf("slice outside a subscript")
	}
	return nil, r.errorf("internal: unknown expression %T", x)
}

func (r *renderer) evalList(xs []expr, f *frame) ([]any, error) {
	if len(xs) == 0 {
		return nil, nil
	}
	out := make([]any, len(xs))
	for i, x := range xs {
		v, err := r.eval(x, f)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (r *renderer) evalKwargs(kws []kwarg, f *frame) (*Dict, error) {
	if len(kws) == 0 {
		return nil, nil
	}
	d := NewDict()
	for _, kw := range kws {
		v, err := r.eval(kw.x, f)
		if err != nil {
			return nil, err
		}
		_ = d.Set(kw.name, v)
	}
	return d, nil
}

func (r *renderer) evalCall(x *callExpr, f *frame) (any, error) {
	fn, err := r.eval(x.fn, f)
	if err != nil {
		return nil, err
	}
	args, err := r.evalList(x.args, f)
	if err != nil {
		return nil, err
	}
	kwargs, err := r.evalKwargs(x.kwargs, f)
	if err != nil {
		return nil, err
	}
	if x.star != nil {
		v, err := r.eval(x.star, f)
		if err != nil {
			return nil, err
		}
		more, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		args = append(args, more...)
	}
	if x.dstar != nil {
		v, err := r.eval(x.dstar, f)
		if err != nil {
			return nil, err
		}
		d, ok := v.(*Dict)
		if !ok {
			return nil, r.errorf("argument after ** must be a mapping, not %s", typeName(v))
		}
		if kwargs == nil {
			kwargs = NewDict()
		}
		for i, k := range d.keys {
			ks, ok := k.(string)
			if !ok {
				return nil, r.errorf("keywords must be strings")
			}
			_ = kwargs.Set(ks, d.vals[i])
		}
	}
	r.curLine = x.line
	switch fn := fn.(type) {
	case *Macro:
		return r.callMacro(fn, args, kwargs)
	case *Func:
		return fn.fn(r, args, kwargs)
	case Undefined:
		return nil, r.errorf("%s", undefinedErr(fn))
	}
	return nil, r.errorf("'%s' object is not callable", typeName(fn))
}

func (r *renderer) applyFilter(fl *filterExpr, v any, f *frame) (any, error) {
	args, err := r.evalList(fl.args, f)
	if err != nil {
		return nil, err
	}
	kwargs, err := r.evalKwargs(fl.kwargs, f)
	if err != nil {
		return nil, err
	}
	r.curLine = fl.line
	return filters[fl.name](r, v, args, kwargs)
}

// getattr is jinja2's environment.getattr: a Python attribute first (methods), then the item.
func (r *renderer) getattr(obj any, name string) (any, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, r.errorf("%s", undefinedErr(o))
	case *Dict:
		if m, ok := dictMethod(o, name); ok {
			return m, nil
		}
		if v, ok := o.Get(name); ok {
			return v, nil
		}
		return Undefined{Name: name}, nil
	case *Namespace:
		if v, ok := o.attrs.Get(name); ok {
			return v, nil
		}
		return Undefined{Name: name}, nil
	case *loopInfo:
		return r.loopAttr(o, name)
	case string:
		if m, ok := strMethod(o, name); ok {
			return m, nil
		}
	case *List:
		if m, ok := listMethod(o, name); ok {
			return m, nil
		}
	}
	return Undefined{Name: name}, nil
}

// getitem is jinja2's environment.getitem: the item first, then for a string key the attribute.
func (r *renderer) getitem(obj, key any) (any, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, r.errorf("%s", undefinedErr(o))
	case *Dict:
		if v, ok := o.Get(key); ok {
			return v, nil
		}
	case *List:
		if i, ok := asInt(key); ok {
			n := int64(len(o.Items))
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				return o.Items[i], nil
			}
			return Undefined{Name: toStr(key)}, nil
		}
	case string:
		if i, ok := asInt(key); ok {
			rs := []rune(o)
			n := int64(len(rs))
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				return string(rs[i]), nil
			}
			return Undefined{Name: toStr(key)}, nil
		}
	}
	if s, ok := key.(string); ok {
		return r.getattr(obj, s)
	}
	return Undefined{Name: toStr(key)}, nil
}

// sliceBounds is Python's slice.indices(n) followed by the list of visited indices.
func sliceBounds(n int, start, stop, step any) ([]int, error) {
	st := int64(1)
	if step != nil {
		s, ok := asInt(step)
		if !ok {
			return nil, fmt.Errorf("slice indices must be integers or None")
		}
		if s == 0 {
			return nil, fmt.Errorf("slice step cannot be zero")
		}
		st = s
	}
	conv := func(v any, def int64) (int64, error) {
		if v == nil {
			return def, nil
		}
		i, ok := asInt(v)
		if !ok {
			return 0, fmt.Errorf("slice indices must be integers or None")
		}
		ln := int64(n)
		if i < 0 {
			i += ln
			if i < 0 {
				if st < 0 {
					i = -1
				} else {
					i = 0
				}
			}
		} else if i >= ln {
			if st < 0 {
				i = ln - 1
			} else {
				i = ln
			}
		}
		return i, nil
	}
	var lo, hi int64
	var err error
	if st > 0 {
		if lo, err = conv(start, 0); err != nil {
			return nil, err
		}
		if hi, err = conv(stop, int64(n)); err != nil {
			return nil, err
		}
	} else {
		if lo, err = conv(start, int64(n)-1); err != nil {
			return nil, err
		}
		if hi, err = conv(stop, -1); err != nil {
			return nil, err
		}
		if stop == nil {
			hi = -1
		}
	}
	var idx []int
	if st > 0 {
		for i := lo; i < hi; i += st {
			idx = append(idx, int(i))
		}
	} else {
		for i := lo; i > hi; i += st {
			idx = append(idx, int(i))
		}
	}
	return idx, nil
}

func (r *renderer) slice(obj any, s *sliceExpr, f *frame) (any, error) {
	var parts [3]any
	for i, x := range []expr{s.start, s.stop, s.step} {
		if x == nil {
			continue
		}
		v, err := r.eval(x, f)
		if err != nil {
			return nil, err
		}
		parts[i] = v
	}
	switch o := obj.(type) {
	case Undefined:
		return nil, r.errorf("%s", undefinedErr(o))
	case *List:
		idx, err := sliceBounds(len(o.Items), parts[0], parts[1], parts[2])
		if err != nil {
			return nil, r.errorf("%v", err)
		}
		out := &List{Items: make([]any, len(idx)), Tuple: o.Tuple}
		for i, j := range idx {
			out.Items[i] = o.Items[j]
		}
		return out, nil
	case string:
		rs := []rune(o)
		idx, err := sliceBounds(len(rs), parts[0], parts[1], parts[2])
		if err != nil {
			return nil, r.errorf("%v", err)
		}
		out := make([]rune, len(idx))
		for i, j := range idx {
			out[i] = rs[j]
		}
		return string(out), nil
	}
	return Undefined{}, nil
}

func (r *renderer) arith(op string, a, b any) (any, error) {
	if u, ok := a.(Undefined); ok {
		return nil, r.errorf("%s", undefinedErr(u))
	}
	if u, ok := b.(Undefined); ok {
		return nil, r.errorf("%s", undefinedErr(u))
	}
	ai, aInt := asInt(a)
	bi, bInt := asInt(b)
	af, aNum := toFloatNum(a)
	bf, bNum := toFloatNum(b)
	switch op {
	case "+":
		switch {
		case aInt && bInt:
			s := ai + bi
			if (s > ai) != (bi > 0) {
				return nil, r.errorf("integer overflow")
			}
			return s, nil
		case aNum && bNum:
			return af + bf, nil
		}
		switch av := a.(type) {
		case string:
			if bs, ok := b.(string); ok {
				if len(av)+len(bs) > r.limits.MaxOutputBytes {
					return nil, r.errorf("string longer than %d bytes", r.limits.MaxOutputBytes)
				}
				return av + bs, nil
			}
			return nil, r.errorf("can only concatenate str (not \"%s\") to str", typeName(b))
		case *List:
			if bl, ok := b.(*List); ok && bl.Tuple == av.Tuple {
				if len(av.Items)+len(bl.Items) > maxListItems {
					return nil, r.errorf("list longer than %d items", maxListItems)
				}
				items := make([]any, 0, len(av.Items)+len(bl.Items))
				items = append(append(items, av.Items...), bl.Items...)
				return &List{Items: items, Tuple: av.Tuple}, nil
			}
			return nil, r.errorf("can only concatenate %s (not \"%s\") to %s", typeName(a), typeName(b), typeName(a))
		}
	case "-":
		switch {
		case aInt && bInt:
			d := ai - bi
			if (d < ai) != (bi > 0) {
				return nil, r.errorf("integer overflow")
			}
			return d, nil
		case aNum && bNum:
			return af - bf, nil
		}
	case "*":
		switch {
		case aInt && bInt:
			if ai != 0 && (ai*bi)/ai != bi {
				return nil, r.errorf("integer overflow")
			}
			return ai * bi, nil
		case aNum && bNum:
			return af * bf, nil
		}
		if s, ok := a.(string); ok && bInt {
			return r.repeatStr(s, bi)
		}
		if s, ok := b.(string); ok && aInt {
			return r.repeatStr(s, ai)
		}
		if l, ok := a.(*List); ok && bInt {
			return r.repeatList(l, bi)
		}
		if l, ok := b.(*List); ok && aInt {
			return r.repeatList(l, ai)
		}
	case "/":
		if aNum && bNum {
			if bf == 0 {
				return nil, r.errorf("division by zero")
			}
			return af / bf, nil
		}
	case "//":
		switch {
		case aInt && bInt:
			if bi == 0 {
				return nil, r.errorf("integer division or modulo by zero")
			}
			q := ai / bi
			if (ai%bi != 0) && ((ai < 0) != (bi < 0)) {
				q--
			}
			return q, nil
		case aNum && bNum:
			if bf == 0 {
				return nil, r.errorf("float floor division by zero")
			}
			return math.Floor(af / bf), nil
		}
	case "%":
		switch {
		case aInt && bInt:
			if bi == 0 {
				return nil, r.errorf("integer division or modulo by zero")
			}
			m := ai % bi
			if m != 0 && ((m < 0) != (bi < 0)) {
				m += bi
			}
			return m, nil
		case aNum && bNum:
			if bf == 0 {
				return nil, r.errorf("float modulo")
			}
			m := math.Mod(af, bf)
			if m != 0 && ((m < 0) != (bf < 0)) {
				m += bf
			}
			return m, nil
		}
		if s, ok := a.(string); ok {
			return r.percentFormat(s, b)
		}
	case "**":
		switch {
		case aInt && bInt && bi >= 0:
			res := int64(1)
			for range bi {
				if ai != 0 && (res*ai)/ai != res {
					return nil, r.errorf("integer overflow")
				}
				res *= ai
				if res == 0 || res == 1 {
					break
				}
				if err := r.step(); err != nil {
					return nil, err
				}
			}
			return res, nil
		case aNum && bNum:
			return math.Pow(af, bf), nil
		}
	}
	return nil, r.errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(a), typeName(b))
}

func (r *renderer) repeatStr(s string, n int64) (any, error) {
	if n <= 0 {
		return "", nil
	}
	// n ≤ max/len, not len·n ≤ max: the product can overflow int64.
	if len(s) > 0 && n > int64(r.limits.MaxOutputBytes)/int64(len(s)) {
		return nil, r.errorf("string longer than %d bytes", r.limits.MaxOutputBytes)
	}
	return strings.Repeat(s, int(n)), nil
}

// maxListItems bounds any list a template builds (by *, + or otherwise).
const maxListItems = 1 << 20

func (r *renderer) repeatList(l *List, n int64) (any, error) {
	out := &List{Items: []any{}, Tuple: l.Tuple}
	if n <= 0 {
		return out, nil
	}
	if len(l.Items) > 0 && n > maxListItems/int64(len(l.Items)) {
		return nil, r.errorf("list longer than %d items", maxListItems)
	}
	for range n {
		out.Items = append(out.Items, l.Items...)
	}
	return out, nil
}

func (r *renderer) compareOp(op string, a, b any) (bool, error) {
	switch op {
	case "==":
		return equal(a, b), nil
	case "!=":
		return !equal(a, b), nil
	case "in", "notin":
		in, err := r.contains(b, a)
		if err != nil {
			return false, err
		}
		return in == (op == "in"), nil
	}
	if u, ok := a.(Undefined); ok {
		return false, r.errorf("%s", undefinedErr(u))
	}
	if u, ok := b.(Undefined); ok {
		return false, r.errorf("%s", undefinedErr(u))
	}
	c, err := compare(a, b)
	if err != nil {
		return false, r.errorf("%s", strings.Replace(err.Error(), "'<'", "'"+op+"'", 1))
	}
	if c == 2 {
		return false, nil
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

// contains is Python's "x in container".
func (r *renderer) contains(container, x any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := x.(string)
		if !ok {
			return false, r.errorf("'in <string>' requires string as left operand, not %s", typeName(x))
		}
		return strings.Contains(c, s), nil
	case *List:
		for _, it := range c.Items {
			if equal(it, x) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		if _, ok := hashKey(x); !ok {
			return false, r.errorf("unhashable type: '%s'", typeName(x))
		}
		_, ok := c.Get(x)
		return ok, nil
	case Undefined:
		return false, nil
	}
	return false, r.errorf("argument of type '%s' is not iterable", typeName(container))
}

func (r *renderer) loopAttr(l *loopInfo, name string) (any, error) {
	n := int64(len(l.items))
	i := int64(l.i)
	switch name {
	case "index":
		return i + 1, nil
	case "index0":
		return i, nil
	case "revindex":
		return n - i, nil
	case "revindex0":
		return n - i - 1, nil
	case "first":
		return i == 0, nil
	case "last":
		return i == n-1, nil
	case "length":
		return n, nil
	case "depth":
		return int64(1), nil
	case "depth0":
		return int64(0), nil
	case "previtem":
		if i == 0 {
			return Undefined{Name: "previtem"}, nil
		}
		return l.items[i-1], nil
	case "nextitem":
		if i == n-1 {
			return Undefined{Name: "nextitem"}, nil
		}
		return l.items[i+1], nil
	case "cycle":
		return &Func{name: "cycle", fn: func(r *renderer, args []any, _ *Dict) (any, error) {
			if len(args) == 0 {
				return nil, r.errorf("no items for cycling given")
			}
			return args[l.i%len(args)], nil
		}}, nil
	case "changed":
		return &Func{name: "changed", fn: func(r *renderer, args []any, _ *Dict) (any, error) {
			v := &List{Items: args}
			if l.last != nil && equal(&List{Items: l.last}, v) {
				return false, nil
			}
			l.last = append([]any{}, args...)
			return true, nil
		}}, nil
	}
	return Undefined{Name: name}, nil
}

// percentFormat is Python's "fmt % args" for %s %r %d %i %f %% (other conversions are errors).
func (r *renderer) percentFormat(format string, arg any) (any, error) {
	var args []any
	if l, ok := arg.(*List); ok && l.Tuple {
		args = l.Items
	} else {
		args = []any{arg}
	}
	var sb strings.Builder
	k := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			sb.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return nil, r.errorf("incomplete format")
		}
		if format[i] == '%' {
			sb.WriteByte('%')
			continue
		}
		if k >= len(args) {
			return nil, r.errorf("not enough arguments for format string")
		}
		a := args[k]
		k++
		switch format[i] {
		case 's':
			sb.WriteString(toStr(a))
		case 'r':
			sb.WriteString(repr(a))
		case 'd', 'i':
			if f, ok := toFloatNum(a); ok {
				fmt.Fprintf(&sb, "%d", int64(f))
			} else {
				return nil, r.errorf("%%d format: a real number is required, not %s", typeName(a))
			}
		case 'f':
			if f, ok := toFloatNum(a); ok {
				fmt.Fprintf(&sb, "%f", f)
			} else {
				return nil, r.errorf("must be real number, not %s", typeName(a))
			}
		default:
			return nil, r.errorf("unsupported format character '%c'", format[i])
		}
	}
	if k < len(args) {
		return nil, r.errorf("not all arguments converted during string formatting")
	}
	return sb.String(), nil
}

func runeLen(s string) int { return utf8.RuneCountInString(s) }
