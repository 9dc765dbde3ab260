package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Sentinel errors, matched with errors.Is. They classify *HTTPError values by
// the Hub's X-Error-Code header and status (hub-and-go.md A6).
var (
	ErrRepoNotFound     = errors.New("repository not found")
	ErrGatedRepo        = errors.New("gated repository")
	ErrRevisionNotFound = errors.New("revision not found")
	ErrEntryNotFound    = errors.New("file not found in repository")
	ErrUnauthorized     = errors.New("unauthorized")
	ErrForbidden        = errors.New("forbidden")
	ErrRateLimited      = errors.New("rate limited")
	ErrOffline          = errors.New("offline mode is enabled (HF_HUB_OFFLINE)")
	ErrChecksum         = errors.New("checksum mismatch")
	ErrUnsafePath       = errors.New("unsafe path in repository listing")
)

// HTTPError is a Hub answer that is not a success. Its message says what a
// person can do about it.
type HTTPError struct {
	Status    int    // HTTP status code
	Code      string // X-Error-Code header, e.g. "GatedRepo"
	Message   string // X-Error-Message or the JSON body's "error"
	URL       string // the request URL
	RequestID string // X-Request-Id, for reports to the Hub
	Repo      string // repository id, when known
	Revision  string
	Path      string // file path, when the request was for one file
	kind      error
	resp      *http.Response // for Retry-After on retries; body already consumed
}

// Unwrap returns the sentinel that classifies the error (ErrGatedRepo, ...), or nil.
func (e *HTTPError) Unwrap() error { return e.kind }

func (e *HTTPError) Error() string {
	var s string
	switch e.kind {
	case ErrRevisionNotFound:
		s = fmt.Sprintf("revision %q not found in %s: check the branch, tag or commit name", e.Revision, e.Repo)
	case ErrEntryNotFound:
		s = fmt.Sprintf("file %q not found in %s at revision %q", e.Path, e.Repo, e.Revision)
	case ErrGatedRepo:
		if e.Status == http.StatusForbidden {
			s = fmt.Sprintf("repository %s is gated and the token's account has not been granted access: accept the terms on its Hub page with that account", e.Repo)
		} else {
			s = fmt.Sprintf("repository %s is gated: accept its terms on the Hub page, then set HF_TOKEN (or run `hf auth login`) with a token of that account", e.Repo)
		}
	case ErrRepoNotFound:
		s = fmt.Sprintf("repository %s not found, or it is private or gated and no valid token was sent: check the name, or set HF_TOKEN", e.Repo)
	case ErrUnauthorized:
		s = fmt.Sprintf("the Hub refused the credentials for %s (HTTP 401): the token in HF_TOKEN or the token file is invalid or expired", e.Repo)
	case ErrForbidden:
		s = fmt.Sprintf("access to %s forbidden (HTTP 403): the token lacks permission (a fine-grained token needs read access to this repository)", e.Repo)
	case ErrRateLimited:
		s = "rate limited by the Hub (HTTP 429) after retries: wait a few minutes, and send a token (HF_TOKEN) for a higher limit"
	default:
		s = fmt.Sprintf("HTTP %d from %s", e.Status, e.URL)
	}
	if e.Message != "" && e.kind != nil {
		s += " (server: " + e.Message + ")"
	} else if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RequestID != "" {
		s += " [request id " + e.RequestID + "]"
	}
	return s
}

// httpError builds the error for a failed response, reading at most 4 KiB of
// its body for the server's message. The caller closes resp.Body.
func httpError(resp *http.Response, repo, rev, path string) *HTTPError {
	e := &HTTPError{
		Status:    resp.StatusCode,
		Code:      resp.Header.Get("X-Error-Code"),
		Message:   resp.Header.Get("X-Error-Message"),
		URL:       resp.Request.URL.Redacted(),
		RequestID: resp.Header.Get("X-Request-Id"),
		Repo:      repo, Revision: rev, Path: path,
	}
	if e.Message == "" {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		e.Message = serverMessage(body)
	}
	switch {
	case e.Code == "RevisionNotFound":
		e.kind = ErrRevisionNotFound
	case e.Code == "EntryNotFound":
		e.kind = ErrEntryNotFound
	case e.Code == "GatedRepo":
		e.kind = ErrGatedRepo
	case e.Code == "RepoNotFound":
		e.kind = ErrRepoNotFound
	case resp.StatusCode == http.StatusUnauthorized:
		// huggingface_hub treats a 401 as "not found or private" unless the
		// message says the credentials themselves are bad (A6).
		if strings.Contains(e.Message, "Invalid credentials") {
			e.kind = ErrUnauthorized
		} else {
			e.kind = ErrRepoNotFound
		}
	case resp.StatusCode == http.StatusForbidden:
		e.kind = ErrForbidden
	case resp.StatusCode == http.StatusTooManyRequests:
		e.kind = ErrRateLimited
	case resp.StatusCode == http.StatusNotFound && path != "":
		e.kind = ErrEntryNotFound
	case resp.StatusCode == http.StatusNotFound:
		e.kind = ErrRepoNotFound
	}
	return e
}

// serverMessage extracts {"error": "..."} / {"error": [...]} /
// {"error_description": "..."} from a JSON body, or returns short plain text.
func serverMessage(body []byte) string {
	var v struct {
		Error       json.RawMessage `json:"error"`
		Description string          `json:"error_description"`
	}
	if json.Unmarshal(body, &v) == nil {
		var s string
		var list []string
		switch {
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case json.Unmarshal(v.Error, &list) == nil && len(list) > 0:
			return strings.Join(list, "; ")
		case v.Description != "":
			return v.Description
		}
		return ""
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 || strings.ContainsAny(s, "<>") {
		return ""
	}
	return s
}
