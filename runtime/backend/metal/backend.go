package metal

// Backend is the Metal backend (backend.Backend): the device-neutral runtime of
// runtime/backend/gpu over a Metal Device (darwin/arm64; elsewhere Load returns
// ErrUnsupported).
type Backend struct{}

// Name returns "metal".
func (Backend) Name() string { return "metal" }

// RunsModels tells whether --backend auto may pick the Metal backend on a Mac: false, because
// nothing of it has run on one. Unverified (docs/metal.md §6, the first-run checklist): that
// the library compiles as MSL 3.1 with every pipeline at 32-wide simdgroups; the purego
// calling conventions (MTLSize by reference, NSRange in two registers); the no-copy windows
// of the mapped weights; every kernel's numerics through Dispatch; the indirect command
// buffers (encoding, setBarrier, useResource residency, the 32-bit offsets) and their
// replayed rounds giving the CPU backend's tokens; the blit copies ordered with replays; the
// IORegistry core count. --backend metal selects it explicitly.
const RunsModels = false
