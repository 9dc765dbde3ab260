package serve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoScript answers "echo: " and the last user message (or tool result), so that answers
// cannot be mixed up.
func echoScript(history string) string {
	u := strings.TrimPrefix(lastUser(history), "<tool_response>\n")
	return "echo: " + strings.TrimSuffix(u, "\n</tool_response>")
}

// gated makes every decode step of the scripted backend wait for a value on gate; running
// gets a value each time a step starts waiting.
func gated(gate, running chan struct{}) func(*fakeTarget) {
	return func(ft *fakeTarget) {
		ft.Script = echoScript
		ft.Gate, ft.GateRun = gate, running
	}
}

func chatBody(user string) string {
	return `{"model":"tiny","messages":[{"role":"user","content":"` + user + `"}]}`
}

// TestQueueFIFO: one request runs, Queue wait, the next gets 429 with Retry-After (in each
// API's shape); when the model is free again every queued request is answered, in order.
func TestQueueFIFO(t *testing.T) {
	gate, running := make(chan struct{}), make(chan struct{})
	ts := newTestServer(t, Options{Queue: 3, RetryAfter: 2}, gated(gate, running))
	type answer struct {
		user string
		code int
		body string
	}
	answers := make(chan answer, 8)
	send := func(user string) {
		go func() {
			code, _, body := ts.post(t, "/v1/chat/completions", chatBody(user))
			answers <- answer{user, code, string(body)}
		}()
	}
	send("r0")
	<-running // r0 runs, stopped at its first decode step
	for i := 1; i <= 3; i++ {
		send(fmt.Sprintf("r%d", i))
		waitFor(t, "queue depth", func() bool { return ts.eng.q.len() == i })
	}
	code, hdr, body := ts.post(t, "/v1/chat/completions", chatBody("r4"))
	if code != 429 || hdr.Get("Retry-After") != "2" || path(obj(t, string(body)), "error", "type") != "rate_limit_error" ||
		path(obj(t, string(body)), "error", "code") != "queue_full" {
		t.Fatalf("full queue: %d %q %s", code, hdr.Get("Retry-After"), body)
	}
	code, _, body = ts.post(t, "/v1/messages", `{"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":"r5"}]}`)
	if code != 429 || path(obj(t, string(body)), "error", "type") != "rate_limit_error" {
		t.Fatalf("full queue, Anthropic: %d %s", code, body)
	}
	_, _, metrics := ts.get(t, "/metrics")
	if !strings.Contains(string(metrics), "lithos_queue_depth 3\n") || !strings.Contains(string(metrics), "lithos_running 1\n") ||
		!strings.Contains(string(metrics), "lithos_requests_rejected_total 2\n") {
		t.Fatalf("metrics while full:\n%s", metrics)
	}
	// Free the model.
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-running:
			case <-done:
				return
			}
		}
	}()
	close(gate)
	for range 4 {
		a := <-answers
		if a.code != 200 || path(obj(t, a.body), "choices", 0, "message", "content") != "echo: "+a.user {
			t.Fatalf("%s: %d %s", a.user, a.code, a.body)
		}
	}
	order := strings.Join(ts.generations(), ",")
	if order != "r0,r1,r2,r3" {
		t.Fatalf("generated in the order %v, want FIFO", order)
	}
	// A place freed is a place taken: the queue accepts again.
	if code, _, body := ts.post(t, "/v1/chat/completions", chatBody("r6")); code != 200 {
		t.Fatalf("after the queue drained: %d %s", code, body)
	}
	close(done)
}

// TestLoad: many concurrent clients on loopback, streaming and not, against a queue that can
// hold them all: every request is answered with its own text, none lost.
func TestLoad(t *testing.T) {
	const n = 32
	ts := newTestServer(t, Options{Queue: n}, func(ft *fakeTarget) { ft.Script = echoScript })
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("client %d", i)
			if i%2 == 0 {
				code, _, body := ts.post(t, "/v1/chat/completions", chatBody(user))
				if got := path(obj(t, string(body)), "choices", 0, "message", "content"); code != 200 || got != "echo: "+user {
					errs <- fmt.Errorf("%s: %d %s", user, code, body)
				}
				return
			}
			code, _, body := ts.post(t, "/v1/messages", `{"model":"tiny","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"`+user+`"}]}`)
			var text strings.Builder
			for _, e := range parseSSE(t, body) {
				if m := obj(t, e.data); path(m, "delta", "type") == "text_delta" {
					text.WriteString(path(m, "delta", "text").(string))
				}
			}
			if code != 200 || text.String() != "echo: "+user || !strings.Contains(string(body), "event: message_stop") {
				errs <- fmt.Errorf("%s: %d %q", user, code, text.String())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	_, _, m := ts.get(t, "/metrics")
	for _, want := range []string{
		fmt.Sprintf(`lithos_requests_total{endpoint="chat",code="200"} %d`, n/2),
		fmt.Sprintf(`lithos_requests_total{endpoint="messages",code="200"} %d`, n/2),
		"lithos_requests_rejected_total 0\n", "lithos_queue_depth 0\n",
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestLoadOverflow: more concurrent clients than places: each gets 200 or 429, never
// anything else, and the 429s are the rejections the metrics count.
func TestLoadOverflow(t *testing.T) {
	const n = 24
	ts := newTestServer(t, Options{Queue: 2}, func(ft *fakeTarget) { ft.Script = echoScript })
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("c%d", i)
			code, hdr, body := ts.post(t, "/v1/chat/completions", chatBody(user))
			if code == 200 && path(obj(t, string(body)), "choices", 0, "message", "content") != "echo: "+user ||
				code == 429 && hdr.Get("Retry-After") != "1" {
				t.Errorf("%s: %d %s", user, code, body)
			}
			mu.Lock()
			counts[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	_, _, m := ts.get(t, "/metrics")
	if counts[200]+counts[429] != n || counts[200] < 3 ||
		!strings.Contains(string(m), fmt.Sprintf("lithos_requests_rejected_total %d\n", counts[429])) {
		t.Fatalf("answers %v\n%s", counts, m)
	}
}

// TestDisconnect: a client that goes away mid-stream stops its generation, one that goes
// away while queued gives its place back without running, the server keeps serving, and the
// goroutines return to their count before.
func TestDisconnect(t *testing.T) {
	gate, running := make(chan struct{}), make(chan struct{})
	ts := newTestServer(t, Options{Queue: 4}, gated(gate, running))
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	// Warm up: one request through, then count.
	go func() { <-running; gate <- struct{}{} }() // max_tokens 2: the prefill's token and one step
	if code, _, _ := ts.post(t, "/v1/chat/completions", `{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"warm"}]}`); code != 200 {
		t.Fatal("warm-up failed")
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	base := stableGoroutines()

	// A streaming client reads the first events, then hangs up while decoding waits.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"tiny","stream":true,"messages":[{"role":"user","content":"stream me"}]}`))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-running // the generation waits at its first decode step
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first frame %q %v", line, err)
	}
	// A second client queues behind it and gives up.
	ctx2, cancel2 := context.WithCancel(context.Background())
	queued := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx2, "POST", ts.url+"/v1/messages",
			strings.NewReader(`{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"never runs"}]}`))
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		queued <- err
	}()
	waitFor(t, "the second request to queue", func() bool { return ts.eng.q.len() == 1 })
	cancel2()
	if err := <-queued; err == nil {
		t.Fatal("the cancelled request got an answer")
	}
	waitFor(t, "the queue to drop the request", func() bool { return ts.eng.q.len() == 0 })
	cancel()
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitFor(t, "the generation to stop", func() bool { return !ts.eng.running.Load() })
	_, _, m := ts.get(t, "/metrics")
	if !strings.Contains(string(m), "lithos_requests_cancelled_total 1\n") {
		t.Fatalf("metrics after the disconnects:\n%s", m)
	}
	// Still serving; the request that gave up never ran.
	go feed(gate, running, 1000)
	code, _, body := ts.post(t, "/v1/chat/completions", chatBody("after"))
	if code != 200 || path(obj(t, string(body)), "choices", 0, "message", "content") != "echo: after" {
		t.Fatalf("after the disconnects: %d %s", code, body)
	}
	if h := ts.lastHistory(t); strings.Contains(h, "never runs") {
		t.Fatal("the withdrawn request ran")
	}
	tr.CloseIdleConnections()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	waitFor(t, fmt.Sprintf("goroutines back to %d", base), func() bool { return runtime.NumGoroutine() <= base })
}

// feed answers up to n decode steps of a gated backend.
func feed(gate, running chan struct{}, n int) {
	for range n {
		select {
		case <-running:
		case <-time.After(300 * time.Millisecond):
			return
		}
		gate <- struct{}{}
	}
}

// stableGoroutines returns the goroutine count once it stops changing.
func stableGoroutines() int {
	n := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(10 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

// TestNoQueue: Queue < 0 lets nothing wait — the reference server's behaviour: a request is
// taken when the model is idle and refused with 429 while it generates.
func TestNoQueue(t *testing.T) {
	gate, running := make(chan struct{}), make(chan struct{})
	ts := newTestServer(t, Options{Queue: -1}, gated(gate, running))
	answer := make(chan int, 1)
	go func() {
		code, _, _ := ts.post(t, "/v1/chat/completions", chatBody("first"))
		answer <- code
	}()
	<-running
	if code, _, body := ts.post(t, "/v1/chat/completions", chatBody("second")); code != 429 {
		t.Fatalf("while generating: %d %s", code, body)
	}
	go func() { gate <- struct{}{}; feed(gate, running, 1000) }() // the step waiting now, then the rest
	if code := <-answer; code != 200 {
		t.Fatalf("first: %d", code)
	}
	waitFor(t, "the worker to be idle", func() bool {
		ts.eng.q.mu.Lock()
		defer ts.eng.q.mu.Unlock()
		return !ts.eng.q.busy
	})
	if code, _, body := ts.post(t, "/v1/chat/completions", chatBody("third")); code != 200 {
		t.Fatalf("idle model: %d %s", code, body)
	}
}
