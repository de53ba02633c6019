-- outbox 1.6 -> 1.7.
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.7'" to load this file. \quit

-- Objects are changed in place (CREATE OR REPLACE, ALTER); nothing an
-- administrator may have granted on is dropped, so grants and initial
-- privileges stay as they are.

----------------------------------------------------------------------------
-- Metrics (1.7): every number an exporter serves, in Prometheus' names
----------------------------------------------------------------------------

-- Counters that only grow while the server runs, from the relay's shared
-- memory (src/counters.c): per endpoint, attempts by what they came to and
-- their durations as a histogram; the row with endpoint_id NULL is the
-- database's own (its relay's starts, and the attempts to endpoints beyond
-- outbox.max_counted_endpoints).  buckets are cumulative, one per bound of
-- _duration_bounds() and a last for +Inf.
CREATE FUNCTION outbox._counters(
    OUT endpoint_id integer, OUT delivered bigint, OUT retry bigint, OUT dead bigint, OUT expired bigint,
    OUT buckets bigint[], OUT seconds_sum double precision, OUT relay_starts bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_counters';
COMMENT ON FUNCTION outbox._counters() IS
    'internal: this database''s counters in shared memory, per endpoint: attempts by outcome, the duration histogram, the relay''s starts';

-- (STABLE, not IMMUTABLE: folded while planning, it would be called, and
-- its EXECUTE checked, before the view's own privileges are)
CREATE FUNCTION outbox._duration_bounds() RETURNS double precision[]
LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'outbox_duration_bounds';
COMMENT ON FUNCTION outbox._duration_bounds() IS
    'internal: the upper bounds, in seconds, of the attempt duration histogram''s buckets';

-- One row per sample: name and labels as Prometheus names them, the value,
-- the family's type (a histogram's rows carry their sample's name:
-- _bucket with le, _sum, _count) and what it means.  Gauges per endpoint
-- come from the tables and the relay's shared memory; the counters from
-- _counters() alone, never from the attempt log, which rotation empties.
-- Reading it takes no lock the relay waits on: the tables are read as
-- any SELECT reads them, shared memory without a lock, and the partition
-- whose size is shown only while its rotation is overdue.
CREATE VIEW outbox.metrics AS
WITH retrying AS (
    SELECT rr.endpoint_id, count(*) AS n, count(*) FILTER (WHERE rr.attempts > 0) AS failed,
           min(coalesce(e.created_at, dl.created_at))
               FILTER (WHERE NOT (rr.attempts = 0 AND rr.next_at > now())) AS oldest
      FROM outbox.retries rr
      LEFT JOIN outbox.events e ON e.id = rr.id
      LEFT JOIN outbox.delayed dl ON dl.id = rr.id
     WHERE e.id IS NOT NULL OR dl.id IS NOT NULL
     GROUP BY rr.endpoint_id
), dead AS (
    SELECT d.endpoint_id, count(*) AS n FROM outbox.dead_letter_log d GROUP BY d.endpoint_id
), counted AS (
    SELECT c.endpoint_id, c.delivered, c.retry, c.dead, c.expired, c.buckets, c.seconds_sum, '{}'::jsonb AS labels
      FROM outbox._counters() c
     WHERE c.endpoint_id IS NULL AND c.delivered + c.retry + c.dead + c.expired > 0
    UNION ALL
    -- (an endpoint not counted yet starts at 0)
    SELECT ep.id, coalesce(c.delivered, 0), coalesce(c.retry, 0), coalesce(c.dead, 0), coalesce(c.expired, 0),
           coalesce(c.buckets, array_fill(0::bigint, ARRAY[cardinality(outbox._duration_bounds()) + 1])),
           coalesce(c.seconds_sum, 0), jsonb_build_object('endpoint', ep.name)
      FROM outbox.endpoints ep
      LEFT JOIN outbox._counters() c ON c.endpoint_id = ep.id
), rotated AS (
    SELECT r.tbl, extract(epoch FROM now() - r.opened_at) AS age,
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
SELECT m.name, jsonb_build_object('endpoint', ep.name) AS labels, m.value::double precision, 'gauge'::text AS type, m.help
  FROM outbox.endpoints ep
  JOIN outbox.endpoint_health h ON h.endpoint_id = ep.id
  LEFT JOIN outbox._unread_all() u ON u.endpoint_id = ep.id
  LEFT JOIN retrying r ON r.endpoint_id = ep.id
  LEFT JOIN dead d ON d.endpoint_id = ep.id
  LEFT JOIN outbox._in_flight() f ON f.endpoint_id = ep.id
  CROSS JOIN LATERAL (VALUES
        ('outbox_events_pending', coalesce(u.n, 0) + coalesce(r.n, 0),
         'deliveries owed to the endpoint: events not yet sent and retries (an event owed to two endpoints counts for each)'),
        ('outbox_oldest_pending_age_seconds',
         coalesce(extract(epoch FROM now() - least(u.oldest, r.oldest)), 0),
         'age of the oldest delivery owed to the endpoint and due, since its emit; 0 when none is due'),
        ('outbox_events_in_retry', coalesce(r.failed, 0),
         'events that failed at least once and wait for their next attempt'),
        ('outbox_dead_letters', coalesce(d.n, 0),
         'events given up on for the endpoint, as outbox.dead_letters has them'),
        ('outbox_endpoint_up',
         CASE WHEN ep.disabled_at IS NULL AND NOT ep.paused AND h.consecutive_failures = 0 THEN 1 ELSE 0 END,
         '1 when the endpoint is active and its last attempt did not fail; 0 when paused, disabled or failing'),
        ('outbox_endpoint_consecutive_failures', h.consecutive_failures,
         'failed attempts since the endpoint''s last success'),
        ('outbox_endpoint_in_flight', coalesce(f.in_flight, 0),
         'the endpoint''s requests in flight now')
       ) m(name, value, help)
UNION ALL
SELECT 'outbox_deliveries_total', c.labels || jsonb_build_object('outcome', o.outcome), o.n::double precision,
       'counter',
       'attempts by what they came to (delivered, retry, dead, expired), since the server started'
  FROM counted c
  CROSS JOIN LATERAL (VALUES ('delivered', c.delivered), ('retry', c.retry), ('dead', c.dead),
                             ('expired', c.expired)) o(outcome, n)
UNION ALL
SELECT 'outbox_attempt_duration_seconds_bucket',
       c.labels || jsonb_build_object('le', coalesce(b.le::text, '+Inf')), c.buckets[b.i::integer]::double precision,
       'histogram', 'how long attempts took, from the request''s start to its answer, since the server started'
  FROM counted c
  CROSS JOIN LATERAL unnest(outbox._duration_bounds() || NULL::double precision) WITH ORDINALITY b(le, i)
UNION ALL
SELECT 'outbox_attempt_duration_seconds_sum', c.labels, c.seconds_sum, 'histogram',
       'how long attempts took, from the request''s start to its answer, since the server started'
  FROM counted c
UNION ALL
SELECT 'outbox_attempt_duration_seconds_count', c.labels, c.buckets[cardinality(c.buckets)]::double precision,
       'histogram', 'how long attempts took, from the request''s start to its answer, since the server started'
  FROM counted c
UNION ALL
SELECT 'outbox_relay_running', '{}',
       CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity
                          WHERE backend_type = 'outbox relay' AND datname = current_database())
            THEN 1 ELSE 0 END,
       'gauge', '1 when a relay serves this database'
UNION ALL
SELECT 'outbox_relay_restarts_total', '{}',
       coalesce((SELECT greatest(c.relay_starts - 1, 0) FROM outbox._counters() c WHERE c.endpoint_id IS NULL), 0),
       'counter', 'relays started again for this database since the server started (a crash, a stop, an update)'
UNION ALL
SELECT m.name, jsonb_build_object('table', r.tbl), m.value, 'gauge', m.help
  FROM rotated r
  CROSS JOIN LATERAL (VALUES
        ('outbox_rotation_retention_seconds', r.retention,
         'how long rows of the table are kept (outbox.retention, attempt_retention, inbox_retention)'),
        ('outbox_rotation_age_seconds', r.age,
         'since the table''s current partition began to take rows; it moves on every half retention'),
        ('outbox_rotation_held_seconds', greatest(r.age - r.retention / 2, 0),
         'how long the table''s rotation is overdue: something holds the partition to be emptied (outbox.rotation_holds())'),
        ('outbox_rotation_held_bytes',
         CASE WHEN r.age > r.retention / 2 THEN pg_total_relation_size(r.next_partition::regclass) ELSE 0 END,
         'bytes of the partition whose rotation is overdue, kept until it is emptied; 0 when none is')
       ) m(name, value, help);
COMMENT ON VIEW outbox.metrics IS
    'every metric an exporter serves, one row per sample in Prometheus naming: name, labels, value, type (gauge, counter, histogram) and help';

-- As every object: PUBLIC gets nothing (docs/privileges.md says what to
-- grant an exporter's role).
REVOKE ALL ON outbox.metrics FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox._counters(), outbox._duration_bounds() FROM PUBLIC;
