package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// maxJSONDepth bounds nesting in ParseJSON (CPython's json fails near 1000 as well).
const maxJSONDepth = 1000

// ParseJSON decodes JSON into template values keeping object key order (*Dict), as Python's
// json.loads does: integers become int64 (an integer outside int64 is an error), other
// numbers float64, a repeated key keeps its first position and its last value.
func ParseJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseJSONValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("chat: parse JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("chat: parse JSON: data after the top-level value")
	}
	return v, nil
}

func parseJSONValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nesting deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is not a string")
				}
				v, err := parseJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				_ = d.Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return d, nil
		case '[':
			l := &List{Items: []any{}}
			for dec.More() {
				v, err := parseJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l.Items = append(l.Items, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return l, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("integer %s does not fit in 64 bits", s)
			}
			return n, nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, err
		}
		return f, nil // ±Inf on overflow, as Python's float() gives
	case string, bool, nil:
		return t, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// jsonOptions are the arguments of transformers' tojson filter, which calls
// json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
// sort_keys=sort_keys).
type jsonOptions struct {
	ensureASCII bool
	indent      string
	indented    bool
	itemSep     string
	keySep      string
	sortKeys    bool
}

func defaultJSONOptions() jsonOptions {
	return jsonOptions{itemSep: ", ", keySep: ": "}
}

// toJSON is Python's json.dumps with opts; values that json cannot serialize are errors.
func toJSON(v any, opts jsonOptions) (string, error) {
	var sb strings.Builder
	if err := writeJSON(&sb, v, opts, 0); err != nil {
		return "", err
	}
	return sb.String(), nil
}

func writeJSON(sb *strings.Builder, v any, o jsonOptions, level int) error {
	if level > maxJSONDepth {
		return fmt.Errorf("tojson: nesting deeper than %d", maxJSONDepth)
	}
	switch v := v.(type) {
	case nil:
		sb.WriteString("null")
	case bool:
		if v {
			sb.WriteString("true")
		} else {
			sb.WriteString("false")
		}
	case int64:
		sb.WriteString(strconv.FormatInt(v, 10))
	case float64:
		sb.WriteString(jsonFloat(v))
	case string:
		writeJSONString(sb, v, o.ensureASCII)
	case *List:
		if len(v.Items) == 0 {
			sb.WriteString("[]")
			return nil
		}
		sb.WriteByte('[')
		for i, it := range v.Items {
			if i > 0 {
				sb.WriteString(o.itemSep)
			}
			writeJSONIndent(sb, o, level+1)
			if err := writeJSON(sb, it, o, level+1); err != nil {
				return err
			}
		}
		writeJSONIndent(sb, o, level)
		sb.WriteByte(']')
	case *Dict:
		if v.Len() == 0 {
			sb.WriteString("{}")
			return nil
		}
		type kv struct {
			k string
			v any
		}
		items := make([]kv, 0, v.Len())
		for i, k := range v.keys {
			ks, err := jsonKey(k)
			if err != nil {
				return err
			}
			items = append(items, kv{ks, v.vals[i]})
		}
		if o.sortKeys {
			sort.SliceStable(items, func(i, j int) bool { return items[i].k < items[j].k })
		}
		sb.WriteByte('{')
		for i, it := range items {
			if i > 0 {
				sb.WriteString(o.itemSep)
			}
			writeJSONIndent(sb, o, level+1)
			writeJSONString(sb, it.k, o.ensureASCII)
			sb.WriteString(o.keySep)
			if err := writeJSON(sb, it.v, o, level+1); err != nil {
				return err
			}
		}
		writeJSONIndent(sb, o, level)
		sb.WriteByte('}')
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func writeJSONIndent(sb *strings.Builder, o jsonOptions, level int) {
	if !o.indented {
		return
	}
	sb.WriteByte('\n')
	for range level {
		sb.WriteString(o.indent)
	}
}

// jsonKey converts a dict key as json.dumps does (str as is; int, float, bool, None spelled).
func jsonKey(k any) (string, error) {
	switch k := k.(type) {
	case string:
		return k, nil
	case int64:
		return strconv.FormatInt(k, 10), nil
	case float64:
		return jsonFloat(k), nil
	case bool:
		if k {
			return "true", nil
		}
		return "false", nil
	case nil:
		return "null", nil
	}
	return "", fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
}

// jsonFloat is float.__repr__ with json's spellings of the non-finite values.
func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return pyFloatRepr(f)
}

// writeJSONString quotes s as json.dumps does: with ensure_ascii false only '"', '\\' and
// control characters are escaped (\n \r \t \b \f by name, the rest as \u00XX); with it true,
// every non-ASCII character too, as \uXXXX (UTF-16 surrogate pairs above U+FFFF).
func writeJSONString(sb *strings.Builder, s string, ensureASCII bool) {
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(sb, `\u%04x`, r)
			case ensureASCII && r > 0x7e:
				if r >= 0x10000 {
					a, b := utf16.EncodeRune(r)
					fmt.Fprintf(sb, `\u%04x\u%04x`, a, b)
				} else {
					fmt.Fprintf(sb, `\u%04x`, r)
				}
			default:
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
}
