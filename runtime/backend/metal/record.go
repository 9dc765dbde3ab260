package metal

import (
	"fmt"
	"sort"
	"sync"

	"lithos/kernels"
)

// MaxCommands is the most commands one indirect command buffer of a plan holds; a longer
// plan is encoded as several ICBs, executed in order, each in its own compute encoder
// (Plan.Chunks). A Recorder may set a smaller bound (Recorder.MaxCommands: the tests of the
// emulated device cut real programs into many ICBs). Apple's pages for newIndirectCommandBufferWithDescriptor:maxCommandCount:
// options: give no upper bound that we could find (searched 2026-12: developer.apple.com
// MTLDevice/makeIndirectCommandBuffer, MTLIndirectCommandBuffer/size); 16384 is a
// conservative choice, well above a speculative round (~1–2k commands).
const MaxCommands = 16384

// MaxBufferBinds is the most buffer arguments one ICB compute command may bind
// (maxKernelBufferBindCount; Metal's buffer argument table has 31 entries).
const MaxBufferBinds = 31

// BarrierMode says where a plan sets setBarrier on a command. Compute commands of an
// indirect command buffer do not wait for each other unless a command has a barrier, which
// makes it wait for every earlier command of the ICB (Apple, MTLIndirectComputeCommand
// setBarrier; docs/metal.md §6 step 5; review note 13).
type BarrierMode int

const (
	// BarrierSerial sets a barrier on every command: the ICB runs as the queue would, one
	// command after the other. The default until a Mac has shown BarrierHazards gives the
	// same tokens (docs/metal.md §6).
	BarrierSerial BarrierMode = iota
	// BarrierHazards sets a barrier on a command only when it reads or writes bytes that a
	// command since the last barrier wrote, or writes bytes one of them read (RAW, WAW, WAR),
	// on the resolved buffers and ranges: a write is the kernel's Write buffers and ctl when
	// it writes ctl (kernels.Kernel.CtlRW), and an argument's range runs from its address
	// to the end of its buffer (or weights tensor), since a launch does not say how far a
	// kernel reads.
	BarrierHazards
)

// LaunchCall is one Queue.Launch call: a kernel of lithos/kernels, its grid in threadgroups,
// the addresses of ctl, the parameter record and the kernel's buffers (Kernel.Buffers order).
type LaunchCall struct {
	Kernel   string
	Grid     [3]uint32
	Ctl, Prm uint64
	Bufs     []uint64
}

// Command is one compute command of an indirect command buffer.
type Command struct {
	Kernel  string
	Pipe    int       // index of the kernel in kernels.Kernels(): the device's pipeline
	Groups  [3]uint32 // threadgroups per grid
	Threads uint32    // threads per threadgroup (x; y = z = 1): the kernel's Threads
	// Args are bound at buffer index i: 0 ctl, 1 the parameter record (RecordsBuf: the
	// plan's arena, at a multiple of RecordAlign), 2… the kernel's buffers.
	Args    []Loc
	Barrier bool // setBarrier: wait until every earlier command of the ICB has completed
}

// Use is a buffer an ICB touches, declared resident with useResource:usage: (read, or read
// and write) on the encoder that executes it.
type Use struct {
	Buf   BufID
	Write bool
}

// Plan is a recorded program encoded for indirect command buffers.
type Plan struct {
	Commands []Command
	// Records holds each command's parameter record, copied when it was recorded (a
	// change to the runtime's record afterwards is not seen; CUDA graphs read the record at
	// replay), each at a multiple of RecordAlign.
	Records  []byte
	Resident []Use // sorted by Buf; RecordsBuf first (read)
	MaxBind  int   // the most arguments of one command: maxKernelBufferBindCount
	Barriers int   // commands with a barrier
	// ChunkCommands is the most commands of one ICB (Recorder.MaxCommands; 0: MaxCommands).
	ChunkCommands int
}

// chunkLen is the most commands of one ICB of the plan.
func (p *Plan) chunkLen() int {
	if p.ChunkCommands > 0 {
		return p.ChunkCommands
	}
	return MaxCommands
}

// Chunks returns the command ranges [lo, hi) of the ICBs the plan is encoded into, each at
// most ChunkCommands (MaxCommands) long.
func (p *Plan) Chunks() [][2]int {
	var c [][2]int
	n := p.chunkLen()
	for lo := 0; lo < len(p.Commands); lo += n {
		c = append(c, [2]int{lo, min(lo+n, len(p.Commands))})
	}
	return c
}

// access is a range of one buffer a command reads or writes.
type access struct {
	buf    BufID
	lo, hi uint64
	write  bool
}

func (a access) conflicts(b access) bool {
	return a.buf == b.buf && (a.write || b.write) && a.lo < b.hi && b.lo < a.hi
}

var (
	pipeOnce  sync.Once
	pipeIndex map[string]int
)

// kernelPipe returns kernel name's entry and its index in kernels.Kernels(); false for a name
// that is not a kernel of the Metal library (the CUDA-only MMAOnly kernels among them).
func kernelPipe(name string) (kernels.Kernel, int, bool) {
	pipeOnce.Do(func() {
		pipeIndex = map[string]int{}
		for i, k := range kernels.Kernels() {
			if !k.MMAOnly {
				pipeIndex[k.Name] = i
			}
		}
	})
	i, ok := pipeIndex[name]
	if !ok {
		return kernels.Kernel{}, 0, false
	}
	return kernels.Kernels()[i], i, true
}

// resolved is one launch resolved against an address table.
type resolved struct {
	cmd    Command
	record []byte   // the parameter record's bytes
	acc    []access // what the kernel may read and write (the record excluded)
}

// resolveLaunch checks one launch and resolves its arguments: a known kernel, the buffer
// count, a non-empty grid, no null address, every argument in one live buffer at an offset
// below 4 GiB and aligned as ArgAlign says, the record (kernels.Record's size) readable
// through read, no NoAlias argument overlapping a written one. Errors name the launch (its
// index n in the program), the kernel and the argument.
func resolveLaunch(t *AddrTable, read func(Loc, int) ([]byte, error), n int, c LaunchCall) (resolved, error) {
	k, pipe, ok := kernelPipe(c.Kernel)
	if !ok {
		return resolved{}, fmt.Errorf("metal: launch %d: no kernel %s", n, c.Kernel)
	}
	fail := func(i int, f string, a ...any) (resolved, error) {
		return resolved{}, fmt.Errorf("metal: launch %d (%s), argument %d (%s): %s", n, k.Name, i, argName(k, i), fmt.Sprintf(f, a...))
	}
	if len(c.Bufs) != len(k.Buffers) {
		return resolved{}, fmt.Errorf("metal: launch %d (%s): takes %d buffers (%s), got %d", n, k.Name, len(k.Buffers), bufferNames(k), len(c.Bufs))
	}
	if c.Grid[0] == 0 || c.Grid[1] == 0 || c.Grid[2] == 0 {
		return resolved{}, fmt.Errorf("metal: launch %d (%s): grid %v has an empty dimension", n, k.Name, c.Grid)
	}
	if len(c.Bufs)+2 > MaxBufferBinds {
		return resolved{}, fmt.Errorf("metal: launch %d (%s): %d arguments, an ICB command binds at most %d", n, k.Name, len(c.Bufs)+2, MaxBufferBinds)
	}
	addrs := append([]uint64{c.Ctl, c.Prm}, c.Bufs...)
	r := resolved{cmd: Command{Kernel: k.Name, Pipe: pipe, Groups: c.Grid, Threads: uint32(k.Threads), Args: make([]Loc, len(addrs))}}
	for i, addr := range addrs {
		if addr == 0 {
			return fail(i, "null address")
		}
		al, err := ArgAlign(k, i)
		if err != nil {
			return resolved{}, fmt.Errorf("metal: launch %d: %w", n, err)
		}
		need := uint64(al)
		switch {
		case i == 1:
			need = uint64(len(kernels.Record(k.Params)))
		case i >= 2:
			need = uint64(elemBytes[k.Buffers[i-2].Elem])
		}
		l, err := t.Resolve(addr, need)
		if err != nil {
			return fail(i, "%v", err)
		}
		if i != 1 && l.Off%uint32(al) != 0 { // the record is copied to an aligned arena
			return fail(i, "offset %d bytes into its buffer is not a multiple of %d", l.Off, al)
		}
		r.cmd.Args[i] = l
		if i == 1 {
			if r.record, err = read(l, int(need)); err != nil {
				return fail(i, "read the record: %v", err)
			}
			continue
		}
		w := (i == 0 && k.CtlRW) || (i >= 2 && k.Buffers[i-2].Write)
		r.acc = append(r.acc, access{l.Buf, uint64(l.Off), uint64(l.Off) + l.Extent, w})
	}
	for i := 2; i < len(addrs); i++ {
		if !k.Buffers[i-2].NoAlias {
			continue
		}
		a := r.acc[i-1] // acc holds ctl, then the buffers
		for j, b := range r.acc {
			if b.write && a.buf == b.buf && a.lo < b.hi && b.lo < a.hi {
				jj := j + 1
				if j == 0 {
					jj = 0
				}
				return fail(i, "declared no-alias but overlaps argument %d (%s), which the kernel writes", jj, argName(k, jj))
			}
		}
	}
	return r, nil
}

// Recorder turns the launches of a program (Queue.Record's enqueue) into a Plan: Launch
// resolves each against the address table and copies its record, Finish places the
// barriers and lists the resident buffers. Copies and fills are not commands an indirect
// command buffer holds; the device interface forbids them inside Record, and the queue
// refuses them while recording (no split around blits, no lithos_copy rewrite). Plain Go:
// record_test.go.
type Recorder struct {
	Table *AddrTable
	// Read returns n bytes at a resolved location (the parameter record; Metal buffers are
	// shared memory, readable by the host).
	Read func(l Loc, n int) ([]byte, error)
	Mode BarrierMode
	// MaxCommands bounds the commands of one ICB (≤ 0 or more than MaxCommands: MaxCommands);
	// the first command of each ICB gets a barrier in every mode.
	MaxCommands int

	res []resolved
	err error
}

// Launch adds one launch; the first error is kept and returned again by Finish.
func (r *Recorder) Launch(c LaunchCall) error {
	if r.err != nil {
		return r.err
	}
	x, err := resolveLaunch(r.Table, r.Read, len(r.res), c)
	if err != nil {
		r.err = err
		return err
	}
	r.res = append(r.res, x)
	return nil
}

// Fail records err (a copy or fill inside a recording) as the recording's error.
func (r *Recorder) Fail(err error) error {
	if r.err == nil {
		r.err = err
	}
	return r.err
}

// Finish returns the plan. Errors: the first error of a Launch (or Fail), an empty program.
func (r *Recorder) Finish() (*Plan, error) {
	if r.err != nil {
		return nil, r.err
	}
	if len(r.res) == 0 {
		return nil, fmt.Errorf("metal: record: the program queued no launch")
	}
	p := &Plan{}
	if r.MaxCommands > 0 && r.MaxCommands < MaxCommands {
		p.ChunkCommands = r.MaxCommands
	}
	chunk := p.chunkLen()
	use := map[BufID]bool{}
	var open []access
	for i, x := range r.res {
		c := x.cmd
		for len(p.Records)%RecordAlign != 0 {
			p.Records = append(p.Records, 0)
		}
		c.Args[1] = Loc{Buf: RecordsBuf, Off: uint32(len(p.Records)), Extent: uint64(len(x.record))}
		p.Records = append(p.Records, x.record...)
		if len(p.Records) > MaxWindowBytes {
			return nil, fmt.Errorf("metal: record: %d commands' records exceed 4 GiB", i+1)
		}
		switch {
		case r.Mode == BarrierSerial || i%chunk == 0:
			c.Barrier = true
		default:
			for _, a := range x.acc {
				for _, b := range open {
					c.Barrier = c.Barrier || a.conflicts(b)
				}
			}
		}
		if c.Barrier {
			p.Barriers++
			open = open[:0]
		}
		open = append(open, x.acc...)
		for _, a := range x.acc {
			use[a.buf] = use[a.buf] || a.write
		}
		p.MaxBind = max(p.MaxBind, len(c.Args))
		p.Commands = append(p.Commands, c)
	}
	p.Resident = append(p.Resident, Use{Buf: RecordsBuf})
	for b, w := range use {
		p.Resident = append(p.Resident, Use{b, w})
	}
	sort.Slice(p.Resident, func(i, j int) bool { return p.Resident[i].Buf < p.Resident[j].Buf })
	return p, nil
}
