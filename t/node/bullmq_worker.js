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
  else if (cmd === 'run') {
    const want = Number(rest[0]);
    const seconds = Number(rest[1] || 20);
    let finished = 0;
    let done;
    const allDone = new Promise((resolve) => { done = resolve; });
    const worker = new Worker(queueName, async (job) => {
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
    console.log(JSON.stringify({ counts: await queue.getJobCounts() }));
  } else if (cmd !== 'setup') throw new Error(`unknown command ${cmd}`);
  await queue.close();
}

main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });
