-- outbox.capture(): row changes become events.

-- Single-column primary key.
CREATE TABLE booking (id int PRIMARY KEY, guest text, nights int);
CREATE TRIGGER booking_outbox AFTER INSERT OR UPDATE OR DELETE ON booking
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('booking');

SELECT max(id) AS last_event FROM outbox.events \gset
INSERT INTO booking VALUES (42, 'Ada', 2), (43, 'Grace', 1);
UPDATE booking SET nights = 3 WHERE id = 42;
DELETE FROM booking WHERE id = 43;
-- An UPDATE that changes nothing still fires a row trigger.
UPDATE booking SET guest = guest WHERE id = 42;
SELECT event_type, key, payload, headers, deliver_at
  FROM outbox.events WHERE id > :last_event ORDER BY id;

-- The events of one statement belong to its transaction.
BEGIN;
INSERT INTO booking VALUES (44, 'Edsger', 5);
SELECT event_type, key, txid = pg_current_xact_id() AS txid_is_mine
  FROM outbox.events WHERE key = '44';
COMMIT;

-- Rollback leaves nothing: neither the row nor its event.
SELECT count(*) AS events_before FROM outbox.events \gset
BEGIN;
INSERT INTO booking VALUES (45, 'Barbara', 1);
UPDATE booking SET nights = 9;
DELETE FROM booking;
ROLLBACK;
SELECT count(*) = :events_before AS events_unchanged FROM outbox.events;
SELECT id, guest, nights FROM booking ORDER BY id;

-- Composite primary key: the key is the key columns in index order, joined
-- with ",".
CREATE TABLE stay (room text, night date, hotel int, guest text,
                   PRIMARY KEY (hotel, room, night));
CREATE TRIGGER stay_outbox AFTER INSERT OR UPDATE OR DELETE ON stay
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('hotel.stay');
SELECT max(id) AS last_event FROM outbox.events \gset
INSERT INTO stay VALUES ('101', '2030-01-01', 7, 'Ada');
UPDATE stay SET room = '102';
DELETE FROM stay;
SELECT event_type, key, payload FROM outbox.events WHERE id > :last_event ORDER BY id;

-- A key column named in the second argument wins over the primary key.
CREATE TABLE account (id int PRIMARY KEY, email text, plan text);
CREATE TRIGGER account_outbox AFTER INSERT OR UPDATE ON account
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('account', 'email');
SELECT max(id) AS last_event FROM outbox.events \gset
INSERT INTO account VALUES (1, 'ada@example.com', 'free');
UPDATE account SET plan = 'pro';
-- A NULL in the key column gives a NULL key.
INSERT INTO account VALUES (2, NULL, 'free');
SELECT event_type, key, payload FROM outbox.events WHERE id > :last_event ORDER BY id;

-- No primary key: the key is NULL.
CREATE TABLE audit (msg text);
CREATE TRIGGER audit_outbox AFTER INSERT ON audit
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('audit');
SELECT max(id) AS last_event FROM outbox.events \gset
INSERT INTO audit VALUES ('hello');
SELECT event_type, key, payload FROM outbox.events WHERE id > :last_event ORDER BY id;

-- A deferrable primary key is the key too, and a primary key's INCLUDE
-- columns are part of it, as they were before capture() was written in C.
CREATE TABLE later (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text);
CREATE TABLE covered (id int, v text, PRIMARY KEY (id) INCLUDE (v));
CREATE TRIGGER later_outbox AFTER INSERT ON later
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('later');
CREATE TRIGGER covered_outbox AFTER INSERT ON covered
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('covered');
SELECT max(id) AS last_event FROM outbox.events \gset
INSERT INTO later VALUES (1, 'x');
INSERT INTO covered VALUES (1, 'x');
SELECT event_type, key, payload FROM outbox.events WHERE id > :last_event ORDER BY id;
DROP TABLE later, covered;

-- Column types come through as JSON.
CREATE TABLE typed (id bigint PRIMARY KEY, b boolean, n numeric, j jsonb, a int[], t timestamptz, nul text);
CREATE TRIGGER typed_outbox AFTER INSERT ON typed
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('typed');
SELECT max(id) AS last_event FROM outbox.events \gset
INSERT INTO typed VALUES (1, true, 1.50, '{"x": [1]}', '{1,2}', '2030-01-01 00:00:00+00', NULL);
SELECT event_type, key, payload FROM outbox.events WHERE id > :last_event ORDER BY id;

-- Misuse is refused when the trigger fires, and the statement fails.
CREATE TABLE misuse (id int PRIMARY KEY, v text);
-- An unknown key column (42703).
CREATE TRIGGER misuse_outbox AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('misuse', 'nope');
SELECT try($$INSERT INTO misuse VALUES (1, 'x')$$) AS unknown_key_column;
DROP TRIGGER misuse_outbox ON misuse;
-- BEFORE, statement-level and INSTEAD OF triggers (39P01).
CREATE TRIGGER misuse_outbox BEFORE INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('misuse');
SELECT try($$INSERT INTO misuse VALUES (1, 'x')$$) AS before_trigger;
DROP TRIGGER misuse_outbox ON misuse;
CREATE TRIGGER misuse_outbox AFTER INSERT ON misuse
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.capture('misuse');
SELECT try($$INSERT INTO misuse VALUES (1, 'x')$$) AS statement_trigger;
DROP TRIGGER misuse_outbox ON misuse;
CREATE VIEW misuse_v AS SELECT * FROM misuse;
CREATE TRIGGER misuse_outbox INSTEAD OF INSERT ON misuse_v
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('misuse');
SELECT try($$INSERT INTO misuse_v VALUES (1, 'x')$$) AS instead_of_trigger;
DROP VIEW misuse_v;
-- No arguments, or more than two (22023).
CREATE TRIGGER misuse_outbox AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION outbox.capture();
SELECT try($$INSERT INTO misuse VALUES (1, 'x')$$) AS no_arguments;
DROP TRIGGER misuse_outbox ON misuse;
CREATE TRIGGER misuse_outbox AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('misuse', 'id', 'extra');
SELECT try($$INSERT INTO misuse VALUES (1, 'x')$$) AS three_arguments;
DROP TRIGGER misuse_outbox ON misuse;
-- A prefix that does not make a valid event type (22023, from emit()).
CREATE TRIGGER misuse_outbox AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('bad prefix');
SELECT try($$INSERT INTO misuse VALUES (1, 'x')$$) AS bad_prefix;
DROP TRIGGER misuse_outbox ON misuse;

-- The role that changes the rows needs what it would need to emit itself:
-- USAGE on schema outbox and EXECUTE on emit() (42501 otherwise).
CREATE ROLE regress_capture_writer;
GRANT INSERT ON misuse TO regress_capture_writer;
CREATE TRIGGER misuse_outbox AFTER INSERT ON misuse
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('misuse');
SET ROLE regress_capture_writer;
SELECT try($$INSERT INTO misuse VALUES (1, 'x')$$) AS without_usage;
RESET ROLE;
GRANT USAGE ON SCHEMA outbox TO regress_capture_writer;
SET ROLE regress_capture_writer;
SELECT try($$INSERT INTO misuse VALUES (1, 'x')$$) AS without_execute;
RESET ROLE;
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text, timestamptz, integer)
   TO regress_capture_writer;
SET ROLE regress_capture_writer;
SELECT try($$INSERT INTO misuse VALUES (1, 'x')$$) AS with_both;
RESET ROLE;
SELECT event_type, key, payload FROM outbox.events WHERE event_type = 'misuse.inserted';
DROP TRIGGER misuse_outbox ON misuse;
REVOKE ALL ON SCHEMA outbox FROM regress_capture_writer;
REVOKE ALL ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text, timestamptz, integer)
    FROM regress_capture_writer;
REVOKE ALL ON misuse FROM regress_capture_writer;
DROP ROLE regress_capture_writer;

DROP TABLE booking, stay, account, audit, typed, misuse;
