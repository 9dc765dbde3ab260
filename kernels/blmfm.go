package kernels

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"runtime"
	"sync"

	"lithos/formats"
	"lithos/pack/blm"
)

// BLMFragmentMajorBytes is the size of g's fragment-major copy (BLMFragmentMajor): per block,
// nq quad-steps of 1024 bytes of unit words, and for NVFP4 128 bytes of block-scale pairs each,
// nq = ⌈Lanes·PayloadWords/4⌉ (PayloadWords = ⌈PayloadBytes/16⌉). It is at most g.TotalBytes for
// every geometry BLMFragmentMajor accepts.
func BLMFragmentMajorBytes(g blm.Geometry) int64 {
	per := int64(1024)
	if g.Format == formats.NVFP4 {
		per += 128
	}
	return g.Blocks * blmQuadSteps(g) * per
}

// blmQuadSteps is the quad-steps per block of the tensor-core path: ⌈Lanes·PayloadWords/4⌉.
func blmQuadSteps(g blm.Geometry) int64 {
	uwp := int64(g.PayloadBytes+15) / 16
	return (int64(g.Lanes)*uwp + 3) / 4
}

// BLMFragmentMajor returns the fragment-major copy of packed, the BLM bytes of g
// (g.TotalBytes): what the tensor-core path of the BLM kernels (kernels/ops/blm.kern, BLM_MMA
// with the weight ring) reads from a record with Layout BLMLayoutFragment. For block b and
// quad-step u (< nq) of the block, at b·(nq·1024 + nq·128 for NVFP4) + u·1024: the 16-byte unit
// word that lane l = 4·g + q loads for row g of the block (512 bytes, lane order), then the one
// it loads for row g + 8; after the nq·1024 bytes of a block, for NVFP4, the lane's two
// block-scale bytes of that word (row g in the low 16 bits, row g + 8 in the high) as 128
// bytes per quad-step. Lane (g, q) of quad-step u loads piece i = 4u + q (word i / Lanes of
// stripe i mod Lanes, as the kernel: docs/blm.md §5 for where rows and stripes are); pieces past
// Lanes·PayloadWords are zeros. Every ring copy of the kernel is then a contiguous run of 512
// (or 128) bytes instead of eight 64-byte pieces a row apart (docs/performance.md §3.3i).
//
// The copy holds the same codes and scales (less the unit padding). Errors: a geometry that
// fails blm.Geometry.Check, a format without a tensor-core kernel, NVFP4 whose stripes start
// inside a group (the kernel reads their scales from the units: GuardBLMLayout), a copy larger
// than packed (NVFP4 with narrow stripes, e.g. 16 or 48 columns: the caller keeps the BLM
// layout), packed of another size. The blocks are rewritten by up to GOMAXPROCS goroutines.
func BLMFragmentMajor(g blm.Geometry, packed []byte) ([]byte, error) {
	if err := g.Check(); err != nil {
		return nil, fmt.Errorf("kernels: fragment-major copy: %w", err)
	}
	if _, ok := blmFormatCode(g.Format); !ok {
		return nil, fmt.Errorf("kernels: fragment-major copy of a %s matrix: no BLM kernel for the format", g.Format)
	}
	nvfp4 := g.Format == formats.NVFP4
	if nvfp4 && (g.GroupSize != 16 || g.Stripe%16 != 0) {
		return nil, fmt.Errorf("kernels: fragment-major copy of an NVFP4 matrix with group %d and stripe %d: the stripes must be whole 16-column groups", g.GroupSize, g.Stripe)
	}
	if int64(len(packed)) != g.TotalBytes {
		return nil, fmt.Errorf("kernels: fragment-major copy: %d packed bytes, want %d", len(packed), g.TotalBytes)
	}
	size := BLMFragmentMajorBytes(g)
	if size > g.TotalBytes {
		return nil, fmt.Errorf("kernels: fragment-major copy of %d bytes is larger than the %d packed bytes", size, g.TotalBytes)
	}
	L := int64(g.Lanes)
	F := 32 / L
	uw := int64(g.UnitBytes) / 16
	uwp := int64(g.PayloadBytes+15) / 16
	nitems := L * uwp
	nq := blmQuadSteps(g)
	lsh := uint(bits.TrailingZeros64(uint64(L)))
	blockBytes := (16 / F) * uw * 512
	per := nq * 1024
	if nvfp4 {
		per += nq * 128
	}
	out := make([]byte, size)
	block := func(b int64) {
		src := packed[b*blockBytes : (b+1)*blockBytes]
		dst := out[b*per : (b+1)*per]
		for u := int64(0); u < nq; u++ {
			for lane := int64(0); lane < 32; lane++ {
				gg, q := lane>>2, lane&3
				it := 4*u + q
				if it >= nitems {
					continue
				}
				j, s := it>>lsh, it&(L-1)
				baseA := ((gg/F)*uw*32 + (gg%F)*L) * 16
				baseB := (((gg+8)/F)*uw*32 + ((gg+8)%F)*L) * 16
				o := (j*32 + s) * 16
				copy(dst[u*1024+lane*16:u*1024+lane*16+16], src[baseA+o:baseA+o+16])
				copy(dst[u*1024+512+lane*16:u*1024+512+lane*16+16], src[baseB+o:baseB+o+16])
				if nvfp4 {
					sbi := int64(g.PayloadBytes) + 2*j
					so := ((sbi>>4)*32+s)*16 + (sbi & 15)
					pair := uint32(binary.LittleEndian.Uint16(src[baseA+so:])) | uint32(binary.LittleEndian.Uint16(src[baseB+so:]))<<16
					binary.LittleEndian.PutUint32(dst[nq*1024+u*128+lane*4:], pair)
				}
			}
		}
	}
	workers := int64(min(runtime.GOMAXPROCS(0), 16))
	workers = max(min(workers, g.Blocks/64), 1)
	var wg sync.WaitGroup
	for i := int64(0); i < workers; i++ {
		wg.Add(1)
		go func(lo, hi int64) {
			defer wg.Done()
			for b := lo; b < hi; b++ {
				block(b)
			}
		}(i*g.Blocks/workers, (i+1)*g.Blocks/workers)
	}
	wg.Wait()
	return out, nil
}
