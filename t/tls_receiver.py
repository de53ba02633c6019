#!/usr/bin/env python3
"""t/tls_receiver.py: an HTTPS webhook receiver for the TAP tests.

Serves HTTPS on 127.0.0.1 with the given certificate and key, answers every
POST with 200, and appends each request to the log file as one JSON line
(receive time, path, lower-cased headers, body, and the common name of the
client's certificate, or null).  With --client-ca it asks for a client
certificate and refuses a handshake without one that CA signed (mutual
TLS).  The port is written to --port-file once listening.  Standard library
only.
"""
import argparse
import json
import os
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode("utf-8", "replace")
        client = None
        peer = self.connection.getpeercert()
        for rdn in (peer or {}).get("subject", ()):
            for name, value in rdn:
                if name == "commonName":
                    client = value
        record = {
            "client": client,
            "t": time.time(),
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
        }
        with lock:
            with open(self.server.log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--client-ca")
    args = ap.parse_args()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    if args.client_ca:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(args.client_ca)
    ctx.set_alpn_protocols(["http/1.1"])
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.log_path = args.log
    # The handshake happens in the handler's thread, so a client that never
    # finishes it holds up nobody else.
    server.socket = ctx.wrap_socket(server.socket, server_side=True,
                                    do_handshake_on_connect=False)
    open(args.log, "a").close()
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
