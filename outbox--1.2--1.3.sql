-- outbox 1.2 -> 1.3.
--
-- A fresh CREATE EXTENSION outbox runs outbox--1.0.sql, outbox--1.0--1.1.sql,
-- outbox--1.1--1.2.sql and then this script, so an installed 1.3 and an
-- updated 1.2 are the same by construction.

\echo Use "ALTER EXTENSION outbox UPDATE TO '1.3'" to load this file. \quit

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

-- Relays left databases still at 1.2: start them again once this commits.
SELECT outbox._launch();
