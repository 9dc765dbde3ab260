package sha256x2

// block1 advances the state h over n 64-byte blocks at p (x86 SHA extensions).
//
//go:noescape
func block1(h *[8]uint32, p *byte, n int)

// block2 advances ha over n blocks at pa and hb over n blocks at pb, interleaved.
//
//go:noescape
func block2(ha *[8]uint32, pa *byte, hb *[8]uint32, pb *byte, n int)

// hasSHANI reports whether the CPU has the SHA extensions (CPUID.(EAX=7,ECX=0):EBX bit 29)
// and SSE4.1 (PBLENDW; CPUID.1:ECX bit 19) and SSSE3 (PSHUFB, PALIGNR; CPUID.1:ECX bit 9).
func hasSHANI() bool

var available = hasSHANI()
