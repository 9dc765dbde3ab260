package cpu

import (
	"context"
	"fmt"

	"lithos/runtime/backend"
	"lithos/runtime/bundle"
	"lithos/runtime/draft"
)

// LoadDraft binds the bundle's DSpark draft head to the target (backend.Target): the
// package's LoadDraft over the mapped weights, bound to this target's embedding and LM head,
// seen as a backend.Drafter (DSpark). nil, nil when the bundle has none; errors name the
// field or tensor that does not fit the target.
func (t *Target) LoadDraft(_ context.Context, b *bundle.Bundle) (backend.Drafter, error) {
	d, err := LoadDraft(b, t.M)
	if err != nil || d == nil {
		return nil, err
	}
	return DSpark{D: d}, nil
}

// DSpark adapts a runtime/draft Drafter (read-only, shared) to backend.Drafter.
type DSpark struct {
	D *draft.Drafter
}

// TapLayers returns the head's target_layer_ids.
func (a DSpark) TapLayers() []int { return a.D.Cfg.TapLayers }

// BlockSize returns the head's block_size.
func (a DSpark) BlockSize() int { return a.D.Cfg.BlockSize }

// NewProposer allocates the head's context K/V for capacity positions.
func (a DSpark) NewProposer(capacity int) (backend.Proposer, error) {
	st, err := a.D.NewState(capacity)
	if err != nil {
		return nil, err
	}
	return &dsparkProposer{d: a.D, st: st}, nil
}

// dsparkProposer is one sequence's DSpark context (draft.State).
type dsparkProposer struct {
	d   *draft.Drafter
	st  *draft.State
	out draft.Proposal
}

func (p *dsparkProposer) Len() int { return p.st.Len() }

func (p *dsparkProposer) Append(ctx context.Context, feats []float32, n int) error {
	return p.d.Append(ctx, p.st, feats, n)
}

func (p *dsparkProposer) Draft(ctx context.Context, anchor int32, choose func(k int, logits []float32) int32, out *backend.Proposal) error {
	if err := p.d.Draft(ctx, p.st, anchor, choose, &p.out); err != nil {
		return err
	}
	if len(p.out.Tokens) != p.d.Cfg.BlockSize {
		return fmt.Errorf("dspark: %d drafts for a block of %d", len(p.out.Tokens), p.d.Cfg.BlockSize)
	}
	out.Tokens = append(out.Tokens[:0], p.out.Tokens...)
	out.Confidence = out.Confidence[:0]
	if p.out.Confidence == nil {
		out.Confidence = nil
	} else {
		out.Confidence = append(out.Confidence, p.out.Confidence...)
	}
	return nil
}
