/* Tensor core and the CPU kernels: construction errors, device errors
 * without a GPU, the counter RNG, every backend kernel against a plain loop,
 * explicit broadcasting/reduction/split/cat cases and the exact messages of
 * shape, dtype and device mismatches. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/autograd.h"
#include "tensor/backend.h"
#include "tensor/nn.h"
#include "tensor/ops.h"
#include "kit.h"

/* The 256 TiB allocation below must fail as malloc does, not stop ASan or
 * TSan (each reads only its own hook; the other is an unused symbol). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }

static const struct tensor_backend *cpu;

static void setup(void) { cpu = tensor_cpu_backend(); }

static struct tensor *mk(int ndim, const int64_t *shape, const float *v) { return tensor_from_f32(ndim, shape, v); }

static void assert_values(const struct tensor *t, int ndim, const int64_t *shape, const float *want)
{
    ck_assert_int_eq(t->ndim, ndim);
    for (int k = 0; k < ndim; k++) ck_assert_int_eq(t->shape[k], shape[k]);
    for (int64_t i = 0; i < t->numel; i++)
        ck_assert_msg(fabsf(tensor_f32(t)[i] - want[i]) <= 1e-5f + 1e-5f * fabsf(want[i]), "[%lld] = %g, want %g",
                      (long long)i, tensor_f32(t)[i], want[i]);
}

/* ---- construction and devices ------------------------------------------------------ */

START_TEST(test_new_errors)
{
    ck_assert_ptr_null(tensor_new(DTYPE_F32, DEVICE_CPU, 5, (int64_t[]){1, 1, 1, 1, 1}));
    ck_assert_str_eq(tensor_last_error(), "tensor_new: ndim 5 is outside 0..4");
    ck_assert_ptr_null(tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){2, -1}));
    ck_assert_str_eq(tensor_last_error(), "tensor_new: negative dim -1 at 1");
    struct tensor *s = tensor_scalar_f32(2.5f);
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_int_eq(s->numel, 1);
    ck_assert_float_eq(tensor_f32(s)[0], 2.5f);
    tensor_free(s);
}
END_TEST

START_TEST(test_cuda_unavailable_messages)
{
    if (tensor_cuda_available()) {
        fprintf(stderr, "a CUDA device is present: the no-device messages cannot be tested\n");
        return;
    }
#ifdef TRIB_WITH_CUDA
    const char *why = "no cuda device is available";
#else
    const char *why = "the cuda backend is not built";
#endif
    char want[128];
    ck_assert_ptr_null(tensor_new(DTYPE_F32, DEVICE_CUDA, 1, (int64_t[]){3}));
    snprintf(want, sizeof want, "tensor_new: %s", why);
    ck_assert_str_eq(tensor_last_error(), want);
    struct tensor *x = mk(1, (int64_t[]){2}, (float[]){1, 2});
    ck_assert_ptr_null(tensor_to(x, DEVICE_CUDA));
    snprintf(want, sizeof want, "tensor_to: %s", why);
    ck_assert_str_eq(tensor_last_error(), want);
    tensor_free(x);
}
END_TEST

START_TEST(test_device_mismatch_message)
{
    /* No CUDA tensor can exist here: relabel a CPU one, since validation
     * reads only the device field before touching data. */
    struct tensor *a = mk(1, (int64_t[]){2}, (float[]){1, 2}), *b = mk(1, (int64_t[]){2}, (float[]){3, 4});
    b->device = DEVICE_CUDA;
    ck_assert_ptr_null(tensor_add(a, b));
    ck_assert_str_eq(tensor_last_error(), "tensor_add: device mismatch: cpu and cuda");
    ck_assert_ptr_null(tensor_matmul(b, a));
    ck_assert_str_eq(tensor_last_error(), "tensor_matmul: device mismatch: cuda and cpu");
    b->device = DEVICE_CPU;
    tensor_free(a);
    tensor_free(b);
}
END_TEST

START_TEST(test_cpu_alloc_cache)
{
    size_t sizes[] = {0, 1, 100, 40000, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        void *p = cpu->alloc(sizes[i]);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % 64, 0);
        memset(p, 0xab, sizes[i]);
        cpu->free(p);
    }
    /* a freed large block comes back for the same size, never while live */
    void *a = cpu->alloc(100000);
    cpu->free(a);
    void *b = cpu->alloc(100000), *c = cpu->alloc(100000);
    ck_assert_ptr_ne(b, c);
#if !defined(__SANITIZE_ADDRESS__)
    ck_assert(b == a || c == a);
#endif
    memset(b, 1, 100000);
    memset(c, 2, 100000);
    ck_assert_int_eq(((unsigned char *)b)[99999], 1);
    cpu->free(b);
    cpu->free(c);
    cpu->free(NULL);
}
END_TEST

/* ---- kernels ------------------------------------------------------------------------ */

START_TEST(test_rng_kernels)
{
    enum { N = 20000 };
    float *u = malloc(N * sizeof *u), *z = malloc(N * sizeof *z);
    cpu->rand_uniform(u, N, 77);
    cpu->rand_normal(z, N, 77);
    double su = 0, sz = 0, szz = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_float_eq(u[i], rng_uniform_at(77, (uint64_t)i));
        ck_assert(u[i] >= 0.0f && u[i] < 1.0f);
        float u1 = rng_uniform_at(77, 2 * (uint64_t)i), u2 = rng_uniform_at(77, 2 * (uint64_t)i + 1);
        ck_assert_float_eq(z[i], sqrtf(-2.0f * logf(1.0f - u1)) * cosf(6.28318530717958647692f * u2));
        su += u[i];
        sz += z[i];
        szz += (double)z[i] * z[i];
    }
    ck_assert_double_eq_tol(su / N, 0.5, 0.01);
    ck_assert_double_eq_tol(sz / N, 0.0, 0.03);
    ck_assert_double_eq_tol(szz / N, 1.0, 0.04);
    /* a different seed gives different numbers; the same seed the same */
    float v[4], w[4];
    cpu->rand_uniform(v, 4, 78);
    cpu->rand_uniform(w, 4, 78);
    ck_assert(memcmp(v, u, sizeof v) != 0);
    ck_assert(memcmp(v, w, sizeof v) == 0);
    free(u);
    free(z);
}
END_TEST

START_TEST(test_categorical_kernel)
{
    const float probs[] = {0.2f, 0.3f, 0.5f, /* row 2 unnormalised */ 2.0f, 0.0f, 2.0f};
    const float u[] = {0.0f, 0.19f, 0.2f, 0.49f, 0.51f, 0.999f};
    const int64_t want0[] = {0, 0, 1, 1, 2, 2};
    for (int i = 0; i < 6; i++) {
        int64_t out;
        cpu->categorical(&out, probs, &u[i], 1, 3);
        ck_assert_int_eq(out, want0[i]);
    }
    int64_t out[2];
    cpu->categorical(out, probs, (float[]){0.6f, 0.6f}, 2, 3);
    ck_assert_int_eq(out[0], 2);
    ck_assert_int_eq(out[1], 2);   /* cumsum 2, 2, 4 > 2.4 only at j = 2 */
}
END_TEST

START_TEST(test_sum_to_and_binary_kernels)
{
    /* in [2,3,4] summed to [2,1,4] and to [1,3,1] against loops */
    float in[24];
    for (int i = 0; i < 24; i++) in[i] = (float)(i * 3 % 7) - 2.5f;
    float a[8], b[3];
    cpu->sum_to(a, (int64_t[]){1, 2, 1, 4}, in, (int64_t[]){1, 2, 3, 4});
    cpu->sum_to(b, (int64_t[]){1, 1, 3, 1}, in, (int64_t[]){1, 2, 3, 4});
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) {
            float s = 0;
            for (int j = 0; j < 3; j++) s += in[(i * 3 + j) * 4 + k];
            ck_assert_float_eq(a[i * 4 + k], s);
        }
    for (int j = 0; j < 3; j++) {
        float s = 0;
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 4; k++) s += in[(i * 3 + j) * 4 + k];
        ck_assert_float_eq(b[j], s);
    }
    /* binary broadcast: [2,1,4] op [3,1] -> [2,3,4] */
    float out[24];
    struct kbcast bc = {{1, 2, 3, 4}, {0, 4, 0, 1}, {0, 0, 1, 0}};
    const float bb[3] = {1, 2, 4};
    cpu->binary(KB_DIV, out, a, bb, &bc);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) ck_assert_float_eq(out[(i * 3 + j) * 4 + k], a[i * 4 + k] / bb[j]);
    cpu->binary(KB_GE, out, a, bb, &bc);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) ck_assert_float_eq(out[(i * 3 + j) * 4 + k], a[i * 4 + k] >= bb[j] ? 1.0f : 0.0f);
}
END_TEST

START_TEST(test_unary_kernels)
{
    const float x[] = {-2.0f, -0.5f, 0.0f, 0.3f, 1.5f};
    float y[5];
    cpu->unary(KU_CLAMP, y, x, 5, -1.0f, 1.0f);
    const float clamp[] = {-1, -0.5f, 0, 0.3f, 1};
    for (int i = 0; i < 5; i++) ck_assert_float_eq(y[i], clamp[i]);
    cpu->unary(KU_INSIDE, y, x, 5, -0.5f, 0.3f);
    const float inside[] = {0, 1, 1, 1, 0};
    for (int i = 0; i < 5; i++) ck_assert_float_eq(y[i], inside[i]);
    const float u[] = {0.1f, 0.3f, 0.5f, 0.29f, 0.99f};
    cpu->unary(KU_KEEP, y, u, 5, 0.3f, 0);
    const float keep[] = {0, 1 / 0.7f, 1 / 0.7f, 0, 1 / 0.7f};
    for (int i = 0; i < 5; i++) ck_assert_float_eq(y[i], keep[i]);
    cpu->unary(KU_STEP, y, x, 5, 0, 0);
    const float step[] = {0, 0, 0, 1, 1};
    for (int i = 0; i < 5; i++) ck_assert_float_eq(y[i], step[i]);
    cpu->unary(KU_RECIP, y, x + 3, 2, 0, 0);
    ck_assert_float_eq(y[0], 1.0f / 0.3f);
    ck_assert_float_eq(y[1], 1.0f / 1.5f);
}
END_TEST

START_TEST(test_cast_and_copy_kernels)
{
    const float f[] = {1.5f, -2.0f, 3.0f};
    double d[3];
    int32_t i32[3];
    int64_t i64[3];
    uint8_t u8[3];
    cpu->cast(d, DTYPE_F64, f, DTYPE_F32, 3);
    cpu->cast(i32, DTYPE_I32, f, DTYPE_F32, 3);
    cpu->cast(i64, DTYPE_I64, i32, DTYPE_I32, 3);
    cpu->cast(u8, DTYPE_U8, (float[]){0, 7, 255}, DTYPE_F32, 3);
    ck_assert_double_eq(d[0], 1.5);
    ck_assert_int_eq(i32[0], 1);
    ck_assert_int_eq(i32[1], -2);
    ck_assert_int_eq(i64[2], 3);
    ck_assert_int_eq(u8[2], 255);
    float back[3];
    cpu->cast(back, DTYPE_F32, i64, DTYPE_I64, 3);
    ck_assert_float_eq(back[1], -2.0f);
    /* copy2d: the middle 2 columns of a 3x4 block */
    float src[12], dst[6];
    for (int i = 0; i < 12; i++) src[i] = (float)i;
    cpu->copy2d(dst, 2 * sizeof(float), src + 1, 4 * sizeof(float), 2 * sizeof(float), 3);
    const float want[] = {1, 2, 5, 6, 9, 10};
    for (int i = 0; i < 6; i++) ck_assert_float_eq(dst[i], want[i]);
}
END_TEST

START_TEST(test_softmax_kernels_stable)
{
    const float x[] = {1000.0f, 1001.0f, 999.0f, -5.0f, 0.0f, 5.0f};
    float y[6], ly[6];
    cpu->softmax(y, x, 2, 3);
    cpu->log_softmax(ly, x, 2, 3);
    for (int r = 0; r < 2; r++) {
        double m = fmax(fmax(x[3 * r], x[3 * r + 1]), x[3 * r + 2]), s = 0;
        for (int j = 0; j < 3; j++) s += exp(x[3 * r + j] - m);
        for (int j = 0; j < 3; j++) {
            double want = exp(x[3 * r + j] - m) / s;
            ck_assert_double_eq_tol(y[3 * r + j], want, 1e-6);
            ck_assert_double_eq_tol(ly[3 * r + j], x[3 * r + j] - m - log(s), 1e-4);
        }
    }
    /* gather_backward adds repeated indices */
    float gx[3];
    cpu->gather_backward(gx, (float[]){1, 2, 4}, (int64_t[]){2, 0, 2}, 1, 3, 3);
    ck_assert_float_eq(gx[0], 2);
    ck_assert_float_eq(gx[1], 0);
    ck_assert_float_eq(gx[2], 5);
}
END_TEST

START_TEST(test_sgemm_transposes)
{
    /* A 2x3, B 3x2 against loops, all four transpose combinations */
    const float A[] = {1, 2, 3, 4, 5, 6}, B[] = {7, 8, 9, 10, 11, 12};
    float AT[6], BT[6], C[4], want[4];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++) AT[k * 2 + i] = A[i * 3 + k];
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 2; j++) BT[j * 3 + k] = B[k * 2 + j];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            want[i * 2 + j] = 0;
            for (int k = 0; k < 3; k++) want[i * 2 + j] += A[i * 3 + k] * B[k * 2 + j];
        }
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            for (int i = 0; i < 4; i++) C[i] = 1.0f;
            cpu->sgemm(ta, tb, 2, 2, 3, 2.0f, ta ? AT : A, ta ? 2 : 3, tb ? BT : B, tb ? 3 : 2, 0.5f, C, 2);
            for (int i = 0; i < 4; i++) ck_assert_float_eq(C[i], 2.0f * want[i] + 0.5f);
        }
}
END_TEST

/* ---- op forward cases and messages ------------------------------------------------------ */

START_TEST(test_broadcast_cases)
{
    struct tensor *a = mk(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *row = mk(1, (int64_t[]){3}, (float[]){10, 20, 30});
    struct tensor *col = mk(2, (int64_t[]){2, 1}, (float[]){100, 200});
    struct tensor *s = tensor_scalar_f32(0.5f);
    struct tensor *r1 = tensor_add(a, row), *r2 = tensor_mul(col, row), *r3 = tensor_sub(s, a), *r4 = tensor_maximum(col, a);
    assert_values(r1, 2, (int64_t[]){2, 3}, (float[]){11, 22, 33, 14, 25, 36});
    assert_values(r2, 2, (int64_t[]){2, 3}, (float[]){1000, 2000, 3000, 2000, 4000, 6000});
    assert_values(r3, 2, (int64_t[]){2, 3}, (float[]){-0.5f, -1.5f, -2.5f, -3.5f, -4.5f, -5.5f});
    assert_values(r4, 2, (int64_t[]){2, 3}, (float[]){100, 100, 100, 200, 200, 200});
    struct tensor *all[] = {a, row, col, s, r1, r2, r3, r4};
    for (int i = 0; i < 8; i++) tensor_free(all[i]);
}
END_TEST

START_TEST(test_reduction_cases)
{
    struct tensor *x = mk(3, (int64_t[]){2, 2, 3}, (float[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    struct tensor *s0 = tensor_sum_dim(x, 0, false), *s1 = tensor_sum_dim(x, 1, true), *m2 = tensor_mean_dim(x, -1, false);
    struct tensor *sum = tensor_sum(x), *mean = tensor_mean(x);
    assert_values(s0, 2, (int64_t[]){2, 3}, (float[]){8, 10, 12, 14, 16, 18});
    assert_values(s1, 3, (int64_t[]){2, 1, 3}, (float[]){5, 7, 9, 17, 19, 21});
    assert_values(m2, 2, (int64_t[]){2, 2}, (float[]){2, 5, 8, 11});
    assert_values(sum, 0, NULL, (float[]){78});
    assert_values(mean, 0, NULL, (float[]){6.5f});
    ck_assert_ptr_null(tensor_sum_dim(x, 3, false));
    ck_assert_str_eq(tensor_last_error(), "tensor_sum_dim: dim 3 is out of range for [2,2,3]");
    struct tensor *all[] = {x, s0, s1, m2, sum, mean};
    for (int i = 0; i < 6; i++) tensor_free(all[i]);
}
END_TEST

START_TEST(test_split_cat_cases)
{
    struct tensor *x = mk(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *p[2];
    ck_assert_int_eq(tensor_split(x, 1, 2, (int64_t[]){1, 2}, p), 0);
    assert_values(p[0], 2, (int64_t[]){2, 1}, (float[]){1, 4});
    assert_values(p[1], 2, (int64_t[]){2, 2}, (float[]){2, 3, 5, 6});
    struct tensor *back = tensor_cat(2, p, -1);
    assert_values(back, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *rows = tensor_cat(2, (struct tensor *[]){x, x}, 0);
    assert_values(rows, 2, (int64_t[]){4, 3}, (float[]){1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
    struct tensor *sl = tensor_slice(rows, 1, 3);
    assert_values(sl, 2, (int64_t[]){2, 3}, (float[]){4, 5, 6, 1, 2, 3});
    ck_assert_int_eq(tensor_split(x, 1, 2, (int64_t[]){1, 1}, p), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_split: sizes sum to 2 but dim 1 of [2,3] is 3");
    ck_assert_ptr_null(tensor_cat(2, (struct tensor *[]){x, p[1]}, 0));
    ck_assert_str_eq(tensor_last_error(), "tensor_cat: shape mismatch: [2,3] and [2,2]");
    ck_assert_ptr_null(tensor_slice(x, 1, 3));
    ck_assert_str_eq(tensor_last_error(), "tensor_slice: range [1,3) is out of bounds for dim 0 of size 2");
    struct tensor *all[] = {x, p[0], p[1], back, rows, sl};
    for (int i = 0; i < 6; i++) tensor_free(all[i]);
}
END_TEST

/* A tensor of dtype dt and this shape whose bytes are all distinct in a
 * window of 251 (so a row taken from the wrong offset shows). */
static struct tensor *patterned(enum dtype dt, int ndim, const int64_t *shape)
{
    struct tensor *t = tensor_new(dt, DEVICE_CPU, ndim, shape);
    ck_assert_ptr_nonnull(t);
    unsigned char *b = tensor_data(t);
    for (size_t i = 0; i < tensor_nbytes(t); i++) b[i] = (unsigned char)(i % 251 + 1);
    return t;
}

/* tensor_slice of every dtype is a copy of rows [start,end) of dim 0 in
 * x's dtype (before: NULL with "unsupported dtype" for all but f32), and
 * its result works in the ops that take any dtype. */
START_TEST(test_slice_every_dtype)
{
    const int nds[3] = {1, 2, 3};
    const int64_t shapes[3][TENSOR_MAX_DIMS] = {{5}, {4, 3}, {3, 2, 2}};
    for (int dt = 0; dt < DTYPE_COUNT; dt++)
        for (int s = 0; s < 3; s++) {
            struct tensor *x = patterned((enum dtype)dt, nds[s], shapes[s]);
            size_t row = tensor_nbytes(x) / (size_t)x->shape[0];
            struct tensor *y = tensor_slice(x, 1, 3);
            ck_assert_msg(y != NULL, "%s %d-D: %s", dtype_name(dt), nds[s], tensor_last_error());
            ck_assert_int_eq(y->dtype, dt);
            ck_assert_int_eq(y->device, DEVICE_CPU);
            ck_assert_int_eq(y->ndim, x->ndim);
            ck_assert_int_eq(y->shape[0], 2);
            for (int k = 1; k < x->ndim; k++) ck_assert_int_eq(y->shape[k], x->shape[k]);
            ck_assert_int_eq(y->numel, x->numel / x->shape[0] * 2);
            ck_assert_int_eq(tensor_nbytes(y), 2 * row);
            ck_assert_msg(memcmp(tensor_data(y), (char *)tensor_data(x) + row, 2 * row) == 0, "%s %d-D: wrong rows",
                          dtype_name(dt), nds[s]);
            /* a copy: writing x afterwards leaves the slice as it was */
            memset(tensor_mutable_data(x), 0, tensor_nbytes(x));
            ck_assert_int_eq(((unsigned char *)tensor_data(y))[0], row % 251 + 1);
            /* the ops that take any dtype */
            struct tensor *flat = tensor_reshape(y, 1, (int64_t[]){y->numel});
            ck_assert_ptr_nonnull(flat);
            ck_assert_int_eq(flat->dtype, dt);
            ck_assert_int_eq(memcmp(tensor_data(flat), tensor_data(y), tensor_nbytes(y)), 0);
            struct tensor *d = tensor_detach(y), *same = tensor_to(y, DEVICE_CPU);
            ck_assert_int_eq(d->dtype, dt);
            ck_assert_int_eq(memcmp(tensor_data(d), tensor_data(y), tensor_nbytes(y)), 0);
            ck_assert_ptr_eq(same, y);
            struct tensor *empty = tensor_slice(x, 2, 2);
            ck_assert_ptr_nonnull(empty);
            ck_assert_int_eq(empty->dtype, dt);
            ck_assert_int_eq(empty->shape[0], 0);
            ck_assert_int_eq(empty->numel, 0);
            ck_assert_ptr_null(tensor_slice(x, 2, 6));
            char want[96];
            snprintf(want, sizeof want, "tensor_slice: range [2,6) is out of bounds for dim 0 of size %lld",
                     (long long)x->shape[0]);
            ck_assert_str_eq(tensor_last_error(), want);
            struct tensor *all[] = {x, y, flat, d, same, empty};
            for (int k = 0; k < 6; k++) tensor_free(all[k]);
        }
    struct tensor *sc = tensor_new(DTYPE_I64, DEVICE_CPU, 0, NULL);
    ck_assert_ptr_null(tensor_slice(sc, 0, 1));
    ck_assert_str_eq(tensor_last_error(), "tensor_slice: cannot slice a scalar");
    tensor_free(sc);
}
END_TEST

/* The slow obvious reference for split and cat: element by element, each
 * element's coordinates worked out from its linear index; element `e` of a
 * piece of shape `pshape` is element (coordinates, with off added to dim d)
 * of the whole tensor of shape `wshape`. Copies esize bytes each way. */
static void ref_piece(unsigned char *whole, unsigned char *piece, size_t esize, int ndim, const int64_t *wshape,
                      const int64_t *pshape, int d, int64_t off, bool to_piece)
{
    int64_t pn = 1;
    for (int k = 0; k < ndim; k++) pn *= pshape[k];
    for (int64_t e = 0; e < pn; e++) {
        int64_t c[TENSOR_MAX_DIMS], rest = e;
        for (int k = ndim - 1; k >= 0; k--) {
            c[k] = rest % pshape[k];
            rest /= pshape[k];
        }
        c[d] += off;
        int64_t w = 0;
        for (int k = 0; k < ndim; k++) w = w * wshape[k] + c[k];
        if (to_piece) memcpy(piece + (size_t)e * esize, whole + (size_t)w * esize, esize);
        else memcpy(whole + (size_t)w * esize, piece + (size_t)e * esize, esize);
    }
}

/* split and cat of every dtype (before: f32 only, "unsupported dtype" for
 * the rest) along every dim of 1-D..4-D shapes, an empty piece among them:
 * each piece equals the element-by-element reference bit for bit, cat of
 * the pieces gives x back bit for bit, and cat of the pieces in reverse
 * order equals the reference cat. A non-f32 input marked requires_grad
 * records no node; f32 records SplitBackward / CatBackward. With a GPU the
 * same round trip runs on CUDA (the backend's byte copy) against the CPU. */
START_TEST(test_split_cat_every_dtype)
{
    const int nds[4] = {1, 2, 3, 4};
    const int64_t shapes[4][TENSOR_MAX_DIMS] = {{7}, {4, 5}, {3, 4, 2}, {2, 3, 2, 3}};
    const bool cuda = tensor_cuda_available();
    for (int dt = 0; dt < DTYPE_COUNT; dt++)
        for (int s = 0; s < 4; s++)
            for (int d = 0; d < nds[s]; d++) {
                struct tensor *x = patterned((enum dtype)dt, nds[s], shapes[s]);
                tensor_set_requires_grad(x, true);
                size_t es = dtype_size((enum dtype)dt);
                int64_t len = x->shape[d];
                /* three pieces, the middle one empty */
                int64_t sizes[3] = {len / 2, 0, len - len / 2};
                struct tensor *p[3] = {NULL, NULL, NULL};
                ck_assert_msg(tensor_split(x, d, 3, sizes, p) == 0, "%s %d-D dim %d: %s", dtype_name(dt), nds[s], d,
                              tensor_last_error());
                int64_t off = 0;
                for (int i = 0; i < 3; i++) {
                    int64_t ps[TENSOR_MAX_DIMS];
                    memcpy(ps, x->shape, sizeof ps);
                    ps[d] = sizes[i];
                    ck_assert_int_eq(p[i]->dtype, dt);
                    ck_assert_int_eq(p[i]->ndim, x->ndim);
                    for (int k = 0; k < x->ndim; k++) ck_assert_int_eq(p[i]->shape[k], ps[k]);
                    size_t nb = tensor_nbytes(p[i]);
                    unsigned char *want = malloc(nb + 1);
                    ref_piece((unsigned char *)tensor_data(x), want, es, x->ndim, x->shape, ps, d, off, true);
                    ck_assert_msg(memcmp(tensor_data(p[i]), want, nb) == 0, "%s %d-D dim %d piece %d differs",
                                  dtype_name(dt), nds[s], d, i);
                    free(want);
                    if (dt == DTYPE_F32) {
                        ck_assert_ptr_nonnull(p[i]->grad_fn);
                        ck_assert_str_eq(p[i]->grad_fn->name, "SplitBackward");
                    } else {
                        ck_assert(!p[i]->requires_grad);
                        ck_assert_ptr_null(p[i]->grad_fn);
                    }
                    tensor_set_requires_grad(p[i], true);   /* cat of non-f32 still records nothing */
                    off += sizes[i];
                }
                struct tensor *back = tensor_cat(3, p, d - nds[s]);   /* the same dim, counted from the end */
                ck_assert_msg(back != NULL, "%s: %s", dtype_name(dt), tensor_last_error());
                ck_assert_int_eq(back->dtype, dt);
                ck_assert_int_eq(back->ndim, x->ndim);
                for (int k = 0; k < x->ndim; k++) ck_assert_int_eq(back->shape[k], x->shape[k]);
                ck_assert_int_eq(tensor_nbytes(back), tensor_nbytes(x));
                ck_assert_msg(memcmp(tensor_data(back), tensor_data(x), tensor_nbytes(x)) == 0,
                              "%s %d-D dim %d: split->cat is not x", dtype_name(dt), nds[s], d);
                struct tensor *rev = tensor_cat(3, (struct tensor *[]){p[2], p[1], p[0]}, d);
                ck_assert_ptr_nonnull(rev);
                unsigned char *want = malloc(tensor_nbytes(x) + 1);
                off = 0;
                for (int i = 2; i >= 0; i--) {
                    ref_piece(want, (unsigned char *)tensor_data(p[i]), es, x->ndim, x->shape, p[i]->shape, d, off,
                              false);
                    off += sizes[i];
                }
                ck_assert_msg(memcmp(tensor_data(rev), want, tensor_nbytes(x)) == 0, "%s %d-D dim %d: reversed cat differs",
                              dtype_name(dt), nds[s], d);
                free(want);
                if (dt == DTYPE_F32) {
                    ck_assert_str_eq(back->grad_fn->name, "CatBackward");
                } else {
                    ck_assert(!back->requires_grad && !rev->requires_grad);
                    ck_assert_ptr_null(back->grad_fn);
                    ck_assert_ptr_null(rev->grad_fn);
                }
                if (cuda) {
                    struct tensor *gx = tensor_to(x, DEVICE_CUDA), *gp[3] = {NULL, NULL, NULL};
                    ck_assert_ptr_nonnull(gx);
                    ck_assert_int_eq(tensor_split(gx, d, 3, sizes, gp), 0);
                    struct tensor *grev = tensor_cat(3, (struct tensor *[]){gp[2], gp[1], gp[0]}, d);
                    ck_assert_ptr_nonnull(grev);
                    struct tensor *hp1 = tensor_to(gp[2], DEVICE_CPU), *hrev = tensor_to(grev, DEVICE_CPU);
                    ck_assert_int_eq(hp1->dtype, dt);
                    ck_assert_int_eq(memcmp(tensor_data(hp1), tensor_data(p[2]), tensor_nbytes(p[2])), 0);
                    ck_assert_int_eq(memcmp(tensor_data(hrev), tensor_data(rev), tensor_nbytes(rev)), 0);
                    struct tensor *gall[] = {gx, gp[0], gp[1], gp[2], grev, hp1, hrev};
                    for (int k = 0; k < 7; k++) tensor_free(gall[k]);
                }
                struct tensor *all[] = {x, p[0], p[1], p[2], back, rev};
                for (int k = 0; k < 6; k++) tensor_free(all[k]);
            }
    /* one dtype per cat: the first input that differs from xs[0] is named */
    struct tensor *f = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){2, 3});
    struct tensor *l = tensor_new(DTYPE_I64, DEVICE_CPU, 2, (int64_t[]){2, 3});
    struct tensor *u = tensor_new(DTYPE_U8, DEVICE_CPU, 2, (int64_t[]){2, 3});
    ck_assert_ptr_null(tensor_cat(4, (struct tensor *[]){f, f, l, u}, 0));
    ck_assert_str_eq(tensor_last_error(), "tensor_cat: dtype mismatch: input 0 is f32 but input 2 is i64");
    ck_assert_ptr_null(tensor_cat(2, (struct tensor *[]){u, f}, 1));
    ck_assert_str_eq(tensor_last_error(), "tensor_cat: dtype mismatch: input 0 is u8 but input 1 is f32");
    tensor_free(f);
    tensor_free(l);
    tensor_free(u);
}
END_TEST

/* Autograd of slice: f32 still records SliceBackward (the gradient lands in
 * the sliced rows); another dtype records nothing, even from a tensor
 * marked requires_grad. */
START_TEST(test_slice_autograd_by_dtype)
{
    struct tensor *x = mk(2, (int64_t[]){3, 2}, (float[]){1, 2, 3, 4, 5, 6});
    tensor_set_requires_grad(x, true);
    struct tensor *y = tensor_slice(x, 1, 2);
    ck_assert_ptr_nonnull(y);
    ck_assert(y->requires_grad);
    ck_assert_ptr_nonnull(y->grad_fn);
    ck_assert_str_eq(y->grad_fn->name, "SliceBackward");
    struct tensor *loss = tensor_sum(y);
    ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
    assert_values(x->grad, 2, (int64_t[]){3, 2}, (float[]){0, 0, 1, 1, 0, 0});
    struct tensor *l = tensor_from_data(DTYPE_I64, 1, (int64_t[]){3}, (int64_t[]){7, 8, 9});
    tensor_set_requires_grad(l, true);
    struct tensor *ls = tensor_slice(l, 1, 3);
    ck_assert_ptr_nonnull(ls);
    ck_assert(!ls->requires_grad);
    ck_assert_ptr_null(ls->grad_fn);
    ck_assert_int_eq(((int64_t *)tensor_data(ls))[0], 8);
    ck_assert_int_eq(((int64_t *)tensor_data(ls))[1], 9);
    struct tensor *all[] = {x, y, loss, l, ls};
    for (int k = 0; k < 5; k++) tensor_free(all[k]);
}
END_TEST

/* Sliced int64 tensors go straight into the ops that take int64 inputs, as
 * a training loop slicing a batch of labels does (before: the slice was
 * NULL and each of these ops crashed on it). */
START_TEST(test_slice_i64_feeds_index_ops)
{
    struct tensor *logits = mk(2, (int64_t[]){2, 3}, (float[]){0.5f, -1, 2, 1, 0, -0.5f});
    struct tensor *labels = tensor_from_data(DTYPE_I64, 1, (int64_t[]){4}, (int64_t[]){0, 1, 2, 0});
    struct tensor *want_t = tensor_from_data(DTYPE_I64, 1, (int64_t[]){2}, (int64_t[]){2, 0});
    struct tensor *tgt = tensor_slice(labels, 2, 4);   /* no check: straight into the op */
    struct tensor *ce = tensor_cross_entropy(logits, tgt);
    struct tensor *ce_ref = tensor_cross_entropy(logits, want_t);
    ck_assert_msg(ce != NULL, "%s", tensor_last_error());
    ck_assert_ptr_nonnull(ce_ref);
    ck_assert_float_eq(tensor_f32(ce)[0], tensor_f32(ce_ref)[0]);

    struct tensor *idx = tensor_from_data(DTYPE_I64, 2, (int64_t[]){3, 1}, (int64_t[]){1, 2, 0});
    struct tensor *is = tensor_slice(idx, 1, 3);
    struct tensor *g = tensor_gather(logits, is);
    ck_assert_msg(g != NULL, "%s", tensor_last_error());
    assert_values(g, 2, (int64_t[]){2, 1}, (float[]){2, 1});

    struct tensor *w = mk(2, (int64_t[]){3, 2}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *ind = tensor_from_data(DTYPE_I64, 1, (int64_t[]){5}, (int64_t[]){9, 0, 2, 1, 9});
    struct tensor *off = tensor_from_data(DTYPE_I64, 1, (int64_t[]){3}, (int64_t[]){5, 0, 1});
    struct tensor *inds = tensor_slice(ind, 1, 4), *offs = tensor_slice(off, 1, 3);
    struct tensor *e = tensor_embedding_bag(w, inds, offs, TENSOR_BAG_SUM);
    ck_assert_msg(e != NULL, "%s", tensor_last_error());
    assert_values(e, 2, (int64_t[]){2, 2}, (float[]){1, 2, 8, 10});
    struct tensor *all[] = {logits, labels, want_t, tgt, ce, ce_ref, idx, is, g, w, ind, off, inds, offs, e};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) tensor_free(all[k]);
}
END_TEST

/* Asserts that call returns NULL with the thread's error set to msg. */
#define NULL_CASE(call, msg)                                   \
    do {                                                       \
        tensor_clear_error();                                  \
        ck_assert_ptr_null(call);                              \
        ck_assert_str_eq(tensor_last_error(), msg);            \
    } while (0)

/* A NULL input (the result of a failed op passed on unchecked) is an error
 * naming the op at every public op, not a crash (before: each of these
 * dereferenced it). */
START_TEST(test_ops_null_inputs)
{
    struct tensor *a = mk(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *idx = tensor_from_data(DTYPE_I64, 1, (int64_t[]){2}, (int64_t[]){0, 1});
    struct tensor *N = NULL, *p[2] = {NULL, NULL};
    uint64_t rng = 1;
    NULL_CASE(tensor_matmul(N, a), "tensor_matmul: input is NULL");
    NULL_CASE(tensor_matmul(a, N), "tensor_matmul: input is NULL");
    NULL_CASE(tensor_linear(a, N, NULL), "tensor_linear: input is NULL");
    NULL_CASE(tensor_add(a, N), "tensor_add: input is NULL");
    NULL_CASE(tensor_maximum(N, a), "tensor_maximum: input is NULL");
    NULL_CASE(tensor_mul_scalar(N, 2), "tensor_mul_scalar: input is NULL");
    NULL_CASE(tensor_relu(N), "tensor_relu: input is NULL");
    NULL_CASE(tensor_clamp(N, 0, 1), "tensor_clamp: input is NULL");
    NULL_CASE(tensor_softmax(N), "tensor_softmax: input is NULL");
    NULL_CASE(tensor_gather(N, idx), "tensor_gather: input is NULL");
    NULL_CASE(tensor_gather(a, N), "tensor_gather: index is NULL");
    NULL_CASE(tensor_sum(N), "tensor_sum: input is NULL");
    NULL_CASE(tensor_mean_dim(N, 0, false), "tensor_mean_dim: input is NULL");
    NULL_CASE(tensor_reshape(N, 1, (int64_t[]){6}), "tensor_reshape: input is NULL");
    NULL_CASE(tensor_slice(N, 0, 1), "tensor_slice: input is NULL");
    ck_assert_int_eq(tensor_split(N, 0, 2, (int64_t[]){1, 1}, p), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_split: input is NULL");
    ck_assert_int_eq(tensor_split(a, 0, 2, NULL, p), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_split: sizes is NULL");
    ck_assert_int_eq(tensor_split(a, 0, 2, (int64_t[]){1, 1}, NULL), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_split: out is NULL");
    NULL_CASE(tensor_cat(2, (struct tensor *[]){a, N}, 0), "tensor_cat: input is NULL");
    NULL_CASE(tensor_cat(2, NULL, 0), "tensor_cat: input is NULL");
    NULL_CASE(tensor_dropout(N, 0.5f, true, &rng), "tensor_dropout: input is NULL");
    NULL_CASE(tensor_mse(a, N), "tensor_mse: input is NULL");
    NULL_CASE(tensor_cross_entropy(N, idx), "tensor_cross_entropy: input is NULL");
    NULL_CASE(tensor_cross_entropy(a, N), "tensor_cross_entropy: target is NULL");
    NULL_CASE(tensor_embedding_bag(a, N, idx, TENSOR_BAG_SUM), "tensor_embedding_bag: indices is NULL");
    NULL_CASE(tensor_embedding_bag(a, idx, N, TENSOR_BAG_SUM), "tensor_embedding_bag: offsets is NULL");
    NULL_CASE(tensor_to(N, DEVICE_CPU), "tensor_to: input is NULL");
    NULL_CASE(tensor_detach(N), "tensor_detach: input is NULL");
    NULL_CASE(tensor_categorical_sample(N, &rng), "tensor_categorical_sample: input is NULL");
    NULL_CASE(tensor_gaussian_sample(a, N, &rng), "tensor_gaussian_sample: input is NULL");
    NULL_CASE(tensor_gaussian_log_prob(a, a, N), "tensor_gaussian_log_prob: input is NULL");
    NULL_CASE(tensor_gaussian_entropy(N), "tensor_gaussian_entropy: input is NULL");
    ck_assert_ptr_null(p[0]);
    tensor_free(a);
    tensor_free(idx);
}
END_TEST

/* A NULL pointer given to the public functions of tensor.h and nn.h is an
 * error naming the function and the argument, never a crash (before: each
 * of these dereferenced it); the void ones do nothing and set the error. */
START_TEST(test_core_nn_null_inputs)
{
    struct tensor *a = mk(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *N = NULL;
    uint64_t rng = 7;
    char buf[16];
    float host[6] = {0};
    struct tensor_write w = {NULL};
#define VOID_CASE(call, msg)                                   \
    do {                                                       \
        tensor_clear_error();                                  \
        call;                                                  \
        ck_assert_str_eq(tensor_last_error(), msg);            \
    } while (0)
    /* tensor.h */
    const char *volatile no_fmt = NULL;
    NULL_CASE(tensor_error(no_fmt), "tensor_error: fmt is NULL");
    NULL_CASE(shape_str(2, a->shape, NULL, 8), "shape_str: buf is NULL");
    NULL_CASE(shape_str(2, NULL, buf, sizeof buf), "shape_str: shape is NULL");
    ck_assert_str_eq(shape_str(0, NULL, buf, sizeof buf), "[]");
    NULL_CASE(tensor_new(DTYPE_F32, DEVICE_CPU, 2, NULL), "tensor_new: shape is NULL");
    NULL_CASE(tensor_from_data(DTYPE_I64, 1, NULL, host), "tensor_from_data: shape is NULL");
    NULL_CASE(tensor_from_data(DTYPE_I64, 1, (int64_t[]){2}, NULL), "tensor_from_data: data is NULL");
    NULL_CASE(tensor_from_f32(2, (int64_t[]){2, 3}, NULL), "tensor_from_f32: data is NULL");
    NULL_CASE(tensor_snapshot(N), "tensor_snapshot: input is NULL");
    NULL_CASE(tensor_mutable_data(N), "tensor_mutable_data: input is NULL");
    NULL_CASE(tensor_write_begin(a, NULL), "tensor_write_begin: w is NULL");
    w.storage = (struct tensor_storage *)&w;   /* a stale value: begin clears it */
    NULL_CASE(tensor_write_begin(N, &w), "tensor_write_begin: input is NULL");
    ck_assert_ptr_null(w.storage);
    VOID_CASE(tensor_write_end(a, &w), "tensor_write_end: no write begun on w");
    VOID_CASE(tensor_write_end(a, NULL), "tensor_write_end: w is NULL");
    float *staged = tensor_write_begin(a, &w);
    ck_assert_ptr_nonnull(staged);
    staged[0] = 99;
    VOID_CASE(tensor_write_end(N, &w), "tensor_write_end: input is NULL");   /* the copy is dropped (ASan: no leak) */
    ck_assert_ptr_null(w.storage);
    tensor_clear_error();
    ck_assert_int_eq(tensor_write_from_host(N, host, 0), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_write_from_host: input is NULL");
    ck_assert_int_eq(tensor_write_from_host(a, NULL, 6 * sizeof(float)), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_write_from_host: src is NULL");
    NULL_CASE(tensor_data(N), "tensor_data: input is NULL");
    NULL_CASE(tensor_f32(N), "tensor_f32: input is NULL");
    tensor_clear_error();
    ck_assert_uint_eq(tensor_nbytes(N), 0);
    ck_assert_str_eq(tensor_last_error(), "tensor_nbytes: input is NULL");
    VOID_CASE(tensor_copy_to_host(N, host), "tensor_copy_to_host: input is NULL");
    VOID_CASE(tensor_copy_to_host(a, NULL), "tensor_copy_to_host: dst is NULL");
    NULL_CASE(tensor_clone_to(N, DEVICE_CPU), "tensor_clone_to: input is NULL");
    tensor_clear_error();
    ck_assert(!tensor_same_shape(a, N));
    ck_assert_str_eq(tensor_last_error(), "tensor_same_shape: input is NULL");
    VOID_CASE(tensor_set_requires_grad(N, true), "tensor_set_requires_grad: input is NULL");
    VOID_CASE(tensor_zero_grad(N), "tensor_zero_grad: input is NULL");
    /* accepted silently, as before */
    VOID_CASE(tensor_free(N), "");
    NULL_CASE(tensor_retain(N), "");
    /* none of the above touched a */
    assert_values(a, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    ck_assert(!a->requires_grad);
    /* valid inputs the checks must let through: a scalar's NULL shape, an empty tensor's NULL data */
    struct tensor *sc = tensor_new(DTYPE_F64, DEVICE_CPU, 0, NULL);
    struct tensor *e = tensor_from_data(DTYPE_I32, 1, (int64_t[]){0}, NULL);
    ck_assert_ptr_nonnull(sc);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(tensor_write_from_host(e, NULL, 0), 0);
    /* nn.h */
    struct nn_module *m = nn_linear_new(3, 2, true, &rng);
    ck_assert_ptr_nonnull(m);
    struct tensor *in[2] = {a, NULL}, *out[NN_MAX_IO];
    int n_out = -1;
    tensor_clear_error();
    ck_assert_int_eq(nn_forward(NULL, 1, in, &n_out, out), -1);
    ck_assert_str_eq(tensor_last_error(), "nn_forward: module is NULL");
    ck_assert_int_eq(nn_forward(m, 1, in, NULL, out), -1);
    ck_assert_str_eq(tensor_last_error(), "nn_forward: n_out is NULL");
    ck_assert_int_eq(nn_forward(m, 1, in, &n_out, NULL), -1);
    ck_assert_str_eq(tensor_last_error(), "nn_forward: out is NULL");
    ck_assert_int_eq(nn_forward(m, 1, NULL, &n_out, out), -1);
    ck_assert_str_eq(tensor_last_error(), "nn_forward: in is NULL");
    ck_assert_int_eq(nn_forward(m, 2, in, &n_out, out), -1);
    ck_assert_str_eq(tensor_last_error(), "nn_forward: input 1 is NULL");
    ck_assert_int_eq(n_out, 0);
    ck_assert_int_eq(m->ops->forward(m, 1, &in[1], &n_out, out), -1);   /* the module's own check */
    ck_assert_str_eq(tensor_last_error(), "nn_linear: input is NULL");
    NULL_CASE(nn_forward1(NULL, a), "nn_forward1: module is NULL");
    NULL_CASE(nn_forward1(m, N), "nn_forward1: input is NULL");
    tensor_clear_error();
    ck_assert_int_eq(nn_module_to(NULL, DEVICE_CPU), -1);
    ck_assert_str_eq(tensor_last_error(), "nn_module_to: module is NULL");
    VOID_CASE(nn_module_free(NULL), "");
    NULL_CASE(nn_linear_new(3, 2, true, NULL), "nn_linear_new: rng is NULL");
    NULL_CASE(nn_mlp_new(2, NULL, NN_RELU, 0, &rng), "nn_mlp_new: sizes is NULL");
    NULL_CASE(nn_mlp_new(2, (int[]){3, 2}, NN_RELU, 0, NULL), "nn_mlp_new: rng is NULL");
    NULL_CASE(nn_embedding_bag_new(4, 2, TENSOR_BAG_SUM, NULL), "nn_embedding_bag_new: rng is NULL");
    struct nn_policy_config cfg = {.obs_dim = 3, .act_dim = 2, .n_hidden = 1, .hidden = {4}};
    NULL_CASE(nn_policy_new(NULL, &rng), "nn_policy_new: cfg is NULL");
    NULL_CASE(nn_policy_new(&cfg, NULL), "nn_policy_new: rng is NULL");
    /* the module still works */
    struct tensor *y = nn_forward1(m, a);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->shape[0], 2);
    ck_assert_int_eq(y->shape[1], 2);
#undef NULL_CASE
#undef VOID_CASE
    nn_module_free(m);
    struct tensor *all[] = {a, sc, e, y};
    for (int k = 0; k < 4; k++) tensor_free(all[k]);
}
END_TEST

START_TEST(test_error_messages)
{
    struct tensor *a = mk(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *b = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){4, 5});
    struct tensor *d = tensor_new(DTYPE_F64, DEVICE_CPU, 2, (int64_t[]){2, 3});
    struct tensor *i = tensor_new(DTYPE_I32, DEVICE_CPU, 1, (int64_t[]){3});
    struct tensor *v4 = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){4});
    ck_assert_ptr_null(tensor_matmul(a, b));
    ck_assert_str_eq(tensor_last_error(), "tensor_matmul: shape mismatch: [2,3] x [4,5]");
    ck_assert_ptr_null(tensor_add(a, d));
    ck_assert_str_eq(tensor_last_error(), "tensor_add: dtype mismatch: f32 and f64");
    ck_assert_ptr_null(tensor_mul(a, v4));
    ck_assert_str_eq(tensor_last_error(), "tensor_mul: shape mismatch: [2,3] and [4]");
    ck_assert_ptr_null(tensor_relu(i));
    ck_assert_str_eq(tensor_last_error(), "tensor_relu: unsupported dtype i32 (expected f32)");
    ck_assert_ptr_null(tensor_linear(a, b, NULL));
    ck_assert_str_eq(tensor_last_error(), "tensor_linear: shape mismatch: x [2,3] and w [4,5]");
    struct tensor *w = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){4, 3});
    ck_assert_ptr_null(tensor_linear(a, w, a));
    ck_assert_str_eq(tensor_last_error(), "tensor_linear: shape mismatch: bias [2,3] for w [4,3]");
    ck_assert_ptr_null(tensor_reshape(a, 1, (int64_t[]){5}));
    ck_assert_str_eq(tensor_last_error(), "tensor_reshape: cannot reshape [2,3] into [5]");
    ck_assert_ptr_null(tensor_clamp(a, 1.0f, 0.0f));
    ck_assert_str_eq(tensor_last_error(), "tensor_clamp: lo 1 is greater than hi 0");
    uint64_t rng = 1;
    ck_assert_ptr_null(tensor_dropout(a, 1.5f, true, &rng));
    ck_assert_str_eq(tensor_last_error(), "tensor_dropout: p 1.5 is outside [0,1]");
    ck_assert_ptr_null(tensor_mse(a, v4));
    ck_assert_str_eq(tensor_last_error(), "tensor_mse: shape mismatch: [2,3] and [4]");
    struct tensor *all[] = {a, b, d, i, v4, w};
    for (int k = 0; k < 6; k++) tensor_free(all[k]);
}
END_TEST

/* Empty tensors carry no data but may have dims a peer can send (rpc
 * accepts each dim up to 2^40): an op whose output is a product of such
 * dims must fail with an error, not abort in its allocation. */
START_TEST(test_empty_inputs_huge_outputs)
{
    const int64_t big = (int64_t)1 << 40;
    struct tensor *a = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){big, 0});
    struct tensor *b = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){0, big});
    struct tensor *x3 = tensor_new(DTYPE_F32, DEVICE_CPU, 3, (int64_t[]){0, big, big});
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(x3);
    ck_assert_ptr_null(tensor_matmul(a, b));
    ck_assert_str_eq(tensor_last_error(), "tensor_matmul: output shape [1099511627776,1099511627776] is too large");
    ck_assert_ptr_null(tensor_linear(a, a, NULL));
    ck_assert_str_eq(tensor_last_error(), "tensor_linear: output shape [1099511627776,1099511627776] is too large");
    ck_assert_ptr_null(tensor_sum_dim(x3, 0, true));
    ck_assert_str_eq(tensor_last_error(), "tensor_sum_dim: output shape [1,1099511627776,1099511627776] is too large");
    ck_assert_ptr_null(tensor_mean_dim(x3, 0, false));
    ck_assert_str_eq(tensor_last_error(), "tensor_mean_dim: output shape [1,1099511627776,1099511627776] is too large");
    /* within tensor_new's bound but 256 TiB, more than any address space:
     * the allocation fails, and that is an error too */
    const int64_t m = (int64_t)1 << 23;
    struct tensor *am = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){m, 0});
    struct tensor *bm = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){0, m});
    ck_assert_ptr_null(tensor_matmul(am, bm));
    ck_assert_str_eq(tensor_last_error(), "tensor_matmul: output shape [8388608,8388608] is too large");
    tensor_free(am);
    tensor_free(bm);
    /* dims that sum past INT64_MAX along the cat dim */
    struct tensor *h = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){0, (int64_t)1 << 62});
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_null(tensor_cat(2, (struct tensor *[]){h, h}, 1));
    ck_assert_str_eq(tensor_last_error(), "tensor_cat: dim 1 sums past the largest size");
    /* a small product of empty inputs still works */
    struct tensor *sa = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){2, 0});
    struct tensor *sb = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){0, 3});
    struct tensor *sm = tensor_matmul(sa, sb);
    assert_values(sm, 2, (int64_t[]){2, 3}, (float[]){0, 0, 0, 0, 0, 0});
    struct tensor *all[] = {a, b, x3, h, sa, sb, sm};
    for (int i = 0; i < 7; i++) tensor_free(all[i]);
}
END_TEST

/* Shapes and sizes given to reshape and split whose products or sums pass
 * INT64_MAX are errors (before: signed overflow, and reshape of an empty
 * tensor made a tensor no tensor_new would make). */
START_TEST(test_reshape_split_overflow)
{
    const int64_t g = (int64_t)1 << 32;
    struct tensor *e = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){0});
    ck_assert_ptr_null(tensor_reshape(e, 4, (int64_t[]){g, g, g, 0}));
    ck_assert_str_eq(tensor_last_error(),
                     "tensor_reshape: shape [4294967296,4294967296,4294967296,0] is too large");
    struct tensor *ok = tensor_reshape(e, 3, (int64_t[]){2, 0, g});
    ck_assert_ptr_nonnull(ok);
    ck_assert_int_eq(ok->numel, 0);
    struct tensor *x = mk(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *p[2] = {NULL, NULL};
    ck_assert_int_eq(tensor_split(x, 1, 2, (int64_t[]){INT64_MAX, 2}, p), -1);
    ck_assert_str_eq(tensor_last_error(), "tensor_split: sizes sum past the largest size");
    ck_assert_ptr_null(p[0]);
    tensor_free(e);
    tensor_free(ok);
    tensor_free(x);
}
END_TEST

START_TEST(test_gather_cases)
{
    struct tensor *x = mk(2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 5, 6});
    struct tensor *idx = tensor_from_data(DTYPE_I64, 2, (int64_t[]){2, 2}, (int64_t[]){2, 0, 1, 1});
    struct tensor *y = tensor_gather(x, idx);
    assert_values(y, 2, (int64_t[]){2, 2}, (float[]){3, 1, 5, 5});
    struct tensor *bad = tensor_from_data(DTYPE_I64, 2, (int64_t[]){2, 1}, (int64_t[]){0, 5});
    ck_assert_ptr_null(tensor_gather(x, bad));
    ck_assert_str_eq(tensor_last_error(), "tensor_gather: index 5 is out of range for size 3");
    struct tensor *neg = tensor_from_data(DTYPE_I64, 2, (int64_t[]){2, 1}, (int64_t[]){-1, 0});
    ck_assert_ptr_null(tensor_gather(x, neg));
    ck_assert_str_eq(tensor_last_error(), "tensor_gather: index -1 is out of range for size 3");
    struct tensor *i32 = tensor_new(DTYPE_I32, DEVICE_CPU, 2, (int64_t[]){2, 1});
    ck_assert_ptr_null(tensor_gather(x, i32));
    ck_assert_str_eq(tensor_last_error(), "tensor_gather: index dtype i32 (expected i64)");
    struct tensor *all[] = {x, idx, y, bad, neg, i32};
    for (int k = 0; k < 6; k++) tensor_free(all[k]);
}
END_TEST

START_TEST(test_detach_and_to)
{
    struct tensor *x = mk(1, (int64_t[]){2}, (float[]){1, 2});
    tensor_set_requires_grad(x, true);
    struct tensor *e = tensor_exp(x);
    struct tensor *d = tensor_detach(e);
    ck_assert(!d->requires_grad);
    ck_assert_ptr_null(d->grad_fn);
    ck_assert_float_eq(tensor_f32(d)[1], tensor_f32(e)[1]);
    struct tensor *same = tensor_to(x, DEVICE_CPU);
    ck_assert_ptr_eq(same, x);
    tensor_free(same);
    tensor_free(d);
    tensor_free(e);
    tensor_free(x);
}
END_TEST

KIT_MAIN("tensor_core",
         { "core", 0, .setup = setup, .tests = { test_new_errors, test_cuda_unavailable_messages,
           test_device_mismatch_message,
           test_cpu_alloc_cache } },
         { "cpu_kernels", 0, .setup = setup, .tests = { test_rng_kernels, test_categorical_kernel,
           test_sum_to_and_binary_kernels, test_unary_kernels, test_cast_and_copy_kernels,
           test_softmax_kernels_stable, test_sgemm_transposes } },
         { "ops", 0, .tests = { test_broadcast_cases, test_reduction_cases, test_split_cat_cases,
           test_split_cat_every_dtype, test_slice_every_dtype, test_slice_autograd_by_dtype,
           test_slice_i64_feeds_index_ops, test_ops_null_inputs, test_core_nn_null_inputs, test_error_messages,
           test_gather_cases, test_empty_inputs_huge_outputs, test_reshape_split_overflow, test_detach_and_to } })
