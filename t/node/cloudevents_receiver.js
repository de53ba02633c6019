// t/node/cloudevents_receiver.js: a webhook receiver for the TAP tests
// that reads each request as a CloudEvents consumer would, with the
// official SDK (npm "cloudevents": HTTP.toEvent, then validate()), and
// checks its Standard Webhooks signature with the secret it is given.
//
//   node cloudevents_receiver.js --log FILE --port-file FILE --secret whsec_...
//                                [--host 127.0.0.1] [--port N]
//
// Every request is answered 204 and appended to the log as one JSON line:
// path, lower-cased headers, the raw body, "signature" (true when one of
// the v1 signatures in webhook-signature is the HMAC-SHA256 of
// "webhook-id.webhook-timestamp.body" with the secret's key, and the
// timestamp is within 5 minutes), and either "event" (the attributes and
// data the SDK read, extensions included) or "error" (why the SDK refused
// it, "no cloud event detected" for a request of another format).  The
// port is written to --port-file once listening.
"use strict";

const crypto = require("crypto");
const fs = require("fs");
const http = require("http");
const { HTTP } = require("cloudevents");
const { option, listen } = require("./receiver_options");

const logFile = option("log");
const secret = option("secret");
const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");

// Standard Webhooks, over the exact bytes received.
function signatureValid(headers, body) {
  const id = headers["webhook-id"];
  const ts = headers["webhook-timestamp"];
  const sigs = headers["webhook-signature"];
  if (!id || !ts || !sigs) return false;
  if (Math.abs(Date.now() / 1000 - Number(ts)) > 300) return false;
  const expected = crypto.createHmac("sha256", key)
    .update(Buffer.concat([Buffer.from(`${id}.${ts}.`), body]))
    .digest();
  return sigs.split(" ").some((s) => {
    const [version, value] = s.split(",", 2);
    if (version !== "v1" || !value) return false;
    const got = Buffer.from(value, "base64");
    return got.length === expected.length && crypto.timingSafeEqual(got, expected);
  });
}

function readEvent(headers, body) {
  try {
    const ev = HTTP.toEvent({ headers, body: body.toString("utf8") });
    ev.validate();
    // every attribute the SDK read, extensions included, and the data
    return { event: JSON.parse(JSON.stringify({ ...ev })) };
  } catch (e) {
    const detail = e.errors ? " " + JSON.stringify(e.errors) : "";
    return { error: String(e.message || e) + detail };
  }
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    const entry = {
      path: new URL(req.url, "http://receiver").pathname,
      headers: req.headers,
      body: body.toString("utf8"),
      signature: signatureValid(req.headers, body),
      ...readEvent(req.headers, body),
    };
    fs.appendFileSync(logFile, JSON.stringify(entry) + "\n");
    res.writeHead(204);
    res.end();
  });
});

listen(server);

process.on("SIGTERM", () => process.exit(0));
