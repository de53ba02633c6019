-- bench/sql/floor.sql: what PostgreSQL alone takes to read and record the
-- events waiting in outbox.events the way the relay does for one endpoint
-- that follows the stream, with no relay and no target: pages of :page
-- events read with outbox._read_stream(), each recorded as delivered with
-- outbox._record() (its attempt-log rows, the endpoint's health, the
-- stream moved past the page), one transaction for each, as the relay's
-- read and record steps.  No relay can deliver faster than this on the
-- same machine.  Run with nobody following the stream (bench/kafka.sh:
-- every endpoint dropped, :endpoint paused).  Prints events, seconds and
-- the rate.
SET jit = off;                  -- as in the relay (relay.c)
SELECT set_config('bench.page', :'page', false),
       set_config('bench.endpoint', :'endpoint', false) \gset
DO $$
DECLARE
    page   integer := current_setting('bench.page')::integer;
    eid    integer := outbox._endpoint_id(current_setting('bench.endpoint'));
    oc     outbox.outcome[];
    batch  text;
    last   bigint;
    cut    boolean;
    n      integer;
    total  bigint := 0;
    t0     timestamptz := clock_timestamp();
BEGIN
    LOOP
        SELECT array_agg(ROW(eid, r.id, r.event_id, 1, 'delivered', NULL, 200, NULL, 1.0, NULL, NULL)::outbox.outcome
                         ORDER BY r.id),
               max(r.id), min(r.batch), bool_or(r.bytes_cut), count(*)
          INTO oc, last, batch, cut, n
          FROM outbox._read_stream(page, pg_size_bytes(current_setting('outbox.batch_bytes'))) r;
        EXIT WHEN n = 0;
        PERFORM outbox._record(oc, ARRAY[ROW(NULL, batch, last, n < page AND NOT cut)::outbox.page_done], '{}');
        COMMIT;
        total := total + n;
    END LOOP;
    RAISE NOTICE 'floor % % %', total, extract(epoch FROM clock_timestamp() - t0),
        round(total / extract(epoch FROM clock_timestamp() - t0));
END
$$;
