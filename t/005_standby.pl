# A streaming standby runs no relay and delivers nothing; once promoted, it
# delivers what the primary emitted but had not delivered, and nothing the
# primary had delivered already.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = outbox_node('primary', init => { allows_streaming => 1 });
my ($url, $log, $receiver) = start_receiver();

# 'live' is delivered by the primary; 'held' is paused there, so its
# events are still owed when the primary goes away.
$primary->safe_psql('postgres', qq{
SELECT outbox.create_endpoint('live', '$url/live', '{live.*}');
SELECT outbox.create_endpoint('held', '$url/held', '{held.*}');
SELECT outbox.pause_endpoint('held');});
wait_for_relay($primary) or die 'relay did not start on the primary';

$primary->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'backup', has_streaming => 1);
$standby->start;

my @live = split /\n/, $primary->safe_psql('postgres',
	q{SELECT outbox.emit('live.x', jsonb_build_object('i', i)) FROM generate_series(1, 5) i});
my @held = split /\n/, $primary->safe_psql('postgres',
	q{SELECT outbox.emit('held.x', jsonb_build_object('i', i)) FROM generate_series(1, 5) i});
ok(wait_received($log, got_all('/live', @live)), 'primary delivered the live events');
$primary->poll_query_until('postgres',
	"SELECT events_waiting = 0 FROM outbox.endpoint_status WHERE name = 'live'")
  or die 'live deliveries not recorded on the primary';
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'), 't', 'standby is in recovery');
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox relay'"),
	'0', 'no relay on the standby');
is( $standby->safe_psql('postgres',
		"SELECT count(*) FROM outbox.events WHERE event_type = 'held.x'"),
	'5', 'the held events are on the standby');
like( $standby->safe_psql('postgres',
		"SELECT status FROM outbox.health() WHERE check_name = 'relay running'"),
	qr/^warning$/, "standby's health() says no relay serves it");
ok(!$standby->log_contains(qr/outbox relay started/), 'standby log: no relay started');

# The primary goes away cleanly: everything it wrote reaches the standby.
$primary->stop;
{
	my @got = received($log);
	is(scalar(keys %{ ids_at('/held', @got) }), 0, 'nothing held was delivered before promotion');
	is(scalar(grep { $_->{path} eq '/live' } @got), 5, 'live events delivered once each by the primary');
}

my $offset = -s $standby->logfile;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby not promoted';
ok( $standby->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'outbox relay'"),
	'a relay runs on the promoted standby');
ok(log_wait($standby, qr/outbox relay started for database "postgres"/, $offset),
	'the relay on the promoted standby logged its start');

$standby->safe_psql('postgres', "SELECT outbox.resume_endpoint('held')");
ok(wait_received($log, got_all('/held', @held)),
	'promoted standby delivered the events emitted on the primary and never delivered');
my $new = $standby->safe_psql('postgres', q{SELECT outbox.emit('live.after', '{}')});
ok(wait_received($log, got_all('/live', $new)), 'promoted standby delivers new events');
$standby->poll_query_until('postgres',
	"SELECT bool_and(events_waiting = 0 AND in_retry = 0) FROM outbox.endpoint_status")
  or die 'deliveries not recorded on the promoted standby';
{
	my @got = received($log);
	my $live = ids_at('/live', @got);
	my $held = ids_at('/held', @got);
	is_deeply([ sort keys %$live ], [ sort(@live, $new) ], 'live: exactly the live events');
	ok(!grep({ $_ > 1 } values %$live), 'live: none sent again after promotion');
	is_deeply([ sort keys %$held ], [ sort @held ], 'held: exactly the held events');
	ok(!grep({ $_ > 1 } values %$held), 'held: each once');
}

$standby->stop;
$receiver->kill_kill;
done_testing();
