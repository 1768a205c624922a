#!/usr/bin/env bash
# No file of the project may point at a path outside the repository: usage: bash repo_paths.sh BUILD_DIR SOURCE_DIR
# Scans every tracked file (`git ls-files`; a find over the tree, without build directories,
# when SOURCE_DIR is not a git checkout) for the three spellings such references took: the
# design folder beside the repository, an absolute path under the machine's work folder, and
# a relative path up into a sibling shared folder. Fails naming file:line for each.
# First checks that the scan itself finds a planted reference in a scratch tree.
set -u
src=$(cd "${2:?usage: repo_paths.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
fails=0
ok() { echo "ok   - $1"; }
bad() { fails=$((fails + 1)); echo "FAIL - $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       | /'; }

# Built from pieces so that this file does not match itself.
s=shared
patterns=("$s/design" "/wo""rk/" "../$s")

# The files to scan, one per line, relative to $1.
list_files() {
    local top
    top=$(git -C "$1" rev-parse --show-toplevel 2>/dev/null)
    if [ -n "$top" ] && [ "$(cd "$top" && pwd)" = "$1" ]; then
        git -C "$1" ls-files
    else
        (cd "$1" && find . \( -name .git -o -name 'build*' \) -prune -o -type f -print | sed 's|^\./||')
    fi
}

# Prints file:line: text for every text line with one of the patterns; binary files skipped.
scan() {
    local args=() p
    for p in "${patterns[@]}"; do args+=(-e "$p"); done
    (cd "$1" && list_files "$1" | tr '\n' '\0' | xargs -0 -r grep -nIF "${args[@]}" --)
}

# 1. The scan sees a planted reference (and only it) in a tree without .git.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tree/docs" "$tmp/tree/build/x"
printf 'fine\nsee %s/FORMATS.md\n' "../$s/design" >"$tmp/tree/docs/a.md"
printf 'also fine\n' >"$tmp/tree/b.c"
printf '%s\n' "/wo""rk/ignored: under a build directory" >"$tmp/tree/build/x/c.txt"
planted=$(scan "$tmp/tree")
[ "$planted" = "docs/a.md:2:see ../$s/design/FORMATS.md" ] && ok "a planted reference is found as file:line" ||
    bad "the planted reference was not reported as docs/a.md:2 (alone)" "$planted"

# 2. The project itself.
nfiles=$(cd "$src" && list_files "$src" | wc -l)
[ "$nfiles" -gt 0 ] && ok "files to scan: $nfiles" || bad "no files found under $src"
found=$(scan "$src")
count=$(printf '%s' "$found" | grep -c . || true)
echo "checked $nfiles files of $src for: ${patterns[*]}"
echo "references to paths outside the repository: $count"
[ "$count" -eq 0 ] && ok "no file refers to a path outside the repository" ||
    bad "$count line(s) refer to paths outside the repository" "$found"

echo "repo_paths.sh: $fails failed"
[ $fails -eq 0 ]
