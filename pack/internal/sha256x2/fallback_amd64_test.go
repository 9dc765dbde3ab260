package sha256x2

import (
	"crypto/sha256"
	"testing"
)

// TestFallback: on a CPU without the SHA extensions Digest is crypto/sha256 and Write2 writes
// the two streams in turn; digests made either way may be mixed.
func TestFallback(t *testing.T) {
	defer func(a bool) { available = a }(available)
	msg := make([]byte, 1000)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	want := sha256.Sum256(msg)
	kernel := New()
	available = false
	a, b := New(), New()
	if a.std == nil {
		t.Fatal("no crypto/sha256 digest without the kernel")
	}
	Write2(a, msg[:300], b, msg)
	Write2(kernel, msg[:700], a, msg[300:])
	Write2(kernel, msg[700:], b, nil)
	for name, d := range map[string]*Digest{"fallback a": a, "fallback b": b, "kernel": kernel} {
		if got := d.Sum(nil); string(got) != string(want[:]) {
			t.Errorf("%s: %x, want %x", name, got, want)
		}
	}
}
