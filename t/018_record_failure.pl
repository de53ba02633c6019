# A record whose commit throws is not recorded.  The relay records what
# finished of a batch while the rest is still in flight; if that commit
# fails (here a deferred trigger, as the restore trigger on positions is),
# those outcomes must be recorded again later.  Counting them as recorded
# lost them: a failed event got no retry, and once the rest of its page was
# recorded the position passed it, so it was never sent again.  And such
# partial progress is recorded soon beside another endpoint's records, and
# a success right after a failure reaches the health row.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('record_failure', conf => "outbox.retry_schedule = '200ms'\n");
my ($url, $log, $receiver) = start_receiver();

# The first commit that writes a retry fails at commit time; later ones
# pass (a sequence, since the failed transaction's own writes roll back).
sql(q{
CREATE SEQUENCE public.retry_commits;
CREATE FUNCTION public.fail_first_retry_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('public.retry_commits') = 1 THEN
        RAISE EXCEPTION 'injected failure at commit';
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER fail_first_retry_commit AFTER INSERT ON outbox.retries
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.fail_first_retry_commit();
});

sql("SELECT outbox.create_endpoint('e', '$url/e', event_types => '{t.e}')");

# One page: an event answered 500 at once (its retry is what fails to
# commit), and three answered 200 only once the record has failed, which
# keep the page in flight while the first outcome is recorded.
my $release = PostgreSQL::Test::Utils::tempdir() . '/release';
my ($failing, @slow) = split /\n/, sql(qq{
SELECT outbox.emit('t.e', '{"n": 0}', headers => '{"x-test-status": "500", "x-test-fail_first": "1"}')
UNION ALL
SELECT outbox.emit('t.e', format('{"n": %s}', n)::jsonb,
                   headers => jsonb_build_object('x-test-hold', '$release'))
  FROM generate_series(1, 3) n;
});

ok($node->wait_for_log(qr/ERROR:  injected failure at commit/),
	'the record of the failure did not commit');
is(scalar(grep { $_->{path} eq '/e' && $_->{status} == 200 } received($log)), 0,
	'none of the held events was answered then: the page was in flight');
PostgreSQL::Test::Utils::append_to_file($release, '');
ok(wait_received($log, got_all('/e', @slow)), 'the slow events arrived');
ok(wait_received($log, sub { (ids_at("/e", @_)->{$failing} // 0) >= 2 }),
	'the failed event was retried: its outcome was recorded after all');
ok($node->poll_query_until('postgres',
	"SELECT string_agg(attempt || ':' || status, ',' ORDER BY attempt) = '1:500,2:200'
	   FROM outbox.attempts WHERE event_id = '$failing'"),
	'both attempts are in the log')
  or diag sql("SELECT attempt, status, error FROM outbox.attempts WHERE event_id = '$failing'");
is(sql('SELECT count(*) FROM outbox.retries'), '0', 'nothing is owed any more');

# What finished of a batch partly in flight is recorded within about
# RECORD_INTERVAL_MS of its answer, also while another endpoint's batches
# keep finishing and being recorded: a round that runs for those takes it
# along (record_round).  The partial batch is a page of the endpoint's own
# (it was paused, so it stopped following the stream, and reads on its own
# once resumed): a part of a stream page would hold the other endpoint's
# parts back with it.
sql("SELECT outbox.create_endpoint('part', '$url/part', event_types => '{t.part}', max_in_flight => 2)");
sql("SELECT outbox.create_endpoint('busy', '$url/busy', event_types => '{t.busy}')");
sql("SELECT outbox.pause_endpoint('part')");
ok($node->poll_query_until('postgres',
	"SELECT NOT p.follows FROM outbox.positions p JOIN outbox.endpoints e ON e.id = p.endpoint_id
	  WHERE e.name = 'part'"),
	'part: paused, it does not follow the stream');
my $release2 = PostgreSQL::Test::Utils::tempdir() . '/release2';
my ($quick) = split /\n/, sql(qq{
SELECT outbox.emit('t.part', '{"quick": true}')
UNION ALL
SELECT outbox.emit('t.part', '{"held": true}', headers => jsonb_build_object('x-test-hold', '$release2'));
});
# The other endpoint's events, committed one by one for six seconds.
my $gen = $node->background_psql('postgres', timeout => 240);
$gen->query_until(qr/busy started/, q{\echo busy started
DO $$
BEGIN
	WHILE clock_timestamp() < statement_timestamp() + interval '6 s' LOOP
		PERFORM outbox.emit('t.busy', '{}');
		COMMIT;
		PERFORM pg_sleep(0.001);
	END LOOP;
END
$$;
});
ok($node->poll_query_until('postgres', "SELECT count(*) > 20 FROM outbox.attempts WHERE endpoint = 'busy'"),
	'busy: its deliveries are recorded as they come');
sql("SELECT outbox.resume_endpoint('part')");
ok(wait_received($log, got_all('/part', $quick)), 'part: the quick event was answered');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'part' AND status = 200"),
	'part: the quick event is recorded');
my ($answered) = map { $_->{t} } grep { $_->{path} eq '/part' } received($log);
my $recorded = sql("SELECT extract(epoch FROM at) FROM outbox.attempts WHERE endpoint = 'part' AND status = 200");
cmp_ok($recorded - $answered, '<', 1.5, 'part: recorded within a second and a half of its answer')
  or diag sprintf('recorded %.3f s after the answer', $recorded - $answered);
is(sql("SELECT in_flight FROM outbox.endpoint_status WHERE name = 'part'"), '1',
	'part: while its held event was in flight');
cmp_ok(sql("SELECT count(DISTINCT at) FROM outbox.attempts
             WHERE endpoint = 'busy' AND at BETWEEN to_timestamp($answered) - interval '1 s' AND to_timestamp($answered)"),
	'>=', 3, 'busy: its records went on meanwhile');
PostgreSQL::Test::Utils::append_to_file($release2, '');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM outbox.attempts WHERE endpoint = 'part' AND status = 200"),
	'part: the held event is recorded once answered');
$gen->quit;

# A success just after a failure resets the health row, though the relay
# had the endpoint's outcomes counted there less than a second before: for
# a second after a failure no record leaves it quiet (HEALTH_QUIET_MS).
sql("SELECT outbox.create_endpoint('healed', '$url/healed?status=500&fail_first=1', event_types => '{t.healed}')");
my $healed = sql(q{SELECT outbox.emit('t.healed', '{}')});
ok($node->poll_query_until('postgres',
	"SELECT string_agg(attempt || ':' || status, ',' ORDER BY attempt) = '1:500,2:200'
	   FROM outbox.attempts WHERE event_id = '$healed'"),
	'healed: a failure, then a success');
ok($node->poll_query_until('postgres',
	"SELECT consecutive_failures = 0 AND last_success_at IS NOT NULL FROM outbox.endpoint_status WHERE name = 'healed'"),
	'healed: its health shows the success');

$node->stop;
done_testing();
