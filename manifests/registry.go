package manifests

import (
	"embed"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Pairing is one entry of the model registry: a target checkpoint and the
// DSpark draft head lithos fetches and runs with it by default.
type Pairing struct {
	// Target is the Hugging Face repo id of the target model.
	Target string
	// Draft is the repo id of the default DSpark head.
	Draft string
	// Alternatives are other heads trained for the same target (e.g. the
	// BF16 original the default was re-exported from).
	Alternatives []string
	// Architecture, HiddenSize and NumHiddenLayers are what the target's
	// config.json must say for the pairing to apply: a checkpoint is
	// identified by its architecture and shape, never by its size alone
	// (lithos-metal.md §3.5, monolith/models/catalog.py).
	Architecture    string
	HiddenSize      int
	NumHiddenLayers int
	// Specs name the embedded model specs (see ModelSpec) of the target and
	// of the heads, "" when none is shipped.
	TargetSpec, DraftSpec string
	AlternativeSpecs      []string
	// Source says where the pairing comes from.
	Source string
}

var registry = []Pairing{
	{
		Target:           "nvidia/Qwen3.8-27B-NVFP4",
		Draft:            "LithosAI/Qwen3.8-27B-DSpark-NVFP4",
		Alternatives:     []string{"RadixArk/Qwen3.8-27B-DSpark"},
		Architecture:     "Qwen3_5ForConditionalGeneration",
		HiddenSize:       5120,
		NumHiddenLayers:  64,
		TargetSpec:       "qwen3.8-27b-nvfp4",
		DraftSpec:        "dspark-qwen3.8-27b-nvfp4",
		AlternativeSpecs: []string{"dspark-qwen3.8-27b-bf16"},
		Source: "lithos-metal.md §3.5 (catalog: nvidia/Qwen3.8-27B-NVFP4 → LithosAI/Qwen3.8-27B-DSpark-NVFP4) and §5.3 " +
			"(an NVFP4 re-export of RadixArk/Qwen3.8-27B-DSpark); the audit article's \"How DSpark is wired in\"",
	},
	{
		Target:          "nvidia/Qwen3.6-35B-A3B-NVFP4",
		Draft:           "LithosAI/Qwen3.6-35B-A3B-DSpark-NVFP4",
		Architecture:    "Qwen3_5MoeForConditionalGeneration",
		HiddenSize:      2048,
		NumHiddenLayers: 40,
		Source:          "lithos-metal.md §3.5 (catalog entry for the 35B-A3B MoE target)",
	},
	{
		Target:          "lithos-test/tiny-coder-NVFP4",
		Draft:           "lithos-test/tiny-coder-DSpark",
		Architecture:    "Qwen3_5ForConditionalGeneration",
		HiddenSize:      512,
		NumHiddenLayers: 8,
		Source: "testdata/hub/lithos-test: the tiny trained pair of the embedded default (tools/tinypair, " +
			"issue 8; the head was trained on this target's taps and greedy continuations)",
	},
}

// Registry returns every pairing.
func Registry() []Pairing {
	out := slices.Clone(registry)
	for i := range out {
		out[i].Alternatives = slices.Clone(out[i].Alternatives)
		out[i].AlternativeSpecs = slices.Clone(out[i].AlternativeSpecs)
	}
	return out
}

// DraftFor returns the pairing whose target is repo. repo may be a repo id
// ("nvidia/Qwen3.8-27B-NVFP4"; case is ignored, as the Hub ignores it when
// resolving), an HF cache folder name ("models--nvidia--Qwen3.8-27B-NVFP4")
// or a path inside one (".../models--nvidia--Qwen3.8-27B-NVFP4/snapshots/<commit>").
// The caller should still check the target's config with Pairing.Matches.
func DraftFor(repo string) (Pairing, bool) {
	id := RepoFromCachePath(repo)
	if id == "" {
		id = strings.Trim(strings.TrimSpace(repo), "/")
	}
	for _, p := range Registry() {
		if strings.EqualFold(p.Target, id) {
			return p, true
		}
	}
	return Pairing{}, false
}

// Matches reports whether a target config (its first architecture,
// hidden_size and num_hidden_layers) is the one the pairing was made for.
func (p Pairing) Matches(architecture string, hiddenSize, numHiddenLayers int) bool {
	return architecture == p.Architecture && hiddenSize == p.HiddenSize && numHiddenLayers == p.NumHiddenLayers
}

// RepoFromCachePath returns the repo id encoded in an HF cache folder name
// ("models--org--name" → "org/name") found as any element of p, or "" when
// there is none. The Hub forbids "--" inside org and repo names, so the
// split is unambiguous.
func RepoFromCachePath(p string) string {
	p = strings.ReplaceAll(p, "\\", "/")
	for _, el := range strings.Split(p, "/") {
		rest, ok := strings.CutPrefix(el, "models--")
		if !ok {
			continue
		}
		org, name, ok := strings.Cut(rest, "--")
		if ok && org != "" && name != "" && !strings.Contains(name, "--") {
			return org + "/" + name
		}
	}
	return ""
}

//go:embed models/*.json
var modelSpecs embed.FS

// ModelSpec returns the embedded model spec called name (e.g.
// "qwen3.8-27b-nvfp4"): the JSON that lithos/convert.ParseSynthSpec reads —
// a checkpoint's config.json, its quantization and its tensor inventory
// rules, derived from the references cited inside it. It is what
// `lithos-pack synth-headers` turns into a header-only checkpoint.
func ModelSpec(name string) ([]byte, error) {
	if strings.ContainsAny(name, "/\\") || name == "" {
		return nil, fmt.Errorf("model spec %q: not a spec name (use a file path for your own spec)", name)
	}
	b, err := modelSpecs.ReadFile(path.Join("models", name+".json"))
	if err != nil {
		return nil, fmt.Errorf("model spec %q: not embedded; known specs: %s", name, strings.Join(ModelSpecNames(), ", "))
	}
	return b, nil
}

// ModelSpecNames lists the embedded model specs, sorted.
func ModelSpecNames() []string {
	ents, _ := modelSpecs.ReadDir("models")
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
