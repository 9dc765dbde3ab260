package metal

// Backend is the Metal backend (backend.Backend): the device-neutral runtime of
// runtime/backend/gpu over a Metal Device (darwin/arm64; elsewhere Load returns
// ErrUnsupported).
type Backend struct{}

// Name returns "metal".
func (Backend) Name() string { return "metal" }

// RunsModels tells whether --backend auto may pick the Metal backend on a Mac: true. Auto
// (lithos/runtime/generate.OpenWith) tries Metal first and keeps it when a device opens and
// its kernel library compiles (Usable), the bundle and its draft head load, a probe session
// with the command's options opens, and the first-use self-check passes: a short greedy
// generation on Metal and on the CPU backend over the same mapped bundle, tokens identical
// and logits within generate.SelfCheckTolerance, its verdict cached per chip, executable and
// bundle. A refusal or a failed check runs on the CPU with a one-line warning; a device error
// is an error. Nothing of the Metal backend has run on a Mac yet (docs/metal.md §6, the
// first-run checklist: the MSL 3.1 compile with 32-wide simdgroups, the purego calling
// conventions, the no-copy windows, every kernel's numerics, the indirect command buffers and
// their replayed rounds, the blit ordering, the IORegistry core count), which is why the
// self-check stands between it and auto. --backend metal selects it explicitly, unchecked.
const RunsModels = true
