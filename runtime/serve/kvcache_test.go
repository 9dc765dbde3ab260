package serve

import (
	"slices"
	"sync"
	"testing"

	"lithos/runtime/backend"
)

// TestKVCacheOption: Options.KVCache reaches every session the server opens — its probe and
// each request's — and the default is the float32 cache.
func TestKVCacheOption(t *testing.T) {
	for _, kv := range []string{"", backend.KVBF16} {
		var mu sync.Mutex
		var got []string
		ts := newTestServer(t, Options{KVCache: kv}, func(ft *fakeTarget) {
			ft.OnSession = func(opt backend.SessionOptions) {
				mu.Lock()
				got = append(got, opt.KVCache)
				mu.Unlock()
			}
		})
		for range 2 {
			if code, _, body := ts.post(t, "/v1/chat/completions", `{"model":"tiny","messages":[{"role":"user","content":"Hi"}]}`); code != 200 {
				t.Fatalf("status %d: %s", code, body)
			}
		}
		want := kv
		if want == "" {
			want = backend.KVFloat32
		}
		mu.Lock()
		opened := slices.Clone(got)
		mu.Unlock()
		if len(opened) < 2 || slices.IndexFunc(opened, func(s string) bool { return s != want }) >= 0 {
			t.Fatalf("KVCache %q: the sessions opened had %q, want %q each (the probe and the requests')", kv, opened, want)
		}
	}
}
