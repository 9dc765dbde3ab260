package convert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"lithos/hub"
)

// Source is where a checkpoint's files are read from: a local directory
// (a plain checkout, a `lithos-pack fetch` snapshot — HF cache or
// headers-only — or any folder) or a Hub repository read remotely with range
// requests. The audit only ever reads the small JSON files whole and the
// safetensors headers, never tensor data.
type Source interface {
	// String names the source in messages: a directory, or "repo@revision".
	String() string
	// ReadFile returns the whole of a small file (at most maxJSONBytes).
	// A missing file gives an error for which IsNotExist is true.
	ReadFile(ctx context.Context, name string) ([]byte, error)
	// Open opens a file for random access. A missing file gives an error
	// for which IsNotExist is true.
	Open(ctx context.Context, name string) (SourceFile, error)
	// List returns the names of the files at the top of the checkpoint.
	List(ctx context.Context) ([]string, error)
	// BytesFetched returns the bytes received over the network since the
	// source was created (0 for a local directory).
	BytesFetched() int64
}

// SourceFile is an open checkpoint file.
type SourceFile interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// maxJSONBytes bounds the JSON files an audit reads whole (config.json,
// hf_quant_config.json, the index): 64 MiB, as formats/safetensors bounds
// indexes.
const maxJSONBytes = 64 << 20

// IsNotExist reports whether err says a file is absent from a Source
// (fs.ErrNotExist locally, hub.ErrEntryNotFound remotely).
func IsNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, hub.ErrEntryNotFound)
}

// LocalSource reads a checkpoint directory. Symlinks (HF cache snapshots
// point into blobs/) are followed.
type LocalSource struct {
	Dir string
}

func (s LocalSource) String() string { return s.Dir }

func (s LocalSource) path(name string) (string, error) {
	if !fs.ValidPath(name) || strings.Contains(name, `\`) {
		return "", fmt.Errorf("%s: not a clean relative path", name)
	}
	return filepath.Join(s.Dir, filepath.FromSlash(name)), nil
}

// ReadFile implements Source.
func (s LocalSource) ReadFile(_ context.Context, name string) ([]byte, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxJSONBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if len(b) > maxJSONBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", p, maxJSONBytes)
	}
	return b, nil
}

type localFile struct {
	*os.File
	size int64
}

func (f localFile) Size() int64 { return f.size }

// Open implements Source.
func (s LocalSource) Open(_ context.Context, name string) (SourceFile, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	return localFile{File: f, size: st.Size()}, nil
}

// List implements Source.
func (s LocalSource) List(context.Context) ([]string, error) {
	ents, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// BytesFetched implements Source: a local read fetches nothing.
func (LocalSource) BytesFetched() int64 { return 0 }

// RemoteSource reads a Hub repository at one revision through range
// requests (hub.Client.OpenRemote). The revision is resolved to a commit on
// first use, so every file comes from the same commit.
type RemoteSource struct {
	Client   *hub.Client
	Repo     string
	Revision string // "" means "main"

	fetched atomic.Int64
	once    sync.Once
	commit  string
	err     error
}

// NewRemoteSource returns a source over repo at revision.
func NewRemoteSource(c *hub.Client, repo, revision string) *RemoteSource {
	if revision == "" {
		revision = "main"
	}
	return &RemoteSource{Client: c, Repo: repo, Revision: revision}
}

// api runs one Hub API call and counts the body bytes it received (the
// client's counter moves only through this source meanwhile, unless the
// client is shared by concurrent work).
func (s *RemoteSource) api(call func() error) error {
	before := s.Client.BytesFetched()
	err := call()
	s.fetched.Add(s.Client.BytesFetched() - before)
	return err
}

func (s *RemoteSource) String() string { return s.Repo + "@" + s.Revision }

// Commit resolves the revision (once).
func (s *RemoteSource) Commit(ctx context.Context) (string, error) {
	s.once.Do(func() {
		s.err = s.api(func() (err error) {
			s.commit, err = s.Client.ResolveCommit(ctx, s.Repo, s.Revision)
			return err
		})
	})
	return s.commit, s.err
}

// ReadFile implements Source.
func (s *RemoteSource) ReadFile(ctx context.Context, name string) ([]byte, error) {
	f, err := s.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Size() > maxJSONBytes {
		return nil, fmt.Errorf("%s/%s: %d bytes, larger than %d", s.Repo, name, f.Size(), maxJSONBytes)
	}
	b := make([]byte, f.Size())
	if len(b) == 0 {
		return b, nil
	}
	n, err := f.ReadAt(b, 0)
	if n == len(b) {
		return b, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return nil, fmt.Errorf("read %s/%s: %w", s.Repo, name, err)
}

// remoteFile adds the bytes its reads fetched to its source on Close.
type remoteFile struct {
	*hub.RemoteFile
	src    *RemoteSource
	closed atomic.Bool
}

func (f *remoteFile) Close() error {
	if !f.closed.Swap(true) {
		f.src.fetched.Add(f.BytesFetched())
	}
	return nil
}

// Open implements Source.
func (s *RemoteSource) Open(ctx context.Context, name string) (SourceFile, error) {
	commit, err := s.Commit(ctx)
	if err != nil {
		return nil, err
	}
	var f *hub.RemoteFile
	err = s.api(func() (err error) {
		f, err = s.Client.OpenRemote(ctx, s.Repo, commit, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &remoteFile{RemoteFile: f, src: s}, nil
}

// List implements Source (one tree listing).
func (s *RemoteSource) List(ctx context.Context) ([]string, error) {
	commit, err := s.Commit(ctx)
	if err != nil {
		return nil, err
	}
	var files []hub.RepoFile
	err = s.api(func() (err error) {
		files, err = s.Client.ListFiles(ctx, s.Repo, commit)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		if !strings.Contains(f.Path, "/") {
			out = append(out, f.Path)
		}
	}
	slices.Sort(out)
	return out, nil
}

// BytesFetched implements Source: the body bytes of this source's API calls
// and of the range reads of the files it opened and closed.
func (s *RemoteSource) BytesFetched() int64 { return s.fetched.Load() }

// OpenSource picks the source for a command-line argument: an existing
// directory (or a file inside one, e.g. its config.json) is read locally; a
// repo id whose snapshot is in the HF cache (hub.SnapshotDir) is read from
// there unless remote is true; any other repo id is read remotely through c.
func OpenSource(c *hub.Client, arg, revision string, remote bool) (Source, error) {
	if st, err := os.Stat(arg); err == nil {
		if !st.IsDir() {
			arg = filepath.Dir(arg)
		}
		return LocalSource{Dir: arg}, nil
	}
	if err := hub.ValidateRepoID(arg); err != nil {
		return nil, fmt.Errorf("%s: neither a directory nor a Hub repo id: %w", arg, err)
	}
	if c == nil {
		return nil, fmt.Errorf("%s: no Hub client to read the repo with", arg)
	}
	if !remote && c.CacheDir() != "" {
		rev := revision
		if rev == "" {
			rev = "main"
		}
		if dir, err := hub.SnapshotDir(c.CacheDir(), arg, rev); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
				return LocalSource{Dir: dir}, nil
			}
		}
	}
	return NewRemoteSource(c, arg, revision), nil
}
