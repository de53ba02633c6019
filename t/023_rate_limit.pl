# Rate limits (issue 14, item 1): an endpoint with rate_limit gets at most
# that many requests a second at the receiver, over every window, while an
# endpoint beside it without one is not slowed; what waits uses no attempt;
# endpoint_status shows the endpoint held.  A 429 with Retry-After pauses
# the whole endpoint for about that long, not only the event answered so,
# and the others go on meanwhile; the relay does not spin while it waits.
# The poll interval is long (5 s): sending on time depends on the relay
# waking for the limit, not on the poll timer.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest qw(:all);

my $node = outbox_node('rate_limit', conf => q{
outbox.poll_interval = '5s'
outbox.retry_schedule = '100ms'
});
my ($url, $log) = start_receiver();
ok(wait_for_relay(), 'relay running');

# Arrival times (receiver's clock) of the requests at a path, sorted.
sub arrivals
{
	my ($path) = @_;
	return sort { $a <=> $b } map { $_->{t} } grep { $_->{path} eq $path } received($log);
}

# The most arrivals in any window of $secs seconds (one starting at each).
sub most_in_window
{
	my ($secs, @t) = @_;
	my ($most, $j) = (0, 0);
	for my $i (0 .. $#t)
	{
		$j++ while $j <= $#t && $t[$j] < $t[$i] + $secs;
		$most = $j - $i if $j - $i > $most;
	}
	return $most;
}

# The relay's CPU time so far, in seconds (utime + stime of /proc/PID/stat).
sub relay_cpu
{
	my $pid = relay_pid();
	open(my $fh, '<', "/proc/$pid/stat") or return undef;
	my @f = split / /, (split /\) /, <$fh>)[1];
	close $fh;
	return ($f[11] + $f[12]) / 100.0;
}

sql(q{SELECT outbox.create_endpoint('limited', } . lit("$url/limited")
	  . q{, event_types => '{lim.*}', rate_limit => 20)});
sql(q{SELECT outbox.create_endpoint('free', } . lit("$url/free")
	  . q{, event_types => '{free.*}')});
is( sql(q{SELECT rate_limit FROM outbox.endpoint_status WHERE name = 'limited'}),
	'20', 'endpoint_status shows the limit');

# 100 events to the limited endpoint (about 5 s at 20 a second) and, in
# the same transaction, 200 to the free one.
my $start = time();
my @lim = split /\n/, sql(q{
SELECT outbox.emit(CASE WHEN n <= 100 THEN 'lim.one' ELSE 'free.one' END,
                   jsonb_build_object('n', n))
  FROM generate_series(1, 300) n ORDER BY n});
my @free = splice(@lim, 100);
ok( $node->poll_query_until('postgres', q{
SELECT rate_limited FROM outbox.endpoint_status WHERE name = 'limited'}),
	'endpoint_status: the limited endpoint is held by its limit');
ok(wait_received($log, got_all('/free', @free)), 'the free endpoint got its 200 events');
my $free_took = (arrivals('/free'))[-1] - $start;
my $lim_by_then = grep { $_ <= $start + $free_took } arrivals('/limited');
cmp_ok($free_took, '<', 2.5,
	sprintf('... within %.1f s, not slowed by the limited one', $free_took));
cmp_ok($lim_by_then, '<', 60,
	"... while the limited one had only $lim_by_then of its 100");
is(sql(q{SELECT rate_limited FROM outbox.endpoint_status WHERE name = 'free'}),
	'f', 'endpoint_status: the free endpoint is not held');

ok(wait_received($log, got_all('/limited', @lim)), 'the limited endpoint got its 100 events');
my @t = arrivals('/limited');
my $span = $t[-1] - $t[0];
# The bucket lets at most its burst (2) + 20 a second through; the
# receiver's clock may see them a little closer than they were sent.
my $most1 = most_in_window(1, @t);
my $most2 = most_in_window(2, @t);
cmp_ok($most1, '<=', 26, "at most 20 a second (+ burst 2, + 4 for jitter) in any 1 s window: $most1");
cmp_ok($most2, '<=', 46, "at most 40 (+ 2 + 4) in any 2 s window: $most2");
cmp_ok($span, '>=', 4.5, sprintf('100 events took %.1f s: about 5 at 20 a second', $span));
cmp_ok($span, '<', 7.5, '... and not much longer: the relay wakes for the limit, not the 5 s poll');
is( sql(q{SELECT count(*) FROM outbox.attempts WHERE endpoint = 'limited' AND (attempt <> 1 OR status <> 200)}),
	'0', 'what waited for the limit was sent once, as a first attempt');
ok( $node->poll_query_until('postgres', q{
SELECT NOT rate_limited FROM outbox.endpoint_status WHERE name = 'limited'}),
	'endpoint_status: not held once nothing waits');

# A limit of one every two seconds holds 10 events for 18 s; taken away
# (alter_endpoint, rate_limit => 0), the rest go at once.
sql(q{SELECT outbox.alter_endpoint('limited', rate_limit => 0.5)});
ok( $node->poll_query_until('postgres', q{
SELECT rate_limit = 0.5 FROM outbox.endpoint_status WHERE name = 'limited'}),
	'alter_endpoint sets a limit of 0.5');
my $before = () = arrivals('/limited');
my @slow = split /\n/, sql(q{
SELECT outbox.emit('lim.two', jsonb_build_object('n', n)) FROM generate_series(1, 10) n ORDER BY n});
ok( $node->poll_query_until('postgres', q{
SELECT rate_limited FROM outbox.endpoint_status WHERE name = 'limited'}),
	'held at 0.5 a second');
my $held_got = () = arrivals('/limited');
cmp_ok($held_got - $before, '<=', 2, 'one or two of the 10 went before it was held');
my $cleared = time();
sql(q{SELECT outbox.alter_endpoint('limited', rate_limit => 0)});
ok(wait_received($log, got_all('/limited', @slow)), 'limit taken away: the other events went');
my $clear_took = (arrivals('/limited'))[-1] - $cleared;
cmp_ok($clear_took, '<', 1.5, sprintf('... within %.1f s, not at one every two seconds', $clear_took));

# A 429 with Retry-After: 3 to the first of 6 events pauses the endpoint
# for 3 s: the other 5 (emitted after it) wait that long too, though the
# retry schedule is 100 ms; the free endpoint gets its events meanwhile.
sql(q{SELECT outbox.create_endpoint('pausing', } . lit("$url/pausing")
	  . q{, event_types => '{pause.*}')});
my $first = sql(q{SELECT outbox.emit('pause.first', '{}',
                  headers => '{"x-test-status": "429", "x-test-fail_first": "1", "x-test-retry_after": "3"}')});
ok( wait_received($log, sub { grep { $_->{path} eq '/pausing' && $_->{status} == 429 } @_ }),
	'the receiver answered 429 with Retry-After: 3');
my ($t429) = map { $_->{t} } grep { $_->{path} eq '/pausing' && $_->{status} == 429 } received($log);
my @rest = split /\n/, sql(q{
SELECT outbox.emit('pause.next', jsonb_build_object('n', n)) FROM generate_series(1, 5) n ORDER BY n});
ok( $node->poll_query_until('postgres', q{
SELECT rate_limited FROM outbox.endpoint_status WHERE name = 'pausing'}),
	'endpoint_status: the paused endpoint is held');
my $cpu_before = relay_cpu();
my $free_start = time();
my @free2 = split /\n/, sql(q{
SELECT outbox.emit('free.two', jsonb_build_object('n', n)) FROM generate_series(1, 20) n ORDER BY n});
ok(wait_received($log, got_all('/free', @free2)), 'the free endpoint got 20 more during the pause');
my $free2_took = (arrivals('/free'))[-1] - $free_start;
cmp_ok($free2_took, '<', 1.5, sprintf('... within %.1f s', $free2_took));
ok(wait_received($log, got_all('/pausing', @rest, $first)), 'the paused endpoint got all 6 events after all');
my $cpu = relay_cpu() - $cpu_before;
my %rest = map { $_ => 1 } @rest;
my @after = grep { $_->{path} eq '/pausing' && $rest{ $_->{headers}{'webhook-id'} } } received($log);
my ($earliest) = sort { $a <=> $b } map { $_->{t} - $t429 }
  grep { $_->{path} eq '/pausing' && $_->{status} != 429 } received($log);
my ($latest) = sort { $b <=> $a } map { $_->{t} - $t429 } @after;
is(scalar(@after), 5, 'the 5 events held by the pause arrived once each');
cmp_ok($earliest, '>=', 2.9, sprintf('nothing reached the endpoint before the 3 s were over (first after %.2f s)', $earliest));
cmp_ok($latest, '<', 5, sprintf('... and all soon after (last after %.2f s)', $latest));
cmp_ok($cpu, '<', 0.5, sprintf('the relay used %.2f s of CPU over the pause: it waits, it does not spin', $cpu));
is( sql(q{SELECT string_agg(DISTINCT attempt::text, ',') FROM outbox.attempts WHERE endpoint = 'pausing' AND event_type = 'pause.next'}),
	'1', 'the events held by the pause were each sent once, as first attempts');
ok( $node->poll_query_until('postgres', qq{
SELECT string_agg(attempt || ':' || status, ',' ORDER BY attempt) FROM outbox.attempts
 WHERE event_id = '$first'}, '1:429,2:200'),
	'the event answered 429 was retried once, after the pause');

# A pause ends early when the endpoint is resumed (or changed): a 503 with
# Retry-After: 600 holds the 3 events after it only until resume_endpoint().
my $long = sql(q{SELECT outbox.emit('pause.first', '{}',
                 headers => '{"x-test-status": "503", "x-test-fail_first": "1", "x-test-retry_after": "600"}')});
ok( wait_received($log, sub { grep { $_->{path} eq '/pausing' && $_->{status} == 503 } @_ }),
	'the receiver answered 503 with Retry-After: 600');
my @more = split /\n/, sql(q{
SELECT outbox.emit('pause.next', jsonb_build_object('n', n)) FROM generate_series(1, 3) n ORDER BY n});
ok( $node->poll_query_until('postgres', q{
SELECT rate_limited FROM outbox.endpoint_status WHERE name = 'pausing'}),
	'endpoint_status: held for the Retry-After of 600 s');
my $resumed = time();
sql(q{SELECT outbox.resume_endpoint('pausing')});
ok(wait_received($log, got_all('/pausing', @more)), 'resumed: the 3 events went');
my $resume_took = (arrivals('/pausing'))[-1] - $resumed;
cmp_ok($resume_took, '<', 2, sprintf('... within %.1f s of resume_endpoint(), not 600', $resume_took));

$node->stop;
done_testing();
