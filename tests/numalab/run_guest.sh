#!/usr/bin/env bash
# ctest numalab_guest: boots tools/numalab once and runs, inside Debian's 6.1 kernel with two NUMA
# nodes, `bpftrain-collector --list-probes` and numalab_guest_test (every case). Exit status: the
# guest's. qemu, busybox-static and the kernel package are installable (tools/setup, apt), not
# hardware: missing, they fail the test under CI=true and skip it (exit 77) elsewhere.
# Usage: run_guest.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?BUILD_DIR} src=${2:?SOURCE_DIR}

unavailable() {
  if [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; then
    echo "numalab_guest: $1 (under CI this fails: tools/setup installs it)" >&2
    exit 1
  fi
  echo "skip: $1"
  exit 77
}
for tool in qemu-system-x86_64:qemu-system-x86 busybox:busybox-static depmod:kmod cpio:cpio; do
  command -v "${tool%%:*}" >/dev/null || unavailable "${tool%%:*} not installed (package ${tool#*:}; tools/setup)"
done
NUMALAB_QUIET=1 "$src/tools/numalab" --build "$build" --fetch-only >/dev/null ||
  unavailable "cannot get Debian's 6.1 kernel package (apt-get download linux-image-6.1.0-N-amd64)"
exec "$src/tools/numalab" --build "$build" --timeout "${NUMALAB_TEST_TIMEOUT:-540}" -- \
  sh -c 'bpftrain-collector --list-probes && numalab_guest_test --gtest_color=no'
