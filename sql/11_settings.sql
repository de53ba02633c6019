-- The parsers of the list-valued settings.  outbox.retry_schedule,
-- outbox.allowed_networks and outbox.database take effect at a reload, so
-- a session cannot SET them; ALTER SYSTEM runs the same check a reload
-- does (guc.c) and refuses a bad value with the parser's reason, before
-- anything is written.  Every good value is reset at the end.  What a
-- reload does with them (and how outbox.database is read, which has no
-- check of its own) is t/016_settings.pl.

-- Not settable in a session.
SET outbox.retry_schedule = '5s';
SET outbox.allowed_networks = '127.0.0.1/32';
SET outbox.database = 'postgres';

----------------------------------------------------------------------------
-- outbox.retry_schedule: delays of ms, s, min, h or d, a bare number being
-- seconds; at most 32 of them, each at most 30 days.
----------------------------------------------------------------------------

-- Good: the default, units, spaces, fractions, zero, a bare number, the
-- limits (30 days, 32 entries).
ALTER SYSTEM SET outbox.retry_schedule = '5s,5min,30min,2h,5h,10h,10h';
ALTER SYSTEM SET outbox.retry_schedule = ' 250 ms , 1.5s,2 min, 1h ,1d ';
ALTER SYSTEM SET outbox.retry_schedule = '0';
ALTER SYSTEM SET outbox.retry_schedule = '.5,5.';
ALTER SYSTEM SET outbox.retry_schedule = '30d';
ALTER SYSTEM SET outbox.retry_schedule = '720h';
ALTER SYSTEM SET outbox.retry_schedule = '1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32';

-- Bad: empty, an empty entry (first, middle, last), an unknown or
-- misspelt unit, a negative delay, numbers that are not plain decimals,
-- two units in one entry, over 30 days, 33 entries.
ALTER SYSTEM SET outbox.retry_schedule = '';
ALTER SYSTEM SET outbox.retry_schedule = '  ';
ALTER SYSTEM SET outbox.retry_schedule = ',5s';
ALTER SYSTEM SET outbox.retry_schedule = '5s,,10s';
ALTER SYSTEM SET outbox.retry_schedule = '5s,';
ALTER SYSTEM SET outbox.retry_schedule = '5x';
ALTER SYSTEM SET outbox.retry_schedule = '5m';
ALTER SYSTEM SET outbox.retry_schedule = '5sec';
ALTER SYSTEM SET outbox.retry_schedule = '-1s';
ALTER SYSTEM SET outbox.retry_schedule = '+1s';
ALTER SYSTEM SET outbox.retry_schedule = 'nan';
ALTER SYSTEM SET outbox.retry_schedule = 'inf';
ALTER SYSTEM SET outbox.retry_schedule = '1e3s';
ALTER SYSTEM SET outbox.retry_schedule = '0x10s';
ALTER SYSTEM SET outbox.retry_schedule = '.';
ALTER SYSTEM SET outbox.retry_schedule = 's';
ALTER SYSTEM SET outbox.retry_schedule = '5h30min';
ALTER SYSTEM SET outbox.retry_schedule = '31d';
ALTER SYSTEM SET outbox.retry_schedule = '720.5h';
ALTER SYSTEM SET outbox.retry_schedule = '1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33';

----------------------------------------------------------------------------
-- outbox.allowed_networks: IPv4 or IPv6 addresses or CIDR networks, comma-
-- separated; a bare address is one host; empty entries are skipped; at
-- most 64.
----------------------------------------------------------------------------

-- Good: empty, hosts and networks of both families, spaces and empty
-- entries, host bits set beside the prefix, /0, the full prefix lengths,
-- 64 entries.
ALTER SYSTEM SET outbox.allowed_networks = '';
ALTER SYSTEM SET outbox.allowed_networks = '127.0.0.1/32, 10.0.0.0/8, ::1, fd00::/8';
ALTER SYSTEM SET outbox.allowed_networks = ' , 127.0.0.1 ,, 192.168.0.0/16 , ';
ALTER SYSTEM SET outbox.allowed_networks = '10.1.2.3/8';
ALTER SYSTEM SET outbox.allowed_networks = '0.0.0.0/0, ::/0';
ALTER SYSTEM SET outbox.allowed_networks = '1.2.3.4/32, ::ffff:127.0.0.1/128';
SELECT format('ALTER SYSTEM SET outbox.allowed_networks = %L',
              string_agg(format('10.0.%s.0/24', i), ',')) AS sixty_four
  FROM generate_series(1, 64) i \gset
:sixty_four;

-- Bad: names (no DNS here), short or long addresses, prefixes out of
-- range, empty or not a number, a second slash, 65 entries.
ALTER SYSTEM SET outbox.allowed_networks = 'localhost';
ALTER SYSTEM SET outbox.allowed_networks = '127.0.0.1/32, example.com';
ALTER SYSTEM SET outbox.allowed_networks = '10.0.0';
ALTER SYSTEM SET outbox.allowed_networks = '1.2.3.4.5';
ALTER SYSTEM SET outbox.allowed_networks = '::1::2';
ALTER SYSTEM SET outbox.allowed_networks = '10.0.0.0/33';
ALTER SYSTEM SET outbox.allowed_networks = '::1/129';
ALTER SYSTEM SET outbox.allowed_networks = '10.0.0.0/-1';
ALTER SYSTEM SET outbox.allowed_networks = '10.0.0.0/';
ALTER SYSTEM SET outbox.allowed_networks = '10.0.0.0/8x';
ALTER SYSTEM SET outbox.allowed_networks = '10.0.0.0/8/8';
SELECT format('ALTER SYSTEM SET outbox.allowed_networks = %L',
              string_agg(format('10.0.%s.0/24', i), ',')) AS sixty_five
  FROM generate_series(1, 65) i \gset
:sixty_five;

----------------------------------------------------------------------------
-- outbox.database: any text is accepted here; the launcher reads it as a
-- list of names (t/016_settings.pl).
----------------------------------------------------------------------------

ALTER SYSTEM SET outbox.database = ' postgres , , other db ';

-- Nothing of the above stays behind.
ALTER SYSTEM RESET outbox.retry_schedule;
ALTER SYSTEM RESET outbox.allowed_networks;
ALTER SYSTEM RESET outbox.database;
SELECT pg_read_file('postgresql.auto.conf') !~ 'outbox' AS auto_conf_clean;
