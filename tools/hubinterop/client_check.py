#!/usr/bin/env python3
"""Interop check of the lithos Hub *client* (lithos-pack fetch) against huggingface_hub.

Run where huggingface_hub is installed (the GPU machine), from the repository root, with a
lithos-pack binary built on the Go machine:

    CGO_ENABLED=0 go build -o bin/lithos-pack ./cmd/lithos-pack
    python3 tools/hubinterop/client_check.py --lithos bin/lithos-pack --root testdata/hub

1. `lithos-pack hub serve ROOT` runs on loopback.
2. `lithos-pack fetch REPO` (HF_HUB_CACHE=A) writes a cache; huggingface_hub then reads it with
   HF_HUB_OFFLINE=1: snapshot_download and hf_hub_download of every file must return the same
   snapshot and the source bytes, and scan_cache_dir must report the repo with no warnings.
3. huggingface_hub's snapshot_download (HF_ENDPOINT=our server, HF_HUB_CACHE=B) writes a cache;
   `lithos-pack fetch --json` with HF_HUB_OFFLINE=1 and HF_HUB_CACHE=B must find that snapshot.
4. lithos-pack fetch into a cache huggingface_hub already filled must reuse its blobs.

Prints "OK ..." lines and exits 0, or prints every failure and exits 1.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = "lithos-test/tiny-sharded"
FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL", msg)


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        print("command failed:", cmd, "\nstdout:", p.stdout, "\nstderr:", p.stderr)
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lithos", required=True)
    ap.add_argument("--root", default="testdata/hub")
    ap.add_argument("--port", type=int, default=18765)
    a = ap.parse_args()
    import huggingface_hub
    from huggingface_hub import snapshot_download, hf_hub_download, scan_cache_dir

    print("huggingface_hub", huggingface_hub.__version__)
    src = os.path.join(a.root, REPO)
    files = {}
    for dp, _, fns in os.walk(src):
        for fn in fns:
            if fn.startswith(".hubtest"):
                continue
            p = os.path.join(dp, fn)
            files[os.path.relpath(p, src)] = open(p, "rb").read()
    work = tempfile.mkdtemp()
    endpoint = f"http://127.0.0.1:{a.port}"
    srv = subprocess.Popen([a.lithos, "hub", "serve", a.root, "--addr", f"127.0.0.1:{a.port}"],
                           stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(endpoint + "/api/models/" + REPO, timeout=1).read()
                break
            except Exception:
                time.sleep(0.1)
        base = dict(os.environ)
        for k in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE", "HF_HOME"):
            base.pop(k, None)

        # 2. lithos writes, huggingface_hub reads offline.
        cache_a = os.path.join(work, "a")
        env = dict(base, HF_ENDPOINT=endpoint, HF_HUB_CACHE=cache_a, LITHOS_CACHE=os.path.join(work, "lc"))
        p = run([a.lithos, "fetch", REPO], env)
        check(p.returncode == 0, "lithos-pack fetch failed")
        snap = p.stdout.strip().splitlines()[0] if p.stdout.strip() else ""
        os.environ.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=cache_a)
        got = snapshot_download(REPO, cache_dir=cache_a, local_files_only=True)
        check(os.path.realpath(got) == os.path.realpath(snap), f"hf snapshot {got} != lithos {snap}")
        for rel, data in files.items():
            path = hf_hub_download(REPO, rel, cache_dir=cache_a, local_files_only=True)
            check(open(path, "rb").read() == data, f"hf_hub_download({rel}) bytes differ")
        info = scan_cache_dir(cache_a)
        check(len(info.warnings) == 0, f"scan_cache_dir warnings: {info.warnings}")
        repos = [r for r in info.repos if r.repo_id == REPO]
        check(len(repos) == 1, "scan_cache_dir does not list the repo")
        if repos:
            r = repos[0]
            check(sum(1 for _ in r.revisions) == 1, "scan_cache_dir: not exactly one revision")
            rev = next(iter(r.revisions))
            check("main" in rev.refs, f"scan_cache_dir: refs {rev.refs}, want main")
            check(len(rev.files) == len(files), f"scan_cache_dir: {len(rev.files)} files, want {len(files)}")
            check(r.size_on_disk == sum(len(d) for d in files.values()), "scan_cache_dir: size on disk differs")
        print("OK huggingface_hub reads the lithos-written cache offline:", len(files), "files")
        os.environ.pop("HF_HUB_OFFLINE")

        # 3. huggingface_hub writes, lithos reads offline.
        # huggingface_hub reads HF_ENDPOINT when it is imported: run it in a child process.
        cache_b = os.path.join(work, "b")
        env = dict(base, HF_ENDPOINT=endpoint, HF_HUB_CACHE=cache_b, HF_HUB_DISABLE_PROGRESS_BARS="1")
        p = run([sys.executable, "-c", "import sys; from huggingface_hub import snapshot_download; "
                 "print(snapshot_download(sys.argv[1]))", REPO], env)
        check(p.returncode == 0, "huggingface_hub snapshot_download from lithos-pack hub serve failed")
        hsnap = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
        env = dict(base, HF_ENDPOINT=endpoint, HF_HUB_CACHE=cache_b, HF_HUB_OFFLINE="1")
        p = run([a.lithos, "fetch", REPO, "--json"], env)
        check(p.returncode == 0, "lithos-pack fetch offline on a huggingface_hub cache failed")
        if p.returncode == 0:
            out = json.loads(p.stdout)
            lpath = out["snapshots"][0]["path"]
            check(os.path.realpath(lpath) == os.path.realpath(hsnap), f"lithos offline {lpath} != hf {hsnap}")
            check(out["bytes_fetched"] == 0, "offline fetch fetched bytes")
        print("OK lithos-pack reads the huggingface_hub-written cache offline")

        # 4. lithos online on a cache huggingface_hub filled: reuses every blob.
        blobs = sorted(os.listdir(os.path.join(cache_b, "models--" + REPO.replace("/", "--"), "blobs")))
        env = dict(base, HF_ENDPOINT=endpoint, HF_HUB_CACHE=cache_b)
        p = run([a.lithos, "fetch", REPO, "--json"], env)
        check(p.returncode == 0, "lithos-pack fetch online on a huggingface_hub cache failed")
        if p.returncode == 0:
            out = json.loads(p.stdout)
            total = sum(len(d) for d in files.values())
            check(out["bytes_fetched"] < total // 10, f"fetched {out['bytes_fetched']} bytes of a {total}-byte repo already cached")
        blobs2 = sorted(os.listdir(os.path.join(cache_b, "models--" + REPO.replace("/", "--"), "blobs")))
        check(blobs == blobs2, f"blobs changed: {blobs} -> {blobs2}")
        print("OK lithos-pack reuses blobs huggingface_hub downloaded")
    finally:
        srv.kill()
        shutil.rmtree(work, ignore_errors=True)
    if FAILS:
        print(len(FAILS), "failures")
        sys.exit(1)
    print("OK all client interop checks")


if __name__ == "__main__":
    main()
