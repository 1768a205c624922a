#!/usr/bin/env bash
# Reruns a training job after a failure, from its newest complete checkpoint: torchrun's
# --max-restarts for an mpirun job.
#
#   scripts/run-elastic.sh [--max_restarts K] [--backoff_s S] -- COMMAND...
#
# COMMAND (mpirun ... build/gpt2 ... --save DIR --load latest, or any command) runs; when it
# fails it runs again, up to K times (default 3), S seconds later (default 5), each attempt with
# IT_ELASTIC_ATTEMPT=N (1, 2, ...) in its environment. With `--save DIR --load latest` (or
# `--load DIR`) every attempt resumes from DIR's newest complete checkpoint_step_*: the steps
# since it are trained again, and a resumed run is bitwise the uninterrupted one
# (docs/checkpoints.md). Not rerun:
#   exit 0   the job finished;
#   exit 2   the trainer refused its flags or files: the same command would fail again;
#   a stop signal (SIGINT, SIGTERM) to this script, which is passed on to the job.
# Every other failure is rerun: a rank that died (mpirun's status), a collective timeout
# (exit 75, --collective_timeout_s), a run stopped by --max_skipped_steps (1).
# Exits with the last attempt's status.
set -u

max_restarts=3 backoff=5
usage() {
  sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  case $1 in
  --max_restarts)
    [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "run-elastic: --max_restarts needs a count >= 0, got '${2:-}'" >&2; exit 2; }
    max_restarts=$2
    shift 2
    ;;
  --backoff_s)
    [[ ${2:-} =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "run-elastic: --backoff_s needs seconds, got '${2:-}'" >&2; exit 2; }
    backoff=$2
    shift 2
    ;;
  --) shift; break ;;
  -h | --help) usage ;;
  *) echo "run-elastic: unknown option '$1' (the command goes after --)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "run-elastic: no command (run-elastic.sh [--max_restarts K] -- COMMAND...)" >&2; exit 2; }
if [[ " $* " != *" --load "* ]]; then
  echo "run-elastic: warning: the command has no --load (--save DIR --load latest): a restarted job starts from step 0" >&2
fi

child=0 stopping=0
on_signal() {
  stopping=1
  [[ $child -gt 0 ]] && kill -"$1" "$child" 2>/dev/null
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

attempt=0 rc=0
while :; do
  attempt=$((attempt + 1))
  start=$(date +%s.%N)
  IT_ELASTIC_ATTEMPT=$attempt "$@" &
  child=$!
  # a trapped signal interrupts wait: wait again until the job itself has ended
  while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break
  done
  child=0
  took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  if [[ $rc -eq 0 ]]; then
    [[ $attempt -gt 1 ]] && echo "run-elastic: attempt $attempt finished the job ($took s; $((attempt - 1)) restart(s))" >&2
    exit 0
  fi
  if [[ $stopping -eq 1 ]]; then
    echo "run-elastic: stopped by a signal during attempt $attempt (exit $rc); not restarting" >&2
    exit "$rc"
  fi
  if [[ $rc -eq 2 ]]; then
    echo "run-elastic: attempt $attempt exited 2 (flags or files refused): not restarting" >&2
    exit 2
  fi
  if [[ $((attempt - 1)) -ge $max_restarts ]]; then
    echo "run-elastic: attempt $attempt failed (exit $rc, $took s); no restarts left (--max_restarts $max_restarts)" >&2
    exit "$rc"
  fi
  echo "run-elastic: attempt $attempt failed (exit $rc, $took s); restart $attempt of $max_restarts in ${backoff} s" >&2
  sleep "$backoff" &
  child=$!
  wait "$child" 2>/dev/null
  child=0
  if [[ $stopping -eq 1 ]]; then
    echo "run-elastic: stopped by a signal before restart $attempt" >&2
    exit "$rc"
  fi
done
