/* Running observation and reward normalisation (norm.h): Gymnasium's
 * RunningMeanStd, NormalizeObservation and NormalizeReward (v0.28/0.29, as
 * CleanRL's ppo_continuous_action.py uses them), in float64, with the
 * agent's set, an observer's delta and their wire and byte forms. */
#include "rl/norm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rl/config.h"
#include "rl/rl.h"

int rl_rms_init(struct rl_rms *r, int dim)
{
    memset(r, 0, sizeof *r);
    if (dim < 1) return rl_set_error("norm: dim %d must be >= 1", dim);
    r->mean = calloc((size_t)dim, sizeof *r->mean);
    r->var = calloc((size_t)dim, sizeof *r->var);
    if (!r->mean || !r->var) {
        rl_rms_free(r);
        return rl_set_error("norm: out of memory for %d values", dim);
    }
    r->dim = dim;
    r->count = RL_NORM_COUNT0;
    for (int i = 0; i < dim; i++) r->var[i] = 1.0;
    return 0;
}

void rl_rms_free(struct rl_rms *r)
{
    free(r->mean);
    free(r->var);
    memset(r, 0, sizeof *r);
}

void rl_rms_clear(struct rl_rms *r)
{
    r->count = 0;
    for (int i = 0; i < r->dim; i++) r->mean[i] = r->var[i] = 0;
}

void rl_rms_copy(struct rl_rms *dst, const struct rl_rms *src)
{
    dst->count = src->count;
    memcpy(dst->mean, src->mean, (size_t)src->dim * sizeof *dst->mean);
    memcpy(dst->var, src->var, (size_t)src->dim * sizeof *dst->var);
}

/* update_mean_var_count_from_moments of component i, term by term in
 * Gymnasium's order (the rounding is its): the new mean and variance. */
static void folded(const struct rl_rms *r, int i, double batch_mean, double batch_var, double batch_count,
                   double *mean, double *var)
{
    double delta = batch_mean - r->mean[i];
    double tot_count = r->count + batch_count;
    double new_mean = r->mean[i] + delta * batch_count / tot_count;
    double m_a = r->var[i] * r->count;
    double m_b = batch_var * batch_count;
    double M2 = m_a + m_b + delta * delta * r->count * batch_count / tot_count;
    *mean = new_mean;
    *var = M2 / tot_count;
}

static void fold(struct rl_rms *r, int i, double batch_mean, double batch_var, double batch_count)
{
    folded(r, i, batch_mean, batch_var, batch_count, &r->mean[i], &r->var[i]);
}

void rl_rms_merge(struct rl_rms *into, const struct rl_rms *from)
{
    if (from->count == 0) return;
    if (into->count == 0) {   /* an empty side (a delta): the other's moments exactly */
        rl_rms_copy(into, from);
        return;
    }
    for (int i = 0; i < into->dim; i++) fold(into, i, from->mean[i], from->var[i], from->count);
    into->count += from->count;
}

/* One batch of rows: x(r, i) is row r's component i (float or double). */
#define RMS_UPDATE(r, x, rows)                                                                                  \
    do {                                                                                                        \
        if ((rows) < 1) break;                                                                                  \
        for (int i = 0; i < (r)->dim; i++) {                                                                    \
            double sum = 0, sq = 0;                                                                             \
            for (int k = 0; k < (rows); k++) sum += (double)(x)[(size_t)k * (r)->dim + i];                      \
            double mean = sum / (rows);                                                                         \
            for (int k = 0; k < (rows); k++) {                                                                  \
                double d = (double)(x)[(size_t)k * (r)->dim + i] - mean;                                        \
                sq += d * d;                                                                                    \
            }                                                                                                   \
            if ((r)->count == 0) (r)->mean[i] = mean, (r)->var[i] = sq / (rows);                                \
            else fold((r), i, mean, sq / (rows), (rows));                                                       \
        }                                                                                                       \
        (r)->count += (rows);                                                                                   \
    } while (0)

void rl_rms_update(struct rl_rms *r, const float *x, int rows) { RMS_UPDATE(r, x, rows); }

void rl_rms_update_d(struct rl_rms *r, const double *x, int rows) { RMS_UPDATE(r, x, rows); }

/* ---- the run's set ---------------------------------------------------------- */

int rl_norm_stats_init(struct rl_norm_stats *s, int obs_dim, bool ret_on, double clip_obs, double clip_reward)
{
    memset(s, 0, sizeof *s);
    s->clip_obs = clip_obs;
    s->clip_reward = clip_reward;
    if (obs_dim > 0 && rl_rms_init(&s->obs, obs_dim) != 0) return -1;
    if (ret_on && rl_rms_init(&s->ret, 1) != 0) {
        rl_norm_stats_free(s);
        return -1;
    }
    return 0;
}

void rl_norm_stats_free(struct rl_norm_stats *s)
{
    rl_rms_free(&s->obs);
    rl_rms_free(&s->ret);
}

void rl_norm_stats_merge(struct rl_norm_stats *into, const struct rl_norm_stats *from)
{
    if (into->obs.dim) rl_rms_merge(&into->obs, &from->obs);
    if (into->ret.dim) rl_rms_merge(&into->ret, &from->ret);
}

/* Component i of side as a set within the bounds holds it (finite, var
 * >= 0, mean^2 + var at most moment_max): 0, or -1 naming it after `what`
 * ("" or "merged into the run's set, "). */
static int value_check(const char *what, const char *side, int i, double mean, double var, double moment_max)
{
    if (!isfinite(mean)) return rl_set_error("norm: %s%s.mean[%d] %g must be finite", what, side, i, mean);
    if (!(isfinite(var) && var >= 0))
        return rl_set_error("norm: %s%s.var[%d] %g must be finite and >= 0", what, side, i, var);
    if (!(mean * mean + var <= moment_max))
        return rl_set_error("norm: %s%s.mean[%d] %g and var[%d] %g: mean^2 + var must be at most %g", what, side, i,
                            mean, i, var, moment_max);
    return 0;
}

static int count_check(const char *what, const char *side, double count)
{
    if (!(isfinite(count) && count >= 0))
        return rl_set_error("norm: %s%s.count %g must be finite and >= 0", what, side, count);
    if (count > RL_NORM_COUNT_MAX) return rl_set_error("norm: %s%s.count %g is more than 2^53", what, side, count);
    return 0;
}

/* r's values (read in) checked as a set within the bounds; the error names
 * side.field[i]. */
static int rms_check(const struct rl_rms *r, const char *side)
{
    if (count_check("", side, r->count) != 0) return -1;
    for (int i = 0; i < r->dim; i++)
        if (value_check("", side, i, r->mean[i], r->var[i], RL_NORM_MOMENT_MAX) != 0) return -1;
    return 0;
}

int rl_norm_stats_check(const struct rl_norm_stats *s)
{
    return rms_check(&s->obs, "obs") != 0 || rms_check(&s->ret, "ret") != 0 ? -1 : 0;
}

/* Whether into merged with from (rl_rms_merge) stays a set within the
 * bounds, computed as the merge will compute it: 0, or -1 naming the
 * run's side.field[i] it would break. */
static int rms_merge_check(const struct rl_rms *into, const struct rl_rms *from, const char *side)
{
    if (!into->dim || from->count == 0) return 0;
    if (count_check("merged into the run's set, ", side, into->count + from->count) != 0) return -1;
    for (int i = 0; i < into->dim; i++) {
        double mean = from->mean[i], var = from->var[i];
        if (into->count != 0) folded(into, i, from->mean[i], from->var[i], from->count, &mean, &var);
        if (value_check("merged into the run's set, ", side, i, mean, var, RL_NORM_MOMENT_MAX) != 0) return -1;
    }
    return 0;
}

int rl_norm_stats_merge_checked(struct rl_norm_stats *into, const struct rl_norm_stats *from)
{
    if (rms_merge_check(&into->obs, &from->obs, "obs") != 0 || rms_merge_check(&into->ret, &from->ret, "ret") != 0)
        return -1;
    rl_norm_stats_merge(into, from);
    return 0;
}

/* A delta's side r: rows rows of values within +-RL_NORM_VALUE_MAX. */
static int rms_delta_check(const struct rl_rms *r, const char *side, const char *unit, double rows)
{
    if (!r->dim) return 0;
    if (r->count != rows)
        return rl_set_error("norm: %s.count %g is not the %.0f %s its report carries", side, r->count, rows, unit);
    for (int i = 0; i < r->dim; i++)
        if (value_check("", side, i, r->mean[i], r->var[i], RL_NORM_VALUE_MAX * RL_NORM_VALUE_MAX) != 0) return -1;
    return 0;
}

int rl_norm_delta_check(const struct rl_norm_stats *d, double obs_rows, double ret_rows)
{
    if (rms_delta_check(&d->obs, "obs", "observations", obs_rows) != 0 ||
        rms_delta_check(&d->ret, "ret", "discounted returns", ret_rows) != 0)
        return -1;
    return 0;
}

void rl_norm_stats_copy(struct rl_norm_stats *dst, const struct rl_norm_stats *src)
{
    if (dst->obs.dim) rl_rms_copy(&dst->obs, &src->obs);
    if (dst->ret.dim) rl_rms_copy(&dst->ret, &src->ret);
}

static float clipf(double x, double c) { return (float)(x < -c ? -c : x > c ? c : x); }

struct policy_norm rl_norm_stats_view(const struct rl_norm_stats *s)
{
    if (!s || s->obs.dim == 0) return (struct policy_norm){ 0 };
    return (struct policy_norm){ .dim = s->obs.dim, .count = s->obs.count, .clip = s->clip_obs, .eps = RL_NORM_EPS,
                                 .mean = s->obs.mean, .var = s->obs.var };
}

void rl_norm_stats_apply(const struct rl_norm_stats *s, float *obs, int rows)
{
    struct policy_norm v = rl_norm_stats_view(s);
    policy_norm_apply(&v, obs, rows);   /* the one frozen normalisation, training's and the export's */
}

/* ---- wire and bytes ------------------------------------------------------------ */

static struct rpc_value rms_pack(const struct rl_rms *r)
{
    struct rpc_value v = rpc_map(3);
    rpc_map_set(&v, 0, "count", rpc_double(r->count));
    rpc_map_set(&v, 1, "mean", rpc_bytes(r->mean, (size_t)r->dim * sizeof(double)));
    rpc_map_set(&v, 2, "var", rpc_bytes(r->var, (size_t)r->dim * sizeof(double)));
    return v;
}

struct rpc_value rl_norm_stats_pack(const struct rl_norm_stats *s)
{
    struct rpc_value v = rpc_map((s->obs.dim > 0) + (s->ret.dim > 0));
    size_t i = 0;
    if (s->obs.dim) rpc_map_set(&v, i++, "obs", rms_pack(&s->obs));
    if (s->ret.dim) rpc_map_set(&v, i++, "ret", rms_pack(&s->ret));
    return v;
}

static int rms_unpack_array(const struct rpc_value *m, const char *side, const char *key, double *out, int dim)
{
    const struct rpc_value *a = rpc_map_get(m, key);
    if (!a || a->kind != RPC_BYTES) return rl_set_error("norm: %s.%s must be bytes of f64", side, key);
    if (a->str.len != (size_t)dim * sizeof(double))
        return rl_set_error("norm: %s.%s has %zu values, the run's has %d", side, key, a->str.len / sizeof(double),
                            dim);
    memcpy(out, a->str.ptr, a->str.len);
    return 0;
}

static int rms_unpack(const struct rpc_value *v, const char *side, struct rl_rms *r)
{
    const struct rpc_value *m = rpc_map_get(v, side);
    if (!r->dim) return m ? rl_set_error("norm: %s is off in this run, but the statistics carry it", side) : 0;
    if (!m || m->kind != RPC_MAP) return rl_set_error("norm: %s must be a map {count, mean, var}", side);
    const struct rpc_value *c = rpc_map_get(m, "count");
    if (!c || c->kind != RPC_DOUBLE) return rl_set_error("norm: %s.count must be a double", side);
    r->count = c->d;
    if (rms_unpack_array(m, side, "mean", r->mean, r->dim) != 0 || rms_unpack_array(m, side, "var", r->var, r->dim) != 0)
        return -1;
    return rms_check(r, side);
}

int rl_norm_stats_unpack(const struct rpc_value *v, int obs_dim, bool ret_on, double clip_obs, double clip_reward,
                         struct rl_norm_stats *s)
{
    if (rl_norm_stats_init(s, obs_dim, ret_on, clip_obs, clip_reward) != 0) return -1;
    int rc = 0;
    if (!v || v->kind != RPC_MAP) rc = rl_set_error("norm: expected a map {obs, ret}");
    else if (rms_unpack(v, "obs", &s->obs) != 0 || rms_unpack(v, "ret", &s->ret) != 0) rc = -1;
    if (rc != 0) rl_norm_stats_free(s);
    return rc;
}

static size_t rms_bytes(const struct rl_rms *r) { return r->dim ? (1 + 2 * (size_t)r->dim) * sizeof(double) : 0; }

size_t rl_norm_stats_size(const struct rl_norm_stats *s) { return rms_bytes(&s->obs) + rms_bytes(&s->ret); }

static unsigned char *rms_save(const struct rl_rms *r, unsigned char *p)
{
    if (!r->dim) return p;
    size_t n = (size_t)r->dim * sizeof(double);
    memcpy(p, &r->count, sizeof r->count);
    memcpy(p + sizeof(double), r->mean, n);
    memcpy(p + sizeof(double) + n, r->var, n);
    return p + rms_bytes(r);
}

void rl_norm_stats_save(const struct rl_norm_stats *s, unsigned char *out) { rms_save(&s->ret, rms_save(&s->obs, out)); }

static const unsigned char *rms_load(struct rl_rms *r, const unsigned char *p)
{
    if (!r->dim) return p;
    size_t n = (size_t)r->dim * sizeof(double);
    memcpy(&r->count, p, sizeof r->count);
    memcpy(r->mean, p + sizeof(double), n);
    memcpy(r->var, p + sizeof(double) + n, n);
    return p + rms_bytes(r);
}

int rl_norm_stats_load(struct rl_norm_stats *s, const void *b, size_t n)
{
    if (n != rl_norm_stats_size(s))
        return rl_set_error("norm: %zu bytes, the run's statistics (obs dim %d, ret %s) take %zu", n, s->obs.dim,
                            s->ret.dim ? "on" : "off", rl_norm_stats_size(s));
    rms_load(&s->ret, rms_load(&s->obs, b));
    return rl_norm_stats_check(s);
}

/* ---- an observer's side -------------------------------------------------------- */

int rl_norm_init(struct rl_norm *n, const struct rl_config *cfg, int B, int obs_dim)
{
    memset(n, 0, sizeof *n);
    if (!cfg->norm_obs && !cfg->norm_reward) return 0;
    int d = cfg->norm_obs ? obs_dim : 0;
    n->B = B;
    n->gamma = cfg->gamma;
    if (rl_norm_stats_init(&n->global, d, cfg->norm_reward, cfg->clip_obs, cfg->clip_reward) != 0 ||
        rl_norm_stats_init(&n->delta, d, cfg->norm_reward, cfg->clip_obs, cfg->clip_reward) != 0 ||
        rl_norm_stats_init(&n->now, d, cfg->norm_reward, cfg->clip_obs, cfg->clip_reward) != 0 ||
        !(n->ret = calloc((size_t)B, sizeof *n->ret))) {
        rl_norm_free(n);
        return rl_set_error("norm: out of memory for %d envs", B);
    }
    rl_rms_clear(&n->delta.obs);
    rl_rms_clear(&n->delta.ret);
    return 0;
}

void rl_norm_free(struct rl_norm *n)
{
    rl_norm_stats_free(&n->global);
    rl_norm_stats_free(&n->delta);
    rl_norm_stats_free(&n->now);
    free(n->ret);
    memset(n, 0, sizeof *n);
}

bool rl_norm_on(const struct rl_norm *n) { return n->B > 0; }

/* now = global merged with delta, on one side. */
static void refresh(struct rl_rms *now, const struct rl_rms *global, const struct rl_rms *delta)
{
    rl_rms_copy(now, global);
    rl_rms_merge(now, delta);
}

void rl_norm_obs(struct rl_norm *n, float *obs, int rows)
{
    if (!n->now.obs.dim) return;
    rl_rms_update(&n->delta.obs, obs, rows);
    refresh(&n->now.obs, &n->global.obs, &n->delta.obs);
    rl_norm_stats_apply(&n->now, obs, rows);
}

void rl_norm_reward(struct rl_norm *n, const float *r, const bool *terminated, float *out)
{
    rl_norm_reward_rows(n, 0, n->B, r, terminated, out);
}

void rl_norm_reward_rows(struct rl_norm *n, int first, int rows, const float *r, const bool *terminated, float *out)
{
    if (!n->now.ret.dim) {
        memcpy(out, r, (size_t)rows * sizeof *out);
        return;
    }
    double *ret = n->ret + first;
    for (int b = 0; b < rows; b++) ret[b] = ret[b] * n->gamma * (terminated[b] ? 0.0 : 1.0) + (double)r[b];
    rl_rms_update_d(&n->delta.ret, ret, rows);
    refresh(&n->now.ret, &n->global.ret, &n->delta.ret);
    double sd = sqrt(n->now.ret.var[0] + RL_NORM_EPS);
    for (int b = 0; b < rows; b++) out[b] = clipf((double)r[b] / sd, n->now.clip_reward);
}

void rl_norm_take_delta(struct rl_norm *n, struct rl_norm_stats *out)
{
    rl_norm_stats_copy(out, &n->delta);
    rl_rms_clear(&n->delta.obs);
    rl_rms_clear(&n->delta.ret);
}

void rl_norm_adopt(struct rl_norm *n, const struct rl_norm_stats *global)
{
    rl_norm_stats_copy(&n->global, global);
    if (n->now.obs.dim) refresh(&n->now.obs, &n->global.obs, &n->delta.obs);
    if (n->now.ret.dim) refresh(&n->now.ret, &n->global.ret, &n->delta.ret);
}
