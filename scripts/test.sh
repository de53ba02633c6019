#!/usr/bin/env bash
# scripts/test.sh: install what is missing, build and install outbox, then run
# the whole suite (pg_regress, pg_isolation_regress, TAP) as the postgres user
# in a scratch copy of the tree under /tmp.  Run as root, from anywhere.
# Ends with the line "N passed, N failed" and exits non-zero on any failure.
# The unit tier is the HTTP/1.1 parser's tests and scripts/check_structure.sh.
# A test file that skips itself counts as failed unless OUTBOX_ALLOW_SKIPS=1.
#
# Run with none of PG_MAJOR, OUTBOX_TIERS and PROVE_TESTS set (as README's
# test command and CI run it), it runs the suite against every PostgreSQL
# major it supports, one after the other, each in a run of its own:
#   15  every tier (Debian's packages);
#   18  regress, isolation and TAP, built with assertions (--enable-cassert);
#   17  regress, isolation and the core TAP files ($CORE_TAP below).
# The first run of 17 and 18 builds them from Debian's source packages
# (scripts/pg.sh), about ten minutes on 2 cores; later runs reuse
# the builds.  The last line sums the runs.
#
# A part of the suite: OUTBOX_TIERS lists the tiers to run (unit, regress,
# isolation, tap, package; all by default) and PROVE_TESTS the TAP files, e.g.
#   OUTBOX_TIERS=tap PROVE_TESTS="t/008_hostile.pl" bash scripts/test.sh
# and PROVE_VERBOSE=1 prints each TAP test's lines (the figures in their
# names).
# PG_MAJOR picks the PostgreSQL to build and test against: 15 (Debian's, the
# default), 17 or 18 (built once by scripts/pg.sh; 18 with assertions, see
# OUTBOX_CASSERT there), e.g.
#   PG_MAJOR=17 OUTBOX_TIERS="regress isolation" bash scripts/test.sh
# The extension is installed into that PostgreSQL, so runs for one major
# from two checkouts take turns (a lock on /tmp/outbox-test.lock for 15,
# /tmp/outbox-test-MAJOR.lock for the others).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/copy_tree.sh
. "$ROOT/scripts/copy_tree.sh"

# The TAP files that run on every major: delivery, the relay's loop and
# stream, crashes, standbys, databases, rotation, dump and restore, an
# endpoints load while a request is in flight.
CORE_TAP="t/001_delivery.pl t/004_relay.pl t/005_standby.pl t/007_crash.pl t/011_databases.pl t/012_retention.pl t/013_dump_restore.pl t/021_stream.pl t/036_relay_memory.pl t/038_reload_in_flight.pl"

# count_line LOG PREFIX RC: set passed and failed from LOG's last line
# "PREFIXN passed, N failed"; no such line, or a failing RC with no failure
# counted, is one failure.
count_line()
{
	local line
	line=$(grep -E "^$2[0-9]+ passed, [0-9]+ failed\$" "$1" | tail -n 1 || true)
	line=${line#"$2"}
	passed=${line%% passed*}
	failed=${line#*passed, }
	failed=${failed%% failed}
	if [ -z "$line" ]; then
		passed=0
		failed=1
	fi
	if [ "$3" -ne 0 ] && [ "$failed" -eq 0 ]; then
		failed=1
	fi
}

if [ -z "${PG_MAJOR:-}${OUTBOX_TIERS:-}${PROVE_TESTS:-}" ]; then
	# The matrix: each major in a run of its own, so that each installs its
	# own build; a failing major does not hide the others' results.
	bash "$ROOT/scripts/deps.sh"
	export OUTBOX_DEPS_DONE=1
	total_passed=0
	total_failed=0
	summary=""
	for run in "15|" "18|regress isolation tap" "17|regress isolation tap"; do
		major=${run%%|*}
		tiers=${run#*|}
		log=$(mktemp /tmp/outbox-test-matrix.XXXXXX)
		start=$SECONDS
		rc=0
		if [ "$major" = 17 ]; then
			PG_MAJOR=$major OUTBOX_TIERS=$tiers PROVE_TESTS=$CORE_TAP bash "$0" 2>&1 | tee "$log" || rc=$?
		else
			PG_MAJOR=$major OUTBOX_TIERS=$tiers bash "$0" 2>&1 | tee "$log" || rc=$?
		fi
		case $rc in 130 | 143) rm -f "$log"; exit "$rc" ;; esac
		count_line "$log" "" "$rc"
		rm -f "$log"
		total_passed=$((total_passed + passed))
		total_failed=$((total_failed + failed))
		summary+="== PostgreSQL $major (${tiers:-every tier}): $passed passed, $failed failed, $((SECONDS - start)) s"$'\n'
	done
	printf '%s' "$summary"
	echo "$total_passed passed, $total_failed failed"
	[ "$total_failed" -eq 0 ]
	exit
fi
PG_MAJOR=${PG_MAJOR:-15}

# The same messages and collation on every machine, and no stray connection
# settings: every instance the suite uses is private.
export LC_ALL=C.UTF-8
unset PGHOST PGHOSTADDR PGPORT PGDATA PGDATABASE PGUSER PGSERVICE PGOPTIONS

[ -n "${OUTBOX_DEPS_DONE:-}" ] || bash "$ROOT/scripts/deps.sh"
# (builds that PostgreSQL the first time, which takes minutes)
PG_CONFIG=$(bash "$ROOT/scripts/pg.sh" "$PG_MAJOR" | tail -n 1)
echo "== PostgreSQL $("$PG_CONFIG" --version | sed 's/^PostgreSQL //'): $PG_CONFIG"

SCRATCH=$(mktemp -d /tmp/outbox-test.XXXXXX)

# Stop any server still running from the scratch dir (a postmaster's working
# directory is its data directory), then remove the scratch dir.
cleanup()
{
	local pidfile pid proc
	if [ -n "${RELEASES_DIR:-}" ]; then
		bash "$ROOT/scripts/releases.sh" remove "$ROOT" "$RELEASES_DIR" || true
	fi
	for pidfile in $(find "$SCRATCH" -name postmaster.pid 2>/dev/null); do
		pid=$(head -n 1 "$pidfile" 2>/dev/null || true)
		if [ -n "$pid" ] && [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" == "$SCRATCH"/* ]]; then
			echo "test.sh: stopping leftover server $pid"
			kill -QUIT "$pid" 2>/dev/null || true
			for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		fi
	done
	for proc in /proc/[0-9]*; do
		case "$(readlink "$proc/cwd" 2>/dev/null)" in
		"$SCRATCH" | "$SCRATCH"/*)
			kill -KILL "${proc#/proc/}" 2>/dev/null || true ;;
		esac
	done
	rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Run as postgres in the scratch dir; temporary files (pg_regress's and TAP's
# socket directories) go inside it too, so nothing outlives the run.
as_postgres()
{
	(cd "$SCRATCH" && TMPDIR="$SCRATCH/tmp" runuser -u postgres -- "$@")
}

# Warnings are errors here (CI), not in the Makefile: a user's newer
# compiler must not fail their build.
pgmake()
{
	as_postgres make -C "$SCRATCH" PG_CONFIG="$PG_CONFIG" COPT=-Werror "$@"
}

# Two runs must not install two builds under each other's tests.
if [ "$PG_MAJOR" = 15 ]; then
	LOCK=/tmp/outbox-test.lock
else
	LOCK=/tmp/outbox-test-$PG_MAJOR.lock
fi
exec 9>"$LOCK"
if ! flock -n 9; then
	echo "test.sh: waiting for another run of the suite to finish"
	flock 9
fi

echo "== copying $ROOT to $SCRATCH"
copy_tree "$ROOT" "$SCRATCH"
# (ignored by git, so not in copy_tree's list: deps.sh installed them)
cp -a "$ROOT/t/node/node_modules" "$SCRATCH/t/node/"
mkdir "$SCRATCH/tmp"
chown -R postgres:postgres "$SCRATCH"

echo "== building and installing"
if ! { pgmake clean >/dev/null &&
	pgmake &&
	make -C "$SCRATCH" PG_CONFIG="$PG_CONFIG" COPT=-Werror install; }; then
	echo "test.sh: build or install failed"
	echo "0 passed, 1 failed"
	exit 1
fi
# Each release's own install script, from git, for the upgrade test
# (sql/10_upgrade.sql); removed again as the run ends (cleanup).
RELEASES_DIR="$("$PG_CONFIG" --sharedir)/extension"
bash "$ROOT/scripts/releases.sh" install "$ROOT" "$RELEASES_DIR" ||
	echo "test.sh: the releases' install scripts are missing: sql/10_upgrade.sql will fail"

PASSED=0
FAILED=0
SKIPPED=0

# show_file FILE LINES: print the last LINES lines of FILE, if it exists.
show_file()
{
	if [ -f "$1" ]; then
		echo "----- $1 (last $2 lines)"
		tail -n "$2" "$1"
	fi
}

# PGXS installcheck runs pg_regress, then pg_isolation_regress, then prove,
# and stops at the first that fails.  Run each on its own (by blanking the
# other two) so one failing tier does not hide the results of the others.
run_tier()
{
	local name=$1 log="$SCRATCH/$1.log" rc=0 passed failed skipped=0 files t f
	shift
	echo "== $name"
	pgmake "$@" installcheck 2>&1 | tee "$log" || rc=$?
	case $rc in 130 | 143) exit "$rc" ;; esac    # interrupted: stop here

	if [ "$name" = tap ]; then
		# prove: "Files=N, Tests=M, ..."; a failed file is listed in the
		# summary report as "t/NNN_name.pl (Wstat: ...)".
		# A file that skips itself: "t/NNN_name.pl .... skipped: why".
		files=$(sed -n 's/^Files=\([0-9]*\),.*/\1/p' "$log" | tail -n 1)
		failed=$(grep -cE '^\S+\.pl +\(Wstat: ' "$log" || true)
		skipped=$(grep -cE '\.pl \.+ skipped:' "$log" || true)
		passed=$(( ${files:-0} - failed - skipped ))
	else
		# pg_regress: "test name ... ok" or "... FAILED" / "... failed"
		# up to 15; from 16 TAP-like, "ok 1 - name" or "not ok 1 - name".
		passed=$(grep -cE '\.\.\. ok\b|^ok [0-9]+ ' "$log" || true)
		failed=$(grep -cE '\.\.\. (FAILED|failed)\b|^not ok [0-9]+ ' "$log" || true)
	fi
	if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
		failed=1    # the runner itself failed (initdb, start, crash, ...)
	fi
	if [ "$failed" -gt 0 ]; then
		case $name in
		regress)
			show_file "$SCRATCH/regression.diffs" 1000
			show_file "$SCRATCH/log/postmaster.log" 40 ;;
		isolation)
			show_file "$SCRATCH/output_iso/regression.diffs" 1000
			show_file "$SCRATCH/output_iso/log/postmaster.log" 40 ;;
		tap)
			# the logs of each failed test file: regress_log_NNN_x, NNN_x_*.log
			for t in $(sed -nE 's/^t\/(\S+)\.pl +\(Wstat: .*/\1/p' "$log"); do
				for f in "$SCRATCH/tmp_check/log/regress_log_$t" "$SCRATCH/tmp_check/log/${t}"_*.log; do
					show_file "$f" 80
				done
			done ;;
		esac
	fi
	echo "== $name: $passed passed, $skipped skipped, $failed failed"
	PASSED=$((PASSED + passed))
	FAILED=$((FAILED + failed))
	SKIPPED=$((SKIPPED + skipped))
}

# The HTTP/1.1 parser on its own: unit cases and a bounded fuzz run
# (test/h1/run.sh; H1_FUZZ_SECONDS, 60 by default).
run_unit()
{
	local log="$SCRATCH/unit.log" rc=0 passed failed
	echo "== unit"
	as_postgres bash "$SCRATCH/test/h1/run.sh" 2>&1 | tee "$log" || rc=$?
	case $rc in 130 | 143) exit "$rc" ;; esac
	count_line "$log" "h1: " "$rc"
	# The tree's structural rules, on the checkout itself (what git knows of
	# it): one check in the totals.
	echo "== unit: structure"
	if bash "$ROOT/scripts/check_structure.sh" "$ROOT"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
	fi
	echo "== unit: $passed passed, $failed failed"
	PASSED=$((PASSED + passed))
	FAILED=$((FAILED + failed))
}

# The Debian package (scripts/package_test.sh, under the lock this run
# holds): built, installed in place of this build, the demo run against it,
# this build put back.  On 15 alone, the PostgreSQL Debian packages.
run_package()
{
	local log="$SCRATCH/package.log" rc=0 passed failed
	echo "== package"
	bash "$ROOT/scripts/package_test.sh" 2>&1 | tee "$log" || rc=$?
	case $rc in 130 | 143) exit "$rc" ;; esac
	count_line "$log" "package: " "$rc"
	echo "== package: $passed passed, $failed failed"
	PASSED=$((PASSED + passed))
	FAILED=$((FAILED + failed))
}

TIERS=" ${OUTBOX_TIERS:-unit regress isolation tap package} "
[[ $TIERS == *" unit "* ]] && run_unit
[[ $TIERS == *" regress "* ]] && run_tier regress ISOLATION= TAP_TESTS=
[[ $TIERS == *" isolation "* ]] && run_tier isolation REGRESS= TAP_TESTS=
if [[ $TIERS == *" tap "* ]] && compgen -G "$SCRATCH/t/*.pl" >/dev/null; then
	# --timer: each file's time, to keep the suite within its budget.
	run_tier tap REGRESS= ISOLATION= PROVE_FLAGS="--timer ${PROVE_VERBOSE:+-v}" ${PROVE_TESTS:+PROVE_TESTS="$PROVE_TESTS"}
fi
[[ $TIERS == *" package "* ]] && [ "$PG_MAJOR" = 15 ] && run_package

# Every tier asked for runs whole: a file that skips (a server or package
# missing) fails the run, unless OUTBOX_ALLOW_SKIPS=1 says skips are expected.
if [ "$SKIPPED" -gt 0 ]; then
	if [ "${OUTBOX_ALLOW_SKIPS:-0}" = 1 ]; then
		echo "$SKIPPED skipped (allowed by OUTBOX_ALLOW_SKIPS=1)"
	else
		echo "test.sh: $SKIPPED test files skipped themselves (above); each counts as failed"
		FAILED=$((FAILED + SKIPPED))
	fi
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
