#!/usr/bin/env bash
# Checks the shipped Prometheus config, rules and Grafana dashboards without a server: promtool
# accepts the config and rules, the dashboards are what dashboards/grafana/build.py writes, every
# panel and annotation query parses as PromQL, selects the job or collector through the
# dashboard's variables (no hard-coded instance), and every bpftrain_* metric they query is
# declared in the metric catalogue. (tests/dashboards/prometheus_e2e_test.sh runs them all against
# a real Prometheus.)
set -euo pipefail
src=${BPFTRAIN_SOURCE_DIR:?}
dash=$src/dashboards
for tool in promtool jq python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found: run tools/setup" >&2; exit 1; }
done
promtool check config "$dash/prometheus/prometheus.yml" >/dev/null
promtool check rules "$dash/prometheus/bpftrain.rules.yml" >/dev/null
python3 "$dash/grafana/build.py" --check

boards=("$dash"/grafana/*.json)
[ "${#boards[@]}" -eq 4 ] || { echo "expected 4 dashboards, found ${boards[*]}" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for board in "${boards[@]}"; do
  name=$(basename "$board")
  jq -e '(.panels | map(select(.type != "row")) | length > 0)
         and all(.panels[] | select(.type != "row"); (.targets | length > 0)
                 and all(.targets[]; .expr | length > 0))
         and (.links | any(.type == "dashboards" and .includeVars and .keepTime))' \
    "$board" >/dev/null || { echo "$name: a panel without queries, or no links to the others"; fail=1; }
  # Job, Host and Transport select the training job; Collector the collector instance.
  var=job
  [ "$name" = collector.json ] && var=instance
  jq -e --arg v "$var" '.templating.list | any(.name == $v)' "$board" >/dev/null ||
    { echo "$name: no \$$var variable"; fail=1; }
  jq -r '(.panels[] | select(.type != "row") | .title as $t | .targets[] | "\($t)\t\(.expr)"),
         (.annotations.list[] | select(.expr) | "annotation \(.name)\t\(.expr)")' "$board" \
    >"$tmp/$name.tsv"
  while IFS=$'\t' read -r title expr; do
    grep -qF "\$$var" <<<"$expr" || { echo "$name: \"$title\" does not select \$$var: $expr"; fail=1; }
    if grep -qE 'instance=~?"[^$]' <<<"$expr"; then
      echo "$name: \"$title\" hard-codes an instance: $expr"; fail=1
    fi
  done <"$tmp/$name.tsv"
done

# Every query parses: promtool checks them as recording rules, variables substituted as Grafana
# would ($__rate_interval: 4 scrape intervals at least).
{
  echo "groups:"
  echo "  - name: dashboards"
  echo "    rules:"
  i=0
  cat "$tmp"/*.tsv | while IFS=$'\t' read -r _ expr; do
    i=$((i + 1))
    expr=${expr//\$__rate_interval/1m}
    expr=${expr//\$__range/1h}
    expr=${expr//\$job/.*}
    expr=${expr//\$rank/.*}
    expr=${expr//\$instance/.*}
    echo "      - record: dashboard_query_$i"
    echo "        expr: $(jq -Rn --arg e "$expr" '$e')"
  done
} >"$tmp/queries.yml"
promtool check rules "$tmp/queries.yml" >/dev/null || { echo "a dashboard query does not parse (above)"; fail=1; }

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
for name in $(grep -ohE '(^|[^:a-z_])bpftrain_[a-z_]+($|[^:a-z_])' "${boards[@]}" \
    "$dash/prometheus/bpftrain.rules.yml" | grep -oE 'bpftrain_[a-z_]+' | sort -u); do
  if ! grep -qxF "$name" <<<"$declared"; then
    echo "dashboards query $name, which common/metric_catalogue.h does not declare"
    fail=1
  fi
done
# Recording rules the dashboards use must exist.
for rule in $(grep -ohE '[a-z_]+:bpftrain_[a-z_]+:[a-z0-9_]+' "${boards[@]}" | sort -u); do
  grep -qE "record: $rule\$" "$dash/prometheus/bpftrain.rules.yml" ||
    { echo "dashboards use recording rule $rule, which bpftrain.rules.yml does not define"; fail=1; }
done
exit $fail
