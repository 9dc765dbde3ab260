#!/usr/bin/env python3
"""Numeric-format goldens for lithos/formats (docs/formats.md, section "Goldens").

Run on the GPU machine (PyTorch, numpy and safetensors installed), from the repository root:

    python3 tools/formats_goldens.py --out testdata/formats

Writes, all deterministic (fixed seeds, fixed input lists):

  e4m3.json, e5m2.json   all 256 codes -> float32 bits through torch.float8_e4m3fn / float8_e5m2,
                         and float32 inputs (every representable value, every midpoint between
                         neighbours and the float32 values either side of it, overflow and
                         underflow ties, subnormals, +-0, +-Inf, NaN, a log-uniform sample)
                         -> code of the plain cast and of the saturating clamp-then-cast
  bf16.json, f16.json    float32 -> torch.bfloat16 / torch.float16 casts at ties, overflow and
                         subnormals; sampled code -> float32 decodes
  e2m1.json              the 16 E2M1 codes and float32 -> code by ModelOpt's _cast_fp4 rule
                         (searchsorted on the thresholds + exact-tie bump), and by PyTorch's own
                         float4_e2m1fn_x2 cast when this PyTorch has one (recorded either way)
  nvfp4_s2.json          amax -> weight_scale_2 = amax / 2688 as PyTorch computes it on CPU
                         (true division) and as ModelOpt's expression computes it on CUDA
  nvfp4_golden.safetensors
                         BF16 inputs x.<i> and their NVFP4 quantization by this script's own
                         PyTorch implementation of ModelOpt's NVFP4QTensor rule (float32, ModelOpt's
                         order, ARCHITECTURE.md section 3.1): x.<i>.weight U8, .weight_scale F8_E4M3,
                         .weight_scale_2 F32 (CPU, exact division), .dequant F32 (ModelOpt's
                         dequantize order, before its final cast to the model dtype), and the same
                         computed on CUDA with ModelOpt's literal `amax / (6.0 * 448.0)` as
                         x.<i>.cuda.weight / .cuda.weight_scale / .cuda.weight_scale_2.

Integers in the JSON files are float32 bit patterns (uint32) or codes; no float text is parsed.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

GENERATOR = "tools/formats_goldens.py"


def f32_bits(values):
    """float32 bit patterns of a sequence of Python floats (rounded to float32)."""
    return np.asarray(values, dtype=np.float32).view(np.uint32).tolist()


def from_bits(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def next_up(x):
    return float(np.nextafter(np.float32(x), np.float32(np.inf), dtype=np.float32))


def next_down(x):
    return float(np.nextafter(np.float32(x), np.float32(-np.inf), dtype=np.float32))


def write_json(out, name, obj):
    path = os.path.join(out, name)
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def with_neighbours(xs):
    s = set()
    for x in xs:
        s.update([x, next_up(x), next_down(x)])
    return s


def signed_sorted_bits(mags):
    """float32 bit patterns of +-m for every magnitude, plus NaN, deduplicated and sorted."""
    arr = np.asarray(sorted(mags), dtype=np.float32)
    arr = np.concatenate([arr, -arr])
    bits = set(arr.view(np.uint32).tolist())
    bits.update([0x7FC00000, 0xFFC00000, 0x7F800001])  # quiet NaN, negative NaN, signalling NaN
    return sorted(bits)


def log_uniform(rng, n, lo_exp, hi_exp):
    return (2.0 ** rng.uniform(lo_exp, hi_exp, size=n)).astype(np.float32).tolist()


# ---------------------------------------------------------------- FP8 ----

def fp8_table(dtype, name, maxval, out, fname, rng, cuda):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    decoded = codes.view(dtype).to(torch.float32)
    decode_bits = decoded.numpy().view(np.uint32).tolist()

    finite = sorted({v for v in decoded.tolist() if math.isfinite(v) and v >= 0})
    mags = set(finite)
    for a, b in zip(finite, finite[1:]):
        mags |= with_neighbours([(a + b) / 2])  # midpoints are exact in float32
    step = finite[-1] - finite[-2]
    virtual = finite[-1] + step  # the first magnitude past the largest finite value
    mags |= with_neighbours([(finite[-1] + virtual) / 2, virtual, 2 * finite[-1], 1e6, 3.0e38])
    tiny = finite[1]  # smallest subnormal
    mags |= with_neighbours([tiny / 2, tiny * 1.5, tiny / 4])
    mags |= {1e-45, 1e-40, 2.0 ** -126, float("inf")}
    mags |= set(log_uniform(rng, 800, -22, 20))
    bits = signed_sorted_bits(mags)

    x = torch.from_numpy(from_bits(bits).copy())
    cast = x.to(dtype).view(torch.uint8).tolist()
    sat = torch.clamp(x, -maxval, maxval).to(dtype).view(torch.uint8).tolist()
    doc = {
        "generator": GENERATOR,
        "oracle": f"torch {torch.__version__} CPU: x.to(torch.{name}); saturating: torch.clamp(x, -{maxval}, {maxval}).to(torch.{name})",
        "decode": decode_bits,
        "encode": [[b, c, s] for b, c, s in zip(bits, cast, sat)],
    }
    if cuda:
        xc = x.cuda()
        cast_c = xc.to(dtype).view(torch.uint8).cpu().tolist()
        sat_c = torch.clamp(xc, -maxval, maxval).to(dtype).view(torch.uint8).cpu().tolist()
        dec_c = codes.cuda().view(dtype).to(torch.float32).cpu().numpy().view(np.uint32).tolist()
        mism = [b for b, c, cc, s, sc in zip(bits, cast, cast_c, sat, sat_c) if c != cc or s != sc]
        dmism = [i for i, (a, b) in enumerate(zip(decode_bits, dec_c)) if a != b and not (math.isnan(from_bits([a])[0]) and math.isnan(from_bits([b])[0]))]
        doc["cuda_encode_mismatches"] = mism[:50]
        doc["cuda_decode_mismatches"] = dmism[:50]
    write_json(out, fname, doc)


# ------------------------------------------------------- BF16 and F16 ----

def half_table(dtype, name, out, rng, cuda):
    int16 = torch.int16
    # decode: a stride over all codes plus the boundary regions
    codes = set(range(0, 65536, 37))
    for lo, hi in [(0x0000, 0x0011), (0x03F0, 0x0411), (0x7BF0, 0x7C11), (0x7F70, 0x7F90), (0x7FC0, 0x7FC1), (0x7E00, 0x7E01)]:
        for c in range(lo, hi):
            codes.update([c, c | 0x8000])
    codes = sorted(codes)
    as_i16 = torch.tensor([c - 65536 if c >= 32768 else c for c in codes], dtype=int16)
    dec = as_i16.view(dtype).to(torch.float32).numpy().view(np.uint32).tolist()

    # encode: ties between neighbouring codes (exact in float32), their float32 neighbours,
    # overflow and underflow ties, subnormals, random values.
    picks = rng.integers(0, 0x7C00 if dtype == torch.float16 else 0x7F80, size=500).tolist()
    picks += [0, 1, 2, 3, 0x3FF, 0x400, 0x401, 0x3C00, 0x3C01]
    picks += [0x7BFE, 0x7BFF] if dtype == torch.float16 else [0x7F7E, 0x7F7F, 0x007F, 0x0080]
    a = torch.tensor(sorted(set(picks)), dtype=torch.int32)
    lo = a.to(int16).view(dtype).to(torch.float64)
    hi = (a + 1).to(int16).view(dtype).to(torch.float64)
    mids = ((lo + hi) / 2).tolist()
    mags = with_neighbours([m for m in mids if math.isfinite(m)])
    mags |= set(lo.to(torch.float32).tolist())
    if dtype == torch.float16:
        mags |= with_neighbours([65504.0, 65520.0, 65536.0, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -24, 2.0 ** -14])
        mags |= set(log_uniform(rng, 400, -30, 17))
    else:
        mags |= with_neighbours([3.3895313892515355e38, 2.0 ** -133, 2.0 ** -126])
        mags |= set(log_uniform(rng, 400, -130, 127))
    mags |= {float("inf"), 1e-45}
    mags = {m for m in mags if not math.isnan(m)}
    bits = signed_sorted_bits(mags)
    x = torch.from_numpy(from_bits(bits).copy())
    enc = (x.to(dtype).view(int16).to(torch.int32) & 0xFFFF).tolist()
    doc = {
        "generator": GENERATOR,
        "oracle": f"torch {torch.__version__} CPU: x.to(torch.{name}) and code.view(torch.{name}).to(torch.float32)",
        "decode": [[c, d] for c, d in zip(codes, dec)],
        "encode": [[b, c] for b, c in zip(bits, enc)],
    }
    if cuda:
        enc_c = (x.cuda().to(dtype).view(int16).to(torch.int32) & 0xFFFF).cpu().tolist()
        doc["cuda_encode_mismatches"] = [b for b, e, ec in zip(bits, enc, enc_c) if e != ec and not math.isnan(from_bits([b])[0])][:50]
    write_json(out, f"{'bf16' if dtype == torch.bfloat16 else 'f16'}.json", doc)


# --------------------------------------------------------------- E2M1 ----

E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
E2M1_BOUNDS = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
E2M1_TIE_UP = [0.75, 1.75, 3.5]  # ModelOpt bumps these (indices 1, 3, 5 of the bounds)


def modelopt_cast_fp4(x):
    """ModelOpt NVFP4QTensor._cast_fp4: sign = x < 0; index = searchsorted(bounds, |x|) (left),
    plus one where |x| equals 0.75, 1.75 or 3.5. Returns uint8 codes."""
    sign = (x < 0).to(torch.uint8)
    mag = x.abs().contiguous()
    bounds = torch.tensor(E2M1_BOUNDS, dtype=torch.float32, device=x.device)
    idx = torch.searchsorted(bounds, mag, out_int32=True).to(torch.uint8)
    ties = torch.tensor(E2M1_TIE_UP, dtype=torch.float32, device=x.device)
    bump = (mag.unsqueeze(-1) == ties).any(dim=-1).to(torch.uint8)
    return (sign << 3) + idx + bump


def e2m1_table(out):
    mags = set(abs(v) for v in E2M1_VALUES) | with_neighbours(E2M1_BOUNDS)
    mags |= with_neighbours([6.0, 6.5, 7.0, 100.0, 3.0e38, 1e-30]) | {float("inf"), 1e-45}
    bits = signed_sorted_bits(mags)
    x = torch.from_numpy(from_bits(bits).copy())
    rule = modelopt_cast_fp4(x).tolist()
    doc = {
        "generator": GENERATOR,
        "decode": f32_bits(E2M1_VALUES),
        "decode_source": "ModelOpt e2m1_values table (modelopt/torch/quantization/qtensor/nvfp4_tensor.py)",
        "encode": [[b, r] for b, r in zip(bits, rule)],
        "encode_source": f"this script's torch {torch.__version__} implementation of ModelOpt's _cast_fp4 rule",
    }
    # PyTorch's own float4 dtype, if it converts at all.
    try:
        fp4 = torch.float4_e2m1fn_x2
        packed = torch.tensor([c | (c << 4) for c in range(16)], dtype=torch.uint8).view(fp4)
        doc["torch_decode"] = packed.to(torch.float32).numpy().view(np.uint32).tolist()
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        doc["torch_decode"] = None
        doc["torch_decode_error"] = f"{type(e).__name__}: {e}"[:300]
    try:
        fp4 = torch.float4_e2m1fn_x2
        pairs = torch.stack([x, torch.zeros_like(x)], dim=-1).reshape(-1)
        q = pairs.to(fp4).view(torch.uint8)
        if q.numel() != x.numel():
            raise RuntimeError(f"float4_e2m1fn_x2 cast gave {q.numel()} bytes for {x.numel()} pairs")
        doc["torch_cast"] = (q & 0xF).tolist()
        doc["torch_cast_note"] = "element 0 of each pair assumed in the low nibble"
    except Exception as e:  # noqa: BLE001
        doc["torch_cast"] = None
        doc["torch_cast_error"] = f"{type(e).__name__}: {e}"[:300]
    write_json(out, "e2m1.json", doc)


# -------------------------------------------------------------- NVFP4 ----

DIVISOR = 6.0 * 448.0  # 2688


def tensor_scale_exact(amax):
    """weight_scale_2 by true float32 division (PyTorch CPU; ARCHITECTURE.md section 3.1)."""
    return torch.div(amax.cpu().float(), torch.tensor(DIVISOR, dtype=torch.float32))


def tensor_scale_modelopt_cuda(amax):
    """ModelOpt's literal expression evaluated on a CUDA tensor."""
    return amax.cuda().float() / (6.0 * 448.0)


def quantize_nvfp4(w, s2):
    """ModelOpt NVFP4QTensor.quantize for a [N, K] BF16 tensor w on s2's device, float32,
    ModelOpt's order: s_b = block_amax / (6 * s2), zeros -> 1.0, e4m3 cast, x = W / (s_b * s2)."""
    n, k = w.shape
    wf = w.to(s2.device).float().view(n, k // 16, 16)
    bmax = wf.abs().amax(dim=-1)
    sb = bmax / (6.0 * s2)
    sb[sb == 0] = 1.0
    sb8 = sb.to(torch.float8_e4m3fn)
    den = sb8.to(torch.float32) * s2
    x = (wf / den.unsqueeze(-1)).view(n, k)
    codes = modelopt_cast_fp4(x)
    packed = (codes[:, 1::2] << 4) | codes[:, 0::2]
    return packed.cpu(), sb8.cpu(), s2.cpu().reshape(())


def dequantize_nvfp4(packed, sb8, s2):
    """ModelOpt NVFP4QTensor.dequantize order: per_block = scale.float() * s2; w = e2m1 * per_block."""
    n = packed.shape[0]
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(n, -1).long()
    vals = torch.tensor(E2M1_VALUES, dtype=torch.float32)[codes]
    per_block = sb8.to(torch.float32) * s2
    return (vals.view(n, -1, 16) * per_block.unsqueeze(-1)).view(n, -1)


def e4m3_values():
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float32).tolist()


def golden_x0(rng):
    """[32, 256]: amax 21*2^-6 makes s2 = 2^-13 exactly (exact rule), so ties can be built exactly."""
    n, k = 32, 256
    w = np.clip(rng.normal(0.0, 0.02, size=(n, k)), -0.25, 0.25).astype(np.float32)
    amax = 21 * 2.0 ** -6  # 0.328125; amax / 2688 = 2^-13
    w[0, 0] = amax
    s2 = 2.0 ** -13
    # Row 1: blocks whose scale is exactly 16 (den = 2^-9): every E2M1 threshold and value, +-.
    den = 16 * s2
    ts = E2M1_BOUNDS + [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    for b in range(k // 16):
        blk = [6.0] + [ts[(b + j) % len(ts)] * (1 if (b + j) % 3 else -1) for j in range(15)]
        if b % 2:
            blk[0] = -6.0
        w[1, 16 * b:16 * b + 16] = np.asarray(blk, dtype=np.float32) * den
    # Row 2: block scales exactly at E4M3 rounding ties (midpoints of neighbouring E4M3 values).
    vals = sorted({v for v in e4m3_values() if math.isfinite(v) and v > 0})
    mids = [(a + b) / 2 for a, b in zip(vals, vals[1:])]
    chosen = [mids[i] for i in (0, 1, 5, 6, 20, 21, 40, 41, 60, 61, 80, 81, 100, 110, 118, 119)]
    chosen = [m for m in chosen if m * 6 * s2 <= amax]
    for b, sbt in enumerate(chosen[: k // 16]):
        bmax = sbt * 6 * s2
        w[2, 16 * b:16 * b + 16] = rng.uniform(-bmax, bmax, size=16)
        w[2, 16 * b + (b % 16)] = bmax if b % 2 == 0 else -bmax
    # Row 3: block scale 2^-10 exactly (E4M3 tie to 0 -> den 0) and 3*2^-10 (tie to 2^-8).
    w[3, :] = 0.0
    w[3, 0:16] = rng.uniform(-1, 1, size=16) * (2.0 ** -10 * 6 * s2)
    w[3, 0] = 2.0 ** -10 * 6 * s2
    w[3, 16:32] = rng.uniform(-1, 1, size=16) * (3 * 2.0 ** -10 * 6 * s2)
    w[3, 16] = -(3 * 2.0 ** -10 * 6 * s2)
    # Row 4: an all-zero block, a block of -0.0 with tiny negatives, a block of mixed zeros.
    w[4, 0:16] = 0.0
    w[4, 16:32] = -0.0
    w[4, 20] = -1e-30
    w[4, 25] = -1e-38
    w[4, 32:48] = 0.0
    w[4, 33] = 0.01
    w[4, 34] = -0.0
    # Row 5: a row of tiny values (block scales round to E4M3 zero).
    w[5, :] = rng.normal(0.0, 1e-9, size=k)
    # Row 6: bf16 neighbours of exact ties (den = 2^-9 again).
    for b in range(k // 16):
        t = E2M1_BOUNDS[b % len(E2M1_BOUNDS)]
        blk = np.full(16, 0.1, dtype=np.float32) * den
        blk[0] = 6.0 * den
        blk[1] = t * den * (1 + 2.0 ** -7)
        blk[2] = t * den * (1 - 2.0 ** -8)
        blk[3] = -t * den * (1 + 2.0 ** -7)
        w[6, 16 * b:16 * b + 16] = blk
    return torch.from_numpy(w).to(torch.bfloat16)


def golden_x1(rng):
    """[48, 512]: heavy-tailed values, amax 3.0625 (whose s2 differs between true division and
    ModelOpt's CUDA reciprocal multiply), an all-zero block, tiny rows, subnormal block scales."""
    n, k = 48, 512
    w = np.clip(rng.standard_t(3, size=(n, k)) * 0.01, -2.5, 2.5).astype(np.float32)
    w[7, 100] = 3.0625
    w[10, 48:64] = 0.0
    w[20, :] = rng.normal(0.0, 1e-6, size=k)
    w[21, :] = rng.normal(0.0, 1e-5, size=k)
    w[22, :] = rng.normal(0.0, 1e-3, size=k)
    w[30, 0:16] = [6, -6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5]
    w[30, 0:16] *= 0.1
    return torch.from_numpy(w).to(torch.bfloat16)


def nvfp4_golden(out, rng, cuda):
    xs = [golden_x0(rng), golden_x1(rng)]
    tensors = {}
    meta = {"generator": GENERATOR, "torch": torch.__version__,
            "rule": "ModelOpt NVFP4QTensor, float32: s2 = amax/2688; s_b = block_amax/(6*s2), 0 -> 1.0, "
                    "float8_e4m3fn cast; x = W/(float(s_b)*s2); _cast_fp4; even element in the low nibble",
            "exact": "CPU tensors, s2 by torch.div (true division)",
            "cuda": "CUDA tensors, s2 = amax.float() / (6.0 * 448.0) as ModelOpt writes it" if cuda else "absent"}
    for i, x in enumerate(xs):
        amax = x.abs().amax().float()
        s2 = tensor_scale_exact(amax)
        packed, sb8, s2o = quantize_nvfp4(x, s2)
        tensors[f"x.{i}"] = x.contiguous()
        tensors[f"x.{i}.weight"] = packed.contiguous()
        tensors[f"x.{i}.weight_scale"] = sb8.contiguous()
        tensors[f"x.{i}.weight_scale_2"] = s2o.contiguous()
        tensors[f"x.{i}.dequant"] = dequantize_nvfp4(packed, sb8, s2o).contiguous()
        if cuda:
            s2c = tensor_scale_modelopt_cuda(amax)
            pc, sc, s2co = quantize_nvfp4(x, s2c)
            tensors[f"x.{i}.cuda.weight"] = pc.contiguous()
            tensors[f"x.{i}.cuda.weight_scale"] = sc.contiguous()
            tensors[f"x.{i}.cuda.weight_scale_2"] = s2co.contiguous()
            meta[f"x.{i}.cuda_s2_differs"] = str(bool(s2co.item() != s2o.item())).lower()
    path = os.path.join(out, "nvfp4_golden.safetensors")
    save_file(tensors, path, metadata=meta)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def nvfp4_s2_table(out, cuda):
    # Every positive normal BF16 with exponent in [-24, 15] and mantissa a multiple of 3.
    amax = []
    for e in range(127 - 24, 127 + 16):
        for m in range(0, 128, 3):
            amax.append((e << 7 | m) << 16)
    a = torch.from_numpy(from_bits(amax).copy())
    exact = tensor_scale_exact(a).numpy().view(np.uint32).tolist()
    doc = {"generator": GENERATOR, "torch": torch.__version__, "amax": amax, "exact": exact,
           "exact_source": "CPU torch.div(amax, tensor(2688.0))"}
    if cuda:
        doc["cuda"] = tensor_scale_modelopt_cuda(a).cpu().numpy().view(np.uint32).tolist()
        doc["cuda_source"] = "CUDA amax.float() / (6.0 * 448.0), ModelOpt's get_weights_scaling_factor_2 expression"
    write_json(out, "nvfp4_s2.json", doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (testdata/formats)")
    ap.add_argument("--no-cuda", action="store_true", help="skip the CUDA columns (the Go tests need them)")
    args = ap.parse_args()
    cuda = not args.no_cuda
    if cuda and not torch.cuda.is_available():
        sys.exit("CUDA is not available: run on the GPU machine, or pass --no-cuda (the Go tests will then fail on the missing CUDA goldens)")
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    fp8_table(torch.float8_e4m3fn, "float8_e4m3fn", 448.0, args.out, "e4m3.json", np.random.default_rng(1), cuda)
    fp8_table(torch.float8_e5m2, "float8_e5m2", 57344.0, args.out, "e5m2.json", np.random.default_rng(2), cuda)
    half_table(torch.bfloat16, "bfloat16", args.out, np.random.default_rng(3), cuda)
    half_table(torch.float16, "float16", args.out, np.random.default_rng(4), cuda)
    e2m1_table(args.out)
    nvfp4_s2_table(args.out, cuda)
    nvfp4_golden(args.out, np.random.default_rng(5), cuda)


if __name__ == "__main__":
    main()
