// dlopen/dlsym for the CUDA libraries the NCCL backend loads at run time (nccl_library.h,
// gpu_library.h): a Gloo rank maps none of them, and a missing library or symbol is one line
// naming it and the fix.
#pragma once

#include <string>

namespace bpftrain::trainer::gpu {

struct DynamicLibrary {
  void* handle = nullptr;
  std::string path;  // what the loader mapped (for logs), else the soname
};

// The soname through the loader's search path (LD_LIBRARY_PATH, ld.so.cache), then in `dir` (where
// CMake found it). RTLD_NOW | RTLD_LOCAL; never closed: CUDA's threads and exit handlers outlive
// any user. Throws std::runtime_error naming `what`, LD_LIBRARY_PATH and --backend gloo.
DynamicLibrary openLibrary(const std::string& soname, const std::string& dir,
                           const std::string& what);

// dlsym, or std::runtime_error naming the library, the symbol and the fix.
void* resolveSymbol(const DynamicLibrary& lib, const char* name, const std::string& what);

template <typename F>
void resolveInto(const DynamicLibrary& lib, const char* name, F& slot, const std::string& what) {
  slot = reinterpret_cast<F>(resolveSymbol(lib, name, what));
}

}  // namespace bpftrain::trainer::gpu
