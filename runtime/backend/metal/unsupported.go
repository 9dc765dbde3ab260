//go:build !(darwin && arm64)

package metal

import "errors"

// ErrUnsupported is returned by Open where there is no Metal (anything but darwin/arm64).
var ErrUnsupported = errors.New("metal: the Metal backend needs macOS on Apple silicon (darwin/arm64)")

// Device is not available on this platform.
type Device struct{}

// Open returns ErrUnsupported.
func Open() (*Device, error) { return nil, ErrUnsupported }
