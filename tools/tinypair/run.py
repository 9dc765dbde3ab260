#!/usr/bin/env python3
"""Train and export the tiny coder pair (issue 8): a Qwen3.5-hybrid target and its DSpark drafter.

Run on the device machine (PyTorch, transformers with Qwen3_5ForCausalLM, tokenizers, safetensors,
numpy; one GPU), from the repository root:

    PYTHONUNBUFFERED=1 python3 tools/tinypair/run.py --out $OUT            # everything (~8 minutes)
    python3 tools/tinypair/run.py --out $OUT --smoke                      # tiny budgets, to test the code
    python3 tools/tinypair/run.py --out $OUT --resume DIR                 # skip the target: DIR holds a
                                                                          # previous run's target output

Stages (tools/tinypair/README.md says more; every number, seed, version and timing goes to the log):
  1. corpus: the interpreter's Python standard library (corpus.py: file list, split, sha256);
  2. tokenizer: byte-level BPE, 4096 tokens, Qwen3's split regex and pipeline, chat template;
  3. target: Qwen3_5ForCausalLM (target.py SPEC), bf16 autocast, AdamW, held-out loss;
  4. export: ModelOpt mixed layout (NVFP4 MLP + lm_head, FP8 projections, BF16 rest), reloaded and
     checked; held-out loss of the dequantized checkpoint in float32;
  5. greedy data: the dequantized target's greedy continuations of training and held-out prompts;
  6. drafter: DSpark (tools/dspark_ref.py), trained on the target's taps and greedy continuations;
  7. acceptance: round simulation on held-out prompts (BF16 drafter and its NVFP4 re-quantization);
  8. goldens: a fixed held-out prompt, the target's 32-token greedy continuation (FP32, CPU, no cache)
     and the drafter's first-round proposal; model cards; the log.

Output under --out (the device's $OUT; at most 8 files of at most 16 MiB, so tars are split):
  target.tar.NN   hub/lithos-test/tiny-coder-NVFP4/ and work/ (greedy data), after stage 4/5
  pair.tar.NN     hub/lithos-test/tiny-coder-DSpark/, the final target README.md and
                  training_log.json, goldens/tinypair/
  run_log.json    the whole record
Reassemble here: cat target.tar.* | tar x -C DEST; cat pair.tar.* | tar x -C DEST.
"""

import argparse
import hashlib
import io
import json
import os
import platform
import shutil
import sys
import tarfile
import time
import unicodedata

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import corpus  # noqa: E402
import target as tg  # noqa: E402
import drafter as dr  # noqa: E402

GENERATOR = "tools/tinypair/run.py"
ORG = "lithos-test"
TARGET_REPO = "tiny-coder-NVFP4"
DRAFT_REPO = "tiny-coder-DSpark"
SEED = 20260801
TAPS = [1, 3, 5, 7]
PART = 15 * 1024 * 1024
GOLDEN_STEPS = 32

LOG = {"generator": GENERATOR, "checks": [], "failures": [], "timings": {}}
T0 = time.time()


def check(ok, what):
    LOG["checks"].append({"ok": bool(ok), "what": what})
    if not ok:
        LOG["failures"].append(what)
        print(f"CHECK FAILED: {what}", flush=True)
    return ok


def timing(name, t):
    LOG["timings"][name] = round(time.time() - t, 2)
    print(f"[{time.time() - T0:6.1f}s] {name}: {time.time() - t:.1f}s", flush=True)


def jdump(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, default=_jdefault)
        f.write("\n")


def _jdefault(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, torch.Tensor):
        return o.tolist()
    return str(o)


def sha_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def tar_split(out_dir, name, base, members):
    """Writes base/members as one tar split into PART-byte files out_dir/name.00, .01, ..."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for m in members:
            tf.add(os.path.join(base, m), arcname=m)
    data = buf.getvalue()
    for old in os.listdir(out_dir):
        if old.startswith(name + "."):
            os.remove(os.path.join(out_dir, old))
    n = 0
    for i in range(0, len(data), PART):
        with open(os.path.join(out_dir, f"{name}.{n:02d}"), "wb") as f:
            f.write(data[i:i + PART])
        n += 1
    print(f"wrote {name}: {len(data)} bytes in {n} parts", flush=True)
    return {"bytes": len(data), "parts": n, "sha256": hashlib.sha256(data).hexdigest()}


def qg_failures():
    """Self-check failures recorded by tools/qwen35_goldens.py's helpers (config round trip)."""
    out = list(tg.qg._failures)
    tg.qg._failures.clear()
    return out


def versions():
    import tokenizers
    import transformers
    import safetensors
    v = {"python": sys.version, "platform": platform.platform(), "torch": torch.__version__,
         "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
         "safetensors": safetensors.__version__, "numpy": np.__version__,
         "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    if torch.cuda.is_available():
        v["gpu"] = torch.cuda.get_device_name(0)
    return v


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/tinypair-out"))
    ap.add_argument("--stage", default="/tmp/tinypair-stage", help="working directory for the outputs")
    ap.add_argument("--resume", default=None, help="directory with hub/lithos-test/tiny-coder-NVFP4 and work/ of a previous run")
    ap.add_argument("--smoke", action="store_true", help="tiny budgets: checks the code end to end")
    ap.add_argument("--seed", type=int, default=SEED)
    # target
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--lr-floor", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--target-seconds", type=float, default=180.0)
    ap.add_argument("--target-steps", type=int, default=0, help="fixed step count (0: what fits --target-seconds)")
    ap.add_argument("--eval-every", type=int, default=20, help="validation every N steps (best step kept)")
    ap.add_argument("--max-epochs", type=float, default=16.0, help="cap on target training tokens, in passes over the training stream")
    # greedy data
    ap.add_argument("--gen-prompts", type=int, default=12288)
    ap.add_argument("--gen-prompt-len", type=int, default=128)
    ap.add_argument("--gen-new", type=int, default=192)
    ap.add_argument("--gen-batch", type=int, default=2048)
    ap.add_argument("--eval-prompts", type=int, default=256)
    ap.add_argument("--eval-prompt-len", type=int, default=192)
    ap.add_argument("--eval-new", type=int, default=128)
    # drafter
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--draft-intermediate", type=int, default=1024)
    ap.add_argument("--markov-rank", type=int, default=64)
    ap.add_argument("--draft-lr", type=float, default=2e-3)
    ap.add_argument("--draft-wd", type=float, default=0.01)
    ap.add_argument("--draft-warmup", type=int, default=50)
    ap.add_argument("--draft-batch", type=int, default=64)
    ap.add_argument("--anchors", type=int, default=24)
    ap.add_argument("--draft-decay", type=float, default=4.0)
    ap.add_argument("--conf-weight", type=float, default=0.1)
    ap.add_argument("--draft-seconds", type=float, default=150.0)
    ap.add_argument("--draft-steps", type=int, default=0)
    a = ap.parse_args()
    if a.smoke:
        a.seq, a.batch, a.target_steps, a.eval_every, a.warmup = 256, 16, 30, 10, 10
        a.gen_prompts, a.gen_new, a.gen_batch = 128, 48, 128
        a.eval_prompts, a.eval_new = 16, 32
        a.draft_steps, a.draft_batch, a.draft_warmup = 30, 16, 10
    return a


# ------------------------------------------------------------------ stages ----

def stage_corpus():
    t = time.time()
    stdlib, files, excluded = corpus.gather()
    rec = corpus.corpus_record(stdlib, files, excluded)
    LOG["corpus"] = {k: v for k, v in rec.items() if k not in ("files", "excluded")}
    LOG["corpus"]["n_excluded"] = len(excluded)
    print(f"corpus: {rec['n_files']} files ({rec['n_train']} train, {rec['n_heldout']} held out), "
          f"{rec['bytes_all']} bytes, python {sys.version.split()[0]} at {stdlib}", flush=True)
    check(rec["n_heldout"] >= 10 and rec["n_train"] >= 200, f"corpus has enough files ({rec['n_train']} train, {rec['n_heldout']} held out)")
    timing("corpus", t)
    return files, rec


def stage_tokenizer(train_texts, held_texts, repo_dir, resume):
    from tokenizers import Tokenizer
    t = time.time()
    if resume:
        tok = Tokenizer.from_file(os.path.join(repo_dir, "tokenizer.json"))
    else:
        tok, d = corpus.train_tokenizer(train_texts, ROOT)
        os.makedirs(repo_dir, exist_ok=True)
        tok.save(os.path.join(repo_dir, "tokenizer.json"), pretty=True)
        jdump(os.path.join(repo_dir, "tokenizer_config.json"), corpus.tokenizer_config(ROOT))
        tok = Tokenizer.from_file(os.path.join(repo_dir, "tokenizer.json"))
    # Round trip and compression on the held-out files.
    encs = tok.encode_batch(held_texts, add_special_tokens=False)
    bad = sum(1 for e, s in zip(encs, held_texts) if tok.decode(e.ids, skip_special_tokens=False) != unicodedata.normalize("NFC", s))
    ntok = sum(len(e.ids) for e in encs)
    nbytes = sum(len(s.encode()) for s in held_texts)
    check(bad == 0, f"tokenizer: decode(encode(x)) == NFC(x) for every held-out file ({bad} differ)")
    rec = {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "bpe_merges_vocab": corpus.BPE_SIZE,
           "added_tokens": {c: corpus.token_id(c) for c, _ in corpus.ADDED},
           "heldout_bytes_per_token": round(nbytes / max(ntok, 1), 4), "heldout_tokens": ntok,
           "pre_tokenizer": "Qwen3 tokenizer.json (testdata/tokenizer/qwen3) normalizer/pre_tokenizer/post_processor/decoder, verbatim",
           "chat_template": "Qwen3's (testdata/tokenizer/qwen3/tokenizer_config.json), verbatim",
           "tokenizer_json_sha256": sha_file(os.path.join(repo_dir, "tokenizer.json"))}
    # transformers' view of the same files.
    try:
        from transformers import AutoTokenizer
        ht = AutoTokenizer.from_pretrained(repo_dir)
        same = all(ht.encode(s, add_special_tokens=False) == e.ids for s, e in zip(held_texts[:8], encs[:8]))
        check(same, "transformers' AutoTokenizer encodes held-out files as tokenizers does")
        msgs = [{"role": "user", "content": "Write the Python module `x/y.py`."},
                {"role": "assistant", "content": "import os\n"}]
        r = ht.apply_chat_template(msgs, tokenize=False)
        check(r == corpus.chat_document("x/y.py", "import os\n"),
              f"the chat template renders the training chat format exactly (got {r!r})")
        gp = ht.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
        rec["chat_generation_prompt_example"] = gp
        rec["transformers_tokenizer_class"] = type(ht).__name__
    except Exception as e:  # noqa: BLE001
        check(False, f"transformers tokenizer check: {type(e).__name__}: {e}")
    LOG["tokenizer"] = rec
    print(f"tokenizer: {rec['vocab_size']} tokens, {rec['heldout_bytes_per_token']} bytes/token held out", flush=True)
    timing("tokenizer", t)
    return tok


def streams(tok, train_files, valid_files, held_files, seed):
    t = time.time()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(train_files))
    chat = rng.random(len(train_files)) < corpus.CHAT_FRACTION
    texts = []
    for j, i in enumerate(order):
        rel, _, text, _ = train_files[i]
        texts.append(corpus.chat_document(rel, text) if chat[j] else text)
    ids = []
    for e in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(e.ids)
        ids.append(corpus.EOT)
    def plain(fs):
        out = []
        for e in tok.encode_batch([f[2] for f in fs], add_special_tokens=False):
            out.extend(e.ids)
            out.append(corpus.EOT)
        return torch.tensor(out, dtype=torch.int32)

    tr = torch.tensor(ids, dtype=torch.int32)
    va = plain(valid_files)
    ho = plain(held_files)
    LOG["streams"] = {"train_tokens": tr.numel(), "valid_tokens": va.numel(), "heldout_tokens": ho.numel(),
                      "valid_and_heldout": "files in path order, each followed by <|endoftext|>, no chat wrapping",
                      "chat_documents": int(chat.sum()), "chat_fraction": corpus.CHAT_FRACTION,
                      "document_order": "numpy default_rng(seed).permutation; chat = rng.random() < fraction, in that order",
                      "train_sha256_int32le": hashlib.sha256(tr.numpy().astype("<i4").tobytes()).hexdigest(),
                      "heldout_sha256_int32le": hashlib.sha256(ho.numpy().astype("<i4").tobytes()).hexdigest()}
    print(f"streams: {tr.numel()} train, {va.numel()} validation, {ho.numel()} held-out tokens", flush=True)
    timing("tokenize", t)
    return tr, va, ho


def demo_prompts(tok, held_files):
    """Candidates for the fixed held-out prompt, in order: for each held-out file (sorted by path,
    codec tables under encodings/ skipped), its first top-level one-line function signature
    (a line starting with "def " and ending with ":", at line index >= 8) with as many whole
    lines before it as fit in 200 tokens; the prompt ends with that line's newline. The first
    candidate whose 32 greedy steps all have a top-1 / top-2 logit gap >= 1e-3 is used (so float32
    rounding cannot flip a golden token)."""
    for rel, _, text, _ in held_files:
        if rel.startswith("encodings/"):
            continue
        lines = text.splitlines(keepends=True)
        for j, line in enumerate(lines):
            if j >= 8 and line.startswith("def ") and line.rstrip().endswith(":") and line.endswith("\n"):
                start = j
                while start > 0 and len(tok.encode("".join(lines[start - 1:j + 1]), add_special_tokens=False).ids) <= 200:
                    start -= 1
                p = "".join(lines[start:j + 1])
                if len(tok.encode(p, add_special_tokens=False).ids) >= 40:
                    yield rel, p
                break


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    if os.path.exists(args.stage):
        shutil.rmtree(args.stage)
    hub = os.path.join(args.stage, "hub", ORG)
    tdir = os.path.join(hub, TARGET_REPO)
    ddir = os.path.join(hub, DRAFT_REPO)
    gdir = os.path.join(args.stage, "goldens", "tinypair")
    wdir = os.path.join(args.stage, "work")
    for d in (tdir, ddir, gdir, wdir):
        os.makedirs(d, exist_ok=True)
    LOG["args"] = vars(args)
    LOG["versions"] = versions()
    LOG["seeds"] = {"base": args.seed, "target_init": args.seed, "target_batches": args.seed + 1,
                    "calibration": args.seed + 2, "gen_prompts": args.seed + 3, "draft_init": args.seed + 10,
                    "draft_batches": args.seed + 11, "document_order": args.seed}
    print(json.dumps(LOG["versions"]), flush=True)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    files, crec = stage_corpus()
    train_files = [f for f in files if f[3] == "train"]
    valid_files = [f for f in files if f[3] == "valid"]
    held_files = [f for f in files if f[3] == "heldout"]
    if args.resume:
        src = os.path.join(args.resume, "hub", ORG, TARGET_REPO)
        for fn in os.listdir(src):
            shutil.copy(os.path.join(src, fn), os.path.join(tdir, fn))
        for fn in os.listdir(os.path.join(args.resume, "work")):
            shutil.copy(os.path.join(args.resume, "work", fn), os.path.join(wdir, fn))
        prev = json.load(open(os.path.join(tdir, "training_log.json")))
        LOG["resumed_from"] = {"dir": args.resume, "previous_log_failures": prev.get("failures")}
        for k in ("tokenizer", "streams", "target", "export", "greedy_data"):
            if k in prev:
                LOG[k] = prev[k]
        check(prev["corpus"]["sha256_all"] == crec["sha256_all"], "resume: same corpus as the previous run")
    else:
        jdump(os.path.join(tdir, "corpus.json"), crec)
    tok = stage_tokenizer([f[2] for f in train_files], [f[2] for f in held_files], tdir, bool(args.resume))
    tr, va, ho = streams(tok, train_files, valid_files, held_files, args.seed)
    if args.resume:
        check(LOG["streams"]["train_sha256_int32le"] == prev["streams"]["train_sha256_int32le"],
              "resume: same training token stream")
    tr_g, va_g, ho_g = tr.to(dev), va.to(dev), ho.to(dev)

    from transformers import Qwen3_5ForCausalLM  # noqa: F401
    if not args.resume:
        run_target(args, tr_g, va_g, ho_g, tdir, wdir, dev, tok, held_files)
        write_target_card(tdir, final=False)
        jdump(os.path.join(tdir, "training_log.json"), LOG)
        LOG["target_tar"] = tar_split(args.out, "target.tar", args.stage,
                                      [f"hub/{ORG}/{TARGET_REPO}", "work"])
    run_drafter(args, tr_g, ho_g, tdir, ddir, gdir, wdir, dev, tok, held_files)
    LOG["timings"]["total"] = round(time.time() - T0, 1)
    write_target_card(tdir, final=True)
    write_draft_card(ddir)
    jdump(os.path.join(tdir, "training_log.json"), {k: v for k, v in LOG.items() if k not in ("drafter", "acceptance", "goldens")})
    jdump(os.path.join(ddir, "training_log.json"), LOG)
    sizes = {}
    for d in (tdir, ddir):
        for fn in sorted(os.listdir(d)):
            sizes[f"{os.path.basename(d)}/{fn}"] = os.path.getsize(os.path.join(d, fn))
    LOG["sizes"] = sizes
    LOG["sizes_total_bytes"] = sum(sizes.values())
    check(LOG["sizes_total_bytes"] < 40_000_000, f"both repos together under 40 MB ({LOG['sizes_total_bytes']} bytes)")
    jdump(os.path.join(ddir, "training_log.json"), LOG)
    members = [f"hub/{ORG}/{DRAFT_REPO}", f"hub/{ORG}/{TARGET_REPO}/README.md",
               f"hub/{ORG}/{TARGET_REPO}/training_log.json", "goldens/tinypair"]
    if args.resume:
        members.append(f"hub/{ORG}/{TARGET_REPO}")
        members = [m for m in members if not m.startswith(f"hub/{ORG}/{TARGET_REPO}/")]
    tar_split(args.out, "pair.tar", args.stage, members)
    jdump(os.path.join(args.out, "run_log.json"), LOG)
    print(f"done in {time.time() - T0:.0f}s; failures: {LOG['failures']}", flush=True)
    return 1 if LOG["failures"] else 0


def run_target(args, tr, va, ho, tdir, wdir, dev, tok, held_files):
    t = time.time()
    model, tcfg, impl = tg.build_model(args.seed)
    model.to(dev)
    n = tg.n_params(model)
    LOG["target"] = {"spec": tg.SPEC, "params": n, "attn_implementation": impl,
                     "layer_types": list(tcfg.layer_types),
                     "optimizer": {"name": "AdamW (fused)", "lr": args.lr, "betas": [0.9, 0.95], "eps": 1e-8,
                                   "weight_decay": args.wd, "decay_on": "2-D weights except embed_tokens",
                                   "warmup_steps": args.warmup, "schedule": f"linear warmup, cosine to {args.lr_floor} x lr",
                                   "grad_clip": args.clip},
                     "batch": {"sequences": args.batch, "seq_len": args.seq,
                               "sampling": "uniform random windows of the training stream (torch CUDA generator, seed+1)"},
                     "precision": "float32 master weights, bf16 autocast, TF32 allowed in training"}
    print(f"target: {n} parameters, attention {impl}", flush=True)
    errs = tg.causality(model, dev, tg.SPEC["vocab"])
    LOG["target"]["causality_init"] = errs
    if not check(max(errs.values()) < 1e-4, f"target causal at init (prefix rel err {errs})"):
        raise SystemExit("the target's attention is not causal: training would be wrong")
    tg.train(model, tr, va, args, LOG["target"])
    timing("target_train", t)

    t = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    hl_master, cnt = tg.heldout_loss(model, ho, args.seq, 16, autocast=False)
    LOG["target"]["heldout_loss_fp32_master"] = hl_master
    LOG["target"]["heldout_tokens_scored"] = cnt
    amax = tg.calibrate(model, tr, args.seq, 64, args.seed + 2)
    ckpt, deq, formats, qlayers, exclude = tg.quantize_export(model, amax)
    hf_quant, quant_cfg = tg.quant_configs(qlayers, exclude, f"{GENERATOR} (ModelOpt-style, not ModelOpt)")
    cfgd = tg.config_json(tcfg, quant_cfg, eos=corpus.IM_END, pad=corpus.EOT)
    for f in qg_failures():
        check(False, f)
    jdump(os.path.join(tdir, "config.json"), cfgd)
    jdump(os.path.join(tdir, "hf_quant_config.json"), hf_quant)
    jdump(os.path.join(tdir, "generation_config.json"),
          {"bos_token_id": None, "do_sample": False, "eos_token_id": [corpus.IM_END, corpus.EOT],
           "pad_token_id": corpus.EOT, "transformers_version": LOG["versions"]["transformers"]})
    mpath = os.path.join(tdir, "model.safetensors")
    save_file(ckpt, mpath, metadata={"format": "pt"})
    back = tg.load_quantized(mpath)
    check(set(back) == set(deq) and all(torch.equal(back[k], deq[k]) for k in deq),
          "model.safetensors reloads to exactly the dequantized weights")
    fcount = {}
    for v in formats.values():
        fcount[v] = fcount.get(v, 0) + 1
    LOG["export"] = {"formats": fcount, "tensors": len(ckpt), "model_safetensors_bytes": os.path.getsize(mpath),
                     "model_safetensors_sha256": sha_file(mpath), "input_amax": amax,
                     "calibration": "max |input| of each quantized Linear over 64 random training windows (float32)"}
    # The dequantized checkpoint, float32.
    qm = tg.fresh_model(tcfg)
    res = qm.load_state_dict(deq, strict=True)
    qm.to(dev).eval()
    errs = tg.causality(qm, dev, tg.SPEC["vocab"])
    check(max(errs.values()) < 1e-4, f"dequantized target causal (prefix rel err {errs})")
    hl_q, _ = tg.heldout_loss(qm, ho, args.seq, 16, autocast=False)
    LOG["target"]["heldout_loss_fp32_dequantized"] = hl_q
    LOG["target"]["heldout_bits_per_byte_dequantized"] = hl_q / np.log(2) / LOG["tokenizer"]["heldout_bytes_per_token"]
    print(f"held-out loss: master {hl_master:.4f}, dequantized {hl_q:.4f} nats/token", flush=True)
    del model
    timing("export", t)
    run_greedy_data(args, qm, tr, ho, wdir, dev, tok, held_files)
    return qm


def load_target(tdir, dev):
    from transformers import Qwen3_5Config
    cfg = json.load(open(os.path.join(tdir, "config.json")))
    tcfg = Qwen3_5Config.from_dict(cfg).text_config
    qm = tg.fresh_model(tcfg)
    qm.load_state_dict(tg.load_quantized(os.path.join(tdir, "model.safetensors")), strict=True)
    return qm.to(dev).eval()


def run_greedy_data(args, qm, tr, ho, wdir, dev, tok, held_files):
    t = time.time()
    # transformers' cached decoding vs recomputation without cache.
    p = tr[1000:1000 + 64].long().tolist()
    toks, margins, _ = tg.greedy_recompute(qm, p, 24, dev)
    gen = tg.generate(qm, torch.tensor([p], device=dev), 24, 1, corpus.EOT)[0, 64:].tolist()
    agree = gen == toks
    check(agree or min(margins) < 1e-3, f"cached generate == recompute for 24 greedy steps ({gen} vs {toks})")
    g = torch.Generator(device=dev).manual_seed(args.seed + 3)
    starts = torch.randint(0, tr.numel() - args.gen_prompt_len - 1, (args.gen_prompts,), generator=g, device=dev)
    prompts = tr[starts[:, None] + torch.arange(args.gen_prompt_len, device=dev)].long()
    seqs = tg.generate(qm, prompts, args.gen_new, args.gen_batch, corpus.EOT)
    ne = args.eval_prompts
    L = ho.numel() - args.eval_prompt_len - 1
    estarts = torch.linspace(0, L, ne).long().to(dev)
    eprompts = ho[estarts[:, None] + torch.arange(args.eval_prompt_len, device=dev)].long()
    eseqs = tg.generate(qm, eprompts, args.eval_new, min(args.gen_batch, 512), corpus.EOT)
    torch.save({"train": seqs.to(torch.int16), "eval": eseqs.to(torch.int16),
                "train_prompt_len": args.gen_prompt_len, "eval_prompt_len": args.eval_prompt_len},
               os.path.join(wdir, "greedy.pt"))
    gt = seqs[:, args.gen_prompt_len:]
    LOG["greedy_data"] = {
        "train_sequences": seqs.shape[0], "train_prompt_len": args.gen_prompt_len, "train_new": args.gen_new,
        "eval_sequences": eseqs.shape[0], "eval_prompt_len": args.eval_prompt_len, "eval_new": args.eval_new,
        "eval_prompts": "held-out stream windows at torch.linspace(0, len - prompt - 1, n) starts",
        "train_prompts": "uniform random windows of the training stream (CUDA generator, seed+3)",
        "model": "dequantized target, float32, TF32 off, transformers' cached generate (greedy, no EOS stop)",
        "cached_vs_recompute_agree": agree,
        "eot_fraction_in_continuations": round(float((gt == corpus.EOT).float().mean()), 5),
        "distinct_continuation_tokens": int(torch.unique(gt).numel()),
        "sample_continuations": [tok.decode(eseqs[i].tolist()[args.eval_prompt_len - 48:], skip_special_tokens=False)
                                 for i in range(0, min(ne, 64), 16)],
    }
    timing("greedy_data", t)


def run_drafter(args, tr, ho, tdir, ddir, gdir, wdir, dev, tok, held_files):
    import dspark_ref
    from dspark_ref import DSparkDraft
    t = time.time()
    qm = load_target(tdir, dev)
    data = torch.load(os.path.join(wdir, "greedy.pt"))
    seqs = data["train"].long().to(dev)
    eseqs = data["eval"].long()
    lp, elp = data["train_prompt_len"], data["eval_prompt_len"]
    embed_w = qm.model.embed_tokens.weight.detach()
    lm_w = qm.lm_head.weight.detach()
    # Taps: check the hook reading against output_hidden_states once (recorded, not required).
    with torch.no_grad():
        x = seqs[:2]
        tp = tg.layer_taps(qm, x, TAPS)
        try:
            hs = qm(input_ids=x, use_cache=False, output_hidden_states=True).hidden_states
            LOG["taps_vs_hidden_states"] = {f"hidden_states[{i + 1}] - hook(layer {i})": tg.rel_err(hs[i + 1], tp[..., j * 512:(j + 1) * 512])
                                            for j, i in enumerate(TAPS)}
            LOG["taps_vs_hidden_states"]["len(hidden_states)"] = len(hs)
        except Exception as e:  # noqa: BLE001
            LOG["taps_vs_hidden_states"] = f"{type(e).__name__}: {e}"
        feats = torch.empty(seqs.shape[0], seqs.shape[1], len(TAPS) * tg.SPEC["hidden"], dtype=torch.bfloat16, device=dev)
        for i in range(0, seqs.shape[0], 256):
            feats[i:i + 256] = tg.layer_taps(qm, seqs[i:i + 256], TAPS).to(torch.bfloat16)
        efeats = torch.cat([tg.layer_taps(qm, eseqs[i:i + 64].to(dev), TAPS).cpu() for i in range(0, eseqs.shape[0], 64)])
    timing("taps", t)

    t = time.time()
    cfg = dr.draft_config(tg.SPEC, corpus.MASK, TAPS, args.draft_layers, args.draft_intermediate, args.markov_rank)
    m = DSparkDraft(cfg)
    dr.init_draft(m, args.seed + 10)
    m.to(dev)
    nparams = sum(p.numel() for p in m.parameters())
    LOG["drafter"] = {"config": cfg, "params": nparams, "dspark_ref_sha256": sha_file(dspark_ref.__file__),
                      "training": {"lr": args.draft_lr, "wd": args.draft_wd, "warmup": args.draft_warmup,
                                   "batch_sequences": args.draft_batch, "anchors_per_sequence": args.anchors,
                                   "loss": f"exp(-k/{args.draft_decay})-weighted CE of teacher-forced Markov logits + "
                                           f"{args.conf_weight} x confidence BCE on cumprod(hit)",
                                   "precision": "float32 master, bf16 autocast; target taps stored bf16",
                                   "target": "dequantized checkpoint (float32), frozen; embed_tokens and lm_head from it"}}
    print(f"drafter: {nparams} parameters", flush=True)
    dr.train(m, feats, seqs, lp, embed_w, lm_w, args, LOG["drafter"])
    del feats
    timing("draft_train", t)

    t = time.time()
    sd = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in m.state_dict().items()}
    save_file(sd, os.path.join(ddir, "model.safetensors"), metadata={"format": "pt"})
    jdump(os.path.join(ddir, "config.json"), cfg)
    mb = dspark_ref.load_draft(ddir, dtype=torch.float32, device=dev)
    rec, per_seq = dr.acceptance(mb, efeats, eseqs, elp, embed_w, lm_w)
    LOG["acceptance"] = {"bf16_drafter": rec}
    mq = dr.nvfp4_copy(mb)
    recq, _ = dr.acceptance(mq, efeats, eseqs, elp, embed_w, lm_w)
    LOG["acceptance"]["nvfp4_drafter"] = recq
    LOG["acceptance"]["how"] = ("held-out prompts (see greedy_data); target = dequantized checkpoint, float32; drafter float32 "
                                "with its exported BF16 weights (bf16_drafter) or those re-quantized to NVFP4 as "
                                "lithos-pack does by default (nvfp4_drafter); greedy chain; rounds from P = prompt length")
    print(f"acceptance (bf16 drafter): {rec['tokens_per_round_mean']} tokens/round, by position {rec['accept_rate_by_position']}", flush=True)
    print(f"acceptance (nvfp4 drafter): {recq['tokens_per_round_mean']} tokens/round", flush=True)
    timing("acceptance", t)

    t = time.time()
    goldens(args, qm, mb, mq, tok, held_files, gdir, dev)
    timing("goldens", t)


def goldens(args, qm, mb, mq, tok, held_files, gdir, dev):
    cpu = torch.device("cpu")
    qc = qm.to(cpu)
    tries = []
    for rel, text in demo_prompts(tok, held_files):
        ids = tok.encode(text, add_special_tokens=False).ids
        toks, margins, rows = tg.greedy_recompute(qc, ids, GOLDEN_STEPS, cpu)
        tries.append({"file": rel, "min_margin": min(margins)})
        if min(margins) >= 1e-3 or len(tries) >= 6:
            break
    check(min(margins) >= 1e-3, f"demo prompt with greedy margins >= 1e-3 (tries {tries})")
    qm.to(dev)
    # Long run on the GPU: 128 greedy tokens, simulated rounds.
    seq = tg.generate(qm, torch.tensor([ids], device=dev), 128, 1, corpus.EOT)
    with torch.no_grad():
        f = tg.layer_taps(qm, seq.to(dev), TAPS).cpu()
    demo_rec, _ = dr.acceptance(mb, f, seq, len(ids), qm.model.embed_tokens.weight.detach(), qm.lm_head.weight.detach())
    demo_recq, _ = dr.acceptance(mq, f, seq, len(ids), qm.model.embed_tokens.weight.detach(), qm.lm_head.weight.detach())
    # CPU float32 goldens.
    qc = qm.to(cpu)
    mc = mb.to(cpu)
    mqc = mq.to(cpu)
    full = torch.tensor([ids + toks], dtype=torch.long)
    with torch.no_grad():
        lg = qc(input_ids=full, use_cache=False).logits[0, len(ids) - 1:-1].float()
        one_pass = [int(x) for x in lg.argmax(-1).tolist()] == toks
        taps = tg.layer_taps(qc, full, TAPS)[0]  # [L, F]
    check(one_pass, "one forward over prompt + greedy continuation gives the recomputed greedy tokens")
    LOG["demo_cpu_vs_gpu_greedy_agree"] = toks == seq[0, len(ids):len(ids) + GOLDEN_STEPS].tolist()
    embed_c = qc.model.embed_tokens.weight.detach()
    lm_c = qc.lm_head.weight.detach()
    P = len(ids)
    anchor = toks[0]
    out = {}
    for name, dm in (("draft", mc), ("draft_nvfp4", mqc)):
        ctx = dm.context(taps[:P].to(torch.float32), 0)
        dt, adj, conf, base, hn = dm.draft(ctx, anchor, embed_c, lm_c)
        truth = toks[1:1 + dr.BLOCK]
        a = 0
        while a < dr.BLOCK and int(dt[a]) == truth[a]:
            a += 1
        top2 = torch.topk(adj, 2, dim=-1).values
        out[name] = {"tokens": [int(x) for x in dt], "confidence": [float(x) for x in conf],
                     "accepted": a, "margin": [float(x) for x in (top2[:, 0] - top2[:, 1])]}
        out[name + "_logits"] = adj.float().contiguous()
    sim32, _ = dr.acceptance(mc, taps[None], full, P, embed_c, lm_c)
    with torch.no_grad():
        ot = mc.forward_train(taps[None], full, torch.tensor([[P]]), embed_c, lm_c)
        tt, _ = dr.greedy_chain_all(mc, ot, full[:, [P]])
    check(tt[0, 0].tolist() == out["draft"]["tokens"],
          f"drafter: batched forward_train + chain == context + draft for the first round ({tt[0, 0].tolist()} vs {out['draft']['tokens']})")
    check(sim32["rounds_accepted"][0] == out["draft"]["accepted"], "round simulation's first round == the golden first round")
    g = {
        "prompt": torch.tensor(ids, dtype=torch.int32),
        "greedy": torch.tensor(toks, dtype=torch.int32),
        "greedy_margin": torch.tensor(margins, dtype=torch.float32),
        "greedy_logits": rows[:8].contiguous(),
        "draft.tokens": torch.tensor(out["draft"]["tokens"], dtype=torch.int32),
        "draft.confidence": torch.tensor(out["draft"]["confidence"], dtype=torch.float32),
        "draft.logits": out["draft_logits"],
        "draft_nvfp4.tokens": torch.tensor(out["draft_nvfp4"]["tokens"], dtype=torch.int32),
        "draft_nvfp4.confidence": torch.tensor(out["draft_nvfp4"]["confidence"], dtype=torch.float32),
        "draft_nvfp4.logits": out["draft_nvfp4_logits"],
    }
    save_file(g, os.path.join(gdir, "goldens.safetensors"), metadata={"generator": GENERATOR})
    rec = {
        "generator": GENERATOR,
        "prompt_file": rel,
        "prompt_rule": " ".join(demo_prompts.__doc__.split()),
        "prompt_tries": tries,
        "prompt_text": text,
        "prompt_tokens": len(ids),
        "greedy_text": tok.decode(toks, skip_special_tokens=False),
        "greedy_tokens": toks,
        "greedy_min_margin": min(margins),
        "oracle": "transformers Qwen3_5ForCausalLM, float32 on the CPU, weights = the exported checkpoint dequantized "
                  "(ModelOpt order), greedy recomputed without cache at every step",
        "first_round": {"anchor": anchor, "anchor_position": P, "target_next_7": toks[1:1 + dr.BLOCK],
                        "bf16_drafter": out["draft"], "nvfp4_drafter": out["draft_nvfp4"],
                        "drafter_oracle": "tools/dspark_ref.py DSparkDraft.context + draft, float32 on the CPU; context = "
                                          f"taps (outputs of target layers {TAPS}) of the {P} prompt tokens; nvfp4_drafter = "
                                          "its linears re-quantized as lithos-pack does (ModelOpt NVFP4, true division)"},
        "rounds_over_32_tokens_bf16_cpu": sim32,
        "rounds_over_128_tokens_gpu": {"bf16_drafter": demo_rec, "nvfp4_drafter": demo_recq,
                                       "continuation_text": tok.decode(seq[0, len(ids):].tolist(), skip_special_tokens=False)},
        "tensors": {k: {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)} for k, v in g.items()},
    }
    jdump(os.path.join(gdir, "goldens.json"), rec)
    LOG["goldens"] = {k: rec[k] for k in ("prompt_file", "prompt_tokens", "greedy_text", "first_round",
                                          "rounds_over_32_tokens_bf16_cpu")}
    LOG["goldens"]["demo_tokens_per_round_128"] = {"bf16": demo_rec["tokens_per_round_mean"],
                                                   "nvfp4": demo_recq["tokens_per_round_mean"]}
    print(f"demo prompt {rel}: first round accepted {out['draft']['accepted']} (bf16) / "
          f"{out['draft_nvfp4']['accepted']} (nvfp4); 128-token run {demo_rec['tokens_per_round_mean']} tokens/round", flush=True)
    qm.to(dev)


# -------------------------------------------------------------- model cards ----

def fmt(x, n=4):
    return "n/a" if x is None else f"{x:.{n}f}"


def write_target_card(tdir, final):
    tgt = LOG.get("target", {})
    cor = LOG.get("corpus", {})
    tokr = LOG.get("tokenizer", {})
    acc = LOG.get("acceptance", {}).get("bf16_drafter", {})
    s = tg.SPEC
    lines = [
        "---",
        "license: apache-2.0",
        "library_name: transformers",
        "pipeline_tag: text-generation",
        "tags: [lithos-test, qwen3_5, modelopt, nvfp4, fp8, code]",
        "---",
        f"# {ORG}/{TARGET_REPO}",
        "",
        "A tiny Python-code model with the Qwen3.5 hybrid architecture (Gated DeltaNet + gated full attention),",
        "trained from scratch for lithos' tests and demo, and exported in the NVIDIA ModelOpt mixed layout that",
        "Qwen3.5 NVFP4 checkpoints use. It is a toy: it continues Python source plausibly, knows nothing else,",
        f"and its default draft head is [{ORG}/{DRAFT_REPO}](../{DRAFT_REPO}) (DSpark).",
        "",
        "## Model",
        f"- `Qwen3_5ForConditionalGeneration` layout without a vision tower (no `vision_config`; tensors named",
        f"  `model.language_model.*`, `lm_head.weight`), {tgt.get('params', 0) / 1e6:.1f} M parameters: {s['layers']} layers",
        f"  (`[GDN GDN GDN ATT] x 2`), hidden {s['hidden']}, MLP {s['intermediate']}, {s['heads']} query / {s['kv_heads']} KV heads",
        f"  of {s['head_dim']} (32 rotary dims, theta 1e7), GDN {s['lin_k_heads']} key / {s['lin_v_heads']} value heads of 64,",
        f"  vocabulary {s['vocab']}, untied head.",
        "- Quantization (`hf_quant_config.json`, `config.json` `quantization_config`, `MIXED_PRECISION`): MLP",
        "  gate/up/down and `lm_head` NVFP4 (U8 codes, E4M3 block scales per 16, F32 `weight_scale_2`, calibrated",
        "  `input_scale`); GDN `in_proj_qkv`/`in_proj_z`/`out_proj` and attention `q/k/v/o_proj` FP8 E4M3 per tensor;",
        "  embeddings, norms, `in_proj_a/b`, `conv1d`, `dt_bias` BF16, `A_log` F32. Written by `tools/tinypair`",
        "  (ModelOpt's rules re-implemented in PyTorch, not ModelOpt itself).",
        "- Tokenizer: byte-level BPE, 4096 tokens, trained on the training files, with Qwen3's split regex and",
        "  pipeline and Qwen3's chat template (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>`, `<think>`, `</think>`,",
        "  `<|mask|>` for DSpark, vision placeholders).",
        "",
        "## Training",
        f"- Data: the Python {cor.get('python', '?').split()[0]} standard library sources (PSF License Version 2),",
        f"  {cor.get('n_train', '?')} files for training, {cor.get('n_valid', '?')} for validation (early stopping),"
        f" {cor.get('n_heldout', '?')} held out (split by a hash of the path);",
        "  `corpus.json` lists every file with its sha256 and the sha256 of the concatenation. 10% of the training",
        "  files are wrapped as one chat turn (user: \"Write the Python module `PATH`.\", assistant: the file), so",
        "  chat prompts work too.",
        f"- {tgt.get('steps', '?')} AdamW steps of {LOG.get('args', {}).get('batch', '?')} x {LOG.get('args', {}).get('seq', '?')} tokens,"
        f" bf16 autocast, one H200, {tgt.get('seconds', '?')} s; the weights of step {tgt.get('best_step', '?')}"
        f" ({tgt.get('epochs_at_best', '?')} passes over the data), best on the validation files, are the ones exported."
        " Seeds and every setting: `training_log.json`.",
        f"- Held-out loss (next-token cross entropy, nats/token, {tgt.get('heldout_tokens_scored', '?')} tokens):"
        f" {fmt(tgt.get('heldout_loss_fp32_master'))} before quantization,"
        f" **{fmt(tgt.get('heldout_loss_fp32_dequantized'))}** for this checkpoint (dequantized, float32);"
        f" {fmt(tokr.get('heldout_bytes_per_token'), 2)} bytes per token.",
    ]
    if final and acc:
        lines += [f"- With its DSpark head: {acc.get('tokens_per_round_mean')} tokens per verification round on held-out",
                  "  prompts (greedy; see the head's card)."]
    lines += ["", "## License", "Weights and code: Apache-2.0 (the lithos project). Training data: Python standard library,",
              "PSF License Version 2. Chat template: Qwen3's (Apache-2.0).", ""]
    with open(os.path.join(tdir, "README.md"), "w") as f:
        f.write("\n".join(lines))


def write_draft_card(ddir):
    d = LOG.get("drafter", {})
    c = d.get("config", {})
    acc = LOG.get("acceptance", {})
    a, q = acc.get("bf16_drafter", {}), acc.get("nvfp4_drafter", {})
    gd = LOG.get("goldens", {})
    lines = [
        "---",
        "license: apache-2.0",
        "tags: [lithos-test, dspark, dflash, speculative-decoding]",
        f"base_model: {ORG}/{TARGET_REPO}",
        "---",
        f"# {ORG}/{DRAFT_REPO}",
        "",
        f"A DSpark speculative-decoding head for [{ORG}/{TARGET_REPO}](../{TARGET_REPO}): a DFlash block-diffusion",
        "backbone plus a low-rank Markov head and a confidence head (`architectures: [\"DSparkDraftModel\"]`), in",
        "BF16 (lithos-pack re-quantizes it to NVFP4 by default). It has no embedding or vocabulary head: it uses",
        "the target's.",
        "",
        "## Model",
        f"- {c.get('num_hidden_layers')} Qwen3-style layers at the target width ({c.get('hidden_size')}), {c.get('num_attention_heads')} / "
        f"{c.get('num_key_value_heads')} heads of {c.get('head_dim')}, MLP {c.get('intermediate_size')};"
        f" {d.get('params', 0) / 1e6:.2f} M parameters.",
        f"- Block size {c.get('block_size')}: the block `[anchor, <|mask|> x 6]` predicts the next 7 tokens; mask token id"
        f" {c.get('dflash_config', {}).get('mask_token_id')}.",
        f"- Context: outputs of target decoder layers {c.get('dflash_config', {}).get('target_layer_ids')}, before the"
        " final norm, concatenated, through `fc` and `hidden_norm`. For the last layer this is not transformers'",
        "  `hidden_states[-1]` (which is after the final norm): it is the layer's own output, as lithos taps it.",
        f"- Markov head rank {c.get('markov_rank')} (vanilla); confidence head over `[hidden ; W1[previous token]]`.",
        "",
        "## Training",
        "- Data: the target's own greedy continuations (dequantized checkpoint, float32) of "
        f"{LOG.get('greedy_data', {}).get('train_sequences')} prompts from the training files",
        f"  ({LOG.get('greedy_data', {}).get('train_prompt_len')} prompt + {LOG.get('greedy_data', {}).get('train_new')} generated tokens);"
        " random anchors in the generated part; the Markov head is teacher-forced.",
        f"- {d.get('steps')} AdamW steps, {d.get('seconds')} s on one H200; loss: position-weighted cross entropy of the",
        "  Markov logits + 0.1 x confidence BCE. Everything is in `training_log.json`.",
        "",
        "## Acceptance (greedy, held-out files)",
        f"Simulated verification rounds on {a.get('sequences')} held-out prompts ({a.get('prompt_tokens')} tokens) and the target's"
        f" {a.get('continuation_tokens')}-token greedy continuations ({a.get('rounds')} rounds):",
        "",
        "| drafter weights | tokens per round | P(draft k accepted), k = 1..7 |",
        "|---|---|---|",
        f"| BF16 (this checkpoint) | {a.get('tokens_per_round_mean')} | {', '.join(str(x) for x in a.get('accept_rate_by_position', []))} |",
        f"| NVFP4 (as lithos-pack packs it) | {q.get('tokens_per_round_mean')} | {', '.join(str(x) for x in q.get('accept_rate_by_position', []))} |",
        "",
        "Tokens per round = accepted drafts + the target's own token; 1.0 would mean no draft is ever accepted.",
        f"On the fixed held-out prompt of `testdata/goldens/tinypair` ({gd.get('prompt_file')}), 128 greedy tokens take"
        f" {gd.get('demo_tokens_per_round_128', {}).get('bf16')} tokens per round (BF16 head),"
        f" {gd.get('demo_tokens_per_round_128', {}).get('nvfp4')} (NVFP4).",
        "",
        "## License",
        "Apache-2.0 (the lithos project). Trained on outputs of the target, itself trained on the Python standard",
        "library (PSF License Version 2).",
        "",
    ]
    with open(os.path.join(ddir, "README.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
