/* The CUDA backend: device memory and the table of backend.h. The kernels
 * live in cuda_elementwise.cu, cuda_rows.cu and cuda_blas_rand.cu (cuBLAS
 * sgemm); each mirrors its CPU reference in cpu_backend.c. */
#include <mutex>

#include "tensor/backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"

static int cuda_available(void)
{
    static int state;
    static std::once_flag once;
    std::call_once(once, [] {
        int n = 0;
        state = (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) ? 1 : 0;
        if (!state) (void)cudaGetLastError();   /* do not leave the probe's error pending */
    });
    return state;
}

static void *cuda_alloc(size_t nbytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, nbytes ? nbytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();   /* clear it, or the next launch check reports it */
        return NULL;
    }
    return p;
}

static void cuda_free(void *p) { if (p) CUDA_CHECK(cudaFree(p)); }
static void cuda_zero(void *p, size_t n) { if (n) CUDA_CHECK(cudaMemset(p, 0, n)); }
static void cuda_copy(void *d, const void *s, size_t n) { if (n) CUDA_CHECK(cudaMemcpy(d, s, n, cudaMemcpyDeviceToDevice)); }
static void cuda_copy_h2d(void *d, const void *s, size_t n) { if (n) CUDA_CHECK(cudaMemcpy(d, s, n, cudaMemcpyHostToDevice)); }
static void cuda_copy_d2h(void *d, const void *s, size_t n) { if (n) CUDA_CHECK(cudaMemcpy(d, s, n, cudaMemcpyDeviceToHost)); }
static void cuda_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows)
{
    if (width && rows) CUDA_CHECK(cudaMemcpy2D(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice));
}
static void cuda_synchronize(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

static struct tensor_backend make_backend(void)
{
    struct tensor_backend b = {};
    b.name = "cuda";
    b.available = cuda_available;
    b.alloc = cuda_alloc;
    b.free = cuda_free;
    b.zero = cuda_zero;
    b.copy = cuda_copy;
    b.copy_from_host = cuda_copy_h2d;
    b.copy_to_host = cuda_copy_d2h;
    b.copy2d = cuda_copy2d;
    b.synchronize = cuda_synchronize;
    b.fill = cuda_fill;
    b.unary = cuda_unary;
    b.binary = cuda_binary;
    b.sum_to = cuda_sum_to;
    b.cast = cuda_cast;
    b.softmax = cuda_softmax;
    b.log_softmax = cuda_log_softmax;
    b.softmax_backward = cuda_softmax_backward;
    b.log_softmax_backward = cuda_log_softmax_backward;
    b.gather = cuda_gather;
    b.gather_backward = cuda_gather_backward;
    b.embedding_bag = cuda_embedding_bag;
    b.embedding_bag_backward = cuda_embedding_bag_backward;
    b.sgemm = cuda_sgemm;
    b.rand_uniform = cuda_rand_uniform;
    b.rand_normal = cuda_rand_normal;
    b.categorical = cuda_categorical;
    return b;
}

static const struct tensor_backend cuda_backend = make_backend();

extern "C" const struct tensor_backend *tensor_cuda_backend(void) { return &cuda_backend; }
