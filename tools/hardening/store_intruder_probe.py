# Issue 15 defect 5 against one binary: a client that knows no secret connects to the launcher's
# TCP store and sends set("intruder", "x") then get("intruder") in ef36d63's wire format
# (u32 length frames; u8 op, u32-length strings, i64). Prints what the store answered and what
# the launcher logged about it (session 8: ef36d63 stored and returned the key; main closes the
# connection before the handshake and logs the refusal).
# Usage: python3 tools/hardening/store_intruder_probe.py BINARY SOURCE_DIR
import socket, struct, sys, time

from demo_launcher import demo_launcher


def string(b):
    return struct.pack("<I", len(b)) + b


def frame(body):
    return struct.pack("<I", len(body)) + body


def reply(sock):
    sock.settimeout(3)
    try:
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack("<I", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return "connection closed"
            data += chunk
        return f"status {data[4]}, body {data[5:]!r}"
    except OSError as e:
        return f"error {e}"


with demo_launcher(sys.argv[1], sys.argv[2]) as (port, _, lines):
    time.sleep(2)
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        sock.sendall(frame(bytes([1]) + string(b"intruder") + string(b"x")))
        print("set:", reply(sock))
        sock.sendall(frame(bytes([2]) + string(b"intruder") + struct.pack("<q", 100)))
        print("get:", reply(sock))
    except OSError as e:
        print("send failed:", e)
    time.sleep(0.5)
    print("launcher log about it:", [l for l in lines if "refused" in l][:2])
