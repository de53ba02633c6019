#!/usr/bin/env bash
# bench/kafka.sh: case 14, publishing to Kafka.  N events waiting for a paused
# Kafka endpoint are published through outbox to librdkafka's mock cluster
# (test/kafka_mock.c, 3 brokers on 127.0.0.1), against `kcat -P` producing
# N messages of the same size to the same cluster with the same producer
# settings (idempotent, acks=all), in the same run; the ratio is outbox's
# rate over kcat's (target >= 0.5).  The mock cluster is not a Kafka
# server: the figures compare the two clients, not what a cluster takes.
# Then the floor: what PostgreSQL alone takes to read and record the same
# N events as the relay does (bench/sql/floor.sql), over kcat's rate: no
# relay that records every attempt can do better than that ratio here.
#
# Run by bench/run.sh (BENCH_CASES=14) against its PostgreSQL, or alone
# against any server with outbox preloaded and 127.0.0.1 allowed, through
# the PG* environment variables:
#
#     KAFKA_EVENTS=20000 RESULTS=/tmp/r.txt bash bench/kafka.sh
#
# Appends "kafka.*" lines to $RESULTS and prints them.
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH")
PY=${PY:-/usr/bin/python3}
KAFKA_EVENTS=${KAFKA_EVENTS:-100000}
KAFKA_ROUNDS=${KAFKA_ROUNDS:-3}
KAFKA_IN_FLIGHT=${KAFKA_IN_FLIGHT:-}        # the endpoint's max_in_flight; empty: the default
KAFKA_OPTIONS=${KAFKA_OPTIONS:-}            # the endpoint URL's options, e.g. linger_ms=0
RESULTS=${RESULTS:-$(mktemp /tmp/outbox-kafka-results.XXXXXX)}
KWORK=$(mktemp -d /tmp/outbox-kafka.XXXXXX)
chmod 755 "$KWORK"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
sql() { psql -X -q -v ON_ERROR_STOP=1 -At -c "$1"; }
result() { echo "$1 $2" >>"$RESULTS"; echo "$1 $2"; }
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

MOCK_PID=
cleanup()
{
	exec 9>&- 2>/dev/null || true
	[ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null || true
	rm -rf "$KWORK"
}
trap cleanup EXIT

# The mock cluster, driven through a fifo; its first line is the bootstrap.
cc -O2 -o "$KWORK/kafka_mock" "$ROOT/test/kafka_mock.c" -lrdkafka
mkfifo "$KWORK/mock.in"
"$KWORK/kafka_mock" 3 <"$KWORK/mock.in" >"$KWORK/mock.out" 2>"$KWORK/mock.err" &
MOCK_PID=$!
exec 9>"$KWORK/mock.in"
for _ in $(seq 100); do [ -s "$KWORK/mock.out" ] && break; sleep 0.05; done
BOOT=$(head -n 1 "$KWORK/mock.out")
[ -n "$BOOT" ] || { echo "kafka.sh: the mock cluster did not start" >&2; exit 1; }
mock() { echo "$1" >&9; }

# kcat's input: N lines the size of the bodies outbox sends (a
# standard-webhooks body of bench/sql/backlog.sql's payload, ~300 bytes).
awk -v n="$KAFKA_EVENTS" 'BEGIN {
	note = sprintf("%120s", ""); gsub(/ /, "x", note);
	for (g = 1; g <= n; g++)
		printf("{\"data\": {\"n\": %d, \"note\": \"%s\", \"amount\": 19.99, \"currency\": \"EUR\", \"customer\": \"customer-%d\"}, \"type\": \"bench.event\", \"timestamp\": \"2026-12-01T00:00:00.000000Z\"}\n", g, note, g % 1000)
}' >"$KWORK/messages"

log "case 14: $KAFKA_EVENTS events to the mock Kafka cluster ($BOOT); $KAFKA_ROUNDS rounds of outbox and of kcat -P in turn"
: >"$KWORK/outbox.runs"
: >"$KWORK/kcat.runs"
for round in $(seq "$KAFKA_ROUNDS"); do
	mock "topic ob$round 3"
	mock "topic kc$round 3"
	psql -X -q -v ON_ERROR_STOP=1 -f "$BENCH/sql/reset.sql" >/dev/null
	sql "SELECT outbox.create_endpoint('kafka$round', 'kafka://$BOOT/ob$round${KAFKA_OPTIONS:+?$KAFKA_OPTIONS}', '{bench.*}'
	         ${KAFKA_IN_FLIGHT:+, max_in_flight => $KAFKA_IN_FLIGHT});
	     SELECT outbox.pause_endpoint('kafka$round');" >/dev/null
	psql -X -q -v ON_ERROR_STOP=1 -v first=1 -v last="$KAFKA_EVENTS" -f "$BENCH/sql/backlog.sql" >/dev/null
	"$PY" "$BENCH/deliver.py" --label "kafka_outbox_$round" --resume "kafka$round" --wait "kafka$round" \
		--events "$KAFKA_EVENTS" --results "$KWORK/deliver.txt" --timeout 600 | tail -n 2
	rate=$(sed -n "s/^kafka_outbox_$round\.rate //p" "$KWORK/deliver.txt" | tail -n 1)
	acked=$(sql "SELECT count(*) FROM outbox.attempt_log a JOIN outbox.endpoints e ON e.id = a.endpoint_id
	             WHERE e.name = 'kafka$round' AND a.status = 200")
	[ "$acked" -eq "$KAFKA_EVENTS" ] || log "  WARNING: outbox had $acked of $KAFKA_EVENTS acknowledged"
	echo "$rate" >>"$KWORK/outbox.runs"
	log "  outbox: $rate events/s ($acked acknowledged)"

	t0=$(date +%s.%N)
	kcat -P -b "$BOOT" -t "kc$round" -X enable.idempotence=true -X acks=all <"$KWORK/messages"
	t1=$(date +%s.%N)
	krate=$(awk -v n="$KAFKA_EVENTS" -v a="$t0" -v b="$t1" 'BEGIN { printf("%.0f", n / (b - a)) }')
	echo "$krate" >>"$KWORK/kcat.runs"
	log "  kcat -P: $krate messages/s"
done
orate=$(median <"$KWORK/outbox.runs")
krate=$(median <"$KWORK/kcat.runs")
result kafka.outbox_rate "$orate"
result kafka.kcat_rate "$krate"
result kafka.ratio "$(awk -v a="$orate" -v b="$krate" 'BEGIN { printf("%.2f", a / b) }')"
result kafka.rounds "$(paste -sd, "$KWORK/outbox.runs")/$(paste -sd, "$KWORK/kcat.runs")"

# The floor: PostgreSQL alone reading and recording the same N events as
# the relay does (bench/sql/floor.sql, pages of a broker endpoint's size),
# with no relay and no Kafka.  No relay that keeps a record of every
# attempt can publish faster on this machine; its ratio to kcat bounds the
# case's.
psql -X -q -v ON_ERROR_STOP=1 -f "$BENCH/sql/reset.sql" >/dev/null
sql "SELECT outbox.create_endpoint('floor', 'kafka://$BOOT/floor', '{bench.*}');
     SELECT outbox.pause_endpoint('floor');" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -v first=1 -v last="$KAFKA_EVENTS" -f "$BENCH/sql/backlog.sql" >/dev/null
page=$((4 * $(sql "SELECT current_setting('outbox.batch_size')")))   # BROKER_PAGE_FACTOR
floor=$(psql -X -q -v ON_ERROR_STOP=1 -v page="$page" -v endpoint=floor -f "$BENCH/sql/floor.sql" 2>&1 |
	sed -n 's/.*NOTICE:  floor \([0-9]*\) .* \([0-9]*\)$/\1 \2/p')
[ "${floor%% *}" = "$KAFKA_EVENTS" ] || log "  WARNING: the floor read ${floor%% *} of $KAFKA_EVENTS events"
log "  PostgreSQL alone, reading and recording $KAFKA_EVENTS events in pages of $page: ${floor##* } events/s"
result kafka.floor_rate "${floor##* }"
result kafka.floor_ratio "$(awk -v a="${floor##* }" -v b="$krate" 'BEGIN { printf("%.2f", a / b) }')"
