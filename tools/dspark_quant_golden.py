#!/usr/bin/env python3
"""Goldens for `lithos-pack quantize` (convert/quantize; docs/quantize.md).

Run on the GPU machine (PyTorch, numpy and safetensors installed), from the repository root:

    python3 tools/dspark_quant_golden.py --out testdata/dspark            # generate (+ verify)
    python3 tools/dspark_quant_golden.py --out testdata/dspark --verify   # verify only

Generate writes, deterministically (fixed seed, fixed construction):

  tiny-bf16/config.json, tiny-bf16/model.safetensors
      a small random BF16 DSpark head with the public DSpark tensor names (qwen35-and-quant.md D.4):
      hidden 128, 2 layers, 4 q / 2 kv heads x 32, intermediate 384, vocab 1000, markov_rank 64,
      3 target taps, confidence head over [hidden | W1 row]. It holds outliers, exact E2M1 ties,
      BF16 neighbours of ties, block scales at E4M3 rounding ties, block scales that round to E4M3
      zero, an all-zero block, -0.0, an all-zero row and heavy tails.
  tiny-nvfp4-expected.safetensors
      the checkpoint lithos-pack must write, computed by this script's own PyTorch implementation of
      ModelOpt's NVFP4QTensor rule (tools/formats_goldens.py: quantize_nvfp4, float32, ModelOpt's
      order, weight_scale_2 by true division on the CPU = nvfp4.DivideExact): every linear as
      <module>.weight U8 / .weight_scale F8_E4M3 / .weight_scale_2 F32, markov_w1, norms and the
      confidence head copied; saved with metadata {"format": "pt"}.
  tiny-nvfp4-expected-cuda.safetensors
      the quantized tensors only, computed on CUDA with ModelOpt's literal `amax / (6.0 * 448.0)`
      (= nvfp4.DivideByReciprocal; `lithos-pack quantize --tensor-scale reciprocal`).

When go-nvfp4/ (lithos-pack's output for tiny-bf16, written by the Go test with -update or by
`lithos-pack quantize testdata/dspark/tiny-bf16 --to nvfp4 -o testdata/dspark/go-nvfp4`) exists,
or with --verify, it checks that the Python safetensors package loads our model.safetensors, that
every tensor equals the expected bytes and the whole file equals the one save_file wrote, that
config.json / hf_quant_config.json describe exactly the tensors, and that conversion.json's sha256
sums and per-tensor error statistics agree with an independent numpy float64 computation.
"""

import argparse
import hashlib
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import formats_goldens as fg  # noqa: E402  (ModelOpt rule: quantize_nvfp4, tensor scales, dequantize)

GENERATOR = "tools/dspark_quant_golden.py"
SEED = 20261130

CONFIG = {
    "architectures": ["DSparkDraftModel"],
    "model_type": "qwen3",
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000000,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "dtype": "bfloat16",
    "num_target_layers": 8,
    "block_size": 7,
    "dflash_config": {"mask_token_id": 999, "target_layer_ids": [1, 3, 5]},
    "markov_rank": 64,
    "markov_head_type": "vanilla",
    "enable_confidence_head": True,
    "confidence_head_with_markov": True,
    "target_hidden_size": 128,
}

EXCLUDE = ["confidence_head.proj", "markov_head.markov_w1"]


def inventory(c):
    """(name, shape, kind) of every tensor of the head; kind 'linear' is quantized."""
    H, I, V, r = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["markov_rank"]
    q, kv, hd = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"], c["head_dim"]
    taps = len(c["dflash_config"]["target_layer_ids"])
    out = [("fc.weight", (H, taps * c["target_hidden_size"]), "linear"), ("hidden_norm.weight", (H,), "norm")]
    for i in range(c["num_hidden_layers"]):
        p = f"layers.{i}."
        out += [
            (p + "input_layernorm.weight", (H,), "norm"),
            (p + "post_attention_layernorm.weight", (H,), "norm"),
            (p + "self_attn.q_proj.weight", (q, H), "linear"),
            (p + "self_attn.k_proj.weight", (kv, H), "linear"),
            (p + "self_attn.v_proj.weight", (kv, H), "linear"),
            (p + "self_attn.o_proj.weight", (H, q), "linear"),
            (p + "self_attn.q_norm.weight", (hd,), "norm"),
            (p + "self_attn.k_norm.weight", (hd,), "norm"),
            (p + "mlp.gate_proj.weight", (I, H), "linear"),
            (p + "mlp.up_proj.weight", (I, H), "linear"),
            (p + "mlp.down_proj.weight", (H, I), "linear"),
        ]
    out += [
        ("norm.weight", (H,), "norm"),
        ("markov_head.markov_w1.weight", (V, r), "embedding"),
        ("markov_head.markov_w2.weight", (V, r), "linear"),
        ("confidence_head.proj.weight", (1, H + r), "head"),
        ("confidence_head.proj.bias", (1,), "bias"),
    ]
    return out


# ----------------------------------------------------------- the head ----

S2 = 2.0 ** -13            # tensor scale when amax = 21 * 2^-6 (exact under true division)
AMAX_EXACT = 21 * 2.0 ** -6
DEN16 = 16 * S2            # den of a block whose scale is exactly 16


def plant_ties(w, rng):
    """Rows of exact cases for a [N, K>=128] matrix whose amax is AMAX_EXACT (so s2 = 2^-13)."""
    n, k = w.shape
    w[0, 0] = AMAX_EXACT
    ts = fg.E2M1_BOUNDS + [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    # Row 1: every E2M1 threshold and value, +-, in blocks of scale exactly 16.
    for b in range(k // 16):
        blk = [6.0 if b % 2 == 0 else -6.0] + [ts[(b + j) % len(ts)] * (1 if (b + j) % 3 else -1) for j in range(15)]
        w[1, 16 * b:16 * b + 16] = np.asarray(blk, dtype=np.float32) * DEN16
    # Row 2: block scales at E4M3 rounding ties.
    vals = sorted({v for v in fg.e4m3_values() if math.isfinite(v) and v > 0})
    mids = [(a + b) / 2 for a, b in zip(vals, vals[1:])]
    chosen = [m for m in (mids[i] for i in (0, 1, 5, 6, 20, 21, 40, 41, 60, 61, 80, 81, 100, 110, 118, 119)) if m * 6 * S2 <= AMAX_EXACT]
    w[2, :] = 0.0
    for b, sbt in enumerate(chosen[: k // 16]):
        bmax = sbt * 6 * S2
        w[2, 16 * b:16 * b + 16] = rng.uniform(-bmax, bmax, size=16)
        w[2, 16 * b + (b % 16)] = bmax if b % 2 == 0 else -bmax
    # Row 3: block scale exactly 2^-10 (E4M3 tie to zero: the block flushes) and 3*2^-10.
    w[3, :] = 0.0
    w[3, 0:16] = rng.uniform(-1, 1, size=16) * (2.0 ** -10 * 6 * S2)
    w[3, 0] = 2.0 ** -10 * 6 * S2
    w[3, 16:32] = rng.uniform(-1, 1, size=16) * (3 * 2.0 ** -10 * 6 * S2)
    w[3, 16] = -(3 * 2.0 ** -10 * 6 * S2)
    # Row 4: an all-zero block, -0.0 with tiny negatives, mixed zeros.
    w[4, 0:16] = 0.0
    w[4, 16:32] = -0.0
    w[4, 20] = -1e-30
    w[4, 32:48] = 0.0
    w[4, 33] = 0.01
    w[4, 34] = -0.0
    # Row 5: tiny values (all block scales round to zero).
    w[5, :] = rng.normal(0.0, 1e-9, size=k)
    # Row 6: BF16 neighbours of exact ties.
    for b in range(k // 16):
        t = fg.E2M1_BOUNDS[b % len(fg.E2M1_BOUNDS)]
        blk = np.full(16, 0.1, dtype=np.float32) * DEN16
        blk[0] = 6.0 * DEN16
        blk[1] = t * DEN16 * (1 + 2.0 ** -7)
        blk[2] = t * DEN16 * (1 - 2.0 ** -8)
        blk[3] = -t * DEN16 * (1 + 2.0 ** -7)
        w[6, 16 * b:16 * b + 16] = blk


def make_head(rng):
    tensors = {}
    for name, shape, kind in inventory(CONFIG):
        if kind == "norm":
            w = (1.0 + rng.normal(0.0, 0.05, size=shape)).astype(np.float32)
        elif kind == "bias":
            w = np.asarray([-0.75], dtype=np.float32)
        else:
            w = rng.normal(0.0, 0.02, size=shape).astype(np.float32)
        if name == "layers.0.self_attn.q_proj.weight" or name == "layers.1.self_attn.k_proj.weight":
            plant_ties(w, rng)
        elif name == "layers.1.mlp.down_proj.weight":
            w = np.clip(rng.standard_t(3, size=shape) * 0.01, -0.2, 0.2).astype(np.float32)
            w[7, 100] = 1.5  # an outlier 75x the typical magnitude
        elif name == "fc.weight":
            w = np.clip(rng.standard_t(3, size=shape) * 0.01, -0.3, 0.3).astype(np.float32)
        elif name == "markov_head.markov_w2.weight":
            w[10, :] = 0.0                                 # an all-zero row
            w[11, :] = rng.normal(0.0, 1e-7, size=shape[1])  # a row of tiny values
        tensors[name] = torch.from_numpy(np.ascontiguousarray(w)).to(torch.bfloat16)
    return tensors


def quantize_head(tensors, cuda):
    """The expected output: ModelOpt NVFP4 for linears (CPU, true division), the rest copied.
    With cuda, the quantized tensors computed on CUDA with ModelOpt's literal expression."""
    out, out_cuda, differs = {}, {}, 0
    for name, shape, kind in inventory(CONFIG):
        w = tensors[name]
        if kind != "linear":
            out[name] = w
            continue
        amax = w.abs().amax().float()
        if amax.item() == 0:
            raise SystemExit(f"{name}: all-zero tensor (ModelOpt writes NaN scales; lithos deviates): not a golden case")
        m = name[: -len(".weight")]
        packed, sb8, s2 = fg.quantize_nvfp4(w, fg.tensor_scale_exact(amax))
        out[m + ".weight"], out[m + ".weight_scale"], out[m + ".weight_scale_2"] = packed.contiguous(), sb8.contiguous(), s2.contiguous()
        if cuda:
            pc, sc, s2c = fg.quantize_nvfp4(w, fg.tensor_scale_modelopt_cuda(amax))
            out_cuda[m + ".weight"], out_cuda[m + ".weight_scale"], out_cuda[m + ".weight_scale_2"] = pc.contiguous(), sc.contiguous(), s2c.contiguous()
            differs += int(s2c.item() != s2.item())
    return out, out_cuda, differs


def generate(out, cuda):
    rng = np.random.default_rng(SEED)
    torch.manual_seed(0)
    tensors = make_head(rng)
    src = os.path.join(out, "tiny-bf16")
    os.makedirs(src, exist_ok=True)
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    save_file(tensors, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
    expected, expected_cuda, differs = quantize_head(tensors, cuda)
    save_file(expected, os.path.join(out, "tiny-nvfp4-expected.safetensors"), metadata={"format": "pt"})
    if cuda:
        save_file(expected_cuda, os.path.join(out, "tiny-nvfp4-expected-cuda.safetensors"),
                  metadata={"generator": f"{GENERATOR}, torch {torch.__version__}, CUDA amax.float() / (6.0 * 448.0)"})
        print(f"CUDA tensor scales differing from true division: {differs} of {len(expected_cuda) // 3}")
    for p in ["tiny-bf16/config.json", "tiny-bf16/model.safetensors", "tiny-nvfp4-expected.safetensors"] + (["tiny-nvfp4-expected-cuda.safetensors"] if cuda else []):
        print(f"wrote {os.path.join(out, p)} ({os.path.getsize(os.path.join(out, p))} bytes)")


# -------------------------------------------------------------- verify ----

def raw_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_all(path):
    with safe_open(path, framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def verify(out):
    fails = []

    def check(ok, msg):
        if not ok:
            fails.append(msg)
            print("FAIL:", msg)

    go = os.path.join(out, "go-nvfp4")
    ours, meta = load_all(os.path.join(go, "model.safetensors"))
    want, _ = load_all(os.path.join(out, "tiny-nvfp4-expected.safetensors"))
    src, _ = load_all(os.path.join(out, "tiny-bf16", "model.safetensors"))
    print(f"safetensors loaded {len(ours)} tensors from go-nvfp4/model.safetensors (metadata {meta})")
    check(set(ours) == set(want), f"tensor names differ: extra {sorted(set(ours) - set(want))}, missing {sorted(set(want) - set(ours))}")
    bad = 0
    for k in sorted(set(ours) & set(want)):
        a, b = ours[k], want[k]
        if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape) or raw_bytes(a) != raw_bytes(b):
            bad += 1
            fails.append(k)
            print(f"FAIL: {k}: ours {a.dtype} {tuple(a.shape)}, expected {b.dtype} {tuple(b.shape)}, bytes equal {raw_bytes(a) == raw_bytes(b)}")
    print(f"tensors equal to the expected bytes: {len(want) - bad} of {len(want)}")
    with open(os.path.join(go, "model.safetensors"), "rb") as f:
        a = f.read()
    with open(os.path.join(out, "tiny-nvfp4-expected.safetensors"), "rb") as f:
        b = f.read()
    check(a == b, "model.safetensors is not byte-identical to save_file's expected file "
          f"(first difference at byte {next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))})")

    with open(os.path.join(out, "tiny-bf16", "config.json")) as f:
        cfg_in = json.load(f)
    with open(os.path.join(go, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(go, "hf_quant_config.json")) as f:
        hfq = json.load(f)
    qc = cfg.pop("quantization_config", None)
    check(cfg == cfg_in, "config.json: source keys changed")
    group = (qc or {}).get("config_groups", {}).get("group_0", {})
    check(qc is not None and qc.get("quant_method") == "modelopt" and qc.get("quant_algo") == "W4A16_NVFP4"
          and list(qc.get("config_groups", {})) == ["group_0"]
          and group.get("weights") == {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16}
          and "input_activations" not in group and group.get("targets") == ["Linear"]
          and qc.get("ignore") == EXCLUDE and qc.get("producer", {}).get("name") == "modelopt",
          f"config.json quantization_config: {qc}")
    hq = hfq.get("quantization", {})
    check(hfq.get("producer", {}).get("name") == "modelopt" and hq.get("quant_algo") == "W4A16_NVFP4"
          and hq.get("group_size") == 16 and hq.get("exclude_modules") == EXCLUDE and hq.get("kv_cache_quant_algo") is None,
          f"hf_quant_config.json: {hfq}")
    # Every excluded module is stored unquantized, every other linear has the three NVFP4 tensors.
    for name, shape, kind in inventory(CONFIG):
        m = name.rsplit(".", 1)[0]
        if kind == "linear":
            check(ours.get(m + ".weight") is not None and ours[m + ".weight"].dtype == torch.uint8
                  and m + ".input_scale" not in ours, f"{m}: not W4A16 NVFP4")
        elif kind in ("embedding", "head"):
            check(m in EXCLUDE and ours[name].dtype == torch.bfloat16, f"{m}: kept module not excluded")

    with open(os.path.join(go, "conversion.json")) as f:
        conv = json.load(f)
    for entry, base in [(e, os.path.join(out, "tiny-bf16")) for e in conv["inputs"]] + [(e, go) for e in conv["outputs"]]:
        p = os.path.join(base, entry["path"])
        check(os.path.getsize(p) == entry["bytes"] and sha256(p) == entry["sha256"], f"conversion.json: sha256/size of {p}")
    check([e["path"] for e in conv["outputs"]] == ["config.json", "hf_quant_config.json", "model.safetensors"], "conversion.json outputs")
    check(conv["source"] == {"repo": None, "revision": None}, f"conversion.json source {conv['source']}")
    worst = 0.0
    linears = [n for n, _, k in inventory(CONFIG) if k == "linear"]
    check(sorted(q["name"] for q in conv["quantized"]) == sorted(linears), "conversion.json quantized list")
    for q in conv["quantized"]:
        m = q["name"][: -len(".weight")]
        d = fg.dequantize_nvfp4(want[m + ".weight"], want[m + ".weight_scale"], want[m + ".weight_scale_2"]).numpy().astype(np.float64)
        w = src[q["name"]].float().numpy().astype(np.float64)
        e = d - w
        sw, se = float(np.sum(w * w)), float(np.sum(e * e))
        rel, mx, snr = math.sqrt(se / sw), float(np.max(np.abs(e))), 10 * math.log10(sw / se)
        for key, ref in [("rel_rms_error", rel), ("max_abs_error", mx), ("snr_db", snr)]:
            got = q[key]
            err = abs(got - ref) / max(abs(ref), 1e-300)
            worst = max(worst, err)
            check(err < 1e-9, f"{q['name']} {key}: conversion.json {got}, numpy float64 {ref}")
        # Go writes float32 as its shortest decimal: compare after rounding back to float32.
        check(np.float32(q["weight_scale_2"]) == np.float32(want[m + ".weight_scale_2"].item()), f"{q['name']} weight_scale_2")
    print(f"conversion.json error statistics agree with numpy float64 (worst relative difference {worst:.2e})")
    if fails:
        raise SystemExit(f"{len(fails)} check(s) failed")
    print("verify: OK")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="testdata/dspark")
    ap.add_argument("--verify", action="store_true", help="only verify go-nvfp4/ against the committed files")
    ap.add_argument("--no-cuda", action="store_true", help="skip tiny-nvfp4-expected-cuda.safetensors (the Go test needs it)")
    args = ap.parse_args()
    if not args.verify:
        cuda = not args.no_cuda
        if cuda and not torch.cuda.is_available():
            sys.exit("CUDA is not available: run on the GPU machine, or pass --no-cuda")
        generate(args.out, cuda)
    if args.verify or os.path.exists(os.path.join(args.out, "go-nvfp4", "model.safetensors")):
        verify(args.out)
    else:
        print("go-nvfp4/ absent: generated only (run the Go test with -update, then this script with --verify)")


if __name__ == "__main__":
    main()
