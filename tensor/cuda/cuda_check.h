/* CUDA_CHECK / CUBLAS_CHECK: every foreign status names the call, file and
 * line, and aborts (a failed CUDA call after init is a broken invariant). */
#ifndef TRIB_TENSOR_CUDA_CHECK_H
#define TRIB_TENSOR_CUDA_CHECK_H

#include <cstdio>
#include <cstdlib>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                       \
    do {                                                                       \
        cudaError_t err_ = (call);                                             \
        if (err_ != cudaSuccess) {                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,      \
                    #call, cudaGetErrorString(err_));                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define CUBLAS_CHECK(call)                                                     \
    do {                                                                       \
        cublasStatus_t st_ = (call);                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                    \
            fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__,         \
                    __LINE__, #call, (int)st_);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* After every kernel launch. */
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#endif
