// Block-scaled weight codes -> floats through a 256-entry lookup table, for the CPU
// implementations of fp8_block_matmul and mxfp4_matmul (npu_ops/ops/cpu_quant.py).
//
// codes: uint8 [N, C], contiguous (FP8 e4m3 codes, or MXFP4 e2m1 nibble pairs);
// lut: float32 [256, P], contiguous: the P values one byte holds (P = 1 for FP8, 2 for MXFP4,
//   low nibble first), built in Python with torch's own float8 / e2m1 casts;
// scale: float32 [ceil(N / block_n), ceil(K / block_k)] with K = C * P;
// rows [row_start, row_start + R) are dequantised into out [R, K] (float32, bfloat16 or float16;
// the caller's buffer, re-used across bands so that no band pays fresh pages):
//   out[i, j] = lut[codes[r, j / P], j % P] * scale[r / block_n, j / block_k], r = row_start + i,
// one float32 multiply rounded once to `dtype` (float32, bfloat16 or float16, round to nearest
// even as torch's casts), so the result is bit-equal to the references' float32 dequantisation
// (npu_ops/ops/quant.py: dequantize_fp8_block, dequantize_mxfp4) followed by `.to(dtype)`.
// Rows are split over torch's intra-op pool.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include "gil.h"

#include <algorithm>
#include <cstdint>

namespace {

template <typename T>
void dequantize_rows(const uint8_t* codes, const float* lut, const float* scale, int64_t c,
                     int64_t p, int64_t k, int64_t scale_cols, int64_t block_n, int64_t block_k,
                     int64_t row_start, int64_t row_end, T* out) {
  at::parallel_for(row_start, row_end, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* row = codes + r * c;
      const float* srow = scale + (r / block_n) * scale_cols;
      T* dst = out + (r - row_start) * k;
      for (int64_t j0 = 0, kb = 0; j0 < k; j0 += block_k, ++kb) {
        const float s = srow[kb];
        const int64_t j1 = std::min(k, j0 + block_k);
        if (p == 1) {
          for (int64_t j = j0; j < j1; ++j) dst[j] = static_cast<T>(lut[row[j]] * s);
        } else {  // p == 2: a byte's two values (block_k even, so a block holds whole bytes)
          for (int64_t b = j0 / 2; b < j1 / 2; ++b) {
            const float* v = lut + 2 * row[b];
            dst[2 * b] = static_cast<T>(v[0] * s);
            dst[2 * b + 1] = static_cast<T>(v[1] * s);
          }
        }
      }
    }
  });
}

void block_dequantize(const at::Tensor& codes, const at::Tensor& lut, const at::Tensor& scale,
                      int64_t block_n, int64_t block_k, int64_t row_start, at::Tensor out) {
  TORCH_CHECK(codes.scalar_type() == at::kByte && codes.dim() == 2 && codes.is_contiguous(),
              "block_dequantize: codes must be contiguous uint8 [N, C]");
  TORCH_CHECK(lut.scalar_type() == at::kFloat && lut.dim() == 2 && lut.size(0) == 256 &&
                  lut.is_contiguous(),
              "block_dequantize: lut must be contiguous float32 [256, P]");
  TORCH_CHECK(block_n > 0 && block_k > 0, "block_dequantize: block sizes must be positive");
  TORCH_CHECK(lut.size(1) == 1 || (lut.size(1) == 2 && block_k % 2 == 0),
              "block_dequantize: lut must hold 1 value a byte, or 2 with an even block_k");
  const int64_t n = codes.size(0), c = codes.size(1), p = lut.size(1), k = c * p;
  const int64_t scale_rows = (n + block_n - 1) / block_n, scale_cols = (k + block_k - 1) / block_k;
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.is_contiguous() && scale.dim() == 2 &&
                  scale.size(0) == scale_rows && scale.size(1) == scale_cols,
              "block_dequantize: scale must be contiguous float32 [", scale_rows, ", ", scale_cols,
              "], got ", scale.sizes());
  TORCH_CHECK(out.dim() == 2 && out.size(1) == k && out.is_contiguous(),
              "block_dequantize: out must be contiguous [R, ", k, "]");
  const int64_t row_end = row_start + out.size(0);
  TORCH_CHECK(0 <= row_start && row_end <= n,
              "block_dequantize: rows [", row_start, ", ", row_end, ") outside [0, ", n, ")");
  const MaybeReleaseGil no_gil;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, out.scalar_type(), "block_dequantize", [&] {
    dequantize_rows<scalar_t>(codes.data_ptr<uint8_t>(), lut.data_ptr<float>(),
                              scale.data_ptr<float>(), c, p, k, scale_cols, block_n, block_k,
                              row_start, row_end, out.data_ptr<scalar_t>());
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ascend_router, m) {
  m.def(
      "block_dequantize(Tensor codes, Tensor lut, Tensor scale, int block_n, int block_k, "
      "int row_start, Tensor(a!) out) -> ()");
  m.impl("block_dequantize", torch::kCPU, &block_dequantize);
}
