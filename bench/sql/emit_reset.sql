-- bench/sql/emit_reset.sql: empty what the emit-cost runs fill, so that
-- every variant of case 1 starts from the same empty tables.
TRUNCATE bench_order, bench_event, outbox.events;
SELECT format('TRUNCATE %s', queue_data_pfx) AS truncate_pgq
  FROM pgq.queue WHERE queue_name = 'bench' \gexec
VACUUM ANALYZE bench_order, bench_event;
CHECKPOINT;
