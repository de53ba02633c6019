// bench/bullmq_producer.js: BullMQ's own Node producer, the baseline of
// bench case 21 (bench/redis.sh).
//
//   node bullmq_producer.js PORT QUEUE N PAGE TEMPLATE PRIORITY
//
// Adds N jobs named "bench.event" to QUEUE on the Redis of 127.0.0.1:PORT
// with Queue.addBulk (BullMQ 6, t/node/node_modules), PAGE jobs a call, each
// call awaited before the next: one page in flight, as the relay has one
// page of an endpoint's in flight.  Job i's data is TEMPLATE (a job's data
// as the relay wrote it, JSON) with data.n set to i, so that the data has
// the relay's size (the note padded by the spaces JSON.stringify drops);
// its id is a fresh UUID (as long as the relay's event ids), its opts attempts 1 and, unless PRIORITY is 0, that priority (the
// relay's default gives every job one).  The jobs are built before the
// clock starts; the Queue is ready before it starts.  Prints "N SECONDS".
'use strict';

const path = require('path');
const crypto = require('crypto');
const { Queue } = require(path.join(__dirname, '..', 't', 'node', 'node_modules', 'bullmq'));

async function main() {
  const [port, queueName, nArg, pageArg, template, priorityArg] = process.argv.slice(2);
  const n = Number(nArg);
  const page = Number(pageArg);
  const priority = Number(priorityArg);
  const base = JSON.parse(template);
  // (the relay's data is the body as PostgreSQL wrote it, with spaces:
  // the note is made longer by what JSON.stringify leaves out)
  base.data.note += 'x'.repeat(Math.max(0, Buffer.byteLength(template) - Buffer.byteLength(JSON.stringify(base))));
  const connection = { host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: null };
  const queue = new Queue(queueName, { connection });
  await queue.waitUntilReady();

  const pages = [];
  for (let first = 1; first <= n; first += page) {
    const jobs = [];
    for (let i = first; i < first + page && i <= n; i++) {
      const data = JSON.parse(JSON.stringify(base));
      data.data.n = i;
      const opts = { jobId: crypto.randomUUID(), attempts: 1 };
      if (priority > 0) opts.priority = priority;
      jobs.push({ name: 'bench.event', data, opts });
    }
    pages.push(jobs);
  }

  const t0 = process.hrtime.bigint();
  let added = 0;
  for (const jobs of pages) {
    added += (await queue.addBulk(jobs)).length;
  }
  const t1 = process.hrtime.bigint();
  await queue.close();
  console.log(`${added} ${Number(t1 - t0) / 1e9}`);
}

main().catch((e) => { console.error(e); process.exit(1); });
