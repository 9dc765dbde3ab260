#!/usr/bin/env python3
"""DSpark drafter goldens for lithos/runtime/draft and runtime/backend/cpu (issue 7).

Run on the GPU machine (PyTorch, transformers with the Qwen3 modules, safetensors, numpy), from the
repository root:

    python3 tools/dspark_goldens.py --out testdata/goldens/dspark-tiny

Oracle: tools/dspark_ref.py (DSparkDraft: transformers' Qwen3RMSNorm / Qwen3MLP / Qwen3RotaryEmbedding
+ a plain non-causal softmax attention; our reading of qwen35-and-quant.md §D.1, §D.4 and
.notes/spec-design.md), FP32 math on the CPU, over the tiny DSpark head of testdata/dspark/:

  variant "bf16":  tiny-bf16/model.safetensors, BF16 weights decoded exactly to float32;
  variant "nvfp4": tiny-nvfp4-expected.safetensors (what `lithos-pack quantize` writes for tiny-bf16,
                   tools/dspark_quant_golden.py), every NVFP4 linear dequantized in ModelOpt's order
                   (tools/formats_goldens.py dequantize_nvfp4: e2m1 · (e4m3 block scale · weight_scale_2)),
                   the BF16 tensors (norms, markov_w1, confidence head) decoded as stored;
  variant "yarn":  the bf16 weights under a YaRN RoPE config (tiny-bf16/config.json + YARN_SCALING: factor 4
                   over original_max_position_embeddings 1024, beta 32/1, truncate; max_position_embeddings
                   4096 = 4 x 1024 so transformers 4.5x and 5.x read the same factor), written to
                   <out>/yarn-config.json for the Go test. The oracle's RoPE is transformers' own
                   Qwen3RotaryEmbedding with that rope_scaling (ROPE_INIT_FUNCTIONS["yarn"] =
                   _compute_yarn_parameters: the extrapolation/interpolation blend of the inverse
                   frequencies and the cos/sin amplitude attention_scaling = 0.1 ln 4 + 1). With d = 32 and
                   theta = 1e7 the correction range is [1, 6], so dims 0-1 extrapolate, 2-5 blend, 6-15
                   interpolate. Cases (YARN_CASES) 23 rows and 1100 rows: the second puts the context and the
                   block (positions 1100 … 1106) past original_max_position_embeddings; its features are
                   features.40 tiled (row p = features.40[p % 40]) so nothing new is stored.

The drafter has no embedding or vocabulary head of its own; the target's are drawn here from a seeded
numpy generator and rounded to BF16 (embed [1000, 128] ~ N(0, 0.05); lm_head [1000, 128] ~ N(0, 5e-4),
small so that the base logits (std ≈ 0.006) and the Markov bias W2·W1[x] (std ≈ 0.003) are comparable
and the chain's choices depend on the previous token). Context features (target taps) are N(0, 1) float32.

Cases (n = context rows) of bf16 and nvfp4: 6, 17 and 40, where the 17-row features are the first 17 rows of the 40-row
features (the Go test appends 17, drafts, appends 23 more, drafts, and compares with appending 40 at
once). Anchors are drawn per case and redrawn (deterministically) until every greedy step's top-1 minus
top-2 gap is at least MARGIN_MIN · max|logits| in both variants, so float32 rounding cannot flip a token.

Output <out>/goldens.safetensors (float32 unless noted):
  embed, lm_head                BF16 [1000, 128]      the target's tables (exact BF16 values)
  features.6 [6, 384], features.40 [40, 384]          context features (features.17 = features.40[:17])
  anchor.<n>                    I32 [1]
  forced.<n>                    I32 [7]               the tokens a "choose" callback returns in the forced chain
  <v>.ctx_k.<n>.<l>, <v>.ctx_v.<n>.<l>  [n, Hkv·d]    layer l's context K (after k_norm and RoPE) / V, row p =
                                                      position p, heads consecutive (the Go cache layout)
  <v>.hn.<n>                    [7, 128]              final-normed hidden rows of the block
  <v>.base.<n>                  [7, 1000]             base logits (lm_head · hn)
  <v>.greedy.<n>                I32 [7]               the greedy Markov chain (argmax, lowest index on ties)
  <v>.greedy_logits.<n>         [7, 1000]             Markov-adjusted logits along the greedy chain
  <v>.greedy_conf.<n>           [7]                   sigmoid confidence along the greedy chain
  <v>.greedy_margin.<n>         [7]                   top-1 minus top-2 of each greedy row
  <v>.forced_logits.<n>, <v>.forced_conf.<n>          the same along the forced chain
  yarn.*.<n> for n in YARN_CASES, the same records, except that yarn.ctx_k/ctx_v.1100.<l> hold only the
                                                      last YARN_TAIL (40) rows (positions 1060 … 1099)
  yarn.inv_freq                 [16]                  transformers' rotary inv_freq for the yarn config
  yarn.attention_scaling        [1]                   its attention_scaling (the cos/sin amplitude)
<out>/goldens.json: versions, config, cases, self-checks (append in pieces == at once; forward_train ==
draft for the same anchors; transformers' rotary inv_freq == θ^(−2i/d); float64 run vs float32), sizes.

Relative error as the Go tests define it: max|x − y| / max|y| over one record.
Everything is deterministic (numpy generators with fixed seeds, CPU math). Takes seconds; writes < 2 MB.
"""

import argparse
import hashlib
import json
import math
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dspark_ref as ref  # noqa: E402
import formats_goldens as fg  # noqa: E402  (dequantize_nvfp4)

GENERATOR = "tools/dspark_goldens.py"
SEED = 20261207
CASES = (6, 17, 40)
PIECE = 17  # features.17 = features.40[:17]
MARGIN_MIN = 1e-3  # relative to max|logits| of the row
MAX_ANCHOR_TRIES = 64
EMBED_STD = 0.05
LM_HEAD_STD = 5e-4
SIZE_BUDGET = 2_000_000
YARN_SCALING = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
YARN_MAX_POS = 4096  # = factor x original_max_position_embeddings
YARN_CASES = (23, 1100)
YARN_TAIL = 40  # context K/V rows recorded for cases longer than this (the last ones)

_failures = []


def check(ok, what):
    if not ok:
        _failures.append(what)
        print(f"CHECK FAILED: {what}", flush=True)
    return ok


def bf16_round(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(torch.bfloat16)


def rel_err(x, y):
    x = x.double()
    y = y.double()
    return float((x - y).abs().max() / y.abs().max().clamp(min=1e-30))


def yarn_config(root):
    cfg = json.load(open(os.path.join(root, "tiny-bf16", "config.json")))
    cfg["rope_scaling"] = dict(YARN_SCALING)
    cfg["max_position_embeddings"] = YARN_MAX_POS
    return cfg


def load_variant(root, variant, dtype):
    cfg = json.load(open(os.path.join(root, "tiny-bf16", "config.json")))
    if variant == "yarn":
        cfg = yarn_config(root)
    m = ref.DSparkDraft(cfg)
    if variant in ("bf16", "yarn"):
        sd = load_file(os.path.join(root, "tiny-bf16", "model.safetensors"))
        sd = {k: v.to(torch.float32) for k, v in sd.items()}
    else:
        raw = load_file(os.path.join(root, "tiny-nvfp4-expected.safetensors"))
        sd = {}
        for k, v in raw.items():
            if k.endswith(".weight_scale") or k.endswith(".weight_scale_2"):
                continue
            if v.dtype == torch.uint8:
                mod = k[: -len(".weight")]
                s2 = float(raw[mod + ".weight_scale_2"].float())
                sd[k] = fg.dequantize_nvfp4(v, raw[mod + ".weight_scale"], s2)
            else:
                sd[k] = v.to(torch.float32)
    m.load_state_dict({k: v.to(dtype) for k, v in sd.items()}, strict=True)
    m = m.to(dtype).eval()
    return m, cfg, sd


def chain(m, base, hn, anchor, forced=None):
    choose = None
    if forced is not None:
        choose = lambda k, row: int(forced[k])  # noqa: E731
    toks, adj, conf = m.markov_chain(base, hn, anchor, choose)
    return toks, adj, conf


def margins(adj):
    top2 = torch.topk(adj.double(), 2, dim=-1).values
    return (top2[:, 0] - top2[:, 1]).float()


def tiled(feats40, n):
    """Features of n rows: features.40 for n <= 40 (its first n rows), else row p = features.40[p % 40]."""
    if n <= feats40.shape[0]:
        return feats40[:n]
    reps = -(-n // feats40.shape[0])
    return feats40.repeat(reps, 1)[:n].contiguous()


def record_case(out, case, v, m, kv, n, anchor, forced, res, E, Wlm, feats_n, tail=None):
    """Writes the records of variant v for case n (res = the greedy run for anchor) and runs the
    forward_train self-check. tail: keep only the last tail context rows of K/V."""
    h, base, toks, adj, conf, mg = res
    hkv, d, B = m.c["num_key_value_heads"], m.c["head_dim"], m.c["block_size"]
    F = feats_n.shape[1]
    for li, (k, vv) in enumerate(kv):
        kr = k.transpose(0, 1).reshape(n, hkv * d)
        vr = vv.transpose(0, 1).reshape(n, hkv * d)
        if tail is not None:
            kr, vr = kr[-tail:], vr[-tail:]
        out[f"{v}.ctx_k.{n}.{li}"] = kr.contiguous()
        out[f"{v}.ctx_v.{n}.{li}"] = vr.contiguous()
    out[f"{v}.hn.{n}"] = h.contiguous()
    out[f"{v}.base.{n}"] = base.contiguous()
    out[f"{v}.greedy.{n}"] = toks.to(torch.int32)
    out[f"{v}.greedy_logits.{n}"] = adj.contiguous()
    out[f"{v}.greedy_conf.{n}"] = conf.contiguous()
    out[f"{v}.greedy_margin.{n}"] = mg.contiguous()
    ftoks, fadj, fconf = chain(m, base, h, anchor, forced)
    check(torch.equal(ftoks, forced), f"{v} case {n}: forced chain did not take the forced tokens")
    out[f"{v}.forced_logits.{n}"] = fadj.contiguous()
    out[f"{v}.forced_conf.{n}"] = fconf.contiguous()
    # The chain matters: the greedy tokens differ from argmax of the base logits somewhere?
    case[f"{v}.greedy"] = toks.tolist()
    case[f"{v}.base_argmax"] = base.argmax(-1).tolist()
    case[f"{v}.greedy_min_rel_margin"] = float((mg / adj.abs().amax(-1)).min())
    case[f"{v}.markov_changes_argmax_rows"] = int((toks != base.argmax(-1)).sum())
    case[f"{v}.confidence"] = conf.tolist()
    # Self-check: the training forward gives the same rows for this anchor.
    L = n + B + 1
    ids = torch.zeros(L, dtype=torch.long)
    ids[n] = anchor
    ids[n + 1: n + 1 + B] = toks  # teacher forcing along the greedy chain
    fpad = torch.cat([feats_n, torch.zeros(L - n, F)], 0)
    tr = m.forward_train(fpad[None], ids[None], torch.tensor([[n]]), E, Wlm)
    e1 = rel_err(tr["base"][0, 0], base)
    e2 = rel_err(tr["markov"][0, 0], adj)
    e3 = float((torch.sigmoid(tr["conf"][0, 0]) - conf).abs().max())
    case[f"{v}.forward_train_vs_draft"] = {"base": e1, "markov": e2, "conf_abs": e3}
    check(e1 < 1e-5 and e2 < 1e-5 and e3 < 1e-5, f"{v} case {n}: forward_train disagrees with draft ({e1}, {e2}, {e3})")


def pick_anchor(models, kv, n, V, E, Wlm):
    """(anchor, tries, forced, results by variant): forced tokens and anchors drawn from SEED + n, anchors
    redrawn until every greedy step's margin is at least MARGIN_MIN relative in every variant."""
    arng = np.random.default_rng(SEED + n)
    B = next(iter(models.values())).c["block_size"]
    forced = torch.from_numpy(arng.integers(0, V, size=B).astype(np.int64))
    anchor, tries = None, 0
    while tries < MAX_ANCHOR_TRIES:
        cand = int(arng.integers(0, V - 1))  # never the mask token 999
        ok = True
        res = {}
        for v, m in models.items():
            h = m.block_hidden(kv[v], cand, E)
            base = m.base_logits(h, Wlm)
            toks, adj, conf = chain(m, base, h, cand)
            mg = margins(adj)
            ok = ok and bool((mg >= MARGIN_MIN * adj.abs().amax(-1)).all())
            res[v] = (h, base, toks, adj, conf, mg)
        tries += 1
        if ok:
            anchor = cand
            break
    check(anchor is not None, f"case {n}: no anchor with greedy margins >= {MARGIN_MIN} relative")
    if anchor is None:
        anchor = cand
    return anchor, tries, forced, res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="testdata/goldens/dspark-tiny")
    ap.add_argument("--dspark", default="testdata/dspark")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(4)
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)

    models = {}
    for v in ("bf16", "nvfp4"):
        models[v], cfg, _ = load_variant(args.dspark, v, torch.float32)
    yarn_model, ycfg, _ = load_variant(args.dspark, "yarn", torch.float32)
    with open(os.path.join(args.out, "yarn-config.json"), "w") as f:
        json.dump(ycfg, f, indent=2)
        f.write("\n")
    c = models["bf16"].c
    V, H, B = c["vocab_size"], c["hidden_size"], c["block_size"]
    F = len(c["target_layer_ids"]) * c["target_hidden_size"]
    hkv, d = c["num_key_value_heads"], c["head_dim"]

    rng = np.random.default_rng(SEED)
    embed = bf16_round(rng.normal(0.0, EMBED_STD, size=(V, H)))
    lm_head = bf16_round(rng.normal(0.0, LM_HEAD_STD, size=(V, H)))
    feats40 = torch.from_numpy(rng.normal(0.0, 1.0, size=(40, F)).astype(np.float32))
    feats6 = torch.from_numpy(rng.normal(0.0, 1.0, size=(6, F)).astype(np.float32))
    feats = {6: feats6, 17: feats40[:PIECE], 40: feats40}
    E, Wlm = embed.float(), lm_head.float()

    out = {"embed": embed, "lm_head": lm_head, "features.6": feats6, "features.40": feats40}
    summary = {"cases": {}, "checks": {}}

    # Self-check: transformers' rotary table is the default RoPE.
    invf = models["bf16"].rotary.inv_freq.float()
    summary["checks"]["rotary_inv_freq_max_abs_diff"] = float((invf - ref.default_inv_freq(d, c["rope_theta"])).abs().max())
    check(summary["checks"]["rotary_inv_freq_max_abs_diff"] == 0.0, "rotary inv_freq differs from theta^(-2i/d)")

    with torch.no_grad():
        for n in CASES:
            kv = {v: models[v].context(feats[n]) for v in models}
            anchor, tries, forced, res = pick_anchor(models, kv, n, V, E, Wlm)
            out[f"anchor.{n}"] = torch.tensor([anchor], dtype=torch.int32)
            out[f"forced.{n}"] = forced.to(torch.int32)
            case = {"anchor": anchor, "anchor_tries": tries, "context_rows": n}
            for v, m in models.items():
                record_case(out, case, v, m, kv[v], n, anchor, forced, res[v], E, Wlm, feats[n])
            summary["cases"][str(n)] = case

        # The YaRN variant: transformers' rotary embedding with rope_scaling yarn.
        ym = yarn_model
        yrot = ym.rotary
        amp = float(yrot.attention_scaling)
        dinv = ref.default_inv_freq(d, c["rope_theta"])
        yinv = yrot.inv_freq.detach().float().clone()
        ych = {"rope_type": getattr(yrot, "rope_type", None), "attention_scaling": amp,
               "inv_freq": yinv.tolist(),
               "dims_equal_default": [i for i in range(d // 2) if float(yinv[i]) == float(dinv[i])],
               "dims_equal_default_over_factor": [i for i in range(d // 2) if float(yinv[i]) == float((dinv / YARN_SCALING["factor"])[i])]}
        summary["checks"]["yarn_rotary"] = ych
        check(ych["rope_type"] in ("yarn", None), f"yarn: transformers' rotary embedding has rope_type {ych['rope_type']!r}")
        check(abs(amp - (0.1 * math.log(YARN_SCALING["factor"]) + 1.0)) < 1e-12, f"yarn: attention_scaling {amp}, want 0.1 ln 4 + 1")
        check(not torch.equal(yinv, dinv) and not torch.allclose(yinv, dinv / YARN_SCALING["factor"], rtol=1e-6, atol=0),
              "yarn: inverse frequencies are neither scaled nor blended")
        out["yarn.inv_freq"] = yinv.contiguous()
        out["yarn.attention_scaling"] = torch.tensor([amp], dtype=torch.float32)
        for n in YARN_CASES:
            fn = tiled(feats40, n)
            kv = {"yarn": ym.context(fn)}
            anchor, tries, forced, res = pick_anchor({"yarn": ym}, kv, n, V, E, Wlm)
            out[f"anchor.{n}"] = torch.tensor([anchor], dtype=torch.int32)
            out[f"forced.{n}"] = forced.to(torch.int32)
            case = {"anchor": anchor, "anchor_tries": tries, "context_rows": n, "variant": "yarn",
                    "last_block_position": n + B - 1,
                    "original_max_position_embeddings": YARN_SCALING["original_max_position_embeddings"]}
            record_case(out, case, "yarn", ym, kv["yarn"], n, anchor, forced, res["yarn"], E, Wlm, fn,
                        tail=YARN_TAIL if n > YARN_TAIL else None)
            summary["cases"][str(n)] = case
        # Appending in pieces at the long case (positions past the original length on the second piece).
        fn = tiled(feats40, YARN_CASES[-1])
        cut = 600
        cat = ym.cat_context(ym.context(fn[:cut], 0), ym.context(fn[cut:], cut))
        whole = ym.context(fn, 0)
        err = max(max(rel_err(x[0], y[0]), rel_err(x[1], y[1])) for x, y in zip(cat, whole))
        summary["checks"]["yarn.append_pieces_vs_once_max_rel"] = err
        check(err <= 1e-6, f"yarn: context in two pieces differs from at once by {err} relative")

        # Appending in two pieces gives the same context K/V as at once (rows are independent).
        for v, m in models.items():
            a = m.context(feats40[:PIECE], 0)
            b = m.context(feats40[PIECE:], PIECE)
            whole = m.context(feats40, 0)
            cat = m.cat_context(a, b)
            err = max(float((x[0] - y[0]).abs().max()) for x, y in zip(cat, whole))
            err = max(err, max(float((x[1] - y[1]).abs().max()) for x, y in zip(cat, whole)))
            summary["checks"][f"{v}.append_pieces_vs_once_max_abs"] = err
            check(err == 0.0, f"{v}: context in two pieces differs from at once by {err}")

        # float64 run of the bf16 variant (Qwen3RMSNorm's statistics stay float32, as transformers writes
        # it): the float32 noise of the oracle itself.
        m64, _, _ = load_variant(args.dspark, "bf16", torch.float64)
        f64 = {}
        for n in CASES:
            anchor = int(out[f"anchor.{n}"][0])
            h = m64.block_hidden(m64.context(feats[n].double()), anchor, E.double())
            base = m64.base_logits(h, Wlm.double())
            toks, adj, conf = chain(m64, base, h, anchor)
            f64[str(n)] = {"base_rel": rel_err(out[f"bf16.base.{n}"], base), "greedy_logits_rel": rel_err(out[f"bf16.greedy_logits.{n}"], adj),
                           "greedy_same": bool(torch.equal(toks.to(torch.int32), out[f"bf16.greedy.{n}"]))}
            check(f64[str(n)]["greedy_same"], f"case {n}: float64 greedy chain differs")
        # The same for the yarn variant (transformers computes the rotary table in float32 either way).
        y64, _, _ = load_variant(args.dspark, "yarn", torch.float64)
        for n in YARN_CASES:
            anchor = int(out[f"anchor.{n}"][0])
            h = y64.block_hidden(y64.context(tiled(feats40, n).double()), anchor, E.double())
            base = y64.base_logits(h, Wlm.double())
            toks, adj, conf = chain(y64, base, h, anchor)
            f64[str(n)] = {"base_rel": rel_err(out[f"yarn.base.{n}"], base), "greedy_logits_rel": rel_err(out[f"yarn.greedy_logits.{n}"], adj),
                           "greedy_same": bool(torch.equal(toks.to(torch.int32), out[f"yarn.greedy.{n}"]))}
            check(f64[str(n)]["greedy_same"], f"yarn case {n}: float64 greedy chain differs")
        summary["checks"]["float64_vs_float32"] = f64

    path = os.path.join(args.out, "goldens.safetensors")
    save_file({k: v.contiguous() for k, v in sorted(out.items())}, path, metadata={"generator": GENERATOR})
    size = os.path.getsize(path)
    check(size < SIZE_BUDGET, f"goldens.safetensors is {size} bytes (budget {SIZE_BUDGET})")
    import transformers
    meta = {
        "generator": GENERATOR,
        "oracle": "tools/dspark_ref.py DSparkDraft (transformers Qwen3 modules), float32 on the CPU",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "numpy": np.__version__,
                     "python": sys.version.split()[0]},
        "seed": SEED,
        "config": cfg,
        "yarn_config": ycfg,
        "embed_std": EMBED_STD, "lm_head_std": LM_HEAD_STD, "margin_min_relative": MARGIN_MIN,
        "sha256": {"goldens.safetensors": hashlib.sha256(open(path, "rb").read()).hexdigest(),
                   "yarn-config.json": hashlib.sha256(open(os.path.join(args.out, "yarn-config.json"), "rb").read()).hexdigest()},
        "bytes": {"goldens.safetensors": size},
        "summary": summary,
        "failures": _failures,
        "seconds": round(time.time() - t0, 2),
    }
    with open(os.path.join(args.out, "goldens.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    print(json.dumps(summary, indent=1)[:6000])
    print(f"wrote {path} ({size} bytes) in {meta['seconds']} s; {len(_failures)} failed checks")
    sys.exit(1 if _failures else 0)


if __name__ == "__main__":
    main()
