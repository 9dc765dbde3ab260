package launch

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// The test binary doubles as a fake client (run under the name of a client, it prints its
// arguments and environment as JSON and exits with $FAKE_EXIT) and as a launcher (with
// LAUNCH_TEST_EXEC set to a JSON Command, it calls Exec with it).
func TestMain(m *testing.M) {
	switch name := filepath.Base(os.Args[0]); name {
	case "claude", "codex", "opencode", "fakecmd":
		out := map[string]any{"program": name, "args": os.Args[1:], "env": os.Environ()}
		_ = json.NewEncoder(os.Stdout).Encode(out)
		code := 0
		if os.Getenv("FAKE_EXIT") == "7" {
			code = 7
		}
		os.Exit(code)
	}
	if spec := os.Getenv("LAUNCH_TEST_EXEC"); spec != "" {
		var c Command
		if err := json.Unmarshal([]byte(spec), &c); err != nil {
			panic(err)
		}
		base := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "LAUNCH_TEST_EXEC=") })
		err := Exec(c, base)
		os.Stderr.WriteString("exec failed: " + err.Error() + "\n")
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func TestNormalizeURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000":       "http://127.0.0.1:8000",
		"http://127.0.0.1:8000/":      "http://127.0.0.1:8000",
		"http://127.0.0.1:8000/v1":    "http://127.0.0.1:8000",
		"https://h.example/v1/":       "https://h.example",
		" http://[::1]:9/lithos/v1 ":  "http://[::1]:9/lithos",
		"http://localhost:8000/proxy": "http://localhost:8000/proxy",
	} {
		if got, err := NormalizeURL(in); err != nil || got != want {
			t.Errorf("NormalizeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"127.0.0.1:8000":              "want http",
		"ftp://h/":                    "want http",
		"http://":                     "no host",
		"http://u:secret@h:1/":        "credentials",
		"http://h/?a=1":               "no query",
		"http://h/#x":                 "no query",
		"http://h/%zz":                "invalid URL escape",
		"unix:///var/run/lithos.sock": "want http",
	} {
		_, err := NormalizeURL(in)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("NormalizeURL(%q): error %v, want one containing %q", in, err, msg)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
}

// fakeServer answers GET /v1/models with models, checking the Bearer key when key != "".
func fakeServer(t *testing.T, key string, status int, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/models" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error": {"message": "bad key", "type": "authentication_error"}}`))
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

const oneModel = `{"object": "list", "data": [{"id": "qwen3.5-tiny", "object": "model", "created": 1, "owned_by": "lithos", "context_window": 8192}]}`

func noEnv(string) string { return "" }

func TestResolve(t *testing.T) {
	ctx := context.Background()
	srv := fakeServer(t, "", 200, oneModel)
	got, err := Resolve(ctx, Options{URL: srv.URL + "/v1/", Getenv: noEnv})
	want := Target{URL: srv.URL, APIKey: DefaultAPIKey, Model: "qwen3.5-tiny", Context: 8192}
	if err != nil || got != want {
		t.Fatalf("Resolve = %+v, %v; want %+v", got, err, want)
	}
	if got.OutputTokens() != 2048 {
		t.Errorf("OutputTokens %d", got.OutputTokens())
	}

	// the environment gives the URL and the key; the key is sent
	keyed := fakeServer(t, "k-123", 200, `{"data": [{"id": "a"}, {"id": "b", "context_window": 100}]}`)
	env := map[string]string{EnvURL: keyed.URL, EnvAPIKey: "k-123"}
	got, err = Resolve(ctx, Options{Model: "b", Getenv: func(k string) string { return env[k] }})
	if want := (Target{URL: keyed.URL, APIKey: "k-123", Model: "b", Context: 100}); err != nil || got != want {
		t.Fatalf("Resolve = %+v, %v; want %+v", got, err, want)
	}
	got, err = Resolve(ctx, Options{Model: "a", Getenv: func(k string) string { return env[k] }})
	if err != nil || got.Context != DefaultContext || got.OutputTokens() != 4096 {
		t.Fatalf("no context_window: %+v, %v", got, err)
	}

	for _, c := range []struct {
		name string
		opts Options
		msg  string
	}{
		{"two models, none picked", Options{URL: keyed.URL, APIKey: "k-123"}, `serves 2 models ("a", "b"): pick one with --model`},
		{"model not served", Options{URL: keyed.URL, APIKey: "k-123", Model: "c"}, `does not serve "c"; it serves "a", "b"`},
		{"wrong key", Options{URL: keyed.URL, APIKey: "nope"}, "the server wants an API key: give --api-key or set $LITHOS_API_KEY"},
		{"no models", Options{URL: fakeServer(t, "", 200, `{"data": []}`).URL}, "lists no model"},
		{"not a list", Options{URL: fakeServer(t, "", 200, `<html>`).URL}, "not a model list (is this a lithos server?)"},
		{"server error", Options{URL: fakeServer(t, "", 500, `boom`).URL}, "500 Internal Server Error: boom (is this a lithos server?)"},
		{"empty id", Options{URL: fakeServer(t, "", 200, `{"data": [{"context_window": 5}]}`).URL}, "without an id"},
		{"bad URL", Options{URL: "localhost:8000"}, "want http"},
	} {
		c.opts.Getenv = noEnv
		if _, err := Resolve(ctx, c.opts); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.msg)
		}
	}

	// nothing listening
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	_, err = Resolve(ctx, Options{URL: closed.URL, Getenv: noEnv})
	if !errors.Is(err, ErrNoServer) || !strings.Contains(err.Error(), "lithos-run serve BUNDLE") || !strings.Contains(err.Error(), closed.URL) {
		t.Errorf("no server: %v", err)
	}
}

var target = Target{URL: "http://127.0.0.1:8000", APIKey: "k'ey", Model: "qwen3.5-tiny", Context: 8192}

func TestClaude(t *testing.T) {
	c := Claude(target, []string{"-p", "hi"})
	if c.Program != "claude" || !reflect.DeepEqual(c.Args, []string{"--model", "qwen3.5-tiny", "-p", "hi"}) {
		t.Fatalf("command %s %q", c.Program, c.Args)
	}
	want := map[string]string{
		"ANTHROPIC_BASE_URL": "http://127.0.0.1:8000", "ANTHROPIC_AUTH_TOKEN": "k'ey", "ANTHROPIC_MODEL": "qwen3.5-tiny",
		"ANTHROPIC_DEFAULT_OPUS_MODEL": "qwen3.5-tiny", "ANTHROPIC_DEFAULT_SONNET_MODEL": "qwen3.5-tiny",
		"ANTHROPIC_DEFAULT_HAIKU_MODEL": "qwen3.5-tiny", "ANTHROPIC_SMALL_FAST_MODEL": "qwen3.5-tiny",
		"CLAUDE_CODE_SUBAGENT_MODEL": "qwen3.5-tiny", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1", "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
		"CLAUDE_CODE_MAX_CONTEXT_TOKENS": "8192", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "2048", "MAX_THINKING_TOKENS": "0",
		"CLAUDE_STREAM_IDLE_TIMEOUT_MS": "900000",
	}
	if got := varMap(c.Set); !reflect.DeepEqual(got, want) {
		t.Errorf("env %v\nwant %v", got, want)
	}
	for _, n := range []string{"ANTHROPIC_API_KEY", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY", "ANTHROPIC_CUSTOM_HEADERS", "CLAUDE_CODE_OAUTH_TOKEN"} {
		if !slices.Contains(c.Unset, n) {
			t.Errorf("%s not removed", n)
		}
	}
}

func TestCodex(t *testing.T) {
	c := Codex(target, []string{"exec", "say hi"})
	want := []string{
		"-c", `model_provider="lithos"`,
		"-c", `model_providers.lithos.name="lithos"`,
		"-c", `model_providers.lithos.base_url="http://127.0.0.1:8000/v1"`,
		"-c", `model_providers.lithos.wire_api="responses"`,
		"-c", `model_providers.lithos.env_key="LITHOS_API_KEY"`,
		"-c", `model_providers.lithos.requires_openai_auth=false`,
		"-c", `model_providers.lithos.supports_websockets=false`,
		"-c", `model_providers.lithos.stream_idle_timeout_ms=900000`,
		"-c", `model="qwen3.5-tiny"`,
		"-c", `model_context_window=8192`,
		"-c", `model_auto_compact_token_limit=6144`,
		"-c", `model_reasoning_effort="none"`,
		"-c", `web_search="disabled"`,
		"-c", `features.multi_agent=false`,
		"exec", "say hi",
	}
	if c.Program != "codex" || !reflect.DeepEqual(c.Args, want) {
		t.Fatalf("command %s %q", c.Program, c.Args)
	}
	if got := varMap(c.Set); !reflect.DeepEqual(got, map[string]string{"LITHOS_API_KEY": "k'ey",
		"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "OPENAI_API_KEY": "k'ey", "OPENAI_MODEL": "qwen3.5-tiny"}) {
		t.Errorf("env %v", got)
	}
	// a model id that needs escaping stays one TOML string
	c = Codex(Target{URL: "http://h", Model: `a"b\c`, Context: 4}, nil)
	if i := slices.Index(c.Args, `model="a\"b\\c"`); i < 0 {
		t.Errorf("escaped model missing from %q", c.Args)
	}
}

func TestOpenCode(t *testing.T) {
	c, err := OpenCode(target, []string{"run", "hi"}, "")
	if err != nil || c.Program != "opencode" || !reflect.DeepEqual(c.Args, []string{"run", "hi"}) || len(c.Set) != 1 || c.Set[0].Name != "OPENCODE_CONFIG_CONTENT" {
		t.Fatalf("%+v %v", c, err)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(c.Set[0].Value), &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"$schema": "https://opencode.ai/config.json", "model": "lithos/qwen3.5-tiny", "small_model": "lithos/qwen3.5-tiny",
		"provider": map[string]any{"lithos": map[string]any{
			"npm": "@ai-sdk/openai-compatible", "name": "lithos",
			"options": map[string]any{"baseURL": "http://127.0.0.1:8000/v1", "apiKey": "k'ey"},
			"models": map[string]any{"qwen3.5-tiny": map[string]any{"name": "qwen3.5-tiny", "tool_call": true,
				"limit": map[string]any{"context": 8192.0, "output": 2048.0}}},
		}},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("config %v\nwant %v", cfg, want)
	}
	// merged into the user's process-local config
	c, err = OpenCode(target, nil, `{"theme": "dark", "model": "x/y", "provider": {"other": {"npm": "z"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	cfg = nil
	_ = json.Unmarshal([]byte(c.Set[0].Value), &cfg)
	prov := cfg["provider"].(map[string]any)
	if cfg["theme"] != "dark" || cfg["model"] != "lithos/qwen3.5-tiny" || prov["other"] == nil || prov["lithos"] == nil {
		t.Fatalf("merged config %v", cfg)
	}
	for _, bad := range []string{"[1]", "{", "null"} {
		if _, err := OpenCode(target, nil, bad); err == nil || !strings.Contains(err.Error(), "OPENCODE_CONFIG_CONTENT") {
			t.Errorf("existing %q: %v", bad, err)
		}
	}
}

func TestGeneric(t *testing.T) {
	c, err := Generic(target, []string{"python3", "-c", "x"})
	if err != nil || c.Program != "python3" || !reflect.DeepEqual(c.Args, []string{"-c", "x"}) {
		t.Fatalf("%+v %v", c, err)
	}
	if got := varMap(c.Set); !reflect.DeepEqual(got, map[string]string{
		"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1", "OPENAI_API_KEY": "k'ey", "OPENAI_MODEL": "qwen3.5-tiny",
		"ANTHROPIC_BASE_URL": "http://127.0.0.1:8000", "ANTHROPIC_API_KEY": "k'ey", "ANTHROPIC_MODEL": "qwen3.5-tiny"}) {
		t.Errorf("env %v", got)
	}
	if _, err := Generic(target, nil); err == nil || !strings.Contains(err.Error(), "after --") {
		t.Errorf("no command: %v", err)
	}
}

func TestEnviron(t *testing.T) {
	c := Command{Set: []Var{{"A", "new"}, {"C", "x=y"}}, Unset: []string{"B", "D"}}
	got := c.Environ([]string{"A=old", "B=gone", "KEEP=1", "A=dup", "PATH=/bin"})
	want := []string{"KEEP=1", "PATH=/bin", "A=new", "C=x=y"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Environ = %q, want %q", got, want)
	}
}

// TestShell checks the quoting with a real shell: the exports and the script's arguments
// must come back byte for byte, and the script must not contain the key.
func TestShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	values := []string{"plain", "", "a b", "it's", `"dq" $HOME \n ` + "`x`", "tab\there\nnewline", "ü ✓ 東京", "--flag=1", "*"}
	var vars []Var
	for i, v := range values {
		vars = append(vars, Var{"V" + string(rune('A'+i)), v})
	}
	script := Exports(vars)
	for i := range values {
		script += `printf '%s\0' "$V` + string(rune('A'+i)) + `"` + "\n"
	}
	out, err := exec.Command(sh, "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"); !reflect.DeepEqual(got, values) {
		t.Fatalf("shell read back %q, want %q", got, values)
	}

	// Script: runs the same thing, with the key coming from $LITHOS_API_KEY
	c := Command{Program: "printf", Args: append([]string{`%s\0`}, values...), Set: []Var{{"K", "pre-" + "s3cr'et" + "-post"}}, Unset: []string{"GONE"}}
	c.Args = append(c.Args, "s3cr'et")
	text := c.Script("s3cr'et")
	if strings.Contains(text, "s3cr") || !strings.HasPrefix(text, "unset GONE\nexport K=pre-\"$LITHOS_API_KEY\"-post\nexec printf") {
		t.Fatalf("script:\n%s", text)
	}
	cmd := exec.Command(sh, "-c", text+"\n")
	cmd.Env = []string{"LITHOS_API_KEY=s3cr'et", "GONE=1"}
	out, err = cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"); !reflect.DeepEqual(got, append(values, "s3cr'et")) {
		t.Fatalf("script ran %q", got)
	}
}

func TestPathMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Claude(target, nil).Path()
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "npm install -g @anthropic-ai/claude-code") {
		t.Fatalf("missing claude: %v", err)
	}
	_, err = Command{Program: "nothing-here"}.Path()
	if !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "install") {
		t.Fatalf("missing command: %v", err)
	}
}

// TestExec runs the launcher for real: the test binary execs a fake client (the test binary
// again, under the client's name) that reports what it got. HOME is an empty directory that
// must stay empty.
func TestExec(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symlinked fake clients need a unix")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, home := t.TempDir(), t.TempDir()
	for _, name := range []string{"claude", "codex", "opencode", "fakecmd"} {
		if err := os.Symlink(self, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	oc, err := OpenCode(target, []string{"run", "hi"}, "")
	if err != nil {
		t.Fatal(err)
	}
	gen, _ := Generic(target, []string{"fakecmd", "a b", "c"})
	for _, c := range []Command{Claude(target, []string{"-p", "hi there"}), Codex(target, []string{"exec", "x"}), oc, gen} {
		t.Run(c.Program, func(t *testing.T) {
			spec, _ := json.Marshal(c)
			base := []string{"PATH=" + bin, "HOME=" + home, "KEEP_ME=yes", "ANTHROPIC_API_KEY=user-key", "CLAUDE_CODE_USE_BEDROCK=1", "FAKE_EXIT=7"}
			cmd := exec.Command(self)
			cmd.Env = append(slices.Clone(base), "LAUNCH_TEST_EXEC="+string(spec))
			out, err := cmd.Output()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 7 {
				t.Fatalf("launcher: %v (want the client's exit status 7); stderr %s", err, stderrOf(err))
			}
			var got struct {
				Program string
				Args    []string
				Env     []string
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("client output %q: %v", out, err)
			}
			wantEnv := c.Environ(base)
			slices.Sort(got.Env)
			slices.Sort(wantEnv)
			if got.Program != c.Program || !reflect.DeepEqual(got.Args, c.Args) || !reflect.DeepEqual(got.Env, wantEnv) {
				t.Fatalf("client got %s %q\nenv %q\nwant %s %q\nenv %q", got.Program, got.Args, got.Env, c.Program, c.Args, wantEnv)
			}
			if c.Program == "claude" && (slices.Contains(got.Env, "ANTHROPIC_API_KEY=user-key") || slices.Contains(got.Env, "CLAUDE_CODE_USE_BEDROCK=1")) {
				t.Fatal("claude kept variables that route elsewhere")
			}
			if !slices.Contains(got.Env, "KEEP_ME=yes") {
				t.Fatal("the rest of the environment was not inherited")
			}
			if entries, err := os.ReadDir(home); err != nil || len(entries) != 0 {
				t.Fatalf("HOME is not untouched: %v %v", entries, err)
			}
		})
	}
	// a missing program: Exec returns the error with the hint
	spec, _ := json.Marshal(Command{Program: "not-installed", Install: "npm install -g not-installed"})
	cmd := exec.Command(self)
	cmd.Env = []string{"PATH=" + bin, "LAUNCH_TEST_EXEC=" + string(spec)}
	_, err = cmd.Output()
	if !strings.Contains(stderrOf(err), "not-installed not found on PATH: install it with `npm install -g not-installed`") {
		t.Fatalf("missing program: %v %s", err, stderrOf(err))
	}
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

func varMap(vars []Var) map[string]string {
	m := map[string]string{}
	for _, v := range vars {
		m[v.Name] = v.Value
	}
	return m
}
