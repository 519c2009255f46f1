/* CUDA element-wise kernels: fill, unary, broadcast binary, the
 * deterministic sum_to reduction and dtype casts. Each mirrors its CPU
 * reference in cpu_backend.c expression for expression. */
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_kernels.h"

/* ---- fill ---------------------------------------------------------------- */

__global__ void fill_kernel(float *out, float v, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = v;
}

void cuda_fill(float *out, float v, size_t n)
{
    if (!n) return;
    fill_kernel<<<trib_cuda_blocks(n), TRIB_CUDA_BLOCK>>>(out, v, n);
    CUDA_CHECK_LAUNCH();
}

/* ---- unary --------------------------------------------------------------- */

template <int OP>
__device__ __forceinline__ float unary1(float x, float a, float b)
{
    switch (OP) {
    case KU_NEG: return -x;
    case KU_RELU: return x > 0.0f ? x : 0.0f;
    case KU_TANH: return tanhf(x);
    case KU_EXP: return expf(x);
    case KU_LOG: return logf(x);
    case KU_SQRT: return sqrtf(x);
    case KU_SQUARE: return __fmul_rn(x, x);
    case KU_RECIP: return 1.0f / x;
    case KU_STEP: return x > 0.0f ? 1.0f : 0.0f;
    case KU_SCALE: return __fmul_rn(a, x);
    case KU_ADD_SCALAR: return x + a;
    case KU_CLAMP: return fminf(fmaxf(x, a), b);
    case KU_INSIDE: return (a <= x && x <= b) ? 1.0f : 0.0f;
    case KU_KEEP: return x >= a ? 1.0f / (1.0f - a) : 0.0f;
    default: return 0.0f;
    }
}

template <int OP>
__global__ void unary_kernel(float *out, const float *x, size_t n, float a, float b)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = unary1<OP>(x[i], a, b);
}

template <int OP>
static void launch_unary(float *out, const float *x, size_t n, float a, float b)
{
    unary_kernel<OP><<<trib_cuda_blocks(n), TRIB_CUDA_BLOCK>>>(out, x, n, a, b);
    CUDA_CHECK_LAUNCH();
}

void cuda_unary(enum kunary op, float *out, const float *x, size_t n, float a, float b)
{
    if (!n) return;
    switch (op) {
    case KU_NEG: launch_unary<KU_NEG>(out, x, n, a, b); return;
    case KU_RELU: launch_unary<KU_RELU>(out, x, n, a, b); return;
    case KU_TANH: launch_unary<KU_TANH>(out, x, n, a, b); return;
    case KU_EXP: launch_unary<KU_EXP>(out, x, n, a, b); return;
    case KU_LOG: launch_unary<KU_LOG>(out, x, n, a, b); return;
    case KU_SQRT: launch_unary<KU_SQRT>(out, x, n, a, b); return;
    case KU_SQUARE: launch_unary<KU_SQUARE>(out, x, n, a, b); return;
    case KU_RECIP: launch_unary<KU_RECIP>(out, x, n, a, b); return;
    case KU_STEP: launch_unary<KU_STEP>(out, x, n, a, b); return;
    case KU_SCALE: launch_unary<KU_SCALE>(out, x, n, a, b); return;
    case KU_ADD_SCALAR: launch_unary<KU_ADD_SCALAR>(out, x, n, a, b); return;
    case KU_CLAMP: launch_unary<KU_CLAMP>(out, x, n, a, b); return;
    case KU_INSIDE: launch_unary<KU_INSIDE>(out, x, n, a, b); return;
    case KU_KEEP: launch_unary<KU_KEEP>(out, x, n, a, b); return;
    case KU_COUNT: break;
    }
    fprintf(stderr, "%s:%d: bad unary op %d\n", __FILE__, __LINE__, (int)op);
    abort();
}

/* ---- binary with broadcast ----------------------------------------------- */

template <int OP>
__device__ __forceinline__ float binary1(float x, float y)
{
    switch (OP) {
    case KB_ADD: return x + y;
    case KB_SUB: return x - y;
    case KB_MUL: return __fmul_rn(x, y);
    case KB_DIV: return x / y;
    case KB_MIN: return x < y ? x : y;
    case KB_MAX: return x > y ? x : y;
    case KB_GE: return x >= y ? 1.0f : 0.0f;
    default: return 0.0f;
    }
}

/* Both operands contiguous with the output's shape: a flat loop. */
template <int OP>
__global__ void binary_flat_kernel(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = binary1<OP>(a[i], b[i]);
}

template <int OP>
__global__ void binary_bcast_kernel(float *out, const float *a, const float *b, struct kbcast bc, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int64_t t = (int64_t)i;
        int64_t i3 = t % bc.n[3];
        t /= bc.n[3];
        int64_t i2 = t % bc.n[2];
        t /= bc.n[2];
        int64_t i1 = t % bc.n[1];
        int64_t i0 = t / bc.n[1];
        int64_t ia = i0 * bc.sa[0] + i1 * bc.sa[1] + i2 * bc.sa[2] + i3 * bc.sa[3];
        int64_t ib = i0 * bc.sb[0] + i1 * bc.sb[1] + i2 * bc.sb[2] + i3 * bc.sb[3];
        out[i] = binary1<OP>(a[ia], b[ib]);
    }
}

static bool is_dense(const int64_t n[4], const int64_t s[4])
{
    int64_t expect = 1;
    for (int k = 3; k >= 0; k--) {
        if (n[k] != 1 && s[k] != expect) return false;
        expect *= n[k];
    }
    return true;
}

template <int OP>
static void launch_binary(float *out, const float *a, const float *b, const struct kbcast *bc, size_t n)
{
    if (is_dense(bc->n, bc->sa) && is_dense(bc->n, bc->sb))
        binary_flat_kernel<OP><<<trib_cuda_blocks(n), TRIB_CUDA_BLOCK>>>(out, a, b, n);
    else
        binary_bcast_kernel<OP><<<trib_cuda_blocks(n), TRIB_CUDA_BLOCK>>>(out, a, b, *bc, n);
    CUDA_CHECK_LAUNCH();
}

void cuda_binary(enum kbinary op, float *out, const float *a, const float *b, const struct kbcast *bc)
{
    size_t n = (size_t)(bc->n[0] * bc->n[1] * bc->n[2] * bc->n[3]);
    if (!n) return;
    switch (op) {
    case KB_ADD: launch_binary<KB_ADD>(out, a, b, bc, n); return;
    case KB_SUB: launch_binary<KB_SUB>(out, a, b, bc, n); return;
    case KB_MUL: launch_binary<KB_MUL>(out, a, b, bc, n); return;
    case KB_DIV: launch_binary<KB_DIV>(out, a, b, bc, n); return;
    case KB_MIN: launch_binary<KB_MIN>(out, a, b, bc, n); return;
    case KB_MAX: launch_binary<KB_MAX>(out, a, b, bc, n); return;
    case KB_GE: launch_binary<KB_GE>(out, a, b, bc, n); return;
    case KB_COUNT: break;
    }
    fprintf(stderr, "%s:%d: bad binary op %d\n", __FILE__, __LINE__, (int)op);
    abort();
}

/* ---- sum_to --------------------------------------------------------------- */

struct dims4 {
    int64_t m[4], n[4];
};

/* One thread per output: it walks the inputs that fold into it in
 * increasing index order, so the float sum is bit-identical to the CPU's. */
__global__ void sum_to_kernel(float *out, const float *in, struct dims4 d, size_t mn)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < mn; j += (size_t)gridDim.x * blockDim.x) {
        int64_t t = (int64_t)j, jc[4];
        for (int k = 3; k >= 0; k--) {
            jc[k] = t % d.m[k];
            t /= d.m[k];
        }
        int64_t lo[4], hi[4];
        for (int k = 0; k < 4; k++) {
            bool summed = d.m[k] == 1;
            lo[k] = summed ? 0 : jc[k];
            hi[k] = summed ? d.n[k] : jc[k] + 1;
        }
        float acc = 0.0f;
        for (int64_t i0 = lo[0]; i0 < hi[0]; i0++)
            for (int64_t i1 = lo[1]; i1 < hi[1]; i1++)
                for (int64_t i2 = lo[2]; i2 < hi[2]; i2++) {
                    const float *p = in + ((i0 * d.n[1] + i1) * d.n[2] + i2) * d.n[3];
                    for (int64_t i3 = lo[3]; i3 < hi[3]; i3++) acc += p[i3];
                }
        out[j] = acc;
    }
}

void cuda_sum_to(float *out, const int64_t m[4], const float *in, const int64_t n[4])
{
    struct dims4 d;
    for (int k = 0; k < 4; k++) {
        d.m[k] = m[k];
        d.n[k] = n[k];
    }
    size_t mn = (size_t)(m[0] * m[1] * m[2] * m[3]);
    if (!mn) return;
    sum_to_kernel<<<trib_cuda_blocks(mn), TRIB_CUDA_BLOCK>>>(out, in, d, mn);
    CUDA_CHECK_LAUNCH();
}

/* ---- cast ------------------------------------------------------------------ */

__device__ __forceinline__ double load_as_double(const void *p, int dt, size_t i)
{
    switch (dt) {
    case DTYPE_F32: return ((const float *)p)[i];
    case DTYPE_F64: return ((const double *)p)[i];
    case DTYPE_I32: return ((const int32_t *)p)[i];
    case DTYPE_I64: return (double)((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

__global__ void cast_kernel(void *out, int out_dt, const void *in, int in_dt, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
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
        default: ((uint8_t *)out)[i] = (uint8_t)v; break;
        }
    }
}

void cuda_cast(void *out, enum dtype out_dt, const void *in, enum dtype in_dt, size_t n)
{
    static const size_t sz[DTYPE_COUNT] = {4, 8, 4, 8, 1};
    if ((unsigned)out_dt >= DTYPE_COUNT || (unsigned)in_dt >= DTYPE_COUNT) {
        fprintf(stderr, "%s:%d: bad dtype pair %d -> %d\n", __FILE__, __LINE__, (int)in_dt, (int)out_dt);
        abort();
    }
    if (!n) return;
    if (out_dt == in_dt) {
        CUDA_CHECK(cudaMemcpy(out, in, n * sz[in_dt], cudaMemcpyDeviceToDevice));
        return;
    }
    cast_kernel<<<trib_cuda_blocks(n), TRIB_CUDA_BLOCK>>>(out, (int)out_dt, in, (int)in_dt, n);
    CUDA_CHECK_LAUNCH();
}
