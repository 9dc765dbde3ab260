package hubtest

import (
	"errors"
	"net/url"
	"strings"
)

type routeKind int

const (
	routeInfo      routeKind = iota + 1 // GET /api/models/{org}/{name}[/revision/{rev}]
	routeTree                           // GET /api/models/{org}/{name}/tree/{rev}[/{path}]
	routePathsInfo                      // POST /api/models/{org}/{name}/paths-info/{rev}
	routeResolve                        // GET|HEAD /{org}/{name}/resolve/{rev}/{path}
	routeBlob                           // GET|HEAD /cdn/{org}/{name}/{sha256}
)

// route is a parsed request path. All strings are unescaped.
type route struct {
	kind      routeKind
	org, name string
	rev       string // "" when the URL names none (model info of the default branch)
	path      string // repo path, slash-separated, validated; "" = repo root (tree only)
	sha       string // routeBlob: 64 lowercase hex
	rest      string // escaped path after the repo id (for renamed-repo redirects), e.g. "/resolve/main/x"
}

var (
	errNoRoute = errors.New("no such endpoint") // 404 without an error code
	errBadPath = errors.New("invalid path")     // 400
	errBadRepo = errors.New("invalid repo id")  // RepoNotFound
	errNoRev   = errors.New("missing revision") // 400
	errNotBlob = errors.New("invalid blob id")  // 404 without an error code
)

// parseRoute parses an escaped URL path (r.URL.EscapedPath()). Each segment is unescaped on its own, so a
// revision sent fully percent-encoded (huggingface_hub quotes it with safe="") stays one segment, and a
// repo path is validated component by component: no empty, ".", ".." component, no backslash, NUL or
// control character, nothing starting with ".hubtest". The server never opens a path built from the
// request: files are looked up in the scanned listing, so even a parser bug could not reach outside ROOT.
func parseRoute(escaped string) (route, error) {
	if !strings.HasPrefix(escaped, "/") {
		return route{}, errNoRoute
	}
	raw := strings.Split(escaped[1:], "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		u, err := url.PathUnescape(s)
		if err != nil {
			return route{}, errBadPath
		}
		segs[i] = u
	}
	restAfter := func(n int) string {
		if n >= len(raw) {
			return ""
		}
		return "/" + strings.Join(raw[n:], "/")
	}
	switch {
	case len(segs) >= 4 && segs[0] == "api" && segs[1] == "models":
		rt := route{org: segs[2], name: segs[3], rest: restAfter(4)}
		if !validRepoPart(rt.org) || !validRepoPart(rt.name) {
			return rt, errBadRepo
		}
		rest := segs[4:]
		switch {
		case len(rest) == 0:
			rt.kind = routeInfo
		case rest[0] == "revision":
			rt.kind = routeInfo
			rt.rev = strings.Join(rest[1:], "/")
			if rt.rev == "" {
				return rt, errNoRev
			}
		case rest[0] == "tree":
			rt.kind = routeTree
			if len(rest) < 2 || rest[1] == "" {
				return rt, errNoRev
			}
			rt.rev = rest[1]
			p := rest[2:]
			if len(p) > 0 && p[len(p)-1] == "" { // "tree/main/" or "tree/main/dir/"
				p = p[:len(p)-1]
			}
			if len(p) > 0 {
				path, ok := joinComponents(p)
				if !ok {
					return rt, errBadPath
				}
				rt.path = path
			}
		case rest[0] == "paths-info":
			rt.kind = routePathsInfo
			rt.rev = strings.Join(rest[1:], "/")
			if rt.rev == "" {
				return rt, errNoRev
			}
		default:
			return rt, errNoRoute
		}
		return rt, nil
	case len(segs) == 4 && segs[0] == "cdn":
		rt := route{kind: routeBlob, org: segs[1], name: segs[2], sha: segs[3]}
		if !validRepoPart(rt.org) || !validRepoPart(rt.name) {
			return rt, errBadRepo
		}
		if !isSHA256Hex(rt.sha) {
			return rt, errNotBlob
		}
		return rt, nil
	case len(segs) >= 3 && segs[2] == "resolve":
		rt := route{kind: routeResolve, org: segs[0], name: segs[1], rest: restAfter(2)}
		if !validRepoPart(rt.org) || !validRepoPart(rt.name) {
			return rt, errBadRepo
		}
		if len(segs) < 4 || segs[3] == "" {
			return rt, errNoRev
		}
		rt.rev = segs[3]
		path, ok := joinComponents(segs[4:])
		if !ok {
			return rt, errBadPath
		}
		rt.path = path
		return rt, nil
	}
	return route{}, errNoRoute
}

// joinComponents validates unescaped path components and joins them with "/". A component may itself
// contain an (escaped) "/" which then splits further; the result has at least one component.
func joinComponents(cs []string) (string, bool) {
	if len(cs) == 0 {
		return "", false
	}
	p := strings.Join(cs, "/")
	return p, validRepoPath(p)
}

// validRepoPath reports whether p is a clean relative slash-separated repo path that the server may serve.
func validRepoPath(p string) bool {
	if p == "" || len(p) > 4096 {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if !validComponent(c) || strings.HasPrefix(c, ".hubtest") {
			return false
		}
	}
	return true
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
