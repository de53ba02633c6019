# A record whose commit throws is not recorded.  The relay records what
# finished of a batch while the rest is still in flight; if that commit
# fails (here a deferred trigger, as the restore trigger on positions is),
# those outcomes must be recorded again later.  Counting them as recorded
# lost them: a failed event got no retry, and once the rest of its page was
# recorded the position passed it, so it was never sent again.
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

$node->stop;
done_testing();
