/* RL losses from tensor ops (losses.h). Each loss validates everything it
 * was handed, then builds its graph through a scratch list that owns the
 * intermediates and stops at the first failing op, so a recoverable tensor
 * error (a device gone, say) surfaces as this module's error. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "rl/losses.h"
#include "rl/rl.h"
#include "rl/rl_math.h"
#include "tensor/ops.h"

#define PPO_ADV_EPS 1e-8   /* CleanRL ppo.py's advantage normalisation */
#define SCRATCH_MAX 40

/* ---- scratch: the intermediates of one loss ------------------------------------------ */

struct scratch {
    const char *who;
    struct tensor *t[SCRATCH_MAX];
    int n;
    bool failed;
};

static struct tensor *keep(struct scratch *s, struct tensor *t)
{
    if (!t) {
        rl_set_error("%s: %s", s->who, tensor_last_error());
        s->failed = true;
        return NULL;
    }
    CHECK(s->n < SCRATCH_MAX);
    s->t[s->n++] = t;
    return t;
}

/* Evaluates `call` only while every earlier step succeeded, so no op ever
 * sees a NULL input; its result is owned by the scratch. Never nest. */
#define OP(s, call) ((s)->failed ? NULL : keep((s), (call)))

static void scratch_free(struct scratch *s)
{
    for (int i = 0; i < s->n; i++) tensor_free(s->t[i]);
    s->n = 0;
}

/* A new reference to result (NULL if any step failed); frees the rest. */
static struct tensor *scratch_finish(struct scratch *s, struct tensor *result)
{
    struct tensor *out = s->failed ? NULL : tensor_retain(result);
    scratch_free(s);
    return out;
}

/* n floats as a constant [n] tensor on dev (no grad). */
static struct tensor *constant(const float *data, int n, enum device dev)
{
    int64_t len = n;
    struct tensor *t = tensor_from_f32(1, &len, data);
    if (!t || dev == DEVICE_CPU) return t;
    struct tensor *on_dev = tensor_clone_to(t, dev);
    tensor_free(t);
    return on_dev;
}

static float scalar_value(const struct tensor *t)
{
    float v;
    tensor_copy_to_host(t, &v);
    return v;
}

/* ---- input checks ---------------------------------------------------------------------- */

static int check_count(const char *who, int n)
{
    if (n < 1) return rl_set_error("%s: n = %d (need at least 1 sample)", who, n);
    return 0;
}

/* t must be f32 [n] or [n,1]. */
static int check_vec(const char *who, const char *name, const struct tensor *t, int n)
{
    if (!t) return rl_set_error("%s: %s is NULL", who, name);
    if (t->dtype != DTYPE_F32)
        return rl_set_error("%s: %s has dtype %s (expected f32)", who, name, dtype_name(t->dtype));
    if (!((t->ndim == 1 || (t->ndim == 2 && t->shape[1] == 1)) && t->shape[0] == n)) {
        char s[96];
        return rl_set_error("%s: %s has shape %s (expected [%d] or [%d,1])", who, name,
                            shape_str(t->ndim, t->shape, s, sizeof s), n, n);
    }
    return 0;
}

static int check_device(const char *who, const char *na, const struct tensor *a, const char *nb,
                        const struct tensor *b)
{
    if (a->device != b->device)
        return rl_set_error("%s: device mismatch: %s on %s, %s on %s", who, na, device_name(a->device), nb,
                            device_name(b->device));
    return 0;
}

/* x must be n finite floats. */
static int check_array(const char *who, const char *name, const float *x, int n)
{
    if (!x) return rl_set_error("%s: %s is NULL", who, name);
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return rl_set_error("%s: %s[%d] is not finite (%g)", who, name, i, (double)x[i]);
    return 0;
}

static int check_real(const char *who, const char *name, double x)
{
    if (!isfinite(x)) return rl_set_error("%s: %s is not finite (%g)", who, name, x);
    return 0;
}

static int check_hyper(const char *who, const struct rl_ppo_hyper *h, double weight, bool uses_clip)
{
    if (!h) return rl_set_error("%s: hyperparameters are NULL", who);
    if (uses_clip && !(h->clip >= 0 && isfinite(h->clip)))
        return rl_set_error("%s: clip %g must be finite and >= 0", who, h->clip);
    if (check_real(who, "ent_coef", h->ent_coef) < 0 || check_real(who, "vf_coef", h->vf_coef) < 0 ||
        check_real(who, "weight", weight) < 0)
        return -1;
    return 0;
}

/* The checks shared by the PPO and A2C losses. */
static int check_actor_critic(const char *who, struct tensor *logp, struct tensor *entropy, struct tensor *values,
                              const float *adv, const float *returns, int n, const struct rl_ppo_hyper *h,
                              double weight, bool ppo)
{
    const char *lp_name = ppo ? "new_logp" : "logp", *v_name = ppo ? "new_values" : "values";
    if (check_count(who, n) < 0 || check_hyper(who, h, weight, ppo) < 0 || check_vec(who, lp_name, logp, n) < 0 ||
        check_vec(who, "entropy", entropy, n) < 0 || check_vec(who, v_name, values, n) < 0 ||
        check_device(who, lp_name, logp, "entropy", entropy) < 0 ||
        check_device(who, lp_name, logp, v_name, values) < 0 || check_array(who, "adv", adv, n) < 0 ||
        check_array(who, "returns", returns, n) < 0)
        return -1;
    return 0;
}

/* ---- distributions ------------------------------------------------------------------------ */

static int categorical_eval(struct scratch *s, struct tensor *logits, struct tensor *log_std, struct tensor *actions,
                            struct tensor **logp, struct tensor **entropy)
{
    const char *who = s->who;
    int64_t rows = logits->shape[0], col[2] = {rows, 1};
    char sh[96];
    if (log_std) return rl_set_error("%s: a categorical takes no log_std", who);
    if (actions->dtype != DTYPE_I64)
        return rl_set_error("%s: actions have dtype %s (expected i64 for a categorical)", who,
                            dtype_name(actions->dtype));
    if (!((actions->ndim == 1 || (actions->ndim == 2 && actions->shape[1] == 1)) && actions->shape[0] == rows))
        return rl_set_error("%s: actions have shape %s (expected [%lld] or [%lld,1])", who,
                            shape_str(actions->ndim, actions->shape, sh, sizeof sh), (long long)rows,
                            (long long)rows);
    if (check_device(who, "logits", logits, "actions", actions) < 0) return -1;
    struct tensor *ls = OP(s, tensor_log_softmax(logits));
    struct tensor *idx = OP(s, tensor_reshape(actions, 2, col));
    struct tensor *picked = OP(s, tensor_gather(ls, idx));
    *logp = OP(s, tensor_reshape(picked, 1, &rows));
    struct tensor *p = OP(s, tensor_exp(ls));
    struct tensor *plogp = OP(s, tensor_mul(p, ls));
    struct tensor *sum = OP(s, tensor_sum_dim(plogp, -1, false));
    *entropy = OP(s, tensor_neg(sum));
    return s->failed ? -1 : 0;
}

static int gaussian_eval(struct scratch *s, struct tensor *mean, struct tensor *log_std, struct tensor *actions,
                         struct tensor **logp, struct tensor **entropy)
{
    const char *who = s->who;
    int64_t rows = mean->shape[0], dims = mean->shape[1];
    char s1[96], s2[96];
    if (!log_std) return rl_set_error("%s: a Gaussian needs log_std", who);
    if (log_std->dtype != DTYPE_F32)
        return rl_set_error("%s: log_std has dtype %s (expected f32)", who, dtype_name(log_std->dtype));
    if (!((log_std->ndim == 1 && log_std->shape[0] == dims) || tensor_same_shape(log_std, mean)))
        return rl_set_error("%s: log_std has shape %s (expected [%lld] or %s)", who,
                            shape_str(log_std->ndim, log_std->shape, s1, sizeof s1), (long long)dims,
                            shape_str(mean->ndim, mean->shape, s2, sizeof s2));
    if (actions->dtype != DTYPE_F32)
        return rl_set_error("%s: actions have dtype %s (expected f32 for a Gaussian)", who,
                            dtype_name(actions->dtype));
    if (!tensor_same_shape(actions, mean))
        return rl_set_error("%s: actions have shape %s (expected %s)", who,
                            shape_str(actions->ndim, actions->shape, s1, sizeof s1),
                            shape_str(mean->ndim, mean->shape, s2, sizeof s2));
    if (check_device(who, "mean", mean, "log_std", log_std) < 0 ||
        check_device(who, "mean", mean, "actions", actions) < 0)
        return -1;
    *logp = OP(s, tensor_gaussian_log_prob(mean, log_std, actions));
    struct tensor *ent = OP(s, tensor_gaussian_entropy(log_std));
    if (log_std->ndim == 1) {   /* one entropy for every row: broadcast it to [N] */
        struct tensor *zeros = OP(s, tensor_new(DTYPE_F32, mean->device, 1, &rows));
        ent = OP(s, tensor_add(ent, zeros));
    }
    *entropy = ent;
    return s->failed ? -1 : 0;
}

int rl_dist_eval(enum rl_dist kind, struct tensor *a, struct tensor *log_std, struct tensor *actions,
                 struct tensor **logp, struct tensor **entropy)
{
    const char *who = "rl_dist_eval";
    if (!logp || !entropy) return rl_set_error("%s: logp or entropy output is NULL", who);
    if (!a) return rl_set_error("%s: a is NULL", who);
    if (!actions) return rl_set_error("%s: actions is NULL", who);
    if (a->dtype != DTYPE_F32) return rl_set_error("%s: a has dtype %s (expected f32)", who, dtype_name(a->dtype));
    if (a->ndim != 2 || a->shape[0] < 1 || a->shape[1] < 1) {
        char sh[96];
        return rl_set_error("%s: a has shape %s (expected [N,C] logits or [N,D] means, N, C, D >= 1)", who,
                            shape_str(a->ndim, a->shape, sh, sizeof sh));
    }
    struct scratch s = {.who = who};
    struct tensor *lp = NULL, *ent = NULL;
    int rc;
    switch (kind) {
    case RL_DIST_CATEGORICAL: rc = categorical_eval(&s, a, log_std, actions, &lp, &ent); break;
    case RL_DIST_GAUSSIAN: rc = gaussian_eval(&s, a, log_std, actions, &lp, &ent); break;
    default: rc = rl_set_error("%s: invalid distribution kind %d", who, (int)kind); break;
    }
    if (rc == 0) {
        *logp = tensor_retain(lp);
        *entropy = tensor_retain(ent);
    }
    scratch_free(&s);
    return rc;
}

/* ---- loss pieces ---------------------------------------------------------------------------- */

/* 0.5 * mean((v - R)^2), or with clip >= 0 CleanRL's clipped form
 * 0.5 * mean(max((v - R)^2, (oldV + clamp(v - oldV, -clip, clip) - R)^2)). */
static struct tensor *value_term(struct scratch *s, struct tensor *v, const float *returns, const float *old_values,
                                 double clip, int n, enum device dev)
{
    struct tensor *r = OP(s, constant(returns, n, dev));
    struct tensor *d = OP(s, tensor_sub(v, r));
    struct tensor *sq = OP(s, tensor_square(d));
    if (clip >= 0) {
        struct tensor *old = OP(s, constant(old_values, n, dev));
        struct tensor *dv = OP(s, tensor_sub(v, old));
        struct tensor *dvc = OP(s, tensor_clamp(dv, (float)-clip, (float)clip));
        struct tensor *vc = OP(s, tensor_add(old, dvc));
        struct tensor *dc = OP(s, tensor_sub(vc, r));
        struct tensor *sqc = OP(s, tensor_square(dc));
        sq = OP(s, tensor_maximum(sq, sqc));
    }
    struct tensor *m = OP(s, tensor_mean(sq));
    return OP(s, tensor_mul_scalar(m, 0.5f));
}

/* weight * (pg - ent_coef * ent + vf_coef * v) */
static struct tensor *combine(struct scratch *s, struct tensor *pg, struct tensor *ent, struct tensor *v,
                              const struct rl_ppo_hyper *h, double weight)
{
    struct tensor *e = OP(s, tensor_mul_scalar(ent, (float)-h->ent_coef));
    struct tensor *vv = OP(s, tensor_mul_scalar(v, (float)h->vf_coef));
    struct tensor *sum = OP(s, tensor_add(pg, e));
    sum = OP(s, tensor_add(sum, vv));
    return OP(s, tensor_mul_scalar(sum, (float)weight));
}

/* -adv (normalised when asked) into out[n]. */
static void negated_advantages(const float *adv, int n, bool norm, float *out)
{
    memcpy(out, adv, (size_t)n * sizeof *out);
    if (norm) rl_normalize(n, out, PPO_ADV_EPS);
    for (int i = 0; i < n; i++) out[i] = -out[i];
}

/* ---- losses ---------------------------------------------------------------------------------- */

/* Decoupled PPO's importance weights pi_prox / pi_behav = exp(prox - old)
 * multiplied into out[n] (the negated advantages); 0, or -1 naming the
 * first weight that is not finite. */
static int weigh_by_prox(const char *who, const float *old_logp, const float *prox_logp, int n, float *out)
{
    for (int i = 0; i < n; i++) {
        float w = (float)exp((double)prox_logp[i] - (double)old_logp[i]);
        if (!isfinite(w))
            return rl_set_error("%s: the importance weight of sample %d, exp(prox_logp - old_logp) = exp(%g), is not "
                                "finite", who, i, (double)prox_logp[i] - (double)old_logp[i]);
        out[i] *= w;   /* w == 1 (prox == old) leaves it as it was, bit for bit */
    }
    return 0;
}

struct tensor *rl_ppo_loss(struct tensor *new_logp, struct tensor *entropy, struct tensor *new_values,
                           const float *old_logp, const float *prox_logp, const float *adv, const float *returns,
                           const float *old_values, int n, const struct rl_ppo_hyper *h, double weight,
                           struct rl_loss_stats *stats)
{
    const char *who = "rl_ppo_loss";
    if (check_actor_critic(who, new_logp, entropy, new_values, adv, returns, n, h, weight, true) < 0 ||
        check_array(who, "old_logp", old_logp, n) < 0 ||
        (prox_logp && check_array(who, "prox_logp", prox_logp, n) < 0) ||
        (h->clip_vloss && check_array(who, "old_values", old_values, n) < 0))
        return NULL;
    enum device dev = new_logp->device;
    int64_t len = n;
    float *host = trib_xmalloc(3 * (size_t)n * sizeof *host);   /* -adv (x w) | ratio | logratio */
    negated_advantages(adv, n, h->norm_adv, host);
    if (prox_logp && weigh_by_prox(who, old_logp, prox_logp, n, host) < 0) {
        free(host);
        return NULL;
    }

    struct scratch s = {.who = who};
    struct tensor *lp = OP(&s, tensor_reshape(new_logp, 1, &len));
    struct tensor *ent = OP(&s, tensor_reshape(entropy, 1, &len));
    struct tensor *v = OP(&s, tensor_reshape(new_values, 1, &len));
    /* the clip's centre: the proximal policy when given, else the behaviour */
    struct tensor *old = OP(&s, constant(prox_logp ? prox_logp : old_logp, n, dev));
    struct tensor *logratio = OP(&s, tensor_sub(lp, old));
    struct tensor *ratio = OP(&s, tensor_exp(logratio));
    struct tensor *na = OP(&s, constant(host, n, dev));
    struct tensor *pg1 = OP(&s, tensor_mul(na, ratio));
    struct tensor *clipped = OP(&s, tensor_clamp(ratio, (float)(1.0 - h->clip), (float)(1.0 + h->clip)));
    struct tensor *pg2 = OP(&s, tensor_mul(na, clipped));
    struct tensor *pgmax = OP(&s, tensor_maximum(pg1, pg2));
    struct tensor *pg = OP(&s, tensor_mean(pgmax));
    struct tensor *vl = value_term(&s, v, returns, old_values, h->clip_vloss ? h->clip : -1.0, n, dev);
    struct tensor *ent_mean = OP(&s, tensor_mean(ent));
    struct tensor *loss = combine(&s, pg, ent_mean, vl, h, weight);

    if (stats && !s.failed) {
        /* from the graph's own f32 ratios, so clipfrac agrees with the clamp */
        float *r = host + n, *lr = host + 2 * (size_t)n;
        tensor_copy_to_host(ratio, r);
        tensor_copy_to_host(logratio, lr);
        double kl = 0.0, clipped_count = 0.0;
        for (int i = 0; i < n; i++) {
            kl += ((double)r[i] - 1.0) - lr[i];
            clipped_count += fabs((double)r[i] - 1.0) > h->clip;
        }
        *stats = (struct rl_loss_stats){
            .policy_loss = scalar_value(pg), .value_loss = scalar_value(vl), .entropy = scalar_value(ent_mean),
            .approx_kl = kl / n, .clipfrac = clipped_count / n,
        };
    }
    free(host);
    return scratch_finish(&s, loss);
}

struct tensor *rl_a2c_loss(struct tensor *logp, struct tensor *entropy, struct tensor *values,
                           const float *adv, const float *returns, int n, const struct rl_ppo_hyper *h,
                           double weight, struct rl_loss_stats *stats)
{
    const char *who = "rl_a2c_loss";
    if (check_actor_critic(who, logp, entropy, values, adv, returns, n, h, weight, false) < 0) return NULL;
    enum device dev = logp->device;
    int64_t len = n;
    float *host = trib_xmalloc((size_t)n * sizeof *host);
    negated_advantages(adv, n, h->norm_adv, host);

    struct scratch s = {.who = who};
    struct tensor *lp = OP(&s, tensor_reshape(logp, 1, &len));
    struct tensor *ent = OP(&s, tensor_reshape(entropy, 1, &len));
    struct tensor *v = OP(&s, tensor_reshape(values, 1, &len));
    struct tensor *na = OP(&s, constant(host, n, dev));
    struct tensor *terms = OP(&s, tensor_mul(lp, na));
    struct tensor *pg = OP(&s, tensor_mean(terms));
    struct tensor *vl = value_term(&s, v, returns, NULL, -1.0, n, dev);
    struct tensor *ent_mean = OP(&s, tensor_mean(ent));
    struct tensor *loss = combine(&s, pg, ent_mean, vl, h, weight);
    if (stats && !s.failed)
        *stats = (struct rl_loss_stats){
            .policy_loss = scalar_value(pg), .value_loss = scalar_value(vl), .entropy = scalar_value(ent_mean),
        };
    free(host);
    return scratch_finish(&s, loss);
}

struct tensor *rl_reinforce_loss(struct tensor *logp, const float *rewards, int n, double gamma)
{
    const char *who = "rl_reinforce_loss";
    if (check_count(who, n) < 0 || check_real(who, "gamma", gamma) < 0 || check_vec(who, "logp", logp, n) < 0 ||
        check_array(who, "rewards", rewards, n) < 0)
        return NULL;
    int64_t len = n;
    float *w = trib_xmalloc((size_t)n * sizeof *w);
    rl_discounted_returns(n, rewards, gamma, w);
    rl_normalize(n, w, RL_REINFORCE_EPS);
    for (int i = 0; i < n; i++) w[i] = -w[i];

    struct scratch s = {.who = who};
    struct tensor *lp = OP(&s, tensor_reshape(logp, 1, &len));
    struct tensor *c = OP(&s, constant(w, n, logp->device));
    struct tensor *terms = OP(&s, tensor_mul(lp, c));
    struct tensor *loss = OP(&s, tensor_sum(terms));
    free(w);
    return scratch_finish(&s, loss);
}
