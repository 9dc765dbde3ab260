package pack

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"lithos/manifests"
)

// InspectReport is what `lithos-pack inspect` prints. Sizes are bytes; ratios are fractions
// of the stored bytes.
type InspectReport struct {
	Bundle       string                 `json:"bundle"`
	Version      int                    `json:"version"`
	ToolVersion  string                 `json:"tool_version"`
	WeightsBytes int64                  `json:"weights_bytes"`
	Models       []ModelSummary         `json:"models"`
	Groups       []GroupSummary         `json:"groups"`
	Total        GroupSummary           `json:"total"`
	Skipped      []SkipSummary          `json:"skipped"`
	Files        []manifests.BundleFile `json:"files"`
}

// ModelSummary describes one model of a bundle.
type ModelSummary struct {
	Model        string `json:"model"`
	Architecture string `json:"architecture"`
	Repo         string `json:"repo,omitempty"`
	Commit       string `json:"commit,omitempty"`
	Requantized  bool   `json:"requantized"`
	Tensors      int    `json:"tensors"`
}

// GroupSummary sums one byte-budget group of one model: the checkpoint bytes its tensors came
// from, the bytes they take in the weights file, and where the difference goes.
type GroupSummary struct {
	Model   string `json:"model"`
	Group   string `json:"group"`
	Formats string `json:"formats"` // distinct formats, comma-separated
	Tensors int    `json:"tensors"`
	// StoredBytes: checkpoint bytes; PackedBytes: Σ Length (layout + row scales);
	// LayoutPaddingBytes: BLM padding; RowScaleBytes; AlignmentBytes: the zeros after each
	// tensor up to the next 16 KiB boundary; FileBytes = PackedBytes + AlignmentBytes.
	StoredBytes        int64   `json:"stored_bytes"`
	PackedBytes        int64   `json:"packed_bytes"`
	LayoutPaddingBytes int64   `json:"layout_padding_bytes"`
	RowScaleBytes      int64   `json:"row_scale_bytes"`
	AlignmentBytes     int64   `json:"alignment_bytes"`
	FileBytes          int64   `json:"file_bytes"`
	Overhead           float64 `json:"overhead"` // FileBytes/StoredBytes − 1
}

// SkipSummary counts the tensors left out for one reason.
type SkipSummary struct {
	Model   string `json:"model"`
	Reason  string `json:"reason"`
	Tensors int    `json:"tensors"`
	Bytes   int64  `json:"bytes"`
}

// Inspect summarizes an opened bundle: its models, bytes per group (stored, packed, padding),
// the skipped tensors by reason and the copied files.
func Inspect(b *Bundle) *InspectReport {
	m := b.Manifest
	r := &InspectReport{Bundle: b.Dir, Version: m.Version, ToolVersion: m.ToolVersion, WeightsBytes: m.Weights.Bytes,
		Groups: []GroupSummary{}, Skipped: []SkipSummary{}, Files: m.Files}
	models := []string{manifests.ModelTarget}
	if m.Draft != nil {
		models = append(models, manifests.ModelDraft)
	}
	for _, model := range models {
		rec := m.Model(model)
		s := ModelSummary{Model: model, Architecture: rec.Architecture, Requantized: len(rec.Requantized) > 0}
		if rec.Source.Repo != nil {
			s.Repo = *rec.Source.Repo
		}
		if rec.Source.Commit != nil {
			s.Commit = *rec.Source.Commit
		}
		for _, t := range m.Tensors {
			if t.Model == model {
				s.Tensors++
			}
		}
		r.Models = append(r.Models, s)
	}
	idx := map[[2]string]int{}
	fmts := map[[2]string][]string{}
	r.Total = GroupSummary{Model: "all", Group: "total"}
	for i, t := range m.Tensors {
		end := m.Weights.Bytes
		if i+1 < len(m.Tensors) {
			end = m.Tensors[i+1].Offset
		}
		k := [2]string{t.Model, t.Group}
		j, ok := idx[k]
		if !ok {
			j = len(r.Groups)
			idx[k] = j
			r.Groups = append(r.Groups, GroupSummary{Model: t.Model, Group: t.Group})
		}
		for _, g := range []*GroupSummary{&r.Groups[j], &r.Total} {
			g.Tensors++
			g.StoredBytes += t.StoredBytes
			g.PackedBytes += t.Length
			if t.Layout != nil {
				g.LayoutPaddingBytes += t.Layout.PaddingBytes
				g.RowScaleBytes += t.RowScales.Bytes
			}
			g.AlignmentBytes += end - t.Offset - t.Length
		}
		if !slices.Contains(fmts[k], t.Format) {
			fmts[k] = append(fmts[k], t.Format)
		}
	}
	if len(m.Tensors) > 0 {
		r.Total.AlignmentBytes += m.Tensors[0].Offset
	}
	finish := func(g *GroupSummary) {
		g.FileBytes = g.PackedBytes + g.AlignmentBytes
		if g.StoredBytes > 0 {
			g.Overhead = float64(g.FileBytes)/float64(g.StoredBytes) - 1
		}
	}
	for i := range r.Groups {
		g := &r.Groups[i]
		f := fmts[[2]string{g.Model, g.Group}]
		slices.Sort(f)
		g.Formats = strings.Join(f, ",")
		finish(g)
	}
	finish(&r.Total)
	sk := map[[2]string]int{}
	for _, s := range m.Skipped {
		k := [2]string{s.Model, s.Reason}
		j, ok := sk[k]
		if !ok {
			j = len(r.Skipped)
			sk[k] = j
			r.Skipped = append(r.Skipped, SkipSummary{Model: s.Model, Reason: s.Reason})
		}
		r.Skipped[j].Tensors++
		r.Skipped[j].Bytes += s.Bytes
	}
	return r
}

// WriteJSON writes the report as indented JSON.
func (r *InspectReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report as aligned tables (MB = 1e6 bytes).
func (r *InspectReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "%s  (manifest v%d, lithos-pack %s)\n", r.Bundle, r.Version, r.ToolVersion)
	for _, m := range r.Models {
		src := "local directory"
		if m.Repo != "" {
			src = m.Repo
			if m.Commit != "" {
				src += "@" + m.Commit[:min(12, len(m.Commit))]
			}
		}
		rq := ""
		if m.Requantized {
			rq = ", re-quantized to NVFP4 at pack time"
		}
		fmt.Fprintf(w, "  %-6s  %s  %d tensors  from %s%s\n", m.Model, m.Architecture, m.Tensors, src, rq)
	}
	fmt.Fprintf(w, "  weights.bin  %s\n\n", mb(r.WeightsBytes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tgroup\tformats\ttensors\tstored MB\tpacked MB\tlayout pad MB\trow scales MB\talign pad MB\tfile MB\toverhead\t")
	row := func(g GroupSummary) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%+.2f%%\t\n", g.Model, g.Group, g.Formats, g.Tensors,
			float64(g.StoredBytes)/1e6, float64(g.PackedBytes)/1e6, float64(g.LayoutPaddingBytes)/1e6, float64(g.RowScaleBytes)/1e6,
			float64(g.AlignmentBytes)/1e6, float64(g.FileBytes)/1e6, 100*g.Overhead)
	}
	for _, g := range r.Groups {
		row(g)
	}
	row(r.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintln(w, "\nleft out:")
		for _, s := range r.Skipped {
			fmt.Fprintf(w, "  %-6s %4d tensors %12s  %s\n", s.Model, s.Tensors, mb(s.Bytes), s.Reason)
		}
	}
	if len(r.Files) > 0 {
		fmt.Fprintln(w, "\ncopied files:")
		for _, f := range r.Files {
			fmt.Fprintf(w, "  %-28s %10d bytes  sha256 %s\n", f.Path, f.Bytes, f.SHA256)
		}
	}
	return nil
}

func mb(n int64) string { return fmt.Sprintf("%.3f MB", float64(n)/1e6) }
