-- outbox 1.0: the SQL surface and the storage the relay reads.
--
-- Storage follows DESIGN.md: events are appended to a small set of tables
-- (partitions of outbox.events, one per rotation slot) and are never updated
-- or deleted one by one; each endpoint keeps its own position as a snapshot
-- boundary; only failures will get per-event rows.  Every object lives in
-- schema outbox, created here so that DROP EXTENSION removes all of it.

\echo Use "CREATE EXTENSION outbox" to load this file. \quit

CREATE SCHEMA outbox;
REVOKE ALL ON SCHEMA outbox FROM PUBLIC;
COMMENT ON SCHEMA outbox IS 'transactional outbox: events, endpoints, inbox and the views operators read';

----------------------------------------------------------------------------
-- Events
----------------------------------------------------------------------------

CREATE SEQUENCE outbox.event_seq AS bigint;
COMMENT ON SEQUENCE outbox.event_seq IS 'orders events within a batch; drawn after the emitting transaction has its id';

-- The rotation state: which slot emit() appends to.  One row, always.
CREATE TABLE outbox.queue (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    cur_slot    smallint NOT NULL DEFAULT 0 CHECK (cur_slot BETWEEN 0 AND 2),
    rotated_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO outbox.queue DEFAULT VALUES;
COMMENT ON TABLE outbox.queue IS 'rotation state: the events partition emit() currently appends to';

CREATE TABLE outbox.events (
    id          bigint      NOT NULL,
    slot        smallint    NOT NULL,
    event_id    uuid        NOT NULL,
    txid        xid8        NOT NULL,
    event_type  text        NOT NULL,
    payload     jsonb       NOT NULL,
    key         text,
    headers     jsonb,
    deliver_at  timestamptz,
    created_at  timestamptz NOT NULL
) PARTITION BY LIST (slot);
CREATE TABLE outbox.events_0 PARTITION OF outbox.events FOR VALUES IN (0);
CREATE TABLE outbox.events_1 PARTITION OF outbox.events FOR VALUES IN (1);
CREATE TABLE outbox.events_2 PARTITION OF outbox.events FOR VALUES IN (2);
CREATE INDEX events_id_idx ON outbox.events (id);
CREATE INDEX events_txid_idx ON outbox.events (txid);

COMMENT ON TABLE outbox.events IS 'emitted events, insert-only; partitions are emptied by rotation, never row by row';
COMMENT ON COLUMN outbox.events.id IS 'order of emission (within a batch, events are delivered in id order)';
COMMENT ON COLUMN outbox.events.slot IS 'rotation slot (partition) the event was appended to';
COMMENT ON COLUMN outbox.events.event_id IS 'the webhook-id receivers see; the same on every attempt';
COMMENT ON COLUMN outbox.events.txid IS 'pg_current_xact_id() of the emitting transaction: the relay reads by snapshot, not by id';
COMMENT ON COLUMN outbox.events.event_type IS 'dot-separated type, matched against endpoint event_types';
COMMENT ON COLUMN outbox.events.payload IS 'the "data" member of the delivered body';
COMMENT ON COLUMN outbox.events.key IS 'ordering key: on ordered endpoints, events of one key are delivered one after another';
COMMENT ON COLUMN outbox.events.headers IS 'extra HTTP headers sent with this event';
COMMENT ON COLUMN outbox.events.deliver_at IS 'not delivered before this time (NULL: at once)';
COMMENT ON COLUMN outbox.events.created_at IS 'emit time (transaction start); the "timestamp" member of the body';

-- Dedupe keys live beside the events: a unique index on a partitioned table
-- must contain the partition key, and emit() without a dedupe_key must pay
-- nothing for the feature.
CREATE TABLE outbox.dedupe (
    dedupe_key  text PRIMARY KEY,
    event_id    uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.dedupe IS 'dedupe keys given to emit(): a second emit of a key returns the first event id and writes nothing';

----------------------------------------------------------------------------
-- Endpoints
----------------------------------------------------------------------------

CREATE TABLE outbox.endpoints (
    id              integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text NOT NULL UNIQUE,
    url             text NOT NULL,
    event_types     text[] NOT NULL,
    headers         jsonb NOT NULL DEFAULT '{}',
    ordered         boolean NOT NULL DEFAULT false,
    timeout         interval NOT NULL DEFAULT '30 seconds',
    max_attempts    integer NOT NULL DEFAULT 8,
    paused          boolean NOT NULL DEFAULT false,
    disabled_at     timestamptz,
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.endpoints IS 'webhook endpoints and what they subscribe to; change through the endpoint functions';
COMMENT ON COLUMN outbox.endpoints.event_types IS 'patterns: exact type, "*", or a prefix ending in "*" (e.g. "booking.*")';
COMMENT ON COLUMN outbox.endpoints.ordered IS 'deliver events of one key one after another';
COMMENT ON COLUMN outbox.endpoints.paused IS 'set by pause_endpoint(); events wait';
COMMENT ON COLUMN outbox.endpoints.disabled_at IS 'set when the relay disabled the endpoint (see disabled_reason); events wait';

-- Delivery health, written by the relay once per recorded batch.  Apart
-- from outbox.endpoints so that an administrator's open transaction on an
-- endpoint never makes the relay wait.
CREATE TABLE outbox.endpoint_health (
    endpoint_id          integer PRIMARY KEY REFERENCES outbox.endpoints (id) ON DELETE CASCADE,
    last_success_at      timestamptz,
    last_failure_at      timestamptz,
    last_failure_status  integer,
    last_failure_error   text,
    consecutive_failures integer NOT NULL DEFAULT 0,
    failing_since        timestamptz
);
COMMENT ON TABLE outbox.endpoint_health IS 'per endpoint: last success and failure, consecutive failures; written by the relay';
COMMENT ON COLUMN outbox.endpoint_health.failing_since IS 'first failure since the last success; the relay disables the endpoint when it is older than outbox.disable_after';

-- Secrets are kept apart so that endpoints can be shown to a monitoring role
-- without them.
CREATE TABLE outbox.endpoint_secrets (
    endpoint_id         integer PRIMARY KEY REFERENCES outbox.endpoints (id) ON DELETE CASCADE,
    secret              text NOT NULL,
    previous_secret     text,
    previous_expires_at timestamptz
);
COMMENT ON TABLE outbox.endpoint_secrets IS 'signing secrets (whsec_...); readable only by the extension owner and superusers';

-- Each endpoint's position.  Every event whose transaction is visible in
-- snap has been dealt with for that endpoint.  While a batch is being worked
-- through, next_snap is its upper snapshot and after_id the last event id
-- of it dealt with: the batch is "visible in next_snap, not in snap", read
-- in pages by id.  It starts at the snapshot of the endpoint's creation, so
-- an endpoint receives what was emitted after it existed.
CREATE TABLE outbox.positions (
    endpoint_id integer PRIMARY KEY REFERENCES outbox.endpoints (id) ON DELETE CASCADE,
    snap        pg_snapshot NOT NULL,
    next_snap   pg_snapshot,
    after_id    bigint NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.positions IS 'per-endpoint read position: events of transactions visible in snap are done for that endpoint';

----------------------------------------------------------------------------
-- Delivery records: only failures get per-event rows
----------------------------------------------------------------------------

-- Append-only log of every HTTP attempt.
CREATE TABLE outbox.attempt_log (
    at          timestamptz NOT NULL DEFAULT now(),
    endpoint_id integer NOT NULL,
    id          bigint NOT NULL,
    event_id    uuid NOT NULL,
    attempt     integer NOT NULL,
    duration_ms real,
    status      integer,
    error       text,
    response    text
);
CREATE INDEX attempt_log_event_idx ON outbox.attempt_log (event_id);
COMMENT ON TABLE outbox.attempt_log IS 'every delivery attempt, appended by the relay; read it through outbox.attempts';

-- Events that failed (or wait for deliver_at) and are due again at next_at.
CREATE TABLE outbox.retries (
    endpoint_id integer NOT NULL REFERENCES outbox.endpoints (id) ON DELETE CASCADE,
    id          bigint NOT NULL,
    event_id    uuid NOT NULL,
    key         text,
    attempts    integer NOT NULL,
    next_at     timestamptz NOT NULL,
    last_status integer,
    last_error  text,
    queued_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint_id, id)
);
CREATE INDEX retries_due_idx ON outbox.retries (endpoint_id, next_at);
CREATE INDEX retries_key_idx ON outbox.retries (endpoint_id, key, id) WHERE key IS NOT NULL;
COMMENT ON TABLE outbox.retries IS 'events owed to an endpoint again at next_at: failed attempts, events with a later deliver_at, and on ordered endpoints events waiting behind an earlier one of their key';
COMMENT ON COLUMN outbox.retries.attempts IS 'attempts made so far (0: not sent yet)';
COMMENT ON COLUMN outbox.retries.queued_at IS 'when the event became owed here: its first failure, deferral, replay() or retry_dead()';

-- Events given up on for an endpoint.  The event itself is copied so that a
-- dead letter outlives the rotation of its events partition.
CREATE TABLE outbox.dead_letter_log (
    endpoint_id integer NOT NULL REFERENCES outbox.endpoints (id) ON DELETE CASCADE,
    id          bigint NOT NULL,
    event_id    uuid NOT NULL,
    event_type  text NOT NULL,
    payload     jsonb NOT NULL,
    key         text,
    headers     jsonb,
    created_at  timestamptz NOT NULL,
    attempts    integer NOT NULL,
    last_status integer,
    last_error  text,
    dead_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint_id, id)
);
COMMENT ON TABLE outbox.dead_letter_log IS 'events given up on for an endpoint, with a copy of the event; read it through outbox.dead_letters';

----------------------------------------------------------------------------
-- Inbox
----------------------------------------------------------------------------

CREATE TABLE outbox.inbox (
    consumer     text NOT NULL,
    message_id   text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
COMMENT ON TABLE outbox.inbox IS 'messages a consumer has processed, recorded by mark_processed()';

SELECT pg_catalog.pg_extension_config_dump('outbox.queue', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.events', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.events_0', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.events_1', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.events_2', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.event_seq', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.dedupe', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoints', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoints_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_secrets', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_health', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.positions', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.retries', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.dead_letter_log', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.attempt_log', '');

----------------------------------------------------------------------------
-- Emit (C)
----------------------------------------------------------------------------

CREATE FUNCTION outbox.emit(
    event_type text,
    payload    jsonb,
    key        text DEFAULT NULL,
    headers    jsonb DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL,
    dedupe_key text DEFAULT NULL)
RETURNS uuid
LANGUAGE c VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'emit';
COMMENT ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text) IS
    'write one event in the calling transaction; returns its id (the webhook-id receivers see)';

-- The capture trigger turns row changes into events: prefix.inserted,
-- prefix.updated (payload {"old": ..., "new": ...}) and prefix.deleted, keyed
-- by the primary key or by the column named in the second argument.
-- Not SECURITY DEFINER: to_jsonb() of a row can run functions of the
-- table owner's choosing (casts of its column types), which must not run
-- with the extension owner's rights.  The writing role needs EXECUTE on
-- outbox.emit(), which does run as the owner.
CREATE FUNCTION outbox.capture()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    prefix   text;
    keycols  text[];
    rec      jsonb;
    payload  jsonb;
    suffix   text;
    keyval   text;
BEGIN
    IF TG_LEVEL <> 'ROW' OR TG_WHEN <> 'AFTER' THEN
        RAISE EXCEPTION 'outbox.capture() must be an AFTER ... FOR EACH ROW trigger'
            USING ERRCODE = '39P01';
    END IF;
    IF TG_NARGS < 1 OR TG_NARGS > 2 THEN
        RAISE EXCEPTION 'outbox.capture() takes one or two arguments'
            USING ERRCODE = '22023',
                  DETAIL = 'The first names the event type prefix, the optional second the key column.';
    END IF;
    prefix := TG_ARGV[0];

    IF TG_OP = 'INSERT' THEN
        rec := to_jsonb(NEW);
        payload := rec;
        suffix := 'inserted';
    ELSIF TG_OP = 'UPDATE' THEN
        rec := to_jsonb(NEW);
        payload := jsonb_build_object('old', to_jsonb(OLD), 'new', rec);
        suffix := 'updated';
    ELSE
        rec := to_jsonb(OLD);
        payload := rec;
        suffix := 'deleted';
    END IF;

    IF TG_NARGS = 2 THEN
        keycols := ARRAY[TG_ARGV[1]];
        IF NOT rec ? TG_ARGV[1] THEN
            RAISE EXCEPTION 'column "%" does not exist in table %', TG_ARGV[1], TG_RELID::regclass
                USING ERRCODE = '42703';
        END IF;
    ELSE
        SELECT array_agg(a.attname::text ORDER BY k.ord)
          INTO keycols
          FROM pg_index i
          CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
         WHERE i.indrelid = TG_RELID AND i.indisprimary;
    END IF;

    IF keycols IS NULL THEN
        keyval := NULL;
    ELSIF cardinality(keycols) = 1 THEN
        keyval := rec ->> keycols[1];
    ELSE
        SELECT string_agg(coalesce(rec ->> c, ''), ',' ORDER BY o)
          INTO keyval
          FROM unnest(keycols) WITH ORDINALITY AS u(c, o);
    END IF;

    PERFORM outbox.emit(prefix || '.' || suffix, payload, keyval);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox.capture() IS
    'AFTER INSERT OR UPDATE OR DELETE FOR EACH ROW trigger: emits <prefix>.inserted|updated|deleted keyed by the primary key (or the column named by the second argument)';

----------------------------------------------------------------------------
-- Input checks shared by the SQL functions (C; not granted to anyone)
----------------------------------------------------------------------------

CREATE FUNCTION outbox._check_url(url text) RETURNS text
LANGUAGE c STRICT IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_url';
COMMENT ON FUNCTION outbox._check_url(text) IS 'internal: validate an endpoint URL (http or https), return it normalized';

CREATE FUNCTION outbox._check_event_types(patterns text[]) RETURNS text[]
LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_event_types';
COMMENT ON FUNCTION outbox._check_event_types(text[]) IS 'internal: validate endpoint event-type patterns';

CREATE FUNCTION outbox._check_headers(headers jsonb) RETURNS jsonb
LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_headers';
COMMENT ON FUNCTION outbox._check_headers(jsonb) IS 'internal: validate a flat object of HTTP header names and string values';

CREATE FUNCTION outbox._check_secret(secret text) RETURNS text
LANGUAGE c STRICT IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_secret';
COMMENT ON FUNCTION outbox._check_secret(text) IS 'internal: validate a whsec_ signing secret';

CREATE FUNCTION outbox._new_secret() RETURNS text
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_new_secret';
COMMENT ON FUNCTION outbox._new_secret() IS 'internal: a new whsec_ secret of 32 random bytes';

-- Refuse bad endpoint settings with one message per field.  NULL means "not
-- given" here; callers decide whether that is allowed.
CREATE FUNCTION outbox._check_endpoint_settings(
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
    IF max_attempts IS NOT NULL AND (max_attempts < 1 OR max_attempts > 100) THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 100'
            USING ERRCODE = '22023', DETAIL = format('The value given was %s.', max_attempts);
    END IF;
END
$$;
COMMENT ON FUNCTION outbox._check_endpoint_settings(interval, integer) IS 'internal: validate endpoint timeout and max_attempts';

CREATE FUNCTION outbox._endpoint_id(name text) RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT e.id INTO eid FROM outbox.endpoints e WHERE e.name = _endpoint_id.name;
    IF eid IS NULL THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', name USING ERRCODE = '42704';
    END IF;
    RETURN eid;
END
$$;
COMMENT ON FUNCTION outbox._endpoint_id(text) IS 'internal: an endpoint''s id by name, or error 42704';

-- The snapshot an endpoint starts from: the current one, with the calling
-- transaction itself counted as not yet committed, so that events this
-- transaction emits after creating (or resuming from) it are delivered.
CREATE FUNCTION outbox._start_snapshot() RETURNS pg_snapshot
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    -- Under REPEATABLE READ the snapshot may predate this transaction's id,
    -- which then lies at or past xmax and is invisible already.
    WITH s AS (SELECT pg_current_snapshot() AS snap, pg_current_xact_id() AS me)
    SELECT CASE WHEN me >= pg_snapshot_xmax(snap) THEN snap
           ELSE format('%s:%s:%s',
                       least(pg_snapshot_xmin(snap), me),
                       pg_snapshot_xmax(snap),
                       (SELECT string_agg(x::text, ',' ORDER BY x::text::numeric)
                          FROM (SELECT pg_snapshot_xip(snap) AS x UNION SELECT me) u))::pg_snapshot
           END
      FROM s
$$;
COMMENT ON FUNCTION outbox._start_snapshot() IS 'internal: current snapshot with the calling transaction counted as in progress';

----------------------------------------------------------------------------
-- Endpoint administration
----------------------------------------------------------------------------

CREATE FUNCTION outbox._wake_at_commit() RETURNS void
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_wake_at_commit';
COMMENT ON FUNCTION outbox._wake_at_commit() IS 'internal: at commit, make the relay reread endpoints and look for work';


CREATE FUNCTION outbox.create_endpoint(
    name         text,
    url          text,
    event_types  text[]   DEFAULT '{*}',
    secret       text     DEFAULT NULL,
    headers      jsonb    DEFAULT '{}',
    ordered      boolean  DEFAULT false,
    timeout      interval DEFAULT '30 seconds',
    max_attempts integer  DEFAULT 8)
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
    the_secret := CASE WHEN secret IS NULL THEN outbox._new_secret()
                       ELSE outbox._check_secret(secret) END;

    IF EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.name = create_endpoint.name) THEN
        RAISE EXCEPTION 'endpoint "%" already exists', name USING ERRCODE = '42710';
    END IF;

    INSERT INTO outbox.endpoints (name, url, event_types, headers, ordered, timeout, max_attempts)
    VALUES (name, the_url, types, hdrs, ordered, timeout, max_attempts)
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
COMMENT ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer) IS
    'create a webhook endpoint that receives events emitted from now on; returns its signing secret';

CREATE FUNCTION outbox.alter_endpoint(
    name         text,
    url          text     DEFAULT NULL,
    event_types  text[]   DEFAULT NULL,
    secret       text     DEFAULT NULL,
    headers      jsonb    DEFAULT NULL,
    ordered      boolean  DEFAULT NULL,
    timeout      interval DEFAULT NULL,
    max_attempts integer  DEFAULT NULL)
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

    UPDATE outbox.endpoints e
       SET url = coalesce(the_url, e.url),
           event_types = coalesce(types, e.event_types),
           headers = coalesce(hdrs, e.headers),
           ordered = coalesce(alter_endpoint.ordered, e.ordered),
           timeout = coalesce(alter_endpoint.timeout, e.timeout),
           max_attempts = coalesce(alter_endpoint.max_attempts, e.max_attempts),
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
COMMENT ON FUNCTION outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer) IS
    'change an endpoint; NULL leaves a setting as it is';

CREATE FUNCTION outbox.drop_endpoint(name text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(drop_endpoint.name);
BEGIN
    DELETE FROM outbox.endpoints WHERE id = eid;
    PERFORM outbox._wake_at_commit();
END
$$;
COMMENT ON FUNCTION outbox.drop_endpoint(text) IS 'remove an endpoint with its secret and position; its undelivered events are not sent';

CREATE FUNCTION outbox.pause_endpoint(name text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(pause_endpoint.name);
BEGIN
    UPDATE outbox.endpoints SET paused = true, updated_at = now()
     WHERE id = eid;
    PERFORM outbox._wake_at_commit();
END
$$;
COMMENT ON FUNCTION outbox.pause_endpoint(text) IS 'stop delivering to an endpoint; its events wait until resume_endpoint()';

CREATE FUNCTION outbox.resume_endpoint(name text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(resume_endpoint.name);
BEGIN
    -- A disabled endpoint's failed events are due at once, not after the
    -- rest of their backoff.
    UPDATE outbox.retries r SET next_at = now()
     WHERE r.endpoint_id = eid AND r.attempts > 0 AND r.next_at > now()
       AND EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.id = eid AND e.disabled_at IS NOT NULL);
    UPDATE outbox.endpoints
       SET paused = false, disabled_at = NULL, disabled_reason = NULL, updated_at = now()
     WHERE id = eid;
    -- A resumed endpoint gets a fresh outbox.disable_after window.
    UPDATE outbox.endpoint_health SET failing_since = NULL WHERE endpoint_id = eid;
    PERFORM outbox._wake_at_commit();
END
$$;
COMMENT ON FUNCTION outbox.resume_endpoint(text) IS 'deliver to a paused or disabled endpoint again, starting with the events that waited (a disabled endpoint''s retries become due at once)';

CREATE FUNCTION outbox.endpoint_secret(name text) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.secret FROM outbox.endpoint_secrets s WHERE s.endpoint_id = outbox._endpoint_id(name)
$$;
COMMENT ON FUNCTION outbox.endpoint_secret(text) IS 'the signing secret of an endpoint';

----------------------------------------------------------------------------
-- Inbox
----------------------------------------------------------------------------

CREATE FUNCTION outbox.mark_processed(consumer text, message_id text) RETURNS boolean
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
    -- A concurrent insert of the same pair makes this wait for that
    -- transaction: if it commits, nothing is inserted here and FOUND is false.
    INSERT INTO outbox.inbox (consumer, message_id) VALUES (consumer, message_id)
    ON CONFLICT DO NOTHING;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION outbox.mark_processed(text, text) IS
    'record that consumer processed message_id, in the calling transaction; true the first time, false for a duplicate';

CREATE FUNCTION outbox.mark_processed(consumer text, message_id uuid) RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT outbox.mark_processed(consumer, message_id::text)
$$;
COMMENT ON FUNCTION outbox.mark_processed(text, uuid) IS 'mark_processed() for a uuid message id (an outbox webhook-id)';

----------------------------------------------------------------------------
-- Signatures (for receivers that are PostgreSQL databases)
----------------------------------------------------------------------------

CREATE FUNCTION outbox.verify_signature(
    secret     text,
    message_id text,
    "timestamp" bigint,
    body       text,
    signature  text,
    tolerance  interval DEFAULT '5 minutes')
RETURNS boolean
LANGUAGE c STRICT STABLE
AS 'MODULE_PATHNAME', 'verify_signature';
COMMENT ON FUNCTION outbox.verify_signature(text, text, bigint, text, text, interval) IS
    'check a Standard Webhooks request: true when a v1 signature in the webhook-signature header matches and the timestamp is within tolerance of now';

CREATE FUNCTION outbox.rotate_secret(name text, new_secret text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(name);
    the_secret text := CASE WHEN new_secret IS NULL THEN outbox._new_secret()
                            ELSE outbox._check_secret(new_secret) END;
BEGIN
    UPDATE outbox.endpoint_secrets
       SET previous_secret = secret,
           previous_expires_at = now() + outbox._setting_interval('outbox.secret_overlap', '24 hours'),
           secret = the_secret
     WHERE endpoint_id = eid;
    PERFORM outbox._wake_at_commit();
    RETURN the_secret;
END
$$;
COMMENT ON FUNCTION outbox.rotate_secret(text, text) IS
    'give an endpoint a new signing secret; requests carry signatures by both the new and the previous one for outbox.secret_overlap';

CREATE FUNCTION outbox.retry_dead(endpoint text DEFAULT NULL) RETURNS bigint
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
           AND EXISTS (SELECT 1 FROM outbox.events e WHERE e.id = d.id)
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
COMMENT ON FUNCTION outbox.retry_dead(text) IS
    'deliver dead letters again (of one endpoint, or of all when NULL), with a fresh count of attempts; returns how many';

CREATE FUNCTION outbox.replay(endpoint text, since timestamptz, until timestamptz DEFAULT now()) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(endpoint);
    pats text[];
    n bigint;
BEGIN
    IF since IS NULL OR until IS NULL THEN
        RAISE EXCEPTION 'since and until must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF since > until THEN
        RAISE EXCEPTION 'since must not be later than until' USING ERRCODE = '22023';
    END IF;
    SELECT outbox._like_patterns(ep.event_types) INTO pats FROM outbox.endpoints ep WHERE ep.id = eid;
    INSERT INTO outbox.retries (endpoint_id, id, event_id, key, attempts, next_at)
    SELECT eid, e.id, e.event_id, e.key, 0, now()
      FROM outbox.events e
     WHERE e.created_at >= since AND e.created_at < until
       AND e.event_type LIKE ANY (pats)
    ON CONFLICT (endpoint_id, id) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM outbox._wake_at_commit();
    RETURN n;
END
$$;
COMMENT ON FUNCTION outbox.replay(text, timestamptz, timestamptz) IS
    'deliver again the retained events emitted in [since, until) that the endpoint subscribes to; returns how many';

----------------------------------------------------------------------------
-- What operators see
----------------------------------------------------------------------------

-- Events an endpoint is owed that its position has not passed yet.
CREATE FUNCTION outbox._unread(eid integer)
RETURNS TABLE (n bigint, oldest timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*), min(e.created_at)
      FROM outbox.positions p
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
COMMENT ON FUNCTION outbox._unread(integer) IS 'internal: count and oldest of the events an endpoint''s position has not passed';

CREATE VIEW outbox.endpoint_status AS
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
       ep.ordered
  FROM outbox.endpoints ep
  JOIN outbox.endpoint_health h ON h.endpoint_id = ep.id
  CROSS JOIN LATERAL outbox._unread(ep.id) u
  LEFT JOIN LATERAL (
        SELECT count(*) AS n, count(*) FILTER (WHERE rr.attempts > 0) AS failed,
               min(e.created_at) AS oldest
          FROM outbox.retries rr JOIN outbox.events e ON e.id = rr.id
         WHERE rr.endpoint_id = ep.id) r ON true;
COMMENT ON VIEW outbox.endpoint_status IS
    'one row per endpoint: state and why, events waiting and the age of the oldest, in retry, dead, last success and failure';

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
    'every delivery attempt: event, endpoint, attempt number, time, duration, status, error and the first bytes of the response';

CREATE VIEW outbox.dead_letters AS
SELECT d.event_id, ep.name AS endpoint, d.event_type, d.key, d.attempts, d.last_status,
       d.last_error, d.dead_at, d.created_at AS emitted_at, d.payload
  FROM outbox.dead_letter_log d
  JOIN outbox.endpoints ep ON ep.id = d.endpoint_id;
COMMENT ON VIEW outbox.dead_letters IS 'events given up on per endpoint; outbox.retry_dead() sends them again';

CREATE FUNCTION outbox._relay_stats(
    OUT pid integer, OUT database text, OUT started_at timestamptz,
    OUT batches bigint, OUT deliveries bigint, OUT failures bigint, OUT retries bigint,
    OUT bytes_sent bigint, OUT http_seconds double precision, OUT sql_seconds double precision)
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_relay_stats';
COMMENT ON FUNCTION outbox._relay_stats() IS 'internal: the relay''s shared-memory counters';

CREATE VIEW outbox.relay_stats AS SELECT * FROM outbox._relay_stats();
COMMENT ON VIEW outbox.relay_stats IS
    'the running relay (pid NULL when none) and what it did since it started: batches recorded, deliveries, failures, retries, request bytes sent, seconds waiting with requests in flight and seconds in SQL';

CREATE FUNCTION outbox.health()
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
                ELSE 'no relay serves this database: is outbox in shared_preload_libraries and outbox.database set to it?' END
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
$$;
COMMENT ON FUNCTION outbox.health() IS 'one row per check (relay running, oldest undelivered, dead letters, endpoints disabled) with ok or warning';

----------------------------------------------------------------------------
-- Relay internals: what the background worker reads and records.  Each is
-- one statement from the worker's point of view; none is granted to anyone.
----------------------------------------------------------------------------

-- A duration GUC (such as "5d" or "30s") as an interval; the default when
-- the library is not loaded in this session.
CREATE FUNCTION outbox._setting_interval(name text, fallback interval) RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(nullif(current_setting(name, true), '')::interval, fallback)
$$;
COMMENT ON FUNCTION outbox._setting_interval(text, interval) IS 'internal: a duration setting as an interval';

-- Endpoint event-type patterns as LIKE patterns ("_" is literal in types).
CREATE FUNCTION outbox._like_patterns(patterns text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT array_agg(CASE WHEN p LIKE '%*' THEN replace(left(p, -1), '_', '\_') || '%'
                          ELSE replace(p, '_', '\_') END)
      FROM unnest(patterns) AS p
$$;
COMMENT ON FUNCTION outbox._like_patterns(text[]) IS 'internal: event-type patterns as LIKE patterns';

-- The request body: {"type": ..., "timestamp": RFC 3339, "data": payload}.
-- No SET clause, so that it is inlined into the page query (called per
-- event); its callers pin search_path.
CREATE FUNCTION outbox._body(event_type text, created_at timestamptz, payload jsonb) RETURNS text
LANGUAGE sql STABLE STRICT
AS $$
    SELECT '{"type":' OPERATOR(pg_catalog.||) pg_catalog.to_json(event_type)::text
        OPERATOR(pg_catalog.||) ',"timestamp":"'
        OPERATOR(pg_catalog.||) pg_catalog.to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
        OPERATOR(pg_catalog.||) '","data":' OPERATOR(pg_catalog.||) payload::text OPERATOR(pg_catalog.||) '}'
$$;
COMMENT ON FUNCTION outbox._body(text, timestamptz, jsonb) IS 'internal: the Standard Webhooks request body of an event';

CREATE FUNCTION outbox._header_lines(headers jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(k || ': ' || v), '{}') FROM jsonb_each_text(coalesce(headers, '{}')) AS h(k, v)
$$;
COMMENT ON FUNCTION outbox._header_lines(jsonb) IS 'internal: a header object as "name: value" lines';

-- Has this endpoint answered this event with a 2xx since a given time?
CREATE FUNCTION outbox._delivered(eid integer, evid uuid, since timestamptz) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.attempt_log a
                    WHERE a.event_id = evid AND a.endpoint_id = eid AND a.at >= since
                      AND a.status BETWEEN 200 AND 299)
$$;
COMMENT ON FUNCTION outbox._delivered(integer, uuid, timestamptz) IS 'internal: whether an endpoint has answered an event with a 2xx since a time';

-- The next page of events owed to an endpoint by its position, in id order.
-- Starts a new batch (visible now, not in the position's snapshot) when
-- none is open.  Writes only the position's batch bounds; the relay
-- advances after_id when it records the page.
CREATE FUNCTION outbox._read_page(eid integer, lim integer, verify boolean)
RETURNS TABLE (id bigint, event_id uuid, deliver_at timestamptz, key text,
               body text, header_lines text[], batch text, blocked boolean,
               delivered boolean)
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
                   verify AND outbox._delivered(eid, e.event_id, '-infinity')
              FROM outbox.events e
             -- Walk the id index from after_id and stop after lim rows: no
             -- txid range here, which would tempt the planner into reading
             -- the whole rest of the batch (DESIGN: paging a batch).
             WHERE e.id > pos.after_id
               AND pg_visible_in_snapshot(e.txid, pos.next_snap)
               AND NOT pg_visible_in_snapshot(e.txid, pos.snap)
               AND (match_all OR e.event_type LIKE ANY (pats))
             ORDER BY e.id
             LIMIT lim;
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
COMMENT ON FUNCTION outbox._read_page(integer, integer, boolean) IS 'internal: the next page of events owed to an endpoint by its position';

-- Events of an endpoint whose retry (or deliver_at) is due.
CREATE FUNCTION outbox._read_due(eid integer, lim integer, verify boolean)
RETURNS TABLE (id bigint, event_id uuid, attempts integer, key text, body text, header_lines text[],
               delivered boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT e.id, e.event_id, r.attempts, e.key,
           outbox._body(e.event_type, e.created_at, e.payload),
           CASE WHEN e.headers IS NULL THEN '{}' ELSE outbox._header_lines(e.headers) END,
           -- only a 2xx since it was queued: replay() re-sends on purpose
           verify AND outbox._delivered(eid, e.event_id, r.queued_at)
      FROM outbox.retries r
      JOIN outbox.endpoints ep ON ep.id = r.endpoint_id
      JOIN outbox.events e ON e.id = r.id
     WHERE r.endpoint_id = eid AND r.next_at <= now()
       -- ordered: only the oldest owed event of a key is sent
       AND NOT (ep.ordered AND r.key IS NOT NULL
                AND EXISTS (SELECT 1 FROM outbox.retries r2
                             WHERE r2.endpoint_id = r.endpoint_id AND r2.key = r.key AND r2.id < r.id))
     ORDER BY r.next_at, r.id
     LIMIT lim
$$;
COMMENT ON FUNCTION outbox._read_due(integer, integer, boolean) IS 'internal: events whose retry or deliver_at has come, for one endpoint';

-- Record the outcomes of one page (or one set of due retries) of an
-- endpoint in one statement: the attempt log, retries, dead letters, and
-- for a page the endpoint's position.  outcome is 'delivered', 'retry',
-- 'dead', 'deferred' (not sent: its deliver_at is later, or it waits behind
-- its key) or 'already' (answered with a 2xx before a restart; not sent).
-- batch is NULL while a page is still partly in flight: its finished
-- deliveries are recorded early, and the position moves once it is done.
CREATE FUNCTION outbox._record(
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

    INSERT INTO outbox.attempt_log (endpoint_id, id, event_id, attempt, duration_ms, status, error, response)
    SELECT eid, o.id, o.event_id, o.attempt, o.duration_ms, o.status, o.error, o.response
      FROM unnest(ids, event_ids, attempts, outcomes, next_ats, statuses, errors, durations, responses)
                AS o(id, event_id, attempt, outcome, next_at, status, error, duration_ms, response)
     WHERE o.outcome NOT IN ('deferred', 'already');

    INSERT INTO outbox.retries AS r (endpoint_id, id, event_id, key, attempts, next_at, last_status, last_error)
    SELECT eid, o.id, o.event_id, e.key, o.attempt, o.next_at, o.status, o.error
      FROM unnest(ids, event_ids, attempts, outcomes, next_ats, statuses, errors, durations, responses)
                AS o(id, event_id, attempt, outcome, next_at, status, error, duration_ms, response)
      JOIN outbox.events e ON e.id = o.id
     WHERE o.outcome IN ('retry', 'deferred')
    ON CONFLICT (endpoint_id, id) DO UPDATE
       SET attempts = EXCLUDED.attempts, next_at = EXCLUDED.next_at,
           last_status = EXCLUDED.last_status, last_error = EXCLUDED.last_error;

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
COMMENT ON FUNCTION outbox._record(integer, text, bigint, boolean, bigint[], uuid[], integer[], text[], timestamptz[], integer[], text[], real[], text[], text) IS
    'internal: record the outcomes of one page of deliveries to an endpoint';

----------------------------------------------------------------------------
-- Privileges: PUBLIC gets nothing.  README tells an administrator what to
-- grant to an application role (emit, mark_processed) and to operators.
----------------------------------------------------------------------------

REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA outbox FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
