package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// goldenPath is written by tools/chat_template_goldens.py (jinja2 with transformers'
// environment) on the GPU machine. LITHOS_CHAT_GOLDENS points the test at another copy
// (for development with a local jinja2).
const (
	goldenPath = "../../testdata/chat/goldens.json"
	repoRoot   = "../.."
	goldenCmd  = "python3 tools/chat_template_goldens.py --out testdata/chat"
)

type chatGoldenCase struct {
	Name     string          `json:"name"`
	Template string          `json:"template"`
	Source   *string         `json:"source"`
	Vars     json.RawMessage `json:"vars"`
	Output   *string         `json:"output"`
	Error    *string         `json:"error"`
	Raised   bool            `json:"raised"`
}

type chatGoldens struct {
	Environment []string          `json:"environment"`
	Now         string            `json:"now"`
	Templates   map[string]string `json:"templates"`
	Cases       []chatGoldenCase  `json:"cases"`
}

// templateSource reads a template the way the goldens script does: the chat_template of a
// tokenizer_config.json, or a .jinja file.
func templateSource(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatalf("read template %s: %v", rel, err)
	}
	if strings.HasSuffix(rel, ".json") {
		c, err := ParseConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		src, err := c.Template(false)
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	return string(data)
}

// TestGoldensJinja2 renders every golden case and requires the exact jinja2 output, or an
// error where jinja2 raised one (raise_exception errors must carry the same message).
func TestGoldensJinja2(t *testing.T) {
	path := goldenPath
	if p := os.Getenv("LITHOS_CHAT_GOLDENS"); p != "" {
		path = p
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s is missing: the jinja2 goldens are made on the GPU machine by `%s` (see its docstring)", path, goldenCmd)
	}
	if err != nil {
		t.Fatal(err)
	}
	var g chatGoldens
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if len(g.Cases) < 50 {
		t.Fatalf("%s has only %d cases", path, len(g.Cases))
	}
	now, err := time.ParseInLocation("2006-01-02T15:04:05", g.Now, time.Local)
	if err != nil {
		t.Fatalf("golden now %q: %v", g.Now, err)
	}
	t.Logf("goldens from %v", g.Environment)
	sources := map[string]string{}
	for name, rel := range g.Templates {
		sources[name] = templateSource(t, rel)
	}
	for _, c := range g.Cases {
		src := sources[c.Template]
		if c.Source != nil {
			src = *c.Source
		} else if src == "" {
			t.Errorf("%s: unknown template %q", c.Name, c.Template)
			continue
		}
		vars, err := ParseJSON(c.Vars)
		if err != nil {
			t.Errorf("%s: vars: %v", c.Name, err)
			continue
		}
		got, err := renderWith(src, vars.(*Dict), now)
		switch {
		case c.Output != nil && err != nil:
			t.Errorf("%s: error %v, want output %q", c.Name, err, *c.Output)
		case c.Output != nil && got != *c.Output:
			t.Errorf("%s: output differs at byte %d:\n got  %q\n want %q", c.Name, diffAt(got, *c.Output), got, *c.Output)
		case c.Error != nil && err == nil:
			t.Errorf("%s: rendered %q, want error %q", c.Name, got, *c.Error)
		case c.Error != nil && c.Raised:
			var te *TemplateError
			want := strings.TrimPrefix(*c.Error, "TemplateError: ")
			if !errors.As(err, &te) || !te.Raised || te.Msg != want {
				t.Errorf("%s: error %v, want raise_exception(%q)", c.Name, err, want)
			}
		}
	}
}

func renderWith(src string, vars *Dict, now time.Time) (string, error) {
	tpl, err := Parse(src)
	if err != nil {
		return "", err
	}
	tpl.Now = func() time.Time { return now }
	m := map[string]any{}
	for i, k := range vars.keys {
		m[k.(string)] = vars.vals[i]
	}
	return tpl.Render(m)
}

func diffAt(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
