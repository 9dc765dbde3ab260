package quantize

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"

	"golang.org/x/sync/errgroup"

	"lithos/convert"
	"lithos/formats/bf16"
	"lithos/formats/f16"
	"lithos/formats/nvfp4"
	"lithos/formats/safetensors"
)

// DefaultChunkBytes is the source bytes one worker reads per step.
const DefaultChunkBytes = 4 << 20

// maxConfigBytes bounds the config.json read.
const maxConfigBytes = 16 << 20

// Options tune Run. The zero value is the documented default.
type Options struct {
	// Division rounds weight_scale_2 = amax/2688 (default nvfp4.DivideExact, the
	// rule ARCHITECTURE.md §3.1 states; DivideByReciprocal reproduces exports
	// made by ModelOpt on a GPU).
	Division nvfp4.Division
	// Workers is the number of tensors processed at once (default GOMAXPROCS).
	Workers int
	// ChunkBytes is the source bytes read per step of a worker (default
	// DefaultChunkBytes; at least one row is read).
	ChunkBytes int
	// SourceRepo and SourceRevision are recorded in conversion.json; when
	// empty they are derived from an HF cache snapshot path, else null.
	SourceRepo, SourceRevision string
	// ToolVersion is recorded in conversion.json and in the producer version
	// of the quantization configs ("lithos-pack <ToolVersion>").
	ToolVersion string
	// Progress, when set, is called once with the total source tensor bytes
	// (delta 0), then with each tensor's source bytes when it is done. It is
	// called from several goroutines at once.
	Progress func(total, delta int64)
	// Logger receives debug lines (default slog.Default()).
	Logger *slog.Logger
}

// Run quantizes the draft head in srcDir into the new directory outDir
// (see the package doc for the layout) and returns what it wrote to
// conversion.json. outDir must not exist; its parent must. The output is
// built in a temporary directory beside outDir and renamed into place only
// when every file is complete and synced; on any error (bad input, I/O,
// ctx cancelled) the temporary directory is removed and outDir is not
// created.
//
// Errors name the file, tensor (and element [row, col] for NaN/Inf) or
// config key and the rule broken: config and tensors that disagree (layer
// count, hidden size, vocabulary, Markov rank, …), a linear whose input
// dimension is not a multiple of 16, a non-float linear (already
// quantized), NaN or ±Inf in any float tensor, an existing outDir.
func Run(ctx context.Context, srcDir, outDir string, opt Options) (_ *Conversion, err error) {
	if opt.Workers <= 0 {
		opt.Workers = runtime.GOMAXPROCS(0)
	}
	if opt.ChunkBytes <= 0 {
		opt.ChunkBytes = DefaultChunkBytes
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Division != nvfp4.DivideExact && opt.Division != nvfp4.DivideByReciprocal {
		return nil, fmt.Errorf("quantize: unknown tensor-scale division %v", opt.Division)
	}
	outDir = filepath.Clean(outDir)
	if _, err := os.Lstat(outDir); err == nil {
		return nil, fmt.Errorf("output directory %s exists: quantize writes a new directory (remove it or choose another -o)", outDir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	parent := filepath.Dir(outDir)
	if st, err := os.Stat(parent); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("output directory %s: parent %s is not an existing directory", outDir, parent)
	}

	cfgBytes, err := readConfig(srcDir)
	if err != nil {
		return nil, err
	}
	cfg, err := convert.ParseConfig(cfgBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(srcDir, ConfigFile), err)
	}
	if !cfg.IsDraft() {
		return nil, fmt.Errorf("%s: not a DSpark/DFlash draft head (architectures %v, no draft fields): quantize converts draft heads only",
			filepath.Join(srcDir, ConfigFile), cfg.Architectures)
	}
	if cfg.Quantization != nil || cfg.Lithos != nil {
		return nil, fmt.Errorf("%s: declares a quantization already: quantize reads a BF16 head", filepath.Join(srcDir, ConfigFile))
	}
	model, err := safetensors.OpenModel(ctx, srcDir)
	if err != nil {
		return nil, err
	}
	defer model.Close()
	p, err := makePlan(cfg, model)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", srcDir, err)
	}
	producerVersion := "lithos-pack " + cmp.Or(opt.ToolVersion, "dev")
	newCfg, err := rewriteConfig(cfgBytes, producerVersion, p.exclude)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", srcDir, err)
	}
	hfq, err := hfQuantConfig(producerVersion, p.exclude)
	if err != nil {
		return nil, err
	}
	prefix, layout, err := safetensors.EncodeHeader(p.specs, map[string]string{"format": "pt"})
	if err != nil {
		return nil, fmt.Errorf("output header: %w", err)
	}
	at := make(map[string]safetensors.Tensor, len(layout))
	var total int64 = int64(len(prefix))
	for _, t := range layout {
		at[t.Name] = t
		total += t.Size
	}

	tmp, err := os.MkdirTemp(parent, filepath.Base(outDir)+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	defer func() {
		if err != nil {
			if rerr := os.RemoveAll(tmp); rerr != nil {
				opt.Logger.Warn("quantize: could not remove temporary directory", "dir", tmp, "err", rerr)
			}
		}
	}()
	opt.Logger.Debug("quantize", "src", srcDir, "tmp", tmp, "tensors", len(p.items), "output_bytes", total, "workers", opt.Workers)

	conv := &Conversion{
		FormatVersion: conversionFmtV1, Tool: ConversionTool, ToolVersion: cmp.Or(opt.ToolVersion, "dev"),
		Method: methodFor(opt.Division), Quantized: []TensorErr{}, Kept: []Kept{},
	}
	conv.Source = sourceOf(srcDir, opt)
	inputs, err := inputFiles(srcDir, model)
	if err != nil {
		return nil, err
	}
	conv.Inputs = make([]FileHash, len(inputs))

	out, err := os.OpenFile(filepath.Join(tmp, ModelFile), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", ModelFile, err)
	}
	defer func() {
		if out != nil {
			out.Close()
		}
	}()
	if err := out.Truncate(total); err != nil {
		return nil, fmt.Errorf("size %s: %w", ModelFile, err)
	}
	if _, err := out.WriteAt(prefix, 0); err != nil {
		return nil, fmt.Errorf("write %s header: %w", ModelFile, err)
	}

	stats := make([]TensorErr, len(p.items))
	var srcBytes int64
	for _, it := range p.items {
		srcBytes += it.src.Size
	}
	if opt.Progress != nil {
		opt.Progress(srcBytes, 0)
	}
	order := make([]int, len(p.items)) // largest first, for balance; bytes do not depend on it
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p.items[b].src.Size, p.items[a].src.Size) })

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opt.Workers)
	for i, path := range inputs {
		g.Go(func() error {
			h, err := hashFile(gctx, filepath.Join(srcDir, filepath.FromSlash(path)))
			if err != nil {
				return err
			}
			h.Path = path
			conv.Inputs[i] = h
			return nil
		})
	}
	for _, i := range order {
		it := &p.items[i]
		g.Go(func() error {
			w := worker{ctx: gctx, out: out, chunk: opt.ChunkBytes, div: opt.Division}
			if it.quantize {
				s, err := w.quantize(it, at[it.outs[0]], at[it.outs[1]], at[it.outs[2]])
				if err != nil {
					return err
				}
				stats[i] = s
			} else if err := w.copy(it, at[it.outs[0]]); err != nil {
				return err
			}
			if opt.Progress != nil {
				opt.Progress(0, it.src.Size)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := out.Sync(); err != nil {
		return nil, fmt.Errorf("sync %s: %w", ModelFile, err)
	}
	if err := out.Close(); err != nil {
		return nil, fmt.Errorf("close %s: %w", ModelFile, err)
	}
	out = nil

	for i, it := range p.items {
		conv.SourceTensorBytes += it.src.Size
		if it.quantize {
			conv.Quantized = append(conv.Quantized, stats[i])
		} else {
			conv.Kept = append(conv.Kept, Kept{Name: it.name, DType: string(it.src.DType), Shape: nonNilShape(it.src.Shape), Reason: it.reason})
		}
	}
	conv.OutputTensorBytes = total - int64(len(prefix))

	newCfg = append(newCfg, '\n')
	hfq = append(hfq, '\n')
	for _, f := range []struct {
		name string
		data []byte
	}{{ConfigFile, newCfg}, {HFQuantFile, hfq}} {
		if err := writeFileSync(filepath.Join(tmp, f.name), f.data); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{ConfigFile, HFQuantFile, ModelFile} {
		h, err := hashFile(ctx, filepath.Join(tmp, name))
		if err != nil {
			return nil, err
		}
		h.Path = name
		conv.Outputs = append(conv.Outputs, h)
	}
	convJSON, err := marshalIndent(conv, "")
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(filepath.Join(tmp, ConversionFile), append(convJSON, '\n')); err != nil {
		return nil, err
	}
	if err := syncDir(tmp); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(outDir); err == nil {
		return nil, fmt.Errorf("output directory %s appeared while quantizing: not replacing it", outDir)
	}
	if err := os.Rename(tmp, outDir); err != nil {
		return nil, fmt.Errorf("publish %s: %w", outDir, err)
	}
	if err := syncDir(parent); err != nil {
		// The directory is complete and in place; only its durability across
		// a crash is unconfirmed.
		opt.Logger.Warn("quantize: could not sync parent directory", "dir", parent, "err", err)
	}
	return conv, nil
}

func nonNilShape(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

func readConfig(srcDir string) ([]byte, error) {
	path := filepath.Join(srcDir, ConfigFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("draft head: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxConfigBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxConfigBytes)
	}
	return b, nil
}

func sourceOf(srcDir string, opt Options) Source {
	var s Source
	abs, err := filepath.Abs(srcDir)
	if err != nil {
		abs = srcDir
	}
	if repo, rev, ok := SourceFromPath(abs); ok {
		s.Repo, s.Revision = &repo, &rev
	}
	if opt.SourceRepo != "" {
		r := opt.SourceRepo
		s.Repo = &r
	}
	if opt.SourceRevision != "" {
		r := opt.SourceRevision
		s.Revision = &r
	}
	return s
}

// inputFiles lists the source files hashed into conversion.json, relative to
// srcDir, sorted.
func inputFiles(srcDir string, m *safetensors.Model) ([]string, error) {
	files := []string{ConfigFile}
	if m.Index != nil {
		files = append(files, safetensors.IndexName)
		files = append(files, m.Index.Shards()...)
	} else {
		rel, err := filepath.Rel(srcDir, m.Files[0].Path)
		if err != nil {
			return nil, err
		}
		files = append(files, filepath.ToSlash(rel))
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

func hashFile(ctx context.Context, path string) (FileHash, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileHash{}, fmt.Errorf("hash: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return FileHash{}, err
		}
		k, err := f.Read(buf)
		h.Write(buf[:k])
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return FileHash{}, fmt.Errorf("hash %s: %w", path, err)
		}
	}
	return FileHash{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", filepath.Base(path), err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", filepath.Base(path), err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// worker processes one tensor at a time with chunk-sized buffers.
type worker struct {
	ctx   context.Context
	out   *os.File
	chunk int
	div   nvfp4.Division
}

func elemSize(d safetensors.DType) int64 {
	if d == safetensors.F32 {
		return 4
	}
	return 2
}

// decode widens rows of BF16/F16/F32 source bytes exactly to float32.
func decode(dst []float32, src []byte, d safetensors.DType) error {
	switch d {
	case safetensors.BF16:
		return bf16.Decode(dst, src)
	case safetensors.F16:
		return f16.Decode(dst, src)
	case safetensors.F32:
		if len(src) != 4*len(dst) {
			return fmt.Errorf("decode f32: %d bytes for %d elements", len(src), len(dst))
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		return nil
	}
	return fmt.Errorf("decode: dtype %s is not a float type", d)
}

// firstNonFinite returns the index of the first NaN or ±Inf in w, or -1.
func firstNonFinite(w []float32) int {
	for i, x := range w {
		if math.Float32bits(x)&0x7F800000 == 0x7F800000 {
			return i
		}
	}
	return -1
}

func (w *worker) rowsPerChunk(rowBytes int64) int64 {
	return max(1, int64(w.chunk)/rowBytes)
}

func (w *worker) readRows(it *item, buf []byte, r0, rows int64) ([]byte, error) {
	rowBytes := it.k * elemSize(it.src.DType)
	b := buf[:rows*rowBytes]
	if _, err := it.file.Section(it.src).ReadAt(b, r0*rowBytes); err != nil {
		return nil, fmt.Errorf("read tensor %s rows %d–%d from %s: %w", it.name, r0, r0+rows-1, it.file.Path, err)
	}
	return b, nil
}

// badElement names the element at flat index r0·K + i of the tensor by its
// index in the source shape.
func badElement(it *item, r0 int64, i int, x float32) error {
	idx := r0*it.k + int64(i)
	pos := make([]int64, len(it.src.Shape))
	rem := idx
	for d := len(pos) - 1; d >= 0; d-- {
		if it.src.Shape[d] > 0 {
			pos[d] = rem % it.src.Shape[d]
			rem /= it.src.Shape[d]
		}
	}
	return fmt.Errorf("%s: tensor %s: element %s (flat index %d) is %v: weights must be finite",
		it.file.Path, it.name, shapeString(pos), idx, x)
}

// subBytes bounds the float32 working set of one step (source rows decoded,
// quantized, dequantized and compared while they sit in the L2 cache).
const subBytes = 64 << 10

// quantize streams one linear: pass 1 finds amax (and refuses NaN/Inf),
// pass 2 quantizes row chunks, measures the error and writes codes and
// scales at their offsets in the output file. A chunk (ChunkBytes of source
// rows) is read at once and processed in sub-chunks of about subBytes of
// float32.
func (w *worker) quantize(it *item, oW, oS, oS2 safetensors.Tensor) (TensorErr, error) {
	es := elemSize(it.src.DType)
	rows := min(w.rowsPerChunk(it.k*es), it.n)
	sub := min(max(1, subBytes/(it.k*4)), rows)
	buf := make([]byte, rows*it.k*es)
	wf := make([]float32, sub*it.k)
	single := rows == it.n // the whole tensor fits one chunk: read it once

	var amaxBits uint32
	for r0 := int64(0); r0 < it.n; r0 += rows {
		if err := w.ctx.Err(); err != nil {
			return TensorErr{}, err
		}
		nr := min(rows, it.n-r0)
		b, err := w.readRows(it, buf, r0, nr)
		if err != nil {
			return TensorErr{}, err
		}
		m, err := scan(it, b, r0, wf)
		if err != nil {
			return TensorErr{}, err
		}
		amaxBits = max(amaxBits, m)
	}
	amax := math.Float32frombits(amaxBits)
	s2 := nvfp4.TensorScale(amax, w.div)

	codes := make([]byte, rows*it.k/2)
	scales := make([]byte, rows*it.k/nvfp4.BlockSize)
	deq := make([]float32, sub*it.k)
	var acc errAcc
	var flushed int64
	const bs = nvfp4.BlockSize
	for r0 := int64(0); r0 < it.n; r0 += rows {
		if err := w.ctx.Err(); err != nil {
			return TensorErr{}, err
		}
		nr := min(rows, it.n-r0)
		b := buf[:nr*it.k*es]
		if !single {
			var err error
			if b, err = w.readRows(it, buf, r0, nr); err != nil {
				return TensorErr{}, err
			}
		}
		for s0 := int64(0); s0 < nr; s0 += sub {
			ns := min(sub, nr-s0)
			x := wf[:ns*it.k]
			if err := decode(x, b[s0*it.k*es:(s0+ns)*it.k*es], it.src.DType); err != nil {
				return TensorErr{}, fmt.Errorf("tensor %s: %w", it.name, err)
			}
			c := codes[s0*it.k/2 : (s0+ns)*it.k/2]
			sc := scales[s0*it.k/bs : (s0+ns)*it.k/bs]
			if err := nvfp4.QuantizeRows(c, sc, x, int(it.k), s2); err != nil {
				return TensorErr{}, fmt.Errorf("tensor %s rows %d–%d: %w", it.name, r0+s0, r0+s0+ns-1, err)
			}
			d := deq[:ns*it.k]
			if err := nvfp4.DecodeRows(d, c, sc, int(it.k), s2); err != nil {
				return TensorErr{}, fmt.Errorf("tensor %s: %w", it.name, err)
			}
			acc.add(x, d)
			for j, v := range sc {
				if v == 0 {
					for _, y := range x[j*bs : (j+1)*bs] {
						if y != 0 {
							flushed++
							break
						}
					}
				}
			}
		}
		if _, err := w.out.WriteAt(codes[:nr*it.k/2], oW.Offset+r0*it.k/2); err != nil {
			return TensorErr{}, fmt.Errorf("write %s: %w", oW.Name, err)
		}
		if _, err := w.out.WriteAt(scales[:nr*it.k/bs], oS.Offset+r0*it.k/bs); err != nil {
			return TensorErr{}, fmt.Errorf("write %s: %w", oS.Name, err)
		}
	}
	var s2b [4]byte
	binary.LittleEndian.PutUint32(s2b[:], math.Float32bits(s2))
	if _, err := w.out.WriteAt(s2b[:], oS2.Offset); err != nil {
		return TensorErr{}, fmt.Errorf("write %s: %w", oS2.Name, err)
	}
	te := TensorErr{Name: it.name, Shape: []int64{it.n, it.k}, SourceDType: string(it.src.DType),
		Amax: amax, WeightScale2: s2, FlushedBlocks: flushed}
	acc.fill(&te)
	return te, nil
}

// scan checks that rows r0… of a BF16/F16/F32 tensor, b holding their
// source bytes, are finite and returns the bits of their largest magnitude
// (as float32 bits). BF16 is scanned on its bits (|x| orders as its bits;
// exponent 0xFF is Inf/NaN); other dtypes are decoded through wf (whole
// rows) in pieces.
func scan(it *item, b []byte, r0 int64, wf []float32) (uint32, error) {
	if it.src.DType == safetensors.BF16 {
		var m uint16
		for i := 0; i < len(b); i += 2 {
			v := binary.LittleEndian.Uint16(b[i:])
			if v&0x7FFF >= 0x7F80 {
				return 0, badElement(it, r0, i/2, bf16.ToFloat32(v))
			}
			m = max(m, v&0x7FFF)
		}
		return uint32(m) << 16, nil
	}
	es := elemSize(it.src.DType)
	step := int64(len(wf)) / it.k * it.k * es // whole rows
	var m uint32
	for off := int64(0); off < int64(len(b)); off += step {
		part := b[off:min(off+step, int64(len(b)))]
		x := wf[:int64(len(part))/es]
		if err := decode(x, part, it.src.DType); err != nil {
			return 0, fmt.Errorf("tensor %s: %w", it.name, err)
		}
		if i := firstNonFinite(x); i >= 0 {
			return 0, badElement(it, r0, int(off/es)+i, x[i])
		}
		for _, v := range x {
			m = max(m, math.Float32bits(v)&0x7FFFFFFF)
		}
	}
	return m, nil
}

// copy streams a kept tensor to its output offset unchanged, refusing
// NaN/Inf in float tensors.
func (w *worker) copy(it *item, o safetensors.Tensor) error {
	if it.src.Size == 0 {
		return nil
	}
	isFloat := slices.Contains(floatDTypes, it.src.DType)
	rowBytes := int64(1)
	if isFloat {
		rowBytes = it.k * elemSize(it.src.DType)
	} else {
		it = &item{name: it.name, file: it.file, src: it.src, n: it.src.Size, k: 1}
	}
	rows := min(w.rowsPerChunk(rowBytes), it.n)
	buf := make([]byte, rows*rowBytes)
	var wf []float32
	if isFloat && it.src.DType != safetensors.BF16 {
		wf = make([]float32, min(max(1, subBytes/(it.k*4)), rows)*it.k)
	}
	for r0 := int64(0); r0 < it.n; r0 += rows {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		nr := min(rows, it.n-r0)
		b := buf[:nr*rowBytes]
		if _, err := it.file.Section(it.src).ReadAt(b, r0*rowBytes); err != nil {
			return fmt.Errorf("read tensor %s from %s: %w", it.name, it.file.Path, err)
		}
		if isFloat {
			if _, err := scan(it, b, r0, wf); err != nil {
				return err
			}
		}
		if _, err := w.out.WriteAt(b, o.Offset+r0*rowBytes); err != nil {
			return fmt.Errorf("write %s: %w", o.Name, err)
		}
	}
	return nil
}

// shapeString formats dims as "[a, b]".
func shapeString(dims []int64) string {
	b := []byte{'['}
	for i, d := range dims {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return string(append(b, ']'))
}
