-- bench/sql/record.sql: what outbox._record costs per endpoint when each
-- of :n endpoints (psql variable; the endpoints rec1 to rec:n exist) has
-- one delivery in the record and its health row is due for a write (its
-- last success over a second old), as at the start of a stream page of
-- that many endpoints.  With the relay stopped; jit off as in the relay.
-- Each of 25 records is timed alone, in a transaction of its own as the
-- relay's are, the health rows made due before it in the same transaction;
-- prints the median milliseconds of the last 20 (the first five let the
-- function's statements settle on the plans the relay keeps).
\set ON_ERROR_STOP 1
SET jit = off;
CREATE TEMP TABLE record_ids AS
SELECT outbox._endpoint_id('rec' || i) AS id FROM generate_series(1, :n) AS i;
CREATE TEMP TABLE record_ms (round int, ms float8);
DO $$
DECLARE
    o outbox.outcome[];
    t0 timestamptz;
BEGIN
    FOR r IN 1..25 LOOP
        o := ARRAY(SELECT ROW(x.id, 1000000 * r + x.id, gen_random_uuid(), 1, 'delivered', NULL, 200, NULL,
                              1.0, NULL, NULL)::outbox.outcome
                     FROM record_ids x ORDER BY x.id);
        UPDATE outbox.endpoint_health SET last_success_at = now() - interval '2 seconds'
         WHERE endpoint_id IN (SELECT id FROM record_ids);
        t0 := clock_timestamp();
        PERFORM outbox._record(o, '{}', '{}', '{}');
        INSERT INTO record_ms VALUES (r, extract(epoch FROM clock_timestamp() - t0) * 1000);
        COMMIT;
    END LOOP;
END
$$;
SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2) FROM record_ms WHERE round > 5;
