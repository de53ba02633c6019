-- outbox 1.1 -> 1.2: delayed events never hold rotation, pages bounded in
-- bytes, endpoint timeouts checked as the relay counts them, and health()
-- naming what holds the events rotation.
--
-- A fresh CREATE EXTENSION outbox runs outbox--1.0.sql, outbox--1.0--1.1.sql
-- and then this script, so an installed 1.2 and an updated 1.1 are the same
-- by construction.
--
-- Retried and delayed events (DESIGN.md, "Delayed copies").
-- The relay reads an event with a later deliver_at like any other and
-- defers it into outbox.retries for each endpoint subscribed to it
-- (attempts = 0, next_at = deliver_at), so that which endpoints get it is
-- still decided by their positions when it was emitted; a failed delivery
-- waits there too (attempts > 0).  Until 1.1 any such retry kept the
-- event's partition from rotating until it was delivered or dead.  Now,
-- when rotation is about to empty a partition, the events it holds that
-- wait in retries (not sent yet, or failed) are first copied whole into
-- outbox.delayed, which rotation never empties; the retries keep referring
-- to them by id, and whatever reads an event for a retry reads it from
-- outbox.events or from that copy.  Copy and TRUNCATE commit together or
-- not at all.  The dedupe key of a copied event stays while the copy does.
-- A copy goes once no retry refers to it (after its delivery, dead letter
-- or release), at the next rotation of the events, and its dedupe key with
-- it.  Only positions (endpoints that have not passed the partition) and
-- locks hold rotation now.

\echo Use "ALTER EXTENSION outbox UPDATE TO '1.2'" to load this file. \quit

----------------------------------------------------------------------------
-- Helpers written in C
----------------------------------------------------------------------------

CREATE FUNCTION outbox._raw_size(value jsonb) RETURNS integer
LANGUAGE c IMMUTABLE STRICT AS 'MODULE_PATHNAME', 'outbox_raw_size';
COMMENT ON FUNCTION outbox._raw_size(jsonb) IS
    'internal: bytes of a jsonb value as emit() measures it (uncompressed), read without detoasting it';

----------------------------------------------------------------------------
-- Delayed events set aside from rotation
----------------------------------------------------------------------------

CREATE TABLE outbox.delayed (
    id          bigint PRIMARY KEY,
    event_id    uuid        NOT NULL,
    event_type  text        NOT NULL,
    payload     jsonb       NOT NULL,
    key         text,
    headers     jsonb,
    deliver_at  timestamptz,
    created_at  timestamptz NOT NULL,
    set_aside_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.delayed IS
    'copies of events waiting in outbox.retries (a later deliver_at, behind an earlier event of their key, or failed), made when rotation empties their events partition; rotation never empties this table';
COMMENT ON COLUMN outbox.delayed.id IS 'the event''s id in outbox.events, which its retries refer to';
COMMENT ON COLUMN outbox.delayed.set_aside_at IS 'when rotation copied the event here';
SELECT pg_catalog.pg_extension_config_dump('outbox.delayed', '');
-- Rotation keeps the dedupe keys of copied events: it looks copies up by
-- event_id.
CREATE INDEX delayed_event_idx ON outbox.delayed (event_id);

-- Copy the events of slot s that wait in retries (sent or not) into
-- outbox.delayed, before rotation empties the slot.
CREATE FUNCTION outbox._set_aside(s smallint) RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
    INSERT INTO outbox.delayed (id, event_id, event_type, payload, key, headers, deliver_at, created_at)
    SELECT DISTINCT ON (e.id) e.id, e.event_id, e.event_type, e.payload, e.key, e.headers, e.deliver_at, e.created_at
      FROM outbox.retries r JOIN outbox.events e ON e.id = r.id
     WHERE e.slot = s
     ORDER BY e.id
    ON CONFLICT (id) DO NOTHING
$$;
COMMENT ON FUNCTION outbox._set_aside(smallint) IS
    'internal: copy the events of an events partition that wait in retries into outbox.delayed';

-- Does any endpoint still owe an event of this events slot: one of the
-- types it subscribes to that its position has not passed, or one waiting
-- in retries that has no copy in outbox.delayed?
CREATE OR REPLACE FUNCTION outbox._slot_owed(s smallint) RETURNS boolean
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
                    WHERE e.slot = s AND NOT EXISTS (SELECT 1 FROM outbox.delayed d WHERE d.id = r.id))
$$;

-- An endpoint disabled for longer than retention gives up its backlog when
-- it holds up the rotation of slot s: its position moves to now, its
-- retries go, and endpoint_health counts what was dropped.  Its retries of
-- events set aside in outbox.delayed do not hold rotation, so they alone
-- do not make it give anything up.
CREATE OR REPLACE FUNCTION outbox._release_disabled(s smallint, retention interval) RETURNS void
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
                            WHERE r.endpoint_id = e.id AND ev.slot = s
                              AND NOT EXISTS (SELECT 1 FROM outbox.delayed d WHERE d.id = r.id)))
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

-- Move each rotated table on to its next slot once the current one has
-- taken rows for half its retention period, emptying the next slot first.
-- Run by the relay as it starts and about once a second; cheap when there
-- is nothing to do.
-- The partition to empty is locked with a short timeout, so that a stream
-- of short transactions reading it cannot hold rotation off for ever.
CREATE OR REPLACE FUNCTION outbox._rotate() RETURNS void
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
        -- the lock: replay() may have queued some meanwhile).  Events that
        -- wait in retries are set aside first: they do not hold it, nor
        -- make an endpoint disabled longer than retention give them up.
        CONTINUE WHEN has_rows AND nxt_closed > now() - retention;
        IF has_rows AND t = 'events' THEN
            PERFORM outbox._set_aside(nxt);
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
            IF t = 'events' THEN
                PERFORM outbox._set_aside(nxt);
            END IF;
            CONTINUE WHEN t = 'events' AND outbox._slot_owed(nxt);
            EXECUTE format('TRUNCATE outbox.%I', t || '_' || nxt);
        END IF;
        IF t = 'events' THEN
            -- Set-aside copies no retry refers to any more go at each
            -- rotation of the events.
            DELETE FROM outbox.delayed d
             WHERE NOT EXISTS (SELECT 1 FROM outbox.retries r WHERE r.id = d.id);
            -- Dedupe keys go with the events emitted before that slot
            -- closed, except those of events that still have a copy.
            DELETE FROM outbox.dedupe d
             WHERE d.created_at < nxt_closed
               AND NOT EXISTS (SELECT 1 FROM outbox.delayed dl WHERE dl.event_id = d.event_id);
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

----------------------------------------------------------------------------
-- Endpoint timeouts: checked as the relay counts them
----------------------------------------------------------------------------

-- An endpoint timeout in milliseconds, as the relay uses it.  Interval
-- comparison counts a month as 30 days, extract(epoch) a year as 365.25
-- days, so '1 year -360 days 10 seconds' compares as 10 seconds and lasts
-- 453,610 seconds: the bounds are checked on this number.
CREATE FUNCTION outbox._timeout_ms(timeout interval) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (extract(epoch FROM timeout) * 1000)::bigint
$$;
COMMENT ON FUNCTION outbox._timeout_ms(interval) IS 'internal: an endpoint timeout in milliseconds, as the relay uses it';

CREATE OR REPLACE FUNCTION outbox._check_endpoint_settings(
    timeout interval, max_attempts integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF timeout IS NOT NULL AND (timeout < interval '1 second' OR timeout > interval '5 minutes'
                                OR isfinite(timeout) IS NOT TRUE) THEN
        RAISE EXCEPTION 'endpoint timeout must be between 1 second and 5 minutes'
            USING ERRCODE = '22023', DETAIL = format('The timeout given was %s.', timeout);
    END IF;
    IF timeout IS NOT NULL AND outbox._timeout_ms(timeout) NOT BETWEEN 1000 AND 300000 THEN
        RAISE EXCEPTION 'endpoint timeout must be between 1 second and 5 minutes'
            USING ERRCODE = '22023',
                  DETAIL = format('The timeout given was %s, which the relay counts as %s ms (a year as 365.25 days, a month as 30).',
                                  timeout, outbox._timeout_ms(timeout));
    END IF;
    IF max_attempts IS NOT NULL AND (max_attempts < 1 OR max_attempts > 100) THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 100'
            USING ERRCODE = '22023', DETAIL = format('The value given was %s.', max_attempts);
    END IF;
END
$$;

----------------------------------------------------------------------------
-- Reading: pages and due retries bounded in bytes as well as in events
----------------------------------------------------------------------------

-- Bytes an event costs the relay when read: its payload and its headers.
-- No SET clause, so that it is inlined into the reads; callers pin
-- search_path.
CREATE FUNCTION outbox._event_bytes(payload jsonb, headers jsonb) RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$
    SELECT outbox._raw_size(payload) OPERATOR(pg_catalog.+) coalesce(outbox._raw_size(headers), 0)
$$;
COMMENT ON FUNCTION outbox._event_bytes(jsonb, jsonb) IS 'internal: bytes of an event''s payload and headers, for the relay''s page budget';

DROP FUNCTION outbox._read_page(integer, integer, boolean);

-- The next page of events owed to an endpoint by its position, in id order:
-- at most lim events, and it ends after the event that brings it to
-- max_bytes (one event at least).  Starts a new batch (visible now, not in
-- the position's snapshot) when none is open.  Writes only the position's
-- batch bounds; the relay advances after_id when it records the page.
-- bytes_cut is true on every row of a page that the byte budget ended.
CREATE FUNCTION outbox._read_page(eid integer, lim integer, verify boolean, max_bytes bigint)
RETURNS TABLE (id bigint, event_id uuid, deliver_at timestamptz, key text,
               body text, header_lines text[], batch text, blocked boolean,
               delivered boolean, bytes_cut boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- The relay's statements must use the indexes whatever the statistics say:
-- a backlog builds up faster than autoanalyze sees it, and a scan of the
-- whole events table per page (or per event) would stall delivery.
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    pos  outbox.positions;
    nxt  pg_snapshot;
    lo   bigint;
    pats text[];
    match_all boolean;
    is_ordered boolean;
BEGIN
    SELECT outbox._like_patterns(ep.event_types), '*' = ANY (ep.event_types), ep.ordered
      INTO pats, match_all, is_ordered
      FROM outbox.endpoints ep WHERE ep.id = eid;
    -- At most twice: an open batch found empty is closed, then a new one
    -- is opened from the current snapshot.
    FOR attempt IN 1..2 LOOP
        -- A position locked by a concurrent drop_endpoint() is left alone.
        SELECT * INTO pos FROM outbox.positions p WHERE p.endpoint_id = eid
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        IF pos.next_snap IS NULL THEN
            nxt := pg_current_snapshot();
            IF nxt::text = pos.snap::text THEN
                RETURN;
            END IF;
            -- The batch's first id, through the txid index: ids are drawn
            -- before commit, so a batch can begin below ids already read.
            -- (OFFSET 0 keeps min() from walking the id index instead.)
            SELECT min(b.id) INTO lo
              FROM (SELECT e.id, e.txid FROM outbox.events e
                     WHERE e.txid >= pg_snapshot_xmin(pos.snap) AND e.txid < pg_snapshot_xmax(nxt)
                    OFFSET 0) b
             WHERE pg_visible_in_snapshot(b.txid, nxt) AND NOT pg_visible_in_snapshot(b.txid, pos.snap);
            -- No event since the position: leave it, so an idle relay
            -- writes nothing (the next batch simply spans more snapshots).
            IF lo IS NULL THEN
                RETURN;
            END IF;
            UPDATE outbox.positions p SET next_snap = nxt, after_id = lo - 1, updated_at = now()
             WHERE p.endpoint_id = eid
            RETURNING * INTO pos;
        END IF;

        -- The inner query walks the id index and stops after lim rows,
        -- summing sizes read from the rows' headers (payloads are not
        -- detoasted for it); bodies are built only for the rows kept.
        RETURN QUERY
            SELECT e.id, e.event_id, e.deliver_at, e.key,
                   outbox._body(e.event_type, e.created_at, e.payload),
                   CASE WHEN e.headers IS NULL THEN '{}' ELSE outbox._header_lines(e.headers) END,
                   pos.next_snap::text,
                   -- On an ordered endpoint an event waits behind any
                   -- earlier event of its key that is still owed.
                   is_ordered AND e.key IS NOT NULL
                       AND EXISTS (SELECT 1 FROM outbox.retries r
                                    WHERE r.endpoint_id = eid AND r.key = e.key),
                   -- After a restart, the page that was in flight may hold
                   -- events already answered with a 2xx: not sent again.
                   verify AND outbox._delivered(eid, e.event_id, '-infinity'),
                   (max(e.upto) OVER ()) >= max_bytes
              FROM (SELECT ev.id, ev.event_id, ev.deliver_at, ev.key, ev.event_type, ev.created_at,
                           ev.payload, ev.headers, ev.sz,
                           sum(ev.sz) OVER (ORDER BY ev.id) AS upto
                      FROM (SELECT e1.*, outbox._event_bytes(e1.payload, e1.headers) AS sz
                              FROM outbox.events e1
                             -- Walk the id index from after_id and stop after lim
                             -- rows: no txid range here, which would tempt the
                             -- planner into reading the whole rest of the batch
                             -- (DESIGN: paging a batch).
                             WHERE e1.id > pos.after_id
                               AND pg_visible_in_snapshot(e1.txid, pos.next_snap)
                               AND NOT pg_visible_in_snapshot(e1.txid, pos.snap)
                               AND (match_all OR e1.event_type LIKE ANY (pats))
                             ORDER BY e1.id
                             LIMIT lim) ev) e
             WHERE e.upto - e.sz < max_bytes
             ORDER BY e.id;
        IF FOUND THEN
            RETURN;
        END IF;
        -- Nothing left of the batch: the position moves past it.
        UPDATE outbox.positions p
           SET snap = p.next_snap, next_snap = NULL, after_id = 0, updated_at = now()
         WHERE p.endpoint_id = eid;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox._read_page(integer, integer, boolean, bigint) IS
    'internal: the next page of events owed to an endpoint by its position, bounded in events and in bytes';

DROP FUNCTION outbox._read_due(integer, integer, boolean);

-- Events of an endpoint whose retry (or deliver_at) is due, at most lim,
-- ending after the one that brings them to max_bytes (one at least).  An
-- event set aside by rotation is read from outbox.delayed.
CREATE FUNCTION outbox._read_due(eid integer, lim integer, verify boolean, max_bytes bigint)
RETURNS TABLE (id bigint, event_id uuid, attempts integer, key text, body text, header_lines text[],
               delivered boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT x.id, x.event_id, x.attempts, x.key,
           outbox._body(x.event_type, x.created_at, x.payload),
           CASE WHEN x.headers IS NULL THEN '{}' ELSE outbox._header_lines(x.headers) END,
           -- only a 2xx since it was queued: replay() re-sends on purpose
           verify AND outbox._delivered(eid, x.event_id, x.queued_at)
      FROM (SELECT y.*, sum(y.sz) OVER (ORDER BY y.next_at, y.id) AS upto
              FROM (SELECT r.id, r.attempts, r.queued_at, r.next_at, ev.event_id, ev.event_type,
                           ev.created_at, ev.payload, ev.key, ev.headers,
                           outbox._event_bytes(ev.payload, ev.headers) AS sz
                      FROM outbox.retries r
                      JOIN outbox.endpoints ep ON ep.id = r.endpoint_id
                      CROSS JOIN LATERAL (
                            SELECT e.event_id, e.event_type, e.created_at, e.payload, e.key, e.headers
                              FROM outbox.events e WHERE e.id = r.id
                            UNION ALL
                            SELECT d.event_id, d.event_type, d.created_at, d.payload, d.key, d.headers
                              FROM outbox.delayed d WHERE d.id = r.id
                            LIMIT 1) ev
                     WHERE r.endpoint_id = eid AND r.next_at <= now()
                       -- ordered: only the oldest owed event of a key is sent
                       AND NOT (ep.ordered AND r.key IS NOT NULL
                                AND EXISTS (SELECT 1 FROM outbox.retries r2
                                             WHERE r2.endpoint_id = r.endpoint_id AND r2.key = r.key
                                               AND r2.id < r.id))
                     ORDER BY r.next_at, r.id
                     LIMIT lim) y) x
     WHERE x.upto - x.sz < max_bytes
     ORDER BY x.next_at, x.id
$$;
COMMENT ON FUNCTION outbox._read_due(integer, integer, boolean, bigint) IS
    'internal: events whose retry or deliver_at has come, for one endpoint, bounded in events and in bytes';

----------------------------------------------------------------------------
-- Recording: an event of a retry may have been set aside
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
    -- the statements below are skipped for them.  The event is in
    -- outbox.events, or in outbox.delayed once rotation set it aside.
    IF 'retry' = ANY (outcomes) OR 'deferred' = ANY (outcomes) THEN
    INSERT INTO outbox.retries AS r (endpoint_id, id, event_id, key, attempts, next_at, last_status, last_error)
    SELECT eid, o.id, o.event_id, e.key, o.attempt, o.next_at, o.status, o.error
      FROM unnest(ids, event_ids, attempts, outcomes, next_ats, statuses, errors, durations, responses)
                AS o(id, event_id, attempt, outcome, next_at, status, error, duration_ms, response)
      CROSS JOIN LATERAL (SELECT ev.key FROM outbox.events ev WHERE ev.id = o.id
                          UNION ALL
                          SELECT d.key FROM outbox.delayed d WHERE d.id = o.id
                          LIMIT 1) e
     WHERE o.outcome IN ('retry', 'deferred')
    ON CONFLICT (endpoint_id, id) DO UPDATE
       SET attempts = EXCLUDED.attempts, next_at = EXCLUDED.next_at,
           last_status = EXCLUDED.last_status, last_error = EXCLUDED.last_error;
    END IF;

    IF 'dead' = ANY (outcomes) THEN
    INSERT INTO outbox.dead_letter_log AS d (endpoint_id, id, event_id, event_type, payload, key, headers,
                                             created_at, attempts, last_status, last_error)
    SELECT eid, o.id, e.event_id, e.event_type, e.payload, e.key, e.headers, e.created_at,
           o.attempt, o.status, o.error
      FROM unnest(ids, event_ids, attempts, outcomes, next_ats, statuses, errors, durations, responses)
                AS o(id, event_id, attempt, outcome, next_at, status, error, duration_ms, response)
      CROSS JOIN LATERAL (SELECT ev.event_id, ev.event_type, ev.payload, ev.key, ev.headers, ev.created_at
                            FROM outbox.events ev WHERE ev.id = o.id
                          UNION ALL
                          SELECT dl.event_id, dl.event_type, dl.payload, dl.key, dl.headers, dl.created_at
                            FROM outbox.delayed dl WHERE dl.id = o.id
                          LIMIT 1) e
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

CREATE OR REPLACE FUNCTION outbox.retry_dead(endpoint text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := CASE WHEN endpoint IS NULL THEN NULL ELSE outbox._endpoint_id(endpoint) END;
    n bigint;
BEGIN
    WITH moved AS (
        DELETE FROM outbox.dead_letter_log d
         WHERE (eid IS NULL OR d.endpoint_id = eid)
           AND (EXISTS (SELECT 1 FROM outbox.events e WHERE e.id = d.id)
                OR EXISTS (SELECT 1 FROM outbox.delayed dl WHERE dl.id = d.id))
        RETURNING d.endpoint_id, d.id, d.event_id, d.key
    )
    INSERT INTO outbox.retries (endpoint_id, id, event_id, key, attempts, next_at)
    SELECT m.endpoint_id, m.id, m.event_id, m.key, 0, now() FROM moved m
    ON CONFLICT (endpoint_id, id) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM outbox._wake_at_commit();
    RETURN n;
END
$$;

----------------------------------------------------------------------------
-- What operators see
----------------------------------------------------------------------------

-- Retries count as waiting whether their event is in outbox.events or set
-- aside in outbox.delayed.  The age of what waits leaves out events not
-- due yet (not sent, next_at later): a reminder due next week is not late.
CREATE OR REPLACE VIEW outbox.backlog AS
WITH waiting AS (
    SELECT u.n, u.oldest FROM outbox.endpoints ep CROSS JOIN LATERAL outbox._unread(ep.id) u
    UNION ALL
    SELECT 1, CASE WHEN r.attempts = 0 AND r.next_at > now() THEN NULL
                   ELSE coalesce(e.created_at, d.created_at) END
      FROM outbox.retries r
      LEFT JOIN outbox.events e ON e.id = r.id
      LEFT JOIN outbox.delayed d ON d.id = r.id
     WHERE e.id IS NOT NULL OR d.id IS NOT NULL
)
SELECT (SELECT coalesce(sum(n), 0)::bigint FROM waiting) AS deliveries_waiting,
       (SELECT now() - min(oldest) FROM waiting) AS oldest_age,
       (SELECT count(*) FROM outbox.events e WHERE e.created_at > now() - interval '1 minute') AS emitted_last_minute,
       (SELECT count(*) FROM outbox.attempt_log a
         WHERE a.at > now() - interval '1 minute' AND a.status BETWEEN 200 AND 299) AS delivered_last_minute;

CREATE OR REPLACE VIEW outbox.attempts AS
SELECT a.event_id, ep.name AS endpoint, a.attempt, a.at, a.duration_ms, a.status, a.error,
       a.response, coalesce(e.event_type, d.event_type) AS event_type
  FROM outbox.attempt_log a
  LEFT JOIN outbox.endpoints ep ON ep.id = a.endpoint_id
  LEFT JOIN outbox.events e ON e.id = a.id
  LEFT JOIN outbox.delayed d ON d.id = a.id;

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
               min(coalesce(e.created_at, dl.created_at))
                   FILTER (WHERE NOT (rr.attempts = 0 AND rr.next_at > now())) AS oldest
          FROM outbox.retries rr
          LEFT JOIN outbox.events e ON e.id = rr.id
          LEFT JOIN outbox.delayed dl ON dl.id = rr.id
         WHERE rr.endpoint_id = ep.id AND (e.id IS NOT NULL OR dl.id IS NOT NULL)) r ON true;

-- What keeps the events partition that rotation empties next from being
-- emptied, one line each: endpoints whose position has not passed some of
-- its events (paused, disabled, or behind), and transactions holding a lock
-- on it (one that emitted into it and is still open, or one reading it),
-- each once whatever lock modes it holds.  Events waiting in retries are
-- not listed: rotation sets them aside.  Empty when nothing holds it.  A
-- transaction's uncommitted events are invisible here as they are to the
-- relay: while it is open, its lock is what holds the partition.
CREATE FUNCTION outbox.rotation_holds()
RETURNS TABLE (holder text, detail text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
    WITH nxt AS (
        SELECT ((r.slot + 1) % 3)::smallint AS s
          FROM outbox.rotation r WHERE r.tbl = 'events' AND r.current
    ), behind AS (
        SELECT ep.name, ep.paused, ep.disabled_at, count(*) AS n
          FROM nxt, outbox.positions p
          JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
          JOIN outbox.events e
            ON e.txid >= pg_snapshot_xmin(p.snap)
           AND NOT pg_visible_in_snapshot(e.txid, p.snap)
           AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))
         WHERE e.slot = nxt.s
         GROUP BY ep.name, ep.paused, ep.disabled_at
    )
    SELECT format('endpoint "%s"', b.name),
           format('endpoint "%s" (%s) has not passed %s of its events in partition outbox.events_%s',
                  b.name,
                  CASE WHEN b.disabled_at IS NOT NULL THEN format('disabled since %s', b.disabled_at)
                       WHEN b.paused THEN 'paused'
                       ELSE 'active: behind' END,
                  b.n, (SELECT s FROM nxt))
      FROM behind b
    UNION ALL
    SELECT DISTINCT
           CASE WHEN l.pid IS NULL THEN format('prepared transaction %s', coalesce(px.gid, l.virtualtransaction))
                ELSE format('pid %s', l.pid) END,
           CASE WHEN l.pid IS NULL
                THEN format('prepared transaction %s (prepared at %s) holds a lock on outbox.events_%s',
                            quote_literal(coalesce(px.gid, l.virtualtransaction)), px.prepared, (SELECT s FROM nxt))
                ELSE format('a transaction of pid %s (%s, open since %s) holds a lock on outbox.events_%s',
                            l.pid, a.state, a.xact_start, (SELECT s FROM nxt)) END
      FROM pg_locks l
      LEFT JOIN pg_stat_activity a ON a.pid = l.pid
      -- (a prepared transaction's locks have no pid; its virtual id is -1/xid)
      LEFT JOIN pg_prepared_xacts px ON l.pid IS NULL AND px.transaction::text = split_part(l.virtualtransaction, '/', 2)
     WHERE l.locktype = 'relation' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND l.relation = format('outbox.events_%s', (SELECT s FROM nxt))::regclass
       AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
       AND a.backend_type IS DISTINCT FROM 'outbox relay'
$$;
COMMENT ON FUNCTION outbox.rotation_holds() IS
    'what keeps the events partition that rotation empties next from being emptied: one row per endpoint behind or transaction holding a lock on it';

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
                WHEN b.oldest_age IS NULL THEN format('%s deliveries waiting, none due yet', b.deliveries_waiting)
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
    -- period; when it has not for a whole one, something holds the next
    -- partition (outbox.rotation_holds() says what) and the events tables
    -- grow.  Once the rotation is due, what holds it is named even before.
    SELECT 'events rotation',
           CASE WHEN late THEN 'warning' ELSE 'ok' END,
           CASE WHEN late AND holds IS NOT NULL
                THEN format('events are kept past outbox.retention (%s); held by: %s', retention, holds)
                WHEN late
                THEN format('events are kept past outbox.retention (%s); nothing holds the partition to be emptied now: it goes at the relay''s next rotation', retention)
                WHEN holds IS NOT NULL
                THEN format('events are rotated on time so far; waiting on: %s', holds)
                ELSE 'events are rotated on time' END
      FROM (SELECT r.opened_at < now() - ret AS late, ret AS retention,
                   CASE WHEN r.opened_at < now() - ret / 2
                        THEN (SELECT string_agg(h.detail, '; ' ORDER BY h.detail) FROM outbox.rotation_holds() h) END AS holds
              FROM outbox.rotation r,
                   LATERAL (SELECT outbox._setting_interval('outbox.retention', '7 days') AS ret) s
             WHERE r.tbl = 'events' AND r.current) x
$$;
COMMENT ON FUNCTION outbox.health() IS
    'one row per check (relay running, oldest undelivered, dead letters, endpoints disabled, events rotation and what holds it) with ok or warning';

----------------------------------------------------------------------------
-- Privileges: PUBLIC gets nothing of what this script created.
----------------------------------------------------------------------------

REVOKE ALL ON outbox.delayed FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox._raw_size(jsonb), outbox._set_aside(smallint), outbox._timeout_ms(interval),
    outbox._event_bytes(jsonb, jsonb), outbox._read_page(integer, integer, boolean, bigint),
    outbox._read_due(integer, integer, boolean, bigint), outbox.rotation_holds() FROM PUBLIC;

-- Relays left databases still at 1.1: start them again once this commits.
SELECT outbox._launch();
