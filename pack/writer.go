package pack

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"lithos/pack/internal/sha256x2"
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
//
// Chunks come from one pool shared by every entry and are written by a few writer goroutines,
// so that a direct write (which waits for the device: about 0.5 ms per MiB on the development
// VM's disk) never stalls the hashing of the next chunk: before they were pooled, each entry
// hashed and wrote its chunks in turn and the pack spent half its time with one core idle.
type weightsFile struct {
	f      *os.File // read-write, buffered
	direct *os.File // write-only, direct I/O; nil when unavailable
	noDir  atomic.Bool
	free   chan []byte // chunk pool
	sides  chan []byte // buffers of source bytes (entryWriter.source); nil entries allocated on use
	writes chan wjob
	wg     sync.WaitGroup // writer goroutines
	unmap  func()         // releases the pool's memory
}

// wjob is one chunk to write for an entry.
type wjob struct {
	b   []byte
	off int64
	e   *entryWriter
}

// newWeightsFile starts writers goroutines writing to f (direct: its direct-I/O descriptor or
// nil) from a pool of chunks chunks of chunkBytes (allocChunks: on huge pages where the system
// has them). chunks must exceed the number of entries written at once (each holds one chunk
// while it fills it). Memory: chunks · chunkBytes. Call stop when every entry is closed.
func newWeightsFile(f, direct *os.File, chunks, writers int) *weightsFile {
	w := &weightsFile{f: f, direct: direct, free: make(chan []byte, chunks), sides: make(chan []byte, chunks), writes: make(chan wjob, writers)}
	for range chunks {
		w.sides <- nil
	}
	bufs, unmap := allocChunks(chunks, chunkBytes)
	for _, b := range bufs {
		w.free <- b
	}
	w.unmap = unmap
	w.wg.Add(writers)
	for range writers {
		go func() {
			defer w.wg.Done()
			for j := range w.writes {
				if j.e.err.Load() == nil {
					if err := w.writeAt(j.b, j.off); err != nil {
						j.e.err.CompareAndSwap(nil, &err)
					}
				}
				w.free <- j.b[:0]
				j.e.pending.Done()
			}
		}()
	}
	return w
}

// stop ends the writer goroutines and releases the pool: only after every entry's Close, when
// no chunk is in use.
func (w *weightsFile) stop() {
	close(w.writes)
	w.wg.Wait()
	w.unmap()
}

// sideBuf takes an empty buffer for source bytes (capacity chunkBytes) from its pool.
func (w *weightsFile) sideBuf() []byte {
	if b := <-w.sides; b != nil {
		return b
	}
	return make([]byte, 0, chunkBytes)
}

// chunk takes a chunk from the pool (blocking while every chunk is in use).
func (w *weightsFile) chunk() []byte {
	return (<-w.free)[:chunkBytes]
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

// heapChunks returns n buffers of size bytes whose addresses are multiples of ioAlign (Go's
// heap does not move objects).
func heapChunks(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		b := make([]byte, size+ioAlign)
		skip := int(-uintptr(unsafe.Pointer(&b[0])) & (ioAlign - 1))
		out[i] = b[skip : skip+size : skip+size]
	}
	return out
}

// entryWriter streams one entry into the weights file from its (aligned) offset: bytes are
// gathered into aligned chunks from the file's pool; a goroutine of the entry hashes them in
// order while the caller fills the next one and hands them to the file's writers; Close pads
// the last chunk with zeros to ioAlign, waits for its writes, and returns the sha256 of the
// bytes written (without the padding).
//
// An entry may also feed the hash of the source file it reads (feed): then the same goroutine
// hashes the entry's bytes and the source bytes two at a time (sha256x2: 1.8× the throughput
// of one hash after the other on x86 with the SHA extensions). For a plain tensor (same) the
// source bytes are the entry's bytes; otherwise the caller copies them in with source.
type entryWriter struct {
	wf      *weightsFile
	off     int64 // file offset of the next chunk
	cur     []byte
	n       int
	h       *sha256x2.Digest
	src     *sha256x2.Digest // the source file's hash this entry feeds, or nil
	same    bool             // the entry's bytes are the source bytes
	side    []byte           // source bytes gathered since the last chunk (src, !same)
	jobs    chan wchunk
	done    chan struct{}
	pending sync.WaitGroup // chunks not yet written
	err     atomic.Pointer[error]
	close   bool
}

// wchunk is a chunk to hash and write (b: its first hashed bytes are the entry's; nil for side
// bytes only) and the source bytes that go with it (side).
type wchunk struct {
	b      []byte
	hashed int
	off    int64
	side   []byte
}

func newEntryWriter(wf *weightsFile, off int64) (*entryWriter, error) {
	if off%ioAlign != 0 {
		return nil, fmt.Errorf("internal error: entry offset %d is not a multiple of %d", off, ioAlign)
	}
	e := &entryWriter{wf: wf, off: off, h: sha256x2.New(), jobs: make(chan wchunk, 2), done: make(chan struct{})}
	go func() {
		defer close(e.done)
		for c := range e.jobs {
			switch {
			case c.b == nil:
				e.src.Write(c.side)
			case e.src != nil && e.same:
				sha256x2.Write2(e.h, c.b[:c.hashed], e.src, c.b[:c.hashed])
			case c.side != nil:
				sha256x2.Write2(e.h, c.b[:c.hashed], e.src, c.side)
			default:
				e.h.Write(c.b[:c.hashed])
			}
			if c.side != nil {
				e.wf.sides <- c.side[:0]
			}
			if c.b != nil {
				e.wf.writes <- wjob{b: c.b, off: c.off, e: e}
			}
		}
	}()
	return e, nil
}

// feed makes the entry hash src too: with its own bytes when same, else with the bytes given
// to source. Call before the first Write.
func (e *entryWriter) feed(src *sha256x2.Digest, same bool) { e.src, e.same = src, same }

// source adds source bytes for the entry's feed (copied: p may be reused).
func (e *entryWriter) source(p []byte) {
	for len(p) > 0 {
		if e.side == nil {
			e.side = e.wf.sideBuf()
		}
		k := min(len(p), cap(e.side)-len(e.side))
		e.side = append(e.side, p[:k]...)
		p = p[k:]
		if len(e.side) == cap(e.side) {
			e.jobs <- wchunk{side: e.side}
			e.side = nil
		}
	}
}

// next makes sure the entry holds a chunk to fill.
func (e *entryWriter) next() {
	if e.cur == nil {
		e.cur, e.n = e.wf.chunk(), 0
	}
}

// Write implements io.Writer.
func (e *entryWriter) Write(p []byte) (int, error) {
	if perr := e.err.Load(); perr != nil {
		return 0, *perr
	}
	total := len(p)
	for len(p) > 0 {
		e.next()
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
		e.next()
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

// flush queues the current chunk (hashed bytes of it, written length: aligned) with the source
// bytes gathered meanwhile.
func (e *entryWriter) flush(hashed, length int) {
	e.pending.Add(1)
	e.jobs <- wchunk{b: e.cur[:length], hashed: hashed, off: e.off, side: e.side}
	e.off += int64(length)
	e.cur, e.n, e.side = nil, 0, nil
}

// Close writes the last chunk and returns the sha256 of everything written. The source hash
// fed (feed) has then been given every byte too.
func (e *entryWriter) Close() (string, error) {
	if !e.close {
		e.close = true
		if e.n > 0 {
			padded := (e.n + ioAlign - 1) / ioAlign * ioAlign
			clear(e.cur[e.n:padded])
			e.flush(e.n, padded)
		} else if e.cur != nil {
			e.wf.free <- e.cur[:0]
			e.cur = nil
		}
		if e.side != nil {
			e.jobs <- wchunk{side: e.side}
			e.side = nil
		}
		close(e.jobs)
	}
	<-e.done
	e.pending.Wait()
	if perr := e.err.Load(); perr != nil {
		return "", *perr
	}
	return hex.EncodeToString(e.h.Sum(nil)), nil
}
