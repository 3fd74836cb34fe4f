#include "trainer/model/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/wire_format.h"

namespace bpftrain::trainer::model {
namespace {

constexpr uint32_t kCkptMagic = 0x4B435442;  // "BTCK"
constexpr uint32_t kCkptVersion = 1;
// magic, version, step, epoch, topology, pinning, pad, seed, count, model length
constexpr size_t kFixedHeader = 4 + 4 + 8 + 8 + 1 + 1 + 2 + 8 + 8 + 4;

std::string errnoText(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

void writeAll(int fd, const void* data, size_t len, const std::string& path) {
  auto p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    ssize_t n = write(fd, p, std::min(len, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(errnoText("cannot write checkpoint", path));
    p += n;
    len -= size_t(n);
  }
}

bool readAll(int fd, void* data, size_t len) {
  auto p = static_cast<uint8_t*>(data);
  while (len > 0) {
    ssize_t n = read(fd, p, std::min(len, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= size_t(n);
  }
  return true;
}

uint32_t crcOf(uint32_t crc, const void* data, size_t len) {
  auto p = static_cast<const Bytef*>(data);
  while (len > 0) {
    uInt chunk = uInt(std::min(len, size_t{1} << 30));
    crc = uint32_t(crc32(crc, p, chunk));
    p += chunk;
    len -= chunk;
  }
  return crc;
}

std::vector<uint64_t> listSteps(const std::string& dir) {
  std::vector<uint64_t> steps;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return steps;
  while (dirent* e = readdir(d)) {
    // Only our own names: ckpt-<20 digits>.bin (temp files end in .tmp and are ignored).
    std::string_view name(e->d_name);
    if (name.size() != 29 || !name.starts_with("ckpt-") || !name.ends_with(".bin")) continue;
    std::string_view digits = name.substr(5, 20);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    steps.push_back(std::stoull(std::string(digits)));
  }
  closedir(d);
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

}  // namespace

std::string checkpointPath(const std::string& dir, uint64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "ckpt-%020llu.bin", static_cast<unsigned long long>(step));
  return dir + "/" + name;
}

void writeCheckpoint(const std::string& dir, const CheckpointState& state,
                     std::span<const float> params, std::span<const float> momentum, int keep) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw std::runtime_error(errnoText("cannot create checkpoint directory", dir));
  if (params.size() != momentum.size())
    throw std::runtime_error("checkpoint: parameter and momentum sizes differ");
  std::vector<uint8_t> header(kFixedHeader + state.model.size());
  uint8_t* h = header.data();
  wire::putU32(h, kCkptMagic);
  wire::putU32(h + 4, kCkptVersion);
  wire::putU64(h + 8, state.step);
  wire::putU64(h + 16, state.config_epoch);
  h[24] = state.topology;
  h[25] = state.pinning;
  wire::putU64(h + 28, state.seed);
  wire::putU64(h + 36, params.size());
  wire::putU32(h + 44, uint32_t(state.model.size()));
  std::memcpy(h + kFixedHeader, state.model.data(), state.model.size());

  const std::string path = checkpointPath(dir, state.step);
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(errnoText("cannot create", tmp));
  try {
    uint32_t crc = crcOf(0, header.data(), header.size());
    crc = crcOf(crc, params.data(), params.size_bytes());
    crc = crcOf(crc, momentum.data(), momentum.size_bytes());
    writeAll(fd, header.data(), header.size(), tmp);
    writeAll(fd, params.data(), params.size_bytes(), tmp);
    writeAll(fd, momentum.data(), momentum.size_bytes(), tmp);
    uint8_t trailer[4];
    wire::putU32(trailer, crc);
    writeAll(fd, trailer, sizeof(trailer), tmp);
    if (fsync(fd) != 0) throw std::runtime_error(errnoText("cannot fsync", tmp));
  } catch (...) {
    close(fd);
    unlink(tmp.c_str());
    throw;
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error(errnoText("cannot rename checkpoint to", path));
  // The rename is durable only once the directory entry is.
  int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  std::vector<uint64_t> steps = listSteps(dir);
  for (size_t i = size_t(std::max(keep, 1)); i < steps.size(); ++i)
    unlink(checkpointPath(dir, steps[i]).c_str());
}

bool loadCheckpoint(const std::string& dir, uint64_t step, CheckpointState& state,
                    std::span<float> params, std::span<float> momentum, std::string& error) {
  const std::string path = checkpointPath(dir, step);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = std::strerror(errno);
    return false;
  }
  struct stat st {};
  fstat(fd, &st);
  auto fail = [&](const std::string& why) {
    error = why;
    close(fd);
    return false;
  };
  uint8_t fixed[kFixedHeader];
  if (!readAll(fd, fixed, sizeof(fixed))) return fail("truncated header");
  if (wire::getU32(fixed) != kCkptMagic) return fail("bad magic");
  if (wire::getU32(fixed + 4) != kCkptVersion) return fail("unsupported version");
  uint64_t count = wire::getU64(fixed + 36);
  uint32_t model_len = wire::getU32(fixed + 44);
  if (model_len > 4096) return fail("bad model name length");
  if (count != params.size() || count != momentum.size())
    return fail("holds " + std::to_string(count) + " parameters, this model has " +
                std::to_string(params.size()) + " (different --model?)");
  uint64_t expected = kFixedHeader + model_len + 2 * count * sizeof(float) + 4;
  if (uint64_t(st.st_size) != expected)
    return fail("torn: " + std::to_string(st.st_size) + " bytes, expected " +
                std::to_string(expected));
  std::string model(model_len, '\0');
  if (!readAll(fd, model.data(), model_len)) return fail("truncated");
  if (!readAll(fd, params.data(), params.size_bytes()) ||
      !readAll(fd, momentum.data(), momentum.size_bytes()))
    return fail("truncated payload");
  uint8_t trailer[4];
  if (!readAll(fd, trailer, 4)) return fail("truncated trailer");
  close(fd);
  uint32_t crc = crcOf(0, fixed, sizeof(fixed));
  crc = crcOf(crc, model.data(), model.size());
  crc = crcOf(crc, params.data(), params.size_bytes());
  crc = crcOf(crc, momentum.data(), momentum.size_bytes());
  if (crc != wire::getU32(trailer)) {
    error = "CRC32 mismatch (corrupt)";
    return false;
  }
  state.step = wire::getU64(fixed + 8);
  state.config_epoch = wire::getU64(fixed + 16);
  state.topology = fixed[24];
  state.pinning = fixed[25];
  state.seed = wire::getU64(fixed + 28);
  state.model = model;
  if (state.step != step) {
    error = "file name and content disagree on the step";
    return false;
  }
  return true;
}

std::optional<CheckpointState> loadNewestCheckpoint(const std::string& dir, std::span<float> params,
                                                    std::span<float> momentum) {
  for (uint64_t step : listSteps(dir)) {
    CheckpointState state;
    std::string error;
    if (loadCheckpoint(dir, step, state, params, momentum, error)) return state;
    std::fprintf(stderr, "bpftrain-train: skipping checkpoint %s: %s\n",
                 checkpointPath(dir, step).c_str(), error.c_str());
  }
  return std::nullopt;
}

}  // namespace bpftrain::trainer::model
