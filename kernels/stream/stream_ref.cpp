// The CPU references of kernels/stream: see stream.hpp.
#include "stream.hpp"

namespace rkit::kernels {

void stream_copy_ref(double* dst, const double* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = x[i];
}

void stream_scale_ref(double* dst, const double* x, double q, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = q * x[i];
}

void stream_add_ref(double* dst, const double* x, const double* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = x[i] + y[i];
}

void stream_triad_ref(double* dst, const double* x, const double* y, double q, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double qy = q * y[i];  // rounded on its own, as the CUDA kernel does
    dst[i] = x[i] + qy;
  }
}

}  // namespace rkit::kernels
