package generate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/sample"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openFixture(t *testing.T, opt gentest.Options) *Runner {
	t.Helper()
	dir, err := gentest.Bundle(context.Background(), t.TempDir(), opt)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(context.Background(), dir, "auto", quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func golden(t *testing.T) map[string][]int32 {
	t.Helper()
	i32, _, err := gentest.Goldens("b")
	if err != nil {
		t.Fatal(err)
	}
	return i32
}

var greedy = sample.Params{Temperature: 0, TopP: 1}

// TestGreedyMatchesTransformers runs the golden 11-token prompt through the whole host loop
// (prefill, decode rounds, ring drain) and requires transformers' 32 greedy tokens.
func TestGreedyMatchesTransformers(t *testing.T) {
	r := openFixture(t, gentest.Options{})
	g := golden(t)
	for _, chunk := range []int{0, 4} { // one prefill step; three steps of ≤ 4 rows
		res, err := r.Generate(context.Background(), Request{PromptIDs: g["prompt.11"], MaxTokens: 32, Sampling: greedy, PrefillChunk: chunk})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Tokens, g["greedy.11"]) {
			t.Fatalf("prefill chunk %d: tokens %v, transformers %v", chunk, res.Tokens, g["greedy.11"])
		}
		if res.FinishReason != FinishLength || res.PromptTokens != 11 || res.Rounds != 31 || res.TokensPerRound != 1 {
			t.Errorf("result %+v: want finish length, 11 prompt tokens, 31 rounds of 1 token", res)
		}
		if !(res.PrefillTokPerS > 0 && res.DecodeTokPerS > 0) {
			t.Errorf("rates %v, %v: want positive", res.PrefillTokPerS, res.DecodeTokPerS)
		}
	}
	// The 200-token prompt crosses the 64-row GDN chunk and the 128-row prefill step.
	res, err := r.Generate(context.Background(), Request{PromptIDs: g["prompt.200"], MaxTokens: 32, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, g["greedy.200"]) {
		t.Fatalf("200-token prompt: tokens %v, transformers %v", res.Tokens, g["greedy.200"])
	}
}

// TestStopsOnEOS makes a greedy token an EOS id (generation_config.json) and expects the
// tokens before it and finish_reason eos.
func TestStopsOnEOS(t *testing.T) {
	g := golden(t)
	want := g["greedy.11"]
	at := -1
	for i := 2; i < len(want); i++ {
		if !slices.Contains(want[:i], want[i]) {
			at = i
			break
		}
	}
	if at < 0 {
		t.Fatal("no greedy token that appears first after position 2")
	}
	r := openFixture(t, gentest.Options{EOS: []int{gentest.EndOfText, int(want[at])}})
	if !slices.Contains(r.EOS, want[at]) {
		t.Fatalf("EOS %v does not hold %d", r.EOS, want[at])
	}
	res, err := r.Generate(context.Background(), Request{PromptIDs: g["prompt.11"], MaxTokens: 32, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	if res.FinishReason != FinishEOS || !slices.Equal(res.Tokens, want[:at]) {
		t.Fatalf("finish %s, tokens %v; want eos after %v", res.FinishReason, res.Tokens, want[:at])
	}
}

// TestStopStrings generates text, then asks to stop at a piece of it: the text must end just
// before the piece's first occurrence, the streamed text must equal the result's, and
// streaming must never have shown the stop string.
func TestStopStrings(t *testing.T) {
	r := openFixture(t, gentest.Options{})
	ctx := context.Background()
	base := Request{Prompt: "the cat sat on the mat", MaxTokens: 40, Sampling: greedy}
	full, err := r.Generate(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Text) < 12 {
		t.Fatalf("generated text %q is too short to test stop strings", full.Text)
	}
	stop := string([]rune(full.Text)[8:11]) // three characters from the middle of the text
	req := base
	req.Stop = []string{"\x00never", stop}
	var streamed strings.Builder
	req.OnText = func(s string) error { streamed.WriteString(s); return nil }
	res, err := r.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(full.Text, stop)
	if res.FinishReason != FinishStop || res.Text != full.Text[:cut] {
		t.Fatalf("finish %s, text %q; want stop, %q", res.FinishReason, res.Text, full.Text[:cut])
	}
	if streamed.String() != res.Text {
		t.Errorf("streamed %q, result %q", streamed.String(), res.Text)
	}
	if !slices.Equal(res.Tokens, full.Tokens[:len(res.Tokens)]) || len(res.Tokens) >= len(full.Tokens) {
		t.Errorf("tokens %v are not a proper prefix of %v", res.Tokens, full.Tokens)
	}
	// Without stop strings the streamed text is the whole text.
	streamed.Reset()
	req.Stop = nil
	if res, err = r.Generate(ctx, req); err != nil {
		t.Fatal(err)
	}
	if streamed.String() != full.Text || res.Text != full.Text {
		t.Errorf("streamed %q / %q, want %q", streamed.String(), res.Text, full.Text)
	}
}

// TestContext: a prompt that fills the context is refused before any work; a context just
// larger than the prompt ends generation with finish_reason context, the tokens being
// transformers' greedy prefix.
func TestContext(t *testing.T) {
	r := openFixture(t, gentest.Options{})
	g := golden(t)
	ctx := context.Background()
	prompt := g["prompt.11"]
	if _, err := r.Generate(ctx, Request{PromptIDs: prompt, MaxTokens: 4, Sampling: greedy, Context: 11}); err == nil || !strings.Contains(err.Error(), "context of 11") {
		t.Fatalf("prompt of 11 in a context of 11: %v", err)
	}
	res, err := r.Generate(ctx, Request{PromptIDs: prompt, MaxTokens: 32, Sampling: greedy, Context: 14})
	if err != nil {
		t.Fatal(err)
	}
	// Positions 11, 12, 13 are fed (3 decode rounds) after the prefill's token: 4 tokens.
	if res.FinishReason != FinishContext || !slices.Equal(res.Tokens, g["greedy.11"][:4]) {
		t.Fatalf("finish %s, tokens %v; want context, %v", res.FinishReason, res.Tokens, g["greedy.11"][:4])
	}
	if r.MaxContext != 4096 {
		t.Errorf("max context %d, the config says 4096", r.MaxContext)
	}
}

// TestSeeded: a fixed seed gives a fixed output; another seed another output.
func TestSeeded(t *testing.T) {
	r := openFixture(t, gentest.Options{})
	g := golden(t)
	ctx := context.Background()
	run := func(seed uint64) []int32 {
		res, err := r.Generate(ctx, Request{PromptIDs: g["prompt.11"], MaxTokens: 24, Sampling: sample.Params{Temperature: 1.5, TopK: 50, TopP: 0.95, Seed: seed}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Tokens
	}
	a, b, c := run(42), run(42), run(43)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 42 twice: %v, %v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 42 and 43 gave the same tokens %v", a)
	}
	if slices.Equal(a, g["greedy.11"][:24]) {
		t.Errorf("sampling at temperature 1.5 reproduced the greedy continuation")
	}
}

func TestCancel(t *testing.T) {
	r := openFixture(t, gentest.Options{})
	g := golden(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	res, err := r.Generate(ctx, Request{PromptIDs: g["prompt.11"], MaxTokens: 32, Sampling: greedy,
		OnToken: func(int32) error {
			if n++; n == 3 {
				cancel()
			}
			return nil
		}})
	if !errors.Is(err, context.Canceled) || res == nil || res.FinishReason != FinishCancelled {
		t.Fatalf("result %+v, error %v: want cancelled", res, err)
	}
	if len(res.Tokens) < 3 || len(res.Tokens) > 4 || !slices.Equal(res.Tokens, g["greedy.11"][:len(res.Tokens)]) {
		t.Errorf("tokens after cancelling at the third: %v", res.Tokens)
	}
}

// TestChat renders the fixture's ChatML template and checks the prompt's tokens.
func TestChat(t *testing.T) {
	r := openFixture(t, gentest.Options{})
	ids, err := r.Tokens(&Request{Prompt: "hi there", Chat: true})
	if err != nil {
		t.Fatal(err)
	}
	want, err := r.Tokenizer.Encode("<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(want) || ids[0] != gentest.IMStart {
		t.Fatalf("chat prompt %v, want %v", ids, want)
	}
	for i := range want {
		if int(ids[i]) != want[i] {
			t.Fatalf("chat prompt %v, want %v", ids, want)
		}
	}
	if !slices.Contains(ids, gentest.IMEnd) {
		t.Errorf("chat prompt %v has no <|im_end|>", ids)
	}
	if _, err := r.Generate(context.Background(), Request{Prompt: "hi", Chat: true, MaxTokens: 3, Sampling: greedy}); err != nil {
		t.Fatal(err)
	}
}

// TestBadRequests: every bad request is an error before any work, naming the problem.
func TestBadRequests(t *testing.T) {
	r := openFixture(t, gentest.Options{})
	ctx := context.Background()
	cases := []struct {
		req  Request
		want string
	}{
		{Request{MaxTokens: 4, Sampling: greedy}, "empty prompt"},
		{Request{PromptIDs: []int32{}, MaxTokens: 4, Sampling: greedy}, "empty prompt"},
		{Request{PromptIDs: []int32{1, 608}, MaxTokens: 4, Sampling: greedy}, "608"},
		{Request{PromptIDs: []int32{-1}, MaxTokens: 4, Sampling: greedy}, "-1"},
		{Request{PromptIDs: []int32{1}, MaxTokens: 0, Sampling: greedy}, "max tokens"},
		{Request{PromptIDs: []int32{1}, MaxTokens: 4, Sampling: sample.Params{Temperature: -1, TopP: 1}}, "temperature"},
		{Request{PromptIDs: []int32{1}, MaxTokens: 4, Sampling: sample.Params{TopP: 0}}, "top-p"},
		{Request{PromptIDs: []int32{1}, Chat: true, MaxTokens: 4, Sampling: greedy}, "--chat"},
		{Request{PromptIDs: []int32{1}, MaxTokens: 4, Sampling: greedy, Stop: []string{""}}, "stop string"},
		{Request{PromptIDs: []int32{1}, MaxTokens: 4, Sampling: greedy, Context: -3}, "context"},
	}
	for _, c := range cases {
		res, err := r.Generate(ctx, c.req)
		if err == nil || res != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: result %v, error %v; want an error naming %q", c.req, res, err, c.want)
		}
	}
	// Without a tokenizer: ids work, text does not.
	nt := openFixture(t, gentest.Options{NoTokenizer: true})
	if _, err := nt.Generate(ctx, Request{Prompt: "hello", MaxTokens: 2, Sampling: greedy}); err == nil || !strings.Contains(err.Error(), "no tokenizer.json") {
		t.Errorf("text prompt without a tokenizer: %v", err)
	}
	if res, err := nt.Generate(ctx, Request{PromptIDs: []int32{1, 2, 300}, MaxTokens: 2, Sampling: greedy}); err != nil || len(res.Tokens) != 2 || res.Text != "" {
		t.Errorf("ids without a tokenizer: %+v, %v", res, err)
	}
}

// TestOtherArchitecture: a bundle whose target is not a Qwen3.5 hybrid is refused at Open.
func TestOtherArchitecture(t *testing.T) {
	dir, err := gentest.Bundle(context.Background(), t.TempDir(), gentest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "manifest.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m["target"].(map[string]any)["architecture"] = "LlamaForCausalLM"
	if data, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), dir, "cpu", quiet()); err == nil || !strings.Contains(err.Error(), "LlamaForCausalLM") {
		t.Fatalf("Open of a Llama bundle: %v", err)
	}
	if _, err := Open(context.Background(), dir, "metal", quiet()); err == nil || !strings.Contains(err.Error(), "metal") {
		t.Fatalf("backend metal: %v", err)
	}
}

func TestParseIDs(t *testing.T) {
	ids, err := ParseIDs(" 1, 2,3 ")
	if err != nil || !slices.Equal(ids, []int32{1, 2, 3}) {
		t.Fatalf("ParseIDs: %v, %v", ids, err)
	}
	for _, s := range []string{"", " ", "1,,2", "1,", "a", "1.5", "-1", "2147483648", "99999999999999999999", "0x10"} {
		if _, err := ParseIDs(s); err == nil {
			t.Errorf("ParseIDs(%q) accepted", s)
		}
	}
}

func FuzzParseIDs(f *testing.F) {
	for _, s := range []string{"1,2,3", "", "1,,", "-0", " 7 ", "2147483647"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := ParseIDs(s)
		if err != nil {
			return
		}
		if len(ids) == 0 {
			t.Fatalf("%q: no ids and no error", s)
		}
		for _, id := range ids {
			if id < 0 {
				t.Fatalf("%q: negative id %d", s, id)
			}
		}
	})
}

// busyTarget is a target whose Close reports that the device may still be running.
type busyTarget struct {
	backend.Target
	busy bool
}

func (b *busyTarget) Close() error {
	inner := b.Target.Close()
	if b.busy {
		return errors.Join(inner, fmt.Errorf("fake: close: %w", gpu.ErrDeviceBusy))
	}
	return inner
}

// TestCloseKeepsMappingWhenBusy: Runner.Close unmaps the bundle, except when the target says
// the device may still be using its memory (gpu.ErrDeviceBusy): then the mapping stays and
// the error is returned.
func TestCloseKeepsMappingWhenBusy(t *testing.T) {
	for _, busy := range []bool{false, true} {
		r := openFixture(t, gentest.Options{})
		r.Target = &busyTarget{Target: r.Target, busy: busy}
		err := r.Close()
		if busy {
			if !errors.Is(err, gpu.ErrDeviceBusy) {
				t.Fatalf("busy: Close = %v, want an error wrapping gpu.ErrDeviceBusy", err)
			}
			if r.Bundle.Weights() == nil {
				t.Fatal("busy: the bundle was unmapped under a busy device")
			}
			r.Bundle.Close()
			continue
		}
		if err != nil {
			t.Fatalf("Close = %v", err)
		}
		if r.Bundle.Weights() != nil {
			t.Fatal("the bundle is still mapped after Close")
		}
	}
}
