package hub

import (
	"context"
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
