package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"lithos/hub"
	"lithos/manifests"
)

func newFetchCmd() *cobra.Command {
	var (
		opt           hub.DownloadOptions
		noDraft       bool
		draftRevision string
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:   "fetch REPO",
		Short: "Download a checkpoint into the Hugging Face cache (parallel, resumable, verified)",
		Long: `fetch brings a Hub repository onto this machine the way "hf download" does: into the
standard HF cache ($HF_HUB_CACHE, else $HF_HOME/hub), readable by huggingface_hub offline.
Large files are fetched as parallel byte ranges; a killed fetch resumes where it stopped;
every file is checked against the Hub's sha256 (or git sha1) before it is published.

For a target in lithos's model registry the matching DSpark draft head is fetched too
(e.g. nvidia/Qwen3.8-27B-NVFP4 -> LithosAI/Qwen3.8-27B-DSpark-NVFP4) unless --no-draft.

Environment: HF_ENDPOINT (a mirror, or "lithos-pack hub serve"), HF_TOKEN, HF_HOME,
HF_HUB_CACHE, HF_HUB_OFFLINE, LITHOS_CACHE (headers-only snapshots).

Prints the snapshot folder (and the draft's on a second line).`,
		Example: `  lithos-pack fetch nvidia/Qwen3.8-27B-NVFP4
  lithos-pack fetch nvidia/Qwen3.8-27B-NVFP4 --headers-only     # configs + safetensors headers only
  lithos-pack fetch org/model --include '*.json' --include 'model-0000[12]*'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := hub.NewClientFromEnv()
			if err != nil {
				return err
			}
			type result struct {
				Repo string `json:"repo"`
				Path string `json:"path"`
				Role string `json:"role"`
			}
			var results []result
			fetch := func(repo string, o hub.DownloadOptions, role string) error {
				progress, done := byteBar("fetch " + repo)
				o.Progress = progress
				dir, err := c.Download(ctx, repo, o)
				done()
				if err != nil {
					return err
				}
				results = append(results, result{Repo: repo, Path: dir, Role: role})
				return nil
			}
			if err := fetch(args[0], opt, "target"); err != nil {
				return err
			}
			if p, ok := manifests.DraftFor(args[0]); ok && !noDraft {
				if err := checkPairing(p, results[0].Path); err != nil {
					return err
				}
				do := opt
				do.Revision = draftRevision
				do.Include, do.Exclude = nil, nil
				do.LocalDir = ""
				if err := fetch(p.Draft, do, "draft"); err != nil {
					return fmt.Errorf("draft head %s for %s: %w (use --no-draft to skip it)", p.Draft, args[0], err)
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"snapshots": results, "bytes_fetched": c.BytesFetched()})
			}
			for _, r := range results {
				fmt.Fprintln(cmd.OutOrStdout(), r.Path)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.Revision, "revision", "main", "branch, tag or commit to fetch")
	f.StringArrayVar(&opt.Include, "include", nil, "only files matching this glob ('*' crosses '/'; repeatable)")
	f.StringArrayVar(&opt.Exclude, "exclude", nil, "skip files matching this glob (repeatable)")
	f.BoolVar(&opt.HeadersOnly, "headers-only", false, "fetch JSON/tokenizer files and only the headers of safetensors files (for audit)")
	f.StringVar(&opt.LocalDir, "local-dir", "", "write plain files into this folder instead of the HF cache")
	f.IntVar(&opt.MaxWorkers, "max-workers", 8, "concurrent HTTP connections")
	f.BoolVar(&noDraft, "no-draft", false, "do not fetch the registry's DSpark draft head for this target")
	f.StringVar(&draftRevision, "draft-revision", "main", "revision of the draft head")
	f.BoolVar(&asJSON, "json", false, "print one JSON object with the snapshot folders")
	return cmd
}

// checkPairing refuses to pair a draft head with a target whose config.json
// is not the one the registry entry was made for: a pairing is by
// architecture and shape, never by name alone.
func checkPairing(p manifests.Pairing, snapshot string) error {
	b, err := os.ReadFile(filepath.Join(snapshot, "config.json"))
	if err != nil {
		return fmt.Errorf("draft head for %s: read the target's config.json: %w (use --no-draft to skip the draft)", p.Target, err)
	}
	var cfg struct {
		Architectures []string `json:"architectures"`
		HiddenSize    int      `json:"hidden_size"`
		NumLayers     int      `json:"num_hidden_layers"`
		TextConfig    *struct {
			HiddenSize int `json:"hidden_size"`
			NumLayers  int `json:"num_hidden_layers"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("draft head for %s: parse the target's config.json: %w", p.Target, err)
	}
	arch := ""
	if len(cfg.Architectures) > 0 {
		arch = cfg.Architectures[0]
	}
	hidden, layers := cfg.HiddenSize, cfg.NumLayers
	if cfg.TextConfig != nil {
		hidden, layers = cfg.TextConfig.HiddenSize, cfg.TextConfig.NumLayers
	}
	if !p.Matches(arch, hidden, layers) {
		return fmt.Errorf("draft head %s was made for %s (%s, hidden %d, %d layers) but this checkpoint's config.json says %s, hidden %d, %d layers: refusing to pair them (use --no-draft)",
			p.Draft, p.Target, p.Architecture, p.HiddenSize, p.NumHiddenLayers, arch, hidden, layers)
	}
	return nil
}
