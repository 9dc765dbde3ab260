package hubtest

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"time"
)

type siblingLFS struct {
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	PointerSize int    `json:"pointerSize"`
}

type sibling struct {
	RFilename string      `json:"rfilename"`
	BlobID    string      `json:"blobId,omitempty"`
	Size      *int64      `json:"size,omitempty"`
	LFS       *siblingLFS `json:"lfs,omitempty"`
}

type modelInfo struct {
	MongoID      string    `json:"_id"`
	ID           string    `json:"id"`
	ModelID      string    `json:"modelId"`
	Author       string    `json:"author"`
	SHA          string    `json:"sha"`
	LastModified string    `json:"lastModified"`
	CreatedAt    string    `json:"createdAt"`
	Private      bool      `json:"private"`
	Disabled     bool      `json:"disabled"`
	Gated        any       `json:"gated"` // false | "auto" | "manual"
	Downloads    int       `json:"downloads"`
	Likes        int       `json:"likes"`
	Tags         []string  `json:"tags"`
	Siblings     []sibling `json:"siblings"`
	UsedStorage  int64     `json:"usedStorage"`
}

// hubTime formats t as the Hub does ("2024-05-01T12:00:00.000Z").
func hubTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request, snap *snapshot) {
	q := r.URL.Query()
	blobs := isTrue(q.Get("blobs"))
	idSum := sha1.Sum([]byte(snap.ID()))
	mi := modelInfo{
		MongoID: hex.EncodeToString(idSum[:12]), ID: snap.ID(), ModelID: snap.ID(), Author: snap.Org,
		SHA: snap.Commit, LastModified: hubTime(snap.LastModified), CreatedAt: hubTime(snap.LastModified),
		Private: snap.Settings.Private, Gated: false, Tags: []string{}, Siblings: []sibling{},
	}
	if snap.Settings.Gated != "" {
		mi.Gated = snap.Settings.Gated
	}
	for _, e := range snap.Entries {
		if e.Dir {
			continue
		}
		mi.UsedStorage += e.Size
		sb := sibling{RFilename: e.Path}
		if blobs {
			size := e.Size
			sb.BlobID, sb.Size = e.OID, &size
			if e.LFS {
				sb.LFS = &siblingLFS{Size: e.Size, SHA256: e.SHA256, PointerSize: e.PointerSize}
			}
		}
		mi.Siblings = append(mi.Siblings, sb)
	}
	expand := q["expand"]
	if len(expand) == 0 {
		writeJSON(w, http.StatusOK, mi)
		return
	}
	// ?expand=a&expand=b: only those fields, plus _id and id (as the Hub answers).
	b, _ := json.Marshal(mi)
	var all map[string]json.RawMessage
	json.Unmarshal(b, &all)
	out := map[string]json.RawMessage{"_id": all["_id"], "id": all["id"]}
	for _, f := range expand {
		if v, ok := all[f]; ok {
			out[f] = v
		}
	}
	writeJSON(w, http.StatusOK, out)
}

type treeLFS struct {
	OID         string `json:"oid"`
	Size        int64  `json:"size"`
	PointerSize int    `json:"pointerSize"`
}

type lastCommit struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Date  string `json:"date"`
}

type treeEntry struct {
	Type       string      `json:"type"` // "file" | "directory"
	OID        string      `json:"oid"`
	Size       int64       `json:"size"`
	Path       string      `json:"path"`
	LFS        *treeLFS    `json:"lfs,omitempty"`
	LastCommit *lastCommit `json:"lastCommit,omitempty"`
}

func (snap *snapshot) treeEntry(e *fileEntry, expand bool) treeEntry {
	te := treeEntry{Type: "file", OID: e.OID, Size: e.Size, Path: e.Path}
	if e.Dir {
		te.Type, te.Size = "directory", 0
	}
	if e.LFS {
		te.LFS = &treeLFS{OID: e.SHA256, Size: e.Size, PointerSize: e.PointerSize}
	}
	if expand {
		te.LastCommit = &lastCommit{ID: snap.Commit, Title: "hubtest snapshot", Date: hubTime(snap.LastModified)}
	}
	return te
}

func (s *Server) serveTree(w http.ResponseWriter, r *http.Request, snap *snapshot, rt route) {
	w.Header().Set("X-Repo-Commit", snap.Commit)
	q := r.URL.Query()
	recursive, expand := isTrue(q.Get("recursive")), isTrue(q.Get("expand"))
	prefix := ""
	if rt.path != "" {
		e := snap.byPath[rt.path]
		if e == nil || !e.Dir {
			writeError(w, http.StatusNotFound, "EntryNotFound", "Entry not found: "+rt.path+" is not a directory")
			return
		}
		prefix = rt.path + "/"
	}
	var list []*fileEntry
	for _, e := range snap.Entries {
		if !strings.HasPrefix(e.Path, prefix) {
			continue
		}
		if !recursive && strings.Contains(e.Path[len(prefix):], "/") {
			continue
		}
		list = append(list, e)
	}
	// Cursor pagination: the cursor is the last path of the previous page (base64url), entries are
	// sorted by path, so a page starts after it.
	if c := q.Get("cursor"); c != "" {
		last, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			writeError(w, http.StatusBadRequest, "", "Invalid cursor")
			return
		}
		i := sort.Search(len(list), func(i int) bool { return list[i].Path > string(last) })
		list = list[i:]
	}
	page := list
	if len(page) > s.opts.PageSize {
		page = page[:s.opts.PageSize]
		q.Set("cursor", base64.RawURLEncoding.EncodeToString([]byte(page[len(page)-1].Path)))
		next := s.baseURL(r) + r.URL.EscapedPath() + "?" + q.Encode()
		w.Header().Set("Link", "<"+next+`>; rel="next"`)
	}
	out := make([]treeEntry, 0, len(page))
	for _, e := range page {
		out = append(out, snap.treeEntry(e, expand))
	}
	writeJSON(w, http.StatusOK, out)
}

// maxFormBytes bounds a paths-info request body.
const maxFormBytes = 1 << 20

func (s *Server) servePathsInfo(w http.ResponseWriter, r *http.Request, snap *snapshot) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "", "Invalid form body: "+err.Error())
		return
	}
	w.Header().Set("X-Repo-Commit", snap.Commit)
	expand := isTrue(r.PostForm.Get("expand"))
	out := []treeEntry{}
	seen := map[string]bool{}
	for _, p := range r.PostForm["paths"] {
		p = strings.Trim(p, "/")
		if seen[p] {
			continue
		}
		seen[p] = true
		if !validRepoPath(p) {
			writeError(w, http.StatusBadRequest, "", "Invalid path: "+p)
			return
		}
		if e := snap.byPath[p]; e != nil {
			out = append(out, snap.treeEntry(e, expand))
		}
	}
	writeJSON(w, http.StatusOK, out)
}
