#!/usr/bin/env bash
# A plugin whose backends/NAME/ source directory is gone is removed from the build root (the
# apps' plugin search path) at the next configure, so it is never loaded from a stale build:
# cmake/prune-stale-plugins.cmake on a build root holding plugins of present and absent
# backends; and this build's root holds only plugins whose sources exist (the test plugins
# live in BUILD/test-plugins).
# Usage: stale_plugin.sh BUILD_DIR SOURCE_DIR
set -u
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$src/tests/e2e/checks.bash"

mkdir -p "$tmp/src/backends/kept" "$tmp/src/backends/nolist" "$tmp/build"
touch "$tmp/src/backends/kept/CMakeLists.txt"
for n in kept nolist gone; do echo so >"$tmp/build/libit_backend_$n.so"; done
echo other >"$tmp/build/libinfinitrain.so"
out=$(cmake -DIT_BUILD_DIR="$tmp/build" -DIT_SOURCE_DIR="$tmp/src" -P "$src/cmake/prune-stale-plugins.cmake" 2>&1)
[ -e "$tmp/build/libit_backend_kept.so" ] && ok "a plugin whose backend exists is kept" || bad "a plugin whose backend exists was removed"
[ ! -e "$tmp/build/libit_backend_gone.so" ] && ok "a plugin whose backend is gone is removed" || bad "a plugin whose backend directory is gone was kept"
[ ! -e "$tmp/build/libit_backend_nolist.so" ] && ok "a directory without CMakeLists.txt is no backend" || bad "a plugin of a directory without CMakeLists.txt was kept"
[ -e "$tmp/build/libinfinitrain.so" ] && ok "the core library is kept" || bad "the core library was removed"
grep -q "backends/gone/ is gone" <<<"$out" && ok "the removal is said" || bad "no message names the removed plugin: $out"

for so in "$build"/libit_backend_*.so; do
  [ -e "$so" ] || continue
  name=$(basename "$so" .so)
  name=${name#libit_backend_}
  [ -f "$src/backends/$name/CMakeLists.txt" ] && ok "$name has its backends/ directory" || bad "$so: no backends/$name in the source tree"
done

checks_done stale_plugin.sh
