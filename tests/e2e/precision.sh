#!/usr/bin/env bash
# --precision_check and it-precision-compare end to end, on the tiny GPT-2 fixture (2 steps
# of 2 micro-steps):
#  - level 2 with save_tensors on cpu, twice, and on sim: every output record matches, with
#    atol 0 and rtol 0 (sim runs the CPU's arithmetic, so the runs are bitwise equal);
#  - the faulty plugin (tests/plugin/faulty.c) with one kernel off by 1e-3 relative in one
#    element: the tool names exactly that op, forward or backward, its layer, step 1,
#    micro-step 0, says its inputs were identical, and exits 1; with no fault it matches;
#  - every log line in InfiniTrain's simple and md5 formats, level 1's module names, a
#    micro-step counted as [GAS-1], one step directory per step;
#  - bad input exits 2 naming the problem: a missing directory, runs that do not line up
#    (level 1 against level 2), a malformed .npy, a run without save_tensors, a bad spec;
#  - where numpy is installed, numpy reads a dump back (skipped, said so, when it is not).
# Usage: precision.sh BUILD_DIR SOURCE_DIR
set -u
build=$1 src=$2
fix=$src/tests/fixtures/gpt2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
cmp=$build/it-precision-compare
# the test plugins are built into BUILD/test-plugins, off the apps' own search path
export IT_BACKEND_PATH=$build/test-plugins

base=(--llmc_filepath "$fix/tiny_gpt2.bin" --input_bin "$fix/tiny_shard.bin" --batch_size 4 --sequence_length 32
  --total_batch_size 256 --num_iteration 2 --quiet)
run() { # NAME DEVICE SPEC [env...]: a run into $tmp/NAME
  local name=$1 dev=$2 spec=$3
  shift 3
  env "$@" "$build/gpt2" "${base[@]}" --device "$dev" --precision_check "path=$tmp/$name,$spec" \
    >"$tmp/$name.out" 2>&1 || bad "$name: gpt2 exited $?: $(tail -2 "$tmp/$name.out")"
}
l2=level=2,save_tensors=true
run cpu1 cpu $l2
run cpu2 cpu $l2
run sim sim $l2
run none faulty $l2 IT_FAULTY_KERNEL=
run lnb faulty $l2 IT_FAULTY_KERNEL=layernorm_bwd
run gelu faulty $l2 IT_FAULTY_KERNEL=gelu
run l1 cpu level=1,save_tensors=true
run md5 cpu level=2,format=md5,md5_tolerance=1e-3
run nosave cpu level=2

# 1. Matching runs: exit 0, every output record compared (a count, not an empty walk).
for other in cpu2 sim none; do
  "$cmp" "$tmp/cpu1" "$tmp/$other" --atol 0 --rtol 0 >"$tmp/c_$other.txt" 2>&1
  rc=$?
  [[ $rc -eq 0 ]] && ok || bad "cpu vs $other: exit $rc, expected 0: $(cat "$tmp/c_$other.txt")"
  grep -qE '^rank 0: all [0-9]{3,} output records match \(atol 0, rtol 0; [0-9]+ records\)$' "$tmp/c_$other.txt" &&
    ok || bad "cpu vs $other: no 'all N output records match' line"
done

# 2. The injected faults: the first difference is exactly that op.
"$cmp" "$tmp/cpu1" "$tmp/lnb" >"$tmp/c_lnb.txt" 2>&1
rc=$?
[[ $rc -eq 1 ]] && ok || bad "layernorm_bwd fault: exit $rc, expected 1"
# GPT-2's last layernorm (ln_f, outside the blocks) is the first to run backward
grep -qx 'rank 0: first difference (atol 1e-05, rtol 0.001): op layernorm backward, outside the blocks, step 1, micro-step 0' \
  "$tmp/c_lnb.txt" && ok || bad "layernorm_bwd fault not named: $(cat "$tmp/c_lnb.txt")"
grep -q 'backward output (gradient of its input)' "$tmp/c_lnb.txt" && ok || bad "layernorm_bwd: not its input gradient"
grep -qE '^    layernorm_[0-9]*_?backward tensor\[0\] \(4,32,32\): identical \(4096 values\)$|^    layernorm_backward tensor\[0\] \(4,32,32\): identical' \
  "$tmp/c_lnb.txt" && ok || bad "layernorm_bwd: its input dy not reported identical"
grep -qE '1 of 4096 values beyond tolerance' "$tmp/c_lnb.txt" && ok || bad "layernorm_bwd: not one value off"

"$cmp" "$tmp/cpu1" "$tmp/gelu" >"$tmp/c_gelu.txt" 2>&1
rc=$?
[[ $rc -eq 1 ]] && ok || bad "gelu fault: exit $rc, expected 1"
grep -qx 'rank 0: first difference (atol 1e-05, rtol 0.001): op gelu forward, layer 0 (transformer.h.0), step 1, micro-step 0' \
  "$tmp/c_gelu.txt" && ok || bad "gelu fault not named: $(cat "$tmp/c_gelu.txt")"
grep -qE '^    gelu_forward tensor\[0\] \(4,32,128\): identical \(16384 values\)$' "$tmp/c_gelu.txt" && ok ||
  bad "gelu: its input not reported identical"
# a tolerance wider than the fault (1e-3 relative of values below 1, so under 2e-3 absolute) passes
"$cmp" "$tmp/cpu1" "$tmp/gelu" --atol 1 --rtol 0 >/dev/null 2>&1
rc=$?
[[ $rc -eq 0 ]] && ok || bad "gelu fault with --atol 1: exit $rc, expected 0"

# 3. Files and formats.
d=$(echo "$tmp"/cpu1/*/)
[[ -f $d/precision_check_rank_0.log && -f $d/precision_check_rank_0.tsv ]] && ok || bad "no log/index in $d"
[[ $(basename "$d") =~ ^[0-9]{8}_[0-9]{6}$ ]] && ok || bad "run directory $(basename "$d") is not YYYYMMDD_HHMMSS"
[[ -d $d/rank_0/step_000001 && -d $d/rank_0/step_000002 ]] && ok || bad "no per-step directories"
num='-?([0-9.]+(e[-+][0-9]+)?|nan|inf)'
simple_re="^\[GAS-[01]\] \[L-[01]\]( transformer\.h\.[01])? [A-Za-z0-9_.]+_(forward|backward) tensor\[[0-9]\]: dtype=(float32|bfloat16|int32) shape=\([0-9,]*\) min=$num max=$num mean=$num \[($num(, $num)*(, \.\.\.)?)?\] \[NaN:[0-9]+ Inf:[0-9]+\]( <- ERROR)?$"
n=$(wc -l <"$d/precision_check_rank_0.log")
m=$(grep -cE "$simple_re" "$d/precision_check_rank_0.log")
[[ $n -gt 500 && $m -eq $n ]] && ok || bad "simple format: $m of $n lines match: $(grep -vE "$simple_re" "$d/precision_check_rank_0.log" | head -2)"
grep -q '^\[GAS-1\] ' "$d/precision_check_rank_0.log" && ok || bad "no [GAS-1] line (2 micro-steps a step)"
grep -q '<- ERROR' "$d/precision_check_rank_0.log" && bad "a finite run marked <- ERROR" || ok
grep -qE '^\[GAS-0\] \[L-1\] transformer\.h\.1 layernorm_[0-9]+_forward tensor\[0\]: dtype=float32 shape=\(4,32,32\) ' \
  "$d/precision_check_rank_0.log" && ok || bad "no layer-1 layernorm line"
md=$(echo "$tmp"/md5/*/)/precision_check_rank_0.log
md5_re='^\[GAS-[01]\] \[L-[01]\]( transformer\.h\.[01])? [A-Za-z0-9_.]+_(forward|backward) tensor\[[0-9]\]: dtype=[a-z0-9]+ shape=\([0-9,]*\) md5=[0-9a-f]{32}$'
[[ $(grep -cvE "$md5_re" "$md") -eq 0 && $(wc -l <"$md") -gt 500 ]] && ok || bad "md5 format: $(grep -vE "$md5_re" "$md" | head -2)"
[[ $(grep -c . "$md") -eq $n ]] && ok || bad "md5 run logged $(grep -c . "$md") lines, simple $n"
l1=$(echo "$tmp"/l1/*/)/precision_check_rank_0.log
for name in transformer.wte_forward transformer.wpe_forward transformer.h.0.ln_1_forward transformer.h.1.attn.c_attn_forward \
  transformer.h.1.mlp.gelu_forward transformer.h.1_forward transformer.ln_f_forward lm_head_forward lm_head_backward \
  transformer.h.0.ln_1_backward; do
  grep -q " $name tensor\[0\]: " "$l1" && ok || bad "level 1: no $name line"
done
grep -qE ' (layernorm|linear|add|gelu)(_[0-9]+)?_(forward|backward) ' "$l1" && bad "level 1 logged ops" || ok
[[ ! -d $(echo "$tmp"/nosave/*/)/rank_0 ]] && ok || bad "save_tensors off wrote a rank directory"

# 4. numpy reads a dump, when it is installed (the C reader is tested in test_precision).
f=$d/rank_0/step_000001/lm_head_forward.npy
if python3 -c 'import numpy' 2>/dev/null; then
  python3 -c "import numpy as np, sys; a = np.load(sys.argv[1]); assert a.dtype == np.float32 and a.shape == (4, 32, 320), a.shape" "$f" &&
    ok || bad "numpy cannot read $f"
else
  echo "numpy not installed: the numpy read-back is skipped"
fi

# 5. Bad input: exit 2 and a message naming it.
expect2() { # DESCRIPTION PATTERN cmd...
  local what=$1 pat=$2
  shift 2
  "$@" >"$tmp/e.txt" 2>&1
  local rc=$?
  [[ $rc -eq 2 ]] && grep -qE "$pat" "$tmp/e.txt" && ok || bad "$what: exit $rc, output: $(head -3 "$tmp/e.txt")"
}
expect2 "missing directory" "$tmp/absent: no such directory" "$cmp" "$tmp/cpu1" "$tmp/absent"
expect2 "not a run" "no precision check here" "$cmp" "$tmp/cpu1" "$tmp"/cpu1/*/rank_0
expect2 "level 1 vs level 2" "do not line up at record 0" "$cmp" "$tmp/l1" "$tmp/cpu1"
expect2 "no save_tensors" "without save_tensors=true" "$cmp" "$tmp/nosave" "$tmp/cpu1"
cp -r "$tmp/cpu2" "$tmp/broken"
b=$(echo "$tmp"/broken/*/)/rank_0/step_000001/transformer.wpe_forward.npy
head -c 100 "$b" >"$b.cut" && mv "$b.cut" "$b"
expect2 "truncated .npy" "transformer.wpe_forward.npy: .npy is 100 bytes" "$cmp" "$tmp/cpu1" "$tmp/broken"
printf 'garbage' >"$b"
expect2 "not a .npy" "not a .npy file" "$cmp" "$tmp/cpu1" "$tmp/broken"
mkdir -p "$tmp/two/a" "$tmp/two/b"
cp "$d"/precision_check_rank_0.tsv "$tmp/two/a/" && cp "$d"/precision_check_rank_0.tsv "$tmp/two/b/"
expect2 "two runs under one path" "holds 2 runs" "$cmp" "$tmp/cpu1" "$tmp/two"
expect2 "bad spec" "format=table" "$build/gpt2" "${base[@]}" --precision_check "level=2,format=table"
expect2 "unknown key" "unknown key 'output_md5'" "$build/gpt2" "${base[@]}" --precision_check "level=2,output_md5=true"

echo "precision.sh: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
