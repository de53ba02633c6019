# Slots (issue 11): an endpoint's max_in_flight is never exceeded, counted
# at the receiver; endpoint_status.in_flight shows what is in flight now;
# endpoints whose requests hang hold no more than a fair share of a small
# pool, so a healthy endpoint on another host still gets its events at once.
use strict;
use warnings;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FindBin;
use lib $FindBin::RealBin;
use OutboxTest qw(:all);

my $node = outbox_node('slots', conf => q{
outbox.allowed_networks = '127.0.0.0/8'
outbox.max_concurrency = 6
});
my ($ok_url, $ok_log) = start_receiver('127.0.0.1');
my ($hang_url, $hang_log) = start_receiver('127.0.0.2');
my $release = PostgreSQL::Test::Utils::tempdir() . '/release';
ok(wait_for_relay(), 'relay running');

# max_in_flight, at the receiver: 30 events that each take 0.3 s, to an
# endpoint that may have 2 in flight (its fair share of the 6 slots would be 3).
sql(q{SELECT outbox.create_endpoint('capped', } . lit("$ok_url/capped?delay=0.3")
	  . q{, event_types => '{cap.*}', max_in_flight => 2)});
my @ids = split /\n/, sql(q{
SELECT outbox.emit('cap.one', jsonb_build_object('n', n)) FROM generate_series(1, 30) n});
ok(wait_received($ok_log, got_all('/capped', @ids)), 'capped endpoint got all 30 events');
my ($most) = sort { $b <=> $a } map { $_->{concurrent} }
  grep { $_->{path} eq '/capped' } received($ok_log);
is($most, 2, 'at most max_in_flight = 2 requests at the receiver at once, and that many');
is(sql(q{SELECT max_in_flight FROM outbox.endpoint_status WHERE name = 'capped'}),
	'2', 'endpoint_status shows its max_in_flight');

# Two endpoints whose requests hang (until $release exists) on 127.0.0.2,
# with plenty waiting: they may not take all 6 slots.
for my $i (1, 2)
{
	sql(qq{SELECT outbox.create_endpoint('hang$i', } . lit("$hang_url/h$i?hold=$release")
		  . q{, event_types => '{hang.*}', timeout => '5 minutes')});
}
sql(q{SELECT count(outbox.emit('hang.one', jsonb_build_object('n', n))) FROM generate_series(1, 20) n});
ok( $node->poll_query_until('postgres', q{
SELECT bool_and(in_flight > 0) FROM outbox.endpoint_status WHERE name LIKE 'hang_'}),
	'endpoint_status shows the hanging requests in flight');
my $hanging = sql(q{SELECT sum(in_flight) FROM outbox.endpoint_status WHERE name LIKE 'hang_'});
cmp_ok($hanging, '<', 6, "hanging endpoints hold $hanging of the 6 slots, not all");
is( sql(q{SELECT coalesce(sum(in_flight), 0) FROM outbox._in_flight()}),
	$hanging, '_in_flight() counts the same requests');

# A healthy endpoint on 127.0.0.1 gets its events within seconds: the
# hanging requests time out only after 5 minutes.
sql(q{SELECT outbox.create_endpoint('healthy', } . lit("$ok_url/healthy")
	  . q{, event_types => '{ok.*}')});
my $start = time();
@ids = split /\n/, sql(q{
SELECT outbox.emit('ok.one', jsonb_build_object('n', n)) FROM generate_series(1, 10) n});
ok(wait_received($ok_log, got_all('/healthy', @ids)), 'healthy endpoint got its 10 events');
my $took = time() - $start;
cmp_ok($took, '<', 15, sprintf('... within seconds (%.1f s) beside the hanging ones', $took));
is( sql(q{SELECT sum(in_flight) FROM outbox.endpoint_status WHERE name LIKE 'hang_'}),
	$hanging, 'the hanging requests are still in flight');

# Released, the hanging endpoints deliver everything, and nothing is in
# flight any more.
open(my $fh, '>', $release) or die "cannot create $release: $!";
close $fh;
ok( $node->poll_query_until('postgres', q{
SELECT count(*) = 40 FROM outbox.attempts WHERE endpoint LIKE 'hang_' AND status = 200}),
	'released, the hanging endpoints got all 20 events each');
ok( $node->poll_query_until('postgres', q{
SELECT sum(in_flight) = 0 FROM outbox.endpoint_status}),
	'endpoint_status: nothing in flight once all is answered');

$node->stop;
done_testing();
