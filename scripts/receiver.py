#!/usr/bin/env python3
"""scripts/receiver.py: a tiny webhook receiver for the demo (the tests use t/webhook_receiver.py).

Listens on HOST:PORT, logs every POST it gets (method, path, the Standard
Webhooks headers and the body) and answers with an empty body and the status
given by --status (200 by default).  The first line it prints is
"listening on HOST:PORT", so --port 0 can be used to pick a free port.
Standard library only.
"""
import argparse
import datetime
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WEBHOOK_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, as the relay expects

    def setup(self):
        super().setup()
        # no Nagle delay on the accepted socket: answers go out at once
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_POST(self):
        body = self.read_body()
        self.server.log_request_entry(self, body)
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format, *args):
        pass  # no access log on stderr; do_POST logs what matters


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, status, out):
        super().__init__(address, Handler)
        self.status = status
        self.out = out
        self.count = 0
        self.lock = threading.Lock()

    def log_request_entry(self, handler, body):
        now = datetime.datetime.now(datetime.timezone.utc)
        with self.lock:
            self.count += 1
            lines = ["#%d %s %s  %s" % (self.count, handler.command, handler.path,
                                        now.strftime("%H:%M:%S.%f")[:-3])]
            for name in WEBHOOK_HEADERS:
                lines.append("    %-18s %s" % (name + ":", handler.headers.get(name, "(none)")))
            lines.append("    %-18s %s" % ("body:", body.decode("utf-8", "replace")))
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--status", type=int, default=200, help="HTTP status to answer with")
    parser.add_argument("--log", help="append the log to this file instead of stdout")
    args = parser.parse_args()

    out = open(args.log, "a", encoding="utf-8") if args.log else sys.stdout
    server = Receiver((args.host, args.port), args.status, out)
    host, port = server.server_address[:2]
    out.write("listening on %s:%d, answering %d\n" % (host, port, args.status))
    out.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
