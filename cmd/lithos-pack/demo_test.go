package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemo runs README's first command in-process and checks what it must
// show: the fixture fetched and audited, the 27B budget of the article
// reproduced through a remote audit, the fixture packed, verified and run
// (its model vocabulary is padded past its tokenizer's: sampled ids without
// a token must not stop generation).
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := runDemo(context.Background(), &out, filepath.Join("..", "..", "testdata", "hub")); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"9 files",
		"model-00002-of-00002.safetensors",
		"Read on every decode pass                                                              17.608",
		"17.916 GB per pass -> 34.3 tok/s",
		"20.063 GB per pass -> 30.6 tok/s",
		"1.136 GB on disk",
		"per draft block: 1.939 GB",
		"verify: sizes, alignment and the sha256 of all 44 tensors OK",
		"prompt 11 tokens -> 12 tokens",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(s)
	}
}
