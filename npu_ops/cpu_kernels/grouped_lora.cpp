// Grouped LoRA updates on x86 CPUs with AVX512, in SGMV order (Punica, Chen et al. 2023: each
// adapter's weights are read once per call for all of that adapter's rows).
//
// The semantics of npu_ops/ops/lora.py (grouped_lora), in place: y += for each row r whose
// adapter (row_ids[r]) owns rank columns of the stack, (x[r] A_r^T) B_r over those columns only.
// y, x: [T, N] and [T, K], both float32 or both bfloat16; lora_a: [R, K] (the step's adapters'
// A stacked along the rank); lora_b: [R, N] (their B transposed, the scaling folded in), zero
// outside each rank column's output span; lora_a and lora_b both float32 or both bfloat16 (read
// as float32: bfloat16 widens exactly; on AVX512-BF16 the shrink of bfloat16 rows by bfloat16
// adapters runs on vdpbf16ps, which flushes denormal inputs to zero, so its bits differ from
// a host without it, each host batch invariant on its own); col_ids: int64 [R], the adapter of
// each rank column; col_spans: int64 [R, 2], the output columns [start, stop) of each rank
// column's slice. The op writes y (the base linear's output, a temporary of the caller's), so a
// call allocates no [T, N] tensor: a new one per linear per step cost page faults (it is
// megabytes in a 512-token prefill step).
//
// Unlike the reference's two dense GEMMs, no work is spent on other adapters' columns (the
// reference masks them after computing them) or on B's zeros outside a slice. Each row's result
// depends on its own input, its adapter's weights and K only: its shrink is a dot product of a
// fixed order, its expand adds its adapter's rank columns one by one in stack order with one
// fused multiply-add per element, and the sum y + delta is rounded once to y's dtype (round to
// nearest even, as torch's conversion). So the bits of a row do not depend on the other rows,
// the other adapters in the step or the thread count (batch invariance).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include "avx512_lanes.h"
#include "gil.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace {

constexpr int64_t kBlock = 64;  // output columns per task of the expand


inline void store(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }

// Round to nearest even, NaN to 0x7FC0: c10::BFloat16's conversion (round_to_nearest_even).
inline void store(at::BFloat16* p, __m512 v, __mmask16 m) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
  r = _mm512_srli_epi32(r, 16);
  r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, _mm512_set1_epi32(0x7FC0));
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
}

template <int N>
using Int = std::integral_constant<int, N>;

// f(Int<1..4>) for n in 1..4.
template <typename F>
void with_count(int n, F&& f) {
  switch (n) {
    case 4: return f(Int<4>{});
    case 3: return f(Int<3>{});
    case 2: return f(Int<2>{});
    default: return f(Int<1>{});
  }
}

// acc[i * NC + j] = x[i] . a[j] for NR rows and NC rank columns (rows of A) at once, each a dot
// product of the same order as alone: 16-lane partial sums over k, then one horizontal sum.
template <int NR, int NC, typename T, typename W>
void dots(const T* const* x, const W* const* a, int64_t k, float* acc) {
  __m512 s[NR][NC];
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NC; ++j) s[i][j] = _mm512_setzero_ps();
  for (int64_t e = 0; e < k; e += 16) {
    const __mmask16 m = tail_mask(k - e);
    __m512 xv[NR];
    for (int i = 0; i < NR; ++i) xv[i] = load(x[i] + e, m);
    for (int j = 0; j < NC; ++j) {
      const __m512 av = load(a[j] + e, m);
      for (int i = 0; i < NR; ++i) s[i][j] = _mm512_fmadd_ps(xv[i], av, s[i][j]);
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NC; ++j) acc[i * NC + j] = _mm512_reduce_add_ps(s[i][j]);
}

// The same for bfloat16 rows and columns on AVX512-BF16's vdpbf16ps: each lane adds the products
// of a pair of elements (exact in float32) per instruction, 32 elements a step (Intel SDM,
// VDPBF16PS), so a step costs a quarter of the widen-and-FMA instructions.
template <int NR, int NC>
__attribute__((target("avx512bf16"))) void dots_bf16(const at::BFloat16* const* x,
                                                      const at::BFloat16* const* a, int64_t k,
                                                      float* acc) {
  __m512 s[NR][NC];
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NC; ++j) s[i][j] = _mm512_setzero_ps();
  for (int64_t e = 0; e < k; e += 32) {
    const __mmask32 m = k - e >= 32 ? ~__mmask32{0} : (__mmask32{1} << (k - e)) - 1;
    __m512i xv[NR];
    for (int i = 0; i < NR; ++i) xv[i] = _mm512_maskz_loadu_epi16(m, x[i] + e);
    for (int j = 0; j < NC; ++j) {
      const __m512i av = _mm512_maskz_loadu_epi16(m, a[j] + e);
      for (int i = 0; i < NR; ++i) {
        s[i][j] = _mm512_dpbf16_ps(s[i][j], reinterpret_cast<__m512bh>(xv[i]),
                                   reinterpret_cast<__m512bh>(av));
      }
    }
  }
  for (int i = 0; i < NR; ++i)
    for (int j = 0; j < NC; ++j) acc[i * NC + j] = _mm512_reduce_add_ps(s[i][j]);
}

const bool kHasBf16Dot = (__builtin_cpu_init(), __builtin_cpu_supports("avx512bf16"));

template <int NR, int NC, typename T, typename W>
void shrink_tile(const T* const* x, const W* const* a, int64_t k, float* acc) {
  if constexpr (std::is_same_v<T, at::BFloat16> && std::is_same_v<W, at::BFloat16>) {
    if (kHasBf16Dot) return dots_bf16<NR, NC>(x, a, k, acc);
  }
  dots<NR, NC>(x, a, k, acc);
}

// y[rows[i]] += sum over the parts' columns c, in order, of hr[i][c] B[c] on
// columns [o0, o0 + kBlock) for NR rows of one adapter, the sum rounded once to T. Lanes outside
// a part's masks add h * 0: the partial sums start at +0 and so are never -0, and h is finite
// (adapters are checked finite at load, engine/lora/adapter.py; a row whose input is not finite
// is not finite in the reference either), so those lanes keep their value exactly.
struct Part {
  int64_t c0, c1;
  __mmask16 m[kBlock / 16];
};

template <int NR, typename T, typename W>
void expand_tile(const int64_t* rows, const float* const* hr, const Part* parts,
                 const Part* parts_end, const W* b, int64_t n, int64_t o0, int64_t o1, T* y) {
  for (int v = 0; v < kBlock / 16 && o0 + 16 * v < o1; ++v) {
    __m512 d[NR];
    for (int i = 0; i < NR; ++i) d[i] = _mm512_setzero_ps();
    for (const Part* p = parts; p != parts_end; ++p) {
      if (p->m[v] == 0) continue;
      const W* bc = b + o0 + 16 * v;
      for (int64_t c = p->c0; c < p->c1; ++c) {
        const __m512 bv = load(bc + c * n, p->m[v]);  // zero outside the part
        for (int i = 0; i < NR; ++i) d[i] = _mm512_fmadd_ps(_mm512_set1_ps(hr[i][c]), bv, d[i]);
      }
    }
    const __mmask16 m = tail_mask(o1 - o0 - 16 * v);
    for (int i = 0; i < NR; ++i) {
      const int64_t at = rows[i] * n + o0 + 16 * v;
      store(y + at, _mm512_add_ps(load(y + at, m), d[i]), m);
    }
  }
}

template <typename T, typename W>
void run(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& lora_a,
         const torch::Tensor& lora_b, const torch::Tensor& row_ids, const torch::Tensor& col_ids,
         const torch::Tensor& col_spans) {
  const int64_t rows = y.size(0), n = y.size(1), k = x.size(1), r = lora_a.size(0);
  T* yp = y.data_ptr<T>();
  const T* xp = x.data_ptr<T>();
  const W* ap = lora_a.data_ptr<W>();
  const W* bp = lora_b.data_ptr<W>();
  const int64_t* rid = row_ids.data_ptr<int64_t>();
  const int64_t* cid = col_ids.data_ptr<int64_t>();
  const int64_t* span = col_spans.data_ptr<int64_t>();

  // The adapters of the stack with their rank columns (in stack order) and their rows.
  std::vector<int64_t> adapters;
  std::vector<std::vector<int64_t>> cols_of, rows_of;
  for (int64_t c = 0; c < r; ++c) {
    const auto at = std::find(adapters.begin(), adapters.end(), cid[c]) - adapters.begin();
    if (at == static_cast<int64_t>(adapters.size())) {
      adapters.push_back(cid[c]);
      cols_of.emplace_back();
      rows_of.emplace_back();
    }
    cols_of[at].push_back(c);
  }
  for (int64_t i = 0; i < rows; ++i) {
    const auto at = std::find(adapters.begin(), adapters.end(), rid[i]) - adapters.begin();
    if (at < static_cast<int64_t>(adapters.size())) rows_of[at].push_back(i);
  }

  // Per adapter with rows and block of kBlock output columns, the runs of its consecutive rank
  // columns with one output span (one slice each) that reach into the block, with their lane
  // masks: parts[first[at * blocks + blk] .. first[at * blocks + blk + 1]), in one allocation.
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<Part> parts;
  std::vector<size_t> first(adapters.size() * blocks + 1);
  std::vector<std::pair<size_t, size_t>> tasks;  // (adapter, its first row of the task)
  for (size_t at = 0; at < adapters.size(); ++at) {
    std::vector<std::array<int64_t, 4>> segments;  // c0, c1, span start, span stop
    if (!rows_of[at].empty()) {
      for (size_t i = 0; i < rows_of[at].size(); i += 4) tasks.emplace_back(at, i);
      for (int64_t c : cols_of[at]) {
        if (!segments.empty() && segments.back()[1] == c && segments.back()[2] == span[2 * c] &&
            segments.back()[3] == span[2 * c + 1]) {
          ++segments.back()[1];
        } else {
          segments.push_back({c, c + 1, span[2 * c], span[2 * c + 1]});
        }
      }
    }
    for (int64_t blk = 0; blk < blocks; ++blk) {
      first[at * blocks + blk] = parts.size();
      const int64_t o0 = blk * kBlock, o1 = std::min(n, o0 + kBlock);
      for (const auto& sg : segments) {
        const int64_t s0 = std::max(o0, sg[2]), s1 = std::min(o1, sg[3]);
        if (s0 >= s1) continue;
        Part p{sg[0], sg[1], {}};
        for (int v = 0; v < kBlock / 16; ++v) {
          const int64_t lo = std::max(s0, o0 + 16 * v), hi = std::min(s1, o0 + 16 * v + 16);
          p.m[v] = lo < hi ? static_cast<__mmask16>(tail_mask(hi - lo) << (lo - o0 - 16 * v)) : 0;
        }
        parts.push_back(p);
      }
    }
  }
  first.back() = parts.size();
  if (tasks.empty()) return;

  // One task per adapter and up to 4 of its rows: the shrink h[i, c] = x[i] . A[c] over the
  // adapter's rank columns c only, then the expand block by block. One parallel region per call,
  // and a task reads its adapter's A and B once for its rows.
  at::parallel_for(0, static_cast<int64_t>(tasks.size()), 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> h(4 * r);
    for (int64_t t = t0; t < t1; ++t) {
      const size_t at = tasks[t].first;
      const auto& cols = cols_of[at];
      const int64_t* own = rows_of[at].data() + tasks[t].second;
      const int nr = static_cast<int>(std::min<size_t>(4, rows_of[at].size() - tasks[t].second));
      const float* hr[4] = {h.data(), h.data() + r, h.data() + 2 * r, h.data() + 3 * r};
      for (size_t j = 0; j < cols.size(); j += 4) {
        const int nc = static_cast<int>(std::min<size_t>(4, cols.size() - j));
        const W* a[4];
        for (int q = 0; q < nc; ++q) a[q] = ap + cols[j + q] * k;
        for (int i = 0; i < nr; i += 2) {
          const int pair = nr - i >= 2 ? 2 : 1;
          const T* xs[2] = {xp + own[i] * k, xp + own[i + pair - 1] * k};
          float acc[8];
          with_count(nc, [&](auto ncc) {
            if (pair == 2) {
              shrink_tile<2, decltype(ncc)::value>(xs, a, k, acc);
            } else {
              shrink_tile<1, decltype(ncc)::value>(xs, a, k, acc);
            }
          });
          for (int ri = 0; ri < pair; ++ri)
            for (int q = 0; q < nc; ++q) h[(i + ri) * r + cols[j + q]] = acc[ri * nc + q];
        }
      }
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t o0 = blk * kBlock, o1 = std::min(n, o0 + kBlock);
        // The next block's piece of B's rows, into the cache while this one computes: one or
        // two cache lines per row, kBlock * sizeof(W) after the last, too short a run for the
        // hardware prefetchers.
        const Part* here = parts.data() + first[at * blocks + blk];
        const Part* next_block = parts.data() + first[at * blocks + blk + 1];
        if (blk + 1 < blocks) {
          const Part* next_end = parts.data() + first[at * blocks + blk + 2];
          for (const Part* p = next_block; p != next_end; ++p) {
            for (int64_t c = p->c0; c < p->c1; ++c) {
              const char* next = reinterpret_cast<const char*>(bp + c * n + o1);
              for (size_t line = 0; line < kBlock * sizeof(W); line += 64) {
                _mm_prefetch(next + line, _MM_HINT_T0);
              }
            }
          }
        }
        with_count(nr, [&](auto nrc) {
          expand_tile<decltype(nrc)::value>(own, hr, here, next_block, bp, n, o0, o1, yp);
        });
      }
    }
  });
}

}  // namespace

void grouped_lora_(torch::Tensor y, torch::Tensor x, torch::Tensor lora_a, torch::Tensor lora_b,
                   torch::Tensor row_ids, torch::Tensor col_ids, torch::Tensor col_spans) {
  TORCH_CHECK(y.dim() == 2 && x.dim() == 2 && y.size(0) == x.size(0), "y, x: [T, N], [T, K]");
  TORCH_CHECK(y.scalar_type() == x.scalar_type() &&
                  (y.scalar_type() == torch::kFloat32 || y.scalar_type() == torch::kBFloat16),
              "y and x: both float32 or both bfloat16");
  TORCH_CHECK(y.is_contiguous() && x.is_contiguous(), "y and x contiguous");
  const int64_t r = lora_a.size(0);
  TORCH_CHECK(lora_a.dim() == 2 && lora_a.size(1) == x.size(1) && lora_b.dim() == 2 &&
                  lora_b.size(0) == r && lora_b.size(1) == y.size(1),
              "lora_a [R, K], lora_b [R, N]");
  const auto w = lora_a.scalar_type();
  TORCH_CHECK((w == torch::kFloat32 || w == torch::kBFloat16) && lora_b.scalar_type() == w &&
                  lora_a.is_contiguous() && lora_b.is_contiguous(),
              "lora_a, lora_b: contiguous, both float32 or both bfloat16");
  TORCH_CHECK(row_ids.scalar_type() == torch::kInt64 && row_ids.numel() == y.size(0) &&
                  col_ids.scalar_type() == torch::kInt64 && col_ids.numel() == r &&
                  col_spans.scalar_type() == torch::kInt64 && col_spans.numel() == 2 * r,
              "row_ids int64 [T], col_ids int64 [R], col_spans int64 [R, 2]");
  auto rid = row_ids.contiguous(), cid = col_ids.contiguous(), span = col_spans.contiguous();
  const int64_t* s = span.data_ptr<int64_t>();
  for (int64_t c = 0; c < r; ++c) {
    TORCH_CHECK(0 <= s[2 * c] && s[2 * c] <= s[2 * c + 1] && s[2 * c + 1] <= y.size(1),
                "col_spans within [0, N]");
  }
  MaybeReleaseGil nogil;
  const bool bf16 = y.scalar_type() == torch::kBFloat16;
  if (bf16 && w == torch::kBFloat16) {
    run<at::BFloat16, at::BFloat16>(y, x, lora_a, lora_b, rid, cid, span);
  } else if (bf16) {
    run<at::BFloat16, float>(y, x, lora_a, lora_b, rid, cid, span);
  } else if (w == torch::kBFloat16) {
    run<float, at::BFloat16>(y, x, lora_a, lora_b, rid, cid, span);
  } else {
    run<float, float>(y, x, lora_a, lora_b, rid, cid, span);
  }
}

TORCH_LIBRARY_FRAGMENT(ascend_router, m) {
  m.def(
      "grouped_lora(Tensor(a!) y, Tensor x, Tensor lora_a, Tensor lora_b, Tensor row_ids, "
      "Tensor col_ids, Tensor col_spans) -> ()");
  m.impl("grouped_lora", torch::kCPU, &grouped_lora_);
}
