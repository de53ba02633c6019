# The hostile receiver's cases of t/008_hostile.pl over TLS: the same
# misbehaviours inside TLS connections, which the relay makes itself
# (src/targets/http1.c), and the same outcomes.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
# loaded here, not by the file done below: their INIT blocks must run
use OutboxTest;
use PostgreSQL::Test::Cluster;

$ENV{OUTBOX_HOSTILE_TLS} = 1;
my $file = "$FindBin::Bin/008_hostile.pl";
do $file;
die "$file: $@" if $@;
