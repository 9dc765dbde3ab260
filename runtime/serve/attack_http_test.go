package serve

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Attack tests (security review): HTTP-level abuse of the handler — foreign Host headers,
// lying Content-Length, path tricks around the API key, label injection into /metrics,
// and the shape of type errors.

// TestAttackDNSRebinding: without an API key (the default on loopback) any web page the
// user visits can reach the server through DNS rebinding: the browser sends the page's
// own host name in Host, and the server answers. Expected: without a key, only loopback
// host names (localhost, 127.0.0.1, [::1], with any port) are served; others get 403 in
// the API's shape (Ollama refuses foreign hosts the same way). With a key the Host does not
// matter (the page cannot know the key).
func TestAttackDNSRebinding(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	for _, host := range []string{"localhost:8000", "127.0.0.1:8000", "[::1]:8000", "localhost"} {
		code, _, body := doHost(t, ts, host, "/v1/models")
		if code != 200 {
			t.Errorf("Host %s: %d %s", host, code, body)
		}
	}
	for _, host := range []string{"attacker.example", "attacker.example:8000", "127.0.0.1.nip.io:8000"} {
		code, _, body := doHost(t, ts, host, "/v1/models")
		if code != http.StatusForbidden {
			t.Errorf("Host %s without an API key: %d %.80s, want 403 (DNS rebinding lets any web page use the model)", host, code, body)
		}
	}
	keyed := newTestServer(t, Options{APIKey: "k"}, nil)
	if code, _, body := doHost(t, keyed, "attacker.example", "/v1/models", "Authorization", "Bearer k"); code != 200 {
		t.Errorf("with a key, a foreign Host is fine: %d %s", code, body)
	}
}

func doHost(t *testing.T, ts *testServer, host, path string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.url+path, nil)
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// TestAttackContentLengthOverLimit: a body announced larger than MaxBodyBytes can be
// refused (413) from its Content-Length alone. Observed: the server answers 100 Continue and
// reads up to the limit first, and a client that announces a huge length and sends a few
// bytes holds the handler (and its goroutine and connection) for as long as it likes, since
// the CLI sets no ReadTimeout.
func TestAttackContentLengthOverLimit(t *testing.T) {
	ts := newTestServer(t, Options{MaxBodyBytes: 1 << 10}, nil)
	c := rawConn(t, ts)
	defer c.Close()
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"model\":\"tiny\""
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, " 413 ") {
		t.Errorf("Content-Length 1000000 over a limit of 1024: got %q %v, want an immediate 413", line, err)
	}
}

// TestAttackPathTricks: path variants never reach a keyed endpoint without the key; the
// cleaned-path redirects of http.ServeMux (//v1/models, /v1/../metrics) only point to the
// canonical path, which still asks for the key. (Passes.)
func TestAttackPathTricks(t *testing.T) {
	ts := newTestServer(t, Options{APIKey: "k"}, nil)
	for _, p := range []string{"/v1/models", "//v1/models", "/v1/models/../models", "/v1/./models", "/v1/../metrics",
		"/metrics", "/v1/models/tiny", "/v1/models/%2e%2e/%2e%2e/metrics", "/V1/MODELS", "/v1/models?x=1"} {
		code, _, body := ts.get(t, p) // http.Client follows redirects
		if code == 200 {
			t.Errorf("GET %s without the key: 200 %s", p, body)
		}
	}
	for _, p := range []string{"/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/messages/count_tokens"} {
		code, _, body := ts.post(t, p, `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"x"}],"input":"x"}`,
			"Authorization", "Bearer K", "x-api-key", "")
		if code != 401 {
			t.Errorf("POST %s with a wrong-case key: %d %s", p, code, body)
		}
	}
}

// TestAttackMetricsLabels: nothing a client sends becomes a label of /metrics (model names
// and paths do not; the endpoint label is one of a fixed set), so clients can neither inject
// exposition lines nor grow the series without bound; served names are escaped. (Passes.)
func TestAttackMetricsLabels(t *testing.T) {
	ts := newTestServer(t, Options{Names: []string{"tiny\"} 1\nevil_metric{a=\"b", "tiny"}}, nil)
	for i := range 50 {
		ts.get(t, "/x"+strings.Repeat("y", i)+"%22%7D%0Aevil_metric%201")
		ts.post(t, "/v1/chat/completions", `{"model":"m\"} 9\nbad 1","messages":[{"role":"user","content":"x"}]}`)
	}
	_, _, m := ts.get(t, "/metrics")
	series := 0
	for _, line := range strings.Split(strings.TrimSpace(string(m)), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "evil_metric") || strings.HasPrefix(line, "bad ") {
			t.Errorf("injected exposition line %q", line)
		}
		if strings.HasPrefix(line, "lithos_requests_total{") {
			series++
		}
	}
	if series > 4 {
		t.Errorf("%d request series after 100 requests to 51 paths and 1 model:\n%s", series, m)
	}
	if !strings.Contains(string(m), `lithos_model_info{model="tiny\"} 1\nevil_metric{a=\"b"} 1`) {
		t.Errorf("served name not escaped:\n%s", m)
	}
}

// TestAttackTypeErrorShape: a wrong JSON type names the field and the JSON kind it wants.
// Observed: for fields of anonymous struct types the message prints the Go type, tags and
// all (`want struct { IncludeUsage bool "json:\"include_usage\"" }`).
func TestAttackTypeErrorShape(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	for _, c := range []struct{ path, body, param string }{
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"stream_options":"x"}`, "stream_options"},
		{"/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"x"}],"response_format":"json"}`, "response_format"},
		{"/v1/messages", `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tool_choice":"auto"}`, "tool_choice"},
		{"/v1/messages", `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"x"}],"thinking":true}`, "thinking"},
		{"/v1/responses", `{"model":"tiny","input":"x","reasoning":"high"}`, "reasoning"},
	} {
		code, _, body := ts.post(t, c.path, c.body)
		msg, _ := path(obj(t, string(body)), "error", "message").(string)
		if code != 400 || !strings.Contains(msg, c.param) || strings.Contains(msg, "struct") || strings.Contains(msg, "json:") {
			t.Errorf("%s %s: %d %q: want 400 naming %s and \"an object\"", c.path, c.param, code, msg, c.param)
		}
	}
}

// TestAttackToolDefinitions: tool definitions the docs refuse are refused.
//   - Tool names: the error text says "use letters, digits, '_', '-', '.'", but only markup
//     characters and spaces are checked: NUL, escape sequences, DEL and bidirectional
//     overrides pass into the prompt, the XML tool-call form (<function=NAME>) and the
//     answers (an agent may print them on a terminal).
//   - Anthropic input_schema is required, yet "input_schema": null passes as none.
//   - A parameters schema nested deeper than the template's JSON limit is answered with
//     param "messages" instead of the tool's field.
func TestAttackToolDefinitions(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	tool := func(name string) string {
		return `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":` +
			jsonString(name) + `,"parameters":{"type":"object"}}}]}`
	}
	for _, name := range []string{"a\x00b", "a\u202eb", "a\x1b[2Jb", "a\x7fb"} {
		code, _, body := ts.post(t, "/v1/chat/completions", tool(name))
		if code != 400 || path(obj(t, string(body)), "error", "param") != "tools[0].name" {
			t.Errorf("tool name %q: %d %.120s, want 400 on tools[0].name", name, code, body)
		}
	}
	code, _, body := ts.post(t, "/v1/messages", `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"a","input_schema":null}]}`)
	if code != 400 {
		t.Errorf(`input_schema null: %d %.120s, want 400 "needs input_schema"`, code, body)
	}
	deep := `{"type":"object","properties":{"x":` + strings.Repeat(`{"type":"object","properties":{"x":`, 1100) + `{}` + strings.Repeat(`}}`, 1100) + `}}`
	code, _, body = ts.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a","parameters":`+deep+`}}]}`)
	if p := path(obj(t, string(body)), "error", "param"); code != 400 || p != "tools[0].parameters" {
		t.Errorf("schema nested 2200 deep: %d param %v, want 400 on tools[0].parameters", code, p)
	}
}
