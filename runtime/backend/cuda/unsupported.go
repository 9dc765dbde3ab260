//go:build !(linux && amd64)

package cuda

import (
	"context"
	"errors"
	"runtime"

	"lithos/runtime/backend"
	"lithos/runtime/bundle"
)

// errUnsupported is returned on platforms without the CUDA driver bindings.
var errUnsupported = errors.New("cuda: the CUDA backend runs on linux/amd64 only (this is " + runtime.GOOS + "/" + runtime.GOARCH + ")")

// Backend is the CUDA backend; on this platform it only reports that it is unavailable.
type Backend struct {
	Ordinal int // GPU ordinal
}

// Name returns "cuda".
func (Backend) Name() string { return "cuda" }

// Load returns an error: no CUDA on this platform.
func (Backend) Load(context.Context, *bundle.Bundle) (backend.Target, error) {
	return nil, errUnsupported
}

// Usable returns why the CUDA backend cannot run here.
func Usable() error { return errUnsupported }

// UsableDevice returns "" and why the CUDA backend cannot run here.
func UsableDevice() (string, error) { return "", errUnsupported }

// RunsModels is false: no CUDA on this platform.
const RunsModels = false
