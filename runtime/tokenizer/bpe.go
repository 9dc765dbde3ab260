package tokenizer

import (
	"container/heap"
	"sync"
)

// bpeModel is the BPE model of tokenizer.json over byte-level symbols. Merges are keyed by
// the ids of the two parts; the rank is the merge's index in model.merges.
type bpeModel struct {
	vocab        map[string]int
	byteID       [256]int32 // id of each single byte's token (unk where missing)
	merges       map[uint64]mergeInfo
	ignoreMerges bool
	rawVocab     map[string]int32 // raw bytes → id, only with ignore_merges
	unk          int              // unk_token id or -1
	// maxTok bounds the bytes of text one token stands for: the most characters of a
	// vocabulary entry (each byte-level character is one byte; a merge concatenates its
	// parts). 0 when no bound holds (an empty unk_token stands for a byte with no character).
	maxTok int

	mu    sync.Mutex
	cache map[string][]int32 // pre-token bytes → ids
}

type mergeInfo struct{ rank, id int32 }

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// cacheLimit bounds the per-pre-token cache (entries); it is cleared when full.
// cacheMaxWord is the longest pre-token (bytes) that is cached.
const (
	cacheLimit   = 1 << 17
	cacheMaxWord = 64
)

// encodeWord appends the ids of one pre-token (raw bytes) to out.
func (b *bpeModel) encodeWord(word string, out []int) []int {
	if len(word) == 1 {
		return append(out, int(b.byteID[word[0]]))
	}
	if b.ignoreMerges {
		if id, ok := b.rawVocab[word]; ok {
			return append(out, int(id))
		}
	}
	cacheable := len(word) <= cacheMaxWord
	if cacheable {
		b.mu.Lock()
		ids, ok := b.cache[word]
		b.mu.Unlock()
		if ok {
			for _, id := range ids {
				out = append(out, int(id))
			}
			return out
		}
	}
	ids := b.merge(word)
	if cacheable {
		b.mu.Lock()
		if b.cache == nil || len(b.cache) >= cacheLimit {
			b.cache = make(map[string][]int32, 1024)
		}
		b.cache[word] = ids
		b.mu.Unlock()
	}
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}

type symbol struct {
	id         int32
	prev, next int32 // indices into the symbol list, -1 at the ends
	gone       bool
}

type candidate struct {
	rank, pos, id int32
}

type candHeap []candidate

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// merge runs the BPE merges over one word as HF tokenizers' Word::merge_all does: repeatedly
// apply the lowest-rank merge among adjacent pairs, the leftmost one on ties.
func (b *bpeModel) merge(word string) []int32 {
	syms := make([]symbol, len(word))
	for i := 0; i < len(word); i++ {
		syms[i] = symbol{id: b.byteID[word[i]], prev: int32(i - 1), next: int32(i + 1)}
	}
	syms[len(syms)-1].next = -1
	h := make(candHeap, 0, len(word))
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := b.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h = append(h, candidate{rank: m.rank, pos: int32(i), id: m.id})
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		c := heap.Pop(&h).(candidate)
		s := &syms[c.pos]
		if s.gone || s.next < 0 {
			continue
		}
		right := &syms[s.next]
		if m, ok := b.merges[pairKey(s.id, right.id)]; !ok || m.id != c.id {
			continue // stale: one side changed since the candidate was queued
		}
		s.id = c.id
		right.gone = true
		s.next = right.next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			p := &syms[s.prev]
			if m, ok := b.merges[pairKey(p.id, s.id)]; ok {
				heap.Push(&h, candidate{rank: m.rank, pos: s.prev, id: m.id})
			}
		}
		if s.next >= 0 {
			if m, ok := b.merges[pairKey(s.id, syms[s.next].id)]; ok {
				heap.Push(&h, candidate{rank: m.rank, pos: c.pos, id: m.id})
			}
		}
	}
	out := make([]int32, 0, 4)
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}
