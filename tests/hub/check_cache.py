#!/usr/bin/env python3
"""check_cache.py - checks a hub cache tree against the exact huggingface_hub layout.

Usage: check_cache.py INFO_JSON CACHE REPO_ID REVISION COMMIT [FILE...]

For every file of the commit (from the mock's /_mock/info): snapshots/<commit>/<file>
is a relative symlink whose target is exactly ../../blobs/<etag> (one more ../ per
directory level), and the blob has the announced size and content id (sha256 for LFS
files, git blob sha1 otherwise). refs/<revision> holds the commit without newline
(unless the revision is the commit itself). Files strata probes that the commit lacks
are recorded in .no_exist/<commit>/. No *.incomplete file is left in blobs/.
With FILEs (one file of a GGUF repository, fetched by name): only those are checked, and
no other file of the commit may be in the snapshot or its blob in blobs/.
"""
import hashlib
import json
import os
import sys

PROBED = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer.model",
          "tokenizer_config.json", "chat_template.jinja", "model.safetensors", "model.safetensors.index.json"]


def main():
    info_path, cache, repo_id, revision, commit = sys.argv[1:6]
    only = sys.argv[6:]
    info = json.load(open(info_path))[repo_id]
    files = info["files"][commit]
    if only:
        others = {n: m for n, m in files.items() if n not in only}
        files = {n: files[n] for n in only}
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    errors = []
    if revision != commit:
        ref = os.path.join(repo, "refs", revision)
        got = open(ref).read() if os.path.isfile(ref) else None
        if got != commit:
            errors.append(f"refs/{revision} holds {got!r}, want {commit!r}")
    elif os.path.exists(os.path.join(repo, "refs", revision)):
        errors.append(f"refs/{revision} exists for a commit revision")
    for name, meta in files.items():
        if name.endswith(".safetensors") and "model.safetensors.index.json" in files:
            index = json.load(open(os.path.join(repo, "snapshots", commit, "model.safetensors.index.json")))
            if name not in index["weight_map"].values():
                continue
        link = os.path.join(repo, "snapshots", commit, name)
        want = "../" * (2 + name.count("/")) + "blobs/" + meta["etag"]
        if not os.path.islink(link):
            errors.append(f"{link} is not a symlink")
            continue
        if os.readlink(link) != want:
            errors.append(f"{link} -> {os.readlink(link)}, want {want}")
            continue
        data = open(os.path.join(repo, "blobs", meta["etag"]), "rb").read()
        cid = (hashlib.sha256(data).hexdigest() if meta["lfs"]
               else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest())
        if len(data) != meta["size"] or cid != meta["etag"]:
            errors.append(f"blob of {name}: size {len(data)} id {cid}, want {meta['size']} {meta['etag']}")
    if only:
        for name, meta in others.items():
            if os.path.lexists(os.path.join(repo, "snapshots", commit, name)):
                errors.append(f"{name} was not asked for but is in the snapshot")
            if os.path.exists(os.path.join(repo, "blobs", meta["etag"])):
                errors.append(f"the blob of {name} was not asked for but is in blobs/")
    for name in [] if only else PROBED:
        if name not in files and not os.path.isfile(os.path.join(repo, ".no_exist", commit, name)):
            errors.append(f".no_exist/{commit}/{name} missing")
    for f in os.listdir(os.path.join(repo, "blobs")):
        if f.endswith(".incomplete"):
            errors.append(f"blobs/{f} left behind")
    for e in errors:
        print("check_cache:", e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
