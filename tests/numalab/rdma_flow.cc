// bpftrain-rdma-flow: a plain libibverbs workload for the rdma_rxe probe (no Gloo), one RC queue
// pair per process, connected through files in DIR:
//   bpftrain-rdma-flow send DIR DEVICE COUNT WINDOW INTERVAL_US [QPS]
//     posts COUNT RDMA writes with immediate of 64 bytes, one every INTERVAL_US at most and never
//     more than WINDOW outstanding (posted, not completed), every one signaled, round robin over
//     QPS queue pairs (default 1);
//   bpftrain-rdma-flow recv DIR DEVICE COUNT PREPOST REPOST_MS [QPS]
//     posts PREPOST receives per queue pair, then either one more per completion (REPOST_MS 0: it
//     keeps up) or one every REPOST_MS at most (a slow receiver), until COUNT in all; waits for
//     COUNT immediates. Both sides must give the same QPS.
// Each write with immediate consumes one posted receive; without one the responder answers
// "receiver not ready" and the sender retries (rnr_retry 7: for ever), so a slow receiver holds
// the sender at WINDOW outstanding, whatever the timing, while a receiver that keeps up leaves it
// at what its pacing and the path's latency give. Both print "ready" once connected, start when
// DIR/go exists, and print "posted N completed N" / "received N" at the end.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kPort = 1, kGidIndex = 1;  // numalab --rxe: GID index 1 is the IPv4 one
constexpr size_t kBytes = 64;
constexpr uint8_t kMinRnrTimer = 20;  // 10.24 ms between "receiver not ready" retries

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bpftrain-rdma-flow: %s (%s)\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

struct Endpoint {
  uint32_t qpn = 0;
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint8_t gid[16] = {};
};

void publish(const std::string& path, const Endpoint& e) {
  {
    std::ofstream out(path + ".tmp", std::ios::binary);
    out.write(reinterpret_cast<const char*>(&e), sizeof(e));
  }
  if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) die("rename " + path);
}

// Waits for a file (a peer's endpoint, the go): polling, files give no event.
void waitFor(const std::string& path) {
  const auto deadline = Clock::now() + 90s;
  while (access(path.c_str(), F_OK) != 0) {
    if (Clock::now() > deadline) die("no " + path + " within 90 s");
    std::this_thread::sleep_for(5ms);
  }
}

Endpoint readEndpoint(const std::string& path) {
  waitFor(path);
  Endpoint e;
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(&e), sizeof(e))) die("short " + path);
  return e;
}

int pollSome(ibv_cq* cq, ibv_wc (&wc)[16]) {
  const int n = ibv_poll_cq(cq, 16, wc);
  if (n < 0) die("ibv_poll_cq");
  for (int i = 0; i < n; ++i)
    if (wc[i].status != IBV_WC_SUCCESS)
      die(std::string("completion failed: ") + ibv_wc_status_str(wc[i].status));
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  if ((argc != 7 && argc != 8) ||
      (std::strcmp(argv[1], "send") != 0 && std::strcmp(argv[1], "recv") != 0)) {
    std::fprintf(stderr,
                 "usage: bpftrain-rdma-flow send DIR DEVICE COUNT WINDOW INTERVAL_US [QPS]\n"
                 "       bpftrain-rdma-flow recv DIR DEVICE COUNT PREPOST REPOST_MS [QPS]\n");
    return 2;
  }
  const bool sender = std::strcmp(argv[1], "send") == 0;
  const std::string dir = argv[2], device = argv[3];
  const int count = std::atoi(argv[4]), a = std::atoi(argv[5]), b = std::atoi(argv[6]);
  const int qps = argc == 8 ? std::atoi(argv[7]) : 1;
  if (qps < 1 || qps > 64) die("QPS must be 1..64");
  const std::string me = sender ? "send" : "recv", other = sender ? "recv" : "send";

  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n; ++i)
    if (device == ibv_get_device_name(list[i])) ctx = ibv_open_device(list[i]);
  if (!ctx) die("no RDMA device " + device);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  static char buffer[4096];
  ibv_mr* mr =
      pd ? ibv_reg_mr(pd, buffer, sizeof(buffer), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
         : nullptr;
  ibv_cq* cq = mr ? ibv_create_cq(ctx, 1024, nullptr, nullptr, 0) : nullptr;
  if (!cq) die("cannot set up PD, MR and CQ on " + device);
  ibv_gid gid;
  if (ibv_query_gid(ctx, kPort, kGidIndex, &gid)) die("ibv_query_gid");

  std::vector<ibv_qp*> qp(qps);
  std::vector<Endpoint> peer(qps);
  for (int q = 0; q < qps; ++q) {
    ibv_qp_init_attr init = {};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 1;
    init.cap.max_send_wr = 256;
    init.cap.max_recv_wr = 512;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    qp[q] = ibv_create_qp(pd, &init);
    if (!qp[q]) die("ibv_create_qp");
    Endpoint self;
    self.qpn = qp[q]->qp_num;
    self.addr = reinterpret_cast<uintptr_t>(buffer);
    self.rkey = mr->rkey;
    std::memcpy(self.gid, gid.raw, 16);
    publish(dir + "/" + me + "." + std::to_string(q), self);
  }
  for (int q = 0; q < qps; ++q) {
    peer[q] = readEndpoint(dir + "/" + other + "." + std::to_string(q));
    ibv_qp_attr attr = {};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = kPort;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp[q], &attr,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      die("modify QP to INIT");
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = peer[q].qpn;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = kMinRnrTimer;
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, peer[q].gid, 16);
    attr.ah_attr.grh.sgid_index = kGidIndex;
    attr.ah_attr.grh.hop_limit = 64;
    attr.ah_attr.port_num = kPort;
    if (ibv_modify_qp(qp[q], &attr,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      die("modify QP to RTR");
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 18;  // ~1 s per transport retry: TCG is slow, and RNR retries are counted apart
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;  // retry "receiver not ready" for ever: the slow receiver's case
    attr.max_rd_atomic = 1;
    if (ibv_modify_qp(qp[q], &attr,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
      die("modify QP to RTS");
  }

  ibv_sge sge = {};
  sge.addr = reinterpret_cast<uintptr_t>(buffer);
  sge.length = kBytes;
  sge.lkey = mr->lkey;
  auto postRecv = [&](int q) {
    ibv_recv_wr wr = {}, *bad = nullptr;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(qp[q], &wr, &bad)) die("ibv_post_recv");
  };
  // Which of our QPs a completion belongs to.
  auto indexOf = [&](uint32_t qp_num) {
    for (int q = 0; q < qps; ++q)
      if (qp[q]->qp_num == qp_num) return q;
    return 0;
  };
  int receives = 0;
  if (!sender)
    for (int q = 0; q < qps; ++q)  // PREPOST on every QP, even past COUNT in all: none starves
      for (int i = 0; i < a; ++i, ++receives) postRecv(q);
  // The receiver's QPs are ready to receive (RTR, receives posted) before the sender may send.
  std::ofstream(dir + "/" + me + ".ready") << "1\n";
  waitFor(dir + "/" + other + ".ready");
  std::printf("ready\n");
  std::fflush(stdout);
  waitFor(dir + "/go");

  int done = 0;
  ibv_wc wc[16];
  if (sender) {
    const auto interval = std::chrono::microseconds(b);
    int posted = 0;
    auto next = Clock::now();
    while (done < count) {
      done += pollSome(cq, wc);
      const auto now = Clock::now();
      if (posted < count && posted - done < a && now >= next) {
        const int q = posted % qps;
        ibv_send_wr wr = {}, *bad = nullptr;
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(static_cast<uint32_t>(posted));
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = peer[q].addr;
        wr.wr.rdma.rkey = peer[q].rkey;
        if (ibv_post_send(qp[q], &wr, &bad)) die("ibv_post_send");
        ++posted;
        next = std::max(next, now) + interval;  // paced, and no burst after a full window
      } else {
        std::this_thread::sleep_for(100us);  // polling the CQ: no completion channel here
      }
    }
    std::printf("posted %d completed %d\n", posted, done);
  } else {
    auto next = Clock::now() + std::chrono::milliseconds(b);
    while (done < count) {
      const int got = pollSome(cq, wc);
      done += got;
      if (b == 0) {
        for (int i = 0; i < got && receives < count; ++i, ++receives)
          postRecv(indexOf(wc[i].qp_num));
      } else if (const auto now = Clock::now(); receives < count && now >= next) {
        postRecv(receives % qps);
        ++receives;
        // At most one per REPOST_MS, also after a stall: no catching up in a burst.
        next = std::max(next, now) + std::chrono::milliseconds(b);
      }
      if (got == 0) std::this_thread::sleep_for(100us);
    }
    std::printf("received %d\n", done);
  }
  std::fflush(stdout);
  // Neither side destroys its QPs while the other still uses them.
  std::ofstream(dir + "/" + me + ".done") << "1\n";
  waitFor(dir + "/" + other + ".done");
  return 0;
}
