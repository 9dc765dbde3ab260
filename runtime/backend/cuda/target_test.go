//go:build linux && amd64

package cuda

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"

	"lithos/kernels"
	"lithos/pack"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
	"lithos/runtime/model"
)

// The target on the GPU from a real bundle: the golden checkpoint qwen35-a (testdata/goldens,
// transformers' small ModelOpt-mixed Qwen3.5: FP8 GDN/attention projections, NVFP4 MLP and
// head, BF16 small matrices) packed by lithos/pack at test time, uploaded, and its matrices,
// head and MLP run by the kernels against the CPU backend's packed kernels over the same
// mapped bytes.

var (
	goldenTemp  string
	goldenPaths = map[string]string{}
	goldenErrs  = map[string]error{}
)

// goldenBundle packs testdata/goldens/qwen35-a once per test binary.
func goldenBundle(t *testing.T) *bundle.Bundle { return goldenBundleOf(t, "a") }

// goldenBundleOf packs testdata/goldens/qwen35-<name> once per test binary and opens it.
func goldenBundleOf(t *testing.T, name string) *bundle.Bundle {
	t.Helper()
	if goldenPaths[name] == "" && goldenErrs[name] == nil {
		var err error
		if goldenTemp == "" {
			goldenTemp, err = os.MkdirTemp("", "lithos-cuda-golden-")
		}
		if err == nil {
			out := filepath.Join(goldenTemp, "qwen35-"+name+".lithos")
			_, err = pack.Build(context.Background(), pack.Options{Target: filepath.Join("..", "..", "..", "testdata", "goldens", "qwen35-"+name),
				Out: out, Workers: 2, ToolVersion: "test", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			goldenPaths[name] = out
		}
		goldenErrs[name] = err
	}
	if err := goldenErrs[name]; err != nil {
		t.Fatalf("pack the golden bundle %s: %v", name, err)
	}
	b, err := bundle.Open(goldenPaths[name])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func loadGoldenTarget(t *testing.T) (*opEnv, *gpu.Target, *bundle.Bundle) {
	t.Helper()
	return loadGoldenTargetOf(t, "a")
}

func loadGoldenTargetOf(t *testing.T, name string) (*opEnv, *gpu.Target, *bundle.Bundle) {
	t.Helper()
	e := newOpEnv(t, 21)
	b := goldenBundleOf(t, name)
	tg, err := gpu.LoadTarget(t.Context(), Runtime(e.d, e.ks), b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	e.mma = tg.MMA
	return e, tg, b
}

// TestTargetUpload: the device copy of weights.bin is the mapping, byte for byte, except the
// target matrices the device reads fragment-major (gpu.FragmentLayouter; on the GPU every one
// that has such a copy), which are kernels.BLMFragmentMajor of theirs, and (unless LITHOS_CUDA_MMA=0)
// those in the MMA layout (kernels.BLMXCopy); the vectors are the
// bundle's decoded floats; a bundle larger than the free memory is refused first.
func TestTargetUpload(t *testing.T) {
	e, tg, b := loadGoldenTarget(t)
	got := make([]byte, len(b.Weights()))
	if err := e.d.Read(got, tg.Weights, 0); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(b.Weights())
	fragment, mma := false, false
	if fl, ok := tg.Device.(gpu.FragmentLayouter); ok {
		fragment = fl.FragmentLayout()
	}
	if ml, ok := tg.Device.(gpu.MMALayouter); ok {
		_, mma = ml.MMALayout()
	}
	repacked, mmaN := 0, 0
	for _, name := range tg.MatrixNames() {
		mx, _ := tg.Matrix(name)
		off := int64(mx.Ptr - tg.Weights.Ptr)
		orig := want[off : off+mx.Geometry.TotalBytes]
		if mma {
			if cp, err := kernels.BLMXCopy(mx.Geometry, orig); err == nil {
				if mx.Layout != kernels.BLMLayoutMMA {
					t.Fatalf("tensor %s: layout %d on a device that reads the MMA layout", name, mx.Layout)
				}
				copy(want[off:], cp)
				mmaN++
				continue
			}
		}
		fm, err := kernels.BLMFragmentMajor(mx.Geometry, orig)
		if fragment && err == nil && mx.Layout != kernels.BLMLayoutFragment || !fragment && mx.Layout != kernels.BLMLayoutBLM {
			t.Fatalf("tensor %s: layout %d on a device that reads the fragment-major one: %v (copy: %v)", name, mx.Layout, fragment, err)
		}
		if mx.Layout == kernels.BLMLayoutFragment {
			copy(want[off:], fm)
			repacked++
		}
	}
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("device weights differ from weights.bin with %d matrices fragment-major and %d in the MMA layout", repacked, mmaN)
	}
	t.Logf("%d of %d matrices fragment-major, %d in the MMA layout", repacked, len(tg.MatrixNames()), mmaN)
	for _, name := range []string{"norm", "layers.0.input_layernorm", "layers.0.linear_attn.A_log", "layers.0.linear_attn.conv1d"} {
		bt, ok := b.Tensor(name)
		if !ok {
			t.Fatalf("no tensor %s", name)
		}
		want, err := b.Floats(bt)
		if err != nil {
			t.Fatal(err)
		}
		ptr, n, ok := tg.Vector(name)
		if !ok || n != len(want) {
			t.Fatalf("vector %s: %v, %d floats, want %d", name, ok, n, len(want))
		}
		raw := make([]byte, 4*n)
		if err := e.d.Read(raw, &Buffer{Ptr: ptr, Size: int64(4 * n)}, 0); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, Float32Bytes(want)) {
			t.Fatalf("vector %s differs on the device", name)
		}
	}
	t.Logf("%d bytes uploaded in %v; load %v", tg.Upload.Bytes, tg.Upload.Wall, tg.Load)
}

func TestTargetRefusesTooLarge(t *testing.T) {
	d := testDevice(t)
	free, _, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	err = d.Fit("bundle /x (weights.bin)", free)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("GB free")) {
		t.Fatalf("a bundle of all the free memory: %v", err)
	}
}

// blm runs one matrix product on the target's matrix over x [rows, K] into y, with the kernel
// and record of its layout (a BLM kernel, or the MMA-layout one split for tg.MMA).
func (e *opEnv) blm(m *gpu.Matrix, rows int, epi uint32, x, y *Buffer) {
	e.t.Helper()
	e.blmLd(m, rows, epi, x, y, 0)
}

// blmLd is blm with y's rows ldy floats apart (0: the record's default).
func (e *opEnv) blmLd(m *gpu.Matrix, rows int, epi uint32, x, y *Buffer, ldy int) {
	e.t.Helper()
	name, err := m.Kernel(rows)
	if err != nil {
		e.t.Fatal(err)
	}
	if m.Layout == kernels.BLMLayoutMMA {
		rec, err := kernels.NewBLMXParams(m.Geometry, rows, epi, e.mma)
		if err != nil {
			e.t.Fatal(err)
		}
		if name, err = kernels.BLMXKernelTiles(m.Geometry.Format, rec.Tiles); err != nil {
			e.t.Fatal(err)
		}
		if ldy > 0 {
			rec.LdY = uint32(ldy)
		}
		e.run(name, rec, rec.Grid(), &Buffer{Ptr: m.Ptr}, &Buffer{Ptr: m.Scales}, x, y, &Buffer{Ptr: m.Scales})
		return
	}
	rec, err := kernels.NewBLMParams(m.Geometry, rows, epi)
	if err != nil {
		e.t.Fatal(err)
	}
	if ldy > 0 {
		rec.LdY = uint32(ldy)
	}
	rec.Layout = m.Layout
	prm := e.bytes(kernels.Record(rec))
	g := rec.Grid()
	if err := e.ks.Launch(e.s, name, g, e.ctl.Ptr, prm.Ptr, m.Ptr, m.Scales, x.Ptr, y.Ptr); err != nil {
		e.t.Fatal(err)
	}
}

func cpuPacked(t *testing.T, b *bundle.Bundle, name string) *cpu.Packed {
	t.Helper()
	bt, ok := b.Tensor(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	mx, err := b.Matrix(bt)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cpu.NewPacked(mx.Geometry, mx.Packed, mx.RowScales)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func seq(n int) []int32 {
	r := make([]int32, n)
	for i := range r {
		r[i] = int32(i)
	}
	return r
}

// TestTargetMatrices: every packed matrix of the bundle, on the device, × 1 and 5 random rows,
// against cpu.Packed over the same mapped bytes (tolerance as TestOpBLM).
func TestTargetMatrices(t *testing.T) {
	e, tg, b := loadGoldenTarget(t)
	names := tg.MatrixNames()
	for _, name := range names {
		m, _ := tg.Matrix(name)
		p := cpuPacked(t, b, name)
		n, k := int(m.Geometry.N), int(m.Geometry.K)
		for _, rows := range []int{1, 5} {
			t.Run(fmt.Sprintf("%s/r%d", name, rows), func(t *testing.T) {
				e.t = t
				x := e.randn(rows*k, 1)
				y := e.poisoned(rows * n)
				e.blm(m, rows, kernels.EpiStore, e.f32(x), y)
				got := e.read(y, rows*n)
				want, tol := packedRef(t, p, seq(n), x, rows)
				wf := make([]float32, len(want))
				for i, v := range want {
					wf[i] = float32(v)
				}
				check(t, "y", got, wf, func(i int) float64 { return tol[i] })
			})
		}
	}
	if len(names) < 8*4 {
		t.Fatalf("only %d matrices", len(names))
	}
}

// TestTargetHeadAndMLP: the model's tail (final norm → LM head → argmax) and layer 0's MLP
// (post norm → gate_up with the SwiGLU epilogue → down_proj added onto the residual) on the
// device, each stage against the CPU ops on the stage's device input; end to end against
// the CPU alone (logged).
func TestTargetHeadAndMLP(t *testing.T) {
	e, tg, b := loadGoldenTarget(t)
	cfg := tg.Cfg
	const rows = 3
	h := cfg.Hidden
	x := e.randn(rows*h, 1.5)
	normPtr, _, _ := tg.Vector("norm")
	bx := e.f32(x)

	// Final norm.
	xn := e.poisoned(rows * h)
	rec := kernels.RMSNormParams{DoneWord: kernels.NoWord, Rows: rows, RowsWord: kernels.NoWord, Groups: 1, N: uint32(h),
		LdX: uint32(h), LdZ: uint32(h), LdY: uint32(h), Mode: kernels.RMSPlain, Eps: cfg.RMSEps}
	prm := e.bytes(kernels.Record(rec))
	if err := e.ks.Launch(e.s, "lithos_rmsnorm", rec.Grid(), e.ctl.Ptr, prm.Ptr, bx.Ptr, normPtr, bx.Ptr, xn.Ptr); err != nil {
		t.Fatal(err)
	}
	gotN := e.read(xn, rows*h)
	bn, _ := b.Tensor("norm")
	normW, _ := b.Floats(bn)
	wantN := make([]float32, rows*h)
	model.RMSNorm(wantN, x, normW, rows, cfg.RMSEps)
	mN := maxAbs(wantN)
	check(t, "final norm", gotN, wantN, func(int) float64 { return 1e-5 * mN })

	// LM head on the device's normed rows, then argmax.
	head, _ := tg.Matrix("lm_head")
	if head == nil {
		t.Fatal("no lm_head matrix")
	}
	v := int(head.Geometry.N)
	logits := e.poisoned(rows * v)
	e.blm(head, rows, kernels.EpiStore, xn, logits)
	gotL := e.read(logits, rows*v)
	want, tol := packedRef(t, cpuPacked(t, b, "lm_head"), seq(v), gotN, rows)
	wf := make([]float32, len(want))
	for i, w := range want {
		wf[i] = float32(w)
	}
	check(t, "logits", gotL, wf, func(i int) float64 { return tol[i] })
	ar := kernels.NewArgmaxParams(rows, v)
	pv, pi, out := e.poisoned(rows*int(ar.Parts)), e.poisoned(rows*int(ar.Parts)), e.poisoned(rows)
	e.run("lithos_argmax_partial", ar, ar.GridPartial(), logits, pv, pi)
	e.run("lithos_argmax_final", ar, ar.GridFinal(), pv, pi, out)
	ids := e.read(out, rows)
	for r := 0; r < rows; r++ {
		if g, w := int(math.Float32bits(ids[r])), model.Argmax(gotL[r*v:(r+1)*v]); g != w {
			t.Errorf("row %d: device argmax %d, argmax of the device logits %d", r, g, w)
		}
	}

	// Layer 0's MLP: post norm, gate_up + SwiGLU, down_proj added onto the residual.
	post, _, _ := tg.Vector("layers.0.post_attention_layernorm")
	rec.N, rec.LdX, rec.LdZ, rec.LdY = uint32(h), uint32(h), uint32(h), uint32(h)
	pn := e.poisoned(rows * h)
	prm = e.bytes(kernels.Record(rec))
	if err := e.ks.Launch(e.s, "lithos_rmsnorm", rec.Grid(), e.ctl.Ptr, prm.Ptr, bx.Ptr, post, bx.Ptr, pn.Ptr); err != nil {
		t.Fatal(err)
	}
	gotP := e.read(pn, rows*h)
	gu, _ := tg.Matrix("layers.0.mlp.gate_up")
	down, _ := tg.Matrix("layers.0.mlp.down_proj")
	if gu == nil || down == nil {
		t.Fatal("no layer-0 MLP matrices")
	}
	inter := int(gu.Geometry.N) / 2
	act := e.poisoned(rows * inter)
	e.blm(gu, rows, kernels.EpiSwiGLU, pn, act)
	gotA := e.read(act, rows*inter)
	pgu := cpuPacked(t, b, "layers.0.mlp.gate_up")
	gRows, err := cpu.SegmentRows(gu.Stack, 0)
	if err != nil {
		t.Fatal(err)
	}
	uRows, err := cpu.SegmentRows(gu.Stack, 1)
	if err != nil {
		t.Fatal(err)
	}
	gw, gt := packedRef(t, pgu, gRows, gotP, rows)
	uw, ut := packedRef(t, pgu, uRows, gotP, rows)
	wantA := make([]float32, len(gw))
	tolA := make([]float64, len(gw))
	for i := range gw {
		sg := model.SiLU(float32(gw[i]))
		wantA[i] = sg * float32(uw[i])
		tolA[i] = 1.1*gt[i]*math.Abs(uw[i]) + math.Abs(float64(sg))*ut[i] + 4*0x1p-24*math.Abs(float64(wantA[i])) + 1e-30
	}
	check(t, "swiglu(gate_up)", gotA, wantA, func(i int) float64 { return tolA[i] })
	res := e.f32(x)
	e.blm(down, rows, kernels.EpiAdd, act, res)
	gotR := e.read(res, rows*h)
	dw, dt := packedRef(t, cpuPacked(t, b, "layers.0.mlp.down_proj"), seq(h), gotA, rows)
	wantR := make([]float32, len(dw))
	for i := range dw {
		wantR[i] = float32(dw[i]) + x[i]
	}
	check(t, "x + down(·)", gotR, wantR, func(i int) float64 { return dt[i] + 2*0x1p-24*math.Abs(float64(wantR[i])) })

	// End to end against the CPU alone: the CPU's own MLP from x.
	cpuN := make([]float32, rows*h)
	bp, _ := b.Tensor("layers.0.post_attention_layernorm")
	pw, _ := b.Floats(bp)
	model.RMSNorm(cpuN, x, pw, rows, cfg.RMSEps)
	gm, _ := pgu.Rows(gRows)
	um, _ := pgu.Rows(uRows)
	gg, uu := make([]float32, rows*inter), make([]float32, rows*inter)
	gm.Mul(gg, cpuN, rows)
	um.Mul(uu, cpuN, rows)
	model.SwiGLU(gg, gg, uu)
	dm, _ := cpuPacked(t, b, "layers.0.mlp.down_proj").All()
	dd := make([]float32, rows*h)
	dm.Mul(dd, gg, rows)
	var num, den float64
	for i := range dd {
		c := float64(dd[i] + x[i])
		num = math.Max(num, math.Abs(float64(gotR[i])-c))
		den = math.Max(den, math.Abs(float64(dd[i])))
	}
	t.Logf("layer-0 MLP, device vs CPU end to end: max |Δ| = %.3g (max |mlp| %.3g, relative %.2g)", num, den, num/den)
	if num > 1e-3*den {
		t.Fatalf("layer-0 MLP end to end: max |Δ| %.3g over max |mlp| %.3g", num, den)
	}
}
