// Command blmbench writes a standalone CUDA benchmark of lithos's BLM matrix kernels
// (kernels/ops/blm.kern) at the 27B's shapes: the generated kernel source, the harness
// (harness.cu, embedded here) and cases.txt, one line per (shape, rows, work split) with the
// kernel's parameter record as kernels.NewBLMParams builds it. run.sh compiles the harness with
// nvcc for each source variant (a variant is the generated source with a patch applied, for
// experiments that cannot be expressed through the record) and runs it on the GPU, so several
// kernel variants are timed in one device call against the read bandwidth measured by the same
// binary. With PROTO set, the harness also times the prototype kernels of proto.cuh (embedded
// too) on the same bytes: the barrier-free blm_ws ("P:NB"), the row-order ring blm_ws2
// ("wP:NB[:D:W]"), its stream-K split ("sP:1:D:W"), the loads alone in fragment or row
// order ("mP:NB", "rP:NB"), the bulk-tensor-copy kernel blm_tma ("tP:NB:BS[:D[:DIAG]]";
// TMA_PROMO picks its tensor maps' L2 promotion) and blm_ws over a fragment-major copy of the
// weights ("fP:NB"), each against the generated kernel's outputs and time (8 rows at most).
// docs/performance.md §3 reports its numbers (§3.3g–i the prototypes').
//
//	go run ./tools/blmbench -o DIR
package main

import (
	_ "embed"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"lithos/formats"
	"lithos/kernels"
	"lithos/pack/blm"
)

//go:embed harness.cu
var harness string

//go:embed run.sh
var runScript string

//go:embed proto.cuh
var protoSource string

type shape struct {
	name string
	f    formats.Format
	n, k int64
	epi  uint32
}

// shapes are the 27B's matrices (docs/blm.md §9), as BenchmarkBLMShapes times them.
var shapes = []shape{
	{"nvfp4-gate_up", formats.NVFP4, 34816, 5120, kernels.EpiSwiGLU},
	{"nvfp4-down", formats.NVFP4, 5120, 17408, kernels.EpiStore},
	{"nvfp4-lm_head", formats.NVFP4, 248320, 5120, kernels.EpiStore},
	{"fp8-qkv", formats.FP8, 10240, 5120, kernels.EpiStore},
	{"fp8-z", formats.FP8, 6144, 5120, kernels.EpiStore},
	{"fp8-out", formats.FP8, 5120, 6144, kernels.EpiStore},
	{"bf16-qkv", formats.BF16, 10240, 5120, kernels.EpiStore},
	{"bf16-out", formats.BF16, 5120, 6144, kernels.EpiStore},
	{"fp8-qkvz", formats.FP8, 16384, 5120, kernels.EpiStore},     // GDN in_proj_qkv and in_proj_z as one matrix
	{"fp8-attn_qkv", formats.FP8, 14336, 5120, kernels.EpiStore}, // attention q (with its gate), k, v
	{"bf16-ab", formats.BF16, 96, 5120, kernels.EpiStore},        // GDN in_proj_a and in_proj_b
}

func main() {
	out := flag.String("o", "blmbench", "output directory")
	splits := flag.Bool("splits", false, "also every other work split (1, 8 and 16 rows)")
	clusters := flag.String("clusters", "", "also these cluster sizes (comma-separated, e.g. 2,4,8: K split across the threadgroups of a cluster) for every split timed")
	fragment := flag.Bool("fragment", false, "also every split timed with the weights in the fragment-major layout (BLMParams.Layout 1; mark f; the harness's random bytes are read as that layout)")
	flag.Parse()
	var cls []uint32
	for _, f := range strings.Split(*clusters, ",") {
		if f == "" {
			continue
		}
		var c uint32
		if _, err := fmt.Sscan(f, &c); err != nil || c < 1 || c > kernels.BLMMaxClusters {
			fmt.Fprintf(os.Stderr, "blmbench: -clusters %q: want sizes 1 to %d\n", f, kernels.BLMMaxClusters)
			os.Exit(2)
		}
		cls = append(cls, c)
	}
	if err := write(*out, *splits, cls, *fragment); err != nil {
		fmt.Fprintln(os.Stderr, "blmbench:", err)
		os.Exit(1)
	}
}

func write(dir string, allSplits bool, clusters []uint32, fragment bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var cases strings.Builder
	names := map[string]bool{}
	for _, sh := range shapes {
		g, err := blm.NewGeometry(blm.Spec{Format: sh.f, N: sh.n, K: sh.k})
		if err != nil {
			return fmt.Errorf("shape %s: %w", sh.name, err)
		}
		for _, rows := range []int{1, 8, 16} {
			p0, err := kernels.NewBLMParams(g, rows, sh.epi)
			if err != nil {
				return fmt.Errorf("shape %s: %w", sh.name, err)
			}
			splits := [][3]uint32{{p0.Parts, p0.WarpBlocks, p0.Clusters}}
			if allSplits {
				for _, sp := range [][3]uint32{{1, 2, 1}, {2, 2, 1}, {4, 2, 1}, {4, 1, 1}, {2, 1, 1}} {
					if sp != splits[0] {
						splits = append(splits, sp)
					}
				}
			}
			for _, sp := range splits[:len(splits):len(splits)] {
				for _, c := range clusters {
					if c != sp[2] {
						splits = append(splits, [3]uint32{sp[0], sp[1], c})
					}
				}
			}
			layouts := []uint32{kernels.BLMLayoutBLM}
			if fragment && (g.Format != formats.NVFP4 || g.GroupSize == 16 && g.Stripe%16 == 0) {
				layouts = append(layouts, kernels.BLMLayoutFragment)
			}
			for _, lay := range layouts {
				kname, err := kernels.BLMKernelLayout(g.Format, rows, lay)
				if err != nil {
					return err
				}
				names[kname] = true
				for i, sp := range splits {
					p := p0
					p.Parts, p.WarpBlocks, p.Clusters, p.Layout = sp[0], sp[1], sp[2], lay
					mark := ""
					if i == 0 {
						mark = "d"
					}
					if lay == kernels.BLMLayoutFragment {
						mark += "f"
					}
					ny := int64(p.LdY)
					// name kernel rows parts wb clusters mark grid weight_bytes table_rows x_floats y_floats record...
					fmt.Fprintf(&cases, "%s %s %d %d %d %d %s %d %d %d %d %d", sh.name, kname, rows, p.Parts, p.WarpBlocks, p.Clusters, orDash(mark),
						p.Grid()[0], g.TotalBytes, g.Blocks*int64(g.Rows), int64(rows)*g.K, int64(rows)*ny)
					rec := kernels.Record(p)
					for i := 0; i+4 <= len(rec); i += 4 {
						fmt.Fprintf(&cases, " %d", binary.LittleEndian.Uint32(rec[i:]))
					}
					cases.WriteByte('\n')
				}
			}
		}
	}
	var table strings.Builder
	for _, k := range kernels.Kernels() {
		if names[k.Name] {
			fmt.Fprintf(&table, "    {\"%s\", (const void*)lk::%s},\n", k.Name, k.Name)
		}
	}
	files := map[string]string{
		"lithos_kernels.cu": kernels.Source(kernels.CUDA),
		"kernel_table.inc":  table.String(),
		"cases.txt":         cases.String(),
		"harness.cu":        harness,
		"proto.cuh":         protoSource,
		"run.sh":            runScript,
	}
	for name, body := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			return err
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
