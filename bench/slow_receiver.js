// bench/slow_receiver.js: the webhook receiver of the many-endpoint cases
// of bench/run.sh (cases 8 to 13), for answers that nginx cannot give.
//
//     node bench/slow_receiver.js PORT [TLS_PORT CERT KEY]
//
// With TLS_PORT, CERT and KEY it also answers the same over HTTPS
// (HTTP/1.1) on 127.0.0.1:TLS_PORT with that certificate.
//
// Listens on 127.0.0.1:PORT with keep-alive and no limit on connections or
// on how long a request may wait.  What it does with a request depends on
// the first part of its path:
//
//     /delay/MS/anything   reads the body, answers 200 after MS milliseconds
//     /hang/anything       reads the body and never answers
//     anything else        answers 200 at once
//
// GET /_status answers with a JSON object of counters: requests received
// and answered, connections open, and requests received per path (so per
// endpoint, when each endpoint has a path of its own).  Only node's own
// modules are used.
'use strict';

const http = require('http');
const https = require('https');
const fs = require('fs');

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) {
	console.error('usage: node slow_receiver.js PORT');
	process.exit(2);
}

const stats = { received: 0, answered: 0, open: 0, peak_open: 0 };
const perPath = new Map();

function answer(res) {
	res.writeHead(200, { 'Content-Length': '0' });
	res.end();
	stats.answered++;
}

function status(res) {
	const body = JSON.stringify({ ...stats, paths: Object.fromEntries(perPath) });
	res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
	res.end(body);
}

function handle(req, res) {
	if (req.method === 'GET' && req.url === '/_status') {
		status(res);
		return;
	}
	// The body is read (and dropped) before anything is answered, as a
	// real receiver would.
	req.resume();
	req.on('end', () => {
		const parts = req.url.split('/');      // ['', 'delay', '200', ...]
		stats.received++;
		perPath.set(req.url, (perPath.get(req.url) || 0) + 1);
		if (parts[1] === 'hang') {
			return;
		}
		const delay = parts[1] === 'delay' ? Number(parts[2]) : 0;
		if (delay > 0) {
			setTimeout(answer, delay, res);
		} else {
			answer(res);
		}
	});
}

function serve(server, listenPort, what) {
	// No timeouts of node's own: a hanging request waits until the client
	// gives up, and an idle kept-alive connection stays open.
	server.keepAliveTimeout = 0;
	server.headersTimeout = 0;
	server.requestTimeout = 0;
	server.timeout = 0;
	server.maxRequestsPerSocket = 0;
	server.on(what === 'https' ? 'secureConnection' : 'connection', (socket) => {
		stats.open++;
		stats.peak_open = Math.max(stats.peak_open, stats.open);
		socket.on('close', () => { stats.open--; });
	});
	server.listen({ host: '127.0.0.1', port: listenPort, backlog: 4096 }, () => {
		console.log(`slow_receiver: ${what} on 127.0.0.1:${listenPort}`);
	});
}

serve(http.createServer({ keepAlive: true }, handle), port, 'http');
if (process.argv[3]) {
	serve(https.createServer({
		keepAlive: true,
		cert: fs.readFileSync(process.argv[4]),
		key: fs.readFileSync(process.argv[5]),
		ALPNProtocols: ['http/1.1'],
	}, handle), Number(process.argv[3]), 'https');
}

for (const signal of ['SIGINT', 'SIGTERM']) {
	process.on(signal, () => process.exit(0));
}
