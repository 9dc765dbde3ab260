#!/usr/bin/env python3
"""Interop fixtures for lithos/formats/safetensors, made and checked by the
Python `safetensors` package (the oracle; see docs/ARCHITECTURE.md §4).

Run where torch + safetensors + numpy are installed (the GPU machine), from
the repository root:

    python3 tools/safetensors_fixtures.py --out testdata/safetensors

It does two things:

1. generate: writes py_*.safetensors (and a sharded set in py_sharded/ with
   model.safetensors.index.json) with `safetensors.torch.save_file`, plus
   py_expected.json: for every tensor its dtype, shape, data_offsets (parsed
   here with Python's json, independently of safetensors), sha256 of its raw
   bytes as torch holds them (and the bytes in hex when small). The Go test
   TestPythonFixtures reads these files back and must agree exactly;
   TestPythonByteIdentical re-encodes them with the Go writer and must give
   the same bytes.
2. verify: loads every go_*.safetensors listed in go_expected.json (written
   by `go test ./formats/safetensors -run TestGoFixtures -update`) with both
   `safe_open` and `load_file`, checks every tensor's bytes (sha256, hex) and
   its values recomputed here from the recipe in go_expected.json with
   numpy/torch, checks metadata, and, for files the Go side wrote in the
   Python writer's order, re-saves them with save_file and requires identical
   bytes. It prints "OK n tensors" or exits non-zero with every failure.

Files are tiny (well under 200 KB in all). Values are deterministic (no RNG).
"""

import argparse
import hashlib
import json
import os
import struct
import sys
import tempfile

HEX_LIMIT = 256  # tensors up to this many bytes also get their bytes in hex


def fail(msg):
    print("FAIL " + msg, file=sys.stderr)
    sys.exit(1)


def parse_header(path):
    """Independent header parse: (N, header dict, file size)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    return n, header, len(data), data


def raw_bytes(t):
    """The tensor's bytes as torch stores them (little-endian, row-major)."""
    import torch

    t = t.contiguous()
    try:
        u = t.reshape(-1).view(torch.uint8)
    except (RuntimeError, TypeError, NotImplementedError):
        u = t.view(torch.uint8).reshape(-1)
    return u.cpu().numpy().tobytes()


def sha(b):
    return hashlib.sha256(b).hexdigest()


def versions():
    import numpy
    import safetensors
    import torch

    v = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
        "numpy": numpy.__version__,
    }
    try:
        import huggingface_hub

        v["huggingface_hub"] = huggingface_hub.__version__
    except ImportError:
        pass
    return v


# ---------------------------------------------------------------- generate


def build_files():
    """name -> (dict of tensors, metadata or None, optional?)."""
    import torch

    def ar(n, dtype, start=0.0, step=1.0):
        return (torch.arange(n, dtype=torch.float64) * step + start).to(dtype)

    files = {}

    # nlpodyssey/safetensors can read this one (BF16/F32 only): cross-check.
    files["py_bf16_f32.safetensors"] = (
        {
            "model.embed_tokens.weight": ar(32, torch.bfloat16, -2.0, 0.125).reshape(8, 4),
            "model.layers.0.proj.weight": (torch.arange(15, dtype=torch.float32) / 7).to(torch.bfloat16).reshape(3, 5),
            "model.norm.weight": ar(4, torch.float32, 1.0, -0.375),
            "model.layers.0.bias": (torch.arange(6, dtype=torch.float32) / 3 - 1).reshape(2, 3),
            "model.scale": torch.tensor(0.0625, dtype=torch.float32),
            "model.empty": torch.zeros((0, 4), dtype=torch.bfloat16),
        },
        {"format": "pt"},
        False,
    )

    files["py_dtypes.safetensors"] = (
        {
            "bool": torch.tensor([True, False, False, True, True]),
            "u8": torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8),
            "i8": torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8),
            "i16": torch.tensor([-32768, -300, 0, 211, 32767], dtype=torch.int16),
            "i32": torch.tensor([[-(2**31), -1], [0, 2**31 - 1]], dtype=torch.int32),
            "i64": torch.tensor([-(2**63), 0, 2**63 - 1], dtype=torch.int64),
            "i64_scalar": torch.tensor(-42, dtype=torch.int64),
            "f16": (torch.arange(6, dtype=torch.float32) / 3).to(torch.float16).reshape(2, 3),
            "bf16": (torch.arange(6, dtype=torch.float32) / 3).to(torch.bfloat16).reshape(3, 2),
            "f32": torch.tensor([1.0, -0.0, 3.25e-5, 65504.0, float("inf"), -1e30], dtype=torch.float32),
            "f32_scalar": torch.tensor(2.5, dtype=torch.float32),
            "f64": torch.tensor([[1.0 / 3, -2.0], [1e-300, 6.02214076e23]], dtype=torch.float64),
            "f8_e4m3": (torch.arange(-8, 8, dtype=torch.float32) * 0.3).to(torch.float8_e4m3fn).reshape(4, 4),
            "f8_e5m2": (torch.arange(-8, 8, dtype=torch.float32) * 0.3).to(torch.float8_e5m2).reshape(2, 8),
            "bf16_empty": torch.zeros((2, 0), dtype=torch.bfloat16),
            "f32_empty": torch.zeros((0,), dtype=torch.float32),
        },
        {"format": "pt"},
        False,
    )

    # Every FP8 code, an NVFP4-like group, no metadata at all.
    all_codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(16, 16)
    files["py_f8.safetensors"] = (
        {
            "e4m3_all_codes": all_codes.view(torch.float8_e4m3fn),
            "e5m2_all_codes": all_codes.clone().view(torch.float8_e5m2),
            "mlp.down_proj.weight": ((torch.arange(64, dtype=torch.int32) * 37 + 11) % 256).to(torch.uint8).reshape(4, 16),
            "mlp.down_proj.weight_scale": (torch.arange(8, dtype=torch.float32) * 0.75 + 0.5).to(torch.float8_e4m3fn).reshape(4, 2),
            "mlp.down_proj.weight_scale_2": torch.tensor(0.001953125, dtype=torch.float32),
            "mlp.down_proj.input_scale": torch.tensor(0.25, dtype=torch.float32),
            "self_attn.q_proj.weight": (torch.arange(-16, 16, dtype=torch.float32) / 5).to(torch.float8_e4m3fn).reshape(4, 8),
            "self_attn.q_proj.weight_scale": torch.tensor(0.0078125, dtype=torch.float32),
            "norm.weight": ar(4, torch.bfloat16, 1.0, 0.5),
        },
        None,
        False,
    )

    tricky = {
        "a.weight": ar(3, torch.float32, 0.5, 1.0),
        "\u00fcn\u00ef.\u540d\u524d": ar(2, torch.bfloat16, 1.0, 1.0),
        "sp ace": torch.tensor([7], dtype=torch.int32),
        'quote"d\\back': torch.tensor([1, 2], dtype=torch.uint8),
        "ctl\u0001\u001f\tx\n": torch.tensor(3.0, dtype=torch.float16),
        "emoji\U0001F600<&>\u2028\u007f": torch.tensor([True]),
    }
    # Several metadata keys: the Rust writer orders them by HashMap, so this
    # file is compared by content only.
    files["py_meta.safetensors"] = (
        dict(tricky),
        {
            "format": "pt",
            "note": "\u00fcn\u00efc\u00f6d\u00e9 \u2713",
            "quote": 'a "b" \\ c\n\t',
            "empty": "",
            "html": "<tag>&amp;",
        },
        False,
    )
    # One metadata key with every escape class: byte identity tests escaping.
    files["py_escape.safetensors"] = (
        {k: v.clone() for k, v in tricky.items()},
        {"k\u00e9y": 'v "q" \\ / \b\f\n\r\t \u0001\u001f \u00fc \U0001F600 \u2028 <&> \u007f'},
        False,
    )
    files["py_nometa.safetensors"] = (
        {
            "z.last": ar(3, torch.float64, -1.0, 0.5),
            "a.first": torch.tensor([1, 0, 1], dtype=torch.bool),
            "m.mid": ar(5, torch.float16, -1.0, 0.25),
            "b.second": ar(4, torch.bfloat16, 0.0, -0.5),
            "k.int": torch.tensor([-5, 5], dtype=torch.int16),
            "c.f8": ar(3, torch.float8_e4m3fn, 0.5, 0.5),
            "y.f8": ar(3, torch.float8_e5m2, -0.5, 0.25),
        },
        None,
        False,
    )

    if hasattr(torch, "uint16"):
        files["py_unsigned.safetensors"] = (
            {
                "u16": torch.tensor([0, 1, 2**15, 2**16 - 1], dtype=torch.int32).to(torch.uint16),
                "u32": torch.tensor([0, 1, 2**31, 2**32 - 1], dtype=torch.int64).to(torch.uint32),
                "u64": torch.tensor([0, 1, 2**40, 2**62], dtype=torch.int64).to(torch.uint64),
            },
            {"format": "pt"},
            True,
        )

    mx = {}
    if hasattr(torch, "float8_e8m0fnu"):
        mx["e8m0_scales"] = (torch.arange(8, dtype=torch.int32) * 32 + 3).to(torch.uint8).view(torch.float8_e8m0fnu)
    if hasattr(torch, "float4_e2m1fn_x2"):
        # storage [2, 4] bytes = 16 F4 elements; the header records [2, 8].
        mx["fp4_packed"] = ((torch.arange(8, dtype=torch.int32) * 29 + 5) % 256).to(torch.uint8).reshape(2, 4).view(torch.float4_e2m1fn_x2)
    if mx:
        files["py_mx.safetensors"] = (mx, {"format": "pt"}, True)
    return files


def describe_file(out, rel, tensors_by_name):
    """Expected record for one written file, checked against its bytes."""
    path = os.path.join(out, rel)
    n, header, size, data = parse_header(path)
    meta = header.pop("__metadata__", None)
    if set(header) != set(tensors_by_name):
        fail(f"{rel}: header names {sorted(header)} != saved {sorted(tensors_by_name)}")
    rec = {"size": size, "sha256": sha(data), "header_len": n, "metadata": meta, "tensors": {}}
    for name, t in tensors_by_name.items():
        info = header[name]
        b = raw_bytes(t)
        begin, end = info["data_offsets"]
        if data[8 + n + begin : 8 + n + end] != b:
            fail(f"{rel}: tensor {name!r}: file bytes differ from torch bytes")
        e = {
            "dtype": info["dtype"],
            "shape": info["shape"],
            "data_offsets": [begin, end],
            "torch_dtype": str(t.dtype),
            "torch_shape": list(t.shape),
            "nbytes": len(b),
            "sha256": sha(b),
        }
        if len(b) <= HEX_LIMIT:
            e["hex"] = b.hex()
        rec["tensors"][name] = e
    return rec


def split_shards(sd):
    """Shard a state dict as huggingface_hub does (fallback: same naming)."""
    try:
        from huggingface_hub import split_torch_state_dict_into_shards

        split = split_torch_state_dict_into_shards(sd, max_shard_size=400)
        return (
            {f: list(ts) for f, ts in split.filename_to_tensors.items()},
            {"metadata": split.metadata, "weight_map": split.tensor_to_filename},
            "huggingface_hub.split_torch_state_dict_into_shards(max_shard_size=400)",
        )
    except ImportError:
        pass
    groups, cur, cur_size = [], [], 0
    for name, t in sd.items():
        nb = t.numel() * t.element_size()
        if cur and cur_size + nb > 400:
            groups.append(cur)
            cur, cur_size = [], 0
        cur.append(name)
        cur_size += nb
    groups.append(cur)
    files, weight_map = {}, {}
    for i, g in enumerate(groups):
        fn = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        files[fn] = g
        for name in g:
            weight_map[name] = fn
    total = sum(t.numel() * t.element_size() for t in sd.values())
    return files, {"metadata": {"total_size": total}, "weight_map": weight_map}, "fallback greedy split (huggingface_hub missing)"


def generate(out):
    import torch
    from safetensors.torch import save_file

    os.makedirs(out, exist_ok=True)
    expected = {"generator": "python3 tools/safetensors_fixtures.py --out testdata/safetensors", "versions": versions(), "files": {}, "skipped": {}}
    for rel, (tensors, meta, optional) in build_files().items():
        path = os.path.join(out, rel)
        try:
            save_file(tensors, path, metadata=meta)
        except Exception as e:  # optional dtypes this safetensors cannot write
            if not optional:
                raise
            expected["skipped"][rel] = f"{type(e).__name__}: {e}"
            print(f"SKIP {rel}: {e}")
            continue
        rec = describe_file(out, rel, tensors)
        rec["optional"] = optional
        expected["files"][rel] = rec
        print(f"wrote {path} ({rec['size']} bytes, {len(tensors)} tensors)")

    # A sharded checkpoint: BF16 / F32 / F8_E4M3 / U8, three or more shards.
    sd = {}
    for layer in range(3):
        p = f"model.layers.{layer}"
        sd[f"{p}.mlp.down_proj.weight"] = ((torch.arange(128, dtype=torch.int32) * (layer + 3) + 7) % 256).to(torch.uint8).reshape(8, 16)
        sd[f"{p}.mlp.down_proj.weight_scale"] = (torch.arange(16, dtype=torch.float32) * 0.5 + layer).to(torch.float8_e4m3fn).reshape(8, 2)
        sd[f"{p}.mlp.down_proj.weight_scale_2"] = torch.tensor(0.5 ** (layer + 4), dtype=torch.float32)
        sd[f"{p}.self_attn.q_proj.weight"] = (torch.arange(64, dtype=torch.float32) / (layer + 9)).to(torch.float8_e4m3fn).reshape(8, 8)
        sd[f"{p}.input_layernorm.weight"] = (torch.arange(8, dtype=torch.float32) / 3 + layer).to(torch.bfloat16)
    sd["model.norm.weight"] = torch.ones(8, dtype=torch.bfloat16)
    shard_dir = os.path.join(out, "py_sharded")
    os.makedirs(shard_dir, exist_ok=True)
    shard_files, index, producer = split_shards(sd)
    if len(shard_files) < 2:
        fail(f"sharding produced {len(shard_files)} shard(s)")
    for fn, names in shard_files.items():
        rel = f"py_sharded/{fn}"
        part = {n: sd[n] for n in names}
        save_file(part, os.path.join(out, rel), metadata={"format": "pt"})
        rec = describe_file(out, rel, part)
        rec["optional"] = False
        expected["files"][rel] = rec
    with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")
    expected["sharded"] = {
        "dir": "py_sharded",
        "index": "model.safetensors.index.json",
        "producer": producer,
        "weight_map": index["weight_map"],
        "metadata": index["metadata"],
    }
    print(f"wrote {shard_dir} ({len(shard_files)} shards, {len(sd)} tensors, {producer})")

    with open(os.path.join(out, "py_expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True, ensure_ascii=True)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out) for fn in fns if fn.startswith(("py_", "model")))
    print(f"py fixtures: {total} bytes in all")


# ------------------------------------------------------------------ verify

NP_INT = {"U8": "<u1", "I8": "<i1", "I16": "<i2", "U16": "<u2", "I32": "<i4", "U32": "<u4", "I64": "<i8", "U64": "<u8"}


def torch_dtype(name):
    import torch

    return {
        "F16": torch.float16,
        "BF16": torch.bfloat16,
        "F32": torch.float32,
        "F64": torch.float64,
    }[name]


def expected_bytes(gen, dtype, nelem, nbytes):
    """Raw bytes recomputed from the recipe with numpy / torch."""
    import numpy as np
    import torch

    kind = gen["kind"]
    g = lambda k: gen.get(k, 0)  # the Go side omits zero fields
    if kind == "bytes":
        return ((np.arange(nbytes, dtype=np.int64) * g("mul") + g("add")) % 256).astype(np.uint8).tobytes()
    if kind == "bool_mod":
        return (np.arange(nelem) % g("mod") == 0).astype(np.bool_).tobytes()
    if kind == "arange":
        if dtype in NP_INT:
            v = [i * int(g("step")) + int(g("start")) for i in range(nelem)]
            return np.array(v, dtype=NP_INT[dtype]).tobytes()
        v = torch.arange(nelem, dtype=torch.float64) * float(g("step")) + float(g("start"))
        return raw_bytes(v.to(torch_dtype(dtype)))
    raise ValueError(f"unknown recipe {gen}")


def verify_go(out):
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    path = os.path.join(out, "go_expected.json")
    if not os.path.exists(path):
        fail(f"{path} missing: run `go test ./formats/safetensors -run TestGoFixtures -update` and commit its output")
    with open(path) as f:
        exp = json.load(f)
    errors, total, skipped = [], 0, []
    for rel, rec in sorted(exp["files"].items()):
        fpath = os.path.join(out, rel)
        if not os.path.exists(fpath):
            errors.append(f"{rel}: missing")
            continue
        n, header, size, data = parse_header(fpath)
        if sha(data) != rec["sha256"] or size != rec["size"]:
            errors.append(f"{rel}: file sha256/size differ from go_expected.json")
            continue
        meta = header.pop("__metadata__", None)
        if meta != rec["metadata"]:
            errors.append(f"{rel}: metadata {meta!r} != {rec['metadata']!r}")
        want = {t["name"]: t for t in rec["tensors"]}
        if set(header) != set(want):
            errors.append(f"{rel}: header names {sorted(header)} != {sorted(want)}")
            continue
        try:
            with safe_open(fpath, framework="pt") as f:
                if set(f.keys()) != set(want):
                    errors.append(f"{rel}: safe_open keys {sorted(f.keys())} != {sorted(want)}")
                if f.metadata() != rec["metadata"]:
                    errors.append(f"{rel}: safe_open metadata {f.metadata()!r} != {rec['metadata']!r}")
                via_open = {name: f.get_tensor(name) for name in want}
            via_load = load_file(fpath)
        except Exception as e:
            if rec.get("optional"):
                skipped.append(f"{rel}: {type(e).__name__}: {e}")
                print(f"SKIP {rel}: this torch/safetensors cannot load it ({e})")
                continue
            errors.append(f"{rel}: safetensors failed to load it: {type(e).__name__}: {e}")
            continue
        for name, t in want.items():
            h = header[name]
            if h["dtype"] != t["dtype"] or h["shape"] != t["shape"] or h["data_offsets"] != t["data_offsets"]:
                errors.append(f"{rel}: {name!r}: header {h} != {t}")
            nelem = 1
            for d in t["shape"]:
                nelem *= d
            want_bytes = expected_bytes(t["gen"], t["dtype"], nelem, t["nbytes"])
            if sha(want_bytes) != t["sha256"]:
                errors.append(f"{rel}: {name!r}: recipe {t['gen']} gives sha256 {sha(want_bytes)}, Go wrote {t['sha256']}")
            for how, tensors in (("safe_open", via_open), ("load_file", via_load)):
                b = raw_bytes(tensors[name])
                if sha(b) != t["sha256"] or ("hex" in t and b.hex() != t["hex"]):
                    errors.append(f"{rel}: {name!r}: {how} bytes differ (sha256 {sha(b)} != {t['sha256']})")
        note = ""
        if rec.get("python_order"):
            with tempfile.TemporaryDirectory() as td:
                tmp = os.path.join(td, "resaved.safetensors")
                save_file(via_load, tmp, metadata=rec["metadata"])
                with open(tmp, "rb") as f:
                    again = f.read()
            if again != data:
                errors.append(f"{rel}: save_file of the loaded tensors is not byte-identical to the Go file ({len(again)} vs {len(data)} bytes; header {again[8:8 + 200]!r} vs {data[8:8 + 200]!r})")
            else:
                note = ", save_file re-save byte-identical"
        total += len(want)
        print(f"ok {rel}: {len(want)} tensors (safe_open + load_file{note})")
    if errors:
        for e in errors:
            print("FAIL " + e, file=sys.stderr)
        sys.exit(1)
    if skipped:
        print(f"skipped optional files: {skipped}")
    print(f"OK {total} tensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="testdata/safetensors")
    ap.add_argument("--no-generate", action="store_true", help="only verify the go_ files")
    ap.add_argument("--no-verify", action="store_true", help="only generate the py_ files")
    args = ap.parse_args()
    if not args.no_generate:
        generate(args.out)
    if not args.no_verify:
        verify_go(args.out)


if __name__ == "__main__":
    main()
