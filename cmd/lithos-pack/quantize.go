package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"

	"github.com/spf13/cobra"

	"lithos/convert/quantize"
	"lithos/formats/nvfp4"
	"lithos/hub"
)

func newQuantizeCmd() *cobra.Command {
	var (
		to, outDir, revision, sourceRevision, tensorScale string
		workers                                           int
		asJSON                                            bool
	)
	cmd := &cobra.Command{
		Use:   "quantize DRAFT --to nvfp4 -o DIR",
		Short: "Re-quantize a BF16 DSpark draft head to a ModelOpt-style NVFP4 checkpoint",
		Long: `quantize turns a BF16 DSpark (or DFlash) draft head into the NVFP4 head lithos-run ships
with: every draft linear (layers.* projections, fc, markov_head.markov_w2) becomes ModelOpt
NVFP4 (weight U8 [N, K/2], weight_scale F8_E4M3 [N, K/16], weight_scale_2 F32), quantized with
ModelOpt's NVFP4QTensor rule bit for bit; markov_w1, the norms and the confidence head stay BF16.

DRAFT is a local directory (a checkout or an HF cache snapshot) or a Hub repo id, fetched into
the HF cache first (HF_ENDPOINT, HF_TOKEN, HF_HOME as for "fetch"). DIR must not exist: it is
built as DIR.tmp-XXXX beside it and renamed into place only when complete.

DIR holds model.safetensors, config.json (the source's plus quantization_config),
hf_quant_config.json (quant_algo W4A16_NVFP4) and conversion.json (source revision, sha256 of
inputs and outputs, per-tensor error statistics). docs/quantize.md describes every field.`,
		Example: `  lithos-pack quantize RadixArk/Qwen3.8-27B-DSpark --to nvfp4 -o qwen3.8-27b-dspark-nvfp4
  lithos-pack quantize ./my-head --to nvfp4 -o ./my-head-nvfp4 --source-revision v1.2
  lithos-pack quantize ./my-head --to nvfp4 -o out --tensor-scale reciprocal   # as ModelOpt on a GPU`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if to != "nvfp4" {
				return fmt.Errorf("--to %q: only nvfp4 is supported", to)
			}
			if outDir == "" {
				return errors.New("-o DIR is required (a new directory for the quantized head)")
			}
			opt := quantize.Options{Workers: workers, SourceRevision: sourceRevision, ToolVersion: version}
			switch tensorScale {
			case "exact":
				opt.Division = nvfp4.DivideExact
			case "reciprocal":
				opt.Division = nvfp4.DivideByReciprocal
			default:
				return fmt.Errorf("--tensor-scale %q: want exact or reciprocal", tensorScale)
			}
			src, err := resolveDraft(ctx, args[0], revision)
			if err != nil {
				return err
			}
			progress, done := byteBar("quantize")
			opt.Progress = progress
			conv, err := quantize.Run(ctx, src, outDir, opt)
			done()
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"output": outDir, "conversion": conv})
			}
			return writeQuantizeSummary(cmd.OutOrStdout(), outDir, conv)
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "", "target format (nvfp4)")
	f.StringVarP(&outDir, "output", "o", "", "new output directory")
	f.StringVar(&revision, "revision", "", "branch, tag or commit when DRAFT is a repo id")
	f.StringVar(&sourceRevision, "source-revision", "", "revision recorded in conversion.json (default: the HF cache snapshot's commit, else null)")
	f.StringVar(&tensorScale, "tensor-scale", "exact", "weight_scale_2 = amax/2688 rounding: exact (PyTorch CPU) or reciprocal (ModelOpt on CUDA)")
	f.IntVar(&workers, "workers", 0, "tensors quantized at once (default: all cores)")
	f.BoolVar(&asJSON, "json", false, "print conversion.json's content as JSON")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// resolveDraft returns a local directory for arg: arg itself when it exists,
// else the HF cache snapshot of the repo id arg (downloaded if needed).
func resolveDraft(ctx context.Context, arg, revision string) (string, error) {
	st, err := os.Stat(arg)
	if err == nil {
		if !st.IsDir() {
			return "", fmt.Errorf("DRAFT %s: not a directory (give the checkpoint's folder)", arg)
		}
		if revision != "" {
			return "", fmt.Errorf("--revision applies to repo ids; %s is a local directory (use --source-revision to record one)", arg)
		}
		return arg, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("DRAFT %s: %w", arg, err)
	}
	if hub.ValidateRepoID(arg) != nil {
		return "", fmt.Errorf("DRAFT %s: no such directory, and not a Hub repo id", arg)
	}
	c, err := hub.NewClientFromEnv()
	if err != nil {
		return "", err
	}
	progress, done := byteBar("fetch " + arg)
	dir, err := c.Download(ctx, arg, hub.DownloadOptions{Revision: revision, Include: []string{"*.json", "*.safetensors"}, Progress: progress})
	done()
	if err != nil {
		return "", fmt.Errorf("DRAFT %s: %w", arg, err)
	}
	return dir, nil
}

func writeQuantizeSummary(w io.Writer, outDir string, c *quantize.Conversion) error {
	worst, worstName := math.Inf(1), ""
	maxRel := 0.0
	var flushed int64
	for _, q := range c.Quantized {
		if q.SNRdB != nil && *q.SNRdB < worst {
			worst, worstName = *q.SNRdB, q.Name
		}
		maxRel = max(maxRel, q.RelRMSError)
		flushed += q.FlushedBlocks
	}
	src := "local directory"
	if c.Source.Repo != nil {
		src = *c.Source.Repo
	}
	if c.Source.Revision != nil {
		src += " @ " + *c.Source.Revision
	}
	errLine := fmt.Sprintf("worst SNR %.2f dB (%s), largest relative RMS error %.4f", worst, worstName, maxRel)
	if worstName == "" {
		errLine = "none (every quantized tensor is exactly representable)"
	}
	_, err := fmt.Fprintf(w, `%s
  source      %s
  quantized   %d linears -> NVFP4 (%s, group %d, tensor scale %s); %d tensors kept
  bytes       %s of source tensors -> %s
  error       %s; %d flushed blocks
`, outDir, src, len(c.Quantized), c.Method.QuantAlgo, c.Method.GroupSize, c.Method.TensorScale, len(c.Kept),
		humanBytes(c.SourceTensorBytes), humanBytes(c.OutputTensorBytes), errLine, flushed)
	return err
}

// humanBytes formats n in GB (1e9) or MB (1e6).
func humanBytes(n int64) string {
	if n >= 1e9 {
		return fmt.Sprintf("%.3f GB", float64(n)/1e9)
	}
	return fmt.Sprintf("%.3f MB", float64(n)/1e6)
}
