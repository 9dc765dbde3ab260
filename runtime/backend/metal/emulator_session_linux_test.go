//go:build linux && amd64

package metal

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"lithos/kernels"
	"lithos/kernels/fiberexec"
	"lithos/pack"
	"lithos/runtime/backend"
	"lithos/runtime/backend/cpu"
	"lithos/runtime/backend/gpu"
	"lithos/runtime/bundle"
	"lithos/runtime/generate/gentest"
	"lithos/runtime/model/goldentest"
	"lithos/runtime/sample"
)

// The runtime over the emulated Metal device (emulator_linux_test.go): golden models packed
// by lithos/pack at test time, loaded by gpu.Load, generating with recorded programs whose
// Plans the emulator executes; the oracles are transformers' goldens (testdata/goldens) and
// the CPU backend.

var greedy = sample.Params{TopP: 1}

var (
	emuBundleMu   sync.Mutex
	emuBundleDirs = map[string]string{}
	emuBundleTemp string
)

// emuBundle packs a bundle once per test binary and opens it: kind "b" (golden model
// testdata/goldens/qwen35-b), "b+draft" (the same with a random BF16 DSpark head, as
// runtime/backend/cuda's spec bundle "b") or "pair" (the trained tiny pair of
// testdata/hub/lithos-test with its BF16 head).
func emuBundle(t *testing.T, kind string) *bundle.Bundle {
	t.Helper()
	emuBundleMu.Lock()
	defer emuBundleMu.Unlock()
	dir, ok := emuBundleDirs[kind]
	if !ok {
		if emuBundleTemp == "" {
			var err error
			if emuBundleTemp, err = os.MkdirTemp("", "lithos-metal-emu-"); err != nil {
				t.Fatal(err)
			}
		}
		root := filepath.Join("..", "..", "..")
		opt := pack.Options{Target: filepath.Join(root, "testdata", "goldens", "qwen35-b"), Workers: 2, ToolVersion: "test",
			Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Out: filepath.Join(emuBundleTemp, kind+".lithos")}
		switch kind {
		case "b":
		case "b+draft":
			hd := filepath.Join(emuBundleTemp, "head-b")
			if err := gentest.WriteDraft(hd, gentest.DraftFor(608, 256, 4), 1); err != nil {
				t.Fatal(err)
			}
			opt.Draft, opt.DraftFormat = hd, pack.DraftBF16
		case "pair":
			hub := filepath.Join(root, "testdata", "hub", "lithos-test")
			opt.Target, opt.Draft, opt.DraftFormat = filepath.Join(hub, "tiny-coder-NVFP4"), filepath.Join(hub, "tiny-coder-DSpark"), pack.DraftBF16
		default:
			t.Fatalf("no bundle kind %q", kind)
		}
		if _, err := pack.Build(context.Background(), opt); err != nil {
			t.Fatalf("pack %s: %v", kind, err)
		}
		dir = opt.Out
		emuBundleDirs[kind] = dir
	}
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// emuTarget loads b on a new emulated device the way metal.Backend.Load does on a Mac
// (MapWeights, then gpu.Load).
func emuTarget(t *testing.T, b *bundle.Bundle) (*emuDevice, *gpu.Target) {
	t.Helper()
	d := newEmuDevice(t)
	d.MapWeights(b)
	tg, err := gpu.Load(t.Context(), d, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return d, tg
}

func relErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		num = math.Max(num, math.Abs(float64(got[i])-float64(want[i])))
		den = math.Max(den, math.Abs(float64(want[i])))
	}
	return num / den
}

// emuGenerate prefills prompt on a session of tg (replay: recorded programs; false: direct
// launches) and decodes greedily, one Decode call per step, until n tokens are out; it
// returns the tokens, the last prompt row's logits and the session.
func emuGenerate(t *testing.T, d *emuDevice, tg *gpu.Target, replay bool, prompt []int32, n int) ([]int32, []float32, *gpu.Session) {
	t.Helper()
	return emuGenerateChunks(t, d, tg, replay, prompt, n, 0)
}

// emuGenerateChunks is emuGenerate with prefill chunks of chunk rows (0: the default).
func emuGenerateChunks(t *testing.T, d *emuDevice, tg *gpu.Target, replay bool, prompt []int32, n, chunk int) ([]int32, []float32, *gpu.Session) {
	t.Helper()
	opt := backend.SessionOptions{Capacity: len(prompt) + n + 8, Sampling: greedy, PrefillChunk: chunk}
	s, err := tg.NewDeviceSession(opt, replay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Prefill(t.Context(), prompt); err != nil {
		t.Fatal(err)
	}
	logits := d.floats(t, s.Logits().Ptr, tg.Cfg.Vocab)
	return decodeTo(t, s, n), logits, s
}

// decodeTo drains s's ring and decodes one step per call until n tokens are out (the first
// ones those already in the ring); it fails the test on a session error.
func decodeTo(t *testing.T, s backend.Session, n int) []int32 {
	t.Helper()
	toks := s.Ring().Drain(s.State(), nil)
	for len(toks) < n {
		if err := s.Decode(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, s.Ring().Drain(s.State(), nil)...)
	}
	if st := s.State(); st.Error != 0 {
		t.Fatalf("session error %d (state %+v)", st.Error, *st)
	}
	return toks
}

// cpuGenerate is emuGenerate on the CPU backend.
func cpuGenerate(t *testing.T, b *bundle.Bundle, opt backend.SessionOptions, prompt []int32, n int) ([]int32, backend.Session) {
	t.Helper()
	ct, err := cpu.Backend{}.Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	opt.Capacity = len(prompt) + n + 8
	opt.Sampling = greedy
	s, err := ct.NewSession(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Prefill(t.Context(), prompt); err != nil {
		t.Fatal(err)
	}
	return decodeTo(t, s, n), s
}

// TestEmulatedSession: golden model b (layers GDN, attention, GDN, attention; vocabulary 608)
// through gpu.Load over the emulated Metal device — weights in windows of the address table,
// every program recorded into a Plan and executed from it — prefills the 11-token prompt (one
// program of 11 rows: the 16-row BLM kernels) and decodes greedily, one replay per token: the last prompt row's
// logits within 1e-4 relative of transformers' (the CUDA session tests' bound), the 32 tokens
// equal transformers' greedy tokens and the CPU backend's. Prefilled in chunks of 4 rows (three
// programs, the 4-row kernels) the logits are the same bit for bit. Then the same generation with ICBs of at most 7
// commands (Recorder.MaxCommands) and BarrierHazards: every plan cut into many chunks, the
// logits bit for bit and the tokens the same; and 8 tokens with direct launches (no plans).
func TestEmulatedSession(t *testing.T) {
	b := emuBundle(t, "b")
	f32, i32 := goldentest.ReadTensors(t, filepath.Join("..", "..", "..", "testdata", "goldens", "qwen35-b", "goldens.safetensors"))
	prompt, want, wantLogits := i32["prompt.11"], i32["greedy.11"], f32["logits.11"]
	d, tg := emuTarget(t, b)
	vocab := tg.Cfg.Vocab
	n := len(want)
	if len(prompt) != 11 || n < 8 || len(wantLogits) < vocab {
		t.Fatalf("goldens: prompt %d, greedy %d, logits %d values", len(prompt), len(want), len(wantLogits))
	}
	if w := d.weights; w == nil || len(w.ids) == 0 || !w.done {
		t.Fatalf("the weights are not a windowed range: %+v", w)
	}
	if fiberexec.InArena(uintptr(tg.Weights.Ptr), uintptr(tg.Weights.Size)) {
		t.Fatalf("weights address %#x is inside the fiber arena: a raw address would not fault", tg.Weights.Ptr)
	}
	toks, logits, s := emuGenerate(t, d, tg, true, prompt, n)
	re := relErr(logits, wantLogits[len(wantLogits)-vocab:])
	t.Logf("last-row logits: max relative error %.3g against transformers", re)
	if !(re <= 1e-4) {
		t.Errorf("last-row logits relative error %.3g > 1e-4", re)
	}
	cpuToks, _ := cpuGenerate(t, b, backend.SessionOptions{}, prompt, n)
	if !slices.Equal(toks, want[:n]) || !slices.Equal(toks, cpuToks) {
		t.Fatalf("tokens %v, transformers %v, CPU backend %v", toks, want[:n], cpuToks)
	}
	if st := s.State(); int(st.Position) != len(prompt)+n-1 {
		t.Fatalf("position %d after %d tokens", st.Position, n)
	}
	kinds := map[string]bool{}
	longest := 0
	for _, p := range d.plans {
		longest = max(longest, len(p.Commands))
		for _, c := range p.Commands {
			kinds[c.Kernel] = true
		}
	}
	t.Logf("%d plans (longest %d commands), %d replays, %d commands replayed, %d direct launches; kernels %v",
		len(d.plans), longest, d.replays, d.commands, d.direct, slices.Sorted(maps.Keys(kinds)))
	// Every layer kind (GDN: conv with the q/k L2 norm in its launch, the recurrence with its
	// gates; attention: the q/k norms, RoPE and KV append in one launch, partial attention and
	// the merge with the output gate), the BLM products, the LM head's argmax and the step kernel.
	for _, k := range []string{"lithos_step", "lithos_gather", "lithos_rmsnorm", "lithos_conv", "lithos_gdn",
		"lithos_attn_prep", "lithos_attn_partial", "lithos_attn_merge", "lithos_argmax_partial", "lithos_argmax_final", "lithos_blm_"} {
		if !hasPrefix(kinds, k) {
			t.Errorf("no plan ran %s", k)
		}
	}
	if d.replays < 1+n-1 || d.commands < d.replays*10 {
		t.Fatalf("%d replays of %d commands: the programs did not run from plans", d.replays, d.commands)
	}
	if !hasPrefix(kinds, "lithos_blm_nvfp4_r16") {
		t.Errorf("the 11-row prefill did not run the 16-row BLM kernels: %v", slices.Sorted(maps.Keys(kinds)))
	}

	// Prefill chunks of 4 rows: rows go through other BLM variants and several programs (the
	// GDN state and KV cache carried between them); on the scalar path this device runs, each
	// row's products are summed in the same order whatever the variant, so the logits are the
	// same bit for bit.
	replays4 := d.replays
	toks4, logits4, _ := emuGenerateChunks(t, d, tg, true, prompt, n, 4)
	if got := d.replays - replays4; got != 3+n-1 {
		t.Fatalf("prefill in chunks of 4: %d replays, want %d", got, 3+n-1)
	}
	if !slices.Equal(toks4, toks) {
		t.Fatalf("prefill in chunks of 4: tokens %v, want %v", toks4, toks)
	}
	for i := range logits {
		if math.Float32bits(logits4[i]) != math.Float32bits(logits[i]) {
			t.Fatalf("prefill in chunks of 4: logit %d is %v, was %v", i, logits4[i], logits[i])
		}
	}

	// ICBs of at most 7 commands, barriers only at hazards (and each ICB's first command).
	d.MaxCommands, d.Barriers = 7, BarrierHazards
	plans0, replays0, chunks0 := len(d.plans), d.replays, d.chunks
	toks7, logits7, _ := emuGenerate(t, d, tg, true, prompt, n)
	if !slices.Equal(toks7, toks) {
		t.Fatalf("ICBs of 7 commands: tokens %v, want %v", toks7, toks)
	}
	for i := range logits {
		if math.Float32bits(logits7[i]) != math.Float32bits(logits[i]) {
			t.Fatalf("ICBs of 7 commands: logit %d is %v, was %v", i, logits7[i], logits[i])
		}
	}
	cut := 0
	for _, p := range d.plans[plans0:] {
		ch := p.Chunks()
		if len(p.Commands) > 7 {
			cut++
			if len(ch) != (len(p.Commands)+6)/7 || p.ChunkCommands != 7 {
				t.Fatalf("a plan of %d commands in chunks %v", len(p.Commands), ch)
			}
		}
		for _, c := range ch {
			if !p.Commands[c[0]].Barrier {
				t.Fatalf("the first command (%d) of a chunk has no barrier", c[0])
			}
		}
	}
	if cut == 0 || d.chunks-chunks0 <= d.replays-replays0 {
		t.Fatalf("%d plans longer than 7 commands, %d chunks in %d replays", cut, d.chunks-chunks0, d.replays-replays0)
	}
	t.Logf("ICBs of ≤ 7 commands: %d chunks in %d replays, identical tokens and logits", d.chunks-chunks0, d.replays-replays0)

	// Direct launches (no recording; each record passed as by setBytes): the same.
	direct0 := d.direct
	toksD, logitsD, _ := emuGenerate(t, d, tg, false, prompt, 8)
	if !slices.Equal(toksD, toks[:8]) || d.direct == direct0 {
		t.Fatalf("direct launches (%d): tokens %v, want %v", d.direct-direct0, toksD, toks[:8])
	}
	for i := range logits {
		if math.Float32bits(logitsD[i]) != math.Float32bits(logits[i]) {
			t.Fatalf("direct launches: logit %d is %v, replayed %v", i, logitsD[i], logits[i])
		}
	}
}

func hasPrefix(m map[string]bool, p string) bool {
	for k := range m {
		if len(k) >= len(p) && k[:len(p)] == p {
			return true
		}
	}
	return false
}

// TestEmulatedPlanDrives: the emulator executes the Plan, not the launch's addresses or the
// runtime's record. A recorded lithos_ewise (y = a + b over 256 floats) replays correctly;
// after the plan's y argument is moved 1 KiB further into its buffer — an offset that is no
// longer the launch's address minus the buffer's base — the sum lands there and the
// original place keeps the poison; a change of the runtime's record after Record is not seen;
// a change of the plan's records arena copy is (SwiGLU instead of the sum). The
// synthetic addresses lie outside the fiber arena (unmapped in the fiber server: a kernel
// given one would fault).
func TestEmulatedPlanDrives(t *testing.T) {
	d := newEmuDevice(t)
	gq, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	q := gq.(*emuQueue)
	const n = 256
	r := rand.New(rand.NewPCG(3, 4))
	av, bv := make([]float32, n), make([]float32, n)
	for i := range av {
		av[i], bv[i] = r.Float32()*4-2, r.Float32()*4-2
	}
	up := func(b []byte) *gpu.Buffer {
		g, err := d.Upload(b)
		if err != nil {
			t.Fatal(err)
		}
		if fiberexec.InArena(uintptr(g.Ptr), uintptr(g.Size)) {
			t.Fatalf("address %#x inside the fiber arena", g.Ptr)
		}
		return g
	}
	ctl, a, bb := up(make([]byte, 64)), up(gpu.Float32Bytes(av)), up(gpu.Float32Bytes(bv))
	y, err := d.Alloc(8 * n)
	if err != nil {
		t.Fatal(err)
	}
	p := kernels.EwiseParams{DoneWord: kernels.NoWord, Rows: 1, RowsWord: kernels.NoWord, N: n, LdA: n, LdB: n, LdY: n, Mode: kernels.EwAdd}
	prm := up(kernels.Record(p))
	poison := func() {
		if err := q.Fill32(y, 0, 2*n, emuPoison); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, at int, f func(a, b float32) float32) {
		t.Helper()
		got := d.floats(t, y.Ptr, 2*n)
		for i := range 2 * n {
			j := i - at
			if j >= 0 && j < n {
				if w := f(av[j], bv[j]); math.Abs(float64(got[i]-w)) > 1e-6*math.Abs(float64(w))+1e-7 {
					t.Fatalf("%s: y[%d] = %v, want %v", what, i, got[i], w)
				}
			} else if math.Float32bits(got[i]) != emuPoison {
				t.Fatalf("%s: y[%d] = %v (%#x), want the poison", what, i, got[i], math.Float32bits(got[i]))
			}
		}
	}
	add := func(a, b float32) float32 { return a + b }
	swiglu := func(a, b float32) float32 { return float32(float64(a) / (1 + math.Exp(-float64(a))) * float64(b)) }
	poison()
	rp, err := q.Record(func() error { return q.Launch("lithos_ewise", p.Grid(), ctl.Ptr, prm.Ptr, a.Ptr, bb.Ptr, y.Ptr) })
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	check("before any replay (recording runs nothing)", -2*n, add)
	er := rp.(*emuReplay)
	if err := er.Launch(q); err != nil {
		t.Fatal(err)
	}
	check("replay", 0, add)

	// The plan's y offset moved by n floats.
	poison()
	yArg := &er.plan.Commands[0].Args[4]
	if yArg.Off != 0 {
		t.Fatalf("y resolved at offset %d", yArg.Off)
	}
	yArg.Off += 4 * n
	if err := er.Launch(q); err != nil {
		t.Fatal(err)
	}
	check("replay with y moved in the plan", n, add)
	yArg.Off -= 4 * n

	// The runtime's record changed after Record: not seen.
	p2 := p
	p2.Mode = kernels.EwSwiGLU
	copy(mustBytes(t, d, prm.Ptr, len(kernels.Record(p2))), kernels.Record(p2))
	poison()
	if err := er.Launch(q); err != nil {
		t.Fatal(err)
	}
	check("replay after the runtime's record changed", 0, add)
	// The plan's arena copy changed: seen.
	off := er.plan.Commands[0].Args[1].Off
	if er.plan.Commands[0].Args[1].Buf != RecordsBuf || off%RecordAlign != 0 {
		t.Fatalf("record argument %+v", er.plan.Commands[0].Args[1])
	}
	copy(er.recs.Host[off:], kernels.Record(p2))
	poison()
	if err := er.Launch(q); err != nil {
		t.Fatal(err)
	}
	check("replay after the plan's record changed", 0, swiglu)
	// A direct launch reads the record now (setBytes): SwiGLU.
	poison()
	if err := q.Launch("lithos_ewise", p.Grid(), ctl.Ptr, prm.Ptr, a.Ptr, bb.Ptr, y.At(4*n)); err != nil {
		t.Fatal(err)
	}
	check("direct launch at y + n floats", n, swiglu)
	// Copies and fills are refused inside a recording; a launch outside a buffer is named.
	if _, err := q.Record(func() error { return q.Fill32(y, 0, 1, 0) }); err == nil {
		t.Fatal("a fill inside Record was accepted")
	}
	if err := q.Launch("lithos_ewise", p.Grid(), ctl.Ptr, prm.Ptr, a.Ptr, bb.Ptr, y.Ptr+uint64(y.Size)); err == nil {
		t.Fatal("a launch with y past its buffer was accepted")
	}
}

func mustBytes(t *testing.T, d *emuDevice, addr uint64, n int) []byte {
	t.Helper()
	b, err := d.bytesAt(addr, n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEmulatedChunks: a chain of 10 dependent commands (y = y + a_i, a_i at 10 offsets of one
// buffer) recorded with ICBs of at most 3 commands is cut into chunks [0,3) [3,6) [6,9) [9,10),
// each starting with a barrier; the replay runs all 4 in order: y equals the float32 sum
// taken in command order, bit for bit (float addition does not commute with reordering).
func TestEmulatedChunks(t *testing.T) {
	d := newEmuDevice(t)
	d.MaxCommands, d.Barriers = 3, BarrierHazards
	gq, _ := d.NewQueue()
	q := gq.(*emuQueue)
	const n, steps = 64, 10
	r := rand.New(rand.NewPCG(5, 6))
	av := make([]float32, n*steps)
	for i := range av {
		av[i] = float32(math.Ldexp(r.Float64()*2-1, r.IntN(20)-10))
	}
	ctl, _ := d.Upload(make([]byte, 64))
	a, _ := d.Upload(gpu.Float32Bytes(av))
	y, _ := d.Upload(make([]byte, 4*n))
	p := kernels.EwiseParams{DoneWord: kernels.NoWord, Rows: 1, RowsWord: kernels.NoWord, N: n, LdA: n, LdB: n, LdY: n, Mode: kernels.EwAdd}
	prm, _ := d.Upload(kernels.Record(p))
	rp, err := q.Record(func() error {
		for i := range steps {
			if err := q.Launch("lithos_ewise", p.Grid(), ctl.Ptr, prm.Ptr, y.Ptr, a.At(int64(4*n*i)), y.Ptr); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	pl := rp.(*emuReplay).plan
	if ch := pl.Chunks(); !slices.Equal(ch, [][2]int{{0, 3}, {3, 6}, {6, 9}, {9, 10}}) {
		t.Fatalf("chunks %v", ch)
	}
	for i, c := range pl.Commands {
		if !c.Barrier || c.Args[3].Off != uint32(4*n*i) {
			t.Fatalf("command %d: barrier %v, a at offset %d", i, c.Barrier, c.Args[3].Off)
		}
	}
	chunks := d.chunks
	if err := rp.Launch(q); err != nil {
		t.Fatal(err)
	}
	if d.chunks-chunks != 4 {
		t.Fatalf("%d chunks ran", d.chunks-chunks)
	}
	got := d.floats(t, y.Ptr, n)
	for j := range n {
		var w float32
		for i := range steps {
			w += av[n*i+j]
		}
		if math.Float32bits(got[j]) != math.Float32bits(w) {
			t.Fatalf("y[%d] = %v, want %v (the sum in command order)", j, got[j], w)
		}
	}
}

// TestEmulatedSpecRound (LITHOS_METAL_EMULATE=1; minutes): greedy speculative decoding over
// the emulated Metal device — every round (draft → verify → accept → GDN commit replay →
// context append) recorded into Plans and executed from them — against the CPU backend:
// tokens identical (and transformers' greedy tokens), the drafts accepted round by round and
// the round histogram identical. On the trained tiny pair (testdata/hub/lithos-test, BF16
// head; its held-out 194-token prompt), whose drafts are accepted (≈ 2.3 tokens per round on
// the CPU), the accepted counts also equal tools/dspark_ref.py's round simulation
// (testdata/goldens/tinypair/goldens.json); on golden b with a random head (drafts rejected)
// the prompt is the 11-token one. LITHOS_METAL_EMULATE_TOKENS=n shortens the runs.
func TestEmulatedSpecRound(t *testing.T) {
	if os.Getenv("LITHOS_METAL_EMULATE") != "1" {
		t.Skip("SKIP: set LITHOS_METAL_EMULATE=1 for whole speculative rounds on the emulated Metal device (minutes)")
	}
	emuExec(t)
	root := filepath.Join("..", "..", "..")
	for _, kind := range []string{"pair", "b+draft"} {
		t.Run(kind, func(t *testing.T) {
			b := emuBundle(t, kind)
			var prompt, want []int32
			var sim []uint32
			if kind == "pair" {
				gdir := filepath.Join(root, "testdata", "goldens", "tinypair")
				_, i32 := goldentest.ReadTensors(t, filepath.Join(gdir, "goldens.safetensors"))
				prompt, want = i32["prompt"], i32["greedy"]
				raw, err := os.ReadFile(filepath.Join(gdir, "goldens.json"))
				if err != nil {
					t.Fatal(err)
				}
				var gj struct {
					Sim struct {
						RoundsAccepted []uint32 `json:"rounds_accepted"`
					} `json:"rounds_over_32_tokens_bf16_cpu"`
				}
				if err := json.Unmarshal(raw, &gj); err != nil || len(gj.Sim.RoundsAccepted) == 0 {
					t.Fatalf("goldens.json: %v", err)
				}
				sim = gj.Sim.RoundsAccepted
			} else {
				_, i32 := goldentest.ReadTensors(t, filepath.Join(root, "testdata", "goldens", "qwen35-b", "goldens.safetensors"))
				prompt, want = i32["prompt.11"], i32["greedy.11"]
			}
			n := len(want)
			if s := os.Getenv("LITHOS_METAL_EMULATE_TOKENS"); s != "" {
				fmt.Sscan(s, &n)
				n = min(n, len(want))
			}
			specRound(t, b, prompt, want[:n], sim)
		})
	}
}

// specRound is one bundle of TestEmulatedSpecRound: sim, when given, is the reference
// simulation's accepted drafts per round (compared as far as both go).
func specRound(t *testing.T, b *bundle.Bundle, prompt, want []int32, sim []uint32) {
	n := len(want)
	d, tg := emuTarget(t, b)
	gd, err := tg.LoadDraft(t.Context(), b)
	if err != nil || gd == nil {
		t.Fatalf("LoadDraft: %v, %v", gd, err)
	}
	ct, err := cpu.Backend{}.Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	cd, err := ct.LoadDraft(context.Background(), b)
	if err != nil || cd == nil {
		t.Fatalf("LoadDraft on the CPU: %v, %v", cd, err)
	}
	run := func(tgt backend.Target, dr backend.Drafter) ([]int32, []uint32, backend.RoundStats) {
		s, err := tgt.NewSession(backend.SessionOptions{Capacity: len(prompt) + n + 8, Sampling: greedy, Drafter: dr})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ss := s.State()
		ss.StopAt = ss.RingHead + uint32(n)
		if err := s.Prefill(t.Context(), prompt); err != nil {
			t.Fatal(err)
		}
		var acc []uint32
		for ss.Done == 0 {
			if err := s.Decode(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			acc = append(acc, ss.Accepted)
		}
		if ss.Error != 0 {
			t.Fatalf("session error %d (state %+v)", ss.Error, *ss)
		}
		return s.Ring().Drain(ss, nil), acc, s.Stats()
	}
	mt, macc, mst := run(tg, gd)
	c, cacc, cst := run(ct, cd)
	t.Logf("Metal (emulated): %d rounds, %d single rows, accepted %v, histogram %v; CPU: %d rounds, accepted %v, histogram %v; %d plans, %d replays, %d commands",
		mst.Rounds, mst.PlainSteps, macc, mst.Committed, cst.Rounds, cacc, cst.Committed, len(d.plans), d.replays, d.commands)
	if !slices.Equal(mt, c) || !slices.Equal(mt, want) {
		t.Fatalf("tokens: Metal (emulated) %v\nCPU %v\ntransformers %v", mt, c, want)
	}
	if !slices.Equal(macc, cacc) || !slices.Equal(mst.Committed, cst.Committed) || !slices.Equal(mst.Accepted, cst.Accepted) || mst.Rounds != cst.Rounds {
		t.Fatalf("rounds: Metal (emulated) accepted %v histogram %v (%v); CPU accepted %v histogram %v (%v)", macc, mst.Committed, mst.Accepted, cacc, cst.Committed, cst.Accepted)
	}
	if k := min(len(sim), len(macc)); sim != nil && !slices.Equal(macc[:k], sim[:k]) {
		t.Fatalf("accepted per round %v, the reference simulation %v", macc, sim)
	}
	if mst.Rounds == 0 {
		t.Fatalf("no speculative round ran: %+v", mst)
	}
}
