#!/usr/bin/env bash
# The collective watchdog (src/dist/watchdog.c) and scripts/run-elastic.sh with every rank on
# this host (cluster.sh repeats the faults across network namespaces where they can be made):
#  1. a rank frozen mid-run (SIGSTOP): past --collective_warn_s the others print which rank they
#     wait for ("not answering"); past --collective_timeout_s they end with exit status 75, the
#     job ends within the bound and no rank is left running;
#  2. a rank held up 1.5 s in its forward (the `faulty` test backend's embedding_slow) is named
#     by the others' flight-recorder line as computing at that step, and by --report_stragglers
#     in every step line;
#  3. run-elastic.sh reruns a job whose rank was SIGKILLed at a random moment: the final weights
#     equal the uninterrupted run's, bitwise; a command the trainer refuses (exit 2) is not rerun;
#     --max_restarts 0 gives the failure back.
# Under sanitizers: case 1 only (one case per mechanism).
# Usage: watchdog.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
require_mpirun "watchdog tests"
san=0
grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null && san=1
g=$src/tests/fixtures/gpt2
gpt2=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --optimizer adamw --learning_rate 0.001)
now() { date +%s.%N; }
# this job's ranks (their command line names $tmp), and the pid of rank R among them
ranks() { pgrep -f -- "--save $tmp/" || true; }
rank_pid() {
  local p
  for p in $(ranks); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$p" && return
  done
}

# ---- 1. a frozen rank
timeout 120 "${mpi[@]}" -np 4 "$build/gpt2" "${gpt2[@]}" --num_iteration 100000 --save "$tmp/ck" --save_interval 1000 \
  --collective_warn_s 1 --collective_timeout_s 4 >"$tmp/f.out" 2>&1 &
job=$!
for ((i = 0; i < 600; i++)); do
  grep -q '^step   30/' "$tmp/f.out" && break
  sleep 0.1
done
victim=$(rank_pid 3)
t0=$(now)
[[ -n $victim ]] && kill -STOP "$victim"
wait "$job"
rc=$?
took=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}')
warn=$(grep -m1 "slow collective (--collective_warn_s 1)" "$tmp/f.out")
line=$(grep -m1 "collective timeout (--collective_timeout_s 4)" "$tmp/f.out")
if [[ -n $victim && $rc -ne 0 && $rc -ne 124 && $line == *"not arrived: rank 3 ("*": not answering)"* &&
  $line == *"(exit status 75)" && $warn == *"rank 3 ("*": not answering)"* ]] &&
  awk -v t="$took" 'BEGIN {exit !(t <= 15)}'; then
  echo "a frozen rank: exit $rc, $took s from SIGSTOP to the job's end (timeout 4 s); the log says:"
  echo "  $warn"
  echo "  $line"
  ok
else
  bad "frozen rank: exit $rc after $took s; warning '$warn'; timeout line '$line'"
  grep -v -e '^step' -e '^progress' "$tmp/f.out" | tail -15
fi
left=$(ranks)
[[ -z $left ]] && ok || {
  bad "ranks left running after the timeout: $left"
  kill -9 $left 2>/dev/null
}

# ---- 2. a straggler, named
if [[ $san -eq 0 ]]; then
  IT_FAULTY_KERNEL=embedding_slow IT_FAULTY_RANK=3 IT_FAULTY_SLOW_MS=1500 IT_BACKEND_PATH=$build/test-plugins \
    timeout 120 "${mpi[@]}" -x IT_FAULTY_KERNEL -x IT_FAULTY_RANK -x IT_FAULTY_SLOW_MS -x IT_BACKEND_PATH -np 4 \
    "$build/gpt2" "${gpt2[@]}" --device faulty --num_iteration 2 --collective_warn_s 0.5 --report_stragglers \
    >"$tmp/s.out" 2>&1 || bad "straggler run exited $?: $(tail -5 "$tmp/s.out")"
  line=$(grep -m1 "slow collective (--collective_warn_s 0.5): step 1," "$tmp/s.out")
  if [[ $line == *"not arrived: rank 3 ($(hostname): step 1, computing)" ]]; then
    echo "a rank held up 1.5 s: $line"
    ok
  else
    bad "no flight-recorder line names rank 3 alone as computing: $(grep -e 'slow collective' "$tmp/s.out" | head -3)"
  fi
  n=$(grep -c "^step .* | slowest rank 3 ($(hostname)) 1[5-9][0-9][0-9]\.[0-9][0-9] ms busy, fastest " "$tmp/s.out")
  [[ $n -eq 2 ]] && ok || bad "--report_stragglers named rank 3 (~1500 ms) in $n of 2 step lines: $(grep '^step' "$tmp/s.out")"
  grep -m1 '^step ' "$tmp/s.out"
fi

# ---- 3. run-elastic.sh
if [[ $san -eq 0 ]]; then
  el=("${gpt2[@]}" --num_iteration 1000 --save_interval 50)
  runn 2 gpt2 "$tmp/whole" "${el[@]}" --save "$tmp/whole_ck" --output_checkpoint "$tmp/whole.bin"
  (
    while [[ -z $(rank_pid 1) ]]; do sleep 0.05; done
    sleep "$(awk -v r=$RANDOM 'BEGIN {printf "%.2f", 0.3 + 1.2 * r / 32767}')"
    kill -9 "$(rank_pid 1)"
  ) &
  killer=$!
  timeout 300 "$src/scripts/run-elastic.sh" --max_restarts 2 --backoff_s 0 -- "${mpi[@]}" -np 2 "$build/gpt2" \
    "${el[@]}" --save "$tmp/el" --load latest --output_checkpoint "$tmp/el.bin" >"$tmp/el.out" 2>&1
  rc=$?
  kill "$killer" 2>/dev/null
  if [[ $rc -eq 0 && $(grep -c "^run-elastic: attempt 1 failed" "$tmp/el.out") -eq 1 ]] &&
    grep -q "^resumed from $tmp/el/checkpoint_step_" "$tmp/el.out" && cmp -s "$tmp/whole.bin" "$tmp/el.bin"; then
    echo "a rank killed at a random moment, rerun by run-elastic.sh: final weights bitwise the uninterrupted run's"
    grep -e "^run-elastic:" -e "^resumed from" "$tmp/el.out" | sed 's/^/  /'
    ok
  else
    bad "run-elastic: exit $rc; final weights $(cmp -s "$tmp/whole.bin" "$tmp/el.bin" && echo equal || echo differ)"
    grep -v -e '^step' -e '^progress' "$tmp/el.out" | tail -15
  fi
  # a refused command is not rerun; no restarts left gives the failure back
  "$src/scripts/run-elastic.sh" --max_restarts 3 --backoff_s 0 -- "$build/gpt2" --no_such_flag >"$tmp/r.out" 2>&1
  rc=$?
  [[ $rc -eq 2 && $(grep -c "not restarting" "$tmp/r.out") -eq 1 ]] && ok ||
    bad "run-elastic reran a refused command (exit $rc): $(cat "$tmp/r.out")"
  "$src/scripts/run-elastic.sh" --max_restarts 0 -- sh -c 'exit 7' >"$tmp/r.out" 2>&1
  rc=$?
  [[ $rc -eq 7 ]] && grep -q "no restarts left" "$tmp/r.out" && ok || bad "--max_restarts 0: exit $rc: $(cat "$tmp/r.out")"
fi

echo "watchdog: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
