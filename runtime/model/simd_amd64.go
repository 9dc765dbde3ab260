//go:build amd64 && !purego

package model

import "golang.org/x/sys/cpu"

// haveSIMD reports whether this CPU runs the AVX2 + FMA kernels of simd_amd64.s.
var haveSIMD = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// Implemented in simd_amd64.s; simd.go says what each computes.

//go:noescape
func vexpAVX2(dst, x *float32, n int, mode int)

//go:noescape
func gdnStepAVX2(S, src, q, k, v, out *float32, dk, dv int, decay, beta float32)

//go:noescape
func dotsAVX2(s, q, k *float32, stride, n, hd int)

//go:noescape
func axpysAVX2(o, p, v *float32, stride, n, hd int)
