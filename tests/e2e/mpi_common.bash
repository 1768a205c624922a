# Sourced by the multi-rank end-to-end scripts (ddp.sh, tp.sh, pp.sh, cp.sh, zero2.sh,
# recompute.sh, dist_grid.sh, bad_steps.sh): the pass/fail counters, the mpirun command line, two
# runners and two loss-log comparisons.
# Needs $build and $src set (the scripts' BUILD_DIR and SOURCE_DIR). Makes $tmp, removed at exit.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

# require_mpirun WHAT: without mpirun the script says what it skips and exits 0.
require_mpirun() {
  command -v mpirun >/dev/null 2>&1 && return 0
  echo "SKIP: mpirun not found (install openmpi-bin: scripts/setup.sh); $1 not run"
  exit 0
}
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# One thread per process: the CPU's reductions are fixed per thread count, so the bitwise
# comparisons see one summation order. OpenMPI refuses root without --allow-run-as-root and
# more ranks than cores without --oversubscribe (CI containers run as root on 2 cores).
export OMP_NUM_THREADS=1
mpi=(mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS)
. "$src/tests/e2e/mpi_asan.bash"
mpi_asan_setup

# run1 APP LOG ARGS...: one process (no MPI), its loss log in LOG and its output in LOG.out.
# runn N APP LOG ARGS...: the same on N ranks under mpirun, stopped after $runn_timeout
# seconds (default 120).
run1() {
  local app=$1 log=$2
  shift 2
  "$build/$app" "$@" --loss_log "$log" >"$log.out" 2>&1 || bad "1-rank $app run exited $?: $(tail -3 "$log.out")"
}
runn() {
  local n=$1 app=$2 log=$3
  shift 3
  timeout "${runn_timeout:-120}" "${mpi[@]}" -np "$n" "$build/$app" "$@" --loss_log "$log" >"$log.out" 2>&1 ||
    bad "$n-rank $app run exited $?: $(tail -5 "$log.out")"
}

# expect_refuse NAME WANT MPIRUN_ARGS...: a bad layout refused: exit status 2, WANT on the one
# line of stderr the app wrote, nothing past set-up (no step or grid line on stdout).
expect_refuse() {
  local name=$1 want=$2
  shift 2
  timeout 60 "${mpi[@]}" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
  local rc=$?
  # mpirun adds its own boxed notes about the job's exit; the application's lines start
  # with its name.
  local lines
  lines=$(grep -cE '^(gpt2|llama3|mixtral|qwen3): ' "$tmp/bad.err")
  if [[ $rc -ne 2 ]]; then bad "$name: exit status $rc, expected 2: $(tail -3 "$tmp/bad.err")"; return; fi
  if ! grep -qF -- "$want" "$tmp/bad.err"; then bad "$name: stderr lacks '$want': $(tail -3 "$tmp/bad.err")"; return; fi
  if [[ $(grep -cF -- "$want" "$tmp/bad.err") -ne 1 || $lines -ne 1 ]]; then
    bad "$name: expected one line on stderr, found $lines:"
    cat "$tmp/bad.err"
    return
  fi
  if grep -q -e '^step ' -e '^tensor parallel:' "$tmp/bad.out"; then bad "$name: got past setup"; return; fi
  echo "$name: $(grep -F -- "$want" "$tmp/bad.err")"
  ok
}

# within WHAT A B TOL: two --loss_log files of N lines (N: $steps, default 10), every step's
# |a - b| <= TOL; prints the worst.
within() {
  local w n=${steps:-10}
  if [[ -s $2 && -s $3 && $(wc -l <"$2") -eq $n && $(wc -l <"$3") -eq $n ]] &&
    w=$(paste "$2" "$3" | awk '{d=$2-$4; if (d<0) d=-d; if (d>m) m=d} END {printf "%.3g", m}'); then
    if awk -v w="$w" -v t="$4" 'BEGIN {exit !(w <= t)}'; then
      echo "$1: max |diff| over $n steps $w (tolerance $4)"
      ok
    else
      bad "$1: max |diff| $w exceeds $4"
      paste "$2" "$3"
    fi
  else
    bad "$1: missing loss logs ($(wc -l <"$2" 2>/dev/null) and $(wc -l <"$3" 2>/dev/null) lines, expected $n)"
  fi
}

# same WHAT A B: two loss logs byte for byte.
same() {
  if [[ -s $2 ]] && cmp -s "$2" "$3"; then echo "$1: bitwise"; ok; else
    bad "$1: losses differ"
    paste "$2" "$3"
  fi
}
