package serve

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Attack tests (security review): clients that go away at every stage of a request leave
// nothing behind: no queued job, no running generation, no goroutine.

// rawConn dials the test server.
func rawConn(t *testing.T, ts *testServer) net.Conn {
	t.Helper()
	u, err := url.Parse(ts.url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawRequest is a POST with a JSON body, as bytes.
func rawRequest(path, body string) []byte {
	return []byte("POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// TestAttackDisconnectEveryStage: a client hangs up mid-headers, mid-body, while queued
// (plain and streamed, and by half-closing), while its generation runs (plain and streamed,
// after the first frame). The queue empties, the worker goes idle, the server keeps serving
// in order, and the goroutines return to their number before. (Passes.)
func TestAttackDisconnectEveryStage(t *testing.T) {
	gate, running := make(chan struct{}), make(chan struct{})
	ts := newTestServer(t, Options{Queue: 8}, gated(gate, running))
	go func() { <-running; gate <- struct{}{} }()
	if code, _, _ := ts.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"warm"}]}`); code != 200 {
		t.Fatal("warm-up failed")
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	base := stableGoroutines()

	// A holder keeps the model busy at its first decode step.
	holder := make(chan int, 1)
	go func() {
		code, _, _ := ts.post(t, "/v1/chat/completions", chatBody("holder"))
		holder <- code
	}()
	<-running

	chat := `{"model":"tiny","messages":[{"role":"user","content":"gone"}]}`
	stream := `{"model":"tiny","stream":true,"messages":[{"role":"user","content":"gone"}]}`
	msgs := `{"model":"tiny","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"gone"}]}`
	// Before the queue: mid-headers, mid-body.
	for i, part := range [][]byte{
		rawRequest("/v1/chat/completions", chat)[:25],
		rawRequest("/v1/chat/completions", chat)[:len(rawRequest("/v1/chat/completions", chat))-10],
	} {
		c := rawConn(t, ts)
		if _, err := c.Write(part); err != nil {
			t.Fatal(i, err)
		}
		c.Close()
	}
	// While queued: plain, streamed (after its headers), Anthropic streamed, half-closed.
	for i, req := range []struct {
		path, body string
		readStatus bool
		halfClose  bool
	}{
		{"/v1/chat/completions", chat, false, false},
		{"/v1/chat/completions", stream, true, false},
		{"/v1/messages", msgs, true, false},
		{"/v1/responses", `{"model":"tiny","stream":true,"input":"gone"}`, false, true},
	} {
		c := rawConn(t, ts)
		if _, err := c.Write(rawRequest(req.path, req.body)); err != nil {
			t.Fatal(i, err)
		}
		waitFor(t, fmt.Sprintf("request %d to queue", i), func() bool { return ts.eng.q.len() == 1 })
		if req.readStatus {
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || !strings.Contains(line, " 200 ") {
				t.Fatalf("request %d: status line %q %v", i, line, err)
			}
		}
		if req.halfClose {
			c.(*net.TCPConn).CloseWrite()
		} else {
			c.Close()
		}
		waitFor(t, fmt.Sprintf("request %d to leave the queue", i), func() bool { return ts.eng.q.len() == 0 })
		c.Close()
	}
	// Release the holder.
	stop := make(chan struct{})
	feeder := func(stop chan struct{}) {
		for {
			select {
			case <-running:
			case <-stop:
				return
			}
			select {
			case gate <- struct{}{}:
			case <-stop:
				return
			}
		}
	}
	gate <- struct{}{}
	go feeder(stop)
	if code := <-holder; code != 200 {
		t.Fatalf("holder: %d", code)
	}
	close(stop)
	waitFor(t, "the worker to be idle", func() bool { return !ts.eng.running.Load() })

	// While running: plain request, then a stream after its first frame.
	for i, body := range []string{chat, stream} {
		c := rawConn(t, ts)
		if _, err := c.Write(rawRequest("/v1/chat/completions", body)); err != nil {
			t.Fatal(err)
		}
		<-running // at its first decode step
		if body == stream {
			rd := bufio.NewReader(c)
			for {
				line, err := rd.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(line, "data: ") {
					break
				}
			}
		}
		c.Close()
		waitFor(t, fmt.Sprintf("running request %d to stop", i), func() bool { return !ts.eng.running.Load() })
	}

	// Still serving, and nothing left behind.
	stop2 := make(chan struct{})
	go feeder(stop2)
	code, _, body := ts.post(t, "/v1/chat/completions", chatBody("after"))
	close(stop2)
	if code != 200 || path(obj(t, string(body)), "choices", 0, "message", "content") != "echo: after" {
		t.Fatalf("after the disconnects: %d %s", code, body)
	}
	order := ts.generations()
	if want := []string{"warm", "holder", "gone", "gone", "after"}; !slices.Equal(order, want) {
		t.Errorf("generations run %q, want %q (the queued requests whose clients left must not run)", order, want)
	}
	_, _, m := ts.get(t, "/metrics")
	for _, want := range []string{"lithos_queue_depth 0\n", "lithos_running 0\n", "lithos_requests_cancelled_total 2\n"} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	waitFor(t, fmt.Sprintf("goroutines back to %d", base), func() bool { return runtime.NumGoroutine() <= base })
}
