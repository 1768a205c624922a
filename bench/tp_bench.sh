#!/usr/bin/env bash
# Tensor parallelism (--tensor_parallel) on the CPU, for `make bench`: all ranks in one TP
# group (DP = 1), OMP_NUM_THREADS=1 per rank.
#   1. Per-rank memory of GPT-2 124M (d12) at TP = 1, 2, 4: parameters + gradients + AdamW's
#      two moments, measured on the model and optimizer objects built at that TP (bench_tp:
#      it_gpt2_new_tp, it_tensor_nbytes, it_optimizer_state_bytes; the largest rank's), their
#      ratio to TP=1 against the issue's targets (<= 55% at TP=2, <= 30% at TP=4), and the
#      peak the allocator saw in one step (it_mem_stats peak_used) at B=1 T=64: bench_tp's
#      (largest rank) and the driver's step line (build/gpt2, rank 0).
#   2. Bytes each rank sent in the TP group's tensor collectives over that step
#      (it_dist_bytes_sent, ring accounting) against Megatron's count: per layer 2 all-reduces
#      of B*T*C fp32 forward (attention and MLP outputs) and 2 backward (their inputs'
#      copies), plus the vocab-parallel embedding's forward all-reduce and the lm_head input's
#      backward one: (4L + 2) all-reduces, each 2(N-1)/N * B*T*C*4 bytes sent per rank. The
#      vocab-parallel cross entropy's host exchange (2*N*B*T fp64, all-reduced over MPI) is
#      control data, outside that counter; its size is printed beside.
#   3. Tokens/s of a small GPT-2 (L=4, 4 heads, C=256, V=8192, block 128), B=4 T=128, median of
#      steps 2..N. On a host with fewer cores than ranks the ranks share cores: these are not
#      scaling claims.
# Figures only; nothing is asserted. Every figure line names the host CPU.
# Usage: bench/tp_bench.sh [BUILD_DIR] [STEPS]   (STEPS for part 3, default 5)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-5}
src=$(cd "$(dirname "$0")/.." && pwd)
command -v mpirun >/dev/null || { echo "TP_SKIPPED reason=mpirun not found (scripts/setup.sh installs openmpi-bin)"; exit 0; }
[ -x "$build/bench_tp" ] || { echo "TP_SKIPPED reason=$build/bench_tp is not built"; exit 0; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cpu=${cpu:-unknown CPU}
cores=$(getconf _NPROCESSORS_ONLN)
# As root and with more ranks than cores, OpenMPI needs these; users outside CI need not.
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS)
export OMP_NUM_THREADS=1
shard=$src/tests/fixtures/gpt2/tiny_shard.bin
t0=$SECONDS
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
launch() { # ranks, command...
  local n=$1
  shift
  if [[ $n -eq 1 ]]; then "$@"; else "${mpi[@]}" -np "$n" "$@"; fi
}

echo "== Tensor parallelism on the CPU ($cores cores, $cpu): one TP group, DP=1, 1 thread per rank =="
echo "-- GPT-2 124M (d12), AdamW, one step at B=1 T=64: per-rank bytes measured on the objects built at each TP"
printf '  %-4s %12s %10s %10s %10s %11s %7s %-12s %13s %13s\n' TP "params/rank" "params MB" "grads MB" "AdamW MB" \
  "total MB" "of TP=1" target "step peak" "driver peak"
declare -A line
base=""
for n in 1 2 4; do
  out=$(launch "$n" "$build/bench_tp" d12 1 64 2>&1) || { echo "  TP=$n: bench_tp failed: $(tail -2 <<<"$out")"; continue; }
  l=$(grep '^TPBENCH ' <<<"$out" || true)
  [ -n "$l" ] || { echo "  TP=$n: bench_tp printed no figures: $(tail -2 <<<"$out")"; continue; }
  line[$n]=$l
  total=$(field total_bytes <<<"$l")
  [ "$n" = 1 ] && base=$total
  # the driver's own step line on the same shapes (rank 0's peak used, MB as it prints them)
  dout=$(launch "$n" "$build/gpt2" --model d12 --input_bin "$shard" --tensor_parallel "$n" --num_iteration 1 \
    --batch_size 1 --sequence_length 64 --optimizer adamw 2>&1) || dout=""
  dpeak=$(sed -n 's/.*peak used: *\([0-9]*\) MB.*/\1/p' <<<"$dout" | tail -n1)
  ratio="" verdict="" target=""
  if [ -n "$base" ]; then
    ratio=$(awk -v a="$total" -v b="$base" 'BEGIN { printf "%.1f%%", 100 * a / b }')
    case $n in 2) target=55 ;; 4) target=30 ;; esac
    [ -n "$target" ] && verdict="$(awk -v a="$total" -v b="$base" -v t="$target" \
      'BEGIN { print (100 * a / b <= t) ? "PASS" : "MISS" }') (<=${target}%)"
  fi
  printf '  %-4s %12s %10s %10s %10s %11s %7s %-12s %10s MB %10s MB  [%s]\n' "$n" "$(field params_rank <<<"$l")" \
    "$(mb "$(field params_bytes <<<"$l")")" "$(mb "$(field grads_bytes <<<"$l")")" \
    "$(mb "$(field optim_bytes <<<"$l")")" "$(mb "$total")" "${ratio:-?}" "${verdict:--}" \
    "$(mb "$(field step_peak_used <<<"$l")")" "${dpeak:-?}" "$cpu"
done
echo "   (MB = MiB; params/rank of the whole model's $(field params_whole <<<"${line[1]:-${line[2]:-}}") elements;" \
  "step peak: it_mem_stats peak_used over one step, the largest rank's; driver's peak: build/gpt2's step line, rank 0)"

echo "-- TP collectives per step per rank, d12 B=1 T=64: it_dist_bytes_sent against Megatron's (4L + 2) all-reduces of B*T*C fp32"
for n in 2 4; do
  l=${line[$n]:-}
  [ -n "$l" ] || { echo "  TP=$n: not measured (bench_tp failed above)"; continue; }
  L=$(field L <<<"$l") C=$(field C <<<"$l") B=$(field B <<<"$l") T=$(field T <<<"$l")
  fwd=$(field sent_fwd <<<"$l") bwd=$(field sent_bwd <<<"$l") rest=$(field sent_after_bwd <<<"$l")
  awk -v n="$n" -v L="$L" -v C="$C" -v B="$B" -v T="$T" -v f="$fwd" -v b="$bwd" -v r="$rest" \
    -v mn="$(field sent_min <<<"$l")" -v cpu="$cpu" 'BEGIN {
      share = 2 * (n - 1) / n; ar = B * T * C * 4 * share
      ef = (2 * L + 1) * ar; eb = (2 * L + 1) * ar; m = f + b + r; e = ef + eb
      fmt = "  TP=%d: measured %.0f B (%.2f MB: forward %.0f, backward %.0f, after backward %.0f; smallest rank %.0f)"
      fmt = fmt " expected %.0f B (forward %.0f = (2L+1) x %.0f, backward %.0f): measured/expected %.4f;"
      fmt = fmt " CE host exchange %.0f B payload, not counted  [%s]\n"
      printf fmt, n, m, m / 1e6, f, b, r, mn, e, ef, ar, eb, (e > 0 ? m / e : 0), 2 * n * B * T * 8, cpu }'
done

echo "-- tokens/s, small GPT-2 (L=4, 4 heads, C=256, V=8192, block 128), B=4 T=128, AdamW, median of steps 2..$steps:" \
  "TP=1 runs on one of the $cores cores, TP=2/4 ranks share all $cores, so not scaling claims"
declare -A tok
for n in 1 2 4; do
  out=$(launch "$n" "$build/gpt2" --n_layer 4 --n_head 4 --n_embd 256 --vocab_size 8192 --block_size 128 \
    --input_bin "$shard" --tensor_parallel "$n" --num_iteration "$steps" --batch_size 4 --sequence_length 128 \
    --optimizer adamw --log_interval 1000 2>&1) || { echo "  TP=$n: failed: $(tail -2 <<<"$out")"; continue; }
  ms=$(grep '^step ' <<<"$out" | sed -E 's/.*\(([0-9.]+) ms.*/\1/' | tail -n +2 | sort -g |
    awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}')
  peak=$(sed -n 's/.*peak used: *\([0-9]*\) MB.*/\1/p' <<<"$out" | tail -n1)
  tok[$n]=$(awk -v ms="$ms" 'BEGIN { printf "%.0f", 4 * 128 / (ms / 1000) }')
  printf '  TP=%d: %8.1f ms/step %7s tok/s  peak used %4s MB (rank 0)  loss at step %d %s  [%s]\n' "$n" "$ms" "${tok[$n]}" \
    "${peak:-?}" "$steps" "$(grep '^step ' <<<"$out" | tail -n1 | sed -E 's/.*train loss ([0-9.]+).*/\1/')" "$cpu"
done
l2=${line[2]:-} l4=${line[4]:-}
echo "TP mem_ratio_tp2=$(awk -v a="$(field total_bytes <<<"$l2")" -v b="$base" 'BEGIN { printf "%.4f", b ? a / b : 0 }')" \
  "mem_ratio_tp4=$(awk -v a="$(field total_bytes <<<"$l4")" -v b="$base" 'BEGIN { printf "%.4f", b ? a / b : 0 }')" \
  "tok_s_tp1=${tok[1]:-nan} tok_s_tp2=${tok[2]:-nan} tok_s_tp4=${tok[4]:-nan} elapsed_s=$((SECONDS - t0))"
