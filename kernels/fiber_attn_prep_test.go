package kernels

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lithos/runtime/model"
)

// TestFiberAttnPrep: lithos_attn_prep against runtime/model (RMSNorm of each head, then RoPE,
// then the cache rows) on the 27B's layout — query heads interleaved with their gate heads
// (QStride 2·HeadDim) after a leading block (QOff > 0), the key and value heads after them,
// q's rows and the caches' rows padded — for the 27B's head (256 values, 64 rotated: two
// values per thread), a narrow one (48 values, 16 rotated: threads past the head idle), the
// widest (AttnPrepMaxHeadDim: every value slot of a thread) and one of 320 with 160 rotated
// (pairs across slots), the position from the step state or fixed in the record. Three of at
// most four rows from the step state's rows word: the fourth row's q and cache row stay as
// they were, as does every cache row outside Pos … Pos + 2.
func TestFiberAttnPrep(t *testing.T) {
	for _, c := range []struct {
		hd, rot int
		dynPos  bool
	}{{256, 64, true}, {48, 16, true}, {AttnPrepMaxHeadDim, 64, true}, {320, 160, false}} {
		t.Run(fmt.Sprintf("hd%d/rot%d/dynpos%v", c.hd, c.rot, c.dynPos), func(t *testing.T) { fiberAttnPrep(t, c.hd, c.rot, c.dynPos) })
	}
}

func fiberAttnPrep(t *testing.T, hd, rot int, dynPos bool) {
	r := rand.New(rand.NewPCG(61, uint64(hd)))
	const heads, kvHeads, maxRows, rows, pos0, capacity = 4, 2, 4, 3, 9, 16
	const eps = 1e-6
	const rowsW, posW = 2, 1
	kvw := kvHeads * hd
	ldc, ldq := kvw+5, heads*hd+7 // padded rows
	qOff := 11
	kOff, vOff := qOff+2*heads*hd, qOff+2*heads*hd+kvw
	ldx := vOff + kvw + 3 // a padded row
	x := randVec(r, maxRows*ldx, 3)
	qw, kw := randVec(r, hd, 1.5), randVec(r, hd, 1.5)
	kc0, vc0 := randVec(r, capacity*ldc, 1), randVec(r, capacity*ldc, 1)
	rope := model.NewRope(1e7, rot)
	// Reference: each head normed, then rotated at the row's position.
	wantQ := make([]float32, maxRows*ldq)
	for i := range wantQ {
		wantQ[i] = float32(math.NaN())
	}
	wantK, wantV := append([]float32(nil), kc0...), append([]float32(nil), vc0...)
	cos, sin := make([]float32, rot/2), make([]float32, rot/2)
	for row := range rows {
		pos := pos0 + row
		rope.Tables(cos, sin, pos)
		xr := x[row*ldx:]
		for h := range heads {
			dst := wantQ[row*ldq+h*hd : row*ldq+(h+1)*hd]
			model.RMSNorm(dst, xr[qOff+h*2*hd:qOff+h*2*hd+hd], qw, 1, eps)
			rope.Apply(dst, hd, cos, sin)
		}
		for kh := range kvHeads {
			dst := wantK[pos*ldc+kh*hd : pos*ldc+(kh+1)*hd]
			model.RMSNorm(dst, xr[kOff+kh*hd:kOff+(kh+1)*hd], kw, 1, eps)
			rope.Apply(dst, hd, cos, sin)
			copy(wantV[pos*ldc+kh*hd:pos*ldc+(kh+1)*hd], xr[vOff+kh*hd:vOff+(kh+1)*hd])
		}
	}
	ctl := make([]uint32, 64)
	ctl[rowsW] = rows
	p := AttnPrepParams{DoneWord: 10, Rows: maxRows, RowsWord: rowsW, Pos: pos0, PosWord: NoWord, Heads: heads, KVHeads: kvHeads,
		HeadDim: uint32(hd), RotDim: uint32(rot), LdX: uint32(ldx), QOff: uint32(qOff), QStride: uint32(2 * hd),
		KOff: uint32(kOff), VOff: uint32(vOff), LdQ: uint32(ldq), LdC: uint32(ldc), Capacity: capacity, Eps: eps}
	if dynPos {
		ctl[posW] = pos0
		p.Pos, p.PosWord = 0, posW
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var j job
	qb, kb, vb := j.poison(len(wantQ)), j.f32(kc0), j.f32(vc0)
	j.launch(t, "lithos_attn_prep", p.Grid(), j.buf(u32Bytes(ctl)), j.buf(Record(p)), j.f32(x), j.f32(qw), j.f32(kw), j.f32(rope.InvFreq), qb, kb, vb)
	res := j.mustRun(t)
	gotQ := bytesF32(res[qb])
	for i, v := range gotQ {
		if row, c := i/ldq, i%ldq; (row >= rows || c >= heads*hd) && !math.IsNaN(float64(v)) {
			t.Fatalf("q row %d value %d written (%g): past the dynamic row count or in the row's padding", row, c, v)
		}
	}
	// Σx² in float32 by 128 threads (CPU: float64), then the rotation of float32 cos/sin as
	// TestFiberRope: a few ulp of |y| ≲ 10.
	for row := range rows {
		closeTo(t, fmt.Sprintf("q row %d", row), gotQ[row*ldq:row*ldq+heads*hd], wantQ[row*ldq:row*ldq+heads*hd], 4e-6, 1e-5)
	}
	closeTo(t, "kc", bytesF32(res[kb]), wantK, 4e-6, 1e-5)
	gotK := bytesF32(res[kb])
	for i := range kc0 {
		if pos, c := i/ldc, i%ldc; (pos < pos0 || pos >= pos0+rows || c >= kvw) && gotK[i] != kc0[i] {
			t.Fatalf("kc row %d value %d changed outside the rows' positions or in the row's padding", pos, c)
		}
	}
	if !bytes.Equal(res[vb], f32Bytes(wantV)) {
		t.Error("vc: not the value heads copied at the rows' positions (and nothing else)")
	}

	// The done flag set: nothing written.
	ctl[10] = 1
	var j2 job
	qb, kb, vb = j2.poison(len(wantQ)), j2.f32(kc0), j2.f32(vc0)
	j2.launch(t, "lithos_attn_prep", p.Grid(), j2.buf(u32Bytes(ctl)), j2.buf(Record(p)), j2.f32(x), j2.f32(qw), j2.f32(kw), j2.f32(rope.InvFreq), qb, kb, vb)
	res = j2.mustRun(t)
	for i, v := range bytesF32(res[qb]) {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("q value %d written with the done flag set", i)
		}
	}
	if !bytes.Equal(res[kb], f32Bytes(kc0)) || !bytes.Equal(res[vb], f32Bytes(vc0)) {
		t.Error("a cache written with the done flag set")
	}
}

// TestFiberAttnPrepGuard: rows whose positions pass the caches' Capacity rows write nothing and
// set Error = GuardKVAppend, Done = 1 (as lithos_kv_append).
func TestFiberAttnPrepGuard(t *testing.T) {
	const capacity, hd, rows = 6, 32, 2
	const doneW, posW = 10, 1
	r := rand.New(rand.NewPCG(63, 64))
	p := AttnPrepParams{DoneWord: doneW, Rows: rows, RowsWord: NoWord, PosWord: posW, Heads: 2, KVHeads: 1, HeadDim: hd, RotDim: 8,
		LdX: 4 * hd, QOff: 0, QStride: hd, KOff: 2 * hd, VOff: 3 * hd, LdQ: 2 * hd, LdC: hd, Capacity: capacity, Eps: 1e-6}
	x := randVec(r, rows*4*hd, 1)
	w := randVec(r, hd, 1)
	for _, c := range []struct {
		name string
		pos  uint32
		code uint32
	}{{"one row past capacity", capacity - rows + 1, GuardKVAppend}, {"position near 2³² (no wrap)", 0xFFFFFFFF, GuardKVAppend}} {
		t.Run(c.name, func(t *testing.T) {
			ctl := make([]uint32, 64)
			ctl[posW] = c.pos
			cache := canary(4 * capacity * hd)
			var j job
			cb := j.buf(u32Bytes(ctl))
			qb, kb, vb := j.buf(canary(4*rows*2*hd)), j.buf(cache), j.buf(cache)
			j.launch(t, "lithos_attn_prep", p.Grid(), cb, j.buf(Record(p)), j.f32(x), j.f32(w), j.f32(w), j.f32(w[:4]), qb, kb, vb)
			res := j.mustRun(t)
			want := make([]uint32, 64)
			want[posW], want[doneW], want[doneW+1] = c.pos, 1, c.code
			if got := bytesU32(res[cb]); !equalU32(got, want) {
				t.Fatalf("step state\n got %v\nwant %v", got, want)
			}
			if !bytes.Equal(res[qb], canary(4*rows*2*hd)) || !bytes.Equal(res[kb], cache) || !bytes.Equal(res[vb], cache) {
				t.Error("q or a cache written by a launch that failed its guard")
			}
		})
	}
}

// TestFiberAttnMergeGate: Gate 1 multiplies the merged outputs by σ of the gate heads (head h
// at h·GateStride of a row of LdG values: the 27B's interleaved gate heads), as
// runtime/model.SigmoidGate after the merge; Gate 0 gives the plain merge.
func TestFiberAttnMergeGate(t *testing.T) {
	r := rand.New(rand.NewPCG(65, 66))
	s := model.AttnShape{Heads: 4, KVHeads: 2, HeadDim: 48}
	const rows, p0, part, capacity = 3, 40, 32, 48
	kvRow := s.KVHeads * s.HeadDim
	kc, vc := randVec(r, capacity*kvRow, 1), randVec(r, capacity*kvRow, 1)
	q := randVec(r, rows*s.Heads*s.HeadDim, 1)
	ldg := 2*s.Heads*s.HeadDim + 5
	gate := randVec(r, rows*ldg, 4)
	scale := float32(1 / math.Sqrt(float64(s.HeadDim)))
	want := make([]float32, rows*s.Heads*s.HeadDim)
	if err := model.Attend(s, want, q, rows, p0, kc, vc, scale, model.DefaultKeyPartition); err != nil {
		t.Fatal(err)
	}
	gated := append([]float32(nil), want...)
	for row := range rows {
		for h := range s.Heads {
			o := gated[(row*s.Heads+h)*s.HeadDim : (row*s.Heads+h+1)*s.HeadDim]
			model.SigmoidGate(o, gate[row*ldg+h*2*s.HeadDim+s.HeadDim:])
		}
	}
	ctl := make([]uint32, 64)
	ctl[1] = p0
	parts := uint32((p0 + rows + part - 1) / part)
	for _, g := range []uint32{0, 1} {
		ap := AttnParams{DoneWord: NoWord, Rows: rows, RowsWord: NoWord, PosWord: 1, Heads: 4, KVHeads: 2, HeadDim: 48,
			LdQ: 192, LdO: 192, LdKV: uint32(kvRow), Part: part, Parts: parts, Scale: scale,
			Gate: g, LdG: uint32(ldg), GateStride: uint32(2 * s.HeadDim)}
		if err := ap.Validate(); err != nil {
			t.Fatal(err)
		}
		var j job
		c := j.buf(u32Bytes(ctl))
		n := rows * s.Heads * int(parts)
		pm, pl, po, out := j.poison(n), j.poison(n), j.poison(n*s.HeadDim), j.poison(len(want))
		rec := j.buf(Record(ap))
		j.launch(t, "lithos_attn_partial", ap.GridPartial(), c, rec, j.f32(q), j.f32(kc), j.f32(vc), pm, pl, po)
		j.launch(t, "lithos_attn_merge", ap.GridMerge(), c, rec, pm, pl, po, j.f32(gate[s.HeadDim:]), out)
		ref := want
		if g == 1 {
			ref = gated
		}
		// TestFiberAttention's tolerance, then σ's float32 exp and division (ewise's few ulp).
		closeTo(t, fmt.Sprintf("merge gate %d", g), bytesF32(j.mustRun(t)[out]), ref, 1e-5, 2e-6)
	}
}
