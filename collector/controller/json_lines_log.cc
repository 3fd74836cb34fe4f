#include "collector/controller/json_lines_log.h"

#include <cerrno>
#include <cstring>

namespace bpftrain::collector::controller {

bool JsonLinesLog::open(const std::string& path, const char* what, std::string& error) {
  file_.reset();
  if (path.empty()) return true;
  file_.reset(std::fopen(path.c_str(), "a"));
  if (!file_)
    error = std::string("cannot open ") + what + " '" + path + "': " + std::strerror(errno) +
            " (choose a writable path)";
  return file_ != nullptr;
}

void JsonLinesLog::write(const nlohmann::json& line) {
  if (!file_) return;
  std::string text = line.dump();
  text.push_back('\n');
  std::fwrite(text.data(), 1, text.size(), file_.get());
  std::fflush(file_.get());
}

}  // namespace bpftrain::collector::controller
