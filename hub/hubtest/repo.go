package hubtest

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// settingsFile is the per-repo settings file, ROOT/<org>/<name>/.hubtest.json. Every name starting with
// ".hubtest" is hidden from the repo (never listed, never served).
const settingsFile = ".hubtest.json"

// RepoSettings are per-repo switches. They come from ROOT/<org>/<name>/.hubtest.json and/or
// Options.Repos (the latter wins field by field when non-zero).
//
// Example .hubtest.json: {"gated": "manual", "token": "hf_secret"}.
type RepoSettings struct {
	// Gated is "" (not gated), "auto" or "manual", as the Hub's model-info field `gated`.
	// Model info and tree listings stay public; /resolve answers 401 GatedRepo without a bearer token
	// and 403 GatedRepo with a token that is not granted (see Token/Tokens).
	Gated string `json:"gated,omitempty"`
	// Private hides the repo: 401 RepoNotFound without a token, 404 RepoNotFound with a token that is not
	// granted, on every endpoint (the Hub does not reveal private repos).
	Private bool `json:"private,omitempty"`
	// Token and Tokens are the bearer tokens granted access to a gated or private repo, in addition to
	// Options.Token. When none is configured at all, any bearer token is granted (the user "accepted the
	// terms").
	Token  string   `json:"token,omitempty"`
	Tokens []string `json:"tokens,omitempty"`
	// RenamedTo ("org/name") makes this repo id a renamed one: every endpoint answers 307 with a
	// relative Location to the same path under the new id, the way the Hub redirects renamed repos
	// (hub-and-go.md A3 step 2). The old directory need not exist.
	RenamedTo string `json:"renamed_to,omitempty"`
	// DeclaredSHA256 maps repo paths of LFS files to a sha256 the server announces without hashing the
	// file. It exists for synthetic header-only checkpoints (sparse files of tens of GB, see
	// `lithos-pack synth-headers`) whose content is only ever read in ranges: hashing 22 GB of holes
	// would take a minute. A client that downloads such a file in full and verifies it sees a checksum
	// mismatch, as it should: the declared id is not the content's.
	DeclaredSHA256 map[string]string `json:"lfs_sha256,omitempty"`
}

func (s RepoSettings) merge(o RepoSettings) RepoSettings {
	if o.Gated != "" {
		s.Gated = o.Gated
	}
	if o.Private {
		s.Private = true
	}
	if o.Token != "" {
		s.Token = o.Token
	}
	if len(o.Tokens) > 0 {
		s.Tokens = append([]string(nil), o.Tokens...)
	}
	if o.RenamedTo != "" {
		s.RenamedTo = o.RenamedTo
	}
	if len(o.DeclaredSHA256) > 0 {
		s.DeclaredSHA256 = maps.Clone(o.DeclaredSHA256)
	}
	return s
}

func (s RepoSettings) validate() error {
	switch s.Gated {
	case "", "auto", "manual":
	default:
		return fmt.Errorf("gated %q: want \"\", \"auto\" or \"manual\"", s.Gated)
	}
	for p, sum := range s.DeclaredSHA256 {
		if !sha256HexRE.MatchString(sum) {
			return fmt.Errorf("lfs_sha256 of %q: %q is not 64 lower-case hex digits", p, sum)
		}
	}
	if s.RenamedTo != "" {
		org, name, ok := strings.Cut(s.RenamedTo, "/")
		if !ok || !validRepoPart(org) || !validRepoPart(name) {
			return fmt.Errorf("renamed_to %q: want a valid \"org/name\"", s.RenamedTo)
		}
	}
	return nil
}

// repoPartRE is the Hub's repo-id part rule as huggingface_hub validates it client-side
// (`validate_repo_id`: letters, digits, "-", "_", "."; no "--" or ".."; no leading/trailing "-" or ".";
// at most 96 characters). Stricter than needed here, which is the point: a part that passes cannot
// address anything outside ROOT.
var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

var repoPartRE = regexp.MustCompile(`^[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$`)

func validRepoPart(s string) bool {
	return len(s) <= 96 && repoPartRE.MatchString(s) && !strings.Contains(s, "--") && !strings.Contains(s, "..")
}

// fileEntry is one file or directory of a repo snapshot.
type fileEntry struct {
	Path        string // slash-separated, relative to the repo root
	Dir         bool
	Size        int64  // bytes of content (the LFS object for LFS files); 0 for directories
	OID         string // git object id: blob sha1 of the content (regular) or of the LFS pointer (LFS); tree sha1 (dir)
	LFS         bool
	SHA256      string // LFS only: sha256 hex of the content (the LFS oid, the Hub's X-Linked-Etag)
	PointerSize int    // LFS only: bytes of the git-lfs pointer file
	abs         string
	modTime     time.Time
}

// etag is the value the Hub uses as ETag for the file (unquoted): sha256 for LFS, git blob sha1 otherwise
// (hub-and-go.md A10).
func (e *fileEntry) etag() string {
	if e.LFS {
		return e.SHA256
	}
	return e.OID
}

// snapshot is one repo at its (single) commit.
type snapshot struct {
	Org, Name    string
	Commit       string
	Settings     RepoSettings
	Entries      []*fileEntry // files and directories, sorted by Path (byte order)
	byPath       map[string]*fileEntry
	bySHA        map[string]*fileEntry // LFS files by sha256
	LastModified time.Time
}

func (s *snapshot) ID() string { return s.Org + "/" + s.Name }

// fileKey is the name under which faults and statistics address a repo file: "org/name/path".
func (s *snapshot) fileKey(e *fileEntry) string { return s.ID() + "/" + e.Path }

// errRepoNotFound is returned by loadRepo when ROOT/<org>/<name> is not a directory.
var errRepoNotFound = errors.New("repository not found")

// maxRepoEntries bounds the number of files and directories one repo may hold (bounded memory on a
// misconfigured root).
const maxRepoEntries = 1 << 20

// loadRepo scans ROOT/<org>/<name> (org and name already validated) and returns its snapshot. Hashes are
// cached across calls by (path, size, mtime), so a scan costs one stat per file once hashed.
func (s *Server) loadRepo(org, name string) (*snapshot, error) {
	set, err := s.repoSettings(org, name)
	if err != nil {
		return nil, err
	}
	snap := &snapshot{Org: org, Name: name, Settings: set, byPath: map[string]*fileEntry{}, bySHA: map[string]*fileEntry{}}
	if set.RenamedTo != "" {
		return snap, nil
	}
	dir := filepath.Join(s.root, org, name)
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil, errRepoNotFound
	}
	var files []*fileEntry
	var walk func(abs, rel string) error
	walk = func(abs, rel string) error {
		des, err := os.ReadDir(abs)
		if err != nil {
			return fmt.Errorf("read repo dir %s: %w", abs, err)
		}
		for _, de := range des {
			n := de.Name()
			if strings.HasPrefix(n, ".hubtest") || n == ".git" || !validComponent(n) {
				continue
			}
			a := filepath.Join(abs, n)
			r := n
			if rel != "" {
				r = rel + "/" + n
			}
			if len(files) >= maxRepoEntries {
				return fmt.Errorf("repo %s/%s: more than %d entries", org, name, maxRepoEntries)
			}
			switch {
			case de.IsDir():
				// Real directories only: a symlinked directory could loop.
				files = append(files, &fileEntry{Path: r, Dir: true, abs: a})
				if err := walk(a, r); err != nil {
					return err
				}
			case de.Type().IsRegular() || de.Type()&fs.ModeSymlink != 0:
				st, err := os.Stat(a) // follows file symlinks (e.g. into an HF cache's blobs/)
				if err != nil || !st.Mode().IsRegular() {
					continue
				}
				files = append(files, &fileEntry{Path: r, Size: st.Size(), abs: a, modTime: st.ModTime()})
				if st.ModTime().After(snap.LastModified) {
					snap.LastModified = st.ModTime()
				}
			}
		}
		return nil
	}
	if err := walk(dir, ""); err != nil {
		return nil, err
	}
	for _, e := range files {
		if e.Dir {
			continue
		}
		e.LFS = s.isLFS(e.Path, e.Size)
		if sum, ok := set.DeclaredSHA256[e.Path]; ok && e.LFS {
			ptr := lfsPointer(sum, e.Size)
			e.SHA256, e.PointerSize, e.OID = sum, len(ptr), gitBlobSHA1(ptr)
			continue
		}
		if err := s.hashFile(e); err != nil {
			return nil, err
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	snap.Entries = files
	for _, e := range files {
		snap.byPath[e.Path] = e
		if e.LFS {
			if _, dup := snap.bySHA[e.SHA256]; !dup {
				snap.bySHA[e.SHA256] = e
			}
		}
	}
	root := treeOID(snap)
	snap.Commit = commitOID(root)
	return snap, nil
}

// repoSettings reads .hubtest.json (if any) and merges Options.Repos on top.
func (s *Server) repoSettings(org, name string) (RepoSettings, error) {
	var set RepoSettings
	p := filepath.Join(s.root, org, name, settingsFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&set); err != nil {
			return set, fmt.Errorf("parse %s: %w", p, err)
		}
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
	default:
		return set, fmt.Errorf("read %s: %w", p, err)
	}
	id := org + "/" + name
	if o, ok := s.opts.Repos[id]; ok {
		set = set.merge(o)
	}
	if to, ok := s.opts.Renames[id]; ok {
		set.RenamedTo = to
	}
	if err := set.validate(); err != nil {
		return set, fmt.Errorf("settings of %s: %w", id, err)
	}
	return set, nil
}

// defaultLFSExtensions are the file extensions stored in LFS regardless of size: the weight, archive and
// tokenizer-model patterns of the default .gitattributes the Hub writes into new repos (a subset).
var defaultLFSExtensions = []string{
	".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".model",
	".npy", ".npz", ".pkl", ".pickle", ".parquet", ".arrow", ".tar", ".tgz", ".gz", ".zip", ".zst", ".xz",
}

func (s *Server) isLFS(p string, size int64) bool {
	if size >= s.opts.LFSThreshold {
		return true
	}
	ext := strings.ToLower(path.Ext(p))
	for _, e := range s.opts.LFSExtensions {
		if ext == e {
			return true
		}
	}
	return false
}

// lfsPointer is the git-lfs pointer file stored in git for an LFS object (git-lfs spec v1). Its length is
// the Hub's `pointerSize` and its git blob sha1 the tree entry's `oid`.
func lfsPointer(sha256hex string, size int64) []byte {
	return []byte("version https://git-lfs.github.com/spec/v1\noid sha256:" + sha256hex + "\nsize " +
		strconv.FormatInt(size, 10) + "\n")
}

// gitBlobSHA1 is git's object id of a blob: sha1("blob <len>\x00" + content), hex.
func gitBlobSHA1(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

type hashKey struct {
	abs   string
	size  int64
	mtime int64
	lfs   bool
}

type hashVal struct{ sha1, sha256 string }

// hashFile fills OID (and SHA256/PointerSize for LFS files), from the cache when (path, size, mtime) match.
func (s *Server) hashFile(e *fileEntry) error {
	k := hashKey{e.abs, e.Size, e.modTime.UnixNano(), e.LFS}
	s.hashMu.Lock()
	v, ok := s.hashes[k]
	s.hashMu.Unlock()
	if !ok {
		r, err, _ := s.hashGroup.Do(fmt.Sprintf("%s\x00%d\x00%d\x00%t", k.abs, k.size, k.mtime, k.lfs), func() (any, error) {
			return hashContent(e.abs, e.Size, e.LFS)
		})
		if err != nil {
			return err
		}
		v = r.(hashVal)
		s.hashMu.Lock()
		if len(s.hashes) > 1<<16 {
			clear(s.hashes) // bounded: a long-running mirror over changing files never grows without limit
		}
		s.hashes[k] = v
		s.hashMu.Unlock()
	}
	if e.LFS {
		ptr := lfsPointer(v.sha256, e.Size)
		e.SHA256 = v.sha256
		e.PointerSize = len(ptr)
		e.OID = gitBlobSHA1(ptr)
	} else {
		e.OID = v.sha1
	}
	return nil
}

func hashContent(abs string, size int64, lfs bool) (hashVal, error) {
	f, err := os.Open(abs)
	if err != nil {
		return hashVal{}, fmt.Errorf("hash %s: %w", abs, err)
	}
	defer f.Close()
	var v hashVal
	if lfs {
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return v, fmt.Errorf("hash %s: %w", abs, err)
		}
		if n != size {
			return v, fmt.Errorf("hash %s: size changed while hashing (%d, was %d bytes)", abs, n, size)
		}
		v.sha256 = hex.EncodeToString(h.Sum(nil))
		return v, nil
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", size)
	n, err := io.Copy(h, f)
	if err != nil {
		return v, fmt.Errorf("hash %s: %w", abs, err)
	}
	if n != size {
		return v, fmt.Errorf("hash %s: size changed while hashing (%d, was %d bytes)", abs, n, size)
	}
	v.sha1 = hex.EncodeToString(h.Sum(nil))
	return v, nil
}

// treeOID computes git's tree object id of the root directory of snap and fills the OIDs of every
// directory entry. A git tree is "tree <len>\x00" followed by, per child sorted by name (a directory
// compares as name+"/"), "<mode> <name>\x00<20 raw sha1 bytes>"; mode 100644 for blobs (an LFS file is
// its pointer blob), 40000 for trees.
func treeOID(snap *snapshot) string {
	kids := map[string][]*fileEntry{} // parent dir ("" = root) -> children
	for _, e := range snap.Entries {
		parent, _ := splitParent(e.Path)
		kids[parent] = append(kids[parent], e)
	}
	var tree func(dir string) string
	tree = func(dir string) string {
		cs := kids[dir]
		for _, c := range cs {
			if c.Dir {
				c.OID = tree(c.Path)
			}
		}
		sortKey := func(c *fileEntry) string {
			_, n := splitParent(c.Path)
			if c.Dir {
				return n + "/"
			}
			return n
		}
		sort.Slice(cs, func(i, j int) bool { return sortKey(cs[i]) < sortKey(cs[j]) })
		var body bytes.Buffer
		for _, c := range cs {
			mode := "100644"
			if c.Dir {
				mode = "40000"
			}
			_, n := splitParent(c.Path)
			raw, _ := hex.DecodeString(c.OID)
			body.WriteString(mode + " " + n + "\x00")
			body.Write(raw)
		}
		h := sha1.New()
		fmt.Fprintf(h, "tree %d\x00", body.Len())
		h.Write(body.Bytes())
		return hex.EncodeToString(h.Sum(nil))
	}
	return tree("")
}

// splitParent splits "a/b/c" into ("a/b", "c") and "c" into ("", "c").
func splitParent(p string) (parent, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

// commitOID is the git commit id of a commit of tree `tree` with a fixed author, committer, date (the
// Unix epoch) and message: deterministic, and different whenever any path or content changes.
func commitOID(tree string) string {
	body := "tree " + tree + "\n" +
		"author hubtest <hubtest@lithos.invalid> 0 +0000\n" +
		"committer hubtest <hubtest@lithos.invalid> 0 +0000\n" +
		"\nhubtest snapshot\n"
	h := sha1.New()
	fmt.Fprintf(h, "commit %d\x00", len(body))
	io.WriteString(h, body)
	return hex.EncodeToString(h.Sum(nil))
}

// validComponent reports whether one path component may name a repo file: not empty, ".", "..", no
// slash, backslash, NUL or other control character.
func validComponent(c string) bool {
	if c == "" || c == "." || c == ".." {
		return false
	}
	for _, r := range c {
		if r < 0x20 || r == 0x7f || r == '/' || r == '\\' {
			return false
		}
	}
	return true
}
