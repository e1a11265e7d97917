// One decoder layer on block-quantized linears (layer.hpp).
#include "layer.hpp"

#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "attention_kernel.hpp"
#include "quant.hpp"

#pragma GCC target("avx2,fma,f16c")

namespace {
#include "quant_layout.hpp"

// 1 / sqrt(mean(x^2) + eps) of one row: the squares in 8 lanes (lane i mod 8),
// folded by layout_hsum, then the tail; one order for every row.
float rms_factor(const float* x, int64_t n, float eps) {
    __m256 lanes = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        lanes = _mm256_fmadd_ps(v, v, lanes);
    }
    float sum = layout_hsum(lanes);
    for (; i < n; ++i) sum = std::fma(x[i], x[i], sum);
    return 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
}

// out = weight * (x * factor), as transformers' RMSNorm rounds it.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
    const float factor = rms_factor(x, n, eps);
    for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * factor);
}

// exp(x) for 8 lanes: Cephes' expf (range reduction by ln 2 in two parts, a
// degree-5 polynomial), every step an explicit IEEE operation, so any lane
// gives the same bits for the same input.
__m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)), _mm256_set1_ps(88.3762626647949f));
    __m256 fx = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                              _mm256_set1_ps(0.5f)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(0.693359375f)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(-2.12194440e-4f)));
    const __m256 z = _mm256_mul_ps(x, x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
        y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(c));
    y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(y, z), x), _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)); the tail through a padded lane group.
void silu_times(const float* gate, const float* up, int64_t n, float* out) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    auto group = [&](__m256 g, __m256 u) {
        const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_xor_ps(g, sign))));
        return _mm256_mul_ps(s, u);
    };
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, group(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) {
        float g[8] = {}, u[8] = {}, o[8];
        std::memcpy(g, gate + i, sizeof(float) * (n - i));
        std::memcpy(u, up + i, sizeof(float) * (n - i));
        _mm256_storeu_ps(o, group(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        std::memcpy(out + i, o, sizeof(float) * (n - i));
    }
}

// x[i] * cos[i] + x[(i + D/2) mod D] * sin_signed[i], in place: rope as the
// lean forward's _rotate_rolled computes it (a product each, then their sum).
void rope(float* x, const float* cos, const float* sin_signed, int64_t dim, float* tmp) {
    const int64_t half = dim / 2;
    for (int64_t i = 0; i < half; ++i) tmp[i] = x[i] * cos[i] + x[i + half] * sin_signed[i];
    for (int64_t i = half; i < dim; ++i) tmp[i] = x[i] * cos[i] + x[i - half] * sin_signed[i];
    std::memcpy(x, tmp, sizeof(float) * dim);
}

void linear(const racer_quant::LayerShape& s, const racer_quant::QuantLinear& w, const float* x, int64_t T, float* y) {
    if (s.q8) racer_quant::matmul_q8(s.isa, w.type, w.blocks, w.rows, w.cols, x, T, y, s.threads);
    else racer_quant::matmul(s.isa, w.type, w.blocks, w.rows, w.cols, x, T, y, s.threads);
}

bool fits(const racer_quant::QuantLinear& w, int64_t rows, int64_t cols) {
    return w.blocks != nullptr && w.rows == rows && w.cols == cols && racer_quant::block_values(w.type) > 0
        && cols % racer_quant::block_values(w.type) == 0;
}

// Whether the layer's q|k|v weight (one, or its parts) holds `width` rows of `cols` values.
bool qkv_fits(const racer_quant::LayerWeights& w, int64_t width, int64_t cols) {
    if (w.qkv_parts == 0) return fits(w.qkv, width, cols);
    if (w.qkv_parts < 0 || w.qkv_parts > 3) return false;
    int64_t rows = 0;
    for (int i = 0; i < w.qkv_parts; ++i) {
        if (!fits(w.qkv_split[i], w.qkv_split[i].rows, cols)) return false;
        rows += w.qkv_split[i].rows;
    }
    return rows == width;
}

struct Scratch {
    std::vector<float> x, qkv, attn, gate_up, act, out, part;
};

// q|k|v of x into y (T x width): one weight, or each part alone into `part`,
// then side by side: each output the bits its part's product gives.
void qkv_linear(const racer_quant::LayerShape& s, const racer_quant::LayerWeights& w, const float* x, int64_t T,
                float* y, int64_t width, std::vector<float>& part) {
    if (w.qkv_parts == 0) return linear(s, w.qkv, x, T, y);
    int64_t at = 0;
    for (int i = 0; i < w.qkv_parts; ++i) {
        const racer_quant::QuantLinear& p = w.qkv_split[i];
        part.resize(static_cast<size_t>(T * p.rows));
        linear(s, p, x, T, part.data());
        for (int64_t t = 0; t < T; ++t)
            std::memcpy(y + t * width + at, part.data() + t * p.rows, sizeof(float) * static_cast<size_t>(p.rows));
        at += p.rows;
    }
}

}  // namespace

namespace racer_quant {

void decoder_layer(const LayerShape& s, const LayerWeights& w, float* h, int64_t T, const float* cos,
                   const float* sin_signed, const PartCache* parts, int64_t n_parts) {
    const int64_t H = s.hidden, D = s.head_dim, nq = s.heads * D, nkv = s.kv_heads * D, width = nq + 2 * nkv;
    if (T <= 0 || D <= 0 || D % 2 || s.heads <= 0 || s.kv_heads <= 0 || s.heads % s.kv_heads)
        throw std::invalid_argument("decoder_layer: bad shape");
    if (!qkv_fits(w, width, H) || !fits(w.o, H, nq) || !fits(w.gate_up, 2 * s.inter, H) || !fits(w.down, H, s.inter))
        throw std::invalid_argument("decoder_layer: a weight's shape does not fit the layer");
    int64_t total = 0;
    for (int64_t p = 0; p < n_parts; ++p) total += parts[p].rows;
    if (total != T) throw std::invalid_argument("decoder_layer: the parts' rows do not add up to T");
    thread_local Scratch m;
    m.x.resize(static_cast<size_t>(T * H));
    m.qkv.resize(static_cast<size_t>(T * width));
    m.attn.resize(static_cast<size_t>(T * nq));
    m.gate_up.resize(static_cast<size_t>(T * 2 * s.inter));
    m.act.resize(static_cast<size_t>(T * s.inter));
    m.out.resize(static_cast<size_t>(T * H));

    // Row-wise steps run on the matmuls' threads where there are rows enough
    // (each row is computed alone, so this changes no bit).
    // (m is this thread's: the parallel regions below take its buffers' pointers, never m itself.)
    const int row_threads = T >= SPLIT_ROWS ? s.threads : 1;
    float* x = m.x.data();
#pragma omp parallel for num_threads(row_threads) schedule(static) if (row_threads > 1)
    for (int64_t t = 0; t < T; ++t) rms_norm(h + t * H, w.input_norm, H, s.eps, x + t * H);
    qkv_linear(s, w, m.x.data(), T, m.qkv.data(), width, m.part);
    float* qkv = m.qkv.data();
#pragma omp parallel for num_threads(row_threads) schedule(static) if (row_threads > 1)
    for (int64_t t = 0; t < T; ++t) {
        thread_local std::vector<float> tmp;
        tmp.resize(static_cast<size_t>(D));
        float* row = qkv + t * width;
        if (w.qkv_bias != nullptr)
            for (int64_t i = 0; i < width; ++i) row[i] = row[i] + w.qkv_bias[i];
        for (int64_t head = 0; head < s.heads + s.kv_heads; ++head) {  // q heads, then k heads
            float* vec = row + head * D;
            if (w.q_norm != nullptr) {
                rms_norm(vec, head < s.heads ? w.q_norm : w.k_norm, D, s.eps, tmp.data());
                std::memcpy(vec, tmp.data(), sizeof(float) * D);
            }
            rope(vec, cos + t * D, sin_signed + t * D, D, tmp.data());
        }
    }
    // Each part's keys and values into its cache, then every part's attention in
    // one call (attend_rows: the one-row parts of a batched pass share one parallel region).
    thread_local std::vector<racer::AttendArgs> calls;
    calls.assign(static_cast<size_t>(n_parts), racer::AttendArgs{});
    int64_t start = 0;
    for (int64_t p = 0; p < n_parts; ++p) {
        const PartCache& c = parts[p];
        for (int64_t j = 0; j < c.rows; ++j) {
            const float* row = m.qkv.data() + (start + j) * width;
            const int64_t at = (c.length + j) * D;
            for (int64_t g = 0; g < s.kv_heads; ++g) {
                const float* key = row + nq + g * D;
                const float* value = row + nq + nkv + g * D;
                if (c.kv_float16) {
                    racer::float_to_half_row(key, D, static_cast<uint16_t*>(c.k) + g * c.head_stride + at);
                    racer::float_to_half_row(value, D, static_cast<uint16_t*>(c.v) + g * c.head_stride + at);
                } else {
                    std::memcpy(static_cast<float*>(c.k) + g * c.head_stride + at, key, sizeof(float) * D);
                    std::memcpy(static_cast<float*>(c.v) + g * c.head_stride + at, value, sizeof(float) * D);
                }
            }
        }
        racer::AttendArgs& a = calls[static_cast<size_t>(p)];
        a.q = m.qkv.data() + start * width;
        a.q_head = D;
        a.q_row = width;
        a.k = c.k;
        a.k_head = c.head_stride;
        a.k_row = D;
        a.v = c.v;
        a.v_head = c.head_stride;
        a.v_row = D;
        a.mask = c.mask;
        a.mask_row = c.mask_row;
        a.out = m.attn.data() + start * nq;
        a.out_head = D;
        a.out_row = nq;
        a.heads = s.heads;
        a.kv_heads = s.kv_heads;
        a.rows = c.rows;
        a.keys = c.length + c.rows;
        a.dim = D;
        a.scale = s.scale;
        a.masked_below = c.masked_below;
        a.dtype = racer::Dtype::float32;
        a.mask_dtype = racer::Dtype::float32;
        a.kv_float16 = c.kv_float16;
        a.threads = s.threads;
        a.portable = false;
        a.wide = s.wide_attention;
        start += c.rows;
    }
    racer::attend_rows(calls.data(), n_parts, s.threads);
    linear(s, w.o, m.attn.data(), T, m.out.data());
    const float* out = m.out.data();
#pragma omp parallel for num_threads(row_threads) schedule(static) if (row_threads > 1)
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = t * H; i < (t + 1) * H; ++i) h[i] = h[i] + out[i];
        rms_norm(h + t * H, w.post_norm, H, s.eps, x + t * H);
    }
    linear(s, w.gate_up, m.x.data(), T, m.gate_up.data());
    const float* gate_up = m.gate_up.data();
    float* act = m.act.data();
#pragma omp parallel for num_threads(row_threads) schedule(static) if (row_threads > 1)
    for (int64_t t = 0; t < T; ++t) {
        const float* g = gate_up + t * 2 * s.inter;
        silu_times(g, g + s.inter, s.inter, act + t * s.inter);
    }
    linear(s, w.down, m.act.data(), T, m.out.data());
    for (int64_t i = 0; i < T * H; ++i) h[i] = h[i] + m.out[i];
}

void rms_norm_rows(const float* x, const float* weight, int64_t T, int64_t n, float eps, float* out, int threads) {
    const int row_threads = T >= SPLIT_ROWS ? threads : 1;  // as the layers' row-wise steps
#pragma omp parallel for num_threads(row_threads) schedule(static) if (row_threads > 1)
    for (int64_t t = 0; t < T; ++t) rms_norm(x + t * n, weight, n, eps, out + t * n);
}

}  // namespace racer_quant
