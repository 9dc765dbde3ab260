package chat

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Filters, tests, methods and globals: the jinja2 built-ins (filters.py, tests.py,
// defaults.py) that chat templates use, with transformers' tojson, raise_exception and
// strftime_now, and the Python str/dict/list methods an ImmutableSandboxedEnvironment allows.

type filterFunc func(r *renderer, v any, args []any, kw *Dict) (any, error)
type testFunc func(r *renderer, v any, args []any) (any, error)

var filters map[string]filterFunc
var tests map[string]testFunc

func init() {
	filters = map[string]filterFunc{
		"tojson":      filterToJSON,
		"length":      filterLength,
		"count":       filterLength,
		"string":      func(r *renderer, v any, _ []any, _ *Dict) (any, error) { return toStr(v), nil },
		"safe":        func(r *renderer, v any, _ []any, _ *Dict) (any, error) { return toStr(v), nil },
		"escape":      filterEscape,
		"e":           filterEscape,
		"forceescape": filterEscape,
		"int":         filterInt,
		"float":       filterFloat,
		"list":        filterList,
		"first":       filterFirst,
		"last":        filterLast,
		"join":        filterJoin,
		"default":     filterDefault,
		"d":           filterDefault,
		"upper":       strFilter(pyUpper),
		"lower":       strFilter(pyLower),
		"capitalize":  strFilter(pyCapitalize),
		"title":       strFilter(jinjaTitle),
		"trim":        filterTrim,
		"replace":     filterReplace,
		"reverse":     filterReverse,
		"sort":        filterSort,
		"unique":      filterUnique,
		"items":       filterItems,
		"dictsort":    filterDictsort,
		"map":         filterMap,
		"select":      selectFilter(false, false),
		"reject":      selectFilter(true, false),
		"selectattr":  selectFilter(false, true),
		"rejectattr":  selectFilter(true, true),
		"abs":         filterAbs,
		"round":       filterRound,
		"min":         minMaxFilter(-1),
		"max":         minMaxFilter(1),
		"sum":         filterSum,
		"indent":      filterIndent,
		"wordcount": func(r *renderer, v any, _ []any, _ *Dict) (any, error) {
			return int64(len(strings.Fields(toStr(v)))), nil
		},
		"center": filterCenter,
		"format": filterFormat,
		"attr":   filterAttr,
		"pprint": func(r *renderer, v any, _ []any, _ *Dict) (any, error) { return repr(v), nil },
		"batch":  filterBatch,
	}
	tests = map[string]testFunc{
		"defined":     func(r *renderer, v any, _ []any) (any, error) { _, u := v.(Undefined); return !u, nil },
		"undefined":   func(r *renderer, v any, _ []any) (any, error) { _, u := v.(Undefined); return u, nil },
		"none":        func(r *renderer, v any, _ []any) (any, error) { return v == nil, nil },
		"boolean":     func(r *renderer, v any, _ []any) (any, error) { _, ok := v.(bool); return ok, nil },
		"true":        func(r *renderer, v any, _ []any) (any, error) { b, ok := v.(bool); return ok && b, nil },
		"false":       func(r *renderer, v any, _ []any) (any, error) { b, ok := v.(bool); return ok && !b, nil },
		"integer":     func(r *renderer, v any, _ []any) (any, error) { _, ok := v.(int64); return ok, nil },
		"float":       func(r *renderer, v any, _ []any) (any, error) { _, ok := v.(float64); return ok, nil },
		"number":      func(r *renderer, v any, _ []any) (any, error) { _, ok := toFloatNum(v); return ok, nil },
		"string":      func(r *renderer, v any, _ []any) (any, error) { _, ok := v.(string); return ok, nil },
		"mapping":     func(r *renderer, v any, _ []any) (any, error) { _, ok := v.(*Dict); return ok, nil },
		"sequence":    testSequence,
		"iterable":    testIterable,
		"callable":    testCallable,
		"sameas":      testSameAs,
		"odd":         intTest(func(i int64) bool { return i%2 != 0 }),
		"even":        intTest(func(i int64) bool { return i%2 == 0 }),
		"divisibleby": testDivisibleBy,
		"lower":       func(r *renderer, v any, _ []any) (any, error) { s, ok := v.(string); return ok && pyIsLower(s), nil },
		"upper":       func(r *renderer, v any, _ []any) (any, error) { s, ok := v.(string); return ok && pyIsUpper(s), nil },
		"escaped":     func(r *renderer, v any, _ []any) (any, error) { return false, nil },
		"in":          testIn,
		"filter": func(r *renderer, v any, _ []any) (any, error) {
			s, _ := v.(string)
			_, ok := filters[s]
			return ok, nil
		},
		"test": func(r *renderer, v any, _ []any) (any, error) { s, _ := v.(string); _, ok := tests[s]; return ok, nil },
	}
	for _, op := range []string{"==", "!=", "<", "<=", ">", ">="} {
		fn := func(r *renderer, v any, args []any) (any, error) {
			if len(args) != 1 {
				return nil, r.errorf("test %s takes 1 argument", op)
			}
			return r.compareOp(op, v, args[0])
		}
		for _, n := range opNames(op) {
			tests[n] = fn
		}
	}
}

func opNames(op string) []string {
	switch op {
	case "==":
		return []string{"eq", "equalto", "=="}
	case "!=":
		return []string{"ne", "!="}
	case "<":
		return []string{"lt", "lessthan", "<"}
	case "<=":
		return []string{"le", "<="}
	case ">":
		return []string{"gt", "greaterthan", ">"}
	}
	return []string{"ge", ">="}
}

// kwArg returns the argument named name, given positionally at pos or by keyword.
func kwArg(args []any, kw *Dict, pos int, name string, def any) any {
	if pos >= 0 && pos < len(args) {
		return args[pos]
	}
	if kw != nil {
		if v, ok := kw.Get(name); ok {
			return v
		}
	}
	return def
}

// ---- filters ----

func filterToJSON(r *renderer, v any, args []any, kw *Dict) (any, error) {
	o := defaultJSONOptions()
	o.ensureASCII = truthy(kwArg(args, kw, 0, "ensure_ascii", false))
	switch ind := kwArg(args, kw, 1, "indent", nil).(type) {
	case nil:
	case int64:
		o.indented = true
		o.indent = strings.Repeat(" ", int(max(ind, 0)))
		o.itemSep = ","
	case string:
		o.indented = true
		o.indent = ind
		o.itemSep = ","
	default:
		return nil, r.errorf("tojson: indent must be an int or a string, not %s", typeName(ind))
	}
	if seps := kwArg(args, kw, 2, "separators", nil); seps != nil {
		l, ok := seps.(*List)
		if !ok || len(l.Items) != 2 {
			return nil, r.errorf("tojson: separators must be a pair of strings")
		}
		a, ok1 := l.Items[0].(string)
		b, ok2 := l.Items[1].(string)
		if !ok1 || !ok2 {
			return nil, r.errorf("tojson: separators must be a pair of strings")
		}
		o.itemSep, o.keySep = a, b
	}
	o.sortKeys = truthy(kwArg(args, kw, 3, "sort_keys", false))
	s, err := toJSON(v, o)
	if err != nil {
		return nil, r.errorf("%v", err)
	}
	return s, nil
}

func length(v any) (int, bool) {
	switch v := v.(type) {
	case string:
		return runeLen(v), true
	case *List:
		return len(v.Items), true
	case *Dict:
		return v.Len(), true
	case Undefined:
		return 0, true
	case *Namespace:
		return v.attrs.Len(), true
	}
	return 0, false
}

func filterLength(r *renderer, v any, _ []any, _ *Dict) (any, error) {
	n, ok := length(v)
	if !ok {
		return nil, r.errorf("object of type '%s' has no len()", typeName(v))
	}
	return int64(n), nil
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

func filterEscape(r *renderer, v any, _ []any, _ *Dict) (any, error) {
	return htmlEscape(toStr(v)), nil
}

func filterInt(r *renderer, v any, args []any, kw *Dict) (any, error) {
	def := kwArg(args, kw, 0, "default", int64(0))
	base, _ := asInt(kwArg(args, kw, 1, "base", int64(10)))
	switch x := v.(type) {
	case int64:
		return x, nil
	case bool:
		i, _ := asInt(x)
		return i, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return def, nil
		}
		return int64(x), nil
	case string:
		s := strings.TrimSpace(strings.ReplaceAll(x, "_", ""))
		if i, err := strconv.ParseInt(s, int(base), 64); err == nil {
			return i, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return int64(f), nil
		}
	}
	return def, nil
}

func filterFloat(r *renderer, v any, args []any, kw *Dict) (any, error) {
	def := kwArg(args, kw, 0, "default", 0.0)
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64, bool:
		f, _ := toFloatNum(x)
		return f, nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
			return f, nil
		}
	}
	return def, nil
}

func filterList(r *renderer, v any, _ []any, _ *Dict) (any, error) {
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	return &List{Items: append([]any{}, items...)}, nil
}

func filterFirst(r *renderer, v any, _ []any, _ *Dict) (any, error) {
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{Name: "first"}, nil
	}
	return items[0], nil
}

func filterLast(r *renderer, v any, _ []any, _ *Dict) (any, error) {
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{Name: "last"}, nil
	}
	return items[len(items)-1], nil
}

func (r *renderer) attrPath(v any, attr any) (any, error) {
	if attr == nil {
		return v, nil
	}
	if i, ok := attr.(int64); ok {
		return r.getitem(v, i)
	}
	for _, part := range strings.Split(toStr(attr), ".") {
		var err error
		if i, e := strconv.ParseInt(part, 10, 64); e == nil {
			v, err = r.getitem(v, i)
		} else {
			v, err = r.getitem(v, part)
		}
		if err != nil {
			return nil, err
		}
	}
	return v, nil
}

func filterJoin(r *renderer, v any, args []any, kw *Dict) (any, error) {
	sep := toStr(kwArg(args, kw, 0, "d", ""))
	attr := kwArg(args, kw, 1, "attribute", nil)
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	parts := make([]string, len(items))
	for i, it := range items {
		x, err := r.attrPath(it, attr)
		if err != nil {
			return nil, err
		}
		parts[i] = toStr(x)
	}
	return strings.Join(parts, sep), nil
}

func filterDefault(r *renderer, v any, args []any, kw *Dict) (any, error) {
	def := kwArg(args, kw, 0, "default_value", "")
	boolean := truthy(kwArg(args, kw, 1, "boolean", false))
	if _, u := v.(Undefined); u || (boolean && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

func strFilter(fn func(string) string) filterFunc {
	return func(r *renderer, v any, _ []any, _ *Dict) (any, error) { return fn(toStr(v)), nil }
}

// pyCapitalize is Python's str.capitalize: first character upper (title) case, rest lower.
func pyCapitalize(s string) string {
	rs := []rune(s)
	for i := range rs {
		if i == 0 {
			rs[i] = unicode.ToTitle(rs[i])
		} else {
			rs[i] = unicode.ToLower(rs[i])
		}
	}
	return string(rs)
}

// jinjaTitle is jinja2's do_title: words split at runs of [-\s({\[<], each capitalized.
func jinjaTitle(s string) string {
	var sb strings.Builder
	start := true
	for _, c := range s {
		if c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || isPySpace(c) {
			sb.WriteRune(c)
			start = true
			continue
		}
		if start {
			sb.WriteRune(unicode.ToUpper(c))
		} else {
			sb.WriteRune(unicode.ToLower(c))
		}
		start = false
	}
	return sb.String()
}

// pyStrip is Python's str.strip/lstrip/rstrip: chars nil means whitespace.
func pyStrip(s string, chars any, left, right bool) string {
	in := isPySpace
	if cs, ok := chars.(string); ok {
		in = func(r rune) bool { return strings.ContainsRune(cs, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, in)
	}
	if right {
		s = strings.TrimRightFunc(s, in)
	}
	return s
}

func filterTrim(r *renderer, v any, args []any, kw *Dict) (any, error) {
	return pyStrip(toStr(v), kwArg(args, kw, 0, "chars", nil), true, true), nil
}

func filterReplace(r *renderer, v any, args []any, kw *Dict) (any, error) {
	if len(args) < 2 {
		return nil, r.errorf("replace needs old and new")
	}
	n := int64(-1)
	if c := kwArg(args, kw, 2, "count", nil); c != nil {
		n, _ = asInt(c)
	}
	return pyReplace(toStr(v), toStr(args[0]), toStr(args[1]), n), nil
}

func pyReplace(s, old, new string, n int64) string {
	if n < 0 {
		n = -1
	}
	return strings.Replace(s, old, new, int(max(n, -1)))
}

func filterReverse(r *renderer, v any, _ []any, _ *Dict) (any, error) {
	if s, ok := v.(string); ok {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs), nil
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return &List{Items: out}, nil
}

// sortKey lower-cases strings unless caseSensitive (jinja2's ignore_case).
func sortKey(v any, caseSensitive bool) any {
	if s, ok := v.(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

func (r *renderer) sortItems(items []any, keyOf func(any) (any, error), reverse bool) ([]any, error) {
	keys := make([]any, len(items))
	for i, it := range items {
		k, err := keyOf(it)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var cmpErr error
	sort.SliceStable(idx, func(a, b int) bool {
		c, err := compare(keys[idx[a]], keys[idx[b]])
		if err != nil && cmpErr == nil {
			cmpErr = err
		}
		if reverse {
			return c > 0 && c != 2
		}
		return c < 0
	})
	if cmpErr != nil {
		return nil, r.errorf("%v", cmpErr)
	}
	out := make([]any, len(items))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out, nil
}

func filterSort(r *renderer, v any, args []any, kw *Dict) (any, error) {
	reverse := truthy(kwArg(args, kw, 0, "reverse", false))
	cs := truthy(kwArg(args, kw, 1, "case_sensitive", false))
	attr := kwArg(args, kw, 2, "attribute", nil)
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	out, err := r.sortItems(items, func(it any) (any, error) {
		x, err := r.attrPath(it, attr)
		return sortKey(x, cs), err
	}, reverse)
	if err != nil {
		return nil, err
	}
	return &List{Items: out}, nil
}

func filterUnique(r *renderer, v any, args []any, kw *Dict) (any, error) {
	cs := truthy(kwArg(args, kw, 0, "case_sensitive", false))
	attr := kwArg(args, kw, 1, "attribute", nil)
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	var out, seen []any
	for _, it := range items {
		x, err := r.attrPath(it, attr)
		if err != nil {
			return nil, err
		}
		k := sortKey(x, cs)
		dup := false
		for _, s := range seen {
			if equal(s, k) {
				dup = true
				break
			}
		}
		if !dup {
			seen = append(seen, k)
			out = append(out, it)
		}
	}
	return &List{Items: append([]any{}, out...)}, nil
}

func filterItems(r *renderer, v any, _ []any, _ *Dict) (any, error) {
	switch d := v.(type) {
	case Undefined:
		return &List{Items: []any{}}, nil
	case *Dict:
		out := make([]any, d.Len())
		for i, k := range d.keys {
			out[i] = &List{Items: []any{k, d.vals[i]}, Tuple: true}
		}
		return &List{Items: out}, nil
	}
	return nil, r.errorf("can only get item pairs from a mapping")
}

func filterDictsort(r *renderer, v any, args []any, kw *Dict) (any, error) {
	cs := truthy(kwArg(args, kw, 0, "case_sensitive", false))
	by := toStr(kwArg(args, kw, 1, "by", "key"))
	reverse := truthy(kwArg(args, kw, 2, "reverse", false))
	pairs, err := filterItems(r, v, nil, nil)
	if err != nil {
		return nil, err
	}
	pos := 0
	switch by {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, r.errorf("you can only sort by either \"key\" or \"value\"")
	}
	out, err := r.sortItems(pairs.(*List).Items, func(it any) (any, error) {
		return sortKey(it.(*List).Items[pos], cs), nil
	}, reverse)
	if err != nil {
		return nil, err
	}
	return &List{Items: out}, nil
}

func filterMap(r *renderer, v any, args []any, kw *Dict) (any, error) {
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(items))
	if len(args) == 0 && kw != nil {
		attr, ok := kw.Get("attribute")
		if !ok {
			return nil, r.errorf("map requires a filter name or attribute=")
		}
		def, hasDef := kw.Get("default")
		for _, it := range items {
			x, err := r.attrPath(it, attr)
			if err != nil {
				return nil, err
			}
			if _, u := x.(Undefined); u && hasDef {
				x = def
			}
			out = append(out, x)
		}
		return &List{Items: out}, nil
	}
	if len(args) == 0 {
		return nil, r.errorf("map requires a filter name or attribute=")
	}
	name := toStr(args[0])
	fn, ok := filters[name]
	if !ok {
		return nil, r.errorf("no filter named '%s'", name)
	}
	for _, it := range items {
		x, err := fn(r, it, args[1:], kw)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return &List{Items: out}, nil
}

func selectFilter(reject, byAttr bool) filterFunc {
	return func(r *renderer, v any, args []any, kw *Dict) (any, error) {
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		var attr any
		if byAttr {
			if len(args) == 0 {
				return nil, r.errorf("missing parameter for attribute name")
			}
			attr, args = args[0], args[1:]
		}
		var test testFunc
		if len(args) > 0 {
			name := toStr(args[0])
			if test = tests[name]; test == nil {
				return nil, r.errorf("no test named '%s'", name)
			}
			args = args[1:]
		}
		out := []any{}
		for _, it := range items {
			x := it
			if byAttr {
				if x, err = r.attrPath(it, attr); err != nil {
					return nil, err
				}
			}
			ok := truthy(x)
			if test != nil {
				res, err := test(r, x, args)
				if err != nil {
					return nil, err
				}
				ok = truthy(res)
			}
			if ok != reject {
				out = append(out, it)
			}
		}
		return &List{Items: out}, nil
	}
}

func filterAbs(r *renderer, v any, _ []any, _ *Dict) (any, error) {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			if x == math.MinInt64 {
				return nil, r.errorf("integer overflow")
			}
			return -x, nil
		}
		return x, nil
	case float64:
		return math.Abs(x), nil
	case bool:
		i, _ := asInt(x)
		return i, nil
	}
	return nil, r.errorf("bad operand type for abs(): '%s'", typeName(v))
}

func filterRound(r *renderer, v any, args []any, kw *Dict) (any, error) {
	prec, _ := asInt(kwArg(args, kw, 0, "precision", int64(0)))
	method := toStr(kwArg(args, kw, 1, "method", "common"))
	if i, ok := v.(int64); ok && method == "common" && prec >= 0 {
		return i, nil
	}
	f, ok := toFloatNum(v)
	if !ok {
		return nil, r.errorf("round: a number is required, not %s", typeName(v))
	}
	p := math.Pow(10, float64(prec))
	switch method {
	case "common":
		// Python's round() rounds half to even on the exact binary value.
		s := strconv.FormatFloat(f, 'f', int(max(prec, 0)), 64)
		if prec >= 0 {
			g, _ := strconv.ParseFloat(s, 64)
			return g, nil
		}
		return math.RoundToEven(f*p) / p, nil
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	}
	return nil, r.errorf("method must be common, ceil or floor")
}

func minMaxFilter(sign int) filterFunc {
	return func(r *renderer, v any, args []any, kw *Dict) (any, error) {
		cs := truthy(kwArg(args, kw, 0, "case_sensitive", false))
		attr := kwArg(args, kw, 1, "attribute", nil)
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{Name: "min/max"}, nil
		}
		best := items[0]
		bk, err := r.attrPath(best, attr)
		if err != nil {
			return nil, err
		}
		bk = sortKey(bk, cs)
		for _, it := range items[1:] {
			k, err := r.attrPath(it, attr)
			if err != nil {
				return nil, err
			}
			k = sortKey(k, cs)
			c, err := compare(k, bk)
			if err != nil {
				return nil, r.errorf("%v", err)
			}
			if c == sign {
				best, bk = it, k
			}
		}
		return best, nil
	}
}

func filterSum(r *renderer, v any, args []any, kw *Dict) (any, error) {
	attr := kwArg(args, kw, 0, "attribute", nil)
	total := kwArg(args, kw, 1, "start", int64(0))
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		x, err := r.attrPath(it, attr)
		if err != nil {
			return nil, err
		}
		if total, err = r.arith("+", total, x); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterIndent(r *renderer, v any, args []any, kw *Dict) (any, error) {
	ind := "    "
	switch w := kwArg(args, kw, 0, "width", int64(4)).(type) {
	case string:
		ind = w
	default:
		n, _ := asInt(w)
		ind = strings.Repeat(" ", int(max(min(n, 1<<16), 0)))
	}
	first := truthy(kwArg(args, kw, 1, "first", false))
	blank := truthy(kwArg(args, kw, 2, "blank", false))
	s := toStr(v) + "\n"
	lines := strings.Split(s, "\n")
	lines = lines[:len(lines)-1]
	for i := range lines {
		if i == 0 && !first {
			continue
		}
		if blank || lines[i] != "" {
			lines[i] = ind + lines[i]
		}
	}
	return strings.Join(lines, "\n"), nil
}

func filterCenter(r *renderer, v any, args []any, kw *Dict) (any, error) {
	w, _ := asInt(kwArg(args, kw, 0, "width", int64(80)))
	s := toStr(v)
	n := runeLen(s)
	if int(w) <= n || w > 1<<16 {
		return s, nil
	}
	total := int(w) - n
	left := total / 2
	if total%2 == 1 && int(w)%2 == 1 { // Python centers with the extra space on the right unless...
		left++
	}
	return strings.Repeat(" ", left) + s + strings.Repeat(" ", total-left), nil
}

func filterFormat(r *renderer, v any, args []any, kw *Dict) (any, error) {
	if kw != nil && kw.Len() > 0 {
		return nil, r.errorf("format with keyword arguments is not supported")
	}
	var a any = &List{Items: args, Tuple: true}
	return r.percentFormat(toStr(v), a)
}

func filterAttr(r *renderer, v any, args []any, _ *Dict) (any, error) {
	if len(args) != 1 {
		return nil, r.errorf("attr takes one argument")
	}
	return r.getattr(v, toStr(args[0]))
}

func filterBatch(r *renderer, v any, args []any, kw *Dict) (any, error) {
	n, _ := asInt(kwArg(args, kw, 0, "linecount", int64(1)))
	if n <= 0 {
		return nil, r.errorf("batch size must be positive")
	}
	fill := kwArg(args, kw, 1, "fill_with", nil)
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	out := []any{}
	for i := 0; i < len(items); i += int(n) {
		end := min(i+int(n), len(items))
		row := append([]any{}, items[i:end]...)
		if fill != nil {
			for len(row) < int(n) {
				row = append(row, fill)
			}
		}
		out = append(out, &List{Items: row})
	}
	return &List{Items: out}, nil
}

// ---- tests ----

func testSequence(r *renderer, v any, _ []any) (any, error) {
	switch v.(type) {
	case string, *List, *Dict, Undefined:
		return true, nil
	}
	return false, nil
}

func testIterable(r *renderer, v any, _ []any) (any, error) {
	switch v.(type) {
	case string, *List, *Dict, Undefined:
		return true, nil
	}
	return false, nil
}

func testCallable(r *renderer, v any, _ []any) (any, error) {
	switch v.(type) {
	case *Macro, *Func:
		return true, nil
	}
	return false, nil
}

func testSameAs(r *renderer, v any, args []any) (any, error) {
	if len(args) != 1 {
		return nil, r.errorf("sameas takes one argument")
	}
	o := args[0]
	switch v.(type) {
	case nil, bool:
		return v == o, nil
	case *List, *Dict, *Namespace, *Macro, *Func:
		return v == o, nil
	}
	return equal(v, o) && typeName(v) == typeName(o), nil
}

func intTest(fn func(int64) bool) testFunc {
	return func(r *renderer, v any, _ []any) (any, error) {
		i, ok := v.(int64)
		if !ok {
			return nil, r.errorf("odd/even need an integer, not %s", typeName(v))
		}
		return fn(i), nil
	}
}

func testDivisibleBy(r *renderer, v any, args []any) (any, error) {
	if len(args) != 1 {
		return nil, r.errorf("divisibleby takes one argument")
	}
	m, err := r.arith("%", v, args[0])
	if err != nil {
		return nil, err
	}
	return equal(m, int64(0)), nil
}

func testIn(r *renderer, v any, args []any) (any, error) {
	if len(args) != 1 {
		return nil, r.errorf("in takes one argument")
	}
	return r.contains(args[0], v)
}

func pyIsLower(s string) bool {
	cased := false
	for _, c := range s {
		if unicode.IsUpper(c) || unicode.IsTitle(c) {
			return false
		}
		if unicode.IsLower(c) {
			cased = true
		}
	}
	return cased
}

func pyIsUpper(s string) bool {
	cased := false
	for _, c := range s {
		if unicode.IsLower(c) || unicode.IsTitle(c) {
			return false
		}
		if unicode.IsUpper(c) {
			cased = true
		}
	}
	return cased
}

// ---- methods ----

func method(name string, fn func(r *renderer, args []any, kw *Dict) (any, error)) *Func {
	return &Func{name: name, fn: fn}
}

func unsafeMethod(typ, name string) *Func {
	return method(name, func(r *renderer, _ []any, _ *Dict) (any, error) {
		return nil, r.errorf("access to attribute '%s' of '%s' object is unsafe", name, typ)
	})
}

func dictMethod(d *Dict, name string) (*Func, bool) {
	switch name {
	case "items":
		return method(name, func(r *renderer, _ []any, _ *Dict) (any, error) { return filterItems(r, d, nil, nil) }), true
	case "keys":
		return method(name, func(r *renderer, _ []any, _ *Dict) (any, error) { return &List{Items: d.Keys()}, nil }), true
	case "values":
		return method(name, func(r *renderer, _ []any, _ *Dict) (any, error) {
			return &List{Items: append([]any{}, d.vals...)}, nil
		}), true
	case "get":
		return method(name, func(r *renderer, args []any, _ *Dict) (any, error) {
			if len(args) < 1 || len(args) > 2 {
				return nil, r.errorf("get expected 1 or 2 arguments, got %d", len(args))
			}
			if v, ok := d.Get(args[0]); ok {
				return v, nil
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return nil, nil
		}), true
	case "copy":
		return method(name, func(r *renderer, _ []any, _ *Dict) (any, error) {
			c := NewDict()
			for i, k := range d.keys {
				_ = c.Set(k, d.vals[i])
			}
			return c, nil
		}), true
	case "pop", "popitem", "setdefault", "update", "clear":
		return unsafeMethod("dict", name), true
	}
	return nil, false
}

func listMethod(l *List, name string) (*Func, bool) {
	switch name {
	case "index":
		return method(name, func(r *renderer, args []any, _ *Dict) (any, error) {
			if len(args) != 1 {
				return nil, r.errorf("index takes one argument")
			}
			for i, it := range l.Items {
				if equal(it, args[0]) {
					return int64(i), nil
				}
			}
			return nil, r.errorf("%s is not in list", repr(args[0]))
		}), true
	case "count":
		return method(name, func(r *renderer, args []any, _ *Dict) (any, error) {
			if len(args) != 1 {
				return nil, r.errorf("count takes one argument")
			}
			n := int64(0)
			for _, it := range l.Items {
				if equal(it, args[0]) {
					n++
				}
			}
			return n, nil
		}), true
	case "copy":
		return method(name, func(r *renderer, _ []any, _ *Dict) (any, error) {
			return &List{Items: append([]any{}, l.Items...), Tuple: l.Tuple}, nil
		}), true
	case "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear":
		if l.Tuple {
			return nil, false
		}
		return unsafeMethod("list", name), true
	}
	return nil, false
}

func strArg(r *renderer, args []any, i int, what string) (string, error) {
	if i >= len(args) {
		return "", r.errorf("%s: missing argument", what)
	}
	s, ok := args[i].(string)
	if !ok {
		return "", r.errorf("%s: argument must be str, not %s", what, typeName(args[i]))
	}
	return s, nil
}

func strMethod(s, name string) (*Func, bool) {
	switch name {
	case "startswith", "endswith":
		return method(name, func(r *renderer, args []any, _ *Dict) (any, error) {
			if len(args) < 1 {
				return nil, r.errorf("%s takes at least 1 argument", name)
			}
			var prefixes []any
			if l, ok := args[0].(*List); ok && l.Tuple {
				prefixes = l.Items
			} else {
				prefixes = []any{args[0]}
			}
			sub := s
			if len(args) > 1 {
				rs := []rune(s)
				idx, err := sliceBounds(len(rs), args[1], kwArg(args, nil, 2, "", nil), nil)
				if err != nil {
					return nil, r.errorf("%v", err)
				}
				if len(idx) == 0 {
					sub = ""
				} else {
					sub = string(rs[idx[0] : idx[len(idx)-1]+1])
				}
			}
			for _, p := range prefixes {
				ps, ok := p.(string)
				if !ok {
					return nil, r.errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(p))
				}
				if (name == "startswith" && strings.HasPrefix(sub, ps)) || (name == "endswith" && strings.HasSuffix(sub, ps)) {
					return true, nil
				}
			}
			return false, nil
		}), true
	case "strip", "lstrip", "rstrip":
		return method(name, func(r *renderer, args []any, _ *Dict) (any, error) {
			var chars any
			if len(args) > 0 {
				chars = args[0]
				if _, ok := chars.(string); !ok && chars != nil {
					return nil, r.errorf("%s arg must be None or str", name)
				}
			}
			return pyStrip(s, chars, name != "rstrip", name != "lstrip"), nil
		}), true
	case "split", "rsplit":
		return method(name, func(r *renderer, args []any, kw *Dict) (any, error) {
			sep := kwArg(args, kw, 0, "sep", nil)
			maxs, _ := asInt(kwArg(args, kw, 1, "maxsplit", int64(-1)))
			var parts []string
			if sep == nil {
				parts = pySplitWhitespace(s, int(maxs), name == "rsplit")
			} else {
				ss, ok := sep.(string)
				if !ok {
					return nil, r.errorf("must be str or None, not %s", typeName(sep))
				}
				if ss == "" {
					return nil, r.errorf("empty separator")
				}
				if name == "split" {
					parts = strings.SplitN(s, ss, splitN(maxs))
				} else {
					parts = rsplitN(s, ss, maxs)
				}
			}
			out := make([]any, len(parts))
			for i, p := range parts {
				out[i] = p
			}
			return &List{Items: out}, nil
		}), true
	case "splitlines":
		return method(name, func(r *renderer, args []any, kw *Dict) (any, error) {
			keep := truthy(kwArg(args, kw, 0, "keepends", false))
			return &List{Items: pySplitlines(s, keep)}, nil
		}), true
	case "upper":
		return method(name, func(*renderer, []any, *Dict) (any, error) { return pyUpper(s), nil }), true
	case "lower":
		return method(name, func(*renderer, []any, *Dict) (any, error) { return pyLower(s), nil }), true
	case "title":
		return method(name, func(*renderer, []any, *Dict) (any, error) { return pyTitle(s), nil }), true
	case "capitalize":
		return method(name, func(*renderer, []any, *Dict) (any, error) { return pyCapitalize(s), nil }), true
	case "replace":
		return method(name, func(r *renderer, args []any, _ *Dict) (any, error) {
			old, err := strArg(r, args, 0, "replace")
			if err != nil {
				return nil, err
			}
			nw, err := strArg(r, args, 1, "replace")
			if err != nil {
				return nil, err
			}
			n := int64(-1)
			if len(args) > 2 {
				n, _ = asInt(args[2])
			}
			return pyReplace(s, old, nw, n), nil
		}), true
	case "find", "rfind", "index", "rindex", "count":
		return method(name, func(r *renderer, args []any, _ *Dict) (any, error) {
			sub, err := strArg(r, args, 0, name)
			if err != nil {
				return nil, err
			}
			if name == "count" {
				if sub == "" {
					return int64(runeLen(s) + 1), nil
				}
				return int64(strings.Count(s, sub)), nil
			}
			var i int
			if name == "find" || name == "index" {
				i = strings.Index(s, sub)
			} else {
				i = strings.LastIndex(s, sub)
			}
			if i < 0 {
				if name == "index" || name == "rindex" {
					return nil, r.errorf("substring not found")
				}
				return int64(-1), nil
			}
			return int64(runeLen(s[:i])), nil
		}), true
	case "join":
		return method(name, func(r *renderer, args []any, _ *Dict) (any, error) {
			if len(args) != 1 {
				return nil, r.errorf("join takes one argument")
			}
			items, err := r.iterate(args[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				p, ok := it.(string)
				if !ok {
					return nil, r.errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = p
			}
			return strings.Join(parts, s), nil
		}), true
	case "removeprefix", "removesuffix":
		return method(name, func(r *renderer, args []any, _ *Dict) (any, error) {
			a, err := strArg(r, args, 0, name)
			if err != nil {
				return nil, err
			}
			if name == "removeprefix" {
				return strings.TrimPrefix(s, a), nil
			}
			return strings.TrimSuffix(s, a), nil
		}), true
	case "isdigit", "isalpha", "isalnum", "isspace", "isupper", "islower", "isnumeric", "isdecimal":
		return method(name, func(*renderer, []any, *Dict) (any, error) { return strPredicate(s, name), nil }), true
	case "format":
		return method(name, func(r *renderer, args []any, kw *Dict) (any, error) {
			return nil, r.errorf("str.format is not supported")
		}), true
	}
	return nil, false
}

func splitN(maxs int64) int {
	if maxs < 0 {
		return -1
	}
	return int(min(maxs, 1<<30)) + 1
}

func rsplitN(s, sep string, maxs int64) []string {
	if maxs < 0 {
		return strings.Split(s, sep)
	}
	var out []string
	for maxs > 0 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		out = append(out, s[i+len(sep):])
		s = s[:i]
		maxs--
	}
	out = append(out, s)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// pySplitWhitespace is str.split() / str.rsplit() with no separator.
func pySplitWhitespace(s string, maxs int, right bool) []string {
	fields := strings.FieldsFunc(s, isPySpace)
	if maxs < 0 || len(fields) <= maxs+1 {
		return fields
	}
	if !right {
		// the remainder keeps its inner whitespace: cut after the maxs-th field
		rest := s
		out := make([]string, 0, maxs+1)
		for range maxs {
			rest = strings.TrimLeftFunc(rest, isPySpace)
			i := strings.IndexFunc(rest, isPySpace)
			out = append(out, rest[:i])
			rest = rest[i:]
		}
		return append(out, strings.TrimLeftFunc(rest, isPySpace))
	}
	rest := s
	var out []string
	for range maxs {
		rest = strings.TrimRightFunc(rest, isPySpace)
		i := strings.LastIndexFunc(rest, isPySpace)
		out = append([]string{rest[i+1:]}, out...)
		rest = rest[:i+1]
	}
	return append([]string{strings.TrimRightFunc(rest, isPySpace)}, out...)
}

func pySplitlines(s string, keep bool) []any {
	out := []any{}
	start := 0
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch c {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		default:
			continue
		}
		end := i + 1
		if c == '\r' && i+1 < len(rs) && rs[i+1] == '\n' {
			end = i + 2
		}
		if keep {
			out = append(out, string(rs[start:end]))
		} else {
			out = append(out, string(rs[start:i]))
		}
		start = end
		i = end - 1
	}
	if start < len(rs) {
		out = append(out, string(rs[start:]))
	}
	return out
}

// upperSpecial holds the unconditional one-to-many upper-case mappings of Unicode's
// SpecialCasing.txt that Python's str.upper applies and Go's strings.ToUpper does not
// (the Latin and ligature ones; the Greek iota-subscript and Armenian ones stay simple).
var upperSpecial = map[rune]string{
	0x00DF: "SS", 0x0149: "\u02BCN", 0x01F0: "J\u030C", 0xFB00: "FF", 0xFB01: "FI", 0xFB02: "FL",
	0xFB03: "FFI", 0xFB04: "FFL", 0xFB05: "ST", 0xFB06: "ST", 0x1E96: "H\u0331", 0x1E97: "T\u0308",
	0x1E98: "W\u030A", 0x1E99: "Y\u030A", 0x1E9A: "A\u02BE",
}

// pyUpper is Python's str.upper (full case mapping for the characters in upperSpecial).
func pyUpper(s string) string {
	var sb strings.Builder
	for _, c := range s {
		if m, ok := upperSpecial[c]; ok {
			sb.WriteString(m)
		} else {
			sb.WriteRune(unicode.ToUpper(c))
		}
	}
	return sb.String()
}

// pyLower is Python's str.lower for all but the context-dependent final sigma: U+0130 becomes
// "i" + U+0307 as SpecialCasing.txt says.
func pyLower(s string) string {
	var sb strings.Builder
	for _, c := range s {
		if c == 0x0130 {
			sb.WriteString("i\u0307")
		} else {
			sb.WriteRune(unicode.ToLower(c))
		}
	}
	return sb.String()
}

// pyTitle is Python's str.title.
func pyTitle(s string) string {
	var sb strings.Builder
	prevCased := false
	for _, c := range s {
		cased := unicode.IsUpper(c) || unicode.IsLower(c) || unicode.IsTitle(c)
		switch {
		case cased && prevCased:
			sb.WriteRune(unicode.ToLower(c))
		case cased:
			sb.WriteRune(unicode.ToTitle(c))
		default:
			sb.WriteRune(c)
		}
		prevCased = cased
	}
	return sb.String()
}

func strPredicate(s, name string) bool {
	if s == "" {
		return false
	}
	switch name {
	case "isupper":
		return pyIsUpper(s)
	case "islower":
		return pyIsLower(s)
	}
	for _, c := range s {
		var ok bool
		switch name {
		case "isdigit", "isdecimal":
			ok = unicode.IsDigit(c)
		case "isnumeric":
			ok = unicode.IsNumber(c)
		case "isalpha":
			ok = unicode.IsLetter(c)
		case "isalnum":
			ok = unicode.IsLetter(c) || unicode.IsNumber(c)
		case "isspace":
			ok = isPySpace(c)
		}
		if !ok {
			return false
		}
	}
	return true
}

// ---- globals ----

// maxRange is jinja2's sandbox MAX_RANGE.
const maxRange = 100000

func globals(now func() time.Time) map[string]any {
	return map[string]any{
		"range": &Func{name: "range", fn: func(r *renderer, args []any, _ *Dict) (any, error) {
			var lo, hi, step int64 = 0, 0, 1
			ints := make([]int64, len(args))
			for i, a := range args {
				v, ok := asInt(a)
				if !ok {
					return nil, r.errorf("'%s' object cannot be interpreted as an integer", typeName(a))
				}
				ints[i] = v
			}
			switch len(ints) {
			case 1:
				hi = ints[0]
			case 2:
				lo, hi = ints[0], ints[1]
			case 3:
				lo, hi, step = ints[0], ints[1], ints[2]
			default:
				return nil, r.errorf("range expected 1 to 3 arguments, got %d", len(args))
			}
			if step == 0 {
				return nil, r.errorf("range() arg 3 must not be zero")
			}
			var out []any
			for i := lo; (step > 0 && i < hi) || (step < 0 && i > hi); i += step {
				if len(out) >= maxRange {
					return nil, r.errorf("range too big: the sandbox allows at most %d items", maxRange)
				}
				if err := r.step(); err != nil {
					return nil, err
				}
				out = append(out, i)
			}
			return &List{Items: append([]any{}, out...)}, nil
		}},
		"dict": &Func{name: "dict", fn: func(r *renderer, args []any, kw *Dict) (any, error) {
			d := NewDict()
			if len(args) > 1 {
				return nil, r.errorf("dict expected at most 1 argument")
			}
			if len(args) == 1 {
				src, ok := args[0].(*Dict)
				if !ok {
					return nil, r.errorf("dict() argument must be a mapping")
				}
				for i, k := range src.keys {
					_ = d.Set(k, src.vals[i])
				}
			}
			if kw != nil {
				for i, k := range kw.keys {
					_ = d.Set(k, kw.vals[i])
				}
			}
			return d, nil
		}},
		"namespace": &Func{name: "namespace", fn: func(r *renderer, args []any, kw *Dict) (any, error) {
			ns := &Namespace{attrs: NewDict()}
			for _, a := range args {
				src, ok := a.(*Dict)
				if !ok {
					return nil, r.errorf("namespace() positional arguments must be mappings")
				}
				for i, k := range src.keys {
					_ = ns.attrs.Set(k, src.vals[i])
				}
			}
			if kw != nil {
				for i, k := range kw.keys {
					_ = ns.attrs.Set(k, kw.vals[i])
				}
			}
			return ns, nil
		}},
		"raise_exception": &Func{name: "raise_exception", fn: func(r *renderer, args []any, _ *Dict) (any, error) {
			msg := ""
			if len(args) > 0 {
				msg = toStr(args[0])
			}
			return nil, &TemplateError{Msg: msg, Raised: true, Line: r.curLine}
		}},
		"strftime_now": &Func{name: "strftime_now", fn: func(r *renderer, args []any, _ *Dict) (any, error) {
			if len(args) != 1 {
				return nil, r.errorf("strftime_now takes one argument")
			}
			return pyStrftime(now(), toStr(args[0])), nil
		}},
	}
}

// pyStrftime formats t as Python's datetime.strftime does for the common directives (C locale).
func pyStrftime(t time.Time, format string) string {
	var sb strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			sb.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'a':
			sb.WriteString(t.Format("Mon"))
		case 'A':
			sb.WriteString(t.Format("Monday"))
		case 'b', 'h':
			sb.WriteString(t.Format("Jan"))
		case 'B':
			sb.WriteString(t.Format("January"))
		case 'd':
			fmt.Fprintf(&sb, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&sb, "%2d", t.Day())
		case 'm':
			fmt.Fprintf(&sb, "%02d", int(t.Month()))
		case 'y':
			fmt.Fprintf(&sb, "%02d", t.Year()%100)
		case 'Y':
			fmt.Fprintf(&sb, "%d", t.Year())
		case 'H':
			fmt.Fprintf(&sb, "%02d", t.Hour())
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			fmt.Fprintf(&sb, "%02d", h)
		case 'M':
			fmt.Fprintf(&sb, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&sb, "%02d", t.Second())
		case 'f':
			fmt.Fprintf(&sb, "%06d", t.Nanosecond()/1000)
		case 'p':
			if t.Hour() < 12 {
				sb.WriteString("AM")
			} else {
				sb.WriteString("PM")
			}
		case 'j':
			fmt.Fprintf(&sb, "%03d", t.YearDay())
		case 'w':
			fmt.Fprintf(&sb, "%d", int(t.Weekday()))
		case 'Z':
			sb.WriteString(t.Format("MST"))
		case 'z':
			sb.WriteString(t.Format("-0700"))
		case '%':
			sb.WriteByte('%')
		default:
			sb.WriteByte('%')
			sb.WriteByte(format[i])
		}
	}
	return sb.String()
}
