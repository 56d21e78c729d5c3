#!/usr/bin/env python3
"""Checks with huggingface_hub itself that a Hub cache written by shardtrain is one it reads.

Make a cache with our binary (any machine with a build; the fake Hub runs on loopback):
  SHARDTRAIN_HUB_CACHE_OUT=/tmp/shardtrain-hub-cache \
    build/hub_train_cli_test --gtest_filter='HubTrainCliTest.TrainsFromTheFakeHubThenOffline'
Check it where huggingface_hub is installed (the GPU machine has 1.33):
  python3 tools/device/check_hub_cache.py /tmp/shardtrain-hub-cache

For every repo folder (models--org--name) in the cache, with HF_HUB_OFFLINE=1 so nothing can be
downloaded behind our back:
  - scan_cache_dir finds the repo with no warnings (a corrupt layout is a warning there), each
    revision's files with blobs that exist, and the refs our binary wrote;
  - try_to_load_from_cache returns our snapshot file for every file of every revision, and
    _CACHED_NO_EXIST for each file we recorded in .no_exist/;
  - snapshot_download(local_files_only=True) and hf_hub_download return our snapshot paths;
  - every LFS blob (named by a 64-hex sha256) hashes to its name.
Prints one "ok" line per check; exits 1 at the first mismatch.
"""
import hashlib
import os
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    cache = os.path.abspath(sys.argv[1])
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_HUB_CACHE"] = cache
    import huggingface_hub
    from huggingface_hub import (hf_hub_download, scan_cache_dir, snapshot_download,
                                 try_to_load_from_cache)
    from huggingface_hub.file_download import _CACHED_NO_EXIST

    print("huggingface_hub", huggingface_hub.__version__, "on", cache)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    info = scan_cache_dir(cache)
    check(not info.warnings, "scan_cache_dir: no warnings %s" % [str(w) for w in info.warnings])
    repos = {repo.repo_id: repo for repo in info.repos}
    folders = sorted(d for d in os.listdir(cache) if d.startswith("models--"))
    check(len(folders) > 0, "the cache has model folders: %s" % folders)
    for folder in folders:
        repo_id = "/".join(folder.split("--")[1:])
        repo_dir = os.path.join(cache, folder)
        check(repo_id in repos, "scan_cache_dir finds %s" % repo_id)
        if repo_id not in repos:
            continue
        scanned = repos[repo_id]
        refs_dir = os.path.join(repo_dir, "refs")
        our_refs = {}
        for root, _, names in os.walk(refs_dir):
            for name in names:
                ref = os.path.relpath(os.path.join(root, name), refs_dir)
                with open(os.path.join(root, name)) as f:
                    our_refs[ref] = f.read()
        for revision in scanned.revisions:
            commit = revision.commit_hash
            snapshot = os.path.join(repo_dir, "snapshots", commit)
            check(str(revision.snapshot_path) == snapshot, "%s@%s: snapshot path" % (repo_id, commit))
            names = sorted(f.file_name for f in revision.files)
            check(len(names) > 0, "%s@%s: files %s" % (repo_id, commit, names))
            for f in revision.files:
                check(os.path.isfile(f.blob_path), "%s: blob of %s exists" % (repo_id, f.file_name))
                found = try_to_load_from_cache(repo_id, f.file_name, cache_dir=cache,
                                               revision=commit)
                check(found == os.path.join(snapshot, f.file_name),
                      "try_to_load_from_cache(%s, %s) = our file" % (repo_id, f.file_name))
                blob_name = os.path.basename(f.blob_path)
                if len(blob_name) == 64:
                    with open(f.blob_path, "rb") as blob:
                        digest = hashlib.sha256(blob.read()).hexdigest()
                    check(digest == blob_name, "%s: sha256 of %s is its blob name" %
                          (repo_id, f.file_name))
            for ref, ref_commit in our_refs.items():
                if ref_commit != commit:
                    continue
                check(ref in revision.refs, "%s: scan_cache_dir sees ref %s" % (repo_id, ref))
                path = snapshot_download(repo_id, revision=ref, cache_dir=cache,
                                         local_files_only=True)
                check(path == snapshot, "snapshot_download(%s, %s, local_files_only) = %s" %
                      (repo_id, ref, path))
                config = hf_hub_download(repo_id, "config.json", revision=ref, cache_dir=cache)
                check(config == os.path.join(snapshot, "config.json"),
                      "hf_hub_download(%s, config.json, %s) offline = our file" % (repo_id, ref))
            no_exist = os.path.join(repo_dir, ".no_exist", commit)
            if os.path.isdir(no_exist):
                for name in sorted(os.listdir(no_exist)):
                    found = try_to_load_from_cache(repo_id, name, cache_dir=cache, revision=commit)
                    check(found is _CACHED_NO_EXIST,
                          "try_to_load_from_cache(%s, %s) = _CACHED_NO_EXIST" % (repo_id, name))
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
