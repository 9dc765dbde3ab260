package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// errStalled is the cancel cause of a request whose body stopped arriving.
var errStalled = errors.New("download stalled")

// retryable reports whether huggingface_hub retries this status (A7).
func retryable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// backoff returns the wait before retry number i (0-based): base·2^i capped at
// retryMax, or what Retry-After / RateLimit (t=seconds) says on a 429/503.
func (c *Client) backoff(i int, resp *http.Response) time.Duration {
	d := c.retryBase << i
	if d > c.retryMax || d <= 0 {
		d = c.retryMax
	}
	if resp == nil {
		return d
	}
	// RateLimit: "api";r=0;t=55 → wait t+1 s (hub-and-go.md A7).
	if rl := resp.Header.Get("RateLimit"); rl != "" && strings.Contains(rl, "r=0") {
		for _, part := range strings.Split(rl, ";") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(part), "t="); ok {
				if n, err := strconv.Atoi(v); err == nil && n >= 0 {
					return c.scaleServerWait(time.Duration(n+1) * time.Second)
				}
			}
		}
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(ra)); err == nil && n >= 0 {
			return c.scaleServerWait(time.Duration(n) * time.Second)
		}
	}
	return d
}

// scaleServerWait caps a server-requested wait at 5 minutes, and scales it
// down in the same proportion as a shortened retry base (tests set a base of
// milliseconds so a "Retry-After: 1" costs 1 ms, not a second).
func (c *Client) scaleServerWait(d time.Duration) time.Duration {
	if c.retryBase < time.Second {
		d = d * c.retryBase / time.Second
	}
	return min(d, 5*time.Minute)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// newRequest builds a request with the User-Agent, and the bearer token when
// the URL's host is the Hub's own (credentials never go to a CDN host).
func (c *Client) newRequest(ctx context.Context, method, rawURL string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("build request %s: %w", rawURL, err)
	}
	req.Header.Set("User-Agent", c.ua)
	if c.token != "" && c.sameHost(req.URL) {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

func (c *Client) sameHost(u *url.URL) bool {
	eu, err := url.Parse(c.endpoint)
	return err == nil && strings.EqualFold(eu.Host, u.Host) && eu.Scheme == u.Scheme
}

// roundTrip sends one request without following redirects.
func (c *Client) roundTrip(req *http.Request) (*http.Response, error) {
	hc := *c.http
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return hc.Do(req)
}

// doRetry sends a request built by mk, retrying network errors and retryable
// statuses with backoff. A successful (or non-retryable) response is returned
// with its body open. mk is called again for each attempt.
func (c *Client) doRetry(ctx context.Context, mk func() (*http.Request, error)) (*http.Response, error) {
	var lastErr error
	for i := 0; ; i++ {
		req, err := mk()
		if err != nil {
			return nil, err
		}
		resp, err := c.roundTrip(req)
		if err == nil && !retryable(resp.StatusCode) {
			return resp, nil
		}
		if ctx.Err() != nil {
			if resp != nil {
				resp.Body.Close()
			}
			return nil, context.Cause(ctx)
		}
		if err != nil {
			lastErr = fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), err)
		}
		if i >= c.maxRetries {
			if resp != nil {
				return resp, nil // the caller turns the status into an HTTPError
			}
			return nil, lastErr
		}
		wait := c.backoff(i, resp)
		if resp != nil {
			c.log.Warn("hub: retrying", "url", req.URL.Redacted(), "status", resp.StatusCode, "wait", wait)
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
		} else {
			c.log.Warn("hub: retrying", "url", req.URL.Redacted(), "err", err, "wait", wait)
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// stallWatch cancels a request when its body delivers no byte for d.
type stallWatch struct {
	r      io.Reader
	d      time.Duration
	timer  *time.Timer
	cancel context.CancelCauseFunc
	c      *Client
	once   sync.Once
}

// watchBody returns a reader over body that counts bytes into the client's
// total and cancels via cancel if nothing arrives for the stall timeout.
func (c *Client) watchBody(body io.Reader, cancel context.CancelCauseFunc) *stallWatch {
	s := &stallWatch{r: body, d: c.stallTimeout, cancel: cancel, c: c}
	s.timer = time.AfterFunc(s.d, func() { cancel(errStalled) })
	return s
}

func (s *stallWatch) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.d)
		s.c.fetched.Add(int64(n))
	}
	return n, err
}

func (s *stallWatch) Stop() { s.once.Do(func() { s.timer.Stop() }) }

// httpScheme refuses URLs a server may not send us to (file:, ftp:, ...).
func httpScheme(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return errPermanent{fmt.Errorf("the server redirected to %q: only http and https are followed", u.Redacted())}
	}
	return nil
}

// getJSON GETs rawURL and decodes a JSON body of at most limit bytes into v,
// retrying transient failures: network errors and retryable statuses (as
// doRetry), and bodies that stall or break off. It returns the response
// headers. Non-success statuses become *HTTPError.
func (c *Client) getJSON(ctx context.Context, rawURL string, limit int64, v any, repo, rev, path string) (http.Header, error) {
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithCancelCause(ctx)
		resp, err := c.doRetry(rctx, func() (*http.Request, error) { return c.newRequest(rctx, http.MethodGet, rawURL) })
		if err != nil {
			cancel(nil)
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			err := httpError(resp, repo, rev, path)
			resp.Body.Close()
			cancel(nil)
			return nil, err
		}
		if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" && !resp.Uncompressed {
			resp.Body.Close()
			cancel(nil)
			return nil, fmt.Errorf("read %s: unexpected Content-Encoding %q", resp.Request.URL.Redacted(), ce)
		}
		body := c.watchBody(resp.Body, cancel)
		b, rerr := io.ReadAll(io.LimitReader(body, limit+1))
		body.Stop()
		resp.Body.Close()
		stalled := errors.Is(context.Cause(rctx), errStalled)
		cancel(nil)
		if rerr == nil && int64(len(b)) > limit {
			return nil, fmt.Errorf("read %s: response larger than %d bytes", resp.Request.URL.Redacted(), limit)
		}
		if rerr == nil {
			if err := json.Unmarshal(b, v); err != nil {
				return nil, fmt.Errorf("decode %s: %w", resp.Request.URL.Redacted(), err)
			}
			return resp.Header, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if stalled {
			rerr = fmt.Errorf("no data for %s: %w", c.stallTimeout, errStalled)
		}
		if attempt >= c.maxRetries {
			return nil, fmt.Errorf("read %s: %w", resp.Request.URL.Redacted(), rerr)
		}
		wait := c.backoff(attempt, nil)
		c.log.Warn("hub: body failed, retrying", "url", resp.Request.URL.Redacted(), "err", rerr, "wait", wait)
		if err := sleepCtx(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// checkContentRange verifies that a 206 answer carries exactly the bytes
// asked for: "bytes from-last/size" with last < end and the right total.
// A server or proxy that answers another range would otherwise have its
// bytes written at the wrong offset (and found only by the final hash).
func checkContentRange(resp *http.Response, from, end, size int64) (last int64, err error) {
	cr := resp.Header.Get("Content-Range")
	var a, b, total int64
	var totalStr string
	if _, perr := fmt.Sscanf(cr, "bytes %d-%d/%s", &a, &b, &totalStr); perr != nil {
		return 0, errPermanent{fmt.Errorf("answer to bytes=%d-%d has Content-Range %q, not \"bytes a-b/size\"", from, end-1, cr)}
	}
	if totalStr != "*" {
		if total, err = strconv.ParseInt(totalStr, 10, 64); err != nil || total != size {
			return 0, errPermanent{fmt.Errorf("answer to bytes=%d-%d says the file is %s bytes, expected %d", from, end-1, totalStr, size)}
		}
	}
	if a != from || b < a || b > end-1 {
		return 0, errPermanent{fmt.Errorf("server answered bytes %d-%d for bytes=%d-%d", a, b, from, end-1)}
	}
	if resp.ContentLength >= 0 && resp.ContentLength != b-a+1 {
		return 0, errPermanent{fmt.Errorf("answer to bytes=%d-%d has Content-Length %d for a %d-byte range", from, end-1, resp.ContentLength, b-a+1)}
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		return 0, errPermanent{fmt.Errorf("answer to bytes=%d-%d is %s-encoded; ranges must be identity", from, end-1, ce)}
	}
	return b, nil
}
