# Issue 15 defect 5 against one binary: a client that knows no secret connects to the launcher's
# TCP store and sends set("intruder", "x") then get("intruder") in ef36d63's wire format
# (u32 length frames; u8 op, u32-length strings, i64). Prints what the store answered.
# Usage: python3 tools/hardening/store_intruder_probe.py BINARY SOURCE_DIR (runs in a fresh temp dir with a
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
time.sleep(2)
def s_(b): return struct.pack("<I", len(b)) + b
def frame(body): return struct.pack("<I", len(body)) + body
def reply(sock):
    sock.settimeout(3)
    try:
        head = sock.recv(4)
        if len(head) < 4: return "connection closed"
        n = struct.unpack("<I", head)[0]
        body = b""
        while len(body) < n: body += sock.recv(n - len(body))
        return f"status {body[0]}, body {body[1:]!r}"
    except OSError as e:
        return f"error {e}"
sock = socket.create_connection(("127.0.0.1", port))
try:
    sock.sendall(frame(bytes([1]) + s_(b"intruder") + s_(b"x")))
    print("set:", reply(sock))
    sock.sendall(frame(bytes([2]) + s_(b"intruder") + struct.pack("<q", 100)))
    print("get:", reply(sock))
except OSError as e:
    print("send failed:", e)
p.terminate(); p.wait(timeout=60)
log = p.stdout.read()
print("launcher log about it:", [l for l in log.splitlines() if "refus" in l or "secret" in l or "handshake" in l][:2])
shutil.rmtree(workdir)
