package tokenizer

import (
	"errors"
	"runtime"
	"strings"
	"testing"
)

// TestEncodeLimitGoldens: on every golden case (ids from HF tokenizers, tools/tokenizer_goldens.mjs),
// EncodeLimit returns the golden ids when the limit admits them and ErrLimit when it does not,
// at the limits around the exact count.
func TestEncodeLimitGoldens(t *testing.T) {
	g := readGoldens(t, jsGoldenPath)
	variantsMu.Lock()
	for name, v := range g.Variants {
		variants[name] = v
	}
	variantsMu.Unlock()
	for _, c := range g.Cases {
		tok := testTokenizer(t, c.Tokenizer)
		opt := EncodeOptions{SplitSpecial: c.SplitSpecial}
		n := len(c.IDs)
		for _, limit := range []int{0, 1, n / 2, n - 1, n, n + 1, 2*n + 5} {
			if limit < 0 {
				continue
			}
			ids, err := tok.EncodeLimit(c.Text, opt, limit)
			switch {
			case limit >= n && (err != nil || !equalInts(ids, c.IDs)):
				t.Errorf("%s/%s limit %d ≥ %d tokens: %v, %v; want the golden ids", c.Tokenizer, c.Name, limit, n, window(ids, 0), err)
			case limit < n && (!errors.Is(err, ErrLimit) || ids != nil):
				t.Errorf("%s/%s limit %d < %d tokens: %d ids, %v; want ErrLimit", c.Tokenizer, c.Name, limit, n, len(ids), err)
			}
		}
	}
	if _, err := testTokenizer(t, "tiny").EncodeLimit("x", EncodeOptions{}, -1); err == nil {
		t.Error("a negative limit is accepted")
	}
}

// TestEncodeLimitLongText: texts of 4 MiB whose tokens are one byte each (digits, which the
// Qwen pattern splits one by one), one pre-token (a run of letters), whitespace, words and
// special tokens: EncodeLimit with a limit of 1000 refuses each with ErrLimit after
// allocating far less than the text (Encode allocates tens of bytes per byte: ids, pieces,
// BPE symbols), and texts just under the limit still encode exactly as Encode does.
func TestEncodeLimitLongText(t *testing.T) {
	const n = 4 << 20
	for _, name := range []string{"tiny", "qwen3"} {
		tok := testTokenizer(t, name)
		if tok.bpe.maxTok < 1 {
			t.Fatalf("%s: maxTok %d", name, tok.bpe.maxTok)
		}
		// maxTok bounds the bytes of every vocabulary entry (what the pre-check relies on).
		for s := range tok.bpe.vocab {
			if b := len(tokenBytes(s)); b > tok.bpe.maxTok {
				t.Fatalf("%s: token %q stands for %d bytes > maxTok %d", name, s, b, tok.bpe.maxTok)
			}
		}
		for _, text := range []string{
			strings.Repeat("7", n),
			strings.Repeat("a", n),
			strings.Repeat(" ", n),
			strings.Repeat("word ", n/5),
			strings.Repeat("<|im_start|>", n/12),
		} {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			ids, err := tok.EncodeLimit(text, EncodeOptions{}, 1000)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			if !errors.Is(err, ErrLimit) || ids != nil {
				t.Errorf("%s %q×%d: %d ids, %v; want ErrLimit", name, text[:12], len(text), len(ids), err)
			}
			if alloc > 256<<10 {
				t.Errorf("%s %q×%d: refusing it allocated %d B, over 256 KiB", name, text[:12], len(text), alloc)
			}
			// Just within the limit: the same ids as Encode.
			want, err := tok.Encode(text[:3000])
			if err != nil {
				t.Fatal(err)
			}
			got, err := tok.EncodeLimit(text[:3000], EncodeOptions{}, len(want))
			if err != nil || !equalInts(got, want) {
				t.Errorf("%s %q×3000 at its own count %d: %d ids, %v", name, text[:12], len(want), len(got), err)
			}
			if _, err := tok.EncodeLimit(text[:3000], EncodeOptions{}, len(want)-1); !errors.Is(err, ErrLimit) {
				t.Errorf("%s %q×3000 at one less than its count %d: %v, want ErrLimit", name, text[:12], len(want), err)
			}
		}
	}
}
