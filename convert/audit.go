package convert

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"lithos/manifests"
)

// AuditOptions tunes Audit.
type AuditOptions struct {
	// Draft, when set, is a DSpark head audited with the target: its bytes
	// per draft block and, with Accept, the round floor.
	Draft Source
	// Chip is the bandwidth profile; zero means manifests.DefaultChipID.
	Chip manifests.Chip
	// BandwidthGBps, when > 0, replaces the chip's bandwidth (GB/s).
	BandwidthGBps float64
	// Context, when > 0, adds a ceiling at that many cached tokens.
	Context int64
	// Accept is the mean number of tokens a speculative round commits
	// (1 ≤ Accept ≤ block size + 1); 0 reports round floors without tok/s.
	Accept float64
	// MaxContext bounds the sweep (128, 256, … MaxContext); 0 means the
	// config's max_position_embeddings, or 32768 when it has none.
	MaxContext int64
	// Tensors adds every classified tensor to the report.
	Tensors bool
}

// Report is everything `lithos-pack audit` prints. JSON keys carry their
// units: _bytes (bytes), _gb (1e9 bytes), _mb (1e6 bytes), _ms,
// _tok_per_s / tok_per_s, _gb_per_s.
type Report struct {
	Source              SourceReport   `json:"source"`
	Model               ModelReport    `json:"model"`
	Groups              []GroupReport  `json:"groups"`
	PerPassWeightsBytes int64          `json:"per_pass_weights_bytes"`
	PerPassWeightsGB    float64        `json:"per_pass_weights_gb"`
	TensorBytes         int64          `json:"file_tensor_bytes"`
	TensorGB            float64        `json:"file_tensor_gb"`
	FileBytes           int64          `json:"file_bytes"`
	FileGB              float64        `json:"file_gb"`
	State               *StateReport   `json:"state,omitempty"`
	Ceilings            *CeilingReport `json:"ceilings,omitempty"`
	Draft               *DraftReport   `json:"draft,omitempty"`
	Unknown             []TensorReport `json:"unknown_tensors"`
	Tensors             []TensorReport `json:"tensors,omitempty"`
	Warnings            []string       `json:"warnings"`
}

// SourceReport says what was read and how many bytes it took.
type SourceReport struct {
	Kind         string       `json:"kind"` // "local" or "remote"
	Location     string       `json:"location"`
	BytesFetched int64        `json:"bytes_fetched"`
	Files        []FileReport `json:"files"`
}

// FileReport is one safetensors file.
type FileReport struct {
	Name        string `json:"name"`
	FileBytes   int64  `json:"file_bytes"`
	HeaderBytes int64  `json:"header_bytes"`
	Tensors     int    `json:"tensors"`
}

// ModelReport summarizes the config.
type ModelReport struct {
	Architecture          string `json:"architecture"`
	ModelType             string `json:"model_type"`
	Quantization          string `json:"quantization"`
	HiddenSize            int    `json:"hidden_size"`
	VocabSize             int    `json:"vocab_size"`
	Layers                int    `json:"layers"`
	GDNLayers             int    `json:"gdn_layers"`
	FullAttentionLayers   int    `json:"full_attention_layers"`
	MaxPositionEmbeddings int    `json:"max_position_embeddings"`
}

// GroupReport is one row of the byte table.
type GroupReport struct {
	ID      Group   `json:"id"`
	Label   string  `json:"label"`
	Format  string  `json:"format"`
	Read    string  `json:"read"`
	Tensors int     `json:"tensors"`
	Bytes   int64   `json:"bytes"`
	GB      float64 `json:"gb"`
}

// StateReport holds the per-pass state terms.
type StateReport struct {
	GDNLayers             int     `json:"gdn_layers"`
	GDNStateBytes         int64   `json:"gdn_state_bytes"`
	GDNStateMB            float64 `json:"gdn_state_mb"`
	GDNStateReadWrittenGB float64 `json:"gdn_state_read_written_gb"`
	ConvStateBytes        int64   `json:"conv_state_bytes"`
	KVLayers              int     `json:"kv_layers"`
	KVBytesPerToken       int64   `json:"kv_bytes_per_token"`
	EmbeddingRowBytes     int64   `json:"embedding_row_bytes"`
}

// CeilingReport holds the bandwidth ceilings.
type CeilingReport struct {
	Chip            string       `json:"chip"`
	ChipName        string       `json:"chip_name"`
	BandwidthGBps   float64      `json:"bandwidth_gb_per_s"`
	BandwidthSource string       `json:"bandwidth_source"`
	Formula         string       `json:"formula"`
	ShortContext    PassReport   `json:"short_context"`
	AtContext       *PassReport  `json:"at_context,omitempty"`
	Sweep           []PassReport `json:"sweep"`
}

// PassReport is the plain-decode ceiling at one context, and the
// speculative round floor when a draft was audited.
type PassReport struct {
	ContextTokens int64        `json:"context_tokens"`
	PassBytes     int64        `json:"pass_bytes"`
	PassGB        float64      `json:"pass_gb"`
	KVReadBytes   int64        `json:"kv_read_bytes"`
	PassMS        float64      `json:"pass_floor_ms"`
	TokPerS       float64      `json:"tok_per_s"`
	Round         *RoundReport `json:"draft_round,omitempty"`
}

// RoundReport is one speculative round (draft block + verify pass).
type RoundReport struct {
	VerifyRows      int     `json:"verify_rows"`
	VerifyPassBytes int64   `json:"verify_pass_bytes"`
	DraftBlockBytes int64   `json:"draft_block_bytes"`
	RoundBytes      int64   `json:"round_bytes"`
	RoundGB         float64 `json:"round_gb"`
	RoundMS         float64 `json:"round_floor_ms"`
	// BreakEvenAccept is the mean tokens per round at which speculation
	// only matches plain decoding: round bytes / plain pass bytes.
	BreakEvenAccept float64 `json:"break_even_accept_tokens"`
	AcceptTokens    float64 `json:"accept_tokens_per_round,omitempty"`
	TokPerS         float64 `json:"tok_per_s,omitempty"`
}

// DraftReport is the audit of a DSpark head.
type DraftReport struct {
	Location        string        `json:"location"`
	BytesFetched    int64         `json:"bytes_fetched"`
	Files           []FileReport  `json:"files"`
	Architecture    string        `json:"architecture"`
	Kind            string        `json:"kind"`
	BlockSize       int           `json:"block_size"`
	MarkovRank      int           `json:"markov_rank"`
	TargetLayerIDs  []int         `json:"target_layer_ids"`
	Groups          []GroupReport `json:"groups"`
	TensorBytes     int64         `json:"tensor_bytes"`
	FileBytes       int64         `json:"file_bytes"`
	FileGB          float64       `json:"file_gb"`
	W1RowBytes      int64         `json:"markov_w1_row_bytes"`
	W2Bytes         int64         `json:"markov_w2_bytes"`
	KVBytesPerToken int64         `json:"context_kv_bytes_per_token"`
	VocabHeadBytes  int64         `json:"vocab_head_bytes"`
	VocabHeadShared bool          `json:"vocab_head_shared"`
	BlockBytes      int64         `json:"block_bytes"`
	BlockGB         float64       `json:"block_gb"`
	BlockMS         float64       `json:"block_floor_ms"`
}

// TensorReport is one tensor in a report.
type TensorReport struct {
	Name   string  `json:"name"`
	Group  Group   `json:"group"`
	Format string  `json:"format"`
	DType  string  `json:"dtype"`
	Shape  []int64 `json:"shape"`
	Bytes  int64   `json:"bytes"`
	File   string  `json:"file"`
}

// GB converts bytes to GB (1e9 bytes).
func GB(b int64) float64 { return float64(b) / 1e9 }

// Audit reads the headers of a checkpoint (and of a draft head) and computes
// its byte budget and ceilings. It reads config.json, the quantization
// files, the index and each safetensors header; no tensor data. src may be a
// target or a draft head; opts.Draft must be a draft head. Errors are those
// of LoadCheckpoint, an invalid Accept, or a draft that is not one.
func Audit(ctx context.Context, src Source, opts AuditOptions) (*Report, error) {
	chip, bw, bwSource, err := resolveBandwidth(opts)
	if err != nil {
		return nil, err
	}
	ck, err := LoadCheckpoint(ctx, src)
	if err != nil {
		return nil, err
	}
	r := &Report{Warnings: []string{}, Unknown: []TensorReport{}}
	r.Source = sourceReport(src, ck)
	cfg := ck.Config
	cl := Classify(cfg, ck.Tensors)
	r.Warnings = append(r.Warnings, ck.Warnings...)
	r.Warnings = append(r.Warnings, cl.Warnings...)
	r.Warnings = append(r.Warnings, checkInventory(cfg, ck.Tensors)...)
	r.Warnings = append(r.Warnings, checkDeclared(ck.Quant, cl)...)
	r.Model = ModelReport{
		Architecture: cfg.Architecture(), ModelType: cfg.ModelType, Quantization: quantSummary(ck),
		HiddenSize: cfg.Text.HiddenSize, VocabSize: cfg.Text.VocabSize, Layers: cfg.Text.NumHiddenLayers,
		GDNLayers: cfg.Text.CountLayers(LinearAttention), FullAttentionLayers: cfg.Text.CountLayers(FullAttention),
		MaxPositionEmbeddings: cfg.Text.MaxPositionEmbeddings,
	}
	r.Groups = groupReports(cfg, cl)
	for _, g := range r.Groups {
		if g.ID.PerPass() {
			r.PerPassWeightsBytes += g.Bytes
		}
	}
	r.PerPassWeightsGB = GB(r.PerPassWeightsBytes)
	r.TensorBytes, r.FileBytes = ck.TensorBytes(), ck.FileBytes()
	r.TensorGB, r.FileGB = GB(r.TensorBytes), GB(r.FileBytes)
	for _, t := range cl.Tensors {
		tr := tensorReport(t)
		if t.Group == GroupUnknown {
			r.Unknown = append(r.Unknown, tr)
		}
		if opts.Tensors {
			r.Tensors = append(r.Tensors, tr)
		}
	}
	if len(r.Unknown) > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d tensor(s) fit no group and are not budgeted (see unknown_tensors)", len(r.Unknown)))
	}

	if cfg.IsDraft() {
		if opts.Draft != nil || opts.Accept != 0 {
			return nil, fmt.Errorf("%s is a draft head itself; pass the target checkpoint first (with this head as its draft)", src)
		}
		d, _ := draftReport(nil, ck, cl, &r.Warnings)
		d.BlockMS = Millis(d.BlockBytes, bw)
		d.Location, d.BytesFetched, d.Files = r.Source.Location, r.Source.BytesFetched, r.Source.Files
		r.Draft = d
		r.Warnings = append(r.Warnings, "the draft's vocabulary head is the target's: audit the target with --draft to include it")
		return r, nil
	}

	pass, err := passModel(cfg, cl)
	if err != nil {
		return nil, err
	}
	r.State = &StateReport{
		GDNLayers: r.Model.GDNLayers, GDNStateBytes: pass.GDNStateBytes, GDNStateMB: float64(pass.GDNStateBytes) / 1e6,
		GDNStateReadWrittenGB: GB(2 * pass.GDNStateBytes), ConvStateBytes: pass.ConvStateBytes,
		KVLayers: r.Model.FullAttentionLayers, KVBytesPerToken: pass.KVBytesPerToken, EmbeddingRowBytes: pass.EmbeddingRowBytes,
	}

	var draft *DraftModel
	if opts.Draft != nil {
		dck, err := LoadCheckpoint(ctx, opts.Draft)
		if err != nil {
			return nil, fmt.Errorf("draft: %w", err)
		}
		if !dck.Config.IsDraft() {
			return nil, fmt.Errorf("draft: %s is not a DSpark/DFlash head (architectures %v)", opts.Draft, dck.Config.Architectures)
		}
		dcl := Classify(dck.Config, dck.Tensors)
		r.Warnings = append(r.Warnings, prefixAll("draft: ", dck.Warnings)...)
		r.Warnings = append(r.Warnings, prefixAll("draft: ", dcl.Warnings)...)
		r.Warnings = append(r.Warnings, prefixAll("draft: ", checkInventory(dck.Config, dck.Tensors))...)
		r.Warnings = append(r.Warnings, checkPairing(cfg, dck.Config)...)
		d, m := draftReport(&targetShare{cl: cl, embeddingRow: pass.EmbeddingRowBytes}, dck, dcl, &r.Warnings)
		d.BlockMS = Millis(d.BlockBytes, bw)
		src := sourceReport(opts.Draft, dck)
		d.Location, d.BytesFetched, d.Files = src.Location, src.BytesFetched, src.Files
		r.Draft = d
		draft = m
	}
	if opts.Accept != 0 {
		if draft == nil {
			return nil, fmt.Errorf("--accept needs a draft head (--draft)")
		}
		if opts.Accept < 1 || opts.Accept > float64(draft.BlockSize+1) || math.IsNaN(opts.Accept) {
			return nil, fmt.Errorf("--accept %v: a round commits between 1 and %d tokens (block size %d + the bonus token)",
				opts.Accept, draft.BlockSize+1, draft.BlockSize)
		}
	}

	c := &CeilingReport{Chip: chip.ID, ChipName: chip.Name, BandwidthGBps: bw, BandwidthSource: bwSource, Formula: CeilingFormula}
	at := func(n int64) PassReport {
		p := PassReport{ContextTokens: n, PassBytes: pass.Bytes(n, 1), KVReadBytes: n * pass.KVBytesPerToken}
		p.PassGB, p.PassMS, p.TokPerS = GB(p.PassBytes), Millis(p.PassBytes, bw), TokPerS(1, p.PassBytes, bw)
		if draft != nil {
			rows := draft.BlockSize + 1
			rr := &RoundReport{VerifyRows: rows, VerifyPassBytes: pass.Bytes(n, int64(rows)), DraftBlockBytes: draft.BlockBytes(n)}
			rr.RoundBytes = rr.VerifyPassBytes + rr.DraftBlockBytes
			rr.RoundGB, rr.RoundMS = GB(rr.RoundBytes), Millis(rr.RoundBytes, bw)
			rr.BreakEvenAccept = float64(rr.RoundBytes) / float64(p.PassBytes)
			if opts.Accept > 0 {
				rr.AcceptTokens, rr.TokPerS = opts.Accept, TokPerS(opts.Accept, rr.RoundBytes, bw)
			}
			p.Round = rr
		}
		return p
	}
	c.ShortContext = at(0)
	if opts.Context < 0 {
		return nil, fmt.Errorf("--context %d: must not be negative", opts.Context)
	}
	if opts.Context > 0 {
		p := at(opts.Context)
		c.AtContext = &p
		if m := int64(cfg.Text.MaxPositionEmbeddings); m > 0 && opts.Context > m {
			r.Warnings = append(r.Warnings, fmt.Sprintf("--context %d is past the model's max_position_embeddings (%d)", opts.Context, m))
		}
	}
	maxCtx := opts.MaxContext
	if maxCtx == 0 {
		maxCtx = int64(cfg.Text.MaxPositionEmbeddings)
	}
	if maxCtx == 0 {
		maxCtx = 32768
	}
	if maxCtx < 0 || maxCtx > 1<<30 {
		return nil, fmt.Errorf("--max-context %d: must be between 1 and 2^30", maxCtx)
	}
	for n := int64(128); n <= maxCtx; n *= 2 {
		c.Sweep = append(c.Sweep, at(n))
	}
	if len(c.Sweep) == 0 || c.Sweep[len(c.Sweep)-1].ContextTokens != maxCtx {
		c.Sweep = append(c.Sweep, at(maxCtx))
	}
	r.Ceilings = c
	return r, nil
}

func quantSummary(ck *Checkpoint) string {
	if ck.Quant == nil && ck.Config.Lithos != nil {
		l := ck.Config.Lithos
		s := "lithos " + l.Format
		if l.WeightOnly {
			s += " weight-only"
		}
		if len(l.Keep) > 0 {
			s += " (keeps " + strings.Join(l.Keep, ", ") + ")"
		}
		return s + " [config.json lithos_quantization]"
	}
	return ck.Quant.Summary()
}

func prefixAll(p string, xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = p + x
	}
	return out
}

func sourceReport(src Source, ck *Checkpoint) SourceReport {
	s := SourceReport{Kind: "local", Location: src.String(), BytesFetched: src.BytesFetched()}
	if _, ok := src.(*RemoteSource); ok {
		s.Kind = "remote"
	}
	for _, f := range ck.Files {
		s.Files = append(s.Files, FileReport{Name: f.Name, FileBytes: f.Bytes, HeaderBytes: f.HeaderBytes, Tensors: f.Tensors})
	}
	return s
}

func tensorReport(t Classified) TensorReport {
	return TensorReport{Name: t.Name, Group: t.Group, Format: t.Label(), DType: string(t.DType), Shape: t.Shape, Bytes: t.Bytes, File: t.File}
}

// passModel derives W, e, S, C, K.
func passModel(cfg *Config, cl *Classification) (PassModel, error) {
	var p PassModel
	var embBytes int64
	var embRows int64
	for _, t := range cl.Tensors {
		if t.Group.PerPass() {
			p.WeightBytes += t.Bytes
		}
		if t.Group == GroupEmbedding {
			embBytes += t.Bytes
			if t.Role == RolePayload && len(t.Shape) > 0 {
				embRows = t.Shape[0]
			}
		}
	}
	if cfg.Text.TieWordEmbeddings {
		// The vocabulary head is the embedding matrix, streamed whole.
		p.WeightBytes += embBytes
	}
	if embRows > 0 {
		p.EmbeddingRowBytes = embBytes / embRows
	}
	p.GDNStateBytes, p.ConvStateBytes, p.KVBytesPerToken = statePerPass(&cfg.Text)
	return p, nil
}

// groupReports sums classified tensors by group, in report order, skipping
// empty groups.
func groupReports(cfg *Config, cl *Classification) []GroupReport {
	sums := map[Group]*GroupReport{}
	members := map[Group][]Classified{}
	for _, t := range cl.Tensors {
		g := sums[t.Group]
		if g == nil {
			g = &GroupReport{ID: t.Group}
			sums[t.Group] = g
		}
		g.Tensors++
		g.Bytes += t.Bytes
		members[t.Group] = append(members[t.Group], t)
	}
	var out []GroupReport
	for _, id := range groupOrder {
		g := sums[id]
		if g == nil {
			continue
		}
		g.GB = GB(g.Bytes)
		g.Label, g.Read = groupLabel(cfg, id)
		g.Format = groupFormat(members[id])
		out = append(out, *g)
	}
	return out
}

func groupLabel(cfg *Config, g Group) (label, read string) {
	t := &cfg.Text
	switch g {
	case GroupMLPCodes:
		return fmt.Sprintf("MLP gate/up/down, %d layers", t.NumHiddenLayers), "every pass"
	case GroupMLPBlockScales:
		return "MLP block scales", "every pass"
	case GroupGDNProj:
		return fmt.Sprintf("Gated DeltaNet projections, %d layers", t.CountLayers(LinearAttention)), "every pass"
	case GroupAttnProj:
		return fmt.Sprintf("Full-attention projections, %d layers", t.CountLayers(FullAttention)), "every pass"
	case GroupSmall:
		return "Small tensors (A/B projections, norms, conv, scalars)", "every pass"
	case GroupVocabHead:
		return "Vocabulary head", "every pass"
	case GroupEmbedding:
		return "Token embedding (one row is gathered)", "one row per token"
	case GroupMTPVision:
		return "Multi-token-prediction head, vision tower", "never in text decoding"
	case GroupDraftAttn:
		return fmt.Sprintf("Draft attention projections, %d layers", t.NumHiddenLayers), "once per block"
	case GroupDraftMLP:
		return fmt.Sprintf("Draft MLPs, %d layers", t.NumHiddenLayers), "once per block"
	case GroupDraftFC:
		return "fc over the target taps", "once per block"
	case GroupMarkovW2:
		return "Markov W2 (rank → vocabulary)", "once per Markov step"
	case GroupMarkovW1:
		return "Markov W1 (vocabulary → rank)", "one row per Markov step"
	case GroupDraftSmall:
		return "Norms, confidence head, scalars", "once per block"
	case GroupDraftEmbedding:
		return "Draft token embedding", "one row per token"
	case GroupDraftVocabHead:
		return "Draft vocabulary head", "once per block"
	}
	return "Unclassified tensors", "not budgeted"
}

// groupFormat names a group's storage: "NVFP4 codes", "FP8 E4M3, one per 16
// weights", "NVFP4 + scales", "FP8 E4M3", or the dtypes ("BF16 + F32";
// "various" past two).
func groupFormat(ts []Classified) string {
	var nvPayload, nvScales, fp8Payload, other bool
	dtypeBytes := map[string]int64{}
	for _, t := range ts {
		nv := t.Format == FormatNVFP4 || t.Format == FormatNVFP4MLX
		switch {
		case nv && t.Role == RolePayload:
			nvPayload = true
		case nv && t.Role == RoleBlockScales:
			nvScales = true
		case t.Format == FormatFP8 && t.Role == RolePayload:
			fp8Payload = true
		case t.Role == RoleScalar && (nv || t.Format == FormatFP8):
			// per-tensor scalars ride along with their matrices
		default:
			other = true
		}
		dtypeBytes[string(t.DType)] += t.Bytes
	}
	switch {
	case !other && nvPayload && nvScales && !fp8Payload:
		return "NVFP4 + scales"
	case !other && nvPayload && !nvScales && !fp8Payload:
		return "NVFP4 codes"
	case !other && nvScales && !nvPayload && !fp8Payload:
		return "FP8 E4M3, one per 16 weights"
	case !other && fp8Payload && !nvPayload && !nvScales:
		return "FP8 E4M3"
	}
	dts := make([]string, 0, len(dtypeBytes))
	for d := range dtypeBytes {
		dts = append(dts, d)
	}
	sort.Slice(dts, func(i, j int) bool {
		if dtypeBytes[dts[i]] != dtypeBytes[dts[j]] {
			return dtypeBytes[dts[i]] > dtypeBytes[dts[j]]
		}
		return dts[i] < dts[j]
	})
	if len(dts) > 2 {
		return "various"
	}
	return strings.Join(dts, " + ")
}

// checkDeclared compares the declared quantization of every linear payload
// with the format its dtypes show, and summarizes disagreements.
func checkDeclared(q *QuantConfig, cl *Classification) []string {
	if q == nil || q.Method != "modelopt" {
		return nil
	}
	type key struct{ declared, stored string }
	examples := map[key][]string{}
	for _, t := range cl.Tensors {
		if t.Role != RolePayload || len(t.Shape) != 2 || t.Group == GroupEmbedding || t.Group == GroupDraftEmbedding || t.Group == GroupMarkovW1 {
			continue
		}
		declared := FormatFamily(q.ModuleAlgo(t.Module))
		stored := ""
		switch t.Format {
		case FormatNVFP4, FormatNVFP4MLX:
			stored = "NVFP4"
		case FormatFP8, formatUnscaled8:
			stored = "FP8"
		case FormatAffine, FormatGPTQ:
			stored = "INT4"
		}
		if declared != stored {
			k := key{declared, stored}
			examples[k] = append(examples[k], t.Module)
		}
	}
	var out []string
	keys := make([]key, 0, len(examples))
	for k := range examples {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return strings.Compare(a.declared+"|"+a.stored, b.declared+"|"+b.stored) })
	name := func(s string) string {
		if s == "" {
			return "unquantized"
		}
		return s
	}
	for _, k := range keys {
		ms := examples[k]
		out = append(out, fmt.Sprintf("%s declares %d module(s) %s that are stored %s: %s",
			q.Source, len(ms), name(k.declared), name(k.stored), listSome(ms, 3)))
	}
	return out
}

// checkPairing compares a draft head with its target.
func checkPairing(target, draft *Config) []string {
	var out []string
	d := draft.Draft
	if d.TargetHiddenSize != target.Text.HiddenSize {
		out = append(out, fmt.Sprintf("draft: target_hidden_size %d, but the target's hidden_size is %d", d.TargetHiddenSize, target.Text.HiddenSize))
	}
	if draft.Text.VocabSize != target.Text.VocabSize {
		out = append(out, fmt.Sprintf("draft: vocab_size %d, but the target's is %d", draft.Text.VocabSize, target.Text.VocabSize))
	}
	for _, id := range d.TargetLayerIDs {
		if id < -1 || id >= target.Text.NumHiddenLayers {
			out = append(out, fmt.Sprintf("draft: target_layer_ids has %d, outside the target's %d layers", id, target.Text.NumHiddenLayers))
		}
	}
	if d.NumTargetLayers > 0 && d.NumTargetLayers != target.Text.NumHiddenLayers {
		out = append(out, fmt.Sprintf("draft: num_target_layers %d, but the target has %d", d.NumTargetLayers, target.Text.NumHiddenLayers))
	}
	return out
}

// targetShare is what a draft block borrows from its target.
type targetShare struct {
	cl           *Classification
	embeddingRow int64
}

// draftReport budgets a draft head; share is nil for a head audited alone.
func draftReport(share *targetShare, ck *Checkpoint, cl *Classification, warnings *[]string) (*DraftReport, *DraftModel) {
	cfg := ck.Config
	d := &DraftReport{}
	d.Architecture, d.Kind, d.BlockSize, d.MarkovRank = cfg.Architecture(), cfg.Draft.Kind, cfg.Draft.BlockSize, cfg.Draft.MarkovRank
	d.TargetLayerIDs = slices.Clone(cfg.Draft.TargetLayerIDs)
	d.Groups = groupReports(cfg, cl)
	d.TensorBytes, d.FileBytes = ck.TensorBytes(), ck.FileBytes()
	d.FileGB = GB(d.FileBytes)
	m := &DraftModel{BlockSize: cfg.Draft.BlockSize}
	var w1Bytes, w1Rows, ownHead, ownEmb, ownEmbRows int64
	for _, t := range cl.Tensors {
		switch t.Group {
		case GroupMarkovW1:
			w1Bytes += t.Bytes
			if t.Role == RolePayload && len(t.Shape) > 0 {
				w1Rows = t.Shape[0]
			}
			continue
		case GroupMarkovW2:
			m.W2Bytes += t.Bytes
		case GroupDraftVocabHead:
			ownHead += t.Bytes
			continue
		case GroupDraftEmbedding:
			ownEmb += t.Bytes
			if t.Role == RolePayload && len(t.Shape) > 0 {
				ownEmbRows = t.Shape[0]
			}
			continue
		case GroupUnknown:
			continue
		}
		m.OnceBytes += t.Bytes
	}
	if w1Rows > 0 {
		m.W1RowBytes = w1Bytes / w1Rows
	}
	switch {
	case ownHead > 0:
		m.VocabHeadBytes = ownHead
	case share != nil:
		d.VocabHeadShared = true
		for _, t := range share.cl.Tensors {
			if stripTextPrefix(t.Module) == "lm_head" {
				m.VocabHeadBytes += t.Bytes
			}
		}
		if m.VocabHeadBytes == 0 {
			*warnings = append(*warnings, "draft: the target has no lm_head (tied embeddings?); the draft block leaves the vocabulary head out")
		}
	}
	switch {
	case ownEmbRows > 0:
		m.EmbeddingRowBytes = ownEmb / ownEmbRows
	case share != nil:
		m.EmbeddingRowBytes = share.embeddingRow
	}
	t := &cfg.Text
	m.KVBytesPerToken = int64(t.NumHiddenLayers) * int64(t.NumKeyValueHeads) * int64(t.HeadDim) * 2 * 2
	d.W1RowBytes, d.W2Bytes, d.KVBytesPerToken, d.VocabHeadBytes = m.W1RowBytes, m.W2Bytes, m.KVBytesPerToken, m.VocabHeadBytes
	d.BlockBytes = m.BlockBytes(0)
	d.BlockGB = GB(d.BlockBytes)
	return d, m
}

// resolveBandwidth picks the chip profile and bandwidth of the ceilings.
func resolveBandwidth(opts AuditOptions) (manifests.Chip, float64, string, error) {
	chip := opts.Chip
	if chip.ID == "" {
		chip, _ = manifests.ChipByID(manifests.DefaultChipID)
	}
	bw, source := chip.BandwidthGBps, chip.Source
	if opts.BandwidthGBps != 0 {
		bw, source = opts.BandwidthGBps, "--bandwidth"
		if opts.Chip.ID == "" {
			chip = manifests.Chip{ID: "custom", Name: fmt.Sprintf("%g GB/s", bw)}
		}
	}
	if !(bw > 0) || math.IsInf(bw, 0) {
		return chip, 0, "", fmt.Errorf("bandwidth %v GB/s: must be a positive number", bw)
	}
	return chip, bw, source, nil
}
