#!/usr/bin/env bash
# test/h1/run.sh: the HTTP/1.1 response parser on its own (src/targets/h1parse.c):
# the unit cases, the same cases beside libcurl (curl_diff.c), then the
# libFuzzer target over the seed corpus for a bounded time (H1_FUZZ_SECONDS,
# 60 by default; 0 runs the corpus once); the cases and the fuzz target under
# AddressSanitizer and UndefinedBehaviorSanitizer.  Needs gcc and clang with
# its runtime (scripts/deps.sh installs them).  Ends with "N passed, N failed".
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC="$HERE/../../src/targets"
WORK=$(mktemp -d /tmp/outbox-h1.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SECONDS_FOR_FUZZ=${H1_FUZZ_SECONDS:-60}
passed=0
failed=0
CFLAGS=(-g -O1 -Wall -Wextra -Wno-missing-field-initializers -Werror -I "$SRC/.." -I "$HERE")

echo "== h1: unit cases"
if cc "${CFLAGS[@]}" -fsanitize=address,undefined -fno-sanitize-recover=all \
	"$HERE/cases.c" "$SRC/h1parse.c" -o "$WORK/cases" && "$WORK/cases" >"$WORK/cases.out" 2>&1; then
	:
fi
cat "$WORK/cases.out" 2>/dev/null | grep -v '^ok ' || true
p=$(sed -n 's/^h1 cases: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$WORK/cases.out" 2>/dev/null)
f=$(sed -n 's/^h1 cases: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$WORK/cases.out" 2>/dev/null)
if [ -z "$p" ]; then
	echo "h1: the unit cases did not build or run to their end"
	failed=$((failed + 1))
else
	passed=$((passed + p))
	failed=$((failed + f))
fi

echo "== h1: beside libcurl"
if cc "${CFLAGS[@]}" "$HERE/curl_diff.c" "$SRC/h1parse.c" -lcurl -lpthread -o "$WORK/curl_diff" &&
	timeout 300 "$WORK/curl_diff" >"$WORK/curl_diff.out" 2>&1; then
	:
fi
grep -v '^ok ' "$WORK/curl_diff.out" 2>/dev/null | grep -v '^#' || true
p=$(sed -n 's/^h1 curl: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$WORK/curl_diff.out" 2>/dev/null)
f=$(sed -n 's/^h1 curl: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$WORK/curl_diff.out" 2>/dev/null)
if [ -z "$p" ]; then
	tail -n 20 "$WORK/curl_diff.out" 2>/dev/null
	echo "h1: the comparison with libcurl did not build or run to its end"
	failed=$((failed + 1))
else
	passed=$((passed + p))
	failed=$((failed + f))
fi

echo "== h1: fuzzing for ${SECONDS_FOR_FUZZ} s"
mkdir "$WORK/corpus"
cp "$HERE"/corpus/* "$WORK/corpus/"
if clang "${CFLAGS[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	"$HERE/fuzz.c" "$SRC/h1parse.c" -o "$WORK/fuzz" &&
	(cd "$WORK" && ./fuzz -max_total_time="$SECONDS_FOR_FUZZ" -max_len=4096 -timeout=10 \
		-rss_limit_mb=1024 -print_final_stats=1 -runs=$([ "$SECONDS_FOR_FUZZ" = 0 ] && echo 0 || echo -1) \
		corpus >"$WORK/fuzz.out" 2>&1); then
	grep -E '^(stat::number_of_executed_units|#[0-9]+ +DONE)' "$WORK/fuzz.out" || true
	echo "ok - fuzz: no finding"
	passed=$((passed + 1))
else
	tail -n 40 "$WORK/fuzz.out" 2>/dev/null
	for crash in "$WORK"/crash-* "$WORK"/leak-* "$WORK"/timeout-*; do
		[ -f "$crash" ] && { echo "-- $crash:"; od -c "$crash" | head -20; }
	done
	echo "not ok - fuzz: a finding (above)"
	failed=$((failed + 1))
fi

echo "h1: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
