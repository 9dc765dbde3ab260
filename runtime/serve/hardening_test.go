package serve

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Tests of the defences docs/serving.md §9 describes, beyond the attack reproductions
// (attack_*_test.go).

// TestWriteDeadlineCancels: a streaming client that keeps its connection open but reads
// nothing has its generation cancelled once a write has waited WriteTimeout, long before the
// generation would end; the worker is free again and the next client is served.
func TestWriteDeadlineCancels(t *testing.T) {
	gate := make(chan struct{})
	ts := newTestServer(t, Options{Queue: 4, Context: 65536, WriteTimeout: 300 * time.Millisecond}, func(ft *fakeTarget) {
		ft.Script = floodScript
		ft.Gate = gate
	})
	// Small socket buffers on the server side too, so that the writes block after a few KiB.
	srv := httptest.NewUnstartedServer(ts.Handler())
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if tc, ok := c.(*net.TCPConn); ok && st == http.StateNew {
			tc.SetWriteBuffer(4096)
		}
	}
	srv.Start()
	defer srv.Close()
	ts.url = srv.URL
	// Paced decode steps: the whole flood (60000 words, up to the context) would take over
	// 10 s at ≥ 200 µs a step.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case gate <- struct{}{}:
				time.Sleep(200 * time.Microsecond)
			case <-stop:
				return
			}
		}
	}()
	start := time.Now()
	stuck := stuckStream(t, ts, "/v1/chat/completions", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"flood"}]}`)
	defer stuck.Close()
	waitFor(t, "the stuck stream to be cancelled", func() bool {
		_, _, m := ts.get(t, "/metrics")
		return strings.Contains(string(m), "lithos_requests_cancelled_total 1\n")
	})
	waitFor(t, "the worker to be idle", func() bool { return !ts.eng.running.Load() })
	t.Logf("cancelled after %v", time.Since(start).Round(time.Millisecond))
	_, _, m := ts.get(t, "/metrics")
	var generated int
	if i := strings.Index(string(m), "\nlithos_generated_tokens_total "); i >= 0 {
		generated, _ = strconv.Atoi(strings.Fields(string(m)[i+1:])[1])
	}
	if generated == 0 || generated > 30000 {
		t.Errorf("the stuck stream generated %d tokens before it was cancelled", generated)
	}
	code, _, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"next"}]}`)
	if code != 200 {
		t.Fatalf("next client: %d %s", code, body)
	}
}

// TestPrepareSlots: rendering and tokenizing take one of Options.Prepare slots; Prepare +
// Queue requests may wait for one, the next gets 429 (queue_full, Retry-After) in its API's
// shape, a waiting client that leaves frees its place, and a released slot serves the waiting
// one.
func TestPrepareSlots(t *testing.T) {
	ts := newTestServer(t, Options{Prepare: 1, Queue: -1}, nil) // waiting room: 1 + 0
	// Hold the only slot.
	if err := ts.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A client that waits for the slot, then leaves.
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.url+"/v1/chat/completions", strings.NewReader(chatBody("leaves")))
		_, err := http.DefaultClient.Do(req)
		left <- err
	}()
	waitFor(t, "a request to wait for a slot", func() bool { return ts.prepWait.Load() == 1 })
	cancel()
	<-left
	waitFor(t, "the leaver's place to be free", func() bool { return ts.prepWait.Load() == 0 })

	done := make(chan int, 1)
	go func() {
		code, _, _ := ts.post(t, "/v1/chat/completions", chatBody("waits"))
		done <- code
	}()
	waitFor(t, "a request to wait for a slot", func() bool { return ts.prepWait.Load() == 1 })
	code, hdr, body := ts.post(t, "/v1/chat/completions", chatBody("refused"))
	if code != 429 || hdr.Get("Retry-After") != "1" || path(obj(t, string(body)), "error", "code") != "queue_full" {
		t.Errorf("chat with the waiting room full: %d %q %s", code, hdr.Get("Retry-After"), body)
	}
	code, _, body = ts.post(t, "/v1/messages/count_tokens", `{"model":"tiny","messages":[{"role":"user","content":"x"}]}`)
	if code != 429 || path(obj(t, string(body)), "error", "type") != "rate_limit_error" {
		t.Errorf("count_tokens with the waiting room full: %d %s", code, body)
	}
	ts.release()
	if code := <-done; code != 200 {
		t.Errorf("the waiting request: %d", code)
	}
	_, _, m := ts.get(t, "/metrics")
	for _, want := range []string{`lithos_requests_total{endpoint="chat",code="499"} 1`, "lithos_requests_rejected_total 2\n"} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestPromptLimits: a generation request is tokenized up to the context and refused beyond
// it; count_tokens counts exactly up to 16 × the context and refuses longer prompts.
func TestPromptLimits(t *testing.T) {
	big := newTestServer(t, Options{Context: 65536}, nil)
	ts := newTestServer(t, Options{Context: 64}, nil)
	count := func(ts *testServer, words int) (int, map[string]any) {
		code, _, body := ts.post(t, "/v1/messages/count_tokens",
			`{"model":"tiny","messages":[{"role":"user","content":"`+strings.Repeat("word ", words)+`"}]}`)
		return code, obj(t, string(body))
	}
	_, want := count(big, 100)
	code, got := count(ts, 100)
	if n, _ := want["input_tokens"].(float64); code != 200 || got["input_tokens"] != n || n <= 64 || n > 16*64 {
		t.Errorf("count_tokens of %v tokens at context 64: %d %v", want["input_tokens"], code, got)
	}
	code, got = count(ts, 1000)
	if msg, _ := path(got, "error", "message").(string); code != 400 || !strings.Contains(msg, "more than 1024 tokens") {
		t.Errorf("count_tokens beyond 16 × the context: %d %v", code, got)
	}
	code, _, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"`+strings.Repeat("word ", 100)+`"}]}`)
	e := obj(t, string(body))
	if msg, _ := path(e, "error", "message").(string); code != 400 || path(e, "error", "code") != "context_length_exceeded" ||
		!strings.Contains(msg, "more than 64 tokens") {
		t.Errorf("chat beyond the context: %d %s", code, body)
	}
}

// TestHosts: without an API key, Host names other than localhost, IP literals and
// Options.AllowedHosts (exact, any case, any port) are refused with 403 in the API's shape.
func TestHosts(t *testing.T) {
	ts := newTestServer(t, Options{AllowedHosts: []string{"my.box", "Other.Example."}}, nil)
	for _, host := range []string{"my.box:8000", "MY.BOX", "other.example", "192.168.1.5:8000", "[fe80::1]:8000", "localhost.:9"} {
		if code, _, body := doHost(t, ts, host, "/v1/models"); code != 200 {
			t.Errorf("Host %s: %d %s", host, code, body)
		}
	}
	for _, host := range []string{"evil.my.box", "my.box.evil.example", "localhost.attacker.example", "127.0.0.1.nip.io"} {
		code, _, body := doHost(t, ts, host, "/v1/models")
		if e := obj(t, string(body)); code != 403 || path(e, "error", "code") != "host_not_allowed" || path(e, "error", "type") != "permission_error" {
			t.Errorf("Host %s: %d %s", host, code, body)
		}
	}
	req, _ := http.NewRequest("POST", ts.url+"/v1/messages", strings.NewReader(`{}`))
	req.Host = "evil.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || path(obj(t, string(b)), "error", "type") != "permission_error" {
		t.Errorf("Anthropic path, foreign Host: %d %s", resp.StatusCode, b)
	}
	any := newTestServer(t, Options{AllowedHosts: []string{"*"}}, nil)
	if code, _, body := doHost(t, any, "anything.example", "/v1/models"); code != 200 {
		t.Errorf(`AllowedHosts "*": %d %s`, code, body)
	}
}

// TestCrossOrigin: a browser request from another origin (Sec-Fetch-Site, or an Origin that
// is not the Host) cannot make the server generate — even to 127.0.0.1, which passes the
// Host check; same-origin and non-browser requests (no such headers) are served, safe
// methods too, and no answer carries CORS headers (a page cannot read any).
func TestCrossOrigin(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	body := `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`
	for _, c := range []struct {
		hdr  []string
		want int
	}{
		{nil, 200},
		{[]string{"Sec-Fetch-Site", "cross-site"}, 403},
		{[]string{"Sec-Fetch-Site", "same-site"}, 403},
		{[]string{"Origin", "http://evil.example"}, 403},
		{[]string{"Sec-Fetch-Site", "same-origin"}, 200},
		{[]string{"Sec-Fetch-Site", "none"}, 200},
	} {
		code, hdr, data := ts.post(t, "/v1/chat/completions", body, c.hdr...)
		if code != c.want || hdr.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%v: %d %s", c.hdr, code, data)
		}
		if code == 403 && path(obj(t, string(data)), "error", "code") != "cross_origin" {
			t.Errorf("%v: %s", c.hdr, data)
		}
	}
	if code, _, _ := ts.get(t, "/v1/models", "Sec-Fetch-Site", "cross-site"); code != 200 {
		t.Errorf("GET from another origin: %d", code)
	}
}

// rawExchange sends raw bytes on a new connection and returns the answer (its Close: the
// server announced Connection: close) and its body, read until the server closes (within 3 s).
func rawExchange(t *testing.T, ts *testServer, req string) (*http.Response, string) {
	t.Helper()
	c := rawConn(t, ts)
	defer c.Close()
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%.40q: %v", req, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%.40q: body: %v (the server did not close the connection)", req, err)
	}
	return resp, string(b)
}

// TestRefusalsBeforeTheBody: a wrong key (401), a foreign Host (403) and an announced body
// over the limit (413) are answered before the body arrives, and the connection is closed
// (Connection: close) instead of read to its end, whatever the client announced.
func TestRefusalsBeforeTheBody(t *testing.T) {
	keyed := newTestServer(t, Options{APIKey: "k", MaxBodyBytes: 1 << 10}, nil)
	open := newTestServer(t, Options{}, nil)
	head := func(host, extra string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n" +
			extra + "\r\n{\"model\":"
	}
	for _, c := range []struct {
		ts   *testServer
		req  string
		want string
	}{
		{keyed, head("localhost", ""), "401"},
		{keyed, head("localhost", "Authorization: Bearer k\r\n"), "413"},
		{open, head("evil.example", ""), "403"},
	} {
		resp, body := rawExchange(t, c.ts, c.req)
		if !strings.HasPrefix(resp.Status, c.want) || !resp.Close || !strings.Contains(body, `"error"`) {
			t.Errorf("%.60q: %s, close %v: %s", c.req, resp.Status, resp.Close, body)
		}
	}
	// The default limit follows the context (MaxBodyBytesFor).
	ts := newTestServer(t, Options{Context: 4096}, nil)
	limit := MaxBodyBytesFor(4096)
	if limit != 1<<20+64*4096 || MaxBodyBytesFor(32768) != 3<<20 || MaxBodyBytesFor(1<<20) != MaxMaxBodyBytes {
		t.Errorf("MaxBodyBytesFor: %d %d %d", limit, MaxBodyBytesFor(32768), MaxBodyBytesFor(1<<20))
	}
	resp, body := rawExchange(t, ts, "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: "+
		strconv.FormatInt(limit+1, 10)+"\r\n\r\n")
	if resp.StatusCode != 413 || !strings.Contains(body, strconv.FormatInt(limit, 10)) {
		t.Errorf("a body of the default limit + 1: %s %s", resp.Status, body)
	}
}

// TestRootErrorsJSON: what http.ServeMux answers in HTML or plain text — the redirect of a
// path that is not clean, a CONNECT request — is JSON in the API's shape.
func TestRootErrorsJSON(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ method, path, location string }{
		{"GET", "/v1//models?x=1", "/v1/models?x=1"},
		{"GET", "/v1/./models", "/v1/models"},
		{"POST", "/v1/messages/../messages", "/v1/messages"},
	} {
		req, _ := http.NewRequest(c.method, ts.url+"/", nil)
		req.URL.Opaque = c.path // sent as is
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := obj(t, string(b))
		shaped := m["error"] != nil
		if strings.HasPrefix(c.location, "/v1/messages") {
			shaped = m["type"] == "error"
		}
		if resp.StatusCode != 307 || resp.Header.Get("Location") != c.location ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !shaped {
			t.Errorf("%s %s: %d Location %q: %s", c.method, c.path, resp.StatusCode, resp.Header.Get("Location"), b)
		}
	}
	resp, body := rawExchange(t, ts, "GET //v1/models?x=1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if resp.StatusCode != 307 || resp.Header.Get("Location") != "/v1/models?x=1" || obj(t, body)["error"] == nil {
		t.Errorf("GET //v1/models: %s Location %q: %s", resp.Status, resp.Header.Get("Location"), body)
	}
	resp, body = rawExchange(t, ts, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	if resp.StatusCode != 405 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("CONNECT: %s %s: %s", resp.Status, resp.Header.Get("Content-Type"), body)
	} else if e := obj(t, body); path(e, "error", "message") == nil {
		t.Errorf("CONNECT: %s", body)
	}
}

// TestRequestChecks: stop sequences longer than MaxStopBytes are refused naming the field;
// tool names with Unicode letters pass; keys that are a prefix or an extension of the key
// are refused.
func TestRequestChecks(t *testing.T) {
	ts := newTestServer(t, Options{}, nil)
	long := strings.Repeat("s", MaxStopBytes+1)
	code, _, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny","stop":["`+long+`"],"messages":[{"role":"user","content":"x"}]}`)
	if e := obj(t, string(body)); code != 400 || path(e, "error", "param") != "stop" || !strings.Contains(path(e, "error", "message").(string), "1024") {
		t.Errorf("stop of %d bytes: %d %s", len(long), code, body)
	}
	code, _, body = ts.post(t, "/v1/messages", `{"model":"tiny","max_tokens":1,"stop_sequences":["`+long+`"],"messages":[{"role":"user","content":"x"}]}`)
	if msg, _ := path(obj(t, string(body)), "error", "message").(string); code != 400 || !strings.Contains(msg, "stop_sequences") {
		t.Errorf("stop_sequences of %d bytes: %d %s", len(long), code, body)
	}
	code, _, body = ts.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":1,"stop":["`+long[1:]+`"],"messages":[{"role":"user","content":"x"}]}`)
	if code != 200 {
		t.Errorf("stop of %d bytes: %d %s", MaxStopBytes, code, body)
	}
	for _, name := range []string{"météo", "get.weather-v2", "mcp__ide__get_diagnostics"} {
		code, _, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"`+
			name+`","parameters":{"type":"object"}}}]}`)
		if code != 200 {
			t.Errorf("tool name %q: %d %s", name, code, body)
		}
	}
	keyed := newTestServer(t, Options{APIKey: "sekret"}, nil)
	for key, want := range map[string]int{"sekret": 200, "sekre": 401, "sekret2": 401, "SEKRET": 401, "s": 401} {
		if code, _, _ := keyed.get(t, "/v1/models", "x-api-key", key); code != want {
			t.Errorf("key %q: %d, want %d", key, code, want)
		}
	}
}

// TestHTTPServerLimits: the http.Server of HTTPServer cuts a body that does not arrive within
// ReadTimeout (408, or the connection closed) and refuses headers over 64 KiB (431).
func TestHTTPServerLimits(t *testing.T) {
	ts := newTestServer(t, Options{ReadTimeout: 300 * time.Millisecond}, nil)
	srv := ts.HTTPServer()
	if srv.IdleTimeout != 2*time.Minute || srv.MaxHeaderBytes != 64<<10 || srv.ReadHeaderTimeout != 10*time.Second || srv.WriteTimeout != 0 {
		t.Errorf("HTTPServer: idle %v, header bytes %d, header timeout %v, write timeout %v",
			srv.IdleTimeout, srv.MaxHeaderBytes, srv.ReadHeaderTimeout, srv.WriteTimeout)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	ts.url = "http://" + ln.Addr().String()

	start := time.Now()
	resp, body := rawExchange(t, ts, "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{\"model\":")
	if resp.StatusCode != 408 || !strings.Contains(body, "read timeout") {
		t.Errorf("a body that stops arriving: %s %s", resp.Status, body)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the slow body was cut after %v (read timeout 300 ms)", d)
	}
	resp, _ = rawExchange(t, ts, "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Big: "+strings.Repeat("b", 100<<10)+"\r\n\r\n")
	if resp.StatusCode != 431 {
		t.Errorf("100 KiB of headers: %s", resp.Status)
	}
}
