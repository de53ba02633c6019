# Delivery basics: committed events arrive signed; rolled-back ones never do;
# the relay is woken by commit, not by its poll timer.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = outbox_node('delivery', conf => "outbox.poll_interval = '1h'\n");
my ($url, $log, $receiver) = start_receiver();

my $secret = $node->safe_psql('postgres',
	"SELECT outbox.create_endpoint('orders', '$url/orders', '{order.*}')");
like($secret, qr/^whsec_/, 'endpoint created with a secret');

# Wait until the relay has loaded the endpoint position (first poll).
wait_for_relay() or die 'relay did not start';

$node->safe_psql('postgres', q{
BEGIN;
SELECT outbox.emit('order.created', '{"n": 1}');
SELECT outbox.emit('order.created', '{"n": 2}');
SELECT outbox.emit('user.created', '{"n": 3}');
COMMIT;
BEGIN;
SELECT outbox.emit('order.created', '{"n": 99}');
ROLLBACK;
});

# poll_interval is an hour: only the commit's wake-up can deliver these.
ok(wait_received($log, sub { grep({ $_->{path} eq '/orders' } @_) >= 2 }),
	'two order events arrived without waiting for the poll timer');
# A later committed event proves nothing else was pending.
$node->safe_psql('postgres', q{SELECT outbox.emit('order.created', '{"n": 4}')});
ok(wait_received($log, sub { grep({ $_->{path} eq '/orders' } @_) >= 3 }), 'third arrived');
my @got = received($log);
my @bodies = map { $_->{body} } @got;
is(scalar(grep { /"n": 99/ } @bodies), 0, 'rolled-back event never arrived');
is(scalar(grep { /user\.created/ } @bodies), 0, 'event of an unsubscribed type not sent');
is(join(',', map { $_->{headers}{'user-agent'} } @got), join(',', ('outbox/' . outbox_version()) x 3),
	'the User-Agent names outbox and the version of outbox.control');

# Each request verifies with the endpoint secret.
for my $r (@got)
{
	my $ok = $node->safe_psql('postgres', sprintf(
		q{SELECT outbox.verify_signature(%s, %s, %s, %s, %s)},
		map { $node->safe_psql('postgres', 'SELECT quote_literal($q$' . $_ . '$q$)') }
		  ($secret, $r->{headers}{'webhook-id'}, $r->{headers}{'webhook-timestamp'},
			$r->{body}, $r->{headers}{'webhook-signature'})));
	is($ok, 't', "signature of $r->{headers}{'webhook-id'} verifies");
}

# The relay's counters: the three deliveries above, one request body each.
$node->poll_query_until('postgres', 'SELECT deliveries >= 3 FROM outbox.relay_stats')
  or die 'relay_stats did not count the deliveries';
is($node->safe_psql('postgres', q{
	SELECT s.pid = a.pid AND s.database = 'postgres' AND s.deliveries = 3 AND s.failures = 0
	       AND s.retries = 0 AND s.batches >= 1 AND s.bytes_sent > 3 * 60 AND s.sql_seconds > 0
	  FROM outbox.relay_stats s, pg_stat_activity a WHERE a.backend_type = 'outbox relay'}),
	't', 'relay_stats counts deliveries, batches and bytes of the running relay');

# An event committed while the endpoint's page is in flight is read once
# that page is recorded, not at the next commit or poll (an hour here).
$node->safe_psql('postgres',
	"SELECT outbox.create_endpoint('slow', '$url/slow?delay=0.5', '{slow.*}')");
$node->safe_psql('postgres', q{SELECT outbox.emit('slow.first', '{}')});
# (the first is in flight: the receiver waits 0.5 s before it answers)
$node->poll_query_until('postgres', q{SELECT in_flight > 0 FROM outbox.endpoint_status WHERE name = 'slow'})
  or die 'the first event never went out';
$node->safe_psql('postgres', q{SELECT outbox.emit('slow.second', '{}')});
ok(wait_received($log, sub { grep({ $_->{body} =~ /slow\.second/ } @_) >= 1 }),
	'an event committed while a page was in flight arrived without another commit');

# A connection kept alive stays watched while it idles (http.c,
# WatchState): when the receiver goes away and its connections close, the
# relay stops watching them rather than waking for them without end.  An
# idle relay (a poll an hour apart) uses next to no CPU; one woken by a
# closed socket on every wait uses a core.
my $relay = relay_pid();
$receiver->kill_kill;
# Until the relay has closed its side of every connection to the receiver:
# none established or half closed (CLOSE_WAIT) to its port is left.
my ($port) = $url =~ /:(\d+)$/;
my $open_to_receiver = sub {
	my $n = 0;
	for my $line (split /\n/, PostgreSQL::Test::Utils::slurp_file("/proc/$relay/net/tcp"))
	{
		my @f = split ' ', $line;
		next unless @f > 3 && $f[2] =~ /^[0-9A-F]{8}:([0-9A-F]{4})$/;
		$n++ if hex($1) == $port && ($f[3] eq '01' || $f[3] eq '08');
	}
	return $n;
};
for (my $i = 0; $i < 300 && $open_to_receiver->() > 0; $i++) { usleep(10_000); }
is($open_to_receiver->(), 0, 'the relay closed its connections to the receiver that went away');
my $cpu = sub {
	my @f = split / /, PostgreSQL::Test::Utils::slurp_file("/proc/$relay/stat") =~ s/^.*\) //sr;
	return $f[11] + $f[12];		# utime and stime, in clock ticks
};
my $before = $cpu->();
sleep 3;
my $ticks = $cpu->() - $before;
cmp_ok($ticks, '<', 50, "the relay stays idle after its receiver closed its kept-alive connections ($ticks ticks in 3 s)");

$node->stop;
done_testing();
