#include "trainer/app/nccl_communicator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "trainer/app/nccl_library.h"

namespace bpftrain::trainer::app {
namespace {

// One check macro per foreign API, at the boundary only; they carry file and line. Every CUDA and
// NCCL call goes through lib_, the table nccl_library.h loads at run time (nothing here links
// them).
#define BPFTRAIN_CUDACHECK(call)                                                      \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess)                                                            \
      throw std::runtime_error(std::string(__FILE__ ":") + std::to_string(__LINE__) + \
                               ": " #call ": " + lib_.cudaGetErrorString(e_));        \
  } while (0)
#define BPFTRAIN_NCCLCHECK(call)                                                      \
  do {                                                                                \
    ncclResult_t r_ = (call);                                                         \
    if (r_ != ncclSuccess)                                                            \
      throw std::runtime_error(std::string(__FILE__ ":") + std::to_string(__LINE__) + \
                               ": " #call ": " + lib_.ncclGetErrorString(r_));        \
  } while (0)

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  explicit NcclCommunicatorImpl(const collective::CommOptions& o)
      : lib_(ncclLibrary()), rank_(o.rank), world_(o.world) {
    int devices = 0;
    cudaError_t e = lib_.cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0)
      throw std::runtime_error(std::string("--backend nccl: no CUDA GPU visible (") +
                               (e != cudaSuccess ? lib_.cudaGetErrorString(e) : "0 devices") +
                               "): run on a GPU host, or use --backend gloo");
    BPFTRAIN_CUDACHECK(lib_.cudaSetDevice(o.rank % devices));
    struct stat st {};
    if (o.store.empty() || stat(o.store.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw std::runtime_error("--backend nccl rendezvouses through a directory: pass --store DIR");
    ncclUniqueId id;
    const std::string path = o.store + "/" + o.prefix + "-nccl-id";
    if (rank_ == 0) {
      BPFTRAIN_NCCLCHECK(lib_.ncclGetUniqueId(&id));
      std::string tmp = path + ".tmp";
      std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(&id), sizeof(id));
      std::rename(tmp.c_str(), path.c_str());
    } else {
      auto deadline = std::chrono::steady_clock::now() + o.timeout;
      for (;;) {
        std::ifstream f(path, std::ios::binary);
        if (f.read(reinterpret_cast<char*>(&id), sizeof(id))) break;
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error("rank 0 did not publish the NCCL id in " + o.store + " within " +
                                   std::to_string(o.timeout.count() / 1000) + "s");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    BPFTRAIN_NCCLCHECK(lib_.ncclCommInitRank(&comm_, world_, id, rank_));
    BPFTRAIN_CUDACHECK(lib_.cudaStreamCreate(&stream_));
    capacity_ = std::max<size_t>(o.max_elements, 1024) * sizeof(float);
    BPFTRAIN_CUDACHECK(lib_.cudaMalloc(&device_, capacity_));
  }
  ~NcclCommunicatorImpl() override {
    if (device_ != nullptr) lib_.cudaFree(device_);
    if (stream_ != nullptr) lib_.cudaStreamDestroy(stream_);
    if (comm_ != nullptr) lib_.ncclCommDestroy(comm_);
  }

  void allreduceDevice(float* device, size_t count) override {
    BPFTRAIN_NCCLCHECK(
        lib_.ncclAllReduce(device, device, count, ncclFloat, ncclSum, comm_, stream_));
  }
  cudaStream_t stream() const override { return stream_; }

  // NCCL chooses its algorithm (ring/tree/NVLS): --topology reaches it as NCCL_ALGO, set before
  // the communicator exists (nccl_environment.h), so the topology argument is not used here.
  void allreduce(std::span<float> data, Topology) override {
    staged(data.data(), data.size_bytes(), [&] {
      BPFTRAIN_NCCLCHECK(
          lib_.ncclAllReduce(device_, device_, data.size(), ncclFloat, ncclSum, comm_, stream_));
    });
  }
  void broadcast(std::span<uint8_t> data, int root) override {
    staged(data.data(), data.size_bytes(), [&] {
      BPFTRAIN_NCCLCHECK(
          lib_.ncclBroadcast(device_, device_, data.size(), ncclUint8, root, comm_, stream_));
    });
  }
  void barrier() override {
    float one = 1;
    allreduce(std::span<float>(&one, 1), Topology::kRing);
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

 private:
  template <typename F>
  void staged(void* host, size_t bytes, F&& op) {
    if (bytes > capacity_) throw std::runtime_error("nccl: buffer larger than max_elements");
    BPFTRAIN_CUDACHECK(lib_.cudaMemcpyAsync(device_, host, bytes, cudaMemcpyHostToDevice, stream_));
    op();
    BPFTRAIN_CUDACHECK(lib_.cudaMemcpyAsync(host, device_, bytes, cudaMemcpyDeviceToHost, stream_));
    BPFTRAIN_CUDACHECK(lib_.cudaStreamSynchronize(stream_));
  }

  const NcclLibrary& lib_;
  int rank_, world_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* device_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<NcclCommunicator> createNcclCommunicator(const collective::CommOptions& options) {
  return std::make_unique<NcclCommunicatorImpl>(options);
}

}  // namespace bpftrain::trainer::app
