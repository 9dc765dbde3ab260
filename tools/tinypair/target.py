"""Target of the tiny coder pair: a small Qwen3.5 hybrid (Gated DeltaNet + gated attention) trained on
the corpus, then exported in the ModelOpt mixed layout (tools/tinypair, issue 8).

Geometry (SPEC): 8 layers [GDN GDN GDN ATT] x 2, hidden 512, MLP 1536, 4 query / 2 KV heads of 128
(32 rotary dims), GDN 4 key / 8 value heads of 64, vocab 4096; every quantized matrix has K a
multiple of 256 (512 or 1536).

Export (qwen35-and-quant.md Part B; the same rules as tools/qwen35_goldens.py, whose helpers are
reused): MLP gate/up/down and lm_head NVFP4 (U8 weight, E4M3 weight_scale [N, K/16], F32
weight_scale_2 = amax/2688 by true division, F32 input_scale = calibrated input amax/2688; gate/up
share one amax), GDN in_proj_qkv/in_proj_z/out_proj and attention q/k/v/o FP8 E4M3 per tensor
(weight_scale = amax/448, input_scale = calibrated input amax/448; q/k/v and in_proj_qkv/in_proj_z
share one amax), everything else BF16 (A_log F32); multimodal names (model.language_model.*,
lm_head.weight).
"""

import copy
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tools/

import formats_goldens as fg  # noqa: E402  ModelOpt NVFP4 rule
import qwen35_goldens as qg  # noqa: E402  config, module formats, FP8 rule, names

SPEC = dict(name="tiny-coder", vocab=4096, hidden=512, intermediate=1536, layers=8, interval=4,
            heads=4, kv_heads=2, head_dim=128, lin_k_heads=4, lin_v_heads=8, lin_k_dim=64, lin_v_dim=64,
            conv=4, rope_theta=10000000.0, eps=1e-6, a_log_dtype="F32")

FP8_MAX = 448.0
NVFP4_DIV = 6.0 * 448.0


def rel_err(x, ref):
    x = x.double()
    ref = ref.double()
    den = float(ref.abs().max())
    return float((x - ref).abs().max()) / (den if den > 0 else 1.0)


def set_sdpa(model):
    try:
        model.set_attn_implementation("sdpa")
    except Exception as e:  # noqa: BLE001
        print(f"set_attn_implementation('sdpa') failed: {e}", flush=True)
    return qg.attn_impl_state(model)


def build_model(seed):
    from transformers import Qwen3_5ForCausalLM
    torch.manual_seed(seed)
    cfg = qg.text_config(SPEC)
    model = Qwen3_5ForCausalLM(cfg).to(torch.float32)
    impl = set_sdpa(model)
    return model, cfg, impl


def fresh_model(cfg):
    """An untrained model with a copy of cfg (for loading exported weights)."""
    from transformers import Qwen3_5ForCausalLM
    m = Qwen3_5ForCausalLM(copy.deepcopy(cfg)).to(torch.float32)
    set_sdpa(m)
    return m


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def causality(model, device, vocab, seed=1):
    """Max rel. error between the logits of prefixes (1, 17, 40 tokens) of a 96-token sequence and the
    first rows of the whole sequence's logits. A causal model gives float noise (~1e-6)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab - 16, (1, 96), generator=g).to(device)
    full = model(input_ids=ids, use_cache=False).logits[0].float()
    errs = {}
    for k in (1, 17, 40):
        pre = model(input_ids=ids[:, :k], use_cache=False).logits[0].float()
        errs[k] = rel_err(pre, full[:k])
    return errs


def lr_at(step, total, peak, warmup, floor):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def windows(stream, seq, max_windows=None):
    """Non-overlapping [n, seq+1] windows of a 1-D token tensor (inputs = [:, :-1], labels = [:, 1:])."""
    n = (stream.numel() - 1) // seq
    if max_windows:
        n = min(n, max_windows)
    idx = torch.arange(n, device=stream.device)[:, None] * seq + torch.arange(seq + 1, device=stream.device)
    return stream[idx].long()


@torch.no_grad()
def heldout_loss(model, stream, seq, batch, autocast, max_windows=None):
    """Mean next-token cross entropy (nats) over non-overlapping windows of the held-out stream."""
    w = windows(stream, seq, max_windows)
    tot, cnt = 0.0, 0
    model.eval()
    for i in range(0, w.shape[0], batch):
        x = w[i:i + batch]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            lg = model(input_ids=x[:, :-1], use_cache=False).logits
        ce = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        tot += float(ce)
        cnt += x[:, 1:].numel()
    return tot / max(cnt, 1), cnt


def train(model, train_stream, valid_stream, args, log):
    """AdamW + bf16 autocast on random windows of the training stream. The number of steps is
    args.target_steps, or what fits args.target_seconds at the speed of steps 3..10, capped at
    args.max_epochs passes over the stream (recorded). Every args.eval_every steps the loss on the
    validation stream (bf16 autocast) is measured; the weights of the best step are kept and restored
    at the end (early stopping; the held-out files are not used here)."""
    dev = train_stream.device
    seq, bs = args.seq, args.batch
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() == 2 and "embed_tokens" not in n else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    g = torch.Generator(device=dev).manual_seed(args.seed + 1)
    total = args.target_steps or 10**9
    curve, evals = [], []
    t0 = time.time()
    step_times = []
    model.train()
    step = 0
    best = None
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    while step < total:
        ts = time.time()
        lr = lr_at(step, total if total < 10**9 else 10**6, args.lr, args.warmup, args.lr_floor)
        for gr in opt.param_groups:
            gr["lr"] = lr
        starts = torch.randint(0, train_stream.numel() - seq - 1, (bs,), generator=g, device=dev)
        idx = starts[:, None] + torch.arange(seq + 1, device=dev)
        x = train_stream[idx].long()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lg = model(input_ids=x[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        if step % 10 == 0 or step <= 3:
            lv = float(loss.detach())
            curve.append({"step": step, "loss": round(lv, 4), "lr": lr, "grad_norm": round(float(gn), 3),
                          "t": round(time.time() - t0, 1)})
            if not math.isfinite(lv):
                raise SystemExit(f"target training diverged at step {step}: loss {lv}")
        torch.cuda.synchronize()
        step_times.append(time.time() - ts)
        if step == 10 and not args.target_steps:
            per = sum(step_times[2:10]) / 8
            budget = args.target_seconds - (time.time() - t0)
            eval_cost = 0.1  # periodic validation, measured below and recorded
            total = max(20, int(10 + budget * (1 - eval_cost) / per))
            cap = int(args.max_epochs * train_stream.numel() / (bs * seq))
            log["steps_rule"] = (f"min(10 + (target_seconds {args.target_seconds} - {time.time() - t0:.1f} s) "
                                 f"x 0.9 / {per * 1000:.1f} ms per step (mean of steps 3..10) = {total}, "
                                 f"max_epochs {args.max_epochs} x {train_stream.numel()} tokens / {bs * seq} = {cap})")
            total = min(total, cap)
            print(f"  target: {per * 1000:.1f} ms/step -> {total} steps", flush=True)
        if step % args.eval_every == 0 or step == total:
            te = time.time()
            vl, _ = heldout_loss(model, valid_stream, seq, 16, True)
            model.train()
            evals.append({"step": step, "valid_loss_bf16": round(vl, 4), "train_loss": round(float(loss), 4),
                          "eval_seconds": round(time.time() - te, 2), "t": round(time.time() - t0, 1)})
            if best is None or vl < best[0]:
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
            print(f"  target step {step}/{total} loss {float(loss):.4f} valid {vl:.4f} lr {lr:.2e} "
                  f"t {time.time() - t0:.0f}s", flush=True)
    model.eval()
    model.load_state_dict(best[2])
    log.update({"steps": step, "best_step": best[1], "best_valid_loss_bf16": best[0],
                "tokens_seen": step * bs * seq, "tokens_seen_at_best": best[1] * bs * seq,
                "epochs_at_best": round(best[1] * bs * seq / train_stream.numel(), 2),
                "seconds": round(time.time() - t0, 1),
                "ms_per_step_median": round(1000 * sorted(step_times)[len(step_times) // 2], 2),
                "curve": curve, "evals": evals, "final_train_loss": float(loss)})
    return model


# ------------------------------------------------------------ export ----

@torch.no_grad()
def calibrate(model, stream, seq, n_windows, seed):
    """Max |input| of every Linear that is quantized, over n_windows random training windows
    (float32, no autocast). Returns {text module name: amax}."""
    amax = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and qg.module_format(name) != "bf16":
            def hook(m, args, name=name):
                a = float(args[0].detach().abs().max())
                amax[name] = max(amax.get(name, 0.0), a)
            hooks.append(mod.register_forward_pre_hook(hook))
    g = torch.Generator(device=stream.device).manual_seed(seed)
    starts = torch.randint(0, stream.numel() - seq - 1, (n_windows,), generator=g, device=stream.device)
    x = stream[starts[:, None] + torch.arange(seq, device=stream.device)].long()
    for i in range(0, n_windows, 8):
        model(input_ids=x[i:i + 8], use_cache=False, logits_to_keep=0)
    for h in hooks:
        h.remove()
    return amax


def quantize_export(model, in_amax):
    """(checkpoint tensors, text-named float32 dequantized state dict, formats, quantized_layers, exclude)."""
    sd = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    want = qg.expected_shapes(SPEC)
    if set(sd) != set(want):
        raise SystemExit(f"state_dict names differ from the expected layout: missing {sorted(set(want) - set(sd))[:5]}, "
                         f"extra {sorted(set(sd) - set(want))[:5]}")
    for n, t in sd.items():
        if tuple(t.shape) != tuple(want[n]):
            raise SystemExit(f"{n}: shape {tuple(t.shape)} != {want[n]}")
    source = {n: (t if n.endswith("linear_attn.A_log") else t.to(torch.bfloat16)) for n, t in sd.items()}
    group_w, group_in = {}, {}
    for n in sd:
        if not n.endswith(".weight") or source[n].dim() != 2:
            continue
        mod = n[: -len(".weight")]
        if qg.module_format(mod) == "bf16":
            continue
        grp = qg.share_group(mod)
        group_w[grp] = max(group_w.get(grp, 0.0), float(source[n].float().abs().max()))
        group_in[grp] = max(group_in.get(grp, 0.0), in_amax[mod])
    ckpt, deq, formats, qlayers = {}, {}, {}, {}
    for n in sd:
        src = source[n]
        mod = n[: -len(".weight")] if n.endswith(".weight") else None
        fmt = qg.module_format(mod) if mod is not None and src.dim() == 2 else "bf16"
        cm = qg.ckpt_name(mod) if mod is not None else None
        if fmt == "nvfp4":
            grp = qg.share_group(mod)
            s2 = fg.tensor_scale_exact(torch.tensor(group_w[grp], dtype=torch.float32))
            packed, sb8, s2o = fg.quantize_nvfp4(src, s2)
            d = fg.dequantize_nvfp4(packed, sb8, s2o)
            ckpt[cm + ".weight"] = packed.contiguous()
            ckpt[cm + ".weight_scale"] = sb8.contiguous()
            ckpt[cm + ".weight_scale_2"] = s2o.reshape(()).to(torch.float32).contiguous()
            ckpt[cm + ".input_scale"] = (torch.tensor(group_in[grp], dtype=torch.float32)
                                         / torch.tensor(NVFP4_DIV, dtype=torch.float32)).reshape(())
            qlayers[cm] = {"quant_algo": "NVFP4", "group_size": 16}
            formats[cm + ".weight"] = "nvfp4"
        elif fmt == "fp8":
            grp = qg.share_group(mod)
            codes, scale, d = qg.quantize_fp8(src, group_w[grp])
            ckpt[cm + ".weight"] = codes.contiguous()
            ckpt[cm + ".weight_scale"] = scale.contiguous()
            ckpt[cm + ".input_scale"] = (torch.tensor(group_in[grp], dtype=torch.float32)
                                         / torch.tensor(FP8_MAX, dtype=torch.float32)).reshape(())
            qlayers[cm] = {"quant_algo": "FP8"}
            formats[cm + ".weight"] = "fp8_e4m3"
        else:
            d = src.to(torch.float32)
            ckpt[qg.ckpt_name(n)] = src.contiguous().clone()
            formats[qg.ckpt_name(n)] = "f32" if src.dtype == torch.float32 else "bf16"
        deq[n] = d.reshape(sd[n].shape).contiguous()
    exclude = sorted({"model.visual*", "mtp*"} | {qg.ckpt_name(n[: -len(".weight")]) for n in sd
                                                  if n.endswith(".weight") and sd[n].dim() == 2
                                                  and qg.module_format(n[: -len(".weight")]) == "bf16"
                                                  and "embed_tokens" not in n})
    return ckpt, deq, formats, qlayers, exclude


def quant_configs(qlayers, exclude, producer_version):
    producer = {"name": "modelopt", "version": producer_version}
    hf_quant = {"producer": producer,
                "quantization": {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": None,
                                 "quantized_layers": qlayers, "exclude_modules": exclude}}
    quant_cfg = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "producer": producer,
                 "kv_cache_scheme": None, "ignore": exclude, "quantized_layers": qlayers}
    return hf_quant, quant_cfg


def config_json(tcfg, quant_cfg, eos, pad):
    d = qg.full_config_dict(SPEC, tcfg, quant_cfg)
    tc = d["text_config"]
    tc["eos_token_id"] = eos
    tc["pad_token_id"] = pad
    tc["bos_token_id"] = None
    tc["dtype"] = "bfloat16"
    d["dtype"] = "bfloat16"
    d["eos_token_id"] = eos
    # Text only: no vision tower is shipped, so no vision_config (lithos would otherwise expect its
    # tensors; transformers falls back to its default vision config).
    d.pop("vision_config", None)
    return d


# --------------------------------------------------------- inference ----

def layer_taps(model, ids, layer_ids):
    """Outputs of decoder layers layer_ids (forward hooks: the layer's own output, before any final
    norm) for ids [b, L]: [b, L, len(layer_ids) * hidden], concatenated in layer_ids order."""
    got = {}
    hooks = []
    for i in layer_ids:
        def hook(m, a, o, i=i):
            got[i] = (o[0] if isinstance(o, (tuple, list)) else o).detach()
        hooks.append(model.model.layers[i].register_forward_hook(hook))
    try:
        model(input_ids=ids, use_cache=False, logits_to_keep=1)
    finally:
        for h in hooks:
            h.remove()
    return torch.cat([got[i] for i in layer_ids], -1)


@torch.no_grad()
def generate(model, prompts, n_new, batch, pad):
    """Greedy continuations (transformers' cached generate) of equal-length prompts [N, Lp]:
    returns [N, Lp + n_new] (CPU, int64). No EOS: always n_new tokens."""
    gc = copy.deepcopy(model.generation_config)
    gc.eos_token_id = None
    gc.pad_token_id = pad
    gc.bos_token_id = None
    gc.do_sample = False
    gc.num_beams = 1
    gc.max_new_tokens = n_new
    gc.max_length = None
    gc.min_new_tokens = None
    gc.temperature = None
    gc.top_p = None
    gc.top_k = None
    outs = []
    for i in range(0, prompts.shape[0], batch):
        x = prompts[i:i + batch]
        s = model.generate(x, attention_mask=torch.ones_like(x), generation_config=gc, use_cache=True)
        if s.shape[1] != x.shape[1] + n_new:
            raise SystemExit(f"generate returned {s.shape[1] - x.shape[1]} new tokens, wanted {n_new}")
        outs.append(s.cpu())
    return torch.cat(outs)


@torch.no_grad()
def greedy_recompute(model, prompt, steps, device):
    """Greedy continuation recomputing the whole sequence without cache at every step:
    (tokens, top1-top2 margins, [steps, vocab] logits rows)."""
    seq = list(prompt)
    toks, margins, rows = [], [], []
    for _ in range(steps):
        lg = model(input_ids=torch.tensor([seq], device=device), use_cache=False).logits[0, -1].float().cpu()
        top2 = torch.topk(lg, 2).values
        t = int(torch.argmax(lg))
        toks.append(t)
        margins.append(float(top2[0] - top2[1]))
        rows.append(lg)
        seq.append(t)
    return toks, margins, torch.stack(rows)


def load_quantized(path):
    """Text-named float32 state dict of an exported checkpoint: NVFP4 (U8 weight + E4M3 weight_scale +
    weight_scale_2) and FP8 (E4M3 weight + weight_scale) dequantized in ModelOpt's order, the rest as
    stored. input_scale is not needed for weights and is skipped."""
    from safetensors.torch import load_file
    t = load_file(path)
    out = {}
    for n, v in t.items():
        if n.endswith((".weight_scale", ".weight_scale_2", ".input_scale")):
            continue
        base = n[: -len(".weight")] if n.endswith(".weight") else None
        if base is not None and v.dtype == torch.uint8:
            d = fg.dequantize_nvfp4(v, t[base + ".weight_scale"], t[base + ".weight_scale_2"].float())
        elif base is not None and v.dtype == torch.float8_e4m3fn:
            d = v.to(torch.float32) * t[base + ".weight_scale"].float()
        else:
            d = v.to(torch.float32)
        if n.startswith("model.language_model."):
            n = "model." + n[len("model.language_model."):]
        out[n] = d
    return out
