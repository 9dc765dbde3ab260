package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Tool is a function the model may call: its name and its parameters' JSON schema.
type Tool struct {
	// Name is the function name the model writes in <function=NAME> or "name".
	Name string
	// Parameters is the JSON schema of the arguments: a JSON object (usually
	// {"type":"object","properties":{...}}), or empty for a function without parameters.
	Parameters json.RawMessage
}

// toolInfo is what the parser needs of a tool: the declared JSON types of each property.
type toolInfo struct {
	name  string
	types map[string][]string // property → declared types ("string", "integer", ...); absent: unknown
}

// newToolInfo reads the property types of a tool's schema. The schema must be a JSON object
// whose "type", when present, is "object"; a property's types come from its "type" (a string
// or a list of strings) or, without one, from the "type" of its anyOf/oneOf alternatives.
func newToolInfo(t Tool) (*toolInfo, error) {
	if t.Name == "" {
		return nil, fmt.Errorf("tool with an empty name")
	}
	info := &toolInfo{name: t.Name, types: map[string][]string{}}
	if len(bytes.TrimSpace(t.Parameters)) == 0 || string(bytes.TrimSpace(t.Parameters)) == "null" {
		return info, nil
	}
	var schema map[string]json.RawMessage
	if err := json.Unmarshal(t.Parameters, &schema); err != nil {
		return nil, fmt.Errorf("tool %q: parameters must be a JSON schema object: %w", t.Name, err)
	}
	if ty, ok := schema["type"]; ok {
		if types := schemaTypes(ty); len(types) != 1 || types[0] != "object" {
			return nil, fmt.Errorf("tool %q: parameters must have type \"object\", not %s", t.Name, ty)
		}
	}
	props, ok := schema["properties"]
	if !ok || string(props) == "null" {
		return info, nil
	}
	var pm map[string]json.RawMessage
	if err := json.Unmarshal(props, &pm); err != nil {
		return nil, fmt.Errorf("tool %q: parameters.properties must be an object: %w", t.Name, err)
	}
	for k, v := range pm {
		var p map[string]json.RawMessage
		if json.Unmarshal(v, &p) != nil {
			continue // not a schema object: the property's type is unknown
		}
		if ty, ok := p["type"]; ok {
			info.types[k] = schemaTypes(ty)
			continue
		}
		var alts []string
		for _, key := range []string{"anyOf", "oneOf"} {
			var list []map[string]json.RawMessage
			if json.Unmarshal(p[key], &list) != nil {
				continue
			}
			for _, a := range list {
				alts = append(alts, schemaTypes(a["type"])...)
			}
		}
		if len(alts) > 0 {
			info.types[k] = alts
		}
	}
	return info, nil
}

// schemaTypes reads a JSON schema "type": a string or a list of strings (anything else: none).
func schemaTypes(raw json.RawMessage) []string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		return many
	}
	return nil
}

// streamable reports whether a property's value is always kept as a JSON string, so that it
// can be streamed before its closing tag: declared exactly "string", or of unknown type.
func streamable(types []string) bool {
	for _, t := range types {
		if t != "string" {
			return false
		}
	}
	return true
}

// typedValue converts an XML-form parameter value (already stripped of one leading and one
// trailing newline) to JSON by the declared types, trying them in Ollama's precedence
// (hub-and-go.md §B5): null, boolean, integer, number, object/array, then string. A value
// that fits none of the declared types stays a string (the tool's own validation then tells
// the model), as does a value of a property the schema does not type.
func typedValue(v string, types []string) string {
	has := func(name string) bool {
		for _, t := range types {
			if t == name {
				return true
			}
		}
		return false
	}
	s := strings.TrimSpace(v)
	if has("null") && (s == "null" || s == "None") {
		return "null"
	}
	if has("boolean") {
		switch strings.ToLower(s) {
		case "true":
			return "true"
		case "false":
			return "false"
		}
	}
	if has("integer") {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return s
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && isJSONNumber(s) && math.Abs(f) < 1<<53 && f == math.Trunc(f) {
			return strconv.FormatInt(int64(f), 10)
		}
	}
	if (has("number") || has("integer")) && isJSONNumber(s) {
		return s
	}
	if (has("object") && strings.HasPrefix(s, "{")) || (has("array") && strings.HasPrefix(s, "[")) {
		var buf bytes.Buffer
		if json.Compact(&buf, []byte(s)) == nil {
			return buf.String()
		}
	}
	return quote(v)
}

// isJSONNumber reports whether s is exactly one JSON number.
func isJSONNumber(s string) bool {
	if s == "" || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}

// quote is s as a JSON string (see appendEscaped).
func quote(s string) string {
	b := append([]byte{'"'}, appendEscaped(nil, []byte(s))...)
	return string(append(b, '"'))
}
