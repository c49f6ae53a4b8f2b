// int4 x int8 GEMM for decode batches on x86 CPUs with AVX512-VNNI.
//
// y[M, N] = x[M, K] @ w[N, K]^T with w = code * scale + offset per group of 32 inputs
// (engine/quantization/weight_int4.py's layout, GGUF Q4_1 blocks) and x quantised per row and
// group of 32 to int8 with one float scale (ggml's Q8_0 block, as llama.cpp quantises
// activations for its Q4 dot products: ggml-cpu quants.c). Per group the integer dot product
// sum(code * qx) runs on vpdpbusd (unsigned weight bytes x signed activation bytes, 4 products
// per 32-bit lane), then y += scale * dx * dot + offset * dx * sum(qx).
//
// The weights are read once per call for all M rows (in 16-channel blocks, split across
// torch's intra-op threads), and every row's result is computed in the same order whatever M
// is, so a row's output does not depend on the rows it is batched with.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include "gil.h"
#include "q8_0.h"

#include <algorithm>
#include <array>
#include <utility>

// codes: uint8 [N/16, K/32, 4, 64]; vector j (0..3) of a (block, group): byte 4*lane+t holds
// the code of channel lane, input 4*j+t (low nibble) and input 4*(j+4)+t (high nibble).
// scales, offsets: float32 [K/32, N]: w = code * scale + offset.
template <int MR>
static void tile(const int8_t* qx, const float* sx, const float* sumx, int64_t K,
                 const uint8_t* codes, const float* scales, const float* offsets, int64_t N,
                 int64_t n0, float* out) {
  const int64_t groups = K / 32;
  __m512 acc[MR];
  for (int m = 0; m < MR; ++m) acc[m] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* c = codes + g * 256;
    __m512i w[8];
    for (int j = 0; j < 4; ++j) {
      __m512i v = _mm512_loadu_si512(c + 64 * j);
      w[j] = _mm512_and_si512(v, low);
      w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
    const __m512 s = _mm512_loadu_ps(scales + g * N + n0);
    const __m512 o = _mm512_loadu_ps(offsets + g * N + n0);
    for (int m = 0; m < MR; ++m) {
      const int32_t* q = reinterpret_cast<const int32_t*>(qx + m * K + g * 32);
      __m512i d = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) d = _mm512_dpbusd_epi32(d, w[j], _mm512_set1_epi32(q[j]));
      const __m512 f = _mm512_cvtepi32_ps(d);
      acc[m] = _mm512_fmadd_ps(f, _mm512_mul_ps(s, _mm512_set1_ps(sx[m * groups + g])), acc[m]);
      acc[m] = _mm512_fmadd_ps(o, _mm512_set1_ps(sumx[m * groups + g]), acc[m]);
    }
  }
  for (int m = 0; m < MR; ++m) _mm512_storeu_ps(out + m * N + n0, acc[m]);
}

using TileFn = void (*)(const int8_t*, const float*, const float*, int64_t, const uint8_t*,
                        const float*, const float*, int64_t, int64_t, float*);

template <int... Ms>
static constexpr std::array<TileFn, sizeof...(Ms)> tiles(std::integer_sequence<int, Ms...>) {
  return {&tile<Ms + 1>...};
}
constexpr int kRows = 8;

torch::Tensor int4_int8_gemm(torch::Tensor x, torch::Tensor codes, torch::Tensor scales,
                        torch::Tensor offsets) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous());
  TORCH_CHECK(codes.dim() == 4 && codes.scalar_type() == torch::kUInt8 && codes.size(3) == 64);
  const int64_t M = x.size(0), K = x.size(1), N = codes.size(0) * 16, G = K / 32;
  TORCH_CHECK(K % 32 == 0 && codes.size(1) == G && scales.size(0) == G && scales.size(1) == N);
  auto qx = torch::empty({M, K}, x.options().dtype(torch::kInt8));
  auto sx = torch::empty({M, G}, x.options());
  auto sumx = torch::empty({M, G}, x.options());
  const float* xp = x.data_ptr<float>();
  int8_t* qp = qx.data_ptr<int8_t>();
  float* sp = sx.data_ptr<float>();
  float* up = sumx.data_ptr<float>();
  quantize_q8_0(xp, M, K, qp, sp, up);
  auto out = torch::empty({M, N}, x.options());
  const MaybeReleaseGil no_gil;
  static constexpr auto fns = tiles(std::make_integer_sequence<int, kRows>{});
  const uint8_t* cp = codes.data_ptr<uint8_t>();
  const float* scp = scales.data_ptr<float>();
  const float* ofp = offsets.data_ptr<float>();
  float* outp = out.data_ptr<float>();
  at::parallel_for(0, N / 16, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t m0 = 0; m0 < M; m0 += kRows) {
        const int64_t mr = std::min<int64_t>(kRows, M - m0);
        fns[mr - 1](qp + m0 * K, sp + m0 * G, up + m0 * G, K, cp + b * G * 256, scp, ofp, N,
                    b * 16, outp + m0 * N);
      }
  });
  return out;
}

TORCH_LIBRARY_FRAGMENT(ascend_router, m) {
  m.def("int4_int8_gemm(Tensor x, Tensor codes, Tensor scales, Tensor offsets) -> Tensor");
  m.impl("int4_int8_gemm", torch::kCPU, &int4_int8_gemm);
}
