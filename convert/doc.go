// Package convert owns lithos's model of a Hugging Face checkpoint before it
// becomes a bundle: config parsing (config.json with or without a nested
// text_config; layer types from layer_types or full_attention_interval; DSpark
// draft-head fields), the declared quantization (hf_quant_config.json and
// config.json quantization_config, both ModelOpt shapes, MIXED_PRECISION
// quantized_layers; lithos_quantization of re-exported heads), the
// classification of every tensor into named groups with its format detected
// from dtypes, and the byte-budget audit behind `lithos-pack audit`: bytes
// read per decode pass, recurrent state, KV per token, bytes per DSpark draft
// block, and the bandwidth ceilings they imply (CeilingFormula).
//
// It reads checkpoints through a Source — a local directory (a checkout, an
// HF cache snapshot, a headers-only fetch) or a Hub repository read with
// range requests — and never reads tensor data: config files whole, then one
// or two reads per safetensors header.
//
// SynthHeaders goes the other way: from a spec (a config plus the inventory
// rules the architecture leaves open; see manifests.ModelSpec) it writes a
// header-only checkpoint whose shards have real headers and holes where the
// data would be, which is how the audit is tested against the published
// byte budget of nvidia/Qwen3.8-27B-NVFP4 without its 22 GB. docs/audit.md
// derives every group total.
//
// It imports formats/safetensors (header codec), hub (remote reads, HF
// cache lookup) and manifests (chip profiles, model registry, specs). The
// re-quantization of draft heads to NVFP4 also lives here.
package convert
