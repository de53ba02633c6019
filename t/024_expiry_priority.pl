# Issue 14 (items 2 and 3), outbox 1.5: expiry and priority, against the
# test receiver.
#
# Part 1: an event past its expires_at is never sent: one emitted already
# expired, and one that fails (503) until it expires, whose retries stop
# at its expires_at.  Both show 'expired' in outbox.attempts; an event that
# has not expired is delivered.
# Part 2: an endpoint's max_age: events that waited longer than it behind a
# request held open (max_in_flight 1) are never sent, show 'expired', are
# counted in endpoint_status, and are not left waiting (the position moved
# past them); a fresh event is delivered.
# Part 3: priority.  Two endpoints with max_in_flight 1 each hold one
# request open while fifteen events of mixed priorities are emitted; once
# it is answered, the endpoint that is not ordered receives them highest
# priority first (equal priorities in emit order), and the ordered one
# keeps each key's order: an urgent event takes the earlier events of its
# key ahead with it, and goes before less urgent keys.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use JSON::PP;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = outbox_node('expiry_priority', conf => q{
outbox.retry_schedule = '300ms'
});
my ($url, $log, $receiver) = start_receiver();
wait_for_relay() or die 'relay did not start';

# Requests received on /$path, in the order received, each with its
# event's data decoded as {data}.
sub reqs
{
	my ($path) = @_;
	my @r = sort { $a->{t} <=> $b->{t} } grep { $_->{path} eq "/$path" } received($log);
	$_->{data} = decode_json($_->{body})->{data} for @r;
	return @r;
}

# Expired attempts of an endpoint, as outbox.attempts shows them.
sub expired_at
{
	my ($endpoint) = @_;
	return sql("SELECT count(*) FROM outbox.attempts WHERE endpoint = '$endpoint' AND error = 'expired'"
		  . " AND status IS NULL");
}

############################################################################
# Part 1: expires_at.
############################################################################

# Attempts enough that the failing event expires before it could be a dead
# letter: retries every 300 ms give eight (the default) in 2.1 s, and a
# relay that retries on time can fit them before its expires_at.
sql("SELECT outbox.create_endpoint('exp', '$url/exp', '{exp.*}', max_attempts => 100)");
my $past = sql(q{SELECT outbox.emit('exp.past', '{"n": "past"}', expires_at => now() - interval '1 second')});
my $fresh = sql(q{SELECT outbox.emit('exp.fresh', '{"n": "fresh"}', expires_at => now() + interval '1 hour')});
my ($failing, $failing_until) = split /\|/, sql(q{
SELECT outbox.emit('exp.failing', '{"n": "failing"}', headers => '{"x-test-status": "503"}',
                   expires_at => now() + interval '2 seconds'),
       extract(epoch FROM now() + interval '2 seconds')});

ok(wait_received($log, got_all('/exp', $fresh)), 'an event not expired is delivered');
ok($node->poll_query_until('postgres', "SELECT count(*) = 2 FROM outbox.attempts WHERE endpoint = 'exp' AND error = 'expired'"),
	'the event emitted expired and the failing one are recorded expired');
is(attempts($past, 'exp'), '1:-', 'the expired event has one attempt row, with no status');
my @failing = grep { $_->{headers}{'webhook-id'} eq $failing } reqs('exp');
cmp_ok(scalar(@failing), '>=', 2, 'the failing event was tried and retried before it expired');
ok(!grep({ $_->{t} >= $failing_until } @failing), 'no attempt of it after its expires_at');
like(attempts($failing, 'exp'), qr/^(\d+:503,)+\d+:-$/, 'its 503s, then expired');
ok(!ids_at('/exp', received($log))->{$past}, 'the event emitted expired was never sent');
is( sql("SELECT count(*) FROM outbox.retries"), '0', 'nothing is left to retry');
is( sql("SELECT events_waiting || ',' || expired || ',' || in_retry FROM outbox.endpoint_status WHERE name = 'exp'"),
	'0,2,0', 'endpoint_status: nothing waiting, 2 expired');

############################################################################
# Part 2: max_age.
############################################################################

my $hold_age = "$PostgreSQL::Test::Utils::tmp_check/hold_age";
sql("SELECT outbox.create_endpoint('aged', '$url/aged', '{aged.*}', max_in_flight => 1, max_age => '2 seconds')");
sql("SELECT outbox.emit('aged.block', '{}', headers => " . lit(encode_json({ 'x-test-hold' => $hold_age })) . ")");
$node->poll_query_until('postgres', "SELECT in_flight = 1 FROM outbox.endpoint_status WHERE name = 'aged'")
  or die 'the blocking request did not go';
my @aged = split /\n/, sql(q{SELECT outbox.emit('aged.x', jsonb_build_object('n', n)) FROM generate_series(1, 3) n});
# Past their max_age while the endpoint's one request is held.
$node->poll_query_until('postgres',
	"SELECT now() > max(created_at) + interval '2.2 seconds' FROM outbox.events WHERE event_type = 'aged.x'")
  or die 'time does not pass';
open(my $fh, '>', $hold_age) or die $!;
close $fh;
ok($node->poll_query_until('postgres', "SELECT count(*) = 3 FROM outbox.attempts WHERE endpoint = 'aged' AND error = 'expired'"),
	'events older than max_age are recorded expired');
my $fresh_aged = sql(q{SELECT outbox.emit('aged.x', '{"n": "fresh"}')});
ok(wait_received($log, got_all('/aged', $fresh_aged)), 'a fresh event is delivered');
my $got_aged = ids_at('/aged', received($log));
ok(!grep({ $got_aged->{$_} } @aged), 'none of the aged events was sent');
is(sql("SELECT events_waiting || ',' || expired FROM outbox.endpoint_status WHERE name = 'aged'"),
	'0,3', 'endpoint_status counts them; none is left waiting');
is(expired_at('aged'), '3', 'outbox.attempts shows them expired');

############################################################################
# Part 3: priority.
############################################################################

my $hold_prio = "$PostgreSQL::Test::Utils::tmp_check/hold_prio";
sql("SELECT outbox.create_endpoint('prio', '$url/prio', '{prio.*,block.*}', max_in_flight => 1)");
sql("SELECT outbox.create_endpoint('ord', '$url/ord', '{ord.*,block.*}', max_in_flight => 1, ordered => true)");
sql("SELECT outbox.emit('block.x', '{}', headers => " . lit(encode_json({ 'x-test-hold' => $hold_prio })) . ")");
$node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM outbox.endpoint_status WHERE name IN ('prio', 'ord') AND in_flight = 1")
  or die 'the blocking requests did not go';

# Not ordered: ten events, priorities as listed, in one transaction.
my @prio = (0, 5, 0, 9, 0, -1, 5, 0, 9, 0);
# Ordered: [key, priority]; key "a" has an urgent event behind one of 0.
my @ord = ([ 'a', 0 ], [ 'b', 5 ], [ 'a', 9 ], [ 'c', 0 ], [ 'a', 0 ], [ 'b', 0 ]);
sql(join("\n", 'BEGIN;',
	(map { "SELECT outbox.emit('prio.x', '{\"n\": $_}', priority => $prio[$_]);" } 0 .. $#prio),
	(map { "SELECT outbox.emit('ord.x', '{\"n\": $_}', key => '$ord[$_][0]', priority => $ord[$_][1]);" } 0 .. $#ord),
	'COMMIT;'));
open($fh, '>', $hold_prio) or die $!;
close $fh;

ok(wait_received($log, sub { (grep { $_->{path} eq '/prio' } @_) >= 1 + @prio }), 'every prioritised event arrived');
my @order = map { $_->{data}{n} } grep { ref $_->{data} eq 'HASH' && exists $_->{data}{n} } reqs('prio');
my @want = sort { $prio[$b] <=> $prio[$a] || $a <=> $b } 0 .. $#prio;
is("@order", "@want", 'higher priority first, equal priorities in emit order');

ok(wait_received($log, sub { (grep { $_->{path} eq '/ord' } @_) >= 1 + @ord }), 'every ordered event arrived');
my @ord_order = map { $_->{data}{n} } grep { ref $_->{data} eq 'HASH' && exists $_->{data}{n} } reqs('ord');
# a0 goes with a2 (9), then b1 (5), then the rest in emit order.
is("@ord_order", '0 2 1 3 4 5', 'ordered: the urgent key first, each key in emit order');
for my $key ('a', 'b')
{
	my @k = grep { $ord[$_][0] eq $key } @ord_order;
	is("@k", join(' ', grep { $ord[$_][0] eq $key } 0 .. $#ord), "key $key kept its order");
}
is(sql("SELECT count(*) FROM outbox.attempts WHERE endpoint IN ('prio', 'ord') AND status = 200"),
	2 + @prio + @ord, 'each delivered once');

############################################################################
# Part 4: priority across a backlog of many pages.
############################################################################

# Pages of 10 events; two endpoints paused while 60 events of priority 0
# and then 3 of priority 5 are emitted.  Once resumed, each reads its
# backlog page by page, and the urgent events, sent ahead of their page,
# arrive among the first pages' deliveries instead of last.  "flaky" fails
# each urgent event once: its retry is the only other copy (the page that
# comes to it passes it over).
ok(reload_with('outbox.batch_size' => '10'), 'pages of 10 events');
my %urgent;
for my $ep (qw(back flaky))
{
	sql("SELECT outbox.create_endpoint('$ep', '$url/$ep', '{$ep.*}', max_in_flight => 2)");
	sql("SELECT outbox.pause_endpoint('$ep')");
	sql(qq{SELECT count(outbox.emit('$ep.low', jsonb_build_object('n', n))) FROM generate_series(1, 60) n});
	my $fail = $ep eq 'flaky' ? q{, headers => '{"x-test-status": "500", "x-test-fail_first": "1"}'} : '';
	$urgent{$ep} = [ split /\n/, sql(qq{
SELECT outbox.emit('$ep.high', jsonb_build_object('n', 'h' || n), priority => 5$fail)
  FROM generate_series(1, 3) n}) ];
}
sql("SELECT outbox.resume_endpoint('$_')") for qw(back flaky);
for my $ep (qw(back flaky))
{
	my $n = $ep eq 'flaky' ? 66 : 63;
	ok(wait_received($log, sub { (grep { $_->{path} eq "/$ep" } @_) >= $n }), "$ep: the backlog arrived");
	my @r = reqs($ep);
	my @at = grep { $r[$_]{data}{n} =~ /^h/ } 0 .. $#r;
	diag("$ep: the urgent events' requests were number " . join(', ', map { $_ + 1 } @at) . ' of ' . scalar(@r));
	cmp_ok($at[2], '<', 30, "$ep: the urgent events went ahead of the backlog's later pages");
}
ok( $node->poll_query_until('postgres', q{
SELECT bool_and(events_waiting = 0 AND in_retry = 0) FROM outbox.endpoint_status WHERE name IN ('back', 'flaky')}),
	'nothing left waiting or in retry');
for my $ep (qw(back flaky))
{
	my %n;
	$n{ $_->{headers}{'webhook-id'} }++ for reqs($ep);
	my %u = map { $_ => 1 } @{ $urgent{$ep} };
	is(scalar(keys %n), 63, "$ep: all 63 events arrived");
	is(join(',', map { $n{$_} // 0 } @{ $urgent{$ep} }), $ep eq 'flaky' ? '2,2,2' : '1,1,1',
		"$ep: each urgent event " . ($ep eq 'flaky' ? 'twice (failed once, then its retry)' : 'once'));
	is(scalar(grep { !$u{$_} && $n{$_} != 1 } keys %n), 0, "$ep: every other event once");
}
is(sql(q{SELECT count(*) FROM outbox.attempts WHERE endpoint = 'flaky' AND status = 500}), '3',
	'flaky: three failed attempts, one per urgent event');

done_testing();
