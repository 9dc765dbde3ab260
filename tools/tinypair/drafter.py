"""DSpark drafter of the tiny coder pair: tools/dspark_ref.py's DSparkDraft (DFlash backbone + Markov +
confidence heads), trained on the frozen (dequantized) target's taps and its greedy continuations,
and the round simulation that measures acceptance (tools/tinypair, issue 8).

Training data: greedy continuations of the target from prompts taken from the training files. In a
sequence [prompt (Lp tokens) | greedy continuation], the target's greedy continuation from any
anchor P >= Lp is the rest of the sequence itself, so block j = [x_P, MASK x 6] is trained to predict
x_{P+1..P+7} of that sequence (anchors drawn uniformly in [Lp, L-8]); the Markov head is
teacher-forced with the true previous token (DSparkDraft.forward_train).

Acceptance (greedy verification, lithos' round of .notes/spec-design.md): from P = Lp (the anchor is
the target's first greedy token), the drafter's greedy chain d_0..d_6 is compared with the target's
greedy tokens x_{P+1..P+7}; a = length of the matching prefix, the round commits a + 1 tokens
(accepted drafts + the target's bonus token) and the next anchor is at P + a + 1.
"""

import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tools/

import formats_goldens as fg  # noqa: E402

BLOCK = 7


def draft_config(target_spec, mask_id, tap_ids, layers, intermediate, rank):
    return {
        "architectures": ["DSparkDraftModel"],
        "model_type": "qwen3",
        "hidden_size": target_spec["hidden"],
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": target_spec["heads"],
        "num_key_value_heads": target_spec["kv_heads"],
        "head_dim": target_spec["head_dim"],
        "vocab_size": target_spec["vocab"],
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000000,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "num_target_layers": target_spec["layers"],
        "block_size": BLOCK,
        "dflash_config": {"mask_token_id": mask_id, "target_layer_ids": list(tap_ids)},
        "markov_rank": rank,
        "markov_head_type": "vanilla",
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
        "target_hidden_size": target_spec["hidden"],
    }


def init_draft(m, seed):
    """Linear weights N(0, 0.02), norms 1, markov_w1 N(0, 1), markov_w2 0 (the Markov bias starts at 0),
    confidence head 0."""
    torch.manual_seed(seed)
    for name, p in m.named_parameters():
        if name.endswith("norm.weight"):
            torch.nn.init.ones_(p)
        elif name == "markov_head.markov_w1.weight":
            torch.nn.init.normal_(p, 0.0, 1.0)
        elif name == "markov_head.markov_w2.weight" or name.startswith("confidence_head."):
            torch.nn.init.zeros_(p)
        elif p.dim() == 2:
            torch.nn.init.normal_(p, 0.0, 0.02)
        else:
            raise SystemExit(f"init_draft: no rule for {name} {list(p.shape)}")


def draft_loss(out, decay, conf_weight):
    """Position-weighted CE of the teacher-forced Markov logits (w_k = exp(-k / decay)) + conf_weight x
    BCE of the confidence logits on cumprod(argmax == label) (= 'accepted through slot k' under greedy
    verification: while every earlier slot is right, the teacher-forced chain is the greedy chain)."""
    lab = out["labels"]
    V = out["markov"].shape[-1]
    valid = lab != -100
    ce = F.cross_entropy(out["markov"].float().reshape(-1, V), lab.reshape(-1), ignore_index=-100,
                         reduction="none").reshape(lab.shape)
    w = torch.exp(-torch.arange(lab.shape[-1], device=lab.device, dtype=torch.float32) / decay)
    wv = w * valid
    l_markov = (ce * wv).sum() / wv.sum().clamp(min=1)
    hit = (out["markov"].argmax(-1) == lab) & valid
    acc = torch.cumprod(hit.float(), dim=-1)
    total = l_markov
    bce = torch.zeros((), device=lab.device)
    if out["conf"] is not None and conf_weight:
        bce = (F.binary_cross_entropy_with_logits(out["conf"].float(), acc, reduction="none") * valid).sum() \
            / valid.sum().clamp(min=1)
        total = total + conf_weight * bce
    return total, l_markov, bce, hit, acc


def train(m, feats, seqs, lp, embed_w, lm_w, args, log):
    """feats [N, L, F] bf16 (GPU), seqs [N, L] long (GPU): anchors uniform in [lp, L-8]."""
    dev = feats.device
    N, L, _ = feats.shape
    opt = torch.optim.AdamW(m.parameters(), lr=args.draft_lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=args.draft_wd, fused=True)
    g = torch.Generator(device=dev).manual_seed(args.seed + 11)
    total = args.draft_steps or 10**9
    curve = []
    t0 = time.time()
    step_times = []
    step = 0
    m.train()
    while step < total:
        ts = time.time()
        if step < args.draft_warmup:
            lr = args.draft_lr * (step + 1) / args.draft_warmup
        else:
            tt = (step - args.draft_warmup) / max(1, (total if total < 10**9 else 10**6) - args.draft_warmup)
            lr = args.draft_lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, tt))))
        for gr in opt.param_groups:
            gr["lr"] = lr
        idx = torch.randint(0, N, (args.draft_batch,), generator=g, device=dev)
        anchors = torch.randint(lp, L - BLOCK, (args.draft_batch, args.anchors), generator=g, device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = m.forward_train(feats[idx], seqs[idx], anchors, embed_w, lm_w)
        loss, lmk, bce, hit, acc = draft_loss(out, args.draft_decay, args.conf_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0 or step <= 2:
            lv = float(loss)
            if not math.isfinite(lv):
                raise SystemExit(f"drafter training diverged at step {step}")
            curve.append({"step": step, "loss": round(lv, 4), "markov_ce": round(float(lmk), 4),
                          "conf_bce": round(float(bce), 4), "lr": lr, "grad_norm": round(float(gn), 3),
                          "tf_hit_per_slot": [round(float(x), 3) for x in hit.float().mean((0, 1))],
                          "tf_accept_len": round(float(acc.sum(-1).mean()), 3), "t": round(time.time() - t0, 1)})
            if step % 200 == 0:
                print(f"  draft step {step}/{total} loss {lv:.4f} accept_len(tf) {curve[-1]['tf_accept_len']} "
                      f"t {time.time() - t0:.0f}s", flush=True)
        torch.cuda.synchronize()
        step_times.append(time.time() - ts)
        if step == 10 and not args.draft_steps:
            per = sum(step_times[2:10]) / 8
            budget = args.draft_seconds - (time.time() - t0)
            total = max(20, int(10 + budget / per))
            log["steps_rule"] = (f"{total} steps: 10 + (draft_seconds {args.draft_seconds} - {time.time() - t0:.1f} s) "
                                 f"/ {per * 1000:.1f} ms per step (mean of steps 3..10)")
            print(f"  draft: {per * 1000:.1f} ms/step -> {total} steps", flush=True)
    m.eval()
    log.update({"steps": step, "seconds": round(time.time() - t0, 1), "curve": curve,
                "ms_per_step_median": round(1000 * sorted(step_times)[len(step_times) // 2], 2),
                "anchor_blocks_seen": step * args.draft_batch * args.anchors})
    return m


@torch.no_grad()
def greedy_chain_all(m, out, anchor_tok):
    """The greedy Markov chain for every block of a forward_train output: drafts [b, J, B], the
    Markov-adjusted rows are not kept; confidences [b, J, B] (sigmoid) along the chain."""
    base, hn = out["base"].float(), out["hn"].float()
    prev = anchor_tok
    toks, confs = [], []
    for k in range(base.shape[2]):
        row = base[:, :, k] + m.markov_bias(prev).float()
        c = m.confidence_logit(hn[:, :, k].to(m.fc.weight.dtype), prev)
        confs.append(torch.sigmoid(c.float()) if c is not None else torch.zeros_like(prev, dtype=torch.float32))
        x = row.argmax(-1)
        toks.append(x)
        prev = x
    return torch.stack(toks, -1), torch.stack(confs, -1)


@torch.no_grad()
def acceptance(m, feats, seqs, lp, embed_w, lm_w, batch=8):
    """Round simulation on sequences [prompt (lp) | target greedy], float32 (no autocast).
    feats [N, L, F] (any float dtype, cast to the drafter's), seqs [N, L]. Returns a record with
    per-round accepted lengths, tokens per round, acceptance per position, confidence calibration."""
    N, L = seqs.shape
    dev = m.fc.weight.device
    anchors = torch.arange(lp, L - BLOCK, device=dev)  # every anchor whose 7 labels are in the sequence
    J = anchors.numel()
    acc_len = torch.zeros(N, J, dtype=torch.long)
    conf_all = torch.zeros(N, J, BLOCK)
    hits_all = torch.zeros(N, J, BLOCK)
    for i in range(0, N, batch):
        f = feats[i:i + batch].to(dev, m.fc.weight.dtype)
        s = seqs[i:i + batch].to(dev)
        b = s.shape[0]
        out = m.forward_train(f, s, anchors[None].expand(b, J), embed_w, lm_w)
        drafts, conf = greedy_chain_all(m, out, s[:, anchors])
        truth = s[:, anchors[:, None] + 1 + torch.arange(BLOCK, device=dev)]
        hit = (drafts == truth).float()
        cp = torch.cumprod(hit, -1)
        acc_len[i:i + b] = cp.sum(-1).long().cpu()
        conf_all[i:i + b] = conf.cpu()
        hits_all[i:i + b] = cp.cpu()
    rounds = []
    per_seq = []
    for n in range(N):
        P, rs = lp, []
        while P <= L - BLOCK - 1:
            a = int(acc_len[n, P - lp])
            rs.append(a)
            P += a + 1
        rounds.extend(rs)
        per_seq.append(sum(a + 1 for a in rs) / max(1, len(rs)))
    r = torch.tensor(rounds, dtype=torch.float32)
    rec = {
        "sequences": N, "prompt_tokens": lp, "continuation_tokens": L - lp, "rounds": len(rounds),
        "tokens_per_round_mean": round(float((r + 1).mean()), 4),
        "accepted_drafts_per_round_mean": round(float(r.mean()), 4),
        # P(round accepts at least k+1 drafts) = P(draft slot k accepted), k = 0..6
        "accept_rate_by_position": [round(float((r >= k + 1).float().mean()), 4) for k in range(BLOCK)],
        # P(slot k accepted | slots < k accepted)
        "conditional_accept_by_position": [round(float((r >= k + 1).float().sum() / max(1.0, float((r >= k).float().sum()))), 4)
                                           for k in range(BLOCK)],
        "accepted_histogram_0_to_7": [int((r == k).sum()) for k in range(BLOCK + 1)],
        "tokens_per_round_per_sequence": {"min": round(min(per_seq), 3), "median": round(sorted(per_seq)[N // 2], 3),
                                          "max": round(max(per_seq), 3)},
        "all_anchors_accept_rate_by_position": [round(float(hits_all[:, :, k].mean()), 4) for k in range(BLOCK)],
        "confidence_mean_by_position": [round(float(conf_all[:, :, k].mean()), 4) for k in range(BLOCK)],
    }
    if N <= 4:
        rec["rounds_accepted"] = rounds
    return rec, per_seq


def nvfp4_copy(m):
    """A copy of the drafter with every linear `lithos-pack pack` re-quantizes (fc, q/k/v/o, MLP,
    markov_w2; tools/dspark_quant_golden.py) replaced by its NVFP4 dequantization (ModelOpt rule,
    tools/formats_goldens.py) of the BF16 weight."""
    import copy
    q = copy.deepcopy(m)
    sd = q.state_dict()
    for n, t in sd.items():
        lin = n.endswith(".weight") and t.dim() == 2 and n not in ("markov_head.markov_w1.weight", "confidence_head.proj.weight")
        if not lin:
            continue
        w = t.detach().to(torch.bfloat16).cpu()
        amax = w.float().abs().amax()
        packed, sb8, s2 = fg.quantize_nvfp4(w, fg.tensor_scale_exact(amax))
        sd[n] = fg.dequantize_nvfp4(packed, sb8, s2).reshape(t.shape).to(t.dtype)
    q.load_state_dict(sd)
    return q
