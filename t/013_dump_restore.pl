# Dump and restore: pg_dump -Fc of a database using outbox, then
# pg_restore --single-transaction into a new database, keeps endpoints,
# secrets, undelivered events, dead letters and the inbox, and the relay
# there carries on from the positions the dump recorded: what was delivered
# after the dump is delivered again with the same webhook-id, what was
# delivered before it is not, what was owed is delivered, and events emitted
# after the restore are delivered.
#
# Three restores of one dump: into another cluster whose transaction ids
# are below the source's, into that cluster again once its ids are past the
# source's (both rebase when the restore commits: outbox._rebase() queues
# what each endpoint was owed as its retries), and into another database of
# the source cluster (no rebase).
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;

# A relay serves only the databases outbox.database names, so a restored
# database gets its relay when the test says so, after an event has been
# emitted there.  Pages of two events: a backlog of a few events spans
# several pages, as one of more than 500 would with the default.
my $conf = q{
outbox.database = 'postgres'
outbox.batch_size = 2
};
my $src = outbox_node('src', conf => $conf);
my ($url, $log, $receiver) = start_receiver();

# Use up n transaction ids.
sub burn_xids
{
	my ($node, $n) = @_;
	$node->safe_psql('postgres',
		"DO \$\$ BEGIN FOR i IN 1..$n LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END \$\$");
}

sub next_xid
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT pg_snapshot_xmax(pg_current_snapshot())');
}

sub settled
{
	my ($node, $db) = @_;
	return $node->poll_query_until($db,
		'SELECT bool_and(events_waiting = 0 AND in_retry = 0) FROM outbox.endpoint_status');
}

sub relays_in
{
	my ($node, $db) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox relay' AND datname = '$db'");
}

# What a restore must reproduce, read from a database.
sub state_of
{
	my ($node, $db) = @_;
	my %s;
	$s{endpoints} = $node->safe_psql($db, q{
SELECT string_agg(format('%s %s %s %s paused=%s', name, url, event_types, max_attempts, paused), E'\n' ORDER BY name)
  FROM outbox.endpoints});
	$s{secrets} = $node->safe_psql($db,
		q{SELECT string_agg(name || ' ' || outbox.endpoint_secret(name), E'\n' ORDER BY name) FROM outbox.endpoints});
	$s{dead} = $node->safe_psql($db, q{
SELECT string_agg(format('%s %s %s %s %s %s', endpoint, event_id, event_type, attempts, last_status, payload),
                  E'\n' ORDER BY endpoint, event_id)
  FROM outbox.dead_letters});
	$s{events} = $node->safe_psql($db, q{
SELECT string_agg(format('%s %s %s %s', id, event_id, event_type, payload), E'\n' ORDER BY id)
  FROM outbox.events});
	$s{inbox} = $node->safe_psql($db,
		q{SELECT string_agg(consumer || ' ' || message_id, E'\n' ORDER BY consumer, message_id) FROM outbox.inbox});
	# Who may do what in schema outbox: the schema's, every function's and
	# every relation's privileges (the default ones written out).
	$s{privileges} = $node->safe_psql($db, q{
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
  SELECT format('schema %s %s', n.nspname, coalesce(n.nspacl, acldefault('n', n.nspowner))) AS x
    FROM pg_namespace n WHERE n.nspname = 'outbox'
  UNION ALL
  SELECT format('function %s %s', p.oid::regprocedure, coalesce(p.proacl, acldefault('f', p.proowner)))
    FROM pg_proc p WHERE p.pronamespace = 'outbox'::regnamespace
  UNION ALL
  SELECT format('relation %s %s', c.oid::regclass,
                coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner)))
    FROM pg_class c WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')) q});
	return \%s;
}

wait_for_relay($src) or die 'relay did not start';

# What an administrator grants on the extension's objects is dumped and
# restored (docs/privileges.md's grants for an application and an operator;
# the roles are global objects, made in each cluster).
my $roles = q{
CREATE ROLE regress_app;
CREATE ROLE regress_ops;
};
$src->safe_psql('postgres', $roles);
$src->safe_psql('postgres', q{
GRANT USAGE ON SCHEMA outbox TO regress_app, regress_ops;
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text, timestamptz, integer),
                          outbox.emit_many(text, jsonb[], text[], jsonb, timestamptz, timestamptz, integer),
                          outbox.mark_processed(text, text) TO regress_app;
GRANT SELECT ON outbox.endpoint_status, outbox.backlog TO regress_ops;
GRANT EXECUTE ON FUNCTION outbox.health() TO regress_ops WITH GRANT OPTION;
});

# The source's transaction ids start well above a fresh cluster's.
burn_xids($src, 3000);

########################################################################
# The source: endpoint a gets everything, b order events, c everything,
# d dead letters (400 is permanent).  Events delivered everywhere, a dead
# letter, inbox rows; then b paused while X is delivered to a and c, and c
# paused while O is delivered to a.  The dump is taken there.
########################################################################

$src->safe_psql('postgres', qq{
SELECT outbox.create_endpoint('a', '$url/a', '{*}');
SELECT outbox.create_endpoint('b', '$url/b', '{order.*}');
SELECT outbox.create_endpoint('c', '$url/c', '{*}');
SELECT outbox.create_endpoint('d', '$url/d?status=400', '{dead.*}', max_attempts => 1);
});

my @early = split /\n/, $src->safe_psql('postgres',
	q{SELECT outbox.emit('order.created', jsonb_build_object('early', i)) FROM generate_series(1, 3) i});
my $dead = $src->safe_psql('postgres', q{SELECT outbox.emit('dead.letter', '{"why": "400"}')});
ok( wait_received($log, sub {
			got_all('/a', @early, $dead)->(@_)
			  && got_all('/b', @early)->(@_)
			  && got_all('/c', @early, $dead)->(@_)
		}),
	'source: early events delivered to a, b and c');
ok($src->poll_query_until('postgres', "SELECT count(*) = 1 FROM outbox.dead_letters WHERE endpoint = 'd'"),
	'source: the dead.letter event is a dead letter of d');
is( $src->safe_psql('postgres',
		"SELECT outbox.mark_processed('billing', 'm-1'), outbox.mark_processed('billing', '$early[0]'::uuid)"),
	't|t', 'source: two messages marked processed');
settled($src, 'postgres') or die 'source not settled';

$src->safe_psql('postgres', "SELECT outbox.pause_endpoint('b')");
my @x;
push @x, $src->safe_psql('postgres', "SELECT outbox.emit('order.paid', '{\"x\": $_}')") for 1 .. 3;
ok(wait_received($log, sub { got_all('/a', @x)->(@_) && got_all('/c', @x)->(@_) }),
	'source: X delivered to a and c while b is paused');
$src->poll_query_until('postgres', q{
SELECT string_agg(name || ':' || events_waiting, ' ' ORDER BY name) = 'a:0 b:3 c:0 d:0'
  FROM outbox.endpoint_status})
  or die 'source: X not recorded';

$src->safe_psql('postgres', "SELECT outbox.pause_endpoint('c')");
my $o = $src->safe_psql('postgres', q{SELECT outbox.emit('other.thing', '{"o": 1}')});
ok(wait_received($log, got_all('/a', $o)), 'source: O delivered to a while c is paused');
$src->poll_query_until('postgres', q{
SELECT string_agg(name || ':' || events_waiting, ' ' ORDER BY name) = 'a:0 b:3 c:1 d:0'
  FROM outbox.endpoint_status})
  or die 'source: O not recorded';

my $dumped = state_of($src, 'postgres');
my $src_xmin = $src->safe_psql('postgres', 'SELECT min(pg_snapshot_xmin(snap)) FROM outbox.positions');
my $src_sysid = $src->safe_psql('postgres', 'SELECT outbox._system_identifier()');
my %secret = map { split / / } split /\n/, $dumped->{secrets};
my $dump = PostgreSQL::Test::Utils::tempdir() . '/src.dump';
$src->command_checks_all([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'postgres' ],
	0, [qr/^$/], [qr/^$/], 'pg_dump -Fc of the source database');

# After the dump: b receives X, c receives O.
$src->safe_psql('postgres', "SELECT outbox.resume_endpoint('b'); SELECT outbox.resume_endpoint('c');");
ok(wait_received($log, sub { got_all('/b', @x)->(@_) && got_all('/c', $o)->(@_) }),
	'source: after the dump, X delivered to b and O to c');
settled($src, 'postgres') or die 'source not settled after the dump';
{
	my @got = received($log);
	my $b = ids_at('/b', @got);
	is(join(',', map { $b->{$_} } @x), '1,1,1', 'source: b received each X once');
}

########################################################################
# Restore the dump into database $db of $node, emit an event there before
# its relay starts, start the relay, and check what the receivers get.
########################################################################

sub restore_and_check
{
	my ($node, $db, $label, $other_cluster) = @_;
	my $first = scalar(my @before = received($log));
	my $log_offset = -s $node->logfile;
	my $here = $node->safe_psql('postgres', 'SELECT outbox._system_identifier()');

	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->command_checks_all([ 'pg_restore', '--single-transaction', '-d', $db, $dump ],
		0, [qr/^$/], [qr/^$/], "$label: pg_restore --single-transaction succeeds without messages");
	is(relays_in($node, $db), '0', "$label: no relay in $db yet (outbox.database)");

	# What the dump held.
	my $restored = state_of($node, $db);
	for my $k (qw(endpoints secrets dead events inbox privileges))
	{
		is($restored->{$k}, $dumped->{$k}, "$label: $k as dumped");
	}
	is( $node->safe_psql($db, q{
SELECT outbox.mark_processed('billing', 'm-1'), outbox.mark_processed('billing', '} . $early[0] . q{'::uuid),
       outbox.mark_processed('billing', 'm-2')}),
		'f|f|t', "$label: mark_processed is false for the messages marked before the dump");
	# From another cluster, the restore's commit translated the positions
	# (outbox._rebase() from a deferred trigger); from this one, there is
	# nothing to translate.
	is( $node->safe_psql($db, 'SELECT string_agg(DISTINCT system_identifier, \',\') FROM outbox.positions'),
		$here, "$label: positions carry this cluster's system identifier once restored");
	is($here ne $src_sysid ? 1 : 0, $other_cluster, "$label: system identifier of the target");
	if ($other_cluster)
	{
		ok(log_wait($node, qr/outbox: positions were written by another cluster/, $log_offset),
			"$label: the restore logged the rebase");
	}
	else
	{
		unlike(slurp_file($node->logfile, $log_offset), qr/written by another cluster/,
			"$label: no rebase within one cluster");
	}
	like($node->safe_psql($db, "SELECT outbox.create_endpoint('late', '$url/late', '{late.*}')"),
		qr/^whsec_/, "$label: a new endpoint can be created (the id sequence was restored)");

	# An event emitted before any relay has read the restored positions.
	my $pre = $node->safe_psql($db, q{SELECT outbox.emit('order.created', '{"after_restore": "before the relay"}')});
	is( $node->safe_psql($db, qq{
SELECT id > (SELECT max(id) FROM outbox.events WHERE event_id <> '$pre') FROM outbox.events WHERE event_id = '$pre'}),
		't', "$label: a new event's id follows the restored ones (event_seq restored)");

	# b and c were paused when the dump was taken.
	$node->safe_psql($db, "SELECT outbox.resume_endpoint('b'); SELECT outbox.resume_endpoint('c');");
	$node->safe_psql('postgres', qq{
ALTER SYSTEM SET outbox.database = 'postgres, $db';
SELECT pg_reload_conf();});
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'outbox relay' AND datname = '$db'"),
		"$label: relay started in $db");

	my $post = $node->safe_psql($db, q{SELECT outbox.emit('order.created', '{"after_restore": "after the relay"}')});
	ok( wait_received($log, sub {
				my @new = @_[ $first .. $#_ ];
				got_all('/b', @x, $post)->(@new)
				  && got_all('/c', $o, $post)->(@new)
				  && got_all('/a', $post)->(@new);
			}),
		"$label: X to b, O to c and the event emitted after the rebase to a, b and c");
	ok(settled($node, $db), "$label: nothing left waiting in $db");

	my @all = received($log);
	my @new = @all[ $first .. $#all ];
	my %at = map { $_ => ids_at("/$_", @new) } qw(a b c d late);
	my @old = (@early, $dead, @x, $o);

	my %name;
	@name{ @early, $dead, @x, $o, $pre, $post } = ((map { "E$_" } 1 .. @early), 'dead', (map { "X$_" } 1 .. @x), 'O',
		'pre', 'post');
	my $got = sub {
		my ($ep, @ids) = @_;
		return join(' ', map { $name{$_} // $_ } grep { $at{$ep}{$_} } @ids);
	};

	is(join(',', map { $at{b}{$_} // 0 } @x), '1,1,1',
		"$label: b received X again, once each, with the webhook-ids it had from the source");
	is($at{c}{$o} // 0, 1, "$label: c received O, once");
	is($got->('b', @early), '', "$label: b did not receive the events delivered to it before the dump");
	is(scalar(keys %{ $at{d} }) + scalar(keys %{ $at{late} }), 0,
		"$label: nothing to d (its dead letter stays dead) or to the new endpoint");
	is(join('', map { $at{$_}{$post} // 0 } qw(a b c)), '111',
		"$label: the event emitted after the relay started delivered to a, b and c once");
	is($got->('a', @old), '', "$label: a received none of the events delivered to it before the dump");
	is($got->('c', @early, $dead, @x), '', "$label: c received none of the events delivered to it before the dump");
	is(join('', map { $at{$_}{$pre} // 0 } qw(a b c)), '111',
		"$label: the event emitted before the relay started delivered to a, b and c once");

	# Signed with the secrets of the source.
	my $bad = 0;
	my @b_reqs = grep { $_->{path} eq '/b' } @new;
	for my $r (@b_reqs)
	{
		$bad++ unless $node->safe_psql($db, sprintf(
				'SELECT outbox.verify_signature(%s, %s, %s, %s, %s)',
				lit($secret{b}), lit($r->{headers}{'webhook-id'}), lit($r->{headers}{'webhook-timestamp'}),
				lit($r->{body}), lit($r->{headers}{'webhook-signature'}))) eq 't';
	}
	cmp_ok(scalar(@b_reqs), '>=', 4, "$label: b received requests");
	is($bad, 0, "$label: every request to b verifies with b's secret from the source");

	my $text = slurp_file($node->logfile, $log_offset);
	my @errors = grep { !/due to administrator command/ } $text =~ /^.*\b(?:ERROR|FATAL):.*$/mg;
	is(scalar(@errors), 0, "$label: no errors in the server log") or diag join("\n", @errors);
	unlike($text, qr/positions were written by another cluster/, "$label: no rebase") unless $other_cluster;

	# Stop serving $db: the next restore's requests are its own.
	$node->safe_psql('postgres', q{
ALTER SYSTEM SET outbox.database = 'postgres';
SELECT pg_reload_conf();});
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'outbox relay' AND datname = '$db'")
	  or die "relay in $db did not stop";
}

my $dst = outbox_node('dst', conf => $conf);
$dst->safe_psql('postgres', $roles);
like($dumped->{privileges}, qr/function outbox\.emit\(.*regress_app=X/, 'source: the grant on emit() is among the privileges compared');
like($dumped->{privileges}, qr/function outbox\.health\(\).*regress_ops=X\*/, 'source: the grant with grant option too');
cmp_ok(next_xid($dst), '<', $src_xmin, "another cluster's transaction ids are below the source's");
restore_and_check($dst, 'restored_low', 'other cluster, lower xids', 1);

burn_xids($dst, next_xid($src) - next_xid($dst) + 1000);
cmp_ok(next_xid($dst), '>', next_xid($src), "the other cluster's transaction ids are now above the source's");
restore_and_check($dst, 'restored_high', 'other cluster, higher xids', 1);

restore_and_check($src, 'restored_same', 'same cluster', 0);

$dst->stop;
$src->stop;
$receiver->kill_kill;
done_testing();
