#!/usr/bin/env bash
# it-info end to end: usage: bash it_info.sh BUILD_DIR SOURCE_DIR
#
# Runs BUILD_DIR/it-info (as a user runs it, without the test plugins; then plain, --coverage, --help,
# a bad flag, with a failing plugin init and with IT_BACKEND_PATH set) with the test plugins of
# BUILD_DIR/test-plugins, and checks that the
# backends, the refused plugins with their reasons, the devices and the coverage table are
# there. Prints one line per check; exits 1 if any failed.
set -u

build=$(cd "${1:?usage: it_info.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
src=$(cd "${2:?usage: it_info.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
info="$build/it-info"
. "$src/tests/e2e/checks.bash"

if [ ! -x "$info" ]; then
    echo "FAIL - $info is not built"
    exit 1
fi
api=$(sed -n 's/^#define IT_BACKEND_API_VERSION \([0-9]*\).*/\1/p' "$src/include/infinitrain/backend.h")
[ -n "$api" ] || { echo "FAIL - cannot read IT_BACKEND_API_VERSION from $src"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- a user's it-info (no IT_BACKEND_PATH): no test plugin anywhere, nor in a device error
out=$(env -u IT_BACKEND_PATH "$info" 2>&1)
expect_not "a user's it-info lists no test plugin" "$out" "testplug|simhalf|badversion|noentry|faulty"
out=$(env -u IT_BACKEND_PATH "$build/gpt2" --device simhal --input_bin "$src/tests/fixtures/gpt2/tiny_shard.bin" 2>&1)
expect_not "an unknown device's message names no test plugin" "$out" "testplug|simhalf|badversion|noentry|faulty"
expect "an unknown device's message still lists the real backends" "$out" "discoverable plugins: .*sim"

# every unknown or unusable device is one exit status, 2 (the user's to fix), with the reason
for d in nosuch sim:9 mlu cuda; do
    [ "$d" = cuda ] && [ ! -f "$build/libit_backend_cuda.so" ] && continue
    out=$("$build/gpt2" --device "$d" --input_bin "$src/tests/fixtures/gpt2/tiny_shard.bin" 2>&1)
    expect_rc "--device $d" $? 2 "$out"
    expect "--device $d says why" "$out" "^gpt2: --device: "
done

# ---- plain listing
out=$("$info" 2>"$tmp/err"); rc=$?
if [ $rc -eq 0 ]; then ok "it-info exits 0"; else bad "it-info exits $rc" "$(cat "$tmp/err")"; fi
expect "cpu is registered, built in, host memory, 1 device" "$out" \
    "^  cpu +$api +bfloat16 +host +1 +[0-9]+/[0-9]+ native +built in$"
expect "testplug is loaded as a plugin with 2 devices" "$out" \
    "^  testplug +$api +float16 +device +2 +[0-9]+/[0-9]+ native +.*/libit_backend_testplug\.so$"
expect "testplug listed as a loaded plugin" "$out" "^  testplug +loaded +.*libit_backend_testplug\.so$"
expect "badversion refused, naming both api versions" "$out" \
    "^  badversion +failed +.*libit_backend_badversion\.so: .*api_version $((api + 1)) .*IT_BACKEND_API_VERSION $api"
expect "noentry refused, naming the entry symbol" "$out" \
    "^  noentry +failed +.*libit_backend_noentry\.so: .*it_backend_entry"
expect "missingreq refused, naming both missing kernels" "$out" \
    "^  missingreq +failed +.*required kernels missing: cast, copy_strided$"
expect "wrongname refused for its name" "$out" "^  wrongname +failed +.*registers the name 'other', not 'wrongname'"
expect_not "refused plugins are not registered backends" "$out" "^  (badversion|noentry|missingreq|other) +$api +"
expect "cpu device with free/total memory" "$out" "^  cpu +[0-9.]+ (B|KiB|MiB|GiB|TiB) +[0-9.]+ (B|KiB|MiB|GiB|TiB)$"
expect "testplug:0 with its 4 GiB" "$out" "^  testplug:0 +[0-9.]+ (MiB|GiB) +4\.0 GiB$"
expect "testplug:1 with its 4 GiB" "$out" "^  testplug:1 +[0-9.]+ (MiB|GiB) +4\.0 GiB$"
expect "the search path is shown" "$out" "^  searched: .* \(beside the executable\)(, .* \((installed plugins|IT_BACKEND_PATH)\))*; IT_BACKEND_PATH="
expect_not "no trailing blanks" "$out" " $"

# ---- coverage
cov=$("$info" --coverage 2>"$tmp/err"); rc=$?
if [ $rc -eq 0 ]; then ok "it-info --coverage exits 0"; else bad "it-info --coverage exits $rc" "$(cat "$tmp/err")"; fi
table=$(printf '%s\n' "$cov" | sed -n '/^  SLOT /,$p')
header=$(printf '%s\n' "$table" | head -n 1)
col_of() { printf '%s\n' "$header" | awk -v name="$1" '{ for (i = 1; i <= NF; i++) if ($i == name) print i }'; }
ccpu=$(col_of cpu); ctp=$(col_of testplug)
if [ -n "$ccpu" ] && [ -n "$ctp" ]; then
    ok "coverage table has cpu and testplug columns"
else
    bad "coverage table has cpu and testplug columns" "$cov"
fi
# cell SLOT COLUMN: the word in that column; REQUIRED is blank for most rows, so count from the right.
ncols=$(printf '%s\n' "$header" | awk '{ print NF }')
cell() { printf '%s\n' "$table" | awk -v s="$1" -v c="$2" -v n="$ncols" '$1 == s { print $(NF - (n - c)) }'; }
for slot in cast fill copy_strided; do
    r=$(printf '%s\n' "$table" | awk -v s="$slot" '$1 == s { print $2 }')
    [ "$r" = yes ] && ok "$slot is marked required" || bad "$slot is marked required" "$table"
done
for slot in cast gemm embedding_fwd; do
    [ "$(cell $slot "$ctp")" = native ] && ok "testplug runs $slot natively" || bad "testplug $slot" "$table"
done
for slot in layernorm_fwd softmax_fwd cross_entropy_bwd adam_step; do
    [ "$(cell $slot "$ctp")" = fallback ] && ok "testplug leaves $slot to the fallback" || bad "testplug $slot" "$table"
    [ "$(cell $slot "$ccpu")" = native ] && ok "cpu runs $slot natively" || bad "cpu $slot" "$table"
done
nslots=$(printf '%s\n' "$table" | sed '1d' | grep -vc '^  native slots')
expect "every slot counted for cpu: $nslots/$nslots" "$table" "^  native slots +.*\b$nslots/$nslots\b"
expect "testplug: 9 of $nslots slots native" "$table" "^  native slots +.*\b9/$nslots\b"
[ "$nslots" -ge 17 ] && ok "at least the 17 slots of API version 1 listed" || bad "only $nslots slots" "$table"

# ---- help and a bad flag
help=$("$info" --help 2>&1); rc=$?
[ $rc -eq 0 ] && ok "--help exits 0" || bad "--help exits $rc"
expect "--help prints the usage" "$help" "^usage: it-info "
"$info" --bogus >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && ok "an unknown flag exits 2" || bad "an unknown flag exits $rc"
expect "the error names the flag" "$(cat "$tmp/err")" "unknown option '--bogus'"
[ ! -s "$tmp/out" ] && ok "nothing on stdout for a bad flag" || bad "stdout for a bad flag" "$(cat "$tmp/out")"

# ---- a backend whose init fails is listed with the reason
out=$(IT_TESTPLUG_INIT_FAIL=1 "$info" 2>&1); rc=$?
[ $rc -eq 0 ] && ok "it-info exits 0 when a backend fails to initialize" || bad "exit $rc with a failing init" "$out"
expect "the failing backend has no devices" "$out" "^  testplug +$api +float16 +device +none "
expect "and the init error is shown" "$out" \
    "^  testplug +- +- +no devices: .*failed to initialize: testplug: driver not found"

# ---- IT_BACKEND_PATH: a plugin reachable only through it, and a missing directory
mkdir -p "$tmp/plugins"
ln -s "$build/test-plugins/libit_backend_testplug.so" "$tmp/plugins/libit_backend_pathplug.so"
out=$(IT_BACKEND_PATH="/nonexistent/it_info_dir:$tmp/plugins" "$info" 2>&1); rc=$?
[ $rc -eq 0 ] && ok "it-info exits 0 with IT_BACKEND_PATH set" || bad "exit $rc with IT_BACKEND_PATH" "$out"
expect "IT_BACKEND_PATH is shown" "$out" "IT_BACKEND_PATH=/nonexistent/it_info_dir:$tmp/plugins$"
expect "a plugin found on IT_BACKEND_PATH is loaded and refused for its name" "$out" \
    "^  pathplug +failed +$tmp/plugins/libit_backend_pathplug\.so: plugin registers the name 'testplug', not 'pathplug'"

checks_done it_info.sh
