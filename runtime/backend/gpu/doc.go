// Package gpu is the device-neutral runtime both GPU backends run (ARCHITECTURE.md §3.4): the
// same programs of lithos/kernels' kernels (one template per op, generated for CUDA and Metal,
// docs/metal.md §1–2) over a small Device interface (device.go) that runtime/backend/cuda
// implements over the CUDA driver and runtime/backend/metal over Metal. It has no build tags.
//
//   - Target (target.go): a bundle on the device — weights.bin uploaded once into one device
//     buffer (matrices used as packed, at their manifest offsets), the float32 vectors decoded
//     with their transforms; refuses formats the kernels do not read and bundles that do not
//     fit, naming the tensor. Load also checks every layer (plan) and owns the Device.
//   - Session (session.go): one sequence — step state words, KV caches, two-slot GDN and conv
//     states, activations in device memory, the token ring in mapped host memory; a decode
//     step and prefill chunks of up to MaxStepRows rows are recorded programs, each recorded
//     once (Queue.Record: a CUDA graph, a Metal indirect command buffer) and replayed; Prefill
//     and Decode queue everything, then wait once (bounded).
//   - the DSpark head (draft.go): LoadDraft binds the bundle's draft head to the Target; a
//     session with it runs each decode step as one recorded speculative round
//     (docs/speculative.md §1).
//   - the program builder (program.go): launch lists of kernels with their parameter records
//     (kernels.Record, in a Records arena uploaded once), grids and buffer addresses; emitters
//     for the layers, the token choice, the round, the drafter's block and append. A record
//     with a Validate method is checked when it is added; errors name the program, the op and
//     the layer or tensor.
//
// Measured numbers: docs/performance.md.
package gpu
