package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"lithos/convert"
	"lithos/manifests"
)

// synthFlags are the options of "synth".
type synthFlags struct {
	out        string
	random     bool
	layers     int
	seed       uint64
	shardBytes int64
	textOnly   bool
	workers    int
}

func newSynthCmd() *cobra.Command {
	var fl synthFlags
	cmd := &cobra.Command{
		Use:   "synth --random CONFIG -o DIR",
		Short: "Write a full checkpoint of a model spec with random weights in the real formats",
		Long: `synth --random writes config.json, the quantization configs, the index and the sharded
safetensors files of CONFIG with every tensor at its real dtype and shape and filled with seeded
random values that are plausible for its format: NVFP4 codes with E4M3 block scales (0.25 … 15)
and a positive F32 tensor scale in ModelOpt's multiplier convention (amax/(6*448), so the packer's
448 check accepts it), FP8 E4M3 weights without NaN codes and positive F32 scales, and small
finite BF16/F16/F32 values (|x| in [2^-12, 2^-4)). The result packs like the real checkpoint, so
the 27B target and its DSpark head can be made on the machine that runs them.

CONFIG is a spec file or an embedded spec name: ` + strings.Join(manifests.ModelSpecNames(), ", ") + `.
--layers keeps the first N decoder layers (the real widths), --text-only also drops the vision
tower and the MTP block, --shard-bytes replaces the spec's shard size. Tensors are generated and
written 4 MiB at a time per worker (memory does not grow with the model); the files are built in
a hidden .DIR.tmp-* beside DIR and renamed into place when complete and synced. DIR must not
exist. The same CONFIG, flags and --seed give the same bytes.

Without --random, synth writes the header-only checkpoint synth-headers writes (sparse files,
data regions left as holes), cut as the flags say.`,
		Example: `  lithos-pack synth --random qwen3.8-27b-nvfp4 -o /data/q27
  lithos-pack synth --random dspark-qwen3.8-27b-bf16 -o /data/head && lithos-pack pack /data/q27 --draft /data/head -o q.lithos
  lithos-pack synth --random qwen3.8-27b-nvfp4 --layers 2 --text-only --seed 7 -o /tmp/q27-2l`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSynth(cmd, args[0], fl)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&fl.out, "output", "o", "", "output directory (must not exist)")
	f.BoolVar(&fl.random, "random", false, "fill the tensors with seeded random values (default: header-only, sparse)")
	f.IntVar(&fl.layers, "layers", 0, "keep the first N decoder layers (0: all)")
	f.Uint64Var(&fl.seed, "seed", 1, "random seed")
	f.Int64Var(&fl.shardBytes, "shard-bytes", 0, "bytes of tensor data per shard (0: the spec's)")
	f.BoolVar(&fl.textOnly, "text-only", false, "leave out the vision tower and the MTP block")
	f.IntVar(&fl.workers, "workers", 0, "tensors filled at once (default: all cores)")
	return cmd
}

func runSynth(cmd *cobra.Command, arg string, fl synthFlags) error {
	if fl.out == "" {
		return errors.New("synth: -o DIR is required (a new directory)")
	}
	if _, err := os.Lstat(fl.out); err == nil {
		return fmt.Errorf("synth: %s already exists; synth writes a new directory", fl.out)
	}
	spec, err := convert.LoadSynthSpec(arg)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if spec, err = convert.CutSynthSpec(spec, fl.layers, !fl.textOnly, !fl.textOnly, fl.shardBytes); err != nil {
		return fmt.Errorf("synth %s: %w", arg, err)
	}
	ctx := cmd.Context()
	if !fl.random {
		res, err := convert.SynthHeaders(ctx, spec, fl.out)
		if err != nil {
			return fmt.Errorf("synth %s: %w", arg, err)
		}
		return res.WriteText(cmd.OutOrStdout())
	}
	bar, done := byteBar("synth")
	res, err := convert.SynthRandom(ctx, spec, fl.out, convert.SynthRandomOptions{Seed: fl.seed, Workers: fl.workers, Progress: bar})
	done()
	if err != nil {
		return fmt.Errorf("synth %s: %w", arg, err)
	}
	return writeSynthSummary(cmd.OutOrStdout(), fl.out, fl.seed, res)
}

// writeSynthSummary lists the files of a random checkpoint and its totals.
func writeSynthSummary(w io.Writer, dir string, seed uint64, res *convert.SynthResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "file\tbytes\ttensors\t\n")
	for _, f := range res.Files {
		n := ""
		if f.HeaderBytes > 0 {
			n = fmt.Sprint(f.Tensors)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t\n", f.Name, f.Bytes, n)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s: %d tensors, %d bytes (%.3f GB) of random tensor data (seed %d), %d bytes in all\n",
		dir, res.Tensors, res.TensorBytes, convert.GB(res.TensorBytes), seed, res.Bytes)
	return err
}
