/* The CUDA backend against the CPU reference, kernel by kernel: every entry
 * of struct tensor_backend on random shapes, with tolerance abs + rel*|ref|
 * (exact where the kernels promise the CPU's summation order or integer
 * results). Skips (exit 77) without a CUDA device. Runs without fork: a
 * CUDA context does not survive fork(). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"
#include "tests/cuda/cuda_test_util.h"

const struct tensor_backend *cpu, *gpu;
uint64_t test_rng = 0x5eed;

/* ---- helpers ----------------------------------------------------------------- */

int64_t rand_int(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_next(&test_rng) % (uint64_t)(hi - lo + 1));
}

float rand_float(float lo, float hi)
{
    return lo + (hi - lo) * (float)(rng_next(&test_rng) >> 40) * (1.0f / 16777216.0f);
}

float *host_floats(size_t n, float lo, float hi)
{
    float *p = trib_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = rand_float(lo, hi);
    return p;
}

void *dev_copy(const void *host, size_t nbytes)
{
    void *d = gpu->alloc(nbytes);
    CHECK_ALLOC(d);
    if (nbytes) gpu->copy_from_host(d, host, nbytes);
    return d;
}

void *host_copy_free(void *dev, size_t nbytes)
{
    void *h = trib_xmalloc(nbytes);
    if (nbytes) gpu->copy_to_host(h, dev, nbytes);
    gpu->free(dev);
    return h;
}

void assert_close(const char *what, const float *got, const float *ref, size_t n, double atol, double rtol)
{
    for (size_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        if (isnan(r) && isnan(g)) continue;
        if (isinf(r) && g == r) continue;
        ck_assert_msg(fabs(g - r) <= atol + rtol * fabs(r), "%s: element %zu: cuda %.9g, cpu %.9g", what, i, g, r);
    }
}

static void assert_exact(const char *what, const void *got, const void *ref, size_t nbytes)
{
    ck_assert_msg(nbytes == 0 || memcmp(got, ref, nbytes) == 0, "%s: cuda and cpu differ", what);
}

/* ---- memory --------------------------------------------------------------------- */

START_TEST(test_memory)
{
    size_t n = 1000;
    float *h = host_floats(n, -1, 1);
    float *d = dev_copy(h, n * sizeof(float));
    float *d2 = gpu->alloc(n * sizeof(float));
    gpu->copy(d2, d, n * sizeof(float));
    float *back = host_copy_free(d2, n * sizeof(float));
    assert_exact("copy", back, h, n * sizeof(float));
    free(back);
    /* copy2d: 10 rows of 7 floats from a pitch of 100 floats into a pitch of 8 */
    float *d3 = gpu->alloc(80 * sizeof(float));
    gpu->zero(d3, 80 * sizeof(float));
    gpu->copy2d(d3, 8 * sizeof(float), d + 3, 100 * sizeof(float), 7 * sizeof(float), 10);
    float *r2 = host_copy_free(d3, 80 * sizeof(float));
    float ref[80];
    memset(ref, 0, sizeof ref);
    cpu->copy2d(ref, 8 * sizeof(float), h + 3, 100 * sizeof(float), 7 * sizeof(float), 10);
    assert_exact("copy2d", r2, ref, sizeof ref);
    gpu->synchronize();
    gpu->free(d);
    free(r2);
    free(h);
}
END_TEST

/* ---- element-wise --------------------------------------------------------------- */

START_TEST(test_fill)
{
    size_t sizes[] = {0, 1, 257, 100003};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        float *ref = trib_xmalloc(n * sizeof(float) + 4);
        cpu->fill(ref, -2.5f, n);
        float *d = gpu->alloc(n * sizeof(float));
        gpu->fill(d, -2.5f, n);
        float *got = host_copy_free(d, n * sizeof(float));
        assert_exact("fill", got, ref, n * sizeof(float));
        free(ref);
        free(got);
    }
}
END_TEST

START_TEST(test_unary)
{
    static const char *names[KU_COUNT] = {"neg", "relu", "tanh", "exp", "log", "sqrt", "square", "recip",
                                          "step", "scale", "add_scalar", "clamp", "inside", "keep"};
    size_t sizes[] = {0, 1, 33, 4099, 200001};
    for (int op = 0; op < KU_COUNT; op++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            size_t n = sizes[s];
            bool positive = op == KU_LOG || op == KU_SQRT || op == KU_RECIP;
            float *x = host_floats(n, positive ? 0.05f : -4.0f, 4.0f);
            if (op == KU_KEEP)
                for (size_t i = 0; i < n; i++) x[i] = rand_float(0, 1);
            float a = op == KU_KEEP ? 0.3f : rand_float(-1.5f, -0.5f), b = rand_float(0.5f, 1.5f);
            float *ref = trib_xmalloc(n * sizeof(float) + 4);
            cpu->unary((enum kunary)op, ref, x, n, a, b);
            float *dx = dev_copy(x, n * sizeof(float));
            float *dy = gpu->alloc(n * sizeof(float));
            gpu->unary((enum kunary)op, dy, dx, n, a, b);
            /* in place (out == x) gives the same values */
            gpu->unary((enum kunary)op, dx, dx, n, a, b);
            float *got = host_copy_free(dy, n * sizeof(float));
            float *got_inplace = host_copy_free(dx, n * sizeof(float));
            char what[64];
            snprintf(what, sizeof what, "unary %s n=%zu", names[op], n);
            assert_close(what, got, ref, n, 1e-6, 2e-6);
            assert_exact(what, got_inplace, got, n * sizeof(float));
            free(x);
            free(ref);
            free(got);
            free(got_inplace);
        }
}
END_TEST

/* A random broadcast geometry: output shape n, a and b each broadcast along
 * a random subset of dims; returns the element counts of a and b. */
static void random_bcast(struct kbcast *bc, size_t *na, size_t *nb, bool dense)
{
    int64_t ashape[4], bshape[4];
    for (int k = 0; k < 4; k++) {
        bc->n[k] = rand_int(1, k == 3 ? 40 : 6);
        ashape[k] = (!dense && rand_int(0, 2) == 0) ? 1 : bc->n[k];
        bshape[k] = (!dense && rand_int(0, 2) == 0) ? 1 : bc->n[k];
    }
    int64_t sa = 1, sb = 1;
    for (int k = 3; k >= 0; k--) {
        bc->sa[k] = ashape[k] == 1 ? 0 : sa;
        bc->sb[k] = bshape[k] == 1 ? 0 : sb;
        sa *= ashape[k];
        sb *= bshape[k];
    }
    *na = (size_t)sa;
    *nb = (size_t)sb;
}

START_TEST(test_binary)
{
    static const char *names[KB_COUNT] = {"add", "sub", "mul", "div", "min", "max", "ge"};
    for (int op = 0; op < KB_COUNT; op++)
        for (int trial = 0; trial < 12; trial++) {
            struct kbcast bc;
            size_t na, nb;
            random_bcast(&bc, &na, &nb, trial < 3);
            size_t n = (size_t)(bc.n[0] * bc.n[1] * bc.n[2] * bc.n[3]);
            float *a = host_floats(na, -3, 3), *b = host_floats(nb, -3, 3);
            if (op == KB_DIV)
                for (size_t i = 0; i < nb; i++) b[i] = b[i] < 0 ? b[i] - 0.1f : b[i] + 0.1f;
            if (op == KB_GE && nb && na)   /* some ties */
                b[0] = a[0];
            float *ref = trib_xmalloc(n * sizeof(float));
            cpu->binary((enum kbinary)op, ref, a, b, &bc);
            float *da = dev_copy(a, na * sizeof(float)), *db = dev_copy(b, nb * sizeof(float));
            float *dout = gpu->alloc(n * sizeof(float));
            gpu->binary((enum kbinary)op, dout, da, db, &bc);
            float *got = host_copy_free(dout, n * sizeof(float));
            char what[160];
            snprintf(what, sizeof what, "binary %s n=[%lld,%lld,%lld,%lld] sa=[%lld,%lld,%lld,%lld]", names[op],
                     (long long)bc.n[0], (long long)bc.n[1], (long long)bc.n[2], (long long)bc.n[3],
                     (long long)bc.sa[0], (long long)bc.sa[1], (long long)bc.sa[2], (long long)bc.sa[3]);
            /* IEEE +,-,*,/ are correctly rounded on both: exact */
            assert_exact(what, got, ref, n * sizeof(float));
            gpu->free(da);
            gpu->free(db);
            free(a);
            free(b);
            free(ref);
            free(got);
        }
}
END_TEST

START_TEST(test_sum_to)
{
    for (int trial = 0; trial < 40; trial++) {
        int64_t n[4], m[4];
        for (int k = 0; k < 4; k++) {
            n[k] = rand_int(1, k == 3 ? 50 : 7);
            m[k] = rand_int(0, 1) ? 1 : n[k];
        }
        if (trial == 0)
            for (int k = 0; k < 4; k++) m[k] = 1;   /* full reduction */
        if (trial == 1) {                           /* bias gradient: [B,out] -> [1,out] */
            n[0] = n[1] = 1;
            n[2] = 3000;
            n[3] = 17;
            m[0] = m[1] = m[2] = 1;
            m[3] = 17;
        }
        size_t nn = (size_t)(n[0] * n[1] * n[2] * n[3]), mn = (size_t)(m[0] * m[1] * m[2] * m[3]);
        float *in = host_floats(nn, -2, 2);
        float *ref = trib_xmalloc(mn * sizeof(float));
        cpu->sum_to(ref, m, in, n);
        float *din = dev_copy(in, nn * sizeof(float));
        float *dout = gpu->alloc(mn * sizeof(float));
        gpu->sum_to(dout, m, din, n);
        float *got = host_copy_free(dout, mn * sizeof(float));
        /* same summation order as the CPU: bit-identical */
        assert_exact("sum_to", got, ref, mn * sizeof(float));
        gpu->free(din);
        free(in);
        free(ref);
        free(got);
    }
}
END_TEST

START_TEST(test_cast)
{
    size_t n = 777;
    for (int from = 0; from < DTYPE_COUNT; from++)
        for (int to = 0; to < DTYPE_COUNT; to++) {
            /* values every dtype holds exactly: integers 0..200 (and halves for floats) */
            double *vals = trib_xmalloc(n * sizeof(double));
            for (size_t i = 0; i < n; i++) {
                vals[i] = (double)rand_int(0, 200);
                if ((from == DTYPE_F32 || from == DTYPE_F64) && (to == DTYPE_F32 || to == DTYPE_F64))
                    vals[i] += 0.5 * (double)rand_int(-1, 1);
            }
            size_t isz = dtype_size((enum dtype)from), osz = dtype_size((enum dtype)to);
            void *in = trib_xmalloc(n * isz);
            cpu->cast(in, (enum dtype)from, vals, DTYPE_F64, n);
            void *ref = trib_xmalloc(n * osz);
            cpu->cast(ref, (enum dtype)to, in, (enum dtype)from, n);
            void *din = dev_copy(in, n * isz), *dout = gpu->alloc(n * osz);
            gpu->cast(dout, (enum dtype)to, din, (enum dtype)from, n);
            void *got = host_copy_free(dout, n * osz);
            char what[64];
            snprintf(what, sizeof what, "cast %s -> %s", dtype_name((enum dtype)from), dtype_name((enum dtype)to));
            assert_exact(what, got, ref, n * osz);
            gpu->free(din);
            free(vals);
            free(in);
            free(ref);
            free(got);
        }
}
END_TEST

/* ---- rows ------------------------------------------------------------------------- */

static const int64_t row_shapes[][2] = {{1, 1}, {3, 7}, {64, 2}, {5, 33}, {17, 300}, {2, 1000}, {1, 4097}, {300, 5}};

typedef void (*row_fwd)(float *, const float *, int64_t, int64_t);
typedef void (*row_bwd)(float *, const float *, const float *, int64_t, int64_t);

static void check_row_forward(const char *name, row_fwd cpu_fn, row_fwd gpu_fn)
{
    for (size_t s = 0; s < sizeof row_shapes / sizeof *row_shapes; s++) {
        int64_t rows = row_shapes[s][0], cols = row_shapes[s][1];
        size_t n = (size_t)(rows * cols);
        float *x = host_floats(n, -8, 8);
        float *ref = trib_xmalloc(n * sizeof(float));
        cpu_fn(ref, x, rows, cols);
        float *dx = dev_copy(x, n * sizeof(float)), *dy = gpu->alloc(n * sizeof(float));
        gpu_fn(dy, dx, rows, cols);
        float *got = host_copy_free(dy, n * sizeof(float));
        char what[64];
        snprintf(what, sizeof what, "%s %lldx%lld", name, (long long)rows, (long long)cols);
        /* block reductions sum in another order than the CPU loop */
        assert_close(what, got, ref, n, 1e-5, 1e-5);
        gpu->free(dx);
        free(x);
        free(ref);
        free(got);
    }
}

static void check_row_backward(const char *name, row_fwd cpu_fwd, row_bwd cpu_fn, row_bwd gpu_fn)
{
    for (size_t s = 0; s < sizeof row_shapes / sizeof *row_shapes; s++) {
        int64_t rows = row_shapes[s][0], cols = row_shapes[s][1];
        size_t n = (size_t)(rows * cols);
        float *x = host_floats(n, -4, 4), *gy = host_floats(n, -1, 1);
        float *y = trib_xmalloc(n * sizeof(float)), *ref = trib_xmalloc(n * sizeof(float));
        cpu_fwd(y, x, rows, cols);
        cpu_fn(ref, gy, y, rows, cols);
        float *dgy = dev_copy(gy, n * sizeof(float)), *dy = dev_copy(y, n * sizeof(float));
        float *dgx = gpu->alloc(n * sizeof(float));
        gpu_fn(dgx, dgy, dy, rows, cols);
        float *got = host_copy_free(dgx, n * sizeof(float));
        char what[64];
        snprintf(what, sizeof what, "%s %lldx%lld", name, (long long)rows, (long long)cols);
        assert_close(what, got, ref, n, 1e-5, 1e-4);
        gpu->free(dgy);
        gpu->free(dy);
        free(x);
        free(gy);
        free(y);
        free(ref);
        free(got);
    }
}

START_TEST(test_softmax) { check_row_forward("softmax", cpu->softmax, gpu->softmax); }
END_TEST
START_TEST(test_log_softmax) { check_row_forward("log_softmax", cpu->log_softmax, gpu->log_softmax); }
END_TEST
START_TEST(test_softmax_backward)
{
    check_row_backward("softmax_backward", cpu->softmax, cpu->softmax_backward, gpu->softmax_backward);
}
END_TEST
START_TEST(test_log_softmax_backward)
{
    check_row_backward("log_softmax_backward", cpu->log_softmax, cpu->log_softmax_backward,
                       gpu->log_softmax_backward);
}
END_TEST

START_TEST(test_gather)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {5, 4, 1}, {7, 3, 6}, {128, 9, 2}, {3, 1000, 40}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1], k = shapes[s][2];
        size_t nx = (size_t)(rows * cols), no = (size_t)(rows * k);
        float *x = host_floats(nx, -3, 3), *gout = host_floats(no, -1, 1);
        int64_t *idx = trib_xmalloc(no * sizeof(int64_t));
        for (size_t i = 0; i < no; i++) idx[i] = rand_int(0, cols - 1);   /* repeats included */
        float *ref = trib_xmalloc(no * sizeof(float)), *gref = trib_xmalloc(nx * sizeof(float));
        cpu->gather(ref, x, idx, rows, cols, k);
        cpu->gather_backward(gref, gout, idx, rows, cols, k);
        float *dx = dev_copy(x, nx * sizeof(float)), *dg = dev_copy(gout, no * sizeof(float));
        int64_t *didx = dev_copy(idx, no * sizeof(int64_t));
        float *dout = gpu->alloc(no * sizeof(float)), *dgx = dev_copy(x, nx * sizeof(float));
        gpu->gather(dout, dx, didx, rows, cols, k);
        gpu->gather_backward(dgx, dg, didx, rows, cols, k);   /* overwrites the stale values */
        float *got = host_copy_free(dout, no * sizeof(float)), *ggot = host_copy_free(dgx, nx * sizeof(float));
        assert_exact("gather", got, ref, no * sizeof(float));
        assert_exact("gather_backward", ggot, gref, nx * sizeof(float));
        gpu->free(dx);
        gpu->free(dg);
        gpu->free(didx);
        free(x);
        free(gout);
        free(idx);
        free(ref);
        free(gref);
        free(got);
        free(ggot);
    }
}
END_TEST

/* ---- sgemm ------------------------------------------------------------------------ */

START_TEST(test_sgemm)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {2, 3, 4}, {17, 5, 33}, {64, 128, 96}, {3, 200, 1},
                                        {4, 4, 0}, {1, 300, 700}, {129, 1, 65}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                int64_t pad = (int64_t)(s % 3);
                /* stored shapes: A is (ta ? K x M : M x K), B is (tb ? N x K : K x N) */
                int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
                int64_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
                if (lda < 1) lda = 1;
                if (ldb < 1) ldb = 1;
                size_t na = (size_t)(ar * lda), nb = (size_t)(br * ldb), nc = (size_t)(M * ldc);
                float *A = host_floats(na, -1, 1), *B = host_floats(nb, -1, 1), *C = host_floats(nc, -1, 1);
                float alpha = rand_float(0.5f, 2), beta = s % 2 ? 0.0f : rand_float(-1, 1);
                float *dA = dev_copy(A, na * sizeof(float)), *dB = dev_copy(B, nb * sizeof(float));
                float *dC = dev_copy(C, nc * sizeof(float));
                cpu->sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
                gpu->sgemm(ta, tb, M, N, K, alpha, dA, lda, dB, ldb, beta, dC, ldc);
                float *got = host_copy_free(dC, nc * sizeof(float));
                char what[96];
                snprintf(what, sizeof what, "sgemm ta=%d tb=%d M=%lld N=%lld K=%lld", ta, tb, (long long)M,
                         (long long)N, (long long)K);
                assert_close(what, got, C, nc, 1e-5 * (double)(K + 1), 1e-5);
                gpu->free(dA);
                gpu->free(dB);
                free(A);
                free(B);
                free(C);
                free(got);
            }
}
END_TEST

/* ---- random ------------------------------------------------------------------------ */

START_TEST(test_rand)
{
    size_t sizes[] = {0, 1, 1001, 65537};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        uint64_t seed = rng_next(&test_rng);
        float *ref = trib_xmalloc(n * sizeof(float) + 4), *nref = trib_xmalloc(n * sizeof(float) + 4);
        cpu->rand_uniform(ref, n, seed);
        cpu->rand_normal(nref, n, seed);
        float *du = gpu->alloc(n * sizeof(float)), *dn = gpu->alloc(n * sizeof(float));
        gpu->rand_uniform(du, n, seed);
        gpu->rand_normal(dn, n, seed);
        float *got = host_copy_free(du, n * sizeof(float)), *ngot = host_copy_free(dn, n * sizeof(float));
        assert_exact("rand_uniform", got, ref, n * sizeof(float));   /* 24-bit exact by design */
        assert_close("rand_normal", ngot, nref, n, 2e-6, 2e-6);      /* libm ulps */
        free(ref);
        free(nref);
        free(got);
        free(ngot);
    }
}
END_TEST

START_TEST(test_categorical)
{
    static const int64_t shapes[][2] = {{1, 1}, {1, 2}, {100, 4}, {33, 17}, {7, 1000}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)(rows * cols);
        float *p = host_floats(n, 0, 1);
        for (size_t i = 0; i < n; i += 5) p[i] = 0.0f;   /* zero-probability classes */
        float *u = trib_xmalloc((size_t)rows * sizeof(float));
        cpu->rand_uniform(u, (size_t)rows, rng_next(&test_rng));
        int64_t *ref = trib_xmalloc((size_t)rows * sizeof(int64_t));
        cpu->categorical(ref, p, u, rows, cols);
        float *dp = dev_copy(p, n * sizeof(float)), *du = dev_copy(u, (size_t)rows * sizeof(float));
        int64_t *dout = gpu->alloc((size_t)rows * sizeof(int64_t));
        gpu->categorical(dout, dp, du, rows, cols);
        int64_t *got = host_copy_free(dout, (size_t)rows * sizeof(int64_t));
        assert_exact("categorical", got, ref, (size_t)rows * sizeof(int64_t));
        gpu->free(dp);
        gpu->free(du);
        free(p);
        free(u);
        free(ref);
        free(got);
    }
}
END_TEST

static Suite *cuda_suite(void)
{
    Suite *s = suite_create("cuda");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_memory);
    tcase_add_test(tc, test_fill);
    tcase_add_test(tc, test_unary);
    tcase_add_test(tc, test_binary);
    tcase_add_test(tc, test_sum_to);
    tcase_add_test(tc, test_cast);
    tcase_add_test(tc, test_softmax);
    tcase_add_test(tc, test_log_softmax);
    tcase_add_test(tc, test_softmax_backward);
    tcase_add_test(tc, test_log_softmax_backward);
    tcase_add_test(tc, test_gather);
    tcase_add_test(tc, test_sgemm);
    tcase_add_test(tc, test_rand);
    tcase_add_test(tc, test_categorical);
    suite_add_tcase(s, tc);
    add_op_tests(s);
    add_optim_tests(s);
    return s;
}

int main(void)
{
    if (!tensor_cuda_available()) {
        printf("test_cuda: no CUDA device, skipping\n");
        return 77;
    }
    cpu = tensor_cpu_backend();
    gpu = tensor_backend_for(DEVICE_CUDA);
    SRunner *sr = srunner_create(cuda_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
