-- outbox 1.3 -> 1.4: _record locks only the rows it writes; and an
-- endpoint's format.  Besides Standard Webhooks (the default, sent as
-- before), an endpoint may take CloudEvents 1.0, in structured mode (the
-- event as a CloudEvents JSON object) or in binary mode (ce-* headers, the
-- payload as the body).  The relay builds each request in the endpoint's
-- format (src/target/format.c), so the readers return what every format is made
-- of: the event's type, emit time and payload, no longer a finished
-- Standard Webhooks body.
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.4'" to load this file. \quit

-- _record locks only the rows it writes: the health rows it updates and
-- the endpoints it may disable.  It wakes the relay when it disables one,
-- and a failure after a success in the same record starts a new failing
-- period.  In 1.3 it locked the endpoint row and the
-- health row of every endpoint with an outcome in the record, a write per
-- endpoint and record (with thousands of endpoints on a stream page, a
-- write per delivery).
CREATE OR REPLACE FUNCTION outbox._record(outcomes outbox.outcome[], pages outbox.page_done[], detach integer[])
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
    -- deliveries.  Only the rows written are locked (a lock is a write too:
    -- before 1.4 every endpoint of the record had its row locked).
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
           -- a failure after a success of this record starts a new failing
           -- period (before 1.4 it kept the old one: an endpoint that had
           -- just delivered could be disabled for no success since then)
           failing_since = CASE WHEN s.last_ok IS NOT NULL AND coalesce(s.last_fail < s.last_ok, true) THEN NULL
                                WHEN s.last_ok IS NOT NULL THEN now()
                                WHEN s.fails > 0 THEN coalesce(h.failing_since, now())
                                ELSE h.failing_since END
      FROM s
     WHERE h.endpoint_id = s.endpoint_id
       AND h.endpoint_id IN (SELECT hl.endpoint_id
                               FROM outbox.endpoint_health hl JOIN s sl ON sl.endpoint_id = hl.endpoint_id
                              WHERE sl.fails > 0 OR hl.last_success_at IS NULL
                                 OR hl.last_success_at < now() - interval '1 second'
                                 OR hl.consecutive_failures <> 0 OR hl.failing_since IS NOT NULL
                                FOR UPDATE OF hl SKIP LOCKED);

    -- Disable when asked to, or after outbox.disable_after of failures; if
    -- an administrator holds the endpoint, a later record decides.  Only
    -- endpoints with something other than a delivery in this record may be
    -- disabled (a delivery ends failing_since above), and only their rows
    -- are locked: before 1.4 the lock wrote every endpoint's row that had
    -- an outcome, one write per endpoint and record.
    WITH asked AS (
        SELECT o.endpoint_id, min(o.disable_reason) AS reason
          FROM unnest(outcomes) o
         WHERE o.endpoint_id <> ALL (skip)
           AND (o.outcome <> 'delivered' OR o.disable_reason IS NOT NULL)
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
    -- The relay loads its endpoints again once this commits: one disabled
    -- for outbox.disable_after is not sent to any more.
    IF FOUND THEN
        PERFORM outbox._wake_at_commit();
    END IF;
    RETURN locked;
END
$$;
COMMENT ON FUNCTION outbox._record(outbox.outcome[], outbox.page_done[], integer[]) IS
    'internal: record finished deliveries of any endpoints in one statement, move the positions of the pages they complete, detach endpoints from the stream';

----------------------------------------------------------------------------
-- The endpoint's format
----------------------------------------------------------------------------

ALTER TABLE outbox.endpoints ADD COLUMN format text NOT NULL DEFAULT 'standard-webhooks'
    CONSTRAINT endpoints_format_check
    CHECK (format IN ('standard-webhooks', 'cloudevents', 'cloudevents-binary'));
COMMENT ON COLUMN outbox.endpoints.format IS
    'what requests look like: standard-webhooks, cloudevents (structured mode) or cloudevents-binary';

-- The format's name, checked, and the endpoint's headers against it: in
-- cloudevents-binary the relay sets the ce-* headers of the attributes it
-- maps, and an endpoint may not set them too.
CREATE FUNCTION outbox._check_format(format text, headers jsonb) RETURNS text
LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_format';
COMMENT ON FUNCTION outbox._check_format(text, jsonb) IS
    'internal: validate an endpoint''s format, and its headers for that format';

-- create_endpoint and alter_endpoint take format last.  Their signature
-- changes, so they are dropped and created again; the grants given on
-- them are given again to the new ones.
CREATE TEMP TABLE outbox_acl_1_3 AS
SELECT p.proname::text AS name, p.proacl AS acl, p.proowner AS owner
  FROM pg_proc p
 WHERE p.oid IN ('outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer)'::regprocedure,
                 'outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer)'::regprocedure)
   AND p.proacl IS NOT NULL;

DROP FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer);
DROP FUNCTION outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer);

CREATE FUNCTION outbox.create_endpoint(
    name          text,
    url           text,
    event_types   text[]   DEFAULT '{*}',
    secret        text     DEFAULT NULL,
    headers       jsonb    DEFAULT '{}',
    ordered       boolean  DEFAULT false,
    timeout       interval DEFAULT '30 seconds',
    max_attempts  integer  DEFAULT 8,
    max_in_flight integer  DEFAULT NULL,
    format        text     DEFAULT 'standard-webhooks')
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
    fmt       text;
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
    IF ordered IS NULL OR timeout IS NULL OR max_attempts IS NULL OR format IS NULL THEN
        RAISE EXCEPTION 'ordered, timeout, max_attempts and format must not be NULL' USING ERRCODE = '22004';
    END IF;
    the_url := outbox._check_url(url);
    types := outbox._check_event_types(event_types);
    hdrs := outbox._check_headers(coalesce(headers, '{}'));
    PERFORM outbox._check_endpoint_settings(timeout, max_attempts);
    PERFORM outbox._check_max_in_flight(max_in_flight);
    fmt := outbox._check_format(format, hdrs);
    the_secret := CASE WHEN secret IS NULL THEN outbox._new_secret()
                       ELSE outbox._check_secret(secret) END;

    IF EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.name = create_endpoint.name) THEN
        RAISE EXCEPTION 'endpoint "%" already exists', name USING ERRCODE = '42710';
    END IF;

    INSERT INTO outbox.endpoints (name, url, event_types, headers, ordered, timeout, max_attempts,
                                  max_in_flight, format)
    VALUES (name, the_url, types, hdrs, ordered, timeout, max_attempts, max_in_flight, fmt)
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
COMMENT ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text) IS
    'create a webhook endpoint that receives events emitted from now on; returns its signing secret';

-- As in 1.3, with format.  The headers and the format an endpoint ends up
-- with are checked together: changing either one alone can make a pair
-- the relay would not send.
CREATE FUNCTION outbox.alter_endpoint(
    name          text,
    url           text     DEFAULT NULL,
    event_types   text[]   DEFAULT NULL,
    secret        text     DEFAULT NULL,
    headers       jsonb    DEFAULT NULL,
    ordered       boolean  DEFAULT NULL,
    timeout       interval DEFAULT NULL,
    max_attempts  integer  DEFAULT NULL,
    max_in_flight integer  DEFAULT NULL,
    format        text     DEFAULT NULL)
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
    cur     outbox.endpoints;
BEGIN
    IF url IS NOT NULL THEN the_url := outbox._check_url(url); END IF;
    IF event_types IS NOT NULL THEN types := outbox._check_event_types(event_types); END IF;
    IF headers IS NOT NULL THEN hdrs := outbox._check_headers(headers); END IF;
    IF secret IS NOT NULL THEN the_secret := outbox._check_secret(secret); END IF;
    PERFORM outbox._check_endpoint_settings(timeout, max_attempts);
    PERFORM outbox._check_max_in_flight(nullif(max_in_flight, 0));
    -- (locked: a concurrent change of the other half cannot slip between)
    SELECT * INTO cur FROM outbox.endpoints e WHERE e.id = eid FOR UPDATE;
    PERFORM outbox._check_format(coalesce(alter_endpoint.format, cur.format),
                                 coalesce(hdrs, cur.headers));

    UPDATE outbox.endpoints e
       SET url = coalesce(the_url, e.url),
           event_types = coalesce(types, e.event_types),
           headers = coalesce(hdrs, e.headers),
           ordered = coalesce(alter_endpoint.ordered, e.ordered),
           timeout = coalesce(alter_endpoint.timeout, e.timeout),
           max_attempts = coalesce(alter_endpoint.max_attempts, e.max_attempts),
           max_in_flight = CASE WHEN alter_endpoint.max_in_flight IS NULL THEN e.max_in_flight
                                ELSE nullif(alter_endpoint.max_in_flight, 0) END,
           format = coalesce(alter_endpoint.format, e.format),
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
COMMENT ON FUNCTION outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text) IS
    'change an endpoint; NULL leaves a setting as it is';

REVOKE ALL ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text),
    outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text),
    outbox._check_format(text, jsonb) FROM PUBLIC;

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT o.name, a.grantee, a.is_grantable
          FROM pg_temp.outbox_acl_1_3 o
         CROSS JOIN LATERAL aclexplode(o.acl) a
         WHERE a.grantee <> o.owner AND a.privilege_type = 'EXECUTE'
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION outbox.%I(text, text, text[], text, jsonb, boolean, interval, integer, integer, text) TO %s%s',
                       g.name,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;
DROP TABLE pg_temp.outbox_acl_1_3;

-- endpoint_status as in 1.3, with the format at the end.
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
       coalesce(f.in_flight, 0) AS in_flight,
       ep.format
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
    'one row per endpoint: state and why, events waiting and the age of the oldest, in retry, dead, last success and failure, backlog given up, cap on and requests in flight now, format';

-- As in 1.3, with the format last.
DROP FUNCTION outbox._relay_endpoints();
CREATE FUNCTION outbox._relay_endpoints()
RETURNS TABLE (id integer, name text, url text, header_lines text, timeout_ms bigint,
               max_attempts integer, ordered boolean, active boolean, secret text,
               previous_secret text, event_types text[], follows boolean, max_in_flight integer,
               format text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
    SELECT e.id, e.name, e.url, array_to_string(outbox._header_lines(e.headers), E'\n'),
           outbox._timeout_ms(e.timeout), e.max_attempts, e.ordered,
           NOT e.paused AND e.disabled_at IS NULL, s.secret,
           CASE WHEN s.previous_expires_at > now() THEN s.previous_secret END,
           e.event_types, p.follows, e.max_in_flight, e.format
      FROM outbox.endpoints e
      JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
      JOIN outbox.positions p ON p.endpoint_id = e.id
     ORDER BY e.id
$$;
COMMENT ON FUNCTION outbox._relay_endpoints() IS 'internal: every endpoint as the relay loads it';

----------------------------------------------------------------------------
-- The readers return what a request is made of
----------------------------------------------------------------------------

-- Each reader returns, instead of 1.3's body, the event's type, its emit
-- time (created_at: the emitting transaction's start) and its payload as
-- JSON text; the relay builds the body of the endpoint's format from
-- them.  What else they do is as in 1.3.

DROP FUNCTION outbox._read_stream(integer, bigint);
CREATE FUNCTION outbox._read_stream(lim integer, max_bytes bigint)
RETURNS TABLE (id bigint, event_id uuid, event_type text, deliver_at timestamptz, key text,
               emitted_at timestamptz, data text, header_lines text[], batch text, bytes_cut boolean)
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
            SELECT e.id, e.event_id, e.event_type, e.deliver_at, e.key, e.created_at, e.payload::text,
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

DROP FUNCTION outbox._read_page(integer, integer, boolean, bigint);
CREATE FUNCTION outbox._read_page(eid integer, lim integer, verify boolean, max_bytes bigint)
RETURNS TABLE (id bigint, event_id uuid, event_type text, deliver_at timestamptz, key text,
               emitted_at timestamptz, data text, header_lines text[], batch text, blocked boolean,
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
            SELECT e.id, e.event_id, e.event_type, e.deliver_at, e.key, e.created_at, e.payload::text,
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
COMMENT ON FUNCTION outbox._read_page(integer, integer, boolean, bigint) IS
    'internal: the next page of events owed to an endpoint by its position, bounded in events and in bytes';

DROP FUNCTION outbox._read_due(integer, integer, boolean, bigint);
CREATE FUNCTION outbox._read_due(eid integer, lim integer, verify boolean, max_bytes bigint)
RETURNS TABLE (id bigint, event_id uuid, event_type text, attempts integer, key text,
               emitted_at timestamptz, data text, header_lines text[], delivered boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT x.id, x.event_id, x.event_type, x.attempts, x.key, x.created_at, x.payload::text,
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

-- The relay builds the Standard Webhooks body itself now (format.c).
DROP FUNCTION outbox._body(text, timestamptz, jsonb);

----------------------------------------------------------------------------
-- Privileges: PUBLIC gets nothing of what this script created.
----------------------------------------------------------------------------

REVOKE ALL ON FUNCTION outbox._relay_endpoints(), outbox._read_stream(integer, bigint),
    outbox._read_page(integer, integer, boolean, bigint),
    outbox._read_due(integer, integer, boolean, bigint) FROM PUBLIC;

-- Relays left databases still at 1.3: start them again once this commits.
SELECT outbox._launch();
