-- Endpoint formats: standard-webhooks (the default), cloudevents
-- (structured mode) and cloudevents-binary.  What each sends is
-- t/022_cloudevents.pl; here, the argument of create_endpoint and
-- alter_endpoint, the checks and their SQLSTATEs, nothing written by a
-- refused call, the view's column, and the source setting's check.

-- The default, and each format by name.
SELECT outbox.create_endpoint('fmt-default', 'https://example.com/') IS NOT NULL AS created;
SELECT outbox.create_endpoint('fmt-ce', 'https://example.com/', format => 'cloudevents') IS NOT NULL AS created;
SELECT outbox.create_endpoint('fmt-bin', 'https://example.com/', format => 'cloudevents-binary',
                              headers => '{"Authorization": "Bearer t", "ce-traceparent": "00-1-2-01"}') IS NOT NULL AS created;
SELECT outbox.create_endpoint('fmt-sw', 'https://example.com/', format => 'standard-webhooks') IS NOT NULL AS created;
SELECT name, format FROM outbox.endpoints WHERE name LIKE 'fmt-%' ORDER BY name;
SELECT name, format FROM outbox.endpoint_status WHERE name LIKE 'fmt-%' ORDER BY name;

-- Bad values: an unknown name (names are exact, lower case), empty, NULL.
-- None writes anything.
SELECT count(*) AS endpoints_before FROM outbox.endpoints \gset
SELECT f AS format, try(format('SELECT outbox.create_endpoint(%L, %L, format => %L)',
                               'fmt-bad-' || n, 'https://example.com/', f)) AS result
  FROM unnest(ARRAY['CloudEvents', 'cloudevents-structured', 'json', '', ' cloudevents']) WITH ORDINALITY AS u(f, n);
SELECT try($$SELECT outbox.create_endpoint('fmt-bad-null', 'https://example.com/', format => NULL)$$) AS null_format;

-- In binary mode the attributes' ce-* headers are outbox's: an endpoint
-- may not set them, in any case; other ce-* headers (extensions) are its
-- own.  In the other formats a ce-* header is a header like any other.
SELECT h AS header, try(format('SELECT outbox.create_endpoint(%L, %L, headers => %L, format => %L)',
                               'fmt-bad-h' || n, 'https://example.com/', jsonb_build_object(h, 'x'),
                               'cloudevents-binary')) AS result
  FROM unnest(ARRAY['ce-id', 'CE-Source', 'ce-specversion', 'ce-type', 'ce-subject', 'ce-time',
                    'ce-datacontenttype']) WITH ORDINALITY AS u(h, n);
SELECT try($$SELECT outbox.create_endpoint('fmt-ce-h', 'https://example.com/', headers => '{"ce-id": "x"}',
                                           format => 'cloudevents')$$) AS structured_ce_id;
SELECT count(*) - :endpoints_before AS written FROM outbox.endpoints WHERE name <> 'fmt-ce-h';
SELECT count(*) AS positions FROM outbox.positions p JOIN outbox.endpoints e ON e.id = p.endpoint_id
 WHERE e.name LIKE 'fmt-bad-%';

-- alter_endpoint: changes the format; NULL leaves it; a bad value changes
-- nothing, the other arguments of the call included.
SELECT outbox.alter_endpoint('fmt-default', format => 'cloudevents-binary');
SELECT format FROM outbox.endpoints WHERE name = 'fmt-default';
SELECT outbox.alter_endpoint('fmt-default', timeout => '10 seconds');
SELECT format AS kept FROM outbox.endpoints WHERE name = 'fmt-default';
SELECT try($$SELECT outbox.alter_endpoint('fmt-default', format => 'cloudevent', url => 'https://example.org/')$$) AS alter_bad;
SELECT format, url FROM outbox.endpoints WHERE name = 'fmt-default';
SELECT outbox.alter_endpoint('fmt-default', format => 'standard-webhooks');
SELECT format FROM outbox.endpoint_status WHERE name = 'fmt-default';

-- The headers and the format an endpoint ends up with are checked
-- together: new headers against the format it has, a new format against
-- the headers it has.
SELECT try($$SELECT outbox.alter_endpoint('fmt-bin', headers => '{"ce-Time": "now"}')$$) AS bin_new_header;
SELECT headers FROM outbox.endpoints WHERE name = 'fmt-bin';
SELECT try($$SELECT outbox.alter_endpoint('fmt-ce-h', format => 'cloudevents-binary')$$) AS header_then_binary;
SELECT format FROM outbox.endpoints WHERE name = 'fmt-ce-h';
SELECT outbox.alter_endpoint('fmt-ce-h', headers => '{}', format => 'cloudevents-binary');
SELECT format, headers FROM outbox.endpoints WHERE name = 'fmt-ce-h';

-- The table's constraint holds behind the functions.
SELECT try($$UPDATE outbox.endpoints SET format = 'xml' WHERE name = 'fmt-ce'$$) AS constraint_holds;

SELECT outbox.drop_endpoint(name) FROM outbox.endpoints WHERE name LIKE 'fmt-%';

-- outbox.cloudevents_source: a reload setting, a URI-reference or empty
-- (postgresql:///<database>).  ALTER SYSTEM runs the check a reload does.
SET outbox.cloudevents_source = 'urn:x';
ALTER SYSTEM SET outbox.cloudevents_source = 'https://orders.example.com/outbox';
ALTER SYSTEM SET outbox.cloudevents_source = '/orders?db=main#x';
ALTER SYSTEM SET outbox.cloudevents_source = 'urn:example:orders%2Fmain';
ALTER SYSTEM SET outbox.cloudevents_source = '';
ALTER SYSTEM SET outbox.cloudevents_source = 'has space';
ALTER SYSTEM SET outbox.cloudevents_source = 'quote"d';
ALTER SYSTEM SET outbox.cloudevents_source = 'bad%zz';
ALTER SYSTEM SET outbox.cloudevents_source = 'ünicode';
ALTER SYSTEM RESET outbox.cloudevents_source;
