package pack

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"lithos/manifests"
)

// TestManifestMatchesSchema validates real manifests (target only, target + re-quantized
// draft) against the JSON Schema of docs/bundle.md with an independent validator, and checks
// that the schema is not vacuous: a manifest missing a tensor's sha256, with an unknown field
// or a misaligned offset fails it.
func TestManifestMatchesSchema(t *testing.T) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(manifests.BundleSchema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "https://lithos.invalid/schemas/bundle-manifest-v1.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	validate := func(data []byte) error {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		return sch.Validate(inst)
	}
	plain, _ := build(t, Options{Target: fixtureDir})
	withDraft, _ := build(t, Options{Target: fixtureDir, Draft: writeSpec(t, tinyDraftSpec(t, nil), 3)})
	for _, dir := range []string{plain, withDraft} {
		data, err := os.ReadFile(filepath.Join(dir, manifests.BundleManifestName))
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(data); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
	}
	manifest := filepath.Join(plain, manifests.BundleManifestName)
	tensor := func(m map[string]any, i int) map[string]any { return m["tensors"].([]any)[i].(map[string]any) }
	for name, edit := range map[string]func(m map[string]any){
		"missing sha256":      func(m map[string]any) { delete(tensor(m, 2), "sha256") },
		"unknown field":       func(m map[string]any) { tensor(m, 0)["extra"] = 1 },
		"misaligned":          func(m map[string]any) { tensor(m, 1)["offset"] = 4096 },
		"blm with source":     func(m map[string]any) { tensor(m, 2)["source"] = "x" },
		"plain w/o transform": func(m map[string]any) { delete(tensor(m, 0), "transform") },
		"version 2":           func(m map[string]any) { m["version"] = 2 },
	} {
		orig, _ := os.ReadFile(manifest)
		editJSON(t, manifest, edit)
		data, _ := os.ReadFile(manifest)
		os.WriteFile(manifest, orig, 0o644)
		if validate(data) == nil {
			t.Errorf("%s: the schema accepts it", name)
		}
		if _, err := manifests.ParseBundle(data); err == nil {
			t.Errorf("%s: ParseBundle accepts it", name)
		}
	}
}
