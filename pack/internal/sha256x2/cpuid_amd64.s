#include "textflag.h"

// func hasSHANI() bool
TEXT ·hasSHANI(SB), NOSPLIT, $0-1
	MOVL $0, AX
	CPUID
	CMPL AX, $7
	JLT  no
	MOVL $1, AX
	MOVL $0, CX
	CPUID
	ANDL $0x00080200, CX
	CMPL CX, $0x00080200
	JNE  no
	MOVL $7, AX
	MOVL $0, CX
	CPUID
	BTL  $29, BX
	JCC  no
	MOVB $1, ret+0(FP)
	RET
no:
	MOVB $0, ret+0(FP)
	RET
