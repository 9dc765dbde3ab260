//go:build linux && amd64

package cuda

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unsafe"

	"lithos/internal/atomicfile"
	"lithos/kernels"
)

// TimelineEnv names the file that the kernel module's timeline is written to when the module
// is unloaded (a diagnostic, docs/performance.md §3.3t): set, LoadKernels compiles the module
// with -DLITHOS_TIMELINE, so that thread 0 of every threadgroup of every launch records its
// start, the end of its entry's wait, the MMA-layout products' end of staging and of main
// loop, and its exit (%globaltimer, ns) into a ring in device memory (prelude TL_BEGIN). The
// records cost a few stores per threadgroup; the numbers of a run with it are not the
// kernels' own (the module also compiles again, since its options differ).
const TimelineEnv = "LITHOS_CUDA_TIMELINE"

// timelineHeader is the file's first line (JSON): Next is how many records were written (the
// ring holds the last min(Next, Records), record i of the run at slot i mod Records); Kernels
// maps each kernel id (kernels.TimelineID, hexadecimal) to its name. Records × 64 bytes
// follow: 8 little-endian u64 each — id << 32 | threadgroup x | y << 20, then the start, the
// entry's wait, the staging's end, the main loop's end (0 when not reached) and the exit in
// ns of %globaltimer, then the multiprocessor, then the launch's parameter record's device
// address (one per launch of a captured graph). tools/timeline.py reads it.
type timelineHeader struct {
	Next    uint32            `json:"next"`
	Records int               `json:"records"`
	Kernels map[string]string `json:"kernels"`
}

// dumpTimeline writes the module's timeline ring to path (a temporary file renamed into
// place). Errors: a driver without cuModuleGetGlobal, a module without the ring (compiled
// without LITHOS_TIMELINE), the copy, the file.
func (ks *Kernels) dumpTimeline(path string) error {
	ring, err := ks.global("lithos_tl")
	if err != nil {
		return err
	}
	next, err := ks.global("lithos_tl_next")
	if err != nil {
		return err
	}
	if ring.Size%64 != 0 || next.Size != 4 {
		return fmt.Errorf("cuda: timeline: ring of %d bytes, counter of %d: not the prelude's", ring.Size, next.Size)
	}
	nb := make([]byte, 4)
	if err := ks.d.Read(nb, next, 0); err != nil {
		return fmt.Errorf("cuda: timeline: read the counter: %w", err)
	}
	recs := make([]byte, ring.Size)
	if err := ks.d.Read(recs, ring, 0); err != nil {
		return fmt.Errorf("cuda: timeline: read the ring: %w", err)
	}
	h := timelineHeader{Next: binary.LittleEndian.Uint32(nb), Records: int(ring.Size / 64), Kernels: map[string]string{}}
	for _, k := range kernels.Kernels() {
		h.Kernels[fmt.Sprintf("%08x", kernels.TimelineID(k.Name))] = k.Name
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(append(hb, '\n'), recs...), 0o644); err != nil {
		return fmt.Errorf("cuda: timeline: %w", err)
	}
	return nil
}

// global returns a view of the module's __device__ variable name (cuModuleGetGlobal).
func (ks *Kernels) global(name string) (*Buffer, error) {
	if drv.cuModuleGetGlobal.addr == 0 {
		return nil, fmt.Errorf("cuda: timeline: the driver has no cuModuleGetGlobal_v2")
	}
	var ptr, size uint64
	cn := cString(name)
	err := ks.d.do(func() error {
		return call(drv.cuModuleGetGlobal, uintptr(unsafe.Pointer(&ptr)), uintptr(unsafe.Pointer(&size)), ks.Module.h, uintptr(unsafe.Pointer(&cn[0])))
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: timeline: module %s: global %s: %w", ks.Module.Name, name, err)
	}
	return &Buffer{Ptr: ptr, Size: int64(size)}, nil
}
