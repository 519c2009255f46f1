/* The CPU backend: host memory (64-byte aligned, large blocks cached) and
 * the float32 reference kernels of backend.h, with OpenBLAS cblas_sgemm for
 * matmul. These are the slow obvious versions the CUDA kernels are tested
 * against. */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/freelist.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

static int cpu_available(void) { return 1; }

/* Memory: 64-byte aligned blocks with a 64-byte header holding the size.
 * Freed blocks of 32 KiB and more are kept in a small cache and handed out
 * again for the same size: an op graph allocates the same sizes every step,
 * and fresh large blocks from malloc are fresh mmaps whose page faults cost
 * more than the maths. Blocks of up to 512 bytes (a message's tensors, an
 * observation, a scalar) come from free lists by size class
 * (common/freelist.h): one thread often frees what another allocated. Both
 * are off under the sanitizers (ASan is to see every block; TSan cannot see
 * the hand-off when libzmq's thread frees a sent tensor). */
#define BLOCK_HDR 64
#define CACHE_MIN ((size_t)32 << 10)
#define CACHE_SLOTS 64
#define CACHE_MAX_BYTES ((size_t)256 << 20)

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CACHE_ON 0
#else
#define CACHE_ON 1
#endif

static struct {
    pthread_mutex_t mu;
    int n;
    size_t bytes;
    void *block[CACHE_SLOTS];
    size_t size[CACHE_SLOTS];
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Size classes 64, 128, 256 and 512 bytes (header included in each block). */
#define SMALL_CLASSES 4
#define SMALL_MAX ((size_t)64 << (SMALL_CLASSES - 1))
static struct trib_freelist small[SMALL_CLASSES] = {
    TRIB_FREELIST_INIT(BLOCK_HDR + 64, 64, 4096),  TRIB_FREELIST_INIT(BLOCK_HDR + 128, 64, 4096),
    TRIB_FREELIST_INIT(BLOCK_HDR + 256, 64, 4096), TRIB_FREELIST_INIT(BLOCK_HDR + 512, 64, 2048),
};

/* The class of a rounded size up to SMALL_MAX (which keeps its own size). */
static int small_class(size_t size)
{
    int c = 0;
    while (((size_t)64 << c) < size) c++;
    return c;
}

static void *cpu_alloc(size_t nbytes)
{
    size_t size = (nbytes + 63) / 64 * 64;
    if (CACHE_ON && size <= SMALL_MAX) {
        int c = small_class(size ? size : 64);
        char *base = trib_fl_get_raw(&small[c]);
        if (!base) return NULL;
        *(size_t *)base = (size_t)64 << c;
        return base + BLOCK_HDR;
    }
    if (CACHE_ON && size >= CACHE_MIN) {
        void *hit = NULL;
        pthread_mutex_lock(&cache.mu);
        for (int i = cache.n - 1; i >= 0; i--)
            if (cache.size[i] == size) {
                hit = cache.block[i];
                cache.bytes -= size;
                cache.block[i] = cache.block[--cache.n];
                cache.size[i] = cache.size[cache.n];
                break;
            }
        pthread_mutex_unlock(&cache.mu);
        if (hit) return (char *)hit + BLOCK_HDR;
    }
    char *base = aligned_alloc(64, size + BLOCK_HDR);
    if (!base) return NULL;
    *(size_t *)base = size;
    return base + BLOCK_HDR;
}

static void cpu_free(void *p)
{
    if (!p) return;
    char *base = (char *)p - BLOCK_HDR;
    size_t size = *(size_t *)base;
    if (CACHE_ON && size <= SMALL_MAX) {
        trib_fl_put(&small[small_class(size)], base);
        return;
    }
    if (CACHE_ON && size >= CACHE_MIN) {
        bool kept = false;
        pthread_mutex_lock(&cache.mu);
        if (cache.n < CACHE_SLOTS && cache.bytes + size <= CACHE_MAX_BYTES) {
            cache.block[cache.n] = base;
            cache.size[cache.n++] = size;
            cache.bytes += size;
            kept = true;
        }
        pthread_mutex_unlock(&cache.mu);
        if (kept) return;
    }
    free(base);
}

static void cpu_zero(void *p, size_t n) { memset(p, 0, n); }
static void cpu_copy(void *d, const void *s, size_t n) { if (n) memmove(d, s, n); }

static void cpu_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows)
{
    for (size_t r = 0; r < rows; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

static void cpu_synchronize(void) {}

/* ---- element-wise -------------------------------------------------------- */

static void cpu_fill(float *out, float v, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = v;
}

static float unary1(enum kunary op, float x, float a, float b)
{
    switch (op) {
    case KU_NEG: return -x;
    case KU_RELU: return x > 0.0f ? x : 0.0f;
    case KU_TANH: return tanhf(x);
    case KU_EXP: return expf(x);
    case KU_LOG: return logf(x);
    case KU_SQRT: return sqrtf(x);
    case KU_SQUARE: return x * x;
    case KU_RECIP: return 1.0f / x;
    case KU_STEP: return x > 0.0f ? 1.0f : 0.0f;
    case KU_SCALE: return a * x;
    case KU_ADD_SCALAR: return x + a;
    case KU_CLAMP: return fminf(fmaxf(x, a), b);
    case KU_INSIDE: return (a <= x && x <= b) ? 1.0f : 0.0f;
    case KU_KEEP: return x >= a ? 1.0f / (1.0f - a) : 0.0f;
    case KU_COUNT: break;
    }
    CHECK(!"bad unary op");
    return 0.0f;
}

/* The elementwise loops are compiled for AVX-512 and AVX2 as well as the
 * baseline, the copy chosen by the CPU at load time (GCC's function
 * multiversioning; same arithmetic, wider vectors; no -march needed). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define TRIB_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRIB_SIMD_CLONES
#endif

/* e^y for y in [0, 18], branch-free so that a loop of it vectorises (libm's
 * expf is a call per element): y = n ln2 + r with |r| <= ln2/2 (n rounded
 * by the 1.5*2^23 trick, ln2 split in two for an exact product), e^r by its
 * degree-7 Taylor polynomial (truncation error < 6e-9 there), times 2^n built
 * in the exponent bits. A few ulp, checked against exp in float64 through
 * tanh by tests/tensor. */
static inline float exp_0_18(float y)
{
    const float magic = 12582912.0f;   /* 1.5 * 2^23 */
    float n = (y * 1.44269504088896341f + magic) - magic;
    float r = (y - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
                                                                        r * (1.0f / 720 + r * (1.0f / 5040)))))));
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* c ? a : b without a branch (GCC keeps a float ?: as control flow, which
 * stops the loop around it from vectorising). */
static inline float select_f(bool c, float a, float b)
{
    uint32_t ua, ub, m = -(uint32_t)c;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    uint32_t u = (ua & m) | (ub & ~m);
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}

/* tanh without libm's tanhf, which goes through the slow expm1f and was
 * half of a tanh policy's training time, and without branches, so that it
 * vectorises: an odd Taylor series below 0.25 (truncation error < 1e-10
 * relative), else 1 - 2/(e^2|x| + 1) (|x| clamped to 9, where the result
 * rounds to 1): at most ~5 ulp (just above 0.25, where the subtraction
 * cancels), 0 and +-1 exact. Checked against tanh in float64 by
 * tests/tensor. */
static inline float fast_tanhf(float x)
{
    float ax = fabsf(x), x2 = x * x;
    float small = x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315 + x2 * (62.0f / 2835 +
                                                                                        x2 * (-1382.0f / 155925))))));
    float y = 2.0f * select_f(ax < 9.0f, ax, 9.0f);
    float large = copysignf(1.0f - 2.0f / (exp_0_18(y) + 1.0f), x);
    return select_f(ax < 0.25f, small, large);
}

/* The switch is outside the loop for the common ops so they vectorise. */
TRIB_SIMD_CLONES static void cpu_unary(enum kunary op, float *out, const float *x, size_t n, float a, float b)
{
    switch (op) {
    case KU_TANH: for (size_t i = 0; i < n; i++) out[i] = fast_tanhf(x[i]); return;
    case KU_RELU: for (size_t i = 0; i < n; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f; return;
    case KU_STEP: for (size_t i = 0; i < n; i++) out[i] = x[i] > 0.0f ? 1.0f : 0.0f; return;
    case KU_SCALE: for (size_t i = 0; i < n; i++) out[i] = a * x[i]; return;
    case KU_NEG: for (size_t i = 0; i < n; i++) out[i] = -x[i]; return;
    case KU_SQUARE: for (size_t i = 0; i < n; i++) out[i] = x[i] * x[i]; return;
    case KU_ADD_SCALAR: for (size_t i = 0; i < n; i++) out[i] = x[i] + a; return;
    default: for (size_t i = 0; i < n; i++) out[i] = unary1(op, x[i], a, b); return;
    }
}

#define BINARY_LOOP(EXPR)                                                          \
    for (int64_t i0 = 0; i0 < bc->n[0]; i0++)                                      \
        for (int64_t i1 = 0; i1 < bc->n[1]; i1++)                                  \
            for (int64_t i2 = 0; i2 < bc->n[2]; i2++) {                            \
                const float *pa = a + i0 * bc->sa[0] + i1 * bc->sa[1] + i2 * bc->sa[2]; \
                const float *pb = b + i0 * bc->sb[0] + i1 * bc->sb[1] + i2 * bc->sb[2]; \
                float *po = out + ((i0 * bc->n[1] + i1) * bc->n[2] + i2) * bc->n[3]; \
                int64_t s3a = bc->sa[3], s3b = bc->sb[3];                          \
                for (int64_t i3 = 0; i3 < bc->n[3]; i3++) {                        \
                    float x = pa[i3 * s3a], y = pb[i3 * s3b];                      \
                    po[i3] = (EXPR);                                               \
                }                                                                  \
            }

TRIB_SIMD_CLONES static void cpu_binary(enum kbinary op, float *out, const float *a, const float *b, const struct kbcast *bc)
{
    switch (op) {
    case KB_ADD: BINARY_LOOP(x + y); return;
    case KB_SUB: BINARY_LOOP(x - y); return;
    case KB_MUL: BINARY_LOOP(x * y); return;
    case KB_DIV: BINARY_LOOP(x / y); return;
    case KB_MIN: BINARY_LOOP(x < y ? x : y); return;
    case KB_MAX: BINARY_LOOP(x > y ? x : y); return;
    case KB_GE: BINARY_LOOP(x >= y ? 1.0f : 0.0f); return;
    case KB_COUNT: break;
    }
    CHECK(!"bad binary op");
}

static void cpu_sum_to(float *out, const int64_t m[4], const float *in, const int64_t n[4])
{
    int64_t mn = m[0] * m[1] * m[2] * m[3];
    for (int64_t j = 0; j < mn; j++) out[j] = 0.0f;
    /* output strides, 0 along summed dims */
    int64_t so[4], s = 1;
    for (int k = 3; k >= 0; k--) {
        so[k] = m[k] == 1 ? 0 : s;
        s *= m[k];
    }
    const float *p = in;
    for (int64_t i0 = 0; i0 < n[0]; i0++)
        for (int64_t i1 = 0; i1 < n[1]; i1++)
            for (int64_t i2 = 0; i2 < n[2]; i2++) {
                float *po = out + i0 * so[0] + i1 * so[1] + i2 * so[2];
                if (so[3])
                    for (int64_t i3 = 0; i3 < n[3]; i3++) po[i3] += p[i3];
                else
                    for (int64_t i3 = 0; i3 < n[3]; i3++) po[0] += p[i3];
                p += n[3];
            }
}

static double load_as_double(const void *p, enum dtype dt, size_t i)
{
    switch (dt) {
    case DTYPE_F32: return ((const float *)p)[i];
    case DTYPE_F64: return ((const double *)p)[i];
    case DTYPE_I32: return ((const int32_t *)p)[i];
    case DTYPE_I64: return (double)((const int64_t *)p)[i];
    case DTYPE_U8: return ((const uint8_t *)p)[i];
    case DTYPE_COUNT: break;
    }
    CHECK(!"bad dtype");
    return 0.0;
}

static void cpu_cast(void *out, enum dtype out_dt, const void *in, enum dtype in_dt, size_t n)
{
    if (out_dt == in_dt) {
        memmove(out, in, n * dtype_size(in_dt));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (out_dt == DTYPE_I64 && in_dt == DTYPE_I32) {
            ((int64_t *)out)[i] = ((const int32_t *)in)[i];
            continue;
        }
        if (in_dt == DTYPE_I64 && out_dt == DTYPE_I32) {
            ((int32_t *)out)[i] = (int32_t)((const int64_t *)in)[i];
            continue;
        }
        double v = load_as_double(in, in_dt, i);
        switch (out_dt) {
        case DTYPE_F32: ((float *)out)[i] = (float)v; break;
        case DTYPE_F64: ((double *)out)[i] = v; break;
        case DTYPE_I32: ((int32_t *)out)[i] = (int32_t)v; break;
        case DTYPE_I64: ((int64_t *)out)[i] = (int64_t)v; break;
        case DTYPE_U8: ((uint8_t *)out)[i] = (uint8_t)v; break;
        case DTYPE_COUNT: CHECK(!"bad dtype");
        }
    }
}

/* ---- rows ---------------------------------------------------------------- */

static void cpu_softmax(float *y, const float *x, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float mx = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < cols; j++) mx = fmaxf(mx, xr[j]);
        for (int64_t j = 0; j < cols; j++) {
            yr[j] = expf(xr[j] - mx);
            sum += yr[j];
        }
        for (int64_t j = 0; j < cols; j++) yr[j] /= sum;
    }
}

static void cpu_log_softmax(float *y, const float *x, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float mx = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < cols; j++) mx = fmaxf(mx, xr[j]);
        for (int64_t j = 0; j < cols; j++) sum += expf(xr[j] - mx);
        float lse = mx + logf(sum);
        for (int64_t j = 0; j < cols; j++) yr[j] = xr[j] - lse;
    }
}

static void cpu_softmax_backward(float *gx, const float *gy, const float *y, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *gr = gy + r * cols, *yr = y + r * cols;
        float dot = 0.0f;
        for (int64_t j = 0; j < cols; j++) dot += gr[j] * yr[j];
        for (int64_t j = 0; j < cols; j++) gx[r * cols + j] = yr[j] * (gr[j] - dot);
    }
}

static void cpu_log_softmax_backward(float *gx, const float *gy, const float *y, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *gr = gy + r * cols, *yr = y + r * cols;
        float sum = 0.0f;
        for (int64_t j = 0; j < cols; j++) sum += gr[j];
        for (int64_t j = 0; j < cols; j++) gx[r * cols + j] = gr[j] - expf(yr[j]) * sum;
    }
}

static void cpu_gather(float *out, const float *x, const int64_t *idx, int64_t rows, int64_t cols, int64_t k)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) out[r * k + j] = x[r * cols + idx[r * k + j]];
}

static void cpu_gather_backward(float *gx, const float *gout, const int64_t *idx, int64_t rows, int64_t cols, int64_t k)
{
    memset(gx, 0, (size_t)(rows * cols) * sizeof *gx);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) gx[r * cols + idx[r * k + j]] += gout[r * k + j];
}

static void cpu_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc)
{
    if (M == 0 || N == 0) return;
    if (K == 0) {   /* BLAS may not touch C when K is 0: C = beta*C by hand */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb,
                beta, C, (blasint)ldc);
}

/* ---- random -------------------------------------------------------------- */

static void cpu_rand_uniform(float *out, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) out[i] = rng_uniform_at(seed, i);
}

static void cpu_rand_normal(float *out, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        float u1 = rng_uniform_at(seed, 2 * (uint64_t)i);
        float u2 = rng_uniform_at(seed, 2 * (uint64_t)i + 1);
        out[i] = sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.28318530717958647692f * u2);
    }
}

static void cpu_categorical(int64_t *out, const float *probs, const float *u, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *p = probs + r * cols;
        float total = 0.0f;
        for (int64_t j = 0; j < cols; j++) total += p[j];
        float target = u[r] * total, c = 0.0f;
        int64_t pick = cols - 1;
        for (int64_t j = 0; j < cols; j++) {
            c += p[j];
            if (c > target) {
                pick = j;
                break;
            }
        }
        out[r] = pick;
    }
}

/* Bag b's end: the next offset, or L for the last bag. */
static inline int64_t bag_end(const int64_t *off, int64_t b, int64_t B, int64_t L) { return b + 1 < B ? off[b + 1] : L; }

static void cpu_embedding_bag(float *out, const float *w, const int64_t *idx, const int64_t *off, int64_t B,
                              int64_t L, int64_t D, int mean)
{
    for (int64_t b = 0; b < B; b++) {
        float *o = out + b * D;
        for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
        int64_t lo = off[b], hi = bag_end(off, b, B, L);
        for (int64_t i = lo; i < hi; i++)
            for (int64_t d = 0; d < D; d++) o[d] += w[idx[i] * D + d];
        if (mean && hi > lo)
            for (int64_t d = 0; d < D; d++) o[d] /= (float)(hi - lo);
    }
}

static void cpu_embedding_bag_backward(float *gw, const float *gout, const int64_t *idx, const int64_t *off,
                                       int64_t B, int64_t L, int64_t N, int64_t D, int mean)
{
    memset(gw, 0, (size_t)(N * D) * sizeof *gw);
    for (int64_t b = 0; b < B; b++) {
        int64_t lo = off[b], hi = bag_end(off, b, B, L);
        float n = mean ? (float)(hi - lo) : 1.0f;
        for (int64_t i = lo; i < hi; i++)
            for (int64_t d = 0; d < D; d++) gw[idx[i] * D + d] += gout[b * D + d] / n;
    }
}

static const struct tensor_backend cpu_backend = {
    .name = "cpu",
    .available = cpu_available,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .copy_from_host = cpu_copy,
    .copy_to_host = cpu_copy,
    .copy2d = cpu_copy2d,
    .synchronize = cpu_synchronize,
    .fill = cpu_fill,
    .unary = cpu_unary,
    .binary = cpu_binary,
    .sum_to = cpu_sum_to,
    .cast = cpu_cast,
    .softmax = cpu_softmax,
    .log_softmax = cpu_log_softmax,
    .softmax_backward = cpu_softmax_backward,
    .log_softmax_backward = cpu_log_softmax_backward,
    .gather = cpu_gather,
    .gather_backward = cpu_gather_backward,
    .embedding_bag = cpu_embedding_bag,
    .embedding_bag_backward = cpu_embedding_bag_backward,
    .sgemm = cpu_sgemm,
    .rand_uniform = cpu_rand_uniform,
    .rand_normal = cpu_rand_normal,
    .categorical = cpu_categorical,
};

const struct tensor_backend *tensor_cpu_backend(void) { return &cpu_backend; }

void tensor_set_cpu_threads(int n)
{
    openblas_set_num_threads(n < 1 ? 1 : n);
}
