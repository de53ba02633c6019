# t/OutboxTest.pm: helpers shared by the TAP tests: a node with the library
# preloaded, the test receiver, and reading what it received (exported by
# default); running SQL, quoting, finding the relay, changing settings,
# waiting for the server log and the CloudEvents receiver (exported with
# ':all').
#
# t/008_hostile.pl (sql, lit, relay_pid) and t/012_retention.pl (sql, on
# a session of its own) still define their own and import only the default
# set.
package OutboxTest;

use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(dirname);
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Scalar::Util qw(blessed);
use Time::HiRes qw(usleep);

our @EXPORT = qw(outbox_node start_receiver received wait_received ids_at got_all);
our @EXPORT_OK = qw(sql lit relay_pid wait_for_relay relay_restarted attempts reload_with log_wait outbox_version
  start_cloudevents_receiver start_tls_receiver start_h2_receiver openssl make_certificates emit_keyed_orders
  tally_copies);
our %EXPORT_TAGS = (all => [ @EXPORT, @EXPORT_OK ]);

# The node outbox_node() made last: what sql() and its kin use by default.
my $last_node;

# Receivers started by this test, stopped however the test ends.  (Keep
# the test's exit status: reaping a receiver sets $?.)
my @receivers;
END
{
	local $?;    # the receivers' exit status is not the test's
	$_->kill_kill for @receivers;
}

# A started node with outbox preloaded, the extension created in database
# postgres, and 127.0.0.1 allowed as a target (outbox.allowed_networks).
# Extra settings are appended.
sub outbox_node
{
	my ($name, %opts) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opts{init} // {} });
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'outbox'
outbox.poll_interval = '200ms'
outbox.allowed_networks = '127.0.0.1/32'
} . ($opts{conf} // ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION outbox');
	$last_node = $node;
	return $node;
}

# The helpers below take a node as an optional first argument; without
# one they use the node outbox_node() made last.
sub _node
{
	my ($args) = @_;
	return shift(@$args)
	  if @$args && blessed($args->[0]) && $args->[0]->isa('PostgreSQL::Test::Cluster');
	die 'no node: call outbox_node() first' unless $last_node;
	return $last_node;
}

# sql([$node,] $query [, $db]): the output of $query in database $db
# (postgres), dying on error.
sub sql
{
	my $node = _node(\@_);
	my ($query, $db) = @_;
	return $node->safe_psql($db // 'postgres', $query);
}

# A string as an SQL literal; NULL for undef.
sub lit
{
	my ($s) = @_;
	return 'NULL' unless defined $s;
	$s =~ s/'/''/g;
	return "'$s'";
}

# The SQL condition for the relay connected to database $db (postgres).
sub _relay_of
{
	my ($db) = @_;
	return "backend_type = 'outbox relay' AND datname = " . lit($db // 'postgres');
}

# relay_pid([$node,] [$db]): the pid of the relay connected to database $db
# (postgres), or '' when none is.
sub relay_pid
{
	my $node = _node(\@_);
	my ($db) = @_;
	return $node->safe_psql('postgres',
		'SELECT pid FROM pg_stat_activity WHERE ' . _relay_of($db));
}

# True once $query returns 't' in database postgres, false if it does not
# within the TAP timeout.  Unlike poll_query_until(), the query goes on
# psql's command line: while the server recovers from a crash it refuses
# connections, psql exits before reading its input, and the write of a
# query to that input then fails with EPIPE, which IPC::Run makes a die
# (t/007 died so in CI).
sub _poll
{
	my ($node, $query) = @_;
	local %ENV = $node->_get_env();
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my ($out, $err);
	while (time() < $deadline)
	{
		IPC::Run::run([ $node->installed_command('psql'), '-XAt', '-d', $node->connstr('postgres'), '-c', $query ],
			'<', '/dev/null', '>', \$out, '2>', \$err);
		return 1 if ($out // '') eq "t\n";
		usleep(100_000);
	}
	Test::More::diag("polling timed out: $query\nlast output: " . ($out // '') . "\nlast error: " . ($err // ''));
	return 0;
}

# wait_for_relay([$node,] [$db]): true once a relay serves database $db
# (postgres), false if none does within the TAP timeout.
sub wait_for_relay
{
	my $node = _node(\@_);
	my ($db) = @_;
	return _poll($node, 'SELECT count(*) = 1 FROM pg_stat_activity WHERE ' . _relay_of($db));
}

# relay_restarted([$node,] $old_pid): true once a relay other than the one
# with pid $old_pid serves database postgres, false if none does within
# the TAP timeout.  Safe to call right after a crash.
sub relay_restarted
{
	my $node = _node(\@_);
	my ($old_pid) = @_;
	die "relay_restarted: no relay pid given (got '" . ($old_pid // '') . "')"
	  unless ($old_pid // '') =~ /^\d+$/;
	return _poll($node, 'SELECT count(*) = 1 FROM pg_stat_activity WHERE '
		  . _relay_of('postgres') . " AND pid <> $old_pid");
}

# attempts([$node,] $event_id, $endpoint): "attempt:status,..." of an event
# at an endpoint from outbox.attempts, in the order made ("-" for no
# status).
sub attempts
{
	my $node = _node(\@_);
	my ($id, $ep) = @_;
	return $node->safe_psql('postgres', qq{
SELECT string_agg(attempt || ':' || coalesce(status::text, '-'), ',' ORDER BY at, attempt)
  FROM outbox.attempts WHERE event_id = } . lit($id) . ' AND endpoint = ' . lit($ep));
}

# log_wait([$node,] $regexp [, $offset]): wait for $regexp in the server
# log from $offset on.  The log's size once it matched (an offset for the
# next wait), or undef after the TAP timeout: unlike wait_for_log(), a
# failed wait is for the caller to assert, not a die.
sub log_wait
{
	my $node = _node(\@_);
	my ($re, $offset) = @_;
	$offset //= 0;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		my $text = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
		return $offset + length($text) if $text =~ $re;
		usleep(100_000);
	}
	return undef;
}

# reload_with([$node,] name => value, ...): ALTER SYSTEM SET each setting
# (RESET for undef), reload, and wait until a relay has logged that it
# reloaded.  True once one has.
sub reload_with
{
	my $node = _node(\@_);
	my (%set) = @_;
	my $offset = -s $node->logfile;
	for my $name (sort keys %set)
	{
		$node->safe_psql('postgres',
			defined $set{$name}
			? "ALTER SYSTEM SET $name = " . lit($set{$name})
			: "ALTER SYSTEM RESET $name");
	}
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	return defined log_wait($node, qr/outbox relay reloaded its configuration/, $offset);
}

# The version of the extension's SQL this tree builds: outbox.control's
# default_version, which the library serves.
sub outbox_version
{
	my $control = PostgreSQL::Test::Utils::slurp_file(dirname(__FILE__) . '/../outbox.control');
	$control =~ /^default_version\s*=\s*'([^']+)'/m or die 'no default_version in outbox.control';
	return $1;
}

# Start a receiver script given as a command (its arguments up to
# --log, --port-file, --host and --port, which are added) listening on
# $host, on a free port below 32768: the ephemeral range above it is where
# the relay's own outgoing connections take their ports.  Returns (base
# URL, log path, harness).  It is stopped however the test
# ends.
sub _start_logging_receiver
{
	my ($cmd, $host, $scheme) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $log = "$dir/received.jsonl";
	my $port_file = "$dir/port";
	my $h = IPC::Run::start(
		[ @$cmd, '--log', $log, '--port-file', $port_file, '--host', $host,
			'--port', PostgreSQL::Test::Cluster::get_free_port() ]);
	push @receivers, $h;
	for (my $i = 0; $i < 100 && !-e $port_file; $i++)
	{
		usleep(100_000);
	}
	die "receiver did not start: @$cmd" unless -e $port_file;
	my $port = PostgreSQL::Test::Utils::slurp_file($port_file);
	die "receiver listens on $port, in the ephemeral range: @$cmd" if $port >= 32768;
	return (($scheme // 'http') . "://$host:$port", $log, $h);
}

# start_receiver([$host]): start t/webhook_receiver.py listening on $host
# (127.0.0.1); returns (base URL, log path, harness).
sub start_receiver
{
	my ($host) = @_;
	return _start_logging_receiver([ 'python3', dirname(__FILE__) . '/webhook_receiver.py' ],
		$host // '127.0.0.1');
}

# start_tls_receiver($cert, $key [, $client_ca]): the same receiver serving
# HTTPS on 127.0.0.1 with that certificate, asking for a client certificate
# $client_ca signed when given; returns (base https URL, log path, harness).
sub start_tls_receiver
{
	my ($cert, $key, $client_ca) = @_;
	return _start_logging_receiver(
		[ 'python3', dirname(__FILE__) . '/webhook_receiver.py', '--cert', $cert, '--key', $key,
			defined $client_ca ? ('--client-ca', $client_ca) : () ],
		'127.0.0.1', 'https');
}

# start_h2_receiver($cert, $key): t/node/h2_receiver.js, an HTTPS receiver
# speaking HTTP/2 only, on 127.0.0.1 with that certificate; returns (base
# https URL, log path, harness).
sub start_h2_receiver
{
	my ($cert, $key) = @_;
	return _start_logging_receiver(
		[ 'node', dirname(__FILE__) . '/node/h2_receiver.js', '--cert', $cert, '--key', $key ],
		'127.0.0.1', 'https');
}

# start_cloudevents_receiver($secret): start t/node/cloudevents_receiver.js
# on 127.0.0.1, which reads every request with the CloudEvents SDK and
# checks its signature with $secret (the script's header says what it logs); returns (base
# URL, log path, harness).  Its npm packages are scripts/deps.sh's.
sub start_cloudevents_receiver
{
	my ($secret) = @_;
	my $script = dirname(__FILE__) . '/node/cloudevents_receiver.js';
	die 't/node/node_modules is missing: run scripts/deps.sh (npm ci in t/node)'
	  unless -d dirname(__FILE__) . '/node/node_modules/cloudevents';
	return _start_logging_receiver([ 'node', $script, '--secret', $secret ], '127.0.0.1');
}

# The broker tests' workload: 300 events, {"n": 0} to {"n": 299}, in 30
# transactions of 10, of types order.created and (every third) order.paid,
# keyed key-0 to key-9 by n modulo 10; after the eighth, a transaction
# emitting {"n": 9999} rolled back; last, one user.created {"n": 8888}.
sub emit_keyed_orders
{
	for my $t (0 .. 29)
	{
		my $q = "BEGIN;\n";
		for my $i (0 .. 9)
		{
			my $n = $t * 10 + $i;
			my $type = $n % 3 ? 'order.created' : 'order.paid';
			$q .= "SELECT outbox.emit('$type', '{\"n\": $n}', 'key-" . ($n % 10) . "');\n";
		}
		$q .= "COMMIT;\n";
		sql($q);
		sql(q{BEGIN; SELECT outbox.emit('order.created', '{"n": 9999}', 'key-0'); ROLLBACK;}) if $t == 7;
	}
	sql(q{SELECT outbox.emit('user.created', '{"n": 8888}')});
	return;
}

# What a broker held after crash rounds, against what committed: given
# the committed events (id => [key, n]), the copies of each id that
# arrived, and the ids in order of first arrival per key, the committed
# events lost, the ids that never committed (phantom), the copies beyond
# the first, and the keys whose first copies are not in emit order.
sub tally_copies
{
	my ($committed, $copies, $first_order) = @_;
	my $lost = grep { !$copies->{$_} } keys %$committed;
	my $phantom = grep { !$committed->{$_} } keys %$copies;
	my $dup = 0;
	$dup += $copies->{$_} - 1 for keys %$copies;
	my $out_of_order = grep {
		my @n = map { $committed->{$_} ? $committed->{$_}[1] : -1 } @{ $first_order->{$_} };
		join(',', @n) ne join(',', sort { $a <=> $b } @n)
	} keys %$first_order;
	return ($lost, $phantom, $dup, $out_of_order);
}

# openssl with these arguments; dies with what it printed if it fails.
sub openssl
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'openssl', @_ ], '>', \$out, '2>', \$err) or die "openssl @_ failed: $err";
	return $out;
}

# Certificates for a test, made in $dir: a CA (ca.crt, ca.key) and, for
# each [NAME, EXTENSIONS] given, NAME.crt and NAME.key signed by it, with
# the common name outbox-NAME and the extension lines given (such as
# "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth").  ECDSA
# P-256 keys without a passphrase, valid two days; the certificates
# readable by all, the keys by their owner alone.
sub make_certificates
{
	my ($dir, @leaves) = @_;
	my @ec = ('-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes');
	openssl('req', '-x509', @ec, '-days', '2', '-subj', '/CN=outbox test CA',
		'-keyout', "$dir/ca.key", '-out', "$dir/ca.crt",
		'-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
	chmod 0644, "$dir/ca.crt";
	for my $leaf (@leaves)
	{
		my ($name, $ext) = @$leaf;
		openssl('req', @ec, '-subj', "/CN=outbox-$name", '-keyout', "$dir/$name.key", '-out', "$dir/$name.csr");
		PostgreSQL::Test::Utils::append_to_file("$dir/$name.ext", "basicConstraints = CA:FALSE\n$ext\n");
		openssl('x509', '-req', '-in', "$dir/$name.csr", '-CA', "$dir/ca.crt", '-CAkey', "$dir/ca.key",
			'-CAcreateserial', '-days', '2', '-extfile', "$dir/$name.ext", '-out', "$dir/$name.crt");
		chmod 0644, "$dir/$name.crt";
		chmod 0600, "$dir/$name.key";
	}
	return;
}

# Everything the receiver logged, as a list of hashes.
my %received_cache;    # log file => { pos => bytes parsed, records => [...] }

sub received
{
	my ($log) = @_;
	return () unless -e $log;
	# JSON::PP is slow, and tests poll logs of thousands of requests: parse
	# each line once, and only whole lines (the receiver may be writing).
	my $c = $received_cache{$log} //= { pos => 0, records => [] };
	$c = $received_cache{$log} = { pos => 0, records => [] } if -s $log < $c->{pos};
	open(my $fh, '<', $log) or die "cannot read $log: $!";
	seek($fh, $c->{pos}, 0);
	while (my $line = <$fh>)
	{
		last unless $line =~ /\n\z/;
		$c->{pos} += length($line);
		chomp $line;
		next if $line eq '';
		my $r = eval { decode_json($line) };
		push @{ $c->{records} }, $r if $r;
	}
	close $fh;
	return @{ $c->{records} };
}

# Wait (up to the TAP timeout) until filter(@received) returns true.
sub wait_received
{
	my ($log, $cond) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1 if $cond->(received($log));
		usleep(50_000);
	}
	return 0;
}

# webhook-ids received at a path, with how often each came.
sub ids_at
{
	my ($path, @got) = @_;
	my %n;
	$n{ $_->{headers}{'webhook-id'} }++ for grep { $_->{path} eq $path } @got;
	return \%n;
}

# A condition for wait_received: every one of ids arrived at path.
sub got_all
{
	my ($path, @ids) = @_;
	return sub {
		my $n = ids_at($path, @_);
		return !grep { !$n->{$_} } @ids;
	};
}

1;
