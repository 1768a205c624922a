#!/usr/bin/env bash
# Data-parallel throughput on the CPU, for issue 8's line in `make bench`: GPT-2 124M (d12,
# random init), B=4 T=64, the same global batch of 512 tokens per step on
#   1 rank  x 2 threads (accumulation 2)
#   2 ranks x 1 thread  (DDP, 25 MiB buckets all-reduced while backward runs)
#   2 ranks x 1 thread  (one bucket for the whole gradient: reduced after backward, no overlap)
#   2 ranks x 1 thread  (ZeRO-1)
#   2 ranks x 1 thread  (ZeRO-2, 25 MiB buckets reduce-scattered while backward runs)
#   2 ranks x 1 thread  (DDP with the collective watchdog's threads off: what they cost)
# then the all-reduce alone on the model's gradient size (bench_allreduce), and the memory per
# rank of DDP, ZeRO-1 and ZeRO-2 (bench_zero: computed for GPT-2 124M at 2 ranks, measured on a
# small GPT-2 under mpirun). Prints one line per
# configuration (median ms/step over the steps after the first two, tokens/s, the step's share
# spent in the DDP all-reduce where known, optimizer state per rank) and a DDP summary line.
# Figures only; nothing is asserted.
# Usage: bench/ddp_bench.sh [BUILD_DIR] [STEPS]   (STEPS default 6)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-6}
src=$(cd "$(dirname "$0")/.." && pwd)
command -v mpirun >/dev/null || { echo "DDP_SKIPPED reason=mpirun not found (scripts/setup.sh installs openmpi-bin)"; exit 0; }
# As root and with more ranks than cores, OpenMPI needs these; users outside CI need not.
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
model=(--model d12 --input_bin "$src/tests/fixtures/gpt2/tiny_shard.bin" --batch_size 4 --sequence_length 64
  --total_batch_size 512 --optimizer adamw --learning_rate 1e-4 --num_iteration "$steps" --log_interval 1000)
echo "== DDP on the CPU: GPT-2 124M, B=4 T=64, 512 tokens per step in every configuration, $steps steps each =="
printf '  %-40s %10s %9s  %s\n' configuration "ms/step" "tok/s" "optimizer state per rank"
declare -A tok
run_cfg() { # key, label, threads, ranks, extra args...
  local key=$1 label=$2 th=$3 n=$4
  shift 4
  local out
  if [[ $n -eq 1 ]]; then
    out=$(OMP_NUM_THREADS=$th "$build/gpt2" "${model[@]}" "$@" 2>&1) || { echo "  $label: failed: $(tail -2 <<<"$out")"; return; }
  else
    out=$(OMP_NUM_THREADS=$th "${mpi[@]}" -x OMP_NUM_THREADS -np "$n" "$build/gpt2" "${model[@]}" "$@" 2>&1) ||
      { echo "  $label: failed: $(tail -2 <<<"$out")"; return; }
  fi
  local ms
  ms=$(grep '^step ' <<<"$out" | sed -E 's/.*\(([0-9.]+) ms.*/\1/' | tail -n +3 | sort -g |
    awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}')
  local mem overlap
  mem=$(grep -o 'optimizer state per rank: [0-9.]* MB' <<<"$out" | sed 's/.*: //' || true)
  overlap=$(grep -o '^\(DDP\|ZeRO-2\): [0-9]* of [0-9]* gradient buckets' <<<"$out" |
    sed 's/^[A-Za-z0-9-]*: //;s/ gradient buckets/ buckets early/' || true)
  tok[$key]=$(awk -v ms="$ms" 'BEGIN {printf "%.1f", 512 / (ms / 1000)}')
  printf '  %-40s %10.1f %9s  %s%s\n' "$label" "$ms" "${tok[$key]}" "${mem:-all of it}" "${overlap:+; $overlap}"
}
run_cfg one "1 rank x 2 threads, accumulation 2" 2 1
run_cfg dp "2 ranks x 1 thread, DDP (overlapped)" 1 2
run_cfg dp1 "2 ranks x 1 thread, DDP, one bucket" 1 2 --ddp_bucket_kb 1048576
run_cfg z1 "2 ranks x 1 thread, ZeRO-1" 1 2 --zero_stage 1
run_cfg z2 "2 ranks x 1 thread, ZeRO-2" 1 2 --zero_stage 2
run_cfg nowd "2 ranks x 1 thread, DDP, no watchdog" 1 2 --collective_timeout_s 0 --collective_warn_s 0
ar=$(OMP_NUM_THREADS=1 "${mpi[@]}" -x OMP_NUM_THREADS -np 2 "$build/bench_allreduce" 124475904 5 2>&1 | grep '^ALLREDUCE' || true)
echo "  all-reduce alone: ${ar:-failed}"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
if [[ -n ${tok[one]:-} && -n ${tok[dp]:-} ]]; then
  echo "DDP one_rank_2threads_tok_s=${tok[one]} two_ranks_1thread_tok_s=${tok[dp]}" \
    "ratio=$(awk -v a="${tok[dp]}" -v b="${tok[one]}" 'BEGIN {printf "%.2f", a / b}')" \
    "no_overlap_tok_s=${tok[dp1]:-nan} no_watchdog_tok_s=${tok[nowd]:-nan} allreduce_ms=$(field ms_median <<<"$ar") allreduce_algbw_GBs=$(field algbw_GBs <<<"$ar")"
fi
if [[ -x $build/bench_zero ]]; then
  OMP_NUM_THREADS=1 "${mpi[@]}" -x OMP_NUM_THREADS -np 2 "$build/bench_zero" || echo "bench_zero: failed"
fi
