// Package manifests owns the small, versioned descriptions lithos ships with
// its code: chip profiles (published memory bandwidth and page size, with the
// source of every figure: Chips, ChipByID), the model registry that pairs a
// target checkpoint with its default DSpark draft head (Registry, DraftFor),
// the embedded model specs from which header-only checkpoints are
// synthesized for audits and tests (ModelSpec), and the bundle manifest
// schema (ARCHITECTURE.md §3.3).
//
// It imports only the standard library, so every other package may import it.
package manifests
