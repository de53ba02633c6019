-- bench/sql/ahead.sql: what a page read costs when events carry a
-- priority (priority across a backlog, _read_page's look ahead).  With the
-- relay stopped: one endpoint behind, 100,000 events of which a share
-- :pct (psql variable, 0 to 1) have a priority of 1 to 3; its pages of
-- 500 are read one after the other as the relay would, each recorded by
-- an attempt row per event sent and its position moved past its own rows.
-- Prints the pages read, the milliseconds per page and per event sent,
-- and the events sent ahead.
\set ON_ERROR_STOP 1
SELECT outbox.create_endpoint('ahead', 'http://127.0.0.1:9/ahead', '{x.*}') IS NOT NULL AS created \gset
UPDATE outbox.positions SET follows = false;
SELECT count(outbox.emit('x.a', '{"n": 1}',
                         priority => CASE WHEN random() < :pct THEN 1 + (random() * 2)::int ELSE 0 END)) AS emitted
  FROM generate_series(1, 100000) \gset
-- The stream moved on: the endpoint's own batch is everything emitted.
UPDATE outbox.stream SET snap = pg_current_snapshot(), next_snap = NULL, after_id = 0;
CREATE TEMP TABLE ahead_pages (page int, ms float8, own int, ahead int);
DO $$
DECLARE
    t0 timestamptz;
    n_own int;
    n_ahead int;
    last bigint;
    eid int := outbox._endpoint_id('ahead');
BEGIN
    CREATE TEMP TABLE ahead_rows (id bigint, event_id uuid, ahead boolean);
    FOR i IN 1..300 LOOP
        TRUNCATE ahead_rows;
        t0 := clock_timestamp();
        INSERT INTO ahead_rows
        SELECT r.id, r.event_id, r.ahead FROM outbox._read_page(eid, 500, false, 4194304) r;
        SELECT count(*) FILTER (WHERE NOT a.ahead), count(*) FILTER (WHERE a.ahead),
               max(a.id) FILTER (WHERE NOT a.ahead)
          INTO n_own, n_ahead, last FROM ahead_rows a;
        INSERT INTO ahead_pages VALUES (i, extract(epoch FROM clock_timestamp() - t0) * 1000, n_own, n_ahead);
        EXIT WHEN n_own = 0;
        INSERT INTO outbox.attempt_log (id, event_id, endpoint_id, attempt, at, duration_ms, status, slot)
        SELECT a.id, a.event_id, eid, 1, now(), 1, 200, 0 FROM ahead_rows a;
        UPDATE outbox.positions SET after_id = last WHERE endpoint_id = eid;
    END LOOP;
END $$;
SELECT count(*) FILTER (WHERE own > 0) AS pages,
       round((sum(ms) / nullif(count(*) FILTER (WHERE own > 0), 0))::numeric, 2) AS ms_per_page,
       round((sum(ms) * 1000 / nullif(sum(own + ahead), 0))::numeric, 1) AS us_per_event,
       sum(ahead) AS sent_ahead
  FROM ahead_pages;
