package manifests

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"regexp"
	"slices"
	"strings"
)

// Bundle manifest constants (ARCHITECTURE.md §3.3; docs/bundle.md).
const (
	// BundleFormat is the manifest's "format" value: what the file is.
	BundleFormat = "lithos-bundle"
	// BundleVersion is the manifest version this package reads and writes. A reader refuses
	// any other version: the layout of the weights file may change between versions.
	BundleVersion = 1
	// BundleAlignment is where every tensor of the weights file starts and where the file
	// ends: a multiple of 16 KiB, the Apple silicon page size, so that each tensor can be
	// mmapped and handed to Metal with newBufferWithBytesNoCopy (lithos-metal.md §2.3, §2.5).
	BundleAlignment = 16384
	// BundleManifestName and BundleWeightsName are the two files every bundle holds.
	BundleManifestName = "manifest.json"
	BundleWeightsName  = "weights.bin"
	// MaxManifestBytes bounds the manifest a reader accepts (the 27B target with its draft
	// is about 2 MB).
	MaxManifestBytes = 256 << 20
)

// Models a bundle tensor belongs to.
const (
	ModelTarget = "target"
	ModelDraft  = "draft"
)

// Tensor encodings: how a tensor's bytes are laid out in the weights file.
const (
	// EncodingBLM is a block-lane-major packed matrix (docs/blm.md) followed by its per-row
	// tensor-scale table.
	EncodingBLM = "blm"
	// EncodingPlain is an array copied byte for byte from the checkpoint (little-endian,
	// row-major, the checkpoint's dtype).
	EncodingPlain = "plain"
)

// Tensor roles: what the runtime does with a tensor.
const (
	RoleMatrix    = "matrix"    // a linear layer [out, in]: matrix × rows (GEMV/GEMM) over BLM bytes
	RoleEmbedding = "embedding" // a table gathered by row: [rows, dim]
	RoleNorm      = "norm"      // an RMSNorm weight [dim]
	RoleConv      = "conv"      // a depthwise convolution weight [channels, 1, width]
	RoleParam     = "param"     // another parameter (A_log, dt_bias)
	RoleBias      = "bias"      // a bias vector added after a matrix
)

// Transforms of plain tensors: what the runtime computes from the stored (raw) values before
// use. The bundle stores raw checkpoint values; the transform names the function
// (lithos-metal.md §2.3 "aux transforms", §4.2, §4.4).
const (
	TransformNone    = "none"     // used as stored
	TransformOnePlus = "one_plus" // 1 + w, in float32 (Qwen3.5's zero-centred RMSNorm weights)
	TransformNegExp  = "neg_exp"  // −exp(w), in float32 (the Gated DeltaNet decay: −exp(A_log))
)

// Bundle is a bundle's manifest.json, version BundleVersion. Sizes and offsets are bytes;
// offsets are from the start of the weights file. docs/bundle.md has its JSON Schema
// (BundleSchema) and the meaning of every field.
type Bundle struct {
	Format      string       `json:"format"`       // BundleFormat
	Version     int          `json:"version"`      // BundleVersion
	Tool        string       `json:"tool"`         // "lithos-pack"
	ToolVersion string       `json:"tool_version"` // the binary's version
	Alignment   int64        `json:"alignment"`    // BundleAlignment
	Weights     WeightsFile  `json:"weights"`
	Target      BundleModel  `json:"target"`
	Draft       *BundleModel `json:"draft"` // null without a draft head
	// Tensors are every tensor the runtime reads, in weights-file order (increasing offset).
	Tensors []BundleTensor `json:"tensors"`
	// Skipped are the checkpoint tensors the bundle leaves out, each with the reason.
	Skipped []SkippedTensor `json:"skipped"`
	// Files are the files copied from the target checkout (tokenizer, chat template,
	// generation config), sorted by path.
	Files   []BundleFile `json:"files"`
	Padding Padding      `json:"padding"`
}

// WeightsFile names the weights file and its size (a multiple of Alignment).
type WeightsFile struct {
	Path  string `json:"path"`  // BundleWeightsName
	Bytes int64  `json:"bytes"` // file size
}

// BundleModel is one model of the bundle (the target or the draft head): where it came from
// and its config.
type BundleModel struct {
	Architecture string `json:"architecture"` // config.json "architectures"[0]
	// Config is the checkpoint's config.json, verbatim (for a re-quantized draft: the
	// re-exported config.json, with its quantization_config).
	Config json.RawMessage `json:"config"`
	Source Source          `json:"source"`
	// Requantized is set when the bundle holds a re-quantized copy of the source (a BF16
	// DSpark head packed as NVFP4): the conversion record of `lithos-pack quantize`
	// (docs/quantize.md, conversion.json), verbatim. Its outputs list the sha256 of the
	// converted files the bundle was packed from.
	Requantized json.RawMessage `json:"requantized,omitempty"`
}

// Source identifies a checkpoint: Hub repo and commit when known, the local directory it was
// read from (informational: bundles may move), and every file read with its size and sha256.
type Source struct {
	Repo   *string `json:"repo"`   // "org/name", null for a plain local directory
	Commit *string `json:"commit"` // 40-hex commit, null when unknown
	Path   string  `json:"path"`   // absolute directory read at pack time
	// Files are config.json, hf_quant_config.json, the index and every safetensors shard,
	// sorted by path.
	Files []BundleFile `json:"files"`
}

// BundleFile is one file with its size and sha256 (lower-case hex).
type BundleFile struct {
	Path   string `json:"path"` // relative, '/'-separated
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// BundleTensor is one tensor of the weights file.
type BundleTensor struct {
	// Name is the runtime name (docs/bundle.md §3): the checkpoint's module path without the
	// text-model prefix and ".weight", "draft." first for the draft head, and the stacked
	// names "…in_proj_zqkv", "…in_proj_ab", "…self_attn.qkv", "…mlp.gate_up".
	Name     string `json:"name"`
	Model    string `json:"model"`    // ModelTarget or ModelDraft
	Role     string `json:"role"`     // RoleMatrix, RoleEmbedding, …
	Group    string `json:"group"`    // byte-budget group (docs/audit.md): "mlp", "gdn_proj", "small", …
	Encoding string `json:"encoding"` // EncodingBLM or EncodingPlain
	// Format is the storage format: a formats.Format for BLM matrices ("nvfp4", "fp8_e4m3",
	// "bf16", …), the safetensors dtype for plain arrays ("BF16", "F32", …).
	Format string `json:"format"`
	// Shape is the logical shape: [N, K] for a matrix (N = the stacked rows), the
	// checkpoint's shape for a plain array.
	Shape  []int64 `json:"shape"`
	Offset int64   `json:"offset"` // a multiple of Alignment
	// Length is the bytes of the entry: for BLM the packed matrix (Layout.TotalBytes) then the
	// row-scale table (RowScales.Bytes); for plain arrays the checkpoint bytes.
	Length int64  `json:"length"`
	SHA256 string `json:"sha256"` // of the Length bytes at Offset
	// StoredBytes is what the entry's source tensors take in the checkpoint (codes, block
	// scales, biases; for plain arrays = Length).
	StoredBytes int64 `json:"stored_bytes"`

	// BLM only.
	Layout    *BLMLayout `json:"layout,omitempty"`
	Stack     *Stack     `json:"stack,omitempty"`
	RowScales *RowScales `json:"row_scales,omitempty"`

	// Plain only.
	Source    string `json:"source,omitempty"`    // checkpoint tensor name
	Transform string `json:"transform,omitempty"` // TransformNone, TransformOnePlus, TransformNegExp
}

// BLMLayout is the geometry of a packed matrix: the JSON of lithos/pack/blm.Geometry, field for
// field (this package imports no lithos package; lithos/pack converts and re-checks it).
type BLMLayout struct {
	Format         string `json:"format"`
	N              int64  `json:"n"`
	K              int64  `json:"k"`
	Rows           int    `json:"rows"`
	Lanes          int    `json:"lanes"`
	Fold           int    `json:"fold"`
	Steps          int    `json:"steps"`
	Stripe         int    `json:"stripe"`
	GroupSize      int    `json:"group_size"`
	ScaleType      string `json:"scale_type,omitempty"`
	ScaleSlotBytes int    `json:"scale_slot_bytes"`
	ScaleSlots     int    `json:"scale_slots"`
	PayloadBytes   int    `json:"payload_bytes"`
	ScaleBytes     int    `json:"scale_bytes"`
	UnitBytes      int    `json:"unit_bytes"`
	BlockBytes     int64  `json:"block_bytes"`
	Blocks         int64  `json:"blocks"`
	TotalBytes     int64  `json:"total_bytes"`
	StoredBytes    int64  `json:"stored_bytes"`
	PaddingBytes   int64  `json:"padding_bytes"`
}

// Stack is the row order of a packed matrix made of one or more checkpoint matrices: the JSON
// of lithos/pack/blm.Stack with the checkpoint tensors of each segment.
type Stack struct {
	Mode     string         `json:"mode"`            // "concat" or "interleave"
	Chunk    int            `json:"chunk,omitempty"` // interleave: rows per turn (8)
	Segments []StackSegment `json:"segments"`
}

// StackSegment is one checkpoint matrix of a stack.
type StackSegment struct {
	Name string `json:"name"` // the checkpoint's weight tensor ("…mlp.gate_proj.weight")
	Rows int64  `json:"rows"`
	// TensorScale is applied to each of the segment's output rows: NVFP4 weight_scale_2, FP8
	// weight_scale, 1 for formats without one. JSON numbers here are exact float32 values.
	TensorScale float32 `json:"tensor_scale"`
	// Tensors are every checkpoint tensor the segment consumed: weight, block scales, biases
	// and the tensor-scale scalar.
	Tensors []string `json:"tensors"`
}

// RowScales locates a matrix's per-row tensor-scale table: Count little-endian float32, one
// per packed row including the zero rows of the last block (Blocks·Rows; padding rows 0),
// right after the packed matrix.
type RowScales struct {
	Offset int64 `json:"offset"` // Offset of the tensor + Layout.TotalBytes
	Bytes  int64 `json:"bytes"`  // 4·Count
	Count  int64 `json:"count"`
	// Uniform is true when every real row has the same scale (kernels may use a constant).
	Uniform bool `json:"uniform"`
}

// SkippedTensor is a checkpoint tensor the bundle leaves out.
type SkippedTensor struct {
	Model  string  `json:"model"`
	Name   string  `json:"name"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	Bytes  int64   `json:"bytes"`
	Reason string  `json:"reason"`
}

// Padding sums where the weights file's bytes go.
type Padding struct {
	StoredBytes int64 `json:"stored_bytes"` // checkpoint bytes of every packed tensor
	// LayoutBytes is the BLM padding inside packed matrices (padding rows and columns, unit
	// padding, duplicated block scales): Σ Layout.PaddingBytes.
	LayoutBytes   int64 `json:"layout_bytes"`
	RowScaleBytes int64 `json:"row_scale_bytes"` // Σ RowScales.Bytes
	// AlignmentBytes is the zeros between entries and at the end of the file.
	AlignmentBytes int64 `json:"alignment_bytes"`
	// SkippedBytes is Σ SkippedTensor.Bytes (not in the file).
	SkippedBytes int64 `json:"skipped_bytes"`
}

//go:embed bundle.schema.json
var bundleSchema []byte

// BundleSchema returns the JSON Schema (draft 2020-12) of manifest.json, version
// BundleVersion. docs/bundle.md prints the same text.
func BundleSchema() []byte { return slices.Clone(bundleSchema) }

var (
	hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)
	hexCommit = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// ErrBundleVersion is returned (wrapped) by ParseBundle for a manifest of another version.
var ErrBundleVersion = errors.New("unsupported manifest version")

// ParseBundle decodes and checks a manifest.json. It refuses, with an error naming the field
// (and the tensor where one is concerned): more than MaxManifestBytes; JSON that is not one
// object or has unknown fields; a format other than BundleFormat; a version other than
// BundleVersion (wrapping ErrBundleVersion, checked before the other fields so that a newer
// manifest gets a clear message); an alignment other than BundleAlignment; and everything
// CheckLayout checks. It does not read the weights file: see CheckFile.
func ParseBundle(data []byte) (*Bundle, error) {
	if len(data) > MaxManifestBytes {
		return nil, fmt.Errorf("manifest: %d bytes, more than the %d a manifest may take", len(data), MaxManifestBytes)
	}
	var head struct {
		Format  *string `json:"format"`
		Version *int    `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if head.Format == nil || *head.Format != BundleFormat {
		got := "missing"
		if head.Format != nil {
			got = fmt.Sprintf("%q", *head.Format)
		}
		return nil, fmt.Errorf("manifest: format is %s, want %q (not a lithos bundle manifest)", got, BundleFormat)
	}
	if head.Version == nil || *head.Version != BundleVersion {
		got := "missing"
		if head.Version != nil {
			got = fmt.Sprint(*head.Version)
		}
		return nil, fmt.Errorf("manifest: version %s: %w (this lithos reads version %d; re-pack the bundle with this lithos-pack)", got, ErrBundleVersion, BundleVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var b Bundle
	if err := dec.Decode(&b); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("manifest: trailing data after the JSON object")
	}
	if err := b.CheckLayout(); err != nil {
		return nil, err
	}
	return &b, nil
}

// CheckLayout checks what a manifest says without reading any file: format, version and
// alignment; the weights file name and a size that is a multiple of the alignment; each
// tensor's name (unique, non-empty), model, role, encoding and shape; offsets that are
// multiples of the alignment, in increasing order, each entry ending before the next begins
// and before the end of the weights file; sha256 values that are 64 lower-case hex digits;
// for BLM entries a layout, a stack whose segments add up to N, and a row-scale table of 4
// bytes per row of Blocks·Rows right after the packed matrix, Length = TotalBytes + its bytes;
// for plain entries a source and a transform. Errors name the tensor and the rule.
// The BLM geometry itself is re-derived by lithos/pack (blm.Geometry.Check).
func (b *Bundle) CheckLayout() error {
	if b.Format != BundleFormat {
		return fmt.Errorf("manifest: format %q, want %q", b.Format, BundleFormat)
	}
	if b.Version != BundleVersion {
		return fmt.Errorf("manifest: version %d: %w", b.Version, ErrBundleVersion)
	}
	if b.Alignment != BundleAlignment {
		return fmt.Errorf("manifest: alignment %d, want %d", b.Alignment, BundleAlignment)
	}
	if b.Weights.Path != BundleWeightsName {
		return fmt.Errorf("manifest: weights.path %q, want %q", b.Weights.Path, BundleWeightsName)
	}
	if b.Weights.Bytes < 0 || b.Weights.Bytes%b.Alignment != 0 {
		return fmt.Errorf("manifest: weights.bytes %d is not a non-negative multiple of the alignment %d", b.Weights.Bytes, b.Alignment)
	}
	if err := checkModel("target", &b.Target); err != nil {
		return err
	}
	if b.Draft != nil {
		if err := checkModel("draft", b.Draft); err != nil {
			return err
		}
	}
	for _, f := range b.Files {
		if err := checkFile("files", f); err != nil {
			return err
		}
	}
	seen := make(map[string]bool, len(b.Tensors))
	var end int64
	for i := range b.Tensors {
		t := &b.Tensors[i]
		if t.Name == "" {
			return fmt.Errorf("manifest: tensors[%d]: empty name", i)
		}
		if seen[t.Name] {
			return fmt.Errorf("manifest: tensor %s: listed twice", t.Name)
		}
		seen[t.Name] = true
		if err := checkTensor(t, b.Alignment); err != nil {
			return fmt.Errorf("manifest: tensor %s: %w", t.Name, err)
		}
		if t.Model == ModelDraft && b.Draft == nil {
			return fmt.Errorf("manifest: tensor %s: belongs to the draft, but the manifest has no draft", t.Name)
		}
		if t.Offset < end {
			return fmt.Errorf("manifest: tensor %s: offset %d is before the end (%d) of the previous tensor (tensors must be in file order without overlap)", t.Name, t.Offset, end)
		}
		end = t.Offset + t.Length
		if end > b.Weights.Bytes {
			return fmt.Errorf("manifest: tensor %s: bytes [%d, %d) end past weights.bytes %d", t.Name, t.Offset, end, b.Weights.Bytes)
		}
	}
	for i, s := range b.Skipped {
		if s.Name == "" || (s.Model != ModelTarget && s.Model != ModelDraft) || s.Reason == "" || s.Bytes < 0 {
			return fmt.Errorf("manifest: skipped[%d] (%q): needs a name, a model (target|draft), a reason and bytes ≥ 0", i, s.Name)
		}
	}
	return nil
}

func checkModel(what string, m *BundleModel) error {
	if len(m.Config) == 0 || m.Config[0] != '{' {
		return fmt.Errorf("manifest: %s.config: want the config.json object", what)
	}
	if m.Source.Commit != nil && !hexCommit.MatchString(*m.Source.Commit) {
		return fmt.Errorf("manifest: %s.source.commit %q: want 40 lower-case hex digits", what, *m.Source.Commit)
	}
	for _, f := range m.Source.Files {
		if err := checkFile(what+".source.files", f); err != nil {
			return err
		}
	}
	return nil
}

func checkFile(what string, f BundleFile) error {
	if !fs.ValidPath(f.Path) || f.Path == "." || strings.Contains(f.Path, `\`) {
		return fmt.Errorf("manifest: %s: path %q is not a clean relative path", what, f.Path)
	}
	if f.Bytes < 0 || !hexSHA256.MatchString(f.SHA256) {
		return fmt.Errorf("manifest: %s: %s: bytes %d, sha256 %q: want bytes ≥ 0 and 64 lower-case hex digits", what, f.Path, f.Bytes, f.SHA256)
	}
	return nil
}

func checkTensor(t *BundleTensor, align int64) error {
	if t.Model != ModelTarget && t.Model != ModelDraft {
		return fmt.Errorf("model %q: want %q or %q", t.Model, ModelTarget, ModelDraft)
	}
	switch t.Role {
	case RoleMatrix, RoleEmbedding, RoleNorm, RoleConv, RoleParam, RoleBias:
	default:
		return fmt.Errorf("role %q: unknown", t.Role)
	}
	if t.Offset < 0 || t.Offset%align != 0 {
		return fmt.Errorf("offset %d is not a multiple of the alignment %d", t.Offset, align)
	}
	if t.Length < 0 || t.StoredBytes < 0 || t.Length > math.MaxInt64-t.Offset {
		return fmt.Errorf("length %d, stored_bytes %d at offset %d: want ≥ 0 and an end that fits in 63 bits", t.Length, t.StoredBytes, t.Offset)
	}
	if !hexSHA256.MatchString(t.SHA256) {
		return fmt.Errorf("sha256 %q: want 64 lower-case hex digits", t.SHA256)
	}
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("shape %v: negative dimension", t.Shape)
		}
	}
	switch t.Encoding {
	case EncodingBLM:
		if t.Role != RoleMatrix {
			return fmt.Errorf("encoding blm with role %q: only matrices are BLM-packed", t.Role)
		}
		if t.Layout == nil || t.Stack == nil || t.RowScales == nil {
			return fmt.Errorf("a blm tensor needs layout, stack and row_scales")
		}
		if t.Source != "" || t.Transform != "" {
			return fmt.Errorf("source/transform are for plain tensors")
		}
		l := t.Layout
		if l.Format != t.Format {
			return fmt.Errorf("format %q but layout.format %q", t.Format, l.Format)
		}
		if len(t.Shape) != 2 || t.Shape[0] != l.N || t.Shape[1] != l.K {
			return fmt.Errorf("shape %v but layout [n, k] = [%d, %d]", t.Shape, l.N, l.K)
		}
		if l.Rows <= 0 || l.Rows > 1024 || l.Blocks < 0 || l.Blocks > math.MaxInt64/int64(4*l.Rows) || l.TotalBytes < 0 || l.TotalBytes > math.MaxInt64-t.Offset {
			return fmt.Errorf("layout: rows %d, blocks %d, total_bytes %d out of range", l.Rows, l.Blocks, l.TotalBytes)
		}
		var rows int64
		for i, s := range t.Stack.Segments {
			if s.Rows < 0 || s.Name == "" || len(s.Tensors) == 0 {
				return fmt.Errorf("stack.segments[%d]: needs a name, rows ≥ 0 and its tensors", i)
			}
			if !(s.TensorScale > 0) || math.IsInf(float64(s.TensorScale), 0) {
				return fmt.Errorf("stack.segments[%d] (%s): tensor_scale %v is not finite and positive", i, s.Name, s.TensorScale)
			}
			rows += s.Rows
		}
		if len(t.Stack.Segments) == 0 || rows != l.N {
			return fmt.Errorf("stack: %d segments of %d rows in all, for a matrix of %d rows", len(t.Stack.Segments), rows, l.N)
		}
		rs := t.RowScales
		count := l.Blocks * int64(l.Rows)
		if rs.Count != count || rs.Bytes != 4*count || rs.Offset != t.Offset+l.TotalBytes {
			return fmt.Errorf("row_scales {offset %d, bytes %d, count %d}: want {%d, %d, %d} (one float32 per row of %d blocks, after the packed matrix)",
				rs.Offset, rs.Bytes, rs.Count, t.Offset+l.TotalBytes, 4*count, count, l.Blocks)
		}
		if t.Length != l.TotalBytes+rs.Bytes {
			return fmt.Errorf("length %d: want layout.total_bytes %d + row_scales.bytes %d", t.Length, l.TotalBytes, rs.Bytes)
		}
	case EncodingPlain:
		if t.Layout != nil || t.Stack != nil || t.RowScales != nil {
			return fmt.Errorf("layout/stack/row_scales are for blm tensors")
		}
		if t.Source == "" {
			return fmt.Errorf("a plain tensor needs its source tensor")
		}
		switch t.Transform {
		case TransformNone, TransformOnePlus, TransformNegExp:
		default:
			return fmt.Errorf("transform %q: want %q, %q or %q", t.Transform, TransformNone, TransformOnePlus, TransformNegExp)
		}
		if t.StoredBytes != t.Length {
			return fmt.Errorf("stored_bytes %d ≠ length %d (plain arrays are copied)", t.StoredBytes, t.Length)
		}
	default:
		return fmt.Errorf("encoding %q: want %q or %q", t.Encoding, EncodingBLM, EncodingPlain)
	}
	return nil
}

// CheckFile checks the manifest against the weights file's size: it must be exactly
// Weights.Bytes. A shorter file (a truncated copy, an interrupted transfer) names the first
// tensor that does not fit in it. It is what a loader runs before mapping any tensor.
func (b *Bundle) CheckFile(size int64) error {
	if size == b.Weights.Bytes {
		return nil
	}
	if size < b.Weights.Bytes {
		for _, t := range b.Tensors {
			if t.Offset+t.Length > size {
				return fmt.Errorf("%s: %d bytes, the manifest says %d: truncated: tensor %s (bytes [%d, %d)) is past the end of the file",
					b.Weights.Path, size, b.Weights.Bytes, t.Name, t.Offset, t.Offset+t.Length)
			}
		}
		return fmt.Errorf("%s: %d bytes, the manifest says %d: truncated (in the padding after the last tensor)", b.Weights.Path, size, b.Weights.Bytes)
	}
	return fmt.Errorf("%s: %d bytes, the manifest says %d: the file is longer than the bundle that was written", b.Weights.Path, size, b.Weights.Bytes)
}

// Tensor returns the tensor called name.
func (b *Bundle) Tensor(name string) (*BundleTensor, bool) {
	for i := range b.Tensors {
		if b.Tensors[i].Name == name {
			return &b.Tensors[i], true
		}
	}
	return nil, false
}

// Model returns the target or draft record for a tensor's Model field (nil for a missing draft).
func (b *Bundle) Model(model string) *BundleModel {
	if model == ModelDraft {
		return b.Draft
	}
	return &b.Target
}
