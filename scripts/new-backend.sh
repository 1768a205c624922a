#!/usr/bin/env bash
# Start a backend from the template: copy backends/sim to backends/NAME with every name
# renamed (C identifiers sim_* / SIM_*, the message prefix "sim:", the environment variables
# IT_SIM_*, the header sim.h, the CMake target it_backend_sim), and without the simhalf test
# variant (simhalf.cmake and the IT_SIM_HALF branches).
#
#   scripts/new-backend.sh NAME [DEST]
#
# NAME: 1-32 characters of [a-z0-9_], starting with a letter (the core's backend names).
# DEST: the new directory (default: backends/NAME of this tree; any other place gives a
# plugin to build out of the tree against an installed core, docs/porting-a-backend.md).
# The next `cmake --build BUILD` of this tree builds backends/NAME as libit_backend_NAME.so
# (no re-configure by hand).
set -euo pipefail

usage() { echo "usage: scripts/new-backend.sh NAME [DEST]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
name=$1
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/backends/sim
dest=${2:-$root/backends/$name}

if ! [[ $name =~ ^[a-z][a-z0-9_]{0,31}$ ]]; then
    echo "new-backend.sh: '$name' is not a backend name: use 1-32 characters of [a-z0-9_], starting with a letter" >&2
    exit 2
fi
case $name in
cpu | sim | simhalf)
    echo "new-backend.sh: '$name' is taken (a backend of this tree)" >&2
    exit 2
    ;;
esac
if [ -e "$dest" ]; then
    echo "new-backend.sh: $dest already exists" >&2
    exit 1
fi
up=$(printf '%s' "$name" | tr 'a-z' 'A-Z')

mkdir -p "$dest"
for f in "$src"/*; do
    base=$(basename "$f")
    case $base in
    simhalf.cmake) continue ;; # the test variant stays with the sim
    esac
    out=$dest/${base/#sim./$name.}
    # 1. drop the IT_SIM_HALF branches (#ifdef IT_SIM_HALF ... / #ifndef's #else ...), keep
    #    the rest; nested #if blocks inside are carried through unchanged.
    # 2. drop the CMake line that includes simhalf.cmake.
    # 3. rename: whole-word sim, the sim_ / SIM_ / IT_SIM_ / it_sim_ prefixes, it_backend_sim.
    awk '
        function emitting() { for (i = 1; i <= depth; i++) if (!keep[i]) return 0; return 1 }
        /^#[ \t]*if(n?def)?[ \t]/ {
            if ($0 ~ /^#[ \t]*ifdef[ \t]+IT_SIM_HALF/) { depth++; half[depth] = 1; keep[depth] = 0; next }
            if ($0 ~ /^#[ \t]*ifndef[ \t]+IT_SIM_HALF/) { depth++; half[depth] = 1; keep[depth] = 1; next }
            depth++; half[depth] = 0; keep[depth] = 1
        }
        /^#[ \t]*else/ && depth > 0 && half[depth] { keep[depth] = !keep[depth]; next }
        /^#[ \t]*endif/ && depth > 0 {
            h = half[depth]; e = emitting(); depth--
            if (h) next
            if (e) print
            next
        }
        /simhalf\.cmake/ { next }
        { if (emitting()) print }
    ' "$f" | sed -E \
        -e "s/it_backend_sim\b/it_backend_${name}/g" \
        -e "s/\bIT_SIM_/IT_${up}_/g" \
        -e "s/\bit_sim_/it_${name}_/g" \
        -e "s/\bSIM_/${up}_/g" \
        -e "s/\bsim_/${name}_/g" \
        -e "s/\bsim\b/${name}/g" \
        -e "s/\bSim\b/${name}/g" >"$out"
done

# (the sim's own test, tests/unit/test_sim.c, is named as the example it is)
left=$(grep -rnE '\b[Ss]im\b|[Ss]imhalf|_sim\b|\bsim_|SIM_' "$dest" | grep -v 'tests/unit/test_sim\.c' || true)
if [ -n "$left" ]; then
    echo "new-backend.sh: names of the template left in $dest:" >&2
    printf '%s\n' "$left" >&2
    exit 1
fi

echo "created $dest from backends/sim (backend '$name', environment IT_${up}_DEVICES / IT_${up}_MEMORY_MB)"
if [ "$dest" = "$root/backends/$name" ]; then
    cat <<NEXT
next:
  cmake --build build                              # builds build/libit_backend_$name.so (re-runs the configure step itself)
  build/it-info                                    # lists $name and its devices
  build/it-conformance --backend $name             # every native slot against the cpu
  scripts/validate-backend.sh $name                # conformance, training against --device cpu, the report
NEXT
else
    cat <<NEXT
next (out of the tree, against an installed core at PREFIX):
  cmake -S $dest -B $dest/build -DCMAKE_PREFIX_PATH=PREFIX && cmake --build $dest/build
  IT_BACKEND_PATH=$dest/build PREFIX/bin/it-info
NEXT
fi
