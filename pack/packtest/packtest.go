// Package packtest writes synthetic checkpoints with random tensor data for the bundle tests
// and the pack benchmark (tools/bench_pack.sh): the layout of a lithos/convert.SynthSpec (the
// embedded model specs of lithos/manifests, or any spec), every data byte filled with seeded
// random values that are valid for the tensor's role — finite BF16/F16/F32 values, FP8 weight
// codes that are not NaN, positive E4M3 block scales, positive F32 tensor scales — so that the
// pack, the NVFP4 re-quantizer and the runtime can read it. Random, not zeros: packing and
// hashing cost the same whatever the bytes, but a layout bug cannot hide behind zeros.
//
// Imports: lithos/convert (SynthHeaders lays the files out), lithos/formats/safetensors.
package packtest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sync/errgroup"

	"lithos/convert"
	"lithos/formats/safetensors"
)

// chunkBytes is the data written per WriteAt.
const chunkBytes = 4 << 20

// WriteCheckpoint writes the checkpoint spec describes into the new directory dir (config.json,
// the quantization files, the index and the shards, as convert.SynthHeaders lays them out)
// and fills every tensor with random values derived from seed and the tensor's name, so the
// same arguments give the same bytes. Tensors are filled by several goroutines at once; memory
// is one 4 MiB chunk per goroutine. It returns what SynthHeaders wrote.
func WriteCheckpoint(ctx context.Context, spec *convert.SynthSpec, dir string, seed uint64) (*convert.SynthResult, error) {
	if _, err := os.Stat(dir); err == nil {
		return nil, fmt.Errorf("%s: already exists", dir)
	}
	res, err := convert.SynthHeaders(ctx, spec, dir)
	if err != nil {
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, sf := range res.Files {
		if sf.HeaderBytes == 0 {
			continue
		}
		p := filepath.Join(dir, sf.Name)
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		hdr, err := safetensors.ReadHeader(f, st.Size())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, t := range hdr.Tensors {
			g.Go(func() error {
				if err := fill(gctx, f, t, seed); err != nil {
					return fmt.Errorf("%s: tensor %s: %w", p, t.Name, err)
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return res, nil
}

// fill writes random valid data over tensor t of f.
func fill(ctx context.Context, f *os.File, t safetensors.Tensor, seed uint64) error {
	h := fnv.New64a()
	h.Write([]byte(t.Name))
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	binary.LittleEndian.PutUint64(key[8:], h.Sum64())
	r := rand.NewChaCha8(key)
	buf := make([]byte, min(t.Size, chunkBytes))
	kind := kindOf(t)
	for done := int64(0); done < t.Size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := buf[:min(int64(len(buf)), t.Size-done)]
		r.Read(b)
		shape(kind, b)
		if _, err := f.WriteAt(b, t.Offset+done); err != nil {
			return err
		}
		done += int64(len(b))
	}
	return nil
}

type kind int

const (
	kindBytes      kind = iota // any byte (NVFP4 codes, integers)
	kindBF16                   // finite BF16, |x| in [2^-12, 2^-4)
	kindF16                    // finite F16, same range
	kindF32                    // finite F32, same range
	kindF32Scale               // positive F32 in [2^-14, 2^-9): tensor and activation scales
	kindE4M3Weight             // E4M3 codes, NaN (0x7F, 0xFF) excluded
	kindE4M3Scale              // positive E4M3 block scales 0x28 … 0x57 (0.25 … 15)
)

func kindOf(t safetensors.Tensor) kind {
	base := path.Ext(t.Name)
	switch t.DType {
	case safetensors.BF16:
		return kindBF16
	case safetensors.F16:
		return kindF16
	case safetensors.F32:
		if t.Size == 4 && strings.Contains(base, "scale") {
			return kindF32Scale
		}
		return kindF32
	case safetensors.F8E4M3:
		if base == ".weight_scale" || base == ".scales" {
			return kindE4M3Scale
		}
		return kindE4M3Weight
	}
	return kindBytes
}

// shape maps random bytes to valid values of a kind, in place.
func shape(k kind, b []byte) {
	switch k {
	case kindBF16:
		for i := 0; i+1 < len(b); i += 2 {
			v := binary.LittleEndian.Uint16(b[i:])
			e := uint16(115 + (v>>7)&7) // biased exponent 115 … 122
			binary.LittleEndian.PutUint16(b[i:], v&0x807F|e<<7)
		}
	case kindF16:
		for i := 0; i+1 < len(b); i += 2 {
			v := binary.LittleEndian.Uint16(b[i:])
			e := uint16(3 + (v>>10)&7) // biased exponent 3 … 10
			binary.LittleEndian.PutUint16(b[i:], v&0x83FF|e<<10)
		}
	case kindF32:
		for i := 0; i+3 < len(b); i += 4 {
			v := binary.LittleEndian.Uint32(b[i:])
			e := uint32(115 + (v>>23)&7)
			binary.LittleEndian.PutUint32(b[i:], v&0x807FFFFF|e<<23)
		}
	case kindF32Scale:
		for i := 0; i+3 < len(b); i += 4 {
			v := binary.LittleEndian.Uint32(b[i:])
			x := math.Ldexp(1+float64(v&0xFFFF)/65536, -14+int(v>>16)%5)
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(x)))
		}
	case kindE4M3Weight:
		for i, c := range b {
			if c&0x7F == 0x7F {
				b[i] = c ^ 0x01
			}
		}
	case kindE4M3Scale:
		for i, c := range b {
			b[i] = 0x28 + c%0x30
		}
	}
}

// ScaleSpec returns a copy of spec with the decoder stack cut to its first layers layers (the
// config's num_hidden_layers and layer_types; 0 keeps them) and, unless kept, without the
// vision tower (vision_config removed, with the omit patterns that named its tensors) and the
// MTP block (mtp_num_hidden_layers 0). maxShardBytes > 0 replaces the shard size. It is how
// the pack benchmark makes a multi-GB slice of the 27B with the real widths.
func ScaleSpec(spec *convert.SynthSpec, layers int, keepVision, keepMTP bool, maxShardBytes int64) (*convert.SynthSpec, error) {
	var cfg map[string]any
	if err := json.Unmarshal(spec.Config, &cfg); err != nil {
		return nil, fmt.Errorf("spec config: %w", err)
	}
	text := cfg
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		text = tc
	}
	if layers > 0 {
		n, _ := text["num_hidden_layers"].(float64)
		if layers > int(n) {
			return nil, fmt.Errorf("spec has %v layers, fewer than %d", n, layers)
		}
		text["num_hidden_layers"] = layers
		if lt, ok := text["layer_types"].([]any); ok && len(lt) >= layers {
			text["layer_types"] = lt[:layers]
		}
	}
	out := *spec
	if !keepMTP {
		if _, ok := text["mtp_num_hidden_layers"]; ok {
			text["mtp_num_hidden_layers"] = 0
		}
	}
	if !keepVision {
		delete(cfg, "vision_config")
		out.Omit = nil
		for _, o := range spec.Omit {
			if !strings.Contains(o, "visual") {
				out.Omit = append(out.Omit, o)
			}
		}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	out.Config = b
	if maxShardBytes > 0 {
		out.Shards.MaxBytes = maxShardBytes
	}
	return &out, nil
}
