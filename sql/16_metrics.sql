-- outbox.metrics: its columns and their types, the metrics it serves with
-- their types and labels, the histogram's shape, gauges that follow the
-- tables, and who may read it.  No relay serves this database
-- (outbox.database), so the counters stay at 0 here; t/037_metrics.pl
-- watches them grow under a relay and scrapes them with the real exporter
-- and Prometheus.

-- The columns, as every exporter reads them.
SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type
  FROM pg_attribute a
 WHERE a.attrelid = 'outbox.metrics'::regclass AND a.attnum > 0
 ORDER BY a.attnum;

SELECT outbox.create_endpoint('mx-a', 'https://example.com/a', ARRAY['mx.*']) IS NOT NULL AS created;
SELECT outbox.create_endpoint('mx-b', 'https://example.com/b', ARRAY['mx.b']) IS NOT NULL AS created;
SELECT outbox.create_endpoint('mx-all', 'https://example.com/all', ARRAY['*']) IS NOT NULL AS created;
SELECT outbox.create_endpoint('mx_under', 'https://example.com/u', ARRAY['mx_b', 'm*', 'mx.a']) IS NOT NULL AS created;

-- Every metric, its type and its label keys, for one endpoint and for the
-- database; each sample named outbox_*, each with a help text.  (mx-a owes
-- nothing and has no attempt yet: it has its outbox_endpoint_up alone.)
SELECT name, type, ARRAY(SELECT jsonb_object_keys(labels) ORDER BY 1) AS label_keys, count(*) AS samples
  FROM outbox.metrics
 WHERE labels->>'endpoint' = 'mx-a' OR NOT labels ? 'endpoint'
 GROUP BY 1, 2, 3
 ORDER BY 1, 3;
SELECT count(*) FILTER (WHERE name !~ '^outbox_[a-z_]+$') AS badly_named,
       count(*) FILTER (WHERE coalesce(help, '') = '') AS without_help,
       count(*) FILTER (WHERE type NOT IN ('gauge', 'counter', 'histogram')) AS unknown_type,
       count(*) FILTER (WHERE jsonb_typeof(labels) <> 'object') AS labels_not_object,
       count(*) FILTER (WHERE value IS NULL OR value = 'NaN') AS without_value
  FROM outbox.metrics;
-- One help text per metric family.
SELECT regexp_replace(name, '_(bucket|sum|count)$', '') AS family, count(DISTINCT help) AS helps
  FROM outbox.metrics
 GROUP BY 1 HAVING count(DISTINCT help) <> 1;

-- The histogram, of the whole database: a bucket per bound and +Inf, in
-- order, the last equal to the count.
SELECT labels->>'le' AS le, value
  FROM outbox.metrics
 WHERE name = 'outbox_attempt_duration_seconds_bucket'
 ORDER BY CASE WHEN labels->>'le' = '+Inf' THEN 'Infinity'::float8 ELSE (labels->>'le')::float8 END;
SELECT name, labels, value FROM outbox.metrics
 WHERE name IN ('outbox_attempt_duration_seconds_sum', 'outbox_attempt_duration_seconds_count') ORDER BY 1;
-- Every endpoint has its outbox_endpoint_up; the other samples are there
-- while they are not 0, a counter from its first count (no relay serves
-- this database: none here).
SELECT count(DISTINCT labels->>'endpoint') = (SELECT count(*) FROM outbox.endpoints) AS every_endpoint_up
  FROM outbox.metrics WHERE name = 'outbox_endpoint_up';
SELECT count(*) AS zero_samples FROM outbox.metrics WHERE labels ? 'endpoint' AND name <> 'outbox_endpoint_up' AND value = 0;
-- Gauges follow the tables: events owed per endpoint (by its patterns),
-- the oldest one's age, dead letters, up; paused is not up.
SELECT outbox.emit('mx.a', '{}') IS NOT NULL AS emitted;
SELECT outbox.emit('mx.b', '{}') IS NOT NULL AS emitted;
SELECT outbox.emit('mx.b', '{}') IS NOT NULL AS emitted;
SELECT outbox.pause_endpoint('mx-b');
SELECT labels->>'endpoint' AS endpoint, name, value
  FROM outbox.metrics
 WHERE labels->>'endpoint' IN ('mx-a', 'mx-b')
   AND name IN ('outbox_events_pending', 'outbox_dead_letters', 'outbox_endpoint_up')
 ORDER BY 1, 2;
-- The same counts as endpoint_status, for exact, prefix and "*" patterns
-- ("_" is no wildcard) and overlapping ones (an event counts once).
SELECT s.name, m.value AS pending, coalesce(m.value, 0) = s.events_waiting AS as_endpoint_status
  FROM outbox.endpoint_status s
  LEFT JOIN outbox.metrics m ON m.name = 'outbox_events_pending' AND m.labels->>'endpoint' = s.name
 ORDER BY 1;
SELECT labels->>'endpoint' AS endpoint, value >= 0 AND value < 3600 AS age_plausible
  FROM outbox.metrics
 WHERE name = 'outbox_oldest_pending_age_seconds' AND labels->>'endpoint' IN ('mx-a', 'mx-b')
 ORDER BY 1;
-- A dead letter, as the relay records one.
SELECT outbox._record(ARRAY[ROW((SELECT id FROM outbox.endpoints WHERE name = 'mx-a'),
                                e.id, e.event_id, 1, 'dead', NULL, 400, 'bad request', 12.5, '', NULL)::outbox.outcome],
                      '{}', '{}')
  FROM outbox.events e WHERE e.event_type = 'mx.a';
SELECT value AS dead_letters FROM outbox.metrics
 WHERE name = 'outbox_dead_letters' AND labels->>'endpoint' = 'mx-a';
-- Now mx-a owes events and has a dead letter: its gauges, with their
-- labels.
SELECT name, type, ARRAY(SELECT jsonb_object_keys(labels) ORDER BY 1) AS label_keys, count(*) AS samples
  FROM outbox.metrics
 WHERE labels->>'endpoint' = 'mx-a'
 GROUP BY 1, 2, 3
 ORDER BY 1, 3;

-- Per database: no relay here; rotation per table, nothing held.
SELECT name, labels, value FROM outbox.metrics
 WHERE name IN ('outbox_relay_running', 'outbox_relay_restarts_total', 'outbox_rotation_held_seconds',
                'outbox_rotation_held_bytes')
 ORDER BY 1, labels->>'table';
SELECT labels->>'table' AS tbl, value AS retention_seconds
  FROM outbox.metrics WHERE name = 'outbox_rotation_retention_seconds' ORDER BY 1;

-- A dropped endpoint's samples go with it.
SELECT outbox.drop_endpoint('mx-b');
SELECT count(*) AS samples_of_dropped FROM outbox.metrics WHERE labels->>'endpoint' = 'mx-b';

-- PUBLIC gets nothing; an exporter's role gets what docs/monitoring.md
-- grants, and reads every sample.
CREATE ROLE regress_metrics_reader;
SET ROLE regress_metrics_reader;
SELECT count(*) FROM outbox.metrics;
RESET ROLE;
GRANT USAGE ON SCHEMA outbox TO regress_metrics_reader;
GRANT SELECT ON outbox.metrics TO regress_metrics_reader;
GRANT EXECUTE ON FUNCTION outbox._counters(), outbox._duration_totals(), outbox._duration_bounds(),
                          outbox._pending(), outbox._setting_interval(text, interval) TO regress_metrics_reader;
SELECT count(*) AS samples FROM outbox.metrics \gset
SET ROLE regress_metrics_reader;
SELECT count(*) = :samples AS reads_every_sample FROM outbox.metrics;
RESET ROLE;
REVOKE ALL ON outbox.metrics FROM regress_metrics_reader;
REVOKE ALL ON FUNCTION outbox._counters(), outbox._duration_totals(), outbox._duration_bounds(),
                       outbox._pending(), outbox._setting_interval(text, interval) FROM regress_metrics_reader;
REVOKE ALL ON SCHEMA outbox FROM regress_metrics_reader;
DROP ROLE regress_metrics_reader;
SELECT outbox.drop_endpoint('mx-a');
SELECT outbox.drop_endpoint('mx-all');
SELECT outbox.drop_endpoint('mx_under');
