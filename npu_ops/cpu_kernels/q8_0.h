// Activations quantised per row and block of 32 to int8 with one float scale: ggml's Q8_0 block,
// as llama.cpp quantises activations for its quantised dot products (ggml-cpu quants.c,
// quantize_row_q8_0). Shared by the int4 x int8 and int8 x int8 kernels.
#pragma once

#include <immintrin.h>

#include <cstdint>

// x: float32 [rows, K] (K a multiple of 32). Writes, per row r and block g (G = K / 32 blocks):
// qx[r, 32g..32g+31] = round(x / d) in -127..127, d[r * G + g] = max|x block| / 127, and
// dsum[r * G + g] = d * sum(qx block) (the block's sum, for offset and sign corrections).
inline void quantize_q8_0(const float* x, int64_t rows, int64_t K, int8_t* qx, float* d,
                          float* dsum) {
  const int64_t blocks = rows * (K / 32);
  for (int64_t r = 0; r < blocks; ++r) {
    const __m512 a = _mm512_loadu_ps(x + r * 32), b = _mm512_loadu_ps(x + r * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    const float scale = amax / 127.f, inv = scale > 0.f ? 1.f / scale : 0.f;
    const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(inv)));
    const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, _mm512_set1_ps(inv)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qx + r * 32), _mm512_cvtsepi32_epi8(qa));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qx + r * 32 + 16), _mm512_cvtsepi32_epi8(qb));
    d[r] = scale;
    dsum[r] = scale * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb)));
  }
}
