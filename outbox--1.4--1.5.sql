-- outbox 1.4 -> 1.5.
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.5'" to load this file. \quit

----------------------------------------------------------------------------
-- Grants across an update: this script and each one after it starts
-- with _grants_before() and ends with _grants_back().
----------------------------------------------------------------------------

-- An update script that drops an object and creates it again (a function
-- whose arguments change, a view whose columns do) would lose what an
-- administrator granted on it, and what a script grants is recorded as the
-- extension's initial privileges (pg_init_privs), which pg_dump leaves
-- out.  So each update script starts with _grants_before(), which keeps
-- the grants on every function and relation of the schema by name, and
-- ends with _grants_back(), which grants them again on what was created
-- anew and then sets the initial privileges back to what a fresh install
-- records (the owner's alone), so that pg_dump dumps every grant an
-- administrator made.  (Column grants on recreated tables are not kept.)
CREATE FUNCTION outbox._grants_before() RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    CREATE TEMP TABLE outbox_grants_before AS
    SELECT 'f'::"char" AS kind, p.oid, p.proname::text AS name, p.proacl AS acl, p.proowner AS owner
      FROM pg_proc p
     WHERE p.pronamespace = 'outbox'::regnamespace AND p.proacl IS NOT NULL
    UNION ALL
    SELECT c.relkind, c.oid, c.relname::text, c.relacl, c.relowner
      FROM pg_class c
     WHERE c.relnamespace = 'outbox'::regnamespace AND c.relacl IS NOT NULL
       AND c.relkind IN ('r', 'p', 'v', 'm', 'S');
$$;
COMMENT ON FUNCTION outbox._grants_before() IS
    'internal, for update scripts: keep the grants on the schema''s functions and relations by name';

CREATE FUNCTION outbox._grants_back() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g record;
BEGIN
    -- Grants on an object dropped and created again under the same name (a
    -- function whose name is now that of exactly one function).
    FOR g IN
        SELECT CASE WHEN b.kind = 'f' THEN 'FUNCTION ' || p.oid::regprocedure::text
                    WHEN b.kind = 'S' THEN 'SEQUENCE ' || c.oid::regclass::text
                    ELSE 'TABLE ' || c.oid::regclass::text END AS target,
               a.privilege_type, a.grantee, a.is_grantable
          FROM pg_temp.outbox_grants_before b
          LEFT JOIN pg_proc p
            ON b.kind = 'f' AND p.pronamespace = 'outbox'::regnamespace AND p.proname = b.name
           AND (SELECT count(*) FROM pg_proc q
                 WHERE q.pronamespace = 'outbox'::regnamespace AND q.proname = b.name) = 1
          LEFT JOIN pg_class c
            ON b.kind <> 'f' AND c.relnamespace = 'outbox'::regnamespace AND c.relname = b.name
         CROSS JOIN LATERAL aclexplode(b.acl) a
         WHERE coalesce(p.oid, c.oid) IS NOT NULL AND coalesce(p.oid, c.oid) <> b.oid
           AND a.grantee <> b.owner
    LOOP
        EXECUTE format('GRANT %s ON %s TO %s%s', g.privilege_type, g.target,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
    DROP TABLE pg_temp.outbox_grants_before;

    -- The initial privileges as a fresh install records them: its script
    -- revokes everything from PUBLIC and grants nothing, so each object's
    -- owner alone.  (Updates before 1.5 recorded the grants they gave back.)
    WITH owners AS (
        SELECT 'pg_proc'::regclass AS cls, p.oid, p.proowner AS owner
          FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace
        UNION ALL
        SELECT 'pg_class'::regclass, c.oid, c.relowner
          FROM pg_class c WHERE c.relnamespace = 'outbox'::regnamespace
        UNION ALL
        SELECT 'pg_type'::regclass, t.oid, t.typowner
          FROM pg_type t WHERE t.typnamespace = 'outbox'::regnamespace
        UNION ALL
        SELECT 'pg_namespace'::regclass, n.oid, n.nspowner
          FROM pg_namespace n WHERE n.nspname = 'outbox'
    ), given AS (
        SELECT ip.classoid, ip.objoid, ip.objsubid,
               ARRAY(SELECT i FROM unnest(ip.initprivs) i
                      WHERE NOT EXISTS (SELECT 1 FROM aclexplode(ARRAY[i]) x
                                         WHERE x.grantee <> o.owner)) AS owners_own
          FROM pg_init_privs ip
          JOIN owners o ON o.cls = ip.classoid AND o.oid = ip.objoid
         WHERE ip.privtype = 'e'
           AND EXISTS (SELECT 1 FROM aclexplode(ip.initprivs) x WHERE x.grantee <> o.owner)
    ), kept AS (
        UPDATE pg_init_privs ip SET initprivs = gv.owners_own
          FROM given gv
         WHERE ip.classoid = gv.classoid AND ip.objoid = gv.objoid AND ip.objsubid = gv.objsubid
           AND ip.privtype = 'e' AND cardinality(gv.owners_own) > 0
    )
    DELETE FROM pg_init_privs ip
     USING given gv
     WHERE ip.classoid = gv.classoid AND ip.objoid = gv.objoid AND ip.objsubid = gv.objsubid
       AND ip.privtype = 'e' AND cardinality(gv.owners_own) = 0;
END
$$;
COMMENT ON FUNCTION outbox._grants_back() IS
    'internal, for update scripts: grant again what _grants_before() kept on recreated objects; initial privileges as a fresh install records them';

SELECT outbox._grants_before();

-- The owed-by-position rule, written once: a position (its batch's
-- snapshot, the next batch's snapshot while that batch is read, the last id
-- of it sent) has not passed the event (txid, id) when the event's
-- transaction is outside the snapshot and, while a batch is being read,
-- the event is beyond what of the batch was sent or outside the batch.
-- Every reader of positions that asks what an endpoint still owes uses it
-- (_unread, rotation_holds, _slot_owed, _release_disabled, _rebase); the
-- readers of pages (_read_stream, _read_page) walk the same rule in the
-- index order they read by.  A body in standard SQL, so that the planner
-- inlines it and the txid bound stays an index condition.
CREATE FUNCTION outbox._not_passed(snap pg_snapshot, next_snap pg_snapshot, after_id bigint,
                                   txid xid8, id bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN txid OPERATOR(pg_catalog.>=) pg_catalog.pg_snapshot_xmin(snap)
       AND NOT pg_catalog.pg_visible_in_snapshot(txid, snap)
       AND (next_snap IS NULL OR id OPERATOR(pg_catalog.>) after_id
            OR NOT pg_catalog.pg_visible_in_snapshot(txid, next_snap));
COMMENT ON FUNCTION outbox._not_passed(pg_snapshot, pg_snapshot, bigint, xid8, bigint) IS
    'internal: whether a position has not passed an event yet (what it owes)';

-- The readers of positions that ask what an endpoint owes use it.
-- rotation_holds, _slot_owed and _release_disabled asked a coarser
-- question before (outside the batch's snapshot), which also counted the
-- events of the batch being read that the position had already passed.
CREATE OR REPLACE FUNCTION outbox._unread(eid integer)
RETURNS TABLE (n bigint, oldest timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*), min(e.created_at)
      FROM outbox._positions p
      JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
      JOIN outbox.events e
        ON outbox._not_passed(p.snap, p.next_snap, p.after_id, e.txid, e.id)
       AND pg_visible_in_snapshot(e.txid, pg_current_snapshot())
       AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))
     WHERE p.endpoint_id = eid
$$;

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
            ON outbox._not_passed(p.snap, p.next_snap, p.after_id, e.txid, e.id)
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

CREATE OR REPLACE FUNCTION outbox._slot_owed(s smallint) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
    SELECT EXISTS (SELECT 1 FROM outbox._positions p JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
                    WHERE EXISTS (SELECT 1 FROM outbox.events e
                                   WHERE e.slot = s
                                     AND outbox._not_passed(p.snap, p.next_snap, p.after_id, e.txid, e.id)
                                     AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))))
        OR EXISTS (SELECT 1 FROM outbox.retries r JOIN outbox.events e ON e.id = r.id
                    WHERE e.slot = s AND NOT EXISTS (SELECT 1 FROM outbox.delayed d WHERE d.id = r.id))
$$;

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
                         WHERE ev.slot = s
                           AND outbox._not_passed(p.snap, p.next_snap, p.after_id, ev.txid, ev.id)
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
        ON outbox._not_passed(p.snap, p.next_snap, p.after_id, e.txid, e.id)
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

-- Outcomes are one type on each side of the relay's contract: an enum
-- here, OutcomeKind in the relay, so that a misspelt outcome is an error.
CREATE TYPE outbox.outcome_kind AS ENUM ('delivered', 'retry', 'dead', 'deferred', 'already');
COMMENT ON TYPE outbox.outcome_kind IS 'internal: what is recorded of a delivery';
ALTER TYPE outbox.outcome ALTER ATTRIBUTE outcome TYPE outbox.outcome_kind;

REVOKE ALL ON FUNCTION outbox._not_passed(pg_snapshot, pg_snapshot, bigint, xid8, bigint),
    outbox._grants_before(), outbox._grants_back() FROM PUBLIC;

-- Endpoint URLs may name a Kafka cluster and topic (the Kafka target).
COMMENT ON FUNCTION outbox._check_url(text) IS 'internal: validate an endpoint URL (http, https or kafka), return it normalized';

-- (last: grants back on what this script created again)
SELECT outbox._grants_back();
