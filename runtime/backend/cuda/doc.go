// Package cuda is the NVIDIA GPU backend of the lithos runtime (ARCHITECTURE.md §3.4, issue
// 10): the CUDA driver API (libcuda.so.1) and NVRTC (libnvrtc.so.*) reached through
// github.com/ebitengine/purego, so the binary stays CGO_ENABLED=0 and needs no CUDA toolkit to
// build, only the driver (and NVRTC) to run.
//
// The layers, bottom up:
//
//   - driver bindings (driver.go): every entry point the runtime uses, resolved once with
//     purego.Dlsym and called with purego.SyscallN; each CUresult other than CUDA_SUCCESS
//     becomes an *Error naming the call and carrying cuGetErrorName/cuGetErrorString.
//   - Device (device.go): the primary context of one GPU, made current on a locked OS thread
//     around every group of driver calls (contexts are per thread); device facts (name,
//     compute capability, memory, multiprocessors, L2, driver version).
//   - memory (memory.go): device buffers (cuMemAlloc), pinned host buffers (cuMemHostAlloc),
//     synchronous and stream-ordered copies.
//   - streams, events, graphs (stream.go): every wait is bounded — an event is recorded and
//     polled with cuEventQuery until it completes or a timeout passes (never an unbounded
//     cuStreamSynchronize); event timing; stream capture into a CUDA graph and its replay.
//   - modules (module.go, nvrtc.go): CUDA C++ source compiled by NVRTC for the device's
//     architecture (--gpu-architecture=sm_XX from its compute capability) into a CUBIN, cached
//     on disk under os.UserCacheDir()/lithos/cuda by the SHA-256 of source, options, NVRTC
//     version and architecture; kernels launched with cuLaunchKernel.
//   - device checks (bandwidth.go, upload.go): the streaming read bandwidth of the device, and
//     the upload of a bundle's weights file staged through pinned memory (Fit refuses what does
//     not fit the free memory before any allocation).
//   - the kernels (kernelset.go): lithos/kernels' generated CUDA source (one template per op,
//     shared with Metal) compiled and loaded once; Launch applies its calling convention (step
//     state words, parameter record, buffers); Records is a device arena of parameter records.
//   - the target (target.go, backend.go): Backend.Load opens the GPU, uploads weights.bin once
//     (matrices used as packed, at their manifest offsets) and the float32 vectors; refuses
//     formats the kernels do not read, naming the tensor.
//   - sessions (session.go, program.go): the step programs (a decode step; prefill chunks of up
//     to 8 rows) recorded as launch lists over device-resident state — step state words, KV
//     caches, two-slot GDN and conv states, activations — captured once each as a CUDA graph and
//     replayed; lithos_step does the step-state control on the device (rows, anchor, ring
//     pushes, commit, stop conditions); the token ring is mapped pinned host memory. Tokens are
//     the argmax at temperature 0 and lithos_sample's draw otherwise: runtime/sample's
//     temperature/top-k/top-p rule and counter-based uniform, on the device.
//   - speculative decoding (draft.go, program.go buildRound): LoadDraft binds the bundle's
//     DSpark head (its matrices read in place from the uploaded weights); a session with it runs
//     each decode step as one recorded round — RoundBegin, the drafter's block over its context
//     K/V and the Markov chain, RoundRows, the target over 1+L rows with taps and the records
//     of the commit replay, the LM head and token choice of every row, RoundAccept (scan, ring,
//     commit, stats), the GDN commit replay, the drafter's append of the committed rows —
//     replayed as one CUDA graph, no host synchronisation inside; counters and %globaltimer
//     times in a stats buffer (RoundStats). Greedy and the point-mass rule at temperature > 0;
//     sampled drafts (min(1, p/q)) are not on the GPU yet.
//
// Tests run on the GPU, or, with LITHOS_CUDA_EMULATE=1, on a CPU emulator of the driver that
// runs the same programs with the kernels executed by lithos/kernels' fiber runtime
// (emulator_test.go).
//
// The driver is linux/amd64 only; elsewhere Open returns an error saying so, and the tests
// skip with the reason when no usable GPU is present (tools/cuda_check.sh runs them all on the
// GPU machine). Measured numbers: docs/performance.md.
//
// Imports: lithos/kernels, lithos/runtime/{backend, backend/cpu, bundle, model}, lithos/manifests,
// lithos/pack/blm, lithos/formats, github.com/ebitengine/purego, github.com/schollz/progressbar/v3,
// golang.org/x/term, golang.org/x/sys/unix.
package cuda
