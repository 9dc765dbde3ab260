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
// of compute capability ≥ MinComputeCapability opens) and NVRTC, which compiles the kernels at
// start, loads; else the reason (Open's errors, NVRTC missing or older than 12).
func Usable() error {
	_, err := UsableDevice()
	return err
}

// UsableDevice is Usable that also returns the description of the GPU it found (ordinal 0, the
// device auto's candidate Backend{} loads on): the string a target loaded on it gives (runtimeDevice.String: Info, NVRTC version), by which
// runtime/generate keys its first-use self-check verdicts, so that a cached verdict can be read
// before the weights are uploaded. "" with an error.
func UsableDevice() (string, error) {
	d, err := Open(0)
	if err != nil {
		return "", err
	}
	info := d.Info
	if err := d.Close(); err != nil {
		return "", err
	}
	if err := loadNVRTC(); err != nil {
		return "", err
	}
	return describe(info), nil
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

// RunsModels tells whether --backend auto may pick the CUDA backend: true. Auto
// (lithos/runtime/generate.OpenWith) tries CUDA first when a usable GPU is present (Usable:
// driver, GPU, NVRTC; without one it runs on the CPU with a debug log only) and keeps it when
// Load, LoadDraft and a probe session with the command's options succeed. What the GPU
// refuses, before any work and with backend.ErrUnsupported, falls back to the CPU with a
// one-line warning naming the tensor or option: matrices in INT8 and affine INT4 (the CPU
// reads them), tied embeddings (no packed lm_head), embeddings other than BF16/F32, weights
// larger than the free device memory, and sampled drafts with the min(1, p/q) rule
// (--draft-sampling sample at temperature > 0). A device failure (a compile error, an
// allocation, launch or wait that fails) is an error, never a silent retry on the CPU.
// Before keeping it, auto runs the first-use self-check against the CPU backend
// (generate.SelfCheckTolerance; once per GPU, executable and bundle): verified on the H200,
// it is cheap insurance for other NVIDIA GPUs. --backend cuda selects it explicitly and shows
// the refusals as errors.
const RunsModels = true
