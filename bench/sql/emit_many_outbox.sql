-- bench/sql/emit_many_outbox.sql: case 1, 1,000 events in one call of
-- outbox.emit_many() (their ids counted, not sent back).
\set customer random(1, 100000)
SELECT cardinality(outbox.emit_many('order.created',
        ARRAY(SELECT jsonb_build_object('customer', :customer + i, 'amount', 19.99, 'currency', 'EUR')
                FROM generate_series(1, 1000) AS i)));
