package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"lithos/hub"
	"lithos/manifests"
	"lithos/pack"
)

func newPackCmd() *cobra.Command {
	var (
		opt    pack.Options
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "pack TARGET [--draft DRAFT] -o NAME.lithos",
		Short: "Pack a checkpoint (and a DSpark draft head) into a lithos bundle",
		Long: `pack writes a bundle: the directory lithos-run maps into memory. It holds manifest.json, one
weights file in which every tensor starts on a 16 KiB boundary (matrices re-laid block-lane-major,
docs/blm.md; norms, embeddings and other small tensors copied as they are), and the tokenizer,
chat template and generation config of the target. docs/bundle.md describes every field.

TARGET and DRAFT are local directories (a checkout or an HF cache snapshot) or Hub repo ids,
fetched into the HF cache first (HF_ENDPOINT, HF_TOKEN, HF_HOME as for "fetch"). --draft auto
takes the model registry's DSpark head for the target. A BF16 draft is re-quantized to NVFP4 on
the way (as "lithos-pack quantize" does) unless --draft-format bf16.

Nothing is written when the checkpoint disagrees with its config, holds a format the packer cannot
place, or the draft does not fit the target (hidden size, vocabulary, taps). The bundle is built
as a hidden .NAME.lithos.tmp-XXXX beside NAME.lithos and renamed into place when complete and
synced; NAME.lithos must not exist.`,
		Example: `  lithos-pack pack nvidia/Qwen3.8-27B-NVFP4 --draft auto -o qwen3.8-27b.lithos
  lithos-pack pack ./tiny-model -o tiny.lithos
  lithos-pack pack nvidia/Qwen3.8-27B-NVFP4 --draft RadixArk/Qwen3.8-27B-DSpark --draft-format bf16 -o q.lithos`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opt.Out == "" {
				return errors.New("-o NAME.lithos is required (a new bundle directory)")
			}
			c, err := hub.NewClientFromEnv()
			if err != nil {
				return err
			}
			opt.Target, opt.Hub, opt.ToolVersion = args[0], c, version
			fetchBar, fetchDone := byteBar("fetch")
			opt.DownloadProgress = fetchBar
			bar, done := byteBar("pack")
			opt.Progress = bar
			m, err := pack.Build(cmd.Context(), opt)
			fetchDone()
			done()
			if err != nil {
				return fmt.Errorf("pack %s: %w", args[0], err)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"bundle": opt.Out, "manifest": m})
			}
			return writePackSummary(cmd.OutOrStdout(), opt.Out, m)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opt.Out, "output", "o", "", "new bundle directory (NAME.lithos)")
	f.StringVar(&opt.Draft, "draft", "", "DSpark draft head: a directory, a repo id, or auto (the registry's head for TARGET)")
	f.StringVar(&opt.DraftFormat, "draft-format", pack.DraftNVFP4, "draft linears: nvfp4 (re-quantize a BF16 draft) or bf16 (keep as stored)")
	f.StringVar(&opt.TargetRevision, "revision", "", "branch, tag or commit when TARGET is a repo id")
	f.StringVar(&opt.DraftRevision, "draft-revision", "", "branch, tag or commit when DRAFT is a repo id")
	f.IntVar(&opt.Workers, "workers", 0, "tensors packed at once (default: all cores)")
	f.BoolVar(&asJSON, "json", false, "print the manifest as JSON")
	return cmd
}

func writePackSummary(w io.Writer, out string, m *manifests.Bundle) error {
	var blmN, plainN int
	for _, t := range m.Tensors {
		if t.Encoding == manifests.EncodingBLM {
			blmN++
		} else {
			plainN++
		}
	}
	p := m.Padding
	fmt.Fprintf(w, "%s\n  tensors     %d (%d BLM matrices, %d plain arrays), %d left out (%s)\n", out, len(m.Tensors), blmN, plainN, len(m.Skipped), humanBytes(p.SkippedBytes))
	fmt.Fprintf(w, "  weights     %s from %s of checkpoint tensors: layout padding %s, row scales %s, alignment %s\n",
		humanBytes(m.Weights.Bytes), humanBytes(p.StoredBytes), humanBytes(p.LayoutBytes), humanBytes(p.RowScaleBytes), humanBytes(p.AlignmentBytes))
	if m.Draft != nil && len(m.Draft.Requantized) > 0 {
		fmt.Fprintln(w, "  draft       re-quantized to NVFP4 (the conversion record is in the manifest)")
	}
	fmt.Fprintf(w, "  files       %d copied\n", len(m.Files))
	return nil
}

func newVerifyCmd() *cobra.Command {
	var (
		opt    pack.VerifyOptions
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "verify BUNDLE",
		Short: "Check a bundle's sizes, alignment and sha256 of every tensor (--deep: against the source)",
		Long: `verify opens a bundle as the runtime does (manifest version, every tensor's range against the
weights file's size, every BLM geometry re-derived), then re-hashes every tensor and copied file
and checks that all padding is zero and that every row-scale table matches its tensor scales.

--deep also unpacks every matrix and compares it, and every plain tensor, byte for byte with the
source checkpoint: by default the HF cache snapshot of the recorded repo@commit, else the directory
recorded at pack time (--source / --draft-source name others). A draft re-quantized at pack time is
re-quantized again from its source and compared with that. Every problem names the tensor or file;
the exit status is non-zero when there is one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bar, done := byteBar("verify")
			opt.Progress = bar
			rep, err := pack.Verify(cmd.Context(), args[0], opt)
			done()
			if rep == nil {
				return fmt.Errorf("verify %s: %w", args[0], err)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if e := enc.Encode(rep); e != nil {
					return e
				}
			} else {
				writeVerifyText(cmd.OutOrStdout(), rep)
			}
			if err != nil {
				return fmt.Errorf("verify: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opt.Deep, "deep", false, "unpack every tensor and compare it with the source checkpoint")
	f.StringVar(&opt.TargetDir, "source", "", "the target's source checkout for --deep")
	f.StringVar(&opt.DraftDir, "draft-source", "", "the draft's source checkout for --deep")
	f.IntVar(&opt.Workers, "workers", 0, "tensors checked at once (default: all cores)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func writeVerifyText(w io.Writer, r *pack.VerifyReport) {
	status := "OK"
	if len(r.Problems) > 0 {
		status = fmt.Sprintf("%d PROBLEM(S)", len(r.Problems))
	}
	fmt.Fprintf(w, "%s: %s — %d tensors, %s of weights, %d copied files checked\n", r.Bundle, status, r.Tensors, humanBytes(r.WeightsBytes), r.Files)
	if r.Deep != nil {
		fmt.Fprintf(w, "  deep: %d tensors compared with their source, %d not compared\n", r.Deep.Compared, r.Deep.NotCompared)
		for _, s := range r.Deep.Sources {
			fmt.Fprintf(w, "    %-6s %s %s\n", s.Model, s.Dir, s.Note)
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  %s\n", p)
	}
}

func newInspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect BUNDLE",
		Short: "What a bundle holds: models, bytes per group, padding, left-out tensors, files",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := pack.OpenBundle(args[0])
			if err != nil {
				return fmt.Errorf("inspect: %w", err)
			}
			r := pack.Inspect(b)
			if asJSON {
				return r.WriteJSON(cmd.OutOrStdout())
			}
			return r.WriteText(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
