#!/usr/bin/env bash
# The C and CUDA sources are as clang-format writes them with the project's .clang-format (run
# `clang-format -i FILE` before a commit): usage: bash format.sh BUILD_DIR SOURCE_DIR
# Checks every tracked *.c, *.h, *.cu and *.cuh (`git ls-files`; a find over the tree, without
# build directories, when SOURCE_DIR is not a git checkout) with `clang-format --dry-run
# --Werror` and names each file that differs, with its first differing lines. Made with
# Debian 12's clang-format 14 (scripts/setup.sh installs it); with another major version, or
# none, it prints SKIP and checks nothing. Generated tables opt out with `// clang-format off`.
# First checks that the check itself flags a badly formatted file in a scratch tree.
set -u
src=$(cd "${2:?usage: format.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
fails=0
ok() { echo "ok   - $1"; }
bad() { fails=$((fails + 1)); echo "FAIL - $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/       | /'; }

# The check is only as good as the version it runs: another major version breaks some lines
# differently, so on a machine without Debian 12's clang-format 14 (scripts/setup.sh installs it
# there) it says so and checks nothing, as valgrind.sh does without valgrind.
if ! command -v clang-format >/dev/null 2>&1; then
    echo "SKIP: clang-format is not installed (Debian 12: apt-get install clang-format, or scripts/setup.sh)"
    exit 0
fi
version=$(clang-format --version | head -1)
major=$(printf '%s\n' "$version" | sed -n 's/.*clang-format version \([0-9]*\)\..*/\1/p')
if [ "$major" != 14 ]; then
    echo "SKIP: $version is not clang-format 14, which the sources are formatted with"
    exit 0
fi
echo "using $version"

list_files() { # the C/CUDA sources under $1, one per line, relative to it
    local top
    top=$(git -C "$1" rev-parse --show-toplevel 2>/dev/null)
    if [ -n "$top" ] && [ "$(cd "$top" && pwd)" = "$1" ]; then
        git -C "$1" ls-files -- '*.c' '*.h' '*.cu' '*.cuh'
    else
        (cd "$1" && find . \( -name .git -o -name 'build*' \) -prune -o -type f \
            \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print | sed 's|^\./||')
    fi
}

unformatted() { # the files under $1 clang-format would change (the style file found from each)
    local f
    while IFS= read -r f; do
        (cd "$1" && clang-format --dry-run --Werror "$f" >/dev/null 2>&1) || echo "$f"
    done < <(list_files "$1")
}

# 1. The check flags a badly formatted file, and only it (the scratch tree has the style file).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tree/src" "$tmp/tree/build"
cp "$src/.clang-format" "$tmp/tree/"
printf 'int f(int x) { return x + 1; }\n' >"$tmp/tree/src/good.c"
printf 'int  g( int x ){\nreturn x;}\n' >"$tmp/tree/src/bad.c"
printf 'int  h( int x ){return x;}\n' >"$tmp/tree/build/ignored.c"
planted=$(unformatted "$tmp/tree")
[ "$planted" = "src/bad.c" ] && ok "a badly formatted file is flagged (and only it)" ||
    bad "the planted file was not flagged alone" "$planted"

# 2. The project itself.
[ -f "$src/.clang-format" ] && ok "the style file is there" || bad "no .clang-format in $src"
nfiles=$(list_files "$src" | wc -l)
[ "$nfiles" -gt 0 ] && ok "sources to check: $nfiles" || bad "no sources found under $src"
found=$(unformatted "$src")
count=$(printf '%s' "$found" | grep -c . || true)
echo "files clang-format would change: $count"
if [ "$count" -eq 0 ]; then
    ok "every source is as clang-format writes it"
else
    detail=""
    while IFS= read -r f; do
        detail+="$f:"$'\n'"$(cd "$src" && clang-format "$f" | diff "$f" - | head -6)"$'\n'
    done <<<"$found"
    bad "$count file(s) differ from clang-format's output (run: clang-format -i FILE)" "$detail"
fi

echo "format.sh: $fails failed"
[ $fails -eq 0 ]
