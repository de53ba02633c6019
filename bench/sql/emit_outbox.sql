-- bench/sql/emit_outbox.sql: case 1, the business row plus outbox.emit().
\set customer random(1, 100000)
BEGIN;
INSERT INTO bench_order (customer, amount) VALUES (:customer, 19.99);
SELECT outbox.emit('order.created',
        jsonb_build_object('customer', :customer::integer, 'amount', 19.99, 'currency', 'EUR'));
END;
