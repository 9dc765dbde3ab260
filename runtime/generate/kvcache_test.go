package generate

import (
	"context"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/sample"
	"lithos/runtime/serve/servetest"
	"lithos/runtime/tokenizer"
)

// TestKVCacheReachesSessions: Request.KVCache is the KV cache type of the sessions Generate
// opens and of the options Options.Session gets (SessionOptions), "" the float32 cache.
func TestKVCacheReachesSessions(t *testing.T) {
	tok, err := tokenizer.Parse(gentest.TokenizerJSON())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := gentest.GoldenConfig("b")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	ft := &servetest.Target{Cfg: cfg, Tok: tok, EOS: gentest.IMEnd, Script: func(string) string { return "Hi there." },
		OnSession: func(opt backend.SessionOptions) { got = append(got, opt.KVCache) }}
	r := &Runner{Backend: cpu.Backend{}, Target: ft, Tokenizer: tok, EOS: []int32{gentest.IMEnd}}
	for _, c := range []struct{ kv, want string }{{"", backend.KVFloat32}, {backend.KVBF16, backend.KVBF16}} {
		got = nil
		req := Request{PromptIDs: []int32{1, 2, 3}, MaxTokens: 4, Context: 64, KVCache: c.kv, Sampling: sample.Params{TopP: 1}}
		if _, err := r.Generate(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != c.want {
			t.Fatalf("Request.KVCache %q: sessions opened with %q, want one with %q", c.kv, got, c.want)
		}
		if so := req.SessionOptions(); so.KVCache != c.kv {
			t.Fatalf("Request.KVCache %q: SessionOptions().KVCache %q", c.kv, so.KVCache)
		}
	}
}
