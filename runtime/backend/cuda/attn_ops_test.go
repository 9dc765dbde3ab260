//go:build linux && amd64

package cuda

import (
	"fmt"
	"testing"

	"lithos/kernels"
	"lithos/runtime/model"
)

// TestOpAttnPrep: lithos_attn_prep at the 27B's attention shape (24 query heads interleaved
// with their gate heads, 4 KV heads of 256 values, 64 rotated) over a verify pass's 8 rows at a
// dynamic position, against runtime/model: RMSNorm of each head, then RoPE, then the cache rows.
// Tolerance: rmsnorm's and rope's (ops_test.go) together, 1e-5 of the head's largest normed
// value. The value heads are copied exactly; cache
// rows outside the 8 positions keep their bytes.
func TestOpAttnPrep(t *testing.T) {
	e := newOpEnv(t, 71)
	const rows, heads, kvHeads, hd, rot, capacity, pos0 = 8, 24, 4, 256, 64, 30027, 30011
	const eps = 1e-6
	kvw := kvHeads * hd
	qOff, kOff, vOff := 0, 2*heads*hd, 2*heads*hd+kvw
	ldx := vOff + kvw
	x := e.randn(rows*ldx, 3)
	qw, kw := e.randn(hd, 1), e.randn(hd, 1)
	rope := model.NewRope(1e7, rot)
	ctl := make([]uint32, 64)
	ctl[wordPosition] = pos0
	e.setCtl(ctl)
	defer e.setCtl(make([]uint32, 64))
	rec := kernels.AttnPrepParams{DoneWord: kernels.NoWord, Rows: rows, RowsWord: kernels.NoWord, PosWord: wordPosition,
		Heads: heads, KVHeads: kvHeads, HeadDim: hd, RotDim: rot, LdX: uint32(ldx), QOff: uint32(qOff), QStride: 2 * hd,
		KOff: uint32(kOff), VOff: uint32(vOff), LdQ: heads * hd, LdC: uint32(kvw), Capacity: capacity, Eps: eps}
	if err := rec.Validate(); err != nil {
		t.Fatal(err)
	}
	bq := e.poisoned(rows * heads * hd)
	bk, bv := e.poisoned(capacity*kvw), e.poisoned(capacity*kvw)
	e.run("lithos_attn_prep", rec, rec.Grid(), e.f32(x), e.f32(qw), e.f32(kw), e.f32(rope.InvFreq), bq, bk, bv)
	gotQ := e.read(bq, rows*heads*hd)
	gotK, gotV := e.read(bk, capacity*kvw), e.read(bv, capacity*kvw)
	cos, sin := make([]float32, rot/2), make([]float32, rot/2)
	head := func(what string, got, src, w []float32) {
		t.Helper()
		want := make([]float32, hd)
		model.RMSNorm(want, src, w, 1, eps)
		m := maxAbs(want)
		rope.Apply(want, hd, cos, sin)
		check(t, what, got, want, func(int) float64 { return 1e-5 * m })
	}
	for r := range rows {
		pos := pos0 + r
		rope.Tables(cos, sin, pos)
		xr := x[r*ldx:]
		for h := range heads {
			head(fmt.Sprintf("row %d q head %d", r, h), gotQ[(r*heads+h)*hd:(r*heads+h+1)*hd], xr[qOff+2*h*hd:qOff+2*h*hd+hd], qw)
		}
		for kh := range kvHeads {
			head(fmt.Sprintf("row %d k head %d", r, kh), gotK[pos*kvw+kh*hd:pos*kvw+(kh+1)*hd], xr[kOff+kh*hd:kOff+(kh+1)*hd], kw)
			check(t, fmt.Sprintf("row %d v head %d", r, kh), gotV[pos*kvw+kh*hd:pos*kvw+(kh+1)*hd], xr[vOff+kh*hd:vOff+(kh+1)*hd], func(int) float64 { return 0 })
		}
	}
	for i := range gotK {
		if pos := i / kvw; (pos < pos0 || pos >= pos0+rows) && (!isPoison(gotK[i]) || !isPoison(gotV[i])) {
			t.Fatalf("cache row %d value %d written outside the rows' positions", pos, i%kvw)
		}
	}
}
