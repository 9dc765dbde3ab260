package pack

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"sync/atomic"
	"unsafe"
)

// ioAlign is the alignment of direct-I/O buffers, offsets and lengths (the largest logical
// block size in common use). Every entry starts on a 16 KiB boundary and owns the bytes up to
// the next one, so its writes can be padded with zeros to a multiple of ioAlign.
const ioAlign = 4096

// chunkBytes is the size of one write of an entry (a multiple of ioAlign).
const chunkBytes = 1 << 20

// weightsFile is the weights file being written. Writes go through a second descriptor opened
// for direct I/O where the system offers it (Linux O_DIRECT): the bundle's bytes are not copied
// into the page cache, which on a machine whose memory is full of cached checkpoint is where a
// buffered copy spends most of its time (tools/bench_pack.sh). Where direct I/O is refused, the
// plain descriptor is used.
type weightsFile struct {
	f      *os.File // read-write, buffered
	direct *os.File // write-only, direct I/O; nil when unavailable
	noDir  atomic.Bool
}

// writeAt writes b (ioAlign-aligned in address, offset and length) at off.
func (w *weightsFile) writeAt(b []byte, off int64) error {
	if w.direct != nil && !w.noDir.Load() {
		_, err := w.direct.WriteAt(b, off)
		if err == nil {
			return nil
		}
		if !directRefused(err) {
			return err
		}
		w.noDir.Store(true) // e.g. a file system that accepts the open but not the write
	}
	_, err := w.f.WriteAt(b, off)
	return err
}

// alignedBuf returns n bytes whose address is a multiple of ioAlign (Go's heap does not move
// objects).
func alignedBuf(n int) []byte {
	b := make([]byte, n+ioAlign)
	skip := int(-uintptr(unsafe.Pointer(&b[0])) & (ioAlign - 1))
	return b[skip : skip+n : skip+n]
}

// entryWriter streams one entry into the weights file from its (aligned) offset: bytes are
// gathered into aligned chunks, each hashed and written by a goroutine of the entry while the
// caller fills the next one; Close pads the last chunk with zeros to ioAlign, waits, and returns
// the sha256 of the bytes written (without the padding). Memory: three chunks.
type entryWriter struct {
	wf    *weightsFile
	off   int64 // file offset of the next chunk
	cur   []byte
	n     int
	h     hash.Hash
	jobs  chan wchunk
	free  chan []byte
	done  chan struct{}
	err   atomic.Pointer[error]
	close bool
}

type wchunk struct {
	b      []byte
	hashed int
	off    int64
}

func newEntryWriter(wf *weightsFile, off int64) (*entryWriter, error) {
	if off%ioAlign != 0 {
		return nil, fmt.Errorf("internal error: entry offset %d is not a multiple of %d", off, ioAlign)
	}
	e := &entryWriter{wf: wf, off: off, h: sha256.New(), jobs: make(chan wchunk, 2), free: make(chan []byte, 3), done: make(chan struct{})}
	e.free <- nil
	e.free <- nil
	e.cur = alignedBuf(chunkBytes)
	go func() {
		defer close(e.done)
		for c := range e.jobs {
			e.h.Write(c.b[:c.hashed])
			if e.err.Load() == nil {
				if err := e.wf.writeAt(c.b, c.off); err != nil {
					e.err.Store(&err)
				}
			}
			e.free <- c.b
		}
	}()
	return e, nil
}

// Write implements io.Writer.
func (e *entryWriter) Write(p []byte) (int, error) {
	if perr := e.err.Load(); perr != nil {
		return 0, *perr
	}
	total := len(p)
	for len(p) > 0 {
		k := copy(e.cur[e.n:], p)
		e.n += k
		p = p[k:]
		if e.n == len(e.cur) {
			e.flush(e.n, e.n)
		}
	}
	return total, nil
}

// ReadFrom implements io.ReaderFrom: plain copies read straight into the aligned chunk.
func (e *entryWriter) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for {
		if perr := e.err.Load(); perr != nil {
			return n, *perr
		}
		k, err := r.Read(e.cur[e.n:])
		e.n += k
		n += int64(k)
		if e.n == len(e.cur) {
			e.flush(e.n, e.n)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// flush queues the current chunk: hashed bytes of it, written length (aligned).
func (e *entryWriter) flush(hashed, length int) {
	e.jobs <- wchunk{b: e.cur[:length], hashed: hashed, off: e.off}
	e.off += int64(length)
	b := <-e.free
	if b == nil {
		b = alignedBuf(chunkBytes)
	}
	e.cur, e.n = b[:chunkBytes], 0
}

// Close writes the last chunk and returns the sha256 of everything written.
func (e *entryWriter) Close() (string, error) {
	if !e.close {
		e.close = true
		if e.n > 0 {
			padded := (e.n + ioAlign - 1) / ioAlign * ioAlign
			clear(e.cur[e.n:padded])
			e.flush(e.n, padded)
		}
		close(e.jobs)
	}
	<-e.done
	if perr := e.err.Load(); perr != nil {
		return "", *perr
	}
	return hex.EncodeToString(e.h.Sum(nil)), nil
}
