#!/usr/bin/env python3
"""t/webhook_receiver.py: a scriptable webhook receiver for the TAP tests.

Each endpoint URL says how the receiver behaves, in its query string, so one
receiver serves many endpoints at once:

  status=N        answer N (default 200)
  fail_first=N    answer `status` to the first N requests of each webhook-id
                  on this path, 200 after that
  retry_after=S   send "Retry-After: S" with non-2xx answers
  delivery=V      send "webhook-delivery: V" (abort-message or disable)
  location=URL    send "Location: URL" (with a 3xx status)
  delay=S         wait S seconds before answering
  trailer=1       answer in chunks, with a trailer line ("x-trailer: 1")
  hold=PATH       wait until the file PATH exists before answering (at most
                  a minute)
  echo=1          answer with the request: {"body": its body as a string,
                  "headers": [[name, value], ...] with repeated names}
  echo=token      answer "invalid token " and the last word of the request's
                  Authorization header
  require_bearer=T  answer 401 unless the request has "Authorization: Bearer T"
  require_issued=1  answer 401 unless the request has "Authorization: Bearer"
                  and a token this receiver issued (token=1 below)
  token_uses=N    with require_issued: each token is taken N times, then 401
  close=1         answer with "Connection: close" and close the connection

As an OAuth2 token server (RFC 6749, client credentials), a path with
token=1 answers a POST of "grant_type=client_credentials" whose HTTP Basic
credentials (each form-encoded) are the query's client_id and a secret
whose MD5 in hex is the query's secret_md5 (the secret itself stays out of
the URL) with a new token {"access_token": ..., "token_type": "Bearer",
"expires_in": E} (E: the query's expires_in, 3600 by default), and other
credentials with 401 {"error": "invalid_client"}.  token_body=deep answers
200 with 15,000 nested arrays instead (a hostile token server).

An event can set any of these for itself with a header "x-test-NAME"
(emit(..., headers => '{"x-test-delay": "2"}')), over the URL's.

Every request is appended to the log file as one JSON line, once answered:
the receive time (Unix seconds, float), path, query, lower-cased headers
(the last of a repeated name), every header line in order, body, the status
answered, and "concurrent": the requests to its path being handled when it
came, itself included.  It listens on --host (127.0.0.1); the port is
written to --port-file once listening.

With --cert and --key it serves HTTPS instead, and logs "client": the
common name of the client's certificate, or null, and "tls_resumed":
whether the connection's handshake resumed an earlier session; with --client-ca too it
asks for a client certificate and refuses a handshake without one that CA
signed (mutual TLS).
Standard library only.
"""
import argparse
import base64
import collections
import hashlib
import json
import os
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote_plus, urlsplit

lock = threading.Lock()
seen = collections.Counter()
handling = collections.Counter()
# Tokens issued as a token server, and how often each was taken.
issued = collections.Counter()
tokens_made = collections.Counter()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self):
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                self.connection.do_handshake()
            except (ssl.SSLError, OSError):
                self.refuse()
                return
        super().handle()

    def refuse(self):
        """After a failed handshake (OpenSSL has sent its alert), end the
        connection so that the client reads that alert: closed with the
        client's request unread, the socket would answer with a reset, which
        can reach the client before it reads the alert ("not connected")."""
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(2)
            while self.connection.recv(65536):
                pass
        except OSError:
            pass

    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        received = time.time()
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode("utf-8", "replace")
        url = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        for k, v in self.headers.items():
            if k.lower().startswith("x-test-"):
                q[k.lower()[len("x-test-"):]] = v
        status = int(q.get("status", "200"))
        msg_id = self.headers.get("webhook-id", "")
        with lock:
            seen[(url.path, msg_id)] += 1
            n = seen[(url.path, msg_id)]
            handling[url.path] += 1
            concurrent = handling[url.path]
        self.counted = url.path
        try:
            self.answer(received, body, url, q, status, n, concurrent)
        finally:
            self.done_handling()

    def done_handling(self):
        # Before the answer goes out: the relay may send the next request
        # as soon as it has it.
        if self.counted is not None:
            with lock:
                handling[self.counted] -= 1
            self.counted = None

    def token_answer(self, body, q):
        """Status and JSON answer of the token server (token=1)."""
        form = {k: v[-1] for k, v in parse_qs(body).items()}
        given = self.headers.get("Authorization") or ""
        try:
            pair = base64.b64decode(given[len("Basic "):]).decode()
            client_id, secret = (unquote_plus(x) for x in pair.split(":", 1))
        except Exception:
            client_id, secret = None, None
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        if (not given.startswith("Basic ") or client_id != q.get("client_id") or
                secret is None or
                hashlib.md5(secret.encode()).hexdigest() != q.get("secret_md5")):
            return 401, {"error": "invalid_client"}
        with lock:
            tokens_made[self.path] += 1
            token = "tok-%d-%s" % (tokens_made[self.path], os.urandom(6).hex())
            issued[token] = 0
        return 200, {"access_token": token, "token_type": "Bearer",
                     "expires_in": int(q.get("expires_in", "3600"))}

    def client_name(self):
        """The common name of the client's TLS certificate, or None."""
        if not isinstance(self.connection, ssl.SSLSocket):
            return None
        for rdn in (self.connection.getpeercert() or {}).get("subject", ()):
            for name, value in rdn:
                if name == "commonName":
                    return value
        return None

    def authorized(self, q):
        """Whether a request passes require_bearer and require_issued."""
        given = self.headers.get("Authorization") or ""
        if "require_bearer" in q and given != "Bearer " + q["require_bearer"]:
            return False
        if q.get("require_issued") == "1":
            token = given[len("Bearer "):] if given.startswith("Bearer ") else ""
            with lock:
                if token not in issued:
                    return False
                if "token_uses" in q and issued[token] >= int(q["token_uses"]):
                    return False
                issued[token] += 1
        return True

    def answer(self, received, body, url, q, status, n, concurrent):
        token_json = None
        if q.get("token") == "1":
            status, token_json = self.token_answer(body, q)
        elif not self.authorized(q):
            status = 401
        if "fail_first" in q and n > int(q["fail_first"]):
            status = 200
        if "delay" in q:
            time.sleep(float(q["delay"]))
        if "hold" in q:
            deadline = time.time() + 60
            while not os.path.exists(q["hold"]) and time.time() < deadline:
                time.sleep(0.02)
        record = {
            "client": self.client_name(),
            "tls_resumed": self.connection.session_reused
            if isinstance(self.connection, ssl.SSLSocket) else None,
            "t": received,
            "path": url.path,
            "query": q,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "header_list": self.headers.items(),
            "body": body,
            "status": status,
            "concurrent": concurrent,
        }
        with lock:
            with open(self.server.log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        self.done_handling()
        self.send_response(status)
        if status >= 300 and "retry_after" in q:
            self.send_header("Retry-After", q["retry_after"])
        if "delivery" in q:
            self.send_header("webhook-delivery", q["delivery"])
        if "location" in q:
            self.send_header("Location", q["location"])
        if q.get("close") == "1":
            self.send_header("Connection", "close")
            self.close_connection = True
        answer = b"ok"
        if token_json is not None and q.get("token_body") == "deep":
            answer = b"[" * 15000
        elif token_json is not None:
            self.send_header("Content-Type", "application/json")
            answer = json.dumps(token_json).encode()
        elif q.get("echo") == "1":
            answer = json.dumps({"body": body, "headers": self.headers.items()}).encode()
        elif q.get("echo") == "token":
            token = (self.headers.get("Authorization") or "").split(" ")[-1]
            answer = ("invalid token " + token).encode()
        if q.get("trailer") == "1":
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Trailer", "x-trailer")
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n0\r\nx-trailer: 1\r\n\r\n" % (len(answer), answer))
            return
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


class Server(ThreadingHTTPServer):
    # A deep accept queue: the relay opens many connections at once.
    request_queue_size = 1024
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that goes away mid-request (a relay killed by a crash
        # test) is expected; a traceback for each would bury the test's
        # own report at the end of its log.
        if isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError)):
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--client-ca")
    args = ap.parse_args()
    server = Server((args.host, args.port), Handler)
    server.log_path = args.log
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        if args.client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(args.client_ca)
        ctx.set_alpn_protocols(["http/1.1"])
        # The handshake happens in the handler's thread, so a client that
        # never finishes it holds up nobody else.
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
