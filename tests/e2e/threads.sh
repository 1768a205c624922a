#!/usr/bin/env bash
# The CPU backend's thread count when OMP_NUM_THREADS is unset (backends/cpu/threads.c): with
# another process busy on the host, fewer threads than cores, and the banner says so; with
# OMP_NUM_THREADS set, that count and no such line. Skipped, saying why, on one core or under a
# cpuset (where the host's load is not read).
# Usage: threads.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/checks.bash"
cores=$(nproc --all) mine=$(nproc)
if [ "$cores" -lt 2 ] || [ "$mine" -ne "$cores" ]; then
  echo "SKIP: threads.sh: $mine of $cores CPUs usable here (one core, or a cpuset): the count is libgomp's"
  exit 0
fi
g=$src/tests/fixtures/gpt2
run=("$build/gpt2" --llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 2
  --sequence_length 16 --num_iteration 1)
bash -c 'while :; do :; done' &
busy=$!
trap 'kill $busy 2>/dev/null' EXIT
sleep 0.2
out=$(env -u OMP_NUM_THREADS "${run[@]}" 2>&1)
expect "a busy host: fewer threads than cores, said in the banner" "$out" \
  "^threads: [0-9]+ of $cores \([0-9]+ other process(es)? running at start; OMP_NUM_THREADS sets it\)$"
n=$(printf '%s\n' "$out" | sed -n 's/^threads: \([0-9]*\) of.*/\1/p')
[ -n "$n" ] && [ "$n" -lt "$cores" ] && [ "$n" -ge 1 ] && ok "$n threads of $cores" || bad "threads '$n' of $cores" "$out"
expect "the run trains" "$out" "^step +1/1 \| train loss"
out=$(OMP_NUM_THREADS=2 "${run[@]}" 2>&1)
expect_not "OMP_NUM_THREADS set: no threads line" "$out" "^threads:"
checks_done threads.sh
