# Endpoint formats on the wire: events delivered in CloudEvents structured
# and binary mode are read by the official CloudEvents SDK (a node
# receiver, t/node/cloudevents_receiver.js) with the attributes outbox maps
# (id, type, subject, time, source, data), every request of every format
# carries a Standard Webhooks signature over the body as sent, and the
# default format sends exactly what 1.3 sent.  Half of the requests go
# through a sender process (outbox.senders = 1).
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use JSON::PP;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;

my $secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
my $node = outbox_node('cloudevents', conf => "outbox.senders = 1\n");
my ($url, $log) = start_cloudevents_receiver($secret);
my $json = JSON::PP->new->canonical;

$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'outbox sender'")
  or die 'the sender did not start';

# One endpoint per format, all with the same secret; the binary one has an
# extension header of its own.
for my $ep (
	[ 'sw', q{} ],
	[ 'ce', q{, format => 'cloudevents'} ],
	[ 'bin', q{, format => 'cloudevents-binary', headers => '{"ce-tenant": "acme"}'} ])
{
	my ($name, $args) = @$ep;
	sql("SELECT outbox.create_endpoint('$name', '$url/$name', '{order.*}', secret => '$secret'$args)");
}
is(sql(q{SELECT string_agg(name || '=' || format, ',' ORDER BY name) FROM outbox.endpoint_status}),
	'bin=cloudevents-binary,ce=cloudevents,sw=standard-webhooks', 'endpoint_status shows each format');

# Events with a key and without, a key that must be percent-encoded in a
# header, payloads of several shapes, and event headers: one that forges
# an attribute's header (binary mode's attributes are the event's), an
# extension, and a plain one.
my @emits = (
	q{'order.created', '{"n": 1, "s": "x"}', key => 'order-1'},
	q{'order.paid', '[1, 2, {"a": null}]'},
	q{'order.note', '"just a string"', key => 'clé 42% "q"'},
	q{'order.shipped', '{"n": 4}', key => 'order-4',
	  headers => '{"ce-id": "forged", "ce-region": "eu", "x-trace": "t4"}'},
);
my @ids = map { sql("SELECT outbox.emit($_)") } @emits;

ok(wait_received($log, sub { @_ >= 3 * @ids }), 'every event arrived at each endpoint')
  or diag explain [ received($log) ];

# What outbox stored, and the body 1.3 built in SQL (outbox._body) for it.
sub expected
{
	my ($id) = @_;
	my ($type, $key, $payload, $time, $sw_body) = split /\|/, sql(qq{
SELECT event_type, coalesce(key, '<none>'), payload::text,
       to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
       '{"type":' || to_json(event_type)::text || ',"timestamp":"'
           || to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
           || '","data":' || payload::text || '}'
  FROM outbox.events WHERE event_id = '$id'});
	# (psql's output is UTF-8 bytes; the receiver's log is decoded JSON)
	utf8::decode($_) for ($type, $key, $payload, $sw_body);
	return {
		type => $type,
		key => ($key eq '<none>' ? undef : $key),
		payload => $payload,
		time => $time,
		sw_body => $sw_body
	};
}

# The time as the SDK gives it back: a JavaScript Date's ISO string (ms).
sub js_time
{
	my ($t) = @_;
	$t =~ s/\.(\d{3})\d{3}Z$/.$1Z/;
	return $t;
}

sub percent_encoded
{
	my ($s) = @_;
	utf8::encode($s);
	$s =~ s/([^\x21-\x7e]|["%])/sprintf('%%%02X', ord($1))/ge;
	return $s;
}

my @got = received($log);
is(scalar(grep { !$_->{signature} } @got), 0, 'every request of every format verifies with the secret');

for my $id (@ids)
{
	my $want = expected($id);
	my $data = $json->decode(qq{{"d": $want->{payload}}})->{d};
	my %at = map { $_->{path} => $_ } grep { $_->{headers}{'webhook-id'} eq $id } @got;

	# Standard Webhooks: byte for byte what 1.3 sent, and no CloudEvent.
	my $sw = $at{'/sw'};
	is($sw->{body}, $want->{sw_body}, "$want->{type}: standard-webhooks body is 1.3's");
	is($sw->{headers}{'content-type'}, 'application/json', "$want->{type}: standard-webhooks content type");
	is(scalar(grep { /^ce-/ } keys %{ $sw->{headers} }), $want->{type} eq 'order.shipped' ? 2 : 0,
		"$want->{type}: standard-webhooks has only the event's own ce- headers");
	# (order.shipped's own ce-id header makes it look like binary mode, which
	# then lacks the other attributes)
	ok(!defined $sw->{event} && $sw->{error}, "$want->{type}: standard-webhooks is not a CloudEvent");

	# Structured mode: the SDK reads the event from the body.
	my $ce = $at{'/ce'};
	is($ce->{headers}{'content-type'}, 'application/cloudevents+json', "$want->{type}: structured content type");
	ok($ce->{event}, "$want->{type}: structured mode is a valid CloudEvent") or diag $ce->{error};
	my $raw = $json->decode($ce->{body});
	is($raw->{time}, $want->{time}, "$want->{type}: structured time is the emit time, RFC 3339 in µs");
	is($raw->{datacontenttype}, 'application/json', "$want->{type}: structured datacontenttype");

	# Binary mode: the SDK reads the attributes from ce-* headers.
	my $bin = $at{'/bin'};
	is($bin->{headers}{'content-type'}, 'application/json', "$want->{type}: binary content type");
	ok($bin->{event}, "$want->{type}: binary mode is a valid CloudEvent") or diag $bin->{error};
	is($bin->{body}, $want->{payload}, "$want->{type}: the binary body is the payload as stored");
	is($bin->{headers}{'ce-time'}, $want->{time}, "$want->{type}: ce-time is the emit time, RFC 3339 in µs");
	is($bin->{headers}{'ce-subject'}, defined $want->{key} ? percent_encoded($want->{key}) : undef,
		"$want->{type}: ce-subject is the key, percent-encoded");

	for my $mode ([ structured => $ce ], [ binary => $bin ])
	{
		my ($name, $r) = @$mode;
		my $ev = $r->{event} // {};
		is($ev->{id}, $id, "$want->{type}: $name id is the event id");
		is($ev->{type}, $want->{type}, "$want->{type}: $name type");
		is($ev->{specversion}, '1.0', "$want->{type}: $name specversion");
		is($ev->{source}, 'postgresql:///postgres', "$want->{type}: $name source is the database's");
		is($ev->{time}, js_time($want->{time}), "$want->{type}: $name time as the SDK reads it");
		# (the SDK does not undo the binding's percent-encoding)
		is($ev->{subject}, $name eq 'binary' && defined $want->{key} ? percent_encoded($want->{key}) : $want->{key},
			"$want->{type}: $name subject is the key" . (defined $want->{key} ? '' : ': none'));
		is($json->encode([ $ev->{data} ]), $json->encode([$data]), "$want->{type}: $name data is the payload");
	}
}

# Headers: the endpoint's extension and the event's own headers arrive in
# binary mode, except the event's forged ce-id (the attribute is the
# event's); structured mode passes ce- headers on as plain headers.
my ($bin4) = grep { $_->{path} eq '/bin' && $_->{headers}{'webhook-id'} eq $ids[3] } @got;
is($bin4->{headers}{'ce-id'}, $ids[3], 'binary: an event header cannot replace ce-id');
is($bin4->{event}{region}, 'eu', 'binary: an event ce- header is an extension attribute');
is($bin4->{event}{tenant}, 'acme', "binary: the endpoint's ce- header is an extension attribute");
is($bin4->{headers}{'x-trace'}, 't4', "binary: the event's other headers are sent");
my ($ce4) = grep { $_->{path} eq '/ce' && $_->{headers}{'webhook-id'} eq $ids[3] } @got;
is($ce4->{event}{id}, $ids[3], 'structured: the id is the event id, whatever its headers');
is($ce4->{headers}{'ce-id'}, 'forged', 'structured: an event ce- header is a plain header');

# Requests went through the relay and its sender both: the sender keeps
# its connection to the receiver open.
my $sender = sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox sender'");
cmp_ok(scalar(grep { (readlink($_) // '') =~ /^socket:/ } glob("/proc/$sender/fd/*")),
	'>', 0, 'the sender sent some of the requests');

# The source setting, at a reload; and a format changed by alter_endpoint.
ok(reload_with('outbox.cloudevents_source' => 'urn:example:orders'), 'relay reloaded');
sql(q{SELECT outbox.alter_endpoint('sw', format => 'cloudevents-binary')});
my $later = sql(q{SELECT outbox.emit('order.closed', '{}')});
ok(wait_received($log, sub { (grep { $_->{headers}{'webhook-id'} eq $later } @_) == 3 }),
	'the later event arrived at each endpoint');
my %later = map { $_->{path} => $_ } grep { $_->{headers}{'webhook-id'} eq $later } received($log);
is(join(',', map { $later{$_}{event}{source} // 'none' } qw(/sw /ce /bin)),
	'urn:example:orders,urn:example:orders,urn:example:orders',
	'outbox.cloudevents_source is the source, and the altered endpoint sends CloudEvents');
is(join(',', map { $later{$_}{signature} ? 'ok' : 'bad' } qw(/sw /ce /bin)), 'ok,ok,ok',
	'and signed');

$node->stop;
done_testing();
