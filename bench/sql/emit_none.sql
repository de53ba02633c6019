-- bench/sql/emit_none.sql: case 1 baseline, the business row alone.
\set customer random(1, 100000)
BEGIN;
INSERT INTO bench_order (customer, amount) VALUES (:customer, 19.99);
END;
