//go:build linux && amd64

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lithos/formats"
	"lithos/formats/bf16"
	"lithos/formats/fp8"
	"lithos/kernels"
	"lithos/pack/blm"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/model"
)

// Every kernel of lithos/kernels against the CPU backend's op (runtime/model, cpu.Packed) on
// fresh random inputs. Outputs are poisoned with a NaN pattern before each run, and the bytes
// an op must not write (row padding, rows past a dynamic count) are checked to keep it.
//
// Tolerances, per op (u = 2⁻²⁴, the float32 unit roundoff), each chosen as a bound correct
// float32 code cannot exceed, far below what a wrong index or a wrong decode gives:
//
//   - rmsnorm: |gpu − cpu| ≤ 1e-5 · max|cpu| over the group (the CPU sums x² in float64, the GPU
//     in float32 over ≤ 1024 terms: ≤ ~1e-6 relative in 1/rms, plus two rounded products);
//   - ewise: add exact; SwiGLU ≤ 4u·|cpu| + 1e-30 (expf vs float64 exp, two roundings);
//   - rope: rotated ≤ 1e-5 · max|x| of the head (cosf/sinf of the same float32 angle vs float64
//     cos/sin rounded once; the angle reaches 3·10⁴ rad), the other dims exact;
//   - BLM matrix × rows: |gpu − cpu| ≤ 2·γ_K·Σ_k|s·w_k·x_k| + 4u·|cpu|, γ_K = K·u/(1 − K·u)
//     (any two float32 summation orders of K products), the SwiGLU epilogue propagating it
//     through silu(gate)·up;
//   - argmax: exact (the same index, lowest on ties, NaN skipped).

const poison = 0x7fc0dead // a quiet NaN with a payload no kernel computes

type opEnv struct {
	t   *testing.T
	d   *Device
	ks  *Kernels
	s   *Stream
	ctl *Buffer // step-state words: 64 zero words unless a test writes them
	r   *rand.Rand
	mma kernels.BLMXDevice // a loaded target's MMA-layout device (loadGoldenTargetOf), for opEnv.blm
}

// The kernel module, loaded once per test binary (tests run one at a time).
var (
	kernelsLoaded bool
	testKernels   *Kernels
	kernelsErr    error
)

func newOpEnv(t *testing.T, seed uint64) *opEnv {
	t.Helper()
	d := testDevice(t)
	if !kernelsLoaded {
		kernelsLoaded = true
		testKernels, kernelsErr = d.LoadKernels()
		if kernelsErr == nil {
			t.Logf("kernel module: %d kernels, %v (cached %v)", len(testKernels.fns), testKernels.Compile, testKernels.Cached)
		}
	}
	if kernelsErr != nil {
		t.Fatal(kernelsErr)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e := &opEnv{t: t, d: d, ks: testKernels, s: s, r: rand.New(rand.NewPCG(seed, 0x0b5))}
	e.ctl = e.alloc(64 * 4)
	e.setCtl(make([]uint32, 64))
	return e
}

func (e *opEnv) alloc(n int64) *Buffer {
	e.t.Helper()
	b, err := e.d.Alloc(n)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { b.Free() })
	return b
}

func (e *opEnv) setCtl(words []uint32) {
	e.t.Helper()
	b := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	if err := e.d.Write(e.ctl, 0, b); err != nil {
		e.t.Fatal(err)
	}
}

func (e *opEnv) f32(x []float32) *Buffer {
	e.t.Helper()
	b := e.alloc(int64(max(4*len(x), 4)))
	if err := e.d.Write(b, 0, Float32Bytes(x)); err != nil {
		e.t.Fatal(err)
	}
	return b
}

func (e *opEnv) bytes(x []byte) *Buffer {
	e.t.Helper()
	b := e.alloc(int64(max(len(x), 1)))
	if err := e.d.Write(b, 0, x); err != nil {
		e.t.Fatal(err)
	}
	return b
}

// poisoned returns a buffer of n floats filled with the poison pattern.
func (e *opEnv) poisoned(n int) *Buffer {
	e.t.Helper()
	b := e.alloc(int64(4 * n))
	if err := e.s.Fill32(b, 0, int64(n), poison); err != nil {
		e.t.Fatal(err)
	}
	return b
}

func (e *opEnv) read(b *Buffer, n int) []float32 {
	e.t.Helper()
	if err := e.s.Wait(0); err != nil {
		e.t.Fatal(err)
	}
	raw := make([]byte, 4*n)
	if err := e.d.Read(raw, b, 0); err != nil {
		e.t.Fatal(err)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// run launches kernel name with record rec (uploaded for this launch) and waits.
func (e *opEnv) run(name string, rec any, grid [3]uint32, bufs ...*Buffer) {
	e.t.Helper()
	prm := e.bytes(kernels.Record(rec))
	addrs := make([]uint64, len(bufs))
	for i, b := range bufs {
		addrs[i] = b.Ptr
	}
	var err error
	if c, ok := rec.(interface{ ClusterDims() [3]uint32 }); ok && c.ClusterDims()[0] > 1 {
		err = e.ks.LaunchCluster(e.s, name, grid, c.ClusterDims(), e.ctl.Ptr, prm.Ptr, addrs...)
	} else {
		err = e.ks.Launch(e.s, name, grid, e.ctl.Ptr, prm.Ptr, addrs...)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.s.Wait(0); err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
}

func (e *opEnv) randn(n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(e.r.NormFloat64() * scale)
	}
	return x
}

// clusterChoices is {false} on a device (or the emulator) that launches no thread-block
// clusters, else {false, true}: the BLM tests run each case also in the cluster split
// (kernels.BLMClusterSplit, whatever the matrix's K).
func (e *opEnv) clusterChoices() []bool {
	if !e.clusters() {
		return []bool{false}
	}
	return []bool{false, true}
}

// clusters: the device launches thread-block clusters (as runtime.go's queue decides).
func (e *opEnv) clusters() bool {
	return e.d.LaunchesClusters()
}

func isPoison(v float32) bool { return math.Float32bits(v) == poison }

// check compares got[i] with want[i] within tol(i); it reports the first few failures.
func check(t *testing.T, what string, got, want []float32, tol func(i int) float64) {
	t.Helper()
	bad := 0
	for i := range want {
		g, w := float64(got[i]), float64(want[i])
		if isPoison(got[i]) || math.IsNaN(g) || math.Abs(g-w) > tol(i) {
			if bad < 5 {
				t.Errorf("%s[%d] = %v (bits %#x), want %v ± %.3g", what, i, got[i], math.Float32bits(got[i]), want[i], tol(i))
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values out of tolerance", what, bad, len(want))
	}
}

func maxAbs(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

// Step-state word indexes the tests drive (docs/runtime.md §4; TMax = 8 here).
const (
	wordPosition = 1
	wordRows     = 2
	wordDone     = 3 + 8 + 6
)

func TestOpRMSNorm(t *testing.T) {
	e := newOpEnv(t, 11)
	const rows, groups, n, eps = 5, 3, 96, 1e-6
	ldx, ldz, ldy := groups*n+7, groups*n+5, groups*n+3
	x, z, w := e.randn(rows*ldx, 2), e.randn(rows*ldz, 1.5), e.randn(n, 0.3)
	for _, mode := range []uint32{kernels.RMSPlain, kernels.RMSOnePlus, kernels.RMSGated} {
		for _, dyn := range []bool{false, true} {
			t.Run(fmt.Sprintf("mode%d/dynamic%v", mode, dyn), func(t *testing.T) {
				e.t = t
				rec := kernels.RMSNormParams{DoneWord: kernels.NoWord, Rows: rows, RowsWord: kernels.NoWord, Groups: groups, N: n,
					LdX: uint32(ldx), LdZ: uint32(ldz), LdY: uint32(ldy), Mode: mode, Eps: eps}
				live := rows
				if dyn {
					live = 3
					rec.RowsWord = wordRows
					ctl := make([]uint32, 64)
					ctl[wordRows] = uint32(live)
					e.setCtl(ctl)
					defer e.setCtl(make([]uint32, 64))
				}
				bx, bz, bw := e.f32(x), e.f32(z), e.f32(w)
				by := e.poisoned(rows * ldy)
				e.run("lithos_rmsnorm", rec, rec.Grid(), bx, bw, bz, by)
				got := e.read(by, rows*ldy)
				scale := w
				if mode == kernels.RMSOnePlus {
					scale = model.OnePlus(w)
				}
				for r := 0; r < rows; r++ {
					for g := 0; g < groups; g++ {
						xs := x[r*ldx+g*n : r*ldx+g*n+n]
						want := make([]float32, n)
						if mode == kernels.RMSGated {
							model.GatedRMSNorm(want, xs, z[r*ldz+g*n:r*ldz+g*n+n], w, 1, eps)
						} else {
							model.RMSNorm(want, xs, scale, 1, eps)
						}
						gs := got[r*ldy+g*n : r*ldy+g*n+n]
						if r >= live {
							for i, v := range gs {
								if !isPoison(v) {
									t.Fatalf("row %d ≥ dynamic rows %d: y[%d] written", r, live, i)
								}
							}
							continue
						}
						m := maxAbs(want)
						check(t, fmt.Sprintf("row %d group %d", r, g), gs, want, func(int) float64 { return 1e-5 * m })
					}
					for i := groups * n; i < ldy; i++ {
						if !isPoison(got[r*ldy+i]) {
							t.Fatalf("row %d: padding y[%d] written", r, i)
						}
					}
				}
			})
		}
	}
	t.Run("in-place+done", func(t *testing.T) {
		e.t = t
		rec := kernels.RMSNormParams{DoneWord: kernels.NoWord, Rows: rows, RowsWord: kernels.NoWord, Groups: groups, N: n,
			LdX: uint32(ldx), LdZ: uint32(ldz), LdY: uint32(ldx), Mode: kernels.RMSOnePlus, Eps: eps}
		bx, bw := e.f32(x), e.f32(w)
		e.run("lithos_rmsnorm", rec, rec.Grid(), bx, bw, bx, bx)
		got := e.read(bx, rows*ldx)
		want := make([]float32, n)
		for r := 0; r < rows; r++ {
			model.RMSNorm(want, x[r*ldx:r*ldx+n], model.OnePlus(w), 1, eps)
			m := maxAbs(want)
			check(t, fmt.Sprintf("in place row %d", r), got[r*ldx:r*ldx+n], want, func(int) float64 { return 1e-5 * m })
		}
		// With the done word set, the kernel returns at once.
		ctl := make([]uint32, 64)
		ctl[wordDone] = 1
		e.setCtl(ctl)
		defer e.setCtl(make([]uint32, 64))
		rec.DoneWord = wordDone
		by := e.poisoned(rows * ldx)
		e.run("lithos_rmsnorm", rec, rec.Grid(), bx, bw, bx, by)
		for i, v := range e.read(by, rows*ldx) {
			if !isPoison(v) {
				t.Fatalf("done set: y[%d] written", i)
			}
		}
	})
}

func TestOpEwise(t *testing.T) {
	e := newOpEnv(t, 12)
	const rows, n = 3, 1000
	lda, ldb, ldy := n+4, n+9, n+1
	a, b := e.randn(rows*lda, 3), e.randn(rows*ldb, 3)
	for _, mode := range []uint32{kernels.EwSwiGLU, kernels.EwAdd} {
		t.Run(fmt.Sprint("mode", mode), func(t *testing.T) {
			e.t = t
			rec := kernels.EwiseParams{DoneWord: kernels.NoWord, Rows: rows, RowsWord: kernels.NoWord, N: n,
				LdA: uint32(lda), LdB: uint32(ldb), LdY: uint32(ldy), Mode: mode}
			ba, bb, by := e.f32(a), e.f32(b), e.poisoned(rows*ldy)
			e.run("lithos_ewise", rec, rec.Grid(), ba, bb, by)
			got := e.read(by, rows*ldy)
			for r := 0; r < rows; r++ {
				want := make([]float32, n)
				ar, br := a[r*lda:r*lda+n], b[r*ldb:r*ldb+n]
				switch mode {
				case kernels.EwSwiGLU:
					model.SwiGLU(want, ar, br)
				case kernels.EwAdd:
					for i := range want {
						want[i] = ar[i] + br[i]
					}
				}
				check(t, fmt.Sprintf("row %d", r), got[r*ldy:r*ldy+n], want, func(i int) float64 {
					if mode == kernels.EwAdd {
						return 0
					}
					return 4*0x1p-24*math.Abs(float64(want[i])) + 1e-30
				})
				if !isPoison(got[r*ldy+n]) {
					t.Fatalf("row %d: padding written", r)
				}
			}
		})
	}
}

// TestOpRope: partial RoPE (lithos_rope_scaled at Scale 1, RotDim < HeadDim) against
// runtime/model.Rope, the position fixed and from the step state.
func TestOpRope(t *testing.T) {
	e := newOpEnv(t, 13)
	const rows, heads, headDim, rotDim = 5, 12, 256, 64 // 384 (head, pair) items: 3 threadgroups per row
	ld := heads*headDim + 8
	rope := model.NewRope(1e7, rotDim)
	x := e.randn(rows*ld, 1)
	for _, dyn := range []bool{false, true} {
		t.Run(fmt.Sprint("dynamic-position-", dyn), func(t *testing.T) {
			e.t = t
			pos := uint32(30011)
			rec := kernels.RopeScaledParams{DoneWord: kernels.NoWord, Rows: rows, RowsWord: kernels.NoWord, Pos: pos, PosWord: kernels.NoWord,
				Heads: heads, HeadDim: headDim, RotDim: rotDim, Ld: uint32(ld), Scale: 1}
			if dyn {
				pos = 1234
				rec.PosWord = wordPosition
				ctl := make([]uint32, 64)
				ctl[wordPosition] = pos
				e.setCtl(ctl)
				defer e.setCtl(make([]uint32, 64))
			}
			bx, bf := e.f32(x), e.f32(rope.InvFreq)
			e.run("lithos_rope_scaled", rec, rec.Grid(), bx, bf)
			got := e.read(bx, rows*ld)
			cos, sin := make([]float32, rotDim/2), make([]float32, rotDim/2)
			for r := 0; r < rows; r++ {
				want := append([]float32(nil), x[r*ld:r*ld+heads*headDim]...)
				rope.Tables(cos, sin, int(pos)+r)
				rope.Apply(want, headDim, cos, sin)
				for h := 0; h < heads; h++ {
					m := maxAbs(x[r*ld+h*headDim : r*ld+(h+1)*headDim])
					check(t, fmt.Sprintf("row %d head %d", r, h), got[r*ld+h*headDim:r*ld+(h+1)*headDim], want[h*headDim:(h+1)*headDim], func(i int) float64 {
						if i >= rotDim {
							return 0
						}
						return 1e-5 * m
					})
				}
				for i := heads * headDim; i < ld; i++ {
					if got[r*ld+i] != x[r*ld+i] {
						t.Fatalf("row %d: padding %d changed", r, i)
					}
				}
			}
		})
	}
}

// blmMatrix is a random packed matrix with its CPU reference.
type blmMatrix struct {
	g      blm.Geometry
	packed []byte
	table  []byte // row-scale table (float32 per packed row)
	p      *cpu.Packed
}

func newBLMMatrix(t *testing.T, r *rand.Rand, spec blm.Spec) *blmMatrix {
	t.Helper()
	g, err := blm.NewGeometry(spec)
	if err != nil {
		t.Fatalf("NewGeometry(%+v): %v", spec, err)
	}
	n, k := int(g.N), int(g.K)
	rows := g.NewRows(n)
	switch g.Format {
	case formats.BF16:
		for i := 0; i < n*k; i++ {
			binary.LittleEndian.PutUint16(rows.Codes[2*i:], bf16.FromFloat32(float32(r.NormFloat64())))
		}
	case formats.FP8:
		for i := range rows.Codes {
			rows.Codes[i] = fp8.E4M3FromFloat32Sat(float32(r.NormFloat64() * 50))
		}
	case formats.NVFP4:
		for i := range rows.Codes {
			rows.Codes[i] = byte(r.Uint32())
		}
		for i := range rows.Scales {
			rows.Scales[i] = fp8.E4M3FromFloat32Sat(float32(0.01 + r.Float64()*400))
		}
	default:
		t.Fatalf("format %s", g.Format)
	}
	m := &blmMatrix{g: g, packed: make([]byte, g.TotalBytes), table: make([]byte, 4*g.Blocks*int64(g.Rows))}
	if err := g.PackRows(m.packed, rows); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		s := float32(1)
		if g.Format != formats.BF16 {
			s = float32(math.Ldexp(0.5+r.Float64(), -r.IntN(12)))
		}
		binary.LittleEndian.PutUint32(m.table[4*i:], math.Float32bits(s))
	}
	if m.p, err = cpu.NewPacked(g, m.packed, m.table); err != nil {
		t.Fatal(err)
	}
	return m
}

// ref returns, for packed rows prow and activation rows x [rows, K], the CPU product
// [rows, len(prow)] and the bound 2·γ_K·Σ|s·w·x| + 4u|·| of each value.
func (m *blmMatrix) ref(t *testing.T, prow []int32, x []float32, rows int) (want, tol []float64) {
	t.Helper()
	return packedRef(t, m.p, prow, x, rows)
}

// packedRef is blmMatrix.ref for any cpu.Packed.
func packedRef(t *testing.T, p *cpu.Packed, prow []int32, x []float32, rows int) (want, tol []float64) {
	t.Helper()
	mx, err := p.Rows(prow)
	if err != nil {
		t.Fatal(err)
	}
	k := int(p.Geometry().K)
	out := make([]float32, rows*len(prow))
	if err := mx.Mul(out, x, rows); err != nil {
		t.Fatal(err)
	}
	u := 0x1p-24
	gamma := float64(k) * u / (1 - float64(k)*u)
	w := make([]float32, k)
	want, tol = make([]float64, len(out)), make([]float64, len(out))
	for j, r := range prow {
		p.DecodeRow(w, int(r))
		s := math.Abs(float64(p.RowScale(int(r))))
		for t := 0; t < rows; t++ {
			var a float64
			for c := 0; c < k; c++ {
				a += math.Abs(float64(w[c]) * float64(x[t*k+c]))
			}
			i := t*len(prow) + j
			want[i] = float64(out[i])
			tol[i] = 2*gamma*s*a + 4*u*math.Abs(want[i])
		}
	}
	return want, tol
}

func TestOpBLM(t *testing.T) {
	e := newOpEnv(t, 14)
	specs := []blm.Spec{
		{Format: formats.NVFP4, N: 200, K: 1008},
		{Format: formats.NVFP4, N: 64, K: 5120},
		{Format: formats.NVFP4, N: 48, K: 256, Lanes: 8},
		{Format: formats.FP8, N: 200, K: 1000},
		{Format: formats.FP8, N: 32, K: 64, Lanes: 4},
		{Format: formats.BF16, N: 100, K: 700},
		{Format: formats.BF16, N: 48, K: 2048},
	}
	for _, spec := range specs {
		m := newBLMMatrix(t, e.r, spec)
		bw, bs := e.bytes(m.packed), e.bytes(m.table)
		n, k := int(m.g.N), int(m.g.K)
		all := make([]int32, n)
		for i := range all {
			all[i] = int32(i)
		}
		for _, variant := range kernels.BLMRowVariants {
			for _, rows := range []int{1, variant - 1, variant} {
				if rows < 1 || (rows == variant-1 && variant == 2) {
					continue
				}
				epis := []uint32{kernels.EpiStore, kernels.EpiAdd}
				if n%16 == 0 {
					epis = append(epis, kernels.EpiSwiGLU)
				}
				for _, ce := range e.clusterChoices() {
					for _, epi := range epis {
						name := fmt.Sprintf("%s_%dx%d_L%d/r%d-of-%d/epi%d%s", m.g.Format, n, k, m.g.Lanes, rows, variant, epi, map[bool]string{true: "/clusters"}[ce])
						t.Run(name, func(t *testing.T) {
							e.t = t
							kname, err := kernels.BLMKernel(m.g.Format, variant)
							if err != nil {
								t.Fatal(err)
							}
							rec, err := kernels.NewBLMParams(m.g, rows, epi)
							if err != nil {
								t.Fatal(err)
							}
							rec.Rows = uint32(rows)
							if ce {
								rec.Parts, rec.WarpBlocks, rec.Clusters = kernels.BLMClusterSplit(int64(rec.Blocks))
								if rec.Clusters < 2 {
									t.Fatalf("cluster split %d×%d×%d: not a cluster", rec.Parts, rec.WarpBlocks, rec.Clusters)
								}
							}
							x := e.randn(rows*k, 1)
							outN := n
							if epi == kernels.EpiSwiGLU {
								outN = n / 2
							}
							var y0 []float32
							by := e.poisoned(rows * outN)
							if epi == kernels.EpiAdd {
								y0 = e.randn(rows*outN, 5)
								by = e.f32(y0)
							}
							e.run(kname, rec, rec.Grid(), bw, bs, e.f32(x), by)
							got := e.read(by, rows*outN)
							var want, tol []float64
							switch epi {
							case kernels.EpiStore:
								want, tol = m.ref(t, all, x, rows)
							case kernels.EpiAdd:
								want, tol = m.ref(t, all, x, rows)
								for i := range want {
									want[i] = float64(float32(want[i]) + y0[i])
									tol[i] += 2 * 0x1p-24 * math.Abs(want[i])
								}
							case kernels.EpiSwiGLU:
								var gr, ur []int32
								for b := 0; b < n/16; b++ {
									for i := 0; i < 8; i++ {
										gr = append(gr, int32(16*b+i))
										ur = append(ur, int32(16*b+8+i))
									}
								}
								gw, gt := m.ref(t, gr, x, rows)
								uw, ut := m.ref(t, ur, x, rows)
								want, tol = make([]float64, len(gw)), make([]float64, len(gw))
								for i := range gw {
									sg := model.SiLU(float32(gw[i]))
									want[i] = float64(sg * float32(uw[i]))
									tol[i] = 1.1*gt[i]*math.Abs(uw[i]) + math.Abs(float64(sg))*ut[i] + 4*0x1p-24*math.Abs(want[i]) + 1e-30
								}
							}
							wf := make([]float32, len(want))
							for i, v := range want {
								wf[i] = float32(v)
							}
							check(t, "y", got, wf, func(i int) float64 { return tol[i] })
						})
					}
				}
			}
		}
	}
}

func TestOpArgmax(t *testing.T) {
	e := newOpEnv(t, 15)
	const rows, n = 4, 10007 // three chunks of 4096, the last partial
	x := e.randn(rows*n, 1)
	// Row 0: a tie between two chunks (the lower index wins); row 1: NaNs, the max after
	// them; row 2: all −Inf but one NaN (answer 0); row 3: random.
	x[0*n+5000], x[0*n+9000] = 50, 50
	x[1*n+0], x[1*n+4096], x[1*n+7000] = float32(math.NaN()), float32(math.NaN()), 60
	for i := 0; i < n; i++ {
		x[2*n+i] = float32(math.Inf(-1))
	}
	x[2*n+17] = float32(math.NaN())
	rec := kernels.NewArgmaxParams(rows, n)
	rec.OutOff = 3
	pv, pi := e.poisoned(rows*int(rec.Parts)), e.poisoned(rows*int(rec.Parts))
	out := e.poisoned(rows + 5)
	bx := e.f32(x)
	e.run("lithos_argmax_partial", rec, rec.GridPartial(), bx, pv, pi)
	e.run("lithos_argmax_final", rec, rec.GridFinal(), pv, pi, out)
	got := e.read(out, rows+5)
	for r := 0; r < rows; r++ {
		want := model.Argmax(x[r*n : (r+1)*n])
		if g := int32(math.Float32bits(got[3+r])); int(g) != want {
			t.Errorf("row %d: argmax %d, want %d", r, g, want)
		}
	}
	for _, i := range []int{0, 1, 2, rows + 3, rows + 4} {
		if !isPoison(got[i]) {
			t.Errorf("out[%d] written outside [OutOff, OutOff+rows)", i)
		}
	}
	if model.Argmax(x[0:n]) != 5000 || model.Argmax(x[n:2*n]) != 7000 || model.Argmax(x[2*n:3*n]) != 0 {
		t.Fatal("the CPU argmax does not behave as the test assumes")
	}
}

// TestKernelModuleArchs: the kernel module compiles for every architecture Open accepts, not
// only the device's (the thread-block cluster PTX of the BLM kernels exists from sm_90 on and
// must stay out of older targets' code).
func TestKernelModuleArchs(t *testing.T) {
	newOpEnv(t, 10) // a GPU and NVRTC (skips without them)
	if emu != nil {
		t.Skip("the emulator compiles the Metal source")
	}
	for _, arch := range []string{"sm_80", "sm_86", "sm_89", "sm_90"} {
		if _, err := Compile("lithos_kernels.cu", kernels.Source(kernels.CUDA), arch); err != nil {
			t.Errorf("%s: %v", arch, err)
		}
	}
}

// TestKernelModule: the generated module compiles for the device and every kernel of
// kernels.Kernels() resolves (LoadKernels checks both); the compiler's resource use per kernel
// is logged (registers; local bytes > 0 means spills or a stack array).
func TestKernelModule(t *testing.T) {
	e := newOpEnv(t, 10)
	for _, k := range kernels.Kernels() {
		f, _, ok := e.ks.Function(k.Name)
		if !ok {
			t.Fatalf("kernel %s not loaded", k.Name)
		}
		t.Logf("%-24s %3d threads  %3d registers  %4d local bytes", k.Name, k.Threads, f.Registers, f.LocalBytes)
	}
}

// TestBLMClusterGuard: a BLM record launched in clusters of another size than its Clusters —
// a cluster record without clusters, a cluster-free record in clusters of 2 — writes nothing
// and reports kernels.GuardBLMCluster in the step state's Error word (after Done), with Done
// set; the matching launch of the same record then computes (sm_90 with cluster launch only).
func TestBLMClusterGuard(t *testing.T) {
	e := newOpEnv(t, 41)
	if !e.clusters() {
		t.Skip("the device launches no thread-block clusters")
	}
	m := newBLMMatrix(t, e.r, blm.Spec{Format: formats.NVFP4, N: 64, K: 5120})
	bw, bs := e.bytes(m.packed), e.bytes(m.table)
	bx := e.f32(e.randn(int(m.g.K), 1))
	const done = 40
	kname, _ := kernels.BLMKernel(m.g.Format, 1)
	base, err := kernels.NewBLMParams(m.g, 1, kernels.EpiStore)
	if err != nil {
		t.Fatal(err)
	}
	base.DoneWord = done
	for _, c := range []struct {
		name          string
		rec, launchAs uint32 // the record's Clusters, the launch's cluster size
	}{{"cluster record, plain launch", 2, 1}, {"plain record, clusters of 2", 1, 2}, {"matching", 2, 2}} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			e.setCtl(make([]uint32, 64))
			p := base
			p.Parts, p.WarpBlocks, p.Clusters = 1, 2, c.rec
			grid := p.Grid()
			if c.launchAs > c.rec {
				grid[0] *= c.launchAs
			}
			prm := e.bytes(kernels.Record(p))
			by := e.poisoned(int(m.g.N))
			if c.launchAs > 1 {
				err = e.ks.LaunchCluster(e.s, kname, grid, [3]uint32{c.launchAs, 1, 1}, e.ctl.Ptr, prm.Ptr, bw.Ptr, bs.Ptr, bx.Ptr, by.Ptr)
			} else {
				err = e.ks.Launch(e.s, kname, grid, e.ctl.Ptr, prm.Ptr, bw.Ptr, bs.Ptr, bx.Ptr, by.Ptr)
			}
			if err != nil {
				t.Fatal(err)
			}
			got := e.read(by, int(m.g.N))
			raw := make([]byte, 4*64)
			if err := e.d.Read(raw, e.ctl, 0); err != nil {
				t.Fatal(err)
			}
			doneW, errW := binary.LittleEndian.Uint32(raw[4*done:]), binary.LittleEndian.Uint32(raw[4*(done+1):])
			written := 0
			for _, v := range got {
				if !isPoison(v) {
					written++
				}
			}
			if c.rec == c.launchAs {
				if doneW != 0 || errW != 0 || written != len(got) {
					t.Fatalf("matching launch: done %d, error %d, %d of %d outputs written; want 0, 0, all", doneW, errW, written, len(got))
				}
				return
			}
			if doneW != 1 || errW != kernels.GuardBLMCluster || written != 0 {
				t.Fatalf("done %d, error %d, %d outputs written; want 1, %d (GuardBLMCluster), none", doneW, errW, written, kernels.GuardBLMCluster)
			}
		})
	}
}
