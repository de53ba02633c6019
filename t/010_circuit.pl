# An endpoint that fails without pause only gets probes: its backlog waits
# at its position instead of being attempted (and costing the relay) event
# by event, and it flows again once the endpoint answers.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('circuit', conf => "outbox.retry_schedule = '1h'\noutbox.batch_size = 50\n");
my ($url, $log, $receiver) = start_receiver();
sub sql { return $node->safe_psql('postgres', $_[0]); }

sql("SELECT outbox.create_endpoint('down', '$url/down?status=500', '{t.down}')");
sql("SELECT outbox.create_endpoint('up', '$url/up', '{t.up}')");
sql("SELECT outbox.emit('t.down', jsonb_build_object('n', g)) FROM generate_series(1, 500) g");
sql("SELECT outbox.emit('t.up', jsonb_build_object('n', g)) FROM generate_series(1, 500) g");

ok(wait_received($log, sub { grep({ $_->{path} eq '/up' } @_) >= 500 }),
	'the healthy endpoint gets all its events');
# Twenty failures in a row open the circuit: after the first page of 50,
# only one new event per poll is tried.  Give it a few polls.
$node->poll_query_until('postgres',
	"SELECT count(*) >= 25 FROM outbox.attempts WHERE endpoint = 'down'");
my $before = sql("SELECT count(*) FROM outbox.attempts WHERE endpoint = 'down'");
# A later event on the healthy endpoint proves the relay went round many
# times meanwhile (poll_interval is 200ms: wait for ten polls' worth).
sql("SELECT pg_sleep(2)");
my $after = sql("SELECT count(*) FROM outbox.attempts WHERE endpoint = 'down'");
cmp_ok($after, '<', 120, "the failing endpoint was probed, not flooded ($before then $after attempts of 500)");
cmp_ok($after - $before, '<=', 15, 'about one probe per poll');
cmp_ok(sql("SELECT events_waiting FROM outbox.endpoint_status WHERE name = 'down'"), '>=', 380,
	'its backlog waits at its position');

# Once it answers, everything flows.
sql("SELECT outbox.alter_endpoint('down', url => '$url/down_healed')");
sql("UPDATE outbox.retries SET next_at = now()");
ok(wait_received($log, sub { grep({ $_->{path} eq '/down_healed' } @_) >= 500 }),
	'after it recovers, all 500 events arrive');
ok($node->poll_query_until('postgres',
	"SELECT events_waiting = 0 FROM outbox.endpoint_status WHERE name = 'down'"),
	'nothing left waiting');

$node->stop;
$receiver->kill_kill;
done_testing();
