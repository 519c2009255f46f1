/* Op-level agreement of the two backends: every op of tensor/ops.h runs
 * forward and backward on CPU leaves and on CUDA copies of them; outputs
 * and leaf gradients must agree (abs + rel*|ref|). Upstream gradients are
 * random (loss = sum(out * w)), so every element of a backward is used. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "tests/cuda/cuda_test_util.h"

#define MAX_IN 3

/* An op under test: builds the output from leaves on one device. aux holds
 * CPU tensors the op needs besides its leaves (an index, say); the op moves
 * them to its device itself. */
typedef struct tensor *(*op_fn)(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed);

static struct tensor *rand_tensor(int ndim, const int64_t *shape, float lo, float hi)
{
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, ndim, shape);
    CHECK(t);
    for (int64_t i = 0; i < t->numel; i++) tensor_f32(t)[i] = rand_float(lo, hi);
    return t;
}

static float *host_of(const struct tensor *t)
{
    float *h = trib_xmalloc(tensor_nbytes(t) + 4);
    tensor_copy_to_host(t, h);
    return h;
}

static void compare(const char *what, const struct tensor *cpu_t, const struct tensor *gpu_t, double atol, double rtol)
{
    ck_assert_msg(cpu_t && gpu_t, "%s: missing tensor (cpu %p, cuda %p)", what, (void *)cpu_t, (void *)gpu_t);
    ck_assert_msg(tensor_same_shape(cpu_t, gpu_t), "%s: shapes or dtypes differ", what);
    ck_assert_int_eq(gpu_t->device, DEVICE_CUDA);
    float *a = host_of(cpu_t), *b = host_of(gpu_t);
    if (cpu_t->dtype == DTYPE_F32)
        assert_close(what, b, a, (size_t)cpu_t->numel, atol, rtol);
    else
        ck_assert_msg(memcmp(a, b, tensor_nbytes(cpu_t)) == 0, "%s: values differ", what);
    free(a);
    free(b);
}

/* Runs fn on n CPU leaves and on CUDA copies, compares outputs, then the
 * leaf gradients of sum(out * w). */
static void check_op(const char *name, op_fn fn, int n, struct tensor **leaves, struct tensor *aux,
                     double atol, double rtol)
{
    struct tensor *g_leaves[MAX_IN];
    for (int i = 0; i < n; i++) {
        g_leaves[i] = tensor_clone_to(leaves[i], DEVICE_CUDA);
        ck_assert_msg(g_leaves[i] != NULL, "%s", tensor_last_error());
        tensor_set_requires_grad(leaves[i], true);
        tensor_set_requires_grad(g_leaves[i], true);
    }
    uint64_t seed = rng_next(&test_rng);
    struct tensor *yc = fn(leaves, DEVICE_CPU, aux, seed);
    ck_assert_msg(yc != NULL, "%s on cpu: %s", name, tensor_last_error());
    struct tensor *yg = fn(g_leaves, DEVICE_CUDA, aux, seed);
    ck_assert_msg(yg != NULL, "%s on cuda: %s", name, tensor_last_error());
    char what[96];
    snprintf(what, sizeof what, "%s forward", name);
    compare(what, yc, yg, atol, rtol);
    if (yc->requires_grad) {
        ck_assert(yg->requires_grad);
        struct tensor *wc = rand_tensor(yc->ndim, yc->shape, -1, 1), *wg = tensor_clone_to(wc, DEVICE_CUDA);
        struct tensor *pc = tensor_mul(yc, wc), *pg = tensor_mul(yg, wg);
        struct tensor *lc = tensor_sum(pc), *lg = tensor_sum(pg);
        ck_assert_msg(tensor_backward(lc, NULL, false) == 0, "%s cpu backward: %s", name, tensor_last_error());
        ck_assert_msg(tensor_backward(lg, NULL, false) == 0, "%s cuda backward: %s", name, tensor_last_error());
        for (int i = 0; i < n; i++) {
            snprintf(what, sizeof what, "%s grad of input %d", name, i);
            ck_assert_msg((leaves[i]->grad == NULL) == (g_leaves[i]->grad == NULL), "%s: present on one side only",
                          what);
            if (leaves[i]->grad) compare(what, leaves[i]->grad, g_leaves[i]->grad, atol, rtol);
        }
        tensor_free(wc);
        tensor_free(wg);
        tensor_free(pc);
        tensor_free(pg);
        tensor_free(lc);
        tensor_free(lg);
    }
    tensor_free(yc);
    tensor_free(yg);
    for (int i = 0; i < n; i++) {
        tensor_zero_grad(leaves[i]);
        tensor_free(g_leaves[i]);
    }
}

/* A random case: leaves of the given shapes with values in [lo, hi]. */
static void run_case(const char *name, op_fn fn, int n, const int *ndims, const int64_t shapes[][4], float lo,
                     float hi, struct tensor *aux)
{
    struct tensor *leaves[MAX_IN];
    for (int i = 0; i < n; i++) leaves[i] = rand_tensor(ndims[i], shapes[i], lo, hi);
    check_op(name, fn, n, leaves, aux, 1e-5, 1e-4);
    for (int i = 0; i < n; i++) tensor_free(leaves[i]);
}

static void run_unary(const char *name, op_fn fn, float lo, float hi)
{
    for (int trial = 0; trial < 3; trial++) {
        int nd = (int)rand_int(0, 4);
        int64_t s[1][4];
        for (int k = 0; k < nd; k++) s[0][k] = rand_int(1, 6);
        run_case(name, fn, 1, &nd, s, lo, hi, NULL);
    }
}

/* Two shapes that broadcast: one drops leading dims and has 1s here and
 * there (the second operand, or the first on odd trials). */
static void run_binary(const char *name, op_fn fn, float lo, float hi)
{
    for (int trial = 0; trial < 4; trial++) {
        int nd[2];
        int64_t s[2][4];
        int full = trial % 2, part = 1 - full;
        nd[full] = (int)rand_int(1, 4);
        for (int k = 0; k < nd[full]; k++) s[full][k] = rand_int(1, 5);
        nd[part] = trial == 0 ? nd[full] : (int)rand_int(1, nd[full]);
        for (int k = 0; k < nd[part]; k++) {
            int64_t d = s[full][nd[full] - nd[part] + k];
            s[part][k] = (trial > 0 && rand_int(0, 2) == 0) ? 1 : d;
        }
        run_case(name, fn, 2, nd, (const int64_t(*)[4])s, lo, hi, NULL);
    }
}

/* ---- the ops ------------------------------------------------------------------------------ */

#define UNARY_FN(op)                                                                                      \
    static struct tensor *f_##op(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed) \
    {                                                                                                     \
        return tensor_##op(x[0]);                                                                         \
    }
#define BINARY_FN(op)                                                                                     \
    static struct tensor *f_##op(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed) \
    {                                                                                                     \
        return tensor_##op(x[0], x[1]);                                                                   \
    }

UNARY_FN(neg)
UNARY_FN(relu)
UNARY_FN(tanh)
UNARY_FN(exp)
UNARY_FN(log)
UNARY_FN(square)
UNARY_FN(sqrt)
UNARY_FN(softmax)
UNARY_FN(log_softmax)
UNARY_FN(sum)
UNARY_FN(mean)
UNARY_FN(detach)
UNARY_FN(gaussian_entropy)
BINARY_FN(add)
BINARY_FN(sub)
BINARY_FN(mul)
BINARY_FN(div)
BINARY_FN(minimum)
BINARY_FN(maximum)
BINARY_FN(matmul)
BINARY_FN(mse)

static struct tensor *f_add_scalar(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_add_scalar(x[0], 0.75f);
}

static struct tensor *f_mul_scalar(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_mul_scalar(x[0], -1.25f);
}

static struct tensor *f_clamp(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_clamp(x[0], -0.5f, 0.8f);
}

static struct tensor *f_linear(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_linear(x[0], x[1], x[2]);
}

static struct tensor *f_linear_nobias(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_linear(x[0], x[1], NULL);
}

static struct tensor *f_gather(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    struct tensor *idx = tensor_clone_to(aux, dev);
    struct tensor *y = tensor_gather(x[0], idx);
    tensor_free(idx);
    return y;
}

static struct tensor *f_sum_dim0(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_sum_dim(x[0], 0, false);
}

static struct tensor *f_sum_dim_last_keep(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_sum_dim(x[0], -1, true);
}

static struct tensor *f_mean_dim1(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_mean_dim(x[0], 1, false);
}

static struct tensor *f_reshape(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_reshape(x[0], 2, (int64_t[]){3, x[0]->numel / 3});
}

static struct tensor *f_slice(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_slice(x[0], 1, 4);
}

/* split dim 1 into {2,3,2}; out = 2*p0 + p2 (p1 gets no gradient) */
static struct tensor *f_split(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    struct tensor *p[3];
    if (tensor_split(x[0], 1, 3, (int64_t[]){2, 3, 2}, p) < 0) return NULL;
    struct tensor *a = tensor_mul_scalar(p[0], 2.0f), *y = tensor_add(a, p[2]);
    tensor_free(a);
    for (int i = 0; i < 3; i++) tensor_free(p[i]);
    return y;
}

static struct tensor *f_cat0(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_cat(3, x, 0);
}

static struct tensor *f_cat1(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_cat(3, x, 1);
}

static struct tensor *f_dropout(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    uint64_t rng = seed;
    return tensor_dropout(x[0], 0.4f, true, &rng);
}

static struct tensor *f_dropout_eval(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    uint64_t rng = seed;
    return tensor_dropout(x[0], 0.4f, false, &rng);
}

static struct tensor *f_categorical(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    uint64_t rng = seed;
    return tensor_categorical_sample(x[0], &rng);
}

static struct tensor *f_gaussian_sample(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    uint64_t rng = seed;
    return tensor_gaussian_sample(x[0], x[1], &rng);
}

static struct tensor *f_gaussian_log_prob(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    return tensor_gaussian_log_prob(x[0], x[1], x[2]);
}

/* CPU leaf -> CUDA -> tanh -> CPU: the recorded move carries the gradient
 * back; compared against tanh on the CPU alone. */
static struct tensor *f_to_and_back(struct tensor **x, enum device dev, struct tensor *aux, uint64_t seed)
{
    if (dev == DEVICE_CPU) return tensor_tanh(x[0]);
    struct tensor *h = tensor_to(x[0], DEVICE_CPU);             /* cuda leaf -> cpu */
    struct tensor *g = tensor_to(h, DEVICE_CUDA);               /* -> cuda */
    struct tensor *t = tensor_tanh(g);
    tensor_free(h);
    tensor_free(g);
    return t;
}

/* ---- tests ------------------------------------------------------------------------------------ */

START_TEST(test_ops_unary)
{
    run_unary("neg", f_neg, -3, 3);
    run_unary("relu", f_relu, -3, 3);
    run_unary("tanh", f_tanh, -3, 3);
    run_unary("exp", f_exp, -3, 3);
    run_unary("log", f_log, 0.1f, 5);
    run_unary("square", f_square, -3, 3);
    run_unary("sqrt", f_sqrt, 0.1f, 5);
    run_unary("clamp", f_clamp, -2, 2);
    run_unary("add_scalar", f_add_scalar, -3, 3);
    run_unary("mul_scalar", f_mul_scalar, -3, 3);
    run_unary("sum", f_sum, -3, 3);
    run_unary("mean", f_mean, -3, 3);
    run_unary("detach", f_detach, -3, 3);
    run_unary("dropout", f_dropout, -3, 3);
    run_unary("dropout_eval", f_dropout_eval, -3, 3);
}
END_TEST

START_TEST(test_ops_binary)
{
    run_binary("add", f_add, -3, 3);
    run_binary("sub", f_sub, -3, 3);
    run_binary("mul", f_mul, -3, 3);
    run_binary("minimum", f_minimum, -3, 3);
    run_binary("maximum", f_maximum, -3, 3);
    run_binary("div", f_div, 0.5f, 3);
    /* mse needs equal shapes */
    int nd[2] = {2, 2};
    run_case("mse", f_mse, 2, nd, (const int64_t[][4]){{5, 7}, {5, 7}}, -2, 2, NULL);
}
END_TEST

START_TEST(test_ops_linalg)
{
    int nd2[2] = {2, 2};
    run_case("matmul", f_matmul, 2, nd2, (const int64_t[][4]){{7, 33}, {33, 5}}, -1, 1, NULL);
    run_case("matmul 1x1", f_matmul, 2, nd2, (const int64_t[][4]){{1, 1}, {1, 1}}, -1, 1, NULL);
    int nd3[3] = {2, 2, 1};
    run_case("linear", f_linear, 3, nd3, (const int64_t[][4]){{16, 12}, {9, 12}, {9}}, -1, 1, NULL);
    run_case("linear no bias", f_linear_nobias, 2, nd2, (const int64_t[][4]){{3, 128}, {64, 128}}, -1, 1, NULL);
}
END_TEST

START_TEST(test_ops_rows)
{
    for (int trial = 0; trial < 4; trial++) {
        int nd = trial == 0 ? 1 : 2;
        int64_t s[1][4] = {{rand_int(1, 40), rand_int(1, 300)}};
        if (nd == 1) s[0][0] = rand_int(1, 500);
        run_case("softmax", f_softmax, 1, &nd, s, -5, 5, NULL);
        run_case("log_softmax", f_log_softmax, 1, &nd, s, -5, 5, NULL);
    }
    /* gather with repeated indices */
    int64_t rows = 6, cols = 9, k = 4;
    int64_t ishape[2] = {rows, k};
    struct tensor *idx = tensor_new(DTYPE_I64, DEVICE_CPU, 2, ishape);
    for (int64_t i = 0; i < rows * k; i++) ((int64_t *)tensor_data(idx))[i] = rand_int(0, cols - 1);
    int nd = 2;
    run_case("gather", f_gather, 1, &nd, (const int64_t[][4]){{rows, cols}}, -3, 3, idx);
    tensor_free(idx);
}
END_TEST

START_TEST(test_ops_reduce_shape)
{
    int nd3 = 3, nd2 = 2;
    const int64_t s3[][4] = {{4, 5, 6}};
    run_case("sum_dim 0", f_sum_dim0, 1, &nd3, s3, -3, 3, NULL);
    run_case("sum_dim -1 keepdim", f_sum_dim_last_keep, 1, &nd3, s3, -3, 3, NULL);
    run_case("mean_dim 1", f_mean_dim1, 1, &nd3, s3, -3, 3, NULL);
    run_case("reshape", f_reshape, 1, &nd3, (const int64_t[][4]){{3, 4, 2}}, -3, 3, NULL);
    run_case("slice", f_slice, 1, &nd2, (const int64_t[][4]){{6, 5}}, -3, 3, NULL);
    run_case("split", f_split, 1, &nd2, (const int64_t[][4]){{4, 7}}, -3, 3, NULL);
    int nds[3] = {2, 2, 2};
    run_case("cat dim 0", f_cat0, 3, nds, (const int64_t[][4]){{2, 5}, {1, 5}, {4, 5}}, -3, 3, NULL);
    run_case("cat dim 1", f_cat1, 3, nds, (const int64_t[][4]){{3, 2}, {3, 1}, {3, 6}}, -3, 3, NULL);
}
END_TEST

START_TEST(test_ops_distributions)
{
    int nd = 2;
    run_case("categorical_sample", f_categorical, 1, &nd, (const int64_t[][4]){{64, 6}}, -2, 2, NULL);
    int nd2[2] = {2, 1};
    run_case("gaussian_sample", f_gaussian_sample, 2, nd2, (const int64_t[][4]){{32, 3}, {3}}, -1, 1, NULL);
    int nd3[3] = {2, 1, 2};
    run_case("gaussian_log_prob", f_gaussian_log_prob, 3, nd3, (const int64_t[][4]){{8, 3}, {3}, {8, 3}}, -1, 1,
             NULL);
    int nd1 = 1;
    run_case("gaussian_entropy", f_gaussian_entropy, 1, &nd1, (const int64_t[][4]){{5}}, -1, 1, NULL);
}
END_TEST

START_TEST(test_ops_device_moves)
{
    int nd = 2;
    run_case("to cpu and back", f_to_and_back, 1, &nd, (const int64_t[][4]){{3, 4}}, -2, 2, NULL);
    /* the error for a device mismatch names both devices */
    int64_t s = 3;
    struct tensor *a = tensor_new(DTYPE_F32, DEVICE_CPU, 1, &s), *b = tensor_new(DTYPE_F32, DEVICE_CUDA, 1, &s);
    ck_assert_ptr_null(tensor_add(a, b));
    ck_assert_str_eq(tensor_last_error(), "tensor_add: device mismatch: cpu and cuda");
    tensor_free(a);
    tensor_free(b);
}
END_TEST

void add_op_tests(Suite *s)
{
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ops_unary);
    tcase_add_test(tc, test_ops_binary);
    tcase_add_test(tc, test_ops_linalg);
    tcase_add_test(tc, test_ops_rows);
    tcase_add_test(tc, test_ops_reduce_shape);
    tcase_add_test(tc, test_ops_distributions);
    tcase_add_test(tc, test_ops_device_moves);
    suite_add_tcase(s, tc);
}
