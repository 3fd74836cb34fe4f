// Crash-safe checkpoints: temp file, fsync, rename, fsync of the directory, CRC32 over everything
// before the trailer. resume picks the newest checkpoint that verifies and skips torn or corrupt
// ones, so a crash while writing never loses more than K steps.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace bpftrain::trainer::model {

struct CheckpointState {
  uint64_t step = 0;          // steps completed
  uint64_t config_epoch = 0;  // applied controller epoch
  uint8_t topology = 0;
  uint8_t pinning = 0;
  uint64_t seed = 0;
  std::string model;  // model spec text; a resume with another model is refused
};

// Writes DIR/ckpt-<step>.bin atomically and keeps the newest `keep` checkpoints.
// Throws std::runtime_error naming the path and errno.
void writeCheckpoint(const std::string& dir, const CheckpointState& state,
                     std::span<const float> params, std::span<const float> momentum, int keep = 3);

// Newest checkpoint in `dir` whose size, header and CRC verify and whose parameter count matches;
// fills params/momentum. Each skipped file is logged to stderr with the reason.
std::optional<CheckpointState> loadNewestCheckpoint(const std::string& dir, std::span<float> params,
                                                    std::span<float> momentum);

// Loads a specific step (the one rank 0 chose); false if that file does not verify.
bool loadCheckpoint(const std::string& dir, uint64_t step, CheckpointState& state,
                    std::span<float> params, std::span<float> momentum, std::string& error);

std::string checkpointPath(const std::string& dir, uint64_t step);

}  // namespace bpftrain::trainer::model
