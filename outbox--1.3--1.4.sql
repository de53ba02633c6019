-- outbox 1.3 -> 1.4
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.4'" to load this file. \quit

-- _record locks only the rows it writes: the health rows it updates and
-- the endpoints it may disable.  In 1.3 it locked the endpoint row and the
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
           failing_since = CASE WHEN s.last_ok IS NOT NULL AND coalesce(s.last_fail < s.last_ok, true) THEN NULL
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
    RETURN locked;
END
$$;
COMMENT ON FUNCTION outbox._record(outbox.outcome[], outbox.page_done[], integer[]) IS
    'internal: record finished deliveries of any endpoints in one statement, move the positions of the pages they complete, detach endpoints from the stream';
