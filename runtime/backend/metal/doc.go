// Package metal is the Metal backend for Apple silicon (issue 11; docs/metal.md §6):
// darwin/arm64 with CGO_ENABLED=0, through purego's objc. One goroutine locked to its OS thread
// owns every Metal call (owner: one call at a time), and each autorelease pool is drained in the
// function that pushed it; device discovery (name, GPU family, working set, core count); the kernel
// library compiled from kernels.Source(kernels.Metal) with the Metal language version set
// explicitly and read back (a pure-Go binary records an old SDK version, and Metal would
// otherwise compile as MSL 2.4: golang/go issues 77917 and 77944); compute pipelines that
// support indirect command buffers, refused unless their threadExecutionWidth is 32; the
// bundle's mapped weights wrapped with newBufferWithBytesNoCopy in windows under 4 GiB
// (PlanWindows: indirect-command-buffer offsets are 32-bit); Dispatch with its arguments
// validated (checkDispatch, ArgAlign) and a bounded wait that never returns while the GPU may
// still use the caller's memory (ErrTimeout, ErrStuck); Close.
//
// The runtime's device interface (runtime/backend/gpu: the Target, Session and programs are
// device-neutral) is implemented over Metal (gpu_darwin.go, queue_darwin.go): synthetic 64-bit
// addresses resolved to (MTLBuffer, 32-bit offset) by an address table (AddrTable), the weights
// as one range of no-copy windows (MapWeights), blits for host copies, and Queue.Record as
// indirect command buffers built from a Plan (Recorder: pipelines, resolved arguments, records
// copied to a private arena, setBarrier per BarrierMode, the resident set); Backend.Load;
// the chip profile (Profile, matched to manifests.Chips). None of the darwin code has run — no
// Mac was available (docs/metal.md §6 is the first-run checklist); RunsModels is true, so
// --backend auto tries it, behind runtime/generate's first-use self-check against the CPU.
// The plain-Go parts — AddrTable, Recorder/Plan, the device memory logic (space: allocations,
// windowed weights, copy and launch resolution), Profile.Chip, PlanWindows,
// checkDispatch/ArgAlign, the owner thread's life cycle, the wait logic — build and are
// tested on every platform; on linux/amd64 the tests also run the runtime over an emulated
// Metal device (the same space and Recorder, buffers in the fiber runtime's arena, plans
// executed command by command: emulator_linux_test.go, docs/metal.md §6).
//
// Imports: lithos/kernels, lithos/manifests, lithos/runtime/{backend, backend/gpu, bundle};
// github.com/ebitengine/purego (darwin).
package metal
