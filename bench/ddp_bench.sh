#!/usr/bin/env bash
# Data-parallel throughput on the CPU: the same global batch (tokens per step) on 1, 2 and
# 4 ranks (mpirun, the CPU backend's MPI collectives), plain DDP and ZeRO-1. Prints one line
# per configuration: ranks, mean step time over the last steps, tokens/s, and the per-rank
# optimizer state. Figures only; nothing is asserted.
# Usage: bench/ddp_bench.sh [BUILD_DIR] [STEPS]   (threads per rank: OMP_NUM_THREADS, default 1)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-20}
src=$(cd "$(dirname "$0")/.." && pwd)
command -v mpirun >/dev/null || { echo "ddp_bench: mpirun not found (scripts/setup.sh)"; exit 1; }
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mpi=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS)
# A small GPT-2 (d=256, 4 layers) so that the gradient all-reduce (~16 MB) is visible.
model=(--model d12 --n_layer 4 --n_head 4 --n_embd 256 --block_size 128
  --input_bin "$src/tests/fixtures/gpt2/tiny_shard.bin" --vocab_size 257 --batch_size 4 --sequence_length 64
  --total_batch_size 1024 --optimizer adamw --learning_rate 1e-3 --num_iteration "$steps")
printf '%-22s %10s %10s  %s\n' config "ms/step" "tok/s" "optimizer state per rank"
for cfg in "1 0" "2 0" "2 1" "4 0" "4 1"; do
  set -- $cfg
  n=$1 z=$2
  if [[ $n -eq 1 ]]; then out=$("$build/gpt2" "${model[@]}" 2>&1); else
    out=$("${mpi[@]}" -np "$n" "$build/gpt2" "${model[@]}" --zero_stage "$z" 2>&1); fi
  # mean over the second half of the steps (the first ones warm the allocator up)
  ms=$(grep '^step ' <<<"$out" | sed -E 's/.*\(([0-9.]+) ms.*/\1/' | tail -n $((steps / 2)) |
    awk '{s+=$1} END {printf "%.1f", s/NR}')
  mem=$(grep -o 'optimizer state per rank: [0-9.]* MB' <<<"$out" | sed 's/.*: //' || true)
  printf '%-22s %10s %10.0f  %s\n' "DP=$n$([[ $z -eq 1 ]] && echo ' ZeRO-1')" "$ms" \
    "$(awk -v ms="$ms" 'BEGIN {print 1024 / (ms / 1000)}')" "${mem:-(all of it)}"
done
