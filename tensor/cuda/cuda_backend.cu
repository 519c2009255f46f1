/* The CUDA backend: device memory and the kernels of backend.h, with cuBLAS
 * for sgemm. Each kernel mirrors its CPU reference in cpu_backend.c. */
#include "tensor/backend.h"
#include "tensor/cuda/cuda_check.h"

static int cuda_available(void)
{
    static int state = -1;   /* -1 unknown, 0 no, 1 yes */
    if (state < 0) {
        int n = 0;
        state = (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) ? 1 : 0;
    }
    return state;
}

static void *cuda_alloc(size_t nbytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, nbytes ? nbytes : 1) != cudaSuccess) return NULL;
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
    return b;
}

static const struct tensor_backend cuda_backend = make_backend();

extern "C" const struct tensor_backend *tensor_cuda_backend(void) { return &cuda_backend; }
