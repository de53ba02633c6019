// t/node/receiver_options.js: what the TAP tests' node receivers share:
// their command line (--log, --port-file, --host, --port and their own
// options) and writing the port they listen on to --port-file, whole, once
// listening (t/OutboxTest.pm waits for the file).
"use strict";

const fs = require("fs");

// The value of --name, or fallback; without a fallback the option is required.
function option(name, fallback) {
  const i = process.argv.indexOf("--" + name);
  if (i < 0 || i + 1 >= process.argv.length) {
    if (fallback === undefined) throw new Error("--" + name + " is required");
    return fallback;
  }
  return process.argv[i + 1];
}

// Start server listening on --host and --port; write the port to --port-file.
function listen(server) {
  const portFile = option("port-file");
  server.listen(Number(option("port", "0")), option("host", "127.0.0.1"), () => {
    fs.writeFileSync(portFile + ".tmp", String(server.address().port));
    fs.renameSync(portFile + ".tmp", portFile);
  });
}

module.exports = { option, listen };
