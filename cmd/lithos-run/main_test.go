package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"lithos/runtime/backend/cuda"
	"lithos/runtime/generate"
	"lithos/runtime/generate/gentest"
)

var (
	fixtureOnce sync.Once
	fixtureDir  string
	fixtureErr  error
	fixtureTmp  string
)

func TestMain(m *testing.M) {
	if os.Getenv("LITHOS_RUN_AS_MAIN") == "1" { // the signal test runs this binary as lithos-run
		main()
		return
	}
	code := m.Run()
	if fixtureTmp != "" {
		os.RemoveAll(fixtureTmp)
	}
	os.Exit(code)
}

// fixture packs the golden checkpoint b with the fixture tokenizer, chat template and
// generation_config (EOS <|im_end|>, <|endoftext|>) once per test binary.
func fixture(t testing.TB) string {
	t.Helper()
	fixtureOnce.Do(func() {
		if fixtureTmp, fixtureErr = os.MkdirTemp("", "lithos-run-test-"); fixtureErr != nil {
			return
		}
		fixtureDir, fixtureErr = gentest.Bundle(context.Background(), fixtureTmp, gentest.Options{EOS: []int{gentest.IMEnd, gentest.EndOfText}})
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixtureDir
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func idsArg(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// TestGenerateJSONMatchesTransformers: `lithos-run generate BUNDLE --prompt-ids … --json` prints
// exactly one JSON object whose tokens are transformers' greedy continuation (the golden
// model never emits the fixture's EOS ids in it).
func TestGenerateJSONMatchesTransformers(t *testing.T) {
	dir := fixture(t)
	i32, _, err := gentest.Goldens("b")
	if err != nil {
		t.Fatal(err)
	}
	want := i32["greedy.11"]
	if slices.Contains(want, gentest.IMEnd) || slices.Contains(want, gentest.EndOfText) {
		t.Fatal("the golden continuation holds an EOS id of the fixture")
	}
	for _, args := range [][]string{
		{"generate", dir, "--prompt-ids", idsArg(i32["prompt.11"]), "--max-tokens", "32", "--json", "--no-draft"},
		{dir, "--prompt-ids", idsArg(i32["prompt.11"]), "--max-tokens", "32", "--json", "--backend", "cpu"},
	} {
		code, stdout, stderr := runCLI(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", args, code, stderr)
		}
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.DisallowUnknownFields()
		var res generate.Result
		if err := dec.Decode(&res); err != nil {
			t.Fatalf("stdout %q: %v", stdout, err)
		}
		if dec.More() {
			t.Fatalf("stdout holds more than one JSON value: %q", stdout)
		}
		var keys map[string]any
		json.Unmarshal([]byte(stdout), &keys)
		for _, k := range []string{"prompt_tokens", "tokens", "text", "finish_reason", "prefill_tok_per_s", "decode_tok_per_s", "rounds", "tokens_per_round", "backend"} {
			if _, ok := keys[k]; !ok {
				t.Errorf("JSON has no %q: %s", k, stdout)
			}
		}
		// The backend that ran it: cpu when named, and for auto without a usable GPU.
		wantBE := "cpu"
		if !slices.Contains(args, "cpu") && cuda.RunsModels && cuda.Usable() == nil {
			wantBE = "cuda"
		}
		if res.Backend != wantBE || !strings.Contains(stderr, "backend "+wantBE) {
			t.Errorf("%v: backend %q, stderr %s: want %s", args, res.Backend, stderr, wantBE)
		}
		if !slices.Equal(res.Tokens, want) || res.FinishReason != "length" || res.PromptTokens != 11 {
			t.Fatalf("%v: %+v; want tokens %v, finish length", args, res, want)
		}
		if !strings.Contains(stderr, "11 prompt tokens, 32 generated") {
			t.Errorf("stderr has no statistics line: %s", stderr)
		}
	}
}

// TestGenerateStreamsText: without --json, stdout is the streamed text (plus a final newline),
// identical to the JSON text of the same greedy run.
func TestGenerateStreamsText(t *testing.T) {
	dir := fixture(t)
	args := []string{dir, "--prompt", "the cat sat on the mat", "--max-tokens", "20"}
	code, text, stderr := runCLI(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, js, stderr := runCLI(append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res generate.Result
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatal(err)
	}
	if text != res.Text+"\n" || res.Text == "" {
		t.Fatalf("streamed %q, JSON text %q", text, res.Text)
	}
	// A stop string from the middle of that text.
	stop := string([]rune(res.Text)[5:8])
	code, cut, _ := runCLI(append(args, "--stop", stop)...)
	if want := res.Text[:strings.Index(res.Text, stop)] + "\n"; code != 0 || cut != want {
		t.Fatalf("--stop %q: exit %d, stdout %q, want %q", stop, code, cut, want)
	}
	// --chat and sampling flags run.
	code, js, stderr = runCLI(dir, "--prompt", "hi", "--chat", "--max-tokens", "5", "--temperature", "0.8", "--top-p", "0.9", "--top-k", "40", "--seed", "7", "--json")
	if code != 0 {
		t.Fatalf("--chat: exit %d: %s", code, stderr)
	}
	code2, js2, _ := runCLI(dir, "--prompt", "hi", "--chat", "--max-tokens", "5", "--temperature", "0.8", "--top-p", "0.9", "--top-k", "40", "--seed", "7", "--json")
	var a, b generate.Result
	json.Unmarshal([]byte(js), &a)
	json.Unmarshal([]byte(js2), &b)
	if code2 != 0 || !slices.Equal(a.Tokens, b.Tokens) {
		t.Errorf("seed 7 twice: %v, %v", a.Tokens, b.Tokens)
	}
}

// TestBadInput: every bad command line exits 1 with a clear message on stderr (and, with
// --json, one {"error": …} object on stdout), and never panics.
func TestBadInput(t *testing.T) {
	dir := fixture(t)
	long := make([]int32, 50)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{dir}, "no prompt"},
		{[]string{dir, "--prompt", ""}, "empty prompt"},
		{[]string{dir, "--prompt-ids", ""}, "empty prompt"},
		{[]string{dir, "--prompt", "a", "--prompt-ids", "1"}, "not both"},
		{[]string{dir, "--prompt-ids", "1,,2"}, "token id 1 is empty"},
		{[]string{dir, "--prompt-ids", "1,x"}, "not an integer"},
		{[]string{dir, "--prompt-ids", "-5"}, "out of range"},
		{[]string{dir, "--prompt-ids", "608"}, "vocabulary [0, 608)"},
		{[]string{dir, "--prompt-ids", "1", "--chat"}, "--chat"},
		{[]string{dir, "--prompt-ids", idsArg(long), "--context", "40"}, "50 tokens"},
		{[]string{dir, "--prompt-ids", "1", "--max-tokens", "0"}, "--max-tokens"},
		{[]string{dir, "--prompt-ids", "1", "--temperature", "-1"}, "temperature"},
		{[]string{dir, "--prompt-ids", "1", "--temperature", "NaN"}, "temperature"},
		{[]string{dir, "--prompt-ids", "1", "--top-p", "0"}, "top-p"},
		{[]string{dir, "--prompt-ids", "1", "--top-p", "2"}, "top-p"},
		{[]string{dir, "--prompt-ids", "1", "--top-k", "-1"}, "top-k"},
		{[]string{dir, "--prompt-ids", "1", "--backend", "metal"}, "metal"},
		{[]string{dir, "--prompt-ids", "1", "--stop", ""}, "stop string"},
		{[]string{dir, "--prompt-ids", "1", "--context", "-1"}, "negative"},
		{[]string{dir, "--prompt-ids", "1", "--context", "99999999999"}, "at most"},
		{[]string{filepath.Join(dir, "nope"), "--prompt-ids", "1"}, "nope"},
		{[]string{"generate"}, "accepts 1 arg"},
		{[]string{"a", "b"}, "accepts at most 1 arg"},
		{[]string{dir, "--max-tokens", "lots"}, "invalid argument"},
		{[]string{dir, "--bogus"}, "unknown flag"},
	}
	for _, c := range cases {
		for _, js := range []bool{false, true} {
			args := c.args
			if js {
				args = append(slices.Clone(args), "--json")
			}
			code, stdout, stderr := runCLI(args...)
			if code != 1 || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "internal error") || strings.Contains(stderr, "goroutine") {
				t.Errorf("%q: exit %d, stderr %q; want exit 1 and %q", args, code, stderr, c.want)
				continue
			}
			if js && !strings.Contains(strings.Join(args, " "), "--bogus") && !strings.Contains(stderr, "accepts") && !strings.Contains(stderr, "invalid argument") {
				var e map[string]string
				if err := json.Unmarshal([]byte(stdout), &e); err != nil || !strings.Contains(e["error"], c.want) {
					t.Errorf("%q: stdout %q, want one {\"error\": …} naming %q", args, stdout, c.want)
				}
			} else if !js && stdout != "" {
				t.Errorf("%q: stdout %q, want nothing", args, stdout)
			}
		}
	}
}

// FuzzCommandLine runs lithos-run on the fixture with fuzzed flag values: it must exit 0 or 1
// (never panic, never report an internal error).
func FuzzCommandLine(f *testing.F) {
	f.Add("1,2,3", "4", "0", "1", "0", "", false)
	f.Add("x", "-1", "NaN", "0", "5", "a", true)
	f.Add("1,607", "2", "1e308", "0.5", "1000000", "\x00", false)
	f.Fuzz(func(t *testing.T, ids, maxTok, temp, topP, topK, stop string, chat bool) {
		dir := fixture(t)
		args := []string{dir, "--prompt-ids", ids, "--max-tokens", maxTok, "--temperature", temp, "--top-p", topP, "--top-k", topK, "--json"}
		if stop != "" {
			args = append(args, "--stop", stop)
		}
		if chat {
			args = append(args, "--chat")
		}
		if n, err := strconv.Atoi(maxTok); err == nil && n > 8 {
			return // keep each run short
		}
		code, stdout, stderr := runCLI(args...)
		if (code != 0 && code != 1) || strings.Contains(stderr, "internal error") {
			t.Fatalf("%q: exit %d, stderr %s", args, code, stderr)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(stdout), &v); err != nil && !strings.Contains(stderr, "invalid argument") {
			t.Fatalf("%q: stdout %q is not one JSON object (%v); stderr %s", args, stdout, err, stderr)
		}
	})
}

// TestCancelledContext: a cancelled context ends generation with finish_reason cancelled, the
// partial result printed and exit status 130.
func TestCancelledContext(t *testing.T) {
	dir := fixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var o, e bytes.Buffer
	code := run(ctx, []string{dir, "--prompt-ids", "1,2,3", "--json"}, &o, &e)
	var res generate.Result
	if err := json.Unmarshal(o.Bytes(), &res); err != nil || code != exitInterrupted || res.FinishReason != generate.FinishCancelled {
		t.Fatalf("exit %d, stdout %q (%v), stderr %q; want 130 and finish_reason cancelled", code, o.String(), err, e.String())
	}
}

// TestInterruptSignal runs this test binary as lithos-run, sends SIGINT once text has started
// to stream, and expects exit status 130.
func TestInterruptSignal(t *testing.T) {
	dir := fixture(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, dir, "--prompt", "the cat", "--max-tokens", "1000000")
	cmd.Env = append(os.Environ(), "LITHOS_RUN_AS_MAIN=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := io.ReadFull(out, buf); err != nil {
		cmd.Process.Kill()
		t.Fatalf("no output before the signal: %v; stderr %s", err, stderr.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted || !strings.Contains(stderr.String(), "(cancelled)") {
		t.Fatalf("after SIGINT: %v; stderr %s", err, stderr.String())
	}
}

var (
	draftOnce sync.Once
	draftDir  string
	draftErr  error
)

// draftFixture packs the fixture with a random DSpark head (gentest.WriteDraft) in its NVFP4
// re-export, once per test binary.
func draftFixture(t testing.TB) string {
	t.Helper()
	fixture(t) // fixtureTmp
	draftOnce.Do(func() {
		tmp := filepath.Join(fixtureTmp, "draft")
		if draftErr = os.Mkdir(tmp, 0o755); draftErr != nil {
			return
		}
		head := filepath.Join(tmp, "head")
		if draftErr = gentest.WriteDraft(head, gentest.DraftFor(gentest.VocabSize, 256, 4), 5); draftErr != nil {
			return
		}
		draftDir, draftErr = gentest.Bundle(context.Background(), tmp, gentest.Options{EOS: []int{gentest.IMEnd, gentest.EndOfText}, Draft: head})
	})
	if draftErr != nil {
		t.Fatal(draftErr)
	}
	return draftDir
}

// TestGenerateSpeculativeJSON: on a bundle with a draft head, `--json` carries the round
// telemetry under "speculative" and the tokens are transformers' greedy continuation, as with
// --no-draft (whose "speculative" is null); the statistics line names the rounds.
func TestGenerateSpeculativeJSON(t *testing.T) {
	dir := draftFixture(t)
	i32, _, err := gentest.Goldens("b")
	if err != nil {
		t.Fatal(err)
	}
	for _, noDraft := range []bool{false, true} {
		args := []string{"generate", dir, "--prompt-ids", idsArg(i32["prompt.11"]), "--max-tokens", "32", "--json"}
		if noDraft {
			args = append(args, "--no-draft")
		}
		code, stdout, stderr := runCLI(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", args, code, stderr)
		}
		var res generate.Result
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&res); err != nil {
			t.Fatalf("stdout %q: %v", stdout, err)
		}
		if !slices.Equal(res.Tokens, i32["greedy.11"]) {
			t.Fatalf("no-draft %v: tokens %v, transformers %v", noDraft, res.Tokens, i32["greedy.11"])
		}
		var raw map[string]json.RawMessage
		json.Unmarshal([]byte(stdout), &raw)
		if noDraft {
			if string(raw["speculative"]) != "null" || strings.Contains(stderr, "speculative (") {
				t.Errorf("--no-draft: speculative %s; stderr %s", raw["speculative"], stderr)
			}
			continue
		}
		s := res.Speculative
		if s == nil || s.Rounds == 0 || len(s.Histogram) != 8 || len(s.Acceptance) != 7 || s.DraftSampling != "argmax" {
			t.Fatalf("telemetry %s", raw["speculative"])
		}
		if !strings.Contains(stderr, "speculative (argmax):") || !strings.Contains(stderr, "acceptance by position") {
			t.Errorf("stderr has no speculative statistics: %s", stderr)
		}
	}
	code, _, stderr := runCLI(dir, "--prompt-ids", "1,2", "--max-tokens", "6", "--temperature", "1", "--draft-sampling", "sample", "--confidence-stop", "0.3", "--json")
	if code != 0 {
		t.Fatalf("sampled drafts: exit %d, %s", code, stderr)
	}
	// A BF16 KV cache: this model's greedy tokens do not move (its margins are wider than the
	// rounding; the logits do: runtime/backend/metal TestEmulatedKVBF16, runtime/model).
	code, stdout, stderr := runCLI(dir, "--prompt-ids", idsArg(i32["prompt.11"]), "--max-tokens", "8", "--kv-cache", "bf16", "--json")
	var kv generate.Result
	if code != 0 || json.Unmarshal([]byte(stdout), &kv) != nil || !slices.Equal(kv.Tokens, i32["greedy.11"][:8]) {
		t.Fatalf("--kv-cache bf16: exit %d, tokens %v (transformers %v), stderr %s", code, kv.Tokens, i32["greedy.11"][:8], stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{dir, "--prompt-ids", "1", "--draft-sampling", "best"}, "--draft-sampling"},
		{[]string{dir, "--prompt-ids", "1", "--confidence-stop", "2"}, "--confidence-stop"},
		{[]string{dir, "--prompt-ids", "1", "--kv-cache", "fp8"}, "--kv-cache"},
		{[]string{"serve", dir, "--kv-cache", "f16"}, "--kv-cache"},
		{[]string{"bench", dir, "--runs", "0"}, "--runs"},
		{[]string{"bench", dir, "--snapshot", "-1"}, "--snapshot"},
		{[]string{"bench", dir, "--prompt-tokens", "0"}, "--prompt-tokens"},
		{[]string{"bench", dir, "--prompt-tokens", "8", "--prompt-ids", "1,2"}, "--prompt-tokens"},
		{[]string{"bench", filepath.Join(t.TempDir(), "none"), "--prompt-tokens", "64", "--context", "64"}, "--prompt-tokens"},
		{[]string{dir, "--prompt-ids", "1", "--rounds-per-call", "-1"}, "--rounds-per-call"},
		{[]string{"bench", dir, "--rounds-per-call", "65"}, "--rounds-per-call"},
		{[]string{"serve", dir, "--rounds-per-call", "-2"}, "--rounds-per-call"},
		// Refused before the bundle is opened: the path does not exist.
		{[]string{"bench", filepath.Join(t.TempDir(), "none"), "--snapshot", "-1"}, "--snapshot"},
		{[]string{"bench", filepath.Join(t.TempDir(), "none"), "--runs", "0"}, "--runs"},
	} {
		if code, _, stderr := runCLI(c.args...); code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q", c.args, code, stderr)
		}
	}
}

// TestBench: `lithos-run bench` reports plain and speculative decoding with their floors
// (positive, from a bandwidth measured in the run), identical greedy outputs, and the round
// telemetry; as JSON and as a table. Without a draft head the speculative part is null.
func TestBench(t *testing.T) {
	dir := draftFixture(t)
	code, stdout, stderr := runCLI("bench", dir, "--max-tokens", "12", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep generate.BenchReport
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	s := rep.Speculative
	if s == nil || !rep.Identical || rep.ReadGBs <= 0 || rep.TargetBytesPerPass <= 0 || rep.DraftBytesPerRound <= 0 ||
		rep.PromptTokens != 32 || rep.Plain.Tokens != 12 || s.Tokens != 12 || rep.Plain.Passes != 11 ||
		rep.Plain.FloorTokPerS <= 0 || s.FloorTokPerS <= 0 || s.Speculative == nil || rep.Plain.Speculative != nil {
		t.Fatalf("report %s", stdout)
	}
	// The floors follow from the measured bandwidth and the manifest's bytes.
	wantPlain := rep.ReadGBs * 1e9 / float64(rep.TargetBytesPerPass)
	if d := rep.Plain.FloorTokPerS/wantPlain - 1; d > 1e-9 || d < -1e-9 {
		t.Errorf("plain floor %.1f tok/s, want bandwidth ÷ bytes per pass = %.1f", rep.Plain.FloorTokPerS, wantPlain)
	}
	if rep.Snapshot != nil {
		t.Fatalf("snapshot without --snapshot: %+v", rep.Snapshot)
	}
	if q := rep.Passes; !(q.PlainStep.MS > 0 && q.PlainStep.FloorMS > 0) || q.Round == nil || !(q.RoundOverVerify > 0) {
		t.Fatalf("passes %+v", q)
	}
	if rep.KVCache != "f32" {
		t.Fatalf("kv_cache %q, want f32 (the default)", rep.KVCache)
	}
	// A BF16 KV cache: named in the report; speculative still identical to plain.
	code, stdout, stderr = runCLI("bench", dir, "--max-tokens", "6", "--kv-cache", "bf16", "--json")
	var kv generate.BenchReport
	if err := json.Unmarshal([]byte(stdout), &kv); code != 0 || err != nil || kv.KVCache != "bf16" || !kv.Identical {
		t.Fatalf("--kv-cache bf16: exit %d, %v, stdout %s, stderr %s", code, err, stdout, stderr)
	}
	// A longer prompt of bench's own.
	code, stdout, stderr = runCLI("bench", dir, "--max-tokens", "4", "--prompt-tokens", "45", "--json")
	var long generate.BenchReport
	if err := json.Unmarshal([]byte(stdout), &long); code != 0 || err != nil || long.PromptTokens != 45 || !long.Identical {
		t.Fatalf("--prompt-tokens 45: exit %d, %v, stdout %s, stderr %s", code, err, stdout, stderr)
	}
	// --rounds-per-call changes how the steps are queued, not the tokens.
	code, stdout, stderr = runCLI("bench", dir, "--max-tokens", "12", "--rounds-per-call", "5", "--json")
	var k5 generate.BenchReport
	if err := json.Unmarshal([]byte(stdout), &k5); code != 0 || err != nil || !k5.Identical || k5.Speculative == nil ||
		k5.Speculative.Tokens != 12 || k5.Plain.Passes != 11 || k5.Passes.Round == nil {
		t.Fatalf("--rounds-per-call 5: exit %d, %v, stdout %s, stderr %s", code, err, stdout, stderr)
	}
	code, stdout, stderr = runCLI("bench", dir, "--max-tokens", "6", "--prompt-ids", "5,6,7", "--runs", "2", "--snapshot", "24")
	if code != 0 || !strings.Contains(stdout, "floor: host memory read bandwidth") || !strings.Contains(stdout, "speculative:") || !strings.Contains(stdout, "identical to plain: true") ||
		!strings.Contains(stdout, "per pass: plain step ") || !strings.Contains(stdout, "× the verify pass") ||
		!strings.Contains(stdout, "snapshot at 24 tokens (drafter context: true)") {
		t.Fatalf("table: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	// With the draft head the copy also holds its context rows: more than the target's state.
	code, stdout, stderr = runCLI("bench", dir, "--max-tokens", "4", "--snapshot", "24", "--json")
	var srep generate.BenchReport
	if err := json.Unmarshal([]byte(stdout), &srep); code != 0 || err != nil {
		t.Fatalf("--snapshot --json: exit %d, %v, stdout %s, stderr %s", code, err, stdout, stderr)
	}
	code, stdout, stderr = runCLI("bench", dir, "--max-tokens", "4", "--snapshot", "24", "--no-draft", "--json")
	var nrep generate.BenchReport
	if err := json.Unmarshal([]byte(stdout), &nrep); code != 0 || err != nil || nrep.Snapshot == nil {
		t.Fatalf("--snapshot --no-draft: exit %d, %v, stdout %s, stderr %s", code, err, stdout, stderr)
	}
	if s := srep.Snapshot; s == nil || s.Tokens != 24 || !s.Drafter || nrep.Snapshot.Drafter || s.Bytes <= nrep.Snapshot.Bytes || s.RestoreGBs <= 0 {
		t.Fatalf("--snapshot 24: %+v, want a drafter's context and more than the %d bytes without it", srep.Snapshot, nrep.Snapshot.Bytes)
	}
	code, stdout, stderr = runCLI("bench", fixture(t), "--max-tokens", "4", "--json")
	if code != 0 || !strings.Contains(stdout, `"speculative":null`) {
		t.Fatalf("no draft head: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
}
