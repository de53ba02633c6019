#!/usr/bin/env python3
"""t/hostile_receiver.py: a raw-socket HTTP server that misbehaves on purpose.

The first part of the request path picks the misbehaviour, so one server
serves many endpoints at once:

  /reset_status    send half a status line, then reset the connection (RST)
  /reset_headers   send the status line and half a header, then reset
  /reset_body      send the headers and 10 of 1000 announced body bytes,
                   then reset
  /silent          accept, read the request, never answer
  /drip            answer a valid 200 one byte a second
  /huge            answer 200 with a 100 MB body (as fast as it is read)
  /endless_headers answer a status line, then header lines without end
  /many_headers    the same with short lines ("X: y")
  /continue_flood  answer "100 Continue" responses without end
  /chunk_ext_flood answer 200 chunked, then a chunk size followed by a
                   chunk extension without end ("2;aaaa...")
  /te_twice_flood  the same, "Transfer-Encoding: chunked" followed by a
                   second line "Transfer-Encoding: identity"
  /te_padded_flood the same, "chunked" after 80 spaces in the line
                   "Transfer-Encoding: identity, ... chunked"
  /chunked_endless answer 200 chunked, 100-byte chunks (each with an
                   extension) without end, as fast as they are read
  /chunked_drip    answer 200 chunked, a one-byte chunk every 0.2 s without
                   end
  /ok              answer 200 "ok" and keep the connection open for more
  /chunked_ok      answer 200 chunked ("hello world" in two chunks, one with
                   an extension, and a trailer) and keep the connection open
                   for more; the log line of a request on a connection
                   used before says how many it has carried ("on_connection")
  /closes_kept     answer 200 "ok" and keep the connection open; read the
                   next request on it, log it ("on_connection": 2) and
                   close the connection without answering (as a server
                   whose idle timeout runs out as the request comes)
  /chunk_bad       answer 200 chunked with a size line that has no size
                   ("zz"), then a valid last chunk
  /garbage         answer a line of garbage instead of a status line
  /canned/NAME     answer every request on the connection with the canned
                   response NAME (CANNED below: framings that leave a kept
                   connection in doubt, and framings to refuse); a request
                   on a connection used before is logged with
                   "on_connection"; a connection with no next request
                   within a second is closed (which ends a body read to
                   the connection's end)
  /late_bytes      answer 204, then 50 ms later an unasked
                   "200 OK" with no body; a request that comes on that
                   connection after it is logged ("on_connection": 2) and
                   answered 500; {"path": ..., "late_sent": time} is logged
                   once the unasked answer is sent
  /status/N        answer status N with an empty body; the query may add
                   retry_after=S (Retry-After: S) and location=URL
                   (Location: URL)

A reset is a close with SO_LINGER 0: the kernel sends RST, not FIN.  Every
request is appended to the log file as one JSON line once its headers and
body are read (receive time, path, query, lower-cased headers); when the
server stops writing a response early because the client hung up, a line
{"path": ..., "hung_up_after": bytes sent} is appended too.  The port is
written to --port-file once listening.  With --cert and --key every
connection is TLS (HTTP/1.1 offered in ALPN), the same misbehaviours inside
it; a reset is then a reset of the TCP connection under TLS.  Standard
library only.
"""
import argparse
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

lock = threading.Lock()
log_path = None


def log(record):
    with lock:
        with open(log_path, "a") as f:
            f.write(json.dumps(record) + "\n")


def read_request(conn):
    """The request line, headers and body; None if the client went away."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return method, target, headers, body.decode("utf-8", "replace")


def reset(conn):
    """Close with RST instead of FIN."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def send_counting(conn, path, chunks):
    """Send the chunks; log how much went out if the client hangs up."""
    sent = 0
    try:
        for chunk in chunks:
            conn.sendall(chunk)
            sent += len(chunk)
    except OSError:
        log({"path": path, "hung_up_after": sent})
        return False
    return True


def huge_body():
    yield (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
           b"Content-Length: %d\r\n\r\n" % (100 * 1024 * 1024))
    # The first bytes are recognisable, with bytes that are not printable
    # ASCII (kept as "?" in the attempt log).
    block = (b"BEGIN\x00\x01\xff" + b"0123456789abcdef" * 4096)[:65536]
    for _ in range(1600):
        yield block


def endless_headers():
    yield b"HTTP/1.1 200 OK\r\n"
    line = b"X-Junk: " + b"j" * 1000 + b"\r\n"
    while True:
        yield line * 64


def continue_flood():
    while True:
        yield b"HTTP/1.1 100 Continue\r\n\r\n" * 256


def many_headers():
    yield b"HTTP/1.1 200 OK\r\n"
    while True:
        yield b"X: y\r\n" * 1024


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk_ext_flood():
    yield CHUNKED_HEAD + b"2;"
    while True:
        yield b"a" * 65536


def te_twice_flood():
    yield (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
           b"Transfer-Encoding: identity\r\n\r\n2;")
    while True:
        yield b"a" * 65536


def te_padded_flood():
    yield (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity," + b" " * 80 +
           b"chunked\r\n\r\n2;")
    while True:
        yield b"a" * 65536


def chunked_endless():
    yield CHUNKED_HEAD
    # The body kept in the attempt log starts with these bytes.
    data = (b"DECODED-" + b"0123456789abcdef" * 8)[:100]
    chunk = b"%x;x=y\r\n%s\r\n" % (len(data), data)
    while True:
        yield chunk


def chunked_drip():
    yield CHUNKED_HEAD
    while True:
        yield b"1\r\nx\r\n"
        time.sleep(0.2)


# Responses of /canned/NAME.
CANNED = {
    # Transfer-Encoding overrides Content-Length, and gzip is not chunked:
    # the body runs to the connection's end (RFC 9112, 6.3).
    "te_gzip_length": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n"
                      b"Content-Length: 2\r\n\r\nok",
    # obs-fold: the line continues Connection, which then says close.
    "folded_close": b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\n close\r\n"
                    b"Content-Length: 2\r\n\r\nok",
    # HTTP/1.0 with Transfer-Encoding: framing in doubt, closed after.
    "http10_te": b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
    # HTTP/1.0: a later keep-alive does not undo close.
    "http10_close_keep": b"HTTP/1.0 200 OK\r\nConnection: close\r\n"
                         b"Connection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
    # Refused: a status line among the headers, junk after a chunk size,
    # a folded Content-Length.
    "status_in_headers": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                         b"HTTP/1.1 200 OK\r\n\r\n0\r\n\r\n",
    "chunk_size_junk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b"0x10\r\n0123456789abcdef\r\n0\r\n\r\n",
    "folded_length": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n 7\r\n\r\nhello",
}


def serve_kept(conn, response, idle=None):
    """Answer the request read and every later one on conn with response,
    logging each later request with its place on the connection; the
    connection ends when the client closes it, or after idle seconds
    without a request (None: no limit)."""
    n = 1
    while True:
        conn.sendall(response)
        conn.settimeout(idle)
        try:
            req = read_request(conn)
        except OSError:
            req = None
        if req is None:
            break
        conn.settimeout(None)
        method, target, headers, body = req
        n += 1
        log({"t": time.time(), "path": urlsplit(target).path,
             "method": method, "headers": headers, "body": body,
             "on_connection": n})
    conn.close()


def canned(conn, name):
    """Answer every request on conn with CANNED[name] (see the docstring)."""
    serve_kept(conn, CANNED[name], idle=1.0)


def handle(conn):
    try:
        if tls is not None:
            conn = tls.wrap_socket(conn, server_side=True)
        req = read_request(conn)
        if req is None:
            conn.close()
            return
        method, target, headers, body = req
        url = urlsplit(target)
        path = url.path
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        log({"t": time.time(), "path": path, "query": q, "method": method,
             "headers": headers, "body": body})
        mode = path.strip("/").split("/")
        if mode[0] == "reset_status":
            conn.sendall(b"HTTP/1.1 20")
            time.sleep(0.2)
            reset(conn)
        elif mode[0] == "reset_headers":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Half: ab")
            time.sleep(0.2)
            reset(conn)
        elif mode[0] == "reset_body":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")
            time.sleep(0.2)
            reset(conn)
        elif mode[0] == "silent":
            # Hold the connection until the client gives up.
            conn.settimeout(600)
            while conn.recv(65536):
                pass
            log({"path": path, "client_closed": time.time()})
            conn.close()
        elif mode[0] == "drip":
            answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

            def dribble():
                for i in range(len(answer)):
                    yield answer[i:i + 1]
                    time.sleep(1)
            if send_counting(conn, path, dribble()):
                conn.close()
        elif mode[0] == "huge":
            if send_counting(conn, path, huge_body()):
                log({"path": path, "sent_all": True})
            conn.close()
        elif mode[0] == "endless_headers":
            send_counting(conn, path, endless_headers())
            conn.close()
        elif mode[0] in ("many_headers", "continue_flood", "chunk_ext_flood",
                         "te_twice_flood", "te_padded_flood",
                         "chunked_endless", "chunked_drip"):
            flood = globals()[mode[0]]
            if send_counting(conn, path, flood()):
                log({"path": path, "sent_all": True})
            conn.close()
        elif mode[0] == "ok":
            serve_kept(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        elif mode[0] == "chunked_ok":
            serve_kept(conn, CHUNKED_HEAD + b"5;ext=1\r\nhello\r\n6\r\n world\r\n"
                       b"0\r\nX-Trailer: t\r\n\r\n")
        elif mode[0] == "closes_kept":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            req = read_request(conn)
            if req is not None:
                method, target, headers, body = req
                log({"t": time.time(), "path": urlsplit(target).path,
                     "method": method, "headers": headers, "body": body,
                     "on_connection": 2})
            conn.close()
        elif mode[0] == "chunk_bad":
            conn.sendall(CHUNKED_HEAD + b"zz\r\nhello\r\n0\r\n\r\n")
            conn.close()
        elif mode[0] == "garbage":
            conn.sendall(b"SURELY NOT HTTP \x00\x01\x02 <html>\r\n\r\n")
            conn.close()
        elif mode[0] == "canned":
            canned(conn, mode[1])
        elif mode[0] == "late_bytes":
            conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
            time.sleep(0.05)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            log({"path": path, "late_sent": time.time()})
            req = read_request(conn)
            if req is not None:
                method, target, headers, body = req
                log({"t": time.time(), "path": urlsplit(target).path,
                     "method": method, "headers": headers, "body": body,
                     "on_connection": 2})
                conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\n"
                             b"Content-Length: 0\r\nConnection: close\r\n\r\n")
            conn.close()
        elif mode[0] == "status":
            status = int(mode[1])
            extra = ""
            if "retry_after" in q:
                extra += "Retry-After: %s\r\n" % q["retry_after"]
            if "location" in q:
                extra += "Location: %s\r\n" % q["location"]
            conn.sendall(("HTTP/1.1 %d Whatever\r\n%sContent-Length: 0\r\n"
                          "Connection: close\r\n\r\n" % (status, extra)).encode())
            conn.close()
        else:
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                         b"Connection: close\r\n\r\n")
            conn.close()
    except OSError:
        conn.close()


tls = None


def main():
    global log_path, tls
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--cert")
    ap.add_argument("--key")
    args = ap.parse_args()
    log_path = args.log
    if args.cert:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.cert, args.key)
        tls.set_alpn_protocols(["http/1.1"])
    open(log_path, "a").close()
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", args.port))
    srv.listen(128)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(srv.getsockname()[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
