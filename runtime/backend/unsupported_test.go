package backend_test

import (
	"errors"
	"fmt"
	"testing"

	"lithos/runtime/backend"
)

// TestUnsupported: backend.Unsupported keeps the message and the wrapped chain and adds
// ErrUnsupported; nil stays nil.
func TestUnsupported(t *testing.T) {
	inner := errors.New("tensor lm_head is INT8")
	err := fmt.Errorf("bundle b: %w", backend.Unsupported(inner))
	if err.Error() != "bundle b: tensor lm_head is INT8" || !errors.Is(err, inner) || !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("%q: message or chain lost", err)
	}
	if errors.Is(inner, backend.ErrUnsupported) || backend.Unsupported(nil) != nil {
		t.Error("ErrUnsupported where none was added")
	}
}
