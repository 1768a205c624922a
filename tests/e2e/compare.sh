#!/usr/bin/env bash
# it-compare end to end: usage: bash compare.sh BUILD_DIR SOURCE_DIR
#
# Runs BUILD_DIR/it-compare on the committed logs of tests/fixtures/compare, whose differences
# are known: BASE holds eight cases (and three logs the rules skip: build_1, ctest_1,
# gpt2_1_profile), TEST (one directory deeper, as logs/<tag>/ are) seven of them:
#   gpt2_1              identical                                   pass
#   gpt2_2              fp32, 5e-6 apart on steps 3, 6, 9            pass (threshold 1e-5)
#   gpt2_3              fp32, 2e-5 apart from step 4 on              fail, first step 4
#   gpt2_4              tok/s 25% slower                             fail
#   gpt2_5              tok/s 10% slower after step 1 (step 1 itself
#                       2000x slower: it must not count)             pass
#   gpt2_6              only in BASE                                 reported, not counted
#   llama3_1_bfloat16   5e-3 apart, glog prefix on the step lines    pass (threshold 1e-2)
#   llama3_2_bfloat16   2e-2 apart from step 6 on                    fail, first step 6
# Checks the verdicts, the summary line, the exit codes, the threshold flags and the plots.
# Prints one line per check; exits 1 if any failed.
set -u

build=$(cd "${1:?usage: compare.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
src=$(cd "${2:?usage: compare.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
cmp="$build/it-compare"
fx="$src/tests/fixtures/compare"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/e2e/checks.bash"
# row CASE: the table row of CASE in $out.
row() { printf '%s\n' "$out" | grep -E "^$1 "; }

if [ ! -x "$cmp" ]; then
    echo "FAIL - $cmp is not built"
    exit 1
fi

out=$("$cmp" "$fx/base" "$fx/test" --plots "$tmp/plots" 2>&1); rc=$?
expect_rc "directories with failing cases" "$rc" 1 "$out"
expect "summary line" "$out" '^it-compare: 4 passed, 3 failed$'
expect "summary line is the last line" "$(printf '%s\n' "$out" | tail -n 1)" '^it-compare: 4 passed, 3 failed$'
expect "identical case passes" "$(row gpt2_1.log)" ' fp32 +10 +0\.00e\+00 +1e-05 +- .* pass$'
expect "fp32 within 1e-5 passes" "$(row gpt2_2.log)" ' fp32 +10 +5\.00e-06 +1e-05 +- .* pass$'
expect "fp32 2e-5 off fails at step 4" "$(row gpt2_3.log)" ' fp32 +10 +2\.00e-05 +1e-05 +4 .* FAIL loss$'
expect "fp32 failure names step 4 and its losses" "$out" \
    '^gpt2_3\.log: step 4: 5\.140535 vs 5\.140555 \(diff 2\.00e-05 > 1e-05\); 7 of 10 steps fail$'
expect "bf16 5e-3 off passes under 1e-2" "$(row llama3_1_bfloat16.log)" ' bfloat16 +10 +5\.00e-03 +1e-02 +- .* pass$'
expect "bf16 2e-2 off fails at step 6" "$(row llama3_2_bfloat16.log)" ' bfloat16 +10 +2\.00e-02 +1e-02 +6 .* FAIL loss$'
expect "tok/s 25% slower fails" "$(row gpt2_4.log)" ' 8644\.22 +6483\.11 +-25\.0% \(x0\.750\) +FAIL tok/s$'
expect "tok/s failure explained" "$out" '^gpt2_4\.log: tok/s 8644\.22 \(BASE\) vs 6483\.11 \(TEST\), -25\.0%: slower than the 20% allowed$'
expect "tok/s 10% slower passes, step 1 dropped" "$(row gpt2_5.log)" ' 8644\.22 +7779\.78 +-10\.0% \(x0\.900\) +pass$'
expect "case missing from TEST reported" "$(row gpt2_6.log)" 'missing in TEST$'
expect "missing case's path named" "$out" "^gpt2_6\.log: only in BASE \(.*/base/gpt2_6\.log\)$"
expect "missing cases counted" "$out" '^1 case on one side only \(not counted\)$'
expect_not "build*, ctest_* and *_profile.log skipped" "$out" '^(build_1|ctest_1|gpt2_1_profile)\.log'

# The plots: one SVG per compared case with both loss curves, the difference and the threshold.
for c in gpt2_1 gpt2_2 gpt2_3 gpt2_4 gpt2_5 llama3_1_bfloat16 llama3_2_bfloat16; do
    svg="$tmp/plots/$c.svg"
    if [ ! -s "$svg" ]; then bad "plot $c.svg written"; continue; fi
    n=$(grep -cE '<polyline class="loss-(base|test)"' "$svg")
    [ "$n" -eq 2 ] && ok "$c.svg holds both loss curves" || bad "$c.svg holds both loss curves ($n found)"
    pts=$(grep -E '<polyline class="loss-test"' "$svg" | grep -oE '[0-9.]+,[0-9.]+' | wc -l)
    [ "$pts" -eq 10 ] && ok "$c.svg: TEST curve has 10 points" || bad "$c.svg: TEST curve has 10 points ($pts)"
    grep -q '<polyline class="diff"' "$svg" && ok "$c.svg holds the difference curve" || bad "$c.svg difference curve"
    grep -qE '<line class="threshold"[^>]*stroke-dasharray' "$svg" && ok "$c.svg holds the dashed threshold line" ||
        bad "$c.svg threshold line"
    if command -v xmllint >/dev/null 2>&1; then
        xmllint --noout "$svg" 2>/dev/null && ok "$c.svg is well-formed XML" || bad "$c.svg is well-formed XML"
    fi
done
marks=$(grep -c 'class="fail-mark"' "$tmp/plots/gpt2_3.svg")
[ "$marks" -eq 7 ] && ok "gpt2_3.svg marks its 7 failing steps" || bad "gpt2_3.svg marks its 7 failing steps ($marks)"
marks=$(grep -c 'class="fail-mark"' "$tmp/plots/gpt2_1.svg")
[ "$marks" -eq 0 ] && ok "gpt2_1.svg marks no step" || bad "gpt2_1.svg marks no step ($marks)"
grep -q 'threshold 1e-02' "$tmp/plots/llama3_2_bfloat16.svg" && ok "bf16 plot draws the 1e-2 threshold" ||
    bad "bf16 plot draws the 1e-2 threshold"
[ ! -e "$tmp/plots/gpt2_6.svg" ] && ok "no plot for the missing case" || bad "no plot for the missing case"

idx="$tmp/plots/index.html"
if [ -s "$idx" ]; then
    html=$(cat "$idx")
    for c in gpt2_1 gpt2_2 gpt2_5 llama3_1_bfloat16; do
        expect "index: $c passes (green)" "$html" "<tr class=\"pass\"><td><a [^>]*>$c\.log</a></td><td>pass</td>"
    done
    for c in gpt2_3 gpt2_4 llama3_2_bfloat16; do
        expect "index: $c fails (red)" "$html" "<tr class=\"fail\"><td><a [^>]*>$c\.log</a></td><td>FAIL"
    done
    expect "index: gpt2_6 missing (grey)" "$html" '<tr class="missing"><td><a [^>]*>gpt2_6\.log</a></td><td>missing in TEST'
    n=$(printf '%s\n' "$html" | grep -c '<img src="[^"]*\.svg"')
    [ "$n" -eq 7 ] && ok "index embeds 7 plots" || bad "index embeds 7 plots ($n)"
    expect "index embeds gpt2_3.svg" "$html" '<img src="gpt2_3\.svg"'
else
    bad "index.html written"
fi

# Thresholds from the flags.
out=$("$cmp" "$fx/base" "$fx/test" --threshold-fp32 3e-5 --threshold-bf16=3e-2 2>&1); rc=$?
expect_rc "looser thresholds: only tok/s fails" "$rc" 1 "$out"
expect "looser thresholds: 6 passed" "$out" '^it-compare: 6 passed, 1 failed$'
out=$("$cmp" "$fx/base" "$fx/test" --threshold 1e-1 --tps-threshold 0.3 2>&1); rc=$?
expect_rc "--threshold sets both, --tps-threshold 30%" "$rc" 0 "$out"
expect "all compared cases pass" "$out" '^it-compare: 7 passed, 0 failed$'
out=$("$cmp" "$fx/base" "$fx/test" --threshold 1e-1 --tps-threshold 0.3 --missing-fails 2>&1); rc=$?
expect_rc "--missing-fails counts the missing case" "$rc" 1 "$out"
expect "--missing-fails summary" "$out" '^it-compare: 7 passed, 1 failed$'
out=$("$cmp" "$fx/base" "$fx/test" --no-tps --threshold-bf16 1e-1 --threshold-fp32 1e-4 2>&1); rc=$?
expect_rc "--no-tps: the slow case passes" "$rc" 0 "$out"
expect "--no-tps column" "$(row gpt2_4.log)" 'not compared +pass$'

# Two files: one case, named after BASE; bf16 read from the name.
out=$("$cmp" "$fx/base/gpt2_3.log" "$fx/test/basic/gpt2_3.log" 2>&1); rc=$?
expect_rc "two files, fp32 2e-5 off" "$rc" 1 "$out"
expect "two files summary" "$out" '^it-compare: 0 passed, 1 failed$'
out=$("$cmp" "$fx/base/llama3_1_bfloat16.log" "$fx/test/basic/llama3_1_bfloat16.log" 2>&1); rc=$?
expect_rc "two bf16 files within 1e-2" "$rc" 0 "$out"
out=$("$cmp" "$fx/base/gpt2_1.log" "$fx/base/gpt2_1.log" 2>&1); rc=$?
expect_rc "a file against itself" "$rc" 0 "$out"
expect "a file against itself passes" "$out" '^it-compare: 1 passed, 0 failed$'

# A step missing in TEST fails and is named; a log without step lines fails.
grep -v 'step    7/' "$fx/test/basic/gpt2_1.log" >"$tmp/gpt2_1.log"
out=$("$cmp" "$fx/base/gpt2_1.log" "$tmp/gpt2_1.log" 2>&1); rc=$?
expect_rc "a step missing in TEST" "$rc" 1 "$out"
expect "the missing step named" "$out" '^gpt2_1\.log: step 7 is missing in TEST; 1 of 10 steps fail$'
grep -v 'step ' "$fx/test/basic/gpt2_1.log" >"$tmp/nosteps.log"
out=$("$cmp" "$tmp/nosteps.log" "$tmp/nosteps.log" 2>&1); rc=$?
expect_rc "logs without step lines" "$rc" 1 "$out"
expect "logs without step lines explained" "$out" 'no step lines with a train loss in either log'

# Bad arguments and unreadable input: exit 2.
out=$("$cmp" 2>&1); rc=$?
expect_rc "no arguments" "$rc" 2 "$out"
expect "usage shown" "$out" '^usage: it-compare BASE TEST'
out=$("$cmp" "$fx/base" "$tmp/absent" 2>&1); rc=$?
expect_rc "TEST does not exist" "$rc" 2 "$out"
expect "the absent path named" "$out" "cannot read $tmp/absent"
out=$("$cmp" "$fx/base" "$fx/base/gpt2_1.log" 2>&1); rc=$?
expect_rc "a directory against a file" "$rc" 2 "$out"
out=$("$cmp" "$fx/base" "$fx/test" --threshold-fp32 abc 2>&1); rc=$?
expect_rc "a threshold that is no number" "$rc" 2 "$out"
out=$("$cmp" "$fx/base" "$fx/test" --bogus 2>&1); rc=$?
expect_rc "an unknown option" "$rc" 2 "$out"
mkdir -p "$tmp/dup/a" "$tmp/dup/b"
cp "$fx/base/gpt2_1.log" "$tmp/dup/a/" && cp "$fx/base/gpt2_1.log" "$tmp/dup/b/"
out=$("$cmp" "$tmp/dup" "$fx/test" 2>&1); rc=$?
expect_rc "two logs with one name" "$rc" 2 "$out"
expect "the duplicate named" "$out" 'two logs named gpt2_1\.log'
mkdir -p "$tmp/empty1" "$tmp/empty2"
out=$("$cmp" "$tmp/empty1" "$tmp/empty2" 2>&1); rc=$?
expect_rc "two directories without logs" "$rc" 2 "$out"
out=$("$cmp" "$fx/base" "$fx/test" --plots /proc/it-compare-cannot 2>&1); rc=$?
expect_rc "a plots directory that cannot be made" "$rc" 2 "$out"

checks_done compare.sh
