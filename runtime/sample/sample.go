// Package sample picks the next token from a row of logits: greedy (argmax) at temperature 0,
// otherwise a draw from softmax(logits / temperature) restricted by top-k and top-p, in the
// order transformers' logits warpers apply them (temperature, top-k, top-p).
//
// The random draw is counter-based: the uniform number u for the token at sequence position
// pos is the first float64 of math/rand/v2's PCG seeded with (seed, splitmix64(pos)), and the
// token is the first kept id, in increasing id order, at which the cumulative probability
// exceeds u. A token
// therefore depends only on the logits, the parameters, the seed and its position — not on
// how many steps or rounds produced it, nor on which backend ran them — so a fixed seed gives
// a fixed output, and a GPU backend can reproduce the draw from the step state's seed words
// (docs/runtime.md §4).
//
// Imports: the standard library only.
package sample

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Params are the sampling settings of one generation.
type Params struct {
	// Temperature divides the logits; 0 means greedy (argmax, lowest index on ties). ≥ 0,
	// finite.
	Temperature float64
	// TopK keeps the K most probable tokens (ties: lower id first); 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most probable tokens whose probability sum reaches TopP
	// (after top-k; at least one token); 1 keeps all. In (0, 1].
	TopP float64
	// Seed selects the random stream.
	Seed uint64
}

// Validate checks the ranges above; errors name the parameter.
func (p Params) Validate() error {
	if !(p.Temperature >= 0) || math.IsInf(p.Temperature, 0) {
		return fmt.Errorf("sample: temperature %v: want a finite number ≥ 0 (0 = greedy)", p.Temperature)
	}
	if p.TopK < 0 {
		return fmt.Errorf("sample: top-k %d: want ≥ 0 (0 = all tokens)", p.TopK)
	}
	if !(p.TopP > 0 && p.TopP <= 1) {
		return fmt.Errorf("sample: top-p %v: want a number in (0, 1] (1 = all tokens)", p.TopP)
	}
	return nil
}

// Greedy reports whether p picks the argmax.
func (p Params) Greedy() bool { return p.Temperature == 0 }

// Sampler draws tokens. It keeps scratch space between calls: one Sampler per goroutine.
type Sampler struct {
	p     Params
	cand  []int32   // candidate ids
	prob  []float64 // their probabilities, parallel to cand
	order byProb
}

// New returns a Sampler for p (Validate's errors).
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{p: p}, nil
}

// Params returns the sampler's parameters.
func (s *Sampler) Params() Params { return s.p }

// Argmax returns the index of the largest logit, the lowest index on ties; NaN is skipped
// (0 when no value is larger than −Inf).
func Argmax(logits []float32) int {
	best, arg := float32(math.Inf(-1)), 0
	for i, v := range logits {
		if v > best {
			best, arg = v, i
		}
	}
	return arg
}

// Uniform returns the uniform number in [0, 1) that the draw at position pos uses under seed.
func Uniform(seed uint64, pos int) float64 {
	return rand.New(rand.NewPCG(seed, splitmix64(uint64(pos)))).Float64()
}

// Streams of UniformStream: independent draws at the same position for speculative sampling.
const (
	StreamDraft    = 1 // a sampled draft token (drafts drawn from the drafter's distribution)
	StreamAccept   = 2 // the acceptance test of a sampled draft (u < p/q)
	StreamResidual = 3 // the draw from the residual norm(max(0, p − q)) after a rejection
)

// UniformStream returns the uniform number in [0, 1) of stream at position pos under seed:
// stream 0 is Uniform (the ordinary draw); other streams are independent of it and of each
// other (the PCG is seeded with splitmix64(seed + stream·φ), φ = 0x9e3779b97f4a7c15), so a
// speculative round's extra draws are counter-based like the ordinary one.
func UniformStream(seed uint64, stream uint32, pos int) float64 {
	if stream == 0 {
		return Uniform(seed, pos)
	}
	s := splitmix64(seed + uint64(stream)*0x9e3779b97f4a7c15)
	return rand.New(rand.NewPCG(s, splitmix64(uint64(pos)))).Float64()
}

// splitmix64 scrambles a counter into a well-mixed 64-bit stream selector.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Sample returns the token for sequence position pos (the position the chosen token will
// occupy) from logits over the vocabulary. NaN logits count as −Inf; when every logit is −Inf
// or NaN it returns Argmax's answer.
func (s *Sampler) Sample(logits []float32, pos int) int {
	if s.p.Greedy() || len(logits) <= 1 {
		return Argmax(logits)
	}
	probs := s.Distribution(logits)
	if probs == nil {
		return Argmax(logits)
	}
	u := Uniform(s.p.Seed, pos)
	var acc float64
	for i, q := range probs {
		acc += q
		if u < acc {
			return int(s.cand[i])
		}
	}
	return int(s.cand[len(s.cand)-1])
}

// Distribution computes what Sample draws from and returns the probabilities of the kept
// tokens, parallel to Candidates (kept ids in increasing order: the order the draw walks), or
// nil when no logit is finite. Probabilities are computed in float64: exp((l − max)/T),
// restricted to the top-k (ties: lower id first), then to the smallest most-probable prefix
// whose share of the remaining mass reaches top-p, and normalized. The slices are the
// sampler's scratch, valid until the next call.
func (s *Sampler) Distribution(logits []float32) []float64 {
	p := s.p
	mx := math.Inf(-1)
	for _, v := range logits {
		if f := float64(v); f > mx {
			mx = f
		}
	}
	if math.IsInf(mx, -1) || s.p.Greedy() {
		return nil
	}
	s.cand, s.prob = s.cand[:0], s.prob[:0]
	var total float64
	for i, v := range logits {
		if f := float64(v); f > math.Inf(-1) { // skips −Inf and NaN
			q := math.Exp((f - mx) / p.Temperature)
			s.cand = append(s.cand, int32(i))
			s.prob = append(s.prob, q)
			total += q
		}
	}
	n := len(s.cand)
	k := n
	if p.TopK > 0 && p.TopK < n {
		k = p.TopK
	}
	if k == n && p.TopP >= 1 {
		for i := range s.prob {
			s.prob[i] /= total
		}
		return s.prob
	}
	// A max-heap pops candidates in decreasing probability; popped ones collect at the tail,
	// the most probable at index n−1.
	s.order = byProb{s.cand, s.prob}
	heap.Init(&s.order)
	popped, kept := 0, 0.0
	if k == n { // nucleus over every token: pop until the mass is reached
		for popped < n {
			heap.Pop(&s.order)
			popped++
			kept += s.prob[n-popped]
			if kept >= p.TopP*total {
				break
			}
		}
	} else {
		for popped < k {
			heap.Pop(&s.order)
			popped++
			kept += s.prob[n-popped]
		}
		if p.TopP < 1 { // nucleus within the top-k
			target, acc, m := p.TopP*kept, 0.0, 0
			for m < popped {
				m++
				acc += s.prob[n-m]
				if acc >= target {
					break
				}
			}
			popped, kept = m, acc
		}
	}
	type pair struct {
		id int32
		q  float64
	}
	ps := make([]pair, popped)
	for i := range ps {
		ps[i] = pair{s.cand[n-1-i], s.prob[n-1-i]}
	}
	slices.SortFunc(ps, func(a, b pair) int { return int(a.id) - int(b.id) })
	s.cand, s.prob = s.cand[:popped], s.prob[:popped]
	for i, x := range ps {
		s.cand[i], s.prob[i] = x.id, x.q/kept
	}
	return s.prob
}

// Probs writes the distribution Sample draws from over the whole vocabulary into dst
// (reallocated when shorter than logits; zero for the tokens top-k and top-p remove) and
// returns dst[:len(logits)]; nil when greedy or no logit is finite. Draw(Probs(l), Uniform(seed,
// pos)) is Sample(l, pos): the same sums in the same order.
func (s *Sampler) Probs(dst []float64, logits []float32) []float64 {
	probs := s.Distribution(logits)
	if probs == nil {
		return nil
	}
	if cap(dst) < len(logits) {
		dst = make([]float64, len(logits))
	}
	dst = dst[:len(logits)]
	clear(dst)
	for i, id := range s.cand {
		dst[id] = probs[i]
	}
	return dst
}

// Draw returns the first index, in increasing order, at which the cumulative sum of probs
// exceeds u — Sample's rule; u ∈ [0, Σ probs), so [0, 1) for a distribution — or the last
// index with a positive probability when rounding leaves the sum short of u (0 when none is
// positive).
func Draw(probs []float64, u float64) int {
	var acc float64
	last := 0
	for i, q := range probs {
		if q <= 0 {
			continue
		}
		acc += q
		last = i
		if u < acc {
			return i
		}
	}
	return last
}

// Speculative is the speculative-sampling rule (Leviathan et al. 2023, "Fast Inference from
// Transformers via Speculative Decoding", Algorithm 1; Chen et al. 2023, "Accelerating Large
// Language Model Decoding with Speculative Sampling", Algorithm 2) for one draft token d drawn
// from the drafter's distribution q, with p the target's distribution at the same position
// (both over the whole vocabulary, after the same temperature/top-k/top-p transform): d is
// accepted with probability min(1, p[d]/q[d]) — when u·q[d] < p[d], u uniform in [0, 1) —
// and otherwise replaced by a draw with u2 from the residual norm(max(0, p − q)). The token
// returned is then distributed exactly as p whatever q is: P(d accepted and = x) = min(q_x,
// p_x), and the residual carries the missing mass p_x − min(q_x, p_x). resid is scratch of
// len(p) (nil allocates). When the residual is zero (p = q up to rounding), the replacement
// is drawn from p.
func Speculative(p, q []float64, d int, u, u2 float64, resid []float64) (tok int, accepted bool) {
	if d >= 0 && d < len(p) && d < len(q) && u*q[d] < p[d] {
		return d, true
	}
	if cap(resid) < len(p) {
		resid = make([]float64, len(p))
	}
	resid = resid[:len(p)]
	var sum float64
	for i, pi := range p {
		r := pi
		if i < len(q) {
			r -= q[i]
		}
		resid[i] = max(r, 0)
		sum += resid[i]
	}
	if !(sum > 0) {
		return Draw(p, u2), false
	}
	return Draw(resid, u2*sum), false
}

// Candidates returns the ids Distribution kept, in increasing order, parallel to its result.
func (s *Sampler) Candidates() []int32 { return s.cand }

// byProb is a max-heap of candidates by probability, ties by lower id; Pop moves the top to
// the end of the slices.
type byProb struct {
	id []int32
	p  []float64
}

func (h byProb) Len() int { return len(h.id) }
func (h byProb) Less(i, j int) bool {
	if h.p[i] != h.p[j] {
		return h.p[i] > h.p[j]
	}
	return h.id[i] < h.id[j]
}
func (h byProb) Swap(i, j int) {
	h.id[i], h.id[j] = h.id[j], h.id[i]
	h.p[i], h.p[j] = h.p[j], h.p[i]
}
func (h *byProb) Push(any) {}
func (h *byProb) Pop() any {
	h.id = h.id[:len(h.id)-1]
	h.p = h.p[:len(h.p)-1]
	return nil
}
