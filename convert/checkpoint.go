package convert

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"lithos/formats/safetensors"
)

// Checkpoint is what an audit knows about a checkpoint after reading its
// JSON files and every safetensors header: no tensor data.
type Checkpoint struct {
	Source Source
	Config *Config
	// Quant is the declared quantization: hf_quant_config.json when present,
	// else config.json's quantization_config; nil when neither exists.
	Quant *QuantConfig
	// Files are the safetensors files, in the index's (sorted) order.
	Files []CheckpointFile
	// Tensors are every tensor of every file, in file order, then data order.
	Tensors []TensorInfo
	// Warnings are inconsistencies that do not stop the audit.
	Warnings []string
}

// CheckpointFile is one safetensors file.
type CheckpointFile struct {
	Name        string
	Bytes       int64 // file size
	HeaderBytes int64 // 8 + N
	Tensors     int
}

// TensorInfo is one tensor as its header describes it.
type TensorInfo struct {
	Name  string
	DType safetensors.DType
	Shape []int64
	Bytes int64
	File  string
}

// TensorBytes returns the sum of tensor sizes.
func (c *Checkpoint) TensorBytes() int64 {
	var n int64
	for _, t := range c.Tensors {
		n += t.Bytes
	}
	return n
}

// FileBytes returns the sum of safetensors file sizes (headers included).
func (c *Checkpoint) FileBytes() int64 {
	var n int64
	for _, f := range c.Files {
		n += f.Bytes
	}
	return n
}

// LoadCheckpoint reads config.json, hf_quant_config.json (optional),
// model.safetensors.index.json (or model.safetensors, or the *.safetensors
// files of the source when there is neither) and the header of every shard.
//
// Errors, each naming the file and, where one is concerned, the tensor:
// config.json missing or invalid; an invalid quantization file or index; a
// shard that cannot be opened (missing locally, 404 remotely); a header that
// breaks the safetensors rules (formats/safetensors: sizes that disagree with
// shape × dtype, ranges past the end of the file, overlaps, gaps, ...); an
// index that maps a tensor to a shard whose header lacks it, or a shard
// holding a tensor the index does not list.
func LoadCheckpoint(ctx context.Context, src Source) (*Checkpoint, error) {
	ck := &Checkpoint{Source: src}
	raw, err := src.ReadFile(ctx, "config.json")
	if err != nil {
		if IsNotExist(err) {
			return nil, fmt.Errorf("config.json: not found in %s: the audit needs the model config (layer types and dimensions)", src)
		}
		return nil, fmt.Errorf("config.json in %s: %w", src, err)
	}
	if ck.Config, err = ParseConfig(raw); err != nil {
		return nil, fmt.Errorf("config.json in %s: %w", src, err)
	}
	ck.Quant = ck.Config.Quantization
	if raw, err := src.ReadFile(ctx, "hf_quant_config.json"); err == nil {
		q, err := ParseHFQuantConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("hf_quant_config.json in %s: %w", src, err)
		}
		if ck.Quant != nil && (ck.Quant.Algo != q.Algo || len(ck.Quant.Layers) != len(q.Layers)) {
			ck.Warnings = append(ck.Warnings, fmt.Sprintf("hf_quant_config.json (%s) and config.json quantization_config (%s) disagree; using hf_quant_config.json",
				q.Summary(), ck.Quant.Summary()))
		}
		ck.Quant = q
	} else if !IsNotExist(err) {
		return nil, fmt.Errorf("hf_quant_config.json in %s: %w", src, err)
	}

	index, shards, err := findShards(ctx, src)
	if err != nil {
		return nil, err
	}
	seen := map[string]string{} // tensor → shard
	for _, shard := range shards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, size, err := readShardHeader(ctx, src, shard)
		if err != nil {
			if index != nil && IsNotExist(err) {
				return nil, fmt.Errorf("%s: listed in %s for %s, but it cannot be read: %w", shard, safetensors.IndexName, exampleTensors(index, shard), err)
			}
			return nil, err
		}
		ck.Files = append(ck.Files, CheckpointFile{Name: shard, Bytes: size, HeaderBytes: hdr.DataStart, Tensors: len(hdr.Tensors)})
		for _, t := range hdr.Tensors {
			if index != nil {
				mapped, ok := index.WeightMap[t.Name]
				switch {
				case !ok:
					return nil, fmt.Errorf("%s: holds tensor %q, which %s does not list", shard, t.Name, safetensors.IndexName)
				case mapped != shard:
					return nil, fmt.Errorf("%s: holds tensor %q, which %s maps to %s", shard, t.Name, safetensors.IndexName, mapped)
				}
			}
			if prev, dup := seen[t.Name]; dup {
				return nil, fmt.Errorf("%s: tensor %q is also in %s", shard, t.Name, prev)
			}
			seen[t.Name] = shard
			ck.Tensors = append(ck.Tensors, TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, Bytes: t.Size, File: shard})
		}
	}
	if index != nil {
		for _, name := range slices.Sorted(maps.Keys(index.WeightMap)) {
			if _, ok := seen[name]; !ok {
				return nil, fmt.Errorf("%s: maps tensor %q to %s, whose header has no such tensor", safetensors.IndexName, name, index.WeightMap[name])
			}
		}
		if total, ok := index.TotalSize(); ok && total != ck.TensorBytes() {
			ck.Warnings = append(ck.Warnings, fmt.Sprintf("%s: metadata.total_size is %d bytes, the headers' tensors add up to %d",
				safetensors.IndexName, total, ck.TensorBytes()))
		}
	}
	return ck, nil
}

// exampleTensors names one tensor an index places in shard, for messages.
func exampleTensors(ix *safetensors.Index, shard string) string {
	n, first := 0, ""
	for name, s := range ix.WeightMap {
		if s == shard {
			n++
			if first == "" || name < first {
				first = name
			}
		}
	}
	if n == 1 {
		return fmt.Sprintf("tensor %q", first)
	}
	return fmt.Sprintf("%d tensors (e.g. %q)", n, first)
}

// findShards returns the index (nil when the checkpoint has none) and the
// safetensors files to read.
func findShards(ctx context.Context, src Source) (*safetensors.Index, []string, error) {
	raw, err := src.ReadFile(ctx, safetensors.IndexName)
	if err == nil {
		ix, err := safetensors.ParseIndex(bytes.NewReader(raw))
		if err != nil {
			return nil, nil, fmt.Errorf("%s in %s: %w", safetensors.IndexName, src, err)
		}
		return ix, ix.Shards(), nil
	}
	if !IsNotExist(err) {
		return nil, nil, fmt.Errorf("%s in %s: %w", safetensors.IndexName, src, err)
	}
	names, err := src.List(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", src, err)
	}
	var shards []string
	for _, n := range names {
		if strings.HasSuffix(n, ".safetensors") {
			shards = append(shards, n)
		}
	}
	if len(shards) == 0 {
		return nil, nil, fmt.Errorf("%s: no %s and no *.safetensors files", src, safetensors.IndexName)
	}
	if slices.Contains(shards, safetensors.SingleName) {
		shards = []string{safetensors.SingleName}
	}
	slices.Sort(shards)
	return nil, shards, nil
}

func readShardHeader(ctx context.Context, src Source, shard string) (*safetensors.Header, int64, error) {
	f, err := src.Open(ctx, shard)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", shard, err)
	}
	defer f.Close()
	hdr, err := safetensors.ReadHeader(f, f.Size())
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", shard, err)
	}
	return hdr, f.Size(), nil
}
