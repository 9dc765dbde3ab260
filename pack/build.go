package pack

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sync/errgroup"

	"lithos/convert/quantize"
	"lithos/formats"
	"lithos/hub"
	"lithos/manifests"
	"lithos/pack/blm"
)

// Draft formats (Options.DraftFormat).
const (
	// DraftNVFP4 packs the draft's linears as NVFP4: a draft stored in BF16/F16/F32 is
	// re-quantized on the way with lithos/convert/quantize (docs/quantize.md); an NVFP4 draft
	// is packed as stored. The default.
	DraftNVFP4 = "nvfp4"
	// DraftBF16 packs the draft as stored, which must be unquantized (BF16/F16 linears).
	DraftBF16 = "bf16"
	// DraftAuto asks for the model registry's default draft head of the target
	// (manifests.DraftFor), as Options.Draft.
	DraftAuto = "auto"
)

// Options says what Build packs and where.
type Options struct {
	// Target is the target checkpoint: a directory (a checkout or an HF cache snapshot) or a
	// Hub repo id (downloaded first into Hub's cache). TargetRevision applies to repo ids.
	Target, TargetRevision string
	// Draft is "" (no draft head), DraftAuto, or a directory or repo id like Target.
	Draft, DraftRevision string
	// DraftFormat is DraftNVFP4 ("" means it) or DraftBF16.
	DraftFormat string
	// Out is the bundle directory to create ("NAME.lithos"). It must not exist; its parent must.
	Out string
	// Hub downloads repo ids; nil is fine when Target and Draft are directories.
	Hub *hub.Client
	// Workers is the number of tensors packed at once (default GOMAXPROCS).
	Workers int
	// ToolVersion is recorded in the manifest.
	ToolVersion string
	// Progress, when set, is called with (total checkpoint bytes to read, 0) once, then with
	// each chunk read; from several goroutines at once.
	Progress func(total, delta int64)
	// DownloadProgress is passed to Hub downloads.
	DownloadProgress func(total, delta int64)
	// Log receives decisions (nil: slog.Default()).
	Log *slog.Logger
}

// Build packs a bundle (see the package doc and docs/bundle.md) and returns its manifest.
//
// Before anything is written it refuses, with an error naming the model, tensor and rule: an
// existing Out; a checkpoint whose tensors disagree with the inventory its config.json implies
// (a missing tensor, a shape, a tensor that belongs nowhere); a format the packer cannot place
// (F32 or AWQ/GPTQ matrices, quantized norms or embeddings, a geometry blm refuses); a draft
// whose hidden size, target hidden size or vocabulary differs from the target's, or whose taps
// are not target layers; DraftBF16 with a quantized draft. On any later error (I/O, ctx
// cancelled) the temporary directory is removed and Out is not created.
func Build(ctx context.Context, opt Options) (_ *manifests.Bundle, err error) {
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	switch opt.DraftFormat {
	case "":
		opt.DraftFormat = DraftNVFP4
	case DraftNVFP4, DraftBF16:
	default:
		return nil, fmt.Errorf("draft format %q: want %q or %q", opt.DraftFormat, DraftNVFP4, DraftBF16)
	}
	if opt.Out == "" {
		return nil, errors.New("no output bundle directory")
	}
	out, err := filepath.Abs(opt.Out)
	if err != nil {
		return nil, err
	}
	if err := checkOut(out); err != nil {
		return nil, err
	}

	// Sources.
	tdir, trepo, tcommit, err := ResolveCheckpoint(ctx, opt.Hub, opt.Target, opt.TargetRevision, opt.DownloadProgress)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	target, err := openCheckpoint(ctx, manifests.ModelTarget, tdir, trepo, tcommit)
	if err != nil {
		return nil, err
	}
	defer target.close()
	entries, skipped, err := planModel(target, planOptions{})
	if err != nil {
		return nil, err
	}
	var draft *checkpoint
	defer func() { draft.close() }()
	draftArg := opt.Draft
	if draftArg == DraftAuto {
		if trepo == "" {
			return nil, fmt.Errorf("draft auto: target %s is a plain directory with no repo id to look up in the model registry; name the draft", tdir)
		}
		p, ok := manifests.DraftFor(trepo)
		if !ok {
			return nil, fmt.Errorf("draft auto: the model registry has no DSpark head for target %s", trepo)
		}
		if !p.Matches(target.cfg.Architecture(), target.cfg.Text.HiddenSize, target.cfg.Text.NumHiddenLayers) {
			return nil, fmt.Errorf("draft auto: the registry pairs %s with %s, but this target's config (%s, hidden %d, %d layers) is not the one it was made for",
				p.Target, p.Draft, target.cfg.Architecture(), target.cfg.Text.HiddenSize, target.cfg.Text.NumHiddenLayers)
		}
		draftArg = p.Draft
		log.Info("draft from the model registry", "target", p.Target, "draft", p.Draft)
	}
	var requantize bool
	if draftArg != "" {
		ddir, drepo, dcommit, err := ResolveCheckpoint(ctx, opt.Hub, draftArg, opt.DraftRevision, opt.DownloadProgress)
		if err != nil {
			return nil, fmt.Errorf("draft: %w", err)
		}
		if draft, err = openCheckpoint(ctx, manifests.ModelDraft, ddir, drepo, dcommit); err != nil {
			return nil, err
		}
		if !draft.cfg.IsDraft() {
			return nil, fmt.Errorf("draft %s: config.json does not describe a DSpark/DFlash draft head (no target_layer_ids / block_size / dspark_config)", ddir)
		}
		if err := checkDraft(target.cfg, draft.cfg); err != nil {
			return nil, fmt.Errorf("draft %s does not fit target %s: %w", ddir, tdir, err)
		}
		float, quantized, err := draftLinears(draft)
		if err != nil {
			return nil, err
		}
		switch {
		case opt.DraftFormat == DraftBF16 && len(quantized) > 0:
			return nil, fmt.Errorf("draft format bf16: the draft's linears are already quantized (%s is %s); BF16 cannot be restored from them", quantized[0].module, quantized[0].format)
		case opt.DraftFormat == DraftNVFP4 && len(float) > 0:
			requantize = true
			if _, _, err := planModel(draft, planOptions{validateOnly: true}); err != nil {
				return nil, err
			}
		default:
			es, sk, err := planModel(draft, planOptions{})
			if err != nil {
				return nil, err
			}
			entries, skipped = append(entries, es...), append(skipped, sk...)
		}
	}

	// Everything is checked: write.
	parent := filepath.Dir(out)
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("create the temporary bundle directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if requantize {
		qdir := filepath.Join(tmp, "draft-nvfp4")
		log.Info("re-quantizing the draft to NVFP4", "draft", draft.dir)
		if _, err := quantize.Run(ctx, draft.dir, qdir, quantize.Options{Workers: opt.Workers, ToolVersion: opt.ToolVersion,
			SourceRepo: draft.repo, SourceRevision: draft.commit}); err != nil {
			return nil, fmt.Errorf("draft: re-quantize to NVFP4: %w", err)
		}
		q, err := openCheckpoint(ctx, manifests.ModelDraft, qdir, draft.repo, draft.commit)
		if err != nil {
			return nil, fmt.Errorf("draft: the re-quantized head: %w", err)
		}
		q.srcDir, q.srcFiles = draft.srcDir, draft.srcFiles
		if q.requantized, err = readSmall(filepath.Join(qdir, quantize.ConversionFile)); err != nil {
			q.close()
			return nil, err
		}
		if err := fillFromConversion(q); err != nil {
			q.close()
			return nil, err
		}
		draft.close()
		draft = q
		if err := checkDraft(target.cfg, draft.cfg); err != nil {
			return nil, fmt.Errorf("draft: the re-quantized head: %w", err)
		}
		es, sk, err := planModel(draft, planOptions{})
		if err != nil {
			return nil, fmt.Errorf("draft: the re-quantized head: %w", err)
		}
		entries, skipped = append(entries, es...), append(skipped, sk...)
	}

	man := &manifests.Bundle{
		Format: manifests.BundleFormat, Version: manifests.BundleVersion, Tool: "lithos-pack", ToolVersion: opt.ToolVersion,
		Alignment: manifests.BundleAlignment, Skipped: skipped, Files: []manifests.BundleFile{},
	}
	if man.Skipped == nil {
		man.Skipped = []manifests.SkippedTensor{}
	}
	size := layout(entries)
	man.Weights = manifests.WeightsFile{Path: manifests.BundleWeightsName, Bytes: size}

	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	cks := []*checkpoint{target}
	if draft != nil {
		cks = append(cks, draft)
	}
	if err := writeWeights(ctx, filepath.Join(tmp, manifests.BundleWeightsName), size, entries, cks, workers, opt.Progress); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if requantize { // the converted draft was read: it is not part of the bundle
		draft.close()
		if err := os.RemoveAll(filepath.Join(tmp, "draft-nvfp4")); err != nil {
			return nil, err
		}
	}
	for _, e := range entries {
		man.Tensors = append(man.Tensors, e.rec)
	}
	if man.Tensors == nil {
		man.Tensors = []manifests.BundleTensor{}
	}
	man.Padding = padding(man)

	// Copied files, then the models' records.
	names, err := copyable(target.dir)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		f, err := copyFile(filepath.Join(target.dir, n), filepath.Join(tmp, n))
		if err != nil {
			return nil, err
		}
		f.Path = n
		man.Files = append(man.Files, f)
	}
	man.Target = modelRecord(target)
	if draft != nil {
		m := modelRecord(draft)
		man.Draft = &m
	}
	data, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the manifest: %w", err)
	}
	// The bundle must open before it is published.
	if _, err := manifests.ParseBundle(data); err != nil {
		return nil, fmt.Errorf("internal error: the manifest written does not parse: %w", err)
	}
	if err := writeSynced(filepath.Join(tmp, manifests.BundleManifestName), append(data, '\n')); err != nil {
		return nil, err
	}
	if _, err := OpenBundle(tmp); err != nil {
		return nil, fmt.Errorf("internal error: the bundle written does not open: %w", err)
	}
	if err := syncDir(tmp); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkOut(out); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return nil, fmt.Errorf("publish %s: %w", out, err)
	}
	if err := syncDir(parent); err != nil {
		return nil, err
	}
	return man, nil
}

// checkOut refuses an existing output path.
func checkOut(out string) error {
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("%s: already exists (a bundle is immutable: choose a new name or remove it)", out)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if st, err := os.Stat(filepath.Dir(out)); err != nil || !st.IsDir() {
		return fmt.Errorf("%s: the parent directory does not exist", out)
	}
	return nil
}

// linearInfo is one draft linear's module and detected format.
type linearInfo struct {
	module string
	format formats.Format
}

// draftLinears splits a draft head's linears (convert.KindLinear) into float (BF16/F16/F32)
// and quantized ones.
func draftLinears(ck *checkpoint) (float, quantized []linearInfo, err error) {
	inv, err := inventoryLinears(ck)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range inv {
		switch l.format {
		case formats.BF16, formats.F16, formats.F32:
			float = append(float, l)
		default:
			quantized = append(quantized, l)
		}
	}
	return float, quantized, nil
}

// fillFromConversion takes the source files' sha256 of a re-quantized draft from its
// conversion record (quantize hashed every input).
func fillFromConversion(ck *checkpoint) error {
	var c quantize.Conversion
	if err := json.Unmarshal(ck.requantized, &c); err != nil {
		return fmt.Errorf("draft: %s: %w", quantize.ConversionFile, err)
	}
	for i := range ck.srcFiles {
		for _, in := range c.Inputs {
			if in.Path == ck.srcFiles[i].rel && in.Bytes == ck.srcFiles[i].bytes {
				ck.srcFiles[i].sha256 = in.SHA256
			}
		}
	}
	return nil
}

// layout assigns each entry an aligned offset in order and returns the file size.
func layout(entries []*entry) int64 {
	var off int64
	for _, e := range entries {
		e.rec.Offset = off
		if e.rec.RowScales != nil {
			e.rec.RowScales.Offset = off + e.geom.TotalBytes
		}
		off = alignUp(off + e.rec.Length)
	}
	return off
}

func alignUp(n int64) int64 {
	return (n + manifests.BundleAlignment - 1) / manifests.BundleAlignment * manifests.BundleAlignment
}

// padding sums the manifest's byte accounting.
func padding(m *manifests.Bundle) manifests.Padding {
	var p manifests.Padding
	var used int64
	for _, t := range m.Tensors {
		p.StoredBytes += t.StoredBytes
		used += t.Length
		if t.Layout != nil {
			p.LayoutBytes += t.Layout.PaddingBytes
			p.RowScaleBytes += t.RowScales.Bytes
		}
	}
	p.AlignmentBytes = m.Weights.Bytes - used
	for _, s := range m.Skipped {
		p.SkippedBytes += s.Bytes
	}
	return p
}

func modelRecord(ck *checkpoint) manifests.BundleModel {
	return manifests.BundleModel{
		Architecture: ck.cfg.Architecture(),
		Config:       json.RawMessage(ck.rawConfig),
		Source:       ck.manifestSource(),
		Requantized:  json.RawMessage(ck.requantized),
	}
}

// writeWeights creates the weights file at its final size and fills it: each entry at its
// offset, workers at once, each shard's entries in file order (scheduler), hashing what it
// writes; source files whose sha256 is not known yet are hashed in the same pass by the
// workers that read them (srcChain). It fsyncs the file.
func writeWeights(ctx context.Context, path string, size int64, entries []*entry, cks []*checkpoint, workers int, progress func(total, delta int64)) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer f.Close()
	if err := preallocate(f, size); err != nil {
		return fmt.Errorf("%s: reserve %d bytes: %w", path, size, err)
	}
	direct := openDirect(path)
	if direct != nil {
		defer direct.Close()
	}
	// Chunks: one being filled and two being hashed per entry at once, and as many again being
	// written (writers: enough outstanding direct writes to keep the device busy).
	wf := newWeightsFile(f, direct, 6*workers, writers)
	defer wf.stop()
	var total int64
	for _, e := range entries {
		total += e.readBytes()
	}
	report := func(n int64) {
		if progress != nil && n > 0 {
			progress(total, n)
		}
	}
	if progress != nil {
		progress(total, 0)
	}
	// Source files whose sha256 is not known are hashed while the entries are packed, by the
	// workers packing them (srcChain), each worker on one shard at a time (scheduler).
	g, gctx := errgroup.WithContext(ctx)
	chains, byFile := newSrcChains(cks)
	for _, e := range entries {
		if c := byFile[e.mainStream().file]; c != nil {
			c.expect()
		}
	}
	for _, c := range chains {
		if c.left.Load() == 0 {
			g.Go(func() error { return c.run(gctx) })
		}
	}
	sched := newScheduler(entries)
	for range workers {
		g.Go(func() error {
			for q := -1; ; {
				var e *entry
				if e, q = sched.next(q); e == nil {
					return nil
				}
				if err := packEntry(gctx, wf, e, report, byFile[e.mainStream().file]); err != nil {
					return err
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// writers is the number of direct writes to the weights file in flight at once.
const writers = 4

// packEntry writes one entry; chain is the hash of the source file holding its main stream
// (nil when that file's sha256 is known). When the chain is free and can be brought to the
// main stream's first byte, the entry holds it and feeds it the main stream's bytes as it
// reads them (one read for both, hashed two at a time with the entry's bytes); otherwise the
// chain re-reads them later (srcChain).
func packEntry(ctx context.Context, wf *weightsFile, e *entry, report func(int64), chain *srcChain) error {
	main := e.mainStream()
	held := false
	if chain != nil {
		var err error
		if held, err = chain.claim(ctx, main.t.Offset); err != nil {
			return err
		}
	}
	feed := chain
	if !held {
		feed = nil
	}
	err := writeEntry(ctx, wf, e, report, main, feed)
	if held {
		chain.release()
	}
	if err != nil {
		return fmt.Errorf("%s: tensor %s: %w", e.ck.model, e.rec.Name, err)
	}
	if chain != nil {
		return chain.entryDone(ctx, main.t.Offset+main.t.Size)
	}
	return nil
}

// countingReader reports bytes read, and copies them to tap when set.
type countingReader struct {
	r      io.Reader
	report func(int64)
	tap    io.Writer
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.report(int64(n))
	if c.tap != nil && n > 0 {
		c.tap.Write(p[:n])
	}
	return n, err
}

// sources returns the entry's streams for blm; main's bytes are copied to tap as read.
func (e *entry) sources(report func(int64), main *tensorRef, tap io.Writer) []blm.Source {
	wrap := func(r *tensorRef) io.Reader {
		if r == nil {
			return nil
		}
		c := countingReader{r: r.section(), report: report}
		if r == main {
			c.tap = tap
		}
		return c
	}
	out := make([]blm.Source, len(e.segs))
	for i, s := range e.segs {
		out[i] = blm.Source{Codes: wrap(s.codes), Scales: wrap(s.scales), Biases: wrap(s.biases)}
	}
	return out
}

// writeEntry writes one entry at its offset and records its sha256. When chain is not nil
// (held by the caller) the bytes of the main stream main are also added to its hash.
func writeEntry(ctx context.Context, wf *weightsFile, e *entry, report func(int64), main *tensorRef, chain *srcChain) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w, err := newEntryWriter(wf, e.rec.Offset)
	if err != nil {
		return err
	}
	var tap io.Writer
	if chain != nil {
		plain := e.rec.Encoding != manifests.EncodingBLM
		w.feed(chain.h, plain)
		tap = srcTap{c: chain, w: w, copy: !plain}
	}
	err = copyEntry(ctx, w, e, report, main, tap)
	sum, cerr := w.Close()
	if err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("write: %w", cerr)
	}
	e.rec.SHA256 = sum
	return nil
}

// copyEntry writes an entry's bytes (packed matrix and row scales, or the plain array) to w.
func copyEntry(ctx context.Context, w io.Writer, e *entry, report func(int64), main *tensorRef, tap io.Writer) error {
	switch e.rec.Encoding {
	case manifests.EncodingBLM:
		n, err := blm.PackStack(ctx, w, e.geom, e.stack, e.sources(report, main, tap))
		if err != nil {
			return err
		}
		if n != e.geom.TotalBytes {
			return fmt.Errorf("packed %d bytes, want %d", n, e.geom.TotalBytes)
		}
		if _, err := w.Write(rowScaleBytes(e.stack, e.geom)); err != nil {
			return err
		}
	default:
		n, err := io.Copy(w, countingReader{r: e.plain.section(), report: report, tap: tap})
		if err != nil {
			return err
		}
		if n != e.rec.Length {
			return fmt.Errorf("copied %d bytes, want %d", n, e.rec.Length)
		}
	}
	return nil
}

// rowScaleBytes is the row-scale table: one little-endian float32 per packed row of
// Blocks·Rows, the tensor scale of the row's segment, 0 for the padding rows.
func rowScaleBytes(st blm.Stack, g blm.Geometry) []byte {
	scales, _ := st.RowScales()
	b := make([]byte, 4*g.Blocks*int64(g.Rows))
	for i, s := range scales {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(s))
	}
	return b
}

// hashFile returns the sha256 of a file of size bytes.
func hashFile(ctx context.Context, path string, size int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		m, err := f.Read(buf)
		h.Write(buf[:m])
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
	}
	if n != size {
		return "", fmt.Errorf("%d bytes, %d when the checkpoint was opened: the file changed while packing", n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyFile copies src to dst (new), fsyncs it and returns its size and sha256.
func copyFile(src, dst string) (manifests.BundleFile, error) {
	in, err := os.Open(src)
	if err != nil {
		return manifests.BundleFile{}, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return manifests.BundleFile{}, err
	}
	defer out.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), in)
	if err != nil {
		return manifests.BundleFile{}, fmt.Errorf("copy %s: %w", src, err)
	}
	if err := out.Sync(); err != nil {
		return manifests.BundleFile{}, fmt.Errorf("sync %s: %w", dst, err)
	}
	return manifests.BundleFile{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, out.Close()
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !strings.Contains(err.Error(), "invalid argument") {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
