// int8 x int8 GEMM for the output layer of small decode steps, on AVX512-VNNI.
//
// y[M, N] = x[M, K] @ w[N, K]^T with w = q * s[n] (int8 codes q, one float scale per output
// channel: engine/quantization/int8_head.py) and x quantised per row and block of 32 to int8
// (ggml's Q8_0, q8_0.h), as llama.cpp computes its Q8_0 output layer. vpdpbusd multiplies
// unsigned by signed bytes, so the weights are stored as u = q + 128 and per row
// y = s[n] * (sum_g dx_g * sum(u * qx_g) - 128 * sum_g dx_g * sum(qx_g)).
//
// The weights are read once per call for all M rows (16-channel blocks split across torch's
// intra-op threads), and a row's result does not depend on the rows it shares the call with.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include "gil.h"
#include "q8_0.h"

#include <algorithm>
#include <array>
#include <utility>

// codes: uint8 [N/16, K/32, 8, 64]; vector j (0..7) of a (block, group): byte 4*lane+t holds
// q + 128 of channel lane, input 4*j+t.
template <int MR>
static void tile(const int8_t* qx, const float* dx, const float* row_dsum, int64_t K,
                 const uint8_t* codes, const float* scales, int64_t N, int64_t n0, float* out) {
  const int64_t groups = K / 32;
  __m512 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* c = codes + g * 512;
    __m512i w[8];
    for (int j = 0; j < 8; ++j) w[j] = _mm512_loadu_si512(c + 64 * j);
    for (int m = 0; m < MR; ++m) {
      const int32_t* q = reinterpret_cast<const int32_t*>(qx + m * K + g * 32);
      __m512i d = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) d = _mm512_dpbusd_epi32(d, w[j], _mm512_set1_epi32(q[j]));
      acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(dx[m * groups + g]), acc[m]);
    }
  }
  const __m512 s = _mm512_loadu_ps(scales + n0);
  for (int m = 0; m < MR; ++m) {
    const __m512 shifted = _mm512_sub_ps(acc[m], _mm512_set1_ps(128.f * row_dsum[m]));
    _mm512_storeu_ps(out + m * N + n0, _mm512_mul_ps(s, shifted));
  }
}

using TileFn = void (*)(const int8_t*, const float*, const float*, int64_t, const uint8_t*,
                        const float*, int64_t, int64_t, float*);

template <int... Ms>
static constexpr std::array<TileFn, sizeof...(Ms)> tiles(std::integer_sequence<int, Ms...>) {
  return {&tile<Ms + 1>...};
}
constexpr int kRows = 4;

torch::Tensor int8_int8_gemm(torch::Tensor x, torch::Tensor codes, torch::Tensor scales) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous());
  TORCH_CHECK(codes.dim() == 4 && codes.scalar_type() == torch::kUInt8 && codes.size(2) == 8 &&
              codes.size(3) == 64 && codes.is_contiguous());
  const int64_t M = x.size(0), K = x.size(1), N = codes.size(0) * 16, G = K / 32;
  TORCH_CHECK(K % 32 == 0 && codes.size(1) == G && scales.dim() == 1 && scales.size(0) == N &&
              scales.scalar_type() == torch::kFloat32 && scales.is_contiguous());
  auto qx = torch::empty({M, K}, x.options().dtype(torch::kInt8));
  auto dx = torch::empty({M, G}, x.options());
  auto dsum = torch::empty({M, G}, x.options());
  quantize_q8_0(x.data_ptr<float>(), M, K, qx.data_ptr<int8_t>(), dx.data_ptr<float>(),
                dsum.data_ptr<float>());
  auto row_dsum = dsum.sum(1).contiguous();  // per row: sum_g dx_g * sum(qx_g)
  auto out = torch::empty({M, N}, x.options());
  const MaybeReleaseGil no_gil;
  static constexpr auto fns = tiles(std::make_integer_sequence<int, kRows>{});
  const int8_t* qp = qx.data_ptr<int8_t>();
  const float* dp = dx.data_ptr<float>();
  const float* rp = row_dsum.data_ptr<float>();
  const uint8_t* cp = codes.data_ptr<uint8_t>();
  const float* sp = scales.data_ptr<float>();
  float* outp = out.data_ptr<float>();
  at::parallel_for(0, N / 16, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t m0 = 0; m0 < M; m0 += kRows) {
        const int64_t mr = std::min<int64_t>(kRows, M - m0);
        fns[mr - 1](qp + m0 * K, dp + m0 * G, rp + m0, K, cp + b * G * 512, sp, N, b * 16,
                    outp + m0 * N);
      }
  });
  return out;
}

TORCH_LIBRARY_FRAGMENT(ascend_router, m) {
  m.def("int8_int8_gemm(Tensor x, Tensor codes, Tensor scales) -> Tensor");
  m.impl("int8_int8_gemm", torch::kCPU, &int8_int8_gemm);
}
