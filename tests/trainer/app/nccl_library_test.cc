// The NCCL backend's run-time loader against the CUDA runtime and NCCL installed where the build
// found them (no GPU needed): every function resolves and answers through its pointer, and a
// missing library or symbol is one line naming it and the fix.
#include "trainer/app/nccl_library.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace bpftrain::trainer::app {
namespace {

std::string loadError(const NcclLibraryNames& names) {
  try {
    loadNcclLibrary(names);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(NcclLibrary, ResolvesEveryFunctionTheBackendCalls) {
  const auto lib = loadNcclLibrary();
  int slots = 0;
#define BPFTRAIN_EXPECT_SLOT(name)        \
  EXPECT_NE(lib->name, nullptr) << #name; \
  ++slots;
  BPFTRAIN_CUDART_FUNCTIONS(BPFTRAIN_EXPECT_SLOT)
  BPFTRAIN_EXPECT_SLOT(cudaMalloc)
  BPFTRAIN_NCCL_FUNCTIONS(BPFTRAIN_EXPECT_SLOT)
#undef BPFTRAIN_EXPECT_SLOT
  EXPECT_EQ(slots, 16);  // the 15 calls of nccl_communicator.cc and ncclGetVersion
  EXPECT_NE(lib->cudart_path.find("libcudart.so." + std::to_string(CUDART_VERSION / 1000)),
            std::string::npos)
      << lib->cudart_path;
  EXPECT_NE(lib->nccl_path.find("libnccl.so.2"), std::string::npos) << lib->nccl_path;

  // Calls that need no GPU: the pointers are the functions their names say.
  int version = 0;
  ASSERT_EQ(lib->ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version / 10000, NCCL_MAJOR) << version;
  EXPECT_STREQ(lib->ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_STREQ(lib->cudaGetErrorString(cudaSuccess), "no error");
  EXPECT_NE(std::strstr(lib->cudaGetErrorString(cudaErrorNoDevice), "device"), nullptr);
}

TEST(NcclLibrary, OncePerProcessGivesTheSameTable) {
  EXPECT_EQ(&ncclLibrary(), &ncclLibrary());
  EXPECT_NE(ncclLibrary().ncclAllReduce, nullptr);
}

TEST(NcclLibrary, AMissingNcclIsNamedWithTheFix) {
  NcclLibraryNames names;
  names.nccl = "libnccl-bpftrain-absent.so.2";
  const std::string e = loadError(names);
  EXPECT_NE(e.find("cannot load libnccl-bpftrain-absent.so.2"), std::string::npos) << e;
  EXPECT_NE(e.find("install NCCL 2"), std::string::npos) << e;
  EXPECT_NE(e.find("LD_LIBRARY_PATH"), std::string::npos) << e;
  EXPECT_NE(e.find("--backend gloo"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(NcclLibrary, AMissingCudaRuntimeIsNamedWithTheFix) {
  NcclLibraryNames names;
  names.cudart = "libcudart-bpftrain-absent.so.13";
  names.cudart_dir = "";
  const std::string e = loadError(names);
  EXPECT_NE(e.find("cannot load libcudart-bpftrain-absent.so.13"), std::string::npos) << e;
  EXPECT_NE(e.find("the CUDA " + std::to_string(CUDART_VERSION / 1000) + " runtime"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("LD_LIBRARY_PATH"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// A library that loads but is not NCCL (libc here): the first function it lacks is named.
TEST(NcclLibrary, ALibraryWithoutTheFunctionsNamesTheFirstMissingOne) {
  NcclLibraryNames names;
  names.nccl = "libc.so.6";
  const std::string e = loadError(names);
  EXPECT_NE(e.find("libc.so.6 has no ncclGetVersion"), std::string::npos) << e;
  EXPECT_NE(e.find("LD_LIBRARY_PATH"), std::string::npos) << e;
  EXPECT_NE(e.find("--backend gloo"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

}  // namespace
}  // namespace bpftrain::trainer::app
