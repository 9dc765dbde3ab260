package backend

import "errors"

// ErrUnsupported marks a refusal: a backend that cannot run a bundle (a tensor format without
// a kernel, no packed lm_head, a bundle larger than the device's free memory) or a session
// option (a draft rule it has no program for), said before any work on the device. It is
// not a device failure (an allocation, a launch or a wait that failed while running), which
// is never wrapped with it. Test with errors.Is(err, ErrUnsupported); --backend auto passes
// over a backend whose Load or NewSession returns it (lithos/runtime/generate).
var ErrUnsupported = errors.New("not supported by this backend")

// Unsupported returns err marked as a refusal: errors.Is(·, ErrUnsupported) holds, and
// errors.Is/As still reach err's own chain. The message is err's, unchanged (it names the
// tensor, field or option). Unsupported(nil) is nil.
func Unsupported(err error) error {
	if err == nil {
		return nil
	}
	return unsupportedError{err}
}

type unsupportedError struct{ err error }

func (e unsupportedError) Error() string   { return e.err.Error() }
func (e unsupportedError) Unwrap() []error { return []error{e.err, ErrUnsupported} }
