// Package pack builds, opens, verifies and inspects lithos bundles: the directory the runtime
// maps into memory (ARCHITECTURE.md §3.3; the contract is docs/bundle.md).
//
// A bundle is
//
//	NAME.lithos/
//	  manifest.json   manifests.Bundle, version manifests.BundleVersion
//	  weights.bin     every tensor the runtime reads, each at a multiple of 16 KiB
//	  tokenizer.json, tokenizer_config.json, chat_template.jinja, generation_config.json, …
//
// Build reads a target checkpoint (and optionally a DSpark draft head) from local directories,
// HF cache snapshots or Hub repo ids (downloaded first with lithos/hub), checks every tensor
// against the inventory its config.json implies (lithos/convert.Inventory), detects each
// linear's format (lithos/formats.Detect), stacks matrices the runtime multiplies together
// (GDN z+qkv, a+b; attention q+k+v; MLP gate/up interleaved), and refuses — before writing a
// byte — a checkpoint whose tensors disagree with its config, a format the BLM packer cannot
// place, or a draft whose hidden size or vocabulary differs from the target's. Then it streams
// each tensor through lithos/pack/blm (matrices) or copies it (norms, embeddings, …) into its
// slot of the weights file, several tensors at once, hashing as it writes; memory is a few
// batches of rows per worker, whatever the model size. The bundle is built in a hidden temporary
// directory beside the output, fsynced, and renamed into place: an interrupted pack leaves no
// directory under the output's name. A BF16 draft head is re-quantized to NVFP4 on the way
// with lithos/convert/quantize unless asked not to.
//
// OpenBundle is the loader-side check the runtime starts from: manifest version, every
// tensor's range against the weights file's size, every BLM geometry re-derived. Verify
// re-hashes every tensor and checks the padding; with Deep it also unpacks every tensor and
// compares it with the source checkpoint. Inspect summarizes bytes per group and padding.
//
// Imports: lithos/pack/blm, lithos/formats (+ safetensors), lithos/convert (+ quantize),
// lithos/hub, lithos/manifests, golang.org/x/sync, golang.org/x/sys.
package pack
