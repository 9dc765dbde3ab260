// Package cpu is the pure-Go CPU backend of the lithos runtime (docs/runtime.md): the
// reference every other backend must match, and the default anywhere.
//
// It computes over BLM-packed weights directly (Packed: the kernels read the block-lane-major
// layout of docs/blm.md from the mapped bundle; nothing is unpacked to dense at load), builds
// the Qwen3.5 hybrid target of lithos/runtime/model from a bundle (LoadTarget: every matrix a
// view of its packed rows, the embedding gathered from the mapped BF16 table), binds the
// bundle's DSpark draft head to it (LoadDraft, DSpark), and runs sessions under the backend
// contract of lithos/runtime/backend (step state, token ring, two-slot GDN state), with
// speculative rounds when a drafter is given (docs/speculative.md). Work is split over output
// rows on GOMAXPROCS goroutines; every accumulation is float32.
//
// Imports: lithos/runtime/backend, lithos/runtime/bundle, lithos/runtime/model,
// lithos/runtime/draft, lithos/runtime/sample, lithos/pack/blm, lithos/manifests,
// lithos/formats and its codecs.
package cpu
