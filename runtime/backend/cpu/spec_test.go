package cpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"lithos/runtime/backend"
	"lithos/runtime/model"
	"lithos/runtime/sample"
)

// testDrafter is a backend.Drafter for the round tests: its logits row k of the block anchored
// at position pos comes from row(pos, prev, k, logits), prev being the token chosen for the
// slot before (the anchor for k = 0), so oracle, always-wrong, wrong-at-k and random drafters
// are one type. Its proposers record the features appended.
type testDrafter struct {
	taps          []int
	block, hidden int
	vocab         int
	conf          []float32 // returned as the confidence of every block (nil: none)
	row           func(p *testProposer, pos int, prev int32, k int, logits []float32)
	props         []*testProposer
}

func (d *testDrafter) TapLayers() []int { return d.taps }
func (d *testDrafter) BlockSize() int   { return d.block }
func (d *testDrafter) NewProposer(capacity int) (backend.Proposer, error) {
	p := &testProposer{d: d}
	d.props = append(d.props, p)
	return p, nil
}

type testProposer struct {
	d       *testDrafter
	n       int
	feats   []float32
	anchors []int32 // the anchor of every Draft call
	hist    []int32 // committed tokens, when the test gives the prompt (self-drafting)
	block   []int32 // the last Draft's [anchor, drafts…]
	st      *model.State
}

func (p *testProposer) Len() int { return p.n }

func (p *testProposer) Append(_ context.Context, feats []float32, n int) error {
	if w := len(p.d.taps) * p.d.hidden; n < 1 || len(feats) != n*w {
		return fmt.Errorf("append: %d floats for %d rows of %d", len(feats), n, w)
	}
	p.feats = append(p.feats, feats...)
	if p.hist != nil && p.n >= len(p.hist) { // rows of a round: the anchor and accepted drafts
		if len(p.block) < n {
			return fmt.Errorf("append of %d rows after a block of %d", n, len(p.block))
		}
		p.hist = append(p.hist, p.block[:n]...)
	}
	p.n += n
	return nil
}

func (p *testProposer) Draft(_ context.Context, anchor int32, choose func(int, []float32) int32, out *backend.Proposal) error {
	p.anchors = append(p.anchors, anchor)
	p.block = append(p.block[:0], anchor)
	logits := make([]float32, p.d.vocab)
	prev := anchor
	out.Tokens = out.Tokens[:0]
	for k := 0; k < p.d.block; k++ {
		clear(logits)
		p.d.row(p, p.n, prev, k, logits)
		prev = choose(k, logits)
		out.Tokens = append(out.Tokens, prev)
		p.block = append(p.block, prev)
	}
	out.Confidence = append(out.Confidence[:0], p.d.conf...)
	if p.d.conf == nil {
		out.Confidence = nil
	}
	return nil
}

// seqDrafter proposes from seq (prompt ++ continuation): draft k of the block anchored at pos
// is seq[pos+k+1] — the target's own continuation — except at the positions k where wrong
// says so, where it is seq[pos+k+1]+1 mod vocab.
func seqDrafter(m *model.Model, seq []int32, wrong func(k int) bool) *testDrafter {
	return &testDrafter{taps: []int{0, 2, 3}, block: 7, hidden: m.Cfg.Hidden, vocab: m.Cfg.Vocab,
		row: func(_ *testProposer, pos int, _ int32, k int, logits []float32) {
			tok := int32(0)
			if i := pos + k + 1; i < len(seq) {
				tok = seq[i]
			}
			if wrong(k) {
				tok = (tok + 1) % int32(len(logits))
			}
			logits[tok] = 10
		}}
}

type roundLog struct{ rows, draftLen, accepted, committed, pushed uint32 }

// generate runs prompt to done on a fresh session of tg and returns the tokens, the session
// and, per Decode(1) call, the step state's round fields.
func generate(t *testing.T, tg *Target, opt backend.SessionOptions, prompt []int32, stopAt uint32) ([]int32, *Session, []roundLog) {
	t.Helper()
	if opt.Sampling.TopP == 0 {
		opt.Sampling.TopP = 1
	}
	s, err := tg.NewSession(opt)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, s.(*Session), prompt, stopAt)
}

// reset empties s for another run with seed (a fresh step state, ring, stats and proposer),
// so that the many-run tests do not allocate a model state per run.
func (s *Session) reset(t *testing.T, seed uint64) {
	t.Helper()
	s.st.Reset()
	s.ss = backend.NewStepState(len(s.ss.Pending), seed)
	s.ring = backend.NewRing(s.ring.Capacity())
	for _, c := range [][]int{s.stats.Committed, s.stats.Drafted, s.stats.Accepted} {
		clear(c)
	}
	clear(s.stats.ConfidenceSum)
	s.stats = backend.RoundStats{Committed: s.stats.Committed, Drafted: s.stats.Drafted, Accepted: s.stats.Accepted, ConfidenceSum: s.stats.ConfidenceSum}
	if s.opt.Drafter != nil {
		var err error
		if s.prop, err = s.opt.Drafter.NewProposer(s.opt.Capacity); err != nil {
			t.Fatal(err)
		}
	}
}

// run is generate on an existing session.
func run(t *testing.T, s *Session, prompt []int32, stopAt uint32) ([]int32, *Session, []roundLog) {
	t.Helper()
	ss := s.State()
	ss.StopAt = stopAt
	ctx := context.Background()
	if err := s.Prefill(ctx, prompt); err != nil {
		t.Fatal(err)
	}
	got := s.Ring().Drain(ss, nil)
	var log []roundLog
	for ss.Done == 0 {
		head := ss.RingHead
		if err := s.Decode(ctx, 1); err != nil {
			t.Fatal(err)
		}
		log = append(log, roundLog{ss.Rows, ss.DraftLen, ss.Accepted, ss.Committed, ss.RingHead - head})
		got = s.Ring().Drain(ss, got)
	}
	return got, s, log
}

// sameGDN requires the committed GDN conv and recurrent states of a and b to agree within tol
// (relative to each tensor's largest value).
func sameGDN(t *testing.T, what string, a, b *model.State, tol float64) {
	t.Helper()
	if a.Pos() != b.Pos() {
		t.Fatalf("%s: positions %d and %d", what, a.Pos(), b.Pos())
	}
	worst := 0.0
	for gi := 0; gi < a.GDNLayers(); gi++ {
		ec, _ := relErr(a.Conv(gi, a.Slot()), b.Conv(gi, b.Slot()))
		er, _ := relErr(a.Recurrent(gi, a.Slot()), b.Recurrent(gi, b.Slot()))
		worst = max(worst, ec, er)
	}
	if worst > tol {
		t.Fatalf("%s: GDN states differ from the plain decode's by %.3g (relative), want ≤ %.0e", what, worst, tol)
	}
	t.Logf("%s: GDN states within %.2g of the plain decode's", what, worst)
}

// TestRoundAcceptancePaths drives rounds on the packed golden target b with drafters that
// propose transformers' greedy continuation (all 7 accepted: 8 tokens a round), always the
// wrong token (1 a round) and a continuation wrong at draft k (k+1 a round): each commits
// exactly the golden tokens, with the step state's Rows 8, DraftLen 7, Accepted and Committed
// of every round as expected, and leaves GDN states equal to a plain decode's; the drafter
// sees one feature row per committed position, equal to the target's taps of a plain pass.
func TestRoundAcceptancePaths(t *testing.T) {
	g := readGoldens(t, "b")
	prompt, want := g.ints(t, "prompt.11"), g.ints(t, "greedy.11")
	seq := append(slices.Clone(prompt), want...)
	_, m := openGoldenTarget(t, "b")
	tg := &Target{M: m}
	const n = 29 // 1 from the prefill + rounds; a multiple of 8 and of k+1 for the cases below, plus 1
	plain, ps, plog := generate(t, tg, backend.SessionOptions{Capacity: 64}, prompt, n)
	if !slices.Equal(plain, want[:n]) {
		t.Fatalf("plain decode %v, transformers %v", plain, want[:n])
	}
	if len(plog) != n-1 || ps.Stats().PlainSteps != n-1 || ps.Stats().Rounds != 0 {
		t.Fatalf("plain decode: %d steps, stats %+v", len(plog), ps.Stats())
	}
	// The taps a plain pass gives for every committed position.
	ref, err := m.NewState(64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.StepWith(context.Background(), ref, seq[:len(prompt)+n-1], model.StepOptions{Taps: []int{0, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	refTaps := ref.Taps()

	cases := []struct {
		name  string
		wrong func(k int) bool
		per   int // tokens a round
	}{
		{"oracle", func(int) bool { return false }, 8},
		{"always wrong", func(int) bool { return true }, 1},
		{"wrong at 0", func(k int) bool { return k == 0 }, 1},
		{"wrong at 3", func(k int) bool { return k == 3 }, 4},
		{"wrong at 6", func(k int) bool { return k == 6 }, 7},
		{"wrong at 1 and 4", func(k int) bool { return k == 1 || k == 4 }, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := seqDrafter(m, seq, c.wrong)
			got, s, log := generate(t, tg, backend.SessionOptions{Capacity: 64, Drafter: d}, prompt, n)
			if !slices.Equal(got, want[:n]) {
				t.Fatalf("tokens %v, transformers %v", got, want[:n])
			}
			for i, r := range log {
				last := i == len(log)-1
				wantC := uint32(c.per)
				if last {
					wantC = uint32((n - 1) - c.per*(len(log)-1)) // StopAt may cut the last round
				}
				if r.rows != 8 || r.draftLen != 7 || r.accepted != uint32(c.per-1) || r.committed != wantC || r.pushed != wantC {
					t.Fatalf("round %d: %+v; want rows 8, 7 drafts, %d accepted, %d committed", i, r, c.per-1, wantC)
				}
			}
			st := s.Stats()
			if st.Rounds != len(log) || st.RoundTokens != n-1 || st.PlainSteps != 0 || st.Drafted[6] != st.Rounds ||
				st.Accepted[0] != boolInt(c.per > 1)*st.Rounds || st.DraftTime <= 0 || st.VerifyTime <= 0 {
				t.Fatalf("stats %+v", st)
			}
			if ss := s.State(); ss.Position != uint32(len(prompt)+n-1) || ss.DraftContext != ss.Position || ss.Step&1 != uint32(s.st.Slot()) {
				t.Fatalf("step state %+v, GDN slot %d", ss, s.st.Slot())
			}
			sameGDN(t, c.name, s.st, ps.st, 1e-4)
			p := d.props[0]
			if p.n != len(prompt)+n-1 || len(p.feats) != len(refTaps) {
				t.Fatalf("drafter context: %d rows, %d floats; want %d rows, %d floats", p.n, len(p.feats), len(prompt)+n-1, len(refTaps))
			}
			if e, at := relErr(p.feats, refTaps); e > 1e-4 {
				t.Fatalf("appended features differ from a plain pass's taps by %.3g at row %d", e, at/(3*m.Cfg.Hidden))
			}
			for i, a := range p.anchors {
				if a != got[c.per*i] {
					t.Fatalf("round %d drafted after anchor %d, want %d", i, a, got[c.per*i])
				}
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRoundStops: an EOS inside the accepted prefix ends the round there (the EOS is the last
// token pushed; nothing after it is committed); StopAt inside a round cuts it the same way;
// near the end of the context the session falls back to single-row steps and then reports
// ErrContextFull, with the same tokens as a plain decode.
func TestRoundStops(t *testing.T) {
	g := readGoldens(t, "b")
	prompt, want := g.ints(t, "prompt.11"), g.ints(t, "greedy.11")
	seq := append(slices.Clone(prompt), want...)
	_, m := openGoldenTarget(t, "b")
	tg := &Target{M: m}
	oracle := func() *testDrafter { return seqDrafter(m, seq, func(int) bool { return false }) }

	// EOS = golden token 12 (not earlier in the continuation): rounds push 1 | 8 | 4.
	eos := want[12]
	if slices.Contains(want[:12], eos) {
		t.Fatalf("golden token %d repeats earlier", eos)
	}
	got, s, log := generate(t, tg, backend.SessionOptions{Capacity: 64, Drafter: oracle(), EOS: []int32{eos}}, prompt, 0)
	if !slices.Equal(got, want[:13]) || s.State().Done != 1 || s.State().Error != backend.ErrNone {
		t.Fatalf("EOS %d: tokens %v, want %v", eos, got, want[:13])
	}
	if last := log[len(log)-1]; last.accepted != 7 || last.committed != 4 || s.st.Pos() != len(prompt)+12 {
		t.Fatalf("EOS round %+v, position %d", last, s.st.Pos())
	}

	// StopAt 14: rounds push 1 | 8 | 5.
	got, s, log = generate(t, tg, backend.SessionOptions{Capacity: 64, Drafter: oracle()}, prompt, 14)
	if !slices.Equal(got, want[:14]) || log[len(log)-1].committed != 5 || s.State().Position != uint32(len(prompt)+13) {
		t.Fatalf("StopAt 14: tokens %v, log %+v", got, log)
	}

	// An undrained ring of 4 overflows inside the first round: the 3 tokens pushed are
	// committed, then ErrRingOverflow.
	s0, err := tg.NewSession(backend.SessionOptions{Capacity: 64, RingCapacity: 4, Drafter: oracle(), Sampling: sample.Params{TopP: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s0.Prefill(ctx, prompt)
	if err := s0.Decode(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if ss := s0.State(); ss.Error != backend.ErrRingOverflow || ss.Committed != 3 || ss.Accepted != 7 || ss.Position != uint32(len(prompt)+3) ||
		!slices.Equal(s0.Ring().Drain(ss, nil), want[:4]) {
		t.Fatalf("ring overflow: %+v", ss)
	}

	// Context 11 + 8 + 8 + 3: two rounds, three single rows, then the context is full.
	capacity := len(prompt) + 19
	plain, ps, _ := generate(t, tg, backend.SessionOptions{Capacity: capacity}, prompt, 0)
	got, s, log = generate(t, tg, backend.SessionOptions{Capacity: capacity, Drafter: oracle()}, prompt, 0)
	if !slices.Equal(got, plain) || !slices.Equal(got, want[:20]) || s.State().Error != backend.ErrContextFull {
		t.Fatalf("context %d: tokens %v, plain %v, error %d", capacity, got, plain, s.State().Error)
	}
	if st := s.Stats(); st.Rounds != 2 || st.PlainSteps != 3 || st.RoundTokens != 16 {
		t.Fatalf("context %d: stats %+v, log %+v", capacity, st, log)
	}
	sameGDN(t, "fallback", s.st, ps.st, 1e-4)
	if p := s.prop.(*testProposer); p.n != capacity {
		t.Fatalf("drafter context %d rows at position %d", p.n, capacity)
	}
}

// TestRoundConfidenceStop: with ConfidenceStop a round verifies only the leading drafts whose
// confidence reaches it (here 3 of 7: 4 rows, 4 tokens a round); the mean confidences reach the
// stats.
func TestRoundConfidenceStop(t *testing.T) {
	g := readGoldens(t, "b")
	prompt, want := g.ints(t, "prompt.11"), g.ints(t, "greedy.11")
	seq := append(slices.Clone(prompt), want...)
	_, m := openGoldenTarget(t, "b")
	d := seqDrafter(m, seq, func(int) bool { return false })
	d.conf = []float32{0.9, 0.8, 0.7, 0.4, 0.9, 0.9, 0.9}
	got, s, log := generate(t, &Target{M: m}, backend.SessionOptions{Capacity: 64, Drafter: d, ConfidenceStop: 0.5}, prompt, 13)
	if !slices.Equal(got, want[:13]) {
		t.Fatalf("tokens %v, want %v", got, want[:13])
	}
	for _, r := range log {
		if r.rows != 4 || r.draftLen != 3 || r.accepted != 3 || r.committed != 4 {
			t.Fatalf("round %+v: want 4 rows, 3 drafts, all accepted", r)
		}
	}
	st := s.Stats()
	if st.ConfidenceRounds != 3 || st.ConfidenceSum[3] != 3*float64(float32(0.4)) || st.Drafted[3] != 0 || st.Drafted[2] != 3 {
		t.Fatalf("stats %+v", st)
	}
	// Off (0) by default: every round verifies 7 drafts.
	_, _, log = generate(t, &Target{M: m}, backend.SessionOptions{Capacity: 64, Drafter: d}, prompt, 13)
	if log[0].draftLen != 7 {
		t.Fatalf("without ConfidenceStop: %+v", log[0])
	}
}

// TestRoundRefuses: a drafter tapping a layer the target lacks is refused at NewSession; a
// drafter proposing the wrong number of drafts or a token outside the vocabulary fails the
// round with an error naming it.
func TestRoundRefuses(t *testing.T) {
	_, m := openGoldenTarget(t, "b")
	tg := &Target{M: m}
	for _, taps := range [][]int{{0, 4}, {-2}, {}} {
		d := seqDrafter(m, nil, func(int) bool { return false })
		d.taps = taps
		_, err := tg.NewSession(backend.SessionOptions{Capacity: 32, Sampling: sample.Params{TopP: 1}, Drafter: d})
		if err == nil || !strings.Contains(err.Error(), "tap") {
			t.Errorf("taps %v: %v", taps, err)
		}
	}
	bad := []struct {
		name string
		row  func(*testProposer, int, int32, int, []float32)
		want string
	}{
		{"out of vocabulary", nil, "outside the vocabulary"},
	}
	for _, c := range bad {
		d := seqDrafter(m, nil, func(int) bool { return false })
		d.vocab = m.Cfg.Vocab + 5
		d.row = func(_ *testProposer, _ int, _ int32, _ int, l []float32) { l[len(l)-1] = 1 }
		s, err := tg.NewSession(backend.SessionOptions{Capacity: 32, Sampling: sample.Params{TopP: 1}, Drafter: d})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Prefill(context.Background(), []int32{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		if err := s.Decode(context.Background(), 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	short := &shortDrafter{}
	s, err := tg.NewSession(backend.SessionOptions{Capacity: 32, Sampling: sample.Params{TopP: 1}, Drafter: short})
	if err != nil {
		t.Fatal(err)
	}
	s.Prefill(context.Background(), []int32{1, 2, 3})
	if err := s.Decode(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "2 drafts, want the block size 7") {
		t.Errorf("short block: %v", err)
	}
	failing := &shortDrafter{fail: true}
	s, _ = tg.NewSession(backend.SessionOptions{Capacity: 32, Sampling: sample.Params{TopP: 1}, Drafter: failing})
	s.Prefill(context.Background(), []int32{1, 2, 3})
	if err := s.Decode(context.Background(), 1); err == nil || !strings.Contains(err.Error(), "drafter: draft at position 3") {
		t.Errorf("failing drafter: %v", err)
	}
}

// shortDrafter proposes two tokens for a block of 7, or fails.
type shortDrafter struct {
	n    int
	fail bool
}

func (d *shortDrafter) TapLayers() []int                                   { return []int{1} }
func (d *shortDrafter) BlockSize() int                                     { return 7 }
func (d *shortDrafter) NewProposer(int) (backend.Proposer, error)          { return d, nil }
func (d *shortDrafter) Len() int                                           { return d.n }
func (d *shortDrafter) Append(_ context.Context, _ []float32, n int) error { d.n += n; return nil }
func (d *shortDrafter) Draft(_ context.Context, _ int32, _ func(int, []float32) int32, out *backend.Proposal) error {
	if d.fail {
		return errors.New("no")
	}
	out.Tokens = []int32{1, 2}
	return nil
}
