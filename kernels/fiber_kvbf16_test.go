package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"lithos/formats/bf16"
	"lithos/runtime/model"
)

// The attention kernels over BF16 KV caches (AttnKernels(true)) against their float32 twins:
// the same code on the same values, so lithos_attn_prep_bf16's caches must be exactly
// formats/bf16.FromFloat32 (PyTorch's cast, checked by its golden) of lithos_attn_prep's, and
// lithos_attn_partial_bf16 over BF16 caches exactly lithos_attn_partial over the caches widened
// to float32 (the widening is exact) — and so within TestFiberAttention's bound of
// runtime/model.Attend over those values.

func u16Bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func bytesU16(b []byte) []uint16 {
	v := make([]uint16, len(b)/2)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return v
}

// toBF16 rounds v to BF16 (formats/bf16.FromFloat32) and returns the bits and their float32
// values.
func toBF16(v []float32) ([]uint16, []float32) {
	h, w := make([]uint16, len(v)), make([]float32, len(v))
	for i, x := range v {
		h[i] = bf16.FromFloat32(x)
		w[i] = bf16.ToFloat32(h[i])
	}
	return h, w
}

// TestFiberAttentionBF16: partials and merge of 3 causal rows at position 70 (and of a 5-row
// non-causal block) over BF16 caches, bit for bit the float32 kernel's over the widened caches,
// and within 1e-5 of runtime/model.Attend over them; head widths 48 and 264 (past the
// partial's ATTN_HQ·32 elements in registers).
func TestFiberAttentionBF16(t *testing.T) {
	_, partial := AttnKernels(true)
	_, partial32 := AttnKernels(false)
	for _, hd := range []int{48, 264} {
		for _, block := range []uint32{0, 1} {
			t.Run(fmt.Sprintf("head_dim%d/block%d", hd, block), func(t *testing.T) {
				r := rand.New(rand.NewPCG(71, uint64(hd)))
				s := model.AttnShape{Heads: 4, KVHeads: 2, HeadDim: hd}
				rows, p0 := 3, 70
				if block != 0 {
					rows, p0 = 5, 75
				}
				const part, capacity = 32, 80
				kvRow, qRow := s.KVHeads*s.HeadDim, s.Heads*s.HeadDim
				kh, kw := toBF16(randVec(r, capacity*kvRow, 2))
				vh, vw := toBF16(randVec(r, capacity*kvRow, 2))
				q := randVec(r, rows*qRow, 1)
				scale := float32(1 / math.Sqrt(float64(hd)))
				want := make([]float32, rows*qRow)
				for row := range rows {
					pos, qr := p0+row, q[row*qRow:(row+1)*qRow]
					if block != 0 {
						pos = p0
					}
					if err := model.Attend(s, want[row*qRow:(row+1)*qRow], qr, 1, pos, kw, vw, scale, model.DefaultKeyPartition); err != nil {
						t.Fatal(err)
					}
				}
				ctl := make([]uint32, 64)
				ctl[1] = uint32(p0)
				parts := uint32((capacity + part - 1) / part)
				ap := AttnParams{DoneWord: NoWord, Rows: uint32(rows), RowsWord: NoWord, PosWord: 1, Heads: 4, KVHeads: 2, HeadDim: uint32(hd),
					LdQ: uint32(qRow), LdO: uint32(qRow), LdKV: uint32(kvRow), Part: part, Parts: parts, Scale: scale, Block: block}
				if err := ap.Validate(); err != nil {
					t.Fatal(err)
				}
				var j job
				c, rec, qb := j.buf(u32Bytes(ctl)), j.buf(Record(ap)), j.f32(q)
				n := rows * s.Heads * int(parts)
				outs := map[string]int{}
				for _, v := range []struct {
					name   string
					kb, vb int
				}{{partial, j.buf(u16Bytes(kh)), j.buf(u16Bytes(vh))}, {partial32, j.f32(kw), j.f32(vw)}} {
					pm, pl, po, out := j.poison(n), j.poison(n), j.poison(n*hd), j.poison(rows*qRow)
					j.launch(t, v.name, ap.GridPartial(), c, rec, qb, v.kb, v.vb, pm, pl, po)
					j.launch(t, "lithos_attn_merge", ap.GridMerge(), c, rec, pm, pl, po, out, out)
					outs[v.name] = out
				}
				res := j.mustRun(t)
				got, got32 := bytesF32(res[outs[partial]]), bytesF32(res[outs[partial32]])
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(got32[i]) {
						t.Fatalf("out[%d] = %g over the BF16 caches, %g over them widened to float32", i, got[i], got32[i])
					}
				}
				closeTo(t, "attention over BF16 caches", got, want, 1e-5, 2e-6)
			})
		}
	}
}

// TestFiberAttnPrepBF16: lithos_attn_prep_bf16 on the 27B's head (256 values, 64 rotated) and
// a narrow one: q bit for bit lithos_attn_prep's, the rows' cache entries exactly
// FromFloat32 of its float32 keys and of the values (among them ties, overflow, infinities,
// NaNs, a subnormal), every other cache entry (other positions, the rows' padding) as it was.
func TestFiberAttnPrepBF16(t *testing.T) {
	prep, _ := AttnKernels(true)
	prep32, _ := AttnKernels(false)
	for _, c := range []struct{ hd, rot int }{{256, 64}, {48, 16}} {
		t.Run(fmt.Sprintf("hd%d", c.hd), func(t *testing.T) {
			hd, rot := c.hd, c.rot
			r := rand.New(rand.NewPCG(73, uint64(hd)))
			const heads, kvHeads, rows, pos0, capacity = 4, 2, 3, 9, 16
			kvw := kvHeads * hd
			ldc, ldq := kvw+5, heads*hd+7
			qOff := 11
			kOff, vOff := qOff+2*heads*hd, qOff+2*heads*hd+kvw
			ldx := vOff + kvw + 3
			x := randVec(r, rows*ldx, 3)
			// Values the rounding must get right, copied into the value cache as they are:
			// ties (kept part even, odd; negative), the largest finite float32 (rounds to
			// +Inf), infinities, NaNs (quiet, signalling: made quiet), a subnormal.
			special := []uint32{0x3F808000, 0x3F818000, 0xBF818000, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00001, 0xFF800001, 0x00018000, 0x3F80FFFF}
			for row := range rows {
				for i, b := range special {
					x[row*ldx+vOff+i*(kvw/len(special))+row] = math.Float32frombits(b)
				}
			}
			qw, kw := randVec(r, hd, 1.5), randVec(r, hd, 1.5)
			kc0, _ := toBF16(randVec(r, capacity*ldc, 1))
			vc0, _ := toBF16(randVec(r, capacity*ldc, 1))
			rope := model.NewRope(1e7, rot)
			p := AttnPrepParams{DoneWord: NoWord, Rows: rows, RowsWord: NoWord, Pos: pos0, PosWord: NoWord, Heads: heads, KVHeads: kvHeads,
				HeadDim: uint32(hd), RotDim: uint32(rot), LdX: uint32(ldx), QOff: uint32(qOff), QStride: uint32(2 * hd),
				KOff: uint32(kOff), VOff: uint32(vOff), LdQ: uint32(ldq), LdC: uint32(ldc), Capacity: capacity, Eps: 1e-6}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			var j job
			ctl, rec, xb := j.buf(u32Bytes(make([]uint32, 64))), j.buf(Record(p)), j.f32(x)
			qwb, kwb, fb := j.f32(qw), j.f32(kw), j.f32(rope.InvFreq)
			q16, k16, v16 := j.poison(rows*ldq), j.buf(u16Bytes(kc0)), j.buf(u16Bytes(vc0))
			q32, k32, v32 := j.poison(rows*ldq), j.poison(capacity*ldc), j.poison(capacity*ldc)
			j.launch(t, prep, p.Grid(), ctl, rec, xb, qwb, kwb, fb, q16, k16, v16)
			j.launch(t, prep32, p.Grid(), ctl, rec, xb, qwb, kwb, fb, q32, k32, v32)
			res := j.mustRun(t)
			if string(res[q16]) != string(res[q32]) {
				t.Fatal("q differs between the BF16 and float32 cache variants")
			}
			gk, gv := bytesU16(res[k16]), bytesU16(res[v16])
			wk, wv := bytesF32(res[k32]), bytesF32(res[v32])
			for i := range gk {
				pos, col := i/ldc, i%ldc
				if pos >= pos0 && pos < pos0+rows && col < kvw {
					if want := bf16.FromFloat32(wk[i]); gk[i] != want {
						t.Fatalf("kc row %d value %d: %#04x, FromFloat32 of the float32 variant's %g is %#04x", pos, col, gk[i], wk[i], want)
					}
					xv := x[(pos-pos0)*ldx+vOff+col]
					if want := bf16.FromFloat32(xv); gv[i] != want || math.Float32bits(wv[i]) != math.Float32bits(xv) {
						t.Fatalf("vc row %d value %d: %#04x, want %#04x (FromFloat32 of the value)", pos, col, gv[i], want)
					}
					continue
				}
				if gk[i] != kc0[i] || gv[i] != vc0[i] {
					t.Fatalf("cache entry %d (row %d, value %d) changed outside the rows' positions or in the row's padding", i, pos, col)
				}
			}
		})
	}
}
