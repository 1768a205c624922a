# Sourced by every end-to-end script that runs ranks under mpirun (after it sets $build, $src
# and the array mpi): in a sanitizer build, mpi_asan_setup adds what the ranks need.
#
# ASan's leak checker reports allocations OpenMPI's own libraries keep until exit: they are
# suppressed by library (lsan-mpi.supp). That needs exact stacks: OpenMPI is built without
# frame pointers, so the fast unwinder loses the library frames and leaves "<unknown module>"
# that no suppression can match; the slow unwinder finds them. The ranks also preload
# tests/support/keep_mpi_components.c (after the ASan runtime, which must come first), which
# keeps OpenMPI's components loaded past MPI_Finalize so that those frames resolve without
# LeakSanitizer rereading the process's maps for each: 0.8 s less per multi-rank run.
mpi_asan_setup() {
  grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null || return 0
  export LSAN_OPTIONS="suppressions=$src/tests/e2e/lsan-mpi.supp:print_suppressions=0:fast_unwind_on_malloc=0"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
  mpi+=(-x LSAN_OPTIONS -x ASAN_OPTIONS -x UBSAN_OPTIONS)
  local rt shim=$build/test-support/libkeep_mpi_components.so
  rt=$(ldd "$build/gpt2" 2>/dev/null | awk '/libasan/ { print $3; exit }')
  if [[ -n $rt && -f $shim ]]; then mpi+=(-x "LD_PRELOAD=$rt:$shim"); fi
}
