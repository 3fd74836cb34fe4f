// The GPU model's element-wise kernels, CUDA C++ compiled at run time by NVRTC (kernels.h).
// CMake embeds this file in the library as kKernelSource (kernels_source.inc.in); the host test
// compiles it as C++ too, to run the GPU model's math on the CPU. Grid-stride loops throughout:
// launches use a bounded grid whatever the size. Sums keep the CPU model's order and precision
// (double for the softmax denominator and the loss, row order for the bias gradient), and NVRTC
// runs with --fmad=false so a*b+c rounds as the CPU's does.
typedef unsigned long long u64;
#define BPFTRAIN_FOR(i, n)                                          \
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += u64(gridDim.x) * blockDim.x)

// out[i, f] = x[rows[i], f]; labels[i] = y[rows[i]]: the batch from the device-resident data set.
extern "C" __global__ void bpftrain_gather_rows(const float* x, const int* y, const unsigned* rows,
                                                int n, int features, float* out, int* labels) {
  BPFTRAIN_FOR(i, u64(n) * features) {
    const u64 r = i / features, f = i % features;
    out[i] = x[u64(rows[r]) * features + f];
  }
  BPFTRAIN_FOR(i, u64(n)) labels[i] = y[rows[i]];
}

// out = out + bias (row broadcast), then ReLU on hidden layers.
extern "C" __global__ void bpftrain_bias_act(float* out, const float* bias, int n, int width,
                                             int relu) {
  BPFTRAIN_FOR(i, u64(n) * width) {
    const float v = out[i] + bias[i % width];
    out[i] = relu && v < 0.0f ? 0.0f : v;  // std::max(v, 0.0f)
  }
}

// Softmax cross-entropy per row: delta = (softmax(z) - onehot(label)) / n, row_loss in double.
extern "C" __global__ void bpftrain_softmax_xent(const float* logits, const int* labels, int n,
                                                 int classes, float* delta, double* row_loss) {
  BPFTRAIN_FOR(i, u64(n)) {
    const float* z = logits + i * classes;
    float* g = delta + i * classes;
    float zmax = z[0];
    for (int k = 1; k < classes; ++k) zmax = z[k] > zmax ? z[k] : zmax;
    double sum = 0;
    for (int k = 0; k < classes; ++k) sum += exp(double(z[k] - zmax));
    const int label = labels[i];
    row_loss[i] = log(sum) - double(z[label] - zmax);
    for (int k = 0; k < classes; ++k) g[k] = float(exp(double(z[k] - zmax)) / sum) / float(n);
    g[label] -= 1.0f / float(n);
  }
}

// The batch-mean loss, summed in row order by one thread (n is a batch: small).
extern "C" __global__ void bpftrain_mean_loss(const double* row_loss, int n, float* loss) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0;
  for (int i = 0; i < n; ++i) s += row_loss[i];
  *loss = float(s / n);
}

// db[k] = sum over rows of delta[i, k], in row order.
extern "C" __global__ void bpftrain_column_sums(const float* delta, int n, int width, float* db) {
  BPFTRAIN_FOR(k, u64(width)) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += delta[u64(i) * width + k];
    db[k] = s;
  }
}

// delta_prev = delta_prev * relu'(a).
extern "C" __global__ void bpftrain_relu_mask(float* delta_prev, const float* a, u64 count) {
  BPFTRAIN_FOR(i, count) if (a[i] <= 0.0f) delta_prev[i] = 0.0f;
}

// SGD with momentum on the averaged gradient: v = mu v + scale g; p -= lr v.
extern "C" __global__ void bpftrain_sgd_momentum(float* p, float* v, const float* g, u64 count,
                                                 float lr, float mu, float scale) {
  BPFTRAIN_FOR(i, count) {
    v[i] = mu * v[i] + scale * g[i];
    p[i] -= lr * v[i];
  }
}

// correct += rows whose first largest logit is the label (std::max_element's tie rule).
extern "C" __global__ void bpftrain_count_correct(const float* logits, const int* labels, int n,
                                                  int classes, unsigned* correct) {
  BPFTRAIN_FOR(i, u64(n)) {
    const float* z = logits + i * classes;
    int best = 0;
    for (int k = 1; k < classes; ++k)
      if (z[k] > z[best]) best = k;
    if (best == labels[i]) atomicAdd(correct, 1u);
  }
}
