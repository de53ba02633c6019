# scripts/copy_tree.sh: sourced by test.sh and demo.sh.
#
# copy_tree SRC DEST: copy the files git knows about in SRC (tracked, plus
# untracked files that are not ignored) into DEST; outside git, everything
# but .git.  Builds then happen in DEST, so the checkout gets no build
# products and may sit where the postgres user cannot read.
copy_tree()
{
	local src=$1 dest=$2

	if command -v git >/dev/null && git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
		(cd "$src" && git ls-files -z -co --exclude-standard |
			while IFS= read -r -d '' f; do
				if [ -e "$f" ]; then printf '%s\0' "$f"; fi
			done | tar --null -T - -cf -) | tar -xf - -C "$dest"
	else
		tar -C "$src" --exclude=.git -cf - . | tar -xf - -C "$dest"
	fi
}
