package convert

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"lithos/hub"
	"lithos/manifests"
)

// DraftAuto asks RunAudit for the registry's default draft head of the
// target (manifests.DraftFor).
const DraftAuto = "auto"

// AuditRequest is what `lithos-pack audit` collects from its arguments and
// flags.
type AuditRequest struct {
	// Target is a checkpoint directory (or a file in one), or a Hub repo id.
	Target   string
	Revision string
	// Draft is "" (no draft), DraftAuto (the registry's default head for
	// the target, none when it has none), or a directory or repo id.
	Draft         string
	DraftRevision string
	// Remote reads repo ids through range requests even when their snapshot
	// is in the HF cache.
	Remote bool
	// Chip is a chip profile id (manifests.Chips; "" means the default).
	Chip string
	// BandwidthGBps, Context, Accept, MaxContext and Tensors are
	// AuditOptions'.
	BandwidthGBps float64
	Context       int64
	Accept        float64
	MaxContext    int64
	Tensors       bool
}

// RunAudit resolves the request's sources (local directory, HF cache
// snapshot, or remote repo through c) and audits them. c may be nil when
// every argument is a local directory.
func RunAudit(ctx context.Context, c *hub.Client, req AuditRequest) (*Report, error) {
	var opts AuditOptions
	if req.Chip != "" {
		chip, err := manifests.LookupChip(req.Chip)
		if err != nil {
			return nil, err
		}
		opts.Chip = chip
	}
	opts.BandwidthGBps, opts.Context, opts.Accept, opts.MaxContext, opts.Tensors =
		req.BandwidthGBps, req.Context, req.Accept, req.MaxContext, req.Tensors
	target, err := OpenSource(c, req.Target, req.Revision, req.Remote)
	if err != nil {
		return nil, err
	}
	var note string
	draft := req.Draft
	if draft == DraftAuto {
		draft = ""
		id := req.Target
		if l, ok := target.(LocalSource); ok {
			if abs, err := filepath.Abs(l.Dir); err == nil {
				id = abs
			}
		}
		if p, ok := manifests.DraftFor(id); ok {
			draft = p.Draft
		} else {
			note = fmt.Sprintf("no draft head is registered for %s; pass --draft to audit one", req.Target)
		}
	}
	if draft != "" {
		if opts.Draft, err = OpenSource(c, draft, req.DraftRevision, req.Remote); err != nil {
			return nil, fmt.Errorf("draft: %w", err)
		}
	}
	r, err := Audit(ctx, target, opts)
	if err != nil {
		return nil, err
	}
	if note != "" && r.Ceilings != nil {
		r.Warnings = append(r.Warnings, note)
	}
	return r, nil
}

// SynthHeadersFromArg loads a spec (a file, or an embedded spec name such as
// "qwen3.8-27b-nvfp4") and writes it into outDir; it is what
// `lithos-pack synth-headers CONFIG -o DIR` runs.
func SynthHeadersFromArg(ctx context.Context, arg, outDir string) (*SynthResult, error) {
	spec, err := LoadSynthSpec(arg)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(outDir); err == nil {
		ents, err := os.ReadDir(outDir)
		if err != nil {
			return nil, err
		}
		if len(ents) > 0 {
			return nil, fmt.Errorf("%s: not empty; synth-headers writes into a new or empty directory", outDir)
		}
	}
	return SynthHeaders(ctx, spec, outDir)
}

// WriteText lists the files written, their apparent sizes and totals.
func (r *SynthResult) WriteText(w io.Writer) error {
	p := &printer{w: w}
	tw := p.table()
	fmt.Fprintf(tw, "file\tbytes\theader bytes\ttensors\t\n")
	for _, f := range r.Files {
		hdr, n := "", ""
		if f.HeaderBytes > 0 {
			hdr, n = commas(f.HeaderBytes), fmt.Sprint(f.Tensors)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", f.Name, commas(f.Bytes), hdr, n)
	}
	p.flush(tw)
	p.f("%d tensors, %s bytes of tensor data (%.3f GB) left as holes; %s bytes apparent in all\n",
		r.Tensors, commas(r.TensorBytes), GB(r.TensorBytes), commas(r.Bytes))
	return p.err
}
