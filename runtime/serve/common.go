package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"lithos/runtime/sample"
)

// textParts are the content-part types read as text: OpenAI Chat's "text", Responses'
// "input_text" and "output_text" (lithos-metal.md §7.7). Anything else (images, audio, files)
// is refused: the served model reads text only.
var textParts = map[string]bool{"text": true, "input_text": true, "output_text": true}

// contentPart is one element of a content list.
type contentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// textContent reads a message content: a string, null, or a list of text parts, joined by
// "\n" (as vLLM joins text parts). param names the field in errors.
func textContent(raw json.RawMessage, param string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest(param, "%s: %v", param, err)
		}
		return s, nil
	case '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", badRequest(param, "%s: %v", param, err)
		}
		texts := make([]string, 0, len(parts))
		for i, pr := range parts {
			pp := fmt.Sprintf("%s[%d]", param, i)
			var p contentPart
			if err := json.Unmarshal(pr, &p); err != nil {
				return "", badRequest(pp, "%s: want an object {\"type\": \"text\", \"text\": ...}, got %s", pp, kindOf(pr))
			}
			if !textParts[p.Type] {
				return "", badRequest(pp+".type", "%s: content of type %q is not supported: this model reads text only", pp, p.Type)
			}
			if p.Text == nil {
				return "", badRequest(pp+".text", "%s: a %s part needs \"text\"", pp, p.Type)
			}
			texts = append(texts, *p.Text)
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", badRequest(param, "%s: want a string or a list of text parts, got %s", param, kindOf(raw))
}

// argumentsJSON reads a tool call's arguments as clients send them: a string holding a JSON
// object (OpenAI), or the object itself; "" and null are {}. It returns the object's JSON.
func argumentsJSON(raw json.RawMessage, param string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest(param, "%s: %v", param, err)
		}
		if strings.TrimSpace(s) == "" {
			return "{}", nil
		}
		raw = json.RawMessage(s)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", badRequest(param, "%s: the arguments must be a JSON object: %.60s", param, raw)
	}
	return string(raw), nil
}

// params builds sampling parameters from the optional request fields, with the defaults of the
// reference server: temperature 0 (greedy), top_p 1, top_k 0 (lithos-metal.md §7.3).
func params(temperature, topP *float64, topK *int, seed *int64, maxTemp float64) (sample.Params, *apiError) {
	p := sample.Params{TopP: 1}
	if temperature != nil {
		p.Temperature = *temperature
	}
	if topP != nil {
		p.TopP = *topP
	}
	if topK != nil {
		p.TopK = *topK
	}
	if seed != nil {
		p.Seed = uint64(*seed)
	}
	return p, checkSampling(p, maxTemp)
}

// maxTokensOf checks an optional output budget (≥ 1).
func maxTokensOf(v *int, param string) (int, *apiError) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, badRequest(param, "%s %d: want at least 1", param, *v)
	}
	return *v, nil
}

// collected gathers the events of a non-streamed generation.
type collected struct {
	cached    int
	text      strings.Builder
	reasoning strings.Builder
	calls     []collectedCall
}

type collectedCall struct{ id, name, args string }

func (c *collected) add(m jobMsg) error {
	if m.started {
		c.cached = m.cached
	}
	for _, e := range m.evs {
		switch e.kind {
		case evText:
			c.text.WriteString(e.text)
		case evReasoning:
			c.reasoning.WriteString(e.text)
		case evToolEnd:
			c.calls = append(c.calls, collectedCall{e.id, e.name, e.args})
		}
	}
	return nil
}

// statsHeaders adds the generation's statistics to a non-streamed answer.
func statsHeaders(w http.ResponseWriter, res *genResult) {
	h := w.Header()
	h.Set("X-Lithos-Prompt-Tokens", strconv.Itoa(res.promptTokens))
	h.Set("X-Lithos-Cached-Tokens", strconv.Itoa(res.cachedTokens))
	h.Set("X-Lithos-Prefill-Tok-Per-S", strconv.FormatFloat(res.prefillTokPerS, 'f', 1, 64))
	h.Set("X-Lithos-Decode-Tok-Per-S", strconv.FormatFloat(res.decodeTokPerS, 'f', 2, 64))
	h.Set("X-Lithos-Decode-Rounds", strconv.Itoa(res.rounds))
}

// resultError is the error of a finished generation, if any: the backend failed (500), or a
// tool call started and did not parse (502).
func resultError(res *genResult) *apiError {
	switch {
	case res.err != nil:
		return serverError("generation_failed", fmt.Errorf("generation failed: %v", res.err))
	case res.toolErr != nil:
		return invalidToolCall(res.toolErr)
	}
	return nil
}
