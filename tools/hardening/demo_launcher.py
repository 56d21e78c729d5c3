# The launcher the store probes attack: `shardtrain launch --standalone --nproc-per-node 1 --
# train` on the demo job (CPU), in a fresh temp dir holding a copy of SOURCE_DIR/examples. Yields
# the store's port, the launcher's pid and the list of its output lines so far (read on a thread,
# so the launcher never blocks on a full pipe); on exit stops the launcher and removes the dir.
import contextlib, os, re, shutil, subprocess, tempfile, threading


@contextlib.contextmanager
def demo_launcher(binary, source):
    workdir = tempfile.mkdtemp(prefix="shardtrain_probe_")
    shutil.copytree(os.path.join(source, "examples"), os.path.join(workdir, "ex"))
    cmd = [os.path.abspath(binary), "launch", "--standalone", "--nproc-per-node", "1", "--",
           "train", "--config", "ex/demo.toml", "--steps", "100000", "--train.device=cpu",
           "--data.cache_dir=cache", "--train.output_dir=out", "--data.path=ex/demo-data.jsonl",
           "--model.path=ex/demo-model"]
    p = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    lines, port_seen = [], threading.Event()
    port = []

    def drain():
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            m = re.search(r"store 127\.0\.0\.1:(\d+)", line)
            if m and not port:
                port.append(int(m.group(1)))
                port_seen.set()
        port_seen.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        if not port_seen.wait(60) or not port:
            raise SystemExit("the launcher printed no store address:\n" + "\n".join(lines[-20:]))
        yield port[0], p.pid, lines
    finally:
        p.terminate()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a launcher that ignores SIGTERM: kill it, still clean up
            p.kill()
            p.wait()
        reader.join(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
