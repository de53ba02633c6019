// t/node/bullmq_worker.js: a BullMQ Worker, unmodified, for t/035_redis.pl.
//
//   node bullmq_worker.js MAJOR PORT QUEUE setup           a Queue object made
//       (it writes meta.version, as an application's producer would)
//   node bullmq_worker.js MAJOR PORT QUEUE pause|resume
//   node bullmq_worker.js MAJOR PORT QUEUE counts          getJobCounts() as JSON
//   node bullmq_worker.js MAJOR PORT QUEUE run N [SECONDS]
//       a Worker (concurrency 1) runs until N jobs finished (completed, or
//       failed for good) or SECONDS (20) passed; a line of JSON per run of
//       the processor (id, name, data, attemptsMade, opts, priority), then
//       {"counts": ...}.  A job named "fail.once" throws on its first run.
//
//   node bullmq_worker.js MAJOR PORT QUEUE mark N SECONDS PGHOST PGPORT
//       the same Worker, as a consumer that dedupes: in one transaction of
//       database postgres it calls outbox.mark_processed(QUEUE, job.id) and,
//       the first time only, inserts (job.id, job.name) into received; a
//       job of an unknown type (not "order.*") is marked and does nothing.
//       A line of JSON per run: id, name, first.
//
// MAJOR is 6 (npm bullmq) or 5 (npm bullmq5, an alias of bullmq@5).
'use strict';

const [major, port, queueName, cmd, ...rest] = process.argv.slice(2);
const { Queue, Worker } = require(major === '5' ? 'bullmq5' : 'bullmq');

const connection = { host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: null };

async function main() {
  const queue = new Queue(queueName, { connection });
  await queue.waitUntilReady();
  if (cmd === 'pause') await queue.pause();
  else if (cmd === 'resume') await queue.resume();
  else if (cmd === 'counts') console.log(JSON.stringify(await queue.getJobCounts()));
  else if (cmd === 'run' || cmd === 'mark') {
    const want = Number(rest[0]);
    const seconds = Number(rest[1] || 20);
    let pool = null;
    if (cmd === 'mark') {
      const { Pool } = require('pg');
      pool = new Pool({ host: rest[2], port: Number(rest[3]), database: 'postgres',
        user: require('os').userInfo().username });
    }
    let finished = 0;
    let done;
    const allDone = new Promise((resolve) => { done = resolve; });
    const worker = new Worker(queueName, pool ? async (job) => {
      const db = await pool.connect();
      try {
        await db.query('BEGIN');
        const { rows } = await db.query('SELECT outbox.mark_processed($1, $2) AS first', [queueName, job.id]);
        if (rows[0].first && job.name.startsWith('order.')) {
          await db.query('INSERT INTO received (job_id, name) VALUES ($1, $2)', [job.id, job.name]);
        }
        await db.query('COMMIT');
        console.log(JSON.stringify({ id: job.id, name: job.name, first: rows[0].first }));
      } catch (e) {
        await db.query('ROLLBACK');
        throw e;
      } finally {
        db.release();
      }
    } : async (job) => {
      console.log(JSON.stringify({
        id: job.id, name: job.name, data: job.data, attemptsMade: job.attemptsMade,
        opts: job.opts, priority: job.priority,
      }));
      if (job.name === 'fail.once' && job.attemptsMade === 0) throw new Error('failing once');
      return 'ok';
    }, { connection, concurrency: 1 });
    worker.on('completed', () => { if (++finished >= want) done(); });
    worker.on('failed', (job) => {
      if (job.attemptsMade >= (job.opts.attempts || 1) && ++finished >= want) done();
    });
    const timer = setTimeout(done, seconds * 1000);
    await allDone;
    clearTimeout(timer);
    await worker.close();
    if (pool) await pool.end();
    console.log(JSON.stringify({ counts: await queue.getJobCounts() }));
  } else if (cmd !== 'setup') throw new Error(`unknown command ${cmd}`);
  await queue.close();
}

main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
