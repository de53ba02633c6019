#!/usr/bin/env bash
# bench/nats.sh: case 15, publishing to NATS JetStream.  N events waiting
# for a paused NATS endpoint are published through outbox to a stream of a
# nats-server started here (127.0.0.1, a free port, JetStream in a temp
# dir, file storage, one replica), against bench/nats_publish.c, a plain
# libnats publisher doing the same publishes (asynchronous, with an
# acknowledgement handler, the same headers, as many unacknowledged at
# once as outbox has for one endpoint: a page, 4 x outbox.batch_size),
# to a stream of its own on the same server, in the same run; the ratio is
# outbox's rate over the plain publisher's (target >= 0.5).
#
# Run by bench/run.sh (BENCH_CASES=15) against its PostgreSQL, or alone
# against any server with outbox preloaded and 127.0.0.1 allowed, through
# the PG* environment variables (the streams are made with
# t/node/nats_stream.js: scripts/deps.sh installs its npm packages):
#
#     NATS_EVENTS=20000 RESULTS=/tmp/r.txt bash bench/nats.sh
#
# Appends "nats.*" lines to $RESULTS and prints them.
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH")
PY=${PY:-/usr/bin/python3}
NATS_EVENTS=${NATS_EVENTS:-100000}
NATS_ROUNDS=${NATS_ROUNDS:-3}
NATS_PENDING=${NATS_PENDING:-}              # the plain publisher's window; empty: outbox's page
RESULTS=${RESULTS:-$(mktemp /tmp/outbox-nats-results.XXXXXX)}
NWORK=$(mktemp -d /tmp/outbox-nats.XXXXXX)
chmod 755 "$NWORK"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
sql() { psql -X -q -v ON_ERROR_STOP=1 -At -c "$1"; }
result() { echo "$1 $2" >>"$RESULTS"; echo "$1 $2"; }
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

SERVER_PID=
cleanup()
{
	if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
	rm -rf "$NWORK"
}
trap cleanup EXIT

# The server, on a port nothing listens on.
PORT=$("$PY" "$(dirname "$0")/free_port.py")
nats-server -a 127.0.0.1 -p "$PORT" -js -sd "$NWORK/js" >"$NWORK/server.log" 2>&1 &
SERVER_PID=$!
stream() { node "$ROOT/t/node/nats_stream.js" "127.0.0.1:$PORT" add "$1" >/dev/null; }
for _ in $(seq 100); do stream '{"name":"PROBE","subjects":["probe"]}' 2>/dev/null && break; sleep 0.1; done
cc -O2 -o "$NWORK/nats_publish" "$BENCH/nats_publish.c" -lnats
# (one page in flight per endpoint: BROKER_PAGE_FACTOR x outbox.batch_size)
[ -n "$NATS_PENDING" ] || NATS_PENDING=$((4 * $(sql "SELECT current_setting('outbox.batch_size')")))


log "case 15: $NATS_EVENTS events to nats-server 127.0.0.1:$PORT (JetStream, R1, file); $NATS_ROUNDS rounds of outbox and of the plain libnats publisher in turn"
: >"$NWORK/outbox.runs"
: >"$NWORK/plain.runs"
for round in $(seq "$NATS_ROUNDS"); do
	stream "{\"name\":\"OB$round\",\"subjects\":[\"ob$round.>\"],\"storage\":\"file\"}"
	stream "{\"name\":\"PL$round\",\"subjects\":[\"pl$round.>\"],\"storage\":\"file\"}"
	psql -X -q -v ON_ERROR_STOP=1 -f "$BENCH/sql/reset.sql" >/dev/null
	sql "SELECT outbox.create_endpoint('nats$round', 'nats://127.0.0.1:$PORT/ob$round.{event_type}', '{bench.*}');
	     SELECT outbox.pause_endpoint('nats$round');" >/dev/null
	psql -X -q -v ON_ERROR_STOP=1 -v first=1 -v last="$NATS_EVENTS" -f "$BENCH/sql/backlog.sql" >/dev/null
	# (the plain publisher's body: as long as the bodies outbox sends)
	SIZE=$(sql "SELECT octet_length(format('{\"type\":\"bench.event\",\"timestamp\":\"2026-12-01T00:00:00.000000Z\",\"data\":%s}', payload))
	            FROM outbox.events LIMIT 1")
	"$PY" "$BENCH/deliver.py" --label "nats_outbox_$round" --resume "nats$round" --wait "nats$round" \
		--events "$NATS_EVENTS" --results "$NWORK/deliver.txt" --timeout 600 | tail -n 2
	rate=$(sed -n "s/^nats_outbox_$round\.rate //p" "$NWORK/deliver.txt" | tail -n 1)
	acked=$(sql "SELECT count(*) FROM outbox.attempt_log a JOIN outbox.endpoints e ON e.id = a.endpoint_id
	             WHERE e.name = 'nats$round' AND a.status = 200")
	[ "$acked" -eq "$NATS_EVENTS" ] || log "  WARNING: outbox had $acked of $NATS_EVENTS acknowledged"
	echo "$rate" >>"$NWORK/outbox.runs"
	log "  outbox: $rate events/s ($acked acknowledged)"

	out=$("$NWORK/nats_publish" "nats://127.0.0.1:$PORT" "pl$round.bench.event" "$NATS_EVENTS" "$SIZE" "$NATS_PENDING")
	prate=$(echo "$out" | sed -n 's/.* rate \([0-9]*\).*/\1/p')
	echo "$prate" >>"$NWORK/plain.runs"
	log "  plain libnats publisher: $prate messages/s ($out)"
done
orate=$(median <"$NWORK/outbox.runs")
prate=$(median <"$NWORK/plain.runs")
result nats.outbox_rate "$orate"
result nats.plain_rate "$prate"
result nats.ratio "$(awk -v a="$orate" -v b="$prate" 'BEGIN { printf("%.2f", a / b) }')"
result nats.rounds "$(paste -sd, "$NWORK/outbox.runs")/$(paste -sd, "$NWORK/plain.runs")"
