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
		for _, k := range []string{"prompt_tokens", "tokens", "text", "finish_reason", "prefill_tok_per_s", "decode_tok_per_s", "rounds", "tokens_per_round"} {
			if _, ok := keys[k]; !ok {
				t.Errorf("JSON has no %q: %s", k, stdout)
			}
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
