/* Packing helpers shared by the CPU backend's own fp32 GEMMs (sgemm_avx512.c,
 * sgemm_avx2.c), which include this once with SGEMM_TARGET (the function attribute that
 * enables their instruction set) and MR (the rows of their tile) defined. Needs AVX. */
#ifndef IT_CPU_SGEMM_PACK_H
#define IT_CPU_SGEMM_PACK_H

/* r[0..7] rows -> columns. */
SGEMM_TARGET static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
           s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
           s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)),
           s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)),
           s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* dst[k * ds + j] = src[j * ls + k] for j < 8 (rows of src), k < kc: eight rows of src
 * become kc columns of eight. Rows j >= rows are written as zeros. */
SGEMM_TARGET static void pack_rows8(const float *src, int64_t ls, int rows, int64_t kc, float *dst, int64_t ds) {
    int64_t k = 0;
    if (rows == 8) {
        for (; k + 8 <= kc; k += 8) {
            __m256 r[8];
            /* the source is usually a weight matrix on its way from DRAM: ask for each row's
             * data 256 bytes ahead */
            for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(src + j * ls + k + 64), _MM_HINT_T0);
            for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(src + j * ls + k);
            transpose8(r);
            for (int t = 0; t < 8; t++) _mm256_storeu_ps(dst + (k + t) * ds, r[t]);
        }
    }
    for (; k < kc; k++)
        for (int j = 0; j < 8; j++) dst[k * ds + j] = j < rows ? src[j * ls + k] : 0.0f;
}

/* The last, short panel of an untransposed A (mr < MR rows): copied with zero rows below,
 * ars = kc, so that the kernel never reads past A. */
static void copy_tail_rows(const float *a, int64_t lda, int64_t i0, int mr, int64_t k0, int64_t kc, float *dst) {
    for (int r = 0; r < MR; r++)
        if (r < mr)
            memcpy(dst + r * kc, a + (i0 + r) * lda + k0, (size_t)kc * sizeof(float));
        else
            memset(dst + r * kc, 0, (size_t)kc * sizeof(float));
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

#endif
