package sdkcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"lithos/runtime/serve"
)

// Real agent CLIs through their launchers, on the server code with a scripted model that drives
// one tool round trip: it asks the agent's own shell tool to run `echo lithos-proof-<n>`, then
// reports what the tool returned. The agent must parse the call, run the command, send the
// result back, and print the final answer. Opt-in (the CLIs are large native packages):
//
//	npm install --prefix /tmp/agents @anthropic-ai/claude-code @openai/codex opencode-ai
//	SDKCHECK_AGENTS=/tmp/agents/node_modules/.bin go test ./tools/sdkcheck -run TestAgentCLIs -v
//
// HOME is a fresh temporary directory, so the agents' own state files go there.

// shellTools are the agents' shell tools: name → the parameter holding the command, and
// whether it is a list (argv) rather than a string.
var shellTools = []struct {
	name, param string
	argv        bool
}{
	{"Bash", "command", false},          // Claude Code
	{"bash", "command", false},          // opencode
	{"shell", "command", true},          // Codex (argv)
	{"exec_command", "cmd", false},      // Codex (newer)
	{"shell_command", "command", false}, // Codex (string form)
}

var proofRE = regexp.MustCompile(`lithos-proof-[0-9]+`)

// agentScript drives the round trip described above.
func agentScript(nonce string) func(history string) string {
	return func(history string) string {
		last := history
		if i := strings.LastIndex(history, "<|im_start|>user\n"); i >= 0 {
			last = history[i:]
		}
		if strings.Contains(last, "<tool_response>") {
			if m := proofRE.FindString(last); m != "" {
				return "The command printed " + m + "."
			}
			return "The tool answered without the proof."
		}
		for _, t := range shellTools {
			if !strings.Contains(history, `"name": "`+t.name+`"`) {
				continue
			}
			value := "echo lithos-proof-" + nonce
			if t.argv {
				b, _ := json.Marshal([]string{"bash", "-lc", value})
				value = string(b)
			}
			return fmt.Sprintf("<tool_call>\n<function=%s>\n<parameter=%s>\n%s\n</parameter>\n</function>\n</tool_call>", t.name, t.param, value)
		}
		return "Hello from lithos."
	}
}

func TestAgentCLIs(t *testing.T) {
	bin := os.Getenv("SDKCHECK_AGENTS")
	if bin == "" {
		t.Skip("SKIP agent CLIs: set SDKCHECK_AGENTS to a directory holding claude, codex and/or opencode (see agent_test.go)")
	}
	nonce := fmt.Sprint(time.Now().UnixNano() % 1000000)
	s := scriptedServer(t, agentScript(nonce), serve.Options{Names: []string{"lithos-scripted"}, Context: 1 << 20, MaxBodyBytes: 64 << 20})
	h := s.Handler()
	if dump := os.Getenv("SDKCHECK_DUMP"); dump != "" { // record the agents' requests (debugging)
		var n atomic.Int64
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			_ = os.WriteFile(filepath.Join(dump, fmt.Sprintf("%03d.json", n.Add(1))), append([]byte(r.Method+" "+r.URL.String()+"\n"), body...), 0o644)
			r.Body = io.NopCloser(bytes.NewReader(body))
			inner.ServeHTTP(w, r)
		})
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)

	dir := t.TempDir()
	lithos := filepath.Join(dir, "lithos-run")
	build := exec.Command("go", "build", "-o", lithos, "./cmd/lithos-run")
	build.Dir = root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want := "The command printed lithos-proof-" + nonce + "."
	for _, c := range []struct {
		client string
		args   []string
	}{
		{"claude", []string{"-p", "Run echo for me.", "--allowedTools", "Bash(echo:*)", "--output-format", "text"}},
		{"codex", []string{"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "Run echo for me."}},
		{"opencode", []string{"run", "Run echo for me."}},
	} {
		t.Run(c.client, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(bin, c.client)); err != nil {
				t.Skipf("SKIP: no %s in %s", c.client, bin)
			}
			home, work := t.TempDir(), t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, lithos, append([]string{c.client, "--url", ts.URL, "--"}, c.args...)...)
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "HOME="+home, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
				"XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_DATA_HOME="+filepath.Join(home, ".local", "share"),
				"XDG_CACHE_HOME="+filepath.Join(home, ".cache"), "XDG_STATE_HOME="+filepath.Join(home, ".local", "state"), "CI=1")
			out, err := cmd.CombinedOutput()
			t.Logf("$ lithos-run %s --url %s -- %q\n%s", c.client, ts.URL, c.args, out)
			if err != nil {
				t.Fatalf("%s: %v", c.client, err)
			}
			if !strings.Contains(string(out), want) {
				t.Fatalf("%s did not print %q", c.client, want)
			}
		})
	}
}
