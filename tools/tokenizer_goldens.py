#!/usr/bin/env python3
"""Tokenizer goldens from HF `tokenizers` (Python bindings of the Rust crate) for
lithos/runtime/tokenizer.

Run on the GPU machine (where transformers, hence tokenizers, is installed), from the
repository root:

    python3 tools/tokenizer_goldens.py --out testdata/tokenizer

(--in, default testdata/tokenizer, is where the inputs are read; --out where goldens_py.json is
written, e.g. $OUT/tokenizer on the device machine.)

It reads the corpus (texts and decode-only id lists) from testdata/tokenizer/goldens_js.json,
which tools/tokenizer_goldens.mjs wrote with @huggingface/tokenizers, re-derives every expected
value with the Rust implementation, adds cases the JS port cannot express (split_special_tokens,
lstrip/rstrip/single_word/normalized added-token flags, Unicode case folding in the (?i:...)
contractions, U+FEFF), and writes testdata/tokenizer/goldens_py.json in the same format.
The Go test TestGoldensPython checks that file whenever it exists.

Tokenizers: "qwen3" = testdata/tokenizer/qwen3/tokenizer.json.gz as shipped; "qwen35" = the
same with the Qwen3.5 split pattern; "tiny" = the test fixture; "tiny-flags" = the fixture plus
the added tokens listed under "variants" in the output (the Go test builds the same variant).
"""

import argparse
import copy
import gzip
import json
import os
import sys

from tokenizers import Tokenizer
import tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Added tokens of the "tiny-flags" variant (ids past the fixture's 279).
TINY_FLAGS_ADDED = [
    {"id": 300, "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False, "normalized": False, "special": True},
    {"id": 301, "content": "[R]", "single_word": False, "lstrip": False, "rstrip": True, "normalized": False, "special": False},
    {"id": 302, "content": "cat", "single_word": True, "lstrip": False, "rstrip": False, "normalized": False, "special": False},
    {"id": 303, "content": "\u00e9", "single_word": False, "lstrip": False, "rstrip": False, "normalized": True, "special": False},
    {"id": 304, "content": "<b>", "single_word": False, "lstrip": True, "rstrip": True, "normalized": False, "special": True},
]

EXTRA_TEXTS = [
    # (?i:'s|...) under Oniguruma's Unicode case folding: U+017F folds to 's'.
    ("fold-long-s", "it'\u017ft x'\u017f 'Sx 'STRING don'T"),
    ("bom", "\ufeffstart x\ufeffy \ufeff"),
    ("kelvin", "'\u212a 'k"),
    ("nel-vt", "a\u0085b\u000bc\u000cd \u0085\n"),
]

FLAG_TEXTS = [
    ("lstrip", "a  \t<mask> b"),
    ("lstrip-start", "<mask>x  <mask>"),
    ("rstrip", "a [R]  \n b[R]"),
    ("lrstrip", "x  <b>  y<b>"),
    ("single-word", "a cat b"),
    ("single-word-no", "concat cats cat_ _cat cat"),
    ("single-word-punct", "(cat) cat. 1cat"),
    ("normalized", "e\u0301 \u00e9 cafe\u0301"),
    ("mixed", "<|im_start|>cat<mask> [R] e\u0301<|im_end|>"),
]

SPLIT_SPECIAL_TEXTS = [
    ("split-special-chat", "<|im_start|>user\nhi<|im_end|>\n<think>x</think>"),
    ("split-special-tool", "<tool_call>\n{}\n</tool_call><|endoftext|>"),
]


def load_tokenizers(indir):
    with gzip.open(os.path.join(indir, "qwen3", "tokenizer.json.gz"), "rt", encoding="utf-8") as f:
        qwen3_text = f.read()
    golden_js = json.load(open(os.path.join(indir, "goldens_js.json"), encoding="utf-8"))
    q35 = json.loads(qwen3_text)
    split = q35["pre_tokenizer"]["pretokenizers"][0]
    assert split["type"] == "Split"
    split["pattern"]["Regex"] = golden_js["qwen35_pattern"]
    tiny_path = os.path.join(ROOT, "testdata", "hub", "lithos-test", "tiny-sharded", "tokenizer.json")
    tiny_text = open(tiny_path, encoding="utf-8").read()
    flags = json.loads(tiny_text)
    flags["added_tokens"] = flags["added_tokens"] + copy.deepcopy(TINY_FLAGS_ADDED)
    toks = {
        "qwen3": Tokenizer.from_str(qwen3_text),
        "qwen35": Tokenizer.from_str(json.dumps(q35)),
        "tiny": Tokenizer.from_str(tiny_text),
        "tiny-flags": Tokenizer.from_str(json.dumps(flags)),
    }
    return toks, golden_js


def case(tok, tname, name, text, split_special=False):
    tok.encode_special_tokens = split_special
    try:
        ids = tok.encode(text, add_special_tokens=True).ids
    finally:
        tok.encode_special_tokens = False
    c = {
        "tokenizer": tname, "name": name, "text": text, "ids": ids,
        "decoded": tok.decode(ids, skip_special_tokens=False),
        "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
    }
    if split_special:
        c["split_special"] = True
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--in", dest="indir", default="testdata/tokenizer")
    ap.add_argument("--out", default="testdata/tokenizer")
    args = ap.parse_args()
    indir = args.indir if os.path.isabs(args.indir) else os.path.join(ROOT, args.indir)
    out = args.out if os.path.isabs(args.out) else os.path.join(ROOT, args.out)
    toks, golden_js = load_tokenizers(indir)

    cases = []
    for c in golden_js["cases"]:
        cases.append(case(toks[c["tokenizer"]], c["tokenizer"], c["name"], c["text"]))
    for tname in ("qwen3", "qwen35"):
        for name, text in EXTRA_TEXTS:
            cases.append(case(toks[tname], tname, name, text))
        for name, text in SPLIT_SPECIAL_TEXTS:
            cases.append(case(toks[tname], tname, name, text, split_special=True))
    for name, text in FLAG_TEXTS:
        cases.append(case(toks["tiny-flags"], "tiny-flags", name, text))
        cases.append(case(toks["tiny-flags"], "tiny-flags", name + "-split-special", text, split_special=True))

    decode_cases = []
    for d in golden_js["decode_cases"]:
        tok = toks[d["tokenizer"]]
        c = {"tokenizer": d["tokenizer"], "ids": d["ids"], "decoded": tok.decode(d["ids"], skip_special_tokens=False)}
        if "decoded_skip_special" in d:
            c["decoded_skip_special"] = tok.decode(d["ids"], skip_special_tokens=True)
        decode_cases.append(c)

    golden = {
        "oracle": "tools/tokenizer_goldens.py with HF tokenizers (Rust)",
        "versions": {"tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
        "qwen35_pattern": golden_js["qwen35_pattern"],
        "variants": {"tiny-flags": {"base": "tiny", "extra_added_tokens": TINY_FLAGS_ADDED}},
        "cases": cases,
        "decode_cases": decode_cases,
    }
    lines = ["{"]
    keys = list(golden)
    for i, k in enumerate(keys):
        v = golden[k]
        sep = "," if i < len(keys) - 1 else ""
        if isinstance(v, list):
            lines.append(f" {json.dumps(k)}: [")
            for j, c in enumerate(v):
                lines.append("  " + json.dumps(c, ensure_ascii=False) + ("," if j < len(v) - 1 else ""))
            lines.append(" ]" + sep)
        else:
            lines.append(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}{sep}")
    lines.append("}")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "goldens_py.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")

    # Tell the lead how far the JS oracle agrees with the Rust one (informational).
    diff = [c["name"] + "/" + c["tokenizer"] for c, j in zip(cases, golden_js["cases"]) if c["ids"] != j["ids"]]
    print(f"wrote {len(cases)} encode and {len(decode_cases)} decode cases to {path}")
    print(f"JS and Rust ids differ on {len(diff)} shared cases: {diff[:10]}")


if __name__ == "__main__":
    main()
