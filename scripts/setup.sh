#!/usr/bin/env bash
# Install what building, testing and `make run` need, from Debian's packages.
#   scripts/setup.sh        everything (make test, make bench)
#   scripts/setup.sh run    what make run builds and runs: the compiler, CMake, the libraries
#                           the core links, and the King James Bible
# As root: installs missing packages with apt-get. Otherwise: prints the exact command
# to run and exits 1. Quiet when everything is already there.
set -euo pipefail

# command-or-file to check : Debian package
needs=(
  "cc:gcc"
  "cmake:cmake"
  "make:make"
  "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so:libopenblas-openmp-dev"
  "/usr/lib/bible.data:bible-kjv-text"
  "/usr/bin/bible:bible-kjv"
  "/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h:libopenmpi-dev"
  "/usr/include/jansson.h:libjansson-dev"
  "/usr/include/utf8proc.h:libutf8proc-dev"
  "/usr/include/zlib.h:zlib1g-dev"
)
if [[ ${1:-all} != run ]]; then
  needs+=(
    "clang:clang"
    "/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a:libclang-rt-14-dev"
    "valgrind:valgrind"
    "mpirun:openmpi-bin"
    "pkg-config:pkgconf"
    "clang-format:clang-format"
    "/usr/include/oneapi/dnnl/dnnl.h:libdnnl-dev"
    "ip:iproute2"
    "nft:nftables"
    "iptables:iptables"
    "/usr/include/libnetfilter_queue/libnetfilter_queue.h:libnetfilter-queue-dev"
  )
fi
# OpenMP comes with gcc (libgomp); the OpenBLAS and MPI paths are arch-specific. OpenMPI
# gives the CPU backend its collectives (mpirun -np N for data-parallel training).
# jansson reads and writes trainer_state.json; zlib's CRC-32 checks checkpoint files.
# utf8proc: Unicode NFC, which Qwen's tokenizer.json asks for before its BPE.
# libdnnl-dev: oneDNN's matmul for bf16 products on CPUs with bf16 units (sbgemm_onednn.c).
# clang-format: tests/e2e/format.sh checks the sources are as clang-format writes them.
# pkgconf: tests/e2e/out_of_tree.sh builds a plugin against an installed prefix with pkg-config.
# iproute2 (ip, tc), nftables, iptables and libnetfilter-queue-dev: tests/e2e/cluster.sh's hosts
# in network namespaces, and packet loss (nftables) and delay (iptables' NFQUEUE to
# tests/support/nfq_shaper) on their links where the kernel has no tc netem.
# libclang-rt-14-dev: libFuzzer for tests/fuzz (clang -fsanitize=fuzzer); valgrind: tests/e2e/valgrind.sh.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)

missing=()
for n in "${needs[@]}"; do
  what=${n%%:*} pkg=${n##*:}
  what=${what//x86_64-linux-gnu/$arch}
  if [[ $what == /* ]]; then
    [[ -e $what ]] || missing+=("$pkg")
  else
    command -v "$what" >/dev/null 2>&1 || missing+=("$pkg")
  fi
done
pkgs=$(printf '%s\n' "${missing[@]-}" | sed '/^$/d' | sort -u | tr '\n' ' ')
[[ -z ${pkgs// } ]] && exit 0

cmd="apt-get install -y --no-install-recommends $pkgs"
if [[ $(id -u) -ne 0 ]]; then
  echo "setup: missing packages: $pkgs" >&2
  echo "setup: run as root:  apt-get update && $cmd" >&2
  exit 1
fi
echo "setup: installing $pkgs"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
