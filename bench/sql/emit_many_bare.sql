-- bench/sql/emit_many_bare.sql: case 1, the same 1,000 events as one
-- multi-row INSERT into bench_event (the bare-INSERT baseline's table).
\set customer random(1, 100000)
INSERT INTO bench_event (slot, event_id, txid, event_type, payload, created_at)
SELECT 0, gen_random_uuid(), pg_current_xact_id(), 'order.created',
       jsonb_build_object('customer', :customer + i, 'amount', 19.99, 'currency', 'EUR'), now()
  FROM generate_series(1, 1000) AS i;
