//go:build darwin && arm64

package metal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"lithos/kernels"
	"lithos/runtime/backend"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
)

// Usable returns nil when a Metal device opens and its kernel library compiles, else the
// reason.
func Usable() error {
	_, err := UsableDevice()
	return err
}

// UsableDevice is Usable that also returns the device's Description, by which runtime/generate
// keys its first-use self-check verdicts (so that a cached verdict can be read before the
// weights are mapped); "" with an error.
func UsableDevice() (string, error) {
	d, err := Open()
	if err != nil {
		return "", err
	}
	desc := d.Description()
	if err := d.Close(); err != nil {
		return "", err
	}
	return desc, nil
}

// Description describes the device for the self-check verdicts: its Profile.String (chip, GPU
// cores, family, working set), then ", macOS <version>" when the version can be read — an OS
// update (a new Metal compiler) checks again.
func (d *Device) Description() string {
	s := d.Profile().String()
	if v := OSVersion(); v != "" {
		s += ", macOS " + v
	}
	return s
}

// Load opens the Metal device (its kernel library compiled with MSL 3.1), announces the
// bundle's mapped weights (MapWeights: no-copy windows instead of a copy) and loads the
// target with the device-neutral runtime (gpu.Load: refuses, naming the tensor, what the
// kernels cannot run; the Target owns the device). Nothing of it has run on a Mac
// (RunsModels).
func (Backend) Load(ctx context.Context, bd *bundle.Bundle) (backend.Target, error) {
	d, err := Open()
	if err != nil {
		return nil, err
	}
	p := d.Profile()
	if chip, ok := p.Chip(); ok {
		slog.Debug("metal device", "profile", p.String(), "chip", chip.ID, "nominal_GBps", chip.BandwidthGBps)
	} else {
		slog.Debug("metal device", "profile", p.String(), "chip", "not in manifests.Chips")
	}
	d.MapWeights(bd)
	t, err := gpu.Load(ctx, d, bd)
	if err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return t, nil
}

// ReadBandwidthGBs measures a streaming-copy floor (gpu.Device): lithos_copy of 256 MiB into
// another 256 MiB buffer, the best of 5 timed runs after one warm-up, as (bytes read + bytes
// written) / wall time in GB/s (GB = 1e9). On unified memory reads and writes share one bus, so
// this is the bus's copy rate, not a pure read rate (docs/metal.md §6 step 6). Compile-checked
// only.
func (d *Device) ReadBandwidthGBs() (float64, error) {
	const n = 256 << 20
	src, err := d.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer src.Free()
	dst, err := d.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer dst.Free()
	ctl, err := d.Upload(make([]byte, 64))
	if err != nil {
		return 0, err
	}
	defer ctl.Free()
	p := kernels.CopyParams{DoneWord: kernels.NoWord, Rows: 1, RowsWord: kernels.NoWord, N: n / 4}
	rec, err := d.Upload(kernels.Record(p))
	if err != nil {
		return 0, err
	}
	defer rec.Free()
	q, err := d.NewQueue()
	if err != nil {
		return 0, err
	}
	defer q.Close()
	best := time.Duration(0)
	for i := 0; i < 6; i++ {
		start := time.Now()
		if err := q.Launch("lithos_copy", p.Grid(), ctl.Ptr, rec.Ptr, src.Ptr, dst.Ptr); err != nil {
			return 0, err
		}
		if err := q.Wait(0); err != nil {
			return 0, err
		}
		if el := time.Since(start); i > 0 && (best == 0 || el < best) {
			best = el
		}
	}
	if best <= 0 {
		return 0, fmt.Errorf("metal: copy floor: no time measured")
	}
	return 2 * n / best.Seconds() / 1e9, nil
}
