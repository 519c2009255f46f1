/* Shared machinery of the ops: validation with the exact messages of ops.h,
 * graph-free whole-tensor kernels over the backend table, and op nodes with
 * their saved state. */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "tensor/ops_internal.h"

int op_check_input(const char *who, const struct tensor *x)
{
    if (x) return 0;
    tensor_error("%s: input is NULL", who);
    return -1;
}

int op_check_f32(const char *who, const struct tensor *x)
{
    if (op_check_input(who, x) < 0) return -1;
    if (x->dtype == DTYPE_F32) return 0;
    tensor_error("%s: unsupported dtype %s (expected f32)", who, dtype_name(x->dtype));
    return -1;
}

int op_check_pair(const char *who, const struct tensor *a, const struct tensor *b)
{
    if (op_check_input(who, a) < 0 || op_check_input(who, b) < 0) return -1;
    if (a->dtype != b->dtype) {
        tensor_error("%s: dtype mismatch: %s and %s", who, dtype_name(a->dtype), dtype_name(b->dtype));
        return -1;
    }
    if (op_check_f32(who, a) < 0) return -1;
    if (a->device != b->device) {
        tensor_error("%s: device mismatch: %s and %s", who, device_name(a->device), device_name(b->device));
        return -1;
    }
    return 0;
}

void op_pad4(int ndim, const int64_t *shape, int64_t out[4])
{
    for (int k = 0; k < 4; k++) out[k] = 1;
    for (int k = 0; k < ndim; k++) out[4 - ndim + k] = shape[k];
}

int op_broadcast_shape(const char *who, const struct tensor *a, const struct tensor *b,
                       int *ndim, int64_t out[TENSOR_MAX_DIMS])
{
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t pa[4], pb[4];
    op_pad4(a->ndim, a->shape, pa);
    op_pad4(b->ndim, b->shape, pb);
    for (int k = 0; k < n; k++) {
        int64_t x = pa[4 - n + k], y = pb[4 - n + k];
        if (x != y && x != 1 && y != 1) {
            char s1[96], s2[96];
            tensor_error("%s: shape mismatch: %s and %s", who, shape_str(a->ndim, a->shape, s1, sizeof s1),
                         shape_str(b->ndim, b->shape, s2, sizeof s2));
            return -1;
        }
        out[k] = x == 1 ? y : x;
    }
    *ndim = n;
    return 0;
}

bool op_needs_grad(int n, struct tensor *const *xs)
{
    if (!autograd_enabled()) return false;
    for (int i = 0; i < n; i++)
        if (xs[i] && xs[i]->requires_grad) return true;
    return false;
}

struct tensor *op_empty(enum device dev, int ndim, const int64_t *shape)
{
    struct tensor *t = tensor_new_uninit(DTYPE_F32, dev, ndim, shape);
    CHECK(t);   /* the device was usable for the inputs: only OOM fails here */
    return t;
}

struct tensor *op_zeros(enum device dev, int ndim, const int64_t *shape)
{
    struct tensor *t = tensor_new(DTYPE_F32, dev, ndim, shape);
    CHECK(t);
    return t;
}

struct tensor *op_try_new(const char *who, enum device dev, int ndim, const int64_t *shape, bool zero)
{
    struct tensor *t = tensor_try_new(DTYPE_F32, dev, ndim, shape, zero);
    if (t) return t;
    char s[96];
    return tensor_error("%s: output shape %s is too large", who, shape_str(ndim, shape, s, sizeof s));
}

struct tensor *op_empty_like(const struct tensor *x) { return op_empty(x->device, x->ndim, x->shape); }

void k_unary_into(struct tensor *out, enum kunary op, const struct tensor *x, float a, float b)
{
    if (x->numel) op_be(x)->unary(op, op_f32(out), op_f32(x), (size_t)x->numel, a, b);
}

struct tensor *k_unary(enum kunary op, const struct tensor *x, float a, float b)
{
    struct tensor *out = op_empty_like(x);
    k_unary_into(out, op, x, a, b);
    return out;
}

/* Element strides of x (padded to 4) broadcast against out4 (0 where x is 1). */
static void bcast_strides(int ndim, const int64_t *shape, int64_t s[4])
{
    int64_t p[4], acc = 1;
    op_pad4(ndim, shape, p);
    for (int k = 3; k >= 0; k--) {
        s[k] = p[k] == 1 ? 0 : acc;
        acc *= p[k];
    }
}

void k_binary_into(struct tensor *out, enum kbinary op, const struct tensor *a, const struct tensor *b)
{
    struct kbcast bc;
    op_pad4(out->ndim, out->shape, bc.n);
    bcast_strides(a->ndim, a->shape, bc.sa);
    bcast_strides(b->ndim, b->shape, bc.sb);
    if (out->numel) op_be(a)->binary(op, op_f32(out), op_f32(a), op_f32(b), &bc);
}

struct tensor *k_binary(enum kbinary op, const struct tensor *a, const struct tensor *b)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t shape[4], pa[4], pb[4];
    op_pad4(a->ndim, a->shape, pa);
    op_pad4(b->ndim, b->shape, pb);
    for (int k = 0; k < nd; k++) shape[k] = pa[4 - nd + k] == 1 ? pb[4 - nd + k] : pa[4 - nd + k];
    struct tensor *out = op_empty(a->device, nd, shape);
    k_binary_into(out, op, a, b);
    return out;
}

struct tensor *k_sum_to(struct tensor *x, int ndim, const int64_t *shape)
{
    int64_t m[4], n[4];
    op_pad4(ndim, shape, m);
    op_pad4(x->ndim, x->shape, n);
    if (memcmp(m, n, sizeof m) == 0) return k_view(x, ndim, shape);
    struct tensor *out = op_empty(x->device, ndim, shape);
    op_be(x)->sum_to(op_f32(out), m, op_f32(x), n);
    return out;
}

struct tensor *k_expand(const struct tensor *g, int ndim, const int64_t *shape, float scale)
{
    const struct tensor_backend *be = op_be(g);
    struct tensor *out = op_empty(g->device, ndim, shape);
    if (!out->numel) return out;
    struct tensor *s = op_empty(g->device, 0, NULL);
    be->fill(op_f32(s), scale, 1);
    struct kbcast bc = {{0}, {0}, {0, 0, 0, 0}};
    op_pad4(ndim, shape, bc.n);
    bcast_strides(g->ndim, g->shape, bc.sa);
    be->binary(KB_MUL, op_f32(out), op_f32(g), op_f32(s), &bc);
    tensor_free(s);
    return out;
}

struct tensor *k_view(struct tensor *x, int ndim, const int64_t *shape)
{
    struct tensor *v = tensor_snapshot(x);
    v->ndim = ndim;
    for (int k = 0; k < ndim; k++) v->shape[k] = shape[k];
    return v;
}

/* ---- nodes ------------------------------------------------------------------ */

struct op_ctx *op_ctx_new(void) { return trib_xcalloc(1, sizeof(struct op_ctx)); }

void op_ctx_save(struct op_ctx *c, struct tensor *snapshot)
{
    CHECK(c->n_saved < 4);
    c->saved[c->n_saved++] = snapshot;
}

void op_ctx_shape(struct op_ctx *c, int i, const struct tensor *x)
{
    c->ndim[i] = x->ndim;
    c->dev[i] = x->device;
    memcpy(c->shape[i], x->shape, sizeof c->shape[i]);
}

void op_ctx_free(struct op_ctx *c)
{
    if (!c) return;
    for (int i = 0; i < c->n_saved; i++) tensor_free(c->saved[i]);
    free(c->sizes);
    free(c);
}

void op_release(struct ag_node *n)
{
    op_ctx_free(n->ctx);
    n->ctx = NULL;
}

int op_check_grad(const struct ag_node *n, const struct tensor *g, int ndim, const int64_t *shape, enum device dev)
{
    bool ok = g->dtype == DTYPE_F32 && g->ndim == ndim && g->device == dev;
    for (int k = 0; ok && k < ndim; k++) ok = g->shape[k] == shape[k];
    if (ok) return 0;
    char s1[96], s2[96];
    tensor_error("%s: gradient %s %s on %s does not match the output f32 %s on %s", n->name, dtype_name(g->dtype),
                 shape_str(g->ndim, g->shape, s1, sizeof s1), device_name(g->device), shape_str(ndim, shape, s2, sizeof s2),
                 device_name(dev));
    return -1;
}

/* Every recorded op's backward runs through here: the incoming gradient is
 * validated (a bad root gradient from a caller or a peer is an error, not a
 * kernel reading out of bounds), then the op's own backward runs. */
static int op_backward_checked(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    if (gout[0] && op_check_grad(n, gout[0], c->out_ndim, c->out_shape, c->out_dev) < 0) return -1;
    return c->fn(n, gout, gin);
}

void op_record(const char *name, struct tensor *out, int n_in, struct tensor *const *in,
               struct op_ctx *ctx, ag_backward_fn backward)
{
    ctx->fn = backward;
    ctx->out_ndim = out->ndim;
    ctx->out_dev = out->device;
    memcpy(ctx->out_shape, out->shape, sizeof ctx->out_shape);
    struct ag_node *node = ag_node_new(name, 1, n_in, op_backward_checked, op_release, ctx);
    for (int i = 0; i < n_in; i++)
        node->next[i] = in[i] ? tensor_grad_edge(in[i]) : (struct ag_edge){NULL, 0};
    tensor_set_grad_fn(out, node, 0);
    ag_node_free(node);
}

int op_check_saved(const struct ag_node *n)
{
    const struct op_ctx *c = n->ctx;
    for (int i = 0; c && i < c->n_saved; i++)
        if (ag_check_saved(c->saved[i], n->name) < 0) return -1;
    return 0;
}
