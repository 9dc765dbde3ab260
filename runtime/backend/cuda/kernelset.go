//go:build linux && amd64

package cuda

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"lithos/kernels"
)

// Kernels is lithos's kernel module — kernels.Source(kernels.CUDA), every op of
// ARCHITECTURE.md §3.4 generated from the shared templates — compiled for the device and
// loaded, with each entry point resolved.
type Kernels struct {
	d      *Device
	Module *Module
	fns    map[string]kfn
	// Cached tells whether the module came from the disk cache; Compile is the time to
	// compile (or read) and load it.
	Cached  bool
	Compile time.Duration
	// Overlap launches each kernel that follows another kernel on its stream with programmatic
	// dependent launch (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): its threadgroups
	// may start, and the MMA-layout kernels load their first weights, while the one before it
	// finishes; every kernel of lithos/kernels waits for its predecessor in its entry (prelude
	// GRID_WAIT). LoadKernels sets it where Device.LaunchesOverlapped.
	Overlap    bool
	overlapped int    // launches made with the attribute (tests)
	timeline   string // $LITHOS_CUDA_TIMELINE: where Unload writes the timeline (timeline.go)
}

type kfn struct {
	f *Function
	k kernels.Kernel
}

// DefinesEnv names the A/B switch of the kernels' compile-time constants: space-separated
// NAME=VALUE pairs, NAME one of kernels.Overridable and VALUE letters, digits and '.', that
// LoadKernels passes to NVRTC as -DNAME=VALUE, e.g. LITHOS_CUDA_DEFINES=BLMX_SX=16 for the
// MMA-layout products' staging step. For measurements (docs/performance.md), not for use:
// describe puts it into the device string, so a self-check verdict is not reused across it,
// and the module cache keys it with the options.
const DefinesEnv = "LITHOS_CUDA_DEFINES"

var defineRE = regexp.MustCompile(`^([A-Z_][A-Z0-9_]*)=[A-Za-z0-9.]+$`)

// defineOptions returns NVRTC's -D options for DefinesEnv's value v. Errors name a pair that
// is not NAME=VALUE or whose NAME is not in kernels.Overridable (a constant the source sets
// unconditionally would be redefined with only a warning, and one the host sizes memory for
// would break the launches), listing the names that are.
func defineOptions(v string) ([]string, error) {
	var opts []string
	for _, d := range strings.Fields(v) {
		m := defineRE.FindStringSubmatch(d)
		if m == nil {
			return nil, fmt.Errorf("cuda: %s: %q is not NAME=VALUE (NAME upper-case letters, digits and _, VALUE letters, digits and .)", DefinesEnv, d)
		}
		if !slices.Contains(kernels.Overridable, m[1]) {
			return nil, fmt.Errorf("cuda: %s: %q: %s is not a constant the kernels let a run override (have %s)", DefinesEnv, d, m[1], strings.Join(kernels.Overridable, ", "))
		}
		opts = append(opts, "-D"+d)
	}
	return opts, nil
}

// moduleOptions returns the NVRTC options LoadKernels adds for the environment: DefinesEnv's
// -D options, then -DLITHOS_TIMELINE=1 when TimelineEnv is set. Errors: DefinesEnv's.
func moduleOptions() ([]string, error) {
	opts, err := defineOptions(os.Getenv(DefinesEnv))
	if err != nil {
		return nil, err
	}
	if os.Getenv(TimelineEnv) != "" {
		opts = append(opts, "-DLITHOS_TIMELINE=1")
	}
	return opts, nil
}

// LoadKernels compiles (or reads from the disk cache) and loads the kernel module and
// resolves every kernel of kernels.Kernels(), with moduleOptions's options. Errors: a
// DefinesEnv that defineOptions refuses, a compilation error (with NVRTC's log),
// a kernel missing from the module, a kernel whose threadgroup size exceeds what the loaded
// code allows.
func (d *Device) LoadKernels() (ks *Kernels, err error) {
	start := time.Now()
	var src string
	var list []kernels.Kernel
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("cuda: generate the kernel source: %v", r)
			}
		}()
		src, list = kernels.Source(kernels.CUDA), kernels.Kernels()
	}()
	if err != nil {
		return nil, err
	}
	opts, err := moduleOptions()
	if err != nil {
		return nil, err
	}
	timeline := os.Getenv(TimelineEnv)
	c, err := Compile("lithos_kernels.cu", src, d.Info.Arch(), opts...)
	if err != nil {
		return nil, err
	}
	m, err := d.LoadImage("lithos_kernels.cu", c.Image)
	if err != nil {
		return nil, err
	}
	ks = &Kernels{d: d, Module: m, fns: map[string]kfn{}, Cached: c.Cached, timeline: timeline}
	for _, k := range list {
		f, err := m.Function(k.Name)
		if err != nil {
			m.Unload()
			return nil, err
		}
		if f.MaxThreads < k.Threads {
			m.Unload()
			return nil, fmt.Errorf("cuda: kernel %s: %d threads per block, the loaded code allows %d (%d registers)", k.Name, k.Threads, f.MaxThreads, f.Registers)
		}
		if k.MMAOnly && k.Shared > d.Info.SharedOptin {
			// The MMA-layout kernels' 224 KiB of threadgroup memory is more than this GPU lets
			// a block have (sm_80: 163 KiB, sm_86/89: 99 KiB): left unconfigured and unused
			// (runtimeDevice.MMALayout reports the layout off here).
			ks.fns[k.Name] = kfn{f, k}
			continue
		}
		if k.Shared > 0 {
			// Dynamic shared memory (the BLM kernels' weight ring, the MMA-layout kernels'
			// activations and slots) may take the block past the 48 KiB a launch gets without
			// asking.
			if err := f.SetMaxDynamicShared(k.Shared); err != nil {
				m.Unload()
				return nil, err
			}
		}
		ks.fns[k.Name] = kfn{f, k}
	}
	ks.Overlap = d.LaunchesOverlapped()
	ks.Compile = time.Since(start)
	return ks, nil
}

// Function returns a loaded kernel and its description.
func (ks *Kernels) Function(name string) (*Function, kernels.Kernel, bool) {
	e, ok := ks.fns[name]
	return e.f, e.k, ok
}

// Launch queues kernel name on s over grid (in blocks of the kernel's Threads) with the
// calling convention of lithos/kernels: ctl (the step state words), prm (the parameter
// record), then one device address per buffer of the kernel, in Kernel.Buffers order.
// Errors name the kernel and the rule broken (unknown kernel, wrong buffer count, an empty
// grid, a null address).
func (ks *Kernels) Launch(s *Stream, name string, grid [3]uint32, ctl, prm uint64, bufs ...uint64) error {
	return ks.launch(s, name, grid, [3]uint32{}, ctl, prm, bufs)
}

// MaxActiveClusters returns how many clusters of cluster threadgroups of kernel name run at
// once with its Threads and Shared bytes (Function.MaxActiveClusters; ok false: the driver
// cannot say). Errors: an unknown kernel, the driver's.
func (ks *Kernels) MaxActiveClusters(name string, cluster int) (n int, ok bool, err error) {
	e, found := ks.fns[name]
	if !found {
		return 0, false, fmt.Errorf("cuda: no kernel %s in the module", name)
	}
	return e.f.MaxActiveClusters(D1(e.k.Threads), Dim3{uint32(cluster), 1, 1}, e.k.Shared)
}

// LaunchCluster is Launch in thread-block clusters of cluster threadgroups (Function.LaunchCluster).
func (ks *Kernels) LaunchCluster(s *Stream, name string, grid, cluster [3]uint32, ctl, prm uint64, bufs ...uint64) error {
	if cluster[0] == 0 || cluster[1] == 0 || cluster[2] == 0 {
		return fmt.Errorf("cuda: kernel %s: empty cluster %v", name, cluster)
	}
	return ks.launch(s, name, grid, cluster, ctl, prm, bufs)
}

func (ks *Kernels) launch(s *Stream, name string, grid, cluster [3]uint32, ctl, prm uint64, bufs []uint64) error {
	e, ok := ks.fns[name]
	if !ok {
		return fmt.Errorf("cuda: no kernel %s in the module", name)
	}
	if len(bufs) != len(e.k.Buffers) {
		return fmt.Errorf("cuda: kernel %s takes %d buffers, got %d", name, len(e.k.Buffers), len(bufs))
	}
	if grid[0] == 0 || grid[1] == 0 || grid[2] == 0 {
		return fmt.Errorf("cuda: kernel %s: empty grid %v", name, grid)
	}
	if ctl == 0 || prm == 0 {
		return fmt.Errorf("cuda: kernel %s: null ctl or parameter record", name)
	}
	args := make([]any, 0, 2+len(bufs))
	args = append(args, ctl, prm)
	for i, b := range bufs {
		if b == 0 {
			return fmt.Errorf("cuda: kernel %s: buffer %s is null", name, e.k.Buffers[i].Name)
		}
		args = append(args, b)
	}
	var cl Dim3
	if cluster != ([3]uint32{}) {
		cl = Dim3{cluster[0], cluster[1], cluster[2]}
		if err := clusterCheck(name, Dim3{grid[0], grid[1], grid[2]}, cl); err != nil {
			return err
		}
	}
	// Overlapped only after a lithos kernel (which waits in its entry): a copy, fill or other
	// kernel before it is waited for in full.
	overlap := ks.Overlap && s.follows
	if err := e.f.launch(s, Dim3{grid[0], grid[1], grid[2]}, D1(e.k.Threads), cl, e.k.Shared, overlap, args); err != nil {
		s.follows = false
		return err
	}
	s.follows = true
	if overlap {
		ks.overlapped++
	}
	return nil
}

// Unload unloads the module, first writing its timeline where TimelineEnv asked for one (a
// failure to write it is logged, not returned: it is a diagnostic).
func (ks *Kernels) Unload() error {
	if ks.timeline != "" && ks.Module.h != 0 {
		if err := ks.dumpTimeline(ks.timeline); err != nil {
			slog.Warn("timeline not written", "file", ks.timeline, "err", err)
		} else {
			slog.Info("timeline written", "file", ks.timeline)
		}
	}
	return ks.Module.Unload()
}
