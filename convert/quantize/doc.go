// Package quantize re-quantizes a BF16 DSpark (or DFlash) draft head to a
// ModelOpt-style NVFP4 checkpoint: the work behind
// `lithos-pack quantize DRAFT --to nvfp4 -o DIR` (issue 4; docs/quantize.md).
//
// Input: a directory holding config.json and model.safetensors (or shards
// with model.safetensors.index.json) with the tensor names of the public
// DSpark heads (qwen35-and-quant.md §D.4, lithos-metal.md §5.2): fc,
// hidden_norm, layers.{i}.{input,post_attention}_layernorm,
// layers.{i}.self_attn.{q,k,v,o}_proj and {q,k}_norm,
// layers.{i}.mlp.{gate,up,down}_proj, norm, markov_head.markov_w1/markov_w2,
// confidence_head.proj.{weight,bias}. The config must agree with the tensors
// exactly (convert.Inventory gives the expected names and shapes).
//
// Output, a new directory built beside DIR as DIR.tmp-XXXX and renamed into
// place only when complete and fsynced:
//
//	model.safetensors     every draft linear (layers.* projections, fc, markov_head.markov_w2) as
//	                      <module>.weight U8 [N, K/2], .weight_scale F8_E4M3 [N, K/16],
//	                      .weight_scale_2 F32 [] (ModelOpt layout, qwen35-and-quant.md §B.3);
//	                      markov_w1 (a gathered table), norms and the confidence head copied
//	                      unchanged. Tensors in the Python writer's order, metadata {"format": "pt"}.
//	config.json           the source config.json byte for byte, plus "quantization_config"
//	                      (ModelOpt's config.json shape, §B.2) for quant_algo W4A16_NVFP4
//	hf_quant_config.json  ModelOpt's legacy shape (§B.1): W4A16_NVFP4, group_size 16,
//	                      exclude_modules = the kept Linear/Embedding modules
//	conversion.json       source repo/revision, sha256 of inputs and outputs, the rule used,
//	                      per-tensor error statistics (Conversion)
//
// The quantizer is nvfp4.QuantizeRows: ModelOpt's NVFP4QTensor rule, bit-exact,
// float32 in ModelOpt's order (ARCHITECTURE.md §3.1), with the tensor scale
// rounded by nvfp4.DivideExact unless Options.Division says otherwise.
//
// Work is parallel across tensors (errgroup, Options.Workers); each worker
// streams its tensor in row chunks of Options.ChunkBytes source bytes, reading
// it twice (amax, then quantize), decoding and quantizing each chunk in
// pieces of about 64 KiB of float32, and writes each chunk at its final offset
// in the pre-sized output file, so the bytes do not depend on scheduling.
// Memory per worker is about 1.3 × ChunkBytes + 2 × max(64 KiB, 4·K bytes)
// for a BF16 source (docs/quantize.md).
package quantize
