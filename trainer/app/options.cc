#include "trainer/app/options.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <functional>
#include <limits>
#include <sstream>

#include "common/host_port.h"
#include "common/wire_format.h"
#include "trainer/app/nccl_environment.h"
#include "trainer/collective/communicator.h"

extern char** environ;

namespace bpftrain::trainer::app {
namespace {

template <typename T>
bool parseNumber(const std::string& s, T& out) {
  const char* end = s.data() + s.size();
  auto r = std::from_chars(s.data(), end, out);
  return r.ec == std::errc() && r.ptr == end && !s.empty();
}

bool parseFloat(const std::string& s, float& out) {
  char* end = nullptr;
  out = std::strtof(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

std::map<std::string, std::string> environmentMap() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::string usage() {
  return R"(usage: bpftrain-train [--ranks N | --rank R --world N --store DIR|HOST:PORT] [options]
  --version                 print the version and exit
  --ranks N                 start N local rank processes (launcher)
  --rank R --world N        this process is rank R of N (or from mpirun/srun/torchrun env)
  --store DIR|HOST:PORT     rendezvous: shared directory or redis (also $BPFTRAIN_STORE)
  --backend gloo|nccl       collective backend; nccl trains on the GPU (needs a CUDA GPU, libnccl,
                            libcudart, libcublas, libnvrtc)
  --topology ring|halving-doubling|bcube|hierarchical
                            with --backend nccl, NCCL's allreduce algorithm: ring|tree|
                            collnet_direct|collnet_chain|nvls|nvls_tree (default: NCCL's choice)
  --pin none|compact|spread|numa
  --adaptive                accept signed controller decisions on --control (rank 0); with
                            --backend nccl also load libnccl-bpftrain.so (tuner + profiler) so
                            bpftrain-collector --nccl-control steers NCCL's algorithm
  --control HOST:PORT       control socket (default 127.0.0.1:9472)
  --secret FILE             shared HMAC-SHA256 key (required by --adaptive)
  --warm-topologies on|off  with --adaptive or --switch-every: run every topology once on each
                            gradient bucket before step 0, so a switch's first steps cost what
                            later ones do (default on; holds halving-doubling's and bcube's
                            buffers from the start: the log line says how much)
  --job NAME                job name in telemetry and control (default "default")
  --collector HOST:PORT|none  telemetry destination (default 127.0.0.1:9470)
  --metrics-hz N            telemetry rate, 1..100 (default 10)
  --steps N                 training steps (default 800)
  --duration SECONDS        stop after about SECONDS of training, at the same step on every rank
                            (--steps stays an upper bound)
  --model digits|mlp:WIDTHxDEPTH
  --batch N --lr X --momentum X --seed N --eval-every N
  --hugepages on|off        MADV_HUGEPAGE on the model buffers (default on)
  --checkpoint DIR          write checkpoints to DIR every --checkpoint-every K steps (default 100)
  --resume                  continue from the newest valid checkpoint in DIR
  --node-of N0,N1,...       node index of each rank (hierarchical allreduce)
  --bind ADDR               transport bind address
  --transport tcp|ibverbs   Gloo's TCP transport (default) or its ibverbs (RDMA) transport (every
                            topology; hierarchical's node stage stays on the host)
  --rdma-device D[,D1,...]  ibverbs: RDMA device (ibv_devices), one for all ranks or one per rank
  --gid-index N             ibverbs: GID table index (default 0; RoCE v2 over IPv4: see show_gids)
  --netns NS0,NS1,...       launcher: run rank i inside network namespace NSi
  --restarts N              launcher: when a rank fails, restart every rank from the newest
                            valid checkpoint, at most N times (needs --checkpoint DIR)
  --data FILE               digits.csv.gz (default: from tools/setup)
  --timeout S               rendezvous / dead-peer / stop timeout in seconds (default 30)
  --sync auto|tail|broadcast  how decisions reach all ranks (default auto, see docs/trainer.md)
  --allreduce-buckets N     run the gradient allreduce as N buckets, 1..8 (default 4; fewer when
                            a bucket would hold under 64 Ki floats): a new topology applies at the
                            next bucket, inside the step (see docs/trainer.md)
HOST:PORT is IPV4:PORT, [IPV6]:PORT or NAME:PORT (names resolve when the socket opens).
)";
}

std::optional<Options> parseOptions(const std::vector<std::string>& args,
                                    const std::map<std::string, std::string>& env,
                                    std::string& error) {
  Options o;
  bool rank_given = false, world_given = false, steps_given = false, buckets_given = false;
  std::optional<std::string> topology_text;  // read once --backend is known
  std::string model_text = "digits";
  auto fail = [&](const std::string& msg) {
    error = msg;
    return std::nullopt;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_inline = false;
    if (size_t eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_inline = true;
    }
    auto need = [&]() -> bool {
      if (has_inline) return true;
      if (i + 1 >= args.size()) return false;
      value = args[++i];
      return true;
    };
    auto intFlag = [&](auto& out, long long lo, long long hi) -> bool {
      long long v = 0;
      if (!need() || !parseNumber(value, v) || v < lo || v > hi) {
        error = flag + " " + value + ": expected an integer " + std::to_string(lo) + ".." +
                std::to_string(hi);
        return false;
      }
      out = static_cast<std::remove_reference_t<decltype(out)>>(v);
      return true;
    };
    auto strFlag = [&](std::string& out) -> bool {
      if (!need() || value.empty()) {
        error = flag + ": expects a value";
        return false;
      }
      out = value;
      return true;
    };
    // The address grammar of common/host_port.h; names are resolved when the socket opens.
    auto hostPortFlag = [&](const std::string& text, PortZero zero) -> bool {
      std::string why;
      if (parseHostPort(text, zero, why)) return true;
      error = flag + ": " + why;
      return false;
    };
    if (flag == "--help" || flag == "-h") return fail("help");
    if (flag == "--version") return fail("version");
    if (flag == "--ranks") {
      if (!intFlag(o.ranks, 1, 1024)) return std::nullopt;
    } else if (flag == "--restarts") {
      if (!intFlag(o.restarts, 0, 1000)) return std::nullopt;
    } else if (flag == "--rank") {
      if (!intFlag(o.rank, 0, 1 << 20)) return std::nullopt;
      rank_given = true;
    } else if (flag == "--world") {
      if (!intFlag(o.world, 1, 1 << 20)) return std::nullopt;
      world_given = true;
    } else if (flag == "--local-rank") {
      if (!intFlag(o.local_rank, 0, 1 << 20)) return std::nullopt;
    } else if (flag == "--local-world") {
      if (!intFlag(o.local_world, 1, 1 << 20)) return std::nullopt;
    } else if (flag == "--store") {
      if (!strFlag(o.store)) return std::nullopt;
    } else if (flag == "--backend") {
      if (!strFlag(o.backend)) return std::nullopt;
      if (o.backend != "gloo" && o.backend != "nccl")
        return fail("--backend " + o.backend + ": expected gloo or nccl");
    } else if (flag == "--topology") {
      if (!need()) return fail("--topology: expects a value");
      topology_text = value;
    } else if (flag == "--pin") {
      if (!need()) return fail("--pin: expects a value");
      auto p = parsePinMode(value);
      if (!p) return fail("--pin " + value + ": expected " + kPinModeNames.alternatives());
      o.pin = *p;
    } else if (flag == "--adaptive") {
      o.adaptive = true;
    } else if (flag == "--control") {
      if (!strFlag(o.control) || !hostPortFlag(o.control, PortZero::kAllowed)) return std::nullopt;
    } else if (flag == "--secret") {
      if (!strFlag(o.secret_file)) return std::nullopt;
    } else if (flag == "--job") {
      if (!strFlag(o.job)) return std::nullopt;
    } else if (flag == "--collector") {
      if (!strFlag(o.collector)) return std::nullopt;
      if (o.collector != "none" && !hostPortFlag(o.collector, PortZero::kRejected))
        return std::nullopt;
    } else if (flag == "--metrics-hz") {
      if (!intFlag(o.metrics_hz, 1, 100)) return std::nullopt;
    } else if (flag == "--steps") {
      if (!intFlag(o.steps, 0, 1ll << 40)) return std::nullopt;
      steps_given = true;
    } else if (flag == "--model") {
      if (!strFlag(model_text)) return std::nullopt;
    } else if (flag == "--batch") {
      if (!intFlag(o.batch, 1, 1 << 16)) return std::nullopt;
    } else if (flag == "--lr") {
      if (!need() || !parseFloat(value, o.lr) || !(o.lr > 0 && o.lr < 100))
        return fail("--lr " + value + ": expected a positive number");
    } else if (flag == "--duration") {
      if (!need() || !parseFloat(value, o.duration_s) || !(o.duration_s > 0 && o.duration_s < 1e7))
        return fail("--duration " + value + ": expected a positive number of seconds");
    } else if (flag == "--momentum") {
      if (!need() || !parseFloat(value, o.momentum) || !(o.momentum >= 0 && o.momentum < 1))
        return fail("--momentum " + value + ": expected 0 <= x < 1");
    } else if (flag == "--seed") {
      if (!intFlag(o.seed, 0, std::numeric_limits<long long>::max())) return std::nullopt;
    } else if (flag == "--eval-every") {
      if (!intFlag(o.eval_every, 0, 1 << 30)) return std::nullopt;
    } else if (flag == "--warm-topologies") {
      if (!need() || (value != "on" && value != "off"))
        return fail("--warm-topologies " + value + ": expected on or off");
      o.warm_topologies = value == "on";
    } else if (flag == "--hugepages") {
      if (!need() || (value != "on" && value != "off"))
        return fail("--hugepages " + value + ": expected on or off");
      o.hugepages = value == "on";
    } else if (flag == "--checkpoint") {
      if (!strFlag(o.checkpoint_dir)) return std::nullopt;
    } else if (flag == "--checkpoint-every") {
      if (!intFlag(o.checkpoint_every, 1, 1 << 30)) return std::nullopt;
    } else if (flag == "--resume") {
      o.resume = true;
    } else if (flag == "--node-of") {
      if (!need()) return fail("--node-of: expects a list like 0,0,1,1");
      for (const std::string& s : splitList(value)) {
        int n = 0;
        if (!parseNumber(s, n) || n < 0)
          return fail("--node-of " + value + ": expected a list like 0,0,1,1");
        o.node_of.push_back(n);
      }
    } else if (flag == "--bind") {
      if (!strFlag(o.bind)) return std::nullopt;
    } else if (flag == "--transport") {
      if (!strFlag(o.transport)) return std::nullopt;
      if (o.transport != "tcp" && o.transport != "ibverbs")
        return fail("--transport " + o.transport + ": expected tcp or ibverbs");
    } else if (flag == "--rdma-device") {
      if (!need() || value.empty()) return fail("--rdma-device: expects a device like mlx5_0");
      o.rdma_devices = splitList(value);
    } else if (flag == "--gid-index") {
      if (!intFlag(o.gid_index, 0, 255)) return std::nullopt;
    } else if (flag == "--netns") {
      if (!need()) return fail("--netns: expects a list like host0,host1");
      o.netns = splitList(value);
    } else if (flag == "--data") {
      if (!strFlag(o.data)) return std::nullopt;
    } else if (flag == "--timeout") {
      if (!intFlag(o.timeout_s, 1, 3600)) return std::nullopt;
    } else if (flag == "--switch-every") {
      if (!intFlag(o.switch_every, 1, 1 << 30)) return std::nullopt;
    } else if (flag == "--switch-seed") {
      if (!intFlag(o.switch_seed, 0, std::numeric_limits<long long>::max())) return std::nullopt;
    } else if (flag == "--overhead-ab") {
      if (!intFlag(o.overhead_ab, 1, 1 << 30)) return std::nullopt;
    } else if (flag == "--allreduce-buckets") {
      if (!intFlag(o.allreduce_buckets, 1, kMaxAllreduceBuckets)) return std::nullopt;
      buckets_given = true;
    } else if (flag == "--sync") {
      if (!strFlag(o.sync)) return std::nullopt;
      if (o.sync != "auto" && o.sync != "tail" && o.sync != "broadcast")
        return fail("--sync " + o.sync + ": expected auto, tail or broadcast");
    } else if (flag == "--quiet") {
      o.quiet = true;
    } else {
      return fail("unknown flag " + args[i] + " (see --help)");
    }
  }
  (void)steps_given;
  std::string model_error;
  if (!model::parseModelSpec(model_text, o.model, model_error)) return fail(model_error);

  // Rank and world: flags, else the environment of the launcher that started us.
  if (o.ranks > 0 && (rank_given || world_given))
    return fail("--ranks starts local ranks itself: give either --ranks N or --rank R --world N");
  if (rank_given != world_given)
    return fail("--rank and --world go together (e.g. --rank 0 --world 4)");
  auto envInt = [&](const char* name, int& out) {
    auto it = env.find(name);
    return it != env.end() && parseNumber(it->second, out);
  };
  if (o.ranks == 0 && !rank_given) {
    struct Source {
      const char* name;
      const char* rank;
      const char* world;
      const char* local_rank;
      const char* local_world;
    };
    const Source sources[] = {
        {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
         "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
        {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    };
    for (const Source& s : sources) {
      if (envInt(s.rank, o.rank) && envInt(s.world, o.world)) {
        o.rank_source = s.name;
        if (o.local_rank < 0) envInt(s.local_rank, o.local_rank);
        if (o.local_world < 0) envInt(s.local_world, o.local_world);
        break;
      }
    }
    if (o.rank_source == "flags") {
      o.rank = 0;
      o.world = 1;
      o.rank_source = "single";
    }
  }
  if (o.store.empty()) {
    if (auto it = env.find("BPFTRAIN_STORE"); it != env.end()) o.store = it->second;
  }
  if (o.ranks == 0) {
    if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
      return fail("--rank " + std::to_string(o.rank) + " is not in 0.." +
                  std::to_string(o.world - 1) + " for --world " + std::to_string(o.world) +
                  (o.rank_source == "flags" ? "" : " (from " + o.rank_source + "'s environment)"));
    if (o.world > 1 && o.store.empty())
      return fail("rank " + std::to_string(o.rank) + " of " + std::to_string(o.world) +
                  " needs a rendezvous store: pass --store DIR|HOST:PORT or set BPFTRAIN_STORE");
    if (!o.netns.empty()) return fail("--netns is for the launcher: use it with --ranks N");
    o.local_defaulted = o.local_rank < 0 || o.local_world < 0;
    if (o.local_rank < 0) o.local_rank = o.rank_source == "single" ? 0 : o.rank;
    if (o.local_world < 0) o.local_world = o.rank_source == "single" ? 1 : o.world;
    if (o.local_rank >= o.local_world) o.local_rank %= o.local_world;
    if (!o.node_of.empty() && int(o.node_of.size()) != o.world)
      return fail("--node-of lists " + std::to_string(o.node_of.size()) + " nodes for --world " +
                  std::to_string(o.world) + ": give one per rank");
  } else {
    if (!o.netns.empty() && int(o.netns.size()) != o.ranks)
      return fail("--netns lists " + std::to_string(o.netns.size()) + " namespaces for --ranks " +
                  std::to_string(o.ranks) + ": give one per rank");
    if (!o.node_of.empty() && int(o.node_of.size()) != o.ranks)
      return fail("--node-of lists " + std::to_string(o.node_of.size()) + " nodes for --ranks " +
                  std::to_string(o.ranks) + ": give one per rank");
  }
  if (o.adaptive && o.secret_file.empty())
    return fail("--adaptive needs --secret FILE (the controller's shared HMAC key, mode 0600)");
  if (topology_text && o.backend == "nccl") {
    o.nccl_algo = *topology_text;
    if (!isNcclAlgorithm(o.nccl_algo))
      return fail("--topology " + o.nccl_algo + ": with --backend nccl expected one of NCCL's " +
                  "algorithms " + std::string(kNcclAlgorithmList) +
                  " (Gloo's topologies need --backend gloo)");
  } else if (topology_text) {
    auto t = parseTopology(*topology_text);
    if (!t)
      return fail("--topology " + *topology_text + ": expected " + kTopologyNames.alternatives());
    o.topology = *t;
  }
  // What --backend nccl cannot honour: the draws switch Gloo's topologies, NCCL chooses its own
  // algorithm per collective unless --topology fixes it, and the GPU model's memory is on the
  // device (so there is no model memory for --pin numa to place).
  if (o.backend == "nccl") {
    if (buckets_given && o.allreduce_buckets > 1)
      return fail(
          "--allreduce-buckets: with --backend nccl the gradients are one NCCL allreduce (its "
          "algorithm steered by --nccl-control, not switched between buckets); drop the flag");
    if (o.switch_every > 0)
      return fail(
          "--switch-every draws Gloo topologies: it needs --backend gloo (NCCL jobs are steered "
          "with --adaptive and bpftrain-collector --nccl-control)");
    if (o.adaptive && !o.nccl_algo.empty())
      return fail("--topology " + o.nccl_algo +
                  " with --adaptive: the collector's --nccl-control chooses NCCL's algorithm; "
                  "drop one of them");
    if (o.pin == PinMode::kNuma)
      return fail(
          "--pin numa places the model's host memory, and with --backend nccl the model is in "
          "GPU memory: use --pin none, compact or spread");
  }
  if (o.transport == "ibverbs") {
    if (o.backend != "gloo") return fail("--transport ibverbs needs --backend gloo");
    if (std::string why = collective::topologyUnsupported(o.topology, o.transport); !why.empty())
      return fail("--topology " + std::string(topologyName(o.topology)) + ": " + why);
    const int ranks = o.ranks > 0 ? o.ranks : o.world;
    if (o.rdma_devices.size() > 1 && int(o.rdma_devices.size()) != ranks)
      return fail("--rdma-device lists " + std::to_string(o.rdma_devices.size()) + " devices for " +
                  std::to_string(ranks) + " ranks: give one, or one per rank");
  } else if (!o.rdma_devices.empty() || o.gid_index != 0) {
    return fail("--rdma-device and --gid-index need --transport ibverbs");
  }
  if (o.resume && o.checkpoint_dir.empty()) return fail("--resume needs --checkpoint DIR");
  if (!o.checkpoint_dir.empty() && o.checkpoint_every == 0) o.checkpoint_every = 100;
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    return fail("--checkpoint-every needs --checkpoint DIR");
  if (o.restarts > 0) {
    if (o.ranks == 0) return fail("--restarts is for the launcher: use it with --ranks N");
    if (o.checkpoint_dir.empty())
      return fail(
          "--restarts needs --checkpoint DIR: a restart resumes from the newest checkpoint");
    // Gloo's stores refuse to overwrite keys, so every attempt rendezvous in a fresh directory.
    if (!o.store.empty() && o.store.find('/') == std::string::npos)
      return fail(
          "--restarts needs a directory --store (each attempt rendezvous in a fresh "
          "subdirectory), not " +
          o.store);
  }
  if (!wire::isValidName(o.job))
    return fail("--job " + o.job + ": a letter or _, then letters, digits, _ - . (at most 64)");
  return o;
}

}  // namespace bpftrain::trainer::app
