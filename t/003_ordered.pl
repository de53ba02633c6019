# Per-key order on ordered endpoints, under failures: the next event of a
# key is sent only once the previous one was delivered or dead-lettered,
# while other keys go on.  On an endpoint that is not ordered, nothing
# waits for anything.
#
# The receiver decides how to answer per path and per webhook-id (see
# t/webhook_receiver.py); every check reads the receiver's log (its clock)
# and outbox.attempts / outbox.dead_letters.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use JSON::PP;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;

# Small pages, so that a key's events are spread over several pages and
# batches: ordering must hold across them, not only within one.
my $node = outbox_node('ordered', conf => qq{
outbox.retry_schedule = '200ms'
outbox.batch_size = 3
});
my ($url, $log, $receiver) = start_receiver();

# Requests on /$path (and, if given, from the endpoint whose x-endpoint
# header is $from), each with its event's data decoded as {data}.
sub reqs
{
	my ($path, $from) = @_;
	my @r = grep {
		$_->{path} eq "/$path"
		  && (!defined $from || ($_->{headers}{'x-endpoint'} // '') eq $from)
	} received($log);
	$_->{data} = decode_json($_->{body})->{data} for @r;
	return @r;
}

# Distinct webhook-ids answered 200 on /$path.
sub delivered_ids
{
	my %ok = map { $_->{headers}{'webhook-id'} => 1 } grep { $_->{status} == 200 } @_;
	return scalar(keys %ok);
}

# Emit events in one transaction: each [type, key, seq]; returns their ids.
sub emit_all
{
	my $sql = join("\n",
		'BEGIN;',
		(map { "SELECT outbox.emit('$_->[0]', '{\"key\": \"$_->[1]\", \"seq\": $_->[2]}', key => '$_->[1]');" } @_),
		'COMMIT;');
	return split /\n/, sql($sql);
}

# Check per key, over the requests @r of one endpoint, that events were
# attempted strictly one after another in seq order: every attempt of
# event n+1 comes after the last attempt of event n (its delivery or its
# last failure before the dead letter).  Returns per key the seq of the
# events in the order of their first attempt.
sub check_one_at_a_time
{
	my ($what, @r) = @_;
	my %by_key;
	push @{ $by_key{ $_->{data}{key} }{ $_->{data}{seq} } }, $_ for @r;
	for my $key (sort keys %by_key)
	{
		my $ev = $by_key{$key};
		my @seqs = sort { $a <=> $b } keys %$ev;
		for my $i (1 .. $#seqs)
		{
			my ($prev, $cur) = ($ev->{ $seqs[ $i - 1 ] }, $ev->{ $seqs[$i] });
			my $prev_last = (sort { $b <=> $a } map { $_->{t} } @$prev)[0];
			my $cur_first = (sort { $a <=> $b } map { $_->{t} } @$cur)[0];
			ok($cur_first > $prev_last,
				"$what: $key event $seqs[$i] first sent after event $seqs[$i-1] was settled");
		}
	}
}

wait_for_relay() or die 'relay did not start';

# ord: ordered; every event's first attempt fails (500), its retry succeeds.
sql("SELECT outbox.create_endpoint('ord', '$url/ord?status=500&fail_first=1', '{ord}', ordered => true)");
# unord: not ordered; every event's first attempt fails (500), its retry,
# 200 ms later, succeeds.  With batch_size 3 its fourth event is read once
# the first three are answered, well before their retries.  (Not a 503 with
# Retry-After: that pauses the whole endpoint, and the fourth event would
# go out when the pause ends, beside the retries that come due then too.)
sql("SELECT outbox.create_endpoint('unord', '$url/unord?status=500&fail_first=1', '{unord}')");
# mix: ordered, two attempts at most, on a path that fails the first two
# requests of each webhook-id (503, Retry-After: 2).  Its "cold" events
# become dead letters.  Its "warm" events were sent twice to the same path
# by the helper endpoint "warm" beforehand, so mix's own first attempt
# succeeds.  mix is paused until warm has done that.
my $mix_url = "$url/mix?status=503&retry_after=2&fail_first=2";
sql(qq{
SELECT outbox.create_endpoint('mix', '$mix_url', '{mix.*}', ordered => true, max_attempts => 2,
                              headers => '{"x-endpoint": "mix"}');
SELECT outbox.pause_endpoint('mix');
SELECT outbox.create_endpoint('warm', '$mix_url', '{mix.warm}', max_attempts => 2,
                              headers => '{"x-endpoint": "warm"}');
});

############################################################################
# Emit.
############################################################################

# mix: m1 is cold, warm, cold, warm; m2 is warm, cold, warm.
my @mix = (
	[ 'mix.cold', 'm1', 1 ], [ 'mix.warm', 'm2', 1 ], [ 'mix.warm', 'm1', 2 ],
	[ 'mix.cold', 'm2', 2 ], [ 'mix.cold', 'm1', 3 ], [ 'mix.warm', 'm2', 3 ],
	[ 'mix.warm', 'm1', 4 ]);
my @mix_ids = emit_all(@mix);
my %mix_id = map { ("$mix[$_][1]#$mix[$_][2]" => $mix_ids[$_]) } 0 .. $#mix;

# unord: two keys, two events each.
my @unord_ids = emit_all([ 'unord', 'u1', 1 ], [ 'unord', 'u2', 1 ], [ 'unord', 'u1', 2 ], [ 'unord', 'u2', 2 ]);

# ord: keys k1..k5 interleaved, four events each, in two transactions.
# The second commits once the first events failed, so its events find
# their keys waiting in outbox.retries.
my @keys = map { "k$_" } 1 .. 5;
my @ord_ids = emit_all(map { my $n = $_; map { [ 'ord', $_, $n ] } @keys } 1, 2);
ok(wait_received($log, sub { grep { $_->{path} eq '/ord' && $_->{status} == 500 } @_ }),
	'ord: first attempts failed');
push @ord_ids, emit_all(map { my $n = $_; map { [ 'ord', $_, $n ] } @keys } 3, 4);

############################################################################
# ord: per-key order under failures.
############################################################################

ok(wait_received($log, sub { delivered_ids(grep { $_->{path} eq '/ord' } @_) == 20 }),
	'ord: all 20 events delivered');
my @ord = reqs('ord');
for my $key (@keys)
{
	my @firsts;
	my %seen;
	for my $r (sort { $a->{t} <=> $b->{t} } grep { $_->{data}{key} eq $key && $_->{status} == 200 } @ord)
	{
		push @firsts, $r->{data}{seq} unless $seen{ $r->{data}{seq} }++;
	}
	is(join(',', @firsts), '1,2,3,4', "ord: $key delivered in emit order");
}
check_one_at_a_time('ord', @ord);
is(join(' ', map { attempts($_, 'ord') } @ord_ids), join(' ', ('1:500,2:200') x 20),
	'ord: each event failed once, then was delivered (never sent while waiting)');
# The first events of all keys were sent before any key's first retry:
# one failing key does not hold back the others.
{
	my @first = grep { $_->{data}{seq} == 1 } @ord;
	my $last_first_attempt = (sort { $b <=> $a } map { $_->{t} } grep { $_->{status} == 500 } @first)[0];
	my $first_success = (sort { $a <=> $b } map { $_->{t} } grep { $_->{status} == 200 } @first)[0];
	ok($last_first_attempt < $first_success, 'ord: keys were tried side by side');
}

############################################################################
# unord: without ordered, a later event of a key does not wait.
############################################################################

ok(wait_received($log, sub { delivered_ids(grep { $_->{path} eq '/unord' } @_) == 4 }),
	'unord: all 4 events delivered');
my @unord = reqs('unord');
for my $key (qw(u1 u2))
{
	my ($first_ok) = sort { $a <=> $b } map { $_->{t} }
	  grep { $_->{data}{key} eq $key && $_->{data}{seq} == 1 && $_->{status} == 200 } @unord;
	my ($second_try) = sort { $a <=> $b } map { $_->{t} }
	  grep { $_->{data}{key} eq $key && $_->{data}{seq} == 2 } @unord;
	ok($second_try < $first_ok,
		"unord: $key event 2 was sent while event 1 was still failing");
}

############################################################################
# mix: a dead letter unblocks the next event of its key.
############################################################################

# warm has sent each warm event twice (two 503s: a dead letter there).
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 4 AND bool_and(attempts = 2) FROM outbox.dead_letters WHERE endpoint = 'warm'"),
	'warm: the warm events were sent twice');
is(scalar(reqs('mix', 'mix')), 0, 'mix: nothing sent while paused');
sql("SELECT outbox.resume_endpoint('mix')");

ok($node->poll_query_until('postgres',
	"SELECT count(*) = 3 FROM outbox.dead_letters WHERE endpoint = 'mix'"),
	'mix: the three cold events are dead letters');
ok(wait_received($log,
	sub { delivered_ids(grep { $_->{path} eq '/mix' && $_->{headers}{'x-endpoint'} eq 'mix' } @_) == 4 }),
	'mix: the four warm events were delivered');
is(sql("SELECT string_agg(key || '#' || (payload->>'seq') || ':' || attempts || ':' || last_status, ' ' ORDER BY key, payload->>'seq')
          FROM outbox.dead_letters WHERE endpoint = 'mix'"),
	'm1#1:2:503 m1#3:2:503 m2#2:2:503', 'mix: dead after two attempts each');
is(join(' ', map { attempts($mix_id{$_}, 'mix') } 'm1#2', 'm1#4', 'm2#1', 'm2#3'),
	'1:200 1:200 1:200 1:200', 'mix: each warm event delivered at its first attempt');
my @mixr = reqs('mix', 'mix');
check_one_at_a_time('mix', @mixr);
# m2 began with a warm event: it was delivered while m1's first event was
# still failing (its second attempt came 2 s after its first).
{
	my ($m2_ok) = map { $_->{t} } grep { $_->{headers}{'webhook-id'} eq $mix_id{'m2#1'} } @mixr;
	my ($m1_last) = sort { $b <=> $a } map { $_->{t} } grep { $_->{headers}{'webhook-id'} eq $mix_id{'m1#1'} } @mixr;
	ok($m2_ok < $m1_last, 'mix: m2 was not held back by m1');
}

# Nothing was sent more often than counted above.
is(scalar(reqs('ord')), 40, 'ord: 40 requests in all');
is(scalar(@mixr), 3 * 2 + 4, 'mix: 10 requests in all');

$node->stop;
$receiver->kill_kill;
done_testing();
