#!/usr/bin/env bash
# Pipeline parallelism (--pipeline_parallel) and activation recomputation on the CPU, for
# `make bench`. The pipeline runs use IT_PP_STATS=1: after the last step every stage prints its
# time blocked in receives (steps 2..N), the schedule's bubble and its peak used memory.
#   1. The bubble: a GPT-2 of 8 layers (4 heads, C=128, block 64, vocab 257), B=4 T=64, AdamW,
#      OMP_NUM_THREADS=1 per rank, DP=1; P=4 with M=4 and M=8 micro-batches, P=2 with M=8, each
#      GPipe and 1F1B, and P=2 x V=2 interleaved 1F1B with M=8: each stage's blocked fraction
#      next to (P-1)/(M+P-1) (interleaved: (P-1)/(V*M+P-1)). With more ranks than cores the
#      ranks take turns on the cores, so a stage's blocked time includes its upstream stage
#      waiting for a core: the figures show the schedule's shape, not a device's bubble.
#   2. Peak used memory per stage, GPipe against 1F1B, from the same runs (P=4 and P=2, M=8):
#      GPipe keeps all M micro-batches' activations on every stage, 1F1B at most P-p on stage
#      p. One micro-batch's activations on a stage are estimated as (GPipe M=8 peak - GPipe M=4
#      peak) / 4; the bytes 1F1B saves are shown in micro-batches of that size beside
#      M - min(M, P-p).
#   3. Recomputation on GPT-2 124M (d12), one process, B=1 T=256, AdamW, RSTEPS steps (median
#      of steps 2..RSTEPS): without, with --activation_recompute (every block), uniform groups
#      of 4 and block 4 (the first 4 blocks), each run twice (A B C D D C B A, the quicker
#      median counts, since the shared host drifts): peak used and ms/step, the memory saved
#      (MB, % of the peak and % of the peak above the model state, params + grads + AdamW =
#      16 B per parameter) and the time added; and whether the losses are the same as without.
# Figures only; nothing is asserted. Every figure line names the host CPU.
# Usage: bench/pp_bench.sh [BUILD_DIR] [STEPS] [RSTEPS]   (STEPS for parts 1-2, default 10;
#        RSTEPS for part 3, default 3)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
steps=${2:-10}
rsteps=${3:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
command -v mpirun >/dev/null || { echo "PP_SKIPPED reason=mpirun not found (scripts/setup.sh installs openmpi-bin)"; exit 0; }
[ -x "$build/gpt2" ] || { echo "PP_SKIPPED reason=$build/gpt2 is not built"; exit 0; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cpu=${cpu:-unknown CPU}
cores=$(getconf _NPROCESSORS_ONLN)
rthreads=${OMP_NUM_THREADS:-2}
# As root and with more ranks than cores, OpenMPI needs these; users outside CI need not.
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS -x IT_PP_STATS)
shard=$src/tests/fixtures/gpt2/tiny_shard.bin
t0=$SECONDS
# the median of the step times (ms) of steps 2..N in a driver's output
step_ms() {
  grep '^step ' | sed -E 's/.*\(([0-9.]+) ms.*/\1/' | tail -n +2 | sort -g |
    awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'
}

echo "== Pipeline parallelism on the CPU ($cores cores, $cpu): DP=1, 1 thread per rank, IT_PP_STATS=1 =="
echo "-- the bubble: GPT-2 L=8, 4 heads, C=128, T=64, B=4, vocab 257, AdamW, $steps steps (stats over steps 2..$steps);" \
  "each stage's time blocked in receives, % of its step time"
echo "   $cores cores here: P=4 puts 4 ranks on $cores cores, so blocked time includes waiting for a core (the upstream" \
  "stage's and its own); the figures show the schedule's shape, not a device's bubble"
printf '  %-2s %-2s %-2s %-12s %8s %8s %8s %8s %8s %9s\n' P V M schedule theory stage0 stage1 stage2 stage3 "ms/step"
declare -A blocked peak
for run in "4 1 4 gpipe" "4 1 4 1f1b" "4 1 8 gpipe" "4 1 8 1f1b" "2 1 8 gpipe" "2 1 8 1f1b" "2 2 8 1f1b"; do
  read -r P V M sched <<<"$run"
  key="$P.$V.$M.$sched"
  name=$sched
  [ "$sched" = gpipe ] && name=GPipe
  [ "$sched" = 1f1b ] && name=1F1B
  [ "$V" -gt 1 ] && [ "$sched" = 1f1b ] && name=interleaved
  out=$(OMP_NUM_THREADS=1 IT_PP_STATS=1 "${mpi[@]}" -np "$P" "$build/gpt2" --input_bin "$shard" --n_layer 8 --n_head 4 \
    --n_embd 128 --block_size 64 --vocab_size 257 --batch_size 4 --sequence_length 64 --total_batch_size $((4 * 64 * M)) \
    --pipeline_parallel "$P" --virtual_pipeline_parallel "$V" --pipeline_schedule "$sched" --num_iteration "$steps" \
    --optimizer adamw 2>&1) || { echo "  P=$P V=$V M=$M $name: failed: $(tail -2 <<<"$out")"; continue; }
  theory=$(awk -v P="$P" -v V="$V" -v M="$M" 'BEGIN { printf "%.1f%%", 100 * (P - 1) / (V * M + P - 1) }')
  cols=()
  for ((p = 0; p < 4; p++)); do
    l=$(grep "^pipeline stats: stage $p of $P:" <<<"$out" || true)
    if [ -z "$l" ]; then
      cols+=("-")
      continue
    fi
    blocked[$key.$p]=$(sed -E 's/.*blocked in receives ([0-9.]+)%.*/\1/' <<<"$l")
    peak[$key.$p]=$(sed -E 's/.*peak used ([0-9.]+) MB.*/\1/' <<<"$l")
    cols+=("${blocked[$key.$p]}%")
  done
  printf '  %-2s %-2s %-2s %-12s %8s %8s %8s %8s %8s %9s  [%s]\n' "$P" "$V" "$M" "$name" "$theory" "${cols[@]}" \
    "$(step_ms <<<"$out")" "$cpu"
done
echo "   (theory: (P-1)/(M+P-1) for GPipe and 1F1B, (P-1)/(V*M+P-1) interleaved; the last stage waits only for its" \
  "forward inputs; ms/step: rank 0's step line, median of steps 2..$steps)"

echo "-- peak used memory per stage (MB = MiB as IT_PP_STATS prints them: parameters, gradients, AdamW and activations)," \
  "GPipe against 1F1B, M=8; one micro-batch's activations = (GPipe M=8 - GPipe M=4) / 4"
printf '  %-2s %-5s %10s %10s %12s %10s %13s %14s\n' P stage "GPipe MB" "1F1B MB" "1F1B/GPipe" "saved MB" "1 mb's acts" \
  "saved in mbs"
for P in 4 2; do
  for ((p = 0; p < P; p++)); do
    g=${peak[$P.1.8.gpipe.$p]:-} f=${peak[$P.1.8.1f1b.$p]:-} g4=${peak[$P.1.4.gpipe.$p]:-}
    if [ -z "$g" ] || [ -z "$f" ]; then
      echo "  P=$P stage $p: not measured (a run failed above)"
      continue
    fi
    awk -v P="$P" -v p="$p" -v g="$g" -v f="$f" -v g4="$g4" -v cpu="$cpu" 'BEGIN {
      M = 8; keep = (P - p < M) ? P - p : M
      act = (g4 != "") ? (g - g4) / 4 : 0
      mbs = act > 0 ? sprintf("%.1f (exp. %d)", (g - f) / act, M - keep) : sprintf("- (exp. %d)", M - keep)
      printf "  %-2d %-5d %10.1f %10.1f %11.1f%% %10.1f %13s %14s  [%s]\n", P, p, g, f, 100 * f / g, g - f,
        (act > 0 ? sprintf("%.2f MB", act) : "-"), mbs, cpu }'
  done
done
echo "   (GPipe holds M=8 micro-batches' activations on every stage, 1F1B min(M, P-p) on stage p: exp. = M - min(M, P-p);" \
  "P=2 ran without M=4, so its micro-batch size is not estimated)"
for ((p = 0; p < 2; p++)); do
  [ -n "${peak[2.2.8.1f1b.$p]:-}" ] && echo "   interleaved P=2 x V=2, M=8, stage $p: peak used ${peak[2.2.8.1f1b.$p]} MB" \
    "(1F1B V=1: ${peak[2.1.8.1f1b.$p]:-?} MB, GPipe V=1: ${peak[2.1.8.gpipe.$p]:-?} MB)  [$cpu]"
done

echo "-- activation recomputation, GPT-2 124M (d12), one process, $rthreads threads, B=1 T=256, AdamW, $rsteps steps" \
  "(median of steps 2..$rsteps), each setting run twice in the order A B C D D C B A, the quicker median counts:" \
  "the host is shared (load now $(cut -d' ' -f1 /proc/loadavg)), so ms/step moves between runs"
declare -A rpeak rms rall rloss
labels=(none every uniform4 block4)
declare -A rargs=([none]="" [every]="--activation_recompute"
  [uniform4]="--activation_recompute --recompute_method uniform --recompute_num_layers 4"
  [block4]="--activation_recompute --recompute_method block --recompute_num_layers 4")
params="" bl=""
for label in "${labels[@]}" $(printf '%s\n' "${labels[@]}" | tac); do
  # shellcheck disable=SC2086 # the arguments are words
  out=$(OMP_NUM_THREADS=$rthreads "$build/gpt2" --model d12 --input_bin "$shard" --batch_size 1 --sequence_length 256 \
    --num_iteration "$rsteps" --optimizer adamw ${rargs[$label]} 2>&1) ||
    { echo "  $label: failed: $(tail -2 <<<"$out")"; continue; }
  pk=$(sed -n 's/.*peak used: *\([0-9]*\) MB.*/\1/p' <<<"$out" | sort -n | tail -n1)
  ms=$(step_ms <<<"$out")
  losses=$(grep '^step ' <<<"$out" | sed -E 's/.*train loss ([0-9.]+).*/\1/' | paste -sd' ')
  [ -n "$params" ] || params=$(sed -n 's/.* \([0-9]*\) parameters.*/\1/p' <<<"$out" | head -n1)
  rall[$label]="${rall[$label]:+${rall[$label]}, }$(printf %.1f "$ms")"
  if [ -z "${rms[$label]:-}" ] || awk -v a="$ms" -v b="${rms[$label]}" 'BEGIN { exit !(a < b) }'; then rms[$label]=$ms; fi
  # the larger peak of the two runs; a run whose losses are not none's first run's is kept in rloss
  if [ -z "${rpeak[$label]:-}" ] || [ "$pk" -gt "${rpeak[$label]}" ]; then rpeak[$label]=$pk; fi
  [ -n "$bl" ] || bl=$losses
  [ "$losses" = "$bl" ] || rloss[$label]=$losses
done
state_mb=$(awk -v n="${params:-0}" 'BEGIN { printf "%.1f", 16 * n / 1048576 }')
printf '  %-12s %8s %10s %-18s %14s %12s %8s  %s\n' recompute "peak MB" "ms/step" "(both runs)" "saved MB (%)" \
  "of the acts" "time" "losses (steps 1..$rsteps)"
bp=${rpeak[none]:-} bm=${rms[none]:-}
for label in "${labels[@]}"; do
  [ -n "${rpeak[$label]:-}" ] || { echo "  $label: not measured"; continue; }
  if [ -z "${rloss[$label]:-}" ]; then
    same="same losses"
    [ "$label" = none ] && same="$bl (both runs)"
  else
    same=$(awk -v a="$bl" -v b="${rloss[$label]}" 'BEGIN { n = split(a, x, " "); split(b, y, " "); d = 0
      for (i = 1; i <= n; i++) { e = x[i] - y[i]; if (e < 0) e = -e; if (e > d) d = e }
      printf "losses differ: max |diff| %.6g (%s)", d, b }')
  fi
  awk -v l="$label" -v pk="${rpeak[$label]}" -v ms="${rms[$label]}" -v all="(${rall[$label]})" -v bp="${bp:-0}" \
    -v bm="${bm:-0}" -v st="$state_mb" -v same="$same" -v cpu="$cpu" 'BEGIN {
      acts = bp - st
      if (l == "none") { saved = "-"; of = sprintf("%.0f MB", acts); t = "-" }
      else { saved = sprintf("%d (%.1f%%)", bp - pk, 100 * (bp - pk) / bp)
             of = sprintf("%.1f%%", (acts > 0 ? 100 * (bp - pk) / acts : 0))
             t = sprintf("%+.1f%%", (bm > 0 ? 100 * (ms - bm) / bm : 0)) }
      printf "  %-12s %8d %10.1f %-18s %14s %12s %8s  %s  [%s]\n", l, pk, ms, all, saved, of, t, same, cpu }'
done
echo "   (every: --activation_recompute, each block; uniform4: --recompute_method uniform --recompute_num_layers 4, groups" \
  "of 4 blocks, each group's input kept; block4: --recompute_method block --recompute_num_layers 4, the first 4 blocks;" \
  "saved: against none; of the acts: % of none's peak above the model state, params + grads + AdamW's m, v = 16 B x" \
  "${params:-?} parameters = $state_mb MB (none's row: that part of its peak); time: ms/step added, quicker run against quicker run)"
echo "PP bubble_p4_m8_1f1b_stage0=${blocked[4.1.8.1f1b.0]:-nan} peak_p4_m8_gpipe_stage0=${peak[4.1.8.gpipe.0]:-nan}" \
  "peak_p4_m8_1f1b_stage0=${peak[4.1.8.1f1b.0]:-nan} recompute_peak_none=${rpeak[none]:-nan}" \
  "recompute_peak_every=${rpeak[every]:-nan} recompute_ms_none=${rms[none]:-nan}" \
  "recompute_ms_every=${rms[every]:-nan} elapsed_s=$((SECONDS - t0))"
