/* Shape and placement ops (ops.h): reshape, slice, split, cat, moving
 * between devices and detach. Pieces move with the backend's copy2d. */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "tensor/ops_internal.h"

/* ---- reshape -------------------------------------------------------------------- */

static int reshape_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    if (gout[0] && op_wants(n, 0)) gin[0] = k_view(gout[0], c->ndim[0], c->shape[0]);
    return 0;
}

struct tensor *tensor_reshape(struct tensor *x, int ndim, const int64_t *shape)
{
    char s1[96], s2[96];
    if (op_check_input("tensor_reshape", x) < 0) return NULL;
    if (ndim < 0 || ndim > TENSOR_MAX_DIMS)
        return tensor_error("tensor_reshape: ndim %d is outside 0..%d", ndim, TENSOR_MAX_DIMS);
    int64_t numel = 1;
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 0) return tensor_error("tensor_reshape: negative dim %lld at %d", (long long)shape[k], k);
        if (shape[k] && numel > INT64_MAX / 16 / shape[k])   /* tensor_new's bound */
            return tensor_error("tensor_reshape: shape %s is too large", shape_str(ndim, shape, s2, sizeof s2));
        numel *= shape[k];
    }
    if (numel != x->numel)
        return tensor_error("tensor_reshape: cannot reshape %s into %s", shape_str(x->ndim, x->shape, s1, sizeof s1),
                            shape_str(ndim, shape, s2, sizeof s2));
    struct tensor *y = k_view(x, ndim, shape);
    if (op_needs_grad(1, &x)) {
        struct op_ctx *c = op_ctx_new();
        op_ctx_shape(c, 0, x);
        op_record("ReshapeBackward", y, 1, &x, c, reshape_backward);
    }
    return y;
}

/* ---- pieces along a dim ------------------------------------------------------------- */

/* Geometry of dim `d` of a shape: outer rows before it, inner elements after it. */
static void dim_geometry(int ndim, const int64_t *shape, int d, int64_t *outer, int64_t *inner)
{
    *outer = *inner = 1;
    for (int k = 0; k < d; k++) *outer *= shape[k];
    for (int k = d + 1; k < ndim; k++) *inner *= shape[k];
}

/* Copies piece [off, off+len) of dim d between a whole tensor and a piece,
 * elements of `esize` bytes (the tensors' dtype_size). */
static void piece_copy_bytes(const struct tensor_backend *be, void *whole, void *piece, size_t esize, int ndim,
                             const int64_t *shape, int d, int64_t off, int64_t len, bool to_piece)
{
    int64_t outer, inner;
    dim_geometry(ndim, shape, d, &outer, &inner);
    size_t width = (size_t)(len * inner) * esize, wpitch = (size_t)(shape[d] * inner) * esize;
    if (!width || !outer) return;
    char *w = (char *)whole + (size_t)(off * inner) * esize;
    if (to_piece) be->copy2d(piece, width, w, wpitch, width, (size_t)outer);
    else be->copy2d(w, wpitch, piece, width, width, (size_t)outer);
}

/* The same for f32 tensors (split, cat and the gradients). */
static void piece_copy(const struct tensor_backend *be, float *whole, float *piece, int ndim, const int64_t *shape,
                       int d, int64_t off, int64_t len, bool to_piece)
{
    piece_copy_bytes(be, whole, piece, sizeof(float), ndim, shape, d, off, len, to_piece);
}

/* ctx: x's shape in ndim/shape[0], iv[0] = dim, sizes[n] */
static int split_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    if (!op_wants(n, 0)) return 0;
    const struct tensor_backend *be = tensor_backend_for(c->dev[0]);
    struct tensor *gx = op_zeros(c->dev[0], c->ndim[0], c->shape[0]);
    int64_t off = 0;
    for (int i = 0; i < c->n_sizes; i++) {
        int64_t shape[TENSOR_MAX_DIMS];
        memcpy(shape, c->shape[0], sizeof shape);
        shape[c->iv[0]] = c->sizes[i];
        if (gout[i] && op_check_grad(n, gout[i], c->ndim[0], shape, c->dev[0]) < 0) {
            tensor_free(gx);
            return -1;
        }
        if (gout[i]) piece_copy(be, op_f32(gx), op_f32(gout[i]), c->ndim[0], c->shape[0], (int)c->iv[0], off, c->sizes[i], false);
        off += c->sizes[i];
    }
    gin[0] = gx;
    return 0;
}

int tensor_split(struct tensor *x, int dim, int n, const int64_t *sizes, struct tensor **out)
{
    const char *who = "tensor_split";
    char s[96];
    if (op_check_input(who, x) < 0) return -1;
    int d = dim < 0 ? dim + x->ndim : dim;
    if (d < 0 || d >= x->ndim) {
        tensor_error("%s: dim %d is out of range for %s", who, dim, shape_str(x->ndim, x->shape, s, sizeof s));
        return -1;
    }
    if (n < 1) {
        tensor_error("%s: piece count %d must be at least 1", who, n);
        return -1;
    }
    if (!sizes) {
        tensor_error("%s: sizes is NULL", who);
        return -1;
    }
    if (!out) {
        tensor_error("%s: out is NULL", who);
        return -1;
    }
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0) {
            tensor_error("%s: negative piece size %lld", who, (long long)sizes[i]);
            return -1;
        }
        if (sizes[i] > INT64_MAX - total) {
            tensor_error("%s: sizes sum past the largest size", who);
            return -1;
        }
        total += sizes[i];
    }
    if (total != x->shape[d]) {
        tensor_error("%s: sizes sum to %lld but dim %d of %s is %lld", who, (long long)total, dim,
                     shape_str(x->ndim, x->shape, s, sizeof s), (long long)x->shape[d]);
        return -1;
    }
    struct tensor *sx = tensor_snapshot(x);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t shape[TENSOR_MAX_DIMS];
        memcpy(shape, x->shape, sizeof shape);
        shape[d] = sizes[i];
        out[i] = tensor_new_uninit(x->dtype, x->device, x->ndim, shape);
        CHECK(out[i]);   /* no larger than x, on x's device: only OOM fails here */
        piece_copy_bytes(op_be(x), tensor_data(sx), tensor_data(out[i]), dtype_size(x->dtype), x->ndim, x->shape, d,
                         off, sizes[i], true);
        off += sizes[i];
    }
    tensor_free(sx);
    if (x->dtype == DTYPE_F32 && op_needs_grad(1, &x)) {
        struct op_ctx *c = op_ctx_new();
        op_ctx_shape(c, 0, x);
        c->iv[0] = d;
        c->n_sizes = n;
        c->sizes = trib_xmalloc((size_t)n * sizeof *c->sizes);
        memcpy(c->sizes, sizes, (size_t)n * sizeof *c->sizes);
        struct ag_node *node = ag_node_new("SplitBackward", n, 1, split_backward, op_release, c);
        node->next[0] = tensor_grad_edge(x);
        for (int i = 0; i < n; i++) tensor_set_grad_fn(out[i], node, i);
        ag_node_free(node);
    }
    return 0;
}

/* ctx: output shape in ndim/shape[0], iv[0] = dim, sizes[n] */
static int cat_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    struct tensor *g = gout[0];
    if (!g) return 0;
    int d = (int)c->iv[0];
    int64_t off = 0;
    for (int i = 0; i < c->n_sizes; i++) {
        if (op_wants(n, i)) {
            int64_t shape[TENSOR_MAX_DIMS];
            memcpy(shape, c->shape[0], sizeof shape);
            shape[d] = c->sizes[i];
            gin[i] = op_empty(g->device, c->ndim[0], shape);
            piece_copy(op_be(g), op_f32(g), op_f32(gin[i]), c->ndim[0], c->shape[0], d, off, c->sizes[i], true);
        }
        off += c->sizes[i];
    }
    return 0;
}

struct tensor *tensor_cat(int n, struct tensor **xs, int dim)
{
    const char *who = "tensor_cat";
    char s1[96], s2[96];
    if (n < 1) return tensor_error("%s: need at least 1 tensor, got %d", who, n);
    if (!xs) return tensor_error("%s: input is NULL", who);
    struct tensor *x0 = xs[0];
    if (op_check_input(who, x0) < 0) return NULL;
    int d = dim < 0 ? dim + x0->ndim : dim;
    if (d < 0 || d >= x0->ndim)
        return tensor_error("%s: dim %d is out of range for %s", who, dim, shape_str(x0->ndim, x0->shape, s1, sizeof s1));
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, x0->shape, sizeof shape);
    shape[d] = 0;
    for (int i = 0; i < n; i++) {
        if (op_check_input(who, xs[i]) < 0) return NULL;
        if (xs[i]->dtype != x0->dtype)
            return tensor_error("%s: dtype mismatch: input 0 is %s but input %d is %s", who, dtype_name(x0->dtype), i,
                                dtype_name(xs[i]->dtype));
        if (xs[i]->device != x0->device)
            return tensor_error("%s: device mismatch: %s and %s", who, device_name(x0->device),
                                device_name(xs[i]->device));
        bool ok = xs[i]->ndim == x0->ndim;
        for (int k = 0; ok && k < x0->ndim; k++) ok = k == d || xs[i]->shape[k] == x0->shape[k];
        if (!ok)
            return tensor_error("%s: shape mismatch: %s and %s", who, shape_str(x0->ndim, x0->shape, s1, sizeof s1),
                                shape_str(xs[i]->ndim, xs[i]->shape, s2, sizeof s2));
        if (xs[i]->shape[d] > INT64_MAX - shape[d]) return tensor_error("%s: dim %d sums past the largest size", who, dim);
        shape[d] += xs[i]->shape[d];
    }
    struct tensor *y = tensor_try_new(x0->dtype, x0->device, x0->ndim, shape, false);
    if (!y) return tensor_error("%s: output shape %s is too large", who, shape_str(x0->ndim, shape, s1, sizeof s1));
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        struct tensor *sx = tensor_snapshot(xs[i]);
        piece_copy_bytes(op_be(y), tensor_data(y), tensor_data(sx), dtype_size(y->dtype), y->ndim, y->shape, d, off,
                         xs[i]->shape[d], false);
        off += xs[i]->shape[d];
        tensor_free(sx);
    }
    if (x0->dtype == DTYPE_F32 && op_needs_grad(n, xs)) {
        struct op_ctx *c = op_ctx_new();
        op_ctx_shape(c, 0, y);
        c->iv[0] = d;
        c->n_sizes = n;
        c->sizes = trib_xmalloc((size_t)n * sizeof *c->sizes);
        for (int i = 0; i < n; i++) c->sizes[i] = xs[i]->shape[d];
        op_record("CatBackward", y, n, xs, c, cat_backward);
    }
    return y;
}

/* ---- slice ------------------------------------------------------------------------------ */

/* ctx: x's shape in ndim/shape[0], iv[0] = start */
static int slice_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    struct tensor *g = gout[0];
    if (!g || !op_wants(n, 0)) return 0;
    gin[0] = op_zeros(g->device, c->ndim[0], c->shape[0]);
    piece_copy(op_be(g), op_f32(gin[0]), op_f32(g), c->ndim[0], c->shape[0], 0, c->iv[0], g->shape[0], false);
    return 0;
}

/* Any dtype: the rows are copied as bytes; only f32 records a node (as
 * tensor_to, no other dtype carries a gradient). */
struct tensor *tensor_slice(struct tensor *x, int64_t start, int64_t end)
{
    const char *who = "tensor_slice";
    if (op_check_input(who, x) < 0) return NULL;
    if (x->ndim < 1) return tensor_error("%s: cannot slice a scalar", who);
    if (start < 0 || end < start || end > x->shape[0])
        return tensor_error("%s: range [%lld,%lld) is out of bounds for dim 0 of size %lld", who, (long long)start,
                            (long long)end, (long long)x->shape[0]);
    int64_t shape[TENSOR_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[0] = end - start;
    struct tensor *y = tensor_new_uninit(x->dtype, x->device, x->ndim, shape);
    CHECK(y);   /* no larger than x, on x's device: only OOM fails here */
    struct tensor *sx = tensor_snapshot(x);
    piece_copy_bytes(op_be(x), tensor_data(sx), tensor_data(y), dtype_size(x->dtype), x->ndim, x->shape, 0, start,
                     end - start, true);
    tensor_free(sx);
    if (x->dtype == DTYPE_F32 && op_needs_grad(1, &x)) {
        struct op_ctx *c = op_ctx_new();
        op_ctx_shape(c, 0, x);
        c->iv[0] = start;
        op_record("SliceBackward", y, 1, &x, c, slice_backward);
    }
    return y;
}

/* ---- devices ---------------------------------------------------------------------------- */

static int to_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    if (!gout[0] || !op_wants(n, 0)) return 0;
    gin[0] = tensor_clone_to(gout[0], c->dev[0]);
    return gin[0] ? 0 : -1;
}

struct tensor *tensor_to(struct tensor *x, enum device dev)
{
    if (op_check_input("tensor_to", x) < 0 || !usable_backend(dev, "tensor_to")) return NULL;
    if (dev == x->device) return tensor_retain(x);
    struct tensor *sx = tensor_snapshot(x);
    struct tensor *y = tensor_clone_to(sx, dev);
    tensor_free(sx);
    if (!y) return NULL;
    if (x->dtype == DTYPE_F32 && op_needs_grad(1, &x)) {
        struct op_ctx *c = op_ctx_new();
        op_ctx_shape(c, 0, x);
        op_record("ToDeviceBackward", y, 1, &x, c, to_backward);
    }
    return y;
}

struct tensor *tensor_detach(struct tensor *x)
{
    if (op_check_input("tensor_detach", x) < 0) return NULL;
    return tensor_snapshot(x);
}
