/* The CPU backend: host memory (64-byte aligned) and the float32 reference
 * kernels of backend.h, with OpenBLAS cblas_sgemm for matmul. */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "tensor/backend.h"

static int cpu_available(void) { return 1; }

static void *cpu_alloc(size_t nbytes)
{
    size_t n = (nbytes + 63) / 64 * 64;
    return aligned_alloc(64, n ? n : 64);
}

static void cpu_free(void *p) { free(p); }
static void cpu_zero(void *p, size_t n) { memset(p, 0, n); }
static void cpu_copy(void *d, const void *s, size_t n) { if (n) memmove(d, s, n); }

static void cpu_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows)
{
    for (size_t r = 0; r < rows; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

static void cpu_synchronize(void) {}

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
};

const struct tensor_backend *tensor_cpu_backend(void) { return &cpu_backend; }
