-- outbox 1.5 -> 1.6.
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.6'" to load this file. \quit

-- Nothing an administrator may have granted on is dropped or made again
-- here, so the grants stay where they are and no initial privilege is
-- touched.

-- emit() appends the event without asking for rights on the tables
-- (src/functions/append.c): it no longer needs the owner's rights, and a
-- call no longer pays a change of user and search_path.  EXECUTE on it
-- stays the right to emit.
ALTER FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text, timestamptz, integer)
    SECURITY INVOKER RESET search_path;

-- Many events of one type in one call.
CREATE FUNCTION outbox.emit_many(
    event_type text,
    payloads   jsonb[],
    keys       text[] DEFAULT NULL,
    headers    jsonb DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL,
    expires_at timestamptz DEFAULT NULL,
    priority   integer DEFAULT 0)
RETURNS uuid[]
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'emit_many';
COMMENT ON FUNCTION outbox.emit_many(text, jsonb[], text[], jsonb, timestamptz, timestamptz, integer) IS
    'write one event of the type per payload in the calling transaction, keys[i] with payloads[i]; returns their ids in that order';
REVOKE ALL ON FUNCTION outbox.emit_many(text, jsonb[], text[], jsonb, timestamptz, timestamptz, integer) FROM PUBLIC;

-- The capture trigger in C (src/functions/capture.c): the same events,
-- keys and errors as the PL/pgSQL function it replaces, without a catalog
-- query and a call of emit() per row.  Still with the writing role's
-- rights, which must include USAGE on the schema and EXECUTE on emit().
CREATE OR REPLACE FUNCTION outbox.capture()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'capture';

-- No update script writes the catalogs by hand any more: from 1.6 on they
-- change objects in place and drop none that may carry an administrator's
-- grants, so 1.5's helpers that granted again what a script recreated and
-- set pg_init_privs back by hand (which managed services refuse) go.
DROP FUNCTION outbox._grants_before();
DROP FUNCTION outbox._grants_back();
