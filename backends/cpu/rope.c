/* Rotary position embedding on interleaved pairs (Meta's LLaMA form).
 *
 *   x (B, T, H, D), cos, sin (T, D/2) -> y (B, T, H, D), D even
 *   with x0 = x[b, t, h, 2i], x1 = x[b, t, h, 2i+1], c = cos[t, i], s = sin[t, i]
 *   (s = -sin[t, i] with `inverse`):
 *     y[b, t, h, 2i]   = x0*c - x1*s
 *     y[b, t, h, 2i+1] = x0*s + x1*c
 *
 * That is the complex product (x0 + i x1)(c + i s) of `torch.view_as_complex(x) *
 * freqs_cis` with the rounding of PyTorch's CPU complex multiply: each product rounded,
 * then one add. Negating s is exact, so the inverse is bit for bit the multiply by
 * conj(freqs_cis) that autograd runs for the backward.
 *
 * No fused multiply-add may contract those expressions (it would round once fewer than
 * PyTorch). The build compiles in ISO C mode (-std=c11, CMAKE_C_EXTENSIONS OFF), in which
 * GCC's default is -ffp-contract=off; in GNU mode (-std=gnu11) its default is
 * -ffp-contract=fast, which fuses x0*c - x1*s into a vfmsub with -march=native even across
 * statements, so GNU mode is refused below. Clang's default (-ffp-contract=on) fuses only
 * within one expression: the products are separate statements, and the STDC pragma turns
 * contraction off for this file as well.
 *
 * x, y and cos/sin may have any strides (x is typically the q or k slice of a fused qkv:
 * strides (T*3C, 3C, D, 1)); y may be x's very memory (every pair is read before it is
 * written). fp32 and fp64 compute in their own type; bf16 and fp16 convert x, cos and sin
 * to fp32, compute as fp32 and round y once (as Meta's `x.float()` ... `.type_as(x)`, except
 * that cos/sin arrive already rounded to x's dtype). Every element is independent, so
 * results do not depend on the thread count. */
#include "cpu/cpu_util.h"
#include "infinitrain/scalar/it_scalar_cast.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__) && !defined(__STRICT_ANSI__)
#error "rope.c needs -ffp-contract=off: build with -std=c11 (not gnu11) so that no FMA changes the rounding"
#endif

#define PAR_MIN 16384 /* elements below which the kernel stays on the calling thread */

/* ---------------------------------------------------------------- descriptor checks */

static it_status check_desc(const char *kernel, const char *name, const it_tdesc *t, int ndim) {
    if (t == NULL) return it_error(IT_ERR_INVALID_ARG, "%s: %s is NULL", kernel, name);
    if (t->ndim != ndim)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s.ndim = %d, expected %d", kernel, name, t->ndim, ndim);
    return it_cpu_check_layout(kernel, name, t);
}

/* cos or sin: (T, D/2) of x's dtype. */
static it_status check_table(const char *kernel, const char *name, const it_tdesc *t, const it_tdesc *x) {
    it_status st;
    if ((st = check_desc(kernel, name, t, 2))) return st;
    if (t->shape[0] != x->shape[1] || t->shape[1] != x->shape[3] / 2)
        return it_error(IT_ERR_INVALID_ARG, "%s: %s must be (T, D/2) = (%lld, %lld), got (%lld, %lld)", kernel, name,
                        (long long)x->shape[1], (long long)(x->shape[3] / 2), (long long)t->shape[0],
                        (long long)t->shape[1]);
    return it_cpu_check_dtype(kernel, name, t, "x", x->dtype);
}

/* ---------------------------------------------------------------- kernels */

/* Geometry of one call: rows are the B*T*H (b, t, h) triples, P = D/2 pairs each. */
typedef struct rope_geo {
    int64_t T, H, P;
    int64_t sx[4], sy[4], sc[2], ss[2];
} rope_geo;

#define DEFINE_ROPE(T_, SFX)                                                                                           \
    /* one row of P pairs */                                                                                           \
    ALWAYS_INLINE void row_##SFX(const T_ *x, int64_t sx, const T_ *cs, int64_t sc, const T_ *sn, int64_t ss, T_ sgn,  \
                                 T_ *y, int64_t sy, int64_t P) {                                                       \
        _Pragma("omp simd") for (int64_t i = 0; i < P; i++) {                                                          \
            T_ x0 = x[(2 * i) * sx], x1 = x[(2 * i + 1) * sx];                                                         \
            T_ c = cs[i * sc], s = sgn * sn[i * ss];                                                                   \
            T_ x0c = x0 * c, x1s = x1 * s, x0s = x0 * s, x1c = x1 * c;                                                 \
            y[(2 * i) * sy] = x0c - x1s;                                                                               \
            y[(2 * i + 1) * sy] = x0s + x1c;                                                                           \
        }                                                                                                              \
    }                                                                                                                  \
    static void rope_##SFX(const rope_geo *g, const T_ *x, const T_ *cs, const T_ *sn, bool inverse, T_ *y,            \
                           int64_t rows) {                                                                             \
        T_ sgn = inverse ? (T_)-1 : (T_)1;                                                                             \
        bool unit = g->sx[3] == 1 && g->sy[3] == 1 && g->sc[1] == 1 && g->ss[1] == 1;                                  \
        _Pragma("omp parallel for schedule(static) if (rows * g->P >= PAR_MIN / 2)") for (int64_t r = 0; r < rows;     \
                                                                                          r++) {                       \
            int64_t h = r % g->H, t = (r / g->H) % g->T, b = r / (g->H * g->T);                                        \
            const T_ *xr = x + b * g->sx[0] + t * g->sx[1] + h * g->sx[2];                                             \
            T_ *yr = y + b * g->sy[0] + t * g->sy[1] + h * g->sy[2];                                                   \
            const T_ *cr = cs + t * g->sc[0], *sr = sn + t * g->ss[0];                                                 \
            if (unit)                                                                                                  \
                row_##SFX(xr, 1, cr, 1, sr, 1, sgn, yr, 1, g->P);                                                      \
            else                                                                                                       \
                row_##SFX(xr, g->sx[3], cr, g->sc[1], sr, g->ss[1], sgn, yr, g->sy[3], g->P);                          \
        }                                                                                                              \
    }

DEFINE_ROPE(float, f32)
DEFINE_ROPE(double, f64)

/* bf16 / fp16: every value to fp32, the fp32 arithmetic above, one rounding back. */
static void rope_half(const rope_geo *g, const uint16_t *x, const uint16_t *cs, const uint16_t *sn, bool inverse,
                      uint16_t *y, int64_t rows, bool bf16) {
    float sgn = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static) if (rows * g->P >= PAR_MIN / 2)
    for (int64_t r = 0; r < rows; r++) {
        int64_t h = r % g->H, t = (r / g->H) % g->T, b = r / (g->H * g->T);
        const uint16_t *xr = x + b * g->sx[0] + t * g->sx[1] + h * g->sx[2];
        uint16_t *yr = y + b * g->sy[0] + t * g->sy[1] + h * g->sy[2];
        const uint16_t *cr = cs + t * g->sc[0], *sr = sn + t * g->ss[0];
        for (int64_t i = 0; i < g->P; i++) {
            uint16_t h0 = xr[(2 * i) * g->sx[3]], h1 = xr[(2 * i + 1) * g->sx[3]];
            uint16_t hc = cr[i * g->sc[1]], hs = sr[i * g->ss[1]];
            float x0 = bf16 ? it_sc_bf16_to_fp32(h0) : it_sc_fp16_to_fp32(h0);
            float x1 = bf16 ? it_sc_bf16_to_fp32(h1) : it_sc_fp16_to_fp32(h1);
            float c = bf16 ? it_sc_bf16_to_fp32(hc) : it_sc_fp16_to_fp32(hc);
            float s = sgn * (bf16 ? it_sc_bf16_to_fp32(hs) : it_sc_fp16_to_fp32(hs));
            float x0c = x0 * c, x1s = x1 * s, x0s = x0 * s, x1c = x1 * c;
            float y0 = x0c - x1s, y1 = x0s + x1c;
            yr[(2 * i) * g->sy[3]] = bf16 ? it_sc_fp32_to_bf16(y0) : it_sc_fp32_to_fp16(y0);
            yr[(2 * i + 1) * g->sy[3]] = bf16 ? it_sc_fp32_to_bf16(y1) : it_sc_fp32_to_fp16(y1);
        }
    }
}

/* ---------------------------------------------------------------- entry point */

/* x (B, T, H, D), cos, sin (T, D/2) -> y (B, T, H, D); see the header comment. */
it_status it_cpu_rope(it_stream *s, const it_tdesc *x, const it_tdesc *cos, const it_tdesc *sin, bool inverse,
                      it_tdesc *y) {
    (void)s;
    const char *k = "rope";
    it_status st;
    if ((st = check_desc(k, "x", x, 4))) return st;
    if (x->dtype != IT_DTYPE_FP32 && x->dtype != IT_DTYPE_FP64 && x->dtype != IT_DTYPE_BF16 &&
        x->dtype != IT_DTYPE_FP16)
        return it_error(IT_ERR_UNSUPPORTED, "%s: dtype %s not supported", k, it_dtype_name(x->dtype));
    if (x->shape[3] % 2 != 0)
        return it_error(IT_ERR_INVALID_ARG, "%s: head dim D = x.shape[3] = %lld must be even", k,
                        (long long)x->shape[3]);
    if ((st = check_table(k, "cos", cos, x)) || (st = check_table(k, "sin", sin, x))) return st;
    if ((st = check_desc(k, "y", y, 4)) || (st = it_cpu_check_same(k, "y", y, "x", x, true))) return st;

    rope_geo g;
    g.T = x->shape[1], g.H = x->shape[2], g.P = x->shape[3] / 2;
    int64_t rows = x->shape[0] * x->shape[1] * x->shape[2];
    if (rows == 0 || g.P == 0) return IT_OK;
    for (int d = 0; d < 4; d++) g.sx[d] = x->strides[d], g.sy[d] = y->strides[d];
    for (int d = 0; d < 2; d++) g.sc[d] = cos->strides[d], g.ss[d] = sin->strides[d];
    switch (x->dtype) {
    case IT_DTYPE_FP32: rope_f32(&g, x->data, cos->data, sin->data, inverse, y->data, rows); break;
    case IT_DTYPE_FP64: rope_f64(&g, x->data, cos->data, sin->data, inverse, y->data, rows); break;
    default: rope_half(&g, x->data, cos->data, sin->data, inverse, y->data, rows, x->dtype == IT_DTYPE_BF16); break;
    }
    return IT_OK;
}
