package hubtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFaultRateLimitOnce(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	srv.Faults().RateLimit("/api/models/acme/tiny", 1, 1)
	resp, body := do(t, "GET", srv.URL+"/api/models/acme/tiny", nil)
	wantStatus(t, resp, 429)
	wantHeader(t, resp, "Retry-After", "1")
	wantHeader(t, resp, "RateLimit", `"api";r=0;t=1`)
	wantHeader(t, resp, "RateLimit-Policy", `"fixed window";"api";q=500;w=300`)
	if !strings.Contains(string(body), `"error"`) {
		t.Errorf("429 body %q", body)
	}
	resp, _ = do(t, "GET", srv.URL+"/api/models/acme/tiny", nil)
	wantStatus(t, resp, 200)
	if p := srv.Faults().Pending(); len(p) != 0 {
		t.Errorf("pending after firing: %+v", p)
	}
	recs := srv.Requests()
	if recs[0].Fault != "status" || recs[0].Status != 429 || recs[1].Fault != "" {
		t.Errorf("records %+v", recs)
	}
	// Resolver paths count against the "resolvers" bucket.
	srv.Faults().RateLimit("acme/tiny/config.json", 0, 1)
	resp, _ = do(t, "HEAD", srv.URL+"/acme/tiny/resolve/main/config.json", nil)
	wantStatus(t, resp, 429)
	wantHeader(t, resp, "Retry-After", "0")
	wantHeader(t, resp, "RateLimit", `"resolvers";r=0;t=0`)
}

func TestFaultStatusTimesAndTargets(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	// A file key matches the resolve 302 and the blob GET of an LFS file.
	srv.Faults().Status("acme/tiny/model.safetensors", 503, 2)
	for i := 0; i < 2; i++ {
		resp, _ := do(t, "HEAD", srv.URL+"/acme/tiny/resolve/main/model.safetensors", nil)
		wantStatus(t, resp, 503)
	}
	resp, _ := do(t, "HEAD", srv.URL+"/acme/tiny/resolve/main/model.safetensors", nil)
	wantStatus(t, resp, 302)
	loc := resp.Header.Get("Location")
	srv.Faults().Status("acme/tiny/model.safetensors", 500, 1)
	resp, _ = do(t, "GET", loc, nil)
	wantStatus(t, resp, 500)
	resp, _ = do(t, "GET", loc, nil)
	wantStatus(t, resp, 200)

	// A URL-path target matches that path only; other files are untouched.
	srv.Faults().Status("/acme/tiny/resolve/main/config.json", 502, 1)
	resp, _ = do(t, "GET", srv.URL+"/acme/tiny/resolve/main/tokenizer.json", nil)
	wantStatus(t, resp, 200)
	resp, _ = do(t, "GET", srv.URL+"/acme/tiny/resolve/"+mustCommit(t, srv)+"/config.json", nil)
	wantStatus(t, resp, 200)
	resp, _ = do(t, "GET", srv.URL+"/acme/tiny/resolve/main/config.json", nil)
	wantStatus(t, resp, 502)

	// Times < 0: until Clear.
	if err := srv.Faults().Add(Fault{Kind: FaultStatus, Target: "/api/models/acme/tiny", Status: 504, Times: -1}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		resp, _ = do(t, "GET", srv.URL+"/api/models/acme/tiny", nil)
		wantStatus(t, resp, 504)
	}
	if p := srv.Faults().Pending(); len(p) != 1 || p[0].Times != -1 {
		t.Errorf("pending %+v", p)
	}
	srv.Faults().Clear()
	resp, _ = do(t, "GET", srv.URL+"/api/models/acme/tiny", nil)
	wantStatus(t, resp, 200)
}

func mustCommit(t *testing.T, srv *Server) string {
	t.Helper()
	c, _, err := srv.Snapshot("acme", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFaultAddValidation(t *testing.T) {
	var fs Faults
	for _, ft := range []Fault{
		{Kind: FaultStatus, Target: "x", Status: 99},
		{Kind: FaultStatus, Target: "x", Status: 600},
		{Kind: FaultStatus, Status: 503},
		{Kind: 0, Target: "x"},
		{Kind: FaultDrop, Target: "x", Offset: -1},
		{Kind: FaultStall, Target: "x", Delay: -time.Second},
	} {
		if err := fs.Add(ft); err == nil {
			t.Errorf("Add(%+v) accepted", ft)
		}
	}
	if len(fs.Pending()) != 0 {
		t.Error("invalid faults were armed")
	}
}

// getBody GETs u and returns the bytes read before the body ended and the read error.
func getBody(t *testing.T, u string, h hdr) (*http.Response, []byte, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func TestFaultDropAfterAndResume(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	const key = "acme/tiny/big.dat"
	b := f.tiny["big.dat"]
	loc := srv.URL + "/cdn/acme/tiny/" + sha256Hex(b)

	srv.Faults().DropAfter(key, 1000)
	// A HEAD and a range shorter than 1000 bytes leave the fault armed.
	do(t, "HEAD", loc, nil)
	resp, part, err := getBody(t, loc, hdr{"Range": "bytes=0-99"})
	if err != nil || resp.StatusCode != 206 || len(part) != 100 {
		t.Fatalf("short range: %d, %d bytes, %v", resp.StatusCode, len(part), err)
	}
	if len(srv.Faults().Pending()) != 1 {
		t.Fatal("fault fired on a response that could not reach its offset")
	}

	resp, got, err := getBody(t, loc, nil)
	if resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("dropped GET: status %d, err %v, want 200 and unexpected EOF", resp.StatusCode, err)
	}
	if len(got) != 1000 || !bytes.Equal(got, b[:1000]) {
		t.Fatalf("dropped GET delivered %d bytes, want exactly the first 1000", len(got))
	}
	last := srv.Requests()[2]
	if !last.Aborted || last.Fault != "drop" || last.FileBytes != 1000 {
		t.Errorf("dropped record %+v", last)
	}

	// Resume from where it stopped: only the rest is sent.
	resp, rest, err := getBody(t, loc, hdr{"Range": "bytes=1000-"})
	if err != nil || resp.StatusCode != 206 {
		t.Fatalf("resume: %d %v", resp.StatusCode, err)
	}
	if !bytes.Equal(append(got, rest...), b) {
		t.Error("resumed file differs")
	}
	st := srv.FileStats(key)
	if st.Bytes != 100+int64(len(b)) || st.BodyRequests != 3 || st.Requests != 4 {
		t.Errorf("stats %+v: want %d bytes in 3 body responses of 4 requests", st, 100+len(b))
	}
}

func TestFaultDropRegularFileAtZero(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	srv.Faults().DropAfter("acme/tiny/small.dat", 0)
	resp, got, err := getBody(t, srv.URL+"/acme/tiny/resolve/main/small.dat", nil)
	if resp.StatusCode != 200 || len(got) != 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("drop at 0: status %d, %d bytes, err %v", resp.StatusCode, len(got), err)
	}
	wantHeader(t, resp, "Content-Length", strconv.Itoa(len(f.tiny["small.dat"])))
	_, got, err = getBody(t, srv.URL+"/acme/tiny/resolve/main/small.dat", nil)
	if err != nil || !bytes.Equal(got, f.tiny["small.dat"]) {
		t.Fatalf("second GET: %d bytes, %v", len(got), err)
	}
}

func TestFaultCorrupt(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	b := f.tiny["model.safetensors"]
	loc := srv.URL + "/cdn/acme/tiny/" + sha256Hex(b)
	srv.Faults().Corrupt("acme/tiny/model.safetensors", 1234)
	// A range that misses the offset is served clean and leaves the fault armed.
	_, part, _ := getBody(t, loc, hdr{"Range": "bytes=0-999"})
	if !bytes.Equal(part, b[:1000]) || len(srv.Faults().Pending()) != 1 {
		t.Fatal("corrupt fault fired outside its offset")
	}
	_, got, err := getBody(t, loc, nil)
	if err != nil || len(got) != len(b) {
		t.Fatalf("corrupt GET: %d bytes, %v", len(got), err)
	}
	if sha256Hex(got) == sha256Hex(b) {
		t.Fatal("corrupt body has the right sha256")
	}
	var diffs []int
	for i := range b {
		if got[i] != b[i] {
			diffs = append(diffs, i)
		}
	}
	if fmt.Sprint(diffs) != "[1234]" || got[1234] != ^b[1234] {
		t.Errorf("differences at %v, want exactly [1234] flipped", diffs)
	}
	if rec := srv.Requests()[1]; rec.Fault != "corrupt" {
		t.Errorf("record %+v", rec)
	}
	_, got, _ = getBody(t, loc, nil)
	if !bytes.Equal(got, b) {
		t.Error("corruption persisted past one response")
	}
	// Through a range that covers it.
	srv.Faults().Corrupt("acme/tiny/model.safetensors", 1234)
	_, got, _ = getBody(t, loc, hdr{"Range": "bytes=1230-1239"})
	if want := append([]byte(nil), b[1230:1240]...); got[4] != ^want[4] || !bytes.Equal(got[:4], want[:4]) || !bytes.Equal(got[5:], want[5:]) {
		t.Errorf("ranged corruption: got % x, clean % x", got, b[1230:1240])
	}
}

func TestFaultStall(t *testing.T) {
	f := newFixture(t)
	srv := f.start(t, Options{})
	b := f.tiny["big.dat"]
	loc := srv.URL + "/cdn/acme/tiny/" + sha256Hex(b)

	// A short stall delays but completes the body.
	srv.Faults().Stall("acme/tiny/big.dat", 10, time.Millisecond)
	_, got, err := getBody(t, loc, nil)
	if err != nil || !bytes.Equal(got, b) {
		t.Fatalf("short stall: %d bytes, %v", len(got), err)
	}
	if rec := srv.Requests()[0]; rec.Fault != "stall" || rec.FileBytes != int64(len(b)) {
		t.Errorf("record %+v", rec)
	}

	// A long stall: the client's own deadline fires after the first 10 bytes, and the handler returns
	// when the client goes away (not after the full delay).
	srv.Faults().Stall("acme/tiny/big.dat", 10, time.Hour)
	client := &http.Client{Timeout: 300 * time.Millisecond}
	resp, err := client.Get(loc)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, first); err != nil || !bytes.Equal(first, b[:10]) {
		t.Fatalf("first bytes before the stall: %v", err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatal("read through a one-hour stall")
	}
	if rec := srv.Requests()[1]; rec.Fault != "stall" || rec.FileBytes != 10 {
		t.Errorf("stalled record %+v", rec)
	}
}
