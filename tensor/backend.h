/* The kernel interface every device implements (CPU: cpu_backend.c with
 * OpenBLAS; CUDA: cuda/cuda_backend.cu with cuBLAS). Ops and autograd
 * (ops.c, autograd.c) are written once over this table, so each kernel has
 * a CPU reference that the CUDA version is tested against kernel by kernel.
 *
 * Kernels take raw pointers on their own device and plain sizes; they never
 * see struct tensor. All compute is float32 unless named otherwise. Kernels
 * validate nothing: callers (ops.c) check shapes first. Element-wise kernels
 * (fill, unary, binary) may write in place: out may equal an input of the
 * same shape. CUDA kernels run on
 * the default stream; memory calls are synchronous. */
#ifndef TRIB_TENSOR_BACKEND_H
#define TRIB_TENSOR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

enum kunary {
    KU_NEG,        /* -x */
    KU_RELU,       /* max(x, 0) */
    KU_TANH,
    KU_EXP,
    KU_LOG,
    KU_SQRT,
    KU_SQUARE,     /* x*x */
    KU_RECIP,      /* 1/x */
    KU_STEP,       /* x > 0 ? 1 : 0   (relu backward mask) */
    KU_SCALE,      /* a*x */
    KU_ADD_SCALAR, /* x + a */
    KU_CLAMP,      /* min(max(x, a), b) */
    KU_INSIDE,     /* a <= x <= b ? 1 : 0   (clamp backward mask) */
    KU_KEEP,       /* x >= a ? 1/(1-a) : 0 (dropout mask from uniform x, a = p) */
    KU_COUNT
};

enum kbinary {
    KB_ADD, KB_SUB, KB_MUL, KB_DIV,
    KB_MIN, KB_MAX,
    KB_GE,         /* a >= b ? 1 : 0   (min/max backward mask) */
    KB_COUNT
};

/* Broadcast geometry for binary kernels and reductions, right-aligned to 4
 * dims: out[i0,i1,i2,i3] = a[sum ik*sa[k]] op b[sum ik*sb[k]], where a
 * stride is 0 along a broadcast dim. Row-major: index = ((i0*n1+i1)*n2+i2)*n3+i3. */
struct kbcast {
    int64_t n[4];     /* output shape */
    int64_t sa[4];    /* element strides of a (0 = broadcast) */
    int64_t sb[4];    /* element strides of b (0 = broadcast) */
};

struct tensor_backend {
    const char *name;
    /* 1 if usable now (for CUDA: a device is present). */
    int (*available)(void);

    /* memory: alloc returns NULL on failure; all copies are synchronous */
    void *(*alloc)(size_t nbytes);
    void (*free)(void *p);
    void (*zero)(void *p, size_t nbytes);
    void (*copy)(void *dst, const void *src, size_t nbytes);            /* same device */
    void (*copy_from_host)(void *dst, const void *host_src, size_t nbytes);
    void (*copy_to_host)(void *host_dst, const void *src, size_t nbytes);
    /* 2-D copy: rows of `width` bytes, pitches in bytes (cat/split on dim>0) */
    void (*copy2d)(void *dst, size_t dpitch, const void *src, size_t spitch,
                   size_t width, size_t rows);
    void (*synchronize)(void);

    /* element-wise; out may alias an input that has out's own layout
     * (out == x, or out == a / b where not broadcast): ops update some
     * temporaries in place */
    void (*fill)(float *out, float v, size_t n);
    void (*unary)(enum kunary op, float *out, const float *x, size_t n, float a, float b);
    void (*binary)(enum kbinary op, float *out, const float *a, const float *b,
                   const struct kbcast *bc);
    /* out[j] = sum over i of in[i] where out is `in` summed down to shape
     * m (right-aligned 4 dims, m[k] == n[k] or m[k] == 1). Deterministic:
     * no atomics; each output sums its inputs in increasing index order. */
    void (*sum_to)(float *out, const int64_t m[4], const float *in, const int64_t n[4]);
    /* dtype conversion of n elements (any pair of enum dtype) */
    void (*cast)(void *out, enum dtype out_dt, const void *in, enum dtype in_dt, size_t n);

    /* rows: x is rows x cols, operation along the last dim */
    void (*softmax)(float *y, const float *x, int64_t rows, int64_t cols);
    void (*log_softmax)(float *y, const float *x, int64_t rows, int64_t cols);
    /* gx = y * (gy - sum_j gy*y)            (y = softmax output) */
    void (*softmax_backward)(float *gx, const float *gy, const float *y, int64_t rows, int64_t cols);
    /* gx = gy - exp(y) * sum_j gy           (y = log_softmax output) */
    void (*log_softmax_backward)(float *gx, const float *gy, const float *y, int64_t rows, int64_t cols);
    /* out[r,j] = x[r, idx[r,j]] for idx (int64) rows x k; idx pre-validated */
    void (*gather)(float *out, const float *x, const int64_t *idx, int64_t rows, int64_t cols, int64_t k);
    /* gx (rows x cols) = 0, then gx[r, idx[r,j]] += gout[r,j] in j order */
    void (*gather_backward)(float *gx, const float *gout, const int64_t *idx, int64_t rows, int64_t cols, int64_t k);

    /* EmbeddingBag (idx, off int64, pre-validated; bag b = idx[off[b] ..
     * off[b+1]), the last ending at L): out (B x D) row b = scale_b * the
     * sum of w rows idx[i] in i order, scale_b = 1 (sum) or 1/|bag| (mean,
     * and 0 for an empty bag). */
    void (*embedding_bag)(float *out, const float *w, const int64_t *idx, const int64_t *off,
                          int64_t B, int64_t L, int64_t D, int mean);
    /* gw (N x D) = 0, then for each bag b in order, each i of it in order:
     * gw[idx[i], :] += scale_b * gout[b, :]. Deterministic (no atomics). */
    void (*embedding_bag_backward)(float *gw, const float *gout, const int64_t *idx, const int64_t *off,
                                   int64_t B, int64_t L, int64_t N, int64_t D, int mean);

    /* Row-major C = alpha * op(A) * op(B) + beta * C, op = transpose if t*.
     * A is M x K after op, B is K x N after op; lda/ldb/ldc are row strides. */
    void (*sgemm)(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb,
                  float beta, float *C, int64_t ldc);

    /* Counter-based random numbers, identical on every backend up to libm
     * rounding: element i depends only on (seed, i). See rng_* below. */
    void (*rand_uniform)(float *out, size_t n, uint64_t seed);  /* [0,1) */
    /* N(0,1) by Box-Muller: u1 = rng_uniform_at(seed, 2i), u2 = ..(seed, 2i+1),
     * out[i] = sqrtf(-2 logf(1 - u1)) * cosf(2 pi u2) */
    void (*rand_normal)(float *out, size_t n, uint64_t seed);
    /* out[r] = smallest j with cumsum(probs[r, 0..j]) > u[r] * rowsum, else cols-1 */
    void (*categorical)(int64_t *out, const float *probs, const float *u, int64_t rows, int64_t cols);
};

/* The table for a device, or NULL if that backend was not built. Callers
 * must still check ->available() for CUDA. */
const struct tensor_backend *tensor_backend_for(enum device dev);
const struct tensor_backend *tensor_cpu_backend(void);
#ifdef TRIB_WITH_CUDA
const struct tensor_backend *tensor_cuda_backend(void);
#endif

/* ---- the counter-based generator shared by all backends ---------------- */

/* splitmix64 finaliser of (seed + i * golden ratio): a stateless hash. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline uint64_t rng_hash(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform float in [0,1) with 24 random bits: exact on every backend. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline float rng_uniform_at(uint64_t seed, uint64_t i)
{
    return (float)(rng_hash(seed, i) >> 40) * (1.0f / 16777216.0f);
}

/* Advances a caller-owned 64-bit RNG state and returns the next value
 * (splitmix64). Ops draw one seed per call from the caller's state. */
static inline uint64_t rng_next(uint64_t *state)
{
    *state += 0x9E3779B97F4A7C15ull;
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#ifdef __cplusplus
}
#endif

#endif
