// t/node/nats_stream.js: JetStream streams for the NATS TAP tests, through
// the official client (npm "nats"): make, change and delete a stream, and
// read every message it holds as a consumer would.
//
//   node nats_stream.js SERVERS add|update JSON    the stream's config
//   node nats_stream.js SERVERS delete NAME
//   node nats_stream.js SERVERS info NAME          its state, as JSON
//   node nats_stream.js SERVERS read NAME          every message, in order
//
// SERVERS is host:port[,host:port].  NATS_USER and NATS_PASS, or
// NATS_TOKEN, in the environment: the credentials to connect with;
// NATS_CA, NATS_CERT and NATS_KEY: TLS with that CA and client certificate.  read prints one JSON line per message:
// seq, subject, headers (name: value; the first value of each), data (the
// payload as text), from the first sequence to the last at the start.
// Exits 1 with the client's error on stderr.
"use strict";

const { connect, StringCodec } = require("nats");

async function main()
{
	const [servers, cmd, arg] = process.argv.slice(2);
	const tls = process.env.NATS_CA ? { caFile: process.env.NATS_CA, certFile: process.env.NATS_CERT,
		keyFile: process.env.NATS_KEY } : undefined;
	const nc = await connect({ servers: servers.split(","), timeout: 5000, tls,
		user: process.env.NATS_USER, pass: process.env.NATS_PASS, token: process.env.NATS_TOKEN });
	try
	{
		const jsm = await nc.jetstreamManager({ timeout: 10000 });

		if (cmd === "add" || cmd === "update")
		{
			const cfg = JSON.parse(arg);
			const info = cmd === "add" ? await jsm.streams.add(cfg)
				: await jsm.streams.update(cfg.name, cfg);
			console.log(JSON.stringify(info.config));
		}
		else if (cmd === "delete")
			await jsm.streams.delete(arg);
		else if (cmd === "info")
		{
			const info = await jsm.streams.info(arg);
			console.log(JSON.stringify({ state: info.state, cluster: info.cluster }));
		}
		else if (cmd === "read")
		{
			const info = await jsm.streams.info(arg);
			const last = info.state.last_seq;
			const sc = StringCodec();

			// (stored messages by sequence, a hundred requests at a time)
			for (let seq = info.state.first_seq; info.state.messages > 0 && seq <= last; seq += 100)
			{
				const gets = [];

				for (let s = seq; s < seq + 100 && s <= last; s++)
					gets.push(jsm.streams.getMessage(arg, { seq: s }).catch((err) => err));
				for (const m of await Promise.all(gets))
				{
					const headers = {};

					if (m instanceof Error)
					{
						if (/no message found/i.test(m.message))
							continue;	// deleted
						throw m;
					}
					if (m.header)
						for (const [k, v] of m.header)
							headers[k] = v[0];
					console.log(JSON.stringify({ seq: m.seq, subject: m.subject, headers,
						data: sc.decode(m.data) }));
				}
			}
		}
		else
			throw new Error(`unknown command ${cmd}`);
	}
	finally
	{
		await nc.close();
	}
}

main().catch((err) => {
	console.error(String(err && err.message ? err.message : err));
	process.exit(1);
});
