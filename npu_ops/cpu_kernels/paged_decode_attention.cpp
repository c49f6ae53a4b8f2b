// Paged decode attention on x86 CPUs with AVX512: one new query token per sequence attends to
// its cached context, read in place through the block table (no gathered copy of the context).
//
// q: float32 [B, Nq, Dk]; k_cache: [num_blocks, block_size, Nkv, Dk] and v_cache:
// [num_blocks, block_size, Nkv, Dv], both float32 or bfloat16, or both int8 (int8 codes) or
// uint8 (float8 e4m3fn codes) with rows of Dk + 2 / Dv + 2 bytes: the codes, then the row's
// float16 scale (the packed 8-bit cache of npu_ops/ops/kv_quant.py; q . k = scale * (q . codes),
// and p v = (p * scale) codes);
// block_tables: int32 [B, max_blocks];
// seq_lens: int32 [B] (context length, new token included); out: float32 [B, Nq, Dv].
// Query head h reads KV head h / (Nq / Nkv) (grouped-query attention, transformers' repeat_kv).
// out = softmax(scale * q . K^T) V, scores and sums in float32 (the semantics of
// npu_ops/ops/attention.py: paged_decode_attention). Each sequence is one task of
// torch's intra-op pool and is computed in the same order whatever the batch, so a sequence's
// result does not depend on the others.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include "avx512_lanes.h"
#include "gil.h"

#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace {

using ::load;  // float32 and bfloat16 (avx512_lanes.h), next to the 8-bit codes' below

inline __m512 load(const int8_t* p, __mmask16 m) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, p)));
}

// float8 e4m3fn codes: sign, 4 exponent bits (bias 7), 3 mantissa bits; a normal code's float32
// bits are its exponent + 120 and mantissa moved into place, exponent 0 is mantissa * 2^-9. No
// NaN code is ever written (the codes are clamped to +-448).
inline __m512 load(const uint8_t* p, __mmask16 m) {
  const __m512i x = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p));
  const __m512i magnitude = _mm512_and_si512(x, _mm512_set1_epi32(0x7f));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
  const __m512i normal =
      _mm512_add_epi32(_mm512_slli_epi32(magnitude, 20), _mm512_set1_epi32(120 << 23));
  const __m512 subnormal =
      _mm512_mul_ps(_mm512_cvtepi32_ps(magnitude), _mm512_set1_ps(1.f / 512.f));
  const __mmask16 tiny = _mm512_cmplt_epi32_mask(magnitude, _mm512_set1_epi32(8));
  const __m512 value = _mm512_mask_blend_ps(tiny, _mm512_castsi512_ps(normal), subnormal);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(value), sign));
}

template <typename T>
constexpr bool is_packed = std::is_same_v<T, int8_t> || std::is_same_v<T, uint8_t>;

// Elements after a row's codes: a packed cache's float16 scale (2 bytes), none in a float cache.
template <typename T>
constexpr int64_t scale_width() {
  return is_packed<T> ? 2 : 0;
}

// The factor of a row's loaded values: 1 in a float cache, the stored scale in a packed one.
template <typename T>
inline float row_scale(const T* row, int64_t width) {
  if constexpr (is_packed<T>) {
    uint16_t bits;
    std::memcpy(&bits, row + width, sizeof(bits));
    return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
  } else {
    return 1.f;
  }
}

// exp(x) for x <= 0 (scores minus their maximum): 2^(x log2 e) as 2^n * 2^f with a degree-6
// polynomial for 2^f on [-0.5, 0.5] (relative error < 2e-7), n applied by vscalefps.
inline __m512 exp_nonpositive(__m512 x) {
  const __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.f)),
                                 _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// One sequence, every head: K and V rows are read whole (all KV heads of a token are
// contiguous), once per sequence.
template <typename T>
void attend(const float* q, const T* k_cache, const T* v_cache, const int32_t* table, int64_t len,
            int64_t block_size, int64_t nkv, int64_t group, int64_t dk, int64_t dv, float scale,
            float* out, std::vector<float>& scores, std::vector<float>& acc) {
  const int64_t nq = nkv * group, k_row = dk + scale_width<T>(), v_row = dv + scale_width<T>();
  scores.assign(nq * len, 0.f);
  for (int64_t t = 0; t < len; ++t) {
    const int64_t slot = static_cast<int64_t>(table[t / block_size]) * block_size + t % block_size;
    for (int64_t h = 0; h < nkv; ++h) {
      const T* k = k_cache + (slot * nkv + h) * k_row;
      const float k_scale = row_scale(k, dk) * scale;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t head = h * group + g;
        const float* qh = q + head * dk;
        __m512 sum = _mm512_setzero_ps();
        for (int64_t c = 0; c < dk; c += 16) {
          const __mmask16 m = tail_mask(dk - c);
          sum = _mm512_fmadd_ps(load(qh + c, m), load(k + c, m), sum);
        }
        scores[head * len + t] = _mm512_reduce_add_ps(sum) * k_scale;
      }
    }
  }
  acc.assign(nq * dv, 0.f);
  std::vector<float> denom(nq);
  for (int64_t head = 0; head < nq; ++head) {
    float* s = scores.data() + head * len;
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (int64_t t = 0; t < len; t += 16)
      vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY),
                                                      tail_mask(len - t), s + t));
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t t = 0; t < len; t += 16) {
      const __mmask16 m = tail_mask(len - t);
      const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + t), mx));
      _mm512_mask_storeu_ps(s + t, m, e);
      vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(m, e));
    }
    denom[head] = _mm512_reduce_add_ps(vsum);
  }
  for (int64_t t = 0; t < len; ++t) {
    const int64_t slot = static_cast<int64_t>(table[t / block_size]) * block_size + t % block_size;
    for (int64_t h = 0; h < nkv; ++h) {
      const T* v = v_cache + (slot * nkv + h) * v_row;
      const float v_scale = row_scale(v, dv);
      for (int64_t c = 0; c < dv; c += 16) {
        const __mmask16 m = tail_mask(dv - c);
        const __m512 vv = load(v + c, m);
        for (int64_t g = 0; g < group; ++g) {
          const int64_t head = h * group + g;
          float* a = acc.data() + head * dv + c;
          const __m512 p = _mm512_set1_ps(scores[head * len + t] * v_scale);
          _mm512_mask_storeu_ps(a, m, _mm512_fmadd_ps(p, vv, _mm512_maskz_loadu_ps(m, a)));
        }
      }
    }
  }
  for (int64_t head = 0; head < nq; ++head) {
    const __m512 inv = _mm512_set1_ps(1.f / denom[head]);
    for (int64_t c = 0; c < dv; c += 16) {
      const __mmask16 m = tail_mask(dv - c);
      _mm512_mask_storeu_ps(out + head * dv + c, m,
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc.data() + head * dv + c), inv));
    }
  }
}

template <typename T>
void run(const torch::Tensor& q, const torch::Tensor& kc, const torch::Tensor& vc,
         const torch::Tensor& tables, const torch::Tensor& lens, float scale, torch::Tensor& out) {
  const int64_t batch = q.size(0), nq = q.size(1), dk = q.size(2);
  const int64_t block_size = kc.size(1), nkv = kc.size(2), dv = vc.size(3) - scale_width<T>();
  const int64_t group = nq / nkv, max_blocks = tables.size(1);
  const float* qp = q.data_ptr<float>();
  const T* kp = kc.data_ptr<T>();
  const T* vp = vc.data_ptr<T>();
  const int32_t* tp = tables.data_ptr<int32_t>();
  const int32_t* lp = lens.data_ptr<int32_t>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, acc;
    for (int64_t b = begin; b < end; ++b)
      attend<T>(qp + b * nq * dk, kp, vp, tp + b * max_blocks, lp[b], block_size, nkv, group,
                dk, dv, scale, op + b * nq * dv, scores, acc);
  });
}

}  // namespace

torch::Tensor paged_decode_attention(torch::Tensor q, torch::Tensor k_cache,
                                     torch::Tensor v_cache, torch::Tensor block_tables,
                                     torch::Tensor seq_lens, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat32 && q.is_contiguous());
  TORCH_CHECK(k_cache.dim() == 4 && v_cache.dim() == 4 && k_cache.is_contiguous() &&
              v_cache.is_contiguous() && k_cache.scalar_type() == v_cache.scalar_type());
  const auto type = k_cache.scalar_type();
  const int64_t packed = type == torch::kChar || type == torch::kByte ? 2 : 0;  // scale bytes
  TORCH_CHECK(k_cache.size(3) == q.size(2) + packed && q.size(1) % k_cache.size(2) == 0);
  TORCH_CHECK(block_tables.scalar_type() == torch::kInt32 && block_tables.is_contiguous() &&
              block_tables.size(0) == q.size(0));
  TORCH_CHECK(seq_lens.scalar_type() == torch::kInt32 && seq_lens.numel() == q.size(0));
  auto out = torch::empty({q.size(0), q.size(1), v_cache.size(3) - packed}, q.options());
  const MaybeReleaseGil no_gil;
  if (k_cache.scalar_type() == torch::kBFloat16) {
    run<at::BFloat16>(q, k_cache, v_cache, block_tables, seq_lens, static_cast<float>(scale), out);
  } else if (type == torch::kChar) {
    run<int8_t>(q, k_cache, v_cache, block_tables, seq_lens, static_cast<float>(scale), out);
  } else if (type == torch::kByte) {
    run<uint8_t>(q, k_cache, v_cache, block_tables, seq_lens, static_cast<float>(scale), out);
  } else {
    TORCH_CHECK(k_cache.scalar_type() == torch::kFloat32,
                "cache must be float32, bfloat16, or packed int8 / uint8 (fp8)");
    run<float>(q, k_cache, v_cache, block_tables, seq_lens, static_cast<float>(scale), out);
  }
  return out;
}

TORCH_LIBRARY_FRAGMENT(ascend_router, m) {
  m.def(
      "paged_decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_tables, "
      "Tensor seq_lens, float scale) -> Tensor");
  m.impl("paged_decode_attention", torch::kCPU, &paged_decode_attention);
}
