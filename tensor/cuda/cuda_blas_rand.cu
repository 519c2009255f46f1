/* CUDA sgemm through cuBLAS (row-major by the column-major swap: C^T =
 * op(B)^T op(A)^T) and the counter-based random kernels, which use
 * rng_uniform_at from backend.h so every element matches the CPU's. */
#include <mutex>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"

/* ---- sgemm ----------------------------------------------------------------- */

static cublasHandle_t blas_handle;
static std::once_flag blas_once;

/* One handle for the process, made on first use. cuBLAS allows calls on one
 * handle from many threads as long as its configuration does not change,
 * and it is never changed after this. */
static cublasHandle_t blas(void)
{
    std::call_once(blas_once, [] {
        CUBLAS_CHECK(cublasCreate(&blas_handle));
        /* plain fp32: no TF32 tensor-core rounding, so results stay close
         * to the CPU's cblas_sgemm */
        CUBLAS_CHECK(cublasSetMathMode(blas_handle, CUBLAS_DEFAULT_MATH));
    });
    return blas_handle;
}

/* C = beta * C (row-major M x N, row stride ldc) for K == 0, where BLAS
 * libraries differ; beta == 0 writes zeros even over NaN, as the CPU does. */
__global__ void scale_rows_kernel(float *C, int64_t M, int64_t N, int64_t ldc, float beta)
{
    size_t n = (size_t)(M * N);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)i / N, c = (int64_t)i % N;
        float *p = C + r * ldc + c;
        *p = beta == 0.0f ? 0.0f : beta * *p;
    }
}

void cuda_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb,
                float beta, float *C, int64_t ldc)
{
    if (M == 0 || N == 0) return;
    if (K == 0) {
        scale_rows_kernel<<<trib_cuda_blocks((size_t)(M * N)), TRIB_CUDA_BLOCK>>>(C, M, N, ldc, beta);
        CUDA_CHECK_LAUNCH();
        return;
    }
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* Row-major X (r x c, stride ld) is column-major X^T with the same ld. */
#if CUBLAS_VER_MAJOR >= 12
    CUBLAS_CHECK(cublasSgemm_64(blas(), opb, opa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
#else
    CUBLAS_CHECK(cublasSgemm(blas(), opb, opa, (int)N, (int)M, (int)K, &alpha, B, (int)ldb, A, (int)lda,
                             &beta, C, (int)ldc));
#endif
}

/* ---- random ----------------------------------------------------------------- */

__global__ void rand_uniform_kernel(float *out, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = rng_uniform_at(seed, (uint64_t)i);
}

/* Box-Muller exactly as backend.h documents (and cpu_backend.c computes). */
__global__ void rand_normal_kernel(float *out, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float u1 = rng_uniform_at(seed, 2 * (uint64_t)i);
        float u2 = rng_uniform_at(seed, 2 * (uint64_t)i + 1);
        out[i] = __fmul_rn(sqrtf(__fmul_rn(-2.0f, logf(1.0f - u1))),
                           cosf(__fmul_rn(6.28318530717958647692f, u2)));
    }
}

void cuda_rand_uniform(float *out, size_t n, uint64_t seed)
{
    if (!n) return;
    rand_uniform_kernel<<<trib_cuda_blocks(n), TRIB_CUDA_BLOCK>>>(out, n, seed);
    CUDA_CHECK_LAUNCH();
}

void cuda_rand_normal(float *out, size_t n, uint64_t seed)
{
    if (!n) return;
    rand_normal_kernel<<<trib_cuda_blocks(n), TRIB_CUDA_BLOCK>>>(out, n, seed);
    CUDA_CHECK_LAUNCH();
}
