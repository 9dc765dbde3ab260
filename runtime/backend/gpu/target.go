package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"lithos/formats"
	"lithos/kernels"
	"lithos/manifests"
	"lithos/pack/blm"
	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/bundle"
	"lithos/runtime/model"
)

// Matrix is a BLM-packed tensor of the bundle in device memory: Ptr is its packed bytes
// (Geometry.TotalBytes, in the BLM layout or rewritten in the same bytes fragment-major or in
// the MMA layout: Layout) inside the uploaded weights, Scales its row-scale table right after
// them.
type Matrix struct {
	Name        string
	Geometry    blm.Geometry
	Stack       blm.Stack
	Ptr, Scales uint64
	// Layout is how the device holds the packed bytes: kernels.BLMLayoutBLM as in the bundle,
	// kernels.BLMLayoutFragment (the fragment-major copy, on devices that read it:
	// FragmentLayouter) or kernels.BLMLayoutMMA (kernels.BLMXCopy: MMALayouter), in the same
	// bytes.
	Layout uint32
	// RowMajor is the device address of a copy of the stored rows row-major ([N, K] BF16,
	// 2·N·K bytes: the GDN layers' in_proj_ab, which the conv launch multiplies,
	// kernels.ConvParams.ABOut), 0 when there is none (LoadTarget: rowMajorSuffix).
	RowMajor uint64
}

// Kernel returns the matrix kernel for rows activation rows of this matrix's format and layout:
// a BLM kernel, or the one-tile MMA-layout kernel of its format (a record of two tiles, which
// kernels.NewBLMXParams gives 9–16 rows, takes kernels.BLMXKernelTiles's).
func (m *Matrix) Kernel(rows int) (string, error) {
	if m.Layout == kernels.BLMLayoutMMA {
		return kernels.BLMXKernel(m.Geometry.Format)
	}
	return kernels.BLMKernelLayout(m.Geometry.Format, rows, m.Layout)
}

// Target is a bundle's target model on a GPU (backend.Target): the whole weights.bin uploaded
// once into one device buffer (matrices are addressed at their manifest offsets, in the BLM
// layout, or on a FragmentLayouter device rewritten fragment-major in place: Matrix.Layout), the small vectors decoded to float32 with their transforms applied (one
// device buffer, Vector gives each one's address), over the Device (which holds the kernels).
type Target struct {
	Device Device
	Bundle *bundle.Bundle
	Cfg    model.Config

	Weights *Buffer          // weights.bin
	vecs    *Buffer          // float32 vectors
	vecOff  map[string]int64 // byte offset in vecs, by runtime tensor name
	vecLen  map[string]int   // floats
	mats    map[string]*Matrix

	Upload UploadStats // the weights upload
	Load   time.Duration
	// MMA is the device the MMA-layout matrices' work split is made for (MMALayouter); zero
	// when the device does not read that layout.
	MMA kernels.BLMXDevice
	// mmaOn, fragOn: the device reads the MMA and the fragment-major layouts (repack); the
	// draft head's matrices are rewritten as the target's.
	mmaOn, fragOn bool
	owned         bool      // Close also closes the device (Load)
	pfx           string    // error prefix: the device's name in lower case ("cuda")
	drafts        []*DSpark // draft heads bound by LoadDraft (Close frees their buffers)
	rowMajor      []*Buffer // the Matrix.RowMajor copies

	busyMu sync.Mutex
	busy   error // a Session.Close's wait ended with ErrDeviceBusy: Close keeps the memory
}

// markBusy records that work on the device may still be running (err wraps ErrDeviceBusy):
// Close then keeps the target's memory.
func (t *Target) markBusy(err error) {
	t.busyMu.Lock()
	defer t.busyMu.Unlock()
	if t.busy == nil {
		t.busy = err
	}
}

// KernelFormats are the BLM formats the kernels of lithos/kernels read (on every device); a
// bundle with a matrix in another format is refused by LoadTarget.
var KernelFormats = []formats.Format{formats.NVFP4, formats.FP8, formats.BF16}

// LoadTarget checks a bundle for the GPU — target architecture, config, every target matrix
// in a format the kernels read, and the weights (plus the vectors) fitting the free device
// memory — before any allocation, then uploads weights.bin (Device.UploadStaged: a progress
// bar on a terminal) and the float32 vectors. Errors name the tensor or field. The Target does
// not own d (its Close leaves d open); Load does.
func LoadTarget(ctx context.Context, d Device, b *bundle.Bundle) (*Target, error) {
	start := time.Now()
	m := b.Manifest
	if !slices.Contains(cpu.Architectures, m.Target.Architecture) {
		return nil, fmt.Errorf("bundle %s: the target is a %q model; this runtime runs %s", b.Dir, m.Target.Architecture, strings.Join(cpu.Architectures, ", "))
	}
	cfg, err := model.ParseConfig(m.Target.Config)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: target.config: %w", b.Dir, err)
	}
	if cfg.Count(model.GDN) > 0 && cfg.KDim > kernels.GDNMaxKDim {
		return nil, backend.Unsupported(fmt.Errorf("bundle %s: target.config linear_key_head_dim %d: the %s GDN kernel keeps at most %d state rows per column (kernels.GDNMaxKDim)", b.Dir, cfg.KDim, d.Name(), kernels.GDNMaxKDim))
	}
	if cfg.Count(model.GDN) > 0 && cfg.ConvKernel > kernels.ConvMaxKernel {
		return nil, backend.Unsupported(fmt.Errorf("bundle %s: target.config linear_conv_kernel_dim %d: the %s conv kernel takes at most %d taps (kernels.ConvMaxKernel)", b.Dir, cfg.ConvKernel, d.Name(), kernels.ConvMaxKernel))
	}
	t := &Target{Device: d, pfx: strings.ToLower(d.Name()), Bundle: b, Cfg: cfg, vecOff: map[string]int64{}, vecLen: map[string]int{}, mats: map[string]*Matrix{}}
	// Plan: matrices (views of the weights) and vectors (decoded here).
	var host []float32
	names := make([]string, 0, len(m.Tensors))
	for i := range m.Tensors {
		names = append(names, m.Tensors[i].Name)
	}
	sort.Strings(names)
	for _, name := range names {
		bt, _ := b.Tensor(name)
		if bt.Model != manifests.ModelTarget {
			continue
		}
		switch bt.Encoding {
		case manifests.EncodingBLM:
			mx, err := b.Matrix(bt)
			if err != nil {
				return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
			}
			if !slices.Contains(KernelFormats, mx.Geometry.Format) {
				return nil, backend.Unsupported(fmt.Errorf("bundle %s: tensor %s is %s; the %s kernels read %v", b.Dir, name, mx.Geometry.Format, d.Name(), KernelFormats))
			}
			if mx.Geometry.TotalBytes >= 1<<32 {
				return nil, backend.Unsupported(fmt.Errorf("bundle %s: tensor %s: %d packed bytes; the %s kernels address < 4 GiB per matrix", b.Dir, name, mx.Geometry.TotalBytes, d.Name()))
			}
			t.mats[name] = &Matrix{Name: name, Geometry: mx.Geometry, Stack: mx.Stack, Ptr: uint64(bt.Offset), Scales: uint64(bt.Offset + mx.Geometry.TotalBytes)}
		case manifests.EncodingPlain:
			if bt.Role == manifests.RoleEmbedding || len(bt.Shape) > 1 && bt.Shape[0]*bt.Shape[1] > 1<<24 {
				continue // gathered from the weights as stored
			}
			v, err := b.Floats(bt)
			if err != nil {
				return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
			}
			t.vecOff[name], t.vecLen[name] = int64(4*len(host)), len(v)
			host = append(host, v...)
			for len(host)%4 != 0 { // 16-byte aligned vectors
				host = append(host, 0)
			}
		}
	}
	wbytes := int64(len(b.Weights()))
	var rmBytes int64 // the row-major copies (uploadRowMajor)
	for name, mx := range t.mats {
		if rowMajorCopy(name, mx) {
			rmBytes += 2 * mx.Geometry.N * mx.Geometry.K
		}
	}
	if err := d.Fit(fmt.Sprintf("bundle %s (weights.bin %.2f GB, %.1f MB of vectors and %.1f MB of row-major copies)", b.Dir, float64(wbytes)/1e9, float64(4*len(host))/1e6, float64(rmBytes)/1e6), wbytes+int64(4*len(host))+rmBytes); err != nil {
		return nil, err
	}
	if t.Weights, err = d.Alloc(max(wbytes, 1)); err != nil {
		return nil, err
	}
	if t.Upload, err = d.UploadStaged(ctx, t.Weights, b.Weights(), "upload weights"); err != nil {
		t.Close()
		return nil, err
	}
	var mma, frag bool
	if ml, ok := d.(MMALayouter); ok {
		t.MMA, mma = ml.MMALayout()
	}
	if fl, ok := d.(FragmentLayouter); ok {
		frag = fl.FragmentLayout()
	}
	if mma || frag {
		if err := t.repack(ctx, b.Weights(), mma, frag); err != nil {
			t.Close()
			return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
		}
	}
	if !mma {
		t.MMA = kernels.BLMXDevice{}
	}
	for _, mx := range t.mats {
		mx.Ptr += t.Weights.Ptr
		mx.Scales += t.Weights.Ptr
	}
	if len(host) > 0 {
		if t.vecs, err = d.Upload(Float32Bytes(host)); err != nil {
			t.Close()
			return nil, err
		}
	}
	if err := t.uploadRowMajor(ctx); err != nil {
		t.Close()
		return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
	}
	t.Load = time.Since(start)
	return t, nil
}

// rowMajorSuffix ends the names of the matrices LoadTarget also uploads row-major
// (Matrix.RowMajor): the GDN layers' in_proj_ab, BF16 [2·VHeads, Hidden], which the conv
// launch multiplies beside the conv (kernels.ConvParams.ABOut; docs/performance.md §8.11).
const rowMajorSuffix = ".linear_attn.in_proj_ab"

// rowMajorCopy reports whether LoadTarget uploads a row-major copy of mx (named name).
func rowMajorCopy(name string, mx *Matrix) bool {
	return strings.HasSuffix(name, rowMajorSuffix) && mx.Geometry.Format == formats.BF16
}

// uploadRowMajor uploads, for each matrix rowMajorCopy names, its stored rows unpacked
// (blm.Geometry.UnpackRows of the bundle's packed bytes: BF16 codes, 2·K bytes per row) into a
// buffer of its own, and sets the matrix's RowMajor; a matrix whose packed bytes do not unpack
// is logged and left without one (its product then runs as its own launch). One matrix at a
// time (host memory: one matrix's rows). Errors (an upload, ctx done) name the tensor.
func (t *Target) uploadRowMajor(ctx context.Context) error {
	names := make([]string, 0, len(t.mats))
	for name, mx := range t.mats {
		if rowMajorCopy(name, mx) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	w := t.Bundle.Weights()
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("tensor %s: row-major copy: %w", name, err)
		}
		mx := t.mats[name]
		g := mx.Geometry
		bt, ok := t.Bundle.Tensor(name)
		if !ok || bt.Offset < 0 || bt.Offset+g.TotalBytes > int64(len(w)) {
			return fmt.Errorf("tensor %s: row-major copy: the packed bytes are not in weights.bin", name)
		}
		rows := g.NewRows(int(g.N)) // BF16: 2·K code bytes per row, no scales
		if err := g.UnpackRows(rows, w[bt.Offset:bt.Offset+g.TotalBytes]); err != nil {
			// UnpackRows is stricter than the product kernels (non-zero padding is an error
			// there): such a matrix keeps its own launch, as before the copies.
			slog.Warn("no row-major copy: in_proj_ab keeps its own product launch", "tensor", name, "err", err)
			continue
		}
		buf, err := t.Device.Upload(rows.Codes)
		if err != nil {
			return fmt.Errorf("tensor %s: row-major copy: %w", name, err)
		}
		t.rowMajor = append(t.rowMajor, buf)
		mx.RowMajor = buf.Ptr
	}
	return nil
}

// Load checks the bundle's LM head and embedding table for the programs (checkHead, before
// any upload), then runs LoadTarget followed by the check that the programs can run the bundle
// (every layer's tensors, stacks, shapes and transforms; errors name the layer and tensor):
// the Target it returns owns d (its Close closes d). On an error d is left open. A bundle the
// kernels cannot run is refused with backend.ErrUnsupported.
func Load(ctx context.Context, d Device, b *bundle.Bundle) (*Target, error) {
	if err := checkHead(b, d.Name()); err != nil {
		return nil, err
	}
	t, err := LoadTarget(ctx, d, b)
	if err != nil {
		return nil, err
	}
	if _, err := t.plan(); err != nil {
		t.Close()
		return nil, fmt.Errorf("bundle %s: %w", b.Dir, err)
	}
	t.owned = true
	return t, nil
}

// checkHead refuses, before any work on the device, a target whose LM head or embedding table
// the sessions' programs cannot read (the same rules NewDeviceSession applies): no packed
// lm_head [Vocab, Hidden] (tied embeddings), an embed_tokens that is not BF16 or F32. The
// errors wrap backend.ErrUnsupported. A bundle whose architecture or config LoadTarget refuses
// passes here, so that LoadTarget's error is the one returned.
func checkHead(b *bundle.Bundle, device string) error {
	m := b.Manifest
	if !slices.Contains(cpu.Architectures, m.Target.Architecture) {
		return nil
	}
	c, err := model.ParseConfig(m.Target.Config)
	if err != nil {
		return nil
	}
	h := c.Hidden
	head := false
	if bt, ok := b.Tensor("lm_head"); ok && bt.Model == manifests.ModelTarget && bt.Encoding == manifests.EncodingBLM {
		if mx, err := b.Matrix(bt); err == nil && int(mx.Geometry.N) == c.Vocab && int(mx.Geometry.K) == h {
			head = true
		}
	}
	if !head {
		return backend.Unsupported(fmt.Errorf("bundle %s: no packed lm_head [%d, %d] (tied embeddings do not run on %s yet)", b.Dir, c.Vocab, h, device))
	}
	emb, ok := b.Tensor("embed_tokens")
	if !ok || len(emb.Shape) != 2 || emb.Shape[0] != int64(c.Vocab) || emb.Shape[1] != int64(h) {
		return nil // LoadTarget and the session name the missing table
	}
	if emb.Format != "BF16" && emb.Format != "F32" {
		return backend.Unsupported(fmt.Errorf("bundle %s: tensor embed_tokens is %s; the %s gather reads BF16 or F32", b.Dir, emb.Format, device))
	}
	return nil
}

// Config returns the model's configuration.
func (t *Target) Config() model.Config { return t.Cfg }

// Matrix returns the packed matrix called name (a runtime tensor name: "lm_head",
// "layers.0.mlp.gate_up", …).
func (t *Target) Matrix(name string) (*Matrix, bool) {
	m, ok := t.mats[name]
	return m, ok
}

// MatrixNames returns the runtime names of the target's packed matrices, sorted.
func (t *Target) MatrixNames() []string {
	names := make([]string, 0, len(t.mats))
	for n := range t.mats {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Vector returns the device address and length (floats) of the float32 vector called name
// (its manifest transform applied: 1 + w for the one_plus norms, −exp for A_log).
func (t *Target) Vector(name string) (uint64, int, bool) {
	off, ok := t.vecOff[name]
	if !ok || t.vecs == nil {
		return 0, 0, false
	}
	return t.vecs.At(off), t.vecLen[name], true
}

// TensorAt returns the device address of a tensor's bytes in the uploaded weights (for a
// packed target matrix, bytes in its Matrix.Layout).
func (t *Target) TensorAt(name string) (uint64, bool) {
	bt, ok := t.Bundle.Tensor(name)
	if !ok {
		return 0, false
	}
	return t.Weights.At(bt.Offset), true
}

// Close frees the device buffers (not the bundle; the device only when the Target owns it: Load).
// When a Session.Close found the device still running work (ErrDeviceBusy), the buffers are
// kept (leaked), since the work may still read the weights and vectors, and the error wraps
// ErrDeviceBusy: the caller must then keep the bundle mapped (the weights may be its mapping,
// wrapped without a copy) for the life of the process. An owned device is closed either way
// (a device whose Wait can report ErrDeviceBusy makes its Close safe then).
func (t *Target) Close() error {
	t.busyMu.Lock()
	busy := t.busy
	t.busy = nil // reported once: a second Close finds nothing to free and returns nil
	t.busyMu.Unlock()
	if busy != nil {
		t.drafts, t.vecs, t.Weights, t.rowMajor = nil, nil, nil, nil
		err := fmt.Errorf("%s: close: the weights and vectors are kept, the device may still be using them: %w", t.pfx, busy)
		if t.owned {
			t.owned = false
			err = errors.Join(err, t.Device.Close())
		}
		return err
	}
	var err error
	for _, d := range t.drafts {
		if e := d.close(); err == nil {
			err = e
		}
	}
	t.drafts = nil
	for _, b := range t.rowMajor {
		if e := b.Free(); err == nil {
			err = e
		}
	}
	t.rowMajor = nil
	if t.vecs != nil {
		if e := t.vecs.Free(); err == nil {
			err = e
		}
		t.vecs = nil
	}
	if t.Weights != nil {
		if e := t.Weights.Free(); err == nil {
			err = e
		}
		t.Weights = nil
	}
	if t.owned {
		t.owned = false
		if e := t.Device.Close(); err == nil {
			err = e
		}
	}
	return err
}

// ReadBandwidthGBs measures the device's streaming read bandwidth (Device.ReadBandwidthGBs;
// GB = 1e9 bytes): the floor that lithos-run bench compares passes with
// (generate.BandwidthMeter).
func (t *Target) ReadBandwidthGBs() (float64, error) { return t.Device.ReadBandwidthGBs() }

// mmaSplits reports whether the MMA-layout kernels have a work split for g on dev (the split
// does not depend on the row count or the epilogue).
func mmaSplits(g blm.Geometry, dev kernels.BLMXDevice) bool {
	_, err := kernels.NewBLMXParams(g, 1, kernels.EpiStore, dev)
	return err == nil
}

// fragmentStage is the pinned staging buffer of repack: 32 MiB.
const fragmentStage = 32 << 20

// repack rewrites target matrices in place in t.Weights, which holds w (weights.bin) as
// uploaded (a device copy: UploadStaged made it), each as repacker.one says. One matrix at a
// time (host memory: one matrix's copy and the staging buffer). Called before the matrices' Ptr
// are made device addresses (they are still weights.bin offsets). It sets t.mmaOn and t.fragOn,
// which LoadDraft's matrices follow.
func (t *Target) repack(ctx context.Context, w []byte, mma, frag bool) error {
	t.mmaOn, t.fragOn = mma, frag
	names := make([]string, 0, len(t.mats))
	for name := range t.mats {
		names = append(names, name)
	}
	sort.Strings(names)
	rp := &repacker{t: t}
	defer rp.close()
	for _, name := range names {
		mx := t.mats[name]
		off := int64(mx.Ptr)
		if err := rp.one(ctx, mx, off, w[off:off+mx.Geometry.TotalBytes]); err != nil {
			return err
		}
	}
	return nil
}

// repacker rewrites matrices of t.Weights in place through one pinned staging buffer
// (fragmentStage bytes, allocated at the first rewrite) and one queue; close frees both. After a
// copy's wait ended with ErrDeviceBusy (the copy may still read the staging buffer) it refuses
// further rewrites with that error.
type repacker struct {
	t    *Target
	q    Queue
	host *HostBuffer
	busy error
}

// one rewrites mx, whose packed bytes src (the bundle's) sit at byte offset off of t.Weights:
// with t.mmaOn an NVFP4 or FP8 matrix whose MMA-layout copy (kernels.BLMXCopy) fits its packed
// bytes and that has a work split on t.MMA into that layout (Layout BLMLayoutMMA), with
// t.fragOn any other that has a fragment-major copy (kernels.BLMFragmentMajor: NVFP4 with
// stripes of whole groups, FP8, BF16, and no larger than the packed bytes) into that one
// (BLMLayoutFragment); the others keep the BLM layout. Each chunk of the copy is awaited; a
// wait that ends with ErrDeviceBusy marks the target busy (Close keeps its memory) and keeps the
// staging buffer. Errors name the tensor (a cancelled ctx's error wrapped).
func (rp *repacker) one(ctx context.Context, mx *Matrix, off int64, src []byte) error {
	t := rp.t
	name := mx.Name
	if rp.busy != nil {
		return fmt.Errorf("tensor %s: %w", name, rp.busy)
	}
	var fm []byte
	layout, kind := uint32(kernels.BLMLayoutMMA), "MMA-layout"
	if t.mmaOn && kernels.BLMXCopyBytes(mx.Geometry) > 0 && kernels.BLMXCopyBytes(mx.Geometry) <= mx.Geometry.TotalBytes && mmaSplits(mx.Geometry, t.MMA) {
		var err error
		if fm, err = kernels.BLMXCopy(mx.Geometry, src); err != nil {
			return fmt.Errorf("tensor %s: %w", name, err)
		}
	}
	if fm == nil && t.fragOn {
		layout, kind = kernels.BLMLayoutFragment, "fragment-major"
		var err error
		if fm, err = kernels.BLMFragmentMajor(mx.Geometry, src); err != nil {
			return nil // the BLM layout, as stored
		}
	}
	if fm == nil {
		return nil
	}
	if rp.q == nil {
		q, err := t.Device.NewQueue()
		if err != nil {
			return fmt.Errorf("tensor %s: weight copies: %w", name, err)
		}
		rp.q = q
	}
	if rp.host == nil {
		host, err := t.Device.HostAlloc(fragmentStage, false)
		if err != nil {
			return fmt.Errorf("tensor %s: weight copies: staging: %w", name, err)
		}
		rp.host = host
	}
	for c := 0; c < len(fm); c += fragmentStage {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("tensor %s: %s copy: %w", name, kind, err)
		}
		n := copy(rp.host.Bytes, fm[c:])
		if err := rp.q.CopyHtoD(t.Weights, off+int64(c), rp.host, 0, int64(n)); err != nil {
			return fmt.Errorf("tensor %s: %s copy: %w", name, kind, err)
		}
		if err := rp.q.Wait(0); err != nil {
			if errors.Is(err, ErrDeviceBusy) {
				rp.host = nil // the copy may still read it
				rp.busy = err
				t.markBusy(err)
			}
			return fmt.Errorf("tensor %s: %s copy: %w", name, kind, err)
		}
	}
	mx.Layout = layout
	return nil
}

// close releases the queue and the staging buffer (failures logged).
func (rp *repacker) close() {
	if rp.q != nil {
		if err := rp.q.Close(); err != nil {
			slog.Warn("weight copies: close the queue", "err", err)
		}
		rp.q = nil
	}
	if rp.host != nil {
		if err := rp.host.Free(); err != nil {
			slog.Warn("weight copies: free the staging buffer", "err", err)
		}
		rp.host = nil
	}
}
