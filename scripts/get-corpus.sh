#!/bin/sh
# Writes OUTFILE: the King James Bible as plain English text (ASCII, one verse per line, verse
# references removed; about 4.1 MB, 31102 lines). It comes from Debian's bible-kjv package
# (its `bible` program reads the text that bible-kjv-text installs), so it exists on a fresh
# Debian 12 after:  apt-get install -y bible-kjv
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 OUTFILE" >&2
    exit 2
fi
out=$1

if ! command -v bible >/dev/null 2>&1; then
    echo "get-corpus.sh: the 'bible' program (Debian package bible-kjv) is missing: run apt-get install -y bible-kjv" >&2
    exit 1
fi

tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT INT TERM
# -f prints one verse per line as "Ge1:1 In the beginning ..."; stdin from /dev/null keeps it
# from waiting for interactive input. The sed drops the reference.
if ! bible -f Gen1:1-Rev22:21 </dev/null | sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' >"$tmp"; then
    echo "get-corpus.sh: 'bible -f Gen1:1-Rev22:21' failed; is bible-kjv-text installed? (apt-get install -y bible-kjv)" >&2
    exit 1
fi
lines=$(wc -l <"$tmp")
bytes=$(wc -c <"$tmp")
if [ "$lines" -ne 31102 ] || [ "$bytes" -lt 1000000 ]; then
    echo "get-corpus.sh: expected 31102 verses (over 1 MB) from 'bible', found $lines lines, $bytes bytes" >&2
    exit 1
fi
if head -n 1 "$tmp" | grep -qv '^In the beginning God created the heaven and the earth\.$'; then
    echo "get-corpus.sh: unexpected first line from 'bible': $(head -n 1 "$tmp")" >&2
    exit 1
fi
mv "$tmp" "$out"
trap - EXIT INT TERM
echo "get-corpus.sh: wrote $out ($bytes bytes, $lines verses of the King James Bible)"
