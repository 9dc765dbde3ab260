//go:build linux && amd64

package cuda

import (
	"encoding/binary"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"lithos/convert"
	"lithos/formats"
	"lithos/kernels"
	"lithos/pack"
	"lithos/pack/blm"
	"lithos/pack/packtest"
	"lithos/runtime/backend"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
)

// The device check as benchmarks (run once each: -test.benchtime 1x; tools/cuda_check.sh).
// Each reports the measured rate; these rates are the floors the model kernels are compared
// with (docs/performance.md).

// BenchmarkReadBandwidth: the streaming read kernel over 8 GiB (130× the H200's L2), median of
// 20 event-timed runs, every run's sum checked.
func BenchmarkReadBandwidth(b *testing.B) {
	d := testDevice(b)
	var bw Bandwidth
	var err error
	for range b.N {
		if bw, err = d.ReadBandwidth(8<<30, 20); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(bw.GBps(), "GB/s")
	b.ReportMetric(bw.BestGBps(), "best-GB/s")
	b.ReportMetric(float64(bw.Median.Microseconds()), "us/pass")
	b.Logf("read %d bytes: median %v, best %v: %.0f GB/s (best %.0f)", bw.Bytes, bw.Median, bw.Best, bw.GBps(), bw.BestGBps())
}

// BenchmarkCopyBandwidth: cuMemcpyDtoD of 4 GiB, counting read + write bytes, median of 10.
func BenchmarkCopyBandwidth(b *testing.B) {
	d := testDevice(b)
	var bw Bandwidth
	var err error
	for range b.N {
		if bw, err = d.CopyBandwidth(4<<30, 10); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(bw.GBps(), "GB/s")
	b.Logf("copy %d bytes (read + write): median %v: %.0f GB/s", bw.Bytes, bw.Median, bw.GBps())
}

// BenchmarkUploadStaged: 2 GiB of random host bytes through the pinned staging path.
func BenchmarkUploadStaged(b *testing.B) {
	d := testDevice(b)
	const n = 2 << 30
	src := make([]byte, n)
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(src[i:], r.Uint64())
	}
	dst, err := d.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Free()
	var st UploadStats
	for range b.N {
		if st, err = d.UploadStaged(b.Context(), dst, src, ""); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(st.GBps(), "GB/s")
	b.Logf("upload %d bytes: %v, %.1f GB/s (pinning the staging buffers: %v)", st.Bytes, st.Wall, st.GBps(), st.Setup)
}

// Records is the runtime's arena of parameter records (the benchmarks upload their own).
type Records = gpu.Records

// blmChainMatrix is one matrix of a benchmark chain: random bytes in a BLM geometry.
type blmChainMatrix struct {
	g      blm.Geometry
	w, s   *Buffer
	epi    uint32
	kernel string
}

// BenchmarkBLMPass times chains of the 27B's decode matrices (hidden 5120; MLP gate_up
// [34816, 5120] with the SwiGLU epilogue and down [5120, 17408] in NVFP4; the GDN projections
// qkv [10240, 5120], z [6144, 5120] and out [5120, 6144] in FP8 and, for comparison, BF16), as
// many layers as make ≥ 2 GB, each chain captured once as a CUDA graph and replayed; median
// of 10 event-timed replays, at 1 and 8 activation rows. It reports the packed bytes per
// second and that rate over the streaming read bandwidth measured in the same run (the floor:
// a pass cannot read its bytes faster).
func BenchmarkBLMPass(b *testing.B) {
	d, ks, floor := benchDevice(b)
	chk, s := benchStream(b, d)
	type shape struct {
		f    formats.Format
		n, k int64
		epi  uint32
	}
	chains := []struct {
		name   string
		shapes []shape
	}{
		{"nvfp4-mlp", []shape{{formats.NVFP4, 34816, 5120, kernels.EpiSwiGLU}, {formats.NVFP4, 5120, 17408, kernels.EpiStore}}},
		{"fp8-gdn", []shape{{formats.FP8, 10240, 5120, kernels.EpiStore}, {formats.FP8, 6144, 5120, kernels.EpiStore}, {formats.FP8, 5120, 6144, kernels.EpiStore}}},
		{"bf16-gdn", []shape{{formats.BF16, 10240, 5120, kernels.EpiStore}, {formats.BF16, 6144, 5120, kernels.EpiStore}, {formats.BF16, 5120, 6144, kernels.EpiStore}}},
	}
	ctl, err := d.Alloc(256)
	if err != nil {
		b.Fatal(err)
	}
	defer ctl.Free()
	if err := s.Fill32(ctl, 0, 64, 0); err != nil {
		b.Fatal(err)
	}
	x, err := d.Alloc(8 * 17408 * 4)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Free()
	y, err := d.Alloc(8 * 34816 * 4)
	if err != nil {
		b.Fatal(err)
	}
	defer y.Free()
	if err := chk.fill.Launch(s, D1(1024), D1(256), 0, x, uint64(8*17408), uint64(99)); err != nil {
		b.Fatal(err)
	}
	// x as float32 bit patterns of random words may be NaN/huge; make them ±[1, 2) floats.
	benchX(b, d, x, 8*17408)
	for _, ch := range chains {
		var per int64
		for _, sh := range ch.shapes {
			g, err := blm.NewGeometry(blm.Spec{Format: sh.f, N: sh.n, K: sh.k})
			if err != nil {
				b.Fatal(err)
			}
			per += g.TotalBytes + 4*g.Blocks*int64(g.Rows)
		}
		layers := int((2e9 + per - 1) / per)
		var mats []blmChainMatrix
		var total int64
		for l := 0; l < layers; l++ {
			for _, sh := range ch.shapes {
				g, _ := blm.NewGeometry(blm.Spec{Format: sh.f, N: sh.n, K: sh.k})
				m := blmChainMatrix{g: g, epi: sh.epi}
				if m.w, err = d.Alloc(g.TotalBytes); err != nil {
					b.Fatal(err)
				}
				defer m.w.Free()
				rowsTab := g.Blocks * int64(g.Rows)
				if m.s, err = d.Alloc(4 * rowsTab); err != nil {
					b.Fatal(err)
				}
				defer m.s.Free()
				if err := chk.fill.Launch(s, D1(d.Info.SMs*4), D1(512), 0, m.w, uint64(g.TotalBytes/4), uint64(l*7+len(mats))); err != nil {
					b.Fatal(err)
				}
				// Block scales of random bytes would include E4M3 NaN codes; the timing does
				// not depend on values, but keep the row scales finite.
				if err := s.Fill32(m.s, 0, rowsTab, 0x3c000000); err != nil {
					b.Fatal(err)
				}
				total += g.TotalBytes + 4*rowsTab
				mats = append(mats, m)
			}
		}
		if err := s.Wait(0); err != nil {
			b.Fatal(err)
		}
		for _, rows := range []int{1, 8} {
			var recs Records
			offs := make([]int64, len(mats))
			names := make([]string, len(mats))
			grids := make([][3]uint32, len(mats))
			for i, m := range mats {
				p, err := kernels.NewBLMParams(m.g, rows, m.epi)
				if err != nil {
					b.Fatal(err)
				}
				if names[i], err = kernels.BLMKernel(m.g.Format, rows); err != nil {
					b.Fatal(err)
				}
				offs[i], grids[i] = recs.Add(p), p.Grid()
			}
			if err := recs.Upload(d); err != nil {
				b.Fatal(err)
			}
			g, err := s.Capture(func() error {
				for i, m := range mats {
					if err := ks.Launch(s, names[i], grids[i], ctl.Ptr, recs.At(offs[i]), m.w.Ptr, m.s.Ptr, x.Ptr, y.Ptr); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			times := timeLaunches(b, d, s, 10, func() error { return g.Launch(s) })
			bw := newBandwidth(total, times)
			b.ReportMetric(bw.GBps(), ch.name+"-r"+strconv.Itoa(rows)+"-GB/s")
			b.ReportMetric(bw.GBps()/floor.GBps(), ch.name+"-r"+strconv.Itoa(rows)+"-xfloor")
			b.Logf("%s × %d rows: %d matrices, %.2f GB, median %v (best %v): %.0f GB/s = %.3f × read floor",
				ch.name, rows, len(mats), float64(total)/1e9, bw.Median, bw.Best, bw.GBps(), bw.GBps()/floor.GBps())
			g.Close()
			recs.Free()
		}
	}
}

// BenchmarkBundleDecode: greedy decode of the bundle named by $LITHOS_CUDA_BUNDLE, or of a
// 27B slice of $LITHOS_CUDA_SLICE_LAYERS layers made here (makeSlice; skipped without either):
// the
// weights upload, the prefill of 64 tokens (chunks of 8 rows), and the decode step — 64 steps
// queued in one Decode call (one graph replay each, one wait), and Decode(1) per call as
// runtime/generate drives it — against the bytes a step reads (every packed matrix once) and
// the read bandwidth measured in the same run.
func BenchmarkBundleDecode(b *testing.B) {
	dir := os.Getenv("LITHOS_CUDA_BUNDLE")
	if n, _ := strconv.Atoi(os.Getenv("LITHOS_CUDA_SLICE_LAYERS")); dir == "" && n > 0 {
		dir = makeSlice(b, n)
	}
	if dir == "" {
		b.Skip("neither LITHOS_CUDA_BUNDLE nor LITHOS_CUDA_SLICE_LAYERS is set")
	}
	d, ks, floor := benchDevice(b)
	bd, err := bundle.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer bd.Close()
	tg, err := gpu.LoadTarget(b.Context(), Runtime(d, ks), bd)
	if err != nil {
		b.Fatal(err)
	}
	defer tg.Close()
	var step int64
	for _, name := range tg.MatrixNames() {
		m, _ := tg.Matrix(name)
		step += m.Geometry.TotalBytes + 4*m.Geometry.Blocks*int64(m.Geometry.Rows)
	}
	b.Logf("bundle %s: %d layers, weights %.2f GB uploaded in %v (%.1f GB/s), %.2f GB of matrices per step; read floor %.0f GB/s",
		dir, len(tg.Cfg.Layers), float64(tg.Upload.Bytes)/1e9, tg.Upload.Wall, tg.Upload.GBps(), float64(step)/1e9, floor.GBps())
	s, err := tg.NewDeviceSession(backend.SessionOptions{Capacity: 4096, Sampling: greedySampling}, true)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	prompt := make([]int32, 64)
	for i := range prompt {
		prompt[i] = int32(i * 37 % tg.Cfg.Vocab)
	}
	t0 := time.Now()
	if err := s.Prefill(b.Context(), prompt); err != nil {
		b.Fatal(err)
	}
	pre := time.Since(t0)
	drain(s)
	if err := s.Decode(b.Context(), 4); err != nil { // warm: capture the decode graph
		b.Fatal(err)
	}
	drain(s)
	const steps = 64
	t0 = time.Now()
	if err := s.Decode(b.Context(), steps); err != nil {
		b.Fatal(err)
	}
	batched := time.Since(t0) / steps
	if n := len(drain(s)); n != steps {
		b.Fatalf("%d tokens from %d steps (state %+v)", n, steps, *s.State())
	}
	t0 = time.Now()
	if err := s.Prefill(b.Context(), prompt); err != nil { // the chunk programs are captured now
		b.Fatal(err)
	}
	warmPre := time.Since(t0)
	drain(s)
	t0 = time.Now()
	for range 16 {
		if err := s.Decode(b.Context(), 1); err != nil {
			b.Fatal(err)
		}
		drain(s)
	}
	single := time.Since(t0) / 16
	floorStep := time.Duration(float64(step) / (floor.GBps() * 1e9) * 1e9)
	b.ReportMetric(float64(batched.Microseconds()), "us/step")
	b.ReportMetric(float64(single.Microseconds()), "us/step-synced")
	b.ReportMetric(floorStep.Seconds()/batched.Seconds(), "xfloor")
	b.ReportMetric(float64(len(prompt))/warmPre.Seconds(), "prefill-tok/s")
	b.Logf("decode step: %v queued (%.0f GB/s of matrices, %.3f of the floor %v), %v with a wait per step; prefill of %d tokens in chunks of %d: %v (%.0f tok/s; %v the first time, graph captures included)",
		batched, float64(step)/batched.Seconds()/1e9, floorStep.Seconds()/batched.Seconds(), floorStep, single, len(prompt), gpu.MaxStepRows, warmPre, float64(len(prompt))/warmPre.Seconds(), pre)
}

// makeSlice writes the first layers of the 27B-shaped checkpoint (the embedded spec
// qwen3.8-27b-nvfp4: real widths and formats, random values; what tools/mkckpt writes) and
// packs it with lithos/pack into a bundle under a temporary directory, removed at cleanup.
func makeSlice(b *testing.B, layers int) string {
	b.Helper()
	tmp, err := os.MkdirTemp("", "lithos-27b-slice-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(tmp) })
	t0 := time.Now()
	spec, err := convert.LoadSynthSpec("qwen3.8-27b-nvfp4")
	if err != nil {
		b.Fatal(err)
	}
	if spec, err = packtest.ScaleSpec(spec, layers, false, false, 2e9); err != nil {
		b.Fatal(err)
	}
	ckpt := filepath.Join(tmp, "ckpt")
	if _, err := packtest.WriteCheckpoint(b.Context(), spec, ckpt, 1); err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(tmp, "slice.lithos")
	if _, err := pack.Build(b.Context(), pack.Options{Target: ckpt, Out: out, Workers: runtime.GOMAXPROCS(0), ToolVersion: "bench",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		b.Fatal(err)
	}
	os.RemoveAll(ckpt)
	b.Logf("27B slice of %d layers written and packed in %v", layers, time.Since(t0))
	return out
}

// BenchmarkBLMOne launches each BLM kernel variant the 27B's MLP uses once, on gate_up
// [34816, 5120] NVFP4 with the SwiGLU epilogue at 1 and 8 rows (random bytes): a small target
// for a profiler (tools/cuda_check.sh runs Nsight Compute on it with PROFILE=1).
func BenchmarkBLMOne(b *testing.B) {
	d := testDevice(b)
	ks, err := d.LoadKernels()
	if err != nil {
		b.Fatal(err)
	}
	defer ks.Unload()
	chk, s := benchStream(b, d)
	g, err := blm.NewGeometry(blm.Spec{Format: formats.NVFP4, N: 34816, K: 5120})
	if err != nil {
		b.Fatal(err)
	}
	w, err := d.Alloc(g.TotalBytes)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Free()
	rowsTab := g.Blocks * int64(g.Rows)
	sc, err := d.Alloc(4 * rowsTab)
	if err != nil {
		b.Fatal(err)
	}
	defer sc.Free()
	x, err := d.Alloc(8 * 5120 * 4)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Free()
	y, err := d.Alloc(8 * 34816 * 4)
	if err != nil {
		b.Fatal(err)
	}
	defer y.Free()
	ctl, err := d.Alloc(256)
	if err != nil {
		b.Fatal(err)
	}
	defer ctl.Free()
	if err := chk.fill.Launch(s, D1(d.Info.SMs*4), D1(512), 0, w, uint64(g.TotalBytes/4), uint64(3)); err != nil {
		b.Fatal(err)
	}
	for _, f := range []struct {
		b     *Buffer
		words int64
		v     uint32
	}{{sc, rowsTab, 0x3c000000}, {x, 8 * 5120, 0x3f800000}, {ctl, 64, 0}} {
		if err := s.Fill32(f.b, 0, f.words, f.v); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		for _, rows := range []int{1, 8} {
			p, err := kernels.NewBLMParams(g, rows, kernels.EpiSwiGLU)
			if err != nil {
				b.Fatal(err)
			}
			name, _ := kernels.BLMKernel(g.Format, rows)
			var recs Records
			off := recs.Add(p)
			if err := recs.Upload(d); err != nil {
				b.Fatal(err)
			}
			for range 2 {
				if err := ks.Launch(s, name, p.Grid(), ctl.Ptr, recs.At(off), w.Ptr, sc.Ptr, x.Ptr, y.Ptr); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Wait(0); err != nil {
				b.Fatal(err)
			}
			recs.Free()
		}
	}
}

// benchIO allocates a benchmark's step state (64 zero words), x and y (xFloats and yFloats
// float32 values, contents undefined), freed when b ends.
func benchIO(b *testing.B, d *Device, s *Stream, xFloats, yFloats int64) (ctl, x, y *Buffer) {
	b.Helper()
	var err error
	for _, a := range []struct {
		dst  **Buffer
		size int64
	}{{&ctl, 256}, {&x, 4 * xFloats}, {&y, 4 * yFloats}} {
		if *a.dst, err = d.Alloc(a.size); err != nil {
			b.Fatal(err)
		}
		buf := *a.dst
		b.Cleanup(func() { buf.Free() })
	}
	if err := s.Fill32(ctl, 0, 64, 0); err != nil {
		b.Fatal(err)
	}
	return ctl, x, y
}

// benchMat is one copy of a benchmark's matrix on the device: its packed bytes w and its
// row-scale table s.
type benchMat struct{ w, s *Buffer }

// benchMatrices allocates as many copies of a matrix of packed bytes plus a row-scale table of
// rowsTab floats as make ≥ 1 GB (the L2 holds 60 MB), w filled with random words by chk's fill
// kernel (seed copy + 1), s with 0x3c000000 (2⁻⁷), and waits for the fills; per is one copy's
// bytes, free releases them all.
func benchMatrices(b *testing.B, d *Device, s *Stream, chk *checkKernels, packed, rowsTab int64) (mats []benchMat, per int64, free func()) {
	b.Helper()
	per = packed + 4*rowsTab
	free = func() {
		for _, m := range mats {
			m.w.Free()
			m.s.Free()
		}
	}
	for c := int64(0); c < (1e9+per-1)/per; c++ {
		var m benchMat
		var err error
		if m.w, err = d.Alloc(packed); err != nil {
			b.Fatal(err)
		}
		if m.s, err = d.Alloc(4 * rowsTab); err != nil {
			b.Fatal(err)
		}
		mats = append(mats, m)
		if err := chk.fill.Launch(s, D1(d.Info.SMs*4), D1(512), 0, m.w, uint64(packed/4), uint64(c+1)); err != nil {
			b.Fatal(err)
		}
		if err := s.Fill32(m.s, 0, rowsTab, 0x3c000000); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Wait(0); err != nil {
		b.Fatal(err)
	}
	return mats, per, free
}

// timeReplays captures the launches launch queues on s into a graph, replays it once to warm
// up and then 7 times between events, and returns the 7 replay times.
func timeReplays(b *testing.B, d *Device, s *Stream, launch func() error) []time.Duration {
	b.Helper()
	gr, err := s.Capture(launch)
	if err != nil {
		b.Fatal(err)
	}
	defer gr.Close()
	return timeLaunches(b, d, s, 7, func() error { return gr.Launch(s) })
}

// timeLaunches runs launch once to warm up, then n times on s, each between two events, waits,
// and returns the n event-timed durations.
func timeLaunches(b *testing.B, d *Device, s *Stream, n int, launch func() error) []time.Duration {
	b.Helper()
	evs := make([]*Event, n+1)
	for i := range evs {
		var err error
		if evs[i], err = d.NewEvent(); err != nil {
			b.Fatal(err)
		}
		defer evs[i].Close()
	}
	if err := launch(); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		evs[i].Record(s)
		if err := launch(); err != nil {
			b.Fatal(err)
		}
	}
	evs[n].Record(s)
	if err := s.Wait(0); err != nil {
		b.Fatal(err)
	}
	times := make([]time.Duration, n)
	for i := range times {
		var err error
		if times[i], err = evs[i+1].Since(evs[i]); err != nil {
			b.Fatal(err)
		}
	}
	return times
}

// benchDevice is the setup every GPU benchmark shares: the test device, its streaming read
// bandwidth measured in the same run (4 GiB, median of 10 reads: the floor the benchmarks
// report against, logged) and the kernel module (unloaded when b ends).
func benchDevice(b *testing.B) (*Device, *Kernels, Bandwidth) {
	d := testDevice(b)
	floor, err := d.ReadBandwidth(4<<30, 10)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("read bandwidth floor: %.0f GB/s", floor.GBps())
	ks, err := d.LoadKernels()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ks.Unload() })
	return d, ks, floor
}

// benchStream loads the device-check kernels (the weights' random fill) and creates a stream,
// both released when b ends.
func benchStream(b *testing.B, d *Device) (*checkKernels, *Stream) {
	b.Helper()
	chk, err := d.loadCheck()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { chk.mod.Unload() })
	s, err := d.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return chk, s
}

// benchX writes floats random ±[1, 2) activations (a fixed seed: every matrix benchmark times
// the same x) to x.
func benchX(b *testing.B, d *Device, x *Buffer, floats int) {
	b.Helper()
	xs := make([]float32, floats)
	r := rand.New(rand.NewPCG(9, 9))
	for i := range xs {
		xs[i] = float32(1+r.Float64()) * float32(1-2*r.IntN(2))
	}
	if err := d.Write(x, 0, Float32Bytes(xs)); err != nil {
		b.Fatal(err)
	}
}

// benchShape is one of the 27B's matrices a benchmark times: [n, k] in format f, with epilogue epi.
type benchShape struct {
	name string
	f    formats.Format
	n, k int64
	epi  uint32
}

// benchFilter narrows a shape benchmark by LITHOS_CUDA_BENCH_SHAPES (a regexp on the shapes'
// names), LITHOS_CUDA_BENCH_ROWS (comma-separated row counts out of rows) and
// LITHOS_CUDA_BENCH_DEFAULT=1 (the default split only); a bad value fails the benchmark.
func benchFilter(b *testing.B, shapes []benchShape, rows []int) ([]benchShape, []int, bool) {
	b.Helper()
	if v := os.Getenv("LITHOS_CUDA_BENCH_SHAPES"); v != "" {
		re, err := regexp.Compile(v)
		if err != nil {
			b.Fatalf("LITHOS_CUDA_BENCH_SHAPES: %v", err)
		}
		shapes = slices.DeleteFunc(slices.Clone(shapes), func(s benchShape) bool { return !re.MatchString(s.name) })
	}
	if v := os.Getenv("LITHOS_CUDA_BENCH_ROWS"); v != "" {
		var sel []int
		for _, f := range strings.Split(v, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || !slices.Contains(rows, r) {
				b.Fatalf("LITHOS_CUDA_BENCH_ROWS: %q is not one of %v", f, rows)
			}
			sel = append(sel, r)
		}
		rows = sel
	}
	if len(shapes) == 0 {
		b.Fatalf("LITHOS_CUDA_BENCH_SHAPES %q matches no shape", os.Getenv("LITHOS_CUDA_BENCH_SHAPES"))
	}
	return shapes, rows, os.Getenv("LITHOS_CUDA_BENCH_DEFAULT") == "1"
}
