#!/usr/bin/env bash
# The MLU plugin on a machine without the Cambricon runtime: usage: bash mlu_absent.sh BUILD_DIR SOURCE_DIR
# it-info must list mlu as a discoverable, loaded plugin whose init failed with the one message
# naming the libraries and the paths searched; `--device mlu` must fail with that message.
set -u
build=$(cd "${1:?usage: mlu_absent.sh BUILD_DIR SOURCE_DIR}" && pwd) || exit 1
. "$(dirname "${BASH_SOURCE[0]}")/checks.bash"

if [ ! -f "$build/libit_backend_mlu.so" ]; then echo "FAIL - libit_backend_mlu.so not built"; exit 1; fi
if [ -n "${NEUWARE_HOME:-}" ] && [ -e "$NEUWARE_HOME/lib64/libcnrt.so" ] || ldconfig -p 2>/dev/null | grep -q libcnrt.so; then
    echo "skip - a Cambricon runtime is installed here"; exit 0
fi
out=$(env -u NEUWARE_HOME "$build/it-info" 2>&1)
expect "mlu is a loaded plugin" "$out" "^  mlu +loaded +.*libit_backend_mlu\.so$"
expect "mlu is registered with bf16 autocast and no devices" "$out" "^  mlu +[0-9]+ +bfloat16 +device +none "
expect "it-info shows why, naming the libraries and paths" "$out" \
    "^  mlu +- +- +no devices: .*Cambricon runtime not found: libcnrt\.so, libcnnl\.so .*searched in /usr/local/neuware/lib64 \(NEUWARE_HOME unset\) and on the library path"
out=$(NEUWARE_HOME=/opt/it-mlu-absent "$build/gpt2" --device mlu --input_bin /dev/null 2>&1); rc=$?
[ $rc -ne 0 ] && ok "--device mlu fails" || bad "--device mlu exits 0" "$out"
expect "--device mlu names NEUWARE_HOME's lib64" "$out" "searched in /opt/it-mlu-absent/lib64 \(NEUWARE_HOME\)"
expect "--device mlu names every library" "$out" "missing: libcnrt\.so, libcnnl\.so, libcncl\.so"
checks_done mlu_absent.sh
