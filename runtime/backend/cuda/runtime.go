//go:build linux && amd64

package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"lithos/formats"
	"lithos/kernels"
	"lithos/runtime/backend/gpu"

	"golang.org/x/sys/unix"
)

// Runtime returns the gpu.Device over an open GPU and its loaded kernel module: what the
// device-neutral runtime (lithos/runtime/backend/gpu: Target, Session, the DSpark head, the
// programs) runs on. Queues are streams, Queue.Record is stream capture into a CUDA graph,
// kernels are launched through ks (Kernels.Launch). Its Close unloads ks and closes d.
func Runtime(d *Device, ks *Kernels) gpu.Device { return &runtimeDevice{d: d, ks: ks} }

// runtimeDevice is gpu.Device over the driver layer.
type runtimeDevice struct {
	d  *Device
	ks *Kernels
}

func (r *runtimeDevice) Name() string                           { return "CUDA" }
func (r *runtimeDevice) Fit(what string, need int64) error      { return r.d.Fit(what, need) }
func (r *runtimeDevice) Alloc(size int64) (*gpu.Buffer, error)  { return r.d.Alloc(size) }
func (r *runtimeDevice) Upload(src []byte) (*gpu.Buffer, error) { return r.d.Upload(src) }
func (r *runtimeDevice) HostAlloc(size int64, mapped bool) (*gpu.HostBuffer, error) {
	return r.d.HostAlloc(size, mapped, false)
}

// String describes the GPU and the compiler of its kernels: Info.String (name, compute
// capability, memory, SMs, L2, driver), then ", NVRTC <major>.<minor>" (NVRTCVersion; "NVRTC
// unknown" when it cannot be read). runtime/generate keys its first-use self-check verdicts by
// it, so a driver or NVRTC update checks again.
func (r *runtimeDevice) String() string { return describe(r.d.Info) }

// describe is runtimeDevice.String of a device with info (UsableDevice gives the same). The
// A/B switches that change which kernels run (LITHOS_CUDA_FRAGMENT=0, LITHOS_CUDA_CLUSTERS=0,
// LITHOS_CUDA_MMA=0, LITHOS_CUDA_OVERLAP=0, LITHOS_CUDA_PUSH=0, LITHOS_CUDA_TILES=1,
// LITHOS_CUDA_CLUSTER_FIRST, LITHOS_CUDA_DEFINES) are part of it, so that a self-check verdict
// is not reused across them.
func describe(info Info) string {
	nv := "unknown"
	if major, minor, err := NVRTCVersion(); err == nil {
		nv = fmt.Sprintf("%d.%d", major, minor)
	}
	s := info.String() + ", NVRTC " + nv
	if os.Getenv("LITHOS_CUDA_FRAGMENT") == "0" {
		s += ", fragment-major copy off"
	}
	if os.Getenv("LITHOS_CUDA_CLUSTERS") == "0" {
		s += ", clusters off"
	}
	if !mmaLayoutOn() {
		s += ", MMA layout off"
	}
	if !overlapOn() {
		s += ", overlapped launches off"
	}
	if !pushOn() {
		s += ", pushed partial sums off"
	}
	if !twoTilesOn() {
		s += ", two-tile products off"
	}
	if c := clusterFirst(); c != 0 {
		s += fmt.Sprintf(", clusters of %d first", c)
	}
	if d := strings.Join(strings.Fields(os.Getenv(DefinesEnv)), " "); d != "" {
		s += ", kernels with " + d
	}
	return s
}

// clusterFirst is the cluster size the MMA-layout work split tries first for every format
// (kernels.BLMXDevice.ClusterFirst): $LITHOS_CUDA_CLUSTER_FIRST when it is 2, 4 or 8 (A/B
// runs), else 0 (each format's order, kernels.NewBLMXParams).
func clusterFirst() int {
	switch v := os.Getenv("LITHOS_CUDA_CLUSTER_FIRST"); v {
	case "2", "4", "8":
		return int(v[0] - '0')
	}
	return 0
}

// pushOn reports whether the MMA-layout products' clusters push their partial sums into the
// finishing rank's threadgroup memory (kernels.BLMXParams.Push, docs/performance.md §3.3o):
// yes unless LITHOS_CUDA_PUSH=0 (A/B runs).
func pushOn() bool { return os.Getenv("LITHOS_CUDA_PUSH") != "0" }

// twoTilesOn reports whether the MMA-layout products of 9–16 rows (prefill chunks) run two
// tiles of 8 rows per threadgroup, the weights loaded and decoded once for both
// (kernels.BLMXParams.Tiles, lithos_blmx_*_t2): yes unless LITHOS_CUDA_TILES=1 (A/B runs).
func twoTilesOn() bool { return os.Getenv("LITHOS_CUDA_TILES") != "1" }

// mmaLayoutOn reports whether the target's NVFP4 and FP8 matrices are rewritten into the MMA
// layout at load and multiplied by lithos_blmx_* (runtimeDevice.MMALayout): yes unless
// LITHOS_CUDA_MMA=0 (A/B runs; measured on the H200, docs/performance.md §3.3j: an 8-row verify
// pass of the 27B-shaped bundle 15.9 → 12.9 ms).
func mmaLayoutOn() bool { return os.Getenv("LITHOS_CUDA_MMA") != "0" }

// UploadStaged asks the kernel to read the mapping ahead (it is read once, front to back),
// then stages it through pinned memory (Device.UploadStaged).
func (r *runtimeDevice) UploadStaged(ctx context.Context, dst *gpu.Buffer, src []byte, desc string) (gpu.UploadStats, error) {
	if len(src) > 0 {
		unix.Madvise(src, unix.MADV_SEQUENTIAL)
		unix.Madvise(src, unix.MADV_WILLNEED)
	}
	return r.d.UploadStaged(ctx, dst, src, desc)
}

func (r *runtimeDevice) NewQueue() (gpu.Queue, error) {
	s, err := r.d.NewStream()
	if err != nil {
		return nil, err
	}
	q := &queue{s: s, ks: r.ks}
	if r.d.LaunchesClusters() && os.Getenv("LITHOS_CUDA_CLUSTERS") != "0" {
		q.maxCluster = kernels.BLMMaxClusters
	}
	return q, nil
}

// FragmentLayout implements gpu.FragmentLayouter: the kernels read the fragment-major copy of
// the target's and the draft head's matrices (their tensor-core path), except on the driver's CPU emulator unless it
// runs that path (LITHOS_CUDA_EMULATE_MMA=1), or with LITHOS_CUDA_FRAGMENT=0 (A/B runs).
func (r *runtimeDevice) FragmentLayout() bool {
	return (emu == nil || emu.tensorCore()) && os.Getenv("LITHOS_CUDA_FRAGMENT") != "0"
}

// MMALayout implements gpu.MMALayouter: unless LITHOS_CUDA_MMA=0, on a GPU that gives a block the
// kernels' threadgroup memory (kernels.BLMXShared and kernels.BLMXStatic: the H100/H200; on the
// emulator only in its tensor-core build), the device for the MMA-layout work split: its
// multiprocessors, clusters of up to
// kernels.BLMMaxClusters when its queues launch them (else 1), and per cluster size the
// clusters that run at once (cuOccupancyMaxActiveClusters; a failed query leaves it to the
// multiprocessor count).
func (r *runtimeDevice) MMALayout() (kernels.BLMXDevice, bool) {
	if !mmaLayoutOn() || (emu != nil && !emu.tensorCore()) || r.d.Info.SharedOptin < kernels.BLMXShared+kernels.BLMXStatic {
		return kernels.BLMXDevice{}, false
	}
	return mmaDevice(r.d, r.ks, r.d.LaunchesClusters() && os.Getenv("LITHOS_CUDA_CLUSTERS") != "0"), true
}

// mmaDevice describes d for the MMA-layout work split: its multiprocessors and, with clusters,
// clusters of up to kernels.BLMMaxClusters with the count of each size that runs at once
// (ks.MaxActiveClusters of the one-tile NVFP4 kernel: every MMA-layout kernel takes the same
// dynamic threadgroup memory, which decides it — the two-tile kernels' 1,312 more static bytes
// still leave one threadgroup per multiprocessor; 0 from the driver is "none fits", a query it
// cannot answer leaves the size to the multiprocessor count), NoPush with LITHOS_CUDA_PUSH=0, OneTile with
// LITHOS_CUDA_TILES=1 and ClusterFirst from LITHOS_CUDA_CLUSTER_FIRST (clusterFirst).
func mmaDevice(d *Device, ks *Kernels, clusters bool) kernels.BLMXDevice {
	dev := kernels.BLMXDevice{SMs: d.Info.SMs, MaxCluster: 1, NoPush: !pushOn(), OneTile: !twoTilesOn(), ClusterFirst: clusterFirst()}
	if !clusters {
		return dev
	}
	dev.MaxCluster = kernels.BLMMaxClusters
	name, _ := kernels.BLMXKernel(formats.NVFP4)
	for c := 2; c <= kernels.BLMMaxClusters; c *= 2 {
		if n, ok, err := ks.MaxActiveClusters(name, c); err == nil && ok {
			dev.Active[c] = n
			if n == 0 {
				dev.Active[c] = -1
			}
		}
	}
	return dev
}

// ReadBandwidthGBs is the median of 5 reads of 4 GiB (many times the L2) with the device-check
// kernel (Device.ReadBandwidth); it allocates 4 GiB of device memory for the run.
func (r *runtimeDevice) ReadBandwidthGBs() (float64, error) {
	b, err := r.d.ReadBandwidth(4<<30, 5)
	if err != nil {
		return 0, err
	}
	return b.GBps(), nil
}

func (r *runtimeDevice) Close() error { return errors.Join(r.ks.Unload(), r.d.Close()) }

// queue is gpu.Queue over a stream, and gpu.ClusterQueue: on sm_90 and newer (the device's
// CLUSTER_LAUNCH attribute, the driver's cuLaunchKernelEx; in the emulator only in its
// tensor-core build, whose fiber runtime runs clusters) it
// launches clusters of up to kernels.BLMMaxClusters threadgroups, so the BLM products split K
// across a cluster (docs/performance.md §3.3e). LITHOS_CUDA_CLUSTERS=0 turns that off (A/B runs).
type queue struct {
	s          *Stream
	ks         *Kernels
	maxCluster int
}

func (q *queue) MaxCluster() int { return q.maxCluster }
func (q *queue) LaunchCluster(kernel string, grid, cluster [3]uint32, ctl, prm uint64, bufs ...uint64) error {
	if q.maxCluster == 0 {
		return fmt.Errorf("cuda: kernel %s: this device or driver does not launch thread-block clusters", kernel)
	}
	if n := int64(cluster[0]) * int64(cluster[1]) * int64(cluster[2]); n > int64(q.maxCluster) {
		return fmt.Errorf("cuda: kernel %s: a cluster of %v threadgroups, more than the %d this queue launches", kernel, cluster, q.maxCluster)
	}
	return q.ks.LaunchCluster(q.s, kernel, grid, cluster, ctl, prm, bufs...)
}

func (q *queue) Launch(kernel string, grid [3]uint32, ctl, prm uint64, bufs ...uint64) error {
	return q.ks.Launch(q.s, kernel, grid, ctl, prm, bufs...)
}
func (q *queue) CopyHtoD(dst *gpu.Buffer, dstOff int64, src *gpu.HostBuffer, srcOff, n int64) error {
	return q.s.CopyHtoD(dst, dstOff, src, srcOff, n)
}
func (q *queue) CopyDtoH(dst *gpu.HostBuffer, dstOff int64, src *gpu.Buffer, srcOff, n int64) error {
	return q.s.CopyDtoH(dst, dstOff, src, srcOff, n)
}
func (q *queue) Fill32(dst *gpu.Buffer, off, words int64, value uint32) error {
	return q.s.Fill32(dst, off, words, value)
}
func (q *queue) Wait(timeout time.Duration) error { return q.s.Wait(timeout) }
func (q *queue) Close() error                     { return q.s.Close() }

// Record captures the launches enqueue queues on the stream into a CUDA graph (Stream.Capture).
func (q *queue) Record(enqueue func() error) (gpu.Replay, error) {
	g, err := q.s.Capture(enqueue)
	if err != nil {
		return nil, err
	}
	return &graphReplay{g}, nil
}

// graphReplay is gpu.Replay over an instantiated graph.
type graphReplay struct{ g *Graph }

func (r *graphReplay) Launch(q gpu.Queue) error {
	cq, ok := q.(*queue)
	if !ok {
		return errors.New("cuda: replay of a CUDA graph on a queue of another device")
	}
	return r.g.Launch(cq.s)
}
func (r *graphReplay) Close() error { return r.g.Close() }
