// Every metric bpftrain emits, declared once: name, kind, unit, labels, where it comes from and
// what it means. The loader, the dispatcher, the exporter's HELP text, the controller's features
// and the README's metrics table all read this list; a test fails when the README disagrees.
//
// Names are the stored names: counters carry no `_total` (the exporter adds it, see
// promName()). A metric that is not here is a user's own (StatsD) and gets a generic HELP.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace bpftrain::metrics {

enum class Kind : uint8_t {
  kCounter,       // exported as a Prometheus counter, `_total` appended
  kGauge,         // last value
  kDistribution,  // sliding-window quantiles, sum and count (a Prometheus summary); with bucket
                  // bounds also a cumulative Prometheus histogram, `<name>_hist`
};

struct MetricDef {
  std::string_view name;  // stored name, e.g. "bpftrain_migrations"
  Kind kind;
  std::string_view unit;    // what one unit of the value is: "seconds", "bytes", "migrations" ...
  std::string_view labels;  // every label name, space separated, in the order series carry them
  std::string_view source;  // what produces it: "trainer", a tracepoint, "collector" ...
  std::string_view help;    // what it means for training; the exporter's HELP text
  // Distributions only: the upper bounds (ascending, +Inf implied) of the `<name>_hist`
  // buckets, so that PromQL can aggregate quantiles across ranks and hosts
  // (histogram_quantile over sum by (le)); empty: a summary only.
  std::span<const double> buckets = {};
};

// Histogram bucket bounds, chosen per metric for the range it takes.
// Step and allreduce times: 1-2-5 from 100 us (a small model's allreduce on one host) to 60 s.
inline constexpr double kStepSecondsBuckets[] = {
    1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 60};
// TCP smoothed RTT: 1-2-5 from 10 us (loopback, veth) to 1 s (a congested WAN path).
inline constexpr double kRttSecondsBuckets[] = {1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3,
                                                5e-3, 0.01, 0.02, 0.05, 0.1,  0.2,  0.5,  1};
// Socket bytes: 0 (idle), then powers of 4 from 1 KiB to 64 MiB (a full tcp_wmem).
inline constexpr double kSocketBytesBuckets[] = {0,      1024,    4096,    16384,    65536,
                                                 262144, 1048576, 4194304, 16777216, 67108864};
// TCP delivery rate: 1-2-5 from 1 MB/s to 100 GB/s (a slow WAN path to loopback at full speed).
inline constexpr double kDeliveryRateBuckets[] = {1e6, 2e6, 5e6, 1e7, 2e7,  5e7,  1e8,  2e8,
                                                  5e8, 1e9, 2e9, 5e9, 1e10, 2e10, 5e10, 1e11};
// RDMA work requests outstanding: 0, then powers of 2 to 1024 (a deep send queue).
inline constexpr double kWorkRequestBuckets[] = {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
// Controller decision to every rank applying it: 1-2-5 from 10 ms (one fast step) to 50 s.
inline constexpr double kApplySecondsBuckets[] = {0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
                                                  1,    2,    5,    10,  20,  50};

// clang-format off
// RDMA port counters (collector/loader/probes/rdma_counters.cc), one metric per counter file of
// /sys/class/infiniband/DEV/ports/N/{counters,hw_counters}: P(X, id, file name, metric suffix,
// unit, help) becomes the counter bpftrain_rdma_port_<suffix>{device,port}. The standard IB port
// counters, mlx5's and rxe's hw_counters; a file not listed here is kept under
// bpftrain_rdma_port_other{counter}.
#define BPFTRAIN_RDMA_PORT_COUNTERS(P, X) \
  P(X, kRdmaPortXmitData, "port_xmit_data", "xmit_data", "4-byte words", "Data sent on the port, in 4-byte words (IB PMA PortXmitData; x4 for bytes)") \
  P(X, kRdmaPortRcvData, "port_rcv_data", "rcv_data", "4-byte words", "Data received on the port, in 4-byte words (IB PMA PortRcvData; x4 for bytes)") \
  P(X, kRdmaPortXmitPackets, "port_xmit_packets", "xmit_packets", "packets", "Packets sent on the port") \
  P(X, kRdmaPortRcvPackets, "port_rcv_packets", "rcv_packets", "packets", "Packets received on the port") \
  P(X, kRdmaPortUnicastXmitPackets, "unicast_xmit_packets", "unicast_xmit_packets", "packets", "Unicast packets sent") \
  P(X, kRdmaPortUnicastRcvPackets, "unicast_rcv_packets", "unicast_rcv_packets", "packets", "Unicast packets received") \
  P(X, kRdmaPortMulticastXmitPackets, "multicast_xmit_packets", "multicast_xmit_packets", "packets", "Multicast packets sent") \
  P(X, kRdmaPortMulticastRcvPackets, "multicast_rcv_packets", "multicast_rcv_packets", "packets", "Multicast packets received") \
  P(X, kRdmaPortXmitWait, "port_xmit_wait", "xmit_wait", "ticks", "Ticks the port had data to send and no credit (IB back-pressure)") \
  P(X, kRdmaPortXmitDiscards, "port_xmit_discards", "xmit_discards", "packets", "Outbound packets discarded (port down or congested)") \
  P(X, kRdmaPortRcvErrors, "port_rcv_errors", "rcv_errors", "packets", "Received packets with errors") \
  P(X, kRdmaPortRcvRemotePhysicalErrors, "port_rcv_remote_physical_errors", "rcv_remote_physical_errors", "packets", "Received packets marked with the EBP delimiter (a remote physical error)") \
  P(X, kRdmaPortRcvSwitchRelayErrors, "port_rcv_switch_relay_errors", "rcv_switch_relay_errors", "packets", "Received packets discarded because they could not be forwarded") \
  P(X, kRdmaPortXmitConstraintErrors, "port_xmit_constraint_errors", "xmit_constraint_errors", "packets", "Outbound packets discarded by partition or raw constraints") \
  P(X, kRdmaPortRcvConstraintErrors, "port_rcv_constraint_errors", "rcv_constraint_errors", "packets", "Inbound packets discarded by partition or raw constraints") \
  P(X, kRdmaPortSymbolError, "symbol_error", "symbol_error", "errors", "Minor link errors detected on physical lanes") \
  P(X, kRdmaPortLinkDowned, "link_downed", "link_downed", "events", "Times the link went down (error recovery failed)") \
  P(X, kRdmaPortLinkErrorRecovery, "link_error_recovery", "link_error_recovery", "events", "Successful link error recoveries") \
  P(X, kRdmaPortLocalLinkIntegrityErrors, "local_link_integrity_errors", "local_link_integrity_errors", "events", "Times local physical errors exceeded the threshold") \
  P(X, kRdmaPortExcessiveBufferOverrunErrors, "excessive_buffer_overrun_errors", "excessive_buffer_overrun_errors", "events", "Times consecutive receive buffer overruns exceeded the threshold") \
  P(X, kRdmaPortVl15Dropped, "VL15_dropped", "vl15_dropped", "packets", "Subnet management packets dropped for lack of buffers") \
  P(X, kRdmaPortOutOfBuffer, "out_of_buffer", "out_of_buffer", "packets", "Packets dropped because no receive WQE was posted (mlx5 out_of_buffer): a slow receiver") \
  P(X, kRdmaPortOutOfSequence, "out_of_sequence", "out_of_sequence", "packets", "Out-of-sequence packets received (mlx5): loss on the path") \
  P(X, kRdmaPortDuplicateRequest, "duplicate_request", "duplicate_request", "packets", "Duplicate requests received (retransmissions reached the responder)") \
  P(X, kRdmaPortRnrNakRetryErr, "rnr_nak_retry_err", "rnr_nak_retry_err", "events", "RNR NAKs received beyond the retry limit (mlx5): receiver not ready") \
  P(X, kRdmaPortPacketSeqErr, "packet_seq_err", "packet_seq_err", "events", "Sequence-error NAKs received (mlx5)") \
  P(X, kRdmaPortImpliedNakSeqErr, "implied_nak_seq_err", "implied_nak_seq_err", "events", "Implied NAK sequence errors: an ACK newer than a pending READ (mlx5)") \
  P(X, kRdmaPortLocalAckTimeoutErr, "local_ack_timeout_err", "local_ack_timeout_err", "events", "Times the ACK timer expired on a send queue (mlx5): loss or a dead peer") \
  P(X, kRdmaPortReqTransportRetriesExceeded, "req_transport_retries_exceeded", "req_transport_retries_exceeded", "events", "Requests that exhausted transport retries (mlx5)") \
  P(X, kRdmaPortRespLocalLengthError, "resp_local_length_error", "resp_local_length_error", "events", "Responder local length errors (mlx5)") \
  P(X, kRdmaPortRespCqeError, "resp_cqe_error", "resp_cqe_error", "completions", "Responder completions with error (mlx5)") \
  P(X, kRdmaPortReqCqeError, "req_cqe_error", "req_cqe_error", "completions", "Requester completions with error (mlx5)") \
  P(X, kRdmaPortRespCqeFlushError, "resp_cqe_flush_error", "resp_cqe_flush_error", "completions", "Responder completions flushed with error (QP in error state; mlx5)") \
  P(X, kRdmaPortReqCqeFlushError, "req_cqe_flush_error", "req_cqe_flush_error", "completions", "Requester completions flushed with error (QP in error state; mlx5)") \
  P(X, kRdmaPortReqRemoteInvalidRequest, "req_remote_invalid_request", "req_remote_invalid_request", "events", "Remote invalid request NAKs received (mlx5)") \
  P(X, kRdmaPortReqRemoteAccessErrors, "req_remote_access_errors", "req_remote_access_errors", "events", "Remote access error NAKs received (mlx5)") \
  P(X, kRdmaPortRespRemoteAccessErrors, "resp_remote_access_errors", "resp_remote_access_errors", "events", "Remote access errors detected as responder (mlx5)") \
  P(X, kRdmaPortRxReadRequests, "rx_read_requests", "rx_read_requests", "requests", "RDMA READ requests received (mlx5)") \
  P(X, kRdmaPortRxWriteRequests, "rx_write_requests", "rx_write_requests", "requests", "RDMA WRITE requests received (mlx5)") \
  P(X, kRdmaPortRxAtomicRequests, "rx_atomic_requests", "rx_atomic_requests", "requests", "Atomic requests received (mlx5)") \
  P(X, kRdmaPortRxIcrcEncapsulated, "rx_icrc_encapsulated", "rx_icrc_encapsulated", "packets", "RoCE packets with an ICRC error (mlx5)") \
  P(X, kRdmaPortRoceAdpRetrans, "roce_adp_retrans", "roce_adp_retrans", "events", "Adaptive retransmissions (mlx5)") \
  P(X, kRdmaPortRoceAdpRetransTo, "roce_adp_retrans_to", "roce_adp_retrans_to", "events", "Adaptive retransmission timeouts (mlx5)") \
  P(X, kRdmaPortRoceSlowRestart, "roce_slow_restart", "roce_slow_restart", "events", "Slow restarts after retransmission timeouts (mlx5)") \
  P(X, kRdmaPortRoceSlowRestartCnps, "roce_slow_restart_cnps", "roce_slow_restart_cnps", "packets", "CNPs sent during slow restart (mlx5)") \
  P(X, kRdmaPortRoceSlowRestartTrans, "roce_slow_restart_trans", "roce_slow_restart_trans", "events", "Transitions into slow restart (mlx5)") \
  P(X, kRdmaPortNpEcnMarkedRocePackets, "np_ecn_marked_roce_packets", "np_ecn_marked_roce_packets", "packets", "ECN-marked RoCE packets received (notification point, mlx5): congestion on the path") \
  P(X, kRdmaPortNpCnpSent, "np_cnp_sent", "np_cnp_sent", "packets", "Congestion notification packets sent (notification point, mlx5)") \
  P(X, kRdmaPortRpCnpHandled, "rp_cnp_handled", "rp_cnp_handled", "packets", "Congestion notification packets handled (reaction point, mlx5): this sender was throttled") \
  P(X, kRdmaPortRpCnpIgnored, "rp_cnp_ignored", "rp_cnp_ignored", "packets", "Congestion notification packets ignored (reaction point, mlx5)") \
  P(X, kRdmaPortSentPkts, "sent_pkts", "sent_pkts", "packets", "Packets sent (rxe)") \
  P(X, kRdmaPortRcvdPkts, "rcvd_pkts", "rcvd_pkts", "packets", "Packets received (rxe)") \
  P(X, kRdmaPortRdmaSends, "rdma_sends", "rdma_sends", "requests", "SEND requests transmitted (rxe)") \
  P(X, kRdmaPortRdmaRecvs, "rdma_recvs", "rdma_recvs", "requests", "SEND requests received (rxe)") \
  P(X, kRdmaPortOutOfSeqRequest, "out_of_seq_request", "out_of_seq_request", "packets", "Out-of-sequence requests received (rxe): loss on the path") \
  P(X, kRdmaPortRcvdRnrErr, "rcvd_rnr_err", "rcvd_rnr_err", "events", "RNR NAKs received (rxe): the peer had no receive posted") \
  P(X, kRdmaPortSendRnrErr, "send_rnr_err", "send_rnr_err", "events", "RNR NAKs sent (rxe): this side had no receive posted") \
  P(X, kRdmaPortRcvdSeqErr, "rcvd_seq_err", "rcvd_seq_err", "events", "Sequence-error NAKs received (rxe)") \
  P(X, kRdmaPortAckDeferred, "ack_deferred", "ack_deferred", "events", "ACKs deferred (rxe)") \
  P(X, kRdmaPortRetryExceededErr, "retry_exceeded_err", "retry_exceeded_err", "events", "Requests that exhausted the retry count (rxe)") \
  P(X, kRdmaPortRetryRnrExceededErr, "retry_rnr_exceeded_err", "retry_rnr_exceeded_err", "events", "Requests that exhausted the RNR retry count (rxe)") \
  P(X, kRdmaPortCompleterRetryErr, "completer_retry_err", "completer_retry_err", "events", "Retries started by the completer after an ACK timeout (rxe)") \
  P(X, kRdmaPortSendErr, "send_err", "send_err", "events", "Packets the transmit path failed to send (rxe)")
#define BPFTRAIN_RDMA_PORT_METRIC(X, id, file, suffix, unit, help)                         \
  X(id, "bpftrain_rdma_port_" suffix, kCounter, unit, "device port", "sysfs infiniband " file, help)

// X(id, name, kind, unit, labels, source, help[, histogram bucket bounds of a distribution])
#define BPFTRAIN_METRICS(X)                                                                        \
  /* ---- trainer: every rank streams these in binary frames (common/wire_format.h) ---- */       \
  X(kStepSeconds, "bpftrain_step_seconds", kDistribution, "seconds", "job rank", "trainer",        \
    "Wall time of one training step; p99 against p50 shows stragglers", kStepSecondsBuckets)       \
  X(kAllreduceSeconds, "bpftrain_allreduce_seconds", kDistribution, "seconds", "job rank",         \
    "trainer", "Time a step spends in the gradient allreduce", kStepSecondsBuckets)                \
  X(kRingProbeSeconds, "bpftrain_ring_probe_seconds", kDistribution, "seconds", "job rank",        \
    "trainer",                                                                                     \
    "Time of the 1 MiB allreduce on the flat ring that --adaptive ranks run every few steps, so "  \
    "the controller sees the ring's links while another topology runs",                            \
    kStepSecondsBuckets)                                                                           \
  X(kAllreduceBytes, "bpftrain_allreduce_bytes", kCounter, "bytes", "job rank", "trainer",         \
    "Gradient bytes this rank allreduced")                                                         \
  X(kAllreduceBusbw, "bpftrain_allreduce_busbw_bytes_per_second", kGauge, "bytes/s", "job rank",  \
    "trainer", "Allreduce bus bandwidth of the last step (nccl-tests convention)")                \
  X(kSamplesPerSecond, "bpftrain_samples_per_second", kGauge, "samples/s", "job rank", "trainer", \
    "Training samples this rank processed per second over the last step, or over the step in "   \
    "progress once that has run longer")                                                          \
  X(kLoss, "bpftrain_loss", kGauge, "1", "job rank", "trainer", "Training loss of the last step")  \
  X(kAccuracy, "bpftrain_accuracy", kGauge, "1", "job rank", "trainer",                            \
    "Held-out accuracy at the last evaluation")                                                    \
  X(kTopology, "bpftrain_topology", kGauge, "enum", "job rank", "trainer",                         \
    "Allreduce topology running now, as its number (topology_info has the name)")                  \
  X(kPinning, "bpftrain_pinning", kGauge, "enum", "job rank", "trainer",                           \
    "Pinning mode running now, as its number (pinning_info has the name)")                        \
  X(kTopologyInfo, "bpftrain_topology_info", kGauge, "1", "job rank topology", "collector",        \
    "1 for the allreduce topology a rank runs now, 0 for those it ran before")                     \
  X(kPinningInfo, "bpftrain_pinning_info", kGauge, "1", "job rank mode", "collector",              \
    "1 for the pinning mode a rank runs now, 0 for those it ran before")                           \
  X(kConfigEpoch, "bpftrain_config_epoch", kGauge, "epoch", "job rank", "trainer",                 \
    "Epoch of the controller decision a rank applied last (0: its starting configuration)")       \
  X(kStep, "bpftrain_step", kGauge, "steps", "job rank", "trainer", "Training steps done")        \
  X(kCheckpointActive, "bpftrain_checkpoint_active", kGauge, "1", "job rank", "trainer",           \
    "1 while a rank writes a checkpoint (the controller does not act then)")                       \
  X(kAnonHugePagesBytes, "bpftrain_anon_hugepages_bytes", kGauge, "bytes", "job rank", "trainer", \
    "Model and gradient memory backed by transparent huge pages")                                 \
  X(kTelemetryDropped, "bpftrain_telemetry_dropped", kCounter, "samples", "job rank", "trainer",   \
    "Samples the rank's emitter dropped because its socket was full (training never waits)")      \
  X(kControlRejected, "bpftrain_control_rejected", kCounter, "frames", "job rank", "trainer",      \
    "Control frames rank 0 refused: bad MAC, replay, stale epoch, clock skew, unknown value")      \
  X(kControlDropped, "bpftrain_control_dropped", kCounter, "frames", "job rank", "trainer",        \
    "Control datagrams the kernel dropped at rank 0's control socket, its buffer full (a flood)")  \
  /* ---- fault handling (issue 14) ---- */                                                      \
  X(kCheckpointFailures, "bpftrain_checkpoint_failures", kCounter, "checkpoints", "job rank",      \
    "trainer", "Checkpoints rank 0 could not write (disk full, I/O error); training went on")    \
  /* ---- BPF probes (collector/loader/probes/) ---- */                                          \
  X(kMigrations, "bpftrain_migrations", kCounter, "migrations", "job rank scope",                  \
    "tp_btf sched:sched_migrate_task",                                                             \
    "Task migrations of a rank's threads: scope cpu (any), llc (to another last-level cache), "   \
    "node (to another NUMA node)")                                                                 \
  X(kNumaTaskMoves, "bpftrain_numa_task_moves", kCounter, "moves", "job rank kind",                \
    "sched:sched_{move,swap,stick}_numa",                                                          \
    "NUMA balancing moving a rank's tasks between nodes (kind move, swap, stick)")                 \
  X(kPageMigrations, "bpftrain_page_migrations", kCounter, "pages", "job rank reason",             \
    "migrate:mm_migrate_pages",                                                                    \
    "Pages migrated for a rank, by the kernel's reason (numa_misplaced: memory chasing tasks)")   \
  X(kTlbFlushes, "bpftrain_tlb_flushes", kCounter, "flushes", "job rank reason",                   \
    "tp_btf tlb:tlb_flush",                                                                        \
    "TLB flushes and shootdowns on a rank's CPUs, by reason (munmap, mprotect, IPIs)")            \
  X(kPageFaults, "bpftrain_page_faults", kCounter, "faults", "job rank",                           \
    "/proc/PID/stat minflt+majflt (--cgroup/--all: tp_btf exceptions:page_fault_user)",            \
    "Page faults of a rank, minor and major, as the kernel accounts them to its processes")       \
  X(kThpFaults, "bpftrain_thp_faults", kCounter, "faults", "job rank",                             \
    "tp_btf kmem:mm_page_alloc (PMD order)",                                                       \
    "Huge-page allocations on a rank's faults: whether huge pages back the model")               \
  X(kDtlbMisses, "bpftrain_dtlb_misses", kCounter, "misses", "job rank", "PMU dTLB read miss",     \
    "Sampled data-TLB read misses (only where a hardware PMU exists)")                            \
  X(kItlbMisses, "bpftrain_itlb_misses", kCounter, "misses", "job rank", "PMU iTLB read miss",     \
    "Sampled instruction-TLB read misses (only where a hardware PMU exists)")                     \
  X(kNodeLoadMisses, "bpftrain_node_load_misses", kCounter, "misses", "job rank",                  \
    "PMU node read miss", "Sampled loads served by another NUMA node (only with a hardware PMU)")  \
  X(kNodeLoads, "bpftrain_node_loads", kCounter, "loads", "job rank", "PMU node read access",      \
    "Sampled loads that reached a NUMA node's memory (only with a hardware PMU)")                 \
  X(kNumaHintFaults, "bpftrain_numa_hint_faults", kCounter, "faults", "job rank locality",         \
    "kprobe task_numa_fault",                                                                      \
    "NUMA hinting faults of a rank's threads: locality local (the page was on the faulting "       \
    "CPU's node) or remote; only where kprobes work (probe numa_hint_faults)")                     \
  X(kNumaFaultLocality, "bpftrain_numa_fault_locality", kGauge, "1", "job rank",                   \
    "/proc/PID/task/TID/sched numa_faults",                                                        \
    "Share of a rank's recent NUMA hinting faults on memory of the node its threads run on (the "  \
    "kernel's decaying per-task statistics; 1 = all local); wherever NUMA balancing runs")         \
  X(kRunqueueWaitSeconds, "bpftrain_runqueue_wait_seconds", kCounter, "seconds", "job rank",       \
    "/proc/PID/task/TID/schedstat run_delay",                                                      \
    "Time a rank's threads were runnable but waited for a CPU, summed over its threads: CPU "       \
    "contention (the kernel's scheduler statistics, CONFIG_SCHED_INFO)")                           \
  X(kTransportQueuedBytes, "bpftrain_transport_queued_bytes", kDistribution, "bytes",              \
    "job rank transport link peer_node", "tp_btf tcp:tcp_probe",                                                  \
    "Bytes a rank's sockets queued and the peer has not acknowledged (write_seq - snd_una): "     \
    "congestion on the gradient path", kSocketBytesBuckets)                                        \
  X(kTransportInflightBytes, "bpftrain_transport_inflight_bytes", kDistribution, "bytes",          \
    "job rank transport link peer_node", "tp_btf tcp:tcp_probe",                                                  \
    "Bytes sent and not yet acknowledged (snd_nxt - snd_una); falls when the receiver is slow",    \
    kSocketBytesBuckets)                                                                           \
  X(kTransportRttSeconds, "bpftrain_transport_rtt_seconds", kDistribution, "seconds",              \
    "job rank transport link peer_node", "tp_btf tcp:tcp_probe", "Smoothed RTT of a rank's TCP connections, per link: same_host or other_host, and peer node; taken only when the socket's own data was acknowledged since its last sample (a receive-only socket would repeat its last send's)", \
    kRttSecondsBuckets)                                                                            \
  X(kTransportDeliveryRate, "bpftrain_transport_delivery_rate_bytes_per_second", kDistribution,    \
    "bytes/s", "job rank transport link peer_node", "tp_btf tcp:tcp_probe",                       \
    "What a rank's TCP connections delivered while the sender was not application-limited (the "  \
    "kernel's delivery-rate sample: rate_delivered x mss / rate_interval_us), per link: the "      \
    "path's rate, which a throttled link lowers when its RTT does not move (BBR)",                 \
    kDeliveryRateBuckets)                                                                          \
  X(kTransportRetransmits, "bpftrain_transport_retransmits", kCounter, "segments",                 \
    "job rank transport", "tp_btf tcp:tcp_retransmit_skb", "Retransmitted segments of a rank")      \
  X(kTransportSamples, "bpftrain_transport_samples", kCounter, "samples", "job rank transport",    \
    "tp_btf tcp:tcp_probe", "Transport samples the probe took (one per socket per interval)")     \
  X(kTransportOutstandingWorkRequests, "bpftrain_transport_outstanding_work_requests",             \
    kDistribution, "work requests", "job rank transport", "USDT bpftrain:qp_post,qp_complete",     \
    "RDMA work requests posted and not yet completed on a rank's queue pairs",                     \
    kWorkRequestBuckets)                                                                           \
  X(kRdmaQpEvents, "bpftrain_rdma_qp_events", kCounter, "events", "job rank event",                \
    "USDT bpftrain:qp_post,qp_complete", "RDMA work requests posted and completed (event)")        \
  X(kRdmaWorkRequests, "bpftrain_rdma_work_requests", kCounter, "work requests",                 \
    "job rank op source", "uprobe gloo::transport::ibverbs::Pair; fentry/kprobes rdma_rxe",              \
    "RDMA work requests a rank posted (source gloo: Gloo's ibverbs pair, op write: data, send: a " \
    "buffer announced to the peer, recv: receives posted; source rxe: any verbs program on "      \
    "soft-RoCE, seen in the kernel, op write/send/read/atomic/other; receives are not seen posted)") \
  X(kRdmaWorkCompletions, "bpftrain_rdma_work_completions", kCounter, "work requests",             \
    "job rank op source", "uprobe gloo::transport::ibverbs::Pair; fentry/kprobes rdma_rxe",              \
    "RDMA work requests a rank saw complete (op and source as for work_requests; recv: receives)") \
  X(kRdmaBytes, "bpftrain_rdma_bytes", kCounter, "bytes", "job rank source",                       \
    "uprobe gloo::transport::ibverbs::Pair; fentry/kprobes rdma_rxe",                                     \
    "Bytes of the RDMA writes a rank posted")                                                      \
  X(kRdmaOutstandingWorkRequests, "bpftrain_rdma_outstanding_work_requests", kDistribution,        \
    "work requests", "job rank source", "uprobe gloo::transport::ibverbs::Pair; fentry/kprobes rdma_rxe", \
    "RDMA work requests a rank has posted and not seen complete (source gloo: RDMA writes, at "    \
    "each post and completion; source rxe: send-queue work requests, at the post and completion "  \
    "of 1 in 8)",                      \
    kWorkRequestBuckets)                                                                           \
  X(kRdmaCompletionSeconds, "bpftrain_rdma_completion_seconds", kDistribution, "seconds",          \
    "job rank source", "uprobe gloo::transport::ibverbs::Pair; fentry/kprobes rdma_rxe",                  \
    "From posting an RDMA work request to its completion (gloo: writes; rxe: 1 in 8 send-queue "   \
    "requests)", \
    kRttSecondsBuckets)                                                                            \
  X(kRdmaUnmatchedCompletions, "bpftrain_rdma_unmatched_completions", kCounter, "work requests",  \
    "job rank source", "uprobe gloo::transport::ibverbs::Pair; fentry/kprobes rdma_rxe",                  \
    "Completions without a post seen (posted before the probe attached): no latency sample")      \
  X(kRdmaQpOutstandingWorkRequests, "bpftrain_rdma_qp_outstanding_work_requests", kDistribution,  \
    "work requests", "job rank source qp", "fentry/kprobes rdma_rxe",                                     \
    "Send work requests posted and not complete on one queue pair of a rank, at the post and "     \
    "completion of 1 in 8 (qp: 0-7 in the order the probe first saw them post, then other)",                \
    kWorkRequestBuckets)                                                                           \
  X(kRdmaQpsFolded, "bpftrain_rdma_qps_folded", kCounter, "queue pairs", "job rank source",         \
    "fentry/kprobes rdma_rxe", "Queue pairs of a rank past the 8 with their own qp label, folded into qp=other") \
  X(kRdmaSourceInfo, "bpftrain_rdma_source_info", kGauge, "1", "job rank source",                 \
    "loader (--rdma-sources)",                                                                    \
    "1 for the source that counts a rank's RDMA work requests (rxe: the kernel's soft-RoCE "       \
    "probes; gloo: uprobes on Gloo's ibverbs pair), one per process under --rdma-sources auto")   \
  BPFTRAIN_RDMA_PORT_COUNTERS(BPFTRAIN_RDMA_PORT_METRIC, X)                                        \
  X(kRdmaPortOther, "bpftrain_rdma_port_other", kCounter, "events", "device port counter",         \
    "sysfs infiniband hw_counters", "A port counter file this version does not name (counter: the file)") \
  /* ---- the loader itself ---- */                                                               \
  X(kProbeUp, "bpftrain_probe_up", kGauge, "1", "probe", "loader",                                 \
    "1 when a probe is attached, 0 when it is down (--list-probes says why)")                     \
  X(kProbeRuns, "bpftrain_probe_runs", kCounter, "runs", "probe", "bpf_stats",                     \
    "Times a probe's BPF programs ran (kernel.bpf_stats_enabled; sampled: scaled from the windows " \
    "measured)")                                                                                  \
  X(kProbeRunSeconds, "bpftrain_probe_run_seconds", kCounter, "seconds", "probe", "bpf_stats",     \
    "CPU time a probe's BPF programs ran: the probes' cost to training (sampled: scaled from the " \
    "windows measured)")                                                                          \
  X(kProbeRunStatsMeasuredRatio, "bpftrain_probe_run_stats_measured_ratio", kGauge, "1", "",       \
    "loader", "Share of time BPF run statistics are on (--probe-run-stats: 1 on, window/period "  \
    "sampled, 0 off or not permitted)")                                                           \
  X(kProbeEventsLost, "bpftrain_probe_events_lost", kCounter, "events", "probe", "loader",         \
    "Events a probe could not deliver (ring buffer full; tcp: also sends on sockets whose owner " \
    "storage the kernel could not allocate)")                                                     \
  X(kProbeTargetsDropped, "bpftrain_probe_targets_dropped", kCounter, "targets", "", "loader",     \
    "Processes not (fully) traced: target slots or maps full, a map update or USDT attach failed")                            \
  /* ---- NCCL plugins (plugins/nccl/): any NCCL job, in labelled-sample frames ---- */       \
  X(kNcclCollectiveSeconds, "bpftrain_nccl_collective_seconds", kDistribution, "seconds",         \
    "job rank comm collective algorithm protocol", "NCCL profiler plugin",                        \
    "Time of one NCCL collective: GPU kernel time from KernelCh events, else first start to last " \
    "proxy stop", kStepSecondsBuckets)                                                             \
  X(kNcclCollectives, "bpftrain_nccl_collectives", kCounter, "collectives",                       \
    "job rank comm collective algorithm protocol", "NCCL profiler plugin",                        \
    "NCCL collectives completed, by the algorithm and protocol NCCL ran them with")               \
  X(kNcclCollectiveBytes, "bpftrain_nccl_collective_bytes", kCounter, "bytes",                    \
    "job rank comm collective algorithm protocol", "NCCL profiler plugin",                        \
    "Bytes of NCCL collectives (nccl-tests size: all ranks' data for allgather, reducescatter)")  \
  X(kNcclBusbw, "bpftrain_nccl_busbw_bytes_per_second", kGauge, "bytes/s",                        \
    "job rank comm collective algorithm protocol", "NCCL profiler plugin",                        \
    "Bus bandwidth of the timed collectives of the last flush (nccl-tests convention)")           \
  X(kNcclCollectiveChannels, "bpftrain_nccl_collective_channels", kGauge, "channels",             \
    "job rank comm collective algorithm protocol", "NCCL profiler plugin",                        \
    "Channels (CTAs) NCCL gave the last such collective")                                         \
  X(kNcclOutstandingSteps, "bpftrain_nccl_outstanding_steps", kGauge, "steps",                    \
    "job rank comm channel peer direction", "NCCL profiler plugin ProxyStep",                     \
    "Network steps started and not finished on a connection (at most 8): a full pipe waits on "   \
    "the network")                                                                                 \
  X(kNcclSteps, "bpftrain_nccl_steps", kCounter, "steps", "job rank comm channel peer direction", \
    "NCCL profiler plugin ProxyStep", "Network steps (one transfer each) finished on a connection") \
  X(kNcclStepBytes, "bpftrain_nccl_step_bytes", kCounter, "bytes",                                \
    "job rank comm channel peer direction", "NCCL profiler plugin ProxyStep",                     \
    "Bytes the network steps of a connection posted or received")                                 \
  X(kNcclStepWaitSeconds, "bpftrain_nccl_step_wait_seconds", kCounter, "seconds",                 \
    "job rank comm channel peer direction phase", "NCCL profiler plugin ProxyStep",               \
    "Time network steps spent waiting, by phase: gpu (data from/to the GPU), peer (the "          \
    "receiver's credit), network (the transfer), flush (receive flush)")                          \
  X(kNcclTunerCalls, "bpftrain_nccl_tuner_calls", kGauge, "calls", "job rank comm",               \
    "NCCL tuner plugin", "getCollInfo calls of a communicator: a decision's start_call must lie " \
    "ahead of every rank's value")                                                                 \
  X(kNcclDecisionEpoch, "bpftrain_nccl_decision_epoch", kGauge, "epoch", "job rank comm",         \
    "NCCL tuner plugin", "Epoch of the tuner decision in force on a communicator (0: NCCL's own)") \
  X(kNcclDecisionsRefused, "bpftrain_nccl_decisions_refused", kCounter, "decisions",              \
    "job rank reason", "NCCL tuner plugin",                                                        \
    "Tuner decisions not applied: malformed, wrong_job, bad_mac, clock_skew, replay, "            \
    "stale_epoch, unknown_value, late (start_call passed), unsupported (per call)")               \
  X(kNcclEventsDropped, "bpftrain_nccl_events_dropped", kCounter, "events", "job rank reason",    \
    "NCCL profiler plugin", "Profiler events not recorded: pool_full, ring_full, table_full, "    \
    "unknown_handle")                                                                              \
  /* ---- rank discovery (collector/discovery/, --discover) ---- */                                \
  X(kDiscoveryRanks, "bpftrain_discovery_ranks", kGauge, "ranks", "job", "discovery",              \
    "Training ranks --discover found on this host, per job (from the launcher's environment)")     \
  X(kDiscoveryJobsCapped, "bpftrain_discovery_jobs_capped", kCounter, "jobs", "", "discovery",     \
    "Jobs --discover found but does not follow: --discover-max-jobs reached")                      \
  X(kDiscoveryScanSeconds, "bpftrain_discovery_scan_seconds", kGauge, "seconds", "", "discovery",  \
    "Time the last walk of /proc took (rank discovery runs one per collector step)")               \
  /* ---- controller ---- */                                                                      \
  X(kControllerDecisions, "bpftrain_controller_decisions", kCounter, "decisions",                  \
    "from to reason", "controller", "Every switch the controller made, and why")                 \
  X(kControllerSends, "bpftrain_controller_sends", kCounter, "frames", "result", "controller",     \
    "Control frames sent to rank 0 (result ok, error)")                                            \
  X(kControllerApplySeconds, "bpftrain_controller_apply_seconds", kDistribution, "seconds", "",    \
    "controller", "From a decision to every rank reporting its epoch", kApplySecondsBuckets)       \
  X(kControllerAbandoned, "bpftrain_controller_abandoned", kCounter, "decisions", "",              \
    "controller", "Decisions no rank applied within the resend budget")                           \
  X(kControllerDeferred, "bpftrain_controller_deferred", kCounter, "steps", "reason",              \
    "controller", "Controller steps that did not act (reason checkpoint)")                        \
  X(kDiagnosisInfo, "bpftrain_diagnosis_info", kGauge, "1", "job cause rank link", "controller",  \
    "What slows the job now (1) and what did before (0): cause none, congested_link, straggler, " \
    "cpu_contention, memory_placement or tlb_storm; rank (-1: the job) and link when it applies")  \
  /* ---- collector health ---- */                                                                \
  X(kCollectorSamples, "bpftrain_collector_samples", kCounter, "samples", "protocol", "collector", \
    "Accepted samples: one binary record or one StatsD line")                                      \
  X(kCollectorDecodeErrors, "bpftrain_collector_decode_errors", kCounter, "errors", "reason",     \
    "collector", "Datagrams, frames or lines rejected as malformed, by reason")                   \
  X(kCollectorDropped, "bpftrain_collector_dropped", kCounter, "samples", "reason", "collector",   \
    "Well-formed samples or frames not stored, by reason")                                         \
  X(kCollectorStatsdIgnored, "bpftrain_collector_statsd_ignored", kCounter, "items", "reason",     \
    "collector", "StatsD input understood and not stored: DogStatsD events and service checks "    \
    "(lines), value-less tags (tags; the line is kept)")                                           \
  X(kCollectorFramesLost, "bpftrain_collector_frames_lost", kCounter, "frames", "", "collector",   \
    "Frames missing from senders' sequence numbers (lost between sender and collector)")          \
  X(kCollectorKernelDrops, "bpftrain_collector_kernel_drops", kCounter, "datagrams", "",           \
    "collector", "Datagrams the kernel dropped: an ingest socket buffer was full (SO_RXQ_OVFL)")  \
  X(kCollectorDatagrams, "bpftrain_collector_datagrams", kCounter, "datagrams", "", "collector",   \
    "UDP datagrams received")                                                                      \
  X(kCollectorReceivedBytes, "bpftrain_collector_received_bytes", kCounter, "bytes", "",           \
    "collector", "UDP payload bytes received")                                                     \
  X(kCollectorSeriesLimit, "bpftrain_collector_series_limit", kGauge, "series", "", "collector",   \
    "Series cardinality bound (--max-series; a change needs a restart)")                          \
  X(kCollectorSenders, "bpftrain_collector_senders", kGauge, "senders", "", "collector",           \
    "Senders known from hello frames")                                                             \
  X(kCollectorRcvbufBytes, "bpftrain_collector_rcvbuf_bytes", kGauge, "bytes", "requested",        \
    "collector", "Receive buffer the kernel granted per ingest socket (requested: label)")        \
  X(kCollectorIngestThreads, "bpftrain_collector_ingest_threads", kGauge, "threads", "",           \
    "collector", "Ingest sockets, one thread each")                                                \
  X(kCollectorFeatureEnabled, "bpftrain_collector_feature_enabled", kGauge, "1", "feature",        \
    "collector", "1 when a collector feature runs (0: off or degraded, see the log)")             \
  X(kCollectorReloads, "bpftrain_collector_reloads", kCounter, "reloads", "result", "collector",   \
    "SIGHUP config reloads by result")                                                             \
  X(kCollectorStepOverruns, "bpftrain_collector_step_overruns", kCounter, "steps", "",             \
    "collector", "Window steps whose listeners (loader poll, upstream) took longer than a step")  \
  X(kCollectorSeries, "bpftrain_collector_series", kGauge, "series", "", "collector",              \
    "Series in the window store")                                                                  \
  X(kCollectorSeriesRejected, "bpftrain_collector_series_rejected", kCounter, "series", "",        \
    "collector", "Series refused: cardinality limit, too many or duplicate labels, or a name "     \
    "reused with another kind")                                                                    \
  X(kCollectorSeriesExpired, "bpftrain_collector_series_expired", kCounter, "series", "",          \
    "collector", "Series removed after --series-ttl without a sample (a job that ended)")          \
  X(kCollectorLateSamples, "bpftrain_collector_late_samples", kCounter, "samples", "",             \
    "collector", "Samples for a step already evicted from the window (kept in totals only)")      \
  X(kCollectorWindowMemoryBytes, "bpftrain_collector_window_memory_bytes", kGauge, "bytes", "",    \
    "collector", "Bytes the window store allocated")                                               \
  X(kCollectorExportConflicts, "bpftrain_collector_export_conflicts", kCounter, "series", "",      \
    "collector", "Series skipped on export: their name is taken by a series of another kind")     \
  X(kCollectorUpstreamFrames, "bpftrain_collector_upstream_frames", kCounter, "frames", "result",  \
    "collector", "Window-summary frames for the parent: sent, dropped (socket full), error")      \
  X(kCollectorUpstreamSeries, "bpftrain_collector_upstream_series", kCounter, "series steps",      \
    "result", "collector", "Series steps for the parent: sent, oversized (too big for one frame)") \
  X(kCollectorUpstreamSteps, "bpftrain_collector_upstream_steps", kCounter, "steps", "result",     \
    "collector", "Window steps forwarded, or missed because the forwarder fell behind")
// clang-format on

#define BPFTRAIN_METRIC_DECLARE(id, name, kind, unit, labels, source, help, ...) \
  inline constexpr MetricDef id{name,   Kind::kind, unit,                        \
                                labels, source,     help __VA_OPT__(, ) __VA_ARGS__};
BPFTRAIN_METRICS(BPFTRAIN_METRIC_DECLARE)
#undef BPFTRAIN_METRIC_DECLARE

// Every metric, in declaration order.
std::span<const MetricDef* const> all();

// The stored name of a stored or exported name: `_total` removed.
std::string_view storedName(std::string_view name);

// The metric with this stored or exported (`_total`) name; nullptr for a user's own metric.
const MetricDef* find(std::string_view name);

// "counter", "gauge" or "summary": the Prometheus type a kind is exported as.
std::string_view kindName(Kind kind);

// The Prometheus name: counters end in `_total`.
std::string promName(const MetricDef& def);

// The README's metrics table (markdown), rendered from this list.
std::string markdownTable();

}  // namespace bpftrain::metrics
