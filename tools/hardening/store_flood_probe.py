# Issue 15 defect 6 against one binary: 20 idle connections each announcing a 64 MiB frame to the
# launcher's TCP store; prints the launcher's RSS before and after, and how many connections the
# store still holds open.
# Usage: python3 tools/hardening/store_flood_probe.py BINARY SOURCE_DIR (runs in a fresh temp dir with a
# copy of SOURCE_DIR/examples; the launcher trains the demo on CPU until the probe stops it).
import os, re, shutil, socket, struct, subprocess, sys, tempfile, time
binary, source = os.path.abspath(sys.argv[1]), sys.argv[2]
workdir = tempfile.mkdtemp(prefix="shardtrain_probe_")
shutil.copytree(os.path.join(source, "examples"), os.path.join(workdir, "ex"))
os.chdir(workdir)
cmd = [binary, "launch", "--standalone", "--nproc-per-node", "1", "--", "train", "--config",
       "ex/demo.toml", "--steps", "100000", "--train.device=cpu", "--data.cache_dir=cache",
       "--train.output_dir=out", "--data.path=ex/demo-data.jsonl", "--model.path=ex/demo-model"]
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
port = None
for line in p.stdout:
    m = re.search(r"store 127\.0\.0\.1:(\d+)", line)
    if m:
        port = int(m.group(1)); break
def rss_mb(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) // 1024
time.sleep(3)
before = rss_mb(p.pid)
socks = []
for _ in range(20):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(struct.pack("<I", 64 << 20) + b"x" * 16)
    socks.append(s)
time.sleep(4)
after = rss_mb(p.pid)
open_count = 0
for s in socks:
    s.setblocking(False)
    try:
        open_count += s.recv(1) != b""  # data: still open
    except BlockingIOError:
        open_count += 1  # nothing to read, still open
    except OSError:
        pass
print(f"launcher RSS {before} MB -> {after} MB with 20 connections announcing 64 MiB frames; "
      f"{open_count} of 20 still open after 4 s")
p.terminate(); p.wait(timeout=60)
shutil.rmtree(workdir)
