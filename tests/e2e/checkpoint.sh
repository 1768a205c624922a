#!/usr/bin/env bash
# Checkpoints and exact resume (issue 27): a run resumed with --load prints BITWISE the
# losses of the uninterrupted run (%.17g strings from --loss_log) for the three models, fp32
# and bf16, SGD/Adam/AdamW, accumulation, clipping, a warmup+cosine schedule, on cpu and sim,
# under DDP (2 and 4 ranks) and ZeRO-1; a checkpoint written at one DP size loads at another;
# SIGKILL at any moment of a save leaves every checkpoint_step_* loadable and nothing else
# that --load takes as complete; pruning keeps the newest K and the one resumed from; bad or
# mismatched checkpoints and a full disk stop with exit 2 / an error naming the file; SIGTERM
# (SIGINT, SIGUSR1 through mpirun) stops a run after a step with a checkpoint that resumes it
# bitwise.
# Usage: checkpoint.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# Bitwise equality needs the same summation order in the uninterrupted and the resumed run:
# the CPU kernels' is fixed for a given thread count, so every run here uses one thread.
export OMP_NUM_THREADS=1
have_mpi=1
command -v mpirun >/dev/null 2>&1 || have_mpi=0
# OpenMPI refuses root without --allow-run-as-root, and more ranks than cores without
# --oversubscribe (CI containers run as root on 2 cores).
mpi=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS)
. "$src/tests/e2e/mpi_asan.bash" # the sanitizer build's rank setup
mpi_asan_setup

g=$src/tests/fixtures/gpt2 l=$src/tests/fixtures/llama3 m=$src/tests/fixtures/mixtral
gpt2=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --learning_rate 0.001)
llama=(--llmc_filepath "$l/tiny_llama3.bin" --input_bin "$l/tiny_shard_u32.bin" --batch_size 4 --sequence_length 32
  --learning_rate 0.001)
mixtral=(--llmc_filepath "$m/tiny_mixtral.bin" --input_bin "$m/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --learning_rate 0.001 --ddp_bucket_kb 16)

train() { # np (0 = no mpirun), app, log, args...: one training run, its loss log in log
  local np=$1 app=$2 log=$3
  shift 3
  local cmd=("$build/$app" "$@" --loss_log "$log")
  ((np > 0)) && cmd=(timeout 120 "${mpi[@]}" -np "$np" "${cmd[@]}")
  "${cmd[@]}" >"$log.out" 2>&1 && return 0
  bad "exited $?: ${cmd[*]}: $(tail -3 "$log.out")"
  return 1
}
tail_of() { sed -n "$(($2 + 1)),\$p" "$1"; } # log, step: the lines after step

# Exact resume: the uninterrupted run of n steps saving every k, then a run resumed from
# step s; the resumed run's n-s losses must be the uninterrupted run's, byte for byte.
resume() { # name, np, app, n, k, s, args...
  local name=$1 np=$2 app=$3 n=$4 k=$5 s=$6
  shift 6
  local d=$tmp/r$((++cases))
  mkdir -p "$d"
  train "$np" "$app" "$d/full" "$@" --num_iteration "$n" --save "$d/ck" --save_interval "$k" || return
  local c
  c=$d/ck/$(printf 'checkpoint_step_%06d' "$s")
  [[ -f $c/trainer_state.json && -f $c/model.ckpt ]] || { bad "$name: $c not written: $(ls "$d/ck")"; return; }
  train "$np" "$app" "$d/res" "$@" --num_iteration "$n" --load "$c" || return
  if [[ $(wc -l <"$d/res") -eq $((n - s)) ]] && cmp -s <(tail_of "$d/full" "$s") "$d/res"; then
    ok
    echo "resume $name: step $((s + 1)) $(head -1 "$d/res" | cut -d' ' -f2) (uninterrupted $(tail_of "$d/full" "$s" | head -1 | cut -d' ' -f2)), step $n $(tail -1 "$d/res" | cut -d' ' -f2)"
  else
    bad "$name: resumed losses differ from the uninterrupted run's (uninterrupted | resumed):"
    paste <(tail_of "$d/full" "$s") "$d/res" | head -5
  fi
}
cases=0

# 1. Exact resume, one case per mechanism. The issue's 50 steps saving every 10, resumed from
#    30, once (GPT-2, AdamW, clipping, warmup + cosine); elsewhere 12 steps, every 4, from 8.
resume "gpt2 adamw clip warmup+cosine 50/10/30" 0 gpt2 50 10 30 "${gpt2[@]}" --optimizer adamw --weight_decay 0.1 \
  --grad_clip 1.0 --lr_warmup_iters 3 --lr_decay_style cosine
resume "gpt2 sgd bf16 accumulation 2" 0 gpt2 12 4 8 "${gpt2[@]}" --optimizer sgd --dtype bfloat16 --total_batch_size 256
resume "gpt2 adam on sim" 0 gpt2 12 4 8 "${gpt2[@]}" --optimizer adam --device sim
resume "llama3 adam" 0 llama3 12 4 8 "${llama[@]}" --optimizer adam
resume "llama3 adamw bf16 clip" 0 llama3 12 4 8 "${llama[@]}" --optimizer adamw --dtype bfloat16 --grad_clip 1.0
resume "mixtral adamw bf16" 0 mixtral 12 4 8 "${mixtral[@]}" --optimizer adamw --dtype bfloat16
resume "mixtral sgd warmup+cosine on sim" 0 mixtral 12 4 8 "${mixtral[@]}" --optimizer sgd --lr_warmup_iters 3 \
  --lr_decay_style cosine --device sim
if ((have_mpi)); then
  resume "gpt2 adamw DDP 2 ranks" 2 gpt2 12 4 8 "${gpt2[@]}" --optimizer adamw --grad_clip 1.0
  resume "llama3 adam DDP 4 ranks" 4 llama3 12 4 8 "${llama[@]}" --optimizer adam
  resume "mixtral adamw DDP 2 ranks" 2 mixtral 12 4 8 "${mixtral[@]}" --optimizer adamw
  resume "gpt2 adamw ZeRO-1 2 ranks accumulation 2" 2 gpt2 12 4 8 "${gpt2[@]}" --optimizer adamw --zero_stage 1 \
    --total_batch_size 512 --grad_clip 1.0
else
  echo "SKIP: mpirun not found (install openmpi-bin: scripts/setup.sh); DDP checkpoint tests not run"
fi

# 1b. The text samples after a resume are the uninterrupted run's (the start-up sample, which
#     both runs print, does not move the sampling generator).
d=$tmp/samples
mkdir -p "$d"
smp=(--freq_generate_txt 4 --text_length 16 --optimizer adamw)
train 0 gpt2 "$d/full" "${gpt2[@]}" "${smp[@]}" --num_iteration 12 --save "$d/ck" --save_interval 4 &&
  train 0 gpt2 "$d/res" "${gpt2[@]}" "${smp[@]}" --num_iteration 12 --load "$d/ck/checkpoint_step_000008" && {
  a=$(grep '^generated:' "$d/full.out" | tail -1) b=$(grep '^generated:' "$d/res.out" | tail -1)
  [[ -n $a && $a == "$b" && $(grep -c '^generated:' "$d/full.out") -eq 4 ]] && ok ||
    bad "the step-12 sample after a resume differs: '$a' vs '$b'"
}

# 2. A checkpoint written at one DP size, loaded at another with the same --total_batch_size:
#    compared with the uninterrupted run at the saving size.
across() { # name, np_save, np_load, tolerance (0 = bitwise), args...
  local name=$1 a=$2 b=$3 tol=$4
  shift 4
  local d=$tmp/x$((++cases))
  mkdir -p "$d"
  local na=$a nb=$b
  ((a == 1)) && na=0
  ((b == 1)) && nb=0
  train "$na" gpt2 "$d/full" "${gpt2[@]}" "$@" --num_iteration 12 --save "$d/ck" --save_interval 4 || return
  train "$nb" gpt2 "$d/res" "${gpt2[@]}" "$@" --num_iteration 12 --load "$d/ck/checkpoint_step_000008" || return
  local bitwise=no
  [[ $(wc -l <"$d/res") -eq 4 ]] && cmp -s <(tail_of "$d/full" 8) "$d/res" && bitwise=yes
  if [[ $tol == 0 ]]; then
    [[ $bitwise == yes ]] && ok || {
      bad "$name: not bitwise equal (uninterrupted | resumed):"
      paste <(tail_of "$d/full" 8) "$d/res"
    }
  elif [[ $(wc -l <"$d/res") -eq 4 ]] && paste <(tail_of "$d/full" 8) "$d/res" |
    awk -v t="$tol" '{d=$2-$4; if (d<0) d=-d; if (d>t) {print "step " $1 ": " $2 " vs " $4; e=1}} END {exit e}'; then
    ok
  else
    bad "$name: resumed losses differ from the uninterrupted run's by more than $tol"
  fi
  echo "across $name: bitwise: $bitwise; step 12: $(tail -1 "$d/full" | cut -d' ' -f2) | $(tail -1 "$d/res" | cut -d' ' -f2)"
}
if ((have_mpi)); then
  across "DDP 2 ranks -> 1 rank (accumulation 2)" 2 1 0 --optimizer adamw --total_batch_size 256
  across "1 rank (accumulation 2) -> DDP 2 ranks" 1 2 1e-6 --optimizer adamw --total_batch_size 256
  across "ZeRO-1 2 ranks -> ZeRO-1 4 ranks" 2 4 1e-6 --optimizer adamw --zero_stage 1 --total_batch_size 512
fi

# 3a. Killed mid-save, repeatedly: each round resumes from the newest checkpoint and saves
#     every step, pausing between a save's files, and is SIGKILLed after a random delay. Then
#     every checkpoint_step_* loads, and --load refuses everything else as incomplete.
loads() { # dir: --load it for one step past its own (100 steps where the name has none); exit status
  local n=100
  [[ $1 =~ checkpoint_step_([0-9]{6})$ ]] && n=$((10#${BASH_REMATCH[1]} + 1))
  "$build/gpt2" "${gpt2[@]}" --optimizer adamw --num_iteration "$n" --load "$1" --quiet >"$tmp/l.out" 2>&1
}
kd=$tmp/kill
mkdir -p "$kd"
mid_save=0 rounds=8
for round in $(seq 1 $rounds); do
  latest=$(ls -d "$kd"/checkpoint_step_* 2>/dev/null | sort | tail -1)
  IT_CKPT_TEST_PAUSE_MS=200 "$build/gpt2" "${gpt2[@]}" --optimizer adamw --num_iteration 100000 --save "$kd" \
    --save_interval 1 ${latest:+--load "$latest"} >"$tmp/k.out" 2>&1 &
  pid=$!
  delay=$((300 + RANDOM % 1200))
  sleep "$(awk -v d=$delay 'BEGIN {print d / 1000}')"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  grep -q 'error\|FAIL' "$tmp/k.out" && bad "kill round $round: the run failed before the kill: $(tail -3 "$tmp/k.out")"
  n_ok=0 n_tmp=0
  for e in "$kd"/* "$kd"/.[!.]*; do
    [[ -e $e ]] || continue
    if [[ $(basename "$e") =~ ^checkpoint_step_[0-9]{6}$ ]]; then
      if loads "$e"; then n_ok=$((n_ok + 1)); else
        bad "kill round $round (after ${delay} ms): $e does not load: $(tail -2 "$tmp/l.out")"
        ls -la "$e"
      fi
    else
      n_tmp=$((n_tmp + 1))
      loads "$e"
      rc=$?
      if [[ $rc -ne 2 ]] || ! grep -q incomplete "$tmp/l.out"; then
        bad "kill round $round: --load $e: exit $rc, expected 2 and 'incomplete': $(tail -2 "$tmp/l.out")"
      else ok; fi
    fi
  done
  ((n_tmp > 0)) && mid_save=$((mid_save + 1))
  # The newest complete checkpoint never goes back (a kill before the first save leaves none).
  newest=$(ls -d "$kd"/checkpoint_step_* 2>/dev/null | sort | tail -1)
  [[ ${newest##*/} > ${latest##*/} || ${newest##*/} == "${latest##*/}" ]] && ok ||
    bad "kill round $round (after ${delay} ms): the newest checkpoint went from ${latest##*/} to ${newest##*/}"
  echo "kill round $round after ${delay} ms: $n_ok complete, $n_tmp partial ($(ls -A "$kd" | tr '\n' ' '))"
done
# With 200 ms pauses inside each save nearly every kill lands mid-save.
((mid_save >= rounds / 2)) && ok || bad "only $mid_save of $rounds kills left a partial save"
# A clean run resumed from the newest finishes its saves and clears the dead runs' leftovers.
latest=$(ls -d "$kd"/checkpoint_step_* | sort | tail -1)
step=$((10#${latest##*_}))
train 0 gpt2 "$tmp/kc" "${gpt2[@]}" --optimizer adamw --num_iteration $((step + 2)) --save "$kd" --save_interval 1 \
  --load "$latest"
left=
for e in "$kd"/* "$kd"/.[!.]*; do
  [[ -e $e && ! ${e##*/} =~ ^checkpoint_step_[0-9]{6}$ ]] && left+="${e##*/} "
done
[[ -z $left && -d $kd/$(printf 'checkpoint_step_%06d' $((step + 2))) ]] && ok ||
  bad "a clean run after the kills: expected checkpoint_step_$((step + 2)) and no leftovers, found: $(ls -A "$kd" | tr '\n' ' ')"

# 3b. Pruning: 12 steps saving every 2, keep 3: exactly 8, 10, 12.
pd=$tmp/prune
mkdir -p "$pd"
train 0 gpt2 "$tmp/p1" "${gpt2[@]}" --optimizer adamw --num_iteration 12 --save "$pd/a" --save_interval 2 \
  --max_checkpoint_keep 3
got=$(ls -A "$pd/a" 2>/dev/null | tr '\n' ' ')
[[ $got == "checkpoint_step_000008 checkpoint_step_000010 checkpoint_step_000012 " ]] && ok ||
  bad "keep 3 after 12 steps saving every 2: expected steps 8 10 12, found: $got"
# Resumed from step 4 into the same DIR, keep 2: the newest two and the one resumed from.
train 0 gpt2 "$tmp/p2" "${gpt2[@]}" --optimizer adamw --num_iteration 4 --save "$pd/b" --save_interval 2 \
  --max_checkpoint_keep 0
train 0 gpt2 "$tmp/p3" "${gpt2[@]}" --optimizer adamw --num_iteration 12 --save "$pd/b" --save_interval 2 \
  --max_checkpoint_keep 2 --load "$pd/b/checkpoint_step_000004"
got=$(ls -A "$pd/b" 2>/dev/null | tr '\n' ' ')
[[ $got == "checkpoint_step_000004 checkpoint_step_000010 checkpoint_step_000012 " ]] && ok ||
  bad "resumed from step 4, keep 2: expected steps 4 (resumed from) 10 12, found: $got"

# 4. Bad checkpoints and flags: exit 2 before any step, one line on stderr naming the cause.
expect_fail() { # name, app, expected substrings ('|'-separated), args...
  local name=$1 app=$2 want=$3
  shift 3
  "$build/$app" "$@" >"$tmp/o.txt" 2>"$tmp/e.txt"
  local rc=$?
  if [[ $rc -ne 2 ]]; then bad "$name: exit status $rc, expected 2: $(head -3 "$tmp/e.txt")"; return; fi
  if grep -q '^step' "$tmp/o.txt"; then bad "$name: trained before failing"; return; fi
  if [[ $(wc -l <"$tmp/e.txt") -ne 1 ]]; then bad "$name: expected one line on stderr, got: $(cat "$tmp/e.txt")"; return; fi
  local w IFS='|'
  for w in $want; do
    grep -qF -- "$w" "$tmp/e.txt" || { bad "$name: message lacks '$w': $(cat "$tmp/e.txt")"; return; }
  done
  echo "$name: $(cat "$tmp/e.txt")"
  ok
}
bd=$tmp/bad
train 0 gpt2 "$tmp/b0" "${gpt2[@]}" --optimizer adamw --num_iteration 8 --save "$bd" --save_interval 4
c=$bd/checkpoint_step_000008
run=("${gpt2[@]}" --optimizer adamw --num_iteration 12)
fresh() { rm -rf "$tmp/c" && cp -r "$c" "$tmp/c"; } # a copy of the good checkpoint to break
expect_fail "missing checkpoint" gpt2 "$tmp/nosuch/checkpoint_step_000008" "${run[@]}" --load "$tmp/nosuch/checkpoint_step_000008"
fresh && rm "$tmp/c/trainer_state.json"
expect_fail "no trainer_state.json" gpt2 "trainer_state.json" "${run[@]}" --load "$tmp/c"
fresh && truncate -s 1000 "$tmp/c/model.ckpt"
expect_fail "truncated model.ckpt" gpt2 "model.ckpt" "${run[@]}" --load "$tmp/c"
fresh
off=$(($(stat -c %s "$tmp/c/model.ckpt") / 2))
byte=$(od -An -tu1 -j "$off" -N1 "$tmp/c/model.ckpt" | tr -d ' ')
printf "\\$(printf '%03o' $((byte ^ 0x40)))" | dd of="$tmp/c/model.ckpt" bs=1 seek="$off" conv=notrunc status=none
expect_fail "flipped byte in model.ckpt" gpt2 "checksum|model.ckpt" "${run[@]}" --load "$tmp/c"
fresh && sed -i 's/^  "n_layer": 2,/  "n_layer": 3,/' "$tmp/c/trainer_state.json"
expect_fail "other n_layer" gpt2 "n_layer|2|3" "${run[@]}" --load "$tmp/c"
fresh && sed -i 's/^  "vocab_size": 257,/  "vocab_size": 300,/' "$tmp/c/trainer_state.json"
expect_fail "other vocab_size" gpt2 "vocab_size|257|300" "${run[@]}" --load "$tmp/c"
fresh && sed -i 's/^  "tp_size": 1,/  "tp_size": 2,/' "$tmp/c/trainer_state.json"
expect_fail "tp_size 2" gpt2 "tp_size|2" "${run[@]}" --load "$tmp/c"
# without global_step, or with one the consumed batches disagree with: refused, not trained from step 0
fresh && sed -i '/^  "global_step": /d' "$tmp/c/trainer_state.json"
expect_fail "no global_step" gpt2 "no 'global_step'" "${run[@]}" --load "$tmp/c"
fresh && sed -i 's/^  "global_step": 8,/  "global_step": 0,/' "$tmp/c/trainer_state.json"
expect_fail "global_step 0 after 8 steps' batches" gpt2 "global_step 0 but consumed_batches_all_ranks 8" \
  "${run[@]}" --load "$tmp/c"
expect_fail "adamw checkpoint, adam run" gpt2 "optimizer|adamw|adam" "${gpt2[@]}" --optimizer adam --num_iteration 12 \
  --load "$c"
# another program's checkpoint: the program is named, not the first dimension that differs
expect_fail "GPT-2 checkpoint given to llama3" llama3 "app: expected llama3 (this program), found gpt2" "${llama[@]}" \
  --optimizer adamw --num_iteration 12 --load "$c"
expect_fail "GPT-2 checkpoint given to mixtral" mixtral "app: expected mixtral (this program), found gpt2" \
  "${mixtral[@]}" --optimizer adamw --num_iteration 12 --load "$c"
expect_fail "--save_interval without --save" gpt2 "--save" "${run[@]}" --save_interval 4
expect_fail "--save without --save_interval" gpt2 "--save_interval" "${run[@]}" --save "$tmp/s"
# InfiniTrain's own form: no comma after "vocab_size" (its writer drops it), no
# infinitrain_c object (and so no comma after the last key left).
fresh && sed -i -e '/^  "vocab_size"/s/,$//' -e '/^  "infinitrain_c": {/,/^  }/d' -e '/^  "pp_size"/s/,$//' \
  "$tmp/c/trainer_state.json"
if grep -q infinitrain_c "$tmp/c/trainer_state.json" || grep -q '"vocab_size": 257,' "$tmp/c/trainer_state.json"; then
  bad "editing trainer_state.json into InfiniTrain's form failed"
fi
"$build/gpt2" "${run[@]}" --load "$tmp/c" --loss_log "$tmp/it.txt" >"$tmp/it.out" 2>&1 && ok ||
  bad "InfiniTrain-form trainer_state.json: exit $?: $(tail -2 "$tmp/it.out")"
train 0 gpt2 "$tmp/b12" "${run[@]}" &&
  echo "InfiniTrain-form trainer_state.json: resumed losses bitwise the uninterrupted run's: $(cmp -s <(tail_of "$tmp/b12" 8) "$tmp/it.txt" && echo yes || echo no)"

# 5. Disk full during a save (a 64 KiB file size limit, below model.ckpt's size): the error
#    names the file and EFBIG, and the checkpoints already there still load.
( trap '' XFSZ; ulimit -f 64; exec "$build/gpt2" "${run[@]}" --load "$c" --save "$bd" --save_interval 2 ) \
  >"$tmp/f.out" 2>"$tmp/f.err"
rc=$?
want="$bd/.checkpoint_step_000010.tmp-"
if [[ $rc -ne 0 ]] && grep -qF "$want" "$tmp/f.err" && grep -q '/model.ckpt: .*File too large' "$tmp/f.err"; then
  ok
  echo "disk full: exit $rc: $(head -1 "$tmp/f.err")"
else
  bad "disk full during a save: exit $rc, expected non-zero and '$want<pid>/model.ckpt: ... File too large': $(cat "$tmp/f.err")"
fi
grep -q '^step   10/' "$tmp/f.out" && ok || bad "disk full: the run stopped before step 10's save"
got=$(ls -A "$bd" | tr '\n' ' ')
[[ $got == "checkpoint_step_000004 checkpoint_step_000008 " ]] && ok ||
  bad "disk full: expected checkpoints 4 and 8 and nothing else, found: $got"
for e in "$bd"/checkpoint_step_*; do
  loads "$e" && ok || bad "after the disk-full save, $e does not load: $(tail -2 "$tmp/l.out")"
done

# A signal stops the run after the step in progress: SIGTERM (a scheduler's preemption notice)
# saves a checkpoint there with --save, and resuming from it continues the uninterrupted run
# bitwise; the exit status is 128 + the signal, the loss log keeps the steps taken; without
# --save nothing is written at the end; under mpirun, SIGUSR1 (which mpirun forwards) stops
# every rank after the same step.
wait_steps() { # out_file n: wait (up to 30 s) until n step lines are out
  local i
  for ((i = 0; i < 300; i++)); do
    (($(grep -c '^step' "$1" 2>/dev/null) >= $2)) && return 0
    sleep 0.1
  done
  return 1
}
long=(--optimizer adamw --num_iteration 1000000 --log_interval 1000000)
sd=$tmp/sig && mkdir -p "$sd"
"$build/gpt2" "${gpt2[@]}" "${long[@]}" --save "$sd/ck" --save_interval 1000000 --loss_log "$sd/ll.txt" \
  >"$sd/out.txt" 2>"$sd/err.txt" &
pid=$!
wait_steps "$sd/out.txt" 3 || bad "signal: the run printed no steps in 30 s"
kill -TERM $pid
wait $pid
rc=$?
n=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\) of 1000000; saved .*checkpoint_step_\([0-9]*\) (resume with --load .*/\1/p' "$sd/err.txt")
if [[ $rc -eq 143 && -n $n && -d $sd/ck/$(printf 'checkpoint_step_%06d' "$n") ]]; then
  ok
  [[ $(wc -l <"$sd/ll.txt") -eq $n ]] && ok || bad "signal: the loss log has $(wc -l <"$sd/ll.txt") lines, expected $n"
  ck=$sd/ck/$(printf 'checkpoint_step_%06d' "$n")
  train 0 gpt2 "$sd/full.txt" "${gpt2[@]}" --optimizer adamw --num_iteration $((n + 3))
  train 0 gpt2 "$sd/res.txt" "${gpt2[@]}" --optimizer adamw --num_iteration $((n + 3)) --load "$ck"
  tail -n 3 "$sd/full.txt" | cmp -s - "$sd/res.txt" && head -n "$n" "$sd/full.txt" | cmp -s - "$sd/ll.txt" && ok ||
    bad "signal: the run resumed from step $n's checkpoint differs from the uninterrupted one"
else
  bad "SIGTERM: exit $rc (expected 143) or no checkpoint named: $(cat "$sd/err.txt")"
fi
"$build/gpt2" "${gpt2[@]}" "${long[@]}" --output_checkpoint "$sd/never.bin" >"$sd/out2.txt" 2>"$sd/err2.txt" &
pid=$!
wait_steps "$sd/out2.txt" 2 || bad "signal: the second run printed no steps in 30 s"
kill -INT $pid
wait $pid
rc=$?
[[ $rc -eq 130 && ! -e $sd/never.bin ]] && grep -q 'stopped by SIGINT after step [0-9]* of 1000000; nothing saved (no --save)' \
  "$sd/err2.txt" && ok || bad "SIGINT without --save: exit $rc, $(cat "$sd/err2.txt")"
if ((have_mpi)); then
  "${mpi[@]}" -np 2 "$build/gpt2" "${gpt2[@]}" "${long[@]}" --save "$sd/ck2" --save_interval 1000000 \
    --loss_log "$sd/ll2.txt" >"$sd/out3.txt" 2>"$sd/err3.txt" &
  pid=$!
  wait_steps "$sd/out3.txt" 3 || bad "signal: the 2-rank run printed no steps in 30 s"
  kill -USR1 $pid
  wait $pid
  n=$(sed -n 's/.*stopped by SIGUSR1 after step \([0-9]*\) of .*/\1/p' "$sd/err3.txt")
  if [[ -n $n ]] && loads "$sd/ck2/$(printf 'checkpoint_step_%06d' "$n")"; then ok; else
    bad "SIGUSR1 to mpirun: no rank stopped with a loadable checkpoint: $(head -3 "$sd/err3.txt")"
  fi  # a second signal, a second or more after the first, ends a rank at once, even when its step
  # cannot end (the other rank stopped)
  "${mpi[@]}" -np 2 "$build/gpt2" "${gpt2[@]}" "${long[@]}" >"$sd/out4.txt" 2>"$sd/err4.txt" &
  pid=$!
  wait_steps "$sd/out4.txt" 3 || bad "signal: the second 2-rank run printed no steps in 30 s"
  mapfile -t kids < <(pgrep -P $pid)
  if [[ ${#kids[@]} -eq 2 ]]; then
    kill -STOP "${kids[1]}"
    sleep 0.3
    kill -TERM "${kids[0]}"
    sleep 0.3
    kill -TERM "${kids[0]}" # a repeat within a second is the same notice (launchers send two)
    sleep 0.3
    kill -0 "${kids[0]}" 2>/dev/null && ok || bad "signal: SIGTERM (twice at once) ended a rank whose step had not ended"
    sleep 1
    kill -TERM "${kids[0]}"
    for ((i = 0; i < 100; i++)); do kill -0 "${kids[0]}" 2>/dev/null || break; sleep 0.1; done
    kill -0 "${kids[0]}" 2>/dev/null && bad "signal: a second SIGTERM did not end a rank stuck in its step" || ok
    kill -CONT "${kids[1]}"
  else
    bad "signal: expected mpirun's 2 ranks as its children, found ${#kids[@]}"
  fi
  kill -KILL "${kids[@]}" 2>/dev/null
  wait $pid
fi

# --load latest (--save's root) and --load ROOT take the newest complete checkpoint_step_*: an
# unfinished save's temporary directory and a newer directory without trainer_state.json are
# passed over; latest before any checkpoint starts from step 0. Run in a loop with --load latest,
# a job that stops (here after 6, then 10 steps) and starts again ends with the uninterrupted
# run's losses, bitwise.
lt=$tmp/latest
mkdir -p "$lt"
train 0 gpt2 "$lt/full" "${gpt2[@]}" --num_iteration 14 || true
train 0 gpt2 "$lt/a" "${gpt2[@]}" --num_iteration 6 --save "$lt/ck" --save_interval 3 --load latest &&
  grep -q '^--load latest: no complete checkpoint under .* yet: starting from step 0$' "$lt/a.out" && ok ||
  bad "--load latest with no checkpoint: $(head -3 "$lt/a.out")"
mkdir -p "$lt/ck/.checkpoint_step_000009.tmp-1" "$lt/ck/checkpoint_step_000099"
train 0 gpt2 "$lt/b" "${gpt2[@]}" --num_iteration 10 --save "$lt/ck" --save_interval 5 --max_checkpoint_keep 0 \
  --load latest && grep -q "^resumed from $lt/ck/checkpoint_step_000006: step 6" "$lt/b.out" && ok ||
  bad "--load latest did not take checkpoint_step_000006: $(grep -m1 resumed "$lt/b.out")"
rm -rf "$lt/ck/checkpoint_step_000099"
train 0 gpt2 "$lt/c" "${gpt2[@]}" --num_iteration 14 --load "$lt/ck" &&
  grep -q "^resumed from $lt/ck/checkpoint_step_000010: step 10" "$lt/c.out" && ok ||
  bad "--load ROOT did not take checkpoint_step_000010: $(grep -m1 resumed "$lt/c.out")"
cat "$lt/a" "$lt/b" "$lt/c" | cmp -s - "$lt/full" && ok ||
  bad "stopped and restarted with --load latest: the losses differ from the uninterrupted run's"
"$build/gpt2" "${gpt2[@]}" --num_iteration 2 --load latest >"$lt/d.out" 2>&1
rc=$?
[[ $rc -eq 2 ]] && grep -q -- '--load latest: needs --save ROOT' "$lt/d.out" && ok ||
  bad "--load latest without --save: exit $rc: $(tail -1 "$lt/d.out")"

echo "checkpoint: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
