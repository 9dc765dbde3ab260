package hubtest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

func (s *Server) blobSig(snap *snapshot, sha string) string {
	m := hmac.New(sha256.New, s.secret)
	io.WriteString(m, snap.ID()+"/"+sha)
	return hex.EncodeToString(m.Sum(nil))
}

func (s *Server) serveResolve(w http.ResponseWriter, r *http.Request, rec *Record, snap *snapshot, e *fileEntry, targets []string) {
	if !e.LFS {
		w.Header().Set("ETag", `"`+e.OID+`"`)
		s.serveFile(w, r, rec, e, contentType(e.Path), targets)
		return
	}
	// LFS: 302 to the blob path, with the linked object's etag (sha256) and size (hub-and-go.md A3).
	loc := s.blobBaseURL(r) + "/cdn/" + snap.ID() + "/" + e.SHA256
	if snap.Settings.Private || snap.Settings.Gated != "" {
		loc += "?sig=" + s.blobSig(snap, e.SHA256) // "pre-signed", as a CDN URL is
	}
	h := w.Header()
	h.Set("Location", loc)
	h.Set("X-Linked-Etag", `"`+e.SHA256+`"`)
	h.Set("X-Linked-Size", strconv.FormatInt(e.Size, 10))
	h.Set("Accept-Ranges", "bytes")
	body := "Found. Redirecting to " + loc
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusFound)
	if r.Method != http.MethodHead {
		io.WriteString(w, body)
	}
}

func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, rec *Record, snap *snapshot, rt route, e *fileEntry, targets []string) {
	if e == nil {
		writeError(w, http.StatusNotFound, "", "Not Found")
		return
	}
	if snap.Settings.Private || snap.Settings.Gated != "" {
		sig := r.URL.Query().Get("sig")
		if !hmac.Equal([]byte(sig), []byte(s.blobSig(snap, rt.sha))) {
			writeError(w, http.StatusForbidden, "", "Forbidden: missing or invalid signature")
			return
		}
	}
	w.Header().Set("ETag", `"`+e.SHA256+`"`)
	if s.opts.BlobBaseURL == "" {
		// Blobs on the API host are a Hub-internal redirect target: huggingface_hub ≥ 1.3x follows a
		// HEAD's redirect to the same host name (any port) and reads the metadata from the final
		// response, so it must carry X-Repo-Commit (ETag and Content-Length give etag and size).
		// A separate blob host (BlobBaseURL) acts as a CDN and sends no Hub headers.
		w.Header().Set("X-Repo-Commit", snap.Commit)
	}
	s.serveFile(w, r, rec, e, "application/octet-stream", targets)
}

// contentType of a regular (git-stored) file; fixed so responses do not depend on the host's mime tables.
func contentType(p string) string {
	switch strings.ToLower(path.Ext(p)) {
	case ".json", ".txt", ".md", ".jinja", ".py", ".yaml", ".yml", ".csv", ".gitattributes":
		return "text/plain; charset=utf-8"
	}
	return "application/octet-stream"
}

// serveFile serves the bytes of e with Range support (200/206/416, Content-Range), applying body faults.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, rec *Record, e *fileEntry, ctype string, targets []string) {
	f, err := os.Open(e.abs)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "", "open "+e.Path+": "+err.Error())
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Accept-Ranges", "bytes")
	// Without an armed corrupt fault the *os.File goes to ServeContent as is, and with the ReadFrom
	// methods of the writers below the kernel's sendfile path stays available (loopback throughput for
	// tools/bench_fetch.sh).
	var content io.ReadSeeker = f
	if s.faults.armed(targets, FaultCorrupt) {
		content = &faultReader{ra: f, size: e.Size, claim: func(lo, hi int64) (Fault, bool) {
			ft, ok := s.faults.claim(targets, func(ft Fault) bool { return ft.Offset >= lo && ft.Offset < hi }, FaultCorrupt)
			if ok {
				rec.Fault = ft.Kind.String()
			}
			return ft, ok
		}}
	}
	bw := &bodyWriter{ResponseWriter: w, ctx: r.Context(), rec: rec, claim: func(bodyLen int64) (Fault, bool) {
		return s.faults.claim(targets, func(ft Fault) bool { return bodyLen < 0 || bodyLen > ft.Offset }, FaultDrop, FaultStall)
	}}
	http.ServeContent(bw, r, "", time.Time{}, content)
}

// faultReader is an io.ReadSeeker over a file that flips one byte when a FaultCorrupt fires on a read
// covering its offset (at most one per response).
type faultReader struct {
	ra      io.ReaderAt
	size    int64
	pos     int64
	claim   func(lo, hi int64) (Fault, bool) // claims a corrupt fault with offset in [lo, hi)
	claimed bool
}

func (f *faultReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		off += f.pos
	case io.SeekEnd:
		off += f.size
	default:
		return 0, errors.New("hubtest: bad whence")
	}
	if off < 0 {
		return 0, errors.New("hubtest: negative seek")
	}
	f.pos = off
	return off, nil
}

func (f *faultReader) Read(p []byte) (int, error) {
	if f.pos >= f.size {
		return 0, io.EOF
	}
	if rem := f.size - f.pos; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := f.ra.ReadAt(p, f.pos)
	if n > 0 && !f.claimed {
		if ft, ok := f.claim(f.pos, f.pos+int64(n)); ok {
			f.claimed = true
			p[ft.Offset-f.pos] ^= 0xff
		}
	}
	f.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// bodyWriter counts file bytes and applies FaultDrop / FaultStall at the first body write.
type bodyWriter struct {
	http.ResponseWriter
	ctx     context.Context
	rec     *Record
	claim   func(bodyLen int64) (Fault, bool) // claims a drop/stall fault for a body of bodyLen bytes (-1: unknown)
	claimed bool
	fault   *Fault
}

// start claims a drop/stall fault at the first body byte.
func (w *bodyWriter) start() {
	if w.claimed {
		return
	}
	w.claimed = true
	bodyLen := int64(-1)
	if cl, err := strconv.ParseInt(w.Header().Get("Content-Length"), 10, 64); err == nil {
		bodyLen = cl
	}
	if ft, ok := w.claim(bodyLen); ok {
		w.fault = &ft
		w.rec.Fault = ft.Kind.String()
	}
}

func (w *bodyWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		w.start()
	}
	if ft := w.fault; ft != nil && w.rec.FileBytes+int64(len(p)) > ft.Offset {
		head := p[:ft.Offset-w.rec.FileBytes]
		n, err := w.write(head)
		if err != nil {
			return n, err
		}
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		w.fault = nil
		if ft.Kind == FaultDrop {
			w.rec.Aborted = true
			panic(http.ErrAbortHandler) // net/http closes the connection without logging
		}
		t := time.NewTimer(ft.Delay)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return n, w.ctx.Err()
		}
		m, err := w.write(p[len(head):])
		return n + m, err
	}
	return w.write(p)
}

// ReadFrom passes the copy to the underlying writer (sendfile for an *os.File) when no fault is pending.
func (w *bodyWriter) ReadFrom(src io.Reader) (int64, error) {
	w.start()
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	if w.fault != nil || !ok {
		return io.Copy(writerOnly{w}, src)
	}
	n, err := rf.ReadFrom(src)
	w.rec.FileBytes += n
	return n, err
}

// writerOnly hides ReadFrom so io.Copy uses Write.
type writerOnly struct{ io.Writer }

func (w *bodyWriter) write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.rec.FileBytes += int64(n)
	return n, err
}

func (w *bodyWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *bodyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
