// Package fiberexec runs lithos's generated MSL kernels (kernels.Source(kernels.Metal)) on the
// CPU for tests: the fiber runtime of kernels/fiber (every thread of a threadgroup a fiber,
// barriers and simdgroup shuffles resolved cooperatively, docs/metal.md §4) compiled by clang++
// against kernels/shim into a server process, and one shared mapping of "device memory" (a
// memfd) placed at the same address in this process and in the server, so an address into it
// is a host pointer in both: the caller writes and reads the bytes directly, kernels read and
// write the same bytes there. A launch names a kernel by its index in kernels.Kernels() and
// passes its arguments as addresses in the mapping; it returns when the server has run the
// whole grid (everything is synchronous).
//
// Two emulated devices are built on it: the CUDA driver emulator (runtime/backend/cuda,
// LITHOS_CUDA_EMULATE=1) and the emulated Metal device (runtime/backend/metal, linux tests).
// One Exec per process (the mapping is at a fixed address). Linux on x86-64 only: the server
// switches fibers with a few lines of x86-64 assembly instead of the ucontext calls.
package fiberexec
