package serve

import (
	"net/http"
)

// sse writes a Server-Sent Events stream (text/event-stream, one frame per event:
// optional "event: NAME" line, "data: JSON" line, blank line), flushing after every frame.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE sends the stream's headers with status 200 (lithos-metal.md §7.6: no caching, no
// proxy buffering).
func startSSE(w http.ResponseWriter) (*sse, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	return s, s.rc.Flush()
}

// event writes one frame: "event: name" (when name is not empty) and "data: " + JSON of v.
func (s *sse) event(name string, v any) error {
	var b []byte
	if name != "" {
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, marshal(v)...)
	b = append(b, "\n\n"...)
	return s.write(b)
}

// done writes OpenAI's end-of-stream frame "data: [DONE]".
func (s *sse) done() error { return s.write([]byte("data: [DONE]\n\n")) }

// keepAlive writes a comment frame, which every SSE client ignores, to keep idle connections
// (and proxies) open while the request waits in the queue or in prefill.
func (s *sse) keepAlive() error { return s.write([]byte(": keep-alive\n\n")) }

func (s *sse) write(b []byte) error {
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}
