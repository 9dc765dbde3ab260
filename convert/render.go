package convert

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON (every figure, units in the
// key names).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report as aligned tables: the byte budget by tensor
// group (as the audit article's table), state, ceilings, the context sweep
// and, with a draft, the draft block and round floors.
func (r *Report) WriteText(w io.Writer) error {
	p := &printer{w: w}
	p.f("%s (%s, %s)\n", r.Source.Location, r.Model.Architecture, r.Model.Quantization)
	p.f("read %d safetensors header(s)", len(r.Source.Files))
	if r.Source.Kind == "remote" {
		p.f(" remotely, %s fetched", humanBytes(r.Source.BytesFetched))
	}
	p.f("\n\n")
	if r.Draft != nil && r.State == nil {
		p.draft(r.Draft, r.Draft.Groups)
		p.warnings(r)
		return p.err
	}
	tw := p.table()
	fmt.Fprintf(tw, "Tensor group\tFormat\t%8s\t%15s\t\n", "GB", "bytes")
	var pass, rest []GroupReport
	for _, g := range r.Groups {
		if g.ID.PerPass() {
			pass = append(pass, g)
		} else {
			rest = append(rest, g)
		}
	}
	for _, g := range pass {
		fmt.Fprintf(tw, "%s\t%s\t%8.3f\t%15s\t\n", g.Label, g.Format, g.GB, commas(g.Bytes))
	}
	fmt.Fprintf(tw, "Read on every decode pass\t\t%8.3f\t%15s\t\n", r.PerPassWeightsGB, commas(r.PerPassWeightsBytes))
	for _, g := range rest {
		fmt.Fprintf(tw, "%s\t%s\t%8.3f\t%15s\t\n", g.Label, g.Format, g.GB, commas(g.Bytes))
	}
	fmt.Fprintf(tw, "All tensors (%d files of %.2f GB)\t\t%8.3f\t%15s\t\n", len(r.Source.Files), r.FileGB, r.TensorGB, commas(r.TensorBytes))
	p.flush(tw)

	if s := r.State; s != nil {
		p.f("\nState per pass\n")
		tw := p.table()
		fmt.Fprintf(tw, "Gated DeltaNet state, FP32, %d layers\t%s\tread and written: %.3f GB\t\n", s.GDNLayers, stateBytes(s.GDNStateBytes), s.GDNStateReadWrittenGB)
		fmt.Fprintf(tw, "Conv state, BF16, %d layers\t%s\tread and written: %.3f GB\t\n", s.GDNLayers, stateBytes(s.ConvStateBytes), GB(2*s.ConvStateBytes))
		fmt.Fprintf(tw, "KV cache, BF16, %d layers\t%s bytes per token\t%.2f GB at 32K\t\n", s.KVLayers, commas(s.KVBytesPerToken), GB(32768*s.KVBytesPerToken))
		p.flush(tw)
	}
	if c := r.Ceilings; c != nil {
		p.f("\nCeilings on %s, %g GB/s (%s)\n", c.ChipName, c.BandwidthGBps, c.BandwidthSource)
		p.f("  short context: %.3f GB per pass -> %.1f tok/s\n", c.ShortContext.PassGB, c.ShortContext.TokPerS)
		if a := c.AtContext; a != nil {
			p.f("  at %s tokens: %.3f GB per pass -> %.1f tok/s\n", commas(a.ContextTokens), a.PassGB, a.TokPerS)
		}
		if r.Draft != nil {
			p.f("\n")
			p.draft(r.Draft, nil)
		}
		p.f("\nContext sweep\n")
		tw := p.table()
		round := len(c.Sweep) > 0 && c.Sweep[0].Round != nil
		fmt.Fprintf(tw, "context\tGB/pass\tms/pass\ttok/s")
		if round {
			fmt.Fprintf(tw, "\tGB/round\tms/round\tbreak-even L")
			if c.Sweep[0].Round.AcceptTokens > 0 {
				fmt.Fprintf(tw, "\ttok/s at L=%g", c.Sweep[0].Round.AcceptTokens)
			}
		}
		fmt.Fprintf(tw, "\t\n")
		rows := append([]PassReport{c.ShortContext}, c.Sweep...)
		for _, s := range rows {
			fmt.Fprintf(tw, "%s\t%.3f\t%.2f\t%.1f", commas(s.ContextTokens), s.PassGB, s.PassMS, s.TokPerS)
			if s.Round != nil {
				fmt.Fprintf(tw, "\t%.3f\t%.2f\t%.2f", s.Round.RoundGB, s.Round.RoundMS, s.Round.BreakEvenAccept)
				if s.Round.AcceptTokens > 0 {
					fmt.Fprintf(tw, "\t%.1f", s.Round.TokPerS)
				}
			}
			fmt.Fprintf(tw, "\t\n")
		}
		p.flush(tw)
	}
	p.warnings(r)
	return p.err
}

func (p *printer) draft(d *DraftReport, groups []GroupReport) {
	p.f("DSpark head %s: %s on disk (%s bytes), block of %d, Markov rank %d\n",
		d.Location, fmt.Sprintf("%.3f GB", d.FileGB), commas(d.FileBytes), d.BlockSize, d.MarkovRank)
	if groups != nil {
		tw := p.table()
		fmt.Fprintf(tw, "Tensor group\tFormat\tRead\t%8s\t\n", "GB")
		for _, g := range groups {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%8.3f\t\n", g.Label, g.Format, g.Read, g.GB)
		}
		p.flush(tw)
	}
	vocab := fmt.Sprintf("vocabulary head %.3f GB", GB(d.VocabHeadBytes))
	switch {
	case d.VocabHeadShared:
		vocab = fmt.Sprintf("the target's vocabulary head %.3f GB", GB(d.VocabHeadBytes))
	case d.VocabHeadBytes == 0:
		vocab = "the target's vocabulary head (not included)"
	}
	p.f("  per draft block: %.3f GB = head - W1 + %d more W2 reads (%.1f MB each) + %d W1 rows + %s",
		d.BlockGB, d.BlockSize-1, float64(d.W2Bytes)/1e6, d.BlockSize, vocab)
	if d.BlockMS > 0 {
		p.f(" -> %.2f ms floor", d.BlockMS)
	}
	p.f("\n")
}

func (p *printer) warnings(r *Report) {
	if len(r.Unknown) > 0 {
		p.f("\nUnclassified tensors (not budgeted):\n")
		for i, t := range r.Unknown {
			if i == 20 {
				p.f("  … %d more\n", len(r.Unknown)-20)
				break
			}
			p.f("  %s %s %v %s bytes\n", t.Name, t.DType, t.Shape, commas(t.Bytes))
		}
	}
	if len(r.Warnings) > 0 {
		p.f("\nWarnings:\n")
		for _, w := range r.Warnings {
			p.f("  %s\n", w)
		}
	}
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *printer) table() *tabwriter.Writer {
	return tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
}

func (p *printer) flush(tw *tabwriter.Writer) {
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

// commas formats n with thousands separators (65,536).
func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d bytes", n)
}

// stateBytes prints a state size as the article does (151 MB) from 1 MB up,
// and with humanBytes below that (tiny test models).
func stateBytes(n int64) string {
	if n >= 1e7 {
		return fmt.Sprintf("%.0f MB", float64(n)/1e6)
	}
	return humanBytes(n)
}
