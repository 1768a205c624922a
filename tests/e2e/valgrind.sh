#!/usr/bin/env bash
# A short GPT-2 training run under valgrind memcheck: no invalid access, no use of uninitialized
# values, no definite leak -- on the success path (2 steps and a checkpoint written) and on two
# failure paths (a truncated checkpoint; the allocator limit, which fails mid-step with
# IT_ERR_OOM). One thread (OMP_NUM_THREADS=1); under a minute once built.
#
# Runs on release trees only: a sanitizer tree (IT_SANITIZE=ON) is skipped, and so is a machine
# without valgrind. Valgrind cannot decode AVX-512; when the tree was built with -march=native
# (IT_NATIVE, the release default) on a CPU that has it, a portable build of the library and
# apps/gpt2 (IT_NATIVE=OFF, RelWithDebInfo) is made once under BUILD_DIR/valgrind-tree and run
# instead (the first time takes a minute or two; later runs rebuild only what changed).
# Suppressions: tests/e2e/valgrind.supp when present (none are needed today).
# Usage: valgrind.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
fix=$src/tests/fixtures/gpt2

if ! command -v valgrind >/dev/null 2>&1; then
  echo "SKIPPED: valgrind not installed (scripts/setup.sh installs it)"
  exit 0
fi
cache=$build/CMakeCache.txt
if grep -q '^IT_SANITIZE:BOOL=ON' "$cache" 2>/dev/null; then
  echo "SKIPPED: valgrind does not run on sanitizer builds (IT_SANITIZE=ON in $build); the release tree runs it"
  exit 0
fi

gpt2=$build/gpt2
if grep -q '^IT_NATIVE:BOOL=ON' "$cache" 2>/dev/null && grep -q '^CMAKE_BUILD_TYPE:STRING=Release' "$cache" &&
  grep -qw avx512f /proc/cpuinfo; then
  vt=$build/valgrind-tree
  echo "valgrind: $build is built for this CPU (AVX-512, which valgrind cannot decode): using $vt (IT_NATIVE=OFF)"
  if ! { cmake -S "$src" -B "$vt" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIT_NATIVE=OFF -DIT_SANITIZE=OFF >"$vt.log" 2>&1 &&
    cmake --build "$vt" -j2 --target gpt2 >>"$vt.log" 2>&1; }; then
    tail -n 40 "$vt.log"
    echo "FAIL: building the portable tree failed (log: $vt.log)"
    exit 1
  fi
  gpt2=$vt/gpt2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
supp=()
[[ -f $src/tests/e2e/valgrind.supp ]] && supp=(--suppressions="$src/tests/e2e/valgrind.supp")
# Exit status 99 marks a valgrind finding, apart from the program's own 0/1/2.
vg=(valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite
  --track-origins=yes "${supp[@]}")
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

run() { # name, expected exit status, args...
  local name=$1 want=$2
  shift 2
  "${vg[@]}" --log-file="$tmp/$name.vg" "$gpt2" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$?
  local summary
  summary=$(grep -E 'ERROR SUMMARY|definitely lost' "$tmp/$name.vg" | sed 's/^==[0-9]*== //' | tr '\n' ' ')
  echo "$name: exit $rc; $summary"
  if [[ $rc -eq 99 ]]; then
    bad "$name: valgrind found errors:"
    grep -vE '^==[0-9]+== *$' "$tmp/$name.vg" | head -n 80
    return 1
  fi
  if [[ $rc -ne $want ]]; then
    bad "$name: exit status $rc, expected $want"
    cat "$tmp/$name.err"
    return 1
  fi
  return 0
}

base=(--llmc_filepath "$fix/tiny_gpt2.bin" --input_bin "$fix/tiny_shard.bin" --batch_size 4 --sequence_length 32)
if run train 0 "${base[@]}" --num_iteration 2 --optimizer adamw --output_checkpoint "$tmp/out.bin"; then
  n=$(grep -c '^step ' "$tmp/train.out")
  size=$(stat -c %s "$tmp/out.bin" 2>/dev/null || echo 0)
  [[ $n -eq 2 && $size -eq 147968 ]] && ok || bad "train: $n step lines, checkpoint of $size bytes (expected 2, 147968)"
fi
head -c 5000 "$fix/tiny_gpt2.bin" >"$tmp/short.bin"
if run bad_checkpoint 2 --llmc_filepath "$tmp/short.bin" --input_bin "$fix/tiny_shard.bin"; then
  grep -q 'found 5000 bytes' "$tmp/bad_checkpoint.err" && ok || bad "bad_checkpoint: $(cat "$tmp/bad_checkpoint.err")"
fi
if run oom 1 "${base[@]}" --num_iteration 2 --max_memory_mb 1; then
  grep -q 'out of memory on cpu' "$tmp/oom.err" && ok || bad "oom: $(cat "$tmp/oom.err")"
fi

echo "valgrind: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
