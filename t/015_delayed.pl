# Issue 12 (items 2 and 3), outbox 1.2:
#
# Part 1: the relay's memory stays bounded with large events.  200 events of
# about 960 kB (a 900 kB payload and 8 headers of 8 kB) in one transaction,
# to two endpoints, then replay() of them to the second, which makes all
# 200 due retries at once: pages of new events and of due retries are
# bounded by outbox.batch_bytes as well as by
# outbox.batch_size, so the relay's private memory (RssAnon) grows by tens
# of megabytes, not by the gigabyte that holding whole pages of them took.
# Part 2: with outbox.retention = 2s, an event delayed by years does not
# hold rotation: its partition is emptied (it waits in outbox.delayed), the
# dedupe keys of that partition go with it, rotation goes on; an event
# delayed by seconds whose partition was emptied meanwhile is still
# delivered when due, exactly as emitted, once.
# Part 3: health() names what holds the events rotation: a paused endpoint
# and a transaction left open after it emitted, with its pid.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = outbox_node('delayed');
my ($big_url, undef, $big_receiver) = start_receiver();
my ($url, $log, $receiver) = start_receiver();
sub sql { return $node->safe_psql('postgres', $_[0]); }

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
my $growth_mb = ($peak - $before) / 1024;
diag(sprintf('memory: relay RssAnon %.0f MB at rest, %.0f MB at its peak (+%.0f MB); VmHWM %.0f MB',
	$before / 1024, $peak / 1024, $growth_mb, (status_kb('VmHWM') // 0) / 1024));
cmp_ok($growth_mb, '<', 150,
	'memory: the relay grew by less than 150 MB sending 3 x 190 MB of requests');
sql("SELECT outbox.drop_endpoint('big$_')") for 1 .. 2;

############################################################################
# Part 2: delayed events and a 2 s retention.
############################################################################

sql(q{ALTER SYSTEM SET outbox.retention = '2s'});
sql(q{SELECT pg_reload_conf()});
sql("SELECT outbox.create_endpoint('later', '$url/later', '{app.*}')");

my ($far, $near, $plain) = split /\n/, sql(q{
BEGIN;
SELECT outbox.emit('app.later', '{"n": "far"}', deliver_at => now() + interval '3000 days', dedupe_key => 'far');
SELECT outbox.emit('app.later', '{"n": "near"}', key => 'k-near', headers => '{"X-Tenant": "acme"}',
                   deliver_at => now() + interval '15 seconds', dedupe_key => 'near');
SELECT outbox.emit('app.now', '{"n": "plain"}', dedupe_key => 'plain');
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
is(sql(q{SELECT count(*) FROM outbox.dedupe WHERE dedupe_key IN ('far', 'near', 'plain')}), '0',
	'delayed: the dedupe keys of the emptied partition are gone');
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

ok( $node->poll_query_until('postgres', qq{
	SELECT NOT EXISTS (SELECT 1 FROM outbox.delayed WHERE event_id = '$near')
	   AND EXISTS (SELECT 1 FROM outbox.delayed WHERE event_id = '$far')}),
	'delayed: the copy of the delivered event goes at a later rotation, the far one stays');
is( sql(q{SELECT events_waiting || ' ' || in_retry FROM outbox.endpoint_status WHERE name = 'later'}),
	'1 0', 'delayed: endpoint_status counts the far event waiting, not in retry');
is(sql(q{SELECT status FROM outbox.health() WHERE check_name = 'oldest undelivered'}), 'ok',
	'delayed: an event not due yet is not late');

############################################################################
# Part 3: health() names what holds the events rotation.
############################################################################

sql(qq{
BEGIN;
SELECT outbox.create_endpoint('held', '$url/held', '{app.held}');
SELECT outbox.pause_endpoint('held');
COMMIT;
});
sql(q{SELECT outbox.emit('app.held', jsonb_build_object('n', g)) FROM generate_series(1, 3) g});
my $open = $node->background_psql('postgres');
my $open_pid = $open->query_safe(q{BEGIN; SELECT outbox.emit('app.open', '{}'); SELECT pg_backend_pid();});
($open_pid) = $open_pid =~ /(\d+)\s*$/;

ok( $node->poll_query_until('postgres', q{
	SELECT status = 'warning' FROM outbox.health() WHERE check_name = 'events rotation'}),
	'health: events rotation warns');
my $detail = sql(q{SELECT detail FROM outbox.health() WHERE check_name = 'events rotation'});
diag("health: $detail");
like($detail, qr/endpoint "held" \(paused\) has not passed 3 of its events/, 'health: names the paused endpoint');
like($detail, qr/a transaction of pid $open_pid \(idle in transaction, open since [^)]+\) holds a lock on outbox\.events_\d/,
	'health: names the open transaction and its pid');
is(sql(q{SELECT string_agg(holder, ', ' ORDER BY holder) FROM outbox.rotation_holds()}),
	qq{endpoint "held", pid $open_pid}, 'health: rotation_holds() has a row for each');

$open->query_safe('COMMIT');
$open->quit;
sql(q{SELECT outbox.resume_endpoint('held')});
ok( $node->poll_query_until('postgres', q{
	SELECT status = 'ok' FROM outbox.health() WHERE check_name = 'events rotation'}),
	'health: ok again once they are gone');
is(sql(q{SELECT count(*) FROM outbox.rotation_holds()}), '0', 'health: nothing holds rotation');

$node->stop;
$_->kill_kill for $big_receiver, $receiver;
done_testing();
