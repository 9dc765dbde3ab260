// Package packtest writes synthetic checkpoints with random tensor data for the bundle tests
// and the pack benchmarks. It is a thin layer over lithos/convert.SynthRandom (which documents
// the values each format gets) and convert.CutSynthSpec, kept for the tests that import it.
//
// Imports: lithos/convert.
package packtest

import (
	"context"

	"lithos/convert"
)

// WriteCheckpoint writes the checkpoint spec describes into the new directory dir with random
// tensor data derived from seed and each tensor's name (convert.SynthRandom): the same
// arguments give the same bytes. It returns what convert.SynthHeaders laid out.
func WriteCheckpoint(ctx context.Context, spec *convert.SynthSpec, dir string, seed uint64) (*convert.SynthResult, error) {
	return convert.SynthRandom(ctx, spec, dir, convert.SynthRandomOptions{Seed: seed})
}

// ScaleSpec is convert.CutSynthSpec: spec cut to its first layers layers (0: all), without the
// vision tower and the MTP block unless kept, with maxShardBytes > 0 as the shard size.
func ScaleSpec(spec *convert.SynthSpec, layers int, keepVision, keepMTP bool, maxShardBytes int64) (*convert.SynthSpec, error) {
	return convert.CutSynthSpec(spec, layers, keepVision, keepMTP, maxShardBytes)
}
