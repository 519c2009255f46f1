/* Random and probabilistic ops (ops.h): dropout, mse, categorical sampling
 * and the diagonal Gaussian (sample, log-prob, entropy). Randomness is the
 * backend's counter RNG, one seed per call drawn from the caller's state. */
#include "common/check.h"
#include "tensor/ops_internal.h"

#define HALF_LOG_2PI 0.91893853320467274178f

/* ---- dropout ---------------------------------------------------------------------- */

/* saved: the scaled keep mask */
static int dropout_backward(struct ag_node *n, struct tensor **gout, struct tensor **gin)
{
    struct op_ctx *c = n->ctx;
    if (!gout[0] || !op_wants(n, 0)) return 0;
    gin[0] = k_binary(KB_MUL, gout[0], c->saved[0]);
    return 0;
}

struct tensor *tensor_dropout(struct tensor *x, float p, bool training, uint64_t *rng)
{
    if (op_check_f32("tensor_dropout", x) < 0) return NULL;
    if (!(p >= 0.0f && p <= 1.0f)) return tensor_error("tensor_dropout: p %g is outside [0,1]", (double)p);
    if (!training || p == 0.0f) return tensor_retain(x);
    const struct tensor_backend *be = op_be(x);
    struct tensor *u = op_empty_like(x);
    if (x->numel) be->rand_uniform(op_f32(u), (size_t)x->numel, rng_next(rng));
    struct tensor *mask = k_unary(KU_KEEP, u, p, 0);
    tensor_free(u);
    struct tensor *sx = tensor_snapshot(x);
    struct tensor *y = k_binary(KB_MUL, sx, mask);
    tensor_free(sx);
    if (op_needs_grad(1, &x)) {
        struct op_ctx *c = op_ctx_new();
        op_ctx_save(c, mask);
        mask = NULL;
        op_record("DropoutBackward", y, 1, &x, c, dropout_backward);
    }
    tensor_free(mask);
    return y;
}

/* ---- mse ---------------------------------------------------------------------------- */

struct tensor *tensor_mse(struct tensor *a, struct tensor *b)
{
    if (op_check_pair("tensor_mse", a, b) < 0) return NULL;
    if (!tensor_same_shape(a, b)) {
        char s1[96], s2[96];
        return tensor_error("tensor_mse: shape mismatch: %s and %s", shape_str(a->ndim, a->shape, s1, sizeof s1),
                            shape_str(b->ndim, b->shape, s2, sizeof s2));
    }
    struct tensor *d = tensor_sub(a, b);
    struct tensor *sq = tensor_square(d);
    struct tensor *m = tensor_mean(sq);
    tensor_free(d);
    tensor_free(sq);
    return m;
}

/* ---- categorical --------------------------------------------------------------------- */

struct tensor *tensor_categorical_sample(struct tensor *logits, uint64_t *rng)
{
    const char *who = "tensor_categorical_sample";
    if (op_check_f32(who, logits) < 0) return NULL;
    if (logits->ndim < 1 || logits->ndim > 2 || logits->shape[logits->ndim - 1] < 1) {
        char s[96];
        return tensor_error("%s: expected logits [R,C] or [C] with C >= 1, got %s", who,
                            shape_str(logits->ndim, logits->shape, s, sizeof s));
    }
    const struct tensor_backend *be = op_be(logits);
    int64_t cols = logits->shape[logits->ndim - 1], rows = logits->numel / cols;
    struct tensor *sl = tensor_snapshot(logits);
    struct tensor *probs = op_empty_like(logits), *u = op_empty(logits->device, 1, &rows);
    struct tensor *out = tensor_new(DTYPE_I64, logits->device, logits->ndim - 1, logits->shape);
    CHECK(out);
    if (rows) {
        be->softmax(op_f32(probs), op_f32(sl), rows, cols);
        be->rand_uniform(op_f32(u), (size_t)rows, rng_next(rng));
        be->categorical(tensor_data(out), op_f32(probs), op_f32(u), rows, cols);
    }
    tensor_free(sl);
    tensor_free(probs);
    tensor_free(u);
    return out;
}

/* ---- diagonal Gaussian ---------------------------------------------------------------- */

/* log_std must broadcast to mean's shape without growing it. */
static int check_log_std(const char *who, struct tensor *mean, struct tensor *log_std)
{
    int nd;
    int64_t shape[TENSOR_MAX_DIMS];
    if (op_check_pair(who, mean, log_std) < 0 || op_broadcast_shape(who, mean, log_std, &nd, shape) < 0) return -1;
    bool ok = nd == mean->ndim && mean->ndim >= 1;
    for (int k = 0; ok && k < nd; k++) ok = shape[k] == mean->shape[k];
    if (!ok) {
        char s1[96], s2[96];
        tensor_error("%s: shape mismatch: mean %s and log_std %s", who, shape_str(mean->ndim, mean->shape, s1, sizeof s1),
                     shape_str(log_std->ndim, log_std->shape, s2, sizeof s2));
        return -1;
    }
    return 0;
}

struct tensor *tensor_gaussian_sample(struct tensor *mean, struct tensor *log_std, uint64_t *rng)
{
    if (check_log_std("tensor_gaussian_sample", mean, log_std) < 0) return NULL;
    struct tensor *sm = tensor_snapshot(mean), *ss = tensor_snapshot(log_std);
    struct tensor *eps = op_empty_like(mean);
    if (mean->numel) op_be(mean)->rand_normal(op_f32(eps), (size_t)mean->numel, rng_next(rng));
    struct tensor *std = k_unary(KU_EXP, ss, 0, 0);
    struct tensor *noise = k_binary(KB_MUL, eps, std);
    struct tensor *y = k_binary(KB_ADD, sm, noise);
    tensor_free(sm);
    tensor_free(ss);
    tensor_free(eps);
    tensor_free(std);
    tensor_free(noise);
    return y;
}

struct tensor *tensor_gaussian_log_prob(struct tensor *mean, struct tensor *log_std, struct tensor *x)
{
    const char *who = "tensor_gaussian_log_prob";
    if (check_log_std(who, mean, log_std) < 0 || op_check_pair(who, mean, x) < 0) return NULL;
    if (!tensor_same_shape(mean, x)) {
        char s1[96], s2[96];
        return tensor_error("%s: shape mismatch: mean %s and x %s", who, shape_str(mean->ndim, mean->shape, s1, sizeof s1),
                            shape_str(x->ndim, x->shape, s2, sizeof s2));
    }
    /* sum_d [ -0.5 ((x - mean) exp(-log_std))^2 - log_std - 0.5 log(2 pi) ] */
    struct tensor *diff = tensor_sub(x, mean);
    struct tensor *nls = tensor_neg(log_std);
    struct tensor *inv = tensor_exp(nls);
    struct tensor *z = tensor_mul(diff, inv);
    struct tensor *z2 = tensor_square(z);
    struct tensor *t1 = tensor_mul_scalar(z2, -0.5f);
    struct tensor *t2 = tensor_sub(t1, log_std);
    struct tensor *t3 = tensor_add_scalar(t2, -HALF_LOG_2PI);
    struct tensor *out = tensor_sum_dim(t3, -1, false);
    struct tensor *tmp[] = {diff, nls, inv, z, z2, t1, t2, t3};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) tensor_free(tmp[i]);
    return out;
}

struct tensor *tensor_gaussian_entropy(struct tensor *log_std)
{
    const char *who = "tensor_gaussian_entropy";
    if (op_check_f32(who, log_std) < 0) return NULL;
    if (log_std->ndim < 1) return tensor_error("%s: expected at least 1 dim, got a scalar", who);
    struct tensor *t = tensor_add_scalar(log_std, 0.5f + HALF_LOG_2PI);
    struct tensor *out = tensor_sum_dim(t, -1, false);
    tensor_free(t);
    return out;
}
