#!/usr/bin/env bash
# ctest numalab_rdma: boots tools/numalab --rxe once (soft-RoCE rxe0/rxe1 on a veth pair inside
# Debian's 6.1 kernel) and runs numalab_rdma_test there (every case). Exit status: the guest's.
# Like numalab_guest, the tools are installable, not hardware: missing, they fail the test under
# CI=true and skip it (exit 77) elsewhere.
# Usage: run_rdma.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?BUILD_DIR} src=${2:?SOURCE_DIR}

unavailable() {
  if [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; then
    echo "numalab_rdma: $1 (under CI this fails: tools/setup installs it)" >&2
    exit 1
  fi
  echo "skip: $1"
  exit 77
}
for tool in qemu-system-x86_64:qemu-system-x86 busybox:busybox-static depmod:kmod cpio:cpio \
  ip:iproute2 rdma:iproute2; do
  command -v "${tool%%:*}" >/dev/null || unavailable "${tool%%:*} not installed (package ${tool#*:}; tools/setup)"
done
ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 ||
  unavailable "no rxe libibverbs provider (package ibverbs-providers; tools/setup)"
[ -x "$build/tests/numalab/bpftrain-rdma-flow" ] ||
  unavailable "bpftrain-rdma-flow was not built (no libibverbs: package libibverbs-dev; tools/setup)"
NUMALAB_QUIET=1 "$src/tools/numalab" --build "$build" --fetch-only >/dev/null ||
  unavailable "cannot get Debian's 6.1 kernel package (apt-get download linux-image-6.1.0-N-amd64)"
exec "$src/tools/numalab" --build "$build" --rxe --timeout "${NUMALAB_TEST_TIMEOUT:-400}" \
  --add "$build/tests/numalab/numalab_rdma_test" --add "$build/tests/numalab/bpftrain-rdma-posts" \
  --add "$build/tests/numalab/bpftrain-rdma-flow" \
  -- numalab_rdma_test --gtest_color=no
