#!/usr/bin/env bash
# The MLU backend end to end on the CPU test double of CNRT/CNNL/CNCL (tests/cambricon_standin,
# never installed): NEUWARE_HOME points at the stand-in's lib64, so the backend loads it as it
# would load Cambricon's libraries. Checks:
#   1. it-info lists mlu with the stand-in's 2 devices, and says it is the test double;
#   2. test_dist's collectives checks on 2 ranks over mlu's own it_ccl (the CNCL stand-in):
#      SUM bitwise the rank-ordered sum, MAX, AVG declined and composed, reduce-scatter,
#      all-gather, broadcast, ZeRO-1/2 against all-reduce;
#   3. scripts/validate-backend.sh mlu: conformance (every slot served without BANG, the rest
#      reported as CPU fallback) and --grad, GPT-2 / LLaMA-3 / Mixtral 10 steps against cpu
#      (fp32 within 1e-5 per step, bf16 autocast within 1e-2), coverage, 2-rank DDP, TP=2 and
#      PP=2 (activations by CNCL send/recv in groups) over the CNCL stand-in against cpu within
#      1e-5: its report must say PASS;
#   4. flash attention declined on the MLU with its reason (fp32: CNNL's takes half/bf16;
#      bf16: the CNNL call is not wired), the run composing attention;
#   5. an MLU370-class part (IT_CAMBRICON_STANDIN_ARCH=372, no bfloat16): bf16 training still
#      matches cpu within 1e-2, the bf16 gemm declined to the CPU fallback.
# In a sanitizer build, one case per mechanism: 1, 2, 4, conformance, GPT-2 fp32 against cpu and
# 2-rank DDP against one cpu rank.
# Usage: mlu_standin.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
. "$src/tests/e2e/mpi_common.bash"
export NEUWARE_HOME=$build/tests/cambricon-standin
export OMP_NUM_THREADS=2
if [[ ! -e $NEUWARE_HOME/lib64/libcnrt.so ]]; then
  bad "the Cambricon stand-in is not built in $NEUWARE_HOME/lib64"
  exit 1
fi
sanitized=false
grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null && sanitized=true

# 1. it-info
out=$("$build/it-info" 2>&1)
if grep -Eq '^  mlu +[0-9]+ +bfloat16 +device +2 ' <<<"$out"; then ok; else
  bad "it-info: mlu with 2 devices"
  echo "$out"
fi
if grep -q '^mlu: CPU test double' <<<"$out"; then ok; else
  bad "it-info does not say mlu runs on the test double"
  echo "$out"
fi

# 2. the collectives, value by value
if IT_TEST_DIST_DEVICE=mlu timeout 300 "${mpi[@]}" -x NEUWARE_HOME -x IT_TEST_DIST_DEVICE -np 2 "$build/test_dist" \
  >"$tmp/td.out" 2>&1; then ok; else
  bad "test_dist over mlu's collectives: $(grep -E 'CHECK|failed' "$tmp/td.out" | head -5)"
fi

g=$src/tests/fixtures/gpt2
gpt2=(--llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --num_iteration 10)
run1() { # device, log, args...
  local dev=$1 log=$2
  shift 2
  "$build/gpt2" --device "$dev" "$@" --loss_log "$log" >"$log.out" 2>&1 ||
    bad "gpt2 on $dev exited $?: $(tail -3 "$log.out")"
}

# the flash attention slots decline on the MLU, each saying why, and attention composes
for dt in float32 bfloat16; do
  want="takes half and bfloat16 only"
  [[ $dt == bfloat16 ]] && want="is not wired"
  "$build/gpt2" --device mlu --llmc_filepath "$g/tiny_gpt2.bin" --input_bin "$g/tiny_shard.bin" --batch_size 4 \
    --sequence_length 32 --num_iteration 2 --dtype $dt >"$tmp/decline.out" 2>&1 ||
    bad "gpt2 on mlu, $dt, exited $?: $(tail -3 "$tmp/decline.out")"
  if grep -q "^attention: flash declined by the mlu backend, composed instead: .*$want" "$tmp/decline.out"; then ok
  else
    bad "gpt2 on mlu, $dt: no 'attention: flash declined ... $want' line"
    cat "$tmp/decline.out"
  fi
done

if $sanitized; then
  if "$build/it-conformance" --backend mlu >"$tmp/conf.log" 2>&1; then ok; else
    bad "it-conformance --backend mlu: $(tail -3 "$tmp/conf.log")"
  fi
  run1 mlu "$tmp/mlu" "${gpt2[@]}"
  run1 cpu "$tmp/cpu" "${gpt2[@]}"
  within "GPT-2 fp32, mlu (stand-in) vs cpu" "$tmp/mlu" "$tmp/cpu" 1e-5
  timeout 300 "${mpi[@]}" -x NEUWARE_HOME -np 2 "$build/gpt2" --device mlu "${gpt2[@]}" --loss_log "$tmp/dp2" \
    >"$tmp/dp2.out" 2>&1 || bad "2-rank DDP on mlu exited $?: $(tail -5 "$tmp/dp2.out")"
  run1 cpu "$tmp/acc2" "${gpt2[@]}" --total_batch_size 256
  within "GPT-2 2-rank DDP on mlu vs 1 cpu rank with accumulation 2" "$tmp/dp2" "$tmp/acc2" 1e-5
  echo "mlu_standin.sh (sanitizer build): $pass passed, $fail failed"
  [[ $fail -eq 0 ]]
  exit
fi

# 3. the validation report
bash "$src/scripts/validate-backend.sh" mlu --build "$build" --out "$tmp/validate-mlu.md" >"$tmp/validate.out" 2>&1
rc=$?
sed -n '/^## Conformance/,/^## Coverage/p;/^## Parallel/,/^\*\*Result/p' "$tmp/validate-mlu.md" | grep -v '^## Coverage'
if [[ $rc -eq 0 ]] && grep -q '^\*\*Result: PASS' "$tmp/validate-mlu.md"; then ok; else
  bad "validate-backend.sh mlu exited $rc"
  cat "$tmp/validate-mlu.md"
fi

# 4. an MLU370: no bfloat16 on the device, so the bf16 gemm goes to the CPU fallback
IT_CAMBRICON_STANDIN_ARCH=372 run1 mlu "$tmp/m372" "${gpt2[@]}" --dtype bfloat16 --backend_report
run1 cpu "$tmp/c372" "${gpt2[@]}" --dtype bfloat16
within "GPT-2 bf16 on an MLU370 stand-in vs cpu" "$tmp/m372" "$tmp/c372" 1e-2
if awk '$1 == "gemm" && $4 > 0 { found = 1 } END { exit !found }' "$tmp/m372.out"; then ok; else
  bad "MLU370: the bf16 gemm calls are not reported as served by the CPU fallback"
  sed -n "/^backend 'mlu'/,/^  total /p" "$tmp/m372.out"
fi

echo "mlu_standin.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
