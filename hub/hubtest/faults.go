package hubtest

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FaultKind says what a Fault does.
type FaultKind int

const (
	// FaultStatus answers Fault.Status (e.g. 429, 503) with Fault.Header instead of the real response.
	// It fires on any request (HEAD, GET, POST; API, resolve or blob) that matches the target.
	FaultStatus FaultKind = iota + 1
	// FaultDrop writes Fault.Offset bytes of the response body, flushes them, then drops the connection
	// (the client sees a short body: unexpected EOF / connection reset). Fires only on responses that
	// carry more than Offset bytes of the file (GET 200/206 of a resolve or blob path); a HEAD or a
	// shorter range leaves it armed.
	FaultDrop
	// FaultCorrupt flips every bit of the byte at file offset Fault.Offset in the next response whose
	// range covers it, so the client's sha256 check must fail.
	FaultCorrupt
	// FaultStall writes Fault.Offset body bytes, flushes, then sleeps Fault.Delay (or until the client
	// goes away) before going on. Fires only on responses that carry more than Offset bytes of the file.
	FaultStall
)

func (k FaultKind) String() string {
	switch k {
	case FaultStatus:
		return "status"
	case FaultDrop:
		return "drop"
	case FaultCorrupt:
		return "corrupt"
	case FaultStall:
		return "stall"
	}
	return "FaultKind(" + strconv.Itoa(int(k)) + ")"
}

// Fault is one injected failure.
//
// Target selects requests: a target starting with "/" matches the request's URL path exactly (escaped
// form, e.g. "/api/models/org/name" or "/org/name/resolve/main/config.json"); any other target is a
// repo file key "org/name/path/in/repo" and matches the /resolve and blob requests serving that file at
// any revision (both the 302 of an LFS file and the blob GET it redirects to).
type Fault struct {
	Kind   FaultKind
	Target string
	// Times is how many matching responses the fault fires on; 0 means once, a negative value means on
	// every matching response until Faults.Clear.
	Times int
	// Status and Header: the response of a FaultStatus (Header may be nil).
	Status int
	Header http.Header
	// Offset: body bytes before the drop (FaultDrop) or stall (FaultStall); file offset of the flipped
	// byte (FaultCorrupt).
	Offset int64
	// Delay: how long a FaultStall sleeps.
	Delay time.Duration
}

// Faults is the fault-injection table of a Server; all methods are safe for concurrent use with each
// other and with requests in flight.
type Faults struct {
	mu     sync.Mutex
	faults []*activeFault
}

type activeFault struct {
	Fault
	left int // < 0: unlimited
}

// Add arms a fault. It returns an error for an unknown Kind, an empty Target, a FaultStatus without a
// status in [100, 599], or a negative Offset/Delay.
func (f *Faults) Add(ft Fault) error {
	switch ft.Kind {
	case FaultStatus:
		if ft.Status < 100 || ft.Status > 599 {
			return fmt.Errorf("hubtest: fault on %q: status %d out of [100, 599]", ft.Target, ft.Status)
		}
	case FaultDrop, FaultCorrupt, FaultStall:
	default:
		return fmt.Errorf("hubtest: fault on %q: unknown kind %v", ft.Target, ft.Kind)
	}
	if ft.Target == "" {
		return fmt.Errorf("hubtest: %v fault: empty target", ft.Kind)
	}
	if ft.Offset < 0 || ft.Delay < 0 {
		return fmt.Errorf("hubtest: %v fault on %q: negative offset or delay", ft.Kind, ft.Target)
	}
	left := ft.Times
	if left == 0 {
		left = 1
	}
	ft.Header = ft.Header.Clone()
	f.mu.Lock()
	f.faults = append(f.faults, &activeFault{Fault: ft, left: left})
	f.mu.Unlock()
	return nil
}

func (f *Faults) mustAdd(ft Fault) {
	if err := f.Add(ft); err != nil {
		panic(err)
	}
}

// DropAfter drops the connection after n body bytes of the next response carrying more than n bytes of
// the target.
func (f *Faults) DropAfter(target string, n int64) {
	f.mustAdd(Fault{Kind: FaultDrop, Target: target, Offset: n})
}

// Status answers code (with an {"error": ...} JSON body) to the next `times` requests matching target
// (times <= 0: once). Panics on a code outside [100, 599] (a test bug).
func (f *Faults) Status(target string, code, times int) {
	if times <= 0 {
		times = 1
	}
	f.mustAdd(Fault{Kind: FaultStatus, Target: target, Status: code, Times: times})
}

// RateLimit answers 429 to the next `times` requests matching target (times <= 0: once), with the Hub's
// rate-limit headers (hub-and-go.md A7): `Retry-After: <retryAfter>` (seconds) and
// `RateLimit: "<bucket>";r=0;t=<retryAfter>` plus `RateLimit-Policy`, where bucket is "api" for /api/
// paths and "resolvers" otherwise. Note huggingface_hub sleeps t+1 seconds on r=0; pass 0 for fast tests.
func (f *Faults) RateLimit(target string, retryAfter, times int) {
	if times <= 0 {
		times = 1
	}
	h := http.Header{}
	h.Set("Retry-After", strconv.Itoa(retryAfter))
	h.Set("RateLimit", `"{bucket}";r=0;t=`+strconv.Itoa(retryAfter))
	h.Set("RateLimit-Policy", `"fixed window";"{bucket}";q=500;w=300`)
	f.mustAdd(Fault{Kind: FaultStatus, Target: target, Status: http.StatusTooManyRequests, Header: h, Times: times})
}

// Corrupt flips the byte at file offset off in the next response carrying the target's bytes over off.
func (f *Faults) Corrupt(target string, off int64) {
	f.mustAdd(Fault{Kind: FaultCorrupt, Target: target, Offset: off})
}

// Stall sleeps d after `after` body bytes of the next response carrying more than `after` bytes of the
// target.
func (f *Faults) Stall(target string, after int64, d time.Duration) {
	f.mustAdd(Fault{Kind: FaultStall, Target: target, Offset: after, Delay: d})
}

// Clear disarms every fault.
func (f *Faults) Clear() {
	f.mu.Lock()
	f.faults = nil
	f.mu.Unlock()
}

// Pending returns the faults still armed (with Times set to what is left; -1 for unlimited), so a test
// can assert that the faults it armed have fired.
func (f *Faults) Pending() []Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Fault, 0, len(f.faults))
	for _, a := range f.faults {
		ft := a.Fault
		ft.Times = a.left
		out = append(out, ft)
	}
	return out
}

// claim fires (consumes one use of) the first armed fault of one of kinds matching any of targets and,
// when when is not nil, for which when returns true.
func (f *Faults) claim(targets []string, when func(Fault) bool, kinds ...FaultKind) (Fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, a := range f.faults {
		if !kindIn(a.Kind, kinds) || !targetIn(a.Target, targets) || when != nil && !when(a.Fault) {
			continue
		}
		if a.left > 0 {
			a.left--
			if a.left == 0 {
				f.faults = append(f.faults[:i:i], f.faults[i+1:]...)
			}
		}
		return a.Fault, true
	}
	return Fault{}, false
}

// armed reports whether a fault of one of kinds is armed for one of targets (without firing it).
func (f *Faults) armed(targets []string, kinds ...FaultKind) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.faults {
		if kindIn(a.Kind, kinds) && targetIn(a.Target, targets) {
			return true
		}
	}
	return false
}

func kindIn(k FaultKind, ks []FaultKind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func targetIn(t string, ts []string) bool {
	for _, x := range ts {
		if x != "" && x == t {
			return true
		}
	}
	return false
}

// rateLimitBucket is the Hub bucket a path counts against (hub-and-go.md A7).
func rateLimitBucket(urlPath string) string {
	if strings.HasPrefix(urlPath, "/api/") {
		return "api"
	}
	return "resolvers"
}
