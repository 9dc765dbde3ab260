//go:build !(darwin && arm64)

package metal

import (
	"context"
	"errors"

	"lithos/runtime/backend"
	"lithos/runtime/bundle"
)

// ErrUnsupported is returned by Open where there is no Metal (anything but darwin/arm64).
var ErrUnsupported = errors.New("metal: the Metal backend needs macOS on Apple silicon (darwin/arm64)")

// Device is not available on this platform. (Not zero-sized: distinct devices compare unequal.)
type Device struct{ _ byte }

// Open returns ErrUnsupported.
func Open() (*Device, error) { return nil, ErrUnsupported }

// Close does nothing and returns nil (no Device can be opened here).
func (d *Device) Close() error { return nil }

// Load returns ErrUnsupported: no Metal on this platform.
func (Backend) Load(context.Context, *bundle.Bundle) (backend.Target, error) {
	return nil, ErrUnsupported
}

// Usable returns ErrUnsupported.
func Usable() error { return ErrUnsupported }

// UsableDevice returns "" and ErrUnsupported.
func UsableDevice() (string, error) { return "", ErrUnsupported }
