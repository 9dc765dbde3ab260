package pack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"lithos/convert/quantize"
	"lithos/formats"
	"lithos/formats/nvfp4"
	"lithos/formats/safetensors"
	"lithos/hub"
	"lithos/manifests"
	"lithos/pack/blm"
)

// VerifyOptions tunes Verify.
type VerifyOptions struct {
	// Deep unpacks every tensor and compares it with the source checkpoint, when present.
	Deep bool
	// TargetDir and DraftDir are the source checkouts Deep compares with. When empty, Deep
	// looks for the HF cache snapshot of the recorded repo and commit (in CacheDir), then for
	// the directory recorded at pack time.
	TargetDir, DraftDir string
	// CacheDir is the HF hub cache (default hub.CacheDirFromEnv()).
	CacheDir string
	// TempDir holds a re-quantized draft while Deep compares it (default os.TempDir()).
	TempDir string
	// Workers is the number of tensors checked at once (default GOMAXPROCS).
	Workers int
	// Progress, when set, is called with (total bytes to read, 0) once, then with each chunk read.
	Progress func(total, delta int64)
}

// Problem is one thing wrong with a bundle.
type Problem struct {
	Tensor  string `json:"tensor,omitempty"` // the tensor concerned, if any
	File    string `json:"file,omitempty"`   // the file concerned, if not the weights
	Message string `json:"message"`
}

// String renders the problem as "tensor NAME: message" (or "FILE: message").
func (p Problem) String() string {
	switch {
	case p.Tensor != "":
		return "tensor " + p.Tensor + ": " + p.Message
	case p.File != "":
		return p.File + ": " + p.Message
	}
	return p.Message
}

// VerifyReport is what Verify checked and found.
type VerifyReport struct {
	Bundle       string      `json:"bundle"`
	Tensors      int         `json:"tensors"`
	WeightsBytes int64       `json:"weights_bytes"`
	Files        int         `json:"files"`
	Problems     []Problem   `json:"problems"`
	Deep         *DeepReport `json:"deep,omitempty"`
}

// DeepReport says what Deep compared.
type DeepReport struct {
	Compared    int          `json:"compared"`     // tensors unpacked and compared with their source
	NotCompared int          `json:"not_compared"` // tensors whose source was not found
	Sources     []DeepSource `json:"sources"`
}

// DeepSource is where one model's source was found (or why not).
type DeepSource struct {
	Model string `json:"model"`
	Dir   string `json:"dir,omitempty"`
	Note  string `json:"note"`
}

// Verify checks a bundle: OpenBundle's checks, then every tensor's sha256 over its bytes of
// the weights file, zeros in every padding gap, each BLM tensor's row-scale table against its
// stack's tensor scales, and every copied file's sha256. With Deep, each tensor is unpacked
// (blm.UnpackStack, which also refuses non-zero padding inside the layout) and compared byte for
// byte with its source checkpoint, tensor scales bit for bit; a draft the bundle holds
// re-quantized is re-quantized again from its source (deterministic) and compared with that.
//
// The report lists every problem, each naming the tensor or file. The error is nil only when
// there is none; otherwise it names the first (and the count). An error with a nil report
// means the bundle could not be opened at all.
func Verify(ctx context.Context, dir string, opt VerifyOptions) (*VerifyReport, error) {
	b, err := OpenBundle(dir)
	if err != nil {
		return nil, err
	}
	m := b.Manifest
	rep := &VerifyReport{Bundle: dir, Tensors: len(m.Tensors), WeightsBytes: m.Weights.Bytes, Files: len(m.Files), Problems: []Problem{}}
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	f, err := os.Open(b.WeightsPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mu sync.Mutex
	add := func(p Problem) {
		mu.Lock()
		rep.Problems = append(rep.Problems, p)
		mu.Unlock()
	}
	report := func(int64) {}
	total := m.Weights.Bytes
	if opt.Deep {
		total += m.Weights.Bytes
	}
	if opt.Progress != nil {
		opt.Progress(total, 0)
		report = func(n int64) {
			if n > 0 {
				opt.Progress(total, n)
			}
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range m.Tensors {
		t := &m.Tensors[i]
		end := m.Weights.Bytes
		if i+1 < len(m.Tensors) {
			end = m.Tensors[i+1].Offset
		}
		g.Go(func() error { return verifyTensor(gctx, b, f, t, end, add, report) })
	}
	if len(m.Tensors) > 0 && m.Tensors[0].Offset > 0 {
		g.Go(func() error {
			if err := checkZeros(gctx, f, 0, m.Tensors[0].Offset); err != nil {
				add(Problem{Message: fmt.Sprintf("padding before the first tensor: %v", err)})
			}
			return nil
		})
	} else if len(m.Tensors) == 0 && m.Weights.Bytes > 0 {
		g.Go(func() error {
			if err := checkZeros(gctx, f, 0, m.Weights.Bytes); err != nil {
				add(Problem{Message: fmt.Sprintf("weights file without tensors: %v", err)})
			}
			return nil
		})
	}
	for _, cf := range m.Files {
		g.Go(func() error {
			p := filepath.Join(dir, filepath.FromSlash(cf.Path))
			sum, err := hashFile(gctx, p, cf.Bytes)
			switch {
			case err != nil:
				add(Problem{File: cf.Path, Message: err.Error()})
			case sum != cf.SHA256:
				add(Problem{File: cf.Path, Message: fmt.Sprintf("sha256 %s, the manifest says %s: the file changed", sum, cf.SHA256)})
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if opt.Deep {
		d, err := deepVerify(ctx, b, f, opt, workers, add, report)
		if err != nil {
			return nil, err
		}
		rep.Deep = d
	}
	order := map[string]int{}
	for i, t := range m.Tensors {
		order[t.Name] = i
	}
	slices.SortStableFunc(rep.Problems, func(a, b Problem) int {
		ia, oka := order[a.Tensor]
		ib, okb := order[b.Tensor]
		switch {
		case oka && okb:
			return ia - ib
		case oka:
			return -1
		case okb:
			return 1
		}
		return strings.Compare(a.File+a.Message, b.File+b.Message)
	})
	if n := len(rep.Problems); n > 0 {
		return rep, fmt.Errorf("bundle %s: %d problem(s); %s", dir, n, rep.Problems[0])
	}
	return rep, nil
}

// verifyTensor hashes one tensor, checks its row scales and the padding up to end.
func verifyTensor(ctx context.Context, b *Bundle, f *os.File, t *manifests.BundleTensor, end int64, add func(Problem), report func(int64)) error {
	h := sha256.New()
	if err := copyRange(ctx, h, f, t.Offset, t.Length, report); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		add(Problem{Tensor: t.Name, Message: err.Error()})
		return nil
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != t.SHA256 {
		add(Problem{Tensor: t.Name, Message: fmt.Sprintf("sha256 of bytes [%d, %d) is %s, the manifest says %s: the weights changed", t.Offset, t.Offset+t.Length, sum, t.SHA256)})
	}
	if t.Encoding == manifests.EncodingBLM {
		g, st, err := b.Matrix(t)
		if err != nil {
			add(Problem{Tensor: t.Name, Message: err.Error()})
			return nil
		}
		want := rowScaleBytes(st, g)
		got := make([]byte, len(want))
		if _, err := f.ReadAt(got, t.RowScales.Offset); err != nil {
			add(Problem{Tensor: t.Name, Message: fmt.Sprintf("read row scales: %v", err)})
		} else if i := firstDiff(got, want); i >= 0 {
			row := i / 4
			add(Problem{Tensor: t.Name, Message: fmt.Sprintf("row scale of row %d is %v, its stack segment's tensor scale is %v",
				row, math.Float32frombits(binary.LittleEndian.Uint32(got[4*row:])), math.Float32frombits(binary.LittleEndian.Uint32(want[4*row:])))})
		}
	}
	if err := checkZeros(ctx, f, t.Offset+t.Length, end); err != nil {
		add(Problem{Tensor: t.Name, Message: fmt.Sprintf("padding after the tensor: %v", err)})
	}
	return nil
}

// copyRange copies n bytes at off of f into w.
func copyRange(ctx context.Context, w io.Writer, f *os.File, off, n int64, report func(int64)) error {
	buf := make([]byte, min(n, 1<<20))
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		m := min(int64(len(buf)), n-done)
		k, err := f.ReadAt(buf[:m], off+done)
		w.Write(buf[:k])
		report(int64(k))
		done += int64(k)
		if err != nil && done < n {
			return fmt.Errorf("read bytes [%d, %d): %w", off, off+n, err)
		}
	}
	return nil
}

// checkZeros checks that bytes [from, to) of f are zero.
func checkZeros(ctx context.Context, f *os.File, from, to int64) error {
	if to <= from {
		return nil
	}
	var bad int64 = -1
	err := copyRange(ctx, writerFunc(func(p []byte) {
		if bad < 0 {
			if i := slices.IndexFunc(p, func(c byte) bool { return c != 0 }); i >= 0 {
				bad = from + int64(i)
			}
		}
		from += int64(len(p))
	}), f, from, to-from, func(int64) {})
	if err != nil {
		return err
	}
	if bad >= 0 {
		return fmt.Errorf("byte %d is not zero", bad)
	}
	return nil
}

type writerFunc func(p []byte)

func (w writerFunc) Write(p []byte) (int, error) { w(p); return len(p), nil }

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// deepVerify compares every tensor with its source checkpoint.
func deepVerify(ctx context.Context, b *Bundle, f *os.File, opt VerifyOptions, workers int, add func(Problem), report func(int64)) (*DeepReport, error) {
	m := b.Manifest
	d := &DeepReport{Sources: []DeepSource{}}
	models := []string{manifests.ModelTarget}
	if m.Draft != nil {
		models = append(models, manifests.ModelDraft)
	}
	sources := map[string]*safetensors.Model{}
	defer func() {
		for _, s := range sources {
			s.Close()
		}
	}()
	for _, model := range models {
		given := opt.TargetDir
		if model == manifests.ModelDraft {
			given = opt.DraftDir
		}
		rec := m.Model(model)
		dir, note := locateSource(rec.Source, given, opt.CacheDir)
		if dir == "" {
			d.Sources = append(d.Sources, DeepSource{Model: model, Note: note})
			continue
		}
		if p := checkSourceFiles(dir, rec.Source); p != "" {
			add(Problem{File: model + " source " + dir, Message: p})
			d.Sources = append(d.Sources, DeepSource{Model: model, Dir: dir, Note: "the source differs from the one packed: " + p})
			continue
		}
		src := dir
		if len(rec.Requantized) > 0 {
			q, err := requantizeAgain(ctx, dir, rec, opt)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				add(Problem{File: model + " source " + dir, Message: err.Error()})
				d.Sources = append(d.Sources, DeepSource{Model: model, Dir: dir, Note: "re-quantizing the source failed"})
				continue
			}
			defer os.RemoveAll(filepath.Dir(q))
			src = q
			note = note + "; re-quantized again to NVFP4 (same rule and outputs as at pack time) and compared with that"
		}
		sm, err := safetensors.OpenModel(ctx, src)
		if err != nil {
			add(Problem{File: model + " source " + src, Message: err.Error()})
			continue
		}
		sources[model] = sm
		d.Sources = append(d.Sources, DeepSource{Model: model, Dir: dir, Note: note})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	var mu sync.Mutex
	for i := range m.Tensors {
		t := &m.Tensors[i]
		sm := sources[t.Model]
		if sm == nil {
			d.NotCompared++
			continue
		}
		g.Go(func() error {
			err := compareTensor(gctx, b, f, t, sm, report)
			if err != nil {
				if gctx.Err() != nil {
					return gctx.Err()
				}
				add(Problem{Tensor: t.Name, Message: "differs from the source: " + err.Error()})
			}
			mu.Lock()
			d.Compared++
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return d, nil
}

// locateSource finds a model's source checkout: the given directory, the HF cache snapshot of
// the recorded repo@commit, or the directory recorded at pack time.
func locateSource(s manifests.Source, given, cacheDir string) (dir, note string) {
	if given != "" {
		return given, "given"
	}
	if s.Repo != nil && s.Commit != nil {
		if cacheDir == "" {
			cacheDir = hub.CacheDirFromEnv()
		}
		if snap, err := hub.SnapshotDir(cacheDir, *s.Repo, *s.Commit); err == nil {
			return snap, fmt.Sprintf("HF cache snapshot of %s@%s", *s.Repo, *s.Commit)
		}
	}
	if s.Path != "" {
		if st, err := os.Stat(filepath.Join(s.Path, "config.json")); err == nil && st.Mode().IsRegular() {
			return s.Path, "the directory recorded at pack time"
		}
	}
	what := "the recorded directory " + s.Path
	if s.Repo != nil {
		what = "the HF cache snapshot of " + *s.Repo + ", nor " + what
	}
	return "", "source not present (neither " + what + "): not compared"
}

// checkSourceFiles compares a source directory's files with the sizes (and the sha256 of HF
// cache blobs, known from their names) recorded in the manifest; "" when they agree.
func checkSourceFiles(dir string, s manifests.Source) string {
	for _, f := range s.Files {
		sf, err := statSource(dir, f.Path)
		if err != nil {
			return err.Error()
		}
		if sf.bytes != f.Bytes {
			return fmt.Sprintf("%s: %d bytes, %d when packed", f.Path, sf.bytes, f.Bytes)
		}
		if sf.sha256 != "" && sf.sha256 != f.SHA256 {
			return fmt.Sprintf("%s: sha256 %s, %s when packed", f.Path, sf.sha256, f.SHA256)
		}
	}
	return ""
}

// requantizeAgain re-runs the draft's NVFP4 conversion from its source into a temporary
// directory (the quantizer is deterministic) and checks that it produced the files the
// conversion record lists. It returns the converted directory.
func requantizeAgain(ctx context.Context, dir string, rec *manifests.BundleModel, opt VerifyOptions) (string, error) {
	var c quantize.Conversion
	if err := json.Unmarshal(rec.Requantized, &c); err != nil {
		return "", fmt.Errorf("requantized record: %w", err)
	}
	div := nvfp4.DivideExact
	if c.Method.TensorScale == "reciprocal" {
		div = nvfp4.DivideByReciprocal
	}
	tmp, err := os.MkdirTemp(opt.TempDir, "lithos-verify-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(tmp, "draft-nvfp4")
	got, err := quantize.Run(ctx, dir, out, quantize.Options{Division: div, Workers: opt.Workers, ToolVersion: c.ToolVersion,
		SourceRepo: ptrString(c.Source.Repo), SourceRevision: ptrString(c.Source.Revision)})
	if err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("re-quantize: %w", err)
	}
	for _, w := range c.Outputs {
		i := slices.IndexFunc(got.Outputs, func(o quantize.FileHash) bool { return o.Path == w.Path })
		if i < 0 || got.Outputs[i].SHA256 != w.SHA256 {
			os.RemoveAll(tmp)
			return "", fmt.Errorf("re-quantizing the source gives another %s than the one packed (sha256 %s at pack time)", w.Path, w.SHA256)
		}
	}
	return out, nil
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// compareTensor unpacks (BLM) or reads (plain) one tensor and compares it with the source.
func compareTensor(ctx context.Context, b *Bundle, f *os.File, t *manifests.BundleTensor, sm *safetensors.Model, report func(int64)) error {
	open := func(name string) (*compareWriter, error) {
		sf, st, ok := sm.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("source tensor %s: not in the source checkpoint", name)
		}
		return &compareWriter{name: name, r: sf.Section(st), size: st.Size}, nil
	}
	if t.Encoding == manifests.EncodingPlain {
		cw, err := open(t.Source)
		if err != nil {
			return err
		}
		if err := copyRange(ctx, cw, f, t.Offset, t.Length, report); err != nil {
			return err
		}
		return cw.done()
	}
	g, st, err := b.Matrix(t)
	if err != nil {
		return err
	}
	sinks := make([]blm.Sink, len(t.Stack.Segments))
	var cws []*compareWriter
	for i, seg := range t.Stack.Segments {
		roles, scalar, err := segmentTensors(g.Format, seg)
		if err != nil {
			return err
		}
		for j, name := range roles {
			if name == "" {
				continue
			}
			cw, err := open(name)
			if err != nil {
				return err
			}
			cws = append(cws, cw)
			switch j {
			case 0:
				sinks[i].Codes = cw
			case 1:
				sinks[i].Scales = cw
			case 2:
				sinks[i].Biases = cw
			}
		}
		want := float32(1)
		if scalar != "" {
			sf, sst, ok := sm.Lookup(scalar)
			if !ok {
				return fmt.Errorf("source tensor %s: not in the source checkpoint", scalar)
			}
			raw, err := sf.ReadTensor(sst)
			if err != nil || len(raw) != 4 {
				return fmt.Errorf("source tensor %s: want one F32 (%v)", scalar, err)
			}
			want = math.Float32frombits(binary.LittleEndian.Uint32(raw))
		}
		if math.Float32bits(want) != math.Float32bits(seg.TensorScale) {
			return fmt.Errorf("segment %s: tensor scale %v, the source's is %v", seg.Name, seg.TensorScale, want)
		}
	}
	r := io.NewSectionReader(f, t.Offset, g.TotalBytes)
	if err := blm.UnpackStack(ctx, sinks, g, st, countingReader{r: r, report: report}); err != nil {
		return err
	}
	for _, cw := range cws {
		if err := cw.done(); err != nil {
			return err
		}
	}
	return nil
}

// segmentTensors returns a segment's source tensors by role (codes, scales, biases) and its
// tensor-scale scalar ("" when the format has none), from the segment's tensor list.
func segmentTensors(f formats.Format, seg manifests.StackSegment) (roles [3]string, scalar string, err error) {
	find := func(suffix string) string {
		for _, n := range seg.Tensors {
			if strings.HasSuffix(n, suffix) {
				return n
			}
		}
		return ""
	}
	roles[0] = seg.Name
	switch f {
	case formats.BF16, formats.F16:
	case formats.FP8:
		scalar = find(".weight_scale")
	case formats.Int8:
		roles[1] = find(".weight_scale")
	case formats.Int4:
		roles[1], roles[2] = find(".scales"), find(".biases")
	case formats.NVFP4:
		if roles[1] = find(".weight_scale"); roles[1] != "" {
			scalar = find(".weight_scale_2")
		} else {
			roles[1] = find(".scales") // MLX layout: tensor scale 1
		}
	default:
		return roles, "", fmt.Errorf("format %s: not a packed format", f)
	}
	if (f == formats.Int8 || f == formats.Int4 || f == formats.NVFP4) && roles[1] == "" ||
		f == formats.Int4 && roles[2] == "" || f == formats.FP8 && scalar == "" {
		return roles, "", fmt.Errorf("segment %s: its tensors %v lack the %s side tensors", seg.Name, seg.Tensors, f)
	}
	return roles, scalar, nil
}

// compareWriter compares what is written with the next bytes of a source tensor.
type compareWriter struct {
	name string
	r    io.Reader
	size int64
	off  int64
	buf  []byte
}

func (c *compareWriter) Write(p []byte) (int, error) {
	if len(c.buf) < len(p) {
		c.buf = make([]byte, len(p))
	}
	src := c.buf[:len(p)]
	if _, err := io.ReadFull(c.r, src); err != nil {
		return 0, fmt.Errorf("%s: the bundle holds more bytes than the source (%d): %w", c.name, c.size, err)
	}
	if !bytes.Equal(p, src) {
		i := firstDiff(p, src)
		return 0, fmt.Errorf("%s: byte %d is %#02x in the bundle, %#02x in the source", c.name, c.off+int64(i), p[i], src[i])
	}
	c.off += int64(len(p))
	return len(p), nil
}

func (c *compareWriter) done() error {
	if c.off != c.size {
		return fmt.Errorf("%s: the bundle holds %d of its %d bytes", c.name, c.off, c.size)
	}
	return nil
}
