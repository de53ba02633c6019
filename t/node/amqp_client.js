// t/node/amqp_client.js: what the RabbitMQ TAP tests do on the broker's
// side, with the npm "amqplib" client (AMQP 0-9-1), as guest over loopback.
//
//   node amqp_client.js URL setup EXCHANGE:TYPE ... QUEUE=EXCHANGE:BINDING_KEY ...
//       declares durable exchanges and durable queues bound to them
//       (holding at most $AMQP_MAX_LENGTH messages, when set: the bench)
//   node amqp_client.js URL drain QUEUE
//       takes every message QUEUE holds (acknowledged, so gone) and prints
//       one JSON line each, in queue order: routing key, properties,
//       headers, body
//
// Exit status 0 on success; an error goes to stderr with status 1.
"use strict";

const amqp = require("amqplib");

// One message as a JSON line.
function describe(msg) {
	const p = msg.properties;
	const headers = {};
	for (const [k, v] of Object.entries(p.headers || {}))
		headers[k] = Buffer.isBuffer(v) ? v.toString() : v;
	return JSON.stringify({
		routing_key: msg.fields.routingKey,
		exchange: msg.fields.exchange,
		message_id: p.messageId,
		type: p.type,
		content_type: p.contentType,
		delivery_mode: p.deliveryMode,
		timestamp: p.timestamp,
		app_id: p.appId,
		headers: headers,
		body: msg.content.toString(),
	});
}

async function main() {
	const [url, command, ...args] = process.argv.slice(2);
	const conn = await amqp.connect(url);
	try {
		const ch = await conn.createChannel();
		if (command === "setup") {
			for (const arg of args) {
				const eq = arg.indexOf("=");
				if (eq < 0) {
					const [name, type] = arg.split(":");
					await ch.assertExchange(name, type, { durable: true });
				} else {
					const queue = arg.slice(0, eq);
					const rest = arg.slice(eq + 1);
					const colon = rest.indexOf(":");
					const maxLength = process.env.AMQP_MAX_LENGTH;
					await ch.assertQueue(queue, maxLength ?
						{ durable: true, arguments: { "x-max-length": Number(maxLength) } } :
						{ durable: true });
					await ch.bindQueue(queue, rest.slice(0, colon), rest.slice(colon + 1));
				}
			}
		} else if (command === "drain") {
			// As many as the queue holds now, consumed (basic.get one by one
			// pays a round trip each), then acknowledged at once.
			const { messageCount } = await ch.checkQueue(args[0]);
			const out = [];
			if (messageCount > 0) {
				await ch.prefetch(0);
				await new Promise((resolve) => {
					ch.consume(args[0], (msg) => {
						if (msg === null || out.length >= messageCount)
							return;
						out.push(describe(msg));
						if (out.length === messageCount) {
							ch.ack(msg, true);
							resolve();
						}
					}, { noAck: false });
				});
			}
			// the acknowledgement reaches the broker before the channel closes
			await ch.close();
			process.stdout.write(out.map((l) => l + "\n").join(""));
			return;
		} else {
			throw new Error("unknown command " + command);
		}
		await ch.close();
	} finally {
		await conn.close();
	}
}

main().catch((err) => {
	process.stderr.write(String(err && err.stack || err) + "\n");
	process.exit(1);
});
