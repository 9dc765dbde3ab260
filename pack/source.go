package pack

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"lithos/convert"
	"lithos/convert/quantize"
	"lithos/formats"
	"lithos/formats/safetensors"
	"lithos/hub"
	"lithos/manifests"
)

// DownloadPatterns are the files Build fetches for a repo id (lithos-metal.md §3.5's
// allow_patterns): configs, weights, and the tokenizer and chat-template files.
var DownloadPatterns = []string{"*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"}

// copiedFiles are the files of a target checkout a bundle carries (when present): tokenizer,
// chat template and generation config (ARCHITECTURE.md §3.3). "*.tiktoken" files are copied too.
var copiedFiles = []string{
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
	"vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json",
	"generation_config.json",
}

// maxConfigBytes bounds config.json, hf_quant_config.json and the index (as convert does).
const maxConfigBytes = 64 << 20

// ResolveCheckpoint returns the local directory of a checkpoint argument: arg itself when it
// is a directory (a checkout or an HF cache snapshot); otherwise arg must be a Hub repo id,
// which is downloaded (DownloadPatterns) into c's HF cache at revision ("" = main) and its
// snapshot directory returned. repo and commit identify the source when known: from the
// download, or from an HF cache snapshot path (…/models--org--name/snapshots/<commit>).
// Errors: a file that is not a directory, a revision given with a directory, an argument that
// is neither, a nil client for a repo id, and the download's errors.
func ResolveCheckpoint(ctx context.Context, c *hub.Client, arg, revision string, progress func(total, delta int64)) (dir, repo, commit string, err error) {
	st, err := os.Stat(arg)
	if err == nil {
		if !st.IsDir() {
			return "", "", "", fmt.Errorf("%s: not a directory (give the checkpoint's folder)", arg)
		}
		if revision != "" {
			return "", "", "", fmt.Errorf("%s: a revision applies to repo ids, and this is a local directory", arg)
		}
		abs, err := filepath.Abs(arg)
		if err != nil {
			return "", "", "", err
		}
		repo, commit, _ = quantize.SourceFromPath(abs)
		return abs, repo, commit, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", "", "", fmt.Errorf("%s: %w", arg, err)
	}
	if hub.ValidateRepoID(arg) != nil {
		return "", "", "", fmt.Errorf("%s: no such directory, and not a Hub repo id", arg)
	}
	if c == nil {
		return "", "", "", fmt.Errorf("%s: a Hub repo id, but no Hub client to download it with", arg)
	}
	dir, err = c.Download(ctx, arg, hub.DownloadOptions{Revision: revision, Include: DownloadPatterns, Progress: progress})
	if err != nil {
		return "", "", "", fmt.Errorf("download %s: %w", arg, err)
	}
	if r, cm, ok := quantize.SourceFromPath(dir); ok {
		repo, commit = r, cm
	} else {
		repo = arg
	}
	return dir, repo, commit, nil
}

// checkpoint is one source model opened for packing: its config, quantization scheme and
// every tensor's location. Tensor data is read later, tensor by tensor.
type checkpoint struct {
	model        string // manifests.ModelTarget or ModelDraft
	dir          string
	repo, commit string
	rawConfig    []byte
	cfg          *convert.Config
	scheme       formats.Scheme
	st           *safetensors.Model
	files        []sourceFile // config, quant config, index, shards
	tensors      map[string]tensorRef
	names        []string // tensor names in file order, then data order
	requantized  []byte   // conversion.json when the bundle packs a re-quantized copy
	srcFiles     []sourceFile
	srcDir       string
}

// tensorRef is where one checkpoint tensor lives.
type tensorRef struct {
	file *safetensors.File
	t    safetensors.Tensor
}

func (r tensorRef) section() *io.SectionReader { return r.file.Section(r.t) }

// sourceFile is one file of a checkpoint, with its sha256 when known without reading it
// (the blob name of an HF cache snapshot's symlink) or once hashed.
type sourceFile struct {
	rel    string // relative path
	path   string // absolute
	bytes  int64
	sha256 string // "" until known
}

// openCheckpoint reads dir's config.json, quantization config and safetensors headers.
func openCheckpoint(ctx context.Context, model, dir, repo, commit string) (*checkpoint, error) {
	ck := &checkpoint{model: model, dir: dir, repo: repo, commit: commit, tensors: map[string]tensorRef{}}
	raw, err := readSmall(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", model, err)
	}
	ck.rawConfig = raw
	if ck.cfg, err = convert.ParseConfig(raw); err != nil {
		return nil, fmt.Errorf("%s: config.json in %s: %w", model, dir, err)
	}
	if ck.scheme, err = formats.ParseConfig(raw); err != nil {
		return nil, fmt.Errorf("%s: config.json in %s: %w", model, dir, err)
	}
	files := []string{"config.json"}
	if q, err := readSmall(filepath.Join(dir, "hf_quant_config.json")); err == nil {
		if ck.scheme, err = formats.ParseHFQuantConfig(q); err != nil {
			return nil, fmt.Errorf("%s: hf_quant_config.json in %s: %w", model, dir, err)
		}
		files = append(files, "hf_quant_config.json")
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", model, err)
	}
	if ck.st, err = safetensors.OpenModel(ctx, dir); err != nil {
		return nil, fmt.Errorf("%s: %w", model, err)
	}
	if ck.st.Index != nil {
		files = append(files, safetensors.IndexName)
	}
	for _, f := range ck.st.Files {
		rel, err := filepath.Rel(dir, f.Path)
		if err != nil {
			rel = filepath.Base(f.Path)
		}
		files = append(files, filepath.ToSlash(rel))
		for _, t := range f.Header.Tensors {
			ck.tensors[t.Name] = tensorRef{file: f, t: t}
			ck.names = append(ck.names, t.Name)
		}
	}
	for _, rel := range files {
		sf, err := statSource(dir, rel)
		if err != nil {
			ck.close()
			return nil, fmt.Errorf("%s: %w", model, err)
		}
		ck.files = append(ck.files, sf)
	}
	ck.srcFiles, ck.srcDir = ck.files, dir
	return ck, nil
}

// close closes the checkpoint's files (idempotent).
func (ck *checkpoint) close() {
	if ck != nil && ck.st != nil {
		ck.st.Close()
		ck.st = nil
	}
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxConfigBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxConfigBytes)
	}
	return b, nil
}

// statSource sizes a checkpoint file and takes its sha256 from an HF cache blob name when the
// file is a symlink to blobs/<64 hex> (hub verified that hash when it downloaded the blob).
func statSource(dir, rel string) (sourceFile, error) {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	st, err := os.Stat(p)
	if err != nil {
		return sourceFile{}, err
	}
	if !st.Mode().IsRegular() {
		return sourceFile{}, fmt.Errorf("%s: not a regular file", p)
	}
	sf := sourceFile{rel: rel, path: p, bytes: st.Size()}
	if target, err := os.Readlink(p); err == nil {
		base := filepath.Base(target)
		if filepath.Base(filepath.Dir(target)) == "blobs" && len(base) == 64 && isLowerHex(base) {
			sf.sha256 = base
		}
	}
	return sf, nil
}

func isLowerHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// copyable lists the files of dir a bundle copies, sorted.
func copyable(dir string) ([]string, error) {
	var out []string
	for _, n := range copiedFiles {
		if st, err := os.Stat(filepath.Join(dir, n)); err == nil && st.Mode().IsRegular() {
			out = append(out, n)
		}
	}
	m, err := filepath.Glob(filepath.Join(dir, "*.tiktoken"))
	if err != nil {
		return nil, err
	}
	for _, p := range m {
		out = append(out, filepath.Base(p))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// manifestSource renders a checkpoint's Source record (hashes must be known).
func (ck *checkpoint) manifestSource() manifests.Source {
	s := manifests.Source{Path: ck.srcDir, Files: []manifests.BundleFile{}}
	if ck.repo != "" {
		r := ck.repo
		s.Repo = &r
	}
	if ck.commit != "" {
		c := ck.commit
		s.Commit = &c
	}
	for _, f := range ck.srcFiles {
		s.Files = append(s.Files, manifests.BundleFile{Path: f.rel, Bytes: f.bytes, SHA256: f.sha256})
	}
	slices.SortFunc(s.Files, func(a, b manifests.BundleFile) int { return strings.Compare(a.Path, b.Path) })
	return s
}
