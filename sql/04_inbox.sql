-- outbox.mark_processed(): the inbox's true-then-false contract.

-- First time true, then false.
SELECT outbox.mark_processed('billing', 'msg-1') AS first;
SELECT outbox.mark_processed('billing', 'msg-1') AS second;
SELECT outbox.mark_processed('billing', 'msg-1') AS third;

-- Consumers are independent, and so are message ids.
SELECT outbox.mark_processed('shipping', 'msg-1') AS other_consumer;
SELECT outbox.mark_processed('billing', 'msg-2') AS other_message;
-- Ids are compared exactly (case matters).
SELECT outbox.mark_processed('billing', 'MSG-1') AS other_case;

-- The uuid overload stores the uuid's text form: text and uuid calls agree.
SELECT outbox.mark_processed('billing', '01890a5d-ac96-774b-bcce-b302099a8057'::uuid) AS uuid_first;
SELECT outbox.mark_processed('billing', '01890A5D-AC96-774B-BCCE-B302099A8057'::uuid) AS uuid_again;
SELECT outbox.mark_processed('billing', '01890a5d-ac96-774b-bcce-b302099a8057') AS same_as_text;
-- An id returned by emit() can be passed straight in.
SELECT outbox.emit('inbox.test', '1') AS emitted_id \gset
SELECT outbox.mark_processed('billing', :'emitted_id'::uuid) AS emitted_id_first,
       outbox.mark_processed('billing', :'emitted_id'::uuid) AS emitted_id_again;

-- Within one transaction the second call already sees the first.
BEGIN;
SELECT outbox.mark_processed('billing', 'msg-3') AS first, outbox.mark_processed('billing', 'msg-3') AS second;
COMMIT;

-- Rollback frees the pair.
BEGIN;
SELECT outbox.mark_processed('billing', 'msg-rb') AS in_rolled_back_txn;
ROLLBACK;
SELECT outbox.mark_processed('billing', 'msg-rb') AS after_rollback;
-- So does rolling back to a savepoint.
BEGIN;
SAVEPOINT s;
SELECT outbox.mark_processed('billing', 'msg-sp') AS in_savepoint;
ROLLBACK TO SAVEPOINT s;
SELECT outbox.mark_processed('billing', 'msg-sp') AS after_rollback_to_savepoint;
COMMIT;

-- Refusals: NULL (22004), empty (22023), over 255 bytes (54000).
SELECT c AS call, try(c) AS result
  FROM unnest(ARRAY[
         $$SELECT outbox.mark_processed(NULL, 'm')$$,
         $$SELECT outbox.mark_processed('c', NULL)$$,
         $$SELECT outbox.mark_processed(NULL::text, NULL::text)$$,
         $$SELECT outbox.mark_processed('c', NULL::uuid)$$,
         $$SELECT outbox.mark_processed(NULL, '01890a5d-ac96-774b-bcce-b302099a8057'::uuid)$$,
         $$SELECT outbox.mark_processed('', 'm')$$,
         $$SELECT outbox.mark_processed('c', '')$$,
         $$SELECT outbox.mark_processed('', '01890a5d-ac96-774b-bcce-b302099a8057'::uuid)$$,
         $$SELECT outbox.mark_processed(repeat('c', 256), 'm')$$,
         $$SELECT outbox.mark_processed('c', repeat('m', 256))$$,
         $$SELECT outbox.mark_processed('c', repeat('é', 128))$$
       ]) AS c;
-- 255 bytes is accepted.
SELECT outbox.mark_processed(repeat('c', 255), repeat('m', 255)) AS at_limit;

-- What is recorded.
SELECT consumer, message_id FROM outbox.inbox
 WHERE octet_length(consumer) < 20 AND octet_length(message_id) < 100
   AND message_id <> :'emitted_id'
 ORDER BY consumer COLLATE "C", message_id COLLATE "C";
SELECT count(*) AS emitted_id_rows FROM outbox.inbox WHERE message_id = :'emitted_id';
