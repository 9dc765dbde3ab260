package generate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"lithos/manifests"
	"lithos/runtime/backend"
	"lithos/runtime/sample"
)

// BenchReport is what Runner.Bench measured: plain decoding and speculative rounds on the same
// prompt, each against a floor measured in the same run (ARCHITECTURE.md §5): the tokens per
// second the passes would give if each were bound by reading its bytes at the machine's
// measured memory read bandwidth.
type BenchReport struct {
	Bundle  string `json:"bundle"`
	Backend string `json:"backend"`
	// KVCache is the sessions' KV cache element type (backend.KVFloat32 or KVBF16:
	// Request.KVCache).
	KVCache string `json:"kv_cache"`
	// Threads is GOMAXPROCS; ReadGBs the read bandwidth of the memory the weights live in,
	// measured before the runs (GB = 1e9 bytes): the device's when the target measures it
	// (BandwidthMeter: the GPU backends), else the host's (best of 5 parallel reads of 256 MiB).
	// BandwidthOf says which: "device" or "host".
	Threads     int     `json:"threads"`
	ReadGBs     float64 `json:"read_gb_per_s"`
	BandwidthOf string  `json:"bandwidth_of"`
	// TargetBytesPerPass is the bytes one target pass reads (every matrix and vector of the
	// target, one embedding row); DraftBytesPerRound the bytes the drafter reads per round
	// (its matrices and vectors, the target's LM head it projects with, B rows of the
	// embedding and of the Markov table). 0 without a draft head.
	TargetBytesPerPass int64 `json:"target_bytes_per_pass"`
	DraftBytesPerRound int64 `json:"draft_bytes_per_round"`
	PromptTokens       int   `json:"prompt_tokens"`
	// Plain is the run without the draft head; Speculative with it (null without one).
	Plain       BenchRun  `json:"plain"`
	Speculative *BenchRun `json:"speculative"`
	// Identical reports whether the two runs generated the same tokens (they must for greedy
	// decoding and the point-mass rule).
	Identical bool `json:"identical"`
	// Passes is the time of one pass of each kind against its floor (ARCHITECTURE.md §5; issue
	// 10's goals: a verify pass at ≥ 0.9 of the floor, a full round ≤ 1.2× the verify pass).
	Passes BenchPasses `json:"passes"`
	// Snapshot is the prefix-checkpoint measurement (BenchSnapshot; `bench --snapshot N`),
	// omitted when not asked for.
	Snapshot *SnapshotReport `json:"snapshot,omitempty"`
}

// BenchPasses is the time of one pass of each kind of the best runs, each against the time
// its bytes take at the measured read bandwidth. Verify, Draft and Round are nil without a
// draft head (or when the speculative run had no round).
type BenchPasses struct {
	// PlainStep is a single-row decode step of the plain run: its decode time ÷ its passes;
	// floor: TargetBytesPerPass.
	PlainStep PassTime `json:"plain_step"`
	// Verify is a round's target part (the verify pass over the anchor and the block's
	// drafts, the accept scan, the commit): Speculative.VerifyMSPerRound, floor
	// TargetBytesPerPass. Draft is the drafter's part (Speculative.DraftMSPerRound), floor
	// DraftBytesPerRound. Round is a full round's wall clock as the host saw it, everything
	// included: the speculative run's decode time ÷ its passes, floor TargetBytesPerPass +
	// DraftBytesPerRound (the decode time includes any round queued behind the one that
	// reached MaxTokens, which commits nothing: Request.RoundsPerCall).
	Verify *PassTime `json:"verify,omitempty"`
	Draft  *PassTime `json:"draft,omitempty"`
	Round  *PassTime `json:"round,omitempty"`
	// RoundOverVerify is Round.MS ÷ Verify.MS (0 without them).
	RoundOverVerify float64 `json:"round_over_verify,omitempty"`
}

// PassTime is one pass's time (ms) and its floor: FloorMS = its bytes ÷ the read bandwidth,
// XFloor = FloorMS ÷ MS (1: as fast as the memory bus allows; 0 when either is unknown).
type PassTime struct {
	MS      float64 `json:"ms"`
	FloorMS float64 `json:"floor_ms"`
	XFloor  float64 `json:"x_floor"`
}

// passTime is a PassTime of ms for a pass reading bytes at gbs GB/s.
func passTime(ms float64, bytes int64, gbs float64) PassTime {
	p := PassTime{MS: ms}
	if gbs > 0 {
		p.FloorMS = float64(bytes) / (gbs * 1e9) * 1e3
	}
	if p.MS > 0 {
		p.XFloor = p.FloorMS / p.MS
	}
	return p
}

// passes fills rep.Passes from its runs.
func (rep *BenchReport) passes() {
	if p := rep.Plain; p.Passes > 0 {
		rep.Passes.PlainStep = passTime(p.DecodeSeconds*1e3/float64(p.Passes), rep.TargetBytesPerPass, rep.ReadGBs)
	}
	s := rep.Speculative
	if s == nil || s.Speculative == nil || s.Speculative.Rounds == 0 || s.Passes == 0 {
		return
	}
	v := passTime(s.Speculative.VerifyMSPerRound, rep.TargetBytesPerPass, rep.ReadGBs)
	d := passTime(s.Speculative.DraftMSPerRound, rep.DraftBytesPerRound, rep.ReadGBs)
	r := passTime(s.DecodeSeconds*1e3/float64(s.Passes), rep.TargetBytesPerPass+rep.DraftBytesPerRound, rep.ReadGBs)
	rep.Passes.Verify, rep.Passes.Draft, rep.Passes.Round = &v, &d, &r
	if v.MS > 0 {
		rep.Passes.RoundOverVerify = r.MS / v.MS
	}
}

// BenchRun is one mode of BenchReport: the best of the runs by decode rate.
type BenchRun struct {
	// Tokens is the tokens generated; DecodeTokens those of the decode passes (the first
	// comes from the prefill), DecodeSeconds their time, DecodeTokPerS their rate.
	Tokens        int     `json:"tokens"`
	DecodeTokens  int     `json:"decode_tokens"`
	DecodeSeconds float64 `json:"decode_seconds"`
	DecodeTokPerS float64 `json:"decode_tok_per_s"`
	// Passes is the target passes of the decode (rounds and single-row steps);
	// TokensPerPass = DecodeTokens ÷ Passes.
	Passes        int     `json:"passes"`
	TokensPerPass float64 `json:"tokens_per_pass"`
	// BytesRead is the bytes the decode passes read (target passes, drafter rounds);
	// FloorTokPerS = DecodeTokens ÷ (BytesRead ÷ read bandwidth); XFloor = DecodeTokPerS ÷
	// FloorTokPerS (1: as fast as the memory bus allows).
	BytesRead    int64   `json:"bytes_read"`
	FloorTokPerS float64 `json:"floor_tok_per_s"`
	XFloor       float64 `json:"x_floor"`
	// Speculative is the round telemetry (null for the plain run).
	Speculative *Speculative `json:"speculative,omitempty"`
	// PrefillTokPerS is the prompt rate.
	PrefillTokPerS float64 `json:"prefill_tok_per_s"`
	generated      []int32
}

// BandwidthMeter is a target whose weights live in device memory: ReadBandwidthGBs measures
// that memory's streaming read bandwidth (GB/s, GB = 1e9 bytes), the floor Bench compares the
// passes with.
type BandwidthMeter interface {
	ReadBandwidthGBs() (float64, error)
}

// Bench runs req runs times without and (when the runner has a draft head) with it, and
// reports the best decode rate of each mode against its floor. An untimed warm-up of each mode
// (at most 16 tokens) comes first: the first generation in a process runs about 2x slower
// (page faults on the mapped weights, allocator growth), which would otherwise fall on the
// mode timed first. req.NoDraft is ignored; a stop string or an EOS may end a run early (give
// MaxTokens and a prompt that run long). Errors: req's (Generate's), runs < 1.
func (r *Runner) Bench(ctx context.Context, req Request, runs int) (*BenchReport, error) {
	if runs < 1 {
		return nil, fmt.Errorf("bench: %d runs: want at least 1", runs)
	}
	rep := &BenchReport{Bundle: r.Bundle.Dir, Backend: r.Backend.Name(), KVCache: cmp.Or(req.KVCache, backend.KVFloat32), Threads: runtime.GOMAXPROCS(0)}
	if m, ok := r.Target.(BandwidthMeter); ok {
		gbs, err := m.ReadBandwidthGBs()
		if err != nil {
			return nil, fmt.Errorf("bench: device read bandwidth: %w", err)
		}
		rep.ReadGBs, rep.BandwidthOf = gbs, "device"
	} else {
		rep.ReadGBs, rep.BandwidthOf = MeasureReadBandwidth(256<<20), "host"
	}
	rep.TargetBytesPerPass, rep.DraftBytesPerRound = PassBytes(r.Bundle.Manifest)
	req.OnText, req.OnToken = nil, nil
	one := func(noDraft bool) (*BenchRun, error) {
		var best *BenchRun
		for range runs {
			req.NoDraft = noDraft
			res, err := r.Generate(ctx, req)
			if err != nil {
				return nil, err
			}
			rep.PromptTokens = res.PromptTokens
			run := &BenchRun{Tokens: len(res.Tokens), DecodeTokPerS: res.DecodeTokPerS, Passes: res.Rounds,
				TokensPerPass: res.TokensPerRound, Speculative: res.Speculative, PrefillTokPerS: res.PrefillTokPerS, generated: res.Tokens}
			run.DecodeTokens = int(float64(res.Rounds)*res.TokensPerRound + 0.5)
			if res.DecodeTokPerS > 0 {
				run.DecodeSeconds = float64(run.DecodeTokens) / res.DecodeTokPerS
			}
			run.BytesRead = int64(res.Rounds) * rep.TargetBytesPerPass
			if s := res.Speculative; s != nil {
				run.BytesRead += int64(s.Rounds) * rep.DraftBytesPerRound
			}
			if run.BytesRead > 0 && rep.ReadGBs > 0 {
				run.FloorTokPerS = float64(run.DecodeTokens) / (float64(run.BytesRead) / (rep.ReadGBs * 1e9))
				run.XFloor = run.DecodeTokPerS / run.FloorTokPerS
			}
			if best == nil || run.DecodeTokPerS > best.DecodeTokPerS {
				best = run
			}
		}
		return best, nil
	}
	warm := req
	warm.MaxTokens = min(req.MaxTokens, 16)
	for _, noDraft := range []bool{true, false} {
		if !noDraft && r.Draft == nil {
			continue
		}
		warm.NoDraft = noDraft
		if _, err := r.Generate(ctx, warm); err != nil {
			return nil, fmt.Errorf("bench warm-up: %w", err)
		}
	}
	plain, err := one(true)
	if err != nil {
		return nil, err
	}
	rep.Plain = *plain
	if r.Draft != nil {
		if rep.Speculative, err = one(false); err != nil {
			return nil, err
		}
		rep.Identical = slices.Equal(plain.generated, rep.Speculative.generated)
	}
	rep.passes()
	if rep.Plain.DecodeTokens == 0 {
		return rep, errors.New("bench: the run ended at the first token (EOS or a stop string): nothing was decoded")
	}
	return rep, nil
}

// PassBytes returns the bytes a target pass reads and the bytes a drafter round reads, from a
// bundle's manifest: every target tensor in full except the embedding table (one row
// gathered); for the draft head every draft tensor in full except gathered tables (block_size
// rows each, the Markov W1), plus the target's LM head (the head projects its block with it)
// and block_size target embedding rows. The KV caches, the GDN states and the drafter's
// context K/V are not counted.
func PassBytes(m *manifests.Bundle) (target, draft int64) {
	block := int64(7)
	if m.Draft != nil {
		if bs := draftBlockSize(m.Draft.Config); bs > 0 {
			block = int64(bs)
		}
	}
	var lmHead, embedRow int64
	for i := range m.Tensors {
		t := &m.Tensors[i]
		gathered := t.Role == manifests.RoleEmbedding && len(t.Shape) > 0 && t.Shape[0] > 0
		row := t.Length
		if gathered {
			row = t.Length / t.Shape[0]
		}
		switch {
		case t.Model == manifests.ModelTarget && gathered:
			target += row
			embedRow = row
		case t.Model == manifests.ModelTarget:
			target += t.Length
			if isLMHead(t) {
				lmHead = t.Length
			}
		case t.Model == manifests.ModelDraft && gathered:
			draft += block * row
		case t.Model == manifests.ModelDraft:
			draft += t.Length
		}
	}
	if m.Draft == nil {
		return target, 0
	}
	return target, draft + lmHead + block*embedRow
}

// isLMHead reports whether t holds the target's lm_head.weight.
func isLMHead(t *manifests.BundleTensor) bool {
	if t.Name == "lm_head" {
		return true
	}
	if t.Stack != nil {
		for _, s := range t.Stack.Segments {
			if s.Name == "lm_head.weight" {
				return true
			}
		}
	}
	return false
}

// draftBlockSize reads block_size from a draft config (0 when absent or unreadable).
func draftBlockSize(raw []byte) int {
	var c struct {
		BlockSize int `json:"block_size"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return 0
	}
	return c.BlockSize
}

var (
	bwMu   sync.Mutex
	bwSink uint64
)

// MeasureReadBandwidth returns this machine's memory read bandwidth in GB/s (1e9 bytes):
// the best of 5 passes summing a buffer of n bytes (larger than the caches: 256 MiB) split
// over GOMAXPROCS goroutines.
func MeasureReadBandwidth(n int) float64 {
	words := make([]uint64, max(n/8, 1))
	for i := range words {
		words[i] = uint64(i)
	}
	w := runtime.GOMAXPROCS(0)
	per := (len(words) + w - 1) / w
	best := time.Duration(1 << 62)
	var total uint64
	for range 5 {
		sums := make([]uint64, w)
		t := time.Now()
		var wg sync.WaitGroup
		for g := 0; g < w; g++ {
			lo, hi := g*per, min((g+1)*per, len(words))
			if lo >= hi {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var a, b, c, d uint64
				s := words[lo:hi]
				i := 0
				for ; i+4 <= len(s); i += 4 {
					a += s[i]
					b += s[i+1]
					c += s[i+2]
					d += s[i+3]
				}
				for ; i < len(s); i++ {
					a += s[i]
				}
				sums[g] = a + b + c + d
			}()
		}
		wg.Wait()
		best = min(best, time.Since(t))
		for _, s := range sums {
			total += s
		}
	}
	bwMu.Lock()
	bwSink += total // keeps the sums observable
	bwMu.Unlock()
	return float64(8*len(words)) / best.Seconds() / 1e9
}

// SnapshotReport is what Runner.BenchSnapshot measured: the copy of a session's committed state
// out (backend.Snapshotter.Snapshot) and back (Restore) at one position, the cost of a prefix
// checkpoint of the server (docs/serving.md §4), against re-prefilling the same tokens.
type SnapshotReport struct {
	// Tokens is the position of the snapshot (tokens prefilled without sampling); Bytes the
	// memory the copy holds (backend.Snapshot.Bytes); Drafter whether the session had the
	// bundle's draft head (its context rows are in the copy).
	Tokens  int   `json:"tokens"`
	Bytes   int64 `json:"bytes"`
	Drafter bool  `json:"drafter"`
	// PrefillSeconds is the no-sample prefill of the Tokens (what a restore saves): one run, in
	// a fresh session (cold: its prefill programs are built on first use); SnapshotSeconds and
	// RestoreSeconds the best of the runs; *GBs = Bytes ÷ time (GB = 1e9 bytes).
	PrefillSeconds  float64 `json:"prefill_seconds"`
	SnapshotSeconds float64 `json:"snapshot_seconds"`
	RestoreSeconds  float64 `json:"restore_seconds"`
	SnapshotGBs     float64 `json:"snapshot_gb_per_s"`
	RestoreGBs      float64 `json:"restore_gb_per_s"`
}

// BenchSnapshot opens a session of its own, of capacity tokens + 1 (plus the draft block with
// the draft head, which it has when the runner has one and noDraft is false; the request's
// context length does not apply), prefills tokens token ids without sampling (ids spread over
// the vocabulary) in chunks of prefillChunk rows (0: the backend's default) into a KV cache of
// kvCache's type (backend.SessionOptions.KVCache; "" = float32), then takes runs
// snapshots and runs restores of the last one, each timed alone, and reports the best of each.
// Errors: tokens or runs < 1, a capacity past MaxContext, a backend whose sessions cannot
// snapshot (backend.ErrUnsupported), the session's, ctx's.
func (r *Runner) BenchSnapshot(ctx context.Context, tokens, runs int, noDraft bool, prefillChunk int, kvCache string) (*SnapshotReport, error) {
	if tokens < 1 || runs < 1 {
		return nil, fmt.Errorf("bench snapshot: %d tokens, %d runs: want at least 1 of each", tokens, runs)
	}
	opt := backend.SessionOptions{Capacity: tokens + 1, EOS: r.EOS, Sampling: sample.Params{TopP: 1}, PrefillChunk: prefillChunk, KVCache: kvCache}
	if r.Draft != nil && !noDraft {
		opt.Drafter = r.Draft
		opt.Capacity += r.Draft.BlockSize()
	}
	if opt.Capacity > MaxContext {
		return nil, fmt.Errorf("bench snapshot: %d tokens need a context of %d: want at most %d", tokens, opt.Capacity, MaxContext)
	}
	sess, err := r.Target.NewSession(opt)
	if err != nil {
		return nil, fmt.Errorf("bench snapshot: %w", err)
	}
	defer sess.Close()
	sn, ok1 := sess.(backend.Snapshotter)
	np, ok2 := sess.(backend.NoSamplePrefiller)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("bench snapshot: backend %s: sessions cannot copy their state: %w", r.Backend.Name(), backend.ErrUnsupported)
	}
	vocab := r.Target.Config().Vocab
	prompt := make([]int32, tokens)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 13) % vocab)
	}
	rep := &SnapshotReport{Tokens: tokens, Drafter: opt.Drafter != nil}
	t0 := time.Now()
	if err := np.PrefillNoSample(ctx, prompt); err != nil {
		return nil, fmt.Errorf("bench snapshot: prefill: %w", err)
	}
	rep.PrefillSeconds = time.Since(t0).Seconds()
	var snap backend.Snapshot
	for i := range runs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := time.Now()
		s, err := sn.Snapshot()
		if err != nil {
			return nil, fmt.Errorf("bench snapshot: %w", err)
		}
		if d := time.Since(t).Seconds(); i == 0 || d < rep.SnapshotSeconds {
			rep.SnapshotSeconds = d
		}
		snap = s
	}
	if snap.Position() != tokens {
		return nil, fmt.Errorf("bench snapshot: the snapshot is at position %d, want %d", snap.Position(), tokens)
	}
	rep.Bytes = snap.Bytes()
	for i := range runs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := time.Now()
		if err := sn.Restore(snap); err != nil {
			return nil, fmt.Errorf("bench snapshot: restore: %w", err)
		}
		if d := time.Since(t).Seconds(); i == 0 || d < rep.RestoreSeconds {
			rep.RestoreSeconds = d
		}
	}
	if rep.SnapshotSeconds > 0 {
		rep.SnapshotGBs = float64(rep.Bytes) / rep.SnapshotSeconds / 1e9
	}
	if rep.RestoreSeconds > 0 {
		rep.RestoreGBs = float64(rep.Bytes) / rep.RestoreSeconds / 1e9
	}
	return rep, nil
}
