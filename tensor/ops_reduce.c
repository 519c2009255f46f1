/* Row and reduction ops (ops.h): softmax, log_softmax and gather along the
 * last dim, sums and means over everything or one dim. */
#include <math.h>
#include <stdlib.h>

#include "common/check.h"
#include "tensor/ops_internal.h"

/* ---- softmax / log_softmax ------------------------------------------------------- */

/* saved: the output y; iv[0] = 1 for log_softmax */
static int softmax_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    struct tensor *g = gout[0], *y = c->saved[0];
    if (!g || !op_wants(n, 0)) return 0;
    if (op_check_saved(n) < 0) return -1;
    int64_t cols = y->shape[y->ndim - 1], rows = cols ? y->numel / cols : 0;
    gin[0] = op_empty_like(y);
    if (!y->numel) return 0;
    if (c->iv[0]) op_be(y)->log_softmax_backward(op_f32(gin[0]), op_f32(g), op_f32(y), rows, cols);
    else op_be(y)->softmax_backward(op_f32(gin[0]), op_f32(g), op_f32(y), rows, cols);
    return 0;
}

static struct tensor *softmax_op(const char *who, struct tensor *x, bool log)
{
    if (op_check_f32(who, x) < 0) return NULL;
    if (x->ndim < 1) return tensor_error("%s: expected at least 1 dim, got a scalar", who);
    struct tensor *sx = tensor_snapshot(x), *y = op_empty_like(x);
    int64_t cols = x->shape[x->ndim - 1], rows = cols ? x->numel / cols : 0;
    if (x->numel) {
        if (log) op_be(x)->log_softmax(op_f32(y), op_f32(sx), rows, cols);
        else op_be(x)->softmax(op_f32(y), op_f32(sx), rows, cols);
    }
    tensor_free(sx);
    if (op_needs_grad(1, &x)) {
        struct op_ctx *c = op_ctx_new();
        c->iv[0] = log;
        op_ctx_save(c, tensor_snapshot(y));
        op_record(log ? "LogSoftmaxBackward" : "SoftmaxBackward", y, 1, &x, c, softmax_backward);
    }
    return y;
}

struct tensor *tensor_softmax(struct tensor *x) { return softmax_op("tensor_softmax", x, false); }
struct tensor *tensor_log_softmax(struct tensor *x) { return softmax_op("tensor_log_softmax", x, true); }

/* ---- gather ------------------------------------------------------------------------ */

/* saved: the index; x's shape in ndim/shape[0] */
static int gather_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    struct tensor *g = gout[0], *idx = c->saved[0];
    if (!g || !op_wants(n, 0)) return 0;
    if (op_check_saved(n) < 0) return -1;
    int64_t cols = c->shape[0][c->ndim[0] - 1], rows = c->iv[0], k = c->iv[1];
    gin[0] = op_empty(g->device, c->ndim[0], c->shape[0]);
    if (rows > 0 && cols > 0) op_be(g)->gather_backward(op_f32(gin[0]), op_f32(g), tensor_data(idx), rows, cols, k);
    return 0;
}

struct tensor *tensor_gather(struct tensor *x, struct tensor *index)
{
    const char *who = "tensor_gather";
    if (op_check_f32(who, x) < 0) return NULL;
    if (!index) return tensor_error("%s: index is NULL", who);
    if (index->dtype != DTYPE_I64)
        return tensor_error("%s: index dtype %s (expected i64)", who, dtype_name(index->dtype));
    if (x->device != index->device)
        return tensor_error("%s: device mismatch: %s and %s", who, device_name(x->device), device_name(index->device));
    char s1[96], s2[96];
    if (x->ndim < 1 || x->ndim > 2 || index->ndim != x->ndim || (x->ndim == 2 && index->shape[0] != x->shape[0]))
        return tensor_error("%s: shape mismatch: %s and index %s", who, shape_str(x->ndim, x->shape, s1, sizeof s1),
                            shape_str(index->ndim, index->shape, s2, sizeof s2));
    int64_t cols = x->shape[x->ndim - 1], rows = x->ndim == 2 ? x->shape[0] : 1;
    int64_t k = index->shape[index->ndim - 1];
    struct tensor *si = tensor_snapshot(index);
    int64_t *host = trib_xmalloc((size_t)index->numel * sizeof *host + 1);
    tensor_copy_to_host(si, host);
    for (int64_t i = 0; i < index->numel; i++)
        if (host[i] < 0 || host[i] >= cols) {
            long long bad = (long long)host[i];
            free(host);
            tensor_free(si);
            return tensor_error("%s: index %lld is out of range for size %lld", who, bad, (long long)cols);
        }
    free(host);
    struct tensor *sx = tensor_snapshot(x);
    struct tensor *y = op_empty(x->device, index->ndim, index->shape);
    if (y->numel) op_be(x)->gather(op_f32(y), op_f32(sx), tensor_data(si), rows, cols, k);
    tensor_free(sx);
    if (op_needs_grad(1, &x)) {
        struct op_ctx *c = op_ctx_new();
        op_ctx_shape(c, 0, x);
        c->iv[0] = rows;
        c->iv[1] = k;
        op_ctx_save(c, si);
        si = NULL;
        op_record("GatherBackward", y, 1, &x, c, gather_backward);
    }
    tensor_free(si);
    return y;
}

/* ---- sums and means ------------------------------------------------------------------ */

/* x's shape in ndim/shape[0]; a = scale (1 or 1/count); keepdim shape of the
 * output in ndim/shape[1] */
static int reduce_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    struct tensor *g = gout[0];
    if (!g || !op_wants(n, 0)) return 0;
    struct tensor *gk = k_view(g, c->ndim[1], c->shape[1]);
    gin[0] = k_expand(gk, c->ndim[0], c->shape[0], c->a);
    tensor_free(gk);
    return 0;
}

/* Sums (or averages) x over dim, or over every dim when dim == DIM_ALL. */
#define DIM_ALL (-100)
static struct tensor *reduce_op(const char *who, const char *name, struct tensor *x, int dim,
                                bool keepdim, bool mean)
{
    if (op_check_f32(who, x) < 0) return NULL;
    int64_t kshape[TENSOR_MAX_DIMS], oshape[TENSOR_MAX_DIMS];
    int ond = 0;
    int64_t count = 1;
    if (dim == DIM_ALL) {
        for (int k = 0; k < x->ndim; k++) kshape[k] = 1;
        count = x->numel;
    } else {
        int d = dim < 0 ? dim + x->ndim : dim;
        if (d < 0 || d >= x->ndim) {
            char s[96];
            return tensor_error("%s: dim %d is out of range for %s", who, dim, shape_str(x->ndim, x->shape, s, sizeof s));
        }
        for (int k = 0; k < x->ndim; k++) {
            kshape[k] = k == d ? 1 : x->shape[k];
            if (k != d || keepdim) oshape[ond++] = kshape[k];
        }
        count = x->shape[d];
    }
    float scale = mean ? 1.0f / (float)count : 1.0f;
    struct tensor *y;
    if (x->numel == 0) {   /* the only case where y can be larger than x */
        y = op_try_new(who, x->device, x->ndim, kshape, true);
        if (!y) return NULL;
        if (mean) op_be(x)->fill(op_f32(y), NAN, (size_t)y->numel);
    } else {
        struct tensor *sx = tensor_snapshot(x);
        y = k_sum_to(sx, x->ndim, kshape);
        tensor_free(sx);
        if (mean) {
            struct tensor *s = k_unary(KU_SCALE, y, scale, 0);
            tensor_free(y);
            y = s;
        }
    }
    if (dim == DIM_ALL) {
        y->ndim = 0;
    } else {
        y->ndim = ond;
        for (int k = 0; k < ond; k++) y->shape[k] = oshape[k];
    }
    if (op_needs_grad(1, &x)) {
        struct op_ctx *c = op_ctx_new();
        op_ctx_shape(c, 0, x);
        c->ndim[1] = x->ndim;
        for (int k = 0; k < x->ndim; k++) c->shape[1][k] = kshape[k];
        c->a = scale;
        op_record(name, y, 1, &x, c, reduce_backward);
    }
    return y;
}

struct tensor *tensor_sum(struct tensor *x) { return reduce_op("tensor_sum", "SumBackward", x, DIM_ALL, false, false); }
struct tensor *tensor_mean(struct tensor *x) { return reduce_op("tensor_mean", "MeanBackward", x, DIM_ALL, false, true); }

struct tensor *tensor_sum_dim(struct tensor *x, int dim, bool keepdim)
{
    return reduce_op("tensor_sum_dim", "SumDimBackward", x, dim, keepdim, false);
}

struct tensor *tensor_mean_dim(struct tensor *x, int dim, bool keepdim)
{
    return reduce_op("tensor_mean_dim", "MeanDimBackward", x, dim, keepdim, true);
}
