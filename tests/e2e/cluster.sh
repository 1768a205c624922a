#!/usr/bin/env bash
# Multi-host training on a cluster of network namespaces (scripts/netns-cluster.sh: 2 hosts x 2
# ranks, TCP over a bridge, no shared memory between hosts; mpirun on a head node), and what
# happens when the network or a host fails:
#  1. DP=4, TP=2 x DP=2 and PP=2 x DP=2 across the hosts give bitwise the losses of the same
#     runs with every rank on one host;
#  2. 5% packet loss, and 50 ms delay, on one host's link only slow the job: losses bitwise (tc
#     netem; where the kernel has none, nftables drops and the test shaper
#     tests/support/nfq_shaper delays);
#  3. a host's link cut mid-run: a surviving rank names the step, the collective and the ranks
#     and host it waits on; the job ends within --collective_timeout_s plus the TCP give-up,
#     non-zero, no process left on any host; the newest complete checkpoint resumes;
#  4. a host's processes SIGKILLed: the job ends within seconds, a survivor's line names the
#     dead ranks, no process left;
#  5. scripts/run-elastic.sh: a job killed twice at random moments and restarted from its newest
#     checkpoint finishes with the uninterrupted run's losses and final weights, bitwise.
# (watchdog.sh checks the watchdog's lines and the straggler report with every rank on one host.)
# Each fault's log line and its time from fault to exit are printed.
# Skipped, with the reason, where network namespaces cannot be made (not root, no
# CAP_SYS_ADMIN) or mpirun is missing. Under sanitizers: one case per mechanism, 4 (a stop
# signal during a wait; watchdog.sh's frozen rank takes the timeout's path there).
# Usage: cluster.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
require_mpirun "cluster tests"
nc=$src/scripts/netns-cluster.sh
if ! why=$("$nc" check); then
  echo "SKIP: $why; the namespace cluster tests were not run"
  exit 0
fi
# a cluster left by an earlier run of this test that was killed (its pid is gone) goes first
for d in /run/netns-cluster/it[0-9]*; do
  [[ -d $d ]] && ! kill -0 "${d##*/it}" 2>/dev/null && NETNS_CLUSTER=${d##*/} "$nc" down
done
export NETNS_CLUSTER=it$$
# TCP's patience: generous while packets are being dropped on purpose (a lost segment must not
# end a connection), short for the faults (a cut peer given up after ~3 s of retransmissions)
export NETNS_CLUSTER_TCP_RETRIES2=10
trap '"$nc" down; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM # (the EXIT trap then takes the cluster down)
"$nc" up 2 2 >/dev/null || { echo "FAIL: netns-cluster.sh up 2"; exit 1; }
san=0
grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null && san=1

g=$src/tests/fixtures/gpt2
gpt2=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --optimizer adamw --learning_rate 0.001 --weight_decay 0.1 --grad_clip 1.0)
# the cluster's mpirun: every rank's environment as the one-host runs' (mpi_asan_setup's -x too)
cmpi=("$nc" mpirun "${mpi[@]:1}")
left() { "$nc" pids | xargs -r ps -o pid=,args= -p 2>/dev/null; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }

# ---- 1. bitwise across hosts
layouts=("DP=4:" "TP=2 x DP=2:--tensor_parallel 2" "PP=2 x DP=2:--pipeline_parallel 2")
[[ $san -eq 1 ]] && layouts=()
for l in "${layouts[@]+"${layouts[@]}"}"; do
  name=${l%%:*} flags=${l#*:}
  # shellcheck disable=SC2086
  runn 4 gpt2 "$tmp/one" "${gpt2[@]}" --num_iteration 10 $flags
  # shellcheck disable=SC2086
  timeout 120 "${cmpi[@]}" -np 4 "$build/gpt2" "${gpt2[@]}" --num_iteration 10 $flags --loss_log "$tmp/two" \
    >"$tmp/two.out" 2>&1 || bad "$name on 2 hosts exited $?: $(tail -5 "$tmp/two.out")"
  if [[ -s $tmp/one && $(wc -l <"$tmp/one") -eq 10 ]] && cmp -s "$tmp/one" "$tmp/two"; then
    echo "$name: 2 hosts x 2 ranks == 1 host x 4 ranks, bitwise (step 10 loss $(awk 'END {print $2}' "$tmp/two"))"
    ok
  else
    bad "$name: the losses on 2 hosts differ from 1 host's"
    paste "$tmp/one" "$tmp/two" | head -10
  fi
done
# the ranks really are on two hosts, and MPI moved their bytes over TCP
hosts=$(timeout 60 "${cmpi[@]}" -np 4 hostname 2>/dev/null | sort | uniq -c | awk '{print $1 "x" $2}' | tr '\n' ' ')
[[ $hosts == "2x${NETNS_CLUSTER}h1 2x${NETNS_CLUSTER}h2 " ]] && ok || bad "expected 2 ranks on each host, got '$hosts'"

# ---- 2. loss and delay only slow it
# shaken WHAT: the same 2 steps with host 2's link shaken by WHAT: losses bitwise, the time said
shaken() {
  local t0 t1
  t0=$(now)
  timeout 300 "${cmpi[@]}" -np 4 "$build/gpt2" "${gpt2[@]}" --num_iteration 2 --loss_log "$tmp/shaken" \
    >"$tmp/shaken.out" 2>&1 || bad "the run with $1 exited $?: $(tail -5 "$tmp/shaken.out")"
  t1=$(now)
  "$nc" clear 2
  if [[ -s $tmp/shaken ]] && cmp -s "$tmp/calm" "$tmp/shaken"; then
    echo "$1 on host 2's link: losses bitwise the same; the run (2 steps) took $(secs "$t0" "$t1") s, undisturbed $calm s"
    ok
  else
    bad "$1 on host 2's link changed the losses"
    paste "$tmp/calm" "$tmp/shaken"
  fi
}
if [[ $san -eq 0 ]]; then
  t0=$(now)
  timeout 120 "${cmpi[@]}" -np 4 "$build/gpt2" "${gpt2[@]}" --num_iteration 2 --loss_log "$tmp/calm" \
    >"$tmp/calm.out" 2>&1 || bad "the undisturbed run exited $?: $(tail -5 "$tmp/calm.out")"
  calm=$(secs "$t0" "$(now)")
  "$nc" loss 2 5 && shaken "5% packet loss"
  # the delay: tc netem, or where the kernel has none the test shaper (tests/support/nfq_shaper)
  export NETNS_CLUSTER_SHAPER=$build/test-support/nfq_shaper
  "$nc" delay 2 50 2>"$tmp/delay.err"
  case $? in
  0) shaken "50 ms delay" ;;
  3) echo "SKIP: 50 ms delay: $(sed 's/^netns-cluster: //' "$tmp/delay.err")" ;;
  *) bad "netns-cluster.sh delay failed: $(cat "$tmp/delay.err")" ;;
  esac
fi

# fault NAME ACTION WANT ARGS...: a long run on the cluster with checkpoints every 20 steps;
# ACTION (cut or kill) hits host 2 once step 40's checkpoint is complete; the job must end
# non-zero within $limit s of it, with a survivor's line holding WANT, and leave no process.
fault() {
  local name=$1 action=$2 want=$3
  shift 3
  rm -rf "$tmp/ck"
  timeout 200 "${cmpi[@]}" -np 4 "$build/gpt2" "${gpt2[@]}" --num_iteration 100000 --save "$tmp/ck" \
    --save_interval 20 --max_checkpoint_keep 0 "$@" >"$tmp/f.out" 2>&1 &
  local job=$! i
  for ((i = 0; i < 600; i++)); do
    [[ -d $tmp/ck/checkpoint_step_000040 ]] && break
    sleep 0.1
  done
  local t0 t1 rc
  t0=$(now)
  "$nc" "$action" 2
  wait "$job"
  rc=$?
  t1=$(now)
  local took
  took=$(secs "$t0" "$t1")
  "$nc" heal 2
  local line
  line=$(grep -m1 -F -- "$want" "$tmp/f.out")
  if [[ $rc -ne 0 && $rc -ne 124 && -n $line ]] && awk -v t="$took" -v l="$limit" 'BEGIN {exit !(t <= l)}'; then
    echo "$name: exit $rc, $took s from the fault to the job's end (bound $limit s); the log says:"
    echo "  $line"
    ok
  else
    bad "$name: exit $rc after $took s (bound $limit s), line '$want' $([[ -n $line ]] && echo found || echo missing)"
    grep -v -e '^step' -e '^progress' "$tmp/f.out" | tail -15
  fi
  local procs
  procs=$(left)
  if [[ -z $procs ]]; then ok; else
    bad "$name: processes left on the hosts: $procs"
    "$nc" pids | xargs -r kill -9
  fi
}

"$nc" tcp_retries2 3

# ---- 3. a cut link; the newest complete checkpoint then resumes
limit=20
if [[ $san -eq 0 ]]; then
  fault "link cut" cut "collective timeout (--collective_timeout_s 3)" --collective_timeout_s 3 --collective_warn_s 1
  grep -q "not arrived: rank 2 (${NETNS_CLUSTER}h2: unreachable), rank 3 (${NETNS_CLUSTER}h2: unreachable)" \
    "$tmp/f.out" && ok || bad "link cut: no line names ranks 2 and 3 on host 2 as unreachable"
  newest=$(find "$tmp/ck" -maxdepth 1 -name 'checkpoint_step_*' | sort | tail -1)
  runn 4 gpt2 "$tmp/resumed" "${gpt2[@]}" --num_iteration $((10#${newest##*_} + 1)) --load "$tmp/ck"
  grep -q "resum.*${newest##*/}" "$tmp/resumed.out" && ok ||
    bad "link cut: the newest checkpoint (${newest##*/}) did not resume: $(grep -i resum "$tmp/resumed.out")"
fi

# ---- 4. a host's processes killed
limit=10
fault "host killed" kill "while waiting" --collective_timeout_s 30
grep -q "not arrived: .*${NETNS_CLUSTER}h2: not running" "$tmp/f.out" && ok ||
  bad "host killed: no survivor names a rank on host 2 as not running"

# ---- 5. restarts
if [[ $san -eq 0 ]]; then
  steps=400
  el=("${gpt2[@]}" --num_iteration $steps --save_interval 25 --collective_timeout_s 10)
  runn 4 gpt2 "$tmp/whole" "${el[@]}" --save "$tmp/whole_ck" --output_checkpoint "$tmp/whole.bin"
  # the killer: twice, once host 2's ranks have run a random 0.5..2.5 s, SIGKILL them
  (
    for k in 1 2; do
      while ! "$nc" pids 2 | xargs -r ps -o args= -p 2>/dev/null | grep -q "^$build/gpt2"; do sleep 0.05; done
      sleep "$(awk -v r=$RANDOM 'BEGIN {printf "%.2f", 0.5 + 2 * r / 32767}')"
      "$nc" kill 2
      echo "killed host 2 at $(date +%T.%N)" >>"$tmp/kills"
      while "$nc" pids 2 | xargs -r ps -o args= -p 2>/dev/null | grep -q "^$build/gpt2"; do sleep 0.05; done
    done
  ) &
  killer=$!
  timeout 300 "$src/scripts/run-elastic.sh" --max_restarts 3 --backoff_s 0.5 -- "${cmpi[@]}" -np 4 "$build/gpt2" \
    "${el[@]}" --save "$tmp/el" --load latest --output_checkpoint "$tmp/el.bin" --loss_log "$tmp/el.log" >"$tmp/el.out" 2>&1
  rc=$?
  kill "$killer" 2>/dev/null
  restarts=$(grep -c "^run-elastic: attempt .* failed" "$tmp/el.out")
  if [[ $rc -eq 0 && $restarts -eq 2 && -s $tmp/el.bin ]] && cmp -s "$tmp/whole.bin" "$tmp/el.bin"; then
    ok
  else
    bad "restarts: exit $rc, $restarts restarts (expected 2), final weights $(cmp -s "$tmp/whole.bin" "$tmp/el.bin" && echo equal || echo differ)"
    grep -v -e '^step' -e '^progress' "$tmp/el.out" | tail -20
  fi
  # the last attempt's losses are the uninterrupted run's for the same steps
  first=$(head -1 "$tmp/el.log" | awk '{print $1}')
  if [[ -n $first && $(wc -l <"$tmp/el.log") -eq $((steps - first + 1)) ]] &&
    cmp -s "$tmp/el.log" <(tail -n +"$first" "$tmp/whole"); then
    echo "killed twice ($(tr '\n' ' ' <"$tmp/kills")), restarted by run-elastic.sh: final weights bitwise;" \
      "steps $first..$steps of the last attempt bitwise the uninterrupted run's"
    grep "^run-elastic:" "$tmp/el.out" | sed 's/^/  /'
    ok
  else
    bad "restarts: the last attempt's losses (from step ${first:-?}) differ from the uninterrupted run's"
  fi
fi

echo "cluster: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
