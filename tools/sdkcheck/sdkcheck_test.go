// Package sdkcheck runs check.mjs — the official `openai` and `@anthropic-ai/sdk` packages from
// npm, pinned in package.json — against lithos servers: the real `lithos-run serve` binary on a
// tiny random-weight bundle, and the server code on a scripted backend (lithos/runtime/serve/
// servetest) whose output is exact (tool calls). The tests skip, saying why, when node or
// node_modules is missing: run `npm ci` in tools/sdkcheck first (.ci/run does).
package sdkcheck

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"lithos/pack"
	"lithos/runtime/chat"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/serve"
	"lithos/runtime/serve/servetest"
	"lithos/runtime/tokenizer"
)

// here is this package's directory; root the repository's.
func here() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

func root() string { return filepath.Join(here(), "..", "..") }

// nodeOrSkip returns node's path, or skips the test (visibly) without node or the SDKs.
func nodeOrSkip(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIP sdkcheck: node is not on PATH")
	}
	for _, pkg := range []string{"openai", "@anthropic-ai/sdk"} {
		if _, err := os.Stat(filepath.Join(here(), "node_modules", pkg, "package.json")); err != nil {
			t.Skipf("SKIP sdkcheck: tools/sdkcheck/node_modules/%s is missing: run `npm ci` in tools/sdkcheck", pkg)
		}
	}
	return node
}

// runCheck runs check.mjs against url and fails the test on any failed check; the SDKs'
// report goes to the test log.
func runCheck(t *testing.T, node, url, model, mode string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "check.mjs")
	cmd.Dir = here()
	cmd.Env = append(os.Environ(), "SDKCHECK_URL="+url, "SDKCHECK_MODEL="+model, "SDKCHECK_MODE="+mode, "SDKCHECK_KEY=sdk-test-key")
	out, err := cmd.CombinedOutput()
	t.Logf("node check.mjs (%s):\n%s", mode, out)
	if err != nil {
		t.Fatalf("check.mjs (%s): %v", mode, err)
	}
	if !strings.Contains(string(out), " passed, 0 failed") {
		t.Fatalf("check.mjs (%s) did not report its summary", mode)
	}
}

// qwen35Template is the Qwen3.5-style chat template of testdata/chat (XML tool calls).
func qwen35Template(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(), "testdata", "chat", "templates", "qwen35_style.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// scriptedServer is the server code (serve.New) on the scripted backend of
// lithos/runtime/serve/servetest answering script, with the gentest tokenizer, the config of the
// golden checkpoint qwen35-b and the Qwen3.5-style template; opt.Log nil discards the log. The
// test's cleanup closes it.
func scriptedServer(t *testing.T, script func(history string) string, opt serve.Options) *serve.Server {
	t.Helper()
	tok, err := tokenizer.Parse(gentest.TokenizerJSON())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := gentest.GoldenConfig("b")
	if err != nil {
		t.Fatal(err)
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := serve.New(serve.Model{
		Target:    &servetest.Target{Cfg: cfg, Tok: tok, EOS: gentest.IMEnd, Script: script},
		Tokenizer: tok, EOS: []int32{gentest.IMEnd},
		Chat: &chat.Config{Templates: map[string]string{"default": qwen35Template(t)}, SpecialTokens: map[string]any{"eos_token": "<|im_end|>"}},
	}, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSDKsScripted: the server code on a scripted model, so that tool calls come out exactly;
// the SDKs must parse them, streamed and not, in all three APIs, and carry the round trip.
func TestSDKsScripted(t *testing.T) {
	node := nodeOrSkip(t)
	s := scriptedServer(t, weatherScript, serve.Options{Names: []string{"tiny"}, Context: 4096, APIKey: "sdk-test-key"})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	runCheck(t, node, ts.URL, "tiny", "scripted")
}

// weatherScript is the script check.mjs expects (SDKCHECK_MODE=scripted): a tool result in the
// last user turn gets the final answer, a prompt offering tools gets the Qwen3.5 XML tool call,
// anything else a greeting.
func weatherScript(history string) string {
	last := history
	if i := strings.LastIndex(history, "<|im_start|>user\n"); i >= 0 {
		last = history[i:]
	}
	switch {
	case strings.Contains(last, "<tool_response>"):
		return "It is sunny in Paris."
	case strings.Contains(history, "<tools>"):
		return "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
	}
	return "Hello from lithos."
}

// TestSDKsServe builds lithos-run, packs a tiny random-weight bundle with the Qwen3.5-style
// template, starts `lithos-run serve` on a free loopback port and runs the SDK checks for a
// real model against it; then interrupts the server, which must exit cleanly.
func TestSDKsServe(t *testing.T) {
	node := nodeOrSkip(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "lithos-run")
	build := exec.Command("go", "build", "-o", bin, "./cmd/lithos-run")
	build.Dir = root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "serve", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "serve") || strings.Contains(string(out), "unknown command") {
		t.Skipf("SKIP: lithos-run has no serve command yet: %v %s", err, out)
	}
	bundleDir := tinyBundle(t, dir)
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	srv := exec.Command(bin, "serve", bundleDir, "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--served-model-name", "tiny", "--api-key", "sdk-test-key")
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	logs := make(chan string, 1)
	go func() {
		var sb strings.Builder
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			sb.WriteString(sc.Text() + "\n")
		}
		logs <- sb.String()
	}()
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		if srv.ProcessState == nil {
			_ = srv.Process.Kill()
		}
	})
	url := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("lithos-run serve exited: %v\n%s", err, <-logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("lithos-run serve did not answer /health within 60 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	runCheck(t, node, url, "tiny", "model")
	_ = srv.Process.Signal(os.Interrupt)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("lithos-run serve after SIGINT: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("lithos-run serve did not stop within 20 s of SIGINT")
	}
	t.Logf("lithos-run serve log:\n%s", <-logs)
}

// tinyBundle packs the golden checkpoint qwen35-b with the gentest tokenizer and the
// Qwen3.5-style chat template (so tools and tool calls render) into dir/tiny.lithos.
func tinyBundle(t *testing.T, dir string) string {
	t.Helper()
	ck := filepath.Join(dir, "ckpt")
	if err := os.MkdirAll(ck, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "hf_quant_config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(gentest.GoldenDir("b"), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ck, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tplJSON, err := json.Marshal(qwen35Template(t))
	if err != nil {
		t.Fatal(err)
	}
	tc := fmt.Sprintf(`{"chat_template": %s, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}`, tplJSON)
	files := map[string]string{
		"tokenizer.json":         string(gentest.TokenizerJSON()),
		"tokenizer_config.json":  tc,
		"generation_config.json": fmt.Sprintf(`{"eos_token_id": [%d, %d]}`, gentest.IMEnd, gentest.EndOfText),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(ck, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "tiny.lithos")
	if _, err := pack.Build(context.Background(), pack.Options{Target: ck, Out: out, Workers: 2, ToolVersion: "sdkcheck",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatal(err)
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
