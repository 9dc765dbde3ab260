package convert

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
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

	"lithos/formats/safetensors"
)

// synthChunkBytes is the tensor data generated and written per WriteAt, per worker.
const synthChunkBytes = 4 << 20

// SynthRandomOptions tune SynthRandom.
type SynthRandomOptions struct {
	// Seed selects the values: the same spec and seed give the same bytes.
	Seed uint64
	// Workers is the number of tensors filled at once (0: GOMAXPROCS).
	Workers int
	// Progress, when set, is called after every chunk with the total bytes
	// of tensor data and the bytes just written; it is called from several
	// goroutines at once and must be safe for that.
	Progress func(total, delta int64)
}

// SynthRandom writes the checkpoint spec describes (config.json, the
// quantization files, the index and the shards, laid out by SynthHeaders)
// into the new directory dir and fills every tensor with seeded random
// values that are plausible for its role, so that the packer, the NVFP4
// re-quantizer and the runtime read it as a real checkpoint:
//
//   - BF16/F16/F32 data: finite normal values with |x| in [2^-12, 2^-4);
//   - NVFP4 weight (U8, two E2M1 codes per byte): any byte;
//   - E4M3 block scales (".weight_scale", ".scales"): 0.25 … 15 (codes 0x28 … 0x57);
//   - E4M3 FP8 weights: any code but NaN (0x7F, 0xFF), so |w| ≤ 448 before scaling;
//   - F32 tensors whose name ends in a "*scale*" suffix (weight_scale_2,
//     weight_scale, input_scale, k_scale, v_scale; scalar or per channel):
//     positive, in [2^-14, 2^-9).
//
// The NVFP4 tensor scale is ModelOpt's multiplier (amax/(6·448)): block
// scale ≤ 15 times code ≤ 6 times it stays below 0.36, far under the
// divisor check nvfp4.CheckConvention applies at pack time
// (docs/formats.md, "the 448 check"). Random rather than zeros: a layout
// bug cannot hide behind zeros, and no tensor is all zero.
//
// Each tensor's values come from a ChaCha8 stream keyed by (seed, FNV-1a of
// its name), so they do not depend on the shard layout or on scheduling.
// Memory is one 4 MiB chunk per worker whatever the checkpoint size. The
// files are written into a hidden ".NAME.tmp-*" directory beside dir,
// synced, and renamed to dir when complete; dir must not exist. On error
// or cancellation the temporary directory is removed.
func SynthRandom(ctx context.Context, spec *SynthSpec, dir string, opt SynthRandomOptions) (*SynthResult, error) {
	dir = filepath.Clean(dir)
	if _, err := os.Lstat(dir); err == nil {
		return nil, fmt.Errorf("%s: already exists; synth writes a new directory", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(tmp)
		}
	}()
	res, err := SynthHeaders(ctx, spec, tmp)
	if err != nil {
		return nil, err
	}
	if err := fillRandom(ctx, tmp, res, opt); err != nil {
		return nil, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("rename %s to %s: %w", tmp, dir, err)
	}
	ok = true
	return res, nil
}

// fillRandom fills every tensor of the shards of res under dir and syncs them.
func fillRandom(ctx context.Context, dir string, res *SynthResult, opt SynthRandomOptions) error {
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, sf := range res.Files {
		if sf.HeaderBytes == 0 {
			continue
		}
		p := filepath.Join(dir, sf.Name)
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			g.Wait()
			return err
		}
		files = append(files, f)
		hdr, err := safetensors.ReadHeader(f, sf.Bytes)
		if err != nil {
			g.Wait()
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, t := range hdr.Tensors {
			g.Go(func() error {
				if err := fillTensor(gctx, f, t, opt.Seed, res.TensorBytes, opt.Progress); err != nil {
					return fmt.Errorf("%s: tensor %s: %w", p, t.Name, err)
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, f := range files {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", f.Name(), err)
		}
	}
	return nil
}

// fillTensor writes random plausible data over tensor t of f.
func fillTensor(ctx context.Context, f *os.File, t safetensors.Tensor, seed uint64, total int64, progress func(total, delta int64)) error {
	h := fnv.New64a()
	h.Write([]byte(t.Name))
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	binary.LittleEndian.PutUint64(key[8:], h.Sum64())
	r := rand.NewChaCha8(key)
	buf := make([]byte, min(t.Size, synthChunkBytes))
	k := synthKindOf(t)
	for done := int64(0); done < t.Size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := buf[:min(int64(len(buf)), t.Size-done)]
		r.Read(b)
		synthShape(k, b)
		if _, err := f.WriteAt(b, t.Offset+done); err != nil {
			return err
		}
		done += int64(len(b))
		if progress != nil {
			progress(total, int64(len(b)))
		}
	}
	return nil
}

// synthKind is the value family SynthRandom draws a tensor from.
type synthKind int

const (
	synthBytes      synthKind = iota // any byte (NVFP4 codes, integers)
	synthBF16                        // finite BF16, |x| in [2^-12, 2^-4)
	synthF16                         // finite F16, same range
	synthF32                         // finite F32, same range
	synthF32Scale                    // positive F32 in [2^-14, 2^-9): tensor, channel and activation scales
	synthE4M3Weight                  // E4M3 codes, NaN (0x7F, 0xFF) excluded
	synthE4M3Scale                   // positive E4M3 block scales 0x28 … 0x57 (0.25 … 15)
)

func synthKindOf(t safetensors.Tensor) synthKind {
	base := path.Ext(t.Name)
	switch t.DType {
	case safetensors.BF16:
		return synthBF16
	case safetensors.F16:
		return synthF16
	case safetensors.F32:
		if strings.Contains(base, "scale") {
			return synthF32Scale
		}
		return synthF32
	case safetensors.F8E4M3:
		if base == ".weight_scale" || base == ".scales" {
			return synthE4M3Scale
		}
		return synthE4M3Weight
	}
	return synthBytes
}

// synthShape maps random bytes to values of a kind, in place.
func synthShape(k synthKind, b []byte) {
	switch k {
	case synthBF16:
		for i := 0; i+1 < len(b); i += 2 {
			v := binary.LittleEndian.Uint16(b[i:])
			e := uint16(115 + (v>>7)&7) // biased exponent 115 … 122
			binary.LittleEndian.PutUint16(b[i:], v&0x807F|e<<7)
		}
	case synthF16:
		for i := 0; i+1 < len(b); i += 2 {
			v := binary.LittleEndian.Uint16(b[i:])
			e := uint16(3 + (v>>10)&7) // biased exponent 3 … 10
			binary.LittleEndian.PutUint16(b[i:], v&0x83FF|e<<10)
		}
	case synthF32:
		for i := 0; i+3 < len(b); i += 4 {
			v := binary.LittleEndian.Uint32(b[i:])
			e := uint32(115 + (v>>23)&7)
			binary.LittleEndian.PutUint32(b[i:], v&0x807FFFFF|e<<23)
		}
	case synthF32Scale:
		for i := 0; i+3 < len(b); i += 4 {
			v := binary.LittleEndian.Uint32(b[i:])
			x := math.Ldexp(1+float64(v&0xFFFF)/65536, -14+int(v>>16)%5)
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(x)))
		}
	case synthE4M3Weight:
		for i, c := range b {
			if c&0x7F == 0x7F {
				b[i] = c ^ 0x01
			}
		}
	case synthE4M3Scale:
		for i, c := range b {
			b[i] = 0x28 + c%0x30
		}
	}
}

// CutSynthSpec returns a copy of spec with the decoder stack cut to its
// first layers layers (the config's — or text_config's — num_hidden_layers
// and layer_types; 0 keeps them all) and, unless kept, without the vision
// tower (vision_config removed, with the omit patterns that named its
// tensors) and the MTP block (mtp_num_hidden_layers 0). maxShardBytes > 0
// replaces the shard size (bytes of tensor data per file). It errors when
// layers is negative or exceeds the spec's layer count. It is how a
// multi-GB slice of the 27B keeps the real widths and formats.
func CutSynthSpec(spec *SynthSpec, layers int, keepVision, keepMTP bool, maxShardBytes int64) (*SynthSpec, error) {
	if layers < 0 {
		return nil, fmt.Errorf("layers %d: want 0 (all) or more", layers)
	}
	if maxShardBytes < 0 {
		return nil, fmt.Errorf("shard bytes %d: want 0 (the spec's) or more", maxShardBytes)
	}
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
			return nil, fmt.Errorf("spec config: num_hidden_layers is %v, fewer than the %d layers asked for", n, layers)
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
