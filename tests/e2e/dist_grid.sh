#!/usr/bin/env bash
# The DP x TP x PP process grid under mpirun: test_dist_grid on 8 ranks (every grid of 8:
# 2x2x2, TP4 x DP2, PP8, ...) and on 12 (DP3 x TP2 x PP2, every axis a different size), with
# the CPU device, sim (staged through host memory) and a device whose collectives join by
# unique id: every rank's group sums and member lists as the layout predicts.
# Usage: dist_grid.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
require_mpirun "process-grid tests"

for n in 8 12; do
  if timeout 300 "${mpi[@]}" -np "$n" "$build/test_dist_grid" >"$tmp/g$n.out" 2>&1; then
    # every rank reports, none with a failure
    got=$(grep -c "^rank [0-9]* of $n: test_dist_grid: [0-9]* passed, 0 failed" "$tmp/g$n.out")
    if [[ $got -eq $n ]]; then
      pass=$((pass + 1))
      echo "$n ranks: $(grep -m1 '^rank 0 ' "$tmp/g$n.out")"
    else
      fail=$((fail + 1))
      echo "FAIL: $n ranks: $got of $n ranks reported success"
      tail -20 "$tmp/g$n.out"
    fi
  else
    fail=$((fail + 1))
    echo "FAIL: test_dist_grid on $n ranks exited $?"
    tail -20 "$tmp/g$n.out"
  fi
done

echo "dist_grid: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
