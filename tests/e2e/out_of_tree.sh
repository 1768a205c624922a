#!/usr/bin/env bash
# A backend plugin built out of the tree against an installed core, the way a vendor ships
# one: usage: bash out_of_tree.sh BUILD_DIR SOURCE_DIR
#
# cmake --install BUILD_DIR into a scratch prefix; checks the headers, the core library, the
# apps, infinitrain.pc and the CMake package config are there and no test plugin is; makes two
# plugins from the template outside the tree (scripts/new-backend.sh NAME DEST), builds one
# with find_package(infinitrain) and one with pkg-config and a plain compiler, loads both with
# IT_BACKEND_PATH into the installed it-info, it-conformance and gpt2. Prints one line per
# check; exits 1 if any failed.
set -u

build=$(cd "${1:?usage: out_of_tree.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
src=$(cd "${2:?usage: out_of_tree.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
. "$src/tests/e2e/checks.bash"

tmp=$(mktemp -d /tmp/it_out_of_tree_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
unset IT_BACKEND_PATH

if ! out=$(cmake --install "$build" --prefix "$prefix" 2>&1); then
    bad "cmake --install" "$(printf '%s\n' "$out" | tail -20)"
    exit 1
fi
ok "cmake --install into a scratch prefix"
libdir=$(dirname "$(find "$prefix" -name libinfinitrain.so | head -1)")
for f in include/infinitrain/backend.h include/infinitrain/common.h include/infinitrain/scalar/it_scalar.h bin/it-info \
    bin/gpt2 bin/it-conformance; do
    [ -e "$prefix/$f" ] && ok "installed $f" || bad "missing $prefix/$f"
done
for f in libinfinitrain.so pkgconfig/infinitrain.pc cmake/infinitrain/infinitrainConfig.cmake \
    cmake/infinitrain/infinitrainTargets.cmake infinitrain/libit_backend_sim.so; do
    [ -e "$libdir/$f" ] && ok "installed lib/$f" || bad "missing $libdir/$f"
done
# The vendor plugins this build made (cuda where nvcc was found, mlu always) are installed too.
for name in cuda mlu; do
    [ -e "$build/libit_backend_$name.so" ] || continue
    [ -e "$libdir/infinitrain/libit_backend_$name.so" ] && ok "installed lib/infinitrain/libit_backend_$name.so" ||
        bad "the build has libit_backend_$name.so but the install lacks it"
done
stray=$(find "$prefix" -name 'libit_backend_*.so' ! -name libit_backend_sim.so ! -name libit_backend_cuda.so \
    ! -name libit_backend_mlu.so)
[ -z "$stray" ] && ok "no test plugin is installed" || bad "test plugins installed" "$stray"

out=$("$prefix/bin/it-info" 2>&1)
expect "the installed it-info finds the installed sim plugin" "$out" "^  sim +loaded +$libdir/infinitrain/libit_backend_sim\.so$"
expect "the installed it-info names the installed plugin directory as searched" "$out" "^  searched: $prefix/bin \(beside the executable\), $libdir/infinitrain \(installed plugins\)"
# (A vendor plugin whose device does not initialize here, cuda or mlu without its hardware,
# says "failed to initialize" in the devices table: expected, not a load failure.)
if printf '%s\n' "$out" | grep -v 'failed to initialize' |
    grep -Eq 'testplug|badversion|noentry|missingreq|wrongname|oldtable|simhalf|failed'; then
    bad "the installed it-info shows no test plugin and no failure" "$out"
else
    ok "the installed it-info shows no test plugin and no failure"
fi

# ---- two plugins from the template, outside the tree
bash "$src/scripts/new-backend.sh" vendorcm "$tmp/src/vendorcm" >/dev/null || bad "new-backend.sh vendorcm DEST"
bash "$src/scripts/new-backend.sh" vendorpc "$tmp/src/vendorpc" >/dev/null || bad "new-backend.sh vendorpc DEST"

# find_package(infinitrain): the template's CMakeLists builds on its own
if out=$(cmake -S "$tmp/src/vendorcm" -B "$tmp/b-cm" -DCMAKE_PREFIX_PATH="$prefix" 2>&1 &&
    cmake --build "$tmp/b-cm" -j2 2>&1) && [ -f "$tmp/b-cm/libit_backend_vendorcm.so" ]; then
    ok "built with find_package(infinitrain) against the prefix"
else
    bad "the CMake build out of the tree" "$(printf '%s\n' "$out" | tail -20)"
fi

# pkg-config and a plain compiler
export PKG_CONFIG_PATH=$libdir/pkgconfig
mkdir -p "$tmp/b-pc"
if out=$(${CC:-cc} -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O1 -fPIC -shared -fvisibility=hidden \
    -o "$tmp/b-pc/libit_backend_vendorpc.so" "$tmp/src/vendorpc"/*.c $(pkg-config --cflags --libs infinitrain) -lpthread 2>&1); then
    ok "built with pkg-config --cflags --libs infinitrain"
else
    bad "the pkg-config build" "$out"
fi
expect "pkg-config names the plugin directory" "$(pkg-config --variable=plugindir infinitrain)" "^$prefix/.*infinitrain$|^.*/prefix/.*lib.*/infinitrain$"

# ---- loaded with IT_BACKEND_PATH
export IT_BACKEND_PATH=$tmp/b-cm:$tmp/b-pc
out=$("$prefix/bin/it-info" 2>&1)
expect "it-info loads the CMake-built plugin from IT_BACKEND_PATH" "$out" "^  vendorcm +loaded +$tmp/b-cm/libit_backend_vendorcm\.so$"
expect "it-info loads the pkg-config-built plugin from IT_BACKEND_PATH" "$out" "^  vendorpc +loaded +$tmp/b-pc/libit_backend_vendorpc\.so$"
out=$("$prefix/bin/it-conformance" --backend vendorcm --slot gemm 2>&1)
expect "the installed it-conformance passes the plugin's gemm" "$out" "^[1-9][0-9]* passed, 0 failed"
out=$("$prefix/bin/it-conformance" 2>&1)
rc=$?
[ $rc -eq 0 ] && ok "plain it-conformance over every plugin on the path passes (exit 0)" ||
    bad "plain it-conformance exit $rc" "$(printf '%s\n' "$out" | grep -E 'FAIL|passed|plugin' | head)"

flags=(--llmc_filepath "$src/tests/fixtures/gpt2/tiny_gpt2.bin" --input_bin "$src/tests/fixtures/gpt2/tiny_shard.bin"
    --batch_size 4 --sequence_length 32 --num_iteration 2)
"$prefix/bin/gpt2" --device cpu "${flags[@]}" --loss_log "$tmp/cpu.txt" >/dev/null 2>&1 || bad "training on cpu"
for dev in vendorcm vendorpc; do
    if "$prefix/bin/gpt2" --device $dev "${flags[@]}" --loss_log "$tmp/$dev.txt" >/dev/null 2>&1 &&
        cmp -s "$tmp/cpu.txt" "$tmp/$dev.txt"; then
        ok "gpt2 --device $dev: 2 steps with cpu's losses"
    else
        bad "gpt2 --device $dev" "$(paste "$tmp/cpu.txt" "$tmp/$dev.txt" 2>&1)"
    fi
done

checks_done out_of_tree.sh
