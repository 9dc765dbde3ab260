package pack

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"lithos/formats/safetensors"
	"lithos/manifests"
	"lithos/pack/internal/sha256x2"
)

// hashChunk is the size of one read of a source file being hashed.
const hashChunk = 1 << 20

// srcChain computes the sha256 of one source file whose hash is not known (a plain directory:
// no HF cache blob name) over its bytes in order from the first to the last, header, skipped
// tensors and gaps included, so that the result is what `sha256sum` prints.
//
// A shard that packing reads is hashed by the packing workers, in the same pass: entries are
// packed in file order (fileOrder). An entry whose main stream (its largest tensor) starts
// where the hash stands, or can be brought there, holds the chain while it is packed (claim)
// and feeds it the bytes it reads: the same read serves both, and its entry writer hashes them
// two at a time with the entry's own bytes (sha256x2). An entry that finds the chain held by
// another worker just packs; afterwards it advances the chain over its tensor by reading it
// again, a few tensors after packing read it (from the page cache), unless another worker is
// advancing it (that one, or a later one, covers the bytes); the worker that finishes the
// shard's last entry hashes the rest. So the hash never makes a worker wait (except the very
// last one, for the rest of the file), adds no goroutine that the scheduler could starve, and
// reads no byte from the disk twice. docs/bundle.md §8 compares the designs tried.
//
// A file that no entry reads (config.json, the index, a shard of skipped tensors only) is
// hashed on its own (run).
type srcChain struct {
	ck *checkpoint
	sf *sourceFile

	mu  sync.Mutex
	f   *os.File // nil until first read
	h   *sha256x2.Digest
	buf []byte
	pos int64 // bytes hashed
	err error // sticky

	left atomic.Int64 // entries of this file not finished (not under mu: never wait for it)
}

// newSrcChains returns a chain for every source file of cks whose sha256 is unknown, and the
// chain of each safetensors shard that packing reads (by file).
func newSrcChains(cks []*checkpoint) ([]*srcChain, map[*safetensors.File]*srcChain) {
	var all []*srcChain
	byFile := map[*safetensors.File]*srcChain{}
	for _, ck := range cks {
		for i := range ck.srcFiles {
			sf := &ck.srcFiles[i]
			if sf.sha256 != "" {
				continue
			}
			c := newSrcChain(ck, sf)
			all = append(all, c)
			if ck.st == nil {
				continue
			}
			// The shards packing reads are the source files themselves unless the packed
			// checkpoint is a re-quantized copy (whose srcFiles are the originals').
			for _, f := range ck.st.Files {
				if f.Path == sf.path {
					byFile[f] = c
				}
			}
		}
	}
	return all, byFile
}

// newSrcChain returns the (not yet started) hash of ck's source file sf.
func newSrcChain(ck *checkpoint, sf *sourceFile) *srcChain {
	return &srcChain{ck: ck, sf: sf, h: sha256x2.New()}
}

// advance hashes the file up to offset end (at most its size). With wait false it returns
// at once, doing nothing, when another goroutine is advancing the chain.
func (c *srcChain) advance(ctx context.Context, end int64, wait bool) error {
	if wait {
		c.mu.Lock()
	} else if !c.mu.TryLock() {
		return nil
	}
	defer c.mu.Unlock()
	return c.advanceLocked(ctx, end)
}

func (c *srcChain) advanceLocked(ctx context.Context, end int64) error {
	if c.err != nil {
		return c.err
	}
	end = min(end, c.sf.bytes)
	if c.pos >= end {
		return nil
	}
	if c.f == nil {
		if c.f, c.err = os.Open(c.sf.path); c.err != nil {
			return c.fail(c.err)
		}
		c.buf = make([]byte, hashChunk)
	}
	for c.pos < end {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := int(min(int64(len(c.buf)), end-c.pos))
		m, err := c.f.ReadAt(c.buf[:k], c.pos)
		c.h.Write(c.buf[:m])
		c.pos += int64(m)
		if m < k {
			if err == io.EOF || err == nil {
				err = fmt.Errorf("%d bytes, %d when the checkpoint was opened: the file changed while packing", c.pos, c.sf.bytes)
			}
			return c.fail(err)
		}
	}
	return nil
}

func (c *srcChain) fail(err error) error {
	c.err = fmt.Errorf("%s: hash %s: %w", c.ck.model, c.sf.rel, err)
	return c.err
}

// finishLocked hashes the rest of the file, checks that it ends where it did when the
// checkpoint was opened, and records the sha256.
func (c *srcChain) finishLocked(ctx context.Context) error {
	if err := c.advanceLocked(ctx, c.sf.bytes); err != nil {
		return err
	}
	if c.f == nil { // an empty file
		if c.f, c.err = os.Open(c.sf.path); c.err != nil {
			return c.fail(c.err)
		}
	}
	if n, _ := c.f.ReadAt(make([]byte, 1), c.sf.bytes); n != 0 {
		return c.fail(fmt.Errorf("longer than the %d bytes it had when the checkpoint was opened: the file changed while packing", c.sf.bytes))
	}
	c.f.Close()
	c.f, c.buf = nil, nil
	c.sf.sha256 = hex.EncodeToString(c.h.Sum(nil))
	return nil
}

// claim holds the chain for an entry whose main stream starts at off, when no other
// goroutine holds it and it can be brought to off (hashing the bytes before off, which the
// entries packed before this one have read: from the page cache). The caller then feeds the
// main stream's bytes to the chain as it reads them (srcTap) and calls release, after its
// entry writer has hashed them. It reports whether the chain is held.
func (c *srcChain) claim(ctx context.Context, off int64) (bool, error) {
	if !c.mu.TryLock() {
		return false, nil
	}
	if err := c.advanceLocked(ctx, off); err != nil {
		c.mu.Unlock()
		return false, err
	}
	if c.pos != off {
		c.mu.Unlock()
		return false, nil
	}
	return true, nil
}

// release lets go of a claimed chain.
func (c *srcChain) release() { c.mu.Unlock() }

// srcTap receives the main-stream bytes of an entry that holds chain c, in order: it counts
// them, and copies them to the entry's writer, whose hash goroutine adds them to c's hash
// beside the entry's own bytes (entryWriter.feed). For a plain tensor the entry's bytes are
// the source bytes and nothing is copied.
type srcTap struct {
	c    *srcChain
	w    *entryWriter
	copy bool
}

func (t srcTap) Write(p []byte) (int, error) {
	t.c.pos += int64(len(p))
	if t.copy {
		t.w.source(p)
	}
	return len(p), nil
}

// expect counts one more entry whose main stream is in this file.
func (c *srcChain) expect() { c.left.Add(1) }

// entryDone is called when an entry whose main stream ends at offset end is written: it
// advances the chain to end unless another worker is advancing it, and the last entry of the
// file finishes it.
func (c *srcChain) entryDone(ctx context.Context, end int64) error {
	if c.left.Add(-1) == 0 { // every other entry of the file has released the chain
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.finishLocked(ctx)
	}
	return c.advance(ctx, end, false)
}

// run hashes a file no entry reads.
func (c *srcChain) run(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.finishLocked(ctx)
}

// mainStream is the largest checkpoint tensor an entry reads: where it is in the file order.
func (e *entry) mainStream() *tensorRef {
	var best *tensorRef
	pick := func(r *tensorRef) {
		if r != nil && (best == nil || r.t.Size > best.t.Size) {
			best = r
		}
	}
	if e.rec.Encoding != manifests.EncodingBLM {
		return &e.plain
	}
	for i := range e.segs {
		pick(e.segs[i].codes)
		pick(e.segs[i].scales)
		pick(e.segs[i].biases)
	}
	return best
}

// scheduler hands the entries to the packing workers: the entries whose main stream is in one
// file (shard) in file order; a worker stays on its shard while it has entries, and otherwise
// moves to the shard with the most bytes left that no worker is on (else the one with the most
// bytes left). Workers on different shards each hold their shard's hash chain while they pack
// (srcChain.claim), so that nearly every main stream is read once for both; two workers on
// one shard would take turns, and the other's tensors be read again. It also makes each
// worker's reads sequential.
type scheduler struct {
	mu     sync.Mutex
	queues [][]*entry // per shard, in file order
	left   []int64    // bytes of main streams left per queue
	on     []int      // workers on each queue
}

// newScheduler groups entries by the file of their main stream (entries reading the same
// bytes keep manifest order).
func newScheduler(entries []*entry) *scheduler {
	s := &scheduler{}
	index := map[*safetensors.File]int{}
	for _, e := range entries {
		f := e.mainStream().file
		q, ok := index[f]
		if !ok {
			q = len(s.queues)
			index[f] = q
			s.queues = append(s.queues, nil)
			s.left = append(s.left, 0)
			s.on = append(s.on, 0)
		}
		s.queues[q] = append(s.queues[q], e)
		s.left[q] += e.mainStream().t.Size
	}
	for _, q := range s.queues {
		slices.SortStableFunc(q, func(a, b *entry) int {
			return cmp.Compare(a.mainStream().t.Offset, b.mainStream().t.Offset)
		})
	}
	return s
}

// next returns the next entry for a worker that was on queue cur (-1 at first) and the queue
// it is now on; nil when every entry is handed out.
func (s *scheduler) next(cur int) (*entry, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := cur
	if q < 0 || len(s.queues[q]) == 0 {
		q = -1
		for i := range s.queues {
			if len(s.queues[i]) == 0 {
				continue
			}
			if q < 0 {
				q = i
			} else if free, qFree := s.on[i] == 0, s.on[q] == 0; free != qFree {
				if free {
					q = i
				}
			} else if s.left[i] > s.left[q] {
				q = i
			}
		}
		if cur >= 0 {
			s.on[cur]--
		}
		if q < 0 {
			return nil, -1
		}
		s.on[q]++
	}
	e := s.queues[q][0]
	s.queues[q] = s.queues[q][1:]
	s.left[q] -= e.mainStream().t.Size
	return e, q
}
