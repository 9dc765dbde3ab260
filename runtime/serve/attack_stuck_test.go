package serve

import (
	"bufio"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Attack tests (security review, docs/serving.md §4): a client that keeps its connection
// open but never reads its SSE stream must not hold the model for everybody else.

// floodScript answers a long text to the user message "flood" and a short one otherwise.
func floodScript(history string) string {
	if strings.Contains(lastUser(history), "flood") {
		return strings.Repeat("word ", 60000)
	}
	return "ok"
}

// stuckStream opens a streaming chat request on a raw connection with a tiny receive
// buffer and never reads it: the server's writes block once the socket buffers are full.
func stuckStream(t *testing.T, ts *testServer, path, body string) net.Conn {
	t.Helper()
	u, err := url.Parse(ts.url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(1024)
	}
	req := "POST " + path + " HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAttackStuckStreamReaderBlocksOthers: one client streams a long answer and never reads
// it. Expected: the other clients are still answered (the worker must not wait on a slow
// reader: buffer the job's events, which max_tokens bounds, or put a write deadline on the
// stream and cancel the job when it passes). Observed before a fix: the worker blocks in
// job.send once the 16-message channel is full, the victim below waits until its timeout,
// and every later request queues behind it and then gets 429.
func TestAttackStuckStreamReaderBlocksOthers(t *testing.T) {
	for _, api := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"flood"}]}`},
		{"/v1/messages", `{"model":"tiny","stream":true,"max_tokens":64000,"messages":[{"role":"user","content":"flood"}]}`},
	} {
		t.Run(strings.TrimPrefix(api.path, "/v1/"), func(t *testing.T) {
			ts := newTestServer(t, Options{Queue: 4, Context: 65536}, func(ft *fakeTarget) { ft.Script = floodScript })
			// Control: the same stream, read by its client, takes d; the victim may wait for
			// that much generation (and more on a loaded machine), not forever.
			t0 := time.Now()
			if code, _, body := ts.post(t, api.path, api.body); code != 200 || len(body) < 1<<20 {
				t.Fatalf("control stream: %d, %d bytes", code, len(body))
			}
			d := time.Since(t0)
			stuck := stuckStream(t, ts, api.path, api.body)
			defer stuck.Close()
			waitFor(t, "the stuck stream to run", func() bool { return ts.eng.running.Load() })

			client := &http.Client{Timeout: 2*d + 2*time.Second}
			start := time.Now()
			resp, err := client.Post(ts.url+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"victim"}]}`))
			if err != nil {
				t.Errorf("a client that never reads its stream blocks everybody: the victim got no answer in %v "+
					"(the whole stream, read, takes %v): %v", time.Since(start).Round(time.Millisecond), d.Round(time.Millisecond), err)
			} else {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("victim: status %d", resp.StatusCode)
				}
			}
			// Release the stuck client: the server must recover (cancel the generation).
			stuck.Close()
			waitFor(t, "the worker to be idle after the stuck client left", func() bool { return !ts.eng.running.Load() })
		})
	}
}

// TestAttackStuckReaderWhileQueued: a streaming client that never reads while it waits in
// the queue only gets keep-alive comments; it must give its place back when it goes away
// and the server keeps serving. (Passes: documents the behaviour.)
func TestAttackStuckReaderWhileQueued(t *testing.T) {
	gate, running := make(chan struct{}), make(chan struct{})
	ts := newTestServer(t, Options{Queue: 2, KeepAlive: 20 * time.Millisecond}, gated(gate, running))
	done := make(chan int, 1)
	go func() {
		code, _, _ := ts.post(t, "/v1/chat/completions", chatBody("first"))
		done <- code
	}()
	<-running
	stuck := stuckStream(t, ts, "/v1/chat/completions", `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"queued"}]}`)
	waitFor(t, "the stuck request to queue", func() bool { return ts.eng.q.len() == 1 })
	// Read the status line only, then go away.
	if line, err := bufio.NewReader(stuck).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("queued stream: %q %v", line, err)
	}
	stuck.Close()
	waitFor(t, "the queue to drop the request", func() bool { return ts.eng.q.len() == 0 })
	go func() { gate <- struct{}{}; feed(gate, running, 1000) }() // the step waiting now, then the rest
	if code := <-done; code != 200 {
		t.Fatalf("first: %d", code)
	}
}
