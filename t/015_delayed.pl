# Issue 12 (items 2 and 3), outbox 1.2:
#
# Part 1: the relay's memory stays bounded with large events.  200 events of
# about 960 kB (a 900 kB payload and 8 headers of 8 kB) in one transaction,
# to two endpoints, then replay() of them to the second, which makes all
# 200 due retries at once: pages of new events and of due retries are
# bounded by outbox.batch_bytes as well as by
# outbox.batch_size, so the relay's peak memory (VmHWM) grows by tens of
# megabytes, not by the gigabyte that holding whole pages of them took.
# Part 2: with outbox.retention = 2s, an event delayed by years does not
# hold rotation: its partition is emptied (it waits in outbox.delayed), the
# dedupe keys of that partition go with it except those of the events set
# aside, which stay as long as their copies; rotation goes on; an event
# delayed by a minute whose partition was emptied meanwhile is still
# delivered when due, exactly as emitted, once.  A failed event waiting for
# its retry does not hold rotation either, and its retry is sent from the
# copy.  An endpoint disabled for longer than retention keeps a reminder
# (a retry of an event set aside): it does not hold rotation.
# Part 3: health() names what holds the events rotation: a paused endpoint,
# then a transaction left open after it emitted and read, with its pid,
# once.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:DEFAULT sql reload_with);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = outbox_node('delayed');
my ($big_url, undef, $big_receiver) = start_receiver();
my ($url, $log, $receiver) = start_receiver();

$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
  or die 'relay did not start';

############################################################################
# Part 1: memory with large events.
############################################################################

my $events = 200;
sql("SELECT outbox.create_endpoint('big$_', '$big_url/big$_', '{big.*}')") for 1 .. 2;
# Let the relay take the new endpoints in, then measure it at rest.
$node->poll_query_until('postgres', q{SELECT bool_and(events_waiting = 0) FROM outbox.endpoint_status})
  or die 'endpoints not ready';
my $relay = sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay'");

sub status_kb
{
	my ($field) = @_;
	open(my $fh, '<', "/proc/$relay/status") or return undef;
	my ($kb) = map { /^$field:\s+(\d+) kB/ ? $1 : () } <$fh>;
	close $fh;
	return $kb;
}
my $before = status_kb('RssAnon');
my $hwm_before = status_kb('VmHWM');

sql(qq{
SELECT count(outbox.emit('big.one', jsonb_build_object('n', g, 's', repeat('x', 900000)),
                         headers => (SELECT jsonb_object_agg('X-H' || i, repeat('h', 8000))
                                       FROM generate_series(1, 8) i)))
  FROM generate_series(1, $events) g});

# Sample the relay's private memory until $query returns $want.
my $peak = $before;
sub sample_until
{
	my ($query, $want) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $got;
	while (time() < $deadline)
	{
		my $now = status_kb('RssAnon') // 0;
		$peak = $now if $now > $peak;
		$got = sql($query);
		return 1 if $got eq $want;
		usleep(20_000);
	}
	diag("still $got, not $want: $query");
	return 0;
}
ok(sample_until(q{SELECT count(*) FROM outbox.attempt_log WHERE status = 200}, 2 * $events),
	"memory: the $events large events reached both endpoints");
is(sql(q{SELECT outbox.replay('big2', now() - interval '1 hour')}), $events,
	'memory: replay() makes them all due again at the second');
ok(sample_until(q{SELECT count(*) FROM outbox.attempt_log WHERE status = 200}, 3 * $events),
	'memory: and they are sent again');
# RssAnon is sampled and may miss the peak; VmHWM (the highest resident
# set the relay ever had) cannot: it is what the bound is asserted on.
my $hwm_after = status_kb('VmHWM');
my $growth_mb = ($hwm_after - $hwm_before) / 1024;
diag(sprintf('memory: relay RssAnon %.0f MB at rest, %.0f MB at the highest sample; VmHWM %.0f MB before, %.0f MB after (+%.0f MB)',
	$before / 1024, $peak / 1024, $hwm_before / 1024, $hwm_after / 1024, $growth_mb));
cmp_ok($growth_mb, '<', 150,
	'memory: the relay\'s peak grew by less than 150 MB sending 3 x 190 MB of requests');
sql("SELECT outbox.drop_endpoint('big$_')") for 1 .. 2;

############################################################################
# Part 2: delayed events and a 2 s retention.
############################################################################

# Failed events wait 25 s for their retry (with the +-20% jitter).
ok(reload_with('outbox.retention' => '2s', 'outbox.retry_schedule' => '25s'),
	'delayed: the relay reloaded a 2 s retention');
sql("SELECT outbox.create_endpoint('later', '$url/later', '{app.*}')");
# flaky answers 500 to the first request of each event, 200 to the next.
sql("SELECT outbox.create_endpoint('flaky', '$url/flaky?status=500&fail_first=1', '{flaky.*}')");

# An endpoint disabled for longer than retention keeps a reminder: remind
# defers rem.later (due in 3000 days) and is disabled by the 410 that
# rem.now meets, in the same page.  keeper, paused, holds the partition
# until remind has been disabled for longer than the retention, so that
# rotation then finds it disabled long enough to give its backlog up.
sql(qq{
BEGIN;
SELECT outbox.create_endpoint('remind', '$url/remind?status=410', '{rem.*}');
SELECT outbox.create_endpoint('keeper', '$url/keeper', '{rem.*}');
SELECT outbox.pause_endpoint('keeper');
COMMIT;
});
my $reminder = sql(q{
BEGIN;
SELECT outbox.emit('rem.later', '{}', deliver_at => now() + interval '3000 days');
SELECT outbox.emit('rem.now', '{}');
COMMIT;
});
($reminder) = split /\n/, $reminder;
ok( $node->poll_query_until('postgres', qq{
	SELECT ep.disabled_at < now() - interval '3 seconds'
	   AND EXISTS (SELECT 1 FROM outbox.retries r WHERE r.endpoint_id = ep.id AND r.event_id = '$reminder')
	  FROM outbox.endpoints ep WHERE ep.name = 'remind'}),
	'disabled: remind deferred its reminder and has been disabled for longer than retention');
sql(q{SELECT outbox.drop_endpoint('keeper')});
ok($node->poll_query_until('postgres', qq{SELECT NOT EXISTS (SELECT 1 FROM outbox.events WHERE event_id = '$reminder')}),
	'disabled: the partition of the reminder was emptied');
is( sql(qq{
	SELECT (SELECT count(*) FROM outbox.retries r JOIN outbox.endpoints ep ON ep.id = r.endpoint_id
	         WHERE ep.name = 'remind' AND r.event_id = '$reminder')
	       || ' ' || (SELECT count(*) FROM outbox.delayed WHERE event_id = '$reminder')
	       || ' ' || (SELECT backlog_dropped FROM outbox.endpoint_status WHERE name = 'remind')}),
	'1 1 0', 'disabled: remind keeps its reminder, set aside, and gave nothing up');
sql(q{SELECT outbox.drop_endpoint('remind')});

my ($far, $near, $plain, $flaky) = split /\n/, sql(q{
BEGIN;
SELECT outbox.emit('app.later', '{"n": "far"}', deliver_at => now() + interval '3000 days', dedupe_key => 'far');
SELECT outbox.emit('app.later', '{"n": "near"}', key => 'k-near', headers => '{"X-Tenant": "acme"}',
                   deliver_at => now() + interval '25 seconds', dedupe_key => 'near');
SELECT outbox.emit('app.now', '{"n": "plain"}', dedupe_key => 'plain');
SELECT outbox.emit('flaky.one', '{"n": "flaky"}');
COMMIT;
});
my $near_at = sql(qq{SELECT extract(epoch FROM deliver_at) FROM outbox.events WHERE event_id = '$near'});

ok( $node->poll_query_until('postgres', qq{
	SELECT count(*) = 2 FROM outbox.retries WHERE event_id IN ('$far', '$near') AND attempts = 0}),
	'delayed: both delayed events wait in retries');
ok($node->poll_query_until('postgres', qq{SELECT NOT EXISTS (SELECT 1 FROM outbox.events WHERE event_id = '$far')}),
	'delayed: the partition of the event due in 3000 days was emptied');
my $emptied_at = time();
ok($emptied_at < $near_at, 'delayed: before the near one came due');
is(sql(qq{SELECT string_agg(d.payload->>'n', ',' ORDER BY d.payload->>'n') FROM outbox.delayed d
           WHERE d.event_id IN ('$far', '$near')}),
	'far,near', 'delayed: both wait in outbox.delayed');
is(sql(q{SELECT string_agg(dedupe_key, ',' ORDER BY dedupe_key) FROM outbox.dedupe WHERE dedupe_key IN ('far', 'near', 'plain')}),
	'far,near', 'delayed: of the dedupe keys of the emptied partition, those of the copies stay');
is( sql(q{SELECT outbox.emit('app.later', '{"n": "far"}', deliver_at => now() + interval '3000 days', dedupe_key => 'far')}),
	$far, 'delayed: emitting again with the far event\'s dedupe_key returns the same event');
is( sql(qq{SELECT count(*) FROM outbox.retries WHERE event_id = '$far'}), '1',
	'delayed: and queues nothing more');
ok( $node->poll_query_until('postgres', qq{
	SELECT EXISTS (SELECT 1 FROM outbox.retries WHERE event_id = '$flaky' AND attempts = 1)
	   AND NOT EXISTS (SELECT 1 FROM outbox.events WHERE event_id = '$flaky')}),
	'failed: the partition of an event waiting for its retry was emptied before the retry');
my $opened = sql(q{SELECT extract(epoch FROM opened_at) FROM outbox.rotation WHERE tbl = 'events' AND current});
ok( $node->poll_query_until('postgres', qq{
	SELECT extract(epoch FROM opened_at) > $opened + 2 FROM outbox.rotation WHERE tbl = 'events' AND current}),
	'delayed: rotation goes on');

ok(wait_received($log, got_all('/later', $near)), 'delayed: the near event is delivered once due');
my @near = grep { $_->{headers}{'webhook-id'} eq $near } received($log);
is(scalar(@near), 1, 'delayed: once');
cmp_ok($near[0]{t}, '>=', $near_at, 'delayed: not before its deliver_at');
like($near[0]{body}, qr/^\{"type":"app\.later","timestamp":"[^"]+","data":\{"n": "near"\}\}$/,
	'delayed: with its type and payload');
is($near[0]{headers}{'x-tenant'}, 'acme', 'delayed: with its headers');
ok(wait_received($log, got_all('/later', $plain)), 'delayed: the plain event was delivered');
ok(!grep({ $_->{headers}{'webhook-id'} eq $far } received($log)), 'delayed: the far one was not');
ok(wait_received($log, sub { grep { $_->{path} eq '/flaky' && $_->{status} == 200 } @_ }),
	'failed: its retry was delivered');
my @flaky = grep { $_->{headers}{'webhook-id'} eq $flaky } received($log);
is(join(',', map { $_->{status} } @flaky), '500,200', 'failed: after one failure');
like($flaky[1]{body}, qr/^\{"type":"flaky\.one","timestamp":"[^"]+","data":\{"n": "flaky"\}\}$/,
	'failed: from its copy, as emitted');

ok( $node->poll_query_until('postgres', qq{
	SELECT NOT EXISTS (SELECT 1 FROM outbox.delayed WHERE event_id IN ('$near', '$flaky'))
	   AND EXISTS (SELECT 1 FROM outbox.delayed WHERE event_id = '$far')}),
	'delayed: the copies of the delivered events go at a later rotation, the far one stays');
is(sql(q{SELECT string_agg(dedupe_key, ',' ORDER BY dedupe_key) FROM outbox.dedupe WHERE dedupe_key IN ('far', 'near', 'plain')}),
	'far', 'delayed: the dedupe key of the delivered event went with its copy');
is( sql(q{SELECT events_waiting || ' ' || in_retry FROM outbox.endpoint_status WHERE name = 'later'}),
	'1 0', 'delayed: endpoint_status counts the far event waiting, not in retry');
is(sql(q{SELECT status FROM outbox.health() WHERE check_name = 'oldest undelivered'}), 'ok',
	'delayed: an event not due yet is not late');

############################################################################
# Part 3: health() names what holds the events rotation.
############################################################################

# The two holders one after the other: each holds the partition its events
# are in, and rotation may move on between the emits of two holders.
sql(qq{
BEGIN;
SELECT outbox.create_endpoint('held', '$url/held', '{app.held}');
SELECT outbox.pause_endpoint('held');
COMMIT;
});
sql(q{SELECT outbox.emit('app.held', jsonb_build_object('n', g)) FROM generate_series(1, 3) g});
ok( $node->poll_query_until('postgres', q{
	SELECT status = 'warning' AND detail LIKE '%endpoint "held"%'
	  FROM outbox.health() WHERE check_name = 'events rotation'}),
	'health: events rotation warns while an endpoint is paused');
my $detail = sql(q{SELECT detail FROM outbox.health() WHERE check_name = 'events rotation'});
diag("health: $detail");
like($detail, qr/endpoint "held" \(paused\) has not passed 3 of its events/, 'health: names the paused endpoint');
is(sql(q{SELECT string_agg(holder, ', ' ORDER BY holder) FROM outbox.rotation_holds()}),
	'endpoint "held"', 'health: rotation_holds() has a row for it');
sql(q{SELECT outbox.resume_endpoint('held')});
ok( $node->poll_query_until('postgres', q{
	SELECT status = 'ok' FROM outbox.health() WHERE check_name = 'events rotation'}),
	'health: ok again once it is resumed');

# A transaction that emitted and read its partition holds two locks on it
# (ROW EXCLUSIVE and ACCESS SHARE): it is named once.  (It reads that
# partition alone, found through its own lock: a read of outbox.events
# would lock all three, and rotation would stop at another one.)
my $open = $node->background_psql('postgres');
my $open_pid = $open->query_safe(q{
BEGIN;
SELECT outbox.emit('app.open', '{}');
SELECT format('SELECT count(*) FROM %s', l.relation::regclass)
  FROM pg_locks l
 WHERE l.pid = pg_backend_pid() AND l.mode = 'RowExclusiveLock'
   AND l.relation::regclass::text ~ '^outbox\.events_\d$' \gexec
SELECT pg_backend_pid();});
($open_pid) = $open_pid =~ /(\d+)\s*$/;
ok( $node->poll_query_until('postgres', qq{
	SELECT status = 'warning' AND detail LIKE '%pid $open_pid %'
	  FROM outbox.health() WHERE check_name = 'events rotation'}),
	'health: events rotation warns while a transaction is open');
$detail = sql(q{SELECT detail FROM outbox.health() WHERE check_name = 'events rotation'});
diag("health: $detail");
like($detail, qr/a transaction of pid $open_pid \(idle in transaction, open since [^)]+\) holds a lock on outbox\.events_\d/,
	'health: names the open transaction and its pid');
is(sql(q{SELECT string_agg(holder, ', ' ORDER BY holder) FROM outbox.rotation_holds()}),
	"pid $open_pid", 'health: rotation_holds() has one row for it');

$open->query_safe('COMMIT');
$open->quit;
ok( $node->poll_query_until('postgres', q{
	SELECT status = 'ok' FROM outbox.health() WHERE check_name = 'events rotation'}),
	'health: ok again once they are gone');
is(sql(q{SELECT count(*) FROM outbox.rotation_holds()}), '0', 'health: nothing holds rotation');

$node->stop;
$_->kill_kill for $big_receiver, $receiver;
done_testing();
