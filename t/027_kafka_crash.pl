# Crash rounds with a Kafka endpoint (the pattern of t/007_crash.pl, smaller):
# two clients emit events with keys into an ordered Kafka endpoint, about
# one transaction in ten rolling back; once part of them is acknowledged the
# relay is killed with SIGKILL, or a client backend is (the postmaster's
# crash restart), or the server stops with -m immediate and starts again.
# Once nothing is owed, the topic (read with kcat) is checked against
# outbox.events: every committed event arrived (lost 0), nothing else did
# (phantom 0), and per key the first copies are in emit order.  Duplicates
# carry the event id of their first copy (webhook-id) and are counted.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use IPC::Run;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $seed = $ENV{OUTBOX_SEED} // (time() * 1000 + $$) % 2**31;
srand($seed);
diag("kafka crash rounds: seed $seed (OUTBOX_SEED=$seed replays the same choices)");

my $dir = PostgreSQL::Test::Utils::tempdir;
system('cc', '-o', "$dir/kafka_mock", "$FindBin::Bin/../test/kafka_mock.c", '-lrdkafka') == 0
  or die 'could not build test/kafka_mock.c (librdkafka-dev: scripts/deps.sh)';
my ($mock_in, $mock_out, $mock_err) = ('', '', '');
my $mock = IPC::Run::start(["$dir/kafka_mock", 3], '<', \$mock_in, '>', \$mock_out, '2>', \$mock_err,
	IPC::Run::timeout(900));
END
{
	local $?;
	$mock->kill_kill if $mock;
}
$mock->pump until $mock_out =~ /\n/;
my ($bootstrap) = $mock_out =~ /^(\S+)\n/;
$mock_in .= "topic crash 3\n";
$mock->pump until $mock_out =~ /^ok$/m;

sub consume
{
	my ($out, $err) = ('', '');
	IPC::Run::run(['kcat', '-C', '-b', $bootstrap, '-t', 'crash', '-e', '-q', '-u',
			'-f', "%k\x1f%s\x1f%h\x1e"], '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat failed: $err";
	return map { [ split /\x1f/, $_, 3 ] } grep { length } split /\x1e/, $out;
}

my $node = outbox_node('kafka_crash', conf => q{
restart_after_crash = on
log_statement = none
outbox.retry_schedule = '500ms'
});
sql("SELECT outbox.create_endpoint('kc', 'kafka://$bootstrap/crash', ordered => true, timeout => '3 seconds')");
wait_for_relay() or die 'relay did not start';
my $tmp = PostgreSQL::Test::Utils::tempdir;

my @kinds = qw(relay backend immediate);
for (my $i = $#kinds; $i > 0; $i--)
{
	my $j = int(rand($i + 1));
	@kinds[ $i, $j ] = @kinds[ $j, $i ];
}
my ($t_lost, $t_phantom, $t_dup, $t_events) = (0, 0, 0, 0);
my %seen_ids;    # every webhook-id of earlier rounds

for my $round (1 .. scalar(@kinds))
{
	my $kind = $kinds[ $round - 1 ];
	my $log_offset = -s $node->logfile;
	my $old_relay = relay_pid();
	my @h;
	for my $c (0 .. 1)
	{
		my $file = "$tmp/client_${round}_$c.sql";
		open(my $fh, '>', $file) or die "cannot write $file: $!";
		print $fh "\\o /dev/null\n";
		for my $t (0 .. 149)
		{
			my $rb = rand() < 0.1;
			print $fh "BEGIN;\n";
			for my $i (0 .. int(rand(3)))
			{
				my $key = "c$c-k" . int(rand(10));    # one client's keys: its order is the emit order
				print $fh "SELECT outbox.emit('order.created', '{\"r\": $round, \"c\": $c, \"t\": $t, \"i\": $i}', '$key');\n";
			}
			print $fh $rb ? "ROLLBACK;\n" : "COMMIT;\n";
		}
		close $fh;
		push @h, IPC::Run::start(
			[ 'psql', '-X', '-q', '-d', $node->connstr('postgres') . ' application_name=crash_client', '-f', $file ],
			'>', \my $out, '2>', \my $err);
	}
	my $victim;
	if ($kind eq 'backend')
	{
		$victim = IPC::Run::start(
			[ 'psql', '-X', '-q', '-d', $node->connstr('postgres') . ' application_name=crash_victim',
				'-c', 'SELECT pg_sleep(600)' ],
			'>', \my $vout, '2>', \my $verr);
	}
	# The crash comes once some of this round's events are acknowledged.
	my $trigger = 20 + int(rand(200));
	$node->poll_query_until('postgres', qq{
SELECT count(*) >= $trigger FROM outbox.attempts a JOIN outbox.events e USING (event_id)
 WHERE a.status = 200 AND e.payload->>'r' = '$round'})
	  or die "round $round: $trigger acknowledgements did not come";

	if ($kind eq 'relay')
	{
		kill 'KILL', $old_relay;
	}
	elsif ($kind eq 'backend')
	{
		my $pid = sql(q{SELECT pid FROM pg_stat_activity WHERE application_name = 'crash_victim'});
		kill 'KILL', $pid or die "round $round: could not kill $pid";
	}
	else
	{
		$node->stop('immediate');
		$node->start;
	}
	$_->finish for @h;
	$victim->finish if $victim;
	relay_restarted($node, $old_relay)
	  or die "round $round: relay not running after the crash";

	# Every client transaction that was cut off is not retried: what
	# committed is in outbox.events, and that is what is owed.
	ok($node->poll_query_until('postgres', q{
SELECT b.deliveries_waiting = 0 AND NOT EXISTS (SELECT 1 FROM outbox.retries)
  FROM outbox.backlog b}), "round $round ($kind): nothing owed after the restart");

	my %committed = map { my ($id, $key, $n) = split /\|/; ($id => [ $key, $n ]) }
	  split /\n/, sql(qq{SELECT event_id || '|' || key || '|' || id FROM outbox.events
	                     WHERE payload->>'r' = '$round'});
	my (%copies, %first_order);
	for my $m (consume())
	{
		my ($id) = $m->[2] =~ /webhook-id=([0-9a-f-]{36})/;
		next if !defined $id || $seen_ids{$id};
		next unless $m->[1] =~ /"r": ?$round\b/ || $committed{$id};
		push @{ $first_order{ $m->[0] } }, $id unless $copies{$id}++;
	}
	my ($lost, $phantom, $dup, $out_of_order) = tally_copies(\%committed, \%copies, \%first_order);
	is($lost, 0, "round $round ($kind): no committed event lost");
	is($phantom, 0, "round $round ($kind): no phantom");
	is($out_of_order, 0, "round $round ($kind): per key, first copies in emit order");
	diag(sprintf('round %d (%s): %d events, lost %d, phantom %d, duplicates %d',
			$round, $kind, scalar(keys %committed), $lost, $phantom, $dup));
	$seen_ids{$_} = 1 for keys %copies;
	($t_lost, $t_phantom, $t_dup, $t_events) =
	  ($t_lost + $lost, $t_phantom + $phantom, $t_dup + $dup, $t_events + scalar(keys %committed));
}
diag("kafka crash summary: " . scalar(@kinds) . " rounds, $t_events events, lost $t_lost, phantom $t_phantom, duplicates $t_dup, seed $seed");

done_testing();
