//go:build linux && amd64

package cuda

import (
	"context"
	"fmt"

	"lithos/runtime/backend"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
)

// Backend is the CUDA backend (backend.Backend) on GPU Ordinal.
type Backend struct {
	Ordinal int // CUDA device ordinal (0: the first visible GPU)
}

// Name returns "cuda".
func (Backend) Name() string { return "cuda" }

// Usable returns nil when a GPU the backend can run is present (the driver loads, a device
// of compute capability ≥ MinComputeCapability opens), else the reason.
func Usable() error {
	d, err := Open(0)
	if err != nil {
		return err
	}
	return d.Close()
}

// Load opens the GPU, loads the kernel module (compiled by NVRTC for the device, or read from
// the disk cache), refuses a bundle whose weights do not fit the free memory (before any
// allocation) or that the programs cannot run (naming the tensor), and uploads the weights.
// It returns the device-neutral runtime's *gpu.Target over the GPU (gpu.Load over Runtime),
// which owns the device: its Close releases it.
func (b Backend) Load(ctx context.Context, bd *bundle.Bundle) (backend.Target, error) {
	d, err := Open(b.Ordinal)
	if err != nil {
		return nil, err
	}
	if err := d.Fit(fmt.Sprintf("bundle %s (weights.bin)", bd.Dir), int64(len(bd.Weights()))); err != nil {
		d.Close()
		return nil, err
	}
	ks, err := d.LoadKernels()
	if err != nil {
		d.Close()
		return nil, err
	}
	t, err := gpu.Load(ctx, Runtime(d, ks), bd)
	if err != nil {
		ks.Unload()
		d.Close()
		return nil, err
	}
	return t, nil
}

// RunsModels tells whether --backend auto may pick the CUDA backend (when a usable GPU is
// present): false until it serves every request the CPU backend does, since auto must not turn
// a working command into an error. Load runs a bundle's target with greedy and sampled
// (temperature, top-k, top-p) decoding and its DSpark head with speculative rounds (greedy and
// the point-mass rule) on the device; still missing: matrices in INT8 and affine INT4 (the CPU
// reads them; Load refuses them, naming the tensor), tied embeddings (no packed lm_head),
// embeddings other than BF16/F32, and sampled drafts with the min(1, p/q) rule
// (--draft-sampling sample). --backend cuda selects it explicitly.
const RunsModels = false
