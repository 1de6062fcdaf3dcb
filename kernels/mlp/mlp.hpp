// File: kernels/mlp/mlp.hpp
//
// The operators of rtrain's multilayer perceptron other than its matrix products (those
// are BLAS / cuBLAS): bias + activation forward and backward, the losses with their
// gradients, the squared norm for gradient clipping, and the AdamW update. All arrays
// are float32, row-major (m rows of n: row i at x + i*n).
//
//   rkit::kernels::bias_act_forward_cpu(Activation::Gelu, m, n, bias, z, y);  // z += bias; y = act(z)
//   rkit::kernels::bias_act_backward_cpu(Activation::Gelu, m, n, z, dy, dz, dbias);
//   double loss = rkit::kernels::mse_loss_cpu(m, k, pred, target, 1.0f / (m * k), dpred);
//   rkit::kernels::adamw_update_cpu(n, params, grads, exp_avg, exp_avg_sq, hp);
//
// Two CPU versions of each: *_ref, the specification (plain loops, in double where it
// matters, std::erfc / std::exp, built with -ffp-contract=off), and *_cpu, what
// `rtrain run --device cpu` uses (vectorised, float, one thread). The tests compare
// *_cpu with *_ref within the tolerances below, and the CUDA versions (CUDA builds only:
// RKIT_HAVE_CUDA=1) with *_ref on a lent GPU (tests/gpu/kernels_gpu_test.cpp).
// Every function is deterministic: the same inputs give the same bits, run after run
// (sums are taken in a fixed order), which rtrain's bitwise-resume guarantee needs.
//
// Tolerances (each *_cpu and CUDA version against *_ref):
//   activations and their derivatives: |error| <= 4e-6 * (1 + |exact|) (so for
//     dz = dy * act'(z), 4e-6 * (|dy| + |dz|); likewise for the loss gradients, with
//     scale for dy)
//   bias gradient, losses, squared norm: relative 1e-5 (sums of up to 2^24 terms;
//     relative to the sum of the terms' magnitudes where they have both signs, plus
//     the terms' own errors for the bias gradient)
//   AdamW: parameters and moments within 4 float ulps of the reference's (in fact the
//     same bits: both round each operation as adamw_update_ref does).
// For one build, the *_cpu results do not depend on the machine's vector extensions
// either (no FMA contraction, sums of a fixed shape whatever the vector width).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(RKIT_HAVE_CUDA) && RKIT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace rkit::kernels {

// Identity: y = z. Relu: max(z, 0) (derivative 0 at z <= 0). Gelu: the exact GELU,
// z * Phi(z) = 0.5 z (1 + erf(z / sqrt 2)), as PyTorch's nn.GELU() (approximate='none').
enum class Activation { Identity, Relu, Gelu };

// z[i][j] += bias[j]; y[i][j] = act(z[i][j]) for i < m, j < n. z keeps the
// pre-activation (the backward pass needs it); y may equal z only for Identity.
void bias_act_forward_ref(Activation act, std::size_t m, std::size_t n, const float* bias, float* z, float* y);
void bias_act_forward_cpu(Activation act, std::size_t m, std::size_t n, const float* bias, float* z, float* y);

// dz[i][j] = dy[i][j] * act'(z[i][j]); dbias[j] = sum over i of dz[i][j] (in order of
// i, overwritten, not accumulated). dz may equal dy. z is the pre-activation.
void bias_act_backward_ref(Activation act, std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                           float* dbias);
void bias_act_backward_cpu(Activation act, std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                           float* dbias);

// Mean squared error over m x k predictions: returns sum (pred - target)^2 (in double),
// and sets dpred[i] = 2 * scale * (pred[i] - target[i]) (the gradient of scale * sum;
// scale = 1 / (m * k) gives the mean's). dpred may equal pred.
double mse_loss_ref(std::size_t m, std::size_t k, const float* pred, const float* target, float scale, float* dpred);
double mse_loss_cpu(std::size_t m, std::size_t k, const float* pred, const float* target, float scale, float* dpred);

// Softmax cross-entropy over m rows of c logits with class labels in [0, c): returns
// sum over rows of -log softmax(logits[i])[labels[i]] (in double), and sets
// dlogits[i][j] = scale * (softmax(logits[i])[j] - (j == labels[i])). dlogits may equal
// logits. Labels outside [0, c) are the caller's error (rtrain checks its data).
double cross_entropy_loss_ref(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels,
                              float scale, float* dlogits);
double cross_entropy_loss_cpu(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels,
                              float scale, float* dlogits);
// The number of rows whose largest logit (the first, on ties) is the label: accuracy.
std::size_t count_correct_ref(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels);

// sum x[i]^2 in double: the gradient norm's square.
double sum_squares_ref(std::size_t n, const float* x);
double sum_squares_cpu(std::size_t n, const float* x);

// AdamW (Loshchilov & Hutter; PyTorch's torch.optim.AdamW, amsgrad off), one step, for
// n parameters, with the gradient first multiplied by grad_scale (clipping):
//   g = grad_scale * grad
//   p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p = p - (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// step counts from 1 (make throws std::invalid_argument below that). The bias corrections
// are computed once, in double, by the caller's AdamwStep::make. Each line is rounded to
// float operation by operation, left to right, as PyTorch's CPU kernels do.
struct AdamwStep {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f, grad_scale = 1.0f;
  float step_size = 0;   // lr / (1 - beta1^step)
  float bias2_sqrt = 1;  // sqrt(1 - beta2^step)
  static AdamwStep make(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                        std::int64_t step);
};
void adamw_update_ref(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                      const AdamwStep& s);
void adamw_update_cpu(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                      const AdamwStep& s);

#if defined(RKIT_HAVE_CUDA) && RKIT_HAVE_CUDA
// The CUDA versions: device pointers, enqueued on `stream`, returning the launch's
// status (cudaSuccess without a launch when there is nothing to do; an empty sum is
// still written: *out = 0, dbias = 0). Reductions write their double result to device
// memory (*out, overwritten), deterministically (a fixed tree, no atomics on floats);
// those of more than one block take their partial sums' room from the stream-ordered
// allocator (cudaMallocAsync, freed on the stream behind the kernels), whose error,
// if any, is returned.
cudaError_t bias_act_forward(Activation act, std::size_t m, std::size_t n, const float* bias, float* z, float* y,
                             cudaStream_t stream);
cudaError_t bias_act_backward(Activation act, std::size_t m, std::size_t n, const float* z, const float* dy, float* dz,
                              float* dbias, cudaStream_t stream);
cudaError_t mse_loss(std::size_t m, std::size_t k, const float* pred, const float* target, float scale, float* dpred,
                     double* out, cudaStream_t stream);
cudaError_t cross_entropy_loss(std::size_t m, std::size_t c, const float* logits, const std::int32_t* labels,
                               float scale, float* dlogits, double* out, cudaStream_t stream);
cudaError_t sum_squares(std::size_t n, const float* x, double* out, cudaStream_t stream);
cudaError_t adamw_update(std::size_t n, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                         const AdamwStep& s, cudaStream_t stream);
#endif

}  // namespace rkit::kernels
