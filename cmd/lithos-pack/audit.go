package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"lithos/convert"
	"lithos/hub"
	"lithos/manifests"
)

func newAuditCmd() *cobra.Command {
	var (
		req    convert.AuditRequest
		asJSON bool
	)
	var chipIDs []string
	for _, c := range manifests.Chips() {
		chipIDs = append(chipIDs, c.ID)
	}
	cmd := &cobra.Command{
		Use:   "audit CHECKPOINT",
		Short: "Bytes read per decode pass by tensor group, and the tok/s ceilings they imply",
		Long: `audit reads a checkpoint's config, quantization config, index and safetensors headers (never the
weights) and reports, per tensor group, the bytes one decode pass reads; the GDN recurrent state,
conv state and KV cache per token; tok/s ceilings on a chip at short context, at --context, over a
context sweep; and with a DSpark head (the registry's by default) the bytes of one draft block and,
with --accept, the speculative round floor.

CHECKPOINT is a local directory, an HF cache snapshot, or a Hub repo id. A repo whose snapshot is
not in the cache (or with --remote) is read through HTTP range requests: a couple of small requests
per shard; the report says how many bytes were fetched.

` + convert.CeilingFormula + `

Chips: ` + strings.Join(chipIDs, ", "),
		Example: `  lithos-pack audit nvidia/Qwen3.8-27B-NVFP4 --context 32768
  lithos-pack audit ./my-checkpoint --draft none --bandwidth 460 --json
  lithos-pack audit nvidia/Qwen3.8-27B-NVFP4 --accept 3.4 --chip m5-max-32c`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Target = args[0]
			if req.Draft == "none" {
				req.Draft = ""
			}
			c, err := hub.NewClientFromEnv()
			if err != nil {
				return err
			}
			r, err := convert.RunAudit(cmd.Context(), c, req)
			if err != nil {
				return fmt.Errorf("audit %s: %w", args[0], err)
			}
			if asJSON {
				return r.WriteJSON(cmd.OutOrStdout())
			}
			return r.WriteText(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Revision, "revision", "main", "revision of a repo id")
	f.StringVar(&req.Draft, "draft", convert.DraftAuto, `DSpark head: "auto" (the registry's for this target), "none", a directory or a repo id`)
	f.StringVar(&req.DraftRevision, "draft-revision", "main", "revision of the draft head")
	f.BoolVar(&req.Remote, "remote", false, "read repo ids through range requests even when cached")
	f.StringVar(&req.Chip, "chip", "", "chip profile for the ceilings (default "+manifests.DefaultChipID+")")
	f.Float64Var(&req.BandwidthGBps, "bandwidth", 0, "memory bandwidth in GB/s (overrides the chip's)")
	f.Int64Var(&req.Context, "context", 0, "also report the ceiling at this many tokens of context")
	f.Float64Var(&req.Accept, "accept", 0, "mean tokens committed per speculative round (1..8) for the round floor's tok/s")
	f.Int64Var(&req.MaxContext, "max-context", 0, "end of the context sweep (default: the config's max_position_embeddings)")
	f.BoolVar(&req.Tensors, "tensors", false, "list every tensor with its group and bytes")
	f.BoolVar(&asJSON, "json", false, "print one JSON object (units in key names: _bytes, _gb, _tok_per_s)")
	return cmd
}

func newSynthHeadersCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "synth-headers SPEC -o DIR",
		Short: "Write a header-only checkpoint (sparse safetensors files) with a model's full inventory",
		Long: `synth-headers writes config.json, the quantization configs, the index and sharded safetensors files
whose headers list every tensor of the model at its real dtype and shape, with the data regions left
as holes (the files have their real apparent size and take almost no disk). audit reads the result
like the real checkpoint. SPEC is a spec file or an embedded spec name: ` + strings.Join(manifests.ModelSpecNames(), ", "),
		Example: "  lithos-pack synth-headers qwen3.8-27b-nvfp4 -o /tmp/q27 && lithos-pack audit /tmp/q27 --draft none",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("synth-headers: -o DIR is required")
			}
			res, err := convert.SynthHeadersFromArg(cmd.Context(), args[0], out)
			if err != nil {
				return err
			}
			return res.WriteText(cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "output directory (new or empty)")
	return cmd
}
