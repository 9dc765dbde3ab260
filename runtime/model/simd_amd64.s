//go:build amd64 && !purego

#include "textflag.h"

// AVX2 + FMA kernels of the per-row ops (simd.go says what each computes and where the
// numerics differ from the scalar Go loops).

// 4 × float64 constants of the exponential (FDLIBM's ln2 split: n·ln2Hi is exact for
// |n| < 2^21; ln2Hi + ln2Lo is ln2 to 1e-26).
DATA expc<>+0(SB)/8, $0x3ff71547652b82fe   // log2(e)
DATA expc<>+8(SB)/8, $0x3ff71547652b82fe
DATA expc<>+16(SB)/8, $0x3ff71547652b82fe
DATA expc<>+24(SB)/8, $0x3ff71547652b82fe
DATA expc<>+32(SB)/8, $0x4338000000000000  // 1.5·2^52: adding it rounds to an integer in the low bits
DATA expc<>+40(SB)/8, $0x4338000000000000
DATA expc<>+48(SB)/8, $0x4338000000000000
DATA expc<>+56(SB)/8, $0x4338000000000000
DATA expc<>+64(SB)/8, $0x3fe62e42fee00000  // ln2Hi
DATA expc<>+72(SB)/8, $0x3fe62e42fee00000
DATA expc<>+80(SB)/8, $0x3fe62e42fee00000
DATA expc<>+88(SB)/8, $0x3fe62e42fee00000
DATA expc<>+96(SB)/8, $0x3dea39ef35793c76  // ln2Lo
DATA expc<>+104(SB)/8, $0x3dea39ef35793c76
DATA expc<>+112(SB)/8, $0x3dea39ef35793c76
DATA expc<>+120(SB)/8, $0x3dea39ef35793c76
DATA expc<>+128(SB)/8, $0xc086200000000000 // -708: below, e^x is 0 (float32 results are 0 from -104 on)
DATA expc<>+136(SB)/8, $0xc086200000000000
DATA expc<>+144(SB)/8, $0xc086200000000000
DATA expc<>+152(SB)/8, $0xc086200000000000
DATA expc<>+160(SB)/8, $0x4086280000000000 // 709: above, e^x is +Inf
DATA expc<>+168(SB)/8, $0x4086280000000000
DATA expc<>+176(SB)/8, $0x4086280000000000
DATA expc<>+184(SB)/8, $0x4086280000000000
DATA expc<>+192(SB)/8, $0x00000000000003ff // exponent bias (int64)
DATA expc<>+200(SB)/8, $0x00000000000003ff
DATA expc<>+208(SB)/8, $0x00000000000003ff
DATA expc<>+216(SB)/8, $0x00000000000003ff
DATA expc<>+224(SB)/8, $0x7ff0000000000000 // +Inf
DATA expc<>+232(SB)/8, $0x7ff0000000000000
DATA expc<>+240(SB)/8, $0x7ff0000000000000
DATA expc<>+248(SB)/8, $0x7ff0000000000000
DATA expc<>+256(SB)/8, $0x8000000000000000 // sign bit
DATA expc<>+264(SB)/8, $0x8000000000000000
DATA expc<>+272(SB)/8, $0x8000000000000000
DATA expc<>+280(SB)/8, $0x8000000000000000
GLOBL expc<>(SB), RODATA|NOPTR, $288

// 1/k! for k = 13 … 0, 4 copies each: e^r = Σ r^k/k! (|r| ≤ ln2/2: the first term left out is
// below 4e-18).
DATA expp<>+0(SB)/8, $0x3de6124613a86d09
DATA expp<>+8(SB)/8, $0x3de6124613a86d09
DATA expp<>+16(SB)/8, $0x3de6124613a86d09
DATA expp<>+24(SB)/8, $0x3de6124613a86d09
DATA expp<>+32(SB)/8, $0x3e21eed8eff8d898
DATA expp<>+40(SB)/8, $0x3e21eed8eff8d898
DATA expp<>+48(SB)/8, $0x3e21eed8eff8d898
DATA expp<>+56(SB)/8, $0x3e21eed8eff8d898
DATA expp<>+64(SB)/8, $0x3e5ae64567f544e4
DATA expp<>+72(SB)/8, $0x3e5ae64567f544e4
DATA expp<>+80(SB)/8, $0x3e5ae64567f544e4
DATA expp<>+88(SB)/8, $0x3e5ae64567f544e4
DATA expp<>+96(SB)/8, $0x3e927e4fb7789f5c
DATA expp<>+104(SB)/8, $0x3e927e4fb7789f5c
DATA expp<>+112(SB)/8, $0x3e927e4fb7789f5c
DATA expp<>+120(SB)/8, $0x3e927e4fb7789f5c
DATA expp<>+128(SB)/8, $0x3ec71de3a556c734
DATA expp<>+136(SB)/8, $0x3ec71de3a556c734
DATA expp<>+144(SB)/8, $0x3ec71de3a556c734
DATA expp<>+152(SB)/8, $0x3ec71de3a556c734
DATA expp<>+160(SB)/8, $0x3efa01a01a01a01a
DATA expp<>+168(SB)/8, $0x3efa01a01a01a01a
DATA expp<>+176(SB)/8, $0x3efa01a01a01a01a
DATA expp<>+184(SB)/8, $0x3efa01a01a01a01a
DATA expp<>+192(SB)/8, $0x3f2a01a01a01a01a
DATA expp<>+200(SB)/8, $0x3f2a01a01a01a01a
DATA expp<>+208(SB)/8, $0x3f2a01a01a01a01a
DATA expp<>+216(SB)/8, $0x3f2a01a01a01a01a
DATA expp<>+224(SB)/8, $0x3f56c16c16c16c17
DATA expp<>+232(SB)/8, $0x3f56c16c16c16c17
DATA expp<>+240(SB)/8, $0x3f56c16c16c16c17
DATA expp<>+248(SB)/8, $0x3f56c16c16c16c17
DATA expp<>+256(SB)/8, $0x3f81111111111111
DATA expp<>+264(SB)/8, $0x3f81111111111111
DATA expp<>+272(SB)/8, $0x3f81111111111111
DATA expp<>+280(SB)/8, $0x3f81111111111111
DATA expp<>+288(SB)/8, $0x3fa5555555555555
DATA expp<>+296(SB)/8, $0x3fa5555555555555
DATA expp<>+304(SB)/8, $0x3fa5555555555555
DATA expp<>+312(SB)/8, $0x3fa5555555555555
DATA expp<>+320(SB)/8, $0x3fc5555555555555
DATA expp<>+328(SB)/8, $0x3fc5555555555555
DATA expp<>+336(SB)/8, $0x3fc5555555555555
DATA expp<>+344(SB)/8, $0x3fc5555555555555
DATA expp<>+352(SB)/8, $0x3fe0000000000000
DATA expp<>+360(SB)/8, $0x3fe0000000000000
DATA expp<>+368(SB)/8, $0x3fe0000000000000
DATA expp<>+376(SB)/8, $0x3fe0000000000000
DATA expp<>+384(SB)/8, $0x3ff0000000000000
DATA expp<>+392(SB)/8, $0x3ff0000000000000
DATA expp<>+400(SB)/8, $0x3ff0000000000000
DATA expp<>+408(SB)/8, $0x3ff0000000000000
DATA expp<>+416(SB)/8, $0x3ff0000000000000
DATA expp<>+424(SB)/8, $0x3ff0000000000000
DATA expp<>+432(SB)/8, $0x3ff0000000000000
DATA expp<>+440(SB)/8, $0x3ff0000000000000
GLOBL expp<>(SB), RODATA|NOPTR, $448

// EXPPD: out = e^x for 4 float64 lanes (x preserved): x clamped to [-708, 709],
// n = round(x·log2 e), r = x − n·ln2Hi − n·ln2Lo, e^r by Horner, times 2^n built in the
// exponent bits; x > 709 gives +Inf, x < −708 gives 0, NaN stays NaN. Clobbers t0, t1.
#define EXPPD(x, out, t0, t1) \
	VMOVUPD expc<>+128(SB), t0; \
	VMAXPD x, t0, t0; \
	VMOVUPD expc<>+160(SB), t1; \
	VMINPD t0, t1, t0; \
	VMOVUPD expc<>+32(SB), t1; \
	VFMADD231PD expc<>+0(SB), t0, t1; \
	VSUBPD expc<>+32(SB), t1, out; \
	VFNMADD231PD expc<>+64(SB), out, t0; \
	VFNMADD231PD expc<>+96(SB), out, t0; \
	VMOVUPD expp<>+0(SB), out; \
	VFMADD213PD expp<>+32(SB), t0, out; \
	VFMADD213PD expp<>+64(SB), t0, out; \
	VFMADD213PD expp<>+96(SB), t0, out; \
	VFMADD213PD expp<>+128(SB), t0, out; \
	VFMADD213PD expp<>+160(SB), t0, out; \
	VFMADD213PD expp<>+192(SB), t0, out; \
	VFMADD213PD expp<>+224(SB), t0, out; \
	VFMADD213PD expp<>+256(SB), t0, out; \
	VFMADD213PD expp<>+288(SB), t0, out; \
	VFMADD213PD expp<>+320(SB), t0, out; \
	VFMADD213PD expp<>+352(SB), t0, out; \
	VFMADD213PD expp<>+384(SB), t0, out; \
	VFMADD213PD expp<>+416(SB), t0, out; \
	VPADDQ expc<>+192(SB), t1, t1; \
	VPSLLQ $52, t1, t1; \
	VMULPD t1, out, out; \
	VCMPPD $0x1e, expc<>+160(SB), x, t0; \
	VBLENDVPD t0, expc<>+224(SB), out, out; \
	VCMPPD $0x11, expc<>+128(SB), x, t0; \
	VANDNPD out, t0, out

// func vexpAVX2(dst, x *float32, n int, mode int)
//
// For i < n (a multiple of 4), with v = float64(x[i]) and e^· as EXPPD computes it:
// mode 0: dst[i] = float32(e^v); mode 1 (SiLU): float32(v / (1 + e^−v));
// mode 2 (sigmoid): float32(1 / (1 + e^−v)). dst may be x.
TEXT ·vexpAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ mode+24(FP), DX
	SHRQ $2, CX
	JZ vedone
	VMOVUPD expp<>+416(SB), Y8 // 1.0

veloop:
	VCVTPS2PD (SI), Y0
	CMPQ DX, $0
	JEQ veexp
	VXORPD expc<>+256(SB), Y0, Y1 // −v
	EXPPD(Y1, Y2, Y3, Y4)
	VADDPD Y8, Y2, Y2             // 1 + e^−v
	CMPQ DX, $1
	JNE vesig
	VDIVPD Y2, Y0, Y2             // v / (1 + e^−v)
	JMP vestore

vesig:
	VDIVPD Y2, Y8, Y2 // 1 / (1 + e^−v)
	JMP vestore

veexp:
	EXPPD(Y0, Y2, Y3, Y4)

vestore:
	VCVTPD2PSY Y2, X2
	VMOVUPS X2, (DI)
	ADDQ $16, SI
	ADDQ $16, DI
	DECQ CX
	JNZ veloop
	VZEROUPPER

vedone:
	RET

// func gdnStepAVX2(S, src, q, k, v, out *float32, dk, dv int, decay, beta float32)
//
// One row of the gated delta rule for one value head (GDNRecurrent): with S and src
// [dk, dv] (S may be src), for columns in chunks of 32 (dv a multiple of 32):
//
//	S[i] = src[i]·decay;  m = Σ_i S[i]·k[i];  δ = (v − m)·beta;  S[i] += k[i]·δ;  out = Σ_i S[i]·q[i]
//
// with FMAs for the multiply-adds, i in order.
TEXT ·gdnStepAVX2(SB), NOSPLIT, $0-72
	MOVQ S+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ q+16(FP), R8
	MOVQ k+24(FP), R9
	MOVQ v+32(FP), R10
	MOVQ out+40(FP), R11
	MOVQ dk+48(FP), R12
	MOVQ dv+56(FP), R13
	VBROADCASTSS decay+64(FP), Y15
	VBROADCASTSS beta+68(FP), Y14
	MOVQ R13, R14
	SHLQ $2, R14 // row stride in bytes
	XORQ BX, BX  // column chunk offset in bytes

gchunk:
	// Pass 1: decay the chunk, m = Σ S[i]·k[i].
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	LEAQ (SI)(BX*1), AX
	LEAQ (DI)(BX*1), DX
	XORQ CX, CX

gp1:
	VBROADCASTSS (R9)(CX*4), Y13
	VMULPS (AX), Y15, Y4
	VMULPS 32(AX), Y15, Y5
	VMULPS 64(AX), Y15, Y6
	VMULPS 96(AX), Y15, Y7
	VMOVUPS Y4, (DX)
	VMOVUPS Y5, 32(DX)
	VMOVUPS Y6, 64(DX)
	VMOVUPS Y7, 96(DX)
	VFMADD231PS Y13, Y4, Y0
	VFMADD231PS Y13, Y5, Y1
	VFMADD231PS Y13, Y6, Y2
	VFMADD231PS Y13, Y7, Y3
	ADDQ R14, AX
	ADDQ R14, DX
	INCQ CX
	CMPQ CX, R12
	JLT gp1

	// δ = (v − m)·beta.
	VMOVUPS (R10)(BX*1), Y4
	VMOVUPS 32(R10)(BX*1), Y5
	VMOVUPS 64(R10)(BX*1), Y6
	VMOVUPS 96(R10)(BX*1), Y7
	VSUBPS Y0, Y4, Y4
	VSUBPS Y1, Y5, Y5
	VSUBPS Y2, Y6, Y6
	VSUBPS Y3, Y7, Y7
	VMULPS Y14, Y4, Y4
	VMULPS Y14, Y5, Y5
	VMULPS Y14, Y6, Y6
	VMULPS Y14, Y7, Y7

	// Pass 2: S[i] += k[i]·δ; out = Σ S[i]·q[i].
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	LEAQ (DI)(BX*1), DX
	XORQ CX, CX

gp2:
	VBROADCASTSS (R9)(CX*4), Y13
	VBROADCASTSS (R8)(CX*4), Y12
	VMOVUPS (DX), Y8
	VMOVUPS 32(DX), Y9
	VMOVUPS 64(DX), Y10
	VMOVUPS 96(DX), Y11
	VFMADD231PS Y4, Y13, Y8
	VFMADD231PS Y5, Y13, Y9
	VFMADD231PS Y6, Y13, Y10
	VFMADD231PS Y7, Y13, Y11
	VMOVUPS Y8, (DX)
	VMOVUPS Y9, 32(DX)
	VMOVUPS Y10, 64(DX)
	VMOVUPS Y11, 96(DX)
	VFMADD231PS Y12, Y8, Y0
	VFMADD231PS Y12, Y9, Y1
	VFMADD231PS Y12, Y10, Y2
	VFMADD231PS Y12, Y11, Y3
	ADDQ R14, DX
	INCQ CX
	CMPQ CX, R12
	JLT gp2

	VMOVUPS Y0, (R11)(BX*1)
	VMOVUPS Y1, 32(R11)(BX*1)
	VMOVUPS Y2, 64(R11)(BX*1)
	VMOVUPS Y3, 96(R11)(BX*1)
	ADDQ $128, BX
	CMPQ BX, R14
	JLT gchunk
	VZEROUPPER
	RET

// func dotsAVX2(s, q, k *float32, stride, n, hd int)
//
// s[t] = Σ_i q[i]·k[t·stride + i] for t < n: two 8-lane FMA chains over i (hd a multiple of
// 16), added, then reduced ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
TEXT ·dotsAVX2(SB), NOSPLIT, $0-48
	MOVQ s+0(FP), DI
	MOVQ q+8(FP), SI
	MOVQ k+16(FP), DX
	MOVQ stride+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ hd+40(FP), R9
	SHLQ $2, R8
	TESTQ CX, CX
	JLE ddone

dkey:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ AX, AX

ddim:
	VMOVUPS (DX)(AX*4), Y2
	VMOVUPS 32(DX)(AX*4), Y3
	VFMADD231PS (SI)(AX*4), Y2, Y0
	VFMADD231PS 32(SI)(AX*4), Y3, Y1
	ADDQ $16, AX
	CMPQ AX, R9
	JLT ddim
	VADDPS Y1, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDSS X1, X0, X0
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R8, DX
	DECQ CX
	JNZ dkey
	VZEROUPPER

ddone:
	RET

// func axpysAVX2(o, p, v *float32, stride, n, hd int)
//
// o[i] += Σ_t p[t]·v[t·stride + i] for i < hd (a multiple of 32), t in order, one FMA per
// term.
TEXT ·axpysAVX2(SB), NOSPLIT, $0-48
	MOVQ o+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ v+16(FP), DX
	MOVQ stride+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ hd+40(FP), R9
	SHLQ $2, R8
	TESTQ CX, CX
	JLE adone
	SHLQ $2, R9 // hd in bytes
	XORQ BX, BX

achunk:
	VMOVUPS (DI)(BX*1), Y0
	VMOVUPS 32(DI)(BX*1), Y1
	VMOVUPS 64(DI)(BX*1), Y2
	VMOVUPS 96(DI)(BX*1), Y3
	LEAQ (DX)(BX*1), AX
	XORQ R10, R10

akey:
	VBROADCASTSS (SI)(R10*4), Y4
	VFMADD231PS (AX), Y4, Y0
	VFMADD231PS 32(AX), Y4, Y1
	VFMADD231PS 64(AX), Y4, Y2
	VFMADD231PS 96(AX), Y4, Y3
	ADDQ R8, AX
	INCQ R10
	CMPQ R10, CX
	JLT akey
	VMOVUPS Y0, (DI)(BX*1)
	VMOVUPS Y1, 32(DI)(BX*1)
	VMOVUPS Y2, 64(DI)(BX*1)
	VMOVUPS Y3, 96(DI)(BX*1)
	ADDQ $128, BX
	CMPQ BX, R9
	JLT achunk
	VZEROUPPER

adone:
	RET
