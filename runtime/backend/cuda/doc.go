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
//     version and architecture; kernels launched with cuLaunchKernel, or cuLaunchKernelEx with launch attributes (clusters,
//     programmatic dependent launch).
//   - device checks (bandwidth.go, upload.go): the streaming read bandwidth of the device, and
//     the upload of a bundle's weights file staged through pinned memory (Fit refuses what does
//     not fit the free memory before any allocation).
//   - the kernels (kernelset.go): lithos/kernels' generated CUDA source (one template per op,
//     shared with Metal) compiled and loaded once; Launch applies its calling convention (step
//     state words, parameter record, buffers) and, on sm_90, programmatic dependent launch: a
//     kernel that follows a kernel on its stream may start while that one finishes, and waits
//     for it in its entry (Kernels.Overlap; docs/performance.md §3.3k).
//   - the runtime (runtime.go, backend.go): Runtime is the gpu.Device of
//     lithos/runtime/backend/gpu over an open GPU and its kernels — queues are streams, a
//     recording is a stream capture into a CUDA graph, Buffer and HostBuffer are gpu's — and
//     Backend.Load returns gpu's Target over it. Everything above the device (Target, Session,
//     the DSpark head, the programs of each step and speculative round, the ring drain) is
//     that package's, the same code the Metal backend runs.
//
// Tests run on the GPU, or, with LITHOS_CUDA_EMULATE=1, on a CPU emulator of the driver that
// runs the same programs with the kernels executed by lithos/kernels' fiber runtime
// (emulator_test.go); with LITHOS_CUDA_EMULATE_MMA=1 too, the BLM kernels take the GPU's
// tensor-core path there (MMAs emulated) and the target's and the draft head's matrices are read
// in the MMA and fragment-major layouts, as on the GPU.
//
// The driver is linux/amd64 only; elsewhere Open returns an error saying so, and the tests
// skip with the reason when no usable GPU is present (tools/cuda_check.sh runs them all on the
// GPU machine). Measured numbers: docs/performance.md.
//
// Imports: lithos/kernels, lithos/runtime/{backend, backend/gpu, bundle},
// github.com/ebitengine/purego, github.com/schollz/progressbar/v3, golang.org/x/term,
// golang.org/x/sys/unix.
package cuda
