//go:build !unix

package generate

// openVerdictFlags: no extra open flags where there are no FIFOs or O_NOFOLLOW; readVerdict's
// Lstat and same-file checks stand alone.
const openVerdictFlags = 0
