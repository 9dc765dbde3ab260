package metal

import (
	"fmt"
	"math"
	"sort"
)

// BufID names one MTLBuffer in a device's address table (AddrTable). IDs are never reused
// while a table lives, so a stale id cannot name a newer buffer.
type BufID int32

// RecordsBuf is the BufID a recorded plan (Plan) uses for its own parameter-record arena:
// the records are copied there when recorded, the arena's buffer is made when the plan is
// encoded.
const RecordsBuf BufID = -1

// noBuf is region.buf of a windowed region, which has one id per window (winIDs) and none of
// its own: distinct from RecordsBuf and from every id newID hands out (≥ 0), so a path that
// took it for a buffer id would name no buffer rather than the records arena.
const noBuf BufID = math.MinInt32

// Address space constants. The device interface (runtime/backend/gpu) gives kernels 64-bit
// addresses; Metal has none, so each device hands out synthetic ones: every region (an
// allocation) starts on an AddrAlign boundary, the first at AddrBase, and a gap of at least
// AddrAlign separates two regions, so an address just past one region is in none (an
// overrun is reported, not resolved into a neighbour). With AddrAlign = 4 GiB the low 32
// bits of an address in a region smaller than 4 GiB are its offset, which keeps addresses
// readable in errors.
const (
	AddrBase  = 1 << 40
	AddrAlign = 1 << 32
)

// Loc is where an address resolves: a buffer and a byte offset into it (an indirect command
// buffer's setKernelBuffer:offset:atIndex: takes the offset; lithos keeps it < 4 GiB, the
// reference design's rule, lithos-metal.md §6.1), and Extent, the bytes from Off to the end
// of the piece holding the address: the buffer, or for the weights the tensor (every
// tensor lies wholly in one window).
type Loc struct {
	Buf    BufID
	Off    uint32
	Extent uint64
}

// AddrTable is a device's address space: it hands out aligned, non-overlapping synthetic
// addresses for its buffers (Add), for the mapped weights cut into no-copy windows
// (AddWindowed), and resolves an address and a length back to a buffer and an offset
// (Resolve). Addresses are never reused. Not safe for concurrent use (the device's thread
// owns it). Plain Go: tested everywhere (addr_test.go).
type AddrTable struct {
	regions []region // sorted by base (bases only grow)
	next    uint64   // the base of the next region
	nextID  BufID
}

// region is one allocation: a plain buffer (buf) or the windowed weights (windowed: wins,
// winIDs, tensors; buf is noBuf).
type region struct {
	name       string
	base, size uint64
	buf        BufID
	windowed   bool
	wins       []Window
	winIDs     []BufID
	tensors    []piece // windowed: non-empty tensors sorted by offset
}

// piece is a tensor of a windowed region: bytes [off, off+len) of the mapping, in window win.
type piece struct {
	off, len uint64
	win      int
}

// newID returns a fresh buffer id.
func (t *AddrTable) newID() (BufID, error) {
	if t.nextID == math.MaxInt32 {
		return 0, fmt.Errorf("metal: address table: out of buffer ids")
	}
	id := t.nextID
	t.nextID++
	return id, nil
}

// reserve returns the base of a new region of size bytes.
func (t *AddrTable) reserve(size uint64) (uint64, error) {
	if t.next == 0 {
		t.next = AddrBase
	}
	base := t.next
	span := (size + AddrAlign - 1) / AddrAlign * AddrAlign
	if size > math.MaxUint64/2 || base > math.MaxUint64-span-2*AddrAlign {
		return 0, fmt.Errorf("metal: address table: no room for %d bytes", size)
	}
	t.next = base + span + AddrAlign
	return base, nil
}

// Add reserves addresses for one buffer of size > 0 bytes and returns its base address and
// id; name labels it in errors ("kv cache 3"). Errors: size ≤ 0, the table is full.
func (t *AddrTable) Add(name string, size int64) (uint64, BufID, error) {
	if size <= 0 {
		return 0, 0, fmt.Errorf("metal: buffer %s of %d bytes: want > 0", name, size)
	}
	base, err := t.reserve(uint64(size))
	if err != nil {
		return 0, 0, err
	}
	id, err := t.newID()
	if err != nil {
		return 0, 0, err
	}
	t.regions = append(t.regions, region{name: name, base: base, size: uint64(size), buf: id})
	return base, id, nil
}

// AddWindowed reserves one address range for a mapping of size bytes (the bundle's weights)
// that is bound through no-copy windows of at most maxWindow bytes (PlanWindows, which also
// gives the errors): base + o is byte o of the mapping. It returns the base, the windows
// and one buffer id per window (the caller wraps window i as buffer ids[i]). tensors are the
// byte ranges kernels are given addresses in (the manifest's tensors, each wholly inside
// one window): an address in no tensor does not resolve.
func (t *AddrTable) AddWindowed(name string, size int64, tensors []Range, maxWindow int64) (uint64, []Window, []BufID, error) {
	if size <= 0 {
		return 0, nil, nil, fmt.Errorf("metal: mapping %s of %d bytes: want > 0", name, size)
	}
	wins, pl, err := PlanWindows(size, tensors, maxWindow)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("metal: mapping %s: %w", name, err)
	}
	r := region{name: name, size: uint64(size), buf: noBuf, windowed: true, wins: wins}
	for i, tr := range tensors {
		if tr.Len > 0 {
			r.tensors = append(r.tensors, piece{off: uint64(tr.Off), len: uint64(tr.Len), win: pl[i].Window})
		}
	}
	sort.Slice(r.tensors, func(i, j int) bool { return r.tensors[i].off < r.tensors[j].off })
	for i := 1; i < len(r.tensors); i++ {
		if p, q := r.tensors[i-1], r.tensors[i]; q.off < p.off+p.len {
			return 0, nil, nil, fmt.Errorf("metal: mapping %s: tensors [%d, %d) and [%d, %d) overlap", name, p.off, p.off+p.len, q.off, q.off+q.len)
		}
	}
	if r.base, err = t.reserve(r.size); err != nil {
		return 0, nil, nil, err
	}
	for range wins {
		id, err := t.newID()
		if err != nil {
			return 0, nil, nil, err
		}
		r.winIDs = append(r.winIDs, id)
	}
	t.regions = append(t.regions, r)
	return r.base, wins, append([]BufID(nil), r.winIDs...), nil
}

// Remove forgets the region whose base is addr and returns its buffer ids (one, or one per
// window: none for a mapping without tensors). Errors: addr is not the base of a live region.
func (t *AddrTable) Remove(addr uint64) ([]BufID, error) {
	i := t.find(addr)
	if i < 0 || t.regions[i].base != addr {
		return nil, fmt.Errorf("metal: free of address %#x: not the start of a live buffer", addr)
	}
	r := t.regions[i]
	t.regions = append(t.regions[:i], t.regions[i+1:]...)
	if r.windowed {
		return r.winIDs, nil
	}
	return []BufID{r.buf}, nil
}

// Live reports the number of live regions.
func (t *AddrTable) Live() int { return len(t.regions) }

// find returns the index of the region holding addr, or -1.
func (t *AddrTable) find(addr uint64) int {
	i := sort.Search(len(t.regions), func(i int) bool { return t.regions[i].base > addr }) - 1
	if i < 0 || addr-t.regions[i].base >= t.regions[i].size {
		return -1
	}
	return i
}

// locate resolves addr and n bytes (n = 0: "to the end of the piece") to a buffer, a 64-bit
// offset into it and the extent from there to the end of the piece.
func (t *AddrTable) locate(addr, n uint64) (BufID, uint64, uint64, error) {
	i := t.find(addr)
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("address %#x is in no live buffer", addr)
	}
	r := &t.regions[i]
	o := addr - r.base
	if !r.windowed {
		if n > r.size-o {
			return 0, 0, 0, fmt.Errorf("bytes [%#x, +%d) run past the end of buffer %s (%d bytes, from offset %d)", addr, n, r.name, r.size, o)
		}
		return r.buf, o, r.size - o, nil
	}
	j := sort.Search(len(r.tensors), func(j int) bool { return r.tensors[j].off > o }) - 1
	if j < 0 || o-r.tensors[j].off >= r.tensors[j].len {
		return 0, 0, 0, fmt.Errorf("address %#x (byte %d of %s) is in no tensor", addr, o, r.name)
	}
	p := r.tensors[j]
	if n > p.off+p.len-o {
		return 0, 0, 0, fmt.Errorf("bytes [%#x, +%d) run past the end of the tensor at bytes [%d, %d) of %s", addr, n, p.off, p.off+p.len, r.name)
	}
	return r.winIDs[p.win], o - uint64(r.wins[p.win].Off), p.off + p.len - o, nil
}

// Resolve returns where the n bytes at addr live: one buffer and an offset below 4 GiB
// (n = 0 when the length is unknown: the piece's end bounds it, Loc.Extent). Errors (plain,
// for the caller to name the launch and argument): the address is in no live buffer, or in
// the weights but in no tensor; the bytes run past the buffer (or tensor) holding addr; the
// offset does not fit 32 bits.
func (t *AddrTable) Resolve(addr, n uint64) (Loc, error) {
	id, off, ext, err := t.locate(addr, n)
	if err != nil {
		return Loc{}, err
	}
	if off > math.MaxUint32 {
		return Loc{}, fmt.Errorf("address %#x is %d bytes into its buffer: indirect-command-buffer offsets are kept below 4 GiB", addr, off)
	}
	return Loc{Buf: id, Off: uint32(off), Extent: ext}, nil
}

// Span is Resolve without the 32-bit limit on the offset, for copies (blits take 64-bit
// offsets); n > 0 bytes.
func (t *AddrTable) Span(addr, n uint64) (BufID, uint64, error) {
	if n == 0 {
		return 0, 0, fmt.Errorf("address %#x: empty range", addr)
	}
	id, off, _, err := t.locate(addr, n)
	return id, off, err
}
