package backend

import (
	"strings"
	"testing"
)

// TestCheckPrompt: the checks every session's Prefill makes before any work, with the
// messages that name what is wrong.
func TestCheckPrompt(t *testing.T) {
	for _, c := range []struct {
		name     string
		prompt   []int32
		position uint32
		want     string // "" = accepted
	}{
		{"inside the context", []int32{0, 5, 9}, 2, ""},
		{"fills the context exactly", []int32{1, 2, 3}, 7, ""},
		{"position past the context", []int32{1}, 11, "1 prompt tokens at position 11 exceed the context of 10"},
		{"empty", nil, 0, "empty prompt"},
		{"negative token", []int32{1, -1}, 0, "token -1 (prompt position 1) is outside the vocabulary [0, 10)"},
		{"token past the vocabulary", []int32{10}, 0, "token 10 (prompt position 0) is outside the vocabulary [0, 10)"},
		{"past the context", []int32{1, 2, 3, 4}, 7, "4 prompt tokens at position 7 exceed the context of 10"},
	} {
		err := CheckPrompt(c.prompt, 10, c.position, 10)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestRoundStatsClone: a clone shares no slice with the original.
func TestRoundStatsClone(t *testing.T) {
	r := RoundStats{Rounds: 2, Committed: []int{1, 1}, Drafted: []int{2}, Accepted: []int{1}, ConfidenceSum: []float64{0.5}}
	c := r.Clone()
	c.Committed[0], c.Drafted[0], c.Accepted[0], c.ConfidenceSum[0] = 9, 9, 9, 9
	if r.Committed[0] != 1 || r.Drafted[0] != 2 || r.Accepted[0] != 1 || r.ConfidenceSum[0] != 0.5 || c.Rounds != 2 {
		t.Fatalf("the clone shares memory with the original or lost a field: %+v / %+v", r, c)
	}
}
