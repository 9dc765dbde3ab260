package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"lithos/formats/safetensors"
	"lithos/manifests"
)

// The oracle is the audit article's byte table (shared/reference/
// 000_1fcfc96d7abf8b5f.txt, "What one token costs the bus"), which its
// author summed from the real safetensors headers of nvidia/Qwen3.8-27B-NVFP4.
// The exact byte counts are the formulas of docs/audit.md evaluated by hand.
var articleTable = []struct {
	group Group
	gb    string // the article's figure
	bytes int64  // docs/audit.md
}{
	{GroupMLPCodes, "8.556", 8_556_380_160},
	{GroupMLPBlockScales, "1.070", 1_069_547_520},
	{GroupGDNProj, "5.536", 5_536_481_280},
	{GroupAttnProj, "1.678", 1_677_721_600},
	{GroupSmall, "0.053", 52_501_640},
	{GroupVocabHead, "0.715", 715_161_600},
	{GroupEmbedding, "2.543", 2_542_796_800},
	{GroupMTPVision, "1.770", 1_770_482_688},
}

func audit27B(t *testing.T, opts AuditOptions) *Report {
	t.Helper()
	r, err := Audit(context.Background(), LocalSource{Dir: synthNamed(t, spec27B)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAudit27BReproducesArticleTable(t *testing.T) {
	r := audit27B(t, AuditOptions{})
	for _, row := range articleTable {
		g := group(t, r.Groups, row.group)
		if got := fmt.Sprintf("%.3f", g.GB); got != row.gb {
			t.Errorf("%s: %s GB, the article says %s", row.group, got, row.gb)
		}
		if g.Bytes != row.bytes {
			t.Errorf("%s: %d bytes, docs/audit.md derives %d", row.group, g.Bytes, row.bytes)
		}
	}
	if got := fmt.Sprintf("%.3f", r.PerPassWeightsGB); got != "17.608" {
		t.Errorf("read on every decode pass: %s GB, the article says 17.608", got)
	}
	if r.PerPassWeightsBytes != 17_607_793_800 {
		t.Errorf("per-pass bytes %d, want 17,607,793,800", r.PerPassWeightsBytes)
	}
	// "The file totals 21.92 GB".
	if got := fmt.Sprintf("%.2f", r.TensorGB); got != "21.92" {
		t.Errorf("file total %s GB, the article says 21.92", got)
	}
	if len(r.Unknown) != 0 || len(r.Warnings) != 0 {
		t.Errorf("a faithful inventory should classify cleanly: unknown %v, warnings %v", r.Unknown, r.Warnings)
	}
	wantFormats := map[Group]string{
		GroupMLPCodes: "NVFP4 codes", GroupMLPBlockScales: "FP8 E4M3, one per 16 weights", GroupGDNProj: "FP8 E4M3",
		GroupAttnProj: "FP8 E4M3", GroupVocabHead: "NVFP4 + scales", GroupEmbedding: "BF16", GroupSmall: "BF16 + F32",
	}
	for id, f := range wantFormats {
		if g := group(t, r.Groups, id); g.Format != f {
			t.Errorf("%s format %q, want %q", id, g.Format, f)
		}
	}
}

func TestAudit27BStateAndCeilings(t *testing.T) {
	r := audit27B(t, AuditOptions{Context: 32768})
	s := r.State
	// Article: 48 × 48 × 128 × 128 × 4 bytes, 151 MB; 65,536 bytes per token of context; 2.15 GB at 32K.
	if s.GDNStateBytes != 48*48*128*128*4 || fmt.Sprintf("%.0f", s.GDNStateMB) != "151" {
		t.Errorf("GDN state %d bytes (%.1f MB), want 150,994,944 (151 MB)", s.GDNStateBytes, s.GDNStateMB)
	}
	if fmt.Sprintf("%.3f", s.GDNStateReadWrittenGB) != "0.302" {
		t.Errorf("GDN state read+written %.4f GB, the article's formula adds 0.302", s.GDNStateReadWrittenGB)
	}
	if s.KVBytesPerToken != 65536 {
		t.Errorf("KV %d bytes per token, the article says 65,536", s.KVBytesPerToken)
	}
	if got := fmt.Sprintf("%.2f", GB(32768*s.KVBytesPerToken)); got != "2.15" {
		t.Errorf("KV at 32K %s GB, the article says 2.15", got)
	}
	if s.ConvStateBytes != 48*3*10240*2 || s.EmbeddingRowBytes != 5120*2 {
		t.Errorf("conv state %d, embedding row %d", s.ConvStateBytes, s.EmbeddingRowBytes)
	}
	c := r.Ceilings
	if c.Chip != manifests.DefaultChipID || c.BandwidthGBps != 614.4 {
		t.Fatalf("default chip %s at %v GB/s", c.Chip, c.BandwidthGBps)
	}
	if got := fmt.Sprintf("%.1f", c.ShortContext.TokPerS); got != "34.3" {
		t.Errorf("short-context ceiling %s tok/s, the article says 34.3", got)
	}
	if got := fmt.Sprintf("%.1f", c.AtContext.TokPerS); got != "30.6" {
		t.Errorf("32K ceiling %s tok/s, the article says 30.6", got)
	}
	// P(N) = W + e + 2S + 2C + (N+1)K, evaluated by hand.
	if c.ShortContext.PassBytes != 17_915_757_704 || c.AtContext.PassBytes != 20_063_241_352 {
		t.Errorf("pass bytes %d / %d", c.ShortContext.PassBytes, c.AtContext.PassBytes)
	}
	if got := 614.4e9 / 17_915_757_704; math.Abs(c.ShortContext.TokPerS-got) > 1e-9 {
		t.Errorf("tok/s %v, want %v", c.ShortContext.TokPerS, got)
	}
	// Sweep: 128 … 262,144 (max_position_embeddings), ceilings falling with context.
	if n := len(c.Sweep); n != 12 || c.Sweep[0].ContextTokens != 128 || c.Sweep[n-1].ContextTokens != 262144 {
		t.Fatalf("sweep %v", c.Sweep)
	}
	for i := 1; i < len(c.Sweep); i++ {
		if !(c.Sweep[i].TokPerS < c.Sweep[i-1].TokPerS) {
			t.Errorf("sweep not decreasing at %d tokens", c.Sweep[i].ContextTokens)
		}
	}
}

func TestAuditChipsAndBandwidth(t *testing.T) {
	dir := synthNamed(t, spec27B)
	chip32, _ := manifests.ChipByID("apple-m5-max-32c")
	r32, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{Chip: chip32})
	if err != nil {
		t.Fatal(err)
	}
	r40, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Article: "the same arithmetic puts its plain-decode ceiling 25% lower".
	if ratio := r32.Ceilings.ShortContext.TokPerS / r40.Ceilings.ShortContext.TokPerS; fmt.Sprintf("%.2f", 1-ratio) != "0.25" {
		t.Errorf("32-core ceiling is %.3f of the 40-core's", ratio)
	}
	rb, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{BandwidthGBps: 307.2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rb.Ceilings.ShortContext.TokPerS, r40.Ceilings.ShortContext.TokPerS/2; math.Abs(got-want) > 1e-9 {
		t.Errorf("--bandwidth 307.2 gives %v tok/s, want half of 614.4's: %v", got, want)
	}
	if rb.Ceilings.Chip != "custom" || rb.Ceilings.BandwidthSource != "--bandwidth" {
		t.Errorf("custom bandwidth reported as %s / %s", rb.Ceilings.Chip, rb.Ceilings.BandwidthSource)
	}
	for _, bw := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{BandwidthGBps: bw}); err == nil {
			t.Errorf("bandwidth %v accepted", bw)
		}
	}
}

func TestAuditDraftHead(t *testing.T) {
	target := synthNamed(t, spec27B)
	head := synthNamed(t, specHeadNVFP4)
	r, err := Audit(context.Background(), LocalSource{Dir: target}, AuditOptions{Draft: LocalSource{Dir: head}, Accept: 8})
	if err != nil {
		t.Fatal(err)
	}
	d := r.Draft
	// Article: "The NVFP4 head is 1,136,258,502 bytes" — tensor data plus three
	// shard headers whose metadata we cannot see (docs/audit.md).
	if got := fmt.Sprintf("%.3f", d.FileGB); got != "1.136" {
		t.Errorf("head on disk %s GB, the article says 1.136", got)
	}
	if d.TensorBytes != 1_136_243_862 || 1_136_258_502-d.TensorBytes != 14_640 {
		t.Errorf("head tensor bytes %d", d.TensorBytes)
	}
	// "Leave out the BF16 Markov W1, add six more reads of the 35.8 MB W2, and
	// add the shared 715 MB vocabulary head ... about 1.94 GB per draft block,
	// or 3.16 ms at 614.4 GB/s."
	if got := fmt.Sprintf("%.1f", float64(d.W2Bytes)/1e6); got != "35.8" {
		t.Errorf("W2 %s MB", got)
	}
	if got := fmt.Sprintf("%.3f", GB(d.VocabHeadBytes)); got != "0.715" || !d.VocabHeadShared {
		t.Errorf("vocabulary head %s GB shared=%v", got, d.VocabHeadShared)
	}
	if got := fmt.Sprintf("%.2f", d.BlockGB); got != "1.94" {
		t.Errorf("draft block %s GB, the article says about 1.94", got)
	}
	if got := fmt.Sprintf("%.2f", d.BlockMS); got != "3.16" {
		t.Errorf("draft block floor %s ms, the article says 3.16", got)
	}
	// D(0) = (H − W1) + 6·W2 + 7·w1 + V + 7·e, by hand.
	if want := int64(1_136_243_862-127_139_840) + 6*35_758_080 + 7*512 + 715_161_608 + 7*10_240; d.BlockBytes != want {
		t.Errorf("draft block %d bytes, want %d", d.BlockBytes, want)
	}
	if d.BlockSize != 7 || d.MarkovRank != 256 || d.KVBytesPerToken != 5*8*128*2*2 {
		t.Errorf("head config %+v", d)
	}
	// A round of 8 verify rows plus the block; 8 accepted tokens per round.
	rr := r.Ceilings.ShortContext.Round
	if rr == nil || rr.VerifyRows != 8 || rr.RoundBytes != rr.VerifyPassBytes+rr.DraftBlockBytes {
		t.Fatalf("round %+v", rr)
	}
	if want := 8 * 614.4e9 / float64(rr.RoundBytes); math.Abs(rr.TokPerS-want) > 1e-9 {
		t.Errorf("round tok/s %v, want %v", rr.TokPerS, want)
	}
	if want := float64(rr.RoundBytes) / float64(r.Ceilings.ShortContext.PassBytes); math.Abs(rr.BreakEvenAccept-want) > 1e-12 || want < 1 {
		t.Errorf("break-even %v, want %v", rr.BreakEvenAccept, want)
	}
	for _, l := range []float64{0.5, 9, math.NaN()} {
		if _, err := Audit(context.Background(), LocalSource{Dir: target}, AuditOptions{Draft: LocalSource{Dir: head}, Accept: l}); err == nil {
			t.Errorf("--accept %v accepted", l)
		}
	}
	if _, err := Audit(context.Background(), LocalSource{Dir: target}, AuditOptions{Accept: 3}); err == nil {
		t.Error("--accept without a draft accepted")
	}
	if _, err := Audit(context.Background(), LocalSource{Dir: target}, AuditOptions{Draft: LocalSource{Dir: target}}); err == nil ||
		!strings.Contains(err.Error(), "not a DSpark") {
		t.Errorf("a target passed as draft: %v", err)
	}
}

func TestAuditBF16HeadAlone(t *testing.T) {
	r, err := Audit(context.Background(), LocalSource{Dir: synthNamed(t, specHeadBF16)}, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Article: "With BF16 weights, the five draft MLPs alone stream 2.674 GB per block".
	if got := fmt.Sprintf("%.3f", group(t, r.Draft.Groups, GroupDraftMLP).GB); got != "2.674" {
		t.Errorf("BF16 draft MLPs %s GB, the article says 2.674", got)
	}
	// lithos-metal.md §5.3: model.safetensors is 3,714,723,322 bytes.
	if r.Draft.FileBytes != 3_714_723_322 {
		t.Errorf("BF16 head file %d bytes, the real one is 3,714,723,322", r.Draft.FileBytes)
	}
	if r.Ceilings != nil || r.Draft.VocabHeadShared {
		t.Error("a head alone has no ceilings and no vocabulary head")
	}
}

func TestAuditJSONAndText(t *testing.T) {
	target := synthNamed(t, spec27B)
	head := synthNamed(t, specHeadNVFP4)
	r, err := Audit(context.Background(), LocalSource{Dir: target}, AuditOptions{Draft: LocalSource{Dir: head}, Accept: 3.39, Context: 32768})
	if err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	// Every figure carries its unit in its key.
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, v := range x {
				walk(path+"."+k, v)
			}
		case []any:
			for i, v := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), v)
			}
		case float64:
			units := []string{"bytes", "_gb", "_mb", "_ms", "tok_per_s", "gb_per_s", "tokens", "tensors", "layers", "size",
				"rank", "rows", "ids", "_accept_tokens", "embeddings"}
			for _, u := range units {
				if strings.Contains(path[strings.LastIndex(path, ".")+1:], u) {
					return
				}
			}
			if strings.HasSuffix(path, ".gb") || strings.Contains(path, "target_layer_ids") {
				return
			}
			t.Errorf("JSON number %s has no unit in its key", path)
		}
	}
	walk("", m)
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.PerPassWeightsBytes != r.PerPassWeightsBytes || back.Ceilings.AtContext.TokPerS != r.Ceilings.AtContext.TokPerS {
		t.Error("JSON does not round-trip")
	}

	var txt bytes.Buffer
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	out := txt.String()
	for _, want := range []string{
		"MLP gate/up/down, 64 layers", "NVFP4 codes", "8.556", "1.070", "5.536", "1.678", "0.053", "0.715",
		"Read on every decode pass", "17.608", "2.543", "1.770", "151 MB", "65,536 bytes per token",
		"34.3 tok/s", "30.6 tok/s", "1.136 GB on disk", "1.939",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	// The table is aligned: every row of the byte table puts its GB column
	// (followed by the bytes column) at the same offset.
	lines := strings.Split(out, "\n")
	var ends []int
	for _, l := range lines {
		for _, gb := range []string{" 8.556 ", " 17.608 ", " 1.770 "} {
			if i := strings.Index(l, gb); i >= 0 {
				ends = append(ends, i+len(gb))
			}
		}
	}
	if len(ends) != 3 || ends[0] != ends[1] || ends[1] != ends[2] {
		t.Errorf("GB column not aligned (%v):\n%s", ends, out)
	}
}

func TestAuditReportsUnknownTensors(t *testing.T) {
	spec := tinySpec()
	specs, _, _, err := spec.StoredTensors()
	if err != nil {
		t.Fatal(err)
	}
	specs = append(specs, safetensors.TensorSpec{Name: "model.language_model.adapter.weight", DType: safetensors.BF16, Shape: []int64{4, 4}})
	dir := t.TempDir()
	writeCheckpoint(t, dir, spec.Config, map[string][]safetensors.TensorSpec{"model.safetensors": specs}, false)
	r, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Unknown) != 1 || r.Unknown[0].Name != "model.language_model.adapter.weight" || r.Unknown[0].Bytes != 32 {
		t.Fatalf("unknown tensors %+v", r.Unknown)
	}
	if g := group(t, r.Groups, GroupUnknown); g.Bytes != 32 || g.ID.PerPass() {
		t.Errorf("unknown group %+v", g)
	}
	if !strings.Contains(strings.Join(r.Warnings, "\n"), "1 tensor(s) fit no group") {
		t.Errorf("warnings %v", r.Warnings)
	}
	var txt bytes.Buffer
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "model.language_model.adapter.weight") {
		t.Errorf("text report does not name the unknown tensor:\n%s", txt.String())
	}
}

func TestAuditWarnsOnDeclaredMismatchAndMissing(t *testing.T) {
	spec := tinySpec()
	spec.Omit = []string{"model.language_model.layers.1.linear_attn.A_log"}
	dir := synth(t, spec, t.TempDir())
	// Declare mtp.fc NVFP4 while it is stored BF16 (the real Qwen3.5 NVFP4
	// exports' bug the other way round: vLLM PR #38832).
	path := filepath.Join(dir, "hf_quant_config.json")
	var hq map[string]any
	raw, _ := os.ReadFile(path)
	if err := json.Unmarshal(raw, &hq); err != nil {
		t.Fatal(err)
	}
	hq["quantization"].(map[string]any)["quantized_layers"].(map[string]any)["mtp.fc"] = map[string]any{"quant_algo": "NVFP4", "group_size": 16}
	raw, _ = json.Marshal(hq)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Audit(context.Background(), LocalSource{Dir: dir}, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(r.Warnings, "\n")
	for _, want := range []string{
		"hf_quant_config.json declares 1 module(s) NVFP4 that are stored unquantized: mtp.fc",
		"1 tensor(s) the config implies are absent: model.language_model.layers.1.linear_attn.A_log",
		"hf_quant_config.json (",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
}
