// t/node/h2_receiver.js: an HTTPS receiver speaking HTTP/2 only (node's
// http2 module), for what differs from HTTP/1.1 in libcurl's hands.
//
//   node h2_receiver.js --log FILE --port-file FILE --cert FILE --key FILE
//                       [--host 127.0.0.1] [--port N]
//
// Each request is answered as its query asks: status=N (200),
// delivery=V ("webhook-delivery: V"), retry_after=S ("retry-after: S"),
// trailer=1 (a trailer "x-trailer: 1" after the body, in its own HEADERS
// frame).  Each is appended to the log as one JSON line: path, lower-cased
// headers, body, and the HTTP version read.  The port is written to
// --port-file once listening.
"use strict";

const fs = require("fs");
const http2 = require("http2");
const { option, listen } = require("./receiver_options");

const logFile = option("log");
const server = http2.createSecureServer({
  key: fs.readFileSync(option("key")),
  cert: fs.readFileSync(option("cert")),
  allowHTTP1: false,
});

server.on("stream", (stream, headers) => {
  const chunks = [];
  stream.on("data", (c) => chunks.push(c));
  stream.on("end", () => {
    const url = new URL(headers[":path"], "https://receiver");
    const q = url.searchParams;
    const out = {};
    for (const [k, v] of Object.entries(headers))
      if (!k.startsWith(":")) out[k] = String(v);
    fs.appendFileSync(logFile, JSON.stringify({
      path: url.pathname, headers: out, body: Buffer.concat(chunks).toString(),
      version: "2",
    }) + "\n");
    const head = { ":status": Number(q.get("status") || 200) };
    if (q.get("delivery")) head["webhook-delivery"] = q.get("delivery");
    if (q.get("retry_after")) head["retry-after"] = q.get("retry_after");
    const trailer = q.get("trailer") === "1";
    stream.respond(head, { waitForTrailers: trailer });
    if (trailer)
      stream.on("wantTrailers", () => stream.sendTrailers({ "x-trailer": "1" }));
    stream.end("ok");
  });
});
server.on("sessionError", () => {});
listen(server);
