#!/usr/bin/env bash
# Context parallelism (--context_parallel) on the CPU, for `make bench`: all ranks in one CP
# group (DP = 1), OMP_NUM_THREADS=1 per rank, a LLaMA-3 style model (2 layers, C=256, 8 query
# and 4 kv heads of 32, FFN 768, vocabulary 8192, block 16384; random weights written as a
# Hugging Face checkpoint and converted by it-ckpt from-hf) on random tokens, B=1, AdamW.
#   1. Per-rank peak memory (the step line's peak used, rank 0; with --cp_load_balance the
#      ranks hold equal shares) at T = 8192 and 16384 for CP = 1, 2, 4, p2p, one step.
#   2. Bytes each rank sent per step over the CP group for each comm type, at T = 8192 and
#      CP = 2, 4 (the trainer's own count at the end of a run: it_dist_bytes_sent, ring
#      accounting for the all_gather's collectives), against the model's arithmetic: p2p moves
#      K and V (CP-1 times forward; backward K, V and their fp32 gradient sums CP-1 times, and
#      the gradients once more home), all_gather gathers K and V and reduce-scatters their
#      gradients, a2a moves q, k, v and y forward and their gradients backward, (CP-1)/CP each.
#   3. Step time of p2p with and without --cp_load_balance at T = 8192, CP = 2 and 4 (median of
#      steps 2..3): the ranks share the host's cores, so these are as measured, not scaling
#      claims; the balanced layout evens the causal work between ranks, which on shared cores
#      shows as the slowest rank waiting less.
# Figures only; nothing is asserted. Every figure line names the host CPU.
# Usage: bench/cp_bench.sh [BUILD_DIR]   (CP_BENCH_LONG=0 skips T = 16384)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
command -v mpirun >/dev/null || { echo "CP_SKIPPED reason=mpirun not found (scripts/setup.sh installs openmpi-bin)"; exit 0; }
if ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  echo "CP_SKIPPED reason=numpy does not import for /usr/bin/python3"
  exit 0
fi
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cpu=${cpu:-unknown CPU}
cores=$(getconf _NPROCESSORS_ONLN)
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS)
export OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
t0=$SECONDS
L=2 C=256 NH=8 NKV=4 F=768 V=8192 BLOCK=16384
/usr/bin/python3 "$(dirname "$0")/make_llama_hf.py" "$work/hf" $L $C $NH $NKV $F $V $BLOCK f32 1
# an llm.c token shard (uint16 ids) of random tokens, long enough for T + 1
/usr/bin/python3 - "$work/shard.bin" $V $BLOCK <<'PY'
import struct, sys
import numpy as np
V, T = int(sys.argv[2]), int(sys.argv[3])
n = 4 * T + 1
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(np.random.default_rng(1).integers(0, V, n, dtype=np.uint16).astype("<u2").tobytes())
PY
"$build/it-ckpt" from-hf "$work/hf" "$work/model.bin" >/dev/null
model=(--llmc_filepath "$work/model.bin" --input_bin "$work/shard.bin" --batch_size 1 --optimizer adamw
  --log_interval 1000)
launch() { # ranks, args...
  local n=$1
  shift
  if [[ $n -eq 1 ]]; then "$build/llama3" "${model[@]}" "$@"; else "${mpi[@]}" -np "$n" "$build/llama3" "${model[@]}" "$@"; fi
}
peak_of() { sed -n 's/.*peak used: *\([0-9]*\) MB.*/\1/p' | tail -n1; }
median_ms() { grep '^step ' | sed -E 's/.*\(([0-9.]+) ms.*/\1/' | tail -n +2 | sort -g |
  awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

echo "== Context parallelism on the CPU ($cores cores, $cpu): one CP group, DP=1, 1 thread per rank =="
echo "-- per-rank peak memory, LLaMA-3 style L=$L C=$C heads $NH/$NKV FFN $F V=$V, B=1, p2p balanced, one AdamW step"
Ts=(8192 16384)
[[ ${CP_BENCH_LONG:-1} == 0 ]] && Ts=(8192)
declare -A peak
for T in "${Ts[@]}"; do
  for n in 1 2 4; do
    extra=()
    [[ $n -gt 1 ]] && extra=(--context_parallel "$n" --cp_load_balance)
    out=$(launch "$n" --sequence_length "$T" --num_iteration 1 "${extra[@]}" 2>&1) ||
      { echo "  T=$T CP=$n: failed: $(tail -2 <<<"$out")"; continue; }
    peak[$T.$n]=$(peak_of <<<"$out")
    printf '  T=%-6s CP=%d: peak used %6s MB per rank (rank 0)%s  [%s]\n' "$T" "$n" "${peak[$T.$n]:-?}" \
      "$([[ $n -gt 1 && -n ${peak[$T.1]:-} ]] && awk -v a="${peak[$T.$n]}" -v b="${peak[$T.1]}" \
        'BEGIN { printf ", %.0f%% of CP=1", 100 * a / b }')" "$cpu"
  done
done

echo "-- bytes sent per step per rank over the CP group, T=8192 B=1 (the trainer's count) against the arithmetic"
T=8192
declare -A ms
for n in 2 4; do
  for comm in p2p all_gather a2a; do
    [[ $comm == a2a && $((NKV % n)) -ne 0 ]] && { echo "  CP=$n a2a: $NKV kv heads do not divide by $n (refused)"; continue; }
    out=$(launch "$n" --sequence_length $T --num_iteration 3 --context_parallel "$n" --cp_comm_type "$comm" 2>&1) ||
      { echo "  CP=$n $comm: failed: $(tail -2 <<<"$out")"; continue; }
    got=$(sed -n 's/^context parallel: this rank sent \([0-9.]*\) MB per step.*/\1/p' <<<"$out")
    [[ $comm == p2p ]] && ms[$n.0]=$(median_ms <<<"$out")
    awk -v n="$n" -v comm="$comm" -v got="$got" -v L="$L" -v T="$T" -v C="$C" -v NH="$NH" -v NKV="$NKV" -v cpu="$cpu" 'BEGIN {
      hd = C / NH; tl = T / n; kv = tl * NKV * hd * 4; q = tl * NH * hd * 4
      if (comm == "p2p") e = (n - 1) * 2 * kv + (n - 1) * 4 * kv + 2 * kv
      else if (comm == "all_gather") e = 2 * (n - 1) * 2 * kv
      else e = 2 * (n - 1) / n * (2 * q + 2 * kv)
      e *= L
      printf "  CP=%d %-10s measured %8.3f MB/step, expected %8.3f MB (%s)  [%s]\n", n, comm, got, e / 1e6,
        comm == "p2p" ? "K,V fwd; K,V,dK,dV bwd; dK,dV home" : comm == "all_gather" ? "gather K,V; reduce-scatter dK,dV" : "q,k,v,y and their gradients",
        cpu }'
  done
done

echo "-- p2p step time with and without --cp_load_balance, T=8192 B=1, median of steps 2..3 (ranks share the $cores cores)"
for n in 2 4; do
  out=$(launch "$n" --sequence_length $T --num_iteration 3 --context_parallel "$n" --cp_load_balance 2>&1) ||
    { echo "  CP=$n balanced: failed: $(tail -2 <<<"$out")"; continue; }
  ms[$n.1]=$(median_ms <<<"$out")
  awk -v n="$n" -v a="${ms[$n.0]:-nan}" -v b="${ms[$n.1]}" -v cpu="$cpu" 'BEGIN {
    printf "  CP=%d: contiguous %9.1f ms/step, balanced %9.1f ms/step (%.2fx)  [%s]\n", n, a, b, (b > 0 ? a / b : 0), cpu }'
done
echo "CP peak_t8192_cp1=${peak[8192.1]:-nan} peak_t8192_cp4=${peak[8192.4]:-nan} peak_t16384_cp1=${peak[16384.1]:-nan}" \
  "peak_t16384_cp4=${peak[16384.4]:-nan} ms_cp4_contiguous=${ms[4.0]:-nan} ms_cp4_balanced=${ms[4.1]:-nan}" \
  "elapsed_s=$((SECONDS - t0))"
