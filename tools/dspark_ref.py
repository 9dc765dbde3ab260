#!/usr/bin/env python3
"""DSparkDraft: a PyTorch reference of the DSpark drafter as lithos runs it (issue 7).

What this is, honestly
----------------------
This is OUR reading of the public DFlash and DSpark descriptions, summarised in
/work/shared/reference/qwen35-and-quant.md §D.1 (DFlash backbone: z-lab/dflash `dflash/model.py`,
arXiv 2602.06036) and §D.4 (DSpark Markov + confidence heads: vllm-project/speculators
`models/dspark/*`, llama.cpp `src/models/dspark.cpp` / `dflash.cpp`), with the conventions fixed in
lithos' .notes/spec-design.md. No upstream DSpark implementation is installable on the device
machine, so this module is built from transformers' Qwen3 pieces (Qwen3RMSNorm, Qwen3MLP,
Qwen3RotaryEmbedding + rotate_half) and a hand-written non-causal attention. It is the oracle the Go
drafter (runtime/draft) is tested against (tools/dspark_goldens.py) and the module a trainer can
train so that its checkpoint runs unchanged in lithos. It is not a copy of any upstream source.

Math (B = block_size, P = committed length, anchor = the last sampled, not yet committed token)
-----------------------------------------------------------------------------------------------
- Context features: for each committed target token at position p, concat over
  `dflash_config.target_layer_ids` (config order) of the target's hidden state OUTPUT of decoder
  layer id (HF `hidden_states[id + 1]`), shape [len(ids) * target_hidden_size].
  ctx = hidden_norm(fc(features))                                    [n, H]
  per draft layer: K = RoPE(k_norm(k_proj(ctx)), p), V = v_proj(ctx)  (NO input_layernorm on ctx)
- Block: [anchor, MASK x (B-1)] at positions P .. P+B-1, embedded with the TARGET's embed_tokens.
  Per layer (Qwen3 body; every RMSNorm has a PLAIN weight, y = w * x / rms(x), not (1 + w)):
    x = input_layernorm(h); q = q_norm(q_proj(x)), k = k_norm(k_proj(x)), v = v_proj(x) per head;
    RoPE (full head_dim, NeoX half split, theta = rope_theta, scaled as rope_scaling says) on q and k
    at their positions;
    attention NON-causal: every block row attends to all context rows 0..P-1 and all B block rows;
    GQA (q head j uses kv head j // (heads / kv_heads)); scale 1/sqrt(head_dim); o_proj; residual;
    h = h + mlp(post_attention_layernorm(h)) (SwiGLU: down(silu(gate(x)) * up(x))).
  After the last layer: hn = norm(h) [B, H]. Base logits = target lm_head(hn) [B, V]; row k predicts
  the token at position P + k + 1 (DSpark `sample_from_anchor`).
  Block K/V are not kept; only context K/V persist between rounds.
- Markov head (vanilla): logits_k = base_k + W2 @ W1[x_{k-1}], x_{-1} = anchor, x_k = the chosen
  draft (argmax when greedy). W1 = markov_head.markov_w1 (nn.Embedding [V, r]),
  W2 = markov_head.markov_w2 (nn.Linear r -> V, no bias, weight [V, r]).
- Confidence head: c_k = sigmoid(proj([hn_k ; W1[x_{k-1}]])) when confidence_head_with_markov,
  else sigmoid(proj(hn_k)); proj = confidence_head.proj (nn.Linear H(+r) -> 1, with bias).

state_dict names are exactly the checkpoint names (top level, no `model.` prefix):
  fc.weight, hidden_norm.weight, norm.weight,
  layers.{i}.input_layernorm.weight, layers.{i}.post_attention_layernorm.weight,
  layers.{i}.self_attn.{q,k,v,o}_proj.weight, layers.{i}.self_attn.{q,k}_norm.weight,
  layers.{i}.mlp.{gate,up,down}_proj.weight,
  markov_head.markov_w1.weight, markov_head.markov_w2.weight,
  confidence_head.proj.weight, confidence_head.proj.bias
The drafter owns no token embedding and no lm_head: callers pass the target's.

Config keys (as testdata/dspark/tiny-bf16/config.json): hidden_size, intermediate_size,
num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, vocab_size, rms_norm_eps,
rope_theta (or rope_parameters.rope_theta), rope_scaling (or a rope_parameters object whose rope_type is
not "default"), max_position_embeddings, hidden_act (silu); at the top level or under dflash_config /
dspark_config (nested wins, dspark_config first): block_size (default 7), mask_token_id,
target_layer_ids (or aux_hidden_state_layer_ids = target_layer_ids + 1, vLLM's capture index),
target_hidden_size, markov_rank (default 0: no Markov head), markov_head_type (only "vanilla"),
enable_confidence_head (default False), confidence_head_with_markov (default False). The defaults
are lithos' (runtime/draft ParseConfig); speculators' differ in block_size (8).
RoPE scaling is transformers' own: the scaling object goes to Qwen3Config(rope_parameters=...) and the
cos/sin tables come from Qwen3RotaryEmbedding (inverse frequencies from ROPE_INIT_FUNCTIONS[rope_type],
cos/sin times its attention_scaling). lithos' Go drafter (runtime/draft) runs "default", "linear" and
"yarn" (the published 27B head: yarn, factor 32 over 8192 positions, theta 1e7).

Usage: see .notes/dspark_ref.md. Requires torch and transformers (Qwen3 modules).
"""

import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3MLP,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    rotate_half,
)

__all__ = ["DSparkDraft", "parse_config", "load_draft", "default_inv_freq", "rope_type"]


def _get(cfg, key, default=None):
    v = cfg.get(key, default)
    if v is None and default is None:
        raise KeyError(f"DSpark config: missing {key!r}")
    return v


def _draft_key(cfg, key, default=None):
    """A DSpark key from dspark_config, else dflash_config, else the top level (the nested object
    wins, dspark_config over dflash_config: lithos' runtime/draft ParseConfig order)."""
    for sub in ("dspark_config", "dflash_config"):
        v = (cfg.get(sub) or {}).get(key)
        if v is not None:
            return v
    v = cfg.get(key)
    return default if v is None else v


def _tap_layers(cfg):
    """target_layer_ids, or aux_hidden_state_layer_ids - 1: speculators/vLLM count aux ids in vLLM's
    capture index (aux j = output of decoder layer j-1, 0 = the embedding output). Both: must agree."""
    tap = _draft_key(cfg, "target_layer_ids")
    aux = _draft_key(cfg, "aux_hidden_state_layer_ids")
    if aux is not None:
        if any(int(j) < 0 for j in aux):
            raise ValueError(f"DSpark config: aux_hidden_state_layer_ids {aux}: aux ids are >= 0 (0 = the embedding output)")
        mapped = [int(j) - 1 for j in aux]
        if tap is not None and [int(i) for i in tap] != mapped:
            raise ValueError(f"DSpark config: target_layer_ids {tap} and aux_hidden_state_layer_ids {aux} "
                             f"(target layers {mapped}) disagree")
        return mapped
    if tap is None:
        raise KeyError("DSpark config: missing 'dflash_config.target_layer_ids'")
    return [int(i) for i in tap]


def parse_config(cfg):
    """Normalises a DSpark config dict (config.json) into the fields this module uses.

    Defaults are lithos' (runtime/draft ParseConfig): block_size 7, markov_rank 0 (no Markov head),
    enable_confidence_head False, confidence_head_with_markov False (and False without a confidence
    head); a confidence head with markov needs markov_rank > 0."""
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    rope_params = cfg.get("rope_parameters") or {}
    rope_theta = cfg.get("rope_theta")
    if rope_theta is None:
        rope_theta = rope_params.get("rope_theta")
    rope_scaling = cfg.get("rope_scaling") or None
    if rope_scaling is None and rope_params.get("rope_type", rope_params.get("type", "default")) != "default":
        rope_scaling = rope_params  # transformers 5 form: the scaling lives in rope_parameters
    if rope_theta is None:
        raise KeyError("DSpark config: missing 'rope_theta'")
    tap = _tap_layers(cfg)
    mask = _draft_key(cfg, "mask_token_id")
    if mask is None:
        raise KeyError("DSpark config: missing 'dflash_config.mask_token_id'")
    markov_rank = int(_draft_key(cfg, "markov_rank", 0))
    head_type = _draft_key(cfg, "markov_head_type", "vanilla")
    if markov_rank > 0 and head_type != "vanilla":
        raise ValueError(f"DSpark config: markov_head_type {head_type!r}: only 'vanilla' is implemented")
    conf = bool(_draft_key(cfg, "enable_confidence_head", False))
    conf_markov = conf and bool(_draft_key(cfg, "confidence_head_with_markov", False))
    if conf_markov and markov_rank == 0:
        raise ValueError("DSpark config: confidence_head_with_markov needs a Markov head (markov_rank > 0)")
    out = dict(
        hidden_size=int(_get(cfg, "hidden_size")),
        intermediate_size=int(_get(cfg, "intermediate_size")),
        num_hidden_layers=int(_get(cfg, "num_hidden_layers")),
        num_attention_heads=int(_get(cfg, "num_attention_heads")),
        num_key_value_heads=int(cfg.get("num_key_value_heads", cfg["num_attention_heads"])),
        head_dim=int(head_dim),
        vocab_size=int(_get(cfg, "vocab_size")),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=float(rope_theta),
        rope_scaling=dict(rope_scaling) if rope_scaling else None,
        hidden_act=cfg.get("hidden_act", "silu"),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 32768)),
        block_size=int(_draft_key(cfg, "block_size", 7)),
        mask_token_id=int(mask),
        target_layer_ids=tap,
        target_hidden_size=int(_draft_key(cfg, "target_hidden_size", cfg["hidden_size"])),
        markov_rank=markov_rank,
        markov_head_type=head_type,
        enable_confidence_head=conf,
        confidence_head_with_markov=conf_markov,
    )
    if out["num_attention_heads"] % out["num_key_value_heads"]:
        raise ValueError("DSpark config: num_attention_heads must be a multiple of num_key_value_heads")
    return out


def _qwen3_config(c, legacy=False):
    """A transformers Qwen3Config with the drafter's geometry (for Qwen3MLP and the rotary table).

    transformers >= 5 reads RoPE from rope_parameters; 4.x from rope_theta / rope_scaling
    (legacy=True)."""
    kw = dict(
        vocab_size=c["vocab_size"],
        hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"],
        num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"],
        head_dim=c["head_dim"],
        hidden_act=c["hidden_act"],
        max_position_embeddings=c["max_position_embeddings"],
        rms_norm_eps=c["rms_norm_eps"],
    )
    if legacy:
        return Qwen3Config(rope_theta=c["rope_theta"], rope_scaling=c["rope_scaling"], **kw)
    rope = {"rope_type": "default", "rope_theta": c["rope_theta"]}
    if c["rope_scaling"]:
        sc = {k: v for k, v in c["rope_scaling"].items() if v is not None and k != "type"}
        sc["rope_type"] = c["rope_scaling"].get("rope_type", c["rope_scaling"].get("type", "default"))
        rope.update(sc)
        rope["rope_theta"] = c["rope_theta"]
    return Qwen3Config(rope_parameters=rope, **kw)


def rope_type(c):
    """The RoPE type of a parse_config() result ("default" without rope_scaling)."""
    sc = c["rope_scaling"] or {}
    return sc.get("rope_type", sc.get("type", "default"))


def _rotary(c):
    """(Qwen3Config, Qwen3RotaryEmbedding), trying the transformers 5 config form first, then the
    4.x form. Default RoPE: the inverse frequencies are checked against theta^(-2i/d). Scaled RoPE:
    the rotary embedding must report the config's rope_type (transformers did not drop the scaling)."""
    last = None
    for legacy in (False, True):
        try:
            qc = _qwen3_config(c, legacy)
            rot = Qwen3RotaryEmbedding(config=qc)
        except (TypeError, KeyError, ValueError, AttributeError) as e:
            last = e
            continue
        if c["rope_scaling"]:
            got = getattr(rot, "rope_type", None)
            scaled = not torch.equal(rot.inv_freq.float(), default_inv_freq(c["head_dim"], c["rope_theta"]))
            if got == rope_type(c) or (got is None and scaled):
                return qc, rot
            last = ValueError(f"rotary embedding has rope_type {got!r}, the config says {rope_type(c)!r} (legacy={legacy})")
            continue
        want = default_inv_freq(c["head_dim"], c["rope_theta"])
        if rot.inv_freq.shape == want.shape and torch.allclose(rot.inv_freq.float(), want, rtol=1e-6, atol=0):
            return qc, rot
        last = ValueError(f"rotary inv_freq does not match rope_theta {c['rope_theta']} (legacy={legacy})")
    raise RuntimeError(f"cannot build transformers' Qwen3RotaryEmbedding for this config: {last}")


def default_inv_freq(head_dim, theta):
    """Default RoPE inverse frequencies theta^(-2i/d), i < d/2 (float32), for self-checks."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


class DSparkAttention(nn.Module):
    """q/k/v/o projections and per-head q_norm/k_norm (plain weight) of one draft layer."""

    def __init__(self, c):
        super().__init__()
        H, d = c["hidden_size"], c["head_dim"]
        self.heads, self.kv_heads, self.head_dim = c["num_attention_heads"], c["num_key_value_heads"], d
        self.q_proj = nn.Linear(H, self.heads * d, bias=False)
        self.k_proj = nn.Linear(H, self.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(H, self.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.heads * d, H, bias=False)
        self.q_norm = Qwen3RMSNorm(d, eps=c["rms_norm_eps"])
        self.k_norm = Qwen3RMSNorm(d, eps=c["rms_norm_eps"])


class DSparkLayer(nn.Module):
    def __init__(self, c, qc):
        super().__init__()
        self.input_layernorm = Qwen3RMSNorm(c["hidden_size"], eps=c["rms_norm_eps"])
        self.self_attn = DSparkAttention(c)
        self.post_attention_layernorm = Qwen3RMSNorm(c["hidden_size"], eps=c["rms_norm_eps"])
        self.mlp = Qwen3MLP(qc)


class MarkovHead(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.markov_w1 = nn.Embedding(c["vocab_size"], c["markov_rank"])
        self.markov_w2 = nn.Linear(c["markov_rank"], c["vocab_size"], bias=False)

    def bias(self, prev):
        """W2 @ W1[prev]: [..., V] for token ids prev [...]."""
        return self.markov_w2(self.markov_w1(prev))


class ConfidenceHead(nn.Module):
    def __init__(self, c):
        super().__init__()
        n = c["hidden_size"] + (c["markov_rank"] if c["confidence_head_with_markov"] else 0)
        self.proj = nn.Linear(n, 1, bias=True)


def _rope(x, cos, sin):
    """x [..., heads, rows, d]; cos/sin [rows, d] (NeoX half split: rotate_half)."""
    return x * cos + rotate_half(x) * sin


class DSparkDraft(nn.Module):
    """The DSpark drafter (see the module docstring for the math and the names).

    Construct with the config dict (config.json), then load_state_dict(checkpoint tensors).
    All methods work on one sequence (no batch dim) except forward_train, which takes a batch.
    Shapes: F = len(target_layer_ids) * target_hidden_size, H = hidden_size, V = vocab_size,
    B = block_size, d = head_dim, Hkv = num_key_value_heads.
    """

    def __init__(self, config):
        super().__init__()
        c = parse_config(config)
        self.c = c
        qc, rotary = _rotary(c)
        n_feat = len(c["target_layer_ids"]) * c["target_hidden_size"]
        self.fc = nn.Linear(n_feat, c["hidden_size"], bias=False)
        self.hidden_norm = Qwen3RMSNorm(c["hidden_size"], eps=c["rms_norm_eps"])
        self.layers = nn.ModuleList([DSparkLayer(c, qc) for _ in range(c["num_hidden_layers"])])
        self.norm = Qwen3RMSNorm(c["hidden_size"], eps=c["rms_norm_eps"])
        # No Markov head (and no markov_head.* tensors) with markov_rank 0.
        self.markov_head = MarkovHead(c) if c["markov_rank"] > 0 else None
        if c["enable_confidence_head"]:
            self.confidence_head = ConfidenceHead(c)
        else:
            self.confidence_head = None
        # Not a parameter and not in state_dict (persistent=False inside transformers).
        self.rotary = rotary
        # A float32 copy of the inverse frequencies: model.to(bfloat16) would round the buffer.
        self._inv_freq32 = self.rotary.inv_freq.detach().clone().float()

    # ---------------------------------------------------------------- pieces ---

    @property
    def block_size(self):
        return self.c["block_size"]

    def rope_cos_sin(self, positions):
        """cos, sin [rows, d] (float32 math, cast to the parameters' dtype) at int positions [rows]."""
        positions = positions.to(self.fc.weight.device).long()
        if self.rotary.inv_freq.dtype != torch.float32:
            self.rotary.inv_freq = self._inv_freq32.to(self.rotary.inv_freq.device)
        x = torch.zeros(1, dtype=self.fc.weight.dtype, device=self.fc.weight.device)
        cos, sin = self.rotary(x, positions[None, :])
        return cos[0], sin[0]

    def context_hidden(self, features):
        """ctx = hidden_norm(fc(features)): features [..., n, F] -> [..., n, H]."""
        return self.hidden_norm(self.fc(features))

    def _heads(self, x, n_heads):
        """[..., rows, n*d] -> [..., n, rows, d]."""
        d = self.c["head_dim"]
        x = x.unflatten(-1, (n_heads, d))
        return x.transpose(-3, -2)

    def context(self, features, start=0):
        """Per-layer context K/V for committed tokens at positions start .. start+n-1.

        features [n, F] -> list over layers of (K [Hkv, n, d] after k_norm and RoPE, V [Hkv, n, d]).
        Appending in pieces gives the same rows as appending at once (each row is independent).
        """
        n = features.shape[0]
        ctx = self.context_hidden(features)
        cos, sin = self.rope_cos_sin(torch.arange(start, start + n))
        out = []
        for layer in self.layers:
            a = layer.self_attn
            k = a.k_norm(self._heads(a.k_proj(ctx), a.kv_heads))
            v = self._heads(a.v_proj(ctx), a.kv_heads)
            out.append((_rope(k, cos, sin), v))
        return out

    @staticmethod
    def cat_context(kv_a, kv_b):
        """Concatenate two context() results along the rows (kv_a first)."""
        return [(torch.cat([ka, kb], -2), torch.cat([va, vb], -2)) for (ka, va), (kb, vb) in zip(kv_a, kv_b)]

    def _layer(self, layer, h, cos, sin, ctx_k, ctx_v, mask=None):
        """One draft layer over block rows h [..., R, H] with context K/V [..., Hkv, n, d].

        mask: optional bool [..., R, n + R] (True = attend); None = attend to everything (non-causal).
        """
        a = layer.self_attn
        x = layer.input_layernorm(h)
        q = _rope(a.q_norm(self._heads(a.q_proj(x), a.heads)), cos, sin)
        k = _rope(a.k_norm(self._heads(a.k_proj(x), a.kv_heads)), cos, sin)
        v = self._heads(a.v_proj(x), a.kv_heads)
        k = torch.cat([ctx_k, k], -2)
        v = torch.cat([ctx_v, v], -2)
        rep = a.heads // a.kv_heads
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
        s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(a.head_dim))
        if mask is not None:
            s = s.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        p = torch.softmax(s.float(), dim=-1).to(q.dtype)
        o = torch.matmul(p, v)  # [..., heads, R, d]
        o = o.transpose(-3, -2).flatten(-2)
        h = h + a.o_proj(o)
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        return h

    def block_hidden(self, ctx_kv, anchor, embed_weight, start=None):
        """Final-normed hidden rows hn [B, H] of the block [anchor, MASK x (B-1)].

        ctx_kv: context() result holding P rows (P may be 0: pass [] rows-0 tensors or None);
        start: the block's first position (default P); embed_weight: target embed_tokens [V, Ht].
        """
        B = self.block_size
        dev = self.fc.weight.device
        P = 0 if not ctx_kv else ctx_kv[0][0].shape[-2]
        if start is None:
            start = P
        ids = torch.full((B,), self.c["mask_token_id"], dtype=torch.long, device=dev)
        ids[0] = int(anchor)
        h = F.embedding(ids, embed_weight).to(self.fc.weight.dtype)
        cos, sin = self.rope_cos_sin(torch.arange(start, start + B))
        hkv, d = self.c["num_key_value_heads"], self.c["head_dim"]
        for i, layer in enumerate(self.layers):
            if ctx_kv:
                ck, cv = ctx_kv[i]
            else:
                ck = cv = h.new_zeros(hkv, 0, d)
            h = self._layer(layer, h, cos, sin, ck, cv)
        return self.norm(h)

    def base_logits(self, hn, lm_head_weight):
        """Base logits [B, V] = target lm_head(hn); lm_head_weight [V, H]."""
        return F.linear(hn, lm_head_weight.to(hn.dtype))

    def markov_bias(self, prev):
        """W2 @ W1[prev] [..., V] for previous tokens prev [...]; a scalar 0 without a Markov head."""
        if self.markov_head is None:
            return torch.zeros((), dtype=self.fc.weight.dtype, device=prev.device)
        return self.markov_head.bias(prev)

    def confidence_logit(self, hn, prev):
        """proj([hn ; W1[prev]]) (pre-sigmoid) [...]; hn [..., H], prev [...]; None without the head."""
        if self.confidence_head is None:
            return None
        x = hn
        if self.c["confidence_head_with_markov"]:
            x = torch.cat([hn, self.markov_head.markov_w1(prev)], -1)
        return self.confidence_head.proj(x).squeeze(-1)

    @torch.no_grad()
    def markov_chain(self, base, hn, anchor, choose=None):
        """The sequential Markov chain over one block.

        base [B, V] base logits, hn [B, H], anchor int. choose(k, logits[V]) -> int picks x_k
        (default argmax, first index on ties as torch.argmax). Returns (tokens [B] long,
        adjusted logits [B, V], confidence [B] or None); confidence_k = sigmoid(proj([hn_k ; W1[x_{k-1}]])).
        """
        B = base.shape[0]
        dev = base.device
        prev = torch.tensor(int(anchor), dtype=torch.long, device=dev)
        toks, rows, conf = [], [], []
        for k in range(B):
            row = base[k] + self.markov_bias(prev)
            c = self.confidence_logit(hn[k], prev)
            if c is not None:
                conf.append(torch.sigmoid(c))
            rows.append(row)
            x = int(torch.argmax(row)) if choose is None else int(choose(k, row.clone()))
            toks.append(x)
            prev = torch.tensor(x, dtype=torch.long, device=dev)
        conf_t = torch.stack(conf) if conf else None
        return torch.tensor(toks, dtype=torch.long, device=dev), torch.stack(rows), conf_t

    @torch.no_grad()
    def draft(self, ctx_kv, anchor, embed_weight, lm_head_weight, choose=None):
        """One round's proposal: (tokens [B], adjusted logits [B, V], confidence [B] | None,
        base logits [B, V], hn [B, H])."""
        hn = self.block_hidden(ctx_kv, anchor, embed_weight)
        base = self.base_logits(hn, lm_head_weight)
        toks, adj, conf = self.markov_chain(base, hn, anchor, choose)
        return toks, adj, conf, base, hn

    # -------------------------------------------------------------- training ---

    def forward_train(self, features, input_ids, anchors, embed_weight, lm_head_weight, anchor_valid=None):
        """Training forward with teacher forcing, many anchors per sequence in one pass.

        features  [b, L, F]   target taps of every token of the sequence (row p: token at p)
        input_ids [b, L]      the sequence's tokens
        anchors   [b, J]      anchor positions P (1 <= P <= L-1); block j = [x_P, MASK x (B-1)] at
                              positions P..P+B-1, attending to context rows 0..P-1 and its own block
        anchor_valid [b, J]   optional bool, False for padding anchors
        Returns dict:
          base    [b, J, B, V] base logits (slot k predicts x_{P+k+1})
          markov  [b, J, B, V] base + W2 W1[x_{P+k}] (teacher forcing: the true previous token)
          conf    [b, J, B]    confidence logits (pre-sigmoid) with the true previous token, or None
          labels  [b, J, B]    x_{P+k+1}, -100 past the end of the sequence or for invalid anchors
          hn      [b, J, B, H]
        """
        b, L, _ = features.shape
        J = anchors.shape[1]
        B = self.block_size
        dev = features.device
        anchors = anchors.long()
        if anchor_valid is None:
            anchor_valid = torch.ones_like(anchors, dtype=torch.bool)
        ar = torch.arange(B, device=dev)
        pos = anchors[..., None] + ar  # [b, J, B] positions of block rows
        ids = torch.full((b, J, B), self.c["mask_token_id"], dtype=torch.long, device=dev)
        ids[..., 0] = torch.gather(input_ids, 1, anchors.clamp(0, L - 1))
        h = F.embedding(ids, embed_weight).to(self.fc.weight.dtype).reshape(b, J * B, -1)
        # Labels and teacher-forced previous tokens.
        lab_pos = pos + 1
        in_range = (lab_pos < L) & anchor_valid[..., None]
        labels = torch.gather(input_ids, 1, lab_pos.clamp(max=L - 1).reshape(b, -1)).reshape(b, J, B)
        labels = labels.masked_fill(~in_range, -100)
        prev = torch.gather(input_ids, 1, pos.clamp(max=L - 1).reshape(b, -1)).reshape(b, J, B)
        # Context K/V for all L rows once.
        ctx = self.context_hidden(features)  # [b, L, H]
        ccos, csin = self.rope_cos_sin(torch.arange(L))
        bcos, bsin = self.rope_cos_sin(pos.reshape(-1))  # [b*J*B, d]
        bcos = bcos.reshape(b, 1, J * B, -1)
        bsin = bsin.reshape(b, 1, J * B, -1)
        # Mask [b, J*B, L + J*B]: context col c visible iff c < P_j; block cols only of the own block.
        ctx_vis = torch.arange(L, device=dev)[None, None, :] < anchors.repeat_interleave(B, 1)[..., None]
        blk = torch.arange(J, device=dev).repeat_interleave(B)
        blk_vis = (blk[:, None] == blk[None, :]).expand(b, -1, -1)
        mask = torch.cat([ctx_vis, blk_vis], -1)
        for layer in self.layers:
            a = layer.self_attn
            ck = _rope(a.k_norm(self._heads(a.k_proj(ctx), a.kv_heads)), ccos, csin)
            cv = self._heads(a.v_proj(ctx), a.kv_heads)
            h = self._layer(layer, h, bcos, bsin, ck, cv, mask)
        hn = self.norm(h).reshape(b, J, B, -1)
        base = F.linear(hn, lm_head_weight.to(hn.dtype))
        markov = base + self.markov_bias(prev)
        conf = self.confidence_logit(hn, prev)
        return dict(base=base, markov=markov, conf=conf, labels=labels, hn=hn)

    @staticmethod
    def loss(out, base_weight=0.0, conf_weight=0.1):
        """A simple loss (our choice, not an upstream recipe): CE of the Markov logits on the labels
        (+ base_weight x CE of the base logits) + conf_weight x BCE of the confidence logits on the
        target 'every slot up to k drafted right' (cumprod of argmax(markov) == label)."""
        V = out["markov"].shape[-1]
        lab = out["labels"]
        ce = F.cross_entropy(out["markov"].reshape(-1, V).float(), lab.reshape(-1), ignore_index=-100)
        total = ce
        if base_weight:
            total = total + base_weight * F.cross_entropy(
                out["base"].reshape(-1, V).float(), lab.reshape(-1), ignore_index=-100)
        if out["conf"] is not None and conf_weight:
            valid = lab != -100
            hit = (out["markov"].argmax(-1) == lab) & valid
            tgt = torch.cumprod(hit.float(), dim=-1)
            bce = F.binary_cross_entropy_with_logits(out["conf"].float(), tgt, reduction="none")
            total = total + conf_weight * (bce * valid).sum() / valid.sum().clamp(min=1)
        return total


def load_draft(path, dtype=torch.float32, device="cpu"):
    """DSparkDraft from a checkpoint folder (config.json + *.safetensors), weights cast to dtype."""
    from safetensors.torch import load_file
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    m = DSparkDraft(cfg)
    sd = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            sd.update(load_file(os.path.join(path, name)))
    sd = {k: v.to(dtype) for k, v in sd.items()}
    m.load_state_dict(sd, strict=True)
    return m.to(device=device, dtype=dtype).eval()
