package metal

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"lithos/kernels"
)

// memTable is an address table with host memory behind each buffer, as a Metal device has
// (shared storage), for recorder tests.
type memTable struct {
	AddrTable
	mem map[BufID][]byte
}

func newMemTable() *memTable { return &memTable{mem: map[BufID][]byte{}} }

func (m *memTable) add(t *testing.T, name string, size int) uint64 {
	t.Helper()
	a, id, err := m.Add(name, int64(size))
	if err != nil {
		t.Fatal(err)
	}
	m.mem[id] = make([]byte, size)
	return a
}

func (m *memTable) read(l Loc, n int) ([]byte, error) {
	b := m.mem[l.Buf]
	if int(l.Off)+n > len(b) {
		return nil, fmt.Errorf("read past buffer %d", l.Buf)
	}
	return append([]byte(nil), b[l.Off:int(l.Off)+n]...), nil
}

// records is the runtime's record arena (16-byte aligned records, like gpu.Records).
type records struct {
	m    *memTable
	base uint64
	id   BufID
	n    int
}

func (r *records) add(t *testing.T, p any) uint64 {
	t.Helper()
	b := kernels.Record(p)
	off := r.n
	copy(r.m.mem[r.id][off:], b)
	r.n += (len(b) + 15) / 16 * 16
	return r.base + uint64(off)
}

func newRecords(t *testing.T, m *memTable) *records {
	a := m.add(t, "records", 1<<16)
	l, err := m.Resolve(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &records{m: m, base: a, id: l.Buf}
}

// markov builds the DSpark Markov chain of kernels/fiber_ops2_test.go's TestFiberMarkovChain
// for two drafts: gather W1[Pending[k]] → BLM W2 (EpiAdd onto base row k) → argmax partial →
// argmax final (out = ctl, Pending word k+1) → the next gather, which reads that word. Every
// command depends on the one before it.
func markov(t *testing.T, m *memTable, rec *records, steps int) ([]LaunchCall, map[string]uint64) {
	const page = PageBytes
	ctl := m.add(t, "ctl", 256)
	wb, wins, ids, err := m.AddWindowed("weights", 8*page, []Range{{0, 2 * page}, {2 * page, 4 * page}, {6 * page, 100}}, 0)
	if err != nil || len(wins) != 1 {
		t.Fatalf("weights: %v %v", wins, err)
	}
	m.mem[ids[0]] = make([]byte, wins[0].Len)
	emb := m.add(t, "emb", 4*64)
	logits := m.add(t, "logits", 4*4*1024)
	pv := m.add(t, "part_v", 4*64)
	pi := m.add(t, "part_i", 4*64)
	bufs := map[string]uint64{"ctl": ctl, "w1": wb, "w2": wb + 2*page, "scales": wb + 6*page, "emb": emb, "logits": logits, "pv": pv, "pi": pi}
	var calls []LaunchCall
	const pending = 3
	for k := 0; k < steps; k++ {
		g := kernels.GatherParams{DoneWord: kernels.NoWord, Rows: 1, RowsWord: kernels.NoWord, IdsOff: uint32(pending + k), Width: 64}
		calls = append(calls, LaunchCall{"lithos_gather", [3]uint32{1, 1, 1}, ctl, rec.add(t, g), []uint64{ctl, wb, emb}})
		calls = append(calls, LaunchCall{"lithos_blm_nvfp4_r1", [3]uint32{4, 1, 1}, ctl, rec.add(t, kernels.BLMParams{DoneWord: kernels.NoWord}), []uint64{wb + 2*page, wb + 6*page, emb, logits + uint64(4096*k)}})
		calls = append(calls, LaunchCall{"lithos_argmax_partial", [3]uint32{2, 1, 1}, ctl, rec.add(t, kernels.ArgmaxParams{DoneWord: kernels.NoWord}), []uint64{logits + uint64(4096*k), pv, pi}})
		calls = append(calls, LaunchCall{"lithos_argmax_final", [3]uint32{1, 1, 1}, ctl, rec.add(t, kernels.ArgmaxParams{DoneWord: kernels.NoWord, OutOff: uint32(pending + k + 1)}), []uint64{pv, pi, ctl}})
	}
	return calls, bufs
}

func record(t *testing.T, m *memTable, mode BarrierMode, calls []LaunchCall) *Plan {
	t.Helper()
	r := &Recorder{Table: &m.AddrTable, Read: m.read, Mode: mode}
	for _, c := range calls {
		if err := r.Launch(c); err != nil {
			t.Fatal(err)
		}
	}
	p, err := r.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRecordMarkov: the Markov chain gets a barrier on every command in both modes (each
// reads what the one before wrote, the last through the ctl word argmax_final writes);
// records are copied to RecordAlign offsets byte for byte; the resident set is every buffer
// with the right usage; pipelines and threads come from the registry.
func TestRecordMarkov(t *testing.T) {
	m := newMemTable()
	rec := newRecords(t, m)
	calls, bufs := markov(t, m, rec, 3)
	for _, mode := range []BarrierMode{BarrierSerial, BarrierHazards} {
		p := record(t, m, mode, calls)
		if len(p.Commands) != 12 || p.Barriers != 12 {
			t.Fatalf("mode %d: %d commands, %d barriers; want 12, 12", mode, len(p.Commands), p.Barriers)
		}
		for i, c := range p.Commands {
			k, pipe, _ := kernelPipe(calls[i].Kernel)
			if c.Pipe != pipe || c.Threads != uint32(k.Threads) || c.Groups != calls[i].Grid || len(c.Args) != 2+len(k.Buffers) {
				t.Fatalf("command %d: %+v", i, c)
			}
			a := c.Args[1]
			if a.Buf != RecordsBuf || a.Off%RecordAlign != 0 {
				t.Fatalf("command %d: record at %+v", i, a)
			}
			want, _ := m.read(mustResolve(t, m, calls[i].Prm), len(kernels.Record(k.Params)))
			if !bytes.Equal(p.Records[a.Off:uint64(a.Off)+a.Extent], want) {
				t.Fatalf("command %d: record bytes differ", i)
			}
			for j, addr := range append([]uint64{calls[i].Ctl, 0}, calls[i].Bufs...) {
				if j != 1 && c.Args[j] != mustResolve(t, m, addr) {
					t.Fatalf("command %d argument %d: %+v", i, j, c.Args[j])
				}
			}
		}
		res := map[BufID]bool{}
		for _, u := range p.Resident {
			res[u.Buf] = u.Write
		}
		for name, w := range map[string]bool{"ctl": true, "w1": false, "emb": true, "logits": true, "pv": true, "pi": true} {
			b := mustResolve(t, m, bufs[name]).Buf
			if got, ok := res[b]; !ok || got != w {
				t.Errorf("resident %s: present %v write %v, want write %v", name, ok, got, w)
			}
		}
		if _, ok := res[RecordsBuf]; !ok || len(res) != 7 || p.MaxBind != 6 {
			t.Errorf("resident %+v, max bind %d", p.Resident, p.MaxBind)
		}
	}
}

func mustResolve(t *testing.T, m *memTable, addr uint64) Loc {
	t.Helper()
	l, err := m.Resolve(addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRecordHazards: independent commands share no barrier in BarrierHazards mode: three
// projections of one input into three outputs run together; a consumer of all three waits
// (RAW); a command reading and writing buffers no open command touches does not wait even
// though it overwrites an input of commands before the last barrier; a write to what an
// open command reads waits (WAR). Ranges run to the end of their buffer (a launch does not
// say how far a kernel reads), so any two accesses to one buffer overlap.
func TestRecordHazards(t *testing.T) {
	m := newMemTable()
	rec := newRecords(t, m)
	ctl := m.add(t, "ctl", 256)
	x := m.add(t, "x", 4096)
	q, k, v := m.add(t, "q", 4096), m.add(t, "k", 4096), m.add(t, "v", 4096)
	out := m.add(t, "out", 8192)
	ew := func(a, b, y uint64) LaunchCall {
		return LaunchCall{"lithos_ewise", [3]uint32{1, 1, 1}, ctl, rec.add(t, kernels.EwiseParams{DoneWord: kernels.NoWord}), []uint64{a, b, y}}
	}
	calls := []LaunchCall{
		ew(x, x, q),        // 0: the first command: barrier
		ew(x, x, k),        // 1: reads x like 0, writes k: independent
		ew(x, x, v),        // 2: independent
		ew(q, k, out),      // 3: reads q and k (RAW on 0, 1): barrier
		ew(v, v, x),        // 4: open is {3}: 3 reads q, k and writes out: independent
		ew(out, out, q),    // 5: reads out (RAW on 3): barrier
		ew(k, k, out+4096), // 6: writes out, which 5 reads (WAR): barrier
	}
	p := record(t, m, BarrierHazards, calls)
	for i, w := range []bool{true, false, false, true, false, true, true} {
		if p.Commands[i].Barrier != w {
			t.Errorf("command %d: barrier %v, want %v", i, p.Commands[i].Barrier, w)
		}
	}
	if p.Barriers != 4 {
		t.Errorf("%d barriers, want 4", p.Barriers)
	}
	if ps := record(t, m, BarrierSerial, calls); ps.Barriers != len(calls) {
		t.Errorf("serial: %d barriers for %d commands", ps.Barriers, len(calls))
	}
}

// FuzzRecordHazards: random programs of ewise/copy launches over four buffers at random
// offsets. Every pair of conflicting commands (one writes bytes the other reads or writes)
// has a barrier on the later one or on a command between them (setBarrier waits for every
// earlier command), and every barrier after the first is needed: its command conflicts with
// a command since the previous barrier.
func FuzzRecordHazards(f *testing.F) {
	f.Add(uint64(1), uint8(20))
	f.Add(uint64(0xdeadbeef), uint8(60))
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		rng := rand.New(rand.NewPCG(seed, 7))
		m := newMemTable()
		rec := newRecords(t, m)
		ctl := m.add(t, "ctl", 64)
		var bufs []uint64
		for i := range 4 {
			bufs = append(bufs, m.add(t, fmt.Sprint("b", i), 1024))
		}
		addr := func() uint64 { return bufs[rng.IntN(4)] + 4*uint64(rng.IntN(256)) }
		var calls []LaunchCall
		for range int(n%80) + 1 {
			if rng.IntN(2) == 0 {
				calls = append(calls, LaunchCall{"lithos_ewise", [3]uint32{1, 1, 1}, ctl, rec.add(t, kernels.EwiseParams{}), []uint64{addr(), addr(), addr()}})
			} else {
				calls = append(calls, LaunchCall{"lithos_copy", [3]uint32{1, 1, 1}, ctl, rec.add(t, kernels.CopyParams{}), []uint64{addr(), addr()}})
			}
		}
		r := &Recorder{Table: &m.AddrTable, Read: m.read, Mode: BarrierHazards}
		var acc [][]access
		for i, c := range calls {
			x, err := resolveLaunch(r.Table, r.Read, i, c)
			if err != nil {
				t.Fatal(err)
			}
			acc = append(acc, x.acc)
			if err := r.Launch(c); err != nil {
				t.Fatal(err)
			}
		}
		p, err := r.Finish()
		if err != nil {
			t.Fatal(err)
		}
		conflict := func(i, j int) bool {
			for _, a := range acc[i] {
				for _, b := range acc[j] {
					if a.conflicts(b) {
						return true
					}
				}
			}
			return false
		}
		last := 0 // the latest barrier at or before j
		for j := range p.Commands {
			if p.Commands[j].Barrier {
				if j > 0 {
					need := false
					for i := last; i < j; i++ {
						need = need || conflict(i, j)
					}
					if !need {
						t.Fatalf("command %d has a barrier no conflict needs", j)
					}
				}
				last = j
				continue
			}
			for i := last; i < j; i++ {
				if conflict(i, j) {
					t.Fatalf("commands %d and %d conflict with no barrier between them (%s, %s)", i, j, calls[i].Kernel, calls[j].Kernel)
				}
			}
		}
		if !p.Commands[0].Barrier {
			t.Fatal("the first command has no barrier")
		}
	})
}

// TestRecordErrors: each refused launch names the launch, the kernel and the argument.
func TestRecordErrors(t *testing.T) {
	m := newMemTable()
	rec := newRecords(t, m)
	ctl := m.add(t, "ctl", 256)
	x := m.add(t, "x", 1024)
	big := m.add(t, "big", 5<<30)
	const page = PageBytes
	wb, _, ids, err := m.AddWindowed("weights", 4*page, []Range{{0, page}, {2 * page, 100}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.mem[ids[0]] = make([]byte, 4*page)
	ewRec := rec.add(t, kernels.EwiseParams{})
	rmsRec := rec.add(t, kernels.RMSNormParams{})
	ew := func(a, b, y uint64) LaunchCall {
		return LaunchCall{"lithos_ewise", [3]uint32{1, 1, 1}, ctl, ewRec, []uint64{a, b, y}}
	}
	for _, c := range []struct {
		name string
		call LaunchCall
		want string
	}{
		{"unknown kernel", LaunchCall{Kernel: "lithos_nope", Grid: [3]uint32{1, 1, 1}}, "launch 0: no kernel lithos_nope"},
		{"buffer count", LaunchCall{"lithos_ewise", [3]uint32{1, 1, 1}, ctl, ewRec, []uint64{x, x}}, "takes 3 buffers (a, b, y), got 2"},
		{"empty grid", LaunchCall{"lithos_ewise", [3]uint32{1, 0, 1}, ctl, ewRec, []uint64{x, x, x}}, "empty dimension"},
		{"null", ew(x, 0, x), "argument 3 (b): null address"},
		{"unknown address", ew(x, x, 12345), "argument 4 (y): address 0x3039 is in no live buffer"},
		{"straddles the end", ew(x+1022, x, x), "argument 2 (a): bytes"},
		{"misaligned", ew(x+2, x, x), "argument 2 (a): offset 2 bytes into its buffer is not a multiple of 4"},
		{"past 4 GiB", ew(x, big+(1<<32)+64, x), "argument 3 (b): address"},
		{"weights padding", ew(wb+page+64, x, x), "is in no tensor"},
		{"record truncated", LaunchCall{"lithos_ewise", [3]uint32{1, 1, 1}, ctl, x + 1024 - 16, []uint64{x, x, x}}, "argument 1 (params)"},
		{"no-alias overlaps a write", LaunchCall{"lithos_rmsnorm", [3]uint32{1, 1, 1}, ctl, rmsRec, []uint64{x, x + 64, x, x}}, "argument 3 (w): declared no-alias but overlaps argument 5 (y)"},
	} {
		r := &Recorder{Table: &m.AddrTable, Read: m.read}
		err := r.Launch(c.call)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "metal: launch 0") {
			t.Errorf("%s: %v, want an error naming launch 0 and containing %q", c.name, err, c.want)
			continue
		}
		if _, err2 := r.Finish(); err2 != err {
			t.Errorf("%s: Finish returned %v, want the launch's error", c.name, err2)
		}
	}
	if _, err := (&Recorder{Table: &m.AddrTable, Read: m.read}).Finish(); err == nil {
		t.Error("an empty program was accepted")
	}
}

// TestRecordChunks: a plan longer than MaxCommands is cut into ICBs of MaxCommands; each
// chunk's first command has a barrier (it starts a new encoder after the previous chunk)
// even where no hazard asks for one. The program writes three targets in turn (reading a
// fourth buffer), so hazards put a barrier on every third command, and MaxCommands is not
// a multiple of 3.
func TestRecordChunks(t *testing.T) {
	m := newMemTable()
	rec := newRecords(t, m)
	ctl := m.add(t, "ctl", 64)
	src := m.add(t, "src", 64)
	dst := []uint64{m.add(t, "a", 64), m.add(t, "b", 64), m.add(t, "c", 64)}
	prm := rec.add(t, kernels.EwiseParams{})
	r := &Recorder{Table: &m.AddrTable, Read: m.read, Mode: BarrierHazards}
	n := MaxCommands + 5
	for i := 0; i < n; i++ {
		if err := r.Launch(LaunchCall{"lithos_ewise", [3]uint32{1, 1, 1}, ctl, prm, []uint64{src, src, dst[i%3]}}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := r.Finish()
	if err != nil {
		t.Fatal(err)
	}
	ch := p.Chunks()
	if len(ch) != 2 || ch[0] != [2]int{0, MaxCommands} || ch[1] != [2]int{MaxCommands, n} {
		t.Fatalf("chunks %v", ch)
	}
	if MaxCommands%3 == 0 {
		t.Fatal("MaxCommands is a multiple of 3: this test cannot tell a chunk barrier from a hazard")
	}
	for i, c := range p.Commands {
		want := i%3 == 0 || i == MaxCommands
		if i > MaxCommands {
			want = (i-MaxCommands)%3 == 0
		}
		if c.Barrier != want {
			t.Fatalf("command %d: barrier %v, want %v", i, c.Barrier, want)
		}
	}
	if len(p.Records) < (n-1)*RecordAlign {
		t.Fatalf("records arena %d bytes for %d commands", len(p.Records), n)
	}
}
