-- bench/sql/emit_bare.sql: case 1, the business row plus a bare INSERT of
-- the same event into a table shaped like outbox.events with only a PK.
\set customer random(1, 100000)
BEGIN;
INSERT INTO bench_order (customer, amount) VALUES (:customer, 19.99);
INSERT INTO bench_event (slot, event_id, txid, event_type, payload, created_at)
VALUES (0, gen_random_uuid(), pg_current_xact_id(), 'order.created',
        jsonb_build_object('customer', :customer::integer, 'amount', 19.99, 'currency', 'EUR'), now());
END;
