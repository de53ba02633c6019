# A reload that tightens outbox.allowed_networks closes the connections the
# new policy no longer allows: the next event to a receiver whose address
# was removed is refused, not sent on the connection kept alive from
# before, and that connection is closed.  The same in a sender process
# (outbox.senders), which keeps connections of its own.  (t/009_tls.pl
# does the same for a CA file rewritten in place.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:DEFAULT sql);
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('reload', conf => "outbox.retry_schedule = '1h'\n");
my ($url, $log, $rx) = start_receiver();
my ($port) = $url =~ /:(\d+)$/;

# Established TCP connections to the receiver's port, from the client side
# (the relay and its senders are the only clients).
sub open_connections
{
	my $n = 0;
	open(my $fh, '<', '/proc/net/tcp') or die "cannot read /proc/net/tcp: $!";
	while (my $line = <$fh>)
	{
		my @f = split ' ', $line;
		next unless defined $f[3] && $f[2] =~ /:([0-9A-F]{4})$/;
		$n++ if hex($1) == $port && $f[3] eq '01';
	}
	close $fh;
	return $n;
}

# Set allowed_networks, reload, and wait until each of the processes named
# by the log lines in @waits reloaded.
sub set_networks
{
	my ($networks, @waits) = @_;
	my $offset = -s $node->logfile;
	sql("ALTER SYSTEM SET outbox.allowed_networks = '$networks'");
	sql('SELECT pg_reload_conf()');
	$node->wait_for_log($_, $offset) for @waits;
}

sql("SELECT outbox.create_endpoint('r', '$url/r', '{r.*}')");

# Deliver one event, tighten the policy, send the next.
sub round
{
	my ($label, @waits) = @_;
	my $first = sql(q{SELECT outbox.emit('r.first', '{}')});
	ok(wait_received($log, sub { grep { $_->{headers}{'webhook-id'} eq $first } @_ }),
		"$label: delivered while 127.0.0.1 is allowed");
	cmp_ok(open_connections(), '>=', 1, "$label: the connection is kept alive");

	set_networks('10.0.0.0/8', @waits);
	my $next = sql(q{SELECT outbox.emit('r.next', '{}')});
	ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$next'"),
		"$label: the next event was attempted");
	like(sql("SELECT coalesce(status::text, '-') || ' ' || error FROM outbox.attempts WHERE event_id = '$next'"),
		qr/^- refused to connect to 127\.0\.0\.1, a loopback address/,
		"$label: after the reload it is refused");
	is(scalar(grep { $_->{headers}{'webhook-id'} eq $next } received($log)), 0,
		"$label: the receiver did not get it on the old connection");
	is(open_connections(), 0, "$label: the old connection is closed");
}

$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
  or die 'relay did not start';
round('relay', qr/outbox relay reloaded its configuration/);

# With a sender, which gets the requests while the relay has none in
# flight (a tie goes to a sender).
$node->append_conf('postgresql.conf', "outbox.senders = 1\n");
$node->restart;
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'outbox sender'")
  or die 'sender did not start';
set_networks('127.0.0.1/32', qr/outbox relay reloaded its configuration/,
	qr/outbox sender 1 reloaded its configuration/);
round('sender', qr/outbox relay reloaded its configuration/,
	qr/outbox sender 1 reloaded its configuration/);

$node->stop;
$rx->kill_kill;
done_testing();
