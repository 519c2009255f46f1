/* Matrix ops (ops.h): matmul and linear over the backend's sgemm (OpenBLAS
 * on the CPU, cuBLAS on CUDA). Linear folds its bias into a rank-1 gemm and
 * skips the gradients nobody wants, so an MLP runs near the bare gemm rate. */
#include "common/check.h"
#include "tensor/ops_internal.h"

/* ---- matmul ------------------------------------------------------------------- */

static int matmul_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    struct tensor *g = gout[0], *a = c->saved[0], *b = c->saved[1];
    if (!g) return 0;
    if (op_check_saved(n) < 0) return -1;
    const struct tensor_backend *be = op_be(g);
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    if (op_wants(n, 0)) {   /* ga = g b^T */
        gin[0] = op_empty_like(a);
        be->sgemm(0, 1, M, K, N, 1.0f, op_f32(g), N, op_f32(b), N, 0.0f, op_f32(gin[0]), K);
    }
    if (op_wants(n, 1)) {   /* gb = a^T g */
        gin[1] = op_empty_like(b);
        be->sgemm(1, 0, K, N, M, 1.0f, op_f32(a), K, op_f32(g), N, 0.0f, op_f32(gin[1]), N);
    }
    return 0;
}

struct tensor *tensor_matmul(struct tensor *a, struct tensor *b)
{
    if (op_check_pair("tensor_matmul", a, b) < 0) return NULL;
    if (a->ndim != 2 || b->ndim != 2 || a->shape[1] != b->shape[0]) {
        char s1[96], s2[96];
        return tensor_error("tensor_matmul: shape mismatch: %s x %s", shape_str(a->ndim, a->shape, s1, sizeof s1),
                            shape_str(b->ndim, b->shape, s2, sizeof s2));
    }
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    struct tensor *out = op_try_new("tensor_matmul", a->device, 2, (int64_t[]){M, N}, false);
    if (!out) return NULL;
    struct tensor *sa = tensor_snapshot(a), *sb = tensor_snapshot(b);
    op_be(a)->sgemm(0, 0, M, N, K, 1.0f, op_f32(sa), K, op_f32(sb), N, 0.0f, op_f32(out), N);
    struct tensor *in[2] = {a, b};
    if (op_needs_grad(2, in)) {
        struct op_ctx *c = op_ctx_new();
        op_ctx_save(c, sa);
        op_ctx_save(c, sb);
        op_record("MatmulBackward", out, 2, in, c, matmul_backward);
    } else {
        tensor_free(sa);
        tensor_free(sb);
    }
    return out;
}

/* ---- linear -------------------------------------------------------------------- */

/* saved: x (as [rows,in]), w; iv[0] = 1 if there is a bias */
static int linear_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    struct tensor *g = gout[0], *x = c->saved[0], *w = c->saved[1];
    if (!g) return 0;
    if (op_check_saved(n) < 0) return -1;
    const struct tensor_backend *be = op_be(g);
    int64_t in = w->shape[1], out = w->shape[0], rows = x->numel / (in ? in : 1);
    if (op_wants(n, 0)) {   /* gx = g w */
        gin[0] = op_empty(x->device, c->ndim[0], c->shape[0]);
        be->sgemm(0, 0, rows, in, out, 1.0f, op_f32(g), out, op_f32(w), in, 0.0f, op_f32(gin[0]), in);
    }
    if (op_wants(n, 1)) {   /* gw = g^T x */
        gin[1] = op_empty_like(w);
        be->sgemm(1, 0, out, in, rows, 1.0f, op_f32(g), out, op_f32(x), in, 0.0f, op_f32(gin[1]), in);
    }
    if (c->iv[0] && op_wants(n, 2)) gin[2] = k_sum_to(g, 1, &out);
    return 0;
}

struct tensor *tensor_linear(struct tensor *x, struct tensor *w, struct tensor *b)
{
    const char *who = "tensor_linear";
    if (op_check_pair(who, x, w) < 0 || (b && op_check_pair(who, w, b) < 0)) return NULL;
    char s1[96], s2[96];
    if (x->ndim < 1 || w->ndim != 2 || x->shape[x->ndim - 1] != w->shape[1])
        return tensor_error("%s: shape mismatch: x %s and w %s", who, shape_str(x->ndim, x->shape, s1, sizeof s1),
                            shape_str(w->ndim, w->shape, s2, sizeof s2));
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return tensor_error("%s: shape mismatch: bias %s for w %s", who, shape_str(b->ndim, b->shape, s1, sizeof s1),
                            shape_str(w->ndim, w->shape, s2, sizeof s2));
    const struct tensor_backend *be = op_be(x);
    int64_t in = w->shape[1], nout = w->shape[0], rows = in ? x->numel / in : 0;
    if (!in) {
        rows = 1;
        for (int k = 0; k < x->ndim - 1; k++) rows *= x->shape[k];
    }
    int64_t oshape[TENSOR_MAX_DIMS];
    for (int k = 0; k < x->ndim - 1; k++) oshape[k] = x->shape[k];
    oshape[x->ndim - 1] = nout;
    struct tensor *y = op_try_new(who, x->device, x->ndim, oshape, false);
    if (!y) return NULL;
    struct tensor *sx = tensor_snapshot(x), *sw = tensor_snapshot(w), *sb = b ? tensor_snapshot(b) : NULL;
    float beta = 0.0f;
    if (sb && rows && nout) {   /* y = ones[rows,1] b[1,out], then y += x w^T */
        struct tensor *ones = op_empty(x->device, 1, &rows);
        be->fill(op_f32(ones), 1.0f, (size_t)rows);
        be->sgemm(0, 0, rows, nout, 1, 1.0f, op_f32(ones), 1, op_f32(sb), nout, 0.0f, op_f32(y), nout);
        tensor_free(ones);
        beta = 1.0f;
    }
    be->sgemm(0, 1, rows, nout, in, 1.0f, op_f32(sx), in, op_f32(sw), in, beta, op_f32(y), nout);
    struct tensor *inputs[3] = {x, w, b};
    if (op_needs_grad(3, inputs)) {
        struct op_ctx *c = op_ctx_new();
        c->iv[0] = b != NULL;
        op_ctx_shape(c, 0, x);
        op_ctx_save(c, sx);
        op_ctx_save(c, sw);
        sx = sw = NULL;
        op_record("LinearBackward", y, b ? 3 : 2, inputs, c, linear_backward);
    }
    tensor_free(sx);
    tensor_free(sw);
    tensor_free(sb);
    return y;
}
