//go:build amd64 && !purego

#include "textflag.h"

// AVX-512 (F, VL, BW) kernels of the packed product (simd.go): the same products as the AVX2
// kernels with 16-lane accumulators. Every kernel here accumulates a (weight row, activation
// row) pair in one 16-lane accumulator, 16 columns per FMA in column order, and reduces it as
// FOLD16 then REDUCE4 do, so a matrix served by these kernels gives a row the same bits
// whatever the number of activation rows (the AVX2 kernels' order differs; a matrix uses one
// set).

// E2M1 values of codes 0…15 (the sign in bit 3: code 8 is −0).
DATA e2m1all<>+0(SB)/4, $0x00000000
DATA e2m1all<>+4(SB)/4, $0x3f000000
DATA e2m1all<>+8(SB)/4, $0x3f800000
DATA e2m1all<>+12(SB)/4, $0x3fc00000
DATA e2m1all<>+16(SB)/4, $0x40000000
DATA e2m1all<>+20(SB)/4, $0x40400000
DATA e2m1all<>+24(SB)/4, $0x40800000
DATA e2m1all<>+28(SB)/4, $0x40c00000
DATA e2m1all<>+32(SB)/4, $0x80000000
DATA e2m1all<>+36(SB)/4, $0xbf000000
DATA e2m1all<>+40(SB)/4, $0xbf800000
DATA e2m1all<>+44(SB)/4, $0xbfc00000
DATA e2m1all<>+48(SB)/4, $0xc0000000
DATA e2m1all<>+52(SB)/4, $0xc0400000
DATA e2m1all<>+56(SB)/4, $0xc0800000
DATA e2m1all<>+60(SB)/4, $0xc0c00000
GLOBL e2m1all<>(SB), RODATA|NOPTR, $64

DATA c512<>+0(SB)/4, $0x0f0f0f0f // nibble mask
DATA c512<>+4(SB)/4, $0x0000007f // E4M3 magnitude bits
DATA c512<>+8(SB)/4, $0x00000080 // E4M3 sign bit
DATA c512<>+12(SB)/4, $0x7b800000 // 2^120
DATA c512<>+16(SB)/4, $0xffffffff // NaN
GLOBL c512<>(SB), RODATA|NOPTR, $20

// FOLD16 adds the upper 8 lanes of z into its lower 8 (y, the same register's lower half):
// lane i becomes l_i + l_{i+8}. Clobbers Y16.
#define FOLD16(z, y) \
	VEXTRACTF64X4 $1, z, Y16; \
	VADDPS Y16, y, y

// R4 writes the sums of the 8 lanes of a, b, c, d to out[0…3], each as
// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) (the AVX2 kernels' REDUCE4). Clobbers a, c, X16.
#define R4(a, b, c, d, xa, out) \
	VHADDPS b, a, a; \
	VHADDPS d, c, c; \
	VHADDPS c, a, a; \
	VEXTRACTF32X4 $1, a, X16; \
	VADDPS X16, xa, xa; \
	VMOVUPS xa, out

// X2x8 multiplies the decoded pieces Z18 (row 0) and Z19 (row 1) into the 16 accumulators:
// x row t's 16 columns are at SI (+ t·R10 for t < 4) and R9 (+ (t−4)·R10); R13 = 3·R10.
#define X2x8 \
	VMOVUPS (SI), Z20; \
	VFMADD231PS Z20, Z18, Z0; \
	VFMADD231PS Z20, Z19, Z8; \
	VMOVUPS (SI)(R10*1), Z20; \
	VFMADD231PS Z20, Z18, Z1; \
	VFMADD231PS Z20, Z19, Z9; \
	VMOVUPS (SI)(R10*2), Z20; \
	VFMADD231PS Z20, Z18, Z2; \
	VFMADD231PS Z20, Z19, Z10; \
	VMOVUPS (SI)(R13*1), Z20; \
	VFMADD231PS Z20, Z18, Z3; \
	VFMADD231PS Z20, Z19, Z11; \
	VMOVUPS (R9), Z20; \
	VFMADD231PS Z20, Z18, Z4; \
	VFMADD231PS Z20, Z19, Z12; \
	VMOVUPS (R9)(R10*1), Z20; \
	VFMADD231PS Z20, Z18, Z5; \
	VFMADD231PS Z20, Z19, Z13; \
	VMOVUPS (R9)(R10*2), Z20; \
	VFMADD231PS Z20, Z18, Z6; \
	VFMADD231PS Z20, Z19, Z14; \
	VMOVUPS (R9)(R13*1), Z20; \
	VFMADD231PS Z20, Z18, Z7; \
	VFMADD231PS Z20, Z19, Z15

#define P2x8 \
	MOVQ bases+8(FP), AX; \
	MOVQ 0(AX), R11; \
	MOVQ 8(AX), R12; \
	MOVQ ents+16(FP), BX; \
	MOVQ n+24(FP), CX; \
	MOVQ x+32(FP), DI; \
	MOVQ k+40(FP), R10; \
	SHLQ $2, R10; \
	LEAQ (R10)(R10*2), R13; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15

#define E2x8 \
	MOVQ out+48(FP), DI; \
	FOLD16(Z0, Y0); \
	FOLD16(Z1, Y1); \
	FOLD16(Z2, Y2); \
	FOLD16(Z3, Y3); \
	FOLD16(Z4, Y4); \
	FOLD16(Z5, Y5); \
	FOLD16(Z6, Y6); \
	FOLD16(Z7, Y7); \
	FOLD16(Z8, Y8); \
	FOLD16(Z9, Y9); \
	FOLD16(Z10, Y10); \
	FOLD16(Z11, Y11); \
	FOLD16(Z12, Y12); \
	FOLD16(Z13, Y13); \
	FOLD16(Z14, Y14); \
	FOLD16(Z15, Y15); \
	R4(Y0, Y1, Y2, Y3, X0, (DI)); \
	R4(Y4, Y5, Y6, Y7, X4, 16(DI)); \
	R4(Y8, Y9, Y10, Y11, X8, 32(DI)); \
	R4(Y12, Y13, Y14, Y15, X12, 48(DI)); \
	VZEROUPPER; \
	RET

// NV16 decodes the NVFP4 group at code offset AX / scale offset DX of the row at base into
// w (16 columns): E2M1 value (Z16, all 16 codes) times the block scale (R8: E4M3 table).
// X17 is the nibble mask; clobbers R14, Z21–Z23.
#define NV16(base, w) \
	MOVBLZX (base)(DX*1), R14; \
	VBROADCASTSS (R8)(R14*4), Z21; \
	VMOVQ (base)(AX*1), X22; \
	VPSRLW $4, X22, X23; \
	VPUNPCKLBW X23, X22, X22; \
	VPANDD X17, X22, X22; \
	VPMOVZXBD X22, Z23; \
	VPERMPS Z16, Z23, w; \
	VMULPS Z21, w, w

// F16 decodes the 16 E4M3 codes at offset AX of the row at base into w, as fp8DecodeAVX2
// does: Z24 = 0x7F, Z25 = 0x80, Z26 = 2^120, Z27 = all ones; clobbers Z21, Z22, K1.
#define F16(base, w) \
	VPMOVZXBD (base)(AX*1), Z21; \
	VPANDD Z24, Z21, Z22; \
	VPCMPEQD Z24, Z22, K1; \
	VPSLLD $20, Z22, Z22; \
	VMULPS Z26, Z22, Z22; \
	VPANDD Z25, Z21, Z21; \
	VPSLLD $24, Z21, Z21; \
	VPORD Z21, Z22, w; \
	VPORD Z27, w, K1, w

// func dot4x1AVX512(w *float32, k int, x *float32, out *[4]float32)
//
// out[i] = Σ_c w[i·k + c]·x[c] for i < 4; k is a positive multiple of 16.
TEXT ·dot4x1AVX512(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ k+8(FP), CX
	MOVQ x+16(FP), R8
	MOVQ out+24(FP), DI
	LEAQ (SI)(CX*4), R10
	LEAQ (R10)(CX*4), R11
	LEAQ (R11)(CX*4), R12
	SHRQ $4, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ AX, AX

w41loop:
	VMOVUPS (R8)(AX*4), Z8
	VFMADD231PS (SI)(AX*4), Z8, Z0
	VFMADD231PS (R10)(AX*4), Z8, Z1
	VFMADD231PS (R11)(AX*4), Z8, Z2
	VFMADD231PS (R12)(AX*4), Z8, Z3
	ADDQ $16, AX
	DECQ CX
	JNZ w41loop
	FOLD16(Z0, Y0)
	FOLD16(Z1, Y1)
	FOLD16(Z2, Y2)
	FOLD16(Z3, Y3)
	R4(Y0, Y1, Y2, Y3, X0, (DI))
	VZEROUPPER
	RET

// func dot4x2AVX512(w *float32, k int, x0, x1 *float32, out *[8]float32)
//
// out[i] = Σ_c w[i·k + c]·x0[c], out[4+i] = Σ_c w[i·k + c]·x1[c] for i < 4; k is a positive
// multiple of 16.
TEXT ·dot4x2AVX512(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ k+8(FP), CX
	MOVQ x0+16(FP), R8
	MOVQ x1+24(FP), R9
	MOVQ out+32(FP), DI
	LEAQ (SI)(CX*4), R10
	LEAQ (R10)(CX*4), R11
	LEAQ (R11)(CX*4), R12
	SHRQ $4, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	XORQ AX, AX

w42loop:
	VMOVUPS (R8)(AX*4), Z8
	VMOVUPS (R9)(AX*4), Z9
	VMOVUPS (SI)(AX*4), Z10
	VMOVUPS (R10)(AX*4), Z11
	VMOVUPS (R11)(AX*4), Z12
	VMOVUPS (R12)(AX*4), Z13
	VFMADD231PS Z10, Z8, Z0
	VFMADD231PS Z11, Z8, Z1
	VFMADD231PS Z12, Z8, Z2
	VFMADD231PS Z13, Z8, Z3
	VFMADD231PS Z10, Z9, Z4
	VFMADD231PS Z11, Z9, Z5
	VFMADD231PS Z12, Z9, Z6
	VFMADD231PS Z13, Z9, Z7
	ADDQ $16, AX
	DECQ CX
	JNZ w42loop
	FOLD16(Z0, Y0)
	FOLD16(Z1, Y1)
	FOLD16(Z2, Y2)
	FOLD16(Z3, Y3)
	FOLD16(Z4, Y4)
	FOLD16(Z5, Y5)
	FOLD16(Z6, Y6)
	FOLD16(Z7, Y7)
	R4(Y0, Y1, Y2, Y3, X0, (DI))
	R4(Y4, Y5, Y6, Y7, X4, 16(DI))
	VZEROUPPER
	RET

// Fused decode and products of two weight rows (unit bases bases[0], bases[1]) with 8
// activation rows x + t·k: out[8·j + t] = W[row j]·x_t, each accumulated in its own 16-lane
// register over the pieces (16 columns each, increasing) and reduced as above.

// func nvfp4Dot2x8AVX512(scales *float32, bases *[2]*byte, ents *int32, n int, x *float32, k int, out *[16]float32)
TEXT ·nvfp4Dot2x8AVX512(SB), NOSPLIT, $0-56
	P2x8
	MOVQ scales+0(FP), R8
	TESTQ CX, CX
	JLE n28done
	VMOVUPS e2m1all<>(SB), Z16
	VPBROADCASTD c512<>+0(SB), X17

n28loop:
	MOVLQSX 0(BX), AX
	MOVLQSX 4(BX), DX
	MOVLQSX 8(BX), R9
	LEAQ (DI)(R9*4), SI
	LEAQ (SI)(R10*4), R9
	NV16(R11, Z18)
	NV16(R12, Z19)
	X2x8
	ADDQ $12, BX
	DECQ CX
	JNZ n28loop

n28done:
	E2x8

// func fp8Dot2x8AVX512(scales *float32, bases *[2]*byte, ents *int32, n int, x *float32, k int, out *[16]float32)
TEXT ·fp8Dot2x8AVX512(SB), NOSPLIT, $0-56
	P2x8
	TESTQ CX, CX
	JLE f28done
	VPBROADCASTD c512<>+4(SB), Z24
	VPBROADCASTD c512<>+8(SB), Z25
	VPBROADCASTD c512<>+12(SB), Z26
	VPBROADCASTD c512<>+16(SB), Z27

f28loop:
	MOVLQSX 0(BX), AX
	MOVLQSX 4(BX), R9
	LEAQ (DI)(R9*4), SI
	LEAQ (SI)(R10*4), R9
	F16(R11, Z18)
	F16(R12, Z19)
	X2x8
	ADDQ $8, BX
	DECQ CX
	JNZ f28loop

f28done:
	E2x8
