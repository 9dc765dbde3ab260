// Command mkckpt writes a synthetic checkpoint with random tensor data (lithos/convert.SynthRandom)
// from a model spec: an embedded one (lithos/manifests: qwen3.8-27b-nvfp4, dspark-qwen3.8-27b-bf16,
// …) or a spec file, optionally cut to its first layers and without the vision tower and the
// MTP block. It is the input of the pack benchmark (tools/bench_pack.sh): the 27B's real widths,
// formats and shard layout, at a size that fits a test machine.
//
//	go run ./tools/mkckpt -spec qwen3.8-27b-nvfp4 -layers 8 -o /tmp/ckpt
//
// Flags: -spec NAME|FILE, -layers N (0: all), -vision, -mtp (keep them), -shard-bytes N
// (0: the spec's), -seed N, -o DIR (must not exist). With -hf-cache CACHE the files are also
// published as an HF cache snapshot of -repo (hard links in blobs/<sha256>, relative symlinks in
// snapshots/<commit>/, refs/main), the layout `lithos-pack fetch` writes, whose path it prints
// last. It prints the files and the tensor bytes. `lithos-pack synth --random` writes the same
// checkpoint from the toolchain (without the HF cache publishing).
package main

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"

	"lithos/convert"
)

func main() {
	spec := flag.String("spec", "qwen3.8-27b-nvfp4", "embedded spec name or spec file")
	layers := flag.Int("layers", 0, "keep the first N decoder layers (0: all)")
	vision := flag.Bool("vision", false, "keep the vision tower")
	mtp := flag.Bool("mtp", false, "keep the MTP block")
	shard := flag.Int64("shard-bytes", 0, "shard size in bytes (0: the spec's)")
	seed := flag.Uint64("seed", 1, "random seed")
	out := flag.String("o", "", "output directory (new)")
	cache := flag.String("hf-cache", "", "also publish the files as an HF cache snapshot under this cache directory")
	repo := flag.String("repo", "bench/random-27b", "repo id of the HF cache snapshot")
	flag.Parse()
	if *out == "" {
		log.Fatal("mkckpt: -o DIR is required")
	}
	s, err := convert.LoadSynthSpec(*spec)
	if err != nil {
		log.Fatal(err)
	}
	if s, err = convert.CutSynthSpec(s, *layers, *vision, *mtp, *shard); err != nil {
		log.Fatal(err)
	}
	res, err := convert.SynthRandom(context.Background(), s, *out, convert.SynthRandomOptions{Seed: *seed})
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range res.Files {
		fmt.Printf("%-34s %15d bytes %6d tensors\n", f.Name, f.Bytes, f.Tensors)
	}
	fmt.Printf("%d tensors, %d bytes of random tensor data, %d bytes in all\n", res.Tensors, res.TensorBytes, res.Bytes)
	if *cache != "" {
		snap, err := publish(*out, *cache, *repo)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(snap)
	}
}

// publish lays the files of dir out as an HF cache snapshot of repo (huggingface_hub's layout:
// models--org--name/{blobs/<sha256>, snapshots/<commit>/<file> -> ../../blobs/<sha256>,
// refs/main}); blobs are hard links to dir's files. The commit is the sha1 of the files' names
// and hashes. It returns the snapshot directory.
func publish(dir, cache, repo string) (string, error) {
	org, name, ok := strings.Cut(repo, "/")
	if !ok {
		return "", fmt.Errorf("repo %q: want org/name", repo)
	}
	base := filepath.Join(cache, "models--"+org+"--"+name)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	type file struct{ name, sha string }
	var files []file
	id := sha1.New()
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
		files = append(files, file{e.Name(), hex.EncodeToString(h.Sum(nil))})
		fmt.Fprintf(id, "%s %s\n", e.Name(), files[len(files)-1].sha)
	}
	commit := hex.EncodeToString(id.Sum(nil))
	snap := filepath.Join(base, "snapshots", commit)
	for _, d := range []string{filepath.Join(base, "blobs"), snap, filepath.Join(base, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	for _, f := range files {
		blob := filepath.Join(base, "blobs", f.sha)
		if _, err := os.Stat(blob); err != nil {
			if err := os.Link(filepath.Join(dir, f.name), blob); err != nil {
				return "", err
			}
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", f.sha), filepath.Join(snap, f.name)); err != nil {
			return "", err
		}
	}
	return snap, os.WriteFile(filepath.Join(base, "refs", "main"), []byte(commit), 0o644)
}
