package metal

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// TestAddrTable: bases aligned and separated, offsets of a plain buffer, the weights
// resolved through their tensors' windows, each error case.
func TestAddrTable(t *testing.T) {
	var at AddrTable
	a, ida, err := at.Add("a", 1000)
	if err != nil {
		t.Fatal(err)
	}
	b, idb, err := at.Add("b", 5<<30) // 5 GiB: offsets past 4 GiB do not resolve
	if err != nil {
		t.Fatal(err)
	}
	if a != AddrBase || a%AddrAlign != 0 || b%AddrAlign != 0 || b < a+1000+AddrAlign || ida == idb {
		t.Fatalf("bases %#x %#x ids %d %d", a, b, ida, idb)
	}
	if l, err := at.Resolve(a+96, 4); err != nil || l != (Loc{ida, 96, 904}) {
		t.Fatalf("a+96: %+v %v", l, err)
	}
	const page = PageBytes
	tensors := []Range{{0, 100}, {page, 2 * page}, {3 * page, page}, {4 * page, 10}, {6 * page, 3 * page}}
	w, wins, ids, err := at.AddWindowed("weights", 9*page, tensors, 4*page)
	if err != nil {
		t.Fatal(err)
	}
	if len(wins) != 3 || len(ids) != 3 {
		t.Fatalf("windows %+v ids %v", wins, ids)
	}
	// A tensor in the second window: the offset is from that window's start.
	if l, err := at.Resolve(w+4*page+8, 2); err != nil || l.Buf != ids[1] || l.Off != 8 || l.Extent != 2 {
		t.Fatalf("weights+4p+8: %+v %v (windows %+v)", l, err, wins)
	}
	if l, err := at.Resolve(w+7*page, 0); err != nil || l.Buf != ids[2] || uint64(l.Off)+uint64(wins[2].Off) != 7*page || l.Extent != 2*page {
		t.Fatalf("weights+7p: %+v %v", l, err)
	}
	for _, c := range []struct {
		name string
		addr uint64
		n    uint64
		want string
	}{
		{"below the first", AddrBase - 1, 0, "in no live buffer"},
		{"zero", 0, 0, "in no live buffer"},
		{"past a", a + 1000, 0, "in no live buffer"},
		{"straddles a's end", a + 996, 8, "run past the end of buffer a"},
		{"past 4 GiB in b", b + 1<<32, 4, "below 4 GiB"},
		{"padding between tensors", w + 200, 0, "is in no tensor"},
		{"straddles two tensors", w + 3*page - 4, 8, "run past the end of the tensor"},
		{"past the mapping", w + 9*page, 0, "in no live buffer"},
	} {
		if _, err := at.Resolve(c.addr, c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if _, _, err := at.Add("z", 0); err == nil {
		t.Error("a zero-byte buffer was accepted")
	}
	if _, _, _, err := at.AddWindowed("o", 4*page, []Range{{0, 200}, {100, 10}}, 0); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("overlapping tensors: %v", err)
	}
	// Span allows 64-bit offsets (blits).
	if id, off, err := at.Span(b+(1<<32)+8, 8); err != nil || id != idb || off != 1<<32+8 {
		t.Fatalf("span: %d %d %v", id, off, err)
	}
	// Remove: a freed buffer's addresses no longer resolve; ids are not reused.
	if _, err := at.Remove(a + 4); err == nil {
		t.Error("remove of an inner address accepted")
	}
	got, err := at.Remove(w)
	if err != nil || len(got) != 3 || got[0] != ids[0] {
		t.Fatalf("remove weights: %v %v", got, err)
	}
	if _, err := at.Resolve(w+4*page, 0); err == nil {
		t.Fatal("a removed region still resolves")
	}
	c, idc, err := at.Add("c", 8)
	if err != nil || c <= w || idc <= ids[2] {
		t.Fatalf("after remove: %#x id %d (%v)", c, idc, err)
	}
}

// TestAddrTableWindowedNoTensors: a windowed mapping without tensors has no windows and so
// no window ids; its addresses resolve to nothing (before noBuf, the region's own id was -1,
// RecordsBuf, and they resolved into the records arena), and Remove returns no id.
func TestAddrTableWindowedNoTensors(t *testing.T) {
	if noBuf == RecordsBuf || noBuf >= 0 {
		t.Fatalf("noBuf %d must differ from RecordsBuf %d and every id", noBuf, RecordsBuf)
	}
	var at AddrTable
	w, wins, ids, err := at.AddWindowed("empty", 4*PageBytes, nil, 0)
	if err != nil || len(wins) != 0 || len(ids) != 0 {
		t.Fatalf("windows %v ids %v: %v", wins, ids, err)
	}
	for _, addr := range []uint64{w, w + 100, w + PageBytes} {
		if l, err := at.Resolve(addr, 0); err == nil || !strings.Contains(err.Error(), "is in no tensor") {
			t.Errorf("%#x: %+v %v, want an error saying it is in no tensor", addr, l, err)
		}
		if id, off, err := at.Span(addr, 4); err == nil {
			t.Errorf("%#x: span %d %d, want an error", addr, id, off)
		}
	}
	got, err := at.Remove(w)
	if err != nil || len(got) != 0 {
		t.Fatalf("remove: ids %v, %v; want none", got, err)
	}
	// A plain buffer added afterwards still gets a fresh non-negative id.
	if _, id, err := at.Add("b", 8); err != nil || id < 0 {
		t.Fatalf("add after: id %d %v", id, err)
	}
}

// addrModel is a brute-force model of the table for the fuzz test: live regions by base.
type addrModel struct {
	base, size uint64
	id         BufID
}

// FuzzAddrTable: random sequences of Add, Remove and Resolve against a brute-force model:
// regions never overlap, are AddrAlign-aligned and separated by a gap, ids are unique, and
// Resolve succeeds exactly when [addr, addr+n) lies in one live buffer at an offset below
// 4 GiB, returning that buffer and base + Off = addr.
func FuzzAddrTable(f *testing.F) {
	f.Add([]byte{0, 10, 0, 0, 0, 0, 0, 0, 2, 0, 5, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 255, 255, 255, 255, 1, 0, 0, 2, 1, 255, 255, 255, 255, 0, 0, 0, 4, 1, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var at AddrTable
		var live []addrModel
		seen := map[BufID]bool{}
		for len(ops) >= 9 {
			op, arg := ops[0]%3, binary.LittleEndian.Uint64(ops[1:9])
			ops = ops[9:]
			switch op {
			case 0: // add: sizes up to 6 GiB
				size := int64(arg%(6<<30)) + 1
				base, id, err := at.Add("x", size)
				if err != nil {
					t.Fatal(err)
				}
				if base%AddrAlign != 0 || seen[id] {
					t.Fatalf("base %#x id %d (seen %v)", base, id, seen[id])
				}
				for _, m := range live {
					if base < m.base+m.size+AddrAlign && m.base < base+uint64(size)+AddrAlign {
						t.Fatalf("region [%#x, +%d) too close to [%#x, +%d)", base, size, m.base, m.size)
					}
				}
				seen[id] = true
				live = append(live, addrModel{base, uint64(size), id})
			case 1: // remove
				if len(live) == 0 {
					continue
				}
				k := int(arg % uint64(len(live)))
				ids, err := at.Remove(live[k].base)
				if err != nil || len(ids) != 1 || ids[0] != live[k].id {
					t.Fatalf("remove %#x: %v %v", live[k].base, ids, err)
				}
				live = append(live[:k], live[k+1:]...)
			case 2: // resolve an address near a live region (or anywhere)
				addr, n := arg, uint64(0)
				if len(live) > 0 {
					m := live[int(arg>>56)%len(live)]
					addr = m.base + (arg&0xFFFFFFFFFF)%(m.size+2*AddrAlign) - AddrAlign/2
					n = (arg >> 40) & 0xFFFF
				}
				l, err := at.Resolve(addr, n)
				want := false
				var wm addrModel
				for _, m := range live {
					if addr >= m.base && addr-m.base < m.size && n <= m.size-(addr-m.base) && addr-m.base <= math.MaxUint32 {
						want, wm = true, m
					}
				}
				if want != (err == nil) {
					t.Fatalf("resolve %#x +%d: %+v %v, want ok=%v (live %+v)", addr, n, l, err, want, live)
				}
				if want && (l.Buf != wm.id || wm.base+uint64(l.Off) != addr || l.Extent != wm.size-uint64(l.Off)) {
					t.Fatalf("resolve %#x: %+v, want buffer %d at %d", addr, l, wm.id, addr-wm.base)
				}
			}
		}
		if at.Live() != len(live) {
			t.Fatalf("%d live regions, model has %d", at.Live(), len(live))
		}
	})
}

// FuzzWindowedResolve: the weights' addresses resolve exactly inside tensors, to a window
// that holds the whole tensor, at window offset + Off = the mapping offset.
func FuzzWindowedResolve(f *testing.F) {
	f.Add(uint64(12345), uint16(7))
	f.Add(uint64(1)<<40|99, uint16(3))
	f.Fuzz(func(t *testing.T, seed uint64, count uint16) {
		const page = PageBytes
		rnd := seed | 1
		next := func(n uint64) uint64 { // xorshift
			rnd ^= rnd << 13
			rnd ^= rnd >> 7
			rnd ^= rnd << 17
			return rnd % n
		}
		var tensors []Range
		off := int64(0)
		for i := 0; i < int(count%40)+1; i++ {
			off += int64(next(3)) * page
			l := int64(next(5*page)) + 1
			tensors = append(tensors, Range{off, l})
			off = (off + l + page - 1) / page * page
		}
		var at AddrTable
		base, wins, ids, err := at.AddWindowed("w", off, tensors, 8*page)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 200; k++ {
			o := next(uint64(off) + page)
			n := next(64)
			l, err := at.Resolve(base+o, n)
			var in *Range
			for i := range tensors {
				if r := &tensors[i]; uint64(r.Off) <= o && o < uint64(r.Off+r.Len) {
					in = r
				}
			}
			ok := in != nil && n <= uint64(in.Off+in.Len)-o
			if ok != (err == nil) {
				t.Fatalf("offset %d +%d: %+v %v, want ok=%v", o, n, l, err, ok)
			}
			if !ok {
				continue
			}
			wi := -1
			for i, id := range ids {
				if id == l.Buf {
					wi = i
				}
			}
			if wi < 0 {
				t.Fatalf("offset %d: buffer %d is not a window", o, l.Buf)
			}
			w := wins[wi]
			if uint64(w.Off)+uint64(l.Off) != o || in.Off < w.Off || in.Off+in.Len > w.Off+w.Len || l.Extent != uint64(in.Off+in.Len)-o {
				t.Fatalf("offset %d in tensor %+v: %+v in window %+v", o, *in, l, w)
			}
		}
	})
}
