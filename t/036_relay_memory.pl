# The relay's memory under a long stream of small commits: each commit
# wakes it for a read and a record, and what an iteration of its loop
# allocates must go with the iteration.  Its private memory after each
# round of commits, once everything is delivered, stays where it was.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('memory');
my ($url, $log, $receiver) = start_receiver();
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
  or die 'relay did not start';
sql("SELECT outbox.create_endpoint('small', '$url/small', '{small.*}')");
$node->poll_query_until('postgres', q{SELECT bool_and(events_waiting = 0) FROM outbox.endpoint_status})
  or die 'endpoint not ready';
my $relay = relay_pid();

sub rss_kb
{
	open(my $fh, '<', "/proc/$relay/status") or die "relay $relay: $!";
	my ($kb) = map { /^RssAnon:\s+(\d+) kB/ ? $1 : () } <$fh>;
	close $fh;
	return $kb;
}

# One round: $commits transactions of one event each, 2 ms apart so that
# each wakes the relay for an iteration of its own, then wait for all of
# them.
my $commits = 3000;
my $sent = 0;
my @rss;
for my $round (1 .. 4)
{
	sql(qq{DO \$\$ BEGIN
  FOR i IN 1 .. $commits LOOP
    PERFORM outbox.emit('small.one', jsonb_build_object('i', i));
    COMMIT;
    PERFORM pg_sleep(0.002);
  END LOOP;
END \$\$});
	$sent += $commits;
	$node->poll_query_until('postgres',
		"SELECT count(*) >= $sent FROM outbox.attempt_log WHERE status = 200")
	  or die "round $round: not delivered";
	push @rss, rss_kb();
	is($relay, relay_pid(), "round $round: the same relay delivered $commits events, one a commit");
}
diag(sprintf('memory: relay RssAnon after each round of %d commits: %s kB', $commits, join(', ', @rss)));
# The first rounds may grow caches and the allocator's pools; from the
# second on, what the loop allocates per iteration must not accumulate
# (a leak of a record's arrays per iteration was 2 MB a round and more).
cmp_ok($rss[3] - $rss[1], '<', 1024,
	'memory: the relay\'s private memory grew by less than 1 MB over the last two rounds');

done_testing();
