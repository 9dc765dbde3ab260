package generate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"lithos/pack"
	"lithos/runtime/backend"
)

// TestSelfCheckKVBF16: with sessions that ask for a BF16 KV cache (Options.Session), auto's
// first-use self-check runs the float32 check first, then its own sessions with the BF16
// cache — the probe too —, passes (the CPU reference rounds the same way), and caches its
// verdict, held to SelfCheckToleranceBF16, under a key that names the cache type; the float32
// cache's verdict is another file, checked on its own, and its key's JSON has no kv_cache field
// (the float32 key is what it was without the field).
func TestSelfCheckKVBF16(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	cache := t.TempDir()
	var kvs []string
	g := &fakeGPU{wrap: func(s backend.Session, opt backend.SessionOptions, _ int) backend.Session {
		kvs = append(kvs, opt.KVCache)
		return s
	}}
	if r := openKV(t, dir, cache, g, backend.KVBF16, nil); r.Backend.Name() != "fakegpu" {
		t.Fatalf("BF16 cache: auto chose %s", r.Backend.Name())
	}
	if want := []string{backend.KVBF16, "", "", backend.KVBF16, backend.KVBF16}; !slices.Equal(kvs, want) {
		t.Fatalf("GPU sessions' KV caches %q: want %q (the probe, the float32 part's two sessions, the BF16 part's two)", kvs, want)
	}
	if _, v := onlyVerdict(t, cache); !v.Pass || v.Key.KVCache != backend.KVBF16 || v.Tolerance != SelfCheckToleranceBF16 {
		t.Fatalf("verdict %+v: want a pass keyed by the BF16 cache, held to %g", v, SelfCheckToleranceBF16)
	}
	kvs = nil
	if r := openKV(t, dir, cache, g, "", nil); r.Backend.Name() != "fakegpu" {
		t.Fatalf("float32 cache: auto chose %s", r.Backend.Name())
	}
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

// TestSelfCheckKVBF16Failure: a GPU whose BF16-cache sessions give wrong tokens (its float32
// ones right) fails the BF16 check, and that failure is cached under the BF16 key: opened
// again with the BF16 cache, auto passes it over before loading it; opened with the float32
// cache, it is checked on its own, passes, and is kept.
func TestSelfCheckKVBF16Failure(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	cache := t.TempDir()
	g := &fakeGPU{wrap: func(s backend.Session, opt backend.SessionOptions, vocab int) backend.Session {
		if opt.KVCache == backend.KVBF16 {
			return shift(s, opt, vocab)
		}
		return s
	}}
	if r := openKV(t, dir, cache, g, backend.KVBF16, nil); r.Backend.Name() != "cpu" {
		t.Fatalf("BF16 cache with wrong tokens: auto kept %s", r.Backend.Name())
	}
	if _, v := onlyVerdict(t, cache); v.Pass || v.Key.KVCache != backend.KVBF16 {
		t.Fatalf("verdict %+v: want a failure keyed by the BF16 cache", v)
	}
	loads := g.loads
	if r := openKV(t, dir, cache, g, backend.KVBF16, nil); r.Backend.Name() != "cpu" || g.loads != loads {
		t.Fatalf("BF16 cache again: backend %s after %d GPU loads (%d before): want the cached failure, no load", r.Backend.Name(), g.loads, loads)
	}
	if r := openKV(t, dir, cache, g, "", nil); r.Backend.Name() != "fakegpu" {
		t.Fatalf("float32 cache: auto chose %s: want the GPU, whose float32 sessions are right", r.Backend.Name())
	}
}

// openKV opens dir under auto with g as the GPU, verdicts in cache, for greedy sessions with a
// KV cache of type kv (Options.Session), its log in logs (nil: discarded).
func openKV(t *testing.T, dir, cache string, g *fakeGPU, kv string, logs *bytes.Buffer) *Runner {
	t.Helper()
	so := &backend.SessionOptions{Sampling: greedy, KVCache: kv}
	if logs == nil {
		logs = new(bytes.Buffer)
	}
	r, err := openWith(context.Background(), dir, Options{Session: so, SelfCheckDir: cache, Log: logTo(logs, 0)}, autoCands(g, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestSelfCheckKVBF16Drift: the BF16 check holds its BF16 part to SelfCheckToleranceBF16 and
// its float32 part to SelfCheckTolerance. A GPU whose BF16-cache logits drift 2e-3 (the
// rounding flips of docs/performance.md §8.20) passes it; one whose BF16 logits drift 2e-2
// fails it, naming that bound; one whose float32-cache logits drift 2e-3 (its BF16 ones exact)
// fails it in the float32 part, which names the cache.
func TestSelfCheckKVBF16Drift(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	for _, c := range []struct {
		name     string
		eps      float32
		onBF16   bool
		pass     bool
		warnings []string
	}{
		{"bf16 drift 2e-3", 2e-3, true, true, nil},
		{"bf16 drift 2e-2", 2e-2, true, false, []string{"the prefill: logits differ from the CPU's by 0.02 relative", "tolerance 0.01"}},
		{"f32 drift 2e-3", 2e-3, false, false, []string{"with the float32 KV cache (checked first): the prefill: logits differ from the CPU's by 0.002 relative", "tolerance 0.001"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache := t.TempDir()
			g := &fakeGPU{wrap: func(s backend.Session, opt backend.SessionOptions, _ int) backend.Session {
				if (opt.KVCache == backend.KVBF16) == c.onBF16 {
					return &driftSession{s, c.eps}
				}
				return s
			}}
			var logs bytes.Buffer
			r := openKV(t, dir, cache, g, backend.KVBF16, &logs)
			_, v := onlyVerdict(t, cache)
			if v.Pass != c.pass || (r.Backend.Name() == "fakegpu") != c.pass || v.Tolerance != SelfCheckToleranceBF16 {
				t.Fatalf("backend %s, verdict %+v: want pass %v, tolerance %g", r.Backend.Name(), v, c.pass, SelfCheckToleranceBF16)
			}
			if c.pass && (v.MaxRelErr == nil || *v.MaxRelErr < 0.99*float64(c.eps)) {
				t.Errorf("max relative error %v: want the BF16 part's %g", v.MaxRelErr, c.eps)
			}
			warn := warnings(&logs)
			if c.pass != (len(warn) == 0) {
				t.Fatalf("warnings %q", warn)
			}
			for _, w := range c.warnings {
				if !strings.Contains(warn[0], w) {
					t.Errorf("warning %q: want it to contain %q", warn[0], w)
				}
			}
		})
	}
}

// TestSelfCheckKVBF16Fault: a GPU-side fault (a Decode error) in the BF16 check's float32
// part fails the verdict with a detail that names the float32 cache; one in its BF16 part
// does not name it.
func TestSelfCheckKVBF16Fault(t *testing.T) {
	dir := draftFixture(t, "b", pack.DraftBF16, 1)
	fault := errors.New("fake: kernel fault")
	for _, onBF16 := range []bool{false, true} {
		cache := t.TempDir()
		g := &fakeGPU{wrap: func(s backend.Session, opt backend.SessionOptions, vocab int) backend.Session {
			if opt.Capacity != probeCapacity && (opt.KVCache == backend.KVBF16) == onBF16 {
				return faulty(func(context.Context) error { return fault }, nil)(s, opt, vocab)
			}
			return s
		}}
		if r := openKV(t, dir, cache, g, backend.KVBF16, nil); r.Backend.Name() != "cpu" {
			t.Fatalf("fault in the BF16 part %v: auto kept %s", onBF16, r.Backend.Name())
		}
		_, v := onlyVerdict(t, cache)
		named := strings.HasPrefix(v.Detail, "with the float32 KV cache (checked first): the GPU failed during the check")
		if v.Pass || !strings.Contains(v.Error, fault.Error()) || named == onBF16 {
			t.Errorf("fault in the BF16 part %v: verdict %+v: want a failure whose detail names the float32 cache only for a fault there", onBF16, v)
		}
	}
}
