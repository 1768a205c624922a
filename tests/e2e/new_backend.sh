#!/usr/bin/env bash
# A new backend from the template, end to end: usage: bash new_backend.sh BUILD_DIR SOURCE_DIR
#
# In a scratch copy of the tree (configured once, without tests: IT_BUILD_TESTS=OFF, Debug for
# a quick compile), scripts/new-backend.sh makes backends/myaccel; before a build the loader's
# error points at the unbuilt directory; a plain `cmake --build` (no configure by hand) builds
# it; it passes conformance and trains GPT-2 with the cpu's losses bit for bit. Then the usual
# mistakes: a slot taken out of the table (still builds under -Werror, served by the fallback),
# a slot that declines every call (counted in the report's summary), a slot that fails at
# launch (the error names kernel, device and tensors; the report is printed; conformance names
# the slot). Prints one line per check; exits 1 if any failed.
set -u

src=$(cd "${2:?usage: new_backend.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
. "$src/tests/e2e/checks.bash"

tmp=$(mktemp -d /tmp/it_new_backend_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
tree=$tmp/tree
b=$tmp/build
unset IT_BACKEND_PATH # the user's view: only what the scratch build makes

# The tree as committed plus the working changes, without build outputs.
mkdir -p "$tree"
(cd "$src" && git ls-files -co --exclude-standard -z 2>/dev/null || find . -path ./build\* -prune -o -type f -print0) |
    (cd "$src" && xargs -0 cp --parents -t "$tree" 2>/dev/null)
[ -f "$tree/backends/sim/kernels.c" ] || { echo "FAIL - could not copy the tree"; exit 1; }

if ! out=$(cmake -S "$tree" -B "$b" -DCMAKE_BUILD_TYPE=Debug -DIT_BUILD_TESTS=OFF -DCMAKE_CUDA_COMPILER=NOTFOUND 2>&1) ||
    ! out=$(cmake --build "$b" -j2 2>&1); then
    bad "the scratch tree configures and builds" "$(printf '%s\n' "$out" | tail -30)"
    exit 1
fi
ok "the scratch tree configures and builds"

flags=(--llmc_filepath "$src/tests/fixtures/gpt2/tiny_gpt2.bin" --input_bin "$src/tests/fixtures/gpt2/tiny_shard.bin"
    --batch_size 4 --sequence_length 32 --num_iteration 3)

# ---- the script
out=$(bash "$tree/scripts/new-backend.sh" myaccel 2>&1)
expect "new-backend.sh says what it made" "$out" "^created .*/backends/myaccel from backends/sim"
files=$(cd "$tree/backends/myaccel" && ls | tr '\n' ' ')
[ "$files" = "CMakeLists.txt README.md backend.c kernels.c memory.c myaccel.h runtime.c " ] &&
    ok "the copy has the template's files, renamed, without simhalf.cmake" || bad "files: $files"
left=$(grep -rnE '\bsim\b|\bsim_|SIM_|simhalf|it_backend_sim\b' "$tree/backends/myaccel" | grep -v 'tests/unit/test_sim\.c')
[ -z "$left" ] && ok "no name of the template is left" || bad "names of the template left" "$left"
grep -q 'IT_MYACCEL_DEVICES' "$tree/backends/myaccel/runtime.c" && grep -q '"myaccel:%d: ' "$tree/backends/myaccel/runtime.c" &&
    grep -q 'add_library(it_backend_myaccel MODULE' "$tree/backends/myaccel/CMakeLists.txt" &&
    ok "environment variables, message prefixes and the CMake target are renamed" || bad "renames incomplete"

# ---- before the build: the loader says where it looked and what to do
out=$("$b/gpt2" --device myaccel "${flags[@]}" 2>&1)
expect "an unbuilt backend: the directories searched" "$out" "searched:"
expect "an unbuilt backend: the source directory and the build to re-run" "$out" \
    "source directory .*/backends/myaccel exists but its plugin was not built: run .cmake --build .*$(basename "$b")"

# ---- a plain build picks the directory up
if out=$(cmake --build "$b" -j2 2>&1) && [ -f "$b/libit_backend_myaccel.so" ]; then
    ok "cmake --build (no configure by hand) builds libit_backend_myaccel.so"
else
    bad "cmake --build builds the new backend" "$(printf '%s\n' "$out" | tail -30)"
    exit 1
fi
out=$(IT_MYACCEL_DEVICES=3 "$b/it-info" 2>&1)
expect "it-info lists myaccel with IT_MYACCEL_DEVICES=3 devices" "$out" "^  myaccel +[0-9]+ +bfloat16 +device +3 +30/30 native"
if out=$("$b/it-conformance" --backend myaccel 2>&1); then ok "conformance passes"; else bad "conformance" "$(printf '%s\n' "$out" | tail -20)"; fi
expect "conformance: nothing failed" "$out" "^[0-9]+ passed, 0 failed"

train() { # train DEVICE LOSSFILE [flags...]
    local dev=$1 log=$2
    shift 2
    "$b/gpt2" --device "$dev" "${flags[@]}" --loss_log "$log" "$@"
}
train cpu "$tmp/cpu.txt" >/dev/null 2>&1 || bad "training on cpu"
if train myaccel "$tmp/acc.txt" >/dev/null 2>&1 && cmp -s "$tmp/cpu.txt" "$tmp/acc.txt" && [ "$(wc -l <"$tmp/cpu.txt")" -eq 3 ]; then
    ok "3 steps on myaccel: losses equal --device cpu's at full precision"
else
    bad "myaccel trains like cpu" "$(paste "$tmp/cpu.txt" "$tmp/acc.txt" 2>&1)"
fi

# ---- a slot taken out of the table still builds under -Werror and falls back
k=$tree/backends/myaccel/kernels.c
sed -i '/^    \.layernorm_fwd = myaccel_layernorm_fwd,$/d' "$k"
if out=$(cmake --build "$b" -j2 2>&1); then ok "without layernorm_fwd in the table it builds (-Werror)"; else
    bad "a removed slot breaks the build" "$(printf '%s\n' "$out" | grep -E 'error|warning' | head)"; fi
out=$("$b/it-conformance" --list --backend myaccel 2>&1)
expect "the removed slot is served by the fallback" "$out" "^layernorm_fwd +fallback"
train myaccel "$tmp/acc2.txt" >/dev/null 2>&1 && cmp -s "$tmp/cpu.txt" "$tmp/acc2.txt" &&
    ok "on the fallback, losses still equal cpu's" || bad "fallback losses differ"

# ---- a slot that declines every call: the report counts the calls the CPU served
perl -0pi -e 's/(it_status myaccel_unary\([^{]*\{\n)/$1    return it_error(IT_ERR_UNSUPPORTED, "myaccel: unary: declined (planted)");\n/' "$k"
cmake --build "$b" -j2 >/dev/null 2>&1 || bad "the declining build"
out=$(train myaccel "$tmp/acc3.txt" --backend_report 2>&1)
row=$(printf '%s\n' "$out" | grep -E "^  unary ")
calls=$(printf '%s\n' "$row" | awk '{print $3}')
expect "the declining slot is native+cpu with every call on the CPU" "$row" "^  unary +native\+cpu +$calls +$calls "
# the empty layernorm_fwd row adds its own calls; the header counts both slots' calls
ln_calls=$(printf '%s\n' "$out" | awk '$1 == "layernorm_fwd" {print $3}')
want=$((calls + ln_calls))
expect "the summary counts declined calls with the empty slot's ($want)" "$out" \
    "^backend 'myaccel': 29 of 30 kernel slots native, 1 empty ones served by the CPU fallback.*; $want of [0-9]+ calls"
[ "${calls:-0}" -gt 0 ] && ok "unary was called ($calls calls)" || bad "unary calls: '$calls'" "$out"
cmp -s "$tmp/cpu.txt" "$tmp/acc3.txt" && ok "with the declines served by the CPU, losses still equal cpu's" ||
    bad "declined-call losses differ" "$(paste "$tmp/cpu.txt" "$tmp/acc3.txt" 2>&1)"

# ---- a slot that fails at launch: the message, the report on the way out, conformance
perl -0pi -e 's/(it_status myaccel_layernorm_bwd\([^{]*\{\n)/$1    return it_error(IT_ERR_BACKEND, "myaccel: layernorm_bwd: planted launch failure");\n/' "$k"
cmake --build "$b" -j2 >/dev/null 2>&1 || bad "the failing build"
out=$(train myaccel "$tmp/acc4.txt" --backend_report 2>&1)
rc=$?
[ $rc -ne 0 ] && ok "a failing kernel fails the run (exit $rc)" || bad "the run succeeded" "$out"
expect "the error names the kernel, device, tensors and the backend's message" "$out" \
    "kernel 'layernorm_bwd' on myaccel:0 \(dy \(4,32,[0-9]+\) float32, x \(4,32,[0-9]+\) float32, w \([0-9]+\) float32.*\): myaccel: layernorm_bwd: planted launch failure"
expect "the kernel report is printed on the way out" "$out" "^kernel report up to the failure:"
out=$("$b/it-conformance" --backend myaccel --slot layernorm_bwd 2>&1)
rc=$?
[ $rc -eq 1 ] && ok "conformance exits 1 on the broken slot" || bad "conformance exit $rc" "$out"
expect "conformance names the failing slot and its dtypes" "$out" "^  myaccel:0 layernorm_bwd \([0-9]+ cases?: fp32"

checks_done new_backend.sh
