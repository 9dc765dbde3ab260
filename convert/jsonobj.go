package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// object is one JSON object whose fields are decoded on demand, so that every
// error can name the field path ("text_config.hidden_size") and the rule.
type object struct {
	path   string // "" for the top level, else "text_config." style prefix
	fields map[string]json.RawMessage
}

// parseObject decodes data as one JSON object. where names the document in
// errors.
func parseObject(data []byte, where string) (object, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return object{}, fmt.Errorf("%s: not a JSON object: %w", where, err)
	}
	if m == nil {
		return object{}, fmt.Errorf("%s: not a JSON object (null)", where)
	}
	if dec.More() {
		return object{}, fmt.Errorf("%s: trailing data after the JSON object", where)
	}
	return object{fields: m}, nil
}

func (o object) name(key string) string { return o.path + key }

func (o object) has(key string) bool {
	raw, ok := o.fields[key]
	return ok && string(bytes.TrimSpace(raw)) != "null"
}

// sub returns the nested object at key; ok is false when the key is absent or
// null.
func (o object) sub(key string) (object, bool, error) {
	if !o.has(key) {
		return object{}, false, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(o.fields[key], &m); err != nil || m == nil {
		return object{}, false, fmt.Errorf("%s: must be an object", o.name(key))
	}
	return object{path: o.name(key) + ".", fields: m}, true, nil
}

// int reads an integer field; ok is false when absent or null. JSON numbers
// with a zero fraction (5120.0) are accepted.
func (o object) int(key string) (int, bool, error) {
	if !o.has(key) {
		return 0, false, nil
	}
	var f float64
	if err := json.Unmarshal(o.fields[key], &f); err != nil {
		return 0, false, fmt.Errorf("%s: must be a number", o.name(key))
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false, fmt.Errorf("%s: must be an integer, got %v", o.name(key), f)
	}
	return int(f), true, nil
}

// positive reads an integer field that must be > 0 when present; absent
// gives def.
func (o object) positive(key string, def int) (int, error) {
	v, ok, err := o.int(key)
	if err != nil {
		return 0, err
	}
	if !ok {
		return def, nil
	}
	if v <= 0 {
		return 0, fmt.Errorf("%s: must be a positive integer, got %d", o.name(key), v)
	}
	return v, nil
}

func (o object) float(key string) (float64, bool, error) {
	if !o.has(key) {
		return 0, false, nil
	}
	var f float64
	if err := json.Unmarshal(o.fields[key], &f); err != nil {
		return 0, false, fmt.Errorf("%s: must be a number", o.name(key))
	}
	return f, true, nil
}

func (o object) str(key string) (string, error) {
	if !o.has(key) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(o.fields[key], &s); err != nil {
		return "", fmt.Errorf("%s: must be a string", o.name(key))
	}
	return s, nil
}

func (o object) boolean(key string, def bool) (bool, error) {
	if !o.has(key) {
		return def, nil
	}
	var b bool
	if err := json.Unmarshal(o.fields[key], &b); err != nil {
		return false, fmt.Errorf("%s: must be true or false", o.name(key))
	}
	return b, nil
}

func (o object) strings(key string) ([]string, error) {
	if !o.has(key) {
		return nil, nil
	}
	var s []string
	if err := json.Unmarshal(o.fields[key], &s); err != nil {
		return nil, fmt.Errorf("%s: must be an array of strings", o.name(key))
	}
	return s, nil
}

func (o object) ints(key string) ([]int, error) {
	if !o.has(key) {
		return nil, nil
	}
	var fs []float64
	if err := json.Unmarshal(o.fields[key], &fs); err != nil {
		return nil, fmt.Errorf("%s: must be an array of integers", o.name(key))
	}
	out := make([]int, len(fs))
	for i, f := range fs {
		if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil, fmt.Errorf("%s[%d]: must be an integer, got %v", o.name(key), i, f)
		}
		out[i] = int(f)
	}
	return out, nil
}

// firstString reads key as a string or, when it is an array, its first
// string element ("architectures").
func (o object) firstOrString(key string) ([]string, error) {
	if !o.has(key) {
		return nil, nil
	}
	raw := bytes.TrimSpace(o.fields[key])
	if len(raw) > 0 && raw[0] == '"' {
		s, err := o.str(key)
		return []string{s}, err
	}
	return o.strings(key)
}

// globMatch reports whether name matches pattern, where '*' matches any
// run of characters (dots included) and '?' one character; everything else
// is literal. It is the matching ModelOpt's wildcard exclude lists and
// vLLM's fnmatch use for module names.
func globMatch(pattern, name string) bool {
	// Iterative matching with one backtrack point (the last '*'): O(len·len),
	// never exponential, whatever the pattern (configs are untrusted input).
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]) && pattern[p] != '*':
			p++
			n++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// quote renders a list for messages.
func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}
