#!/usr/bin/python3
"""bench/receiver.py: the two misbehaving receivers bench/run.sh needs.

  receiver.py hang PORT   accepts connections and never answers (case 6)
  receiver.py big PORT    answers every POST with a 100 MB body (case 7)

Both listen on 127.0.0.1 and run until killed.  nginx is the fast, healthy
receiver; these only have to behave badly.
"""
import socket
import sys
import threading

BIG_BODY = 100 * 1024 * 1024
CHUNK = b"x" * (1024 * 1024)


def listen(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(1024)
    return s


def hang(port):
    """Accept every connection, read nothing, answer nothing, keep it open."""
    server = listen(port)
    held = []
    while True:
        conn, _ = server.accept()
        held.append(conn)


def read_request(conn):
    """Read one request (head and Content-Length body); False at EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return False
        data += more
    head, rest = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        more = conn.recv(65536)
        if not more:
            return False
        rest += more
    return True


def serve_big(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while read_request(conn):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                         b"Content-Length: %d\r\n\r\n" % BIG_BODY)
            for _ in range(BIG_BODY // len(CHUNK)):
                conn.sendall(CHUNK)
    except OSError:
        pass                    # the relay hung up after what it keeps
    finally:
        conn.close()


def big(port):
    """Answer each POST with 200 and a 100 MB body, one thread a connection."""
    server = listen(port)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve_big, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    {"hang": hang, "big": big}[mode](port)
