#!/usr/bin/env bash
# scripts/releases.sh: the released versions listed in test/releases.txt,
# checked against git, and each release's own install script, as CREATE
# EXTENSION ran it at its release commit, for the upgrade test
# (sql/10_upgrade.sql).  ROOT is a checkout with its history (a shallow
# clone lacks the release commits); by default the one this script is in.
#
#   releases.sh check [ROOT]
#       every listed commit is in HEAD's history and has its version as
#       outbox.control's default_version; where its child on the first-parent
#       line to HEAD is known, that child has another one (the commit is the
#       last of its version); the tag vVERSION, where the repository has it,
#       points at it; versions go up, and the version being developed (the
#       tree's default_version) is not listed
#   releases.sh script ROOT VERSION
#       prints that release's install script
#   releases.sh install ROOT DIR
#       checks, then writes into DIR (an extension directory) each release's
#       install script as outbox--VERSION.sql: CREATE EXTENSION outbox
#       VERSION 'VERSION' runs a version's own install script alone when
#       there is one, and ALTER EXTENSION outbox UPDATE then runs the tree's
#       update scripts from that version.  A release whose install script is
#       also a file of the tree (outbox--1.0.sql), which make install put in
#       DIR, is not written: the tree's file must be the release's, byte for
#       byte (a released install script is never edited)
#   releases.sh remove ROOT DIR
#       removes from DIR what install wrote
#
# A release's install script is what its commit's own files made: its
# outbox--VERSION.sql when it had one, else the install script its update
# scripts lead back to (outbox--1.0.sql) and each update script on the way,
# in order, in one file (CREATE EXTENSION ran them in turn, as one).
# scripts/test.sh runs install in its locked section after make install,
# and remove as it ends.
set -euo pipefail

CMD=${1:-}
ROOT=$(cd "${2:-$(dirname "$0")/..}" && pwd)
LIST="$ROOT/test/releases.txt"

die()
{
	echo "releases.sh: $*" >&2
	exit 1
}

g()
{
	git -c safe.directory="$ROOT" -C "$ROOT" "$@"
}

# The list's "VERSION COMMIT" lines, without comments and blank lines.
releases()
{
	[ -f "$LIST" ] || die "no $LIST"
	sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$LIST"
}

# default_version in outbox.control at commit $1.
default_version_at()
{
	g show "$1:outbox.control" | sed -n "s/^default_version *= *'\(.*\)'/\1/p"
}

check()
{
	local v c extra current at child tag prev="" n=0

	g rev-parse --git-dir >/dev/null 2>&1 ||
		die "$ROOT is not a git checkout: the releases' install scripts come from git"
	current=$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$ROOT/outbox.control")
	while read -r v c extra; do
		[[ $v =~ ^[0-9]+\.[0-9]+$ && $c =~ ^[0-9a-f]{40}$ && -z $extra ]] ||
			die "test/releases.txt: not 'VERSION COMMIT': $v $c $extra"
		g cat-file -e "$c^{commit}" 2>/dev/null ||
			die "release $v: commit $c is not in the repository (a shallow clone?)"
		g merge-base --is-ancestor "$c" HEAD ||
			die "release $v: commit $c is not in HEAD's history"
		at=$(default_version_at "$c")
		[ "$at" = "$v" ] ||
			die "release $v: outbox.control at $c has default_version '$at'"
		child=$(g rev-list --first-parent --ancestry-path "$c..HEAD" | tail -n 1)
		if [ -n "$child" ] && [ "$(g rev-parse "$child^1")" = "$c" ] &&
			[ "$(default_version_at "$child")" = "$v" ]; then
			die "release $v: $c is not the last commit with default_version '$v' ($child is one too)"
		fi
		if tag=$(g rev-parse -q --verify "refs/tags/v$v^{commit}"); then
			[ "$tag" = "$c" ] || die "tag v$v points at $tag, test/releases.txt at $c"
		fi
		[ "$v" != "$current" ] ||
			die "release $v: is the tree's default_version, the version being developed"
		if [ -n "$prev" ] && { [ "$v" = "$prev" ] ||
			[ "$(printf '%s\n%s\n' "$v" "$prev" | sort -V | tail -n 1)" != "$v" ]; }; then
			die "test/releases.txt: $v follows $prev"
		fi
		prev=$v
		n=$((n + 1))
	done < <(releases)
	[ "$n" -gt 0 ] || die "test/releases.txt lists no release"
}

# release_script VERSION COMMIT: the install script of that release, on
# stdout.
release_script()
{
	local v=$1 c=$2 names cur from f i parts=()

	names=$(g ls-tree --name-only "$c" | grep -E '^outbox--.*\.sql$' || true)
	cur=$v
	for ((i = 0; ; i++)); do
		grep -qxF "outbox--$cur.sql" <<<"$names" && break
		from=$(grep -E "^outbox--.+--${cur//./\\.}\.sql$" <<<"$names" || true)
		if [ -z "$from" ] || [ "$(wc -l <<<"$from")" -ne 1 ] || [ "$i" -ge 100 ]; then
			die "release $v: at $c no install script of $cur and no single update script to it"
		fi
		parts=("$from" ${parts[@]+"${parts[@]}"})
		cur=${from#outbox--}
		cur=${cur%--*.sql}
	done
	parts=("outbox--$cur.sql" ${parts[@]+"${parts[@]}"})
	for ((i = 0; i < ${#parts[@]}; i++)); do
		f=${parts[$i]}
		g show "$c:$f"
		# (a file without a final newline must not run into the next one)
		if [ $((i + 1)) -lt ${#parts[@]} ] &&
			[ "$(g show "$c:$f" | tail -c 1 | od -An -tx1 | tr -d ' ')" != 0a ]; then
			echo
		fi
	done
}

# remove_written DIR: the files install wrote into DIR (listed in its
# manifest, DIR/.outbox-releases-written), removed; a file it found there
# already, a package's or another install's, stays.
remove_written()
{
	local f

	[ -f "$1/.outbox-releases-written" ] || return 0
	while read -r f; do
		case $f in
		outbox--*.sql) rm -f "$1/$f" ;;
		esac
	done <"$1/.outbox-releases-written"
	rm -f "$1/.outbox-releases-written"
}

case $CMD in
check)
	check
	echo "releases.sh: $(releases | wc -l) releases, as git has them"
	;;
script)
	[ $# -eq 3 ] || die "usage: releases.sh script ROOT VERSION"
	c=$(releases | awk -v v="$3" '$1 == v { print $2 }')
	[ -n "$c" ] || die "no release $3 in test/releases.txt"
	release_script "$3" "$c"
	;;
install)
	[ $# -eq 3 ] || die "usage: releases.sh install ROOT DIR"
	DIR=$3
	[ -d "$DIR" ] || die "no directory $DIR"
	# (none left from a run that could not remove them, if the check fails)
	remove_written "$DIR"
	check
	WORK=$(mktemp -d)
	trap 'rm -rf "$WORK"' EXIT
	while read -r v c; do
		release_script "$v" "$c" >"$WORK/outbox--$v.sql"
		if [ -f "$ROOT/outbox--$v.sql" ]; then
			cmp -s "$WORK/outbox--$v.sql" "$ROOT/outbox--$v.sql" ||
				die "outbox--$v.sql differs from release $v's install script (a released install script is never edited)"
		elif [ -f "$DIR/outbox--$v.sql" ]; then
			# (a package's or another install's: used if it is the release's, never overwritten)
			cmp -s "$WORK/outbox--$v.sql" "$DIR/outbox--$v.sql" ||
				die "$DIR/outbox--$v.sql is there and is not release $v's install script; not overwritten"
			echo "releases.sh: $DIR/outbox--$v.sql, there already, is release $v's install script"
		else
			echo "outbox--$v.sql" >>"$DIR/.outbox-releases-written"
			install -m 644 "$WORK/outbox--$v.sql" "$DIR/outbox--$v.sql"
			echo "releases.sh: $DIR/outbox--$v.sql is release $v's install script"
		fi
	done < <(releases)
	;;
remove)
	[ $# -eq 3 ] || die "usage: releases.sh remove ROOT DIR"
	remove_written "$3"
	;;
*)
	die "usage: releases.sh check [ROOT] | script ROOT VERSION | install ROOT DIR | remove ROOT DIR"
	;;
esac
