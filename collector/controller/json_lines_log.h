// The controllers' logs (decisions, features): JSON lines appended to a file the user named, one
// flushed line per record so that `tail -f` and a crash both see every decision. Shared by the
// topology controller and the NCCL controller.
#pragma once

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace bpftrain::collector::controller {

class JsonLinesLog {
 public:
  JsonLinesLog() = default;  // writes nothing
  // An empty path opens nothing and succeeds. On failure returns false with `error` naming what
  // (`what`, e.g. "decisions log"), the path, errno's text and the fix.
  bool open(const std::string& path, const char* what, std::string& error);
  void write(const nlohmann::json& line);
  bool isOpen() const { return file_ != nullptr; }

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> file_;
};

}  // namespace bpftrain::collector::controller
