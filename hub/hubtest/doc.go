// Package hubtest is a Hugging Face Hub-compatible HTTP server over a directory of model repos. Every
// test that fetches runs against it, and `lithos-pack hub serve DIR` exposes it as an offline mirror.
// It speaks the protocol as huggingface_hub does (shared/reference/hub-and-go.md Part A: A2 endpoints,
// A3 metadata headers, A6 errors, A7 rate limits, A10 etags), and it injects faults on demand.
//
// It imports only the standard library and golang.org/x/sync; it does not import package testing (Start
// takes the small TB interface), so linking it into a binary is cheap.
//
// # Layout
//
// ROOT/<org>/<name>/... is one model repo at one commit. Names starting with ".hubtest" and ".git"
// directories are not part of the repo; file symlinks are followed (a repo may point into an HF cache's
// blobs/), directory symlinks inside a repo are not (ROOT/<org>/<name> itself may be one). The optional
// ROOT/<org>/<name>/.hubtest.json holds RepoSettings ({"gated": "manual", "token": "..."}); Options.Repos
// and Options.Renames set the same from Go. Org names "api" and "cdn" are reserved by the URL scheme.
//
// Files with an LFS extension (Options.LFSExtensions: .safetensors, .bin, .pt, .gguf, ...) or of at least
// Options.LFSThreshold bytes (1 MiB) are LFS files: their git object is the git-lfs pointer
// ("version https://git-lfs.github.com/spec/v1\noid sha256:<hex>\nsize <n>\n"), whose length is
// `pointerSize` and whose git blob sha1 is the tree `oid`; their ETag is the sha256 of the content.
// Other files are regular git blobs, ETag = git blob sha1 = sha1("blob <len>\x00" + content).
// Directories get real git tree ids, and the commit id is the git id of a commit object over the root
// tree with a fixed author and date: deterministic, and it changes whenever any path or content changes.
// The only revisions are "main" and that commit id; anything else is RevisionNotFound. Hashes are cached
// by (path, size, mtime), so files may be changed under a running server; Serve hashes every repo in
// the background at start (Server.Warm) so that a large mirror's first requests do not wait for it.
//
// # Endpoints
//
//	GET  /api/models/{org}/{name}                       model info: _id, id, modelId, author, sha,
//	GET  /api/models/{org}/{name}/revision/{rev}          lastModified, createdAt, private, disabled,
//	                                                      gated (false|"auto"|"manual"), siblings
//	                                                      [{rfilename}], usedStorage; ?blobs=true adds
//	                                                      siblings' size, blobId, lfs{size,sha256,pointerSize};
//	                                                      ?expand=f&expand=g keeps only those fields (+_id, id)
//	GET  /api/models/{org}/{name}/tree/{rev}[/{dir}]    [{type, oid, size, path, lfs{oid,size,pointerSize}}],
//	                                                      ?recursive=true for all descendants (directories
//	                                                      included), ?expand=true adds lastCommit; sorted by
//	                                                      path; Options.PageSize per page, next page in
//	                                                      `Link: <abs-url?...&cursor=...>; rel="next"`
//	POST /api/models/{org}/{name}/paths-info/{rev}      form paths=a&paths=b[&expand=true]: tree entries of
//	                                                      the paths that exist, in request order
//	HEAD|GET /{org}/{name}/resolve/{rev}/{path}         regular file: 200 with the bytes, ETag "<git sha1>",
//	                                                      X-Repo-Commit, Content-Length, Range support.
//	                                                      LFS file: 302, absolute Location to the blob path,
//	                                                      X-Linked-Etag "<sha256>", X-Linked-Size,
//	                                                      X-Repo-Commit (and a short text body whose
//	                                                      Content-Length is NOT the file size)
//	HEAD|GET /cdn/{org}/{name}/{sha256}                 the LFS object: 200/206/416 with Range and
//	                                                      Content-Range (http.ServeContent), ETag "<sha256>";
//	                                                      X-Repo-Commit only when served on the API host
//	                                                      (see below); gated/private repos' blob URLs
//	                                                      carry an HMAC ?sig= (pre-signed, as CDN URLs are)
//
// Redirect targets: huggingface_hub 1.33 (checked with tools/hubinterop) follows a HEAD's redirect when
// the target has the same host name as the request (any port) or is a Hub host, and stops at a
// redirect to any other host (a CDN), reading the metadata from the 302 itself; older versions
// followed relative redirects only (hub-and-go.md A3). By default blobs are served on the API host, so
// the blob responses also carry X-Repo-Commit. With Options.BlobBaseURL on another host name (see
// StartWithBlobHost: 127.0.0.1 for the API, localhost for blobs) the blob host behaves as a CDN: no
// Hub headers, and clients must drop Authorization when following the redirect.
//
// The revision segment is unescaped on its own (huggingface_hub sends it with quote(rev, safe="")); the
// file path keeps its "/" separators. Every response has an X-Request-Id.
//
// # Errors
//
// As the Hub (hub-and-go.md A6): a JSON body {"error": "<message>"}, X-Error-Message, and X-Error-Code:
//
//   - RepoNotFound: 401 without an Authorization header, 404 with one (unknown repo, invalid repo id,
//     or a private repo the token does not open);
//   - RevisionNotFound: 404;
//   - EntryNotFound: 404 with X-Repo-Commit (resolve of a missing file, tree of a missing directory);
//   - GatedRepo: 401 without a token, 403 with a token not granted (resolve of a gated repo; model info
//     and tree stay public).
//
// With Options.ValidTokens set, an unknown bearer token gets 401 "Invalid credentials in Authorization
// header" without a code on every endpoint (an expired or revoked token on the Hub).
//
// Malformed paths (bad percent-encoding, "", ".", ".." components, backslashes, control characters) get
// 400; unknown endpoints 404 without a code; wrong methods 405. Request paths are never joined onto ROOT:
// files are looked up in the scanned listing.
//
// A renamed repo (RepoSettings.RenamedTo, Options.Renames) answers every endpoint with 307 and a relative
// Location under the new id, which clients must follow (hub-and-go.md A3 step 2).
//
// # Faults and records
//
// Server.Faults arms failures at run time: Status/RateLimit (429 with Retry-After and RateLimit headers,
// 503, ...) for the next N matching requests, DropAfter (close the connection after n body bytes),
// Corrupt (flip one byte, for sha256 checks), Stall (pause mid-body, for stall watchdogs). Targets are
// URL paths ("/api/models/o/n") or repo file keys ("o/n/path") that match both the resolve and the blob
// request of the file. Server.Requests records every request (host, Authorization, Range, status, bytes,
// fault) and Server.FileStats counts requests and bytes per file, so tests can assert that a resumed
// download did not fetch the whole file again or that the token never reached the blob host.
//
// # Not implemented
//
// Datasets and spaces, Xet (X-Xet-Hash, xet-read-token), gzip-encoded text responses, more than one
// commit per repo, branches and tags other than "main", the model-info `safetensors` summary, repos
// without an org.
package hubtest
