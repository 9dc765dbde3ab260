// Package blm owns the block-lane-major (BLM) layout: how one weight matrix's stored codes and
// block scales are re-laid so that a 32-lane SIMD group (Apple) or warp (NVIDIA) reading 16 bytes
// per lane streams 512 contiguous bytes (ARCHITECTURE.md §3.2; the reference design is
// lithos-metal.md §2.1; the contract is docs/blm.md).
//
// A matrix [N, K] (row-major, [out, in]) is cut into blocks of R = 16 rows, the last one padded
// with zero rows. Lane-row units: Lanes lanes share one row (32 normally; 16, 8, 4 or 2 for
// narrow matrices, whose rows are then folded so that Fold = 32/Lanes rows sit side by side in
// one step of the SIMD group); stripe s of a row is columns [s·W, (s+1)·W) and its unit is
//
//	[payload: the stripe's codes, P bytes | scale slots: every block scale the stripe touches | zeros to 16 B]
//
// U bytes in all. A block is R/Fold steps; the 16-byte word j of the unit of (step t, lane l)
// is at ((t·U/16 + j)·32 + l)·16 within the block, with l = (row mod Fold)·Lanes + s. Tensor
// scales (NVFP4 weight_scale_2, FP8 weight_scale) are not in the layout: they are per-row
// metadata (Stack.RowScales), applied once per output row.
//
// What it offers: Geometry (sizes and padding, from NewGeometry), addresses of units, elements
// and scales, PackBlock/UnpackBlock for one row block, streaming Pack/Unpack over io.Reader and
// io.Writer with bounded memory (one batch of blocks), row stacking (Stack: concatenation, or
// interleaving in chunks for a fused SwiGLU epilogue), and GEMV, the plain-Go reference of the
// matrix × rows product over packed bytes that CPU and GPU kernels must agree with.
//
// Unpacking gives back the stored bytes exactly. It is strict: padding must be zero and every
// copy of a block scale shared by several lanes must be identical, so whatever Unpack accepts
// packs back to the same bytes.
//
// Imports: lithos/formats and its codecs (bf16, f16, fp8, e2m1 for GEMV), standard library.
package blm
