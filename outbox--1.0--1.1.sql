-- outbox 1.0 -> 1.1: retention by rotation, a relay in every database,
-- dump and restore into another cluster, and relay_stats per relay.
--
-- A fresh CREATE EXTENSION outbox runs outbox--1.0.sql and then this
-- script, so an installed 1.1 and an updated 1.0 are the same by
-- construction.
--
-- Rotation (DESIGN.md): the events, the attempt log and the inbox each live
-- in three partitions by slot.  One slot takes new rows; every half
-- retention period the relay moves on to the next slot, emptying it with
-- TRUNCATE first.  That slot was last written at least one retention period
-- ago, so rows are kept for between one and one and a half periods.  Events
-- still owed to some endpoint hold the events rotation back instead.

\echo Use "ALTER EXTENSION outbox UPDATE TO '1.1'" to load this file. \quit

----------------------------------------------------------------------------
-- Helpers written in C
----------------------------------------------------------------------------

CREATE FUNCTION outbox._launch() RETURNS void
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_launch';
COMMENT ON FUNCTION outbox._launch() IS 'internal: at commit, ask the launcher to start relays where outbox is now installed';

CREATE FUNCTION outbox._system_identifier() RETURNS text
LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'outbox_system_identifier';
COMMENT ON FUNCTION outbox._system_identifier() IS 'internal: this cluster''s system identifier';

CREATE FUNCTION outbox._inbox_seen(consumer text, message_id text) RETURNS boolean
LANGUAGE c VOLATILE STRICT AS 'MODULE_PATHNAME', 'outbox_inbox_seen';
COMMENT ON FUNCTION outbox._inbox_seen(text, text) IS 'internal: whether a committed mark_processed() recorded the message (latest snapshot)';

----------------------------------------------------------------------------
-- Rotation state
----------------------------------------------------------------------------

-- Per rotated table and slot: which slot takes new rows, when it began to,
-- and when each other slot stopped.  For events, outbox.queue.cur_slot
-- (what emit() reads) always equals the current slot here.  Not dumped: a
-- restored database starts its periods at the restore.
CREATE TABLE outbox.rotation (
    tbl        text NOT NULL CHECK (tbl IN ('events', 'attempt_log', 'inbox')),
    slot       smallint NOT NULL CHECK (slot BETWEEN 0 AND 2),
    current    boolean NOT NULL,
    opened_at  timestamptz,
    closed_at  timestamptz,
    PRIMARY KEY (tbl, slot)
);
COMMENT ON TABLE outbox.rotation IS 'rotation state of events, attempt_log and inbox: the slot taking rows, and when each slot opened and closed';
INSERT INTO outbox.rotation (tbl, slot, current, opened_at, closed_at)
SELECT t, s, s = c, CASE WHEN s = c THEN now() END, CASE WHEN s <> c THEN now() END
  FROM (VALUES ('events', (SELECT cur_slot FROM outbox.queue)), ('attempt_log', 0::smallint), ('inbox', 0::smallint)) AS v(t, c),
       generate_series(0, 2) AS s;

----------------------------------------------------------------------------
-- The attempt log and the inbox, partitioned by slot
----------------------------------------------------------------------------

-- Grants on the tables and views recreated below, to give again at the end.
CREATE TEMP TABLE outbox_acl_1_0 AS
SELECT c.relname::text AS name, c.relacl AS acl
  FROM pg_class c
 WHERE c.relnamespace = 'outbox'::regnamespace
   AND c.relname IN ('attempt_log', 'inbox', 'attempts', 'backlog', 'relay_stats')
   AND c.relacl IS NOT NULL;

DROP VIEW outbox.attempts;
DROP VIEW outbox.backlog;

CREATE TABLE outbox.attempt_log_new (
    at          timestamptz NOT NULL DEFAULT now(),
    endpoint_id integer NOT NULL,
    id          bigint NOT NULL,
    event_id    uuid NOT NULL,
    attempt     integer NOT NULL,
    duration_ms real,
    status      integer,
    error       text,
    response    text,
    slot        smallint NOT NULL
) PARTITION BY LIST (slot);
CREATE TABLE outbox.attempt_log_0 PARTITION OF outbox.attempt_log_new FOR VALUES IN (0);
CREATE TABLE outbox.attempt_log_1 PARTITION OF outbox.attempt_log_new FOR VALUES IN (1);
CREATE TABLE outbox.attempt_log_2 PARTITION OF outbox.attempt_log_new FOR VALUES IN (2);
INSERT INTO outbox.attempt_log_new
SELECT at, endpoint_id, id, event_id, attempt, duration_ms, status, error, response, 0
  FROM outbox.attempt_log;
ALTER EXTENSION outbox DROP TABLE outbox.attempt_log;
DROP TABLE outbox.attempt_log;
ALTER TABLE outbox.attempt_log_new RENAME TO attempt_log;
CREATE INDEX attempt_log_event_idx ON outbox.attempt_log (event_id);
COMMENT ON TABLE outbox.attempt_log IS 'every delivery attempt, appended by the relay; read it through outbox.attempts; rotated after outbox.attempt_retention';
COMMENT ON COLUMN outbox.attempt_log.slot IS 'rotation slot (partition) the row was appended to';

CREATE TABLE outbox.inbox_new (
    consumer     text NOT NULL,
    message_id   text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    slot         smallint NOT NULL,
    PRIMARY KEY (consumer, message_id, slot)
) PARTITION BY LIST (slot);
CREATE TABLE outbox.inbox_0 PARTITION OF outbox.inbox_new FOR VALUES IN (0);
CREATE TABLE outbox.inbox_1 PARTITION OF outbox.inbox_new FOR VALUES IN (1);
CREATE TABLE outbox.inbox_2 PARTITION OF outbox.inbox_new FOR VALUES IN (2);
INSERT INTO outbox.inbox_new SELECT consumer, message_id, processed_at, 0 FROM outbox.inbox;
ALTER EXTENSION outbox DROP TABLE outbox.inbox;
DROP TABLE outbox.inbox;
ALTER TABLE outbox.inbox_new RENAME TO inbox;
COMMENT ON TABLE outbox.inbox IS 'messages a consumer has processed, recorded by mark_processed(); rotated after outbox.inbox_retention';
COMMENT ON COLUMN outbox.inbox.slot IS 'rotation slot (partition) the row was appended to';

-- Tables whose rows are the user's.  queue and rotation are the extension's
-- own state: a restore keeps the rows its CREATE EXTENSION made (and must,
-- or loading the dumped row would collide with them).
SELECT pg_catalog.pg_extension_config_dump('outbox.queue', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('outbox.attempt_log', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.attempt_log_0', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.attempt_log_1', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.attempt_log_2', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_0', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_1', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_2', '');

----------------------------------------------------------------------------
-- Positions know their cluster; endpoints record a backlog given up
----------------------------------------------------------------------------

ALTER TABLE outbox.positions
    ADD COLUMN system_identifier text NOT NULL DEFAULT outbox._system_identifier();
COMMENT ON COLUMN outbox.positions.system_identifier IS
    'cluster whose transaction ids snap and next_snap are in; another one (after a restore) makes the relay rebase';

ALTER TABLE outbox.endpoint_health
    ADD COLUMN backlog_dropped bigint NOT NULL DEFAULT 0,
    ADD COLUMN backlog_dropped_at timestamptz;
COMMENT ON COLUMN outbox.endpoint_health.backlog_dropped IS
    'events given up because the endpoint stayed disabled longer than outbox.retention and rotation needed their partition';

----------------------------------------------------------------------------
-- Inbox
----------------------------------------------------------------------------

-- Markers of one message queue on an advisory lock (first key 0x6f627801,
-- "ob" 1), since no unique index spans the inbox's partitions; the check
-- then reads the latest committed state (outbox._inbox_seen).
CREATE OR REPLACE FUNCTION outbox.mark_processed(consumer text, message_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF consumer IS NULL OR message_id IS NULL THEN
        RAISE EXCEPTION 'consumer and message_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF consumer = '' OR message_id = '' THEN
        RAISE EXCEPTION 'consumer and message_id must not be empty' USING ERRCODE = '22023';
    END IF;
    IF octet_length(consumer) > 255 OR octet_length(message_id) > 255 THEN
        RAISE EXCEPTION 'consumer or message_id too long'
            USING ERRCODE = '54000',
                  DETAIL = format('Each is at most 255 bytes; got %s and %s.',
                                  octet_length(consumer), octet_length(message_id));
    END IF;
    -- A concurrent marker of the same message makes this wait for its
    -- transaction: if it commits, this one finds its row and returns false.
    PERFORM pg_advisory_xact_lock(1868724225, hashtext(consumer || E'\n' || message_id));
    IF outbox._inbox_seen(consumer, message_id) THEN
        RETURN false;
    END IF;
    INSERT INTO outbox.inbox (consumer, message_id, slot)
    SELECT consumer, message_id, r.slot FROM outbox.rotation r WHERE r.tbl = 'inbox' AND r.current;
    RETURN true;
END
$$;

----------------------------------------------------------------------------
-- What operators see
----------------------------------------------------------------------------

CREATE VIEW outbox.backlog AS
WITH waiting AS (
    SELECT u.n, u.oldest FROM outbox.endpoints ep CROSS JOIN LATERAL outbox._unread(ep.id) u
    UNION ALL
    SELECT 1, e.created_at FROM outbox.retries r JOIN outbox.events e ON e.id = r.id
)
SELECT (SELECT coalesce(sum(n), 0)::bigint FROM waiting) AS deliveries_waiting,
       (SELECT now() - min(oldest) FROM waiting) AS oldest_age,
       (SELECT count(*) FROM outbox.events e WHERE e.created_at > now() - interval '1 minute') AS emitted_last_minute,
       (SELECT count(*) FROM outbox.attempt_log a
         WHERE a.at > now() - interval '1 minute' AND a.status BETWEEN 200 AND 299) AS delivered_last_minute;
COMMENT ON VIEW outbox.backlog IS
    'deliveries not yet made (an event owed to two endpoints counts twice), the age of the oldest, and the flow of the last minute';

CREATE VIEW outbox.attempts AS
SELECT a.event_id, ep.name AS endpoint, a.attempt, a.at, a.duration_ms, a.status, a.error,
       a.response, e.event_type
  FROM outbox.attempt_log a
  LEFT JOIN outbox.endpoints ep ON ep.id = a.endpoint_id
  LEFT JOIN outbox.events e ON e.id = a.id;
COMMENT ON VIEW outbox.attempts IS
    'every delivery attempt kept (outbox.attempt_retention): event, endpoint, attempt number, time, duration, status, error and the first bytes of the response';

CREATE OR REPLACE VIEW outbox.endpoint_status AS
SELECT ep.name,
       CASE WHEN ep.disabled_at IS NOT NULL THEN 'disabled'
            WHEN ep.paused THEN 'paused'
            ELSE 'active' END AS state,
       CASE WHEN ep.disabled_at IS NOT NULL THEN ep.disabled_reason
            WHEN ep.paused THEN 'paused by pause_endpoint()' END AS state_reason,
       ep.disabled_at,
       u.n + coalesce(r.n, 0) AS events_waiting,
       now() - least(u.oldest, r.oldest) AS oldest_waiting_age,
       coalesce(r.failed, 0) AS in_retry,
       (SELECT count(*) FROM outbox.dead_letter_log d WHERE d.endpoint_id = ep.id) AS dead,
       h.last_success_at,
       h.last_failure_at,
       h.last_failure_status,
       h.last_failure_error,
       h.consecutive_failures,
       ep.url,
       ep.event_types,
       ep.ordered,
       h.backlog_dropped,
       h.backlog_dropped_at
  FROM outbox.endpoints ep
  JOIN outbox.endpoint_health h ON h.endpoint_id = ep.id
  CROSS JOIN LATERAL outbox._unread(ep.id) u
  LEFT JOIN LATERAL (
        SELECT count(*) AS n, count(*) FILTER (WHERE rr.attempts > 0) AS failed,
               min(e.created_at) AS oldest
          FROM outbox.retries rr JOIN outbox.events e ON e.id = rr.id
         WHERE rr.endpoint_id = ep.id) r ON true;
COMMENT ON VIEW outbox.endpoint_status IS
    'one row per endpoint: state and why, events waiting and the age of the oldest, in retry, dead, last success and failure, and any backlog given up to rotation';

DROP VIEW outbox.relay_stats;
DROP FUNCTION outbox._relay_stats();
CREATE FUNCTION outbox._relay_stats(
    OUT pid integer, OUT database text, OUT started_at timestamptz,
    OUT batches bigint, OUT deliveries bigint, OUT failures bigint, OUT retries bigint,
    OUT bytes_sent bigint, OUT http_seconds double precision, OUT sql_seconds double precision)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_relay_stats';
COMMENT ON FUNCTION outbox._relay_stats() IS 'internal: the shared-memory counters of every running relay';

CREATE VIEW outbox.relay_stats AS SELECT * FROM outbox._relay_stats();
COMMENT ON VIEW outbox.relay_stats IS
    'one row per running relay (one per database served) and what it did since it started: batches recorded, deliveries, failures, retries, request bytes sent, seconds waiting with requests in flight and seconds in SQL';

CREATE OR REPLACE FUNCTION outbox.health()
RETURNS TABLE (check_name text, status text, detail text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'relay running',
           CASE WHEN EXISTS (SELECT 1 FROM pg_stat_activity
                              WHERE backend_type = 'outbox relay' AND datname = current_database())
                THEN 'ok' ELSE 'warning' END,
           CASE WHEN EXISTS (SELECT 1 FROM pg_stat_activity
                              WHERE backend_type = 'outbox relay' AND datname = current_database())
                THEN 'a relay serves this database'
                ELSE 'no relay serves this database: is outbox in shared_preload_libraries, does outbox.database allow this database, and is outbox.max_relays large enough?' END
    UNION ALL
    SELECT 'oldest undelivered',
           CASE WHEN coalesce(b.oldest_age, '0') > outbox._setting_interval('outbox.alert_after', '30 seconds')
                THEN 'warning' ELSE 'ok' END,
           CASE WHEN b.deliveries_waiting = 0 THEN 'nothing waiting'
                ELSE format('%s deliveries waiting, the oldest for %s (warning after %s)',
                            b.deliveries_waiting, date_trunc('second', b.oldest_age),
                            outbox._setting_interval('outbox.alert_after', '30 seconds')) END
      FROM outbox.backlog b
    UNION ALL
    SELECT 'dead letters',
           CASE WHEN n > 0 THEN 'warning' ELSE 'ok' END,
           format('%s dead letters', n)
      FROM (SELECT count(*) AS n FROM outbox.dead_letter_log) d
    UNION ALL
    SELECT 'endpoints disabled',
           CASE WHEN n > 0 THEN 'warning' ELSE 'ok' END,
           CASE WHEN n > 0 THEN format('%s disabled: %s', n, names) ELSE 'none disabled' END
      FROM (SELECT count(*) AS n, string_agg(name, ', ' ORDER BY name) AS names
              FROM outbox.endpoints WHERE disabled_at IS NOT NULL) x
    UNION ALL
    -- The events partition in use should change every half retention
    -- period; when it has not for a whole one, an endpoint still owes
    -- events in the next partition and the events tables grow.
    SELECT 'events rotation',
           CASE WHEN r.opened_at < now() - outbox._setting_interval('outbox.retention', '7 days')
                THEN 'warning' ELSE 'ok' END,
           CASE WHEN r.opened_at < now() - outbox._setting_interval('outbox.retention', '7 days')
                THEN format('events are kept past outbox.retention (%s): an endpoint that is paused, or disabled for less than that, still owes old events',
                            outbox._setting_interval('outbox.retention', '7 days'))
                ELSE 'events are rotated on time' END
      FROM outbox.rotation r WHERE r.tbl = 'events' AND r.current
$$;
COMMENT ON FUNCTION outbox.health() IS
    'one row per check (relay running, oldest undelivered, dead letters, endpoints disabled, events rotation) with ok or warning';

----------------------------------------------------------------------------
-- Rotation
----------------------------------------------------------------------------

-- Does any endpoint still owe an event of this events slot: one of the
-- types it subscribes to that its position has not passed, or one waiting
-- in retries?
CREATE FUNCTION outbox._slot_owed(s smallint) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.positions p JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
                    WHERE EXISTS (SELECT 1 FROM outbox.events e
                                   WHERE e.slot = s AND e.txid >= pg_snapshot_xmin(p.snap)
                                     AND NOT pg_visible_in_snapshot(e.txid, p.snap)
                                     AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))))
        OR EXISTS (SELECT 1 FROM outbox.retries r JOIN outbox.events e ON e.id = r.id
                    WHERE e.slot = s)
$$;
COMMENT ON FUNCTION outbox._slot_owed(smallint) IS 'internal: whether some endpoint still owes an event of an events partition';

-- An endpoint disabled for longer than retention gives up its backlog when
-- it holds up the rotation of slot s: its position moves to now, its
-- retries go, and endpoint_health counts what was dropped.
CREATE FUNCTION outbox._release_disabled(s smallint, retention interval) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    ep record;
    n bigint;
BEGIN
    FOR ep IN
        SELECT e.id, e.name, e.disabled_at, e.event_types FROM outbox.endpoints e
          JOIN outbox.positions p ON p.endpoint_id = e.id
         WHERE e.disabled_at < now() - retention
           AND (EXISTS (SELECT 1 FROM outbox.events ev
                         WHERE ev.slot = s AND ev.txid >= pg_snapshot_xmin(p.snap)
                           AND NOT pg_visible_in_snapshot(ev.txid, p.snap)
                           AND ev.event_type LIKE ANY (outbox._like_patterns(e.event_types)))
                OR EXISTS (SELECT 1 FROM outbox.retries r JOIN outbox.events ev ON ev.id = r.id
                            WHERE r.endpoint_id = e.id AND ev.slot = s))
           FOR UPDATE OF p SKIP LOCKED
    LOOP
        n := (SELECT u.n FROM outbox._unread(ep.id) u)
             + (SELECT count(*) FROM outbox.retries r WHERE r.endpoint_id = ep.id);
        DELETE FROM outbox.retries r WHERE r.endpoint_id = ep.id;
        UPDATE outbox.positions p
           SET snap = pg_current_snapshot(), next_snap = NULL, after_id = 0, updated_at = now()
         WHERE p.endpoint_id = ep.id;
        IF n > 0 THEN
            UPDATE outbox.endpoint_health h
               SET backlog_dropped = h.backlog_dropped + n, backlog_dropped_at = now()
             WHERE h.endpoint_id = ep.id;
            RAISE LOG 'outbox: endpoint "%", disabled since %, gave up % waiting events to rotation',
                ep.name, ep.disabled_at, n;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox._release_disabled(smallint, interval) IS
    'internal: endpoints disabled longer than retention give up the backlog that holds up rotation';

-- Move each rotated table on to its next slot once the current one has
-- taken rows for half its retention period, emptying the next slot first.
-- Run by the relay as it starts and about once a second; cheap when there
-- is nothing to do.
-- The partition to empty is locked with a short timeout, so that a stream
-- of short transactions reading it cannot hold rotation off for ever.
CREATE FUNCTION outbox._rotate() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t text;
    retention interval;
    cur smallint;
    opened timestamptz;
    nxt smallint;
    nxt_closed timestamptz;
    has_rows boolean;
BEGIN
    -- Positions from another cluster (pg_upgrade) are translated first.
    PERFORM outbox._rebase();
    FOREACH t IN ARRAY ARRAY['events', 'attempt_log', 'inbox'] LOOP
        retention := outbox._setting_interval(
            CASE t WHEN 'events' THEN 'outbox.retention'
                   WHEN 'attempt_log' THEN 'outbox.attempt_retention'
                   ELSE 'outbox.inbox_retention' END, '7 days');
        SELECT r.slot, r.opened_at INTO cur, opened
          FROM outbox.rotation r WHERE r.tbl = t AND r.current;
        CONTINUE WHEN opened > now() - retention / 2;
        nxt := (cur + 1) % 3;
        SELECT r.closed_at INTO nxt_closed FROM outbox.rotation r WHERE r.tbl = t AND r.slot = nxt;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM outbox.%I)', t || '_' || nxt) INTO has_rows;
        -- Rows of the next slot are removed only once they are old enough,
        -- and events only once no endpoint owes them (checked again under
        -- the lock: replay() may have queued some meanwhile).
        CONTINUE WHEN has_rows AND nxt_closed > now() - retention;
        IF has_rows AND t = 'events' THEN
            PERFORM outbox._release_disabled(nxt, retention);
            CONTINUE WHEN outbox._slot_owed(nxt);
        END IF;
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            EXECUTE format('LOCK TABLE outbox.%I IN ACCESS EXCLUSIVE MODE', t || '_' || nxt);
        EXCEPTION WHEN lock_not_available THEN
            CONTINUE;
        END;
        IF has_rows THEN
            CONTINUE WHEN t = 'events' AND outbox._slot_owed(nxt);
            EXECUTE format('TRUNCATE outbox.%I', t || '_' || nxt);
            -- Dedupe keys go with the events emitted before that slot closed.
            IF t = 'events' THEN
                DELETE FROM outbox.dedupe d WHERE d.created_at < nxt_closed;
            END IF;
        END IF;
        UPDATE outbox.rotation r
           SET current = (r.slot = nxt),
               opened_at = CASE WHEN r.slot = nxt THEN now() ELSE r.opened_at END,
               closed_at = CASE WHEN r.slot = cur THEN now() WHEN r.slot = nxt THEN NULL ELSE r.closed_at END
         WHERE r.tbl = t;
        IF t = 'events' THEN
            UPDATE outbox.queue SET cur_slot = nxt, rotated_at = now();
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox._rotate() IS 'internal: rebase positions from another cluster, then rotate events, attempt_log and inbox past their retention (run by the relay)';

----------------------------------------------------------------------------
-- Restore into another cluster
----------------------------------------------------------------------------

-- Positions written in another cluster (read back by pg_restore, or kept
-- through pg_upgrade) are snapshots of its transaction ids, and so are the
-- events' txids: they mean nothing here.  Translate them while they can
-- still be compared with each other: every event an endpoint's position has
-- not passed becomes a retry of that endpoint, due now (due at deliver_at
-- if later), which the relay delivers again with its webhook-id and in key
-- order on ordered endpoints; then every event is made visible to all
-- (FrozenTransactionId) and every position starts from this cluster's
-- present.  An endpoint is sent again exactly what its position owed.
CREATE FUNCTION outbox._rebase() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    here text := outbox._system_identifier();
    owed bigint;
BEGIN
    -- Cheap when there is nothing to do (the relay asks once a second).
    IF NOT EXISTS (SELECT 1 FROM outbox.positions p WHERE p.system_identifier <> here) THEN
        RETURN;
    END IF;
    PERFORM 1 FROM outbox.positions p ORDER BY p.endpoint_id FOR UPDATE;
    IF NOT EXISTS (SELECT 1 FROM outbox.positions p WHERE p.system_identifier <> here) THEN
        RETURN;
    END IF;
    INSERT INTO outbox.retries (endpoint_id, id, event_id, key, attempts, next_at)
    SELECT p.endpoint_id, e.id, e.event_id, e.key, 0, greatest(now(), e.deliver_at)
      FROM outbox.positions p
      JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
      JOIN outbox.events e
        ON e.txid >= pg_snapshot_xmin(p.snap)
       AND NOT pg_visible_in_snapshot(e.txid, p.snap)
       AND (p.next_snap IS NULL OR e.id > p.after_id
            OR NOT pg_visible_in_snapshot(e.txid, p.next_snap))
       AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))
     WHERE p.system_identifier <> here
    ON CONFLICT (endpoint_id, id) DO NOTHING;
    GET DIAGNOSTICS owed = ROW_COUNT;
    UPDATE outbox.events e SET txid = '3' WHERE e.txid <> '3';
    UPDATE outbox.positions p
       SET snap = pg_current_snapshot(), next_snap = NULL, after_id = 0, updated_at = now(),
           system_identifier = here
     WHERE p.system_identifier <> here;
    PERFORM outbox._wake_at_commit();
    RAISE LOG 'outbox: positions were written by another cluster (a restore or an upgrade): % events still owed are queued to be delivered again',
        owed;
END
$$;
COMMENT ON FUNCTION outbox._rebase() IS 'internal: translate positions and events restored from another cluster into this one''s transaction ids';

-- A restore loads positions in the same transaction as everything else
-- (pg_restore --single-transaction): translate them when it commits, before
-- any application emits into the restored database.  (The relay also does
-- it as it starts and once a second, for pg_upgrade: outbox._rotate().)
CREATE FUNCTION outbox._rebase_restored() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._rebase();
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox._rebase_restored() IS 'internal: trigger rebasing positions restored from another cluster';

CREATE CONSTRAINT TRIGGER positions_restored AFTER INSERT ON outbox.positions
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.system_identifier <> outbox._system_identifier())
    EXECUTE FUNCTION outbox._rebase_restored();
COMMENT ON TRIGGER positions_restored ON outbox.positions IS
    'at commit, rebase positions that a restore brought from another cluster';

----------------------------------------------------------------------------
-- Relay internals that change: the record appends to the attempt log's
-- current slot.
----------------------------------------------------------------------------

-- Record the outcomes of one page (or one set of due retries) of an
-- endpoint in one statement: the attempt log, retries, dead letters, and
-- for a page the endpoint's position.  outcome is 'delivered', 'retry',
-- 'dead', 'deferred' (not sent: its deliver_at is later, or it waits behind
-- its key) or 'already' (answered with a 2xx before a restart; not sent).
-- batch is NULL while a page is still partly in flight: its finished
-- deliveries are recorded early, and the position moves once it is done.
CREATE OR REPLACE FUNCTION outbox._record(
    eid integer, batch text, last_id bigint, batch_done boolean,
    ids bigint[], event_ids uuid[], attempts integer[], outcomes text[],
    next_ats timestamptz[], statuses integer[], errors text[],
    durations real[], responses text[], disable_reason text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
BEGIN
    -- Hold the endpoint against a concurrent drop, without waiting: one
    -- relay serves every endpoint, so it must not queue behind an open
    -- transaction.  Locked: false, the relay tries again later.  Gone:
    -- there is nothing left to record for it.
    PERFORM 1 FROM outbox.endpoints WHERE id = eid FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NOT EXISTS (SELECT 1 FROM outbox.endpoints WHERE id = eid);
    END IF;

    INSERT INTO outbox.attempt_log (endpoint_id, id, event_id, attempt, duration_ms, status, error, response, slot)
    SELECT eid, o.id, o.event_id, o.attempt, o.duration_ms, o.status, o.error, o.response,
           (SELECT r.slot FROM outbox.rotation r WHERE r.tbl = 'attempt_log' AND r.current)
      FROM unnest(ids, event_ids, attempts, outcomes, next_ats, statuses, errors, durations, responses)
                AS o(id, event_id, attempt, outcome, next_at, status, error, duration_ms, response)
     WHERE o.outcome NOT IN ('deferred', 'already');

    -- Only failures and deferrals get rows: most batches have none, and
    -- the statements below are skipped for them.
    IF 'retry' = ANY (outcomes) OR 'deferred' = ANY (outcomes) THEN
    INSERT INTO outbox.retries AS r (endpoint_id, id, event_id, key, attempts, next_at, last_status, last_error)
    SELECT eid, o.id, o.event_id, e.key, o.attempt, o.next_at, o.status, o.error
      FROM unnest(ids, event_ids, attempts, outcomes, next_ats, statuses, errors, durations, responses)
                AS o(id, event_id, attempt, outcome, next_at, status, error, duration_ms, response)
      JOIN outbox.events e ON e.id = o.id
     WHERE o.outcome IN ('retry', 'deferred')
    ON CONFLICT (endpoint_id, id) DO UPDATE
       SET attempts = EXCLUDED.attempts, next_at = EXCLUDED.next_at,
           last_status = EXCLUDED.last_status, last_error = EXCLUDED.last_error;
    END IF;

    IF 'dead' = ANY (outcomes) THEN

    INSERT INTO outbox.dead_letter_log AS d (endpoint_id, id, event_id, event_type, payload, key, headers,
                                             created_at, attempts, last_status, last_error)
    SELECT eid, e.id, e.event_id, e.event_type, e.payload, e.key, e.headers, e.created_at,
           o.attempt, o.status, o.error
      FROM unnest(ids, event_ids, attempts, outcomes, next_ats, statuses, errors, durations, responses)
                AS o(id, event_id, attempt, outcome, next_at, status, error, duration_ms, response)
      JOIN outbox.events e ON e.id = o.id
     WHERE o.outcome = 'dead'
    ON CONFLICT (endpoint_id, id) DO UPDATE
       SET attempts = EXCLUDED.attempts, last_status = EXCLUDED.last_status,
           last_error = EXCLUDED.last_error, dead_at = now();
    END IF;

    -- By primary key, one probe per event: a join could scan all of the
    -- endpoint's retries for every batch.
    DELETE FROM outbox.retries r
     WHERE r.endpoint_id = eid
       AND r.id = ANY (ARRAY(SELECT o.id FROM unnest(ids, outcomes) AS o(id, outcome)
                              WHERE o.outcome IN ('delivered', 'dead', 'already')));

    IF batch IS NOT NULL THEN
        IF batch_done THEN
            UPDATE outbox.positions p
               SET snap = p.next_snap, next_snap = NULL, after_id = 0, updated_at = now()
             WHERE p.endpoint_id = eid AND p.next_snap::text = batch;
        ELSE
            UPDATE outbox.positions p SET after_id = last_id, updated_at = now()
             WHERE p.endpoint_id = eid AND p.next_snap::text = batch;
        END IF;
    END IF;

    -- Endpoint health: one row update per batch, from the attempts made.
    WITH a AS (
        SELECT o.outcome, o.status, o.error, o.n
          FROM unnest(outcomes, statuses, errors) WITH ORDINALITY AS o(outcome, status, error, n)
         WHERE o.outcome NOT IN ('deferred', 'already')
    ), s AS (
        SELECT max(n) FILTER (WHERE outcome = 'delivered') AS last_ok,
               count(*) FILTER (WHERE outcome <> 'delivered') AS fails,
               max(n) FILTER (WHERE outcome <> 'delivered') AS last_fail
          FROM a
    )
    -- (skipped for this batch if resume_endpoint() holds the row)
    UPDATE outbox.endpoint_health h
       SET last_success_at = CASE WHEN s.last_ok IS NOT NULL THEN now() ELSE h.last_success_at END,
           last_failure_at = CASE WHEN s.fails > 0 THEN now() ELSE h.last_failure_at END,
           last_failure_status = CASE WHEN s.fails > 0 THEN (SELECT a.status FROM a WHERE a.n = s.last_fail)
                                      ELSE h.last_failure_status END,
           last_failure_error = CASE WHEN s.fails > 0 THEN (SELECT a.error FROM a WHERE a.n = s.last_fail)
                                     ELSE h.last_failure_error END,
           consecutive_failures = CASE WHEN s.last_ok IS NULL THEN h.consecutive_failures + s.fails
                                       ELSE (SELECT count(*) FROM a WHERE a.n > s.last_ok AND a.outcome <> 'delivered') END,
           failing_since = CASE WHEN s.last_ok IS NOT NULL AND coalesce(s.last_fail < s.last_ok, true) THEN NULL
                                WHEN s.fails > 0 THEN coalesce(h.failing_since, now())
                                ELSE h.failing_since END
      FROM s
     WHERE h.endpoint_id = eid AND (s.last_ok IS NOT NULL OR s.fails > 0)
       AND h.endpoint_id IN (SELECT endpoint_id FROM outbox.endpoint_health
                              WHERE endpoint_id = eid FOR UPDATE SKIP LOCKED);

    -- Disable when asked to, or after outbox.disable_after of failures;
    -- if an administrator holds the endpoint, the next batch decides.
    UPDATE outbox.endpoints ep
       SET disabled_at = now(), updated_at = now(),
           disabled_reason = coalesce(disable_reason,
                                      format('no successful delivery since %s (outbox.disable_after is %s)',
                                             h.failing_since, outbox._setting_interval('outbox.disable_after', '5 days')))
      FROM outbox.endpoint_health h
     WHERE ep.id = eid AND h.endpoint_id = eid AND ep.disabled_at IS NULL
       AND (disable_reason IS NOT NULL
            OR h.failing_since < now() - outbox._setting_interval('outbox.disable_after', '5 days'))
       AND ep.id IN (SELECT id FROM outbox.endpoints WHERE id = eid FOR NO KEY UPDATE SKIP LOCKED);
    RETURN true;
END
$$;

----------------------------------------------------------------------------
-- Privileges: PUBLIC gets nothing of what this script created, and the
-- grants an administrator gave on the recreated tables and views carry over.
----------------------------------------------------------------------------

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT o.name, a.privilege_type, a.grantee, a.is_grantable
          FROM pg_temp.outbox_acl_1_0 o
         CROSS JOIN LATERAL aclexplode(o.acl) a
         WHERE a.grantee <> (SELECT c.relowner FROM pg_class c WHERE c.oid = ('outbox.' || o.name)::regclass)
    LOOP
        EXECUTE format('GRANT %s ON outbox.%I TO %s%s', g.privilege_type, g.name,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;
DROP TABLE pg_temp.outbox_acl_1_0;

REVOKE ALL ON outbox.rotation FROM PUBLIC;
REVOKE ALL ON outbox.attempt_log_0, outbox.attempt_log_1, outbox.attempt_log_2 FROM PUBLIC;
REVOKE ALL ON outbox.inbox_0, outbox.inbox_1, outbox.inbox_2 FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox._launch(), outbox._system_identifier(), outbox._inbox_seen(text, text),
    outbox._relay_stats(), outbox._slot_owed(smallint), outbox._release_disabled(smallint, interval),
    outbox._rotate(), outbox._rebase(), outbox._rebase_restored() FROM PUBLIC;

-- Start delivery in this database once this transaction commits.
SELECT outbox._launch();
