# Many requests in flight (DESIGN.md, "The relay loop", Slots), at the
# default settings (max_concurrency 2,048, endpoint_concurrency 32):
#
# Part 1: 80 endpoints whose receiver holds every request, then a healthy
# endpoint on another receiver: it gets its events within seconds while
# the 80 requests still hang (their timeout is 30 s).  A stream page whose
# other followers all hang may be held up to DETACH_HOLD_MS (6 s) first.
# Part 2, on a new node: 10 endpoints whose receiver answers after 500 ms,
# 300 events each, interleaved: each gets up to its cap in flight (counted
# at the receiver), and never more.
# Part 3: under a hard limit on open files too low for the slots, a relay
# keeps fewer in flight (room for three times as many sockets), and says so.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = outbox_node('many');
my ($url, $log) = start_receiver();
wait_for_relay() or die 'relay did not start';

############################################################################
# Part 1: hanging requests beside a healthy endpoint
############################################################################

my ($hang_url, $hang_log) = start_receiver();
my $never = PostgreSQL::Test::Utils::tempdir() . '/never';    # never made
sql(qq{
SELECT count(outbox.create_endpoint('hang' || n, '$hang_url/hang' || n || '?hold=$never',
                                    ARRAY['hang.' || n], timeout => '30 seconds'))
  FROM generate_series(1, 80) n;
SELECT count(outbox.emit('hang.' || n, '{}')) FROM generate_series(1, 80) n;
});
# The held requests are logged only once answered: count them at the
# relay instead.
ok( $node->poll_query_until(
		'postgres', 'SELECT sum(in_flight) >= 80 FROM outbox.endpoint_status WHERE name LIKE $$hang%$$'),
	'80 requests hang');

sql(qq{SELECT outbox.create_endpoint('healthy', '$url/healthy', '{ok.*}')});
my $t0 = time();
my @ids = split /\n/,
  sql(q{SELECT outbox.emit('ok.' || i, jsonb_build_object('i', i)) FROM generate_series(1, 50) i});
ok(wait_received($log, got_all('/healthy', @ids)), 'the healthy endpoint got its 50 events');
my $took = time() - $t0;
note(sprintf('healthy endpoint: 50 events in %.2f s beside 80 hanging requests', $took));
cmp_ok($took, '<', 15, 'within seconds, while the 80 requests still hang');
is(sql(q{SELECT count(*) FROM outbox.attempts WHERE endpoint LIKE 'hang%'}), '0',
	'no hanging request had finished');

############################################################################
# Part 2: receivers that take their time get their caps
############################################################################

# On a node of its own: the 80 hanging requests would count in every
# endpoint's share of the slots (2,048 / 92: 23 each), below the cap.
$node->stop('immediate');
$node = outbox_node('many2');
wait_for_relay() or die 'relay did not start';
my ($n_slow, $per_slow, $delay) = (10, 300, 0.5);
sql(qq{
SELECT count(outbox.create_endpoint('slow' || n, '$url/slow' || n || '?delay=$delay',
                                    ARRAY['slow.' || n], timeout => '10 seconds'))
  FROM generate_series(1, $n_slow) n;
});
# One event each first: the endpoints start on their own and take a
# moment to find their first events.
sql(qq{SELECT count(outbox.emit('slow.' || n, '{}')) FROM generate_series(1, $n_slow) n});
ok(wait_received($log, sub { scalar(grep { $_->{path} =~ m{^/slow} } @_) >= $n_slow }),
	'the slow endpoints got their first events');
my $before = scalar(received($log));

sql(qq{
SELECT count(outbox.emit('slow.' || n, jsonb_build_object('i', i)))
  FROM (SELECT n, i FROM generate_series(1, $n_slow) n, generate_series(1, $per_slow) i
         ORDER BY i, n) e;
});
my $want = $before + $n_slow * $per_slow;
ok(wait_received($log, sub { scalar(@_) >= $want }), 'every event reached the slow receiver');

my %peak;
for my $r (grep { $_->{path} =~ m{^/slow} } received($log))
{
	$peak{ $r->{path} } = $r->{concurrent} if ($r->{concurrent} // 0) > ($peak{ $r->{path} } // 0);
}
my @over = grep { $peak{$_} > 32 } sort keys %peak;
is("@over", '', 'no endpoint had more than its cap (endpoint_concurrency 32) in flight');
my @below = grep { $peak{$_} < 24 } sort keys %peak;
note('requests in flight at most, per endpoint: ' . join(' ', map { "$_=$peak{$_}" } sort keys %peak));
is("@below", '', 'every slow endpoint had nearly its cap in flight at some point');

############################################################################
# Part 3: a hard limit on open files below what the slots need
############################################################################

# A request in flight has a socket, and each way requests go (libcurl for
# https, the relay's own HTTP/1.1 for plain http) keeps up to
# max_concurrency connections, in use and idle together, closing idle ones
# only as requests complete: max_concurrency idle in each beside
# max_concurrency in use, three times the slots in sockets, and 64 more,
# above what PostgreSQL budgets for its own files (its soft limit at
# start, or max_files_per_process if lower).  With the postmaster's limits
# on open files lowered to a soft 1,024 and a hard 1,624, a relay started
# then has room for (1,624 - 1,000 - 64) / 3 = 186 requests in flight, not
# the default 2,048, and says so (178 when the whole soft limit was taken
# for PostgreSQL's, 268 when the idle connections of only one way were
# counted).  With soft and hard both 1,624 (LimitNOFILE in a systemd unit,
# say) the room is the same (when the soft limit was taken for
# PostgreSQL's, nothing was left: 64, the floor).  A machine whose hard
# limit is lower already keeps it (at least 1,300 is needed to tell them
# apart).
my ($pm_pid) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
my ($hard) = slurp_file("/proc/$pm_pid/limits") =~ /^Max open files\s+\S+\s+(\S+)/m
  or die "no open files limit in /proc/$pm_pid/limits";
$hard = 1624 if $hard eq 'unlimited' || $hard > 1624;
die "the hard limit on open files ($hard) is too low for this test" if $hard < 1300;
my $max_files = sql('SHOW max_files_per_process');
for my $soft (1024, $hard)
{
	my $room = int(($hard - ($soft < $max_files ? $soft : $max_files) - 64) / 3);
	system('prlimit', "--pid=$pm_pid", "--nofile=$soft:$hard") == 0
	  or die "prlimit could not lower the postmaster's limits on open files";
	my $old_relay = relay_pid();
	my $from = -s $node->logfile;
	sql("SELECT pg_terminate_backend($old_relay)");
	ok(relay_restarted($node, $old_relay), "a relay started under limits of $soft (soft) and $hard (hard)");
	ok(log_wait(qr/outbox keeps at most $room requests in flight, not outbox\.max_concurrency = 2048/, $from),
		"it keeps room for the connections both ways keep ($room requests in flight)");
}
my @late = split /\n/, sql(q{SELECT outbox.emit('slow.1', '{"after": "limits"}')});
ok(wait_received($log, got_all('/slow1', @late)), 'and delivers');

done_testing();
