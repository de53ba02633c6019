# t/OutboxTest.pm: helpers shared by the TAP tests: a node with the library
# preloaded, the test receiver, and reading what it received.
package OutboxTest;

use strict;
use warnings;
use Exporter 'import';
use File::Basename qw(dirname);
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep);

our @EXPORT = qw(outbox_node start_receiver received wait_received ids_at got_all);

# Receivers started by this test, stopped however the test ends.
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
	return $node;
}

# Start t/webhook_receiver.py; returns (base URL, log path, harness).
sub start_receiver
{
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $log = "$dir/received.jsonl";
	my $port_file = "$dir/port";
	my $script = dirname(__FILE__) . '/webhook_receiver.py';
	my $h = IPC::Run::start([ 'python3', $script, '--log', $log, '--port-file', $port_file ]);
	push @receivers, $h;
	for (my $i = 0; $i < 100 && !-e $port_file; $i++)
	{
		usleep(100_000);
	}
	die "receiver did not start" unless -e $port_file;
	my $port = PostgreSQL::Test::Utils::slurp_file($port_file);
	return ("http://127.0.0.1:$port", $log, $h);
}

# Everything the receiver logged, as a list of hashes.
sub received
{
	my ($log) = @_;
	return () unless -e $log;
	my @out;
	open(my $fh, '<', $log) or die "cannot read $log: $!";
	while (my $line = <$fh>)
	{
		chomp $line;
		next if $line eq '';
		my $r = eval { decode_json($line) };
		push @out, $r if $r;
	}
	close $fh;
	return @out;
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
