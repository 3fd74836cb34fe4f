#include "trainer/app/nccl_library.h"

#include <dlfcn.h>
#include <link.h>

#include <stdexcept>
#include <type_traits>

namespace bpftrain::trainer::app {
namespace {

// Fails to compile unless cuda_runtime_api.h declares exactly this C cudaMalloc.
static_assert(
    std::is_same_v<decltype(NcclLibrary::cudaMalloc),
                   decltype(static_cast<cudaError_t (*)(void**, size_t)>(&::cudaMalloc))>);

struct Library {
  void* handle;
  std::string path;
};

// The soname through the loader's search path, then the directory the build found it in.
Library open(const std::string& soname, const std::string& dir, const std::string& what) {
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string first_error = handle == nullptr ? dlerror() : "";
  if (handle == nullptr && !dir.empty() && soname.find('/') == std::string::npos)
    handle = dlopen((dir + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    throw std::runtime_error("--backend nccl: cannot load " + soname + " (" + first_error +
                             "; not in " + (dir.empty() ? std::string("the build's dir") : dir) +
                             " either): install " + what +
                             " or add its directory to LD_LIBRARY_PATH, or use --backend gloo");
  link_map* map = nullptr;
  std::string path = soname;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name[0] != '\0')
    path = map->l_name;
  return {handle, path};
}

template <typename F>
void resolve(const Library& lib, const char* name, F& slot, const std::string& what) {
  dlerror();
  void* symbol = dlsym(lib.handle, name);
  if (symbol == nullptr)
    throw std::runtime_error("--backend nccl: " + lib.path + " has no " + name + " (not " + what +
                             "?): put " + what +
                             "'s directory first in LD_LIBRARY_PATH, or use --backend gloo");
  slot = reinterpret_cast<F>(symbol);
}

}  // namespace

std::unique_ptr<NcclLibrary> loadNcclLibrary(const NcclLibraryNames& names) {
  const std::string cudart_what =
      "the CUDA " + std::to_string(CUDART_VERSION / 1000) + " runtime (" + names.cudart + ")";
  const std::string nccl_what = "NCCL " + std::to_string(NCCL_MAJOR) + " (" + names.nccl + ")";
  // The handles are never closed (see the header): a loaded library stays for the process.
  const Library cudart = open(names.cudart, names.cudart_dir, cudart_what);
  const Library nccl = open(names.nccl, names.nccl_dir, nccl_what);
  auto lib = std::make_unique<NcclLibrary>();
#define BPFTRAIN_RESOLVE_CUDART(name) resolve(cudart, #name, lib->name, cudart_what);
#define BPFTRAIN_RESOLVE_NCCL(name) resolve(nccl, #name, lib->name, nccl_what);
  BPFTRAIN_CUDART_FUNCTIONS(BPFTRAIN_RESOLVE_CUDART)
  BPFTRAIN_RESOLVE_CUDART(cudaMalloc)
  BPFTRAIN_NCCL_FUNCTIONS(BPFTRAIN_RESOLVE_NCCL)
#undef BPFTRAIN_RESOLVE_CUDART
#undef BPFTRAIN_RESOLVE_NCCL
  lib->cudart_path = cudart.path;
  lib->nccl_path = nccl.path;
  return lib;
}

const NcclLibrary& ncclLibrary() {
  // A throwing initializer leaves the static uninitialised, so the next call tries again.
  static const std::unique_ptr<NcclLibrary> lib = loadNcclLibrary();
  return *lib;
}

}  // namespace bpftrain::trainer::app
