#!/usr/bin/env python3
"""Writes bpftrain's Grafana dashboards (job.json, host.json, transport.json, collector.json).

The dashboards are data; this script is where they are edited, so that the four share one set of
variables, links and panel conventions. `build.py` rewrites the JSON next to it; `build.py --check`
exits 1 when the committed JSON differs from what it would write (tests/dashboards runs it).

Conventions: every query selects the training job with job=~"$job" and ranks with rank=~"$rank"
(prometheus.yml keeps the collector's `job` label: honor_labels), collector series with
instance=~"$instance"; no instance is hard-coded. Cross-rank and cross-host quantiles come from the
`_hist` histograms (histogram_quantile over sum by (le)); a rank's own window quantiles from the
summaries. Every dashboard links to the others (tag bpftrain) with the variables and time range.
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
J = 'job=~"$job"'
JR = 'job=~"$job", rank=~"$rank"'
I = 'instance=~"$instance"'
RI = "$__rate_interval"


def hq(q, metric, by, sel, window=RI):
    """A quantile across every series in `by` from a _hist histogram."""
    return (f"histogram_quantile({q}, sum by ({by}, le) "
            f"(rate({metric}_hist_bucket{{{sel}}}[{window}])))")


def target(expr, legend="", ref=None, instant=False):
    t = {"datasource": DS, "expr": expr, "legendFormat": legend or "__auto", "refId": ref}
    if instant:
        t.update({"instant": True, "range": False, "format": "table"})
    return t


class Board:
    def __init__(self, uid, title, description, variables):
        self.uid, self.title, self.description = uid, title, description
        self.variables = variables
        self.panels = []
        self.y = 0
        self.x = 0
        self.row_h = 0
        self.annotations = []

    def row(self, title):
        self._newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False, "panels": [],
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                            "id": len(self.panels) + 1})
        self.y += 1

    def _newline(self):
        if self.x:
            self.y += self.row_h
            self.x, self.row_h = 0, 0

    def panel(self, title, description, targets, unit="short", kind="timeseries", w=12, h=8,
              **extra):
        if self.x + w > 24:
            self._newline()
        refs = iter("ABCDEFGH")
        for t in targets:
            t["refId"] = next(refs)
        p = {"type": kind, "title": title, "description": description, "datasource": DS,
             "targets": targets, "id": len(self.panels) + 1,
             "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
             "options": {"legend": {"displayMode": "table", "placement": "bottom",
                                    "calcs": ["lastNotNull", "max"]},
                         "tooltip": {"mode": "multi", "sort": "desc"}}}
        if kind == "timeseries":
            p["fieldConfig"]["defaults"]["custom"] = {"lineWidth": 1, "fillOpacity": 0,
                                                      "showPoints": "never"}
        if kind == "state-timeline":
            p["options"] = {"showValue": "never", "mergeValues": True, "rowHeight": 0.8}
        if kind == "table":
            p["options"] = {"showHeader": True}
            p["transformations"] = [{"id": "merge", "options": {}}]
        p.update(extra)
        self.panels.append(p)
        self.x += w
        self.row_h = max(self.row_h, h)

    def annotation(self, name, expr, title, text, color):
        self.annotations.append({"name": name, "datasource": DS, "enable": True,
                                 "iconColor": color, "expr": expr, "step": "5s",
                                 "titleFormat": title, "textFormat": text,
                                 "useValueForTime": False})

    def json(self):
        builtin = {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                   "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                   "name": "Annotations & Alerts", "type": "dashboard"}
        return {
            "uid": self.uid, "title": self.title, "description": self.description,
            "tags": ["bpftrain"], "schemaVersion": 38, "version": 1, "editable": True,
            "refresh": "10s", "time": {"from": "now-30m", "to": "now"},
            "timezone": "browser", "graphTooltip": 1,
            "links": [{"type": "dashboards", "tags": ["bpftrain"], "asDropdown": False,
                       "includeVars": True, "keepTime": True, "title": "bpftrain",
                       "icon": "external link", "targetBlank": False}],
            "annotations": {"list": [builtin] + self.annotations},
            "templating": {"list": self.variables},
            "panels": self.panels,
        }


def datasource_var():
    return {"name": "datasource", "label": "Prometheus", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": ""}


def query_var(name, label, query, multi=True, include_all=False):
    v = {"name": name, "label": label, "type": "query", "datasource": DS,
         "definition": query, "query": {"query": query, "refId": name}, "refresh": 2,
         "sort": 3 if name == "rank" else 1, "multi": multi, "includeAll": include_all,
         "current": {}, "hide": 0, "regex": ""}
    if include_all:
        v["allValue"] = ".*"
    return v


JOB_VARS = [datasource_var(),
            query_var("job", "training job", "label_values(bpftrain_step, job)"),
            query_var("rank", "rank", 'label_values(bpftrain_step{job=~"$job"}, rank)',
                      include_all=True)]
COLLECTOR_VARS = [datasource_var(),
                  query_var("instance", "collector",
                            'label_values(up{job="bpftrain-collector"}, instance)',
                            include_all=True)]


def job_board():
    b = Board("bpftrain-job", "bpftrain / Job",
              "One training job: throughput, step time per rank, allreduce, topology and "
              "pinning with the controller's decisions", JOB_VARS)
    # The controller's decisions, on the collectors that serve this job's ranks. A decision
    # series appears at 1, which increase() cannot see, so a new series counts as a decision too.
    decisions = "bpftrain_controller_decisions_total"
    b.annotation("controller decisions",
                 f"sum by (instance, from, to, reason) (({decisions} - {decisions} offset 15s) > 0 "
                 f"or ({decisions} unless {decisions} offset 15s)) "
                 f"and on (instance) count by (instance) (bpftrain_step{{{J}}})",
                 "{{from}} -> {{to}}", "{{reason}} ({{instance}})", "orange")
    b.row("Throughput and step time")
    b.panel("Samples/s", "Training samples per second, the sum over the job's ranks",
            [target(f"sum by (job) (bpftrain_samples_per_second{{{J}}})", "{{job}}")],
            unit="short")
    b.panel("Samples/s per rank", "A rank below the others is a straggler or waits for one",
            [target(f"bpftrain_samples_per_second{{{JR}}}", "rank {{rank}}")])
    b.panel("Step time p50 / p99 across ranks",
            "Quantiles over every step of every selected rank (the _hist buckets summed)",
            [target(hq(0.5, "bpftrain_step_seconds", "job", JR), "{{job}} p50"),
             target(hq(0.99, "bpftrain_step_seconds", "job", JR), "{{job}} p99")], unit="s")
    b.panel("Step time p99 per rank",
            "Each rank's p99 (histogram, over the rate interval): a straggler stands out",
            [target(hq(0.99, "bpftrain_step_seconds", "rank", JR), "rank {{rank}}")], unit="s")
    b.panel("Step time window quantiles per rank",
            "The collector's sliding-window p50/p99 of each rank (summary; exact within 1%)",
            [target(f'max by (rank) (bpftrain_step_seconds{{{JR}, quantile="0.5"}})',
                    "rank {{rank}} p50"),
             target(f'max by (rank) (bpftrain_step_seconds{{{JR}, quantile="0.99"}})',
                    "rank {{rank}} p99")], unit="s")
    b.panel("Training loss per rank", "Loss of each rank's last step",
            [target(f"bpftrain_loss{{{JR}}}", "rank {{rank}}")])
    b.row("Allreduce")
    b.panel("Allreduce share of step time",
            "Time in the gradient allreduce over step time (0.7 and above: communication bound)",
            [target(f"sum by (job) (rate(bpftrain_allreduce_seconds_hist_sum{{{JR}}}[{RI}])) / "
                    f"clamp_min(sum by (job) (rate(bpftrain_step_seconds_hist_sum{{{JR}}}"
                    f"[{RI}])), 1e-9)", "{{job}}")], unit="percentunit")
    b.panel("Allreduce time p50 / p99 across ranks", "From the allreduce _hist buckets",
            [target(hq(0.5, "bpftrain_allreduce_seconds", "job", JR), "{{job}} p50"),
             target(hq(0.99, "bpftrain_allreduce_seconds", "job", JR), "{{job}} p99")],
            unit="s")
    b.panel("Bus bandwidth by topology",
            "Allreduce bus bandwidth (nccl-tests convention), ranks averaged, under the topology "
            "each rank ran at the time",
            [target(f"avg by (job, topology) (bpftrain_allreduce_busbw_bytes_per_second{{{JR}}} "
                    f"* on (job, rank) group_left (topology) "
                    f"(bpftrain_topology_info{{{JR}}} == 1))", "{{topology}}")], unit="Bps")
    b.panel("Allreduce bytes/s per rank", "Gradient bytes each rank allreduced per second",
            [target(f"rate(bpftrain_allreduce_bytes_total{{{JR}}}[{RI}])", "rank {{rank}}")],
            unit="Bps")
    b.row("Configuration and controller")
    b.panel("Topology", "The allreduce topology the job's ranks run (controller decisions are "
            "annotations)",
            [target(f"max by (topology) (bpftrain_topology_info{{{J}}}) == 1", "{{topology}}")],
            kind="state-timeline", w=12, h=5)
    b.panel("Pinning", "The CPU/memory pinning mode the job's ranks run",
            [target(f"max by (mode) (bpftrain_pinning_info{{{J}}}) == 1", "{{mode}}")],
            kind="state-timeline", w=12, h=5)
    b.panel("Diagnosis", "What the controller finds slows the job now: cause, rank (-1: the "
            "job) and link; none when nothing does (docs/controller.md)",
            [target(f"max by (cause, rank, link) (bpftrain_diagnosis_info{{{J}}}) == 1",
                    "{{cause}} rank {{rank}} {{link}}")], kind="state-timeline", w=24, h=5)
    b.panel("Config epoch per rank",
            "Epoch of the decision each rank applied; ranks that disagree are mid-switch",
            [target(f"bpftrain_config_epoch{{{JR}}}", "rank {{rank}}")])
    b.panel("Controller decisions",
            "Switches since the collector started, by from, to and reason, on the collectors "
            "that serve the job",
            [target("sum by (from, to, reason) (bpftrain_controller_decisions_total "
                    f"and on (instance) count by (instance) (bpftrain_step{{{J}}}))",
                    instant=True)], kind="table")
    return b


def host_board():
    b = Board("bpftrain-host", "bpftrain / Host",
              "Kernel signals of a job's ranks from the collector's BPF probes: migrations, NUMA, "
              "TLB, page faults, huge pages", JOB_VARS)

    def rate_by(metric, by, sel=JR):
        return f"sum by ({by}) (rate({metric}{{{sel}}}[{RI}]))"

    b.row("Scheduler")
    b.panel("Task migrations/s by scope",
            "Migrations of the ranks' threads: cpu (any), llc (another cache), node (another "
            "NUMA node)", [target(rate_by("bpftrain_migrations_total", "scope"), "{{scope}}")])
    b.panel("Node migrations/s per rank", "Threads moved to another NUMA node",
            [target(rate_by("bpftrain_migrations_total", "rank",
                            JR + ', scope="node"'), "rank {{rank}}")])
    b.panel("NUMA task moves/s by kind", "NUMA balancing moving the ranks' tasks (move, swap, "
            "stick)", [target(rate_by("bpftrain_numa_task_moves_total", "kind"), "{{kind}}")])
    b.panel("Page migrations/s by reason",
            "Pages migrated for the ranks (numa_misplaced: memory chasing its tasks)",
            [target(rate_by("bpftrain_page_migrations_total", "reason"), "{{reason}}")])
    b.row("TLB")
    b.panel("TLB flushes/s by reason", "Flushes and shootdowns on the ranks' CPUs",
            [target(rate_by("bpftrain_tlb_flushes_total", "reason"), "{{reason}}")])
    b.panel("TLB misses/s per rank (PMU)",
            "Sampled dTLB and iTLB read misses; only where a hardware PMU exists",
            [target(rate_by("bpftrain_dtlb_misses_total", "rank"), "rank {{rank}} dTLB"),
             target(rate_by("bpftrain_itlb_misses_total", "rank"), "rank {{rank}} iTLB")])
    b.row("Cross-node memory")
    b.panel("Remote-node loads share per rank (PMU)",
            "Sampled loads served by another NUMA node over all node loads; hardware PMU only",
            [target(f"{rate_by('bpftrain_node_load_misses_total', 'rank')} / clamp_min("
                    f"{rate_by('bpftrain_node_loads_total', 'rank')}, 1e-9)", "rank {{rank}}")],
            unit="percentunit")
    b.panel("NUMA hinting faults/s by locality",
            "Hinting faults on local or remote memory (kprobes needed)",
            [target(rate_by("bpftrain_numa_hint_faults_total", "locality"), "{{locality}}")])
    b.panel("NUMA fault locality per rank",
            "Share of a rank's recent hinting faults on its own node (1 = all local); wherever "
            "NUMA balancing runs",
            [target(f"bpftrain_numa_fault_locality{{{JR}}}", "rank {{rank}}")],
            unit="percentunit")
    b.row("Faults and huge pages")
    b.panel("Page faults/s per rank", "User page faults of each rank",
            [target(rate_by("bpftrain_page_faults_total", "rank"), "rank {{rank}}")])
    b.panel("THP faults/s per rank",
            "Huge-page allocations on the ranks' faults (thp_faults is off by default: "
            "bpftrain-collector --enable-probe thp_faults; it runs on every page allocation)",
            [target(rate_by("bpftrain_thp_faults_total", "rank"), "rank {{rank}}")])
    b.panel("THP-backed model memory per rank",
            "Model and gradient memory backed by transparent huge pages",
            [target(f"bpftrain_anon_hugepages_bytes{{{JR}}}", "rank {{rank}}")], unit="bytes")
    return b


def transport_board():
    b = Board("bpftrain-transport", "bpftrain / Transport",
              "The gradient path: TCP queue, in-flight bytes, RTT and retransmits per link class "
              "(same_host, other_host); RDMA work requests", JOB_VARS)
    tcp = JR + ', transport="tcp"'
    b.row("TCP")
    b.panel("Queued bytes p99 by link",
            "Bytes queued and unacknowledged (write_seq - snd_una), across the selected ranks",
            [target(hq(0.99, "bpftrain_transport_queued_bytes", "link", tcp), "{{link}}")],
            unit="bytes")
    b.panel("Queued bytes window p99 per rank",
            "Each rank's sliding-window p99 (summary), per link",
            [target(f'max by (rank, link) (bpftrain_transport_queued_bytes{{{tcp}, '
                    f'quantile="0.99"}})', "rank {{rank}} {{link}}")], unit="bytes")
    b.panel("In-flight bytes p99 by link",
            "Sent and not yet acknowledged (snd_nxt - snd_una); falls when the receiver is slow",
            [target(hq(0.99, "bpftrain_transport_inflight_bytes", "link", tcp), "{{link}}")],
            unit="bytes")
    b.panel("RTT p50 / p99 by link", "Smoothed RTT of the ranks' TCP connections",
            [target(hq(0.5, "bpftrain_transport_rtt_seconds", "link", tcp), "{{link}} p50"),
             target(hq(0.99, "bpftrain_transport_rtt_seconds", "link", tcp), "{{link}} p99")],
            unit="s")
    b.panel("RTT window p99 per rank and peer node",
            "Each rank's sliding-window p99 RTT (summary) to each peer node: the link that is slow",
            [target(f'max by (rank, link, peer_node) (bpftrain_transport_rtt_seconds{{{tcp}, '
                    f'quantile="0.99"}})', "rank {{rank}} {{link}} node {{peer_node}}")],
            unit="s")
    b.panel("Retransmits/s per rank", "Retransmitted segments",
            [target(f"sum by (rank) (rate(bpftrain_transport_retransmits_total{{{tcp}}}"
                    f"[{RI}]))", "rank {{rank}}")])
    b.panel("Transport samples/s per rank", "Socket samples the tcp probe took",
            [target(f"sum by (rank) (rate(bpftrain_transport_samples_total{{{tcp}}}[{RI}]))",
                    "rank {{rank}}")])
    b.panel("Delivery rate p50 per rank and peer node",
            "What each rank's connections carried while the sender had data (the kernel's "
            "delivery-rate samples, application-limited ones left out): a throttled link lowers "
            "it where BBR keeps its RTT flat",
            [target(f'8 * min by (rank, link, peer_node) '
                    f'(bpftrain_transport_delivery_rate_bytes_per_second{{{tcp}, '
                    f'quantile="0.5"}})', "rank {{rank}} {{link}} node {{peer_node}}")],
            unit="bps")
    b.row("RDMA")
    rdma = JR + ', transport="rdma"'
    b.panel("Outstanding work requests p99",
            "RDMA work requests posted and not completed, across the selected ranks",
            [target(hq(0.99, "bpftrain_transport_outstanding_work_requests", "job", rdma),
                    "{{job}}")])
    b.panel("QP work requests/s by event", "Work requests posted and completed",
            [target(f"sum by (event) (rate(bpftrain_rdma_qp_events_total{{{JR}}}[{RI}]))",
                    "{{event}}")])
    return b


def collector_board():
    b = Board("bpftrain-collector", "bpftrain / Collector",
              "The collectors themselves: ingest, loss, errors, series, probes and their cost, "
              "the controller's delivery", COLLECTOR_VARS)
    c = 'job="bpftrain-collector", ' + I

    def rate_by(metric, by, sel=c):
        return f"sum by ({by}) (rate({metric}{{{sel}}}[{RI}]))"

    b.row("Ingest")
    b.panel("Collector up", "1 while Prometheus scrapes the collector",
            [target(f"up{{{c}}}", "{{instance}}")], kind="state-timeline", w=24, h=4)
    b.panel("Samples/s by protocol", "Accepted samples: binary records and StatsD lines",
            [target(rate_by("bpftrain_collector_samples_total", "instance, protocol"),
                    "{{instance}} {{protocol}}")])
    b.panel("Datagrams/s and bytes/s", "UDP datagrams and payload bytes received",
            [target(rate_by("bpftrain_collector_datagrams_total", "instance"),
                    "{{instance}} datagrams"),
             target(rate_by("bpftrain_collector_received_bytes_total", "instance"),
                    "{{instance}} bytes")])
    b.panel("Frames lost (share of frames)",
            "Sequence gaps from senders over frames received; the alert fires above 0.1%",
            [target(f"instance:bpftrain_collector_frames_lost:ratio_rate5m{{{I}}}",
                    "{{instance}}")], unit="percentunit")
    b.panel("Kernel drops/s", "Datagrams the kernel dropped: an ingest socket buffer was full",
            [target(rate_by("bpftrain_collector_kernel_drops_total", "instance"),
                    "{{instance}}")])
    b.panel("Decode errors/s by reason", "Datagrams, frames or lines rejected as malformed",
            [target(rate_by("bpftrain_collector_decode_errors_total", "reason"), "{{reason}}")])
    b.panel("Dropped samples/s by reason", "Well-formed samples not stored",
            [target(rate_by("bpftrain_collector_dropped_total", "reason"), "{{reason}}")])
    b.panel("StatsD input ignored/s by reason",
            "Understood and not stored: DogStatsD events and service checks, value-less tags",
            [target(rate_by("bpftrain_collector_statsd_ignored_total", "reason"), "{{reason}}")])
    b.row("Series and windows")
    b.panel("Series and limit", "Series in the window store against --max-series",
            [target(f"bpftrain_collector_series{{{c}}}", "{{instance}} series"),
             target(f"bpftrain_collector_series_limit{{{c}}}", "{{instance}} limit")])
    b.panel("Series rejected, late samples, step overruns /s",
            "Refused series, samples for evicted steps, window steps that overran",
            [target(rate_by("bpftrain_collector_series_rejected_total", "instance"),
                    "{{instance}} rejected"),
             target(rate_by("bpftrain_collector_late_samples_total", "instance"),
                    "{{instance}} late"),
             target(rate_by("bpftrain_collector_step_overruns_total", "instance"),
                    "{{instance}} overruns")])
    b.panel("Window memory", "Bytes the window store allocated",
            [target(f"bpftrain_collector_window_memory_bytes{{{c}}}", "{{instance}}")],
            unit="bytes")
    b.panel("Senders", "Senders known from hello frames",
            [target(f"bpftrain_collector_senders{{{c}}}", "{{instance}}")])
    b.row("Probes")
    b.panel("Probes up", "1 attached, 0 down: bpftrain-collector --list-probes says why",
            [target(f"bpftrain_probe_up{{{c}}}", "{{probe}}")], kind="state-timeline",
            w=24, h=9)
    b.panel("Probe run time per run", "CPU time per BPF program run: the probes' cost per event",
            [target(f"{rate_by('bpftrain_probe_run_seconds_total', 'probe')} / clamp_min("
                    f"{rate_by('bpftrain_probe_runs_total', 'probe')}, 1e-9)", "{{probe}}")],
            unit="s")
    b.panel("Probe CPU share", "CPU seconds per second the probes' programs ran",
            [target(rate_by("bpftrain_probe_run_seconds_total", "probe"), "{{probe}}")],
            unit="percentunit")
    b.panel("Probe events lost/s", "Events a probe could not deliver (ring buffer full)",
            [target(rate_by("bpftrain_probe_events_lost_total", "probe"), "{{probe}}")])
    b.row("Controller")
    b.panel("Control frames/s by result", "Control frames sent to rank 0",
            [target(rate_by("bpftrain_controller_sends_total", "instance, result"),
                    "{{instance}} {{result}}")])
    # Decisions are rare: quantiles over 5 minutes of them, whatever the zoom.
    b.panel("Decision to applied, p50 / p99 (5m)",
            "From a decision to every rank reporting its epoch, over the decisions of the last "
            "5 minutes (the apply _hist buckets)",
            [target(hq(0.5, "bpftrain_controller_apply_seconds", "instance", c, "5m"),
                    "{{instance}} p50"),
             target(hq(0.99, "bpftrain_controller_apply_seconds", "instance", c, "5m"),
                    "{{instance}} p99")], unit="s")
    return b


BOARDS = {"job.json": job_board, "host.json": host_board,
          "transport.json": transport_board, "collector.json": collector_board}


def render(make):
    return json.dumps(make().json(), indent=2, sort_keys=False) + "\n"


def main():
    check = sys.argv[1:] == ["--check"]
    stale = []
    for name, make in BOARDS.items():
        path = HERE / name
        text = render(make)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("dashboards/grafana: " + ", ".join(stale) + " differ from build.py's output: "
              "run dashboards/grafana/build.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
