// Package sha256x2 computes SHA-256 (FIPS 180-4) of two independent byte streams two at a time
// on one core: on x86 CPUs with the SHA extensions the rounds of the two messages are
// interleaved, which keeps the SHA unit busy while each message's rounds wait for the previous
// ones (about 1.8× the throughput of one message at a time on the development VM's AMD EPYC;
// see gen.go). lithos-pack hashes a source shard and the bundle tensor packed from it this way
// (pack/srchash.go). Elsewhere Digest is crypto/sha256.
//
// The results are SHA-256 digests: tests compare them with crypto/sha256 for every length and
// split.
package sha256x2

//go:generate go run gen.go -o sha256x2_amd64.s

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"unsafe"
)

// Available reports whether the two-at-a-time kernel runs on this CPU; when not, Write2 writes
// the two streams one after the other.
func Available() bool { return available }

// init0 is the initial hash value (FIPS 180-4 §5.3.3).
var init0 = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

// Digest is one SHA-256 computation; it implements hash.Hash. The zero value is not usable:
// call New.
type Digest struct {
	std hash.Hash // crypto/sha256, when the kernel is not available
	h   [8]uint32
	x   [64]byte // a partial block
	nx  int
	len uint64 // bytes written
}

// New returns a SHA-256 digest.
func New() *Digest {
	d := &Digest{}
	d.Reset()
	return d
}

// Reset restarts the digest.
func (d *Digest) Reset() {
	if !available {
		d.std = sha256.New()
		return
	}
	d.h, d.nx, d.len = init0, 0, 0
}

// Size is 32 (bytes).
func (d *Digest) Size() int { return sha256.Size }

// BlockSize is 64 (bytes).
func (d *Digest) BlockSize() int { return sha256.BlockSize }

// Write adds p to the message. It never fails.
func (d *Digest) Write(p []byte) (int, error) {
	if d.std != nil {
		return d.std.Write(p)
	}
	n := len(p)
	if p = d.fill(p); d.nx > 0 {
		return n, nil // p is in the partial block
	}
	if k := len(p) / 64; k > 0 {
		block1(&d.h, unsafe.SliceData(p), k)
		p = p[k*64:]
	}
	d.nx = copy(d.x[:], p)
	return n, nil
}

// fill completes the partial block from p (hashing it when full) and returns the rest of p.
func (d *Digest) fill(p []byte) []byte {
	d.len += uint64(len(p))
	if d.nx == 0 {
		return p
	}
	k := copy(d.x[d.nx:], p)
	d.nx += k
	if d.nx == 64 {
		block1(&d.h, &d.x[0], 1)
		d.nx = 0
	}
	return p[k:]
}

// Sum appends the digest of the message so far to b, without changing the state.
func (d *Digest) Sum(b []byte) []byte {
	if d.std != nil {
		return d.std.Sum(b)
	}
	c := *d
	// Padding: 0x80, zeros, the length in bits as a big-endian uint64 (FIPS 180-4 §5.1.1).
	var pad [72]byte
	pad[0] = 0x80
	k := 56 - int(c.len%64)
	if k <= 0 {
		k += 64
	}
	binary.BigEndian.PutUint64(pad[k:], c.len*8)
	c.Write(pad[:k+8])
	var out [32]byte
	for i, v := range c.h {
		binary.BigEndian.PutUint32(out[4*i:], v)
	}
	return append(b, out[:]...)
}

// Write2 adds pa to a's message and pb to b's (a and b distinct), hashing as many blocks of
// the two as possible together. It is equivalent to a.Write(pa); b.Write(pb).
func Write2(a *Digest, pa []byte, b *Digest, pb []byte) {
	if a.std != nil || b.std != nil {
		a.Write(pa)
		b.Write(pb)
		return
	}
	pa, pb = a.fill(pa), b.fill(pb)
	na, nb := len(pa)/64, len(pb)/64
	if n := min(na, nb); n > 0 {
		block2(&a.h, unsafe.SliceData(pa), &b.h, unsafe.SliceData(pb), n)
		pa, pb = pa[n*64:], pb[n*64:]
	}
	if k := len(pa) / 64; k > 0 {
		block1(&a.h, unsafe.SliceData(pa), k)
		pa = pa[k*64:]
	}
	if k := len(pb) / 64; k > 0 {
		block1(&b.h, unsafe.SliceData(pb), k)
		pb = pb[k*64:]
	}
	if a.nx == 0 { // else pa went into the partial block
		a.nx = copy(a.x[:], pa)
	}
	if b.nx == 0 {
		b.nx = copy(b.x[:], pb)
	}
}
