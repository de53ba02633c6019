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
  hold=PATH       wait until the file PATH exists before answering (at most
                  a minute)
  echo=1          answer with the request: {"body": its body as a string,
                  "headers": [[name, value], ...] with repeated names}
  echo=token      answer "invalid token " and the last word of the request's
                  Authorization header

An event can set any of these for itself with a header "x-test-NAME"
(emit(..., headers => '{"x-test-delay": "2"}')), over the URL's.

Every request is appended to the log file as one JSON line, once answered:
the receive time (Unix seconds, float), path, query, lower-cased headers
(the last of a repeated name), every header line in order, body, the status
answered, and "concurrent": the requests to its path being handled when it
came, itself included.  It listens on --host (127.0.0.1); the port is
written to --port-file once listening.
Standard library only.
"""
import argparse
import collections
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

lock = threading.Lock()
seen = collections.Counter()
handling = collections.Counter()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

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

    def answer(self, received, body, url, q, status, n, concurrent):
        if "fail_first" in q and n > int(q["fail_first"]):
            status = 200
        if "delay" in q:
            time.sleep(float(q["delay"]))
        if "hold" in q:
            deadline = time.time() + 60
            while not os.path.exists(q["hold"]) and time.time() < deadline:
                time.sleep(0.02)
        record = {
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
        answer = b"ok"
        if q.get("echo") == "1":
            answer = json.dumps({"body": body, "headers": self.headers.items()}).encode()
        elif q.get("echo") == "token":
            token = (self.headers.get("Authorization") or "").split(" ")[-1]
            answer = ("invalid token " + token).encode()
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    args = ap.parse_args()
    # A deep accept queue: the relay opens many connections at once.
    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.log_path = args.log
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
