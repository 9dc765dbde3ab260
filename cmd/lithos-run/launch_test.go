package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"lithos/runtime/launch"
)

// modelsServer is a fake lithos server: GET /v1/models lists one model.
func modelsServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "lithos", "context_window": 4096}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// fakeClients writes shell scripts named like the clients that record their arguments (one
// per line) and environment (`env -0`, NUL-separated) in $FAKE_OUT/<name>.{args,env}.
func fakeClients(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, name := range []string{"claude", "codex", "opencode", "myagent"} {
		script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$FAKE_OUT/" + name + ".args\"\nexec env -0 > \"$FAKE_OUT/" + name + ".env\"\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// TestLaunchersEndToEnd runs this test binary as lithos-run (LITHOS_RUN_AS_MAIN, main_test.go)
// against a fake server: each launcher must exec the fake client with exactly the expected
// arguments and environment, and write nothing in HOME.
func TestLaunchersEndToEnd(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("fake clients are shell scripts")
	}
	for _, tool := range []string{"sh", "env"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on PATH", tool)
		}
	}
	envPath, _ := exec.LookPath("env")
	shPath, _ := exec.LookPath("sh")
	srv := modelsServer(t)
	bin := fakeClients(t)
	for _, c := range []struct {
		args     []string
		client   string
		wantArgs []string
		wantEnv  []string // NAME=value that must be there
		gone     []string // names that must not be there
	}{
		{[]string{"claude", "--url", srv.URL + "/v1", "--", "-p", "say hi"}, "claude", []string{"--model", "tiny", "-p", "say hi"},
			[]string{"ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_AUTH_TOKEN=lithos-local", "ANTHROPIC_MODEL=tiny",
				"ANTHROPIC_DEFAULT_HAIKU_MODEL=tiny", "CLAUDE_CODE_MAX_OUTPUT_TOKENS=1024", "CLAUDE_CODE_MAX_CONTEXT_TOKENS=4096", "KEEP=1"},
			[]string{"ANTHROPIC_API_KEY", "CLAUDE_CODE_USE_VERTEX"}},
		{[]string{"codex", "--url", srv.URL, "--api-key", "sek", "exec", "hello"}, "codex", nil,
			[]string{"LITHOS_API_KEY=sek", "OPENAI_BASE_URL=" + srv.URL + "/v1", "OPENAI_API_KEY=sek", "KEEP=1"}, nil},
		{[]string{"opencode", "--url", srv.URL, "--", "run", "hi"}, "opencode", []string{"run", "hi"},
			[]string{"KEEP=1"}, nil},
		{[]string{"run", "--url", srv.URL, "--", "myagent", "--flag", "x y"}, "myagent", []string{"--flag", "x y"},
			[]string{"OPENAI_BASE_URL=" + srv.URL + "/v1", "OPENAI_API_KEY=lithos-local", "OPENAI_MODEL=tiny",
				"ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_API_KEY=lithos-local", "ANTHROPIC_MODEL=tiny", "KEEP=1"}, nil},
	} {
		t.Run(c.client, func(t *testing.T) {
			home, out := t.TempDir(), t.TempDir()
			cmd := exec.Command(os.Args[0], c.args...)
			cmd.Env = []string{"LITHOS_RUN_AS_MAIN=1", "PATH=" + bin + ":" + filepath.Dir(envPath) + ":" + filepath.Dir(shPath),
				"HOME=" + home, "FAKE_OUT=" + out, "KEEP=1", "ANTHROPIC_API_KEY=users-own", "CLAUDE_CODE_USE_VERTEX=1"}
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("lithos-run %q: %v\n%s", c.args, err, b)
			}
			args, err := os.ReadFile(filepath.Join(out, c.client+".args"))
			if err != nil {
				t.Fatal(err)
			}
			gotArgs := strings.Split(strings.TrimSuffix(string(args), "\n"), "\n")
			if c.wantArgs != nil && !slices.Equal(gotArgs, c.wantArgs) {
				t.Errorf("args %q, want %q", gotArgs, c.wantArgs)
			}
			if c.client == "codex" && (!slices.Contains(gotArgs, `model="tiny"`) || !slices.Contains(gotArgs, `model_providers.lithos.base_url="`+srv.URL+`/v1"`) ||
				!slices.Equal(gotArgs[len(gotArgs)-2:], []string{"exec", "hello"})) {
				t.Errorf("codex args %q", gotArgs)
			}
			raw, err := os.ReadFile(filepath.Join(out, c.client+".env"))
			if err != nil {
				t.Fatal(err)
			}
			env := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
			for _, kv := range c.wantEnv {
				if !slices.Contains(env, kv) {
					t.Errorf("%s missing from the client's environment %q", kv, env)
				}
			}
			for _, name := range c.gone {
				for _, kv := range env {
					if strings.HasPrefix(kv, name+"=") {
						t.Errorf("%s still in the client's environment", kv)
					}
				}
			}
			if c.client == "opencode" {
				i := slices.IndexFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "OPENCODE_CONFIG_CONTENT=") })
				if i < 0 || !strings.Contains(env[i], `"baseURL":"`+srv.URL+`/v1"`) || !strings.Contains(env[i], `"model":"lithos/tiny"`) {
					t.Errorf("opencode config: %q", env)
				}
			}
			if entries, err := os.ReadDir(home); err != nil || len(entries) != 0 {
				t.Errorf("HOME is not untouched: %v %v", entries, err)
			}
		})
	}
}

func TestLauncherCommands(t *testing.T) {
	srv := modelsServer(t)
	t.Setenv("LITHOS_API_KEY", "")
	t.Setenv("LITHOS_URL", srv.URL)

	code, stdout, stderr := runCLI("env")
	want := "export OPENAI_BASE_URL=" + srv.URL + "/v1\nexport OPENAI_API_KEY=lithos-local\nexport OPENAI_MODEL=tiny\n" +
		"export ANTHROPIC_BASE_URL=" + srv.URL + "\nexport ANTHROPIC_API_KEY=lithos-local\nexport ANTHROPIC_MODEL=tiny\n"
	if code != 0 || stdout != want {
		t.Fatalf("env: code %d\n%s\nstderr %s", code, stdout, stderr)
	}

	code, stdout, stderr = runCLI("claude", "--api-key", "top secret", "--print-config", "--", "-p", "x")
	if code != 0 || strings.Contains(stdout, "top secret") || !strings.Contains(stdout, `export ANTHROPIC_AUTH_TOKEN="$LITHOS_API_KEY"`) ||
		!strings.HasSuffix(stdout, "exec claude --model tiny -p x\n") {
		t.Fatalf("print-config: code %d\n%s\nstderr %s", code, stdout, stderr)
	}

	code, stdout, _ = runCLI("codex", "--print-config")
	if code != 0 || !strings.Contains(stdout, "export LITHOS_API_KEY=lithos-local\n") {
		t.Fatalf("print-config with the placeholder key: %d\n%s", code, stdout)
	}

	// launchExec gets the command and this process's environment
	var got []string
	launchExec = func(c launch.Command, env []string) error { got = append([]string{c.Program}, c.Args...); return nil }
	t.Cleanup(func() { launchExec = launch.Exec })
	bin := fakeClients(t)
	t.Setenv("PATH", bin)
	if code, _, stderr = runCLI("run", "--", "myagent", "a"); code != 0 || !slices.Equal(got, []string{"myagent", "a"}) {
		t.Fatalf("run: code %d, exec %q, stderr %s", code, got, stderr)
	}
	if !strings.Contains(stderr, "starting myagent on "+srv.URL+" (model tiny, context 4096 tokens)") {
		t.Errorf("stderr %q", stderr)
	}

	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"run"}, "no command to run"},
		{[]string{"run", "--", "nope-not-here"}, "nope-not-here not found on PATH"},
		{[]string{"claude", "--model", "big"}, `does not serve "big"; it serves "tiny"`},
		{[]string{"codex", "--url", "ftp://x"}, "want http:// or https://"},
		{[]string{"env", "extra"}, "unknown command"},
	} {
		t.Setenv("PATH", t.TempDir())
		code, _, stderr := runCLI(c.args...)
		if code != exitError || !strings.Contains(stderr, c.msg) {
			t.Errorf("%q: code %d, stderr %q; want %q", c.args, code, stderr, c.msg)
		}
	}
	t.Setenv("PATH", t.TempDir())
	if code, _, stderr := runCLI("claude"); code != exitError || !strings.Contains(stderr, "claude not found on PATH: install it with `npm install -g @anthropic-ai/claude-code`") {
		t.Errorf("missing claude: %d %q", code, stderr)
	}
	srv.Close()
	if code, _, stderr := runCLI("opencode"); code != exitError || !strings.Contains(stderr, "no lithos server answers at "+srv.URL) {
		t.Errorf("no server: %d %q", code, stderr)
	}
}
