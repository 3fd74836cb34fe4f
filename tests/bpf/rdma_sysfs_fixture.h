// A fixture sysfs tree of RDMA ports (/sys/class/infiniband) with mlx5's and rxe's counter names,
// for the rdma_counters tests.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace bpftrain::tests {

// What an mlx5 ConnectX port shows (ports/1/counters and ports/1/hw_counters, kernel 6.x).
inline const char* const kMlx5Counters[] = {"port_xmit_data",
                                            "port_rcv_data",
                                            "port_xmit_packets",
                                            "port_rcv_packets",
                                            "unicast_xmit_packets",
                                            "unicast_rcv_packets",
                                            "multicast_xmit_packets",
                                            "multicast_rcv_packets",
                                            "port_xmit_wait",
                                            "port_xmit_discards",
                                            "port_rcv_errors",
                                            "port_rcv_remote_physical_errors",
                                            "port_rcv_switch_relay_errors",
                                            "port_xmit_constraint_errors",
                                            "port_rcv_constraint_errors",
                                            "symbol_error",
                                            "link_downed",
                                            "link_error_recovery",
                                            "local_link_integrity_errors",
                                            "excessive_buffer_overrun_errors",
                                            "VL15_dropped"};
inline const char* const kMlx5HwCounters[] = {"out_of_buffer",
                                              "out_of_sequence",
                                              "duplicate_request",
                                              "rnr_nak_retry_err",
                                              "packet_seq_err",
                                              "implied_nak_seq_err",
                                              "local_ack_timeout_err",
                                              "req_transport_retries_exceeded",
                                              "resp_local_length_error",
                                              "resp_cqe_error",
                                              "req_cqe_error",
                                              "resp_cqe_flush_error",
                                              "req_cqe_flush_error",
                                              "req_remote_invalid_request",
                                              "req_remote_access_errors",
                                              "resp_remote_access_errors",
                                              "rx_read_requests",
                                              "rx_write_requests",
                                              "rx_atomic_requests",
                                              "rx_icrc_encapsulated",
                                              "roce_adp_retrans",
                                              "roce_adp_retrans_to",
                                              "roce_slow_restart",
                                              "roce_slow_restart_cnps",
                                              "roce_slow_restart_trans",
                                              "np_ecn_marked_roce_packets",
                                              "np_cnp_sent",
                                              "rp_cnp_handled",
                                              "rp_cnp_ignored"};
// rxe (ports/1/hw_counters only; NUMALAB-NOTES.md lists what the 6.1 guest shows).
inline const char* const kRxeHwCounters[] = {
    "sent_pkts",           "rcvd_pkts",          "rdma_sends",         "rdma_recvs",
    "duplicate_request",   "out_of_seq_request", "rcvd_rnr_err",       "send_rnr_err",
    "rcvd_seq_err",        "ack_deferred",       "retry_exceeded_err", "retry_rnr_exceeded_err",
    "completer_retry_err", "send_err",           "link_downed"};

class RdmaSysfsFixture {
 public:
  RdmaSysfsFixture() {
    char dir[] = "/tmp/rdma-sysfs-XXXXXX";
    root_ = mkdtemp(dir);
  }
  ~RdmaSysfsFixture() { std::filesystem::remove_all(root_); }
  std::string root() const { return root_.string(); }
  void write(const std::string& device, const std::string& port, const std::string& dir,
             const std::string& file, const std::string& text) {
    const std::filesystem::path d = root_ / device / "ports" / port / dir;
    std::filesystem::create_directories(d);
    std::ofstream(d / file) << text;
  }
  void mlx5(const std::string& device, uint64_t base) {
    uint64_t v = base;
    for (const char* f : kMlx5Counters)
      write(device, "1", "counters", f, std::to_string(v++) + "\n");
    for (const char* f : kMlx5HwCounters)
      write(device, "1", "hw_counters", f, std::to_string(v++) + "\n");
    write(device, "1", "hw_counters", "lifespan", "10\n");  // a setting
  }

 private:
  std::filesystem::path root_;
};

}  // namespace bpftrain::tests
