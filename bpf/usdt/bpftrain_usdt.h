// USDT probes the bpftrain collector reads (bpf/usdt_qp.bpf.c, probe rdma_usdt). Any process
// that includes this where it posts and completes RDMA work requests is counted when it is a
// target; today only the test tool bpftrain-usdt-fire (usdt_fire.cc) does. Each probe is a single
// nop until a tracer attaches.
//   BPFTRAIN_QP_POST(qp_num, outstanding)      after posting: outstanding WRs on that QP
//   BPFTRAIN_QP_COMPLETE(qp_num, outstanding)  after polling a completion: outstanding WRs left
#pragma once

#include <sys/sdt.h>

#include <cstdint>

#define BPFTRAIN_QP_POST(qp_num, outstanding)                     \
  DTRACE_PROBE2(bpftrain, qp_post, static_cast<uint32_t>(qp_num), \
                static_cast<uint32_t>(outstanding))
#define BPFTRAIN_QP_COMPLETE(qp_num, outstanding)                     \
  DTRACE_PROBE2(bpftrain, qp_complete, static_cast<uint32_t>(qp_num), \
                static_cast<uint32_t>(outstanding))
