#!/usr/bin/env bash
# Checks the shipped Prometheus config, rules and Grafana dashboard: promtool accepts them, the
# dashboard is valid JSON, and every bpftrain_* metric they query is declared in the metric catalogue.
set -euo pipefail
src=${BPFTRAIN_SOURCE_DIR:?}
dash=$src/dashboards
for tool in promtool jq; do
  command -v "$tool" >/dev/null || { echo "$tool not found: run tools/setup" >&2; exit 1; }
done
promtool check config "$dash/prometheus/prometheus.yml"
promtool check rules "$dash/prometheus/bpftrain.rules.yml"
jq -e '.panels | length > 0' "$dash/grafana/bpftrain-overview.json" >/dev/null

# Every bpftrain_ metric a panel or rule queries must be in the metric catalogue, as the collector
# itself prints it (--list-metrics); summaries add _sum and _count, and their histograms
# (_hist) _bucket, _sum and _count. Recording rules' own names
# (level:metric:operation) are skipped: they are defined in the rules file.
collector=${BPFTRAIN_BUILD_DIR:?}/collector/app/bpftrain-collector
[ -x "$collector" ] || { echo "$collector missing: build first" >&2; exit 1; }
declared=$("$collector" --list-metrics | awk -F'|' 'NR > 2 {
  gsub(/[ `]/, "", $2); gsub(/ /, "", $3); print $2
  if ($3 ~ /^summary/) { print $2 "_sum"; print $2 "_count" }
  if ($3 ~ /histogram/) { print $2 "_hist_bucket"; print $2 "_hist_sum"; print $2 "_hist_count" } }')
[ -n "$declared" ] || { echo "bpftrain-collector --list-metrics printed nothing" >&2; exit 1; }
missing=0
for name in $(grep -ohE '(^|[^:a-z_])bpftrain_[a-z_]+($|[^:a-z_])' "$dash/grafana/bpftrain-overview.json" \
    "$dash/prometheus/bpftrain.rules.yml" | grep -oE 'bpftrain_[a-z_]+' | sort -u); do
  if ! grep -qxF "$name" <<<"$declared"; then
    echo "dashboards query $name, which common/metric_catalogue.h does not declare"
    missing=1
  fi
done
exit $missing
