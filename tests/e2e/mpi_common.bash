# Sourced by the multi-rank end-to-end scripts (ddp.sh, tp.sh, pp.sh, zero2.sh, recompute.sh,
# dist_grid.sh): the pass/fail counters, the mpirun command line and two loss-log comparisons.
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
