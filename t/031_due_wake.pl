# What comes due with time wakes the relay when it is due, not at its next
# poll: with outbox.poll_interval = 1h,
# - retries on outbox.retry_schedule = '1s,1s,1s' are sent 1 s (the
#   schedule's ±20% jitter) apart, each within 100 ms of that;
# - an event emitted with deliver_at 2 s ahead is sent within 100 ms of it,
#   and so is one whose deliver_at falls before a retry already waiting;
# - an endpoint's rate limit lets its next request go when a token is there;
# - a retry already due when its failure is recorded (retry_schedule '0s')
#   is sent at once;
# - a full round that failed is tried again a second later.
# Times are the receiver's clock against the database's (one machine).
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = outbox_node('due_wake', conf => qq{
outbox.poll_interval = '1h'
outbox.retry_schedule = '1s,1s,1s'
});
my ($url, $log, $receiver) = start_receiver();
wait_for_relay();
# Slack on top of each due time: the relay's wake, a round, the request.
my $slack = 0.1;

# Requests received at $path, in order, and their receive times.
sub times_at
{
	my ($path) = @_;
	return map { $_->{t} } grep { $_->{path} eq $path } received($log);
}

sub wait_count
{
	my ($path, $n) = @_;
	return wait_received($log, sub { scalar(grep { $_->{path} eq $path } @_) >= $n });
}

# 1. Retries: 4 attempts (the first and three retries), 1 s ± 20% apart.
sql(qq{SELECT outbox.create_endpoint('failing', '$url/failing?status=500', ARRAY['t.failing'], max_attempts => 4)});
sql(q{SELECT outbox.emit('t.failing', '{}')});
ok(wait_count('/failing', 4), 'the first attempt and three retries arrived under a 1 h poll interval');
my @t = times_at('/failing');
for my $i (1 .. 3)
{
	my $gap = $t[$i] - $t[ $i - 1 ];
	ok($gap >= 0.8 - 0.02 && $gap <= 1.2 + $slack,
		sprintf('retry %d came %.3f s after the attempt before it (1 s ± 20%%, + %.1f s)', $i, $gap, $slack));
}
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM outbox.dead_letters}),
	'after its 4 attempts, the event is a dead letter');

# 2. deliver_at: due in 2 s, sent within $slack of it.
sql(qq{SELECT outbox.create_endpoint('later', '$url/later', ARRAY['t.later'])});
my (undef, $due) = split /\|/, sql(q{
SELECT outbox.emit('t.later', '{}', deliver_at => now() + interval '2 s'), extract(epoch FROM now() + interval '2 s')});
ok(wait_count('/later', 1), 'the delayed event arrived under a 1 h poll interval');
my ($at) = times_at('/later');
ok($at >= $due - 0.02 && $at <= $due + $slack,
	sprintf('it arrived %.3f s after its deliver_at', $at - $due));

# 3. A deliver_at earlier than the retry already waiting: the earlier one
# wakes the relay.  The retry waits 10 s; the event is due in 1 s.
sql(qq{SELECT outbox.create_endpoint('slow_retry', '$url/slow_retry?status=500', ARRAY['t.slow_retry'],
       max_attempts => 2)});
# (the relay logs that it reloaded before it reads with the new schedule)
my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.retry_schedule = '10s'; SELECT pg_reload_conf()});
log_wait(qr/outbox relay reloaded its configuration/, $offset) or die 'no reload';
sql(q{SELECT outbox.emit('t.slow_retry', '{}')});
ok(wait_count('/slow_retry', 1), 'the failing attempt arrived');
my (undef, $due2) = split /\|/, sql(q{
SELECT outbox.emit('t.later', '{}', deliver_at => now() + interval '1 s'), extract(epoch FROM now() + interval '1 s')});
ok(wait_count('/later', 2), 'the second delayed event arrived');
my (undef, $at2) = times_at('/later');
ok($at2 >= $due2 - 0.02 && $at2 <= $due2 + $slack,
	sprintf('it arrived %.3f s after its deliver_at, before the retry due later', $at2 - $due2));
is(scalar(times_at('/slow_retry')), 1, 'the retry due in 10 s has not been sent yet');

# 4. A rate limit of 2 a second: 4 events go 0.5 s apart.
sql(qq{SELECT outbox.create_endpoint('limited', '$url/limited', ARRAY['t.limited'], rate_limit => 2)});
sql(q{SELECT outbox.emit('t.limited', '{}') FROM generate_series(1, 4)});
ok(wait_count('/limited', 4), 'the rate-limited events arrived under a 1 h poll interval');
my @l = times_at('/limited');
my $last_gap = $l[3] - $l[2];
ok($last_gap >= 0.4 && $last_gap <= 0.5 + $slack, sprintf('the last came %.3f s after the one before it (2 a second)', $last_gap));

# 5. retry_schedule '0s': each retry is due when its failure is recorded,
# before the relay's wait starts; it is sent at once, not at the next poll.
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.retry_schedule = '0s'; SELECT pg_reload_conf()});
log_wait(qr/outbox relay reloaded its configuration/, $offset) or die 'no reload';
sql(qq{SELECT outbox.create_endpoint('at_once', '$url/at_once?status=500', ARRAY['t.at_once'], max_attempts => 3)});
sql(q{SELECT outbox.emit('t.at_once', '{}')});
ok(wait_count('/at_once', 3), 'an attempt and two retries due at once arrived under a 1 h poll interval');
my @z = times_at('/at_once');
ok($z[2] - $z[0] <= 2 * $slack, sprintf('the two retries came within %.3f s of the first attempt', $z[2] - $z[0]));

# 6. A full round that fails (its lock on outbox.retries timed out) is
# tried again a second later, not at the next poll: a retry due 2 s after
# its attempt, while another session holds the table for 3 s, is sent
# soon after the lock goes.
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{ALTER SYSTEM SET outbox.retry_schedule = '2s'; SELECT pg_reload_conf()});
log_wait(qr/outbox relay reloaded its configuration/, $offset) or die 'no reload';
sql(qq{SELECT outbox.create_endpoint('locked_out', '$url/locked_out?status=500', ARRAY['t.locked_out'],
       max_attempts => 2)});
sql(q{SELECT outbox.emit('t.locked_out', '{}')});
ok(wait_count('/locked_out', 1), 'the failing attempt arrived');
ok($node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM outbox.retries r JOIN outbox.endpoints e ON e.id = r.endpoint_id
 WHERE e.name = 'locked_out'}), 'its retry is recorded');
# (the holder prints when its commit released the lock, last)
my $held_out = '';
my $holder = IPC::Run::start([ 'psql', '-X', '-q', '-At', '-d', $node->connstr('postgres'),
	'-c', 'BEGIN', '-c', 'LOCK TABLE outbox.retries IN ACCESS EXCLUSIVE MODE', '-c', 'SELECT pg_sleep(3)',
	'-c', 'COMMIT', '-c', 'SELECT extract(epoch FROM clock_timestamp())' ], '>', \$held_out);
ok($node->poll_query_until('postgres', q{
SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'outbox.retries'::regclass
                 AND mode = 'AccessExclusiveLock' AND granted)}), 'another session holds outbox.retries');
$holder->finish;
my ($released) = $held_out =~ /([0-9.]+)\s*$/ or die "the lock's holder said: $held_out";
my $sent = 0;
for (my $i = 0; $i < 150 && !$sent; $i++)
{
	$sent = scalar(times_at('/locked_out')) >= 2;
	usleep(100_000) unless $sent;
}
ok($sent, 'the retry was sent under a 1 h poll interval');
my (undef, $retried) = times_at('/locked_out');
# The retry, due 1.6 to 2.4 s after the attempt, came due under the lock;
# it goes after the release: in the round waiting then, or in the next, a
# second after a failed one (a step of another kind may wait out its own
# lock first).
ok(defined $retried && $retried > $released - 0.02 && $retried - $released <= 3,
	defined $retried ? sprintf('it came %.3f s after the lock\'s release (a failed round is tried again after 1 s)',
		$retried - $released) : 'it came after the lock\'s release');

$node->stop;
$receiver->kill_kill;
done_testing();
