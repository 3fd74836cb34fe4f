#!/usr/bin/env bash
# The dashboards against a real Prometheus: Debian's prometheus, in a temporary directory, scrapes
# a collector (ports 0 and free ports on 127.0.0.1) with the shipped scrape config and rules
# while a 2-rank adaptive run trains (the bandit policy, which switches within seconds, so the
# controller's series exist). Then, through the HTTP API (/api/v1/query):
#  - every panel query and annotation of the four dashboards returns data over the run (a
#    non-NaN sample at some 1 s step, as the panel would draw it), except the panels named in
#    EXPECTED_EMPTY with why this machine cannot have it;
#  - every `by (job)` query shows the training job's name (prometheus.yml's honor_labels);
#  - every recording rule returns data and every rule evaluates without error;
#  - the dashboards' variable queries list the job, its two ranks and the collector;
#  - `promtool check metrics` finds nothing to lint in the collector's exposition.
# Needs root (the BPF probes feed the Host and Transport panels): skips without it, fails under CI.
set -euo pipefail -o errtrace
src=${BPFTRAIN_SOURCE_DIR:?}
build=${BPFTRAIN_BUILD_DIR:?}
skip=77
job=e2e-dash

for tool in prometheus promtool curl jq python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found: run tools/setup" >&2; exit 1; }
done
if [ "$(id -u)" != 0 ]; then
  [ "${CI:-}" = true ] && { echo "CI=true: this test needs root (BPF probes)" >&2; exit 1; }
  echo "skip: needs root for the collector's BPF probes"
  exit $skip
fi
collector_bin=$build/collector/app/bpftrain-collector
train_bin=$build/trainer/app/bpftrain-train
for b in "$collector_bin" "$train_bin"; do
  [ -x "$b" ] || { echo "$b missing: build bpftrain-collector and bpftrain-train" >&2; exit 1; }
done

# Panels this machine cannot fill, by "dashboard: title", with the reason. They are queried and
# reported, not failed, so that the test passes where the hardware exists too.
declare -A EXPECTED_EMPTY=(
  ["host.json: TLB misses/s per rank (PMU)"]="no hardware PMU here (probes dtlb_misses, itlb_misses down)"
  ["host.json: Remote-node loads share per rank (PMU)"]="no hardware PMU here (probes node_load_misses, node_loads down)"
  ["host.json: NUMA hinting faults/s by locality"]="no kprobes on this kernel (probe numa_hint_faults down); tools/numalab's 6.1 guest has them"
  ["host.json: NUMA fault locality per rank"]="one NUMA node, NUMA balancing off (probe numa_fault_locality down)"
  ["transport.json: Outstanding work requests p99"]="no RDMA device: no queue pair posts work requests"
  # Not hardware: this run's 2 ranks exchange the digits model's ~38 KB gradients over loopback,
  # which never leaves a sender with more queued than the path takes, so every delivery-rate
  # sample is application-limited and left out. netlab's 4-rank runs fill it (docs/probes.md).
  ["transport.json: Delivery rate p50 per rank and peer node"]="2 ranks on loopback with 38 KB gradients: every delivery-rate sample is application-limited"
)

tmp=$(mktemp -d /tmp/bpftrain-prom-e2e.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "failed at line $LINENO; logs:"; tail -n 20 "$tmp"/*.log 2>/dev/null' ERR

free_port() {  # a port nobody holds now on 127.0.0.1 (tcp or udp)
  python3 -c 'import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if sys.argv[1] == "udp" else socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' "$1"
}
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then echo "timed out after ${limit}s waiting for $what"; return 1; fi
    sleep 0.2
  done
}

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/secret"
chmod 600 "$tmp/secret"
control=127.0.0.1:$(free_port udp)
# Every probe this host has, thp_faults (off by default) included: each panel must show data.
"$collector_bin" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --enable-probe thp_faults \
  --control --policy bandit \
  --secret "$tmp/secret" --trainer "$control" --job "$job" >"$tmp/collector.out" 2>"$tmp/collector.log" &
pids+=($!)
wait_for 20 "the collector's ready line" grep -q listening "$tmp/collector.out"
line=$(grep listening "$tmp/collector.out")
udp=$(sed -E 's/.*udp=([0-9.:]+).*/\1/' <<<"$line")
metrics=$(sed -E 's/.*metrics=([0-9.:]+).*/\1/' <<<"$line")

# The shipped scrape config (honor_labels included) and rules, at 1 s intervals, on this collector.
sed -e "s/127.0.0.1:9471/$metrics/" -e 's/scrape_interval: 5s/scrape_interval: 1s/' \
  -e 's/evaluation_interval: 5s/evaluation_interval: 1s/' \
  -e "s|^  - bpftrain.rules.yml|  - $src/dashboards/prometheus/bpftrain.rules.yml|" \
  "$src/dashboards/prometheus/prometheus.yml" >"$tmp/prometheus.yml"
grep -q "honor_labels: true" "$tmp/prometheus.yml"
prom=""
for _ in 1 2 3; do  # a free port can be taken between the check and prometheus' bind: retry
  port=$(free_port tcp)
  prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
    --web.listen-address="127.0.0.1:$port" >"$tmp/prometheus.log" 2>&1 &
  ppid_=$!
  if wait_for 30 "prometheus ready" curl -sf "http://127.0.0.1:$port/-/ready"; then
    pids+=("$ppid_")
    prom=http://127.0.0.1:$port
    break
  fi
  kill "$ppid_" 2>/dev/null || true
  wait "$ppid_" 2>/dev/null || true
done
[ -n "$prom" ] || { echo "prometheus did not start:"; tail -n 20 "$tmp/prometheus.log"; exit 1; }

"$train_bin" --ranks 2 --adaptive --secret "$tmp/secret" --control "$control" --job "$job" \
  --collector "$udp" --steps 100000000 --eval-every 100000000 --duration 25 >"$tmp/train.log" 2>&1 &
train_pid=$!
pids+=("$train_pid")
run_start=$(date +%s)

query() {  # query PROMQL: the JSON answer of an instant query
  curl -sf --max-time 10 "$prom/api/v1/query" --data-urlencode "query=$1"
}
# query_range PROMQL: the answer over the run so far, as a panel shows it (1 s steps). A panel
# has data when any step has: a link class the ranks stop using after a switch (TCP under the
# hierarchical topology's shared-memory stage) still shows its earlier samples.
query_range() {
  curl -sf --max-time 10 "$prom/api/v1/query_range" --data-urlencode "query=$1" \
    --data-urlencode "start=$run_start" --data-urlencode "end=$(date +%s)" --data-urlencode step=1
}
has_data() {  # has_data PROMQL: at least one sample that is a number
  query "$1" | jq -e '.status == "success" and
    (.data.result | map(select(.value[1] != "NaN")) | length > 0)' >/dev/null
}
range_has_data() {  # range_has_data PROMQL: a number at some step of the run so far
  query_range "$1" | jq -e '.status == "success" and
    (.data.result | map(select(any(.values[]; .[1] != "NaN"))) | length > 0)' >/dev/null
}
# 10 s of both ranks' samples in Prometheus, a controller decision, and the 1m-rate rules filled.
wait_for 40 "10 s of both ranks' data" has_data \
  "count(count_over_time(bpftrain_step[1m]) >= 10) == 2"  # any job label: checked below
wait_for 25 "a controller decision" has_data "bpftrain_controller_decisions_total"
wait_for 10 "the recording rules" has_data "job:bpftrain_step_seconds:p99_rate1m"
# The decision-to-applied panel draws a rate, which a 1 s step of the range has only once a
# scrape after the series' first one saw it grow and a step fell after that scrape: waiting on
# the latest count (> 1) raced it (a rehearsal, 2026-12-07: the count read 1, 1, 2 at 15-17 s,
# and the check ran before a step held the rise).
wait_for 20 "decisions applied, as the panel draws them" range_has_data \
  "rate(bpftrain_controller_apply_seconds_hist_count[5m]) > 0"

fail=0
checked=0
empty_named=0
check_expr() {  # check_expr LABEL PROMQL
  local label=$1 expr=$2 answer
  expr=${expr//\$__rate_interval/10s}
  expr=${expr//\$__range/5m}
  expr=${expr//\$job/$job}
  expr=${expr//\$rank/.*}
  expr=${expr//\$instance/.*}
  checked=$((checked + 1))
  answer=$(query_range "$expr") || { echo "FAIL $label: query refused: $expr"; fail=1; return; }
  local n jobs_ok
  read -r n jobs_ok < <(jq -r --arg j "$job" '.data.result |
    "\(map(select(any(.values[]; .[1] != "NaN"))) | length) \(all(.metric.job == $j))"' <<<"$answer")
  if [ -n "${EXPECTED_EMPTY[$label]:-}" ]; then
    empty_named=$((empty_named + 1))
    echo "expected empty: $label: ${EXPECTED_EMPTY[$label]} (series with data here: $n)"
    return
  fi
  if [ "$n" -eq 0 ]; then
    echo "FAIL $label: no data: $expr"
    fail=1
    return
  fi
  if [[ $expr =~ by\ \(job[,\)] ]] && [ "$jobs_ok" != true ]; then
    echo "FAIL $label: by (job) shows $(jq -c '[.data.result[].metric.job] | unique' <<<"$answer"), not \"$job\""
    fail=1
  fi
}

for board in "$src"/dashboards/grafana/*.json; do
  name=$(basename "$board")
  while IFS=$'\t' read -r title expr; do
    check_expr "$name: $title" "$expr"
  done < <(jq -r '(.panels[] | select(.type != "row") | .title as $t | .targets[] | "\($t)\t\(.expr)"),
                  (.annotations.list[] | select(.expr) | "annotation \(.name)\t\(.expr)")' "$board")
done
for label in "${!EXPECTED_EMPTY[@]}"; do
  board=${label%%: *} title=${label#*: }
  jq -e --arg t "$title" 'any(.panels[]; .title == $t)' "$src/dashboards/grafana/$board" >/dev/null ||
    { echo "FAIL EXPECTED_EMPTY names \"$label\", which is no panel"; fail=1; }
done

while read -r rule; do
  check_expr "rule $rule" "$rule"
  if [[ $rule == job:* ]] &&
    ! query_range "$rule" | jq -e --arg j "$job" '.data.result | all(.metric.job == $j)' >/dev/null; then
    echo "FAIL rule $rule: its job label is not \"$job\""
    fail=1
  fi
done < <(sed -nE 's/^ *- record: *([^ ]+) *$/\1/p' "$src/dashboards/prometheus/bpftrain.rules.yml")
bad_rules=$(curl -sf "$prom/api/v1/rules" | jq -r '.data.groups[].rules[] | select(.health != "ok") |
  "\(.name): \(.health) \(.lastError)"')
[ -z "$bad_rules" ] || { echo "FAIL rules that do not evaluate: $bad_rules"; fail=1; }

# The dashboards' variables.
jobs=$(curl -sfG "$prom/api/v1/label/job/values" --data-urlencode 'match[]=bpftrain_step' | jq -c .data)
ranks=$(curl -sfG "$prom/api/v1/label/rank/values" --data-urlencode "match[]=bpftrain_step{job=\"$job\"}" | jq -c .data)
instances=$(curl -sfG "$prom/api/v1/label/instance/values" --data-urlencode 'match[]=up{job="bpftrain-collector"}' | jq -c .data)
[ "$jobs" = "[\"$job\"]" ] ||
  { echo "FAIL \$job lists $jobs, not \"$job\": the scrape config must keep the collector's job label (honor_labels)"; fail=1; }
[ "$ranks" = '["0","1"]' ] || { echo "FAIL \$rank lists $ranks"; fail=1; }
[ "$instances" = "[\"$metrics\"]" ] || { echo "FAIL \$instance lists $instances, not $metrics"; fail=1; }

# The exposition passes Prometheus' own lint.
curl -sf "http://$metrics/metrics" >"$tmp/exposition.txt"
if ! lint=$(promtool check metrics <"$tmp/exposition.txt" 2>&1) || [ -n "$lint" ]; then
  echo "FAIL promtool check metrics: $lint"
  fail=1
fi

rc=0
wait "$train_pid" || rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL bpftrain-train exited $rc"; tail -n 5 "$tmp/train.log"; fail=1; }
echo "$checked queries checked against Prometheus ($empty_named expected empty), $(grep -c 'switches' "$tmp/collector.log" || true) controller switches"
exit $fail
