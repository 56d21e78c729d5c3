#!/usr/bin/env python3
"""A fake Hugging Face Hub on loopback for the Hub client's tests (io/hub/, cli hub tests).

Two servers, as the real Hub has: the Hub (model info, resolve endpoints) and a "CDN" on another
port that serves the LFS files the Hub redirects to. Standard library only.

  fake_hub.py --port-file F [--log L] [--token T] REPO_SPEC...
  REPO_SPEC: ORG/NAME=DIR[:gated]   every file of DIR (not recursive) is a file of the repo

What it speaks (the parts of the real API that huggingface_hub and shardtrain use):
  GET  /api/models/ORG/NAME/revision/REV[?blobs=true]  {"id", "sha", "siblings": [{"rfilename",
       "size", "blobId", "lfs": {"sha256", "size", "pointerSize"}}]} (sizes only with blobs)
  HEAD|GET /ORG/NAME/resolve/REV/FILE  X-Repo-Commit; *.safetensors are LFS files: 302 to the
       CDN with X-Linked-Etag (the sha256), X-Linked-Size and the pointer's ETag; other files
       are served here with ETag = their git blob id
  GET  CDN /blobs/SHA256   the bytes, with Range support
Revisions: "main", "v1" (a tag) and the commit itself; others are 404 RevisionNotFound. Unknown
repos are 401 RepoNotFound (as the Hub answers anonymous callers); gated repos are 401 GatedRepo
without a token and 403 GatedRepo with a wrong one.

Faults, set per file name through the control endpoint (POST /_control with JSON
{"drop_once": [FILE], "corrupt": [FILE], "oversize": [FILE], "fail_always": [FILE]}):
  drop_once  the first CDN GET of FILE sends half the bytes and closes the connection
  corrupt    one byte of FILE is flipped on the CDN (the sha256 no longer matches)
  oversize   the CDN sends FILE with 1000 extra bytes (more than X-Linked-Size says)
Every request is appended to --log as "SERVER METHOD PATH RANGE AUTH" (tests count downloads).
"""
import argparse
import hashlib
import http.server
import json
import os
import sys
import threading
import urllib.parse

STATE = {"drop_once": set(), "corrupt": set(), "oversize": set(), "dropped": set()}
LOCK = threading.Lock()


class Repo:
    def __init__(self, repo_id, directory, gated):
        self.id = repo_id
        self.gated = gated
        self.files = {}
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    self.files[name] = f.read()
        digest = hashlib.sha1()
        for name, data in self.files.items():
            digest.update(name.encode() + b"\0" + hashlib.sha1(data).digest())
        self.commit = digest.hexdigest()

    @staticmethod
    def is_lfs(name):
        return name.endswith(".safetensors")

    @staticmethod
    def git_blob_id(data):
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def pointer(self, name):
        data = self.files[name]
        return ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" %
                (hashlib.sha256(data).hexdigest(), len(data))).encode()


REPOS = {}
BLOBS = {}  # sha256 -> (repo file name, bytes)
ARGS = None


def log(line):
    if ARGS.log:
        with LOCK, open(ARGS.log, "a") as f:
            f.write(line + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_name = "hub"

    def log_message(self, *args):
        pass

    def record(self):
        log("%s %s %s %s %s" % (self.server_name, self.command, self.path,
                                self.headers.get("Range", "-"),
                                "auth" if self.headers.get("Authorization") else "anon"))

    def reply(self, status, headers=None, body=b""):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, message="error"):
        self.reply(status, {"X-Error-Code": code, "X-Error-Message": message,
                            "Content-Type": "application/json"},
                   json.dumps({"error": message}).encode())


class HubHandler(Handler):
    server_name = "hub"

    def authorized(self, repo):
        if not repo.gated:
            return True
        auth = self.headers.get("Authorization", "")
        if not auth:
            self.error(401, "GatedRepo", "Access to model %s is restricted." % repo.id)
            return False
        if auth != "Bearer " + (ARGS.token or ""):
            self.error(403, "GatedRepo", "Access to model %s is restricted." % repo.id)
            return False
        return True

    def find(self, parts):
        repo = REPOS.get("/".join(parts[:2]))
        if repo is None:
            self.error(401, "RepoNotFound", "Repository not found")
            return None
        return repo

    def revision_ok(self, repo, revision):
        if revision in ("main", "v1", repo.commit):
            return True
        self.error(404, "RevisionNotFound", "Invalid rev id: %s" % revision)
        return False

    def do_POST(self):
        self.record()
        if self.path != "/_control":
            return self.reply(404)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        with LOCK:
            for key in ("drop_once", "corrupt", "oversize"):
                STATE[key] = set(body.get(key, []))
            STATE["dropped"] = set()
        self.reply(200)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self.record()
        url = urllib.parse.urlparse(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if len(parts) == 6 and parts[0] == "api" and parts[1] == "models" and parts[4] == "revision":
            return self.model_info(parts[2:4], parts[5], "blobs=true" in url.query)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(parts[:2], parts[3], "/".join(parts[4:]))
        self.reply(404)

    def model_info(self, repo_parts, revision, blobs):
        repo = self.find(repo_parts)
        if repo is None or not self.authorized(repo) or not self.revision_ok(repo, revision):
            return
        siblings = []
        for name, data in repo.files.items():
            entry = {"rfilename": name}
            if blobs:
                entry["size"] = len(repo.pointer(name)) if repo.is_lfs(name) else len(data)
                entry["blobId"] = repo.git_blob_id(repo.pointer(name) if repo.is_lfs(name) else data)
                if repo.is_lfs(name):
                    entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                                    "pointerSize": len(repo.pointer(name))}
            siblings.append(entry)
        body = json.dumps({"id": repo.id, "modelId": repo.id, "sha": repo.commit,
                           "gated": "auto" if repo.gated else False, "private": False,
                           "siblings": siblings}).encode()
        self.reply(200, {"Content-Type": "application/json"}, body)

    def resolve(self, repo_parts, revision, name):
        repo = self.find(repo_parts)
        if repo is None or not self.authorized(repo) or not self.revision_ok(repo, revision):
            return
        if name not in repo.files:
            return self.error(404, "EntryNotFound", "%s does not exist" % name)
        data = repo.files[name]
        headers = {"X-Repo-Commit": repo.commit}
        if repo.is_lfs(name):
            sha = hashlib.sha256(data).hexdigest()
            headers.update({"X-Linked-Etag": '"%s"' % sha, "X-Linked-Size": str(len(data)),
                            "ETag": '"%s"' % repo.git_blob_id(repo.pointer(name)),
                            "Location": "http://127.0.0.1:%d/blobs/%s?name=%s" %
                                        (ARGS.cdn_port, sha, urllib.parse.quote(name))})
            return self.reply(302, headers)
        headers["ETag"] = '"%s"' % repo.git_blob_id(data)
        self.reply(200, headers, data)


class CdnHandler(Handler):
    server_name = "cdn"

    def do_GET(self):
        self.record()
        parts = urllib.parse.urlparse(self.path).path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != "blobs" or parts[1] not in BLOBS:
            return self.reply(404)
        name, data = BLOBS[parts[1]]
        with LOCK:
            if name in STATE["corrupt"]:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            if name in STATE["oversize"]:
                data = data + b"\0" * 1000
            drop = name in STATE["drop_once"] and name not in STATE["dropped"]
            if drop:
                STATE["dropped"].add(name)
        start = 0
        status = 200
        headers = {"Content-Type": "application/octet-stream"}
        range_header = self.headers.get("Range")
        if range_header and range_header.startswith("bytes="):
            start = int(range_header[6:].split("-")[0])
            if start >= len(data):
                return self.reply(416, {"Content-Range": "bytes */%d" % len(data)})
            status = 206
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
        body = data[start:]
        if drop:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.reply(status, headers, body)


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--log")
    parser.add_argument("--token")
    parser.add_argument("repos", nargs="+")
    ARGS = parser.parse_args()
    for spec in ARGS.repos:
        repo_id, _, rest = spec.partition("=")
        directory, _, flag = rest.partition(":")
        REPOS[repo_id] = Repo(repo_id, directory, flag == "gated")
        for name, data in REPOS[repo_id].files.items():
            if Repo.is_lfs(name):
                BLOBS[hashlib.sha256(data).hexdigest()] = (name, data)
    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    cdn = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CdnHandler)
    hub.daemon_threads = cdn.daemon_threads = True
    ARGS.cdn_port = cdn.server_address[1]
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    with open(ARGS.port_file + ".tmp", "w") as f:
        f.write("%d %d\n" % (hub.server_address[1], ARGS.cdn_port))
    os.replace(ARGS.port_file + ".tmp", ARGS.port_file)
    try:
        hub.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
