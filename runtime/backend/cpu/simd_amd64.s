//go:build amd64 && !purego

#include "textflag.h"

// AVX2 + FMA kernels of the packed matrix product (simd.go). Decoders write exact float32
// weights (the values the Go decoders write); the dot kernels accumulate w·x with one
// 8-lane FMA accumulator per (weight row, activation row) pair and reduce each accumulator
// the same way ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), so a row's result does not depend on
// how many activation rows share the call.

// E2M1 magnitudes of codes 0…7.
DATA e2m1mag<>+0(SB)/4, $0x00000000  // 0
DATA e2m1mag<>+4(SB)/4, $0x3f000000  // 0.5
DATA e2m1mag<>+8(SB)/4, $0x3f800000  // 1
DATA e2m1mag<>+12(SB)/4, $0x3fc00000 // 1.5
DATA e2m1mag<>+16(SB)/4, $0x40000000 // 2
DATA e2m1mag<>+20(SB)/4, $0x40400000 // 3
DATA e2m1mag<>+24(SB)/4, $0x40800000 // 4
DATA e2m1mag<>+28(SB)/4, $0x40c00000 // 6
GLOBL e2m1mag<>(SB), RODATA|NOPTR, $32

DATA consts<>+0(SB)/4, $0x80000000 // sign bit
DATA consts<>+4(SB)/4, $0x0f0f0f0f // nibble mask
DATA consts<>+8(SB)/4, $0x0000007f // E4M3 magnitude bits
DATA consts<>+12(SB)/4, $0x00000080 // E4M3 sign bit
DATA consts<>+16(SB)/4, $0x7b800000 // 2^120: rebias E4M3 (bias 7) placed in float32 bits (bias 127)
GLOBL consts<>(SB), RODATA|NOPTR, $20

// REDUCE4 writes the sums of the 8 lanes of a, b, c, d to out[0…3], each as
// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). Clobbers a, c, Y8, Y9.
#define REDUCE4(a, b, c, d, xa, out) \
	VHADDPS b, a, a; \
	VHADDPS d, c, c; \
	VHADDPS c, a, a; \
	VEXTRACTF128 $1, a, X8; \
	VADDPS X8, xa, xa; \
	VMOVUPS xa, out

// FMA8 adds w·x_t (8 columns at byte offset off of each row) to accumulator Y0+t for the 8
// rows at R11 (rows 0–3) and R12 (rows 4–7), R10 the row stride and R13 three strides.
#define FMA8(w, off) \
	VFMADD231PS off(R11), w, Y0; \
	VFMADD231PS off(R11)(R10*1), w, Y1; \
	VFMADD231PS off(R11)(R10*2), w, Y2; \
	VFMADD231PS off(R11)(R13*1), w, Y3; \
	VFMADD231PS off(R12), w, Y4; \
	VFMADD231PS off(R12)(R10*1), w, Y5; \
	VFMADD231PS off(R12)(R10*2), w, Y6; \
	VFMADD231PS off(R12)(R13*1), w, Y7

// DOT8PROLOGUE loads the arguments of the fused 8-row kernels and zeroes the accumulators.
#define DOT8PROLOGUE \
	MOVQ base+8(FP), SI; \
	MOVQ ents+16(FP), BX; \
	MOVQ n+24(FP), CX; \
	MOVQ x+32(FP), DI; \
	MOVQ k+40(FP), R10; \
	SHLQ $2, R10; \
	LEAQ (R10)(R10*2), R13; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7

// DOT8EPILOGUE reduces the accumulators into out and returns.
#define DOT8EPILOGUE \
	MOVQ out+48(FP), DI; \
	REDUCE4(Y0, Y1, Y2, Y3, X0, (DI)); \
	REDUCE4(Y4, Y5, Y6, Y7, X4, 16(DI)); \
	VZEROUPPER; \
	RET

// func nvfp4DecodeAVX2(dst *float32, base *byte, ents *int32, n int, scales *float32)
//
// For each of n entries {code offset, scale offset, column} (int32 each): the 8 code bytes
// at base+code offset (16 E2M1 codes, even column in the low nibble) times the block scale
// scales[base[scale offset]] are written to dst[column … column+15].
TEXT ·nvfp4DecodeAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ base+8(FP), SI
	MOVQ ents+16(FP), BX
	MOVQ n+24(FP), CX
	MOVQ scales+32(FP), R8
	TESTQ CX, CX
	JLE nvdone
	VMOVUPS e2m1mag<>(SB), Y15
	VPBROADCASTD consts<>+0(SB), Y14
	VPBROADCASTD consts<>+4(SB), X13

nvloop:
	MOVLQSX 0(BX), AX
	MOVLQSX 4(BX), DX
	MOVLQSX 8(BX), R9
	MOVBLZX (SI)(DX*1), DX
	VBROADCASTSS (R8)(DX*4), Y12
	VMOVQ (SI)(AX*1), X0
	VPSRLW $4, X0, X1
	VPUNPCKLBW X1, X0, X0
	VPAND X13, X0, X0
	VPMOVZXBD X0, Y1
	VPSRLDQ $8, X0, X2
	VPMOVZXBD X2, Y2
	VPERMPS Y15, Y1, Y3
	VPERMPS Y15, Y2, Y4
	VPSLLD $28, Y1, Y1
	VPSLLD $28, Y2, Y2
	VPAND Y14, Y1, Y1
	VPAND Y14, Y2, Y2
	VPOR Y1, Y3, Y3
	VPOR Y2, Y4, Y4
	VMULPS Y12, Y3, Y3
	VMULPS Y12, Y4, Y4
	VMOVUPS Y3, (DI)(R9*4)
	VMOVUPS Y4, 32(DI)(R9*4)
	ADDQ $12, BX
	DECQ CX
	JNZ nvloop
	VZEROUPPER

nvdone:
	RET

// func fp8DecodeAVX2(dst *float32, base *byte, ents *int32, n int)
//
// For each of n entries {offset, column}: the 16 E4M3 codes at base+offset, decoded exactly,
// are written to dst[column … column+15]. A code's magnitude bits shifted into the float32
// exponent/mantissa position and multiplied by 2^120 give its value (subnormals included:
// the float32 is then subnormal and the product exact); 0x7F/0xFF give NaN.
TEXT ·fp8DecodeAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ base+8(FP), SI
	MOVQ ents+16(FP), BX
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JLE f8done
	VPBROADCASTD consts<>+8(SB), Y15
	VPBROADCASTD consts<>+12(SB), Y14
	VBROADCASTSS consts<>+16(SB), Y13

f8loop:
	MOVLQSX 0(BX), AX
	MOVLQSX 4(BX), R9
	VPMOVZXBD (SI)(AX*1), Y0
	VPMOVZXBD 8(SI)(AX*1), Y1
	VPAND Y15, Y0, Y2
	VPAND Y15, Y1, Y3
	VPCMPEQD Y15, Y2, Y4
	VPCMPEQD Y15, Y3, Y5
	VPSLLD $20, Y2, Y2
	VPSLLD $20, Y3, Y3
	VMULPS Y13, Y2, Y2
	VMULPS Y13, Y3, Y3
	VPAND Y14, Y0, Y0
	VPAND Y14, Y1, Y1
	VPSLLD $24, Y0, Y0
	VPSLLD $24, Y1, Y1
	VPOR Y0, Y2, Y2
	VPOR Y1, Y3, Y3
	VPOR Y4, Y2, Y2
	VPOR Y5, Y3, Y3
	VMOVUPS Y2, (DI)(R9*4)
	VMOVUPS Y3, 32(DI)(R9*4)
	ADDQ $8, BX
	DECQ CX
	JNZ f8loop
	VZEROUPPER

f8done:
	RET

// func bf16DecodeAVX2(dst *float32, base *byte, ents *int32, n int)
//
// For each of n entries {offset, column}: the 8 BF16 values at base+offset are written to
// dst[column … column+7].
TEXT ·bf16DecodeAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ base+8(FP), SI
	MOVQ ents+16(FP), BX
	MOVQ n+24(FP), CX
	TESTQ CX, CX
	JLE bfdone

bfloop:
	MOVLQSX 0(BX), AX
	MOVLQSX 4(BX), R9
	VPMOVZXWD (SI)(AX*1), Y0
	VPSLLD $16, Y0, Y0
	VMOVUPS Y0, (DI)(R9*4)
	ADDQ $8, BX
	DECQ CX
	JNZ bfloop
	VZEROUPPER

bfdone:
	RET

// func dot4x2AVX2(w *float32, k int, x0, x1 *float32, out *[8]float32)
//
// out[i] = Σ_c w[i·k + c]·x0[c], out[4+i] = Σ_c w[i·k + c]·x1[c] for i < 4; k is a positive
// multiple of 8.
TEXT ·dot4x2AVX2(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ k+8(FP), CX
	MOVQ x0+16(FP), R8
	MOVQ x1+24(FP), R9
	MOVQ out+32(FP), DI
	LEAQ (SI)(CX*4), R10
	LEAQ (R10)(CX*4), R11
	LEAQ (R11)(CX*4), R12
	SHRQ $3, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX

d42loop:
	VMOVUPS (R8)(AX*4), Y8
	VMOVUPS (R9)(AX*4), Y9
	VMOVUPS (SI)(AX*4), Y10
	VMOVUPS (R10)(AX*4), Y11
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y4
	VFMADD231PS Y11, Y8, Y1
	VFMADD231PS Y11, Y9, Y5
	VMOVUPS (R11)(AX*4), Y10
	VMOVUPS (R12)(AX*4), Y11
	VFMADD231PS Y10, Y8, Y2
	VFMADD231PS Y10, Y9, Y6
	VFMADD231PS Y11, Y8, Y3
	VFMADD231PS Y11, Y9, Y7
	ADDQ $8, AX
	DECQ CX
	JNZ d42loop
	REDUCE4(Y0, Y1, Y2, Y3, X0, (DI))
	REDUCE4(Y4, Y5, Y6, Y7, X4, 16(DI))
	VZEROUPPER
	RET

// func dot4x1AVX2(w *float32, k int, x *float32, out *[4]float32)
//
// out[i] = Σ_c w[i·k + c]·x[c] for i < 4, accumulated and reduced as dot4x2AVX2 does;
// k is a positive multiple of 8.
TEXT ·dot4x1AVX2(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ k+8(FP), CX
	MOVQ x+16(FP), R8
	MOVQ out+24(FP), DI
	LEAQ (SI)(CX*4), R10
	LEAQ (R10)(CX*4), R11
	LEAQ (R11)(CX*4), R12
	SHRQ $3, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ AX, AX

d41loop:
	VMOVUPS (R8)(AX*4), Y8
	VFMADD231PS (SI)(AX*4), Y8, Y0
	VFMADD231PS (R10)(AX*4), Y8, Y1
	VFMADD231PS (R11)(AX*4), Y8, Y2
	VFMADD231PS (R12)(AX*4), Y8, Y3
	ADDQ $8, AX
	DECQ CX
	JNZ d41loop
	REDUCE4(Y0, Y1, Y2, Y3, X0, (DI))
	VZEROUPPER
	RET

// Fused decode and 8-row products: one weight row against 8 activation rows x, x + k, …,
// x + 7k (k floats apart). Each piece of the row is decoded into registers as the decoders
// above write it and multiplied into 8 accumulators, one per activation row, 8 columns per
// FMA in column order; the accumulators are reduced as REDUCE4 does. So out[t] is bit for bit
// what the decode-then-dot path (dot4x2AVX2, dot4x1AVX2) gives for the same row and x + t·k.
// The pieces must cover columns [0, k) in increasing order.

// func nvfp4Dot8AVX2(scales *float32, base *byte, ents *int32, n int, x *float32, k int, out *[8]float32)
TEXT ·nvfp4Dot8AVX2(SB), NOSPLIT, $0-56
	DOT8PROLOGUE
	MOVQ scales+0(FP), R8
	TESTQ CX, CX
	JLE nd8done
	VMOVUPS e2m1mag<>(SB), Y15
	VPBROADCASTD consts<>+0(SB), Y14
	VPBROADCASTD consts<>+4(SB), X13

nd8loop:
	MOVLQSX 0(BX), AX
	MOVLQSX 4(BX), DX
	MOVLQSX 8(BX), R9
	MOVBLZX (SI)(DX*1), DX
	VBROADCASTSS (R8)(DX*4), Y12
	VMOVQ (SI)(AX*1), X10
	VPSRLW $4, X10, X11
	VPUNPCKLBW X11, X10, X10
	VPAND X13, X10, X10
	VPMOVZXBD X10, Y11
	VPSRLDQ $8, X10, X10
	VPMOVZXBD X10, Y10
	VPERMPS Y15, Y11, Y8
	VPERMPS Y15, Y10, Y9
	VPSLLD $28, Y11, Y11
	VPSLLD $28, Y10, Y10
	VPAND Y14, Y11, Y11
	VPAND Y14, Y10, Y10
	VPOR Y11, Y8, Y8
	VPOR Y10, Y9, Y9
	VMULPS Y12, Y8, Y8
	VMULPS Y12, Y9, Y9
	LEAQ (DI)(R9*4), R11
	LEAQ (R11)(R10*4), R12
	FMA8(Y8, 0)
	FMA8(Y9, 32)
	ADDQ $12, BX
	DECQ CX
	JNZ nd8loop

nd8done:
	DOT8EPILOGUE

// func fp8Dot8AVX2(scales *float32, base *byte, ents *int32, n int, x *float32, k int, out *[8]float32)
TEXT ·fp8Dot8AVX2(SB), NOSPLIT, $0-56
	DOT8PROLOGUE
	TESTQ CX, CX
	JLE fd8done
	VPBROADCASTD consts<>+8(SB), Y15
	VPBROADCASTD consts<>+12(SB), Y14
	VBROADCASTSS consts<>+16(SB), Y13

fd8loop:
	MOVLQSX 0(BX), AX
	MOVLQSX 4(BX), R9
	VPMOVZXBD (SI)(AX*1), Y8
	VPMOVZXBD 8(SI)(AX*1), Y9
	VPAND Y15, Y8, Y10
	VPAND Y15, Y9, Y11
	VPCMPEQD Y15, Y10, Y12
	VPSLLD $20, Y10, Y10
	VMULPS Y13, Y10, Y10
	VPOR Y12, Y10, Y10
	VPCMPEQD Y15, Y11, Y12
	VPSLLD $20, Y11, Y11
	VMULPS Y13, Y11, Y11
	VPOR Y12, Y11, Y11
	VPAND Y14, Y8, Y8
	VPAND Y14, Y9, Y9
	VPSLLD $24, Y8, Y8
	VPSLLD $24, Y9, Y9
	VPOR Y10, Y8, Y8
	VPOR Y11, Y9, Y9
	LEAQ (DI)(R9*4), R11
	LEAQ (R11)(R10*4), R12
	FMA8(Y8, 0)
	FMA8(Y9, 32)
	ADDQ $8, BX
	DECQ CX
	JNZ fd8loop

fd8done:
	DOT8EPILOGUE

// func bf16Dot8AVX2(scales *float32, base *byte, ents *int32, n int, x *float32, k int, out *[8]float32)
TEXT ·bf16Dot8AVX2(SB), NOSPLIT, $0-56
	DOT8PROLOGUE
	TESTQ CX, CX
	JLE bd8done

bd8loop:
	MOVLQSX 0(BX), AX
	MOVLQSX 4(BX), R9
	VPMOVZXWD (SI)(AX*1), Y8
	VPSLLD $16, Y8, Y8
	LEAQ (DI)(R9*4), R11
	LEAQ (R11)(R10*4), R12
	FMA8(Y8, 0)
	ADDQ $8, BX
	DECQ CX
	JNZ bd8loop

bd8done:
	DOT8EPILOGUE

