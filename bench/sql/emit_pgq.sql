-- bench/sql/emit_pgq.sql: case 1, the business row plus pgq.insert_event().
\set customer random(1, 100000)
BEGIN;
INSERT INTO bench_order (customer, amount) VALUES (:customer, 19.99);
SELECT pgq.insert_event('bench', 'order.created',
        jsonb_build_object('customer', :customer::integer, 'amount', 19.99, 'currency', 'EUR')::text);
END;
