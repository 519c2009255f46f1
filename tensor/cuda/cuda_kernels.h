/* Host-side launchers of the CUDA kernels, one per entry of struct
 * tensor_backend (backend.h), shared by the .cu files of this folder and
 * assembled into the table in cuda_backend.cu. Internal to tensor/cuda/. */
#ifndef TRIB_TENSOR_CUDA_KERNELS_H
#define TRIB_TENSOR_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/backend.h"

/* Threads per block of the 1-D element-wise kernels. */
#define TRIB_CUDA_BLOCK 256

/* Blocks for a grid-stride loop over n elements (at least 1, capped so the
 * grid stays within limits; the kernels stride over the rest). */
static inline unsigned trib_cuda_blocks(size_t n)
{
    size_t b = (n + TRIB_CUDA_BLOCK - 1) / TRIB_CUDA_BLOCK;
    if (b < 1) b = 1;
    if (b > (1u << 20)) b = 1u << 20;
    return (unsigned)b;
}

/* cuda_elementwise.cu */
void cuda_fill(float *out, float v, size_t n);
void cuda_unary(enum kunary op, float *out, const float *x, size_t n, float a, float b);
void cuda_binary(enum kbinary op, float *out, const float *a, const float *b, const struct kbcast *bc);
void cuda_sum_to(float *out, const int64_t m[4], const float *in, const int64_t n[4]);
void cuda_cast(void *out, enum dtype out_dt, const void *in, enum dtype in_dt, size_t n);

/* cuda_rows.cu */
void cuda_softmax(float *y, const float *x, int64_t rows, int64_t cols);
void cuda_log_softmax(float *y, const float *x, int64_t rows, int64_t cols);
void cuda_softmax_backward(float *gx, const float *gy, const float *y, int64_t rows, int64_t cols);
void cuda_log_softmax_backward(float *gx, const float *gy, const float *y, int64_t rows, int64_t cols);
void cuda_gather(float *out, const float *x, const int64_t *idx, int64_t rows, int64_t cols, int64_t k);
void cuda_gather_backward(float *gx, const float *gout, const int64_t *idx, int64_t rows, int64_t cols, int64_t k);
void cuda_embedding_bag(float *out, const float *w, const int64_t *idx, const int64_t *off, int64_t B, int64_t L,
                        int64_t D, int mean);
void cuda_embedding_bag_backward(float *gw, const float *gout, const int64_t *idx, const int64_t *off, int64_t B,
                                 int64_t L, int64_t N, int64_t D, int mean);
void cuda_categorical(int64_t *out, const float *probs, const float *u, int64_t rows, int64_t cols);

/* cuda_blas_rand.cu */
void cuda_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb,
                float beta, float *C, int64_t ldc);
void cuda_rand_uniform(float *out, size_t n, uint64_t seed);
void cuda_rand_normal(float *out, size_t n, uint64_t seed);

#endif
