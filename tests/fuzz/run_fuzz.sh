#!/usr/bin/env bash
# Runs one libFuzzer harness for a bounded time on a copy of its seed corpus; fails on any finding
# (crash, sanitizer report, leak, timeout, out-of-memory), whose input libFuzzer leaves under
# WORK_DIR/artifacts/. The source tree is never written.
# Usage: run_fuzz.sh FUZZER SEED_DIR WORK_DIR SECONDS [DICT]   (IT_FUZZ_SECONDS overrides SECONDS)
set -u
bin=$1 seeds=$2 work=$3 secs=${IT_FUZZ_SECONDS:-$4} dict=${5:-}
name=$(basename "$bin")
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
cp -R "$seeds"/. "$work/corpus/"
args=(-max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
  -artifact_prefix="$work/artifacts/")
[[ -n $dict ]] && args+=(-dict="$dict")
export OMP_NUM_THREADS=1
"$bin" "${args[@]}" "$work/corpus" >"$work/log.txt" 2>&1
rc=$?
findings=$(find "$work/artifacts" -type f | wc -l)
# The last coverage line and the final statistics, for the record.
grep -E '^#[0-9]+' "$work/log.txt" | tail -n 1
grep -E '^stat::(number_of_executed_units|peak_rss_mb|new_units_added)' "$work/log.txt"
echo "$name: $(find "$seeds" -type f | wc -l) seeds, $(find "$work/corpus" -type f | wc -l) inputs after ${secs} s," \
  "exit status $rc, $findings findings; log: $work/log.txt"
if [[ $rc -ne 0 || $findings -ne 0 ]]; then
  tail -n 80 "$work/log.txt"
  find "$work/artifacts" -type f -exec echo "finding: {}" \;
  exit 1
fi
