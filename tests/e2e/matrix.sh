#!/usr/bin/env bash
# it-matrix end to end: usage: bash matrix.sh BUILD_DIR SOURCE_DIR
#
# Runs scripts/matrix/small.json (InfiniTrain's test_config.json format, tiny fixture models) on
# --device cpu and again on --device sim, the sim run judged against the cpu run (--baseline, the
# loss by InfiniTrain's rules): 68 cases, of which two are unsupported, one asking for a flag
# value the apps do not offer (ZeRO stage 3), one for a combination the app refuses when it
# runs (sampling under pipeline parallelism), and the other 66 (tensor, sequence and pipeline
# parallel ones, LoRA under both, activation recomputation, Mixtral under tensor, sequence and
# pipeline parallelism and with recomputation, Qwen3's basic, TP, TP+SP, PP, LoRA and
# checkpoint cases, included) must pass. it-compare then compares the two log trees and draws them: every
# case's plot must exist and hold both loss curves. A doctored baseline must fail the case at the
# step that was changed. Checks the exit status, every log file with
# InfiniTrain's header lines and the app's step lines, the summary table and counts, the progress
# lines, --only-run, a failing run, config errors, and that --list on InfiniTrain's own config
# (scripts/matrix/test_config.json) resolves its 128 default cases with the expected commands,
# and that Ctrl-C stops the running case after a step and prints the table of what ran.
# Prints one line per check; exits 1 if any failed.
set -u

build=$(cd "${1:?usage: matrix.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
src=$(cd "${2:?usage: matrix.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
mx="$build/it-matrix"
small="$src/scripts/matrix/small.json"
full="$src/scripts/matrix/test_config.json"
fixtures="$src/tests/fixtures"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/e2e/checks.bash"
# row CASE: the summary-table row of CASE in $out.
row() { printf '%s\n' "$out" | grep -E "^$1 "; }

if grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
    # The DP cases run under mpirun: OpenMPI's own allocations kept until exit are suppressed
    # by library, which needs the slow unwinder (see mpi_asan.bash). mpirun passes the environment on.
    export LSAN_OPTIONS="suppressions=$src/tests/e2e/lsan-mpi.supp:print_suppressions=0:fast_unwind_on_malloc=0"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
fi
if [ ! -x "$mx" ]; then
    echo "FAIL - $mx is not built"
    exit 1
fi
if ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIP: mpirun not found (install openmpi-bin: scripts/setup.sh); the matrix's DP cases need it"
    exit 0
fi

# The 66 cases small.json runs, as <tag>/<log name>, and the two it cannot.
runnable=""
for m in gpt2 llama3; do
    for id in 1 1_bfloat16 3 3_bfloat16 4 4_bfloat16 5 6 9 9_bfloat16; do runnable="$runnable basic/${m}_$id"; done
    for id in 3_distopt 3_bfloat16_distopt 9_zero2; do runnable="$runnable zero/${m}_$id"; done
    for id in 1_cosine 1_bfloat16_linear; do runnable="$runnable lr_scheduler/${m}_$id"; done
    runnable="$runnable recompute/${m}_1_recompute_uniform1"
    for id in 1_lora 1_lora_bfloat16 3_lora 4_lora 6_lora; do runnable="$runnable lora/${m}_$id"; done
    for id in ckpt_no_resume ckpt_resume ckpt_bfloat16 ckpt_bfloat16_resume; do
        runnable="$runnable checkpoint/${m}_$id"
    done
done
for id in 1 1_bfloat16 2 2_bfloat16 3_tp 3_tp_sp 3_pp 4_recompute; do runnable="$runnable moe/tiny_mixtral_$id"; done
for id in 1 1_bfloat16 4 5 6 1_lora ckpt_no_resume ckpt_resume; do runnable="$runnable qwen3/qwen3_$id"; done
unsupported="moe/tiny_mixtral_5_zero3 moe/tiny_mixtral_6_pp_sample"

# Under the sanitizers one device runs the matrix (cpu: its mechanisms are the same on sim,
# which the release build runs and judges against cpu) and it-compare reads that tree twice,
# and only the groups checkpoint and moe run (18 cases: resumed, Mixtral's multi-rank and
# unsupported ones; every app mechanism the others use, ZeRO's included, has its own e2e test
# under the sanitizers too).
devs="cpu sim"
only=()
san=0
if grep -q '^IT_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
    devs=cpu
    san=1
    only=(--only-run checkpoint,moe)
    runnable=$(for c in $runnable; do case $c in checkpoint/* | moe/*) printf '%s ' "$c" ;; esac; done)
    echo "note: a sanitizer build: the matrix's groups checkpoint and moe on cpu alone (the release build runs every group, on sim too, judged against cpu)"
fi
nrun=$(printf '%s\n' $runnable | grep -c .)
ncase=$((nrun + 2))
for dev in $devs; do
    logs="$tmp/logs-$dev"
    # sim is judged against cpu; speeds differ by design, so the loss only (--no-tps).
    judge=()
    [ "$dev" = sim ] && judge=(--baseline "$tmp/logs-cpu" --no-tps)
    out=$("$mx" "$small" --device "$dev" --var "FIXTURES=$fixtures" --log-dir "$logs" "${judge[@]}" "${only[@]}" \
        2>"$tmp/err-$dev"); rc=$?
    err=$(cat "$tmp/err-$dev")
    expect_rc "$dev: small matrix" "$rc" 0 "$out$err"
    expect "$dev: summary counts" "$(printf '%s\n' "$out" | tail -n 1)" "^it-matrix: $nrun passed, 0 failed, 2 unsupported\$"
    expect "$dev: table header" "$out" '^case +status +time$'
    [ $san = 1 ] || expect "$dev: a passed row with its time" "$(row basic/gpt2_3)" '^basic/gpt2_3 +passed +[0-9]+\.[0-9] s$'
    expect "$dev: an unsupported row says why" "$(row moe/tiny_mixtral_5_zero3)" \
        '^moe/tiny_mixtral_5_zero3 +unsupported: --zero_stage 3 \(supported: 0\|1\|2\) +-$'
    expect "$dev: a combination refused when it runs is unsupported, with the app's line" \
        "$(row moe/tiny_mixtral_6_pp_sample)" \
        '^moe/tiny_mixtral_6_pp_sample +unsupported: mixtral: --pipeline_parallel 2: --freq_generate_txt \(sampling; InfiniTrain refuses it too\) is not supported with pipeline parallelism +-$'
    expect "$dev: Mixtral PP case trains on 2 stages" "$(cat "$logs/moe/tiny_mixtral_3_pp.log")" 'DP=1, TP=1, SP=1, PP=2\)$'
    expect "$dev: Mixtral TP case trains on 2 ranks" "$(cat "$logs/moe/tiny_mixtral_3_tp.log")" 'DP=1, TP=2, SP=1, PP=1\)$'
    expect "$dev: Mixtral TP+SP case trains on 2 ranks" "$(cat "$logs/moe/tiny_mixtral_3_tp_sp.log")" 'DP=1, TP=2, SP=2, PP=1\)$'
    if [ $san = 0 ]; then
        expect "$dev: PP case trains on 2 stages" "$(cat "$logs/basic/gpt2_6.log")" 'DP=1, TP=1, SP=1, PP=2\)$'
        expect "$dev: TP+SP case trains on 2 ranks" "$(cat "$logs/basic/gpt2_5.log")" 'DP=1, TP=2, SP=2, PP=1\)$'
    fi
    expect "$dev: progress line with ETA" "$err" "^it-matrix \\[[0-9]+/$ncase\\] moe/tiny_mixtral_2_bfloat16: passed \\([0-9.]+ s\\) \\| elapsed [0-9]+ s, ETA [0-9]+ s\$"
    expect "$dev: build commands reported as not run" "$err" '^it-matrix: 1 basic_compile_commands not run'
    nlogs=$(find "$logs" -name '*.log' | wc -l)
    if [ "$nlogs" -eq "$nrun" ]; then ok "$dev: $nrun log files"; else bad "$dev: $nlogs log files, expected $nrun" "$(find "$logs")"; fi
    missing=""
    badlog=""
    for c in $runnable; do
        f="$logs/$c.log"
        if [ ! -f "$f" ]; then missing="$missing $c"; continue; fi
        # InfiniTrain's header lines, [COMMAND] last, then the app's step lines.
        h=$(head -n 5 "$f")
        printf '%s\n' "$h" | sed -n 1p | grep -Eq '^\[RUN_STARTED_AT\] [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}$' &&
            printf '%s\n' "$h" | sed -n 2p | grep -Eq '^\[GIT_BRANCH\] .+' &&
            printf '%s\n' "$h" | sed -n 3p | grep -Eq '^\[GIT_COMMIT\] ([0-9a-f]{40}|unknown)$' &&
            printf '%s\n' "$h" | sed -n 4p | grep -Eq '^\[GIT_COMMIT_SHORT\] ([0-9a-f]{7}|unknown)$' &&
            printf '%s\n' "$h" | sed -n 5p | grep -Eq "^\[COMMAND\] .*/(gpt2|llama3|mixtral|qwen3) .*--device $dev( |$)" &&
            grep -Eq '^step +[0-9]+/[0-9]+ \| train loss [0-9.]+ ' "$f" || badlog="$badlog $c"
    done
    if [ -z "$missing" ]; then ok "$dev: every runnable case has its log"; else bad "$dev: logs missing:$missing"; fi
    if [ -z "$badlog" ]; then ok "$dev: every log has the header lines and step lines"; else
        bad "$dev: logs without the header or step lines:$badlog" "$(first=${badlog# }; head -n 8 "$logs/${first%% *}.log" 2>&1)"
    fi
    nosup=""
    for c in $unsupported; do [ -e "$logs/$c.log" ] && nosup="$nosup $c"; done
    if [ -z "$nosup" ]; then ok "$dev: unsupported cases (refused when they ran) leave no log"; else
        bad "$dev: logs for unsupported cases:$nosup"
    fi
    [ $san = 1 ] || expect "$dev: DP case runs 2 ranks under mpirun" "$(sed -n 5p "$logs/basic/gpt2_3.log")" \
        '^\[COMMAND\] mpirun --allow-run-as-root --oversubscribe -np 2 .*/gpt2 '
    [ $san = 1 ] || expect "$dev: DP case trains on 2 ranks" "$(cat "$logs/zero/llama3_3_distopt.log")" 'DP=2'
    expect "$dev: Mixtral global/micro batch in tokens/sequences" "$(sed -n 5p "$logs/moe/tiny_mixtral_2.log")" \
        '--total_batch_size 256 --batch_size 4$'
    expect "$dev: resume loads the namespaced no_resume checkpoint" "$(cat "$logs/checkpoint/llama3_ckpt_resume.log")" \
        "^resumed from $logs/ckpt/no_resume/llama3/no_resume/checkpoint_step_000004: step 4"
    expect "$dev: resumed run trains steps 5-6" "$(cat "$logs/checkpoint/gpt2_ckpt_bfloat16_resume.log")" '^step +6/6 \| train loss'
    if [ ! -e "$logs/ckpt" ]; then ok "$dev: checkpoint root removed after its group"; else
        bad "$dev: $logs/ckpt is left behind" "$(find "$logs/ckpt" | head)"
    fi
done

# it-compare over the two trees: 66 cases (16 under the sanitizers) paired, all pass, one plot each with both curves.
[ -d "$tmp/logs-sim" ] || cp -r "$tmp/logs-cpu" "$tmp/logs-sim"
cmp="$build/it-compare"
out=$("$cmp" "$tmp/logs-cpu" "$tmp/logs-sim" --no-tps --plots "$tmp/plots" 2>&1); rc=$?
expect_rc "it-compare cpu vs sim" "$rc" 0 "$out"
expect "it-compare: $nrun cases pass" "$(printf '%s\n' "$out" | tail -n 1)" "^it-compare: $nrun passed, 0 failed\$"
noplot=""
for c in $runnable; do
    svg="$tmp/plots/${c#*/}.svg"
    # Both curves with one point per step (5 or 6 steps in small.json, 2 for a resumed run).
    if ! grep -Eq '<polyline class="loss-base" [^>]*points="[0-9.]+,[0-9.]+( [0-9.]+,[0-9.]+)+"' "$svg" 2>/dev/null ||
        ! grep -Eq '<polyline class="loss-test" [^>]*points="[0-9.]+,[0-9.]+( [0-9.]+,[0-9.]+)+"' "$svg"; then
        noplot="$noplot $c"
    fi
done
if [ -z "$noplot" ]; then ok "a plot with both loss curves for each of the $nrun cases"; else bad "plots missing or without both curves:$noplot"; fi
n=$(grep -c '<img src="[^"]*\.svg"' "$tmp/plots/index.html" 2>/dev/null || true)
if [ "${n:-0}" -eq "$nrun" ]; then ok "index.html shows the $nrun plots"; else bad "index.html shows ${n:-0} plots, expected $nrun"; fi

# A baseline whose step 3 of one case was changed by 1e-3 (more than fp32's 1e-5): the runner
# (judging the loss only: two cpu runs' tok/s differ on a loaded machine)
# fails that case at step 3 and passes the others; a baseline without a case's log fails it.
cp -r "$tmp/logs-cpu" "$tmp/doctored"
awk '/^step +3\/[0-9]+ \| train loss / { $6 = sprintf("%.6f", $6 + 0.001) } { print }' \
    "$tmp/logs-cpu/moe/tiny_mixtral_1.log" >"$tmp/doctored/moe/tiny_mixtral_1.log"
rm "$tmp/doctored/moe/tiny_mixtral_2.log"
out=$("$mx" "$small" --device cpu --var "FIXTURES=$fixtures" --log-dir "$tmp/judged" --only-run moe \
    --baseline "$tmp/doctored" --no-tps 2>/dev/null); rc=$?
expect_rc "doctored baseline" "$rc" 1 "$out"
expect "doctored baseline: counts" "$out" '^it-matrix: 6 passed, 2 failed, 2 unsupported$'
expect "the changed case fails at step 3" "$(row moe/tiny_mixtral_1)" \
    '^moe/tiny_mixtral_1 +failed: differs from baseline: step 3: [0-9.]+ vs [0-9.]+ \(diff 1\.00e-03 > 1e-05\)'
expect "a case without a baseline log fails, naming it" "$(row moe/tiny_mixtral_2)" \
    "^moe/tiny_mixtral_2 +failed: no baseline log $tmp/doctored/moe/tiny_mixtral_2.log"
expect "an unchanged case passes" "$(row moe/tiny_mixtral_1_bfloat16)" '^moe/tiny_mixtral_1_bfloat16 +passed '
out=$("$mx" "$small" --device cpu --var "FIXTURES=$fixtures" --no-tps 2>&1); rc=$?
expect_rc "--no-tps without --baseline" "$rc" 2 "$out"

# --only-run selects one tag.
out=$("$mx" "$small" --device cpu --var "FIXTURES=$fixtures" --log-dir "$tmp/only" --only-run moe 2>/dev/null); rc=$?
expect_rc "--only-run moe" "$rc" 0 "$out"
expect "--only-run moe: counts" "$out" '^it-matrix: 8 passed, 0 failed, 2 unsupported$'
expect_not "--only-run moe: no other group" "$out" '^(basic|zero|lr_scheduler|checkpoint)/'
dirs=$(cd "$tmp/only" && ls)
if [ "$dirs" = "moe" ]; then ok "--only-run moe: only logs/moe/"; else bad "--only-run moe: log dirs: $dirs"; fi

# A failing case: exit 1, with the exit code and the app's error line.
out=$("$mx" "$small" --device cpu --var FIXTURES=/nonexistent --log-dir "$tmp/fail" --only-run moe 2>/dev/null); rc=$?
expect_rc "missing model files" "$rc" 1 "$out"
expect "failures counted" "$out" '^it-matrix: 0 passed, 8 failed, 2 unsupported$'
expect "failed row: exit code and error line" "$(row moe/tiny_mixtral_1)" \
    '^moe/tiny_mixtral_1 +failed: exit 2: mixtral: --llmc_filepath: /nonexistent/mixtral/tiny_mixtral.bin: cannot open'
# under mpirun the row shows the failed rank's line, not mpirun's help boxes or ORTE's logs
# that follow it, nor a stdout line flushed after it
for r in moe/tiny_mixtral_3_tp moe/tiny_mixtral_3_tp_sp moe/tiny_mixtral_3_pp; do
  expect "$r (mpirun): the app's error line" "$(row "$r")" \
    "^$r +failed: exit 2: mixtral: rank [01]: --llmc_filepath: /nonexistent/mixtral/tiny_mixtral.bin: cannot open"
done
expect "failed case still has its log" "$(cat "$tmp/fail/moe/tiny_mixtral_1.log" 2>&1)" '^\[COMMAND\] '

# A model file the app cannot read ("version 5 is llm.c's bf16 format, not supported") is the
# case's failure, not an unsupported combination: only a refusal's wording ("is not supported
# with ...", "unknown flag") makes a case unsupported.
cp "$src/tests/fixtures/gpt2/tiny_gpt2.bin" "$tmp/v5.bin" # header[1], the version, little-endian 5
printf '\005\000\000\000' | dd of="$tmp/v5.bin" bs=1 seek=4 conv=notrunc 2>/dev/null
out=$("$mx" "$small" --device cpu --var "FIXTURES=$fixtures" --var "GPT2_LLMC_FILEPATH=$tmp/v5.bin" \
    --var LLAMA3_TEST_GROUPS=zero --log-dir "$tmp/v5" --only-run basic 2>/dev/null)
expect "an unreadable model file fails the case" "$(row basic/gpt2_1)" \
    "^basic/gpt2_1 +failed: exit 2: .*version 5 is llm.c's bf16 format, not supported"

# Config and argument errors: exit 2, no run.
out=$("$mx" "$small" --device cpu --log-dir "$tmp/novar" 2>&1); rc=$?
expect_rc "undefined @FIXTURES@" "$rc" 2 "$out"
expect "undefined variable named" "$out" 'uses @FIXTURES@, which is not defined \(set it with --var FIXTURES=VALUE\)'
out=$("$mx" "$small" --device cpu --var "FIXTURES=$fixtures" --only-run basci 2>&1); rc=$?
expect_rc "--only-run with an unknown tag" "$rc" 2 "$out"
expect "unknown tag named" "$out" 'no test group has the tag "basci"'
printf '{"test_groups": [ {"tag": "x"} ]}' >"$tmp/bad.json"
out=$("$mx" "$tmp/bad.json" --device cpu 2>&1); rc=$?
expect_rc "group without tests" "$rc" 2 "$out"
printf '{"test_groups": [' >"$tmp/trunc.json"
out=$("$mx" "$tmp/trunc.json" --device cpu 2>&1); rc=$?
expect_rc "truncated JSON" "$rc" 2 "$out"
expect "JSON error with its position" "$out" "trunc.json:1:[0-9]+: "
out=$("$mx" "$tmp/nosuch.json" --device cpu 2>&1); rc=$?
expect_rc "missing config" "$rc" 2 "$out"
expect "missing config: the file and the reason, no position" "$out" "^it-matrix: $tmp/nosuch.json: cannot open: No such file or directory$"
out=$("$mx" "$tmp" --device cpu 2>&1); rc=$?
expect_rc "a directory as the config" "$rc" 2 "$out"
expect "a directory as the config: said so" "$out" "^it-matrix: $tmp: is a directory"
out=$("$mx" "$small" 2>&1); rc=$?
expect_rc "no --device" "$rc" 2 "$out"

# InfiniTrain's own config, listed: 62 cases each for GPT-2 and LLaMA-3 (basic 16, zero 14,
# lr_scheduler 10, lora 16, checkpoint 6), 4 for Mixtral (moe); recompute (14) is in no model's
# *_TEST_GROUPS. Runnable today: basic 1, 1_bfloat16, 2, 2_bfloat16, 3, 3_bfloat16 (6), zero
# 3_distopt, 3_zero2 and their bf16 twins (4), lr_scheduler 3_bfloat16_linear, 3_none_zero2
# (2), checkpoint's four single-device cases (4), lora 1, 2, 3 and their bf16 twins (6): 22 per
# model, and the 4 moe cases: 48; since the apps learned --tensor_parallel, --sequence_parallel,
# --pipeline_parallel and --virtual_pipeline_parallel, every case is runnable by its flags (128).
# A combination an app refuses when it runs (virtual stages, LoRA under PP) is reported
# unsupported then, with the app's line.
out=$("$mx" "$full" --device cuda --list 2>&1); rc=$?
expect_rc "--list InfiniTrain's config" "$rc" 0 "$out"
expect "InfiniTrain's config: counts" "$(printf '%s\n' "$out" | tail -n 1)" '^it-matrix: 128 cases: 128 runnable, 0 unsupported$'
# The context_parallel branch's config beside it (InfiniTrain's feat/context_parallel at d03ba16,
# scripts/test_config.json as it is there): 60 cases per model (basic 20, zero 18, lora 16,
# checkpoint 6), no Mixtral: every one runnable, cases 9 and 10 with the CP flags.
cpcfg="$src/scripts/matrix/test_config_context_parallel.json"
cpout=$("$mx" "$cpcfg" --device cuda --list 2>&1); rc=$?
expect_rc "--list the context_parallel branch's config" "$rc" 0 "$cpout"
expect "the branch's config: counts" "$(printf '%s\n' "$cpout" | tail -n 1)" '^it-matrix: 120 cases: 120 runnable, 0 unsupported$'
expect "case 9: CP2 on 4 ranks" "$(printf '%s\n' "$cpout" | grep -E '^basic/gpt2_9	')" \
    '	runnable	mpirun .* -np 4 .* --total_batch_size 5120 --context_parallel 2 --cp_comm_type p2p$'
expect "case 10: TP2 SP PP2 VPP2 CP2 on 8 ranks" "$(printf '%s\n' "$cpout" | grep -E '^basic/llama3_10_bfloat16	')" \
    '	runnable	mpirun .* -np 8 .* --tensor_parallel 2 --sequence_parallel=true --pipeline_parallel 2 --virtual_pipeline_parallel 2 --context_parallel 2 --cp_comm_type p2p$'
expect "zero 9_zero2" "$(printf '%s\n' "$cpout" | grep -E '^zero/llama3_9_zero2	')" '	runnable	.* --context_parallel 2 --cp_comm_type p2p --zero_stage 2$'
n=$(printf '%s\n' "$out" | grep -c '^basic/gpt2_')
if [ "$n" -eq 16 ]; then ok "16 basic cases for gpt2"; else bad "$n basic cases for gpt2, expected 16"; fi
n=$(printf '%s\n' "$out" | grep -c '^moe/tiny_mixtral_')
if [ "$n" -eq 4 ]; then ok "4 moe cases, all Mixtral"; else bad "$n moe cases, expected 4"; fi
expect_not "recompute is in no model's groups" "$out" '^recompute/'
line() { printf '%s\n' "$out" | grep -E "^$1	"; }
expect "DP8 case under mpirun" "$(line basic/gpt2_3)" \
    '	runnable	mpirun --allow-run-as-root --oversubscribe -np 8 \S*/gpt2 --input_bin /data1/shared/InfiniTrain-dev/data/llmc/gpt2/tinyshakespeare/tiny_shakespeare_train.bin --llmc_filepath /data1/shared/InfiniTrain-dev/data/llmc/gpt2/gpt2_124M.bin --device cuda --dtype float32 --num_iteration 10 --batch_size 10 --total_batch_size 5120$'
expect "TP+SP case runnable with its flags" "$(line basic/llama3_5_bfloat16)" \
    '	runnable	mpirun .* -np 8 .* --tensor_parallel 4 --sequence_parallel=true$'
expect "zero_stage 2 runnable" "$(line zero/gpt2_3_zero2)" '	runnable	mpirun .* --zero_stage 2$'
expect "PP x VPP case runnable by its flags" "$(line basic/gpt2_7)" \
    '	runnable	mpirun .* --pipeline_parallel 4 --virtual_pipeline_parallel 2$'
expect "LoRA runnable" "$(line lora/llama3_1_lora)" \
    '	runnable	\S*/llama3 .* --lora_rank 8 --lora_alpha 16 --lora_target_modules c_attn,attn.c_proj$'
expect "LoRA with TP runnable" "$(line lora/gpt2_4_lora)" '	runnable	.* --tensor_parallel 4 --lora_rank 4 '
expect "reals as jq prints them" "$(line lr_scheduler/gpt2_3_bfloat16_linear)" \
    '	runnable	.* --learning_rate 1e-05 --min_lr 1e-06 --lr_decay_style linear --lr_warmup_iters 2 --lr_warmup_init 0 --lr_decay_iters 0$'
expect "save namespaced by model and mode" "$(line checkpoint/llama3_ckpt_no_resume)" \
    ' --save /data1/ckpt/no_resume/llama3/no_resume$'
expect "load namespaced by model and source" "$(line checkpoint/gpt2_ckpt_bfloat16_resume)" \
    ' --load /data1/ckpt/bfloat16_no_resume/gpt2/no_resume/checkpoint_step_000030 --save /data1/ckpt/bfloat16_resume/gpt2/resume$'
expect "Mixtral's global batch in tokens" "$(line moe/tiny_mixtral_2_bfloat16)" \
    '	runnable	\S*/mixtral .* --dtype bfloat16 --num_iteration 10 --total_batch_size 5120 --batch_size 80$'
out=$("$mx" "$full" --device cuda --list --var 'GPT2_TEST_GROUPS=*' --only-run recompute 2>&1); rc=$?
expect "recompute selected by *_TEST_GROUPS=*" "$(printf '%s\n' "$out" | tail -n 1)" '^it-matrix: 14 cases: 14 runnable, 0 unsupported$'
expect "recompute case runnable with its flags" "$(line recompute/gpt2_2_recompute_uniform2)" \
    '	runnable	.* --activation_recompute=true --recompute_granularity full --recompute_method uniform --recompute_num_layers 2$'

# Ctrl-C: the running case stops after its step (the trainer's own SIGINT handling, its log
# keeps the steps), no other case starts, the table is printed with the case interrupted and
# the rest not run, and it-matrix ends by SIGINT (130); nothing is left running.
cat >"$tmp/long.json" <<EOF
{"variables": {"GPT2_INPUT_BIN": "$src/tests/fixtures/gpt2/tiny_shard.bin",
  "GPT2_LLMC_FILEPATH": "$src/tests/fixtures/gpt2/tiny_gpt2.bin", "GPT2_TEST_GROUPS": "basic",
  "LLAMA3_TEST_GROUPS": "", "MIXTRAL_TEST_GROUPS": ""},
 "test_groups": [{"tag": "basic", "tests": [
  {"id": "long", "args": {"num_iteration": 100000000, "sequence_length": 32, "log_interval": 1}},
  {"id": "after", "args": {"num_iteration": 2, "sequence_length": 32}}]}]}
EOF
"$mx" "$tmp/long.json" --device cpu --log-dir "$tmp/long" >"$tmp/long.out" 2>"$tmp/long.err" &
pid=$!
for ((i = 0; i < 300; i++)); do
    grep -q '^step' "$tmp/long/basic/gpt2_long.log" 2>/dev/null && break
    sleep 0.1
done
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] && ok "Ctrl-C: it-matrix ends by SIGINT" || bad "Ctrl-C: exit $rc, expected 130" "$(cat "$tmp/long.err")"
out=$(cat "$tmp/long.out")
expect "Ctrl-C: the running case is interrupted" "$out" '^basic/gpt2_long +interrupted'
expect "Ctrl-C: the next case did not run" "$out" '^basic/gpt2_after +not run'
expect "Ctrl-C: the summary says so" "$out" '^it-matrix: interrupted by SIGINT: 1 case not run$'
expect "Ctrl-C: the trainer stopped after a step" "$(cat "$tmp/long/basic/gpt2_long.log")" \
    'stopped by SIGINT after step [0-9]+ of 100000000'
sleep 0.2
left=$(pgrep -f -- "--num_iteration 100000000" || true)
[ -z "$left" ] && ok "Ctrl-C: nothing left running" || bad "Ctrl-C: processes left" "$left"

checks_done matrix.sh
