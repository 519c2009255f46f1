/* CUDA row kernels: softmax / log_softmax and their backwards (one block
 * per row, fixed-shape tree reductions, so results are deterministic),
 * gather and its backward, and categorical sampling. Mirrors cpu_backend.c. */
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"

#define ROW_MAX_THREADS 256

/* Threads per row block: a power of two from 32 to 256 covering cols. */
static unsigned row_threads(int64_t cols)
{
    unsigned t = 32;
    while (t < ROW_MAX_THREADS && (int64_t)t < cols) t *= 2;
    return t;
}

static unsigned row_blocks(int64_t rows)
{
    return rows > (1 << 20) ? (1u << 20) : (unsigned)rows;
}

enum { RED_SUM, RED_MAX };

/* Block-wide reduction of v (blockDim.x a power of two); every thread gets
 * the result. `buf` is blockDim.x floats of shared memory. */
template <int KIND>
__device__ float block_reduce(float v, float *buf)
{
    unsigned tid = threadIdx.x;
    buf[tid] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) buf[tid] = KIND == RED_SUM ? buf[tid] + buf[tid + s] : fmaxf(buf[tid], buf[tid + s]);
        __syncthreads();
    }
    float r = buf[0];
    __syncthreads();   /* buf is reused by the next reduction */
    return r;
}

template <bool LOG>
__global__ void softmax_kernel(float *y, const float *x, int64_t rows, int64_t cols)
{
    extern __shared__ float buf[];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) mx = fmaxf(mx, xr[j]);
        mx = block_reduce<RED_MAX>(mx, buf);
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += expf(xr[j] - mx);
        sum = block_reduce<RED_SUM>(sum, buf);
        if (LOG) {
            float lse = mx + logf(sum);
            for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] - lse;
        } else {
            for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - mx) / sum;
        }
    }
}

template <bool LOG>
static void launch_softmax(float *y, const float *x, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0) return;
    unsigned t = row_threads(cols);
    softmax_kernel<LOG><<<row_blocks(rows), t, t * sizeof(float)>>>(y, x, rows, cols);
    CUDA_CHECK_LAUNCH();
}

void cuda_softmax(float *y, const float *x, int64_t rows, int64_t cols) { launch_softmax<false>(y, x, rows, cols); }
void cuda_log_softmax(float *y, const float *x, int64_t rows, int64_t cols) { launch_softmax<true>(y, x, rows, cols); }

/* LOG: gx = gy - exp(y) * sum(gy); else gx = y * (gy - sum(gy * y)). */
template <bool LOG>
__global__ void softmax_backward_kernel(float *gx, const float *gy, const float *y, int64_t rows, int64_t cols)
{
    extern __shared__ float buf[];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *gr = gy + r * cols, *yr = y + r * cols;
        float *gxr = gx + r * cols;
        float acc = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) acc += LOG ? gr[j] : __fmul_rn(gr[j], yr[j]);
        acc = block_reduce<RED_SUM>(acc, buf);
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
            gxr[j] = LOG ? gr[j] - __fmul_rn(expf(yr[j]), acc) : __fmul_rn(yr[j], gr[j] - acc);
    }
}

template <bool LOG>
static void launch_softmax_backward(float *gx, const float *gy, const float *y, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0) return;
    unsigned t = row_threads(cols);
    softmax_backward_kernel<LOG><<<row_blocks(rows), t, t * sizeof(float)>>>(gx, gy, y, rows, cols);
    CUDA_CHECK_LAUNCH();
}

void cuda_softmax_backward(float *gx, const float *gy, const float *y, int64_t rows, int64_t cols)
{
    launch_softmax_backward<false>(gx, gy, y, rows, cols);
}

void cuda_log_softmax_backward(float *gx, const float *gy, const float *y, int64_t rows, int64_t cols)
{
    launch_softmax_backward<true>(gx, gy, y, rows, cols);
}

/* ---- gather ----------------------------------------------------------------- */

__global__ void gather_kernel(float *out, const float *x, const int64_t *idx, int64_t rows, int64_t cols, int64_t k)
{
    size_t n = (size_t)(rows * k);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int64_t r = (int64_t)i / k;
        out[i] = x[r * cols + idx[i]];
    }
}

void cuda_gather(float *out, const float *x, const int64_t *idx, int64_t rows, int64_t cols, int64_t k)
{
    size_t n = (size_t)(rows * k);
    if (!n) return;
    gather_kernel<<<trib_cuda_blocks(n), TRIB_CUDA_BLOCK>>>(out, x, idx, rows, cols, k);
    CUDA_CHECK_LAUNCH();
}

/* One thread per row adds its k gradients in j order: repeated indices in a
 * row accumulate exactly as on the CPU, with no atomics. */
__global__ void gather_backward_kernel(float *gx, const float *gout, const int64_t *idx, int64_t rows, int64_t cols, int64_t k)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x)
        for (int64_t j = 0; j < k; j++) gx[r * cols + idx[r * k + j]] += gout[r * k + j];
}

void cuda_gather_backward(float *gx, const float *gout, const int64_t *idx, int64_t rows, int64_t cols, int64_t k)
{
    size_t n = (size_t)(rows * cols);
    if (!n) return;
    CUDA_CHECK(cudaMemset(gx, 0, n * sizeof(float)));
    if (!k) return;
    gather_backward_kernel<<<trib_cuda_blocks((size_t)rows), TRIB_CUDA_BLOCK>>>(gx, gout, idx, rows, cols, k);
    CUDA_CHECK_LAUNCH();
}

/* ---- embedding bag ------------------------------------------------------------ */

__device__ static inline int64_t bag_end(const int64_t *off, int64_t b, int64_t B, int64_t L)
{
    return b + 1 < B ? off[b + 1] : L;
}

/* One thread per output element sums its bag in index order, as the CPU does. */
__global__ void embedding_bag_kernel(float *out, const float *w, const int64_t *idx, const int64_t *off, int64_t B,
                                     int64_t L, int64_t D, int mean)
{
    size_t n = (size_t)(B * D);
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < n; t += (size_t)gridDim.x * blockDim.x) {
        int64_t b = (int64_t)t / D, d = (int64_t)t % D;
        int64_t lo = off[b], hi = bag_end(off, b, B, L);
        float s = 0.0f;
        for (int64_t i = lo; i < hi; i++) s += w[idx[i] * D + d];
        if (mean && hi > lo) s /= (float)(hi - lo);
        out[t] = s;
    }
}

void cuda_embedding_bag(float *out, const float *w, const int64_t *idx, const int64_t *off, int64_t B, int64_t L,
                        int64_t D, int mean)
{
    size_t n = (size_t)(B * D);
    if (!n) return;
    embedding_bag_kernel<<<trib_cuda_blocks(n), TRIB_CUDA_BLOCK>>>(out, w, idx, off, B, L, D, mean);
    CUDA_CHECK_LAUNCH();
}

/* One thread per column walks every bag and index in the CPU's order: a row
 * hit several times accumulates exactly as on the CPU, with no atomics. */
__global__ void embedding_bag_backward_kernel(float *gw, const float *gout, const int64_t *idx, const int64_t *off,
                                              int64_t B, int64_t L, int64_t D, int mean)
{
    for (int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; d < D; d += (int64_t)gridDim.x * blockDim.x)
        for (int64_t b = 0; b < B; b++) {
            int64_t lo = off[b], hi = bag_end(off, b, B, L);
            float n = mean ? (float)(hi - lo) : 1.0f;
            for (int64_t i = lo; i < hi; i++) gw[idx[i] * D + d] += gout[b * D + d] / n;
        }
}

void cuda_embedding_bag_backward(float *gw, const float *gout, const int64_t *idx, const int64_t *off, int64_t B,
                                 int64_t L, int64_t N, int64_t D, int mean)
{
    size_t n = (size_t)(N * D);
    if (!n) return;
    CUDA_CHECK(cudaMemset(gw, 0, n * sizeof(float)));
    if (!B || !D) return;
    embedding_bag_backward_kernel<<<trib_cuda_blocks((size_t)D), TRIB_CUDA_BLOCK>>>(gw, gout, idx, off, B, L, D, mean);
    CUDA_CHECK_LAUNCH();
}

/* ---- categorical -------------------------------------------------------------- */

/* One thread per row, the CPU's sequential float sums: same picks. */
__global__ void categorical_kernel(int64_t *out, const float *probs, const float *u, int64_t rows, int64_t cols)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        const float *p = probs + r * cols;
        float total = 0.0f;
        for (int64_t j = 0; j < cols; j++) total += p[j];
        float target = __fmul_rn(u[r], total), c = 0.0f;
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

void cuda_categorical(int64_t *out, const float *probs, const float *u, int64_t rows, int64_t cols)
{
    if (rows <= 0) return;
    categorical_kernel<<<trib_cuda_blocks((size_t)rows), TRIB_CUDA_BLOCK>>>(out, probs, u, rows, cols);
    CUDA_CHECK_LAUNCH();
}
