#include "trainer/model/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <random>

extern "C" void openblas_set_num_threads(int);

namespace bpftrain::trainer::model {

bool parseModelSpec(std::string_view text, ModelSpec& out, std::string& error) {
  out = ModelSpec{};
  if (text == "digits") return true;
  constexpr std::string_view kPrefix = "mlp:";
  auto bad = [&] {
    error = "--model " + std::string(text) +
            ": expected digits or mlp:WIDTHxDEPTH (e.g. mlp:4096x2, width 1..65536, depth 1..16)";
    return false;
  };
  if (!text.starts_with(kPrefix)) return bad();
  std::string_view rest = text.substr(kPrefix.size());
  size_t x = rest.find('x');
  if (x == std::string_view::npos) return bad();
  int w = 0, d = 0;
  auto r1 = std::from_chars(rest.data(), rest.data() + x, w);
  auto r2 = std::from_chars(rest.data() + x + 1, rest.data() + rest.size(), d);
  if (r1.ec != std::errc() || r1.ptr != rest.data() + x || r2.ec != std::errc() ||
      r2.ptr != rest.data() + rest.size() || w < 1 || w > 65536 || d < 1 || d > 16)
    return bad();
  out.width = w;
  out.depth = d;
  out.name = std::string(text);
  return true;
}

void useSingleThreadedBlas() { openblas_set_num_threads(1); }

Mlp::Mlp(const ModelSpec& spec, int max_batch, bool hugepages, size_t gradient_tail)
    : spec_(spec), max_batch_(max_batch) {
  size_t offset = 0;
  int in = spec.inputs;
  for (int l = 0; l <= spec.depth; ++l) {
    int out = l == spec.depth ? spec.outputs : spec.width;
    Layer layer{in, out, offset, offset + size_t(in) * size_t(out)};
    offset = layer.b + size_t(out);
    layers_.push_back(layer);
    in = out;
  }
  params_ = HugeBuffer(offset, hugepages);
  grads_ = HugeBuffer(offset + gradient_tail, hugepages);
  velocity_ = HugeBuffer(offset, hugepages);
  act_.resize(layers_.size() + 1);
  act_[0].resize(size_t(max_batch) * size_t(spec.inputs));
  size_t widest = size_t(std::max(spec.inputs, std::max(spec.width, spec.outputs)));
  for (size_t l = 0; l < layers_.size(); ++l)
    act_[l + 1].resize(size_t(max_batch) * size_t(layers_[l].out));
  delta_.resize(size_t(max_batch) * widest);
  delta_prev_.resize(size_t(max_batch) * widest);
}

void Mlp::initialize(uint64_t seed) {
  std::mt19937_64 rng(seed);
  float* p = params_.data();
  for (const Layer& layer : layers_) {
    // He initialisation for ReLU; Box-Muller by hand so the bits do not depend on the C++
    // library's normal_distribution.
    float scale = std::sqrt(2.0f / float(layer.in));
    size_t n = size_t(layer.in) * size_t(layer.out);
    for (size_t i = 0; i < n; i += 2) {
      double u1 = (double(rng() >> 11) + 1.0) * 0x1.0p-53;
      double u2 = double(rng() >> 11) * 0x1.0p-53;
      double r = std::sqrt(-2.0 * std::log(u1));
      p[layer.w + i] = float(r * std::cos(2 * M_PI * u2)) * scale;
      if (i + 1 < n) p[layer.w + i + 1] = float(r * std::sin(2 * M_PI * u2)) * scale;
    }
    std::fill(p + layer.b, p + layer.b + layer.out, 0.0f);
  }
  std::fill(velocity_.data(), velocity_.data() + velocity_.size(), 0.0f);
  std::fill(grads_.data(), grads_.data() + grads_.size(), 0.0f);
}

void Mlp::forward(const Dataset& data, const uint32_t* rows, int n) {
  float* x = act_[0].data();
  for (int i = 0; i < n; ++i)
    std::memcpy(x + size_t(i) * size_t(spec_.inputs), data.row(rows[i]),
                sizeof(float) * size_t(spec_.inputs));
  const float* p = params_.data();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    float* out = act_[l + 1].data();
    for (int i = 0; i < n; ++i)
      std::memcpy(out + size_t(i) * L.out, p + L.b, sizeof(float) * L.out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, L.out, L.in, 1.0f, act_[l].data(),
                L.in, p + L.w, L.out, 1.0f, out, L.out);
    if (l + 1 < layers_.size())
      for (size_t i = 0; i < size_t(n) * size_t(L.out); ++i) out[i] = std::max(out[i], 0.0f);
  }
}

float Mlp::computeGradients(const Dataset& data, std::span<const uint32_t> batch) {
  const int n = int(batch.size());
  forward(data, batch.data(), n);
  const Layer& last = layers_.back();
  const float* logits = act_.back().data();
  float* d = delta_.data();
  double loss = 0;
  for (int i = 0; i < n; ++i) {
    const float* z = logits + size_t(i) * last.out;
    float* g = d + size_t(i) * last.out;
    float zmax = *std::max_element(z, z + last.out);
    double sum = 0;
    for (int k = 0; k < last.out; ++k) sum += std::exp(double(z[k] - zmax));
    int label = data.y[batch[i]];
    loss += std::log(sum) - double(z[label] - zmax);
    for (int k = 0; k < last.out; ++k) g[k] = float(std::exp(double(z[k] - zmax)) / sum) / float(n);
    g[label] -= 1.0f / float(n);
  }
  float* grads = grads_.data();
  const float* p = params_.data();
  for (size_t l = layers_.size(); l-- > 0;) {
    const Layer& L = layers_[l];
    const float* a = act_[l].data();
    // dW = a^T delta (in × out), db = column sums of delta.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L.in, L.out, n, 1.0f, a, L.in,
                delta_.data(), L.out, 0.0f, grads + L.w, L.out);
    float* db = grads + L.b;
    std::fill(db, db + L.out, 0.0f);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < L.out; ++k) db[k] += delta_[size_t(i) * L.out + k];
    if (l == 0) break;
    // delta_prev = (delta W^T) ⊙ relu'(a).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, L.in, L.out, 1.0f, delta_.data(), L.out,
                p + L.w, L.out, 0.0f, delta_prev_.data(), L.in);
    for (size_t i = 0; i < size_t(n) * size_t(L.in); ++i)
      if (a[i] <= 0.0f) delta_prev_[i] = 0.0f;
    std::swap(delta_, delta_prev_);
  }
  return float(loss / n);
}

void Mlp::applyGradients(float lr, float momentum, float grad_scale) {
  float* p = params_.data();
  float* v = velocity_.data();
  const float* g = grads_.data();
  const size_t n = params_.size();
  for (size_t i = 0; i < n; ++i) {
    v[i] = momentum * v[i] + grad_scale * g[i];
    p[i] -= lr * v[i];
  }
}

double Mlp::accuracy(const Dataset& data) {
  size_t correct = 0;
  std::vector<uint32_t> rows(static_cast<size_t>(max_batch_));
  for (size_t start = 0; start < data.rows(); start += size_t(max_batch_)) {
    int n = int(std::min(size_t(max_batch_), data.rows() - start));
    for (int i = 0; i < n; ++i) rows[size_t(i)] = uint32_t(start + size_t(i));
    forward(data, rows.data(), n);
    const float* z = act_.back().data();
    for (int i = 0; i < n; ++i) {
      const float* zi = z + size_t(i) * spec_.outputs;
      int best = int(std::max_element(zi, zi + spec_.outputs) - zi);
      if (best == data.y[start + size_t(i)]) ++correct;
    }
  }
  return data.rows() == 0 ? 0.0 : double(correct) / double(data.rows());
}

}  // namespace bpftrain::trainer::model
