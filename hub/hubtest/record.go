package hubtest

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// Record is what the server saw and did for one request. Tests use it to assert e.g. that the
// Authorization header was (not) sent to the blob host, or that a resumed download asked for a Range.
type Record struct {
	Method        string
	Host          string // the request's Host header: tells the API listener from the blob listener
	Path          string // escaped URL path
	Query         string // raw query
	Authorization string // the Authorization header as received ("" when absent)
	Range         string // the Range header as received
	Status        int
	BodyBytes     int64  // response body bytes written (any body, including JSON and error bodies)
	FileKey       string // "org/name/path" when the request resolved to a repo file, else ""
	FileBytes     int64  // bytes of file content written (0 for HEAD, redirects and errors)
	Fault         string // the kind of fault that fired on this request ("" if none)
	Aborted       bool   // the handler dropped the connection (FaultDrop, or the client went away mid-body)
}

// FileStats counts what the server did for one repo file key "org/name/path".
type FileStats struct {
	Requests     int   // every request that resolved to the file (HEAD, GET, redirect, blob)
	BodyRequests int   // responses that carried file bytes (GET 200/206 with a non-empty body)
	Bytes        int64 // file bytes written in total
}

// defaultMaxRecords bounds the request log (oldest entries are dropped first).
const defaultMaxRecords = 10000

type recorder struct {
	mu    sync.Mutex
	max   int
	recs  []Record // ring once full
	start int
	files map[string]*FileStats
}

func (r *recorder) add(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recs) < r.max {
		r.recs = append(r.recs, rec)
	} else {
		r.recs[r.start] = rec
		r.start = (r.start + 1) % r.max
	}
	if rec.FileKey != "" {
		if r.files == nil {
			r.files = map[string]*FileStats{}
		}
		st := r.files[rec.FileKey]
		if st == nil {
			st = &FileStats{}
			r.files[rec.FileKey] = st
		}
		st.Requests++
		if rec.FileBytes > 0 {
			st.BodyRequests++
			st.Bytes += rec.FileBytes
		}
	}
}

// settle waits until no handler is running, for at most settleMax: a client can read the last byte of
// a response a moment before the handler returns and records it.
func (s *Server) settle() {
	deadline := time.Now().Add(settleMax)
	for s.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
}

const settleMax = 2 * time.Second

// Requests returns the recorded requests, oldest first (at most Options.MaxRecords of the latest).
// A request is recorded when its handler returns; Requests first waits (up to 2 s) for the handlers in
// flight, so a test that has just read a response sees its record.
func (s *Server) Requests() []Record {
	s.settle()
	r := &s.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Record, 0, len(r.recs))
	out = append(out, r.recs[r.start:]...)
	return append(out, r.recs[:r.start]...)
}

// FileStats returns the counters of one repo file key "org/name/path" (waiting like Requests).
func (s *Server) FileStats(key string) FileStats {
	s.settle()
	r := &s.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.files[key]; st != nil {
		return *st
	}
	return FileStats{}
}

// ResetRequests forgets the recorded requests and file counters.
func (s *Server) ResetRequests() {
	r := &s.rec
	r.mu.Lock()
	r.recs, r.start, r.files = nil, 0, nil
	r.mu.Unlock()
}

// statusWriter records the status and body bytes of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

// ReadFrom keeps the underlying writer's ReadFrom (sendfile) reachable through the wrapper.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err := rf.ReadFrom(src)
		w.bytes += n
		return n, err
	}
	return io.Copy(writerOnly{w}, src)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
