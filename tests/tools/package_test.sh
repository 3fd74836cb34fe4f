#!/usr/bin/env bash
# The .deb (cmake/packaging.cmake): cpack builds it from the build dir, dpkg-deb lists the files,
# dpkg -i installs it on this machine, the unit passes systemd-analyze verify, the installed
# binaries run, and the unit's user with only the unit's capabilities attaches the same probes as
# root; dpkg --purge removes it all again (also on failure). Needs root for dpkg -i: exit 77
# (skip) without it outside CI, failure under CI=true.
set -euo pipefail -o errtrace
build=${BPFTRAIN_BUILD_DIR:?BPFTRAIN_BUILD_DIR: the build dir (ctest sets it)}
tmp=$(mktemp -d)
installed=0
cleanup() {
  if [ "$installed" = 1 ]; then dpkg --purge bpftrain >/dev/null 2>&1 || echo "cleanup: dpkg --purge bpftrain failed" >&2; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { if [ "${CI:-}" = true ]; then fail "under CI: $*"; fi; echo "skip: $*"; exit 77; }

for t in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$t" >/dev/null || fail "$t not found (tools/setup installs cmake and dpkg-dev)"
done
(cd "$build" && cpack -G DEB -B "$tmp/out" --config CPackConfig.cmake >"$tmp/cpack.log" 2>&1) ||
  { tail -20 "$tmp/cpack.log"; fail "cpack -G DEB failed"; }
deb=$(find "$tmp/out" -maxdepth 1 -name "bpftrain_*.deb" | head -1)
[ -n "$deb" ] || fail "cpack wrote no bpftrain_*.deb: $(ls "$tmp/out")"
echo "package: $(basename "$deb"), $(du -k "$deb" | cut -f1) KiB"

dpkg-deb -c "$deb" | awk '{print $6}' | sed 's#^\./#/#' >"$tmp/files"
for f in /usr/bin/bpftrain-collector /usr/bin/bpftrain-top /usr/bin/bpftrain-loadgen \
  /usr/lib/systemd/system/bpftrain-collector.service /usr/lib/sysusers.d/bpftrain.conf \
  /etc/bpftrain/collector.json /usr/share/doc/bpftrain/README.md \
  /usr/share/bpftrain/dashboards/prometheus/prometheus.yml; do
  grep -qx "$f" "$tmp/files" || fail "$f is not in the package"
done
grep -q '^/usr/share/bpftrain/dashboards/grafana/.*\.json$' "$tmp/files" || fail "no Grafana dashboard in the package"
for lib in libnccl-bpftrain.so libnccl-tuner-bpftrain.so libnccl-profiler-bpftrain.so; do
  grep -Eq "^/usr/lib/(.*/)?$lib\$" "$tmp/files" || fail "NCCL plugin $lib is not in the package"
done
if grep -E '_CPack_Packages|/usr/local/' "$tmp/files"; then fail "staging or /usr/local paths in the package"; fi
dpkg-deb -e "$deb" "$tmp/control"
grep -qx /etc/bpftrain/collector.json "$tmp/control/conffiles" || fail "collector.json is not a conffile"
grep -q '^Depends:.*libc6' "$tmp/control/control" || fail "no shlibs Depends: $(grep Depends "$tmp/control/control")"
dpkg-deb -x "$deb" "$tmp/root"
unit=$tmp/root/usr/lib/systemd/system/bpftrain-collector.service
grep -qx 'ExecStart=/usr/bin/bpftrain-collector --config /etc/bpftrain/collector.json' "$unit" || fail "unit ExecStart: $(grep ExecStart "$unit")"
grep -qx 'User=bpftrain' "$unit" || fail "the unit does not run as its own user"
echo "contents: $(wc -l <"$tmp/files") paths; binaries, unit, sysusers, conffile, README, dashboards"

[ "$(id -u)" = 0 ] || skip "dpkg -i needs root (the package was built and its contents checked)"
if dpkg-query -W -f='${Status}' bpftrain 2>/dev/null | grep -q installed; then
  fail "a bpftrain package is already installed on this machine; not touching it"
fi
installed=1
dpkg -i "$deb" >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg -i failed"; }
getent passwd bpftrain >/dev/null || fail "postinst did not create the bpftrain user"
/usr/bin/bpftrain-collector --list-metrics | grep -q '^| `bpftrain_step_seconds`' || fail "installed bpftrain-collector --list-metrics"
/usr/bin/bpftrain-top --version | grep -q '^bpftrain-top ' || fail "installed bpftrain-top --version"
/usr/bin/bpftrain-collector --config /etc/bpftrain/collector.json --help >/dev/null || fail "installed collector --help with the shipped config"
echo "installed: dpkg -i ok, user bpftrain created, binaries run"

if command -v systemd-analyze >/dev/null; then
  # verify also loads the units it names (network-online.target, multi-user.target).
  systemd-analyze verify /usr/lib/systemd/system/bpftrain-collector.service >"$tmp/verify.log" 2>&1 ||
    { cat "$tmp/verify.log"; fail "systemd-analyze verify"; }
  if grep -i 'bpftrain-collector.service' "$tmp/verify.log"; then fail "systemd-analyze verify warns about the unit"; fi
  echo "systemd-analyze verify: clean"
else
  [ "${CI:-}" = true ] && fail "systemd-analyze not found"
  echo "note: systemd-analyze absent, unit not verified"
fi

# The unit's capabilities are enough: as user bpftrain with exactly the unit's ambient set, the
# installed collector attaches the probes root attaches.
caps=$(sed -nE 's/^AmbientCapabilities=(.*)/\1/p' "$unit" | tr 'A-Z ' 'a-z,')
up() { awk '$2 == "up" {print $1}' | sort; }
/usr/bin/bpftrain-collector --list-probes | up >"$tmp/root-up"
command -v capsh >/dev/null || fail "capsh not found (libcap2-bin)"
capsh --inh="$caps" --keep=1 --user=bpftrain --addamb="$caps" -- \
  -c '/usr/bin/bpftrain-collector --list-probes' >"$tmp/user-probes" 2>&1 || true
up <"$tmp/user-probes" >"$tmp/user-up"
if ! cmp -s "$tmp/root-up" "$tmp/user-up"; then
  echo "root: $(paste -sd' ' "$tmp/root-up")"; cat "$tmp/user-probes"
  fail "probes up as root and as bpftrain with the unit's capabilities ($caps) differ"
fi
echo "capabilities ($caps): the same $(wc -l <"$tmp/user-up") probes up as with root"

dpkg --purge bpftrain >"$tmp/dpkg.log" 2>&1 || { cat "$tmp/dpkg.log"; fail "dpkg --purge"; }
installed=0
[ ! -e /usr/bin/bpftrain-collector ] || fail "dpkg --purge left /usr/bin/bpftrain-collector"
! getent passwd bpftrain >/dev/null || fail "dpkg --purge left the bpftrain user"
echo "ok"
