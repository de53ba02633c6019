# outbox.metrics with the real servers: Debian's prometheus-postgres-exporter
# reading contrib/prometheus/queries.yaml as a role granted what
# docs/monitoring.md says, and Prometheus scraping it with the rules of
# contrib/prometheus/outbox.rules.yml.  Each is started here on 127.0.0.1,
# on free ports below 32768, with short intervals, and stopped however the
# test ends.
#   - every metric of the view is in the exporter's scrape, with its type
#     and its labels; the counters grow;
#   - an endpoint whose receiver is down fires OutboxOldestPendingTooOld
#     (its `for` shortened) and the alert resolves once the receiver is back;
#   - promtool check rules and test rules pass;
#   - every expression of contrib/grafana/outbox.json returns data.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use HTTP::Tiny;
use IPC::Run;
use JSON::PP qw(decode_json);
use Time::HiRes qw(usleep time);

my $exporter_bin = '/usr/bin/prometheus-postgres-exporter';
my $prometheus_bin = '/usr/bin/prometheus';
my $promtool = '/usr/bin/promtool';
for my $bin ($exporter_bin, $prometheus_bin, $promtool)
{
	plan skip_all => "$bin is not installed (scripts/deps.sh)" unless -x $bin;
}
my $contrib = "$FindBin::Bin/../contrib";
my $dir = PostgreSQL::Test::Utils::tempdir;
my $http = HTTP::Tiny->new(timeout => 10);

# Servers started here, stopped however the test ends.
my %servers;

END
{
	local $?;
	for my $h (values %servers)
	{
		$h->signal('KILL') if $h->pumpable;
		$h->finish;
	}
}

# Poll $check (a sub) until it returns true, at most $seconds; returns what
# it returned last.
sub wait_until
{
	my ($seconds, $check) = @_;
	my $deadline = time() + $seconds;
	my $ok;
	until (($ok = $check->()) || time() > $deadline)
	{
		usleep(200_000);
	}
	return $ok;
}

sub get
{
	my ($url) = @_;
	my $r = $http->get($url);
	return $r->{success} ? $r->{content} : undef;
}

# A query of Prometheus' HTTP API: its result, or undef.
sub prom_query
{
	my ($port, $expr) = @_;
	my $body = get("http://127.0.0.1:$port/api/v1/query?query=" . uri_escape($expr));
	return undef unless defined $body;
	my $r = decode_json($body);
	return $r->{status} eq 'success' ? $r->{data}{result} : undef;
}

sub uri_escape
{
	my ($s) = @_;
	$s =~ s/([^A-Za-z0-9\-._~])/sprintf('%%%02X', ord($1))/ge;
	return $s;
}

my $node = outbox_node('metrics', conf => "outbox.retry_schedule = '1s'\n");
wait_for_relay() or die 'relay did not start';

# An endpoint that answers, and one whose receiver is not there yet: its
# port is free, and the receiver comes up on it later.
my ($url, $log) = start_receiver();
my $down_port = PostgreSQL::Test::Cluster::get_free_port();
sql(q{SELECT outbox.create_endpoint('up', '} . $url . q{/up', '{m.*}')});
sql(q{SELECT outbox.create_endpoint('down', 'http://127.0.0.1:} . $down_port
	  . q{/down', '{m.*}', max_attempts => 100)});
# And one whose receiver refuses every event for good: dead letters.
sql(q{SELECT outbox.create_endpoint('refused', '} . $url . q{/refused?status=400', '{m.*}')});
sql(q{SELECT outbox.emit('m.first', '{}')});
ok(wait_received($log, sub { grep({ $_->{path} eq '/up' } @_) >= 1 }), 'the endpoint up was delivered to');

# The counters grow: deliveries to "up", failed attempts to "down".
sub metric
{
	my ($name, $labels) = @_;
	return sql("SELECT coalesce(sum(value), -1) FROM outbox.metrics WHERE name = '$name' AND labels @> '$labels'");
}
ok( $node->poll_query_until(
		'postgres', q{SELECT value >= 1 FROM outbox.metrics WHERE name = 'outbox_deliveries_total'
		   AND labels = '{"endpoint": "up", "outcome": "delivered"}'}),
	'outbox_deliveries_total counts the delivery');
my $delivered = metric('outbox_deliveries_total', '{"endpoint": "up", "outcome": "delivered"}');
my $failed = metric('outbox_deliveries_total', '{"endpoint": "down", "outcome": "retry"}');
sql(q{SELECT outbox.emit('m.second', '{}')});
ok( $node->poll_query_until(
		'postgres', qq{SELECT value > $delivered FROM outbox.metrics WHERE name = 'outbox_deliveries_total'
		   AND labels = '{"endpoint": "up", "outcome": "delivered"}'}),
	'outbox_deliveries_total grows with each delivery');
ok( $node->poll_query_until(
		'postgres', qq{SELECT value > $failed FROM outbox.metrics WHERE name = 'outbox_deliveries_total'
		   AND labels = '{"endpoint": "down", "outcome": "retry"}'}),
	'and with each failed attempt');
is(metric('outbox_attempt_duration_seconds_count', '{}'),
	metric('outbox_attempt_duration_seconds_bucket', '{"le": "+Inf"}'),
	'the histogram counts every attempt in its +Inf bucket');
cmp_ok(metric('outbox_attempt_duration_seconds_count', '{}'), '>=', 3, 'of every endpoint');
# What each endpoint is owed, as endpoint_status counts it (following the
# stream, or failing on its own position).
is( sql(q{SELECT count(*) FROM outbox.endpoint_status s
           LEFT JOIN outbox.metrics m ON m.name = 'outbox_events_pending' AND m.labels->>'endpoint' = s.name
          WHERE coalesce(m.value, 0) = s.events_waiting}),
	'3', 'outbox_events_pending agrees with endpoint_status');
ok( $node->poll_query_until(
		'postgres', q{SELECT value = 2 FROM outbox.metrics WHERE name = 'outbox_dead_letters'
		   AND labels = '{"endpoint": "refused"}'}),
	'outbox_dead_letters counts the events refused');

# The exporter's role: exactly the grants docs/monitoring.md lists.
my $monitoring = slurp_file("$FindBin::Bin/../docs/monitoring.md");
my ($grants) = $monitoring =~ /```sql\n(CREATE ROLE outbox_exporter.*?)```/s
  or die 'docs/monitoring.md has no CREATE ROLE outbox_exporter block';
sql($grants);

# The exporter, with queries.yaml and none of its own metrics.
my $exporter_port = PostgreSQL::Test::Cluster::get_free_port();
{
	local $ENV{DATA_SOURCE_NAME} =
	  'host=' . $node->host . ' port=' . $node->port . ' user=outbox_exporter dbname=postgres sslmode=disable';
	$servers{exporter} = IPC::Run::start(
		[ $exporter_bin, "--extend.query-path=$contrib/prometheus/queries.yaml",
		  "--web.listen-address=127.0.0.1:$exporter_port", '--disable-default-metrics',
		  '--disable-settings-metrics', '--no-collector.database', '--no-collector.bgwriter',
		  '--log.level=warn' ],
		'<', \undef, '>&', "$dir/exporter.log");
}
my $scrape;
ok( wait_until(30, sub {
			$scrape = get("http://127.0.0.1:$exporter_port/metrics");
			defined $scrape && $scrape =~ /^pg_exporter_last_scrape_error 0$/m
			  && $scrape =~ /^outbox_events_pending\{/m }),
	'the exporter serves outbox\'s metrics without a scrape error')
  or diag(slurp_file("$dir/exporter.log"));

# Every family of the view, with its type and its label names (the
# exporter adds "server"; a histogram's le is its own), is in the scrape,
# and so is every sample of the view, by its labels.
my %scraped_type = $scrape =~ /^# TYPE (\S+) (\S+)$/mg;
my %scraped;
for my $line (grep { !/^#/ && /\S/ } split /\n/, $scrape)
{
	my ($name, $labels) = $line =~ /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$/ or next;
	my %l = ($labels // '') =~ /([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g;
	delete $l{server};
	$scraped{ $name . ' ' . join(',', map { "$_=$l{$_}" } sort keys %l) } = 1;
}
my @families = split /\n/, sql(q{
	SELECT f FROM (SELECT DISTINCT regexp_replace(name, '_(bucket|sum|count)$', '') || ' ' || type AS f
	                 FROM outbox.metrics WHERE type <> 'histogram' OR name LIKE '%\_bucket') x
	 ORDER BY f COLLATE "C"});
is( join(' ', map { (split / /)[0] } @families),
	join(' ', qw(outbox_attempt_duration_seconds outbox_dead_letters outbox_deliveries_total outbox_endpoint_up
		  outbox_events_pending outbox_oldest_pending_age_seconds outbox_relay_restarts_total outbox_relay_running
		  outbox_rotation_age_seconds outbox_rotation_held_bytes outbox_rotation_held_seconds
		  outbox_rotation_retention_seconds)),
	'the view has every metric of docs/monitoring.md');
for my $f (@families)
{
	my ($family, $type) = split / /, $f;
	is($scraped_type{$family}, $type, "$family is served as a $type");
}
my @samples = split /\n/, sql(q{
	SELECT m.name || ' ' || coalesce(string_agg(l.key || '=' || l.value, ',' ORDER BY l.key), '')
	  FROM outbox.metrics m
	  LEFT JOIN LATERAL jsonb_each_text(m.labels) l ON true
	 GROUP BY m.name, m.labels});
my @missing = grep { !$scraped{$_} } @samples;
is(join("\n", @missing), '', 'every sample of the view is in the scrape, with its labels ('
	  . scalar(@samples) . ' samples)');

# promtool: the rules and their unit tests.
for my $cmd ([ 'check', 'rules', "$contrib/prometheus/outbox.rules.yml" ],
	[ 'test', 'rules', "$contrib/prometheus/outbox.rules.test.yml" ])
{
	my ($out, $err);
	my $ok = IPC::Run::run([ $promtool, @$cmd ], '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	ok($ok, "promtool @$cmd[0..1] passes") or diag("$out$err");
}

# Prometheus: a scrape and an evaluation a second, the rules with
# OutboxOldestPendingTooOld's `for` shortened to 3 s.
my $rules = slurp_file("$contrib/prometheus/outbox.rules.yml");
$rules =~ s/(alert: OutboxOldestPendingTooOld\n\s+expr: [^\n]+\n\s+for: )\S+/${1}3s/
  or die 'no `for` of OutboxOldestPendingTooOld in outbox.rules.yml';
PostgreSQL::Test::Utils::append_to_file("$dir/outbox.rules.yml", $rules);
PostgreSQL::Test::Utils::append_to_file("$dir/prometheus.yml", <<"EOF");
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $dir/outbox.rules.yml
scrape_configs:
  - job_name: outbox
    static_configs:
      - targets: ['127.0.0.1:$exporter_port']
EOF
my $prom_port = PostgreSQL::Test::Cluster::get_free_port();
$servers{prometheus} = IPC::Run::start(
	[ $prometheus_bin, "--config.file=$dir/prometheus.yml", "--storage.tsdb.path=$dir/tsdb",
	  "--web.listen-address=127.0.0.1:$prom_port", '--log.level=warn' ],
	'<', \undef, '>&', "$dir/prometheus.log");
ok( wait_until(30, sub {
			my $r = prom_query($prom_port, 'up{job="outbox"}');
			$r && @$r && $r->[0]{value}[1] eq '1' }),
	'Prometheus scrapes the exporter')
  or diag(slurp_file("$dir/prometheus.log"));

# The receiver of "down" is away: its oldest delivery passes 30 s, and the
# alert fires for it alone.
sub alerts
{
	my $body = get("http://127.0.0.1:$prom_port/api/v1/alerts") // return ();
	return grep { $_->{labels}{alertname} eq 'OutboxOldestPendingTooOld' } @{ decode_json($body)->{data}{alerts} };
}
ok( wait_until(60, sub { grep { $_->{state} eq 'firing' && $_->{labels}{endpoint} eq 'down' } alerts() }),
	'OutboxOldestPendingTooOld fires for the endpoint whose receiver is down');
is(join(',', sort map { $_->{labels}{endpoint} } alerts()), 'down', 'and for no other endpoint');

# The receiver comes back: the events are delivered, and the alert resolves.
my $down_dir = PostgreSQL::Test::Utils::tempdir;
$servers{down} = IPC::Run::start(
	[ 'python3', "$FindBin::Bin/webhook_receiver.py", '--log', "$down_dir/received.jsonl",
	  '--port-file', "$down_dir/port", '--host', '127.0.0.1', '--port', $down_port ]);
ok(wait_received("$down_dir/received.jsonl", sub { grep({ $_->{path} eq '/down' } @_) >= 2 }),
	'the receiver back gets the events that waited');
ok(wait_until(60, sub { !alerts() }), 'and the alert resolves');

# Every expression of the Grafana dashboard returns data from this
# Prometheus ($endpoint as "All", $__rate_interval a few scrapes).
my $dashboard = decode_json(slurp_file("$contrib/grafana/outbox.json"));
my @exprs = map { map { $_->{expr} } @{ $_->{targets} } } @{ $dashboard->{panels} };
cmp_ok(scalar(@exprs), '>=', 10, 'the dashboard has its queries');
for my $expr (@exprs)
{
	(my $q = $expr) =~ s/\$endpoint/.*/g;
	$q =~ s/\$__rate_interval/15s/g;
	ok(wait_until(30, sub { my $r = prom_query($prom_port, $q); $r && @$r }), "dashboard query returns data: $expr");
}

# The relay stopped (SIGTERM; a SIGKILL would make the postmaster reset
# shared memory, as a server restart does): a new one starts,
# outbox_relay_restarts_total counts it, and the counters carry on where
# they were.
my $delivered_before = metric('outbox_deliveries_total', '{"endpoint": "up", "outcome": "delivered"}');
is(metric('outbox_relay_restarts_total', '{}'), '0', 'no relay restart so far');
my $old_relay = relay_pid();
sql("SELECT pg_terminate_backend($old_relay)");
ok(relay_restarted($old_relay), 'a new relay starts');
ok($node->poll_query_until('postgres',
		q{SELECT value = 1 FROM outbox.metrics WHERE name = 'outbox_relay_restarts_total'}),
	'outbox_relay_restarts_total counts the restart');
sql(q{SELECT outbox.emit('m.third', '{}')});
ok( $node->poll_query_until(
		'postgres', qq{SELECT value = $delivered_before + 1 FROM outbox.metrics WHERE name = 'outbox_deliveries_total'
		   AND labels = '{"endpoint": "up", "outcome": "delivered"}'}),
	'the new relay counts on from where the last one stopped');

# An endpoint dropped: its samples go, and what is summed over the
# database (every endpoint's attempts, the duration histogram) does not go
# down: its counts move into the samples without an endpoint.
my $sum_sql = q{SELECT sum(value) FROM outbox.metrics WHERE name = 'outbox_deliveries_total'};
my $all_attempts = sql($sum_sql);
my $histogram = metric('outbox_attempt_duration_seconds_count', '{}');
sql(q{SELECT outbox.drop_endpoint('up')});
ok($node->poll_query_until('postgres',
		q{SELECT NOT EXISTS (SELECT FROM outbox.metrics WHERE labels->>'endpoint' = 'up')}),
	'a dropped endpoint\'s samples go');
cmp_ok(sql($sum_sql), '>=', $all_attempts, 'the attempts summed over the database do not go down');
cmp_ok(metric('outbox_attempt_duration_seconds_count', '{}'), '>=', $histogram, 'nor does the histogram');

# The extension dropped and created again (endpoint ids start at 1 again):
# a new endpoint counts from 0, not on the set of the old endpoint with its
# id, and the database's sums still do not go down.
$all_attempts = sql($sum_sql);
$old_relay = relay_pid();
sql('DROP EXTENSION outbox CASCADE');
sql('CREATE EXTENSION outbox');
ok(relay_restarted($old_relay), 'a relay serves the extension created again');
# (id 2 was "down", whose set was still taken)
sql(q{SELECT outbox.create_endpoint('again' || i, '} . $url . q{/again', '{m.*}') FROM generate_series(1, 2) i});
is(sql(q{SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox.endpoints}), '1,2', 'the new endpoints have ids 1 and 2 again');
sql(q{SELECT outbox.emit('m.fourth', '{}')});
ok( $node->poll_query_until(
		'postgres', q{SELECT count(*) = 2 AND bool_and(value = 1) FROM outbox.metrics WHERE name = 'outbox_deliveries_total'
		   AND labels->>'endpoint' IN ('again1', 'again2')}),
	'each counts its own delivery alone, from 0');
cmp_ok(sql($sum_sql), '>=', $all_attempts, 'the database\'s sums carry on');

$node->stop;
done_testing();
