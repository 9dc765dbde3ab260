#!/usr/bin/env python3
"""Interop check of lithos/hub/hubtest against huggingface_hub (the reference Hub client), and of the
fixture testdata/hub/lithos-test/tiny-sharded against safetensors, tokenizers and transformers.

Run where huggingface_hub, safetensors, torch, tokenizers and transformers are installed (the GPU
machine; no network needed), from the repository root, after building the server on the Go machine:

    CGO_ENABLED=0 go build -o bin/hubinterop ./tools/hubinterop
    python3 tools/hubinterop/check.py --server bin/hubinterop --root testdata/hub

It copies the fixture into a temporary Hub root (adding a gated copy and a renamed id), starts the
server with a tree page size of 2 twice (LFS blobs on the API host, then on a separate CDN-like host
http://localhost:<port2>), and each time checks with huggingface_hub: model_info(files_metadata=True),
list_repo_tree (paginated), get_paths_info, get_hf_file_metadata (regular and LFS files),
snapshot_download into a fresh cache (every file's sha256 against the source, cache layout: refs/main,
blobs named by etag, relative snapshot symlinks), hf_hub_download of a missing file
(EntryNotFound + .no_exist), unknown revision / repo, the gated repo without and with a token, and a
download through the renamed id (relative redirect). Ids (sha256, git blob sha1 of content or of the
LFS pointer) are recomputed here from the source bytes. Then it opens the downloaded snapshot with
safetensors (dtypes, shapes, index agreement), tokenizers (encode/decode round trip), and transformers
(AutoConfig, AutoTokenizer.apply_chat_template, and the parameter names and shapes of a
Qwen3_5ForConditionalGeneration built from the config against the checkpoint's tensors).

Prints "OK" and exits 0, or prints every failure and exits 1.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

FAILS = []
REPO = "lithos-test/tiny-sharded"
GATED = "lithos-test/gated-copy"
RENAMED = "old-org/tiny-old"
TOKEN = "hf_interop_token"


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL:", msg, flush=True)


def raised(e, exc):
    """e is exc or was raised from one (hf_hub_download wraps some HEAD errors in LocalEntryNotFoundError)."""
    while e is not None:
        if isinstance(e, exc):
            return True
        e = e.__cause__ or e.__context__
    return False


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def git_blob(b):
    return hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()


def lfs_pointer(b):
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256(b).encode(), len(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--root", default="testdata/hub")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="hubinterop-")
    print("work dir", work)
    root = os.path.join(work, "hub")
    src = os.path.join(args.root, REPO)
    shutil.copytree(src, os.path.join(root, REPO))
    shutil.copytree(src, os.path.join(root, GATED))
    with open(os.path.join(root, GATED, ".hubtest.json"), "w") as f:
        json.dump({"gated": "manual", "token": TOKEN}, f)
    os.makedirs(os.path.join(root, RENAMED))
    with open(os.path.join(root, RENAMED, ".hubtest.json"), "w") as f:
        json.dump({"renamed_to": REPO}, f)

    files = {}
    for dirpath, _, names in os.walk(src):
        for n in names:
            p = os.path.join(dirpath, n)
            files[os.path.relpath(p, src).replace(os.sep, "/")] = open(p, "rb").read()
    lfs = {p for p in files if p.endswith(".safetensors") or len(files[p]) >= 1 << 20}

    snap = None
    for mode in ["same-host blobs", "separate blob host"]:
        print("==", mode, flush=True)
        cmd = [args.server, "-root", root, "-page-size", "2"] + (["-blob-host"] if "separate" in mode else [])
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        try:
            url = proc.stdout.readline().strip()
            check(url.startswith("http://"), f"server printed {url!r}")
            os.environ["HF_ENDPOINT"] = url
            os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
            os.environ["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
            os.environ["HF_HOME"] = os.path.join(work, "hfhome")
            snap = hub_checks(url, os.path.join(work, mode.replace(" ", "-")), files, lfs, "separate" in mode)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    model_checks(snap)
    if FAILS:
        print(f"{len(FAILS)} failures")
        sys.exit(1)
    print("OK")


def hub_checks(url, work, files, lfs, cdn):
    import huggingface_hub as hh
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url, snapshot_download
    from huggingface_hub import errors as E

    print("huggingface_hub", hh.__version__, flush=True)
    EntryNotFound = getattr(E, "RemoteEntryNotFoundError", None) or getattr(E, "EntryNotFoundError")
    api = HfApi(endpoint=url, token=False)

    info = api.model_info(REPO, files_metadata=True)
    commit = info.sha
    check(isinstance(commit, str) and len(commit) == 40, f"model_info sha {commit!r}")
    sib = {s.rfilename: s for s in info.siblings}
    check(set(sib) == set(files), f"siblings {sorted(sib)} != files {sorted(files)}")
    for p, b in files.items():
        s = sib.get(p)
        if s is None:
            continue
        check(s.size == len(b), f"{p}: sibling size {s.size} != {len(b)}")
        if p in lfs:
            check(s.lfs is not None and s.lfs.sha256 == sha256(b) and s.lfs.size == len(b)
                  and s.lfs.pointer_size == len(lfs_pointer(b)), f"{p}: sibling lfs {s.lfs}")
            check(s.blob_id == git_blob(lfs_pointer(b)), f"{p}: blob_id {s.blob_id} != pointer blob")
        else:
            check(s.lfs is None and s.blob_id == git_blob(b), f"{p}: blob_id {s.blob_id} lfs {s.lfs}")

    tree = list(api.list_repo_tree(REPO, recursive=True, revision=commit))
    got = {t.path: t for t in tree}
    check(len(tree) == len(files) and set(got) == set(files), f"list_repo_tree (page size 2): {sorted(got)}")
    for p, t in got.items():
        b = files.get(p, b"")
        if p in lfs:
            check(t.lfs is not None and t.lfs.sha256 == sha256(b) and t.blob_id == git_blob(lfs_pointer(b)),
                  f"tree {p}: {t}")
        else:
            check(t.lfs is None and t.blob_id == git_blob(b) and t.size == len(b), f"tree {p}: {t}")
    pi = api.get_paths_info(REPO, ["config.json", "model-00001-of-00002.safetensors", "nope.txt"], revision="main")
    check(sorted(x.path for x in pi) == ["config.json", "model-00001-of-00002.safetensors"], f"paths_info {pi}")

    for p in ["config.json", "model-00002-of-00002.safetensors"]:
        m = get_hf_file_metadata(hf_hub_url(REPO, p, endpoint=url), token=False)
        b = files[p]
        want = sha256(b) if p in lfs else git_blob(b)
        check(m.commit_hash == commit and m.etag == want and m.size == len(b),
              f"metadata {p}: commit {m.commit_hash} etag {m.etag} size {m.size}, want {want} {len(b)}")
        if p in lfs:
            check(m.location.endswith("/cdn/" + REPO + "/" + sha256(b)), f"metadata {p}: location {m.location}")
            check(m.location.startswith("http://localhost:") == cdn, f"metadata {p}: location {m.location}")

    cache = os.path.join(work, "cache")
    snap = snapshot_download(REPO, cache_dir=cache, endpoint=url, token=False)
    check(os.path.basename(snap) == commit, f"snapshot dir {snap}")
    repo_dir = os.path.join(cache, "models--" + REPO.replace("/", "--"))
    check(open(os.path.join(repo_dir, "refs", "main")).read() == commit, "refs/main")
    for p, b in files.items():
        fp = os.path.join(snap, p)
        check(os.path.islink(fp) and not os.path.isabs(os.readlink(fp)), f"{p}: not a relative symlink")
        check(open(fp, "rb").read() == b, f"{p}: downloaded bytes differ")
        blob = os.path.basename(os.readlink(fp))
        check(blob == (sha256(b) if p in lfs else git_blob(b)), f"{p}: blob name {blob}")

    try:
        hf_hub_download(REPO, "missing.txt", cache_dir=cache, endpoint=url, token=False)
        check(False, "missing file downloaded")
    except EntryNotFound:
        check(os.path.exists(os.path.join(repo_dir, ".no_exist", commit, "missing.txt")), ".no_exist not written")
    except Exception as e:  # noqa: BLE001
        check(False, f"missing file: {type(e).__name__}: {e}")
    for what, kw, exc in [
        ("unknown revision", dict(repo_id=REPO, revision="v9"), E.RevisionNotFoundError),
        ("unknown repo", dict(repo_id="lithos-test/nope"), E.RepositoryNotFoundError),
        ("gated without token", dict(repo_id=GATED), E.GatedRepoError),
        ("gated with a wrong token", dict(repo_id=GATED, token="hf_wrong"), E.GatedRepoError),
    ]:
        kw.setdefault("token", False)
        try:
            hf_hub_download(filename="config.json", cache_dir=os.path.join(work, "c2"), endpoint=url, **kw)
            check(False, f"{what}: no error")
        except Exception as e:  # noqa: BLE001
            check(raised(e, exc), f"{what}: {type(e).__name__}: {e}")
    for what, call, exc in [
        ("model_info unknown revision", lambda: api.model_info(REPO, revision="v9"), E.RevisionNotFoundError),
        ("model_info unknown repo", lambda: api.model_info("lithos-test/nope"), E.RepositoryNotFoundError),
    ]:
        try:
            call()
            check(False, f"{what}: no error")
        except Exception as e:  # noqa: BLE001
            check(raised(e, exc), f"{what}: {type(e).__name__}: {e}")
    p = hf_hub_download(GATED, "model-00001-of-00002.safetensors", cache_dir=os.path.join(work, "c3"),
                        endpoint=url, token=TOKEN)
    check(open(p, "rb").read() == files["model-00001-of-00002.safetensors"], "gated download with token")
    p = hf_hub_download(RENAMED, "config.json", cache_dir=os.path.join(work, "c4"), endpoint=url, token=False)
    check(open(p, "rb").read() == files["config.json"], "download through renamed id")
    return snap


def model_checks(snap):
    import torch
    from safetensors import safe_open
    from tokenizers import Tokenizer
    import transformers

    print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
    index = json.load(open(os.path.join(snap, "model.safetensors.index.json")))
    wm = index["weight_map"]
    tensors = {}
    total = 0
    for shard in sorted(set(wm.values())):
        with safe_open(os.path.join(snap, shard), framework="pt") as f:
            check(f.metadata() == {"format": "pt"}, f"{shard}: metadata {f.metadata()}")
            for k in f.keys():
                t = f.get_tensor(k)
                tensors[k] = t
                total += t.numel() * t.element_size()
                check(wm.get(k) == shard, f"{k}: in {shard}, index says {wm.get(k)}")
    check(set(tensors) == set(wm), "index and shards disagree")
    check(index["metadata"]["total_size"] == total, f"total_size {index['metadata']['total_size']} != {total}")

    dt = {torch.bfloat16: "BF16", torch.float32: "F32", torch.uint8: "U8", torch.float8_e4m3fn: "F8_E4M3"}
    qc = json.load(open(os.path.join(snap, "hf_quant_config.json")))["quantization"]
    for mod, q in qc["quantized_layers"].items():
        w = tensors.get(mod + ".weight")
        if w is None:
            check(False, f"{mod}: no weight")
            continue
        if q["quant_algo"] == "NVFP4":
            s, s2 = tensors[mod + ".weight_scale"], tensors[mod + ".weight_scale_2"]
            check(dt[w.dtype] == "U8" and dt[s.dtype] == "F8_E4M3" and dt[s2.dtype] == "F32" and s2.dim() == 0
                  and s.shape[0] == w.shape[0] and s.shape[1] * q["group_size"] == w.shape[1] * 2,
                  f"{mod}: NVFP4 {w.dtype}{list(w.shape)} {s.dtype}{list(s.shape)} {s2.dtype}{list(s2.shape)}")
            check(bool(torch.isfinite(s.float()).all()) and bool((s.float() > 0).all()), f"{mod}: block scales")
        else:
            s = tensors[mod + ".weight_scale"]
            check(dt[w.dtype] == "F8_E4M3" and dt[s.dtype] == "F32" and s.dim() == 0, f"{mod}: FP8 {w.dtype} {s.dtype}")
            check(bool(torch.isfinite(w.float()).all()), f"{mod}: FP8 codes include NaN")

    tok = Tokenizer.from_file(os.path.join(snap, "tokenizer.json"))
    text = "the tiny test, is in here\n<|im_end|>"
    enc = tok.encode(text)
    check(tok.decode(enc.ids, skip_special_tokens=False) == text, f"tokenizer round trip: {enc.tokens}")
    check(enc.ids[-1] == tok.token_to_id("<|im_end|>"), f"special token not matched: {enc.tokens}")

    cfg = transformers.AutoConfig.from_pretrained(snap)
    check(cfg.model_type == "qwen3_5" and cfg.text_config.layer_types[3] == "full_attention", f"config {cfg.model_type}")
    at = transformers.AutoTokenizer.from_pretrained(snap)
    chat = at.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    check(chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", f"chat template: {chat!r}")

    cfg.quantization_config = None
    if hasattr(cfg, "text_config"):
        cfg.text_config.quantization_config = None
    with torch.device("meta"):
        cls = getattr(transformers, "Qwen3_5ForConditionalGeneration", None)
        if cls is not None:
            model = cls._from_config(cfg)
            params = dict(model.state_dict())
        else:  # text-only class: its names lack the "language_model." level and the vision tower
            model = transformers.Qwen3_5ForCausalLM._from_config(cfg.text_config)
            params = {k.replace("model.", "model.language_model.", 1): v for k, v in model.state_dict().items()}
            tensors = {k: v for k, v in tensors.items() if not k.startswith("model.visual.")}
    quant = set(qc["quantized_layers"])
    aux = (".weight_scale", ".weight_scale_2", ".input_scale")
    for k, v in params.items():
        t = tensors.get(k)
        if t is None:
            check(False, f"model parameter {k} {list(v.shape)} missing from the checkpoint")
            continue
        mod = k[: -len(".weight")] if k.endswith(".weight") else None
        want = list(v.shape)
        if mod in quant and qc["quantized_layers"][mod]["quant_algo"] == "NVFP4":
            want = want[:-1] + [want[-1] // 2]
        check(list(t.shape) == want, f"{k}: checkpoint {list(t.shape)}, model {list(v.shape)}")
        if mod not in quant:
            check(t.dtype == torch.bfloat16, f"{k}: unquantized tensor is {t.dtype}")
    for k in tensors:
        if k not in params and not k.startswith("mtp.") and not k.endswith(aux):
            check(False, f"checkpoint tensor {k} unknown to {type(model).__name__}")
    print(f"{len(tensors)} tensors, {len(params)} model parameters checked", flush=True)


if __name__ == "__main__":
    main()
