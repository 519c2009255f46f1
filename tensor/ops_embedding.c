/* The ops of PyTorch's "DDP with RPC" tutorial (ops.h): EmbeddingBag (sum
 * and mean over bags given by indices + offsets, differentiable in the
 * table) and the cross-entropy loss (log_softmax, gather and mean, so its
 * backward is theirs). */
#include <stdlib.h>

#include "common/check.h"
#include "tensor/ops_internal.h"

/* The int64 tensor t's values on the host (a new malloc'ed array). */
static int64_t *host_i64(struct tensor *t)
{
    int64_t *h = trib_xmalloc((size_t)t->numel * sizeof *h + 1);
    tensor_copy_to_host(t, h);
    return h;
}

static int check_index(const char *who, const char *what, const struct tensor *weight, const struct tensor *t)
{
    if (!t) {
        tensor_error("%s: %s is NULL", who, what);
        return -1;
    }
    if (t->dtype != DTYPE_I64) {
        tensor_error("%s: %s dtype %s (expected i64)", who, what, dtype_name(t->dtype));
        return -1;
    }
    if (t->device != weight->device) {
        tensor_error("%s: device mismatch: %s and %s %s", who, device_name(weight->device), what,
                     device_name(t->device));
        return -1;
    }
    if (t->ndim != 1) {
        char s[96];
        tensor_error("%s: %s must be 1-D, got %s", who, what, shape_str(t->ndim, t->shape, s, sizeof s));
        return -1;
    }
    return 0;
}

/* ---- EmbeddingBag -------------------------------------------------------------- */

/* saved: indices, offsets; weight's shape in ndim/shape[0]; iv[0] = mean */
static int embedding_bag_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    struct tensor *g = gout[0], *idx = c->saved[0], *off = c->saved[1];
    if (!g || !op_wants(n, 0)) return 0;
    if (op_check_saved(n) < 0) return -1;
    int64_t N = c->shape[0][0], D = c->shape[0][1];
    gin[0] = op_empty(g->device, 2, c->shape[0]);
    op_be(g)->embedding_bag_backward(op_f32(gin[0]), op_f32(g), tensor_data(idx), tensor_data(off), off->numel,
                                     idx->numel, N, D, (int)c->iv[0]);
    return 0;
}

/* Checks every index against N and the offsets' order; -1 with error. */
static int check_bags(const char *who, struct tensor *si, struct tensor *so, int64_t N)
{
    int64_t *idx = host_i64(si), *off = host_i64(so), L = si->numel, B = so->numel;
    int rc = 0;
    for (int64_t i = 0; i < L && rc == 0; i++)
        if (idx[i] < 0 || idx[i] >= N) {
            tensor_error("%s: index %lld is out of range for %lld embeddings", who, (long long)idx[i], (long long)N);
            rc = -1;
        }
    if (rc == 0 && B > 0 && off[0] != 0) {
        tensor_error("%s: offsets[0] is %lld (the first bag must start at 0)", who, (long long)off[0]);
        rc = -1;
    }
    for (int64_t b = 0; b < B && rc == 0; b++) {
        int64_t prev = b ? off[b - 1] : 0;
        if (off[b] < prev || off[b] > L) {
            tensor_error("%s: offsets[%lld] = %lld is out of order or past the %lld indices", who, (long long)b,
                         (long long)off[b], (long long)L);
            rc = -1;
        }
    }
    free(idx);
    free(off);
    return rc;
}

struct tensor *tensor_embedding_bag(struct tensor *weight, struct tensor *indices, struct tensor *offsets,
                                    enum tensor_bag_mode mode)
{
    const char *who = "tensor_embedding_bag";
    if (op_check_f32(who, weight) < 0) return NULL;
    if (weight->ndim != 2) {
        char s[96];
        return tensor_error("%s: weight must be [N,D], got %s", who, shape_str(weight->ndim, weight->shape, s, sizeof s));
    }
    if (mode != TENSOR_BAG_SUM && mode != TENSOR_BAG_MEAN) return tensor_error("%s: unknown mode %d", who, (int)mode);
    if (check_index(who, "indices", weight, indices) < 0 || check_index(who, "offsets", weight, offsets) < 0)
        return NULL;
    struct tensor *si = tensor_snapshot(indices), *so = tensor_snapshot(offsets);
    if (check_bags(who, si, so, weight->shape[0]) < 0) {
        tensor_free(si);
        tensor_free(so);
        return NULL;
    }
    int64_t B = offsets->numel, D = weight->shape[1];
    struct tensor *sw = tensor_snapshot(weight);
    struct tensor *y = op_empty(weight->device, 2, (int64_t[]){B, D});
    if (y->numel)
        op_be(weight)->embedding_bag(op_f32(y), op_f32(sw), tensor_data(si), tensor_data(so), B, indices->numel, D,
                                     mode == TENSOR_BAG_MEAN);
    tensor_free(sw);
    if (op_needs_grad(1, &weight)) {
        struct op_ctx *c = op_ctx_new();
        op_ctx_shape(c, 0, weight);
        c->iv[0] = mode == TENSOR_BAG_MEAN;
        op_ctx_save(c, si);
        op_ctx_save(c, so);
        op_record("EmbeddingBagBackward", y, 1, &weight, c, embedding_bag_backward);
    } else {
        tensor_free(si);
        tensor_free(so);
    }
    return y;
}

/* ---- cross-entropy --------------------------------------------------------------- */

struct tensor *tensor_cross_entropy(struct tensor *logits, struct tensor *target)
{
    const char *who = "tensor_cross_entropy";
    if (op_check_f32(who, logits) < 0) return NULL;
    char s1[96], s2[96];
    if (logits->ndim != 2 || logits->shape[0] < 1 || logits->shape[1] < 1)
        return tensor_error("%s: logits must be [R,C] with R, C >= 1, got %s", who,
                            shape_str(logits->ndim, logits->shape, s1, sizeof s1));
    if (check_index(who, "target", logits, target) < 0) return NULL;
    int64_t R = logits->shape[0], C = logits->shape[1];
    if (target->shape[0] != R)
        return tensor_error("%s: shape mismatch: logits %s and target %s", who,
                            shape_str(logits->ndim, logits->shape, s1, sizeof s1),
                            shape_str(target->ndim, target->shape, s2, sizeof s2));
    struct tensor *st = tensor_snapshot(target);
    int64_t *h = host_i64(st);
    for (int64_t r = 0; r < R; r++)
        if (h[r] < 0 || h[r] >= C) {
            long long bad = (long long)h[r];
            free(h);
            tensor_free(st);
            return tensor_error("%s: target %lld is out of range for %lld classes", who, bad, (long long)C);
        }
    free(h);
    struct tensor *col = k_view(st, 2, (int64_t[]){R, 1});
    tensor_free(st);
    /* validated above: these cannot fail */
    struct tensor *ls = tensor_log_softmax(logits);
    CHECK(ls);
    struct tensor *picked = tensor_gather(ls, col);
    CHECK(picked);
    struct tensor *m = tensor_mean(picked);
    struct tensor *loss = tensor_neg(m);
    CHECK(m && loss);
    tensor_free(col);
    tensor_free(ls);
    tensor_free(picked);
    tensor_free(m);
    return loss;
}
