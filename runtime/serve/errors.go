package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// apiError is an error answered to a client, in the shape of the API it called: OpenAI
// {"error": {"message", "type", "param", "code"}} (Chat Completions, Responses, models) or
// Anthropic {"type": "error", "error": {"type", "message"}} (Messages).
type apiError struct {
	status     int
	typ        string // OpenAI error type; the Anthropic type is derived from status
	code       string // OpenAI code (may be empty)
	param      string // the request field at fault (may be empty)
	msg        string
	retryAfter int // seconds, for 429
}

func (e *apiError) Error() string { return e.msg }

// Error types and codes (lithos-metal.md §7.2).
const (
	typeInvalidRequest = "invalid_request_error"
	typeAuth           = "authentication_error"
	typeNotFound       = "not_found_error"
	typeRateLimit      = "rate_limit_error"
	typePermission     = "permission_error"
	typeServer         = "server_error"
)

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, param: param, msg: fmt.Sprintf(format, args...)}
}

func unknownModel(name string, served []string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: typeInvalidRequest, code: "model_not_found", param: "model",
		msg: fmt.Sprintf("the model %q does not exist here; this server serves %s", name, strings.Join(quoteAll(served), ", "))}
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

func contextExceeded(prompt, context int) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, code: "context_length_exceeded", param: "messages",
		msg: fmt.Sprintf("the prompt has %d tokens, which leaves no room in the context of %d tokens: shorten the conversation", prompt, context)}
}

// promptTooLong answers a prompt whose tokenization stopped at limit tokens (Server.prompt).
func promptTooLong(limit, context int) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, code: "context_length_exceeded", param: "messages",
		msg: fmt.Sprintf("the prompt has more than %d tokens, which leaves no room in the context of %d tokens: shorten the conversation", limit, context)}
}

func queueFull(retry int) *apiError {
	return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "queue_full", retryAfter: retry,
		msg: "the request queue is full: retry after the requests ahead of you finish"}
}

// prepareFull answers a request that finds every prompt-preparation slot taken and their
// waiting room full (Server.acquire).
func prepareFull(retry int) *apiError {
	return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "queue_full", retryAfter: retry,
		msg: "too many requests are being prepared (rendered and tokenized) at once: retry shortly"}
}

// clientGone is returned when the client went away before an answer (recorded as 499; the
// client reads nothing).
var clientGone = &apiError{status: 499, typ: typeInvalidRequest, msg: "the client closed the request"}

func tooLarge(limit int64) *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, typ: typeInvalidRequest, code: "request_too_large",
		msg: fmt.Sprintf("the request body is larger than %d bytes (lithos-run serve --max-body-mb)", limit)}
}

func forbidden(code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusForbidden, typ: typePermission, code: code, msg: fmt.Sprintf(format, args...)}
}

func serverError(code string, err error) *apiError {
	return &apiError{status: http.StatusInternalServerError, typ: typeServer, code: code, msg: err.Error()}
}

func invalidToolCall(err error) *apiError {
	return &apiError{status: http.StatusBadGateway, typ: typeServer, code: "invalid_tool_call",
		msg: fmt.Sprintf("the model wrote a tool call that does not parse (%v): retry the request", err)}
}

// flavor is the error shape of an endpoint.
type flavor uint8

const (
	flavorOpenAI flavor = iota
	flavorAnthropic
)

// anthropicType maps a status to Anthropic's error type
// (https://docs.anthropic.com/en/api/errors).
func anthropicType(status int) string {
	switch status {
	case 307, 400, 405, 408, 422:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503, 529:
		return "overloaded_error"
	}
	return "api_error"
}

// body is the error's JSON in shape f.
func (e *apiError) body(f flavor) any {
	if f == flavorAnthropic {
		return map[string]any{"type": "error", "error": map[string]any{"type": anthropicType(e.status), "message": e.msg}}
	}
	type inner struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	in := inner{Message: e.msg, Type: e.typ}
	if e.param != "" {
		in.Param = &e.param
	}
	if e.code != "" {
		in.Code = &e.code
	}
	return map[string]any{"error": in}
}

// write answers e with its status.
func (e *apiError) write(w http.ResponseWriter, f flavor) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, e.body(f))
}

// writeJSON answers v as JSON (no HTML escaping: '<' stays '<', as the APIs send it).
func writeJSON(w http.ResponseWriter, status int, v any) {
	data := marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)+1))
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}

// marshal encodes v without HTML escaping. v is always built by this package, so an error is a
// bug; it is answered as a JSON error object rather than a panic.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte(`{"error":{"message":"internal error: response not encodable","type":"server_error","param":null,"code":null}}`)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte{'\n'})
}

// decodeBody reads one JSON object from a request body (already limited by
// http.MaxBytesReader) into v. Errors: an empty body, malformed JSON (with the byte offset),
// a field of the wrong type (named), a body over the limit (413), a body still arriving at the
// read deadline (408), data after the object.
func decodeBody(r io.Reader, v any) *apiError {
	dec := json.NewDecoder(r)
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			if terr != nil {
				err = terr
			} else {
				return badRequest("", "malformed JSON: data after the request object")
			}
		}
	}
	if err == nil {
		return nil
	}
	var maxErr *http.MaxBytesError
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxErr):
		return tooLarge(maxErr.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &apiError{status: http.StatusRequestTimeout, typ: typeInvalidRequest, code: "request_timeout",
			msg: "the request body did not arrive within the read timeout (lithos-run serve --read-timeout)"}
	case errors.Is(err, io.EOF):
		return badRequest("", "empty request body: send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syn):
		return badRequest("", "malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest("", "the request body must be a JSON object, not %s", jsonKind(typ.Value))
		}
		return badRequest(typ.Field, "field %s: want %s, got %s", typ.Field, goKind(typ.Type.String()), jsonKind(typ.Value))
	}
	return badRequest("", "malformed request: %v", err)
}

// jsonKind names encoding/json's UnmarshalTypeError.Value.
func jsonKind(v string) string {
	switch {
	case v == "object", v == "array", v == "string", v == "bool", v == "null":
		if v == "bool" {
			return "a boolean"
		}
		if v == "array" || v == "object" {
			return "an " + v
		}
		return "a " + v
	case strings.HasPrefix(v, "number"):
		return "a number (" + v + ")"
	}
	return v
}

// goKind describes the Go type a field wanted in JSON words (never the Go type itself: an
// anonymous struct type prints its fields and tags).
func goKind(t string) string {
	t = strings.TrimLeft(t, "*")
	switch {
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	}
	return "an object" // maps, structs (named or not), json.RawMessage fields never fail
}
