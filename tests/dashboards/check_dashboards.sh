#!/usr/bin/env bash
# Checks the shipped Prometheus config, rules and Grafana dashboard: promtool accepts them, the
# dashboard is valid JSON, and every bpftrain_* metric they query is one the code emits.
set -euo pipefail
src=${BPFTRAIN_SOURCE_DIR:?}
dash=$src/dashboards
for tool in promtool jq; do
  command -v "$tool" >/dev/null || { echo "$tool not found: run tools/setup" >&2; exit 1; }
done
promtool check config "$dash/prometheus/prometheus.yml"
promtool check rules "$dash/prometheus/bpftrain.rules.yml"
jq -e '.panels | length > 0' "$dash/grafana/bpftrain-overview.json" >/dev/null

missing=0
for name in $(grep -ohE 'bpftrain_[a-z_]+' "$dash/grafana/bpftrain-overview.json" "$dash/prometheus/bpftrain.rules.yml" | sort -u); do
  base=$name
  for suffix in _total _sum _count; do base=${base%"$suffix"}; done
  # Binary metric names live without their prefix in common/wire_format.cc.
  if ! grep -rqE "\"(${name}|${base}|${base#bpftrain_})\"" "$src/collector" "$src/bpf" "$src/common" "$src/trainer" 2>/dev/null; then
    echo "dashboards query $name but no code emits \"$base\""
    missing=1
  fi
done
exit $missing
