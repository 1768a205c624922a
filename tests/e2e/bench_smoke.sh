#!/usr/bin/env bash
# The benchmarks still run, and what they claim besides time holds (nothing here asserts on
# time): bench_train on the 6-layer GPT-2, LLaMA-3 and Mixtral cases, 1 warm-up and 1
# measured step (the 2-layer smoke shapes in a sanitizer build), prints a RESULT line per case with a finite step-1 loss near ln(V) (random init) and ZERO
# backend mallocs in every measured step (the caching allocator serves the steady state);
# bench_generate runs a few tokens.
# Usage: bench_smoke.sh BUILD_DIR SOURCE_DIR
set -u
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# One warm-up and one measured step: step 2 already reuses every block (no shape varies), so
# its mallocs are the steady state's. Under ASan/UBSan a step of these cases takes 8-12 s:
# there the same three models run at bench_train's tiny smoke shapes (2 layers, C 128, T 64,
# V 8192: the same code paths). The
# GEMM peak is measured at the start and the end only (--no-case-peaks): the PEAK line is
# what is checked.
steps=(--warmup 1 --steps 1)
cases="gpt2_6l384_t256:50257 llama3_6l384_t256:32000 mixtral_6l384_t256:32000"
if grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  cases="gpt2_2l128_t64:8192 llama3_2l128_t64:8192 mixtral_2l128_t64:8192"
fi
names=$(for c in $cases; do printf '%s,' "${c%%:*}"; done)
"$build/bench_train" --cases "${names%,}" "${steps[@]}" --no-profile \
  --no-case-peaks --workdir "$tmp" >"$tmp/out.txt" 2>&1
rc=$?
[[ $rc == 0 ]] || bad "bench_train exited $rc: $(tail -3 "$tmp/out.txt")"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }
for c in $cases; do
  name=${c%%:*} V=${c##*:}
  line=$(grep "^RESULT case=$name " "$tmp/out.txt")
  if [[ -z $line ]]; then bad "$name: no RESULT line"; continue; fi
  m=$(echo "$line" | field mallocs_per_step)
  [[ $m == 0 ]] && ok || bad "$name: $m backend mallocs in a steady-state step (expected 0)"
  loss=$(echo "$line" | field loss_step1)
  awk -v l="$loss" -v v="$V" 'BEGIN { d = l - log(v); exit !(l == l && d < 1 && d > -1) }' && ok ||
    bad "$name: step-1 loss $loss is not near ln($V) = $(awk -v v="$V" 'BEGIN { print log(v) }')"
  echo "$name: mallocs/step $m, step-1 loss $loss, $(echo "$line" | field ms_median) ms/step"
done
grep -q '^PEAK gflops=' "$tmp/out.txt" && ok || bad "no GEMM peak line"

# The peaks measured around a case and between steps (make bench's default), on the
# smallest case: after the 2 measured steps, 2 more each between two peak probes, and the
# RESULT line carries both MFUs. Not under the sanitizers, where the sgemm runs at ~20
# GFLOP/s and the peak measurements alone take ~40 s.
if ! grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  "$build/bench_train" --cases llama3_6l384_t256 --warmup 1 --steps 2 --no-profile --workdir "$tmp" \
    >"$tmp/peaks.txt" 2>&1
  rc=$?
  [[ $rc == 0 ]] || bad "bench_train with the peak probes exited $rc: $(tail -3 "$tmp/peaks.txt")"
  probed=$(grep '^  steps between GEMM peak probes' "$tmp/peaks.txt" | grep -o ' ms ' | wc -l)
  [[ $probed == 2 ]] && ok || bad "$probed steps between peak probes (expected 2)"
  line=$(grep '^RESULT case=llama3_6l384_t256 ' "$tmp/peaks.txt")
  for f in case_peak_gflops mfu_case_pct steps_peak_gflops mfu_steps_pct; do
    v=$(echo "$line" | field $f)
    awk -v v="$v" 'BEGIN { exit !(v > 0) }' && ok || bad "RESULT field $f is '$v' (expected > 0)"
  done
  grep -q '^| llama3_6l384_t256 .*% (peaks ~[0-9]*) |' "$tmp/peaks.txt" && ok ||
    bad "the summary has no MFU (steps' peaks) for llama3_6l384_t256"
  echo "peaks: $(grep 'MFU at the peak probed next to each step' "$tmp/peaks.txt")"
fi
# bench_generate: a few tokens of GPT-2 124M over the KV cache (not under the sanitizers, where
# building the 124M model alone takes long): one GENERATE line with every token, a band line.
if ! grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  "$build/bench_generate" --model gpt2 --tokens 9 --no-full >"$tmp/gen.txt" 2>&1 || bad "bench_generate: $(tail -2 "$tmp/gen.txt")"
  grep -q '^GENERATE model=gpt2_124m params=124475904 .* new_tokens=9 tok_per_s=' "$tmp/gen.txt" && ok ||
    bad "bench_generate: no GENERATE line for 9 tokens: $(head -3 "$tmp/gen.txt")"
  grep -q '^GENERATE_BAND model=gpt2_124m positions=2-9 ' "$tmp/gen.txt" && ok || bad "bench_generate: no band line"
fi

echo "bench_smoke: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
