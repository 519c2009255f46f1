/* Every differentiable op of ops.h against a float64 reference written here
 * in plain loops: the forward values, and the analytic float32 backward
 * against central differences of the reference, on random shapes/values.
 * Built a second time with OPS_CUDA as test_ops_cuda: the same cases run on
 * CUDA and on the CPU, forward and backward compared (skips without a GPU). */
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

#define MAXIN 4
#define MAXOUT 4
#define TRIALS 12

/* A float64 array with a shape: inputs and outputs of the references. */
struct arg {
    int ndim;
    int64_t shape[4];
    int64_t n;
    double *v;
};

/* Per-trial op parameters chosen by the generator. */
struct params {
    int dim, n_pieces;
    bool keepdim, bias;
    int64_t sizes[4], a, b;
    float lo, hi, p;
    uint64_t rng;
    int64_t idx[512];
};

enum domain { ANY, POS, AWAY };   /* values in [-2,2], [0.5,2], or |x| >= 0.1 */

struct op_case {
    const char *name;
    int n_in;
    enum domain dom;
    /* fills the inputs' ndim/shape and the params */
    void (*gen)(uint64_t *rng, struct arg *in, struct params *p);
    /* the f32 op: writes outputs, returns their count (or -1) */
    int (*run)(struct tensor **in, struct tensor **out, const struct params *p);
    /* the f64 reference: allocates and fills outputs, returns their count */
    int (*ref)(const struct arg *in, struct arg *out, const struct params *p);
    /* inputs that are not differentiable (bit mask) */
    unsigned no_grad;
};

/* ---- small helpers ----------------------------------------------------------------- */

static double urand(uint64_t *rng) { return (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0); }
static int64_t irand(uint64_t *rng, int64_t lo, int64_t hi) { return lo + (int64_t)(rng_next(rng) % (uint64_t)(hi - lo + 1)); }

static void set_shape(struct arg *a, int ndim, const int64_t *shape)
{
    a->ndim = ndim;
    a->n = 1;
    for (int k = 0; k < ndim; k++) {
        a->shape[k] = shape[k];
        a->n *= shape[k];
    }
}

static void alloc_arg(struct arg *a, int ndim, const int64_t *shape)
{
    set_shape(a, ndim, shape);
    a->v = calloc((size_t)a->n + 1, sizeof(double));
}

/* Index into x (broadcast against out) of out's flat element i. */
static int64_t bidx(const struct arg *x, const struct arg *out, int64_t i)
{
    int64_t idx = 0, stride = 1;
    for (int k = out->ndim - 1, kx = x->ndim - 1; k >= 0; k--, kx--) {
        int64_t c = i % out->shape[k];
        i /= out->shape[k];
        if (kx >= 0) {
            if (x->shape[kx] != 1) idx += c * stride;
            stride *= x->shape[kx];
        }
    }
    return idx;
}

static void random_shape(uint64_t *rng, int *ndim, int64_t *shape, int min_nd, int max_nd)
{
    *ndim = (int)irand(rng, min_nd, max_nd);
    for (int k = 0; k < *ndim; k++) shape[k] = irand(rng, 1, 4);
}

/* ---- generators --------------------------------------------------------------------- */

static void gen_unary(uint64_t *rng, struct arg *in, struct params *p)
{
    int nd;
    int64_t s[4];
    random_shape(rng, &nd, s, 0, 4);
    set_shape(&in[0], nd, s);
    p->lo = -0.5f;
    p->hi = 0.7f;
    p->a = 0;
}

/* Two shapes that broadcast: start from one, knock dims to 1 or drop leading ones. */
static void gen_bcast(uint64_t *rng, struct arg *in, struct params *p)
{
    int nd;
    int64_t s[4], t[4];
    random_shape(rng, &nd, s, 1, 4);
    for (int i = 0; i < 2; i++) {
        int drop = (int)irand(rng, 0, nd);
        int tn = nd - drop;
        for (int k = 0; k < tn; k++) t[k] = irand(rng, 0, 2) == 0 ? 1 : s[drop + k];
        if (i == 0) set_shape(&in[0], nd, s);   /* keep one full so the output shape is s */
        else set_shape(&in[1], tn, t);
    }
    if (irand(rng, 0, 1)) {   /* swap which side broadcasts */
        struct arg tmp = in[0];
        in[0] = in[1];
        in[1] = tmp;
    }
    (void)p;
}

static void gen_same2(uint64_t *rng, struct arg *in, struct params *p)
{
    int nd;
    int64_t s[4];
    random_shape(rng, &nd, s, 1, 3);
    set_shape(&in[0], nd, s);
    set_shape(&in[1], nd, s);
    (void)p;
}

static void gen_matmul(uint64_t *rng, struct arg *in, struct params *p)
{
    int64_t m = irand(rng, 1, 5), k = irand(rng, 1, 5), n = irand(rng, 1, 5);
    set_shape(&in[0], 2, (int64_t[]){m, k});
    set_shape(&in[1], 2, (int64_t[]){k, n});
    (void)p;
}

static void gen_linear(uint64_t *rng, struct arg *in, struct params *p)
{
    int64_t b = irand(rng, 1, 5), i = irand(rng, 1, 5), o = irand(rng, 1, 5);
    if (irand(rng, 0, 2) == 0) set_shape(&in[0], 3, (int64_t[]){2, b, i});
    else set_shape(&in[0], 2, (int64_t[]){b, i});
    set_shape(&in[1], 2, (int64_t[]){o, i});
    set_shape(&in[2], 1, (int64_t[]){o});
    p->bias = irand(rng, 0, 1);
}

static void gen_rows(uint64_t *rng, struct arg *in, struct params *p)
{
    int nd;
    int64_t s[4];
    random_shape(rng, &nd, s, 1, 3);
    set_shape(&in[0], nd, s);
    (void)p;
}

static void gen_gather(uint64_t *rng, struct arg *in, struct params *p)
{
    int64_t r = irand(rng, 1, 4), c = irand(rng, 1, 5), k = irand(rng, 1, 4);
    if (irand(rng, 0, 1)) {
        set_shape(&in[0], 2, (int64_t[]){r, c});
        p->a = r;
    } else {
        set_shape(&in[0], 1, (int64_t[]){c});
        p->a = 0;   /* 1-D */
        r = 1;
    }
    p->b = k;
    for (int64_t i = 0; i < r * k; i++) p->idx[i] = irand(rng, 0, c - 1);
}

/* weight [N,D]; indices in p->idx[0..L), offsets in p->idx[256..256+B)
 * (sorted, first 0, empty bags and repeats included); p->dim = mean. */
#define OFF0 256
static void gen_bag(uint64_t *rng, struct arg *in, struct params *p)
{
    int64_t N = irand(rng, 1, 5), D = irand(rng, 1, 4), L = irand(rng, 0, 7), B = irand(rng, 1, 4);
    set_shape(&in[0], 2, (int64_t[]){N, D});
    p->a = L;
    p->b = B;
    for (int64_t i = 0; i < L; i++) p->idx[i] = irand(rng, 0, N - 1);
    p->idx[OFF0] = 0;
    for (int64_t b = 1; b < B; b++) p->idx[OFF0 + b] = irand(rng, p->idx[OFF0 + b - 1], L);
}

static void gen_bag_sum(uint64_t *rng, struct arg *in, struct params *p) { gen_bag(rng, in, p); p->dim = 0; }
static void gen_bag_mean(uint64_t *rng, struct arg *in, struct params *p) { gen_bag(rng, in, p); p->dim = 1; }

/* logits [R,C], targets in p->idx[0..R) */
static void gen_xent(uint64_t *rng, struct arg *in, struct params *p)
{
    int64_t R = irand(rng, 1, 5), C = irand(rng, 1, 5);
    set_shape(&in[0], 2, (int64_t[]){R, C});
    for (int64_t r = 0; r < R; r++) p->idx[r] = irand(rng, 0, C - 1);
}

static void gen_dim(uint64_t *rng, struct arg *in, struct params *p)
{
    int nd;
    int64_t s[4];
    random_shape(rng, &nd, s, 1, 4);
    set_shape(&in[0], nd, s);
    p->dim = (int)irand(rng, -nd, nd - 1);
    p->keepdim = irand(rng, 0, 1);
}

static void gen_split(uint64_t *rng, struct arg *in, struct params *p)
{
    int nd;
    int64_t s[4];
    random_shape(rng, &nd, s, 1, 4);
    int d = (int)irand(rng, 0, nd - 1);
    p->n_pieces = (int)irand(rng, 1, 3);
    s[d] = 0;
    for (int i = 0; i < p->n_pieces; i++) {
        p->sizes[i] = irand(rng, 0, 3);
        s[d] += p->sizes[i];
    }
    set_shape(&in[0], nd, s);
    p->dim = d;
}

static void gen_cat(uint64_t *rng, struct arg *in, struct params *p)
{
    int nd;
    int64_t s[4];
    random_shape(rng, &nd, s, 1, 4);
    int d = (int)irand(rng, 0, nd - 1);
    p->n_pieces = 3;
    for (int i = 0; i < 3; i++) {
        s[d] = irand(rng, 1, 3);
        set_shape(&in[i], nd, s);
    }
    p->dim = d - (irand(rng, 0, 1) ? nd : 0);
}

static void gen_slice(uint64_t *rng, struct arg *in, struct params *p)
{
    int nd;
    int64_t s[4];
    random_shape(rng, &nd, s, 1, 4);
    s[0] = irand(rng, 1, 5);
    set_shape(&in[0], nd, s);
    p->a = irand(rng, 0, s[0]);
    p->b = irand(rng, p->a, s[0]);
}

static void gen_reshape(uint64_t *rng, struct arg *in, struct params *p)
{
    int64_t a = irand(rng, 1, 4), b = irand(rng, 1, 4), c = irand(rng, 1, 3);
    set_shape(&in[0], 3, (int64_t[]){a, b, c});
    p->a = a * b;
    p->b = c;
}

static void gen_dropout(uint64_t *rng, struct arg *in, struct params *p)
{
    gen_rows(rng, in, p);
    p->p = (float)irand(rng, 1, 6) / 10.0f;
    p->rng = rng_next(rng);
}

static void gen_gauss(uint64_t *rng, struct arg *in, struct params *p)
{
    int64_t r = irand(rng, 1, 4), d = irand(rng, 1, 4);
    set_shape(&in[0], 2, (int64_t[]){r, d});
    if (irand(rng, 0, 1)) set_shape(&in[1], 1, (int64_t[]){d});
    else set_shape(&in[1], 2, (int64_t[]){r, d});
    set_shape(&in[2], 2, (int64_t[]){r, d});
    (void)p;
}

static void gen_entropy(uint64_t *rng, struct arg *in, struct params *p)
{
    int nd = (int)irand(rng, 1, 2);
    int64_t s[2] = {irand(rng, 1, 4), irand(rng, 1, 4)};
    set_shape(&in[0], nd, s);
    (void)p;
}

/* ---- f32 ops under test ---------------------------------------------------------------- */

#define RUN1(fn, expr) \
    static int fn(struct tensor **in, struct tensor **out, const struct params *p) { (void)p; out[0] = (expr); return out[0] ? 1 : -1; }

RUN1(run_matmul, tensor_matmul(in[0], in[1]))
RUN1(run_linear, tensor_linear(in[0], in[1], p->bias ? in[2] : NULL))
RUN1(run_add, tensor_add(in[0], in[1]))
RUN1(run_sub, tensor_sub(in[0], in[1]))
RUN1(run_mul, tensor_mul(in[0], in[1]))
RUN1(run_div, tensor_div(in[0], in[1]))
RUN1(run_minimum, tensor_minimum(in[0], in[1]))
RUN1(run_maximum, tensor_maximum(in[0], in[1]))
RUN1(run_add_scalar, tensor_add_scalar(in[0], 0.75f))
RUN1(run_mul_scalar, tensor_mul_scalar(in[0], -1.5f))
RUN1(run_neg, tensor_neg(in[0]))
RUN1(run_relu, tensor_relu(in[0]))
RUN1(run_tanh, tensor_tanh(in[0]))
RUN1(run_exp, tensor_exp(in[0]))
RUN1(run_log, tensor_log(in[0]))
RUN1(run_square, tensor_square(in[0]))
RUN1(run_sqrt, tensor_sqrt(in[0]))
RUN1(run_clamp, tensor_clamp(in[0], p->lo, p->hi))
RUN1(run_softmax, tensor_softmax(in[0]))
RUN1(run_log_softmax, tensor_log_softmax(in[0]))
RUN1(run_sum, tensor_sum(in[0]))
RUN1(run_mean, tensor_mean(in[0]))
RUN1(run_sum_dim, tensor_sum_dim(in[0], p->dim, p->keepdim))
RUN1(run_mean_dim, tensor_mean_dim(in[0], p->dim, p->keepdim))
RUN1(run_reshape, tensor_reshape(in[0], 2, (int64_t[]){p->a, p->b}))
RUN1(run_slice, tensor_slice(in[0], p->a, p->b))
RUN1(run_cat, tensor_cat(p->n_pieces, in, p->dim))
RUN1(run_mse, tensor_mse(in[0], in[1]))
RUN1(run_glp, tensor_gaussian_log_prob(in[0], in[1], in[2]))
RUN1(run_entropy, tensor_gaussian_entropy(in[0]))

static int run_gather(struct tensor **in, struct tensor **out, const struct params *p)
{
    int64_t r = p->a ? p->a : 1;
    struct tensor *idx = p->a ? tensor_from_data(DTYPE_I64, 2, (int64_t[]){r, p->b}, p->idx)
                              : tensor_from_data(DTYPE_I64, 1, (int64_t[]){p->b}, p->idx);
    struct tensor *on_dev = tensor_to(idx, in[0]->device);
    out[0] = tensor_gather(in[0], on_dev);
    tensor_free(on_dev);
    tensor_free(idx);
    return out[0] ? 1 : -1;
}

static int run_bag(struct tensor **in, struct tensor **out, const struct params *p)
{
    struct tensor *idx = tensor_from_data(DTYPE_I64, 1, (int64_t[]){p->a}, p->idx);
    struct tensor *off = tensor_from_data(DTYPE_I64, 1, (int64_t[]){p->b}, p->idx + OFF0);
    struct tensor *idx_d = tensor_to(idx, in[0]->device), *off_d = tensor_to(off, in[0]->device);
    out[0] = tensor_embedding_bag(in[0], idx_d, off_d, p->dim ? TENSOR_BAG_MEAN : TENSOR_BAG_SUM);
    struct tensor *all[] = {idx, off, idx_d, off_d};
    for (int i = 0; i < 4; i++) tensor_free(all[i]);
    return out[0] ? 1 : -1;
}

static int run_xent(struct tensor **in, struct tensor **out, const struct params *p)
{
    struct tensor *t = tensor_from_data(DTYPE_I64, 1, (int64_t[]){in[0]->shape[0]}, p->idx);
    struct tensor *td = tensor_to(t, in[0]->device);
    out[0] = tensor_cross_entropy(in[0], td);
    tensor_free(t);
    tensor_free(td);
    return out[0] ? 1 : -1;
}

static int run_split(struct tensor **in, struct tensor **out, const struct params *p)
{
    return tensor_split(in[0], p->dim, p->n_pieces, p->sizes, out) < 0 ? -1 : p->n_pieces;
}

static int run_dropout(struct tensor **in, struct tensor **out, const struct params *p)
{
    uint64_t s = p->rng;
    out[0] = tensor_dropout(in[0], p->p, true, &s);
    return out[0] ? 1 : -1;
}

/* ---- float64 references ------------------------------------------------------------------ */

static int ref_matmul(const struct arg *in, struct arg *out, const struct params *p)
{
    int64_t M = in[0].shape[0], K = in[0].shape[1], N = in[1].shape[1];
    alloc_arg(&out[0], 2, (int64_t[]){M, N});
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < K; k++) out[0].v[i * N + j] += in[0].v[i * K + k] * in[1].v[k * N + j];
    (void)p;
    return 1;
}

static int ref_linear(const struct arg *in, struct arg *out, const struct params *p)
{
    int64_t I = in[1].shape[1], O = in[1].shape[0], R = in[0].n / I;
    int64_t shape[3];
    memcpy(shape, in[0].shape, sizeof shape);
    shape[in[0].ndim - 1] = O;
    alloc_arg(&out[0], in[0].ndim, shape);
    for (int64_t r = 0; r < R; r++)
        for (int64_t o = 0; o < O; o++) {
            double s = p->bias ? in[2].v[o] : 0.0;
            for (int64_t i = 0; i < I; i++) s += in[0].v[r * I + i] * in[1].v[o * I + i];
            out[0].v[r * O + o] = s;
        }
    return 1;
}

static void bshape(const struct arg *a, const struct arg *b, struct arg *out)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t s[4];
    for (int k = 0; k < nd; k++) {
        int ka = a->ndim - nd + k, kb = b->ndim - nd + k;
        int64_t x = ka >= 0 ? a->shape[ka] : 1, y = kb >= 0 ? b->shape[kb] : 1;
        s[k] = x == 1 ? y : x;
    }
    alloc_arg(out, nd, s);
}

#define REF_BINARY(fn, EXPR)                                                          \
    static int fn(const struct arg *in, struct arg *out, const struct params *p)      \
    {                                                                                 \
        bshape(&in[0], &in[1], &out[0]);                                              \
        for (int64_t i = 0; i < out[0].n; i++) {                                      \
            double x = in[0].v[bidx(&in[0], &out[0], i)], y = in[1].v[bidx(&in[1], &out[0], i)]; \
            out[0].v[i] = (EXPR);                                                     \
        }                                                                             \
        (void)p;                                                                      \
        return 1;                                                                     \
    }

REF_BINARY(ref_add, x + y)
REF_BINARY(ref_sub, x - y)
REF_BINARY(ref_mul, x * y)
REF_BINARY(ref_div, x / y)
REF_BINARY(ref_minimum, x < y ? x : y)
REF_BINARY(ref_maximum, x > y ? x : y)

#define REF_UNARY(fn, EXPR)                                                           \
    static int fn(const struct arg *in, struct arg *out, const struct params *p)      \
    {                                                                                 \
        alloc_arg(&out[0], in[0].ndim, in[0].shape);                                  \
        for (int64_t i = 0; i < in[0].n; i++) {                                       \
            double x = in[0].v[i];                                                    \
            out[0].v[i] = (EXPR);                                                     \
        }                                                                             \
        (void)p;                                                                      \
        return 1;                                                                     \
    }

REF_UNARY(ref_add_scalar, x + 0.75)
REF_UNARY(ref_mul_scalar, x * -1.5)
REF_UNARY(ref_neg, -x)
REF_UNARY(ref_relu, x > 0 ? x : 0)
REF_UNARY(ref_tanh, tanh(x))
REF_UNARY(ref_exp, exp(x))
REF_UNARY(ref_log, log(x))
REF_UNARY(ref_square, x * x)
REF_UNARY(ref_sqrt, sqrt(x))
REF_UNARY(ref_clamp, x < p->lo ? p->lo : x > p->hi ? p->hi : x)
REF_UNARY(ref_entropy_elem, 0.5 + 0.5 * log(2 * M_PI) + x)

static int ref_softmax_any(const struct arg *in, struct arg *out, bool log_)
{
    alloc_arg(&out[0], in[0].ndim, in[0].shape);
    int64_t C = in[0].shape[in[0].ndim - 1], R = in[0].n / C;
    for (int64_t r = 0; r < R; r++) {
        const double *x = in[0].v + r * C;
        double s = 0;
        for (int64_t j = 0; j < C; j++) s += exp(x[j]);
        for (int64_t j = 0; j < C; j++) out[0].v[r * C + j] = log_ ? x[j] - log(s) : exp(x[j]) / s;
    }
    return 1;
}

static int ref_softmax(const struct arg *in, struct arg *out, const struct params *p) { (void)p; return ref_softmax_any(in, out, false); }
static int ref_log_softmax(const struct arg *in, struct arg *out, const struct params *p) { (void)p; return ref_softmax_any(in, out, true); }

static int ref_gather(const struct arg *in, struct arg *out, const struct params *p)
{
    int64_t C = in[0].shape[in[0].ndim - 1], R = p->a ? p->a : 1, K = p->b;
    if (p->a) alloc_arg(&out[0], 2, (int64_t[]){R, K});
    else alloc_arg(&out[0], 1, (int64_t[]){K});
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < K; k++) out[0].v[r * K + k] = in[0].v[r * C + p->idx[r * K + k]];
    return 1;
}

static int ref_bag(const struct arg *in, struct arg *out, const struct params *p)
{
    int64_t D = in[0].shape[1], L = p->a, B = p->b;
    alloc_arg(&out[0], 2, (int64_t[]){B, D});
    for (int64_t b = 0; b < B; b++) {
        int64_t lo = p->idx[OFF0 + b], hi = b + 1 < B ? p->idx[OFF0 + b + 1] : L;
        for (int64_t i = lo; i < hi; i++)
            for (int64_t d = 0; d < D; d++) out[0].v[b * D + d] += in[0].v[p->idx[i] * D + d];
        if (p->dim && hi > lo)
            for (int64_t d = 0; d < D; d++) out[0].v[b * D + d] /= (double)(hi - lo);
    }
    return 1;
}

static int ref_xent(const struct arg *in, struct arg *out, const struct params *p)
{
    int64_t R = in[0].shape[0], C = in[0].shape[1];
    alloc_arg(&out[0], 0, NULL);
    for (int64_t r = 0; r < R; r++) {
        double s = 0;
        for (int64_t j = 0; j < C; j++) s += exp(in[0].v[r * C + j]);
        out[0].v[0] -= in[0].v[r * C + p->idx[r]] - log(s);
    }
    out[0].v[0] /= (double)R;
    return 1;
}

static int ref_sum_any(const struct arg *in, struct arg *out, bool mean)
{
    alloc_arg(&out[0], 0, NULL);
    for (int64_t i = 0; i < in[0].n; i++) out[0].v[0] += in[0].v[i];
    if (mean) out[0].v[0] /= (double)in[0].n;
    return 1;
}

static int ref_sum(const struct arg *in, struct arg *out, const struct params *p) { (void)p; return ref_sum_any(in, out, false); }
static int ref_mean(const struct arg *in, struct arg *out, const struct params *p) { (void)p; return ref_sum_any(in, out, true); }

static int ref_dim_any(const struct arg *in, struct arg *out, const struct params *p, bool mean)
{
    int nd = in[0].ndim, d = p->dim < 0 ? p->dim + nd : p->dim, ond = 0;
    int64_t os[4];
    for (int k = 0; k < nd; k++)
        if (k != d) os[ond++] = in[0].shape[k];
        else if (p->keepdim) os[ond++] = 1;
    alloc_arg(&out[0], ond, os);
    int64_t outer = 1, inner = 1, D = in[0].shape[d];
    for (int k = 0; k < d; k++) outer *= in[0].shape[k];
    for (int k = d + 1; k < nd; k++) inner *= in[0].shape[k];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < D; j++)
            for (int64_t i = 0; i < inner; i++) out[0].v[o * inner + i] += in[0].v[(o * D + j) * inner + i] / (mean ? (double)D : 1.0);
    return 1;
}

static int ref_sum_dim(const struct arg *in, struct arg *out, const struct params *p) { return ref_dim_any(in, out, p, false); }
static int ref_mean_dim(const struct arg *in, struct arg *out, const struct params *p) { return ref_dim_any(in, out, p, true); }

static int ref_reshape(const struct arg *in, struct arg *out, const struct params *p)
{
    alloc_arg(&out[0], 2, (int64_t[]){p->a, p->b});
    memcpy(out[0].v, in[0].v, (size_t)in[0].n * sizeof(double));
    return 1;
}

/* Copies piece [off, off+len) of dim d of x into y. */
static void ref_piece(const struct arg *x, int d, int64_t off, int64_t len, double *y, bool to_piece)
{
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < d; k++) outer *= x->shape[k];
    for (int k = d + 1; k < x->ndim; k++) inner *= x->shape[k];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < len; j++)
            for (int64_t i = 0; i < inner; i++) {
                double *w = &x->v[(o * x->shape[d] + off + j) * inner + i], *q = &y[(o * len + j) * inner + i];
                if (to_piece) *q = *w;
                else *w = *q;
            }
}

static int ref_slice(const struct arg *in, struct arg *out, const struct params *p)
{
    int64_t s[4];
    memcpy(s, in[0].shape, sizeof s);
    s[0] = p->b - p->a;
    alloc_arg(&out[0], in[0].ndim, s);
    ref_piece(&in[0], 0, p->a, p->b - p->a, out[0].v, true);
    return 1;
}

static int ref_split(const struct arg *in, struct arg *out, const struct params *p)
{
    int64_t off = 0;
    for (int i = 0; i < p->n_pieces; i++) {
        int64_t s[4];
        memcpy(s, in[0].shape, sizeof s);
        s[p->dim] = p->sizes[i];
        alloc_arg(&out[i], in[0].ndim, s);
        ref_piece(&in[0], p->dim, off, p->sizes[i], out[i].v, true);
        off += p->sizes[i];
    }
    return p->n_pieces;
}

static int ref_cat(const struct arg *in, struct arg *out, const struct params *p)
{
    int nd = in[0].ndim, d = p->dim < 0 ? p->dim + nd : p->dim;
    int64_t s[4];
    memcpy(s, in[0].shape, sizeof s);
    s[d] = 0;
    for (int i = 0; i < p->n_pieces; i++) s[d] += in[i].shape[d];
    alloc_arg(&out[0], nd, s);
    int64_t off = 0;
    for (int i = 0; i < p->n_pieces; i++) {
        ref_piece(&out[0], d, off, in[i].shape[d], in[i].v, false);
        off += in[i].shape[d];
    }
    return 1;
}

static int ref_dropout(const struct arg *in, struct arg *out, const struct params *p)
{
    alloc_arg(&out[0], in[0].ndim, in[0].shape);
    uint64_t s = p->rng, seed = rng_next(&s);
    for (int64_t i = 0; i < in[0].n; i++) {
        bool keep = rng_uniform_at(seed, (uint64_t)i) >= p->p;
        out[0].v[i] = keep ? in[0].v[i] / (1.0 - (double)p->p) : 0.0;
    }
    return 1;
}

static int ref_mse(const struct arg *in, struct arg *out, const struct params *p)
{
    alloc_arg(&out[0], 0, NULL);
    for (int64_t i = 0; i < in[0].n; i++) out[0].v[0] += (in[0].v[i] - in[1].v[i]) * (in[0].v[i] - in[1].v[i]);
    out[0].v[0] /= (double)in[0].n;
    (void)p;
    return 1;
}

static int ref_glp(const struct arg *in, struct arg *out, const struct params *p)
{
    int64_t R = in[0].shape[0], D = in[0].shape[1];
    alloc_arg(&out[0], 1, &R);
    for (int64_t r = 0; r < R; r++)
        for (int64_t d = 0; d < D; d++) {
            double mu = in[0].v[r * D + d], ls = in[1].v[in[1].ndim == 1 ? d : r * D + d], x = in[2].v[r * D + d];
            double sd = exp(ls);
            out[0].v[r] += -(x - mu) * (x - mu) / (2 * sd * sd) - ls - 0.5 * log(2 * M_PI);
        }
    (void)p;
    return 1;
}

static int ref_entropy(const struct arg *in, struct arg *out, const struct params *p)
{
    struct arg tmp[1];
    ref_entropy_elem(in, tmp, p);
    struct params q = {.dim = -1, .keepdim = false};
    ref_dim_any(tmp, out, &q, false);
    free(tmp[0].v);
    return 1;
}

/* ---- the table ------------------------------------------------------------------------- */

static const struct op_case cases[] = {
    {"matmul", 2, ANY, gen_matmul, run_matmul, ref_matmul, 0},
    {"linear", 3, ANY, gen_linear, run_linear, ref_linear, 0},
    {"add", 2, ANY, gen_bcast, run_add, ref_add, 0},
    {"sub", 2, ANY, gen_bcast, run_sub, ref_sub, 0},
    {"mul", 2, ANY, gen_bcast, run_mul, ref_mul, 0},
    {"div", 2, POS, gen_bcast, run_div, ref_div, 0},
    {"minimum", 2, ANY, gen_bcast, run_minimum, ref_minimum, 0},
    {"maximum", 2, ANY, gen_bcast, run_maximum, ref_maximum, 0},
    {"add_scalar", 1, ANY, gen_unary, run_add_scalar, ref_add_scalar, 0},
    {"mul_scalar", 1, ANY, gen_unary, run_mul_scalar, ref_mul_scalar, 0},
    {"neg", 1, ANY, gen_unary, run_neg, ref_neg, 0},
    {"relu", 1, AWAY, gen_unary, run_relu, ref_relu, 0},
    {"tanh", 1, ANY, gen_unary, run_tanh, ref_tanh, 0},
    {"exp", 1, ANY, gen_unary, run_exp, ref_exp, 0},
    {"log", 1, POS, gen_unary, run_log, ref_log, 0},
    {"square", 1, ANY, gen_unary, run_square, ref_square, 0},
    {"sqrt", 1, POS, gen_unary, run_sqrt, ref_sqrt, 0},
    {"clamp", 1, AWAY, gen_unary, run_clamp, ref_clamp, 0},
    {"softmax", 1, ANY, gen_rows, run_softmax, ref_softmax, 0},
    {"log_softmax", 1, ANY, gen_rows, run_log_softmax, ref_log_softmax, 0},
    {"gather", 1, ANY, gen_gather, run_gather, ref_gather, 0},
    {"embedding_bag_sum", 1, ANY, gen_bag_sum, run_bag, ref_bag, 0},
    {"embedding_bag_mean", 1, ANY, gen_bag_mean, run_bag, ref_bag, 0},
    {"cross_entropy", 1, ANY, gen_xent, run_xent, ref_xent, 0},
    {"sum", 1, ANY, gen_unary, run_sum, ref_sum, 0},
    {"mean", 1, ANY, gen_unary, run_mean, ref_mean, 0},
    {"sum_dim", 1, ANY, gen_dim, run_sum_dim, ref_sum_dim, 0},
    {"mean_dim", 1, ANY, gen_dim, run_mean_dim, ref_mean_dim, 0},
    {"reshape", 1, ANY, gen_reshape, run_reshape, ref_reshape, 0},
    {"slice", 1, ANY, gen_slice, run_slice, ref_slice, 0},
    {"split", 1, ANY, gen_split, run_split, ref_split, 0},
    {"cat", 3, ANY, gen_cat, run_cat, ref_cat, 0},
    {"dropout", 1, ANY, gen_dropout, run_dropout, ref_dropout, 0},
    {"mse", 2, ANY, gen_same2, run_mse, ref_mse, 0},
    {"gaussian_log_prob", 3, ANY, gen_gauss, run_glp, ref_glp, 0},
    {"gaussian_entropy", 1, ANY, gen_entropy, run_entropy, ref_entropy, 0},
};
#define N_CASES ((int)(sizeof cases / sizeof *cases))

/* Values in the op's domain, rounded to float so both sides see the same input.
 * AWAY keeps clear of the kinks of relu (0) and clamp (-0.5, 0.7). */
static double draw(uint64_t *rng, enum domain dom)
{
    for (;;) {
        double v = dom == POS ? 0.5 + 1.5 * urand(rng) : -2.0 + 4.0 * urand(rng);
        v = (double)(float)v;
        if (dom == AWAY && (fabs(v) < 0.1 || fabs(v + 0.5) < 0.1 || fabs(v - 0.7) < 0.1)) continue;
        return v;
    }
}

/* min/max: keep the two sides apart so the choice is stable under the step. */
static bool too_close(const struct op_case *c, const struct arg *in)
{
    if (strcmp(c->name, "minimum") && strcmp(c->name, "maximum")) return false;
    struct arg out;
    bshape(&in[0], &in[1], &out);
    bool close = false;
    for (int64_t i = 0; i < out.n; i++)
        if (fabs(in[0].v[bidx(&in[0], &out, i)] - in[1].v[bidx(&in[1], &out, i)]) < 0.1) close = true;
    free(out.v);
    return close;
}

/* Draws a trial's shapes, params and values; t[i] are the f32 inputs (CPU). */
static void make_inputs(const struct op_case *c, uint64_t *rng, struct arg *in, struct params *p, struct tensor **t)
{
    c->gen(rng, in, p);
    do {
        for (int i = 0; i < c->n_in; i++) {
            free(in[i].v);
            alloc_arg(&in[i], in[i].ndim, in[i].shape);
            for (int64_t j = 0; j < in[i].n; j++) in[i].v[j] = draw(rng, c->dom);
        }
    } while (too_close(c, in));
    for (int i = 0; i < c->n_in; i++) {
        float *f = malloc((size_t)in[i].n * sizeof(float) + 4);
        for (int64_t j = 0; j < in[i].n; j++) f[j] = (float)in[i].v[j];
        t[i] = tensor_from_f32(in[i].ndim, in[i].shape, f);
        free(f);
        tensor_set_requires_grad(t[i], !(c->no_grad >> i & 1));
    }
}

__attribute__((unused)) static double weighted_ref(const struct op_case *c, const struct arg *in, const struct params *p, double *const *w)
{
    struct arg out[MAXOUT];
    int n = c->ref(in, out, p);
    double s = 0;
    for (int k = 0; k < n; k++) {
        for (int64_t i = 0; i < out[k].n; i++) s += out[k].v[i] * w[k][i];
        free(out[k].v);
    }
    return s;
}

__attribute__((unused)) static void check_case(const struct op_case *c, uint64_t seed)
{
    uint64_t rng = seed;
    for (int trial = 0; trial < TRIALS; trial++) {
        struct arg in[MAXIN] = {0};
        struct params p = {0};
        struct tensor *t[MAXIN], *out[MAXOUT];
        make_inputs(c, &rng, in, &p, t);

        /* f32 forward */
        int n_out = c->run(t, out, &p);
        ck_assert_msg(n_out > 0, "%s: %s", c->name, tensor_last_error());

        /* forward against the reference */
        struct arg ref[MAXOUT];
        ck_assert_int_eq(c->ref(in, ref, &p), n_out);
        double *w[MAXOUT];
        struct tensor *wt[MAXOUT];
        struct ag_edge roots[MAXOUT];
        for (int k = 0; k < n_out; k++) {
            ck_assert_msg(out[k]->ndim == ref[k].ndim, "%s: output %d ndim %d, expected %d", c->name, k, out[k]->ndim, ref[k].ndim);
            for (int d = 0; d < ref[k].ndim; d++) ck_assert_int_eq(out[k]->shape[d], ref[k].shape[d]);
            const float *y = tensor_f32(out[k]);
            for (int64_t i = 0; i < ref[k].n; i++)
                ck_assert_msg(fabs(y[i] - ref[k].v[i]) <= 1e-5 + 1e-5 * fabs(ref[k].v[i]),
                              "%s: forward [%lld] = %g, reference %g", c->name, (long long)i, y[i], ref[k].v[i]);
            /* random projection of the outputs: the backward seed */
            w[k] = malloc((size_t)ref[k].n * sizeof(double) + 8);
            float *wf = malloc((size_t)ref[k].n * sizeof(float) + 4);
            for (int64_t i = 0; i < ref[k].n; i++) wf[i] = (float)(w[k][i] = (double)(float)(-1.0 + 2.0 * urand(&rng)));
            wt[k] = tensor_from_f32(ref[k].ndim, ref[k].shape, wf);
            free(wf);
            free(ref[k].v);
            roots[k] = tensor_grad_edge(out[k]);
        }

        /* analytic backward */
        ck_assert_msg(autograd_run(n_out, roots, wt, NULL, false) == 0, "%s: %s", c->name, tensor_last_error());

        /* central differences of the float64 reference */
        const double h = 1e-6;
        for (int i = 0; i < c->n_in; i++) {
            if (c->no_grad >> i & 1) continue;
            bool used = true;
            if (!strcmp(c->name, "linear") && i == 2 && !p.bias) used = false;
            const float *g = t[i]->grad ? tensor_f32(t[i]->grad) : NULL;
            if (in[i].n) ck_assert_msg(g || !used, "%s: no gradient for input %d", c->name, i);
            for (int64_t j = 0; j < in[i].n && used; j++) {
                double keep = in[i].v[j];
                in[i].v[j] = keep + h;
                double lp = weighted_ref(c, in, &p, w);
                in[i].v[j] = keep - h;
                double lm = weighted_ref(c, in, &p, w);
                in[i].v[j] = keep;
                double num = (lp - lm) / (2 * h);
                ck_assert_msg(fabs(g[j] - num) <= 2e-5 + 1e-4 * fabs(num),
                              "%s trial %d: d/d input %d [%lld]: analytic %.7g, numeric %.7g", c->name, trial, i,
                              (long long)j, g[j], num);
            }
        }
        for (int k = 0; k < n_out; k++) {
            free(w[k]);
            tensor_free(wt[k]);
            tensor_free(out[k]);
            ag_node_free(roots[k].node);
        }
        for (int i = 0; i < c->n_in; i++) {
            tensor_free(t[i]);
            free(in[i].v);
        }
    }
}

#ifndef OPS_CUDA

START_TEST(test_op_grad)
{
    check_case(&cases[_i], 0x1234 + (uint64_t)_i * 7919);
}
END_TEST

int main(void)
{
    return KIT_RUN("tensor_ops_grad",
             { "finite_differences", 0, .loop = { test_op_grad, 0, N_CASES } });
}

#else /* OPS_CUDA: the same cases on CUDA against the CPU */

static void assert_same(const char *what, const struct tensor *cpu_t, const struct tensor *dev_t)
{
    ck_assert_msg(dev_t->device == DEVICE_CUDA, "%s: result is not on cuda", what);
    ck_assert_msg(tensor_same_shape(cpu_t, dev_t), "%s: shapes differ", what);
    float *h = malloc((size_t)dev_t->numel * sizeof(float) + 4);
    tensor_copy_to_host(dev_t, h);
    for (int64_t i = 0; i < cpu_t->numel; i++) {
        float want = tensor_f32(cpu_t)[i];
        ck_assert_msg(fabsf(h[i] - want) <= 1e-5f + 1e-4f * fabsf(want), "%s [%lld]: cuda %g, cpu %g", what,
                      (long long)i, h[i], want);
    }
    free(h);
}

static void run_on(const struct op_case *c, struct tensor **t, const struct params *p, struct tensor **w,
                   struct tensor **out, int *n_out)
{
    *n_out = c->run(t, out, p);
    ck_assert_msg(*n_out > 0, "%s on %s: %s", c->name, device_name(t[0]->device), tensor_last_error());
    struct ag_edge roots[MAXOUT];
    struct tensor *wd[MAXOUT];
    for (int k = 0; k < *n_out; k++) {
        roots[k] = tensor_grad_edge(out[k]);
        wd[k] = tensor_to(w[k], t[0]->device);
    }
    ck_assert_msg(autograd_run(*n_out, roots, wd, NULL, false) == 0, "%s: %s", c->name, tensor_last_error());
    for (int k = 0; k < *n_out; k++) {
        ag_node_free(roots[k].node);
        tensor_free(wd[k]);
    }
}

static void compare_case(const struct op_case *c, uint64_t seed)
{
    uint64_t rng = seed;
    for (int trial = 0; trial < TRIALS; trial++) {
        struct arg in[MAXIN] = {0};
        struct params p = {0};
        struct tensor *t[MAXIN], *td[MAXIN], *out[MAXOUT], *outd[MAXOUT], *w[MAXOUT];
        make_inputs(c, &rng, in, &p, t);
        for (int i = 0; i < c->n_in; i++) {
            td[i] = tensor_clone_to(t[i], DEVICE_CUDA);
            tensor_set_requires_grad(td[i], t[i]->requires_grad);
        }
        struct arg ref[MAXOUT];
        int n_ref = c->ref(in, ref, &p);
        for (int k = 0; k < n_ref; k++) {
            w[k] = tensor_new(DTYPE_F32, DEVICE_CPU, ref[k].ndim, ref[k].shape);
            for (int64_t i = 0; i < ref[k].n; i++) tensor_f32(w[k])[i] = (float)(-1.0 + 2.0 * urand(&rng));
            free(ref[k].v);
        }
        int n_out, n_outd;
        run_on(c, t, &p, w, out, &n_out);
        run_on(c, td, &p, w, outd, &n_outd);
        ck_assert_int_eq(n_out, n_outd);
        char what[96];
        for (int k = 0; k < n_out; k++) {
            snprintf(what, sizeof what, "%s forward %d", c->name, k);
            assert_same(what, out[k], outd[k]);
        }
        for (int i = 0; i < c->n_in; i++) {
            ck_assert_msg(!t[i]->grad == !td[i]->grad, "%s: gradient %d on one device only", c->name, i);
            snprintf(what, sizeof what, "%s gradient %d", c->name, i);
            if (t[i]->grad) assert_same(what, t[i]->grad, td[i]->grad);
        }
        for (int k = 0; k < n_out; k++) {
            tensor_free(out[k]);
            tensor_free(outd[k]);
            tensor_free(w[k]);
        }
        for (int i = 0; i < c->n_in; i++) {
            tensor_free(t[i]);
            tensor_free(td[i]);
            free(in[i].v);
        }
    }
}

START_TEST(test_op_cuda)
{
    compare_case(&cases[_i], 0x5678 + (uint64_t)_i * 7919);
}
END_TEST

/* tensor_to is recorded: the gradient comes back to the CPU leaf. */
START_TEST(test_to_device_gradient)
{
    struct tensor *x = tensor_from_f32(1, (int64_t[]){3}, (float[]){1.0f, -2.0f, 0.5f});
    tensor_set_requires_grad(x, true);
    struct tensor *xd = tensor_to(x, DEVICE_CUDA);
    ck_assert_ptr_nonnull(xd);
    ck_assert_int_eq(xd->device, DEVICE_CUDA);
    struct tensor *sq = tensor_square(xd), *back = tensor_to(sq, DEVICE_CPU), *loss = tensor_sum(back);
    ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
    ck_assert_int_eq(x->grad->device, DEVICE_CPU);
    const float want[3] = {2.0f, -4.0f, 1.0f};
    for (int i = 0; i < 3; i++) ck_assert_float_eq_tol(tensor_f32(x->grad)[i], want[i], 1e-6f);
    struct tensor *all[] = {x, xd, sq, back, loss};
    for (int i = 0; i < 5; i++) tensor_free(all[i]);
}
END_TEST

/* A policy moved to CUDA computes what it computes on the CPU. */
START_TEST(test_policy_on_cuda)
{
    uint64_t r1 = 21, r2 = 21;
    struct nn_policy_config cfg = {.obs_dim = 4, .act_dim = 3, .n_hidden = 2, .hidden = {16, 16}, .act = NN_TANH,
                                   .head = NN_HEAD_CATEGORICAL, .value_head = true};
    struct nn_module *pc = nn_policy_new(&cfg, &r1), *pd = nn_policy_new(&cfg, &r2);
    ck_assert_int_eq(nn_module_to(pd, DEVICE_CUDA), 0);
    struct tensor *obs = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){5, 4});
    for (int i = 0; i < 20; i++) tensor_f32(obs)[i] = sinf((float)i);
    struct tensor *obsd = tensor_to(obs, DEVICE_CUDA);
    struct tensor *oc[NN_MAX_IO], *od[NN_MAX_IO];
    int nc, nd;
    ck_assert_int_eq(nn_forward(pc, 1, &obs, &nc, oc), 0);
    ck_assert_int_eq(nn_forward(pd, 1, &obsd, &nd, od), 0);
    ck_assert_int_eq(nc, nd);
    for (int k = 0; k < nc; k++) assert_same("policy output", oc[k], od[k]);
    struct tensor *lc = tensor_sum(oc[0]), *ld = tensor_sum(od[0]);
    ck_assert_int_eq(tensor_backward(lc, NULL, false), 0);
    ck_assert_int_eq(tensor_backward(ld, NULL, false), 0);
    for (int i = 0; i < pc->n_params; i++) {
        ck_assert(!pc->params[i]->grad == !pd->params[i]->grad);
        if (pc->params[i]->grad) assert_same("policy gradient", pc->params[i]->grad, pd->params[i]->grad);
    }
    for (int k = 0; k < nc; k++) {
        tensor_free(oc[k]);
        tensor_free(od[k]);
    }
    struct tensor *all[] = {obs, obsd, lc, ld};
    for (int i = 0; i < 4; i++) tensor_free(all[i]);
    nn_module_free(pc);
    nn_module_free(pd);
}
END_TEST

/* A slice of any dtype on CUDA holds the bytes of the same rows on the CPU. */
START_TEST(test_slice_dtypes_cuda)
{
    for (int dt = 0; dt < DTYPE_COUNT; dt++) {
        struct tensor *x = tensor_new((enum dtype)dt, DEVICE_CPU, 2, (int64_t[]){4, 3});
        unsigned char *b = tensor_data(x);
        for (size_t i = 0; i < tensor_nbytes(x); i++) b[i] = (unsigned char)(i % 251 + 1);
        struct tensor *xd = tensor_clone_to(x, DEVICE_CUDA);
        struct tensor *y = tensor_slice(x, 1, 3), *yd = tensor_slice(xd, 1, 3);
        ck_assert_msg(y && yd, "%s: %s", dtype_name(dt), tensor_last_error());
        ck_assert_int_eq(yd->device, DEVICE_CUDA);
        ck_assert(tensor_same_shape(y, yd));
        unsigned char *h = malloc(tensor_nbytes(yd));
        tensor_copy_to_host(yd, h);
        ck_assert_msg(memcmp(h, tensor_data(y), tensor_nbytes(y)) == 0, "%s: cuda slice differs", dtype_name(dt));
        free(h);
        struct tensor *all[] = {x, xd, y, yd};
        for (int k = 0; k < 4; k++) tensor_free(all[k]);
    }
}
END_TEST

int main(void)
{
    if (!tensor_cuda_available()) {
        printf("test_ops_cuda: no CUDA device, skipped\n");
        return 77;
    }
    Suite *s = suite_create("tensor_ops_cuda");
    TCase *tc = tcase_create("cuda_vs_cpu");
    tcase_add_loop_test(tc, test_op_cuda, 0, N_CASES);
    tcase_add_test(tc, test_to_device_gradient);
    tcase_add_test(tc, test_policy_on_cuda);
    tcase_add_test(tc, test_slice_dtypes_cuda);
    suite_add_tcase(s, tc);
    return kit_run_suite(s);
}

#endif
