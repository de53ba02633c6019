#!/usr/bin/env bash
# scripts/package_test.sh: the Debian package, built and used as a user would.
# Builds postgresql-15-outbox from a copy of the tree under /tmp
# (dpkg-buildpackage -b, debian/ with pg_buildext), takes away what a
# source build installed into PostgreSQL 15 (outbox.so, its bitcode,
# outbox.control, outbox--*.sql), installs the .deb with dpkg -i, runs the
# demo against it (debian/tests/demo: scripts/demo.sh with
# OUTBOX_DEMO_INSTALLED=1, building nothing), purges the package, and puts
# back what was there before, however the test ends.  Run as root, from
# anywhere; installs the build dependencies of debian/control if missing.
#
# Every check is counted; ends with "package: N passed, N failed" and exits
# non-zero on any failure.  The files of PostgreSQL 15 are shared with every
# run of the suite on this machine: the part that changes them holds
# /tmp/outbox-test.lock (fd 9), as scripts/test.sh does; run from test.sh's
# tier `package`, the lock it holds is the one used.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/copy_tree.sh
. "$ROOT/scripts/copy_tree.sh"
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
PACKAGE=postgresql-15-outbox
LOCK=/tmp/outbox-test.lock
export LC_ALL=C.UTF-8
unset PGHOST PGHOSTADDR PGPORT PGDATA PGDATABASE PGUSER PGSERVICE PGOPTIONS

if [ "$(id -u)" -ne 0 ]; then
	echo "package_test.sh: run as root (it installs a package)" >&2
	exit 1
fi

PASSED=0
FAILED=0
START=$SECONDS

# check NAME COMMAND...: run COMMAND, count it passed or failed under NAME.
check()
{
	local name=$1
	shift
	if "$@"; then
		echo "ok: $name"
		PASSED=$((PASSED + 1))
	else
		echo "FAILED: $name"
		FAILED=$((FAILED + 1))
	fi
}

WAITED=0
finish()
{
	echo "package: $((SECONDS - START - WAITED)) s, and $WAITED s waiting for the lock"
	echo "package: $PASSED passed, $FAILED failed"
	[ "$FAILED" -eq 0 ]
}

# The package's version is debian/changelog's, the source folder is named
# after its upstream part (postgresql-outbox-1.7).
VERSION=$(sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' "$ROOT/debian/changelog")
SCRATCH=$(mktemp -d /tmp/outbox-package.XXXXXX)
SRC=$SCRATCH/postgresql-outbox-${VERSION%-*}
DEB=$SCRATCH/${PACKAGE}_${VERSION}_$(dpkg --print-architecture).deb
SAVED=$SCRATCH/source-build.tar
PKGLIB=$("$PG_CONFIG" --pkglibdir)
EXTDIR=$("$PG_CONFIG" --sharedir)/extension

# installed_files: what a build of outbox installs into PostgreSQL 15, as
# far as it is there now.
installed_files()
{
	local f
	for f in "$PKGLIB/outbox.so" "$PKGLIB/bitcode/outbox" "$PKGLIB/bitcode/outbox.index.bc" \
		"$EXTDIR/outbox.control" "$EXTDIR"/outbox--*.sql; do
		if [ -e "$f" ]; then echo "$f"; fi
	done
}

# package_present: dpkg knows the package in some state other than purged
# (installed, or half-installed, or its configuration left).
package_present()
{
	local status
	status=$(dpkg-query -W -f '${db:Status-Status}' "$PACKAGE" 2>/dev/null || true)
	[ -n "$status" ] && [ "$status" != not-installed ]
}

# restore: purge the package if this run installed it, put back the files
# that were there before it (a source build's, or none).  Once.
RESTORE=0
restore()
{
	if [ "$RESTORE" != 1 ]; then
		return 0    # (a bare return in a trap returns the status before it)
	fi
	RESTORE=0
	if package_present; then
		dpkg --purge "$PACKAGE" >/dev/null 2>&1 || echo "package_test.sh: could not purge $PACKAGE"
	fi
	installed_files | xargs -r rm -rf
	tar -P -xf "$SAVED"
	echo "== put back what was installed before: $(tar -tf "$SAVED" | grep -c -v '/$' || true) files"
}

cleanup()
{
	local rc=$?
	restore
	rm -rf "$SCRATCH"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== build dependencies"
mkdir "$SRC"
copy_tree "$ROOT" "$SRC"
if ! (cd "$SRC" && dpkg-checkbuilddeps) 2>/dev/null || ! command -v python3 >/dev/null; then
	echo "package_test.sh: installing the build dependencies of debian/control and python3"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get build-dep -y -q --no-install-recommends "$SRC"
	apt-get install -y -q --no-install-recommends python3
fi

# Building changes nothing installed: no lock needed yet.
echo "== building $PACKAGE $VERSION in $SRC"
build()
{
	(cd "$SRC" && dpkg-buildpackage -us -uc -b) >"$SCRATCH/build.log" 2>&1 && [ -f "$DEB" ]
}
check "dpkg-buildpackage builds $(basename "$DEB")" build
if [ ! -f "$DEB" ]; then
	tail -n 40 "$SCRATCH/build.log"
	finish || exit 1
fi

# holds_files: the .deb holds the library and the control file, and every
# install and update script of the tree.
holds_files()
{
	local contents f missing=0
	contents=$(dpkg-deb -c "$DEB" | awk '{print $6}')
	for f in ./usr/lib/postgresql/15/lib/outbox.so ./usr/share/postgresql/15/extension/outbox.control \
		"$ROOT"/outbox--*.sql; do
		case $f in */outbox--*.sql) f=./usr/share/postgresql/15/extension/${f##*/} ;; esac
		if ! grep -qxF "$f" <<<"$contents"; then
			echo "  the package lacks $f"
			missing=1
		fi
	done
	[ "$missing" -eq 0 ]
}
check "the package holds outbox.so, outbox.control and every outbox--*.sql" holds_files

# Changing what is installed: hold the suite's lock.  A shell started by
# scripts/test.sh has it open on fd 9 already, and locked.
if [ "$(readlink /proc/self/fd/9 2>/dev/null)" != "$LOCK" ]; then
	exec 9>>"$LOCK"
fi
if ! flock -n 9; then
	echo "package_test.sh: waiting for another run of the suite to finish"
	WAITED=$SECONDS
	flock 9
	WAITED=$((SECONDS - WAITED))
fi
if package_present; then
	echo "package_test.sh: $PACKAGE is installed already; this test installs and purges it, so remove it first"
	FAILED=$((FAILED + 1))
	finish || exit 1
fi

echo "== taking away the source build from $PKGLIB and $EXTDIR"
RESTORE=1
installed_files | tar -P -cf "$SAVED" -T -    # (an empty archive if none)
installed_files | sed 's/^/  /'
installed_files | xargs -r rm -rf

echo "== dpkg -i $(basename "$DEB")"
check "dpkg -i installs it" dpkg -i "$DEB"
# owned_by_package FILE: dpkg -S names the package as FILE's owner.
owned_by_package()
{
	local owner
	owner=$(dpkg -S "$1" 2>/dev/null | cut -d: -f1)
	echo "  $1: ${owner:-no package}"
	[ "$owner" = "$PACKAGE" ]
}
check "outbox.so belongs to $PACKAGE" owned_by_package "$PKGLIB/outbox.so"
check "outbox.control belongs to $PACKAGE" owned_by_package "$EXTDIR/outbox.control"

echo "== the demo against the package (debian/tests/demo)"
demo()
{
	local rc=0
	(cd "$ROOT" && bash debian/tests/demo) 2>&1 | tee "$SCRATCH/demo.log" || rc=$?
	case $rc in 130 | 143) exit "$rc" ;; esac
	# (demo.sh ends well without this line when no relay runs: not enough here)
	[ "$rc" -eq 0 ] && grep -q '^All 3 committed events were delivered; the rolled-back one was not\.$' "$SCRATCH/demo.log"
}
check "the demo delivers from the packaged install" demo

echo "== dpkg --purge $PACKAGE"
check "dpkg --purge removes it" dpkg --purge "$PACKAGE"
check "nothing of outbox is left in PostgreSQL 15 after the purge" test -z "$(installed_files)"

restore
finish
