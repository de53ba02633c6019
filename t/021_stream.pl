# The stream (DESIGN.md, "The stream"): the relay reads each event once and
# routes it in memory to the endpoints that follow the stream.
#
# Part 1: 200 endpoints with an event type each, one with a prefix pattern
# and one with "*": each gets exactly the events it subscribes to, once,
# and they all follow the stream.  Then events of ten types only: the
# position rows of the 190 endpoints that get none are not written (the
# stream's row moves for them), where before 1.3 each endpoint's own read
# wrote its row for every batch.
# Part 2: an endpoint whose receiver holds its requests stops following the
# stream, and the others go on receiving meanwhile; once released it gets
# each of its events once, and follows the stream again.
# Part 3: a paused endpoint stops following; what is emitted while it is
# paused reaches it once resumed, once each, and it follows again.
# Part 4: a batch read in pages cut by outbox.batch_bytes arrives whole,
# from the stream and from an endpoint's own pages.
# Part 5: a receiver that takes 600 ms beside three that answer at once,
# all four subscribed to the same events: once it has answered, the last
# quarter's short wait (100 ms) does not detach it page after page.
# Part 6: a page whose parts are all late while nothing is answered
# waits for them rather than detaching them.
# Part 7: a page of one silent part is detached as before, not held.
# Part 8: a silent part beside parts answered once a second is detached
# after 7.5 s, however often their answers end the page's hold.
# Part 9: a silent part beside four quick ones is detached when its wait
# runs out (1.2 s, twice its endpoint's last answer), though nothing
# else wakes the relay then (a poll interval of 60 s).
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $n_types = 200;

# Wait until an endpoint follows the stream again, emitting events nobody
# subscribes to meanwhile (they move the stream, and its own position
# after it).
sub follows_again
{
	my ($name) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1 if sql("SELECT follows FROM outbox.positions WHERE endpoint_id = outbox._endpoint_id('$name')") eq 't';
		sql("SELECT outbox.emit('warm.up', '{}')");
		usleep(100_000);
	}
	return 0;
}
my $node = outbox_node('stream', conf => "outbox.poll_interval = '200ms'\n");

# Wait until an endpoint no longer follows the stream: true once it does,
# false if it still follows after the TAP timeout.
sub stops_following
{
	my ($name) = @_;
	return $node->poll_query_until('postgres',
		"SELECT NOT follows FROM outbox.positions WHERE endpoint_id = outbox._endpoint_id('$name')");
}
my ($url, $log, $receiver) = start_receiver();

# Errors the current server's log has from the relay or about outbox.
sub relay_errors
{
	my $n = () = slurp_file($node->logfile) =~ /outbox relay.*\bERROR:|\[\d+\] ERROR:.*outbox/g;
	return $n;
}

############################################################################
# Part 1: many endpoints, each exactly its events
############################################################################

sql(qq{
SELECT count(outbox.create_endpoint('e' || n, '$url/e' || n, ARRAY['t.' || n]))
  FROM generate_series(1, $n_types) n;
SELECT outbox.create_endpoint('pre', '$url/pre', '{t.1*}');
SELECT outbox.create_endpoint('all', '$url/all', '{*}');
});
wait_for_relay() or die 'relay did not start';

# Until every endpoint follows the stream: new endpoints start on their own
# and join it once they are where it is (events make the stream move).
my $n_endpoints = $n_types + 2;
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
my $warm = 0;
while (time() < $deadline)
{
	sql("SELECT outbox.emit('warm.up', '{}')");
	$warm++;
	last if sql('SELECT count(*) FROM outbox.positions WHERE follows') == $n_endpoints;
	usleep(100_000);
}
is(sql('SELECT count(*) FROM outbox.positions WHERE follows'), $n_endpoints,
	'every endpoint follows the stream');
ok(wait_received($log, sub { scalar(grep { $_->{path} eq '/all' } @_) >= $warm }),
	'the warm-up events reached the endpoint subscribed to everything');

# Three events of each type, in transactions of 50 events.
my %want;    # path => { webhook-id => 1 }
for my $round (1 .. 3)
{
	my @rows = split /\n/, sql(qq{
SELECT n, outbox.emit('t.' || n, jsonb_build_object('n', n, 'round', $round))
  FROM generate_series(1, $n_types) n});
	for (@rows)
	{
		my ($n, $id) = split /\|/;
		$want{"/e$n"}{$id} = 1;
		$want{'/all'}{$id} = 1;
		$want{'/pre'}{$id} = 1 if $n =~ /^1/;
	}
}
my @all_ids = keys %{ $want{'/all'} };
is(scalar(@all_ids), 3 * $n_types, 'events emitted');
ok(wait_received($log, got_all('/all', @all_ids)), 'every event reached the endpoint subscribed to everything');
ok(wait_received($log, sub {
	for my $path (keys %want)
	{
		my $n = ids_at($path, @_);
		return 0 if grep { !$n->{$_} } keys %{ $want{$path} };
	}
	return 1;
}), 'every endpoint got its events');

my @got = received($log);
my ($wrong, $twice, $missing) = (0, 0, 0);
for my $path (keys %want)
{
	my $n = ids_at($path, @got);
	for my $id (keys %$n)
	{
		next if $id eq '' || !exists $want{'/all'}{$id};    # warm-up events
		$wrong++ unless $want{$path}{$id};
		$twice++ if $n->{$id} > 1;
	}
	$missing += grep { !$n->{$_} } keys %{ $want{$path} };
}
# An endpoint with no events of these rounds must have got none of them.
my %has_want = map { $_ => 1 } keys %want;
my $stray = grep { !$has_want{ $_->{path} } && exists $want{'/all'}{ $_->{headers}{'webhook-id'} // '' } } @got;
is($wrong + $stray, 0, 'no endpoint got an event of a type it does not subscribe to');
is($twice, 0, 'no event arrived twice at an endpoint');
is($missing, 0, 'no event is missing at an endpoint subscribed to it');
is(scalar(keys %{ $want{'/pre'} }), 3 * scalar(grep { /^1/ } 1 .. $n_types),
	'the prefix pattern matched the types it covers');

ok($node->poll_query_until('postgres', 'SELECT deliveries_waiting = 0 FROM outbox.backlog'),
	'nothing is waiting');

# Ten types only, once every endpoint follows the stream again (one held
# back by a slow answer above may have stopped following for a while).
$deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (time() < $deadline)
{
	last if sql('SELECT count(*) FROM outbox.positions WHERE follows') == $n_endpoints;
	sql("SELECT outbox.emit('warm.up', '{}')");
	usleep(100_000);
}
my $idle_rows = q{SELECT string_agg(p.endpoint_id || ' ' || p.updated_at::text, ',' ORDER BY p.endpoint_id)
                    FROM outbox.positions p JOIN outbox.endpoints e ON e.id = p.endpoint_id
                   WHERE e.name ~ '^e[0-9]+$' AND substr(e.name, 2)::int > 10};
my $rows_before = sql($idle_rows);
# Recording deliveries to endpoints that follow the stream writes none of
# their rows, not even a lock (a lock is a write: 1.3 locked the row of
# every endpoint with an outcome in the record).  A part answered late may
# still be detached by the laggard rule, whose record locks its endpoint's
# row as it must: such endpoints (their detaches are logged at DEBUG1)
# are left out of the comparison, and named.
ok(reload_with(log_min_messages => 'debug1'), 'the relay logs its detaches');
my $endpoint_rows = q{SELECT string_agg(e.name || ' ' || e.xmax::text, E'\n' ORDER BY e.id)
                        FROM outbox.endpoints e WHERE e.name ~ '^e([1-9]|10)$'};
my %endpoints_before = map { split / / } split /\n/, sql($endpoint_rows);
my $detach_from = -s $node->logfile;
my $stream_before = sql('SELECT updated_at FROM outbox.stream');
my @ten;
for my $round (1 .. 20)
{
	push @ten, split /\n/, sql(q{SELECT outbox.emit('t.' || n, '{}') FROM generate_series(1, 10) n});
}
ok(wait_received($log, got_all('/all', @ten)), 'events of ten types delivered');
ok($node->poll_query_until('postgres', 'SELECT deliveries_waiting = 0 FROM outbox.backlog'),
	'nothing is waiting');
is(sql($idle_rows), $rows_before, 'the position rows of the endpoints that got none were not written');
my %lagged = map { $_ => 1 }
  slurp_file($node->logfile, $detach_from) =~ /outbox endpoint "(e[0-9]+)" stops following the stream/g;
diag('detached meanwhile (left out): ' . join(', ', sort keys %lagged)) if %lagged;
my %endpoints_after = map { split / / } split /\n/, sql($endpoint_rows);
my @kept = grep { !$lagged{$_} } sort keys %endpoints_before;
cmp_ok(scalar(@kept), '>=', 5, 'most of the ten kept following');
is(join(',', map { "$_ $endpoints_after{$_}" } @kept), join(',', map { "$_ $endpoints_before{$_}" } @kept),
	'the rows of the endpoints that got them were not locked');
isnt(sql('SELECT updated_at FROM outbox.stream'), $stream_before, 'the stream moved');
is(sql('SELECT count(*) FROM outbox._positions WHERE next_snap IS NOT NULL'), '0', 'no batch left open');

############################################################################
# Part 2: a slow endpoint stops following; the others go on
############################################################################

my $release = PostgreSQL::Test::Utils::tempdir() . '/release';
my @slow = split /\n/, sql(qq{
SELECT outbox.emit('t.5', jsonb_build_object('slow', n), headers => '{"x-test-hold": "$release"}')
  FROM generate_series(1, 3) n});
ok(stops_following('e5'),
	'the endpoint whose receiver holds its requests stopped following the stream');

# The others are not held back: events emitted now arrive while e5 holds.
my $t0 = time();
my @fast = split /\n/, sql(q{SELECT outbox.emit('t.7', jsonb_build_object('fast', n)) FROM generate_series(1, 5) n});
ok(wait_received($log, got_all('/e7', @fast)), 'another endpoint got its events meanwhile');
my $took = time() - $t0;
ok($took < 5, sprintf('within seconds (%.1f s)', $took));
my %slow = map { $_ => 1 } @slow;
is(scalar(grep { $_->{path} eq '/e5' && $slow{ $_->{headers}{'webhook-id'} // '' } } received($log)), 0,
	'the held requests are still held');
ok(!-e $release, 'not released yet');

PostgreSQL::Test::Utils::append_to_file($release, '');
ok(wait_received($log, got_all('/e5', @slow)), 'once released, the slow endpoint got its events');
ok($node->poll_query_until('postgres', 'SELECT deliveries_waiting = 0 FROM outbox.backlog'),
	'nothing is waiting');
# It follows again once it is where the stream is (events move the stream).
ok(follows_again('e5'), 'the slow endpoint follows the stream again');
my $n5 = ids_at('/e5', received($log));
is(scalar(grep { ($n5->{$_} // 0) != 1 } @slow), 0, 'each of its held events arrived once');

############################################################################
# Part 3: a paused endpoint
############################################################################

sql("SELECT outbox.pause_endpoint('e9')");
ok(stops_following('e9'), 'a paused endpoint stops following the stream');
my @paused = split /\n/, sql(q{SELECT outbox.emit('t.9', jsonb_build_object('p', n)) FROM generate_series(1, 4) n});
my @other = split /\n/, sql(q{SELECT outbox.emit('t.8', jsonb_build_object('p', n)) FROM generate_series(1, 4) n});
ok(wait_received($log, got_all('/e8', @other)), 'the others get their events while it is paused');
my %paused = map { $_ => 1 } @paused;
is(scalar(grep { $_->{path} eq '/e9' && $paused{ $_->{headers}{'webhook-id'} // '' } } received($log)),
	0, 'the paused endpoint got nothing');
is(sql("SELECT events_waiting FROM outbox.endpoint_status WHERE name = 'e9'"), '4',
	'its events wait for it');
sql("SELECT outbox.resume_endpoint('e9')");
ok(wait_received($log, got_all('/e9', @paused)), 'resumed, it gets what waited');
ok(follows_again('e9'), 'and follows the stream again');
my $n9 = ids_at('/e9', received($log));
is(scalar(grep { ($n9->{$_} // 0) != 1 } @paused), 0, 'each of its events arrived once');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.retries'), '0', 'no retries left');

############################################################################
# Part 4: pages cut by outbox.batch_bytes
############################################################################

# One transaction of 40 events of 16 kB: one batch, which at the smallest
# budget (64 kB) is read in pages of about four.  A page the budget ended
# is no sign the batch is done: were it taken for one, the stream would
# move past the events after it.
$node->append_conf('postgresql.conf', "outbox.batch_bytes = '64kB'\n");
$node->reload;
my @big = split /\n/, sql(q{SELECT outbox.emit('t.7', jsonb_build_object('n', n, 'pad', repeat('x', 16000)))
                             FROM generate_series(1, 40) n});
is(scalar(@big), 40, 'forty large events in one transaction');
ok(wait_received($log, got_all('/e7', @big)), 'every event of a batch read in pages cut by bytes arrived');
ok(wait_received($log, got_all('/all', @big)), 'at every endpoint subscribed to them');
my $n7 = ids_at('/e7', received($log));
is(scalar(grep { ($n7->{$_} // 0) != 1 } @big), 0, 'each once');

# The same through an endpoint's own pages: paused while they are
# emitted, resumed, it reads them on its own, in pages the budget cuts.
sql("SELECT outbox.pause_endpoint('e6')");
ok(stops_following('e6'), 'e6, paused, stops following the stream');
my @own = split /\n/, sql(q{SELECT outbox.emit('t.6', jsonb_build_object('n', n, 'pad', repeat('y', 16000)))
                             FROM generate_series(1, 40) n});
# (once the stream read past them: resumed before, it would find nothing
# of its own to read, follow the stream again and get them from it)
ok(wait_received($log, got_all('/all', @own)), 'the stream read past them');
sql("SELECT outbox.resume_endpoint('e6')");
ok(wait_received($log, got_all('/e6', @own)), 'read on its own in pages cut by bytes, every event arrived');
my $n6 = ids_at('/e6', received($log));
is(scalar(grep { ($n6->{$_} // 0) != 1 } @own), 0, 'each once at e6');

############################################################################
# Part 5: a slow receiver beside quick ones keeps following the stream
############################################################################

# Each page of one event has five parts (the endpoint "all" of part 1
# gets it too): the four quick ones finish in milliseconds, leaving a
# fifth, whose short wait would be 100 ms; the far one's own answers
# (600 ms) give it twice that, 1.2 s.  Its first page may detach it (it
# has not answered yet); after that it follows throughout.
$node->append_conf('postgresql.conf', "log_min_messages = debug1\n");
$node->reload;
sql(qq{
SELECT outbox.create_endpoint('near' || n, '$url/near' || n, '{mix}') FROM generate_series(1, 3) n;
SELECT outbox.create_endpoint('far', '$url/far?delay=0.6', '{mix}');
});
my @first = split /\n/, sql(q{SELECT outbox.emit('mix', '{"n": 0}')});
ok(wait_received($log, got_all('/far', @first)), 'the far receiver answered its first event');
ok(follows_again($_), "$_ follows the stream") for qw(far near1 near2 near3);
my $from = -s $node->logfile;
my @mixed;
for my $n (1 .. 6)
{
	my ($id) = split /\n/, sql(qq{SELECT outbox.emit('mix', '{"n": $n}')});
	push @mixed, $id;
	wait_received($log, got_all('/far', $id)) or last;
}
ok(wait_received($log, sub { got_all('/far', @mixed)->(@_) && got_all('/near1', @mixed)->(@_) }),
	'six events, one page each, reached the far receiver and the near ones');
my @detached = grep { /outbox endpoint "far" stops following the stream/ }
  split /\n/, slurp_file($node->logfile, $from);
is(scalar(@detached), 0, 'the far receiver was not detached on any of those pages');
is(sql("SELECT follows FROM outbox.positions WHERE endpoint_id = outbox._endpoint_id('far')"), 't',
	'and still follows the stream');

############################################################################
# Part 6: every part of a page late while nothing answers: the page waits
############################################################################

# Ten events of ten types in one page: twelve parts (e11 to e20, "pre" and
# "all"), among more than 200 followers, and every receiver takes 3 s.
# Nothing at all is answered meanwhile, so the laggard rule holds the page
# (up to 6 s of silence) instead of detaching all twelve at 1.5 s, and
# when the answers come back the first does not make the others laggards.
# Before 1.5 the hold compared the laggards with every follower (12
# against 206) and could never hold here.
my @late_names = ((map { "e$_" } 11 .. 20), 'pre', 'all');
ok(follows_again($_), "$_ follows the stream") for @late_names;
# Nothing answered from here on, for 5 s before the page too: the hold's
# 6 s of silence count from the page's read, not from the last answer.
sleep 5;
$from = -s $node->logfile;
my @late = split /\n/, sql(q{
SELECT outbox.emit('t.' || n, jsonb_build_object('late', n), headers => '{"x-test-delay": "3"}')
  FROM generate_series(11, 20) n});
ok(wait_received($log, sub { my @r = @_; !grep { !got_all("/e$_", $late[$_ - 11])->(@r) } 11 .. 20 }),
	'the ten late events arrived');
ok($node->poll_query_until('postgres', 'SELECT deliveries_waiting = 0 FROM outbox.backlog'),
	'and were recorded');
@detached = grep { /stops following the stream/ } split /\n/, slurp_file($node->logfile, $from);
is(scalar(@detached), 0, 'no part of the late page was detached')
  or diag(join("\n", @detached));
is(sql("SELECT count(*) FROM outbox.positions WHERE follows AND endpoint_id IN ("
	  . join(', ', map { "outbox._endpoint_id('$_')" } @late_names) . ')'),
	scalar(@late_names), 'all twelve still follow the stream');

############################################################################
# Part 7: a page of one silent part is not held
############################################################################

# The hold is for many parts (at least ten): a page whose one part goes to
# a receiver that holds it is detached after 1.5 s, as before, not held
# for the 6 s of silence a stall of every receiver gets.  "all" is paused,
# so that the page has that part alone; e7 answers just before it.
sql("SELECT outbox.pause_endpoint('all')");
sql(qq{SELECT outbox.create_endpoint('solo', '$url/solo', '{solo}')});
ok(follows_again('solo'), 'solo follows the stream');
my $release7 = PostgreSQL::Test::Utils::tempdir() . '/release7';
my @just = split /\n/, sql(q{SELECT outbox.emit('t.7', '{"just": "before"}')});
ok(wait_received($log, got_all('/e7', @just)), 'e7 answered just before');
my ($solo) = split /\n/, sql(qq{SELECT outbox.emit('solo', '{}', headers => '{"x-test-hold": "$release7"}')});
$t0 = time();
ok(stops_following('solo'), 'the silent part alone on its page stopped following the stream');
$took = time() - $t0;
ok($took < 4, sprintf('after about 1.5 s, not 6 (%.1f s)', $took));
PostgreSQL::Test::Utils::append_to_file($release7, '');
ok(wait_received($log, got_all('/solo', $solo)), 'once released, solo got its event');
sql("SELECT outbox.resume_endpoint('all')");

############################################################################
# Part 8: answers trickling in do not hold a silent part past OVERDUE_MS
############################################################################

# Ten parts answered one request a second (max_in_flight 1, a second each,
# twenty events each) beside one whose receiver holds its request: nothing
# is answered for most of each second, so the page is held, and each
# second's answers end the hold and start the waits again.  Without a
# bound the silent part would be held as long as the ten have requests
# (about 20 s); a part with no answer of its own for 7.5 s goes whatever
# the holds (stream.c, OVERDUE_MS).  "all" is paused, so that the page has
# these eleven parts.
sql("SELECT outbox.pause_endpoint('all')");
sql(qq{
SELECT count(outbox.create_endpoint('tr' || n, '$url/tr' || n, ARRAY['tr.' || n], max_in_flight => 1))
  FROM generate_series(1, 10) n;
SELECT outbox.create_endpoint('mute', '$url/mute', '{mute}', timeout => '1 minute');
});
ok(follows_again($_), "$_ follows the stream") for ((map { "tr$_" } 1 .. 10), 'mute');
my $release8 = PostgreSQL::Test::Utils::tempdir() . '/release8';
$from = -s $node->logfile;
my @trickle = split /\n/, sql(qq{
SELECT outbox.emit(t.type, jsonb_build_object('i', i), headers => t.headers)
  FROM (SELECT 'tr.' || n AS type, '{"x-test-delay": "1"}'::jsonb AS headers, i
          FROM generate_series(1, 10) n, generate_series(1, 20) i
        UNION ALL SELECT 'mute', '{"x-test-hold": "$release8"}', 0) t});
$t0 = time();
ok(stops_following('mute'),
	'the silent part beside parts answered once a second stopped following the stream');
$took = time() - $t0;
ok($took < 14, sprintf('after about 7.5 s, not once the others had no requests left (%.1f s)', $took));
ok(wait_received($log, sub { my @r = @_; grep({ $_->{path} =~ m{^/tr\d+$} } @r) >= 200 }),
	'the ten got their 200 events');
@detached = grep { /stops following the stream/ } split /\n/, slurp_file($node->logfile, $from);
is(join(',', map { /endpoint "([^"]+)"/ ? $1 : '?' } @detached), 'mute',
	'only the silent part was detached, not the ten answering once a second');
PostgreSQL::Test::Utils::append_to_file($release8, '');
ok(wait_received($log, sub { grep { $_->{path} eq '/mute' } @_ }), 'once released, mute got its event');
sql("SELECT outbox.resume_endpoint('all')");

is(relay_errors(), 0, 'the relay logged no error');

############################################################################
# Part 9: the relay looks at a page when a part's wait runs out
############################################################################

# In a server of its own, with nothing else in flight: in the first one,
# "all" is still catching up with part 8's events, thirty-odd answered
# each second, and those answers would wake the relay in time anyway.
# Four quick parts and a silent one in one page.  The silent part's
# endpoint took 0.6 s to answer its last event, so its wait is twice
# that, 1.2 s, counted from when its request went; the relay wakes for it
# when that runs out, whatever else wakes it meanwhile.  With a poll
# interval of a minute and nothing emitted, a relay that looked only when
# woken (the answers of the four, a connection closed) would keep the
# page, and the other four, until the poll.  Not before 1.2 s either:
# the floor (100 ms) is not its wait.
$node->stop;
$node = outbox_node('quiet', conf => "outbox.poll_interval = '60s'\n");
sql(qq{
SELECT count(outbox.create_endpoint('q' || n, '$url/q' || n, '{q9}')) FROM generate_series(1, 4) n;
SELECT outbox.create_endpoint('hush', '$url/hush', '{hush}', timeout => '1 minute');
});
ok(follows_again($_), "$_ follows the stream") for ((map { "q$_" } 1 .. 4), 'hush');
my @slowly = split /\n/, sql(q{SELECT outbox.emit('hush', '{}', headers => '{"x-test-delay": "0.6"}')});
ok(wait_received($log, got_all('/hush', @slowly)), 'hush answered an event in 0.6 s');
ok(follows_again('hush'), 'hush follows the stream');
my $release9 = PostgreSQL::Test::Utils::tempdir() . '/release9';
my @page9 = split /\n/, sql(qq{
SELECT outbox.emit(type, '{}', headers => headers)
  FROM (VALUES ('q9', '{}'::jsonb), ('hush', '{"x-test-hold": "$release9"}')) v(type, headers)});
$t0 = time();
ok(stops_following('hush'), 'the silent part stopped following the stream');
$took = time() - $t0;
ok($took > 1.0 && $took < 4, sprintf('after about 1.2 s, not at the next poll (%.1f s)', $took));
ok(wait_received($log, sub { my @r = @_; !grep { !got_all("/q$_", $page9[0])->(@r) } 1 .. 4 }),
	'the four quick endpoints got their event');
PostgreSQL::Test::Utils::append_to_file($release9, '');
ok(wait_received($log, got_all('/hush', $page9[1])), 'once released, hush got its event');
is(relay_errors(), 0, 'nor did the quiet one');

done_testing();
