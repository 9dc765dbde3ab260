//go:build arm64 && !purego

#include "textflag.h"

// NEON dot products of a decoded 4-row weight tile (simd_arm64.go): per (weight row,
// activation row) pair two 4-lane accumulators (lanes 0–3: columns ≡ 0–3 mod 8, lanes 4–7:
// ≡ 4–7), fused multiply-adds in column order, the 8 lanes stored for Go to reduce. k is a
// positive multiple of 8.

// func dot4x1NEONLanes(w *float32, k int, x *float32, lanes *[32]float32)
TEXT ·dot4x1NEONLanes(SB), NOSPLIT, $0-32
	MOVD w+0(FP), R0
	MOVD k+8(FP), R1
	MOVD x+16(FP), R2
	MOVD lanes+24(FP), R3
	LSL  $2, R1, R4   // row stride in bytes
	ADD  R4, R0, R5   // row 1
	ADD  R4, R5, R6   // row 2
	ADD  R4, R6, R7   // row 3
	LSR  $3, R1, R1   // 8-column steps
	VEOR V0.B16, V0.B16, V0.B16
	VEOR V1.B16, V1.B16, V1.B16
	VEOR V2.B16, V2.B16, V2.B16
	VEOR V3.B16, V3.B16, V3.B16
	VEOR V4.B16, V4.B16, V4.B16
	VEOR V5.B16, V5.B16, V5.B16
	VEOR V6.B16, V6.B16, V6.B16
	VEOR V7.B16, V7.B16, V7.B16
	CBZ  R1, d41done

d41loop:
	VLD1.P 32(R2), [V16.S4, V17.S4]
	VLD1.P 32(R0), [V18.S4, V19.S4]
	VLD1.P 32(R5), [V20.S4, V21.S4]
	VLD1.P 32(R6), [V22.S4, V23.S4]
	VLD1.P 32(R7), [V24.S4, V25.S4]
	VFMLA V16.S4, V18.S4, V0.S4
	VFMLA V17.S4, V19.S4, V1.S4
	VFMLA V16.S4, V20.S4, V2.S4
	VFMLA V17.S4, V21.S4, V3.S4
	VFMLA V16.S4, V22.S4, V4.S4
	VFMLA V17.S4, V23.S4, V5.S4
	VFMLA V16.S4, V24.S4, V6.S4
	VFMLA V17.S4, V25.S4, V7.S4
	SUBS $1, R1, R1
	BNE  d41loop

d41done:
	VST1.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R3)
	VST1   [V4.S4, V5.S4, V6.S4, V7.S4], (R3)
	RET

// func dot4x2NEONLanes(w *float32, k int, x0, x1 *float32, lanes *[64]float32)
TEXT ·dot4x2NEONLanes(SB), NOSPLIT, $0-40
	MOVD w+0(FP), R0
	MOVD k+8(FP), R1
	MOVD x0+16(FP), R2
	MOVD x1+24(FP), R8
	MOVD lanes+32(FP), R3
	LSL  $2, R1, R4
	ADD  R4, R0, R5
	ADD  R4, R5, R6
	ADD  R4, R6, R7
	LSR  $3, R1, R1
	VEOR V0.B16, V0.B16, V0.B16
	VEOR V1.B16, V1.B16, V1.B16
	VEOR V2.B16, V2.B16, V2.B16
	VEOR V3.B16, V3.B16, V3.B16
	VEOR V4.B16, V4.B16, V4.B16
	VEOR V5.B16, V5.B16, V5.B16
	VEOR V6.B16, V6.B16, V6.B16
	VEOR V7.B16, V7.B16, V7.B16
	VEOR V8.B16, V8.B16, V8.B16
	VEOR V9.B16, V9.B16, V9.B16
	VEOR V10.B16, V10.B16, V10.B16
	VEOR V11.B16, V11.B16, V11.B16
	VEOR V12.B16, V12.B16, V12.B16
	VEOR V13.B16, V13.B16, V13.B16
	VEOR V14.B16, V14.B16, V14.B16
	VEOR V15.B16, V15.B16, V15.B16
	CBZ  R1, d42done

d42loop:
	VLD1.P 32(R2), [V16.S4, V17.S4] // x0
	VLD1.P 32(R8), [V18.S4, V19.S4] // x1
	VLD1.P 32(R0), [V20.S4, V21.S4] // row 0
	VLD1.P 32(R5), [V22.S4, V23.S4] // row 1
	VFMLA V16.S4, V20.S4, V0.S4
	VFMLA V17.S4, V21.S4, V1.S4
	VFMLA V18.S4, V20.S4, V8.S4
	VFMLA V19.S4, V21.S4, V9.S4
	VFMLA V16.S4, V22.S4, V2.S4
	VFMLA V17.S4, V23.S4, V3.S4
	VFMLA V18.S4, V22.S4, V10.S4
	VFMLA V19.S4, V23.S4, V11.S4
	VLD1.P 32(R6), [V20.S4, V21.S4] // row 2
	VLD1.P 32(R7), [V22.S4, V23.S4] // row 3
	VFMLA V16.S4, V20.S4, V4.S4
	VFMLA V17.S4, V21.S4, V5.S4
	VFMLA V18.S4, V20.S4, V12.S4
	VFMLA V19.S4, V21.S4, V13.S4
	VFMLA V16.S4, V22.S4, V6.S4
	VFMLA V17.S4, V23.S4, V7.S4
	VFMLA V18.S4, V22.S4, V14.S4
	VFMLA V19.S4, V23.S4, V15.S4
	SUBS $1, R1, R1
	BNE  d42loop

d42done:
	VST1.P [V0.S4, V1.S4, V2.S4, V3.S4], 64(R3)
	VST1.P [V4.S4, V5.S4, V6.S4, V7.S4], 64(R3)
	VST1.P [V8.S4, V9.S4, V10.S4, V11.S4], 64(R3)
	VST1   [V12.S4, V13.S4, V14.S4, V15.S4], (R3)
	RET

// E2M1 codes 0…15 as float32 bit bytes: byte 3 (sign, exponent's top bits) and byte 2 (the
// exponent's low bit and the mantissa); bytes 1 and 0 are zero for every code.
DATA e2m1b3<>+0(SB)/8, $0x404040403f3f3f00
DATA e2m1b3<>+8(SB)/8, $0xc0c0c0c0bfbfbf80
GLOBL e2m1b3<>(SB), RODATA|NOPTR, $16
DATA e2m1b2<>+0(SB)/8, $0xc0804000c0800000
DATA e2m1b2<>+8(SB)/8, $0xc0804000c0800000
GLOBL e2m1b2<>(SB), RODATA|NOPTR, $16
DATA negzero<>+0(SB)/4, $0x80000000
GLOBL negzero<>(SB), RODATA|NOPTR, $4

// func nvfp4DecodeNEON(dst *float32, base *byte, ents *int32, n int, scales *float32)
// nvfp4DecodeAVX2's contract: for each of the n entries {code offset, scale offset, column}
// (int32, relative to base; the column in dst), the group's 16 codes (8 bytes, the even
// column in the low nibble) times scales[its E4M3 scale byte] into dst[column …+16]. Codes
// become float32 bits by table lookup, the scale multiply is an FMA onto −0 (the product
// exactly, −0 kept): the values DecodeRow writes, bit for bit.
TEXT ·nvfp4DecodeNEON(SB), NOSPLIT, $0-40
	MOVD dst+0(FP), R0
	MOVD base+8(FP), R1
	MOVD ents+16(FP), R2
	MOVD n+24(FP), R3
	MOVD scales+32(FP), R4
	CMP  $0, R3
	BLE  nvdone
	MOVD $e2m1b3<>(SB), R5
	VLD1 (R5), [V30.B16]
	MOVD $e2m1b2<>(SB), R5
	VLD1 (R5), [V31.B16]
	MOVD $negzero<>(SB), R5
	VLD1R (R5), [V27.S4]
	VMOVI $15, V29.B16
	VEOR V28.B16, V28.B16, V28.B16

nvloop:
	MOVW  (R2), R7  // code offset
	MOVW  4(R2), R8 // scale offset
	MOVW  8(R2), R9 // column
	ADD   R7, R1, R10
	VLD1  (R10), [V0.B8]
	MOVBU (R1)(R8), R11
	ADD   R11<<2, R4, R12
	VLD1R (R12), [V26.S4]
	VAND  V29.B16, V0.B16, V2.B16  // even columns' codes
	VUSHR $4, V0.B16, V3.B16       // odd columns' codes
	VZIP1 V3.B16, V2.B16, V4.B16   // the 16 codes in column order
	VTBL  V4.B16, [V30.B16], V5.B16
	VTBL  V4.B16, [V31.B16], V6.B16
	VZIP1 V5.B16, V6.B16, V7.B16   // high halves of columns 0–7
	VZIP2 V5.B16, V6.B16, V8.B16   // columns 8–15
	VZIP1 V7.H8, V28.H8, V9.H8     // columns 0–3 as float32
	VZIP2 V7.H8, V28.H8, V10.H8
	VZIP1 V8.H8, V28.H8, V11.H8
	VZIP2 V8.H8, V28.H8, V12.H8
	VORR  V27.B16, V27.B16, V13.B16
	VORR  V27.B16, V27.B16, V14.B16
	VORR  V27.B16, V27.B16, V15.B16
	VORR  V27.B16, V27.B16, V16.B16
	VFMLA V26.S4, V9.S4, V13.S4
	VFMLA V26.S4, V10.S4, V14.S4
	VFMLA V26.S4, V11.S4, V15.S4
	VFMLA V26.S4, V12.S4, V16.S4
	ADD   R9<<2, R0, R13
	VST1  [V13.S4, V14.S4, V15.S4, V16.S4], (R13)
	ADD   $12, R2
	SUBS  $1, R3, R3
	BNE   nvloop

nvdone:
	RET

DATA fp8consts<>+0(SB)/4, $0x0000007f // E4M3 magnitude bits (and the NaN magnitude)
DATA fp8consts<>+4(SB)/4, $0x00000080 // E4M3 sign bit
DATA fp8consts<>+8(SB)/4, $0x7b800000 // 2^120: rebias E4M3 (bias 7) placed in float32 bits (bias 127)
GLOBL fp8consts<>(SB), RODATA|NOPTR, $12

// FP8DEC decodes four E4M3 codes (u32 lanes of c) into float32 lanes of out as fp8DecodeAVX2
// does: magnitude bits << 20 times 2^120 (an FMA onto −0: the product; the magnitude is ≥ +0,
// so the addend changes nothing), the sign bit << 24 ORed in, all ones for the NaN magnitude
// 0x7F. Needs FPCR.FZ = 0 (E4M3 subnormals are float32 subnormals before the multiply). V29 = 0x7F, V30 = 0x80, V31 = 2^120, V27 = −0
// in every lane; clobbers V20–V23.
#define FP8DEC(c, out) \
	VAND  V29.B16, c.B16, V20.B16; \
	VCMEQ V29.S4, V20.S4, V21.S4; \
	VSHL  $20, V20.S4, V20.S4; \
	VORR  V27.B16, V27.B16, V22.B16; \
	VFMLA V31.S4, V20.S4, V22.S4; \
	VAND  V30.B16, c.B16, V23.B16; \
	VSHL  $24, V23.S4, V23.S4; \
	VORR  V23.B16, V22.B16, V22.B16; \
	VORR  V21.B16, V22.B16, out.B16

// func fp8DecodeNEON(dst *float32, base *byte, ents *int32, n int)
// fp8DecodeAVX2's contract: for each of the n entries {offset, column} (int32), the 16 E4M3
// codes at base+offset into dst[column …+16].
TEXT ·fp8DecodeNEON(SB), NOSPLIT, $0-32
	MOVD dst+0(FP), R0
	MOVD base+8(FP), R1
	MOVD ents+16(FP), R2
	MOVD n+24(FP), R3
	CMP  $0, R3
	BLE  f8done
	MOVD $fp8consts<>(SB), R5
	VLD1R (R5), [V29.S4]
	ADD  $4, R5, R6
	VLD1R (R6), [V30.S4]
	ADD  $8, R5, R6
	VLD1R (R6), [V31.S4]
	MOVD $negzero<>(SB), R6
	VLD1R (R6), [V27.S4]

f8loop:
	MOVW   (R2), R7  // offset
	MOVW   4(R2), R9 // column
	ADD    R7, R1, R10
	VLD1   (R10), [V0.B16]
	VUXTL  V0.B8, V1.H8
	VUXTL2 V0.B16, V2.H8
	VUXTL  V1.H4, V3.S4
	VUXTL2 V1.H8, V4.S4
	VUXTL  V2.H4, V5.S4
	VUXTL2 V2.H8, V6.S4
	FP8DEC(V3, V13)
	FP8DEC(V4, V14)
	FP8DEC(V5, V15)
	FP8DEC(V6, V16)
	ADD    R9<<2, R0, R13
	VST1   [V13.S4, V14.S4, V15.S4, V16.S4], (R13)
	ADD    $8, R2
	SUBS   $1, R3, R3
	BNE    f8loop

f8done:
	RET

// func bf16DecodeNEON(dst *float32, base *byte, ents *int32, n int)
// bf16DecodeAVX2's contract: for each of the n entries {offset, column} (int32), the 8 BF16
// values at base+offset into dst[column …+8] (each the top half of its float32).
TEXT ·bf16DecodeNEON(SB), NOSPLIT, $0-32
	MOVD dst+0(FP), R0
	MOVD base+8(FP), R1
	MOVD ents+16(FP), R2
	MOVD n+24(FP), R3
	CMP  $0, R3
	BLE  bfdone
	VEOR V28.B16, V28.B16, V28.B16

bfloop:
	MOVW  (R2), R7
	MOVW  4(R2), R9
	ADD   R7, R1, R10
	VLD1  (R10), [V0.H8]
	VZIP1 V0.H8, V28.H8, V1.H8 // values 0–3 as the top halves of float32 words
	VZIP2 V0.H8, V28.H8, V2.H8 // values 4–7
	ADD   R9<<2, R0, R13
	VST1    [V1.S4, V2.S4], (R13)
	ADD     $8, R2
	SUBS    $1, R3, R3
	BNE     bfloop

bfdone:
	RET
