// A multi-layer perceptron (ReLU hidden layers, softmax cross-entropy) whose parameters and
// gradients each live in ONE flat 2 MiB-aligned buffer, so a step's gradient exchange is a single
// allreduce. Compute is OpenBLAS sgemm, single-threaded: ranks are processes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/model/dataset.h"
#include "trainer/model/huge_buffer.h"

namespace bpftrain::trainer::model {

struct ModelSpec {
  int inputs = 64;
  int outputs = 10;
  int width = 128;
  int depth = 1;  // hidden layers
  std::string name = "digits";
};

// "digits" (64-128-10) or "mlp:WIDTHxDEPTH"; nullopt-like: returns false with `error` set.
bool parseModelSpec(std::string_view text, ModelSpec& out, std::string& error);

// Makes BLAS single-threaded for this process (each rank is its own process).
void useSingleThreadedBlas();

class Mlp {
 public:
  // `gradient_tail` extra floats follow the gradients in the same buffer: the trainer lets small
  // control words ride along with the gradient allreduce.
  Mlp(const ModelSpec& spec, int max_batch, bool hugepages, size_t gradient_tail = 0);

  // Deterministic He initialisation from `seed`: the same bits on every rank.
  void initialize(uint64_t seed);
  // Forward + backward over the rows `batch` of `data`; writes the batch-mean gradient into
  // gradients() and returns the mean loss. Allocates nothing.
  float computeGradients(const Dataset& data, std::span<const uint32_t> batch);
  // SGD with momentum on the (already averaged) gradient: v = mu v + scale g; p -= lr v.
  void applyGradients(float lr, float momentum, float grad_scale);
  // Classification accuracy over a whole dataset (in chunks of max_batch rows).
  double accuracy(const Dataset& data);

  std::span<float> parameters() { return params_.span(); }
  std::span<float> gradients() { return grads_.span().first(params_.size()); }
  // The gradients and the tail: what one allreduce sums.
  std::span<float> gradientsWithTail() { return grads_.span(); }
  std::span<float> gradientTail() { return grads_.span().subspan(params_.size()); }
  std::span<float> momentum() { return velocity_.span(); }
  const HugeBuffer& parameterBuffer() const { return params_; }
  const HugeBuffer& gradientBuffer() const { return grads_; }
  const HugeBuffer& momentumBuffer() const { return velocity_; }
  size_t parameterCount() const { return params_.size(); }
  const ModelSpec& spec() const { return spec_; }

 private:
  struct Layer {
    int in, out;
    size_t w, b;  // offsets into the flat buffers
  };
  void forward(const Dataset& data, const uint32_t* rows, int n);

  ModelSpec spec_;
  int max_batch_;
  std::vector<Layer> layers_;
  HugeBuffer params_, grads_, velocity_;
  std::vector<std::vector<float>> act_;  // act_[0] input, act_[l+1] output of layer l
  std::vector<float> delta_, delta_prev_;
};

}  // namespace bpftrain::trainer::model
