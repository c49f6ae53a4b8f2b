// AVX512 lanes shared by the kernels: masks for a row's tail and loads that widen to float32.
#pragma once
#include <torch/extension.h>
#include <immintrin.h>

#include <cstdint>

// The first min(n, 16) lanes.
inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

// bfloat16 is the top half of a float32: widening is exact.
inline __m512 load(const at::BFloat16* p, __mmask16 m) {
  const __m256i raw = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
