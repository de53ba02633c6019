#!/usr/bin/env bash
# bench/redis.sh: cases 21, 22 and 23, publishing to Redis, on a
# redis-server started here (127.0.0.1, a free port below 32768, its files
# in a temp dir, stopped however the script ends), the same server and
# persistence for both sides of each ratio:
#
#   21  BullMQ: N events waiting for a paused bullmq:// endpoint, added as
#       jobs by outbox, against BullMQ's own Node producer
#       (bench/bullmq_producer.js: Queue.addBulk in pages of the relay's
#       page, 4 x outbox.batch_size, one page in flight) adding N jobs of
#       the same name, data size, options and priority, ids given (target
#       >= 1.0).
#   22  Streams: N events to a redis:// endpoint (XADD), against
#       redis-benchmark -P 64 running XADD of an entry the relay wrote
#       (same fields, same sizes) N times (target >= 0.5); then, for
#       scale, redis-benchmark on one connection and the floor
#       (bench/sql/floor.sql, as in bench/kafka.sh).
#   23  BullMQ beside webhooks: case 21's endpoint working off its N jobs
#       while BESIDE_ENDPOINTS webhook endpoints (to WEBHOOK_URL), following
#       the stream, get BESIDE_RATE events a second between them, against
#       the same with no events for the webhook endpoints: the BullMQ
#       endpoint's rate beside them over its rate alone (target >= 0.8).
#
# Each side runs REDIS_ROUNDS rounds, in turn (which goes first alternates
# from round to round); the median counts and the worst round is reported.
# Redis is emptied and its AOF rewritten before every run, so that each
# starts from the same empty server.  Persistence: appendonly yes with
# appendfsync REDIS_FSYNC, "everysec" unless set ("always" is what the
# tests use; docs/redis.md says what each keeps).  The relay's rate runs
# from the commit that resumes the endpoint to the record of its last page
# (bench/deliver.py; case 23: to the attempt log's last), every job or
# entry checked in Redis and in the attempt log; the baselines' from their
# first command to their last reply.  Cases 21 and 22 also give the
# relay's CPU per event.
#
# Run by bench/run.sh (BENCH_CASES="21 22 23", one case a call through
# REDIS_CASES) against its PostgreSQL and nginx, or alone as root against
# any server with outbox preloaded and 127.0.0.1 allowed, through the PG*
# environment variables (case 23 then needs WEBHOOK_URL, a receiver that
# answers 2xx; the npm packages of t/node: scripts/deps.sh):
#
#     REDIS_CASES="21 22" REDIS_EVENTS=20000 RESULTS=/tmp/r.txt bash bench/redis.sh
#
# Appends "redis_bullmq.*", "redis_stream.*" and "redis_beside.*" lines to
# $RESULTS and prints them.
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH")
PY=${PY:-/usr/bin/python3}
REDIS_CASES=${REDIS_CASES:-21 22 23}
REDIS_EVENTS=${REDIS_EVENTS:-100000}
REDIS_ROUNDS=${REDIS_ROUNDS:-3}
REDIS_FSYNC=${REDIS_FSYNC:-everysec}
REDIS_PAGE=${REDIS_PAGE:-}                  # addBulk's page; empty: the relay's, 4 x outbox.batch_size
REDIS_PRIORITY=${REDIS_PRIORITY:-on}        # the bullmq:// URL's priority; off: plain adds on both sides
REDIS_BENCH_CLIENTS=${REDIS_BENCH_CLIENTS:-50}  # redis-benchmark's connections (its default)
BESIDE_ENDPOINTS=${BESIDE_ENDPOINTS:-100}
BESIDE_RATE=${BESIDE_RATE:-5000}            # case 23: events a second to the webhook endpoints, in all
WEBHOOK_URL=${WEBHOOK_URL:-}                # case 23: endpoint i posts to WEBHOOK_URL followed by i
REDIS_PERF=${REDIS_PERF:-0}                 # case 22: 1 adds a run under perf record (REDIS_PERF_OUT)
RESULTS=${RESULTS:-$(mktemp /tmp/outbox-redis-results.XXXXXX)}
RWORK=$(mktemp -d /tmp/outbox-redis.XXXXXX)
chmod 755 "$RWORK"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
sql() { psql -X -q -v ON_ERROR_STOP=1 -At -c "$1"; }
result() { echo "$1 $2" >>"$RESULTS"; echo "$1 $2"; }
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
worst() { sort -g | head -n 1; }
in_turn() { if [ $(($1 % 2)) -eq 1 ]; then echo "$2 $3"; else echo "$3 $2"; fi; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf("%.2f", a / b) }'; }

[ -d "$ROOT/t/node/node_modules/bullmq" ] ||
	{ echo "redis.sh: npm package bullmq missing in t/node (scripts/deps.sh)" >&2; exit 1; }
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
	{ echo "redis.sh: redis-server and redis-benchmark are needed (scripts/deps.sh)" >&2; exit 1; }

SERVER_PID=
GEN_PID=
cleanup()
{
	if [ -n "$GEN_PID" ]; then kill "$GEN_PID" 2>/dev/null || true; wait "$GEN_PID" 2>/dev/null || true; fi
	if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
	rm -rf "$RWORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The server: no snapshots, the AOF with REDIS_FSYNC, no automatic
# rewrite (it would land in one run and not the other).
PORT=$("$PY" "$BENCH/free_port.py")
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$RWORK" --save '' --appendonly yes \
	--appendfsync "$REDIS_FSYNC" --auto-aof-rewrite-percentage 0 --daemonize no \
	--logfile "$RWORK/redis.log" &
SERVER_PID=$!
rcli() { redis-cli -p "$PORT" "$@"; }
for _ in $(seq 100); do rcli PING 2>/dev/null | grep -q PONG && break; sleep 0.1; done
rcli PING | grep -q PONG || { cat "$RWORK/redis.log" >&2; exit 1; }

# empty_redis: FLUSHALL and an AOF rewritten to nothing, before each run.
empty_redis()
{
	rcli FLUSHALL >/dev/null
	rcli BGREWRITEAOF >/dev/null
	for _ in $(seq 600); do
		rcli INFO persistence | grep -q '^aof_rewrite_in_progress:0' &&
			rcli INFO persistence | grep -q '^aof_rewrite_scheduled:0' && return 0
		sleep 0.1
	done
	log "  WARNING: the AOF rewrite did not end within 60 s"
}

PAGE=${REDIS_PAGE:-$((4 * $(sql "SELECT current_setting('outbox.batch_size')")))}   # BROKER_PAGE_FACTOR
if [ "$REDIS_PRIORITY" = on ]; then
	QUERY=
	PRIORITY=32768              # an event of priority 0 (redis.c: 32768 - priority)
	jobs_in() { rcli ZCARD "bull:$1:prioritized"; }
	first_job() { rcli --raw ZRANGE "bull:$1:prioritized" 0 0; }
else
	QUERY='?priority=off'
	PRIORITY=0
	jobs_in() { rcli LLEN "bull:$1:wait"; }
	first_job() { rcli --raw LRANGE "bull:$1:wait" 0 0; }
fi

# relay_run LABEL NAME URL N: a paused endpoint NAME for URL, N events
# waiting for it, delivered; prints its rate and checks the attempt log.
relay_run()
{
	local label=$1 name=$2 url=$3 n=$4 rate ok

	psql -X -q -v ON_ERROR_STOP=1 -f "$BENCH/sql/reset.sql" >/dev/null
	sql "SELECT outbox.create_endpoint('$name', '$url', '{bench.*}');
	     SELECT outbox.pause_endpoint('$name');" >/dev/null
	psql -X -q -v ON_ERROR_STOP=1 -v first=1 -v last="$n" -f "$BENCH/sql/backlog.sql" >/dev/null
	"$PY" "$BENCH/deliver.py" --label "$label" --resume "$name" --wait "$name" \
		--events "$n" --results "$RWORK/deliver.txt" --timeout 600 >"$RWORK/deliver.out"
	rate=$(sed -n "s/^$label\.rate //p" "$RWORK/deliver.txt" | tail -n 1)
	# (the relay's CPU per event in µs, into cpu.last: less at the mercy of
	# a busy machine than the rate)
	awk -v l="$label." -v n="$n" 'index($1, l) == 1 { v[substr($1, length(l) + 1)] = $2 }
		END { printf("%.1f\n", v["relay_cpu"] * v["seconds"] / n * 1e6) }' "$RWORK/deliver.txt" >"$RWORK/cpu.last"
	ok=$(sql "SELECT count(*) FROM outbox.attempt_log a JOIN outbox.endpoints e ON e.id = a.endpoint_id
	          WHERE e.name = '$name' AND a.status = 200")
	[ "$ok" -eq "$n" ] || log "  WARNING: $name had $ok of $n added" >&2
	echo "$rate"
}

# A warm-up: one event through the relay to a queue and to a stream; the
# job's data is the Node producer's template, the entry redis-benchmark's.
empty_redis
relay_run warm_job warmjob "bullmq://127.0.0.1:$PORT/warm$QUERY" 1 >/dev/null
relay_run warm_entry warmentry "redis://127.0.0.1:$PORT/warm" 1 >/dev/null
TEMPLATE=$(rcli --raw HGET "bull:warm:$(first_job warm)" data)
mapfile -t ENTRY < <(rcli --raw XRANGE warm - + COUNT 1 | tail -n +2)
[ -n "$TEMPLATE" ] && [ "${#ENTRY[@]}" -ge 8 ] ||
	{ echo "redis.sh: the warm-up job or entry is missing (template '$TEMPLATE', ${#ENTRY[@]} fields)" >&2; exit 1; }
result redis.appendfsync "$REDIS_FSYNC"
result redis.page "$PAGE"
result redis.job_bytes "$(printf '%s' "$TEMPLATE" | wc -c)"
log "Redis $(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p') on 127.0.0.1:$PORT, appendonly yes," \
	"appendfsync $REDIS_FSYNC; a job's data $(printf '%s' "$TEMPLATE" | wc -c) bytes;" \
	"an entry's fields: ${ENTRY[*]:0:2} ... ($(printf '%s' "${ENTRY[*]}" | wc -c) bytes)"

# report PREFIX A B: medians, worst rounds and the ratio of two sides'
# rounds (files $RWORK/A.runs and $RWORK/B.runs).
report()
{
	local a b
	a=$(median <"$RWORK/$2.runs")
	b=$(median <"$RWORK/$3.runs")
	result "$1.$2_rate" "$a"
	result "$1.$2_worst" "$(worst <"$RWORK/$2.runs")"
	result "$1.$3_rate" "$b"
	result "$1.$3_worst" "$(worst <"$RWORK/$3.runs")"
	result "$1.ratio" "$(ratio "$a" "$b")"
	result "$1.worst_ratio" "$(ratio "$(worst <"$RWORK/$2.runs")" "$b")"
	result "$1.rounds" "$(paste -sd, "$RWORK/$2.runs")/$(paste -sd, "$RWORK/$3.runs")"
}

# Case 21: BullMQ, outbox against Queue.addBulk.
case_bullmq()
{
	local round side rate got n secs

	log "case 21: $REDIS_EVENTS jobs to BullMQ (priority $REDIS_PRIORITY), outbox against Queue.addBulk" \
		"in pages of $PAGE; $REDIS_ROUNDS rounds in turn"
	: >"$RWORK/outbox.runs"
	: >"$RWORK/outbox.cpu"
	: >"$RWORK/node.runs"
	for round in $(seq "$REDIS_ROUNDS"); do
		for side in $(in_turn "$round" outbox node); do
			empty_redis
			if [ "$side" = outbox ]; then
				rate=$(relay_run "bq_$round" "bq$round" "bullmq://127.0.0.1:$PORT/ob$round$QUERY" "$REDIS_EVENTS")
				got=$(jobs_in "ob$round")
				cat "$RWORK/cpu.last" >>"$RWORK/outbox.cpu"
			else
				read -r n secs < <(node "$BENCH/bullmq_producer.js" "$PORT" "nd$round" "$REDIS_EVENTS" "$PAGE" \
					"$TEMPLATE" "$PRIORITY")
				rate=$(awk -v n="$n" -v s="$secs" 'BEGIN { printf("%.0f", n / s) }')
				got=$(jobs_in "nd$round")
			fi
			[ "$got" -eq "$REDIS_EVENTS" ] || log "  WARNING: $side: $got of $REDIS_EVENTS jobs in the queue"
			echo "$rate" >>"$RWORK/$side.runs"
			log "  round $round, $side: $rate jobs/s ($got in the queue)"
		done
	done
	report redis_bullmq outbox node
	result redis_bullmq.outbox_cpu_us "$(median <"$RWORK/outbox.cpu")"
	result redis_bullmq.outbox_cpu_us_rounds "$(paste -sd, "$RWORK/outbox.cpu")"
}

# Case 22: streams, outbox against redis-benchmark -P 64.
case_stream()
{
	local round side rate got floor

	log "case 22: $REDIS_EVENTS entries to a stream, outbox against redis-benchmark -P 64" \
		"-c $REDIS_BENCH_CLIENTS XADD of the relay's entry; $REDIS_ROUNDS rounds in turn"
	: >"$RWORK/outbox.runs"
	: >"$RWORK/outbox.cpu"
	: >"$RWORK/benchmark.runs"
	for round in $(seq "$REDIS_ROUNDS"); do
		for side in $(in_turn "$round" outbox benchmark); do
			empty_redis
			if [ "$side" = outbox ]; then
				rate=$(relay_run "st_$round" "st$round" "redis://127.0.0.1:$PORT/obs$round" "$REDIS_EVENTS")
				got=$(rcli XLEN "obs$round")
				cat "$RWORK/cpu.last" >>"$RWORK/outbox.cpu"
			else
				# (the rate is the second of the CSV line's last 7 fields:
				# the first, the command, has the entry's quotes in it)
				rate=$(redis-benchmark -p "$PORT" -P 64 -c "$REDIS_BENCH_CLIENTS" -n "$REDIS_EVENTS" --csv \
					XADD "bms$round" '*' "${ENTRY[@]}" | awk -F, 'NR == 2 { gsub(/"/, "", $(NF - 6)); print $(NF - 6) }')
				rate=$(printf '%.0f' "$rate")
				got=$(rcli XLEN "bms$round")
			fi
			# (redis-benchmark's pipelines may send up to -P x -c more)
			[ "$got" -ge "$REDIS_EVENTS" ] || log "  WARNING: $side: $got of $REDIS_EVENTS entries in the stream"
			echo "$rate" >>"$RWORK/$side.runs"
			log "  round $round, $side: $rate entries/s ($got in the stream)"
		done
	done
	report redis_stream outbox benchmark
	result redis_stream.outbox_cpu_us "$(median <"$RWORK/outbox.cpu")"
	result redis_stream.outbox_cpu_us_rounds "$(paste -sd, "$RWORK/outbox.cpu")"

	# For scale, not the target: redis-benchmark on one connection, as the
	# relay has one per server.
	empty_redis
	rate=$(redis-benchmark -p "$PORT" -P 64 -c 1 -n "$REDIS_EVENTS" --csv \
		XADD bm1 '*' "${ENTRY[@]}" | awk -F, 'NR == 2 { gsub(/"/, "", $(NF - 6)); print $(NF - 6) }')
	result redis_stream.benchmark_c1_rate "$(printf '%.0f' "$rate")"

	# The floor (as bench/kafka.sh's): PostgreSQL alone reading and
	# recording the same N events in pages of PAGE, no relay, no Redis.
	psql -X -q -v ON_ERROR_STOP=1 -f "$BENCH/sql/reset.sql" >/dev/null
	sql "SELECT outbox.create_endpoint('floor', 'redis://127.0.0.1:$PORT/floor', '{bench.*}');
	     SELECT outbox.pause_endpoint('floor');" >/dev/null
	psql -X -q -v ON_ERROR_STOP=1 -v first=1 -v last="$REDIS_EVENTS" -f "$BENCH/sql/backlog.sql" >/dev/null
	floor=$(psql -X -q -v ON_ERROR_STOP=1 -v page="$PAGE" -v endpoint=floor -f "$BENCH/sql/floor.sql" 2>&1 |
		sed -n 's/.*NOTICE:  floor \([0-9]*\) .* \([0-9]*\)$/\1 \2/p')
	[ "${floor%% *}" = "$REDIS_EVENTS" ] || log "  WARNING: the floor read ${floor%% *} of $REDIS_EVENTS events"
	log "  redis-benchmark -P 64 on one connection: $(printf '%.0f' "$rate") entries/s;" \
		"PostgreSQL alone, reading and recording $REDIS_EVENTS events in pages of $PAGE: ${floor##* } events/s"
	result redis_stream.floor_rate "${floor##* }"

	# REDIS_PERF=1: one more outbox run under perf record -g (the relay
	# process), its report by library and by symbol in $REDIS_PERF_OUT.
	if [ "$REDIS_PERF" = 1 ] && command -v perf >/dev/null; then
		local pid rec
		empty_redis
		psql -X -q -v ON_ERROR_STOP=1 -f "$BENCH/sql/reset.sql" >/dev/null
		sql "SELECT outbox.create_endpoint('stperf', 'redis://127.0.0.1:$PORT/perf', '{bench.*}');
		     SELECT outbox.pause_endpoint('stperf');" >/dev/null
		psql -X -q -v ON_ERROR_STOP=1 -v first=1 -v last="$REDIS_EVENTS" -f "$BENCH/sql/backlog.sql" >/dev/null
		pid=$(sql "SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
		perf record -q -g -p "$pid" -o "$RWORK/perf.data" >/dev/null 2>&1 &
		rec=$!
		sleep 0.5
		"$PY" "$BENCH/deliver.py" --label stperf --resume stperf --wait stperf --events "$REDIS_EVENTS" \
			--results "$RWORK/deliver.txt" --timeout 600 | tail -n 1
		kill -INT "$rec" 2>/dev/null || true
		wait "$rec" 2>/dev/null || true
		{
			echo "# perf record -g of the relay process during case 22's delivery ($REDIS_EVENTS entries), by library"
			perf report -i "$RWORK/perf.data" --stdio --no-children --sort dso -g none 2>/dev/null |
				grep -v '^#' | grep -v '^$' | head -n 12
			echo "# by symbol"
			perf report -i "$RWORK/perf.data" --stdio --no-children --sort dso,symbol -g none \
				--percent-limit 0.7 2>/dev/null | grep -v '^#' | grep -v '^$' | head -n 40
		} >"${REDIS_PERF_OUT:-$RWORK/perf.txt}"
		cat "${REDIS_PERF_OUT:-$RWORK/perf.txt}"
	fi
}

# follow PREFIX COUNT: wait until COUNT endpoints named PREFIX... follow
# the relay's stream (as run.sh's follow_stream: events nobody subscribes
# to bring them to where it is).
follow()
{
	for _ in $(seq 600); do
		[ "$(sql "SELECT count(*) FROM outbox.positions p JOIN outbox.endpoints e ON e.id = p.endpoint_id
		          WHERE p.follows AND starts_with(e.name, '$1')")" -ge "$2" ] && return 0
		sql "SELECT outbox.emit('warm.up', '{}')" >/dev/null
		sleep 0.1
	done
	log "  WARNING: $2 endpoints $1* do not follow the stream after 60 s"
}

# Case 23: the BullMQ endpoint of case 21 working off its N jobs (waiting
# while it was paused, as in case 21), while BESIDE_ENDPOINTS webhook
# endpoints (each with its own event type, posting to WEBHOOK_URL),
# following the stream as endpoints do once created, get BESIDE_RATE events
# a second between them (pgbench: BESIDE_RATE / BESIDE_ENDPOINTS commits a
# second, each with one event for every webhook endpoint), against the same
# with no events for the webhook endpoints.  The rate is the N jobs over
# the time from the commit that resumed the BullMQ endpoint to the record
# of the last of them (the attempt log's "at"; once done, the endpoint
# follows the stream and its position moves on with the webhook
# endpoints' events).  (A backlog committed into the stream instead would
# be read before what the webhook endpoints get after it: they would get
# nothing while it is delivered.)
case_beside()
{
	local round side rate got webhooks tps t1 started

	[ -n "$WEBHOOK_URL" ] || { log "case 23 needs WEBHOOK_URL (bench/run.sh gives nginx's)"; return 0; }
	command -v pgbench >/dev/null || { log "case 23 needs pgbench"; return 0; }
	printf '%s\n' "SELECT count(outbox.emit('side.e' || i, jsonb_build_object('n', i, 'customer', 'customer-' || i, 'amount', 19.99, 'currency', 'EUR', 'note', repeat('x', 120)))) FROM generate_series(1, $BESIDE_ENDPOINTS) AS i;" \
		>"$RWORK/side.sql"
	tps=$(awk -v r="$BESIDE_RATE" -v n="$BESIDE_ENDPOINTS" 'BEGIN { printf("%g", r / n) }')
	log "case 23: $REDIS_EVENTS jobs to BullMQ beside $BESIDE_ENDPOINTS webhook endpoints getting" \
		"$BESIDE_RATE events/s between them, against the same with none; all following the stream;" \
		"$REDIS_ROUNDS rounds in turn"
	: >"$RWORK/beside.runs"
	: >"$RWORK/alone.runs"
	: >"$RWORK/webhooks.runs"
	for round in $(seq "$REDIS_ROUNDS"); do
		for side in $(in_turn "$round" beside alone); do
			empty_redis
			psql -X -q -v ON_ERROR_STOP=1 -f "$BENCH/sql/reset.sql" >/dev/null
			sql "SELECT outbox.create_endpoint('bs$round', 'bullmq://127.0.0.1:$PORT/bs$round$QUERY', '{bench.event}');
			     SELECT outbox.pause_endpoint('bs$round');" >/dev/null
			psql -X -q -v ON_ERROR_STOP=1 -v prefix=wh -v first=1 -v n="$BESIDE_ENDPOINTS" -v url="$WEBHOOK_URL" \
				-v types=side.e -v timeout='30 seconds' -v paused=off -f "$BENCH/sql/endpoints.sql" >/dev/null
			follow wh "$BESIDE_ENDPOINTS"
			psql -X -q -v ON_ERROR_STOP=1 -v first=1 -v last="$REDIS_EVENTS" -f "$BENCH/sql/backlog.sql" >/dev/null
			if [ "$side" = beside ]; then
				pgbench -n -R "$tps" -c 1 -j 1 -T 600 -f "$RWORK/side.sql" >"$RWORK/pgbench.out" 2>&1 &
				GEN_PID=$!
				sleep 2          # (the webhook endpoints busy before the jobs come)
			fi
			# (resumed and timed as deliver.py does; waited for here: the
			# endpoint's position, which deliver.py watches, moves on with the
			# stream's once it follows, and the jobs are counted in Redis)
			started=$(psql -X -q -At -v ON_ERROR_STOP=1 -c BEGIN -c "SELECT outbox.resume_endpoint('bs$round')" \
				-c "SELECT outbox.emit('wake.relay', '{}')" -c COMMIT \
				-c "SELECT extract(epoch FROM clock_timestamp())" | tail -n 1)
			for _ in $(seq 6000); do
				[ "$(jobs_in "bs$round")" -ge "$REDIS_EVENTS" ] && break
				sleep 0.1
			done
			for _ in $(seq 600); do
				[ "$(sql "SELECT count(*) FROM outbox.attempt_log a JOIN outbox.endpoints e ON e.id = a.endpoint_id
				          WHERE e.name = 'bs$round' AND a.status = 200")" -ge "$REDIS_EVENTS" ] && break
				sleep 0.1
			done
			t1=$(sql "SELECT extract(epoch FROM max(a.at)) FROM outbox.attempt_log a
			          JOIN outbox.endpoints e ON e.id = a.endpoint_id WHERE e.name = 'bs$round'")
			webhooks=$(sql "SELECT count(*) FROM outbox.attempt_log a JOIN outbox.endpoints e ON e.id = a.endpoint_id
			                WHERE starts_with(e.name, 'wh') AND a.status BETWEEN 200 AND 299
			                  AND a.at BETWEEN to_timestamp($started) AND to_timestamp($t1)")
			if [ -n "$GEN_PID" ]; then
				kill "$GEN_PID" 2>/dev/null || true
				wait "$GEN_PID" 2>/dev/null || true
				GEN_PID=
				grep -q 'ERROR\|FATAL\|aborted' "$RWORK/pgbench.out" && { log "  WARNING: pgbench:"; cat "$RWORK/pgbench.out"; }
			fi
			rate=$(awk -v n="$REDIS_EVENTS" -v a="$started" -v b="$t1" 'BEGIN { printf("%.0f", n / (b - a)) }')
			got=$(jobs_in "bs$round")
			[ "$got" -eq "$REDIS_EVENTS" ] || log "  WARNING: $side: $got of $REDIS_EVENTS jobs in the queue"
			[ "$side" = beside ] && echo "$webhooks" >>"$RWORK/webhooks.runs"
			echo "$rate" >>"$RWORK/$side.runs"
			log "  round $round, $side: $rate jobs/s ($got in the queue; webhook deliveries meanwhile: $webhooks," \
				"$(awk -v w="$webhooks" -v a="$started" -v b="$t1" 'BEGIN { printf("%.0f", w / (b - a)) }')/s)"
		done
	done
	report redis_beside beside alone
	result redis_beside.webhook_rate "$BESIDE_RATE"
	result redis_beside.webhooks_meanwhile "$(paste -sd, "$RWORK/webhooks.runs")"
}

for c in $REDIS_CASES; do
	case $c in
	21) case_bullmq ;;
	22) case_stream ;;
	23) case_beside ;;
	*) echo "redis.sh: no case $c" >&2; exit 1 ;;
	esac
done
