# Issue 15 defect 6 against one binary: 20 idle connections each announcing a 64 MiB frame to the
# launcher's TCP store; prints the launcher's RSS before and after, and how many connections the
# store still holds open (session 8: ef36d63 9 -> 1290 MB, 20 open; main unchanged, 0 open).
# Usage: python3 tools/hardening/store_flood_probe.py BINARY SOURCE_DIR
import socket, struct, sys, time

from demo_launcher import demo_launcher


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024


with demo_launcher(sys.argv[1], sys.argv[2]) as (port, pid, _):
    time.sleep(3)
    before = rss_mb(pid)
    socks = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(struct.pack("<I", 64 << 20) + b"x" * 16)
        socks.append(s)
    time.sleep(4)
    after = rss_mb(pid)
    still_open = 0
    for s in socks:
        s.setblocking(False)
        try:
            still_open += s.recv(1) != b""  # data: still open
        except BlockingIOError:
            still_open += 1  # nothing to read: still open
        except OSError:
            pass
    print(f"launcher RSS {before} MB -> {after} MB with 20 connections announcing 64 MiB frames; "
          f"{still_open} of 20 still open after 4 s")
