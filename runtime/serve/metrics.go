package serve

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// metrics are the server's counters, written in the Prometheus text exposition format
// (version 0.0.4) by GET /metrics. Counters only grow; the *_per_second gauges describe the
// last generation, tokens_per_round all decode rounds so far.
type metrics struct {
	mu       sync.Mutex
	requests map[[2]string]uint64 // (endpoint, status code) → count

	promptTokens, cachedTokens, generatedTokens atomic.Uint64
	prefillTokens, decodeTokens, decodeRounds   atomic.Uint64
	prefillNanos, decodeNanos, queueNanos       atomic.Uint64
	rejected, cancelled, failed                 atomic.Uint64
	checkpointHits, checkpointMisses            atomic.Uint64
	checkpointEvictions, checkpointsRefused     atomic.Uint64
	sessionsReused                              atomic.Uint64
	lastPrefillTPS, lastDecodeTPS               atomic.Uint64 // float64 bits
	checkpoints, checkpointBytes                atomic.Int64
	checkpointBudget                            atomic.Int64
}

func newMetrics() *metrics { return &metrics{requests: map[[2]string]uint64{}} }

func (m *metrics) request(endpoint string, code int) {
	m.mu.Lock()
	m.requests[[2]string{endpoint, strconv.Itoa(code)}]++
	m.mu.Unlock()
}

func (m *metrics) queueWait(d time.Duration) { m.queueNanos.Add(uint64(d)) }

func (m *metrics) prefill(tokens int, d time.Duration) {
	m.prefillTokens.Add(uint64(tokens))
	m.prefillNanos.Add(uint64(d))
	if d > 0 {
		m.lastPrefillTPS.Store(math.Float64bits(float64(tokens) / d.Seconds()))
	}
}

func (m *metrics) decode(tokens, rounds int, d time.Duration) {
	m.decodeTokens.Add(uint64(tokens))
	m.decodeRounds.Add(uint64(rounds))
	m.decodeNanos.Add(uint64(d))
	if rounds > 0 && d > 0 {
		m.lastDecodeTPS.Store(math.Float64bits(float64(tokens) / d.Seconds()))
	}
}

func (m *metrics) record(r *genResult) {
	m.promptTokens.Add(uint64(r.promptTokens))
	m.cachedTokens.Add(uint64(r.cachedTokens))
	m.generatedTokens.Add(uint64(r.completionTokens))
	switch {
	case r.finish == finishCancelled:
		m.cancelled.Add(1)
	case r.err != nil:
		m.failed.Add(1)
	}
}

func (m *metrics) setCheckpoints(n int, bytes int64) {
	m.checkpoints.Store(int64(n))
	m.checkpointBytes.Store(bytes)
}

// write prints the exposition; queued and running are sampled by the caller.
func (m *metrics) write(w io.Writer, queued int, running bool, model string) {
	p := func(name, typ, help string, v any) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", name, help, name, typ, name, v)
	}
	secs := func(a *atomic.Uint64) float64 { return float64(a.Load()) / 1e9 }
	fmt.Fprintf(w, "# HELP lithos_model_info The served model.\n# TYPE lithos_model_info gauge\nlithos_model_info{model=\"%s\"} 1\n", labelValue(model))
	m.mu.Lock()
	keys := make([][2]string, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	fmt.Fprint(w, "# HELP lithos_requests_total HTTP requests answered, by endpoint and status code.\n# TYPE lithos_requests_total counter\n")
	for _, k := range keys {
		fmt.Fprintf(w, "lithos_requests_total{endpoint=\"%s\",code=\"%s\"} %d\n", labelValue(k[0]), k[1], m.requests[k])
	}
	m.mu.Unlock()
	p("lithos_requests_rejected_total", "counter", "Requests refused with 429 because the queue was full.", m.rejected.Load())
	p("lithos_requests_cancelled_total", "counter", "Generations stopped because the client went away.", m.cancelled.Load())
	p("lithos_requests_failed_total", "counter", "Generations stopped by a backend error.", m.failed.Load())
	p("lithos_queue_depth", "gauge", "Requests waiting for the model.", queued)
	run := 0
	if running {
		run = 1
	}
	p("lithos_running", "gauge", "Generations running (the model runs one at a time).", run)
	p("lithos_queue_wait_seconds_total", "counter", "Time requests spent waiting in the queue.", secs(&m.queueNanos))
	p("lithos_prompt_tokens_total", "counter", "Prompt tokens of the generations run.", m.promptTokens.Load())
	p("lithos_prompt_tokens_cached_total", "counter", "Prompt tokens restored from a prefix checkpoint instead of prefilled.", m.cachedTokens.Load())
	p("lithos_generated_tokens_total", "counter", "Tokens generated (EOS included).", m.generatedTokens.Load())
	p("lithos_prefill_tokens_total", "counter", "Prompt tokens prefilled.", m.prefillTokens.Load())
	p("lithos_prefill_seconds_total", "counter", "Time spent in prefill (first token included).", secs(&m.prefillNanos))
	p("lithos_decode_tokens_total", "counter", "Tokens produced by decode rounds.", m.decodeTokens.Load())
	p("lithos_decode_rounds_total", "counter", "Decode rounds (one target forward pass each).", m.decodeRounds.Load())
	p("lithos_decode_seconds_total", "counter", "Time spent in decode rounds.", secs(&m.decodeNanos))
	tpr := 0.0
	if r := m.decodeRounds.Load(); r > 0 {
		tpr = float64(m.decodeTokens.Load()) / float64(r)
	}
	p("lithos_tokens_per_round", "gauge", "Decode tokens per round over all rounds so far (1 without a draft head).", tpr)
	p("lithos_prefill_tokens_per_second", "gauge", "Prefill speed of the last generation.", math.Float64frombits(m.lastPrefillTPS.Load()))
	p("lithos_decode_tokens_per_second", "gauge", "Decode speed of the last generation.", math.Float64frombits(m.lastDecodeTPS.Load()))
	p("lithos_checkpoint_hits_total", "counter", "Generations that started from a prefix checkpoint.", m.checkpointHits.Load())
	p("lithos_checkpoint_misses_total", "counter", "Generations that prefilled their whole prompt.", m.checkpointMisses.Load())
	p("lithos_checkpoint_evictions_total", "counter", "Checkpoints dropped to make room (least recently used first).", m.checkpointEvictions.Load())
	p("lithos_checkpoints", "gauge", "Prefix checkpoints held.", m.checkpoints.Load())
	p("lithos_checkpoint_bytes", "gauge", "Memory held by the prefix checkpoints (bytes).", m.checkpointBytes.Load())
	p("lithos_checkpoint_budget_bytes", "gauge", "Bound on the prefix checkpoints' memory (bytes; 0: none).", m.checkpointBudget.Load())
	p("lithos_checkpoints_refused_total", "counter", "Checkpoints not kept because they alone exceed the byte budget.", m.checkpointsRefused.Load())
	p("lithos_sessions_reused_total", "counter", "Sessions reset and reused from an evicted parked session instead of allocated.", m.sessionsReused.Load())
	// The process, under the names Prometheus' Go and process collectors use.
	p("go_goroutines", "gauge", "Number of goroutines that currently exist.", runtime.NumGoroutine())
	if rss, ok := residentBytes(); ok {
		p("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss)
	}
}

// residentBytes is the process's resident set size (bytes), read from /proc/self/statm
// (Linux: the second field, in pages); false where there is no such file.
func residentBytes() (int64, bool) {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}

// labelValue escapes a label value as the exposition format wants: backslash, double quote
// and newline.
func labelValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
