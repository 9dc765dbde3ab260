"""Corpus and tokenizer of the tiny coder pair (tools/tinypair, issue 8).

Corpus: the Python standard library sources of the interpreter that runs this script (PSF License,
Version 2): every regular *.py file under sysconfig's "stdlib" path, in sorted relative-path order,
except site-packages/dist-packages, __pycache__, test directories (test, tests, idle_test), symlinks,
files over MAX_FILE_BYTES (generated data such as pydoc_data/topics.py) and files that are not UTF-8.
Split by a hash of the relative path (h = int(sha256(path)[:8], 16)): h % HELDOUT_MOD == 0 is held
out for evaluation (the reported loss and acceptance), h % HELDOUT_MOD == 1 is the validation set
that picks the target's training step (early stopping), the rest is trained on.

Tokenizer: byte-level BPE trained with HF `tokenizers` on the training files, with Qwen3's
normalizer, pre-tokenizer (its split regex + ByteLevel), post-processor and decoder copied verbatim
from testdata/tokenizer/qwen3/tokenizer.json.gz, and ADDED tokens at the top of the vocabulary.
"""

import gzip
import hashlib
import json
import os
import sys
import sysconfig

MAX_FILE_BYTES = 400_000
HELDOUT_MOD = 20
EXCLUDED_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"}

VOCAB_SIZE = 4096
# (content, special) in id order at the top of the vocabulary. The four vision ids sit where
# tools/qwen35_goldens.special_ids puts them (vocab-4 .. vocab-1: image, video, vision start/end).
ADDED = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),
    ("</think>", False),
    ("<|mask|>", True),          # DSpark's MASK (dflash_config.mask_token_id)
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
]
BPE_SIZE = VOCAB_SIZE - len(ADDED)


def token_id(name):
    """Id of an ADDED token."""
    for i, (c, _) in enumerate(ADDED):
        if c == name:
            return BPE_SIZE + i
    raise KeyError(name)


EOT = token_id("<|endoftext|>")
IM_START = token_id("<|im_start|>")
IM_END = token_id("<|im_end|>")
MASK = token_id("<|mask|>")

CHAT_FRACTION = 0.10  # training documents wrapped as a chat turn (see chat_document)


def sha256_hex(b):
    return hashlib.sha256(b).hexdigest()


def split_of(rel):
    h = int(sha256_hex(rel.encode())[:8], 16) % HELDOUT_MOD
    return "heldout" if h == 0 else "valid" if h == 1 else "train"


def gather(stdlib=None):
    """Returns (stdlib path, files [(rel, bytes, text, split)], excluded [{rel, why}])."""
    root = stdlib or sysconfig.get_paths()["stdlib"]
    files, excluded = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        parts = [] if rel_dir == "." else rel_dir.split(os.sep)
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS and not os.path.islink(os.path.join(dirpath, d)))
        if any(p in EXCLUDED_DIRS for p in parts):
            continue
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            path = os.path.join(dirpath, fn)
            rel = "/".join(parts + [fn])
            if os.path.islink(path):
                excluded.append({"rel": rel, "why": "symlink"})
                continue
            b = open(path, "rb").read()
            if len(b) > MAX_FILE_BYTES:
                excluded.append({"rel": rel, "why": f"{len(b)} bytes > {MAX_FILE_BYTES}"})
                continue
            try:
                text = b.decode("utf-8")
            except UnicodeDecodeError:
                excluded.append({"rel": rel, "why": "not UTF-8"})
                continue
            if not text.strip():
                excluded.append({"rel": rel, "why": "empty"})
                continue
            files.append((rel, b, text, split_of(rel)))
    files.sort(key=lambda f: f[0])
    return root, files, excluded


def find_license(stdlib):
    """Path of the interpreter's license text (LICENSE.txt in the stdlib, or Debian's copyright)."""
    cands = [os.path.join(stdlib, "LICENSE.txt"),
             os.path.join(os.path.dirname(stdlib), "LICENSE.txt"),
             f"/usr/share/doc/python{sys.version_info.major}.{sys.version_info.minor}/copyright",
             f"/usr/share/doc/libpython{sys.version_info.major}.{sys.version_info.minor}-stdlib/copyright"]
    for c in cands:
        if os.path.isfile(c):
            return c
    return None


def corpus_record(stdlib, files, excluded):
    """The JSON record of the corpus: interpreter, file list with sizes and sha256, split, hashes of
    the concatenations (raw bytes of the files, in list order, no separators)."""
    def cat_hash(sel):
        h = hashlib.sha256()
        n = 0
        for rel, b, _, _ in sel:
            h.update(b)
            n += len(b)
        return h.hexdigest(), n

    all_h, all_n = cat_hash(files)
    tr_h, tr_n = cat_hash([f for f in files if f[3] == "train"])
    va_h, va_n = cat_hash([f for f in files if f[3] == "valid"])
    ho_h, ho_n = cat_hash([f for f in files if f[3] == "heldout"])
    lic = find_license(stdlib)
    return {
        "source": "Python standard library sources of the interpreter that ran tools/tinypair",
        "license": "PSF-2.0 (Python Software Foundation License Version 2)",
        "license_file": lic,
        "license_file_sha256": sha256_hex(open(lic, "rb").read()) if lic else None,
        "python": sys.version,
        "stdlib": stdlib,
        "rules": {
            "files": "regular *.py files under sysconfig.get_paths()['stdlib'], sorted by relative path",
            "excluded_dirs": sorted(EXCLUDED_DIRS),
            "max_file_bytes": MAX_FILE_BYTES,
            "heldout": f"int(sha256(relative path)[:8], 16) % {HELDOUT_MOD} == 0",
            "valid": f"int(sha256(relative path)[:8], 16) % {HELDOUT_MOD} == 1 (early stopping of the target)",
            "concatenation": "raw bytes of the files in list order, no separators",
        },
        "sha256_all": all_h, "bytes_all": all_n,
        "sha256_train": tr_h, "bytes_train": tr_n,
        "sha256_valid": va_h, "bytes_valid": va_n,
        "sha256_heldout": ho_h, "bytes_heldout": ho_n,
        "n_files": len(files), "n_train": sum(1 for f in files if f[3] == "train"),
        "n_valid": sum(1 for f in files if f[3] == "valid"), "n_heldout": sum(1 for f in files if f[3] == "heldout"),
        "files": [{"path": rel, "bytes": len(b), "sha256": sha256_hex(b), "split": sp} for rel, b, _, sp in files],
        "excluded": excluded,
    }


def qwen3_tokenizer_json(repo_root):
    with gzip.open(os.path.join(repo_root, "testdata", "tokenizer", "qwen3", "tokenizer.json.gz"), "rt",
                   encoding="utf-8") as f:
        return json.load(f)


def qwen3_chat_template(repo_root):
    with open(os.path.join(repo_root, "testdata", "tokenizer", "qwen3", "tokenizer_config.json"), encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def train_tokenizer(texts, repo_root):
    """Byte-level BPE with Qwen3's pipeline. Returns (tokenizers.Tokenizer, tokenizer.json dict)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    q = qwen3_tokenizer_json(repo_root)
    pattern = q["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                               fuse_unk=False, byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=BPE_SIZE, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    if tok.get_vocab_size(with_added_tokens=False) != BPE_SIZE:
        raise SystemExit(f"BPE vocabulary {tok.get_vocab_size(with_added_tokens=False)} != {BPE_SIZE}")
    for content, special in ADDED:
        t = AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    d = json.loads(tok.to_str())
    # Qwen3's pipeline, verbatim.
    for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        d[key] = q[key]
    tok = Tokenizer.from_str(json.dumps(d))
    for content, _ in ADDED:
        if tok.token_to_id(content) != token_id(content):
            raise SystemExit(f"added token {content}: id {tok.token_to_id(content)} != {token_id(content)}")
    if tok.get_vocab_size(with_added_tokens=True) != VOCAB_SIZE:
        raise SystemExit(f"vocabulary {tok.get_vocab_size(with_added_tokens=True)} != {VOCAB_SIZE}")
    return tok, d


def tokenizer_config(repo_root):
    """tokenizer_config.json in Qwen3's form, with Qwen3's chat template (Apache-2.0, Qwen)."""
    dec = {}
    for i, (content, special) in enumerate(ADDED):
        dec[str(BPE_SIZE + i)] = {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": special}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": dec,
        "additional_special_tokens": [c for c, s in ADDED if s and c not in ("<|endoftext|>",)],
        "bos_token": None,
        "chat_template": qwen3_chat_template(repo_root),
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "mask_token": "<|mask|>",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def chat_document(rel, text):
    """A training document as one chat exchange, exactly as Qwen3's template renders
    [user, assistant] with the assistant turn last (empty think block)."""
    return ("<|im_start|>user\nWrite the Python module `" + rel + "`.<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n" + text.lstrip("\n") + "<|im_end|>\n")
