package serve

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkRequestOverhead measures what the server adds to a request on loopback — decode,
// checks, template, tokenizer, queue hand-off to the worker, session, answer — with the
// scripted backend answering "ok" (one token and the EOS), against a floor measured in the
// same run: a bare net/http handler answering a body of the same size over the same loopback.
func BenchmarkRequestOverhead(b *testing.B) {
	ts := newTestServer(b, Options{}, func(ft *fakeTarget) { ft.Script = func(string) string { return "ok" } })
	body := `{"model":"tiny","messages":[{"role":"user","content":"Hi"}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	do := func(url string) int {
		resp, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return int(n)
	}
	size := do(ts.url + "/v1/chat/completions")
	answer := strings.Repeat("x", size)
	floorSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	}))
	defer floorSrv.Close()
	const n = 200
	measure := func(url string) time.Duration {
		t0 := time.Now()
		for range n {
			do(url)
		}
		return time.Since(t0) / n
	}
	b.ResetTimer()
	var floor, full time.Duration
	for range b.N {
		floor += measure(floorSrv.URL)
		full += measure(ts.url + "/v1/chat/completions")
	}
	b.ReportMetric(float64(floor.Microseconds())/float64(b.N), "floor-µs/req")
	b.ReportMetric(float64(full.Microseconds())/float64(b.N), "server-µs/req")
	b.ReportMetric(float64(full)/float64(floor), "x-floor")
}
