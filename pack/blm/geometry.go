package blm

import (
	"fmt"

	"lithos/formats"
)

// Layout constants (ARCHITECTURE.md §3.2; lithos-metal.md §2.1).
const (
	BlockRows = 16 // R: rows per block; the last block of a matrix is padded with zero rows
	SIMDLanes = 32 // lanes of one SIMD group (Apple) or warp (NVIDIA)
	WordBytes = 16 // bytes one lane loads per instruction; units are padded to a multiple
	// StepStride is the distance in bytes between consecutive words of one unit: one load
	// instruction of the SIMD group covers SIMDLanes·WordBytes = 512 contiguous bytes.
	StepStride = SIMDLanes * WordBytes
)

// Bounds on the geometry, so that every size fits an int64 (and a unit an int) with room to
// spare. The 27B's widest matrix has K = 25600 (the DSpark fc), its tallest N = 248320.
const (
	MaxK = 1 << 20 // columns (one BF16 block is then at most 32 MiB)
	MaxN = 1 << 32 // rows
)

// laneChoices are the lanes-per-row values a layout may use (Spec.Lanes): 32 is the
// reference design (one row per step); smaller values fold 32/Lanes rows into one step.
var laneChoices = [...]int{32, 16, 8, 4, 2}

// Lane policy: NewGeometry with Spec.Lanes = 0 keeps the largest Lanes whose lane-row units
// add at most lanePadNum/lanePadDen (12.5 %) to the stored row bytes, and otherwise the Lanes
// with the fewest packed bytes per row (the larger on a tie). docs/blm.md §3 gives the reasons.
const (
	lanePadNum = 1
	lanePadDen = 8
)

// Spec names a matrix to lay out. Zero values pick defaults where one exists.
type Spec struct {
	// Format is one of formats.BF16, F16, FP8, Int8, Int4, NVFP4 (NVFP4MLX is accepted and
	// recorded as NVFP4: its stored bytes are the same, with tensor scale 1).
	Format formats.Format
	// N, K: logical shape [N, K] = [out, in]. 0 ≤ N ≤ MaxN, 1 ≤ K ≤ MaxK.
	N, K int64
	// GroupSize: columns per block scale. NVFP4 16 (0 means 16); INT8 any divisor of K
	// (0 means 32, q8.GroupSize); INT4 32, 64 or 128 (required); 0 for BF16, F16, FP8.
	GroupSize int
	// ScaleType: safetensors dtype of one stored block-scale element. NVFP4 "F8_E4M3", INT8
	// "F16" (both implied when empty); INT4 "BF16", "F16" or "F32" (required; its biases have
	// the same dtype); "" for BF16, F16, FP8.
	ScaleType string
	// Lanes per row: 0 applies the lane policy; otherwise 32, 16, 8, 4 or 2.
	Lanes int
}

// Geometry is the layout of one packed matrix: every size the packer, the bundle manifest and
// `inspect` need. Sizes are bytes. It is a plain value: NewGeometry computes it, Check
// re-derives it (for geometries read from a manifest).
type Geometry struct {
	Format    formats.Format `json:"format"`
	N         int64          `json:"n"`          // rows of the logical matrix
	K         int64          `json:"k"`          // columns
	Rows      int            `json:"rows"`       // R = BlockRows
	Lanes     int            `json:"lanes"`      // lanes per row (stripes per row)
	Fold      int            `json:"fold"`       // rows per step = SIMDLanes/Lanes
	Steps     int            `json:"steps"`      // steps per block = Rows/Fold
	Stripe    int            `json:"stripe"`     // W: columns per stripe (the last stripes may hold padding columns)
	GroupSize int            `json:"group_size"` // columns per block scale; 0 when the format has none
	ScaleType string         `json:"scale_type,omitempty"`
	// ScaleSlotBytes is the size of one scale slot: one scale element (NVFP4 1, INT8 2), or an
	// INT4 (scale, bias) pair, scale first (4 for BF16/F16, 8 for F32).
	ScaleSlotBytes int   `json:"scale_slot_bytes"`
	ScaleSlots     int   `json:"scale_slots"`   // slots per unit: the most groups one stripe touches
	PayloadBytes   int   `json:"payload_bytes"` // P: code bytes of one stripe of one row
	ScaleBytes     int   `json:"scale_bytes"`   // S = ScaleSlots·ScaleSlotBytes
	UnitBytes      int   `json:"unit_bytes"`    // U = P + S rounded up to 16
	BlockBytes     int64 `json:"block_bytes"`   // Rows·Lanes·U
	Blocks         int64 `json:"blocks"`        // ⌈N/Rows⌉
	TotalBytes     int64 `json:"total_bytes"`   // Blocks·BlockBytes
	StoredBytes    int64 `json:"stored_bytes"`  // N·StoredRowBytes: the checkpoint's codes, block scales (and INT4 biases)
	PaddingBytes   int64 `json:"padding_bytes"` // TotalBytes − StoredBytes (row, column and unit padding, shared-scale copies)
}

// formatInfo is what the layout needs of a format.
type formatInfo struct {
	format    formats.Format
	bits      int    // bits per element: 4, 8 or 16
	group     int    // columns per block scale (0: none)
	elem      int    // bytes of one stored scale element
	slot      int    // bytes of one scale slot in a unit
	scaleType string // dtype of a scale element
	biases    bool   // INT4: a bias element per group, after the scale in the slot
}

// describe validates s's format fields and returns the format's layout parameters.
func describe(s Spec) (formatInfo, error) {
	noScales := func(f formats.Format, bits int) (formatInfo, error) {
		if s.GroupSize != 0 || s.ScaleType != "" {
			return formatInfo{}, fmt.Errorf("blm: format %s has no block scales: group size %d and scale type %q must be empty",
				f, s.GroupSize, s.ScaleType)
		}
		return formatInfo{format: f, bits: bits}, nil
	}
	switch s.Format {
	case formats.BF16, formats.F16:
		return noScales(s.Format, 16)
	case formats.FP8:
		return noScales(s.Format, 8)
	case formats.NVFP4, formats.NVFP4MLX:
		if s.GroupSize != 0 && s.GroupSize != 16 {
			return formatInfo{}, fmt.Errorf("blm: nvfp4: group size %d, want 16", s.GroupSize)
		}
		if s.ScaleType != "" && s.ScaleType != "F8_E4M3" {
			return formatInfo{}, fmt.Errorf("blm: nvfp4: scale type %q, want F8_E4M3", s.ScaleType)
		}
		return formatInfo{format: formats.NVFP4, bits: 4, group: 16, elem: 1, slot: 1, scaleType: "F8_E4M3"}, nil
	case formats.Int8:
		g := s.GroupSize
		if g == 0 {
			g = 32
		}
		if g < 1 || int64(g) > MaxK {
			return formatInfo{}, fmt.Errorf("blm: int8: group size %d out of range", g)
		}
		if s.ScaleType != "" && s.ScaleType != "F16" {
			return formatInfo{}, fmt.Errorf("blm: int8: scale type %q, want F16", s.ScaleType)
		}
		return formatInfo{format: formats.Int8, bits: 8, group: g, elem: 2, slot: 2, scaleType: "F16"}, nil
	case formats.Int4:
		switch s.GroupSize {
		case 32, 64, 128:
		default:
			return formatInfo{}, fmt.Errorf("blm: int4_affine: group size %d, want 32, 64 or 128", s.GroupSize)
		}
		var e int
		switch s.ScaleType {
		case "BF16", "F16":
			e = 2
		case "F32":
			e = 4
		default:
			return formatInfo{}, fmt.Errorf("blm: int4_affine: scale type %q, want BF16, F16 or F32", s.ScaleType)
		}
		return formatInfo{format: formats.Int4, bits: 4, group: s.GroupSize, elem: e, slot: 2 * e, scaleType: s.ScaleType, biases: true}, nil
	case formats.F32:
		return formatInfo{}, fmt.Errorf("blm: format f32 is not packed: convert it to bf16 first (lithos-metal.md §1.1)")
	case "":
		return formatInfo{}, fmt.Errorf("blm: no format given")
	}
	return formatInfo{}, fmt.Errorf("blm: format %s cannot be packed: convert it to its family (%s) first", s.Format, s.Format.Family())
}

// stripeShape is the lane-row unit shape of a format at K columns with lanes stripes per row.
type stripeShape struct {
	w, p, slots, u int
}

func shapeFor(fi formatInfo, k int64, lanes int) stripeShape {
	w := (k + int64(lanes) - 1) / int64(lanes)
	if fi.bits == 4 && w%2 == 1 {
		w++ // a stripe starts on a byte: nibble formats need an even width
	}
	p := w * int64(fi.bits) / 8
	slots := 0
	if fi.group > 0 {
		for s := 0; s < lanes; s++ {
			if n := touched(int64(s)*w, w, k, int64(fi.group)); n > slots {
				slots = n
			}
		}
	}
	u := roundUp(int(p)+slots*fi.slot, WordBytes)
	return stripeShape{w: int(w), p: int(p), slots: slots, u: u}
}

// touched returns how many groups of g columns the stripe [c0, c0+w) ∩ [0, k) touches.
func touched(c0, w, k, g int64) int {
	if c0 >= k {
		return 0
	}
	c1 := min(c0+w, k)
	return int((c1-1)/g - c0/g + 1)
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// storedRowBytes is the checkpoint bytes of one row: codes, block scales and INT4 biases.
func (fi formatInfo) storedRowBytes(k int64) int64 {
	b := k * int64(fi.bits) / 8
	if fi.group > 0 {
		n := k / int64(fi.group) * int64(fi.elem)
		b += n
		if fi.biases {
			b += n
		}
	}
	return b
}

// ChooseLanes returns the lanes per row the lane policy picks for a format (given as in Spec:
// Format, K, GroupSize, ScaleType; N and Lanes are ignored): the largest of 32, 16, 8, 4, 2 whose
// packed row (Lanes·U bytes) is at most 9/8 of the stored row, else the one with the fewest
// packed bytes per row, the larger on a tie. Errors as NewGeometry.
func ChooseLanes(s Spec) (int, error) {
	fi, err := describe(s)
	if err != nil {
		return 0, err
	}
	if err := checkK(fi, s.K); err != nil {
		return 0, err
	}
	return chooseLanes(fi, s.K), nil
}

func chooseLanes(fi formatInfo, k int64) int {
	stored := fi.storedRowBytes(k)
	best, bestBytes := 0, int64(-1)
	for _, l := range laneChoices {
		row := int64(l) * int64(shapeFor(fi, k, l).u)
		if row*lanePadDen <= stored*(lanePadDen+lanePadNum) {
			return l
		}
		if bestBytes < 0 || row < bestBytes {
			best, bestBytes = l, row
		}
	}
	return best
}

func checkK(fi formatInfo, k int64) error {
	if k < 1 || k > MaxK {
		return fmt.Errorf("blm: %s: K = %d out of range [1, %d]", fi.format, k, MaxK)
	}
	if fi.group > 0 && k%int64(fi.group) != 0 {
		return fmt.Errorf("blm: %s: K = %d is not a multiple of the group size %d", fi.format, k, fi.group)
	}
	return nil
}

// NewGeometry validates s and computes its layout. It returns an error naming the field and
// the rule for an unknown or unpackable format, a group size or scale type the format does
// not allow, K outside [1, MaxK] or not a multiple of the group size, N outside [0, MaxN], or
// Lanes not 0, 32, 16, 8, 4 or 2.
func NewGeometry(s Spec) (Geometry, error) {
	fi, err := describe(s)
	if err != nil {
		return Geometry{}, err
	}
	if err := checkK(fi, s.K); err != nil {
		return Geometry{}, err
	}
	if s.N < 0 || s.N > MaxN {
		return Geometry{}, fmt.Errorf("blm: %s: N = %d out of range [0, %d]", fi.format, s.N, int64(MaxN))
	}
	lanes := s.Lanes
	if lanes == 0 {
		lanes = chooseLanes(fi, s.K)
	} else if !validLanes(lanes) {
		return Geometry{}, fmt.Errorf("blm: %s: lanes per row %d, want one of %v", fi.format, lanes, laneChoices)
	}
	sh := shapeFor(fi, s.K, lanes)
	g := Geometry{
		Format:         fi.format,
		N:              s.N,
		K:              s.K,
		Rows:           BlockRows,
		Lanes:          lanes,
		Fold:           SIMDLanes / lanes,
		Steps:          BlockRows * lanes / SIMDLanes,
		Stripe:         sh.w,
		GroupSize:      fi.group,
		ScaleType:      fi.scaleType,
		ScaleSlotBytes: fi.slot,
		ScaleSlots:     sh.slots,
		PayloadBytes:   sh.p,
		ScaleBytes:     sh.slots * fi.slot,
		UnitBytes:      sh.u,
		BlockBytes:     int64(BlockRows) * int64(lanes) * int64(sh.u),
		Blocks:         (s.N + BlockRows - 1) / BlockRows,
		StoredBytes:    s.N * fi.storedRowBytes(s.K),
	}
	g.TotalBytes = g.Blocks * g.BlockBytes
	g.PaddingBytes = g.TotalBytes - g.StoredBytes
	return g, nil
}

func validLanes(l int) bool {
	for _, c := range laneChoices {
		if l == c {
			return true
		}
	}
	return false
}

// Spec returns the Spec that reproduces g (with g's Lanes fixed).
func (g Geometry) Spec() Spec {
	return Spec{Format: g.Format, N: g.N, K: g.K, GroupSize: g.GroupSize, ScaleType: g.ScaleType, Lanes: g.Lanes}
}

// Check re-derives g from its format, shape, group size, scale type and lanes and returns an
// error naming the first field that disagrees: use it on a Geometry read from a manifest.
func (g Geometry) Check() error {
	want, err := NewGeometry(g.Spec())
	if err != nil {
		return err
	}
	if want != g {
		return fmt.Errorf("blm: geometry %s [%d, %d] is inconsistent: %s", g.Format, g.N, g.K, firstDiff(want, g))
	}
	return nil
}

func firstDiff(want, got Geometry) string {
	type f struct {
		name string
		w, g any
	}
	for _, d := range []f{
		{"format", want.Format, got.Format}, {"rows", want.Rows, got.Rows}, {"lanes", want.Lanes, got.Lanes},
		{"fold", want.Fold, got.Fold}, {"steps", want.Steps, got.Steps}, {"stripe", want.Stripe, got.Stripe},
		{"group_size", want.GroupSize, got.GroupSize}, {"scale_type", want.ScaleType, got.ScaleType},
		{"scale_slot_bytes", want.ScaleSlotBytes, got.ScaleSlotBytes}, {"scale_slots", want.ScaleSlots, got.ScaleSlots},
		{"payload_bytes", want.PayloadBytes, got.PayloadBytes}, {"scale_bytes", want.ScaleBytes, got.ScaleBytes},
		{"unit_bytes", want.UnitBytes, got.UnitBytes}, {"block_bytes", want.BlockBytes, got.BlockBytes},
		{"blocks", want.Blocks, got.Blocks}, {"total_bytes", want.TotalBytes, got.TotalBytes},
		{"stored_bytes", want.StoredBytes, got.StoredBytes}, {"padding_bytes", want.PaddingBytes, got.PaddingBytes},
	} {
		if d.w != d.g {
			return fmt.Sprintf("%s is %v, want %v", d.name, d.g, d.w)
		}
	}
	return "unknown field"
}

// info returns the format parameters of a geometry that passed Check.
func (g Geometry) info() formatInfo {
	fi, _ := describe(g.Spec())
	return fi
}

// CodeRowBytes is the stored code bytes of one row: K·2 (BF16, F16), K (FP8, INT8), K/2
// (NVFP4, INT4: two codes per byte, even column in the low nibble).
func (g Geometry) CodeRowBytes() int64 { return g.K * int64(g.info().bits) / 8 }

// ScaleRowBytes is the stored block-scale bytes of one row: (K/GroupSize) scale elements
// (E4M3 for NVFP4, F16 for INT8, ScaleType for INT4), 0 without block scales.
func (g Geometry) ScaleRowBytes() int64 {
	if g.GroupSize == 0 {
		return 0
	}
	return g.K / int64(g.GroupSize) * int64(g.info().elem)
}

// BiasRowBytes is the stored bias bytes of one row: INT4's K/GroupSize ScaleType elements,
// 0 for other formats.
func (g Geometry) BiasRowBytes() int64 {
	if !g.info().biases {
		return 0
	}
	return g.ScaleRowBytes()
}

// StoredRowBytes = CodeRowBytes + ScaleRowBytes + BiasRowBytes.
func (g Geometry) StoredRowBytes() int64 {
	return g.CodeRowBytes() + g.ScaleRowBytes() + g.BiasRowBytes()
}

// Overhead returns PaddingBytes/StoredBytes (0 for an empty matrix).
func (g Geometry) Overhead() float64 {
	if g.StoredBytes == 0 {
		return 0
	}
	return float64(g.PaddingBytes) / float64(g.StoredBytes)
}
