-- outbox 1.2 -> 1.3: the relay reads each event once, not once per
-- endpoint, records the outcomes of many endpoints in one statement, and
-- shares its requests in flight fairly, each endpoint up to its own
-- max_in_flight.
--
-- A fresh CREATE EXTENSION outbox runs outbox--1.0.sql and every update
-- script after it, so an installed 1.3 and an updated 1.2 are the same by
-- construction.

\echo Use "ALTER EXTENSION outbox UPDATE TO '1.3'" to load this file. \quit

----------------------------------------------------------------------------
-- The shared stream (DESIGN.md, "The read path")
----------------------------------------------------------------------------

-- The relay's one position over all events.  An endpoint whose position
-- row says follows is exactly where the stream is: every event the stream
-- has passed is done for it (delivered, dead, waiting in outbox.retries,
-- or of a type it does not subscribe to).  The relay reads a page of the
-- stream once and routes each event to the following endpoints whose
-- patterns match it.  An endpoint that falls behind (paused, disabled,
-- failing without pause, slower than the others, just created) is
-- detached: its own position takes the stream's, and it reads its own
-- pages until it is back where the stream is, then follows again.
--
-- No row at install: the relay makes it on its first read.  It is dumped,
-- so that a restore carries on from where the stream was.
CREATE TABLE outbox.stream (
    singleton         boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    snap              pg_snapshot NOT NULL,
    next_snap         pg_snapshot,
    after_id          bigint NOT NULL DEFAULT 0,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    system_identifier text NOT NULL DEFAULT outbox._system_identifier()
);
COMMENT ON TABLE outbox.stream IS 'the relay''s shared read position: events of transactions visible in snap are done for every endpoint that follows it';
SELECT pg_catalog.pg_extension_config_dump('outbox.stream', '');

ALTER TABLE outbox.positions ADD COLUMN follows boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN outbox.positions.follows IS
    'the endpoint is where outbox.stream is; its own snap, next_snap and after_id are not used meanwhile';

-- Every endpoint's position as it stands: its own, or the stream's when it
-- follows the stream.  What reads positions reads this.
CREATE VIEW outbox._positions AS
SELECT p.endpoint_id,
       CASE WHEN p.follows THEN s.snap ELSE p.snap END AS snap,
       CASE WHEN p.follows THEN s.next_snap ELSE p.next_snap END AS next_snap,
       CASE WHEN p.follows THEN s.after_id ELSE p.after_id END AS after_id,
       p.follows,
       CASE WHEN p.follows THEN s.updated_at ELSE p.updated_at END AS updated_at
  FROM outbox.positions p
  -- (s.singleton: an index condition, so that the callers that turn
  -- sequential scans off do not plan around a "disabled" scan of it)
  LEFT JOIN outbox.stream s ON s.singleton AND p.follows;
COMMENT ON VIEW outbox._positions IS 'internal: each endpoint''s position, its own or the stream''s';

-- Does snapshot a see every transaction that b sees?  (a was taken after
-- b, or is b.)  Everything b sees lies below b's xmax and is not in b's
-- in-progress list; a sees it when a's xmax is no lower and none of a's
-- in-progress transactions below b's xmax is one that b sees.
CREATE FUNCTION outbox._snap_contains(a pg_snapshot, b pg_snapshot) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_snapshot_xmax(a) >= pg_snapshot_xmax(b)
       AND NOT EXISTS (SELECT 1 FROM pg_snapshot_xip(a) x
                        WHERE x < pg_snapshot_xmax(b) AND pg_visible_in_snapshot(x, b))
$$;
COMMENT ON FUNCTION outbox._snap_contains(pg_snapshot, pg_snapshot) IS
    'internal: whether snapshot a sees every transaction snapshot b sees';

-- The first id of the batch of events visible in upto and not in since, or
-- NULL when there is none.  Through the txid index: ids are drawn before
-- commit, so a batch can begin below ids already read.  (OFFSET 0 keeps
-- min() from walking the id index instead.)  No SET clause, so that it is
-- inlined; its callers pin search_path and turn sequential scans off.
CREATE FUNCTION outbox._batch_first_id(since pg_snapshot, upto pg_snapshot) RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT min(b.id)
      FROM (SELECT e.id, e.txid FROM outbox.events e
             WHERE e.txid OPERATOR(pg_catalog.>=) pg_catalog.pg_snapshot_xmin(since)
               AND e.txid OPERATOR(pg_catalog.<) pg_catalog.pg_snapshot_xmax(upto)
            OFFSET 0) b
     WHERE pg_catalog.pg_visible_in_snapshot(b.txid, upto)
       AND NOT pg_catalog.pg_visible_in_snapshot(b.txid, since)
$$;
COMMENT ON FUNCTION outbox._batch_first_id(pg_snapshot, pg_snapshot) IS
    'internal: the first event id of the batch visible in one snapshot and not in an earlier one';

-- The stream's row, made at the current snapshot if there is none yet, and
-- locked for the caller's transaction.  None (NULL) while positions from
-- another cluster wait for the stream's row of a restore still loading
-- (pg_restore loads outbox.positions before outbox.stream): _rebase
-- translates both once it is there.
CREATE FUNCTION outbox._stream_row() RETURNS outbox.stream
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st outbox.stream;
BEGIN
    SELECT * INTO st FROM outbox.stream FOR UPDATE;
    IF NOT FOUND AND EXISTS (SELECT 1 FROM outbox.positions p
                              WHERE p.system_identifier <> outbox._system_identifier()) THEN
        RETURN NULL;
    ELSIF NOT FOUND THEN
        INSERT INTO outbox.stream (snap) VALUES (pg_current_snapshot())
        ON CONFLICT (singleton) DO NOTHING;
        SELECT * INTO st FROM outbox.stream FOR UPDATE;
    END IF;
    RETURN st;
END
$$;

-- The next page of the stream: events of its batch after after_id, of any
-- type, in id order, at most lim and ending after the event that brings it
-- to max_bytes (one event at least).  Opens a new batch (visible now, not
-- in the stream's snapshot) when none is open and there is an event in it;
-- closes a batch found empty.  The relay routes each event to the
-- following endpoints that subscribe to its type, and moves the stream
-- past the page when it records the page's last outcomes (_record).
CREATE FUNCTION outbox._read_stream(lim integer, max_bytes bigint)
RETURNS TABLE (id bigint, event_id uuid, event_type text, deliver_at timestamptz, key text,
               body text, header_lines text[], batch text, bytes_cut boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    st  outbox.stream := outbox._stream_row();
    nxt pg_snapshot;
    lo  bigint;
BEGIN
    IF st.snap IS NULL THEN
        RETURN;
    END IF;
    -- At most twice: an open batch found empty is closed, then a new one
    -- is opened from the current snapshot.
    FOR attempt IN 1..2 LOOP
        IF st.next_snap IS NULL THEN
            nxt := pg_current_snapshot();
            IF nxt::text = st.snap::text THEN
                RETURN;
            END IF;
            lo := outbox._batch_first_id(st.snap, nxt);
            -- Nothing new: an idle relay writes nothing.
            IF lo IS NULL THEN
                RETURN;
            END IF;
            UPDATE outbox.stream s SET next_snap = nxt, after_id = lo - 1, updated_at = now()
            RETURNING * INTO st;
        END IF;

        RETURN QUERY
            SELECT e.id, e.event_id, e.event_type, e.deliver_at, e.key,
                   outbox._body(e.event_type, e.created_at, e.payload),
                   CASE WHEN e.headers IS NULL THEN '{}' ELSE outbox._header_lines(e.headers) END,
                   st.next_snap::text,
                   (max(e.upto) OVER ()) >= max_bytes
              FROM (SELECT ev.*, sum(ev.sz) OVER (ORDER BY ev.id) AS upto
                      FROM (SELECT e1.id, e1.event_id, e1.event_type, e1.deliver_at, e1.key,
                                   e1.created_at, e1.payload, e1.headers,
                                   outbox._event_bytes(e1.payload, e1.headers) AS sz
                              FROM outbox.events e1
                             WHERE e1.id > st.after_id
                               AND pg_visible_in_snapshot(e1.txid, st.next_snap)
                               AND NOT pg_visible_in_snapshot(e1.txid, st.snap)
                             ORDER BY e1.id
                             LIMIT lim) ev) e
             WHERE e.upto - e.sz < max_bytes
             ORDER BY e.id;
        IF FOUND THEN
            RETURN;
        END IF;
        UPDATE outbox.stream s
           SET snap = s.next_snap, next_snap = NULL, after_id = 0, updated_at = now()
        RETURNING * INTO st;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox._read_stream(integer, bigint) IS
    'internal: the next page of the relay''s shared stream, every event type, bounded in events and in bytes';

-- For the events of a stream page routed to endpoints (one pair per
-- delivery, in order): whether the endpoint answered it with a 2xx already
-- (with verify, after a restart), and, for an ordered endpoint, whether an
-- earlier event of its key is still owed (it waits behind it).
CREATE FUNCTION outbox._route_checks(eids integer[], event_ids uuid[], keys text[],
                                     ordered boolean[], verify boolean)
RETURNS TABLE (delivered boolean, blocked boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT verify AND outbox._delivered(r.eid, r.evid, '-infinity'),
           r.ord AND r.key IS NOT NULL
               AND EXISTS (SELECT 1 FROM outbox.retries q WHERE q.endpoint_id = r.eid AND q.key = r.key)
      FROM unnest(eids, event_ids, keys, ordered) WITH ORDINALITY AS r(eid, evid, key, ord, n)
     ORDER BY r.n
$$;
COMMENT ON FUNCTION outbox._route_checks(integer[], uuid[], text[], boolean[], boolean) IS
    'internal: per routed delivery of a stream page, whether it was delivered already and whether it waits behind its key';

-- Endpoints that are back where the stream is follow it again: their own
-- position equals the stream's, and the relay has nothing of theirs or of
-- the stream in flight (it passes only such endpoints).  While no endpoint
-- follows the stream, its position matters to nobody, and it moves to the
-- position of a candidate between batches first (the relay does not read
-- the stream meanwhile: endpoints would otherwise have to chase it).
-- Returns those that now follow.
CREATE FUNCTION outbox._attach(candidates integer[]) RETURNS integer[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st outbox.stream := outbox._stream_row();
    attached integer[];
BEGIN
    IF st.snap IS NULL THEN
        RETURN '{}';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM outbox.positions p WHERE p.follows) THEN
        UPDATE outbox.stream s SET snap = c.snap, next_snap = NULL, after_id = 0, updated_at = now()
          FROM (SELECT p.snap FROM outbox.positions p
                 WHERE p.endpoint_id = ANY (candidates) AND p.next_snap IS NULL
                 ORDER BY p.endpoint_id LIMIT 1) c
        RETURNING s.* INTO st;
        IF NOT FOUND THEN
            SELECT * INTO st FROM outbox.stream;
        END IF;
    END IF;
    WITH a AS (
        UPDATE outbox.positions p SET follows = true, updated_at = now()
         WHERE p.endpoint_id = ANY (candidates) AND NOT p.follows
           -- (a row a concurrent drop_endpoint() holds is left alone)
           AND p.endpoint_id IN (SELECT q.endpoint_id FROM outbox.positions q
                                  WHERE q.endpoint_id = ANY (candidates) FOR UPDATE SKIP LOCKED)
           AND p.snap::text = st.snap::text
           AND p.next_snap::text IS NOT DISTINCT FROM st.next_snap::text
           AND (p.next_snap IS NULL OR p.after_id = st.after_id)
        RETURNING p.endpoint_id
    )
    SELECT coalesce(array_agg(endpoint_id), '{}') INTO attached FROM a;
    RETURN attached;
END
$$;
COMMENT ON FUNCTION outbox._attach(integer[]) IS
    'internal: endpoints whose position reached the stream''s follow it again';

----------------------------------------------------------------------------
-- An endpoint's own pages lead back to the stream
----------------------------------------------------------------------------

-- As in 1.2, with two changes.  It walks at most a span of ids per try
-- (a few tries per call), moving past a span with none of its events, so
-- that a read costs milliseconds however far behind the endpoint is; a
-- page the span cut is not the end of its batch (bytes_cut).  And a new
-- batch of a detached endpoint ends at
-- the stream's snapshot (the end of the stream's open batch, or where the
-- stream is) when that lies ahead of the endpoint, so that it arrives
-- where the stream is and can follow it again; an endpoint already there
-- reads nothing and waits to be attached.  Otherwise (the stream is behind
-- the endpoint, as for one just created) the batch ends now, as before.
CREATE OR REPLACE FUNCTION outbox._read_page(eid integer, lim integer, verify boolean, max_bytes bigint)
RETURNS TABLE (id bigint, event_id uuid, deliver_at timestamptz, key text,
               body text, header_lines text[], batch text, blocked boolean,
               delivered boolean, bytes_cut boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    -- Ids a read walks at most per try: an endpoint whose types are rare
    -- among the events pays in steps of this, so that one far behind costs
    -- the relay's read step milliseconds, not the walk of its whole backlog.
    span bigint := greatest(lim, 1)::bigint * 20 + 10000;
    top  bigint;
    pos  outbox.positions;
    nxt  pg_snapshot;
    target pg_snapshot;
    lo   bigint;
    pats text[];
    match_all boolean;
    is_ordered boolean;
BEGIN
    SELECT outbox._like_patterns(ep.event_types), '*' = ANY (ep.event_types), ep.ordered
      INTO pats, match_all, is_ordered
      FROM outbox.endpoints ep WHERE ep.id = eid;
    FOR attempt IN 1..4 LOOP
        -- A position locked by a concurrent drop_endpoint() is left alone,
        -- and one that follows the stream is read with the stream.
        SELECT * INTO pos FROM outbox.positions p WHERE p.endpoint_id = eid
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND OR pos.follows THEN
            RETURN;
        END IF;
        IF pos.next_snap IS NULL THEN
            SELECT coalesce(s.next_snap, s.snap) INTO target FROM outbox.stream s;
            IF target::text = pos.snap::text THEN
                RETURN;
            ELSIF target IS NOT NULL AND outbox._snap_contains(target, pos.snap) THEN
                nxt := target;
            ELSE
                nxt := pg_current_snapshot();
                IF nxt::text = pos.snap::text THEN
                    RETURN;
                END IF;
            END IF;
            lo := outbox._batch_first_id(pos.snap, nxt);
            IF lo IS NULL THEN
                -- Nothing between: a position bound for the stream's
                -- snapshot moves there at once; otherwise an idle relay
                -- writes nothing.
                IF nxt::text = target::text THEN
                    UPDATE outbox.positions p SET snap = nxt, after_id = 0, updated_at = now()
                     WHERE p.endpoint_id = eid;
                END IF;
                RETURN;
            END IF;
            UPDATE outbox.positions p SET next_snap = nxt, after_id = lo - 1, updated_at = now()
             WHERE p.endpoint_id = eid
            RETURNING * INTO pos;
        END IF;

        top := (SELECT max(e.id) FROM outbox.events e);
        RETURN QUERY
            SELECT e.id, e.event_id, e.deliver_at, e.key,
                   outbox._body(e.event_type, e.created_at, e.payload),
                   CASE WHEN e.headers IS NULL THEN '{}' ELSE outbox._header_lines(e.headers) END,
                   pos.next_snap::text,
                   is_ordered AND e.key IS NOT NULL
                       AND EXISTS (SELECT 1 FROM outbox.retries r
                                    WHERE r.endpoint_id = eid AND r.key = e.key),
                   verify AND outbox._delivered(eid, e.event_id, '-infinity'),
                   -- cut: by the byte budget, or by the span while more ids follow
                   (max(e.upto) OVER ()) >= max_bytes
                       OR ((count(*) OVER ()) < lim AND pos.after_id + span < top)
              FROM (SELECT ev.id, ev.event_id, ev.deliver_at, ev.key, ev.event_type, ev.created_at,
                           ev.payload, ev.headers, ev.sz,
                           sum(ev.sz) OVER (ORDER BY ev.id) AS upto
                      FROM (SELECT e1.*, outbox._event_bytes(e1.payload, e1.headers) AS sz
                              FROM outbox.events e1
                             WHERE e1.id > pos.after_id AND e1.id <= pos.after_id + span
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
        -- None of its events in this span, and more ids follow: past it.
        IF pos.after_id + span < top THEN
            UPDATE outbox.positions p SET after_id = pos.after_id + span, updated_at = now()
             WHERE p.endpoint_id = eid
            RETURNING * INTO pos;
            CONTINUE;
        END IF;
        UPDATE outbox.positions p
           SET snap = p.next_snap, next_snap = NULL, after_id = 0, updated_at = now()
         WHERE p.endpoint_id = eid;
    END LOOP;
END
$$;

-- Every endpoint as the relay loads it (store.c relies on the order of the
-- columns).  A function with sequential scans off: the relay keeps its
-- plan, made while the tables are small, and a join of sequential scans
-- took seconds per load with 10,000 endpoints; by their keys it is one
-- merge of three index scans.
CREATE FUNCTION outbox._relay_endpoints()
RETURNS TABLE (id integer, name text, url text, header_lines text, timeout_ms bigint,
               max_attempts integer, ordered boolean, active boolean, secret text,
               previous_secret text, event_types text[], follows boolean, max_in_flight integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
    SELECT e.id, e.name, e.url, array_to_string(outbox._header_lines(e.headers), E'\n'),
           outbox._timeout_ms(e.timeout), e.max_attempts, e.ordered,
           NOT e.paused AND e.disabled_at IS NULL, s.secret,
           CASE WHEN s.previous_expires_at > now() THEN s.previous_secret END,
           e.event_types, p.follows, e.max_in_flight
      FROM outbox.endpoints e
      JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
      JOIN outbox.positions p ON p.endpoint_id = e.id
     ORDER BY e.id
$$;
COMMENT ON FUNCTION outbox._relay_endpoints() IS 'internal: every endpoint as the relay loads it';

-- Endpoints with retries due now: the relay reads due retries of these
-- only, not of every endpoint.
CREATE FUNCTION outbox._due_endpoints() RETURNS integer[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(DISTINCT r.endpoint_id), '{}')
      FROM outbox.retries r WHERE r.next_at <= now()
$$;
COMMENT ON FUNCTION outbox._due_endpoints() IS 'internal: endpoints that have retries due now';

----------------------------------------------------------------------------
-- Recording many endpoints' outcomes at once
----------------------------------------------------------------------------

-- One finished delivery, as the relay records it.  outcome is 'delivered',
-- 'retry', 'dead', 'deferred' (not sent: its deliver_at is later, or it
-- waits behind its key) or 'already' (answered with a 2xx before a
-- restart; not sent).  disable_reason is set on the delivery whose answer
-- asked to disable the endpoint (410, webhook-delivery: disable).
CREATE TYPE outbox.outcome AS (
    endpoint_id    integer,
    id             bigint,
    event_id       uuid,
    attempt        integer,
    outcome        text,
    next_at        timestamptz,
    status         integer,
    error          text,
    duration_ms    real,
    response       text,
    disable_reason text
);
COMMENT ON TYPE outbox.outcome IS 'internal: one finished delivery, as the relay records it';

-- A page whose deliveries are all recorded: the position it moves.
-- endpoint_id NULL is the stream.  batch is the page's batch snapshot
-- (text); the position moves only if it is still in that batch.
CREATE TYPE outbox.page_done AS (
    endpoint_id integer,
    batch       text,
    last_id     bigint,
    batch_done  boolean
);
COMMENT ON TYPE outbox.page_done IS 'internal: a page read and recorded whole, and the position it moves';

-- Record, in one statement, finished deliveries of any endpoints, the
-- pages they complete, and the endpoints that stop following the stream
-- (detach: their own position takes the stream's, before the stream moves).
-- Returns the endpoints whose row another transaction holds (a
-- drop_endpoint() not yet committed): nothing of theirs was recorded, and
-- the stream did not move; the relay tries them again later.  An endpoint
-- that is gone has nothing left to record and is not returned.
CREATE FUNCTION outbox._record(outcomes outbox.outcome[], pages outbox.page_done[], detach integer[])
RETURNS integer[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    wanted integer[];
    held integer[];
    locked integer[];
    skip integer[];
BEGIN
    -- Hold against a concurrent drop, without waiting (one relay serves
    -- every endpoint, so it must not queue behind an open transaction),
    -- each endpoint whose record writes a row of its own: a retry, a dead
    -- letter, its position, its state.  A first attempt delivered writes
    -- only the attempt log, which has no key to the endpoint, and the
    -- health row, skipped when locked: most endpoints of a stream page are
    -- not locked at all (a lock is a write to the endpoint's row).
    wanted := ARRAY(SELECT DISTINCT x FROM (
                        SELECT o.endpoint_id FROM unnest(outcomes) o
                         WHERE o.outcome NOT IN ('delivered', 'already') OR o.attempt <> 1
                            OR o.disable_reason IS NOT NULL
                        UNION ALL SELECT p.endpoint_id FROM unnest(pages) p WHERE p.endpoint_id IS NOT NULL
                        UNION ALL SELECT unnest(detach)) u(x)
                     ORDER BY x);
    held := ARRAY(SELECT e.id FROM outbox.endpoints e WHERE e.id = ANY (wanted)
                   ORDER BY e.id FOR KEY SHARE SKIP LOCKED);
    locked := ARRAY(SELECT e.id FROM outbox.endpoints e
                     WHERE e.id = ANY (wanted) AND e.id <> ALL (held));
    -- Endpoints held elsewhere, and those gone: nothing of theirs is written.
    skip := locked || ARRAY(SELECT x FROM unnest(wanted) x
                             WHERE NOT EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.id = x));
    IF cardinality(locked) > 0 THEN
        -- The stream moves only when everything routed to it is recorded.
        pages := ARRAY(SELECT p FROM unnest(pages) p
                        WHERE p.endpoint_id IS NOT NULL AND p.endpoint_id <> ALL (locked));
        outcomes := ARRAY(SELECT o FROM unnest(outcomes) o WHERE o.endpoint_id <> ALL (skip));
        detach := ARRAY(SELECT d FROM unnest(detach) d WHERE d <> ALL (locked));
    END IF;

    -- Detached endpoints start from the stream's position as it is now,
    -- before this statement moves it.
    IF cardinality(detach) > 0 THEN
        UPDATE outbox.positions p
           SET follows = false, snap = s.snap, next_snap = s.next_snap, after_id = s.after_id,
               updated_at = now()
          FROM outbox.stream s
         WHERE p.endpoint_id = ANY (detach) AND p.follows;
    END IF;

    INSERT INTO outbox.attempt_log (endpoint_id, id, event_id, attempt, duration_ms, status, error, response, slot)
    SELECT o.endpoint_id, o.id, o.event_id, o.attempt, o.duration_ms, o.status, o.error, o.response,
           (SELECT r.slot FROM outbox.rotation r WHERE r.tbl = 'attempt_log' AND r.current)
      FROM unnest(outcomes) o
     WHERE o.outcome NOT IN ('deferred', 'already') AND o.endpoint_id <> ALL (skip);

    -- Only failures and deferrals get rows.  The event is in outbox.events,
    -- or in outbox.delayed once rotation set it aside.
    IF EXISTS (SELECT 1 FROM unnest(outcomes) o WHERE o.outcome IN ('retry', 'deferred')) THEN
    -- One row per endpoint and event: its page and its due retries may both
    -- hold an event (replay() queues events a position has not passed), and
    -- an upsert may not touch a row twice.  The latest attempt wins.
    INSERT INTO outbox.retries AS r (endpoint_id, id, event_id, key, attempts, next_at, last_status, last_error)
    SELECT DISTINCT ON (o.endpoint_id, o.id)
           o.endpoint_id, o.id, o.event_id, e.key, o.attempt, o.next_at, o.status, o.error
      FROM unnest(outcomes) o
      CROSS JOIN LATERAL (SELECT ev.key FROM outbox.events ev WHERE ev.id = o.id
                          UNION ALL
                          SELECT d.key FROM outbox.delayed d WHERE d.id = o.id
                          LIMIT 1) e
     WHERE o.outcome IN ('retry', 'deferred') AND o.endpoint_id <> ALL (skip)
     ORDER BY o.endpoint_id, o.id, o.attempt DESC
    ON CONFLICT (endpoint_id, id) DO UPDATE
       SET attempts = EXCLUDED.attempts, next_at = EXCLUDED.next_at,
           last_status = EXCLUDED.last_status, last_error = EXCLUDED.last_error;
    END IF;

    IF EXISTS (SELECT 1 FROM unnest(outcomes) o WHERE o.outcome = 'dead') THEN
    INSERT INTO outbox.dead_letter_log AS d (endpoint_id, id, event_id, event_type, payload, key, headers,
                                             created_at, attempts, last_status, last_error)
    SELECT DISTINCT ON (o.endpoint_id, o.id)
           o.endpoint_id, o.id, e.event_id, e.event_type, e.payload, e.key, e.headers, e.created_at,
           o.attempt, o.status, o.error
      FROM unnest(outcomes) o
      CROSS JOIN LATERAL (SELECT ev.event_id, ev.event_type, ev.payload, ev.key, ev.headers, ev.created_at
                            FROM outbox.events ev WHERE ev.id = o.id
                          UNION ALL
                          SELECT dl.event_id, dl.event_type, dl.payload, dl.key, dl.headers, dl.created_at
                            FROM outbox.delayed dl WHERE dl.id = o.id
                          LIMIT 1) e
     WHERE o.outcome = 'dead' AND o.endpoint_id <> ALL (skip)
     ORDER BY o.endpoint_id, o.id, o.attempt DESC
    ON CONFLICT (endpoint_id, id) DO UPDATE
       SET attempts = EXCLUDED.attempts, last_status = EXCLUDED.last_status,
           last_error = EXCLUDED.last_error, dead_at = now();
    END IF;

    -- By primary key, one probe per event.
    DELETE FROM outbox.retries r
     USING unnest(outcomes) o
     WHERE r.endpoint_id = o.endpoint_id AND r.id = o.id
       AND o.outcome IN ('delivered', 'dead', 'already') AND o.endpoint_id <> ALL (skip);

    -- Own pages move their endpoint's position, the stream's page the
    -- stream; each only if it is still in the page's batch (a rebase or a
    -- release may have moved it meanwhile).
    UPDATE outbox.positions p
       SET snap = CASE WHEN d.batch_done THEN p.next_snap ELSE p.snap END,
           next_snap = CASE WHEN d.batch_done THEN NULL ELSE p.next_snap END,
           after_id = CASE WHEN d.batch_done THEN 0 ELSE d.last_id END,
           updated_at = now()
      FROM unnest(pages) d
     WHERE d.endpoint_id IS NOT NULL AND p.endpoint_id = d.endpoint_id
       AND NOT p.follows AND p.next_snap::text = d.batch;
    UPDATE outbox.stream s
       SET snap = CASE WHEN d.batch_done THEN s.next_snap ELSE s.snap END,
           next_snap = CASE WHEN d.batch_done THEN NULL ELSE s.next_snap END,
           after_id = CASE WHEN d.batch_done THEN 0 ELSE d.last_id END,
           updated_at = now()
      FROM unnest(pages) d
     WHERE d.endpoint_id IS NULL AND s.next_snap::text = d.batch;

    -- Endpoint health: one row update per endpoint, from the attempts made
    -- (skipped for this record if resume_endpoint() holds the row).
    WITH a AS (
        SELECT o.endpoint_id, o.outcome, o.status, o.error, o.n
          FROM unnest(outcomes) WITH ORDINALITY AS o(endpoint_id, id, event_id, attempt, outcome, next_at,
                                                     status, error, duration_ms, response, disable_reason, n)
         WHERE o.outcome NOT IN ('deferred', 'already') AND o.endpoint_id <> ALL (skip)
    ), s AS (
        SELECT a.endpoint_id,
               max(a.n) FILTER (WHERE a.outcome = 'delivered') AS last_ok,
               count(*) FILTER (WHERE a.outcome <> 'delivered') AS fails,
               max(a.n) FILTER (WHERE a.outcome <> 'delivered') AS last_fail
          FROM a GROUP BY a.endpoint_id
    )
    -- A row whose only news is another success is written at most once a
    -- second (last_success_at is that precise): with thousands of endpoints
    -- on a stream page, a write per endpoint per page cost more than the
    -- deliveries.
    UPDATE outbox.endpoint_health h
       SET last_success_at = CASE WHEN s.last_ok IS NOT NULL THEN now() ELSE h.last_success_at END,
           last_failure_at = CASE WHEN s.fails > 0 THEN now() ELSE h.last_failure_at END,
           last_failure_status = CASE WHEN s.fails > 0 THEN (SELECT a.status FROM a WHERE a.n = s.last_fail)
                                      ELSE h.last_failure_status END,
           last_failure_error = CASE WHEN s.fails > 0 THEN (SELECT a.error FROM a WHERE a.n = s.last_fail)
                                     ELSE h.last_failure_error END,
           consecutive_failures = CASE WHEN s.last_ok IS NULL THEN h.consecutive_failures + s.fails
                                       ELSE (SELECT count(*) FROM a
                                              WHERE a.endpoint_id = s.endpoint_id AND a.n > s.last_ok
                                                AND a.outcome <> 'delivered') END,
           failing_since = CASE WHEN s.last_ok IS NOT NULL AND coalesce(s.last_fail < s.last_ok, true) THEN NULL
                                WHEN s.fails > 0 THEN coalesce(h.failing_since, now())
                                ELSE h.failing_since END
      FROM s
     WHERE h.endpoint_id = s.endpoint_id
       AND (s.fails > 0 OR h.last_success_at IS NULL OR h.last_success_at < now() - interval '1 second'
            OR h.consecutive_failures <> 0 OR h.failing_since IS NOT NULL)
       AND h.endpoint_id IN (SELECT endpoint_id FROM outbox.endpoint_health
                              WHERE endpoint_id IN (SELECT endpoint_id FROM s)
                                FOR UPDATE SKIP LOCKED);

    -- Disable when asked to, or after outbox.disable_after of failures; if
    -- an administrator holds the endpoint, a later record decides.
    WITH asked AS (
        SELECT o.endpoint_id, min(o.disable_reason) AS reason
          FROM unnest(outcomes) o
         WHERE o.endpoint_id <> ALL (skip)
         GROUP BY o.endpoint_id
    )
    UPDATE outbox.endpoints ep
       SET disabled_at = now(), updated_at = now(),
           disabled_reason = coalesce(asked.reason,
                                      format('no successful delivery since %s (outbox.disable_after is %s)',
                                             h.failing_since, outbox._setting_interval('outbox.disable_after', '5 days')))
      FROM asked
      JOIN outbox.endpoint_health h ON h.endpoint_id = asked.endpoint_id
     WHERE ep.id = asked.endpoint_id AND ep.disabled_at IS NULL
       AND (asked.reason IS NOT NULL
            OR h.failing_since < now() - outbox._setting_interval('outbox.disable_after', '5 days'))
       AND ep.id IN (SELECT id FROM outbox.endpoints WHERE id IN (SELECT endpoint_id FROM asked)
                        FOR NO KEY UPDATE SKIP LOCKED);
    RETURN locked;
END
$$;
COMMENT ON FUNCTION outbox._record(outbox.outcome[], outbox.page_done[], integer[]) IS
    'internal: record finished deliveries of any endpoints in one statement, move the positions of the pages they complete, detach endpoints from the stream';

DROP FUNCTION outbox._record(integer, text, bigint, boolean, bigint[], uuid[], integer[], text[],
                             timestamptz[], integer[], text[], real[], text[], text);

----------------------------------------------------------------------------
-- What reads positions reads them as they stand
----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION outbox._unread(eid integer)
RETURNS TABLE (n bigint, oldest timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*), min(e.created_at)
      FROM outbox._positions p
      JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
      JOIN outbox.events e
        ON e.txid >= pg_snapshot_xmin(p.snap)
       AND NOT pg_visible_in_snapshot(e.txid, p.snap)
       AND pg_visible_in_snapshot(e.txid, pg_current_snapshot())
       AND (p.next_snap IS NULL OR e.id > p.after_id
            OR NOT pg_visible_in_snapshot(e.txid, p.next_snap))
       AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))
     WHERE p.endpoint_id = eid
$$;

CREATE OR REPLACE FUNCTION outbox._slot_owed(s smallint) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
    SELECT EXISTS (SELECT 1 FROM outbox._positions p JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
                    WHERE EXISTS (SELECT 1 FROM outbox.events e
                                   WHERE e.slot = s AND e.txid >= pg_snapshot_xmin(p.snap)
                                     AND NOT pg_visible_in_snapshot(e.txid, p.snap)
                                     AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))))
        OR EXISTS (SELECT 1 FROM outbox.retries r JOIN outbox.events e ON e.id = r.id
                    WHERE e.slot = s AND NOT EXISTS (SELECT 1 FROM outbox.delayed d WHERE d.id = r.id))
$$;

-- As in 1.2; the position given up is the endpoint's own from then on.
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
          JOIN outbox._positions p ON p.endpoint_id = e.id
         WHERE e.disabled_at < now() - retention
           AND (EXISTS (SELECT 1 FROM outbox.events ev
                         WHERE ev.slot = s AND ev.txid >= pg_snapshot_xmin(p.snap)
                           AND NOT pg_visible_in_snapshot(ev.txid, p.snap)
                           AND ev.event_type LIKE ANY (outbox._like_patterns(e.event_types)))
                OR EXISTS (SELECT 1 FROM outbox.retries r JOIN outbox.events ev ON ev.id = r.id
                            WHERE r.endpoint_id = e.id AND ev.slot = s
                              AND NOT EXISTS (SELECT 1 FROM outbox.delayed d WHERE d.id = r.id)))
    LOOP
        -- Skip an endpoint whose position another transaction holds.
        PERFORM 1 FROM outbox.positions p WHERE p.endpoint_id = ep.id FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        n := (SELECT u.n FROM outbox._unread(ep.id) u)
             + (SELECT count(*) FROM outbox.retries r WHERE r.endpoint_id = ep.id);
        DELETE FROM outbox.retries r WHERE r.endpoint_id = ep.id;
        UPDATE outbox.positions p
           SET snap = pg_current_snapshot(), next_snap = NULL, after_id = 0, follows = false,
               updated_at = now()
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

-- As in 1.1, with the stream: what each endpoint's position (its own or
-- the stream's) owed is queued, then every endpoint follows the stream,
-- which starts from this cluster's present.
CREATE OR REPLACE FUNCTION outbox._rebase() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    here text := outbox._system_identifier();
    owed bigint;
BEGIN
    -- Cheap when there is nothing to do (the relay asks once a second).
    IF NOT EXISTS (SELECT 1 FROM outbox.positions p WHERE p.system_identifier <> here)
       AND NOT EXISTS (SELECT 1 FROM outbox.stream s WHERE s.system_identifier <> here) THEN
        RETURN;
    END IF;
    PERFORM 1 FROM outbox.stream FOR UPDATE;
    PERFORM 1 FROM outbox.positions p ORDER BY p.endpoint_id FOR UPDATE;
    IF NOT EXISTS (SELECT 1 FROM outbox.positions p WHERE p.system_identifier <> here)
       AND NOT EXISTS (SELECT 1 FROM outbox.stream s WHERE s.system_identifier <> here) THEN
        RETURN;
    END IF;
    -- Restored positions that follow the stream wait for its restored row
    -- (loaded after them when the restore is not one transaction): its
    -- trigger rebases them all then.
    IF EXISTS (SELECT 1 FROM outbox.positions p WHERE p.system_identifier <> here AND p.follows)
       AND NOT EXISTS (SELECT 1 FROM outbox.stream s WHERE s.system_identifier <> here) THEN
        RETURN;
    END IF;
    INSERT INTO outbox.retries (endpoint_id, id, event_id, key, attempts, next_at)
    SELECT p.endpoint_id, e.id, e.event_id, e.key, 0, greatest(now(), e.deliver_at)
      FROM outbox._positions p
      JOIN outbox.positions own ON own.endpoint_id = p.endpoint_id
      JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
      JOIN outbox.events e
        ON e.txid >= pg_snapshot_xmin(p.snap)
       AND NOT pg_visible_in_snapshot(e.txid, p.snap)
       AND (p.next_snap IS NULL OR e.id > p.after_id
            OR NOT pg_visible_in_snapshot(e.txid, p.next_snap))
       AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))
     WHERE own.system_identifier <> here
        OR (own.follows AND EXISTS (SELECT 1 FROM outbox.stream s WHERE s.system_identifier <> here))
    ON CONFLICT (endpoint_id, id) DO NOTHING;
    GET DIAGNOSTICS owed = ROW_COUNT;
    UPDATE outbox.events e SET txid = '3' WHERE e.txid <> '3';
    DELETE FROM outbox.stream;
    INSERT INTO outbox.stream (snap) VALUES (pg_current_snapshot());
    UPDATE outbox.positions p
       SET snap = s.snap, next_snap = NULL, after_id = 0, follows = true, updated_at = now(),
           system_identifier = here
      FROM outbox.stream s
     WHERE p.system_identifier <> here OR p.follows;
    PERFORM outbox._wake_at_commit();
    RAISE LOG 'outbox: positions were written by another cluster (a restore or an upgrade): % events still owed are queued to be delivered again',
        owed;
END
$$;

CREATE CONSTRAINT TRIGGER stream_restored AFTER INSERT ON outbox.stream
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.system_identifier <> outbox._system_identifier())
    EXECUTE FUNCTION outbox._rebase_restored();
COMMENT ON TRIGGER stream_restored ON outbox.stream IS
    'at commit, rebase a stream position that a restore brought from another cluster';

-- (jit off: with sequential scans off its costs pass jit_above_cost, and
-- compiling took 400 ms of a health() check that runs in milliseconds)
CREATE OR REPLACE FUNCTION outbox.rotation_holds()
RETURNS TABLE (holder text, detail text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
    WITH nxt AS (
        SELECT ((r.slot + 1) % 3)::smallint AS s
          FROM outbox.rotation r WHERE r.tbl = 'events' AND r.current
    ), behind AS (
        SELECT ep.name, ep.paused, ep.disabled_at, count(*) AS n
          FROM nxt, outbox._positions p
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
      LEFT JOIN pg_prepared_xacts px ON l.pid IS NULL AND px.transaction::text = split_part(l.virtualtransaction, '/', 2)
     WHERE l.locktype = 'relation' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND l.relation = format('outbox.events_%s', (SELECT s FROM nxt))::regclass
       AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
       AND a.backend_type IS DISTINCT FROM 'outbox relay'
$$;

----------------------------------------------------------------------------
-- Per-endpoint max_in_flight and what is in flight now
----------------------------------------------------------------------------

-- An endpoint's own cap on requests in flight; NULL follows
-- outbox.endpoint_concurrency as it is set at the time.  The relay shares
-- its slots (outbox.max_concurrency) fairly among the endpoints with work,
-- each up to its cap (DESIGN.md, "The relay loop").  The bound is the
-- relay's own: outbox.max_concurrency is at most 10,000.
ALTER TABLE outbox.endpoints ADD COLUMN max_in_flight integer
    CONSTRAINT endpoints_max_in_flight_check CHECK (max_in_flight BETWEEN 1 AND 10000);
COMMENT ON COLUMN outbox.endpoints.max_in_flight IS
    'most requests in flight to this endpoint; NULL: outbox.endpoint_concurrency';

CREATE FUNCTION outbox._check_max_in_flight(max_in_flight integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF max_in_flight IS NOT NULL AND (max_in_flight < 1 OR max_in_flight > 10000) THEN
        RAISE EXCEPTION 'max_in_flight must be between 1 and 10000'
            USING ERRCODE = '22023',
                  DETAIL = format('The value given was %s.', max_in_flight),
                  HINT = 'NULL (create_endpoint) follows outbox.endpoint_concurrency.';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox._check_max_in_flight(integer) IS 'internal: validate an endpoint''s max_in_flight';

-- The relay's requests in flight per endpoint now, its senders' included,
-- from shared memory (shmem.c); endpoints with none have no row.
CREATE FUNCTION outbox._in_flight(OUT endpoint_id integer, OUT in_flight integer)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_in_flight';
COMMENT ON FUNCTION outbox._in_flight() IS 'internal: the relay''s requests in flight now, per endpoint';

-- create_endpoint and alter_endpoint take max_in_flight last.  Their
-- signature changes, so they are dropped and created again; the grants
-- given on them are given again to the new ones.
CREATE TEMP TABLE outbox_acl_1_2 AS
SELECT p.proname::text AS name, p.proacl AS acl, p.proowner AS owner
  FROM pg_proc p
 WHERE p.oid IN ('outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer)'::regprocedure,
                 'outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer)'::regprocedure)
   AND p.proacl IS NOT NULL;

DROP FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer);
DROP FUNCTION outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer);

CREATE FUNCTION outbox.create_endpoint(
    name          text,
    url           text,
    event_types   text[]   DEFAULT '{*}',
    secret        text     DEFAULT NULL,
    headers       jsonb    DEFAULT '{}',
    ordered       boolean  DEFAULT false,
    timeout       interval DEFAULT '30 seconds',
    max_attempts  integer  DEFAULT 8,
    max_in_flight integer  DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid       integer;
    the_url   text;
    types     text[];
    hdrs      jsonb;
    the_secret text;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF name !~ '^[A-Za-z0-9_.:-]{1,63}$' THEN
        RAISE EXCEPTION 'invalid endpoint name: %', quote_literal(name)
            USING ERRCODE = '22023',
                  DETAIL = 'An endpoint name is 1 to 63 characters of letters, digits, "_", ".", ":" and "-".';
    END IF;
    IF url IS NULL THEN
        RAISE EXCEPTION 'endpoint url must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF ordered IS NULL OR timeout IS NULL OR max_attempts IS NULL THEN
        RAISE EXCEPTION 'ordered, timeout and max_attempts must not be NULL' USING ERRCODE = '22004';
    END IF;
    the_url := outbox._check_url(url);
    types := outbox._check_event_types(event_types);
    hdrs := outbox._check_headers(coalesce(headers, '{}'));
    PERFORM outbox._check_endpoint_settings(timeout, max_attempts);
    PERFORM outbox._check_max_in_flight(max_in_flight);
    the_secret := CASE WHEN secret IS NULL THEN outbox._new_secret()
                       ELSE outbox._check_secret(secret) END;

    IF EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.name = create_endpoint.name) THEN
        RAISE EXCEPTION 'endpoint "%" already exists', name USING ERRCODE = '42710';
    END IF;

    INSERT INTO outbox.endpoints (name, url, event_types, headers, ordered, timeout, max_attempts,
                                  max_in_flight)
    VALUES (name, the_url, types, hdrs, ordered, timeout, max_attempts, max_in_flight)
    RETURNING id INTO eid;
    INSERT INTO outbox.endpoint_secrets (endpoint_id, secret) VALUES (eid, the_secret);
    INSERT INTO outbox.endpoint_health (endpoint_id) VALUES (eid);
    INSERT INTO outbox.positions (endpoint_id, snap) VALUES (eid, outbox._start_snapshot());
    PERFORM outbox._wake_at_commit();
    RETURN the_secret;
EXCEPTION
    WHEN unique_violation THEN
        RAISE EXCEPTION 'endpoint "%" already exists', name USING ERRCODE = '42710';
END
$$;
COMMENT ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer) IS
    'create a webhook endpoint that receives events emitted from now on; returns its signing secret';

-- max_in_flight 0 goes back to following outbox.endpoint_concurrency; NULL
-- leaves it as it is, as for every other argument.
CREATE FUNCTION outbox.alter_endpoint(
    name          text,
    url           text     DEFAULT NULL,
    event_types   text[]   DEFAULT NULL,
    secret        text     DEFAULT NULL,
    headers       jsonb    DEFAULT NULL,
    ordered       boolean  DEFAULT NULL,
    timeout       interval DEFAULT NULL,
    max_attempts  integer  DEFAULT NULL,
    max_in_flight integer  DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(name);
    the_url text;
    types   text[];
    hdrs    jsonb;
    the_secret text;
BEGIN
    IF url IS NOT NULL THEN the_url := outbox._check_url(url); END IF;
    IF event_types IS NOT NULL THEN types := outbox._check_event_types(event_types); END IF;
    IF headers IS NOT NULL THEN hdrs := outbox._check_headers(headers); END IF;
    IF secret IS NOT NULL THEN the_secret := outbox._check_secret(secret); END IF;
    PERFORM outbox._check_endpoint_settings(timeout, max_attempts);
    PERFORM outbox._check_max_in_flight(nullif(max_in_flight, 0));

    UPDATE outbox.endpoints e
       SET url = coalesce(the_url, e.url),
           event_types = coalesce(types, e.event_types),
           headers = coalesce(hdrs, e.headers),
           ordered = coalesce(alter_endpoint.ordered, e.ordered),
           timeout = coalesce(alter_endpoint.timeout, e.timeout),
           max_attempts = coalesce(alter_endpoint.max_attempts, e.max_attempts),
           max_in_flight = CASE WHEN alter_endpoint.max_in_flight IS NULL THEN e.max_in_flight
                                ELSE nullif(alter_endpoint.max_in_flight, 0) END,
           updated_at = now()
     WHERE e.id = eid;
    IF the_secret IS NOT NULL THEN
        UPDATE outbox.endpoint_secrets
           SET secret = the_secret, previous_secret = NULL, previous_expires_at = NULL
         WHERE endpoint_id = eid;
    END IF;
    PERFORM outbox._wake_at_commit();
END
$$;
COMMENT ON FUNCTION outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer) IS
    'change an endpoint; NULL leaves a setting as it is';

REVOKE ALL ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer),
    outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer),
    outbox._check_max_in_flight(integer), outbox._in_flight() FROM PUBLIC;

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT o.name, a.grantee, a.is_grantable
          FROM pg_temp.outbox_acl_1_2 o
         CROSS JOIN LATERAL aclexplode(o.acl) a
         WHERE a.grantee <> o.owner AND a.privilege_type = 'EXECUTE'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION outbox.%I(text, text, text[], text, jsonb, boolean, interval, integer, integer) TO %s%s',
                       g.name,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;
DROP TABLE pg_temp.outbox_acl_1_2;

-- endpoint_status as in 1.2, with two columns at the end: the endpoint's
-- cap (its own, or outbox.endpoint_concurrency as this session sees it),
-- and its requests in flight now, as the relay last published them.
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
       h.backlog_dropped_at,
       coalesce(ep.max_in_flight,
                current_setting('outbox.endpoint_concurrency', true)::integer) AS max_in_flight,
       coalesce(f.in_flight, 0) AS in_flight
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
         WHERE rr.endpoint_id = ep.id AND (e.id IS NOT NULL OR dl.id IS NOT NULL)) r ON true
  LEFT JOIN outbox._in_flight() f ON f.endpoint_id = ep.id;
COMMENT ON VIEW outbox.endpoint_status IS
    'one row per endpoint: state and why, events waiting and the age of the oldest, in retry, dead, last success and failure, backlog given up, cap on and requests in flight now';

----------------------------------------------------------------------------
-- Privileges: PUBLIC gets nothing of what this script created.
----------------------------------------------------------------------------

REVOKE ALL ON outbox.stream, outbox._positions FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox._snap_contains(pg_snapshot, pg_snapshot), outbox._stream_row(),
    outbox._batch_first_id(pg_snapshot, pg_snapshot),
    outbox._read_stream(integer, bigint),
    outbox._route_checks(integer[], uuid[], text[], boolean[], boolean), outbox._attach(integer[]),
    outbox._due_endpoints(), outbox._relay_endpoints(),
    outbox._record(outbox.outcome[], outbox.page_done[], integer[]) FROM PUBLIC;

-- Relays left databases still at 1.2: start them again once this commits.
SELECT outbox._launch();
