// Package metal is the Metal backend skeleton for Apple silicon (issue 11; docs/metal.md §6):
// darwin/arm64 with CGO_ENABLED=0, through purego's objc. One goroutine locked to its OS thread
// owns every Metal call (owner: one call at a time), and each autorelease pool is drained in the
// function that pushed it; device discovery (name, GPU family, working-set size); the kernel
// library compiled from kernels.Source(kernels.Metal) with the Metal language version set
// explicitly and read back (a pure-Go binary records an old SDK version, and Metal would
// otherwise compile as MSL 2.4: golang/go issues 77917 and 77944); compute pipelines that
// support indirect command buffers, refused unless their threadExecutionWidth is 32; the
// bundle's mapped weights wrapped with newBufferWithBytesNoCopy in windows under 4 GiB
// (PlanWindows: indirect-command-buffer offsets are 32-bit); Dispatch with its arguments
// validated (checkDispatch, ArgAlign) and a bounded wait that never returns while the GPU may
// still use the caller's memory (ErrTimeout, ErrStuck); Close.
//
// Not yet: the Backend/Target/Session implementation, ICB encoding and replay, residency. None
// of the darwin code has run: no Mac was available (docs/metal.md §6 is the first-run
// checklist). The plain-Go parts — PlanWindows, checkDispatch/ArgAlign, the owner thread's life
// cycle, the wait logic — build and are tested on every platform.
//
// Imports: lithos/kernels; github.com/ebitengine/purego (darwin).
package metal
