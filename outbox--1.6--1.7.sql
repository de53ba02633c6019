-- outbox 1.6 -> 1.7.
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.7'" to load this file. \quit

-- Objects are changed in place (CREATE OR REPLACE, ALTER); nothing an
-- administrator may have granted on is dropped, so grants and initial
-- privileges stay as they are.

-- Redis endpoints (bullmq://, bullmqs://, redis://, rediss://) take an
-- ACL user and password in auth, which the target sends as AUTH; in 1.6
-- they took no auth.  The other schemes take what they took.
CREATE OR REPLACE FUNCTION outbox._check_auth_target(auth jsonb, url text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    scheme text := lower(split_part(url, '://', 1));
    target text;
    takes  text[];
    k      text;
BEGIN
    IF auth IS NULL THEN
        RETURN;
    END IF;
    CASE
        WHEN scheme IN ('http', 'https') THEN
            target := 'a webhook';
            takes := '{bearer,oauth2,client_cert,client_key}';
        WHEN scheme = 'amqp' THEN
            target := 'a RabbitMQ';
            takes := '{username,password}';
        WHEN scheme = 'amqps' THEN
            target := 'a RabbitMQ';
            takes := '{username,password,client_cert,client_key}';
        WHEN scheme = 'nats' THEN
            target := 'a NATS';
            takes := '{username,password,token}';
        WHEN scheme = 'tls' THEN
            target := 'a NATS';
            takes := '{username,password,token,client_cert,client_key}';
        WHEN scheme = 'kafka' THEN
            target := 'a Kafka';
            takes := '{sasl}';
        WHEN scheme = 'kafkas' THEN
            target := 'a Kafka';
            takes := '{sasl,client_cert,client_key}';
        WHEN scheme IN ('bullmq', 'bullmqs', 'redis', 'rediss') THEN
            target := 'a Redis';
            takes := '{username,password}';
        ELSE
            target := 'this';
            takes := '{}';
    END CASE;
    FOR k IN SELECT jsonb_object_keys(auth) ORDER BY 1 LOOP
        IF k IN ('client_cert', 'client_key') AND scheme IN ('amqp', 'nats', 'kafka') THEN
            RAISE EXCEPTION 'auth''s % is not supported for %:// endpoints', k, scheme
                USING ERRCODE = '0A000',
                      DETAIL = 'A client certificate is presented over TLS alone.',
                      HINT = format('Use %s://.', CASE scheme WHEN 'amqp' THEN 'amqps'
                                                              WHEN 'nats' THEN 'tls' ELSE 'kafkas' END);
        ELSIF NOT k = ANY (takes) THEN
            RAISE EXCEPTION 'auth''s % is not supported for % endpoint', k, target
                USING ERRCODE = '0A000',
                      DETAIL = format('The auth of an endpoint URL %s takes %s.',
                                      scheme || '://...', coalesce(nullif(array_to_string(takes, ', '), ''), 'no keys'));
        END IF;
    END LOOP;
    -- libnats writes these into its CONNECT message's JSON as they are.
    IF scheme IN ('nats', 'tls')
       AND EXISTS (SELECT 1 FROM jsonb_each_text(auth) kv
                    WHERE kv.key IN ('username', 'password', 'token') AND kv.value ~ '["\\]') THEN
        RAISE EXCEPTION 'auth''s username, password and token of a NATS endpoint may not hold a quote or a backslash'
            USING ERRCODE = '22023',
                  DETAIL = 'The NATS client sends them inside a JSON message without escaping them.';
    END IF;
END
$$;

----------------------------------------------------------------------------
-- Metrics (1.7): every number an exporter serves, in Prometheus' names
----------------------------------------------------------------------------

-- Counters that only grow while the server runs, from the relay's shared
-- memory (src/counters.c): per endpoint, attempts by what they came to and
-- the seconds they took; the row with endpoint_id NULL is the database's
-- own (its relay's starts, and the attempts to endpoints beyond
-- outbox.max_counted_endpoints).
CREATE FUNCTION outbox._counters(
    OUT endpoint_id integer, OUT delivered bigint, OUT retry bigint, OUT dead bigint, OUT expired bigint,
    OUT seconds_sum double precision, OUT relay_starts bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_counters';
COMMENT ON FUNCTION outbox._counters() IS
    'internal: this database''s counters in shared memory, per endpoint: attempts by outcome, their durations, the relay''s starts';

-- The duration histogram of every attempt of this database, summed over
-- its endpoints' counters in one walk of shared memory.
CREATE FUNCTION outbox._duration_totals(OUT buckets bigint[], OUT seconds_sum double precision)
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_duration_totals';
COMMENT ON FUNCTION outbox._duration_totals() IS
    'internal: the attempt duration histogram of this database: cumulative buckets and the sum of seconds';

-- (STABLE, not IMMUTABLE: folded while planning, it would be called, and
-- its EXECUTE checked, before the view's own privileges are)
CREATE FUNCTION outbox._duration_bounds() RETURNS double precision[]
LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'outbox_duration_bounds';
COMMENT ON FUNCTION outbox._duration_bounds() IS
    'internal: the upper bounds, in seconds, of the attempt duration histogram''s buckets';

-- What each endpoint is owed and due, as endpoint_status counts it
-- (events its position has not passed, of the types it subscribes to, and
-- its retries), for many endpoints at once: the events the stream has not
-- passed are read once for every endpoint that follows it, those of the
-- other positions once per distinct position, and each endpoint's
-- patterns are matched against the types owed, not against every event.
-- oldest leaves out what is not due yet.  With the owner's rights, as
-- _unread_all().  PL/pgSQL for its kept plan: an exporter reads it on one
-- connection, and planning this statement each time cost more than
-- running it while nothing is owed.
CREATE FUNCTION outbox._pending()
RETURNS TABLE (endpoint_id integer, n bigint, oldest timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH own AS (
        SELECT p.endpoint_id, p.snap, p.next_snap, p.after_id,
               dense_rank() OVER (ORDER BY p.snap::text, p.next_snap::text, p.after_id) AS k
          FROM outbox.positions p
         WHERE NOT p.follows
    ), owed AS (
        SELECT 0::bigint AS k, e.event_type, count(*) AS n, min(e.created_at) AS oldest
          FROM outbox.stream s
          JOIN outbox.events e
            ON outbox._not_passed(s.snap, s.next_snap, s.after_id, e.txid, e.id)
           AND pg_visible_in_snapshot(e.txid, pg_current_snapshot())
         GROUP BY e.event_type
        UNION ALL
        SELECT d.k, e.event_type, count(*), min(e.created_at)
          FROM (SELECT DISTINCT ON (own.k) own.k, own.snap, own.next_snap, own.after_id
                  FROM own ORDER BY own.k) d
          JOIN outbox.events e
            ON outbox._not_passed(d.snap, d.next_snap, d.after_id, e.txid, e.id)
           AND pg_visible_in_snapshot(e.txid, pg_current_snapshot())
         GROUP BY d.k, e.event_type
    ), keyed AS (
        SELECT p.endpoint_id, coalesce(own.k, 0) AS k
          FROM outbox.positions p
          LEFT JOIN own ON own.endpoint_id = p.endpoint_id
    ), unread AS (
        SELECT w.endpoint_id, sum(w.n) AS n, min(w.oldest) AS oldest
          FROM (SELECT DISTINCT ON (kd.endpoint_id, o.event_type) kd.endpoint_id, o.n, o.oldest
                  FROM keyed kd
                  JOIN owed o ON o.k = kd.k
                  JOIN outbox.endpoints ep ON ep.id = kd.endpoint_id
                  CROSS JOIN LATERAL unnest(ep.event_types) t(pattern)
                 WHERE t.pattern = o.event_type OR t.pattern = '*'
                    OR (right(t.pattern, 1) = '*'
                        AND left(o.event_type, length(t.pattern) - 1) = left(t.pattern, -1))) w
         GROUP BY w.endpoint_id
    ), retrying AS (
        SELECT rr.endpoint_id, count(*) AS n,
               min(coalesce(e.created_at, dl.created_at))
                   FILTER (WHERE NOT (rr.attempts = 0 AND rr.next_at > now())) AS oldest
          FROM outbox.retries rr
          LEFT JOIN outbox.events e ON e.id = rr.id
          LEFT JOIN outbox.delayed dl ON dl.id = rr.id
         WHERE e.id IS NOT NULL OR dl.id IS NOT NULL
         GROUP BY rr.endpoint_id
    )
    SELECT coalesce(u.endpoint_id, r.endpoint_id), (coalesce(u.n, 0) + coalesce(r.n, 0))::bigint,
           least(u.oldest, r.oldest)
      FROM unread u
      FULL JOIN retrying r ON r.endpoint_id = u.endpoint_id;
END
$$;
COMMENT ON FUNCTION outbox._pending() IS
    'internal: per endpoint owed anything, the deliveries owed and the emit time of the oldest one due';

-- One row per sample: name and labels as Prometheus names them, the value,
-- the family's type (a histogram's rows carry their sample's name:
-- _bucket with le, _sum, _count) and what it means.  The gauges come from
-- the tables and the relay's shared memory; the counters from shared
-- memory alone, never from the attempt log, which rotation empties.  Every
-- endpoint has its outbox_endpoint_up; its other samples are there while
-- they are not 0 (a counter from its first count): beside thousands of
-- endpoints each sample is a cost to every read, and most are 0.  Each
-- metric is a branch of its own, so that a reader asking for some names
-- computes only theirs.  Reading it takes no lock the relay waits on: the
-- tables are read as any SELECT reads them, shared memory without a lock,
-- and a partition's size only while its rotation is overdue.
CREATE VIEW outbox.metrics AS
WITH counted AS (
    SELECT * FROM outbox._counters()
), ep AS (
    SELECT e.id, e.name, jsonb_build_object('endpoint', e.name) AS labels,
           e.disabled_at IS NULL AND NOT e.paused AND h.consecutive_failures = 0 AS up,
           p.n AS pending, extract(epoch FROM now() - p.oldest) AS oldest_age,
           c.delivered, c.retry, c.dead, c.expired
      FROM outbox.endpoints e
      JOIN outbox.endpoint_health h ON h.endpoint_id = e.id
      LEFT JOIN outbox._pending() p ON p.endpoint_id = e.id
      LEFT JOIN counted c ON c.endpoint_id = e.id
), db AS (
    SELECT c.delivered, c.retry, c.dead, c.expired, c.relay_starts FROM counted c WHERE c.endpoint_id IS NULL
), durations AS (
    SELECT t.buckets, t.seconds_sum, outbox._duration_bounds() AS bounds FROM outbox._duration_totals() t
), rotated AS (
    SELECT r.tbl, jsonb_build_object('table', r.tbl) AS labels, extract(epoch FROM now() - r.opened_at) AS age,
           extract(epoch FROM s.retention) AS retention,
           format('outbox.%s_%s', r.tbl, (r.slot + 1) % 3) AS next_partition
      FROM outbox.rotation r
      CROSS JOIN LATERAL (
            SELECT outbox._setting_interval(CASE r.tbl WHEN 'events' THEN 'outbox.retention'
                                                       WHEN 'attempt_log' THEN 'outbox.attempt_retention'
                                                       ELSE 'outbox.inbox_retention' END,
                                            '7 days') AS retention) s
     WHERE r.current
)
SELECT 'outbox_endpoint_up'::text AS name, ep.labels, CASE WHEN ep.up THEN 1 ELSE 0 END::double precision AS value,
       'gauge'::text AS type,
       '1 when the endpoint is active and its last attempt did not fail; 0 when paused, disabled or failing'::text AS help
  FROM ep
UNION ALL
SELECT 'outbox_events_pending', ep.labels, ep.pending, 'gauge',
       'deliveries owed to the endpoint: events not yet sent and retries (an event owed to two endpoints counts for each)'
  FROM ep WHERE ep.pending > 0
UNION ALL
SELECT 'outbox_oldest_pending_age_seconds', ep.labels, ep.oldest_age, 'gauge',
       'age of the oldest delivery owed to the endpoint and due, since its emit'
  FROM ep WHERE ep.oldest_age IS NOT NULL
UNION ALL
SELECT 'outbox_dead_letters', ep.labels, d.n, 'gauge',
       'events given up on for the endpoint, as outbox.dead_letters has them'
  FROM (SELECT dl.endpoint_id, count(*) AS n FROM outbox.dead_letter_log dl GROUP BY dl.endpoint_id) d
  JOIN ep ON ep.id = d.endpoint_id
UNION ALL
SELECT 'outbox_deliveries_total', ep.labels || o.outcome, o.n, 'counter',
       'attempts by what they came to (delivered, retry, dead, expired), since the server started'
  FROM ep
  CROSS JOIN LATERAL (VALUES ('{"outcome": "delivered"}'::jsonb, ep.delivered), ('{"outcome": "retry"}', ep.retry),
                             ('{"outcome": "dead"}', ep.dead), ('{"outcome": "expired"}', ep.expired)) o(outcome, n)
 WHERE o.n > 0
UNION ALL
-- (attempts to endpoints beyond outbox.max_counted_endpoints, without an
-- endpoint label)
SELECT 'outbox_deliveries_total', o.outcome, o.n, 'counter',
       'attempts by what they came to (delivered, retry, dead, expired), since the server started'
  FROM db
  CROSS JOIN LATERAL (VALUES ('{"outcome": "delivered"}'::jsonb, db.delivered), ('{"outcome": "retry"}', db.retry),
                             ('{"outcome": "dead"}', db.dead), ('{"outcome": "expired"}', db.expired)) o(outcome, n)
 WHERE o.n > 0
UNION ALL
SELECT 'outbox_attempt_duration_seconds_bucket', jsonb_build_object('le', coalesce(b.le::text, '+Inf')),
       d.buckets[b.i::integer], 'histogram',
       'how long attempts took, from the request''s start to its answer, since the server started'
  FROM durations d
  CROSS JOIN LATERAL unnest(d.bounds || NULL::double precision) WITH ORDINALITY b(le, i)
UNION ALL
SELECT 'outbox_attempt_duration_seconds_sum', '{}', d.seconds_sum, 'histogram',
       'how long attempts took, from the request''s start to its answer, since the server started'
  FROM durations d
UNION ALL
SELECT 'outbox_attempt_duration_seconds_count', '{}', d.buckets[cardinality(d.buckets)], 'histogram',
       'how long attempts took, from the request''s start to its answer, since the server started'
  FROM durations d
UNION ALL
SELECT 'outbox_relay_running', '{}',
       CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity
                          WHERE backend_type = 'outbox relay' AND datname = current_database())
            THEN 1 ELSE 0 END,
       'gauge', '1 when a relay serves this database'
UNION ALL
SELECT 'outbox_relay_restarts_total', '{}', coalesce((SELECT greatest(db.relay_starts - 1, 0) FROM db), 0),
       'counter', 'relays started again for this database since the server started (a crash, a stop, an update)'
UNION ALL
SELECT 'outbox_rotation_retention_seconds', r.labels, r.retention, 'gauge',
       'how long rows of the table are kept (outbox.retention, attempt_retention, inbox_retention)'
  FROM rotated r
UNION ALL
SELECT 'outbox_rotation_age_seconds', r.labels, r.age, 'gauge',
       'since the table''s current partition began to take rows; it moves on every half retention'
  FROM rotated r
UNION ALL
SELECT 'outbox_rotation_held_seconds', r.labels, greatest(r.age - r.retention / 2, 0), 'gauge',
       'how long the table''s rotation is overdue: something holds the partition to be emptied (outbox.rotation_holds())'
  FROM rotated r
UNION ALL
SELECT 'outbox_rotation_held_bytes', r.labels,
       CASE WHEN r.age > r.retention / 2 THEN pg_total_relation_size(r.next_partition::regclass) ELSE 0 END,
       'gauge', 'bytes of the partition whose rotation is overdue, kept until it is emptied; 0 when none is'
  FROM rotated r;
COMMENT ON VIEW outbox.metrics IS
    'every metric an exporter serves, one row per sample in Prometheus naming: name, labels, value, type (gauge, counter, histogram) and help';

-- As every object: PUBLIC gets nothing (docs/privileges.md says what to
-- grant an exporter's role).
REVOKE ALL ON outbox.metrics FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox._counters(), outbox._duration_totals(), outbox._duration_bounds(),
                       outbox._pending() FROM PUBLIC;
