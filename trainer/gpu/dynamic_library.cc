#include "trainer/gpu/dynamic_library.h"

#include <dlfcn.h>
#include <link.h>

#include <stdexcept>

namespace bpftrain::trainer::gpu {

DynamicLibrary openLibrary(const std::string& soname, const std::string& dir,
                           const std::string& what) {
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

void* resolveSymbol(const DynamicLibrary& lib, const char* name, const std::string& what) {
  dlerror();
  void* symbol = dlsym(lib.handle, name);
  if (symbol == nullptr)
    throw std::runtime_error("--backend nccl: " + lib.path + " has no " + name + " (not " + what +
                             "?): put " + what +
                             "'s directory first in LD_LIBRARY_PATH, or use --backend gloo");
  return symbol;
}

}  // namespace bpftrain::trainer::gpu
