-- DROP EXTENSION removes everything it made; CREATE EXTENSION works again.

-- A user table and its data survive the round trip; outbox's do not.
CREATE TABLE keep_me (id int PRIMARY KEY);
INSERT INTO keep_me VALUES (1);

DROP EXTENSION outbox;
SELECT count(*) AS outbox_schema FROM pg_namespace WHERE nspname = 'outbox';
SELECT count(*) AS outbox_objects FROM pg_proc WHERE proname IN ('emit', 'mark_processed', 'capture');
SELECT count(*) AS keep_me_rows FROM keep_me;

-- Again, from scratch: empty tables, emit and mark_processed work.
CREATE EXTENSION outbox;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
SELECT (SELECT count(*) FROM outbox.events) AS events,
       (SELECT count(*) FROM outbox.dedupe) AS dedupe,
       (SELECT count(*) FROM outbox.endpoints) AS endpoints,
       (SELECT count(*) FROM outbox.inbox) AS inbox;
SELECT outbox.emit('again.emitted', '{"round": 2}', dedupe_key => 'dk-1') IS NOT NULL AS emitted;
SELECT outbox.mark_processed('c', 'm') AS first;
SELECT outbox.create_endpoint('ep', 'https://example.com/') ~ '^whsec_' AS created;
SELECT event_type, payload FROM outbox.events;

-- A trigger that uses outbox.capture() depends on the extension: a plain
-- DROP is refused, CASCADE drops the trigger and keeps the table.
CREATE TRIGGER keep_me_outbox AFTER INSERT ON keep_me
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('keep');
DROP EXTENSION outbox;
SELECT count(*) AS outbox_schema FROM pg_namespace WHERE nspname = 'outbox';
DROP EXTENSION outbox CASCADE;
SELECT count(*) AS outbox_schema FROM pg_namespace WHERE nspname = 'outbox';
SELECT count(*) AS triggers FROM pg_trigger WHERE tgrelid = 'keep_me'::regclass;
INSERT INTO keep_me VALUES (2);
SELECT id FROM keep_me ORDER BY id;

DROP TABLE keep_me;
DROP FUNCTION try(text);
