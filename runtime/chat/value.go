package chat

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values inside templates are Go values of these types, mirroring the Python objects that
// jinja2 sees when transformers renders a chat template:
//
//	nil        None
//	bool       bool
//	int64      int (JSON integers that fit in int64; others are refused by ParseJSON)
//	float64    float
//	string     str (also jinja2's Markup: no autoescaping here)
//	*List      list, or tuple when Tuple is set
//	*Dict      dict, insertion-ordered
//	Undefined  jinja2.Undefined (a missing variable, key or attribute)
//	*Namespace jinja2's namespace()
//	*Macro, *Func, *loopInfo: callables and the loop object

// Undefined is jinja2's default Undefined: prints as "", is false, iterates as empty, and is
// an error when an attribute or item is taken from it or it is used in arithmetic.
type Undefined struct{ Name string }

// List is a Python list or tuple.
type List struct {
	Items []any
	Tuple bool
}

// NewList returns a list holding items.
func NewList(items ...any) *List { return &List{Items: items} }

// Dict is an insertion-ordered Python dict. Keys are strings, numbers, bools or None.
type Dict struct {
	keys []any
	vals []any
	idx  map[any]int
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{idx: map[any]int{}} }

// hashKey maps a key to the Go map key that Python's hashing would make equal
// (1 == 1.0 == True).
func hashKey(k any) (any, bool) {
	switch k := k.(type) {
	case nil, string, int64:
		return k, true
	case bool:
		if k {
			return int64(1), true
		}
		return int64(0), true
	case float64:
		if k == math.Trunc(k) && math.Abs(k) < 1<<62 {
			return int64(k), true
		}
		return k, true
	case *List:
		if k.Tuple {
			parts := make([]string, len(k.Items))
			for i, it := range k.Items {
				h, ok := hashKey(it)
				if !ok {
					return nil, false
				}
				parts[i] = fmt.Sprintf("%T:%v", h, h)
			}
			return "\x00tuple:" + strings.Join(parts, "\x00"), true
		}
	}
	return nil, false
}

// Set stores v under k; an existing key keeps its position, as in Python.
func (d *Dict) Set(k, v any) error {
	h, ok := hashKey(k)
	if !ok {
		return fmt.Errorf("unhashable type: '%s'", typeName(k))
	}
	if i, ok := d.idx[h]; ok {
		d.vals[i] = v
		return nil
	}
	d.idx[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// Get returns the value under k.
func (d *Dict) Get(k any) (any, bool) {
	h, ok := hashKey(k)
	if !ok {
		return nil, false
	}
	i, ok := d.idx[h]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []any { return append([]any(nil), d.keys...) }

// Namespace is jinja2's namespace(): attributes that {% set ns.x = ... %} may change from
// inside loops.
type Namespace struct{ attrs *Dict }

func typeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *List:
		if v.Tuple {
			return "tuple"
		}
		return "list"
	case *Dict:
		return "dict"
	case Undefined:
		return "Undefined"
	case *Namespace:
		return "Namespace"
	case *Macro:
		return "Macro"
	case *Func:
		return "function"
	case *loopInfo:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

// truthy is Python's bool(v).
func truthy(v any) bool {
	switch v := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case *List:
		return len(v.Items) > 0
	case *Dict:
		return v.Len() > 0
	}
	return true
}

// equal is Python's ==.
func equal(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case bool, int64, float64:
		x, ok1 := toFloatNum(a)
		y, ok2 := toFloatNum(b)
		if !ok1 || !ok2 {
			return false
		}
		if ai, ok := asInt(a); ok {
			if bi, ok := asInt(b); ok {
				return ai == bi
			}
		}
		return x == y
	case string:
		bs, ok := b.(string)
		return ok && a == bs
	case *List:
		bl, ok := b.(*List)
		if !ok || bl.Tuple != a.Tuple || len(bl.Items) != len(a.Items) {
			return false
		}
		for i := range a.Items {
			if !equal(a.Items[i], bl.Items[i]) {
				return false
			}
		}
		return true
	case *Dict:
		bd, ok := b.(*Dict)
		if !ok || bd.Len() != a.Len() {
			return false
		}
		for i, k := range a.keys {
			v, ok := bd.Get(k)
			if !ok || !equal(a.vals[i], v) {
				return false
			}
		}
		return true
	}
	return a == b
}

// asInt returns the integer value of an int or bool.
func asInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func toFloatNum(v any) (float64, bool) {
	switch v := v.(type) {
	case int64:
		return float64(v), true
	case float64:
		return v, true
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// compare is Python's ordering for <, <=, >, >= (numbers, strings, lists/tuples).
func compare(a, b any) (int, error) {
	if ai, ok := asInt(a); ok {
		if bi, ok := asInt(b); ok {
			return cmpOrdered(ai, bi), nil
		}
	}
	if x, ok := toFloatNum(a); ok {
		if y, ok := toFloatNum(b); ok {
			if math.IsNaN(x) || math.IsNaN(y) {
				return 2, nil // unordered: every comparison is false
			}
			return cmpOrdered(x, y), nil
		}
	}
	if as, ok := a.(string); ok {
		if bs, ok := b.(string); ok {
			return cmpOrdered(as, bs), nil // byte order of UTF-8 = code point order
		}
	}
	if al, ok := a.(*List); ok {
		if bl, ok := b.(*List); ok && al.Tuple == bl.Tuple {
			for i := 0; i < len(al.Items) && i < len(bl.Items); i++ {
				if equal(al.Items[i], bl.Items[i]) {
					continue
				}
				return compare(al.Items[i], bl.Items[i])
			}
			return cmpOrdered(len(al.Items), len(bl.Items)), nil
		}
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func cmpOrdered[T int | int64 | float64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// toStr is Python's str(v) as jinja2 prints it ({{ v }}, ~, |string).
func toStr(v any) string {
	switch v := v.(type) {
	case Undefined:
		return ""
	case string:
		return v
	}
	var sb strings.Builder
	writeRepr(&sb, v, 0)
	return sb.String()
}

// repr is Python's repr(v).
func repr(v any) string {
	var sb strings.Builder
	writeRepr(&sb, v, 0)
	return sb.String()
}

func writeRepr(sb *strings.Builder, v any, depth int) {
	if depth > 100 {
		sb.WriteString("...")
		return
	}
	switch v := v.(type) {
	case nil:
		sb.WriteString("None")
	case bool:
		if v {
			sb.WriteString("True")
		} else {
			sb.WriteString("False")
		}
	case int64:
		sb.WriteString(strconv.FormatInt(v, 10))
	case float64:
		sb.WriteString(pyFloatRepr(v))
	case string:
		writeStrRepr(sb, v)
	case Undefined:
		sb.WriteString("")
	case *List:
		open, close := "[", "]"
		if v.Tuple {
			open, close = "(", ")"
		}
		sb.WriteString(open)
		for i, it := range v.Items {
			if i > 0 {
				sb.WriteString(", ")
			}
			writeRepr(sb, it, depth+1)
		}
		if v.Tuple && len(v.Items) == 1 {
			sb.WriteString(",")
		}
		sb.WriteString(close)
	case *Dict:
		sb.WriteString("{")
		for i, k := range v.keys {
			if i > 0 {
				sb.WriteString(", ")
			}
			writeRepr(sb, k, depth+1)
			sb.WriteString(": ")
			writeRepr(sb, v.vals[i], depth+1)
		}
		sb.WriteString("}")
	case *Namespace:
		sb.WriteString("<Namespace ")
		writeRepr(sb, v.attrs, depth+1)
		sb.WriteString(">")
	case *Macro:
		sb.WriteString("<Macro '" + v.name + "'>")
	case *Func:
		sb.WriteString("<built-in function " + v.name + ">")
	case *loopInfo:
		sb.WriteString("<LoopContext>")
	default:
		fmt.Fprintf(sb, "%v", v)
	}
}

// writeStrRepr quotes s as Python's repr does: single quotes unless s contains ' and no ".
func writeStrRepr(sb *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	sb.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			sb.WriteString(`\\`)
		case r == rune(q):
			sb.WriteByte('\\')
			sb.WriteByte(q)
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r == '\t':
			sb.WriteString(`\t`)
		case r == ' ' || (r != utf8.RuneError && unicode.IsPrint(r)):
			sb.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(sb, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(sb, `\u%04x`, r)
		default:
			fmt.Fprintf(sb, `\U%08x`, r)
		}
	}
	sb.WriteByte(q)
}

// pyFloatRepr formats f as Python's repr(float): the shortest round-trip digits, in
// positional notation when the decimal exponent is in [-4, 16), else d.ddde±XX; integral
// values keep ".0"; inf, -inf and nan as Python spells them.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	neg := e[0] == '-'
	if neg {
		e = e[1:]
	}
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	decpt := exp + 1 // value = 0.digits × 10^decpt
	var out string
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			out = "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			out = digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			out = digits[:decpt] + "." + digits[decpt:]
		}
	} else {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		out += fmt.Sprintf("e%s%02d", sign, exp)
	}
	if neg {
		out = "-" + out
	}
	return out
}

// FromGo converts plain Go data (nil, bool, ints, floats, string, []any, []string,
// map[string]any with keys sorted, *List, *Dict) into template values.
func FromGo(v any) (any, error) {
	switch v := v.(type) {
	case nil, bool, int64, float64, string, *List, *Dict, Undefined, *Namespace:
		return v, nil
	case int:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case float32:
		return float64(v), nil
	case []string:
		l := &List{Items: make([]any, len(v))}
		for i, s := range v {
			l.Items[i] = s
		}
		return l, nil
	case []any:
		l := &List{Items: make([]any, len(v))}
		for i, it := range v {
			c, err := FromGo(it)
			if err != nil {
				return nil, err
			}
			l.Items[i] = c
		}
		return l, nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := NewDict()
		for _, k := range keys {
			c, err := FromGo(v[k])
			if err != nil {
				return nil, err
			}
			_ = d.Set(k, c)
		}
		return d, nil
	}
	return nil, fmt.Errorf("chat: cannot use a Go %T as a template value", v)
}
