package generate

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"lithos/pack"
	"lithos/runtime/backend"
)

// TestSelfCheckKVBF16: with sessions that ask for a BF16 KV cache (Options.Session), auto's
// first-use self-check runs every GPU session — the probe and the check's — with it, passes
// (the CPU reference rounds the same way), and caches its verdict under a key that names the
// cache type; the float32 cache's verdict is another file, checked on its own, and its key's
// JSON has no kv_cache field (the files of verdicts cached before the field keep their names).
func TestSelfCheckKVBF16(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	cache := t.TempDir()
	var kvs []string
	g := &fakeGPU{wrap: func(s backend.Session, opt backend.SessionOptions, _ int) backend.Session {
		kvs = append(kvs, opt.KVCache)
		return s
	}}
	open := func(kv string) *Runner {
		var logs bytes.Buffer
		so := &backend.SessionOptions{Sampling: greedy, KVCache: kv}
		r, err := openWith(context.Background(), dir, Options{Session: so, SelfCheckDir: cache, Log: logTo(&logs, 0)}, autoCands(g, nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		if r.Backend.Name() != "fakegpu" {
			t.Fatalf("KV cache %q: auto chose %s: %s", kv, r.Backend.Name(), logs.String())
		}
		return r
	}
	open(backend.KVBF16)
	if len(kvs) != 3 || slices.IndexFunc(kvs, func(k string) bool { return k != backend.KVBF16 }) >= 0 {
		t.Fatalf("GPU sessions' KV caches %q: want bf16 for the probe and both check sessions", kvs)
	}
	_, v := onlyVerdict(t, cache)
	if !v.Pass || v.Key.KVCache != backend.KVBF16 {
		t.Fatalf("verdict %+v: want a pass keyed by the BF16 cache", v)
	}
	kvs = nil
	open("")
	if len(kvs) != 3 || slices.IndexFunc(kvs, func(k string) bool { return k != "" && k != backend.KVFloat32 }) >= 0 {
		t.Fatalf("float32 cache after a BF16 verdict: GPU sessions' KV caches %q: want a check of its own (3 sessions, f32)", kvs)
	}
	vs := verdicts(t, cache)
	if len(vs) != 2 {
		t.Fatalf("%d verdict files: want 2 (one per cache type)", len(vs))
	}
	for f, v := range vs {
		data, _ := json.Marshal(v.Key)
		if (v.Key.KVCache == "") == strings.Contains(string(data), "kv_cache") || !v.Pass {
			t.Errorf("%s: key %s, pass %v", f, data, v.Pass)
		}
	}
}
