package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"lithos/formats"
	"lithos/kernels"
	"lithos/pack/blm"
	"lithos/runtime/model"
)

// TestStepWords: the word indexes found by marshalling match docs/runtime.md §4 (TMax 8).
func TestStepWords(t *testing.T) {
	w, err := newStepWords(8)
	if err != nil {
		t.Fatal(err)
	}
	want := stepWords{Step: 0, Position: 1, Rows: 2, Pending: 3, SeedLo: 11, Anchor: 13, Accepted: 14, Committed: 15,
		PrefillLeft: 16, Done: 17, Error: 18, RingHead: 19, RingTail: 20, StopAt: 21, DraftLen: 22, DraftContext: 23, Words: w.Words}
	if w != want || w.Words < 24 {
		t.Fatalf("step words %+v, want %+v", w, want)
	}
}

// badRecord is a parameter record whose Validate refuses it; ptrRecord one whose Validate
// (on a pointer) refuses it.
type (
	badRecord struct{ kernels.CopyParams }
	ptrRecord struct{ kernels.CopyParams }
)

func (badRecord) Validate() error  { return errors.New("N is 0") }
func (*ptrRecord) Validate() error { return errors.New("LdX < N") }

// TestBuilderChecks: a null buffer and a record that Validate rejects stop the build with an
// error naming the program, the op and the kernel; launches after the first error are dropped.
func TestBuilderChecks(t *testing.T) {
	rec := kernels.CopyParams{DoneWord: kernels.NoWord, Rows: 1, RowsWord: kernels.NoWord, N: 4, LdX: 4, LdY: 4}
	b := &builder{p: &program{name: "decode(1 rows)"}, pfx: "cuda", what: "layer 3 (full_attention): o_proj"}
	b.add("lithos_copy", rec, rec.Grid(), 16, 32)
	if b.err != nil || len(b.p.launches) != 1 || b.p.recs.Len() == 0 {
		t.Fatalf("a valid launch: err %v, %d launches", b.err, len(b.p.launches))
	}
	b.add("lithos_copy", badRecord{rec}, rec.Grid(), 16, 32)
	want := "cuda: program decode(1 rows): layer 3 (full_attention): o_proj: lithos_copy: N is 0"
	if b.err == nil || b.err.Error() != want {
		t.Fatalf("Validate refusing: %v, want %q", b.err, want)
	}
	b.add("lithos_copy", rec, rec.Grid(), 16, 32)
	if len(b.p.launches) != 1 {
		t.Fatalf("%d launches after an error, want 1", len(b.p.launches))
	}
	b = &builder{p: &program{name: "prefill(3 rows, last true)"}, pfx: "cuda", what: "embedding"}
	b.add("lithos_copy", ptrRecord{rec}, rec.Grid(), 16, 32)
	if b.err == nil || !strings.HasSuffix(b.err.Error(), "embedding: lithos_copy: LdX < N") {
		t.Fatalf("Validate on a pointer refusing: %v", b.err)
	}
	b = &builder{p: &program{name: "round(8 rows)"}, pfx: "metal", what: "draft: lm_head"}
	b.add("lithos_copy", rec, rec.Grid(), 16, 0)
	if b.err == nil || !strings.Contains(b.err.Error(), "metal: program round(8 rows): draft: lm_head: lithos_copy buffer 1 is null") {
		t.Fatalf("null buffer: %v", b.err)
	}
}

// fakeOwner counts the frees of buffers it owns.
type fakeOwner struct{ buffers, hosts int }

func (f *fakeOwner) FreeBuffer(*Buffer) error   { f.buffers++; return nil }
func (f *fakeOwner) FreeHost(*HostBuffer) error { f.hosts++; return nil }

// TestBufferFree: Free calls the owner once, a view cannot be freed, Slice checks its range.
func TestBufferFree(t *testing.T) {
	o := &fakeOwner{}
	b := &Buffer{Ptr: 0x1000, Size: 64, Owner: o}
	v, err := b.Slice(16, 48)
	if err != nil || v.Ptr != 0x1010 || v.Size != 48 || v.At(4) != 0x1014 {
		t.Fatalf("slice: %+v, %v", v, err)
	}
	if _, err := b.Slice(16, 49); err == nil {
		t.Fatal("a slice past the end was accepted")
	}
	if err := v.Free(); err == nil {
		t.Fatal("freeing a view succeeded")
	}
	if b.Free() != nil || b.Free() != nil || o.buffers != 1 || b.Ptr != 0 {
		t.Fatalf("two Frees: %d owner frees, Ptr %#x", o.buffers, b.Ptr)
	}
	h := &HostBuffer{Bytes: make([]byte, 8), DevPtr: 0x2000, Owner: o}
	if h.Free() != nil || h.Free() != nil || o.hosts != 1 || h.Bytes != nil || h.DevPtr != 0 {
		t.Fatalf("two host Frees: %d owner frees", o.hosts)
	}
	var nb *Buffer
	if nb.Free() != nil {
		t.Fatal("Free of nil failed")
	}
}

// TestRecordsAlign: records start at multiples of Align (16 by default, 256 for a device that
// asks, as Metal's constant-space offsets need), each holding kernels.Record's bytes.
func TestRecordsAlign(t *testing.T) {
	rec := kernels.CopyParams{DoneWord: kernels.NoWord, Rows: 3, RowsWord: kernels.NoWord, N: 4, LdX: 4, LdY: 4}
	size := int64(len(kernels.Record(rec)))
	for _, c := range []struct{ align, want int64 }{{0, (size + 15) / 16 * 16}, {256, 256}} {
		r := Records{Align: c.align}
		if off := r.Add(rec); off != 0 {
			t.Fatalf("align %d: first record at %d", c.align, off)
		}
		if off := r.Add(rec); off != c.want {
			t.Fatalf("align %d: second record at %d, want %d", c.align, off, c.want)
		}
		if r.Len() != c.want+(size+15)/16*16 {
			t.Fatalf("align %d: %d bytes", c.align, r.Len())
		}
	}
}

// allocDevice is a Device whose Alloc hands out owned buffers at increasing addresses.
type allocDevice struct {
	Device
	o    fakeOwner
	next uint64
	fail bool
}

func (d *allocDevice) Alloc(n int64) (*Buffer, error) {
	if d.fail {
		return nil, errors.New("out of memory")
	}
	d.next += 1 << 20
	return &Buffer{Ptr: d.next, Size: n, Owner: &d.o}, nil
}

// fillQueue records Fill32 calls, failing them with err when set.
type fillQueue struct {
	fakeQueue
	fills []int64 // the words of each fill
	err   error
}

func (q *fillQueue) Fill32(b *Buffer, off, words int64, v uint32) error {
	q.fills = append(q.fills, words)
	return q.err
}

// TestAllocLayers: the per-layer views of one allocation, layerStride (256-byte multiple) apart,
// each the asked size; the zero fill covers the whole allocation once; layerFloats gives the
// stride in floats (0 for one layer); errors name what failed, and an allocation whose fill
// failed is still freed; Session.Close frees the allocations, never a view.
func TestAllocLayers(t *testing.T) {
	d := &allocDevice{}
	q := &fillQueue{}
	s := &Session{d: d, s: q}
	v, err := s.allocLayers(3, 1000, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 3 || len(s.layered) != 1 || s.layered[0].Size != 3*1024 {
		t.Fatalf("%d views, %d allocations (%v), want 3 views of one of 3072 bytes", len(v), len(s.layered), s.layered)
	}
	for i, b := range v {
		if b.Ptr != s.layered[0].Ptr+uint64(i)*1024 || b.Size != 1000 || b.Owner != nil {
			t.Fatalf("view %d: %+v", i, b)
		}
	}
	if len(q.fills) != 1 || q.fills[0] != 3*1024/4 {
		t.Fatalf("fills %v, want one of %d words", q.fills, 3*1024/4)
	}
	if got := layerFloats(v); got != 256 {
		t.Fatalf("layerFloats = %d, want 256", got)
	}
	one, err := s.allocLayers(1, 4096, false)
	if err != nil || len(one) != 1 || layerFloats(one) != 0 || len(q.fills) != 1 {
		t.Fatalf("one layer: %v, %v, stride %d, fills %v", one, err, layerFloats(one), q.fills)
	}
	if none, err := s.allocLayers(0, 64, true); none != nil || err != nil || len(s.layered) != 2 {
		t.Fatalf("no layers: %v, %v, %d allocations", none, err, len(s.layered))
	}
	q.err = errors.New("fill failed")
	if _, err := s.allocLayers(2, 64, true); err == nil || !strings.Contains(err.Error(), "zero 2 layers' regions of 64 bytes: fill failed") {
		t.Fatalf("failed fill: %v", err)
	}
	d.fail = true
	if _, err := s.allocLayers(2, 64, true); err == nil || !strings.Contains(err.Error(), "2 layers' regions of 64 bytes: out of memory") {
		t.Fatalf("failed allocation: %v", err)
	}
	if layerStride(0) != 256 || layerStride(1) != 256 || layerStride(256) != 256 || layerStride(257) != 512 {
		t.Fatalf("layerStride 0, 1, 256, 257 = %d, %d, %d, %d", layerStride(0), layerStride(1), layerStride(256), layerStride(257))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d.o.buffers != 3 || len(s.layered) != 3 {
		t.Fatalf("Close: %d frees of %d allocations, want 3 (the fill's failed one included)", d.o.buffers, len(s.layered))
	}
}

// replaySession is a Session with just what emitCommitReplay reads: a tiny GDN config, layers
// GDN layers (every other plan an attention layer, which the replay skips), each kind of
// per-layer buffer views stride bytes apart (as allocLayers gives them; the kept in_proj_zqkv
// rows zstride apart, 0 for stride), the layers' in_proj_zqkv conv columns at offs[i].
func replaySession(layers int, stride, zstride uint64, offs []int) *Session {
	if zstride == 0 {
		zstride = stride
	}
	c := model.Config{KHeads: 2, VHeads: 4, KDim: 16, VDim: 16, ConvKernel: 4, RMSEps: 1e-6}
	viewsAt := func(base, stride uint64) []*Buffer {
		v := make([]*Buffer, layers)
		for i := range v {
			v[i] = &Buffer{Ptr: base + uint64(i)*stride, Size: int64(stride)}
		}
		return v
	}
	views := func(base uint64) []*Buffer { return viewsAt(base, stride) }
	s := &Session{t: &Target{Cfg: c}, auxCommitRows: 30,
		conv: &Buffer{Ptr: 0xA000_0000, Size: 1 << 16}, o: &Buffer{Ptr: 0xB000_0000, Size: 1 << 16},
		convState: views(0x1000_0000), gdnState: views(0x2000_0000),
		spec: &specState{block: 7, kZqkv: viewsAt(0x3000_0000, zstride), kConv: views(0x4000_0000), kBeta: views(0x5000_0000), kG: views(0x6000_0000)}}
	nz := int64(c.ConvDim() + c.VHeads*c.VDim)
	for i := range layers {
		s.plans = append(s.plans, layerPlan{kind: model.Attention, idx: i},
			layerPlan{kind: model.GDN, idx: i, zqkv: &Matrix{Geometry: blm.Geometry{N: nz}}, qkvOff: offs[i], conv: 0x7000_0000 + uint64(i)<<12})
	}
	return s
}

// TestCommitReplayLaunches: the round's commit replay of the GDN layers is one conv and one
// delta-rule launch over all of them (grid z the layers, layer 0's buffers) when their
// in_proj_zqkv keep the conv's columns at one offset, and a launch pair per layer, each with
// its own layer's buffers, when the offsets differ or the layered records fail their checks
// (strides past 32-bit offsets).
func TestCommitReplayLaunches(t *testing.T) {
	const layers = 3
	for _, c := range []struct {
		name            string
		stride, zstride uint64
		offs            []int
		layered         bool
	}{
		{"one offset", 1 << 16, 0, []int{64, 64, 64}, true},
		{"offsets differ", 1 << 16, 0, []int{64, 64, 0}, false},
		{"strides past 32-bit offsets", 1 << 35, 0, []int{64, 64, 64}, false},
		// 2³² + 2¹⁴ floats: truncated to 32 bits, a stride of 64 KiB that would pass the checks
		{"a stride of 2³² + 2¹⁴ floats", 1<<34 + 1<<16, 0, []int{64, 64, 64}, false},
		// only the kept in_proj_zqkv rows' stride past 32 bits: LayerX 0, which would read
		// layer 0's rows for every layer (the conv's record refuses it)
		{"the zqkv rows' stride past 32 bits", 1 << 16, 1<<34 + 1<<16, []int{64, 64, 64}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := replaySession(layers, c.stride, c.zstride, c.offs)
			p := &program{name: "round(8 rows)"}
			e := &emitter{s: s, b: &builder{p: p, pfx: "fake"}}
			s.emitCommitReplay(e)
			if e.b.err != nil {
				t.Fatal(e.b.err)
			}
			var got []string
			for _, l := range p.launches {
				got = append(got, fmt.Sprintf("%s z%d %s", l.name, l.grid[2], l.what))
			}
			var want []string
			if c.layered {
				want = []string{"lithos_conv z3 GDN commit replay, 3 layers", "lithos_gdn z3 GDN commit replay, 3 layers"}
			} else {
				for i := range layers {
					want = append(want, fmt.Sprintf("lithos_conv z1 layer %d commit replay", i), fmt.Sprintf("lithos_gdn z1 layer %d commit replay", i))
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("launches\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			// Each pair reads its first layer's buffers: conv x (the kept in_proj_zqkv rows at
			// the layer's offset), its taps and its conv state; the delta rule q (the kept conv
			// rows), β, g and the recurrent state.
			sp := s.spec
			for j := 0; j < len(p.launches); j += 2 {
				i := j / 2
				cv, gd := p.launches[j].bufs, p.launches[j+1].bufs
				if cv[0] != f32at(sp.kZqkv[i], c.offs[i]) || cv[1] != s.plans[2*i+1].conv || cv[2] != s.convState[i].Ptr {
					t.Errorf("pair %d: conv x, w, state %#x %#x %#x, want layer %d's", i, cv[0], cv[1], cv[2], i)
				}
				if gd[0] != sp.kConv[i].Ptr || gd[3] != sp.kBeta[i].Ptr || gd[4] != sp.kG[i].Ptr || gd[5] != s.gdnState[i].Ptr {
					t.Errorf("pair %d: delta rule q, β, g, state %#x %#x %#x %#x, want layer %d's", i, gd[0], gd[3], gd[4], gd[5], i)
				}
			}
		})
	}
}

// TestProductTiles: an MMA-layout product of 9–16 rows takes the two-tile kernel
// (lithos_blmx_*_t2, BLMXParams.Tiles 2) in a prefill chunk's launches only; a round's verify
// or draft rows (up to block + 1 = 16) keep one tile and the split of a decode step's single
// row, so that verify and decode sum in the same order; 1–8 rows keep one tile everywhere, and
// so does a device with OneTile (LITHOS_CUDA_TILES=1).
func TestProductTiles(t *testing.T) {
	g, err := blm.NewGeometry(blm.Spec{Format: formats.FP8, N: 5120, K: 6144})
	if err != nil {
		t.Fatal(err)
	}
	m := &Matrix{Name: "o_proj", Geometry: g, Layout: kernels.BLMLayoutMMA, Ptr: 0x1000_0000, Scales: 0x2000_0000}
	dev := kernels.BLMXDevice{SMs: 132, MaxCluster: 8}
	one, err := kernels.NewBLMXParams(g, 1, kernels.EpiAdd, dev)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prefill, oneTile bool
		rows             int
		want             string
	}{
		{true, false, 16, "lithos_blmx_fp8_t2"},
		{true, false, 9, "lithos_blmx_fp8_t2"},
		{true, false, 8, "lithos_blmx_fp8"},
		{false, false, 16, "lithos_blmx_fp8"},
		{false, false, 9, "lithos_blmx_fp8"},
		{true, true, 16, "lithos_blmx_fp8"},
	} {
		d := dev
		d.OneTile = c.oneTile
		s := &Session{t: &Target{MMA: d}}
		p := &program{name: "products"}
		e := &emitter{s: s, b: &builder{p: p, pfx: "fake"}, prefill: c.prefill}
		e.mm(m, c.rows, kernels.NoWord, kernels.EpiAdd, 0x3000_0000, 0x4000_0000, 0, 0)
		if e.b.err != nil {
			t.Fatal(e.b.err)
		}
		if len(p.launches) != 1 || p.launches[0].name != c.want {
			t.Fatalf("prefill %v, OneTile %v, %d rows: launches %+v, want one of %s", c.prefill, c.oneTile, c.rows, p.launches, c.want)
		}
		// The grid: one tile per threadgroup has ⌈rows/8⌉ along y, two one; a one-tile launch
		// has the one-row split (its clusters and threadgroups).
		l := p.launches[0]
		if c.want == "lithos_blmx_fp8" {
			if g := one.Grid(); l.grid[0] != g[0] || l.grid[1] != uint32((c.rows+7)/8) || l.cluster[0] != one.Cl {
				t.Fatalf("prefill %v, %d rows: grid %v in clusters %v, want the one-row split's %d threadgroups in clusters of %d, %d tiles", c.prefill, c.rows, l.grid, l.cluster, g[0], one.Cl, (c.rows+7)/8)
			}
		} else if l.grid[1] != 1 {
			t.Fatalf("prefill %v, %d rows in two tiles: grid %v, want one threadgroup per K part and cluster", c.prefill, c.rows, l.grid)
		}
	}
}
