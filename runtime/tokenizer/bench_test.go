package tokenizer

import (
	"strings"
	"testing"
	"time"
)

// benchText is about 100k Qwen3 tokens of mixed text (the long golden cases, repeated), so
// the benchmark is the 100k-token prompt the issue asks about.
func benchText(b *testing.B) string {
	g := readGoldens(b, jsGoldenPath)
	var sb strings.Builder
	for sb.Len() < 420_000 {
		for _, c := range g.Cases {
			if c.Tokenizer == "qwen3" {
				sb.WriteString(c.Text)
				sb.WriteByte('\n')
			}
		}
	}
	return sb.String()
}

// BenchmarkEncode reports tokens/s for Encode of a ~100k-token prompt on a cold and a warm
// pre-token cache, and the ratio of encode time to the time of the split alone (the floor:
// Encode cannot be faster than its own pre-tokenizer) measured in the same run.
func BenchmarkEncode(b *testing.B) {
	tok := testTokenizer(b, "qwen3")
	text := benchText(b)
	ids, err := tok.Encode(text)
	if err != nil {
		b.Fatal(err)
	}
	// Floor: the split alone.
	t0 := time.Now()
	nPieces := 0
	const floorReps = 3
	for range floorReps {
		_ = tok.splitters[0].split(text, func(string) { nPieces++ })
	}
	floor := time.Since(t0) / floorReps
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		tok.bpe.mu.Lock()
		tok.bpe.cache = nil // cold cache each time: the worst case for a new prompt
		tok.bpe.mu.Unlock()
		if _, err := tok.Encode(text); err != nil {
			b.Fatal(err)
		}
	}
	perOp := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(len(ids))/perOp.Seconds(), "tokens/s")
	b.ReportMetric(float64(len(ids)), "tokens")
	b.ReportMetric(float64(perOp)/float64(floor), "x_split_floor")
}

// BenchmarkSplitRegexp2 is the generic regexp2 splitter on the same text, for comparison with
// the hand-written Qwen matcher (ratio regexp2/hand-written in the same run).
func BenchmarkSplitRegexp2(b *testing.B) {
	text := benchText(b)
	re, err := compileRegexSplitter(QwenPattern)
	if err != nil {
		b.Fatal(err)
	}
	fast := qwenSplitter{}
	t0 := time.Now()
	_ = fast.split(text, func(string) {})
	floor := time.Since(t0)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		if err := re.split(text, func(string) {}); err != nil {
			b.Fatal(err)
		}
	}
	perOp := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(perOp)/float64(floor), "x_handwritten")
}
