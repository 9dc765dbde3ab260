package sha256x2

import (
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAgainstCryptoSHA256 hashes random messages of every length up to 300 bytes and random
// longer ones, written in random pieces, one stream (Write) and two (Write2, with pieces of
// different lengths so that the two fall in and out of step), and compares every digest with
// crypto/sha256's.
func TestAgainstCryptoSHA256(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	msg := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	lengths := []int{}
	for n := 0; n <= 300; n++ {
		lengths = append(lengths, n)
	}
	for range 60 {
		lengths = append(lengths, r.IntN(200000))
	}
	pieces := func(n int) []int {
		var out []int
		for n > 0 {
			k := min(n, r.IntN(3)*64+r.IntN(100)+1)
			if r.IntN(5) == 0 {
				k = min(n, r.IntN(70000))
			}
			out = append(out, k)
			n -= k
		}
		return out
	}
	for _, n := range lengths {
		a, b := msg(n), msg(r.IntN(2*n+1))
		wa, wb := sha256.Sum256(a), sha256.Sum256(b)
		d := New()
		for p, i := a, 0; len(p) > 0; i++ {
			k := pieces(len(p))[0]
			d.Write(p[:k])
			p = p[k:]
		}
		if got := d.Sum(nil); string(got) != string(wa[:]) {
			t.Fatalf("Write, %d bytes: %x, want %x", n, got, wa)
		}
		da, db := New(), New()
		pa, pb := a, b
		for len(pa) > 0 || len(pb) > 0 {
			ka, kb := 0, 0
			if len(pa) > 0 {
				ka = pieces(len(pa))[0]
			}
			if len(pb) > 0 && r.IntN(4) > 0 {
				kb = pieces(len(pb))[0]
			}
			Write2(da, pa[:ka], db, pb[:kb])
			pa, pb = pa[ka:], pb[kb:]
		}
		if got := da.Sum(nil); string(got) != string(wa[:]) {
			t.Fatalf("Write2 a, %d bytes: %x, want %x", n, got, wa)
		}
		if got := db.Sum(nil); string(got) != string(wb[:]) {
			t.Fatalf("Write2 b, %d bytes: %x, want %x", len(b), got, wb)
		}
		// The same bytes to both at different phases (a plain tensor and its source file).
		dc, dd := New(), New()
		dd.Write(b[:len(b)%64])
		Write2(dc, a, dd, a)
		dd.Write(b)
		want := sha256.New()
		want.Write(b[:len(b)%64])
		want.Write(a)
		want.Write(b)
		if string(dc.Sum(nil)) != string(wa[:]) || string(dd.Sum(nil)) != string(want.Sum(nil)) {
			t.Fatalf("Write2 of one slice, %d bytes: digests differ", n)
		}
	}
	if !Available() {
		t.Log("the two-at-a-time kernel is not available here: crypto/sha256 was tested")
	}
}

// BenchmarkWrite2 reports the throughput of two streams hashed together against one stream
// at a time with crypto/sha256, measured in the same run (bytes of both streams per second).
func BenchmarkWrite2(b *testing.B) {
	buf := make([]byte, 1<<20)
	b.Run("crypto-sha256-one-after-other", func(b *testing.B) {
		h1, h2 := sha256.New(), sha256.New()
		b.SetBytes(2 << 20)
		for b.Loop() {
			h1.Write(buf)
			h2.Write(buf)
		}
	})
	b.Run("Write", func(b *testing.B) {
		h1, h2 := New(), New()
		b.SetBytes(2 << 20)
		for b.Loop() {
			h1.Write(buf)
			h2.Write(buf)
		}
	})
	b.Run("Write2", func(b *testing.B) {
		h1, h2 := New(), New()
		b.SetBytes(2 << 20)
		for b.Loop() {
			Write2(h1, buf, h2, buf)
		}
	})
}

// TestGenerated checks that sha256x2_amd64.s is what gen.go writes.
func TestGenerated(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	out := filepath.Join(t.TempDir(), "x.s")
	if b, err := exec.Command(goTool, "run", "gen.go", "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("go run gen.go: %v\n%s", err, b)
	}
	got, err1 := os.ReadFile(out)
	want, err2 := os.ReadFile("sha256x2_amd64.s")
	if err1 != nil || err2 != nil || string(got) != string(want) {
		t.Fatalf("sha256x2_amd64.s is not gen.go's output (%v, %v): run go generate", err1, err2)
	}
}
