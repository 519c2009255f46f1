/* Pack/unpack pairs of the RL messages (see messages.h). */
#include "rl/messages.h"

#include <math.h>
#include <string.h>

#include "rl/algo_shape.h"
#include "rl/config.h"
#include "rl/rl.h"

static bool is_list(const struct rpc_value *v, size_t n) { return v && v->kind == RPC_LIST && v->list.len == n; }

/* 0 when lo <= x <= hi, else -1 with an error naming the field. */
static int in_range(const char *field, int64_t x, int64_t lo, int64_t hi)
{
    if (x >= lo && x <= hi) return 0;
    return rl_set_error("%s %lld is out of range %lld..%lld", field, (long long)x, (long long)lo, (long long)hi);
}

static bool f32_matrix(const struct tensor *t, int64_t rows, int64_t cols)
{
    return t->dtype == DTYPE_F32 && t->device == DEVICE_CPU && t->ndim == 2 && (rows < 0 || t->shape[0] == rows) &&
           t->shape[1] == cols && t->shape[0] >= 1;
}

/* ---- setup ----------------------------------------------------------------- */

/* A norm item: a map or nil (its reader checks the rest). */
static bool norm_kind(const struct rpc_value *v) { return v->kind == RPC_MAP || v->kind == RPC_NIL; }
static struct rpc_value norm_copy(const struct rpc_value *v)
{
    return v->kind == RPC_MAP ? rpc_value_copy(v) : rpc_nil();
}

struct rpc_value rl_setup_pack(const struct rl_setup_msg *m)
{
    struct rpc_value v = rpc_list(6);
    v.list.items[0] = rpc_value_copy(&m->config);
    v.list.items[1] = rpc_rref(m->policy);
    v.list.items[2] = rpc_int(m->index);
    v.list.items[3] = rpc_value_copy(&m->state);
    v.list.items[4] = rpc_int(m->generation);
    v.list.items[5] = norm_copy(&m->norm);
    return v;
}

int rl_setup_unpack(const struct rpc_value *a, struct rl_setup_msg *m)
{
    memset(m, 0, sizeof *m);
    if (!is_list(a, 6) || a->list.items[0].kind != RPC_MAP || a->list.items[1].kind != RPC_RREF ||
        a->list.items[2].kind != RPC_INT || (a->list.items[3].kind != RPC_BYTES && a->list.items[3].kind != RPC_NIL) ||
        a->list.items[4].kind != RPC_INT || !norm_kind(&a->list.items[5]))
        return rl_set_error("setup: expected (config map, policy RRef, index, state bytes or nil, generation, "
                            "norm map or nil)");
    if (in_range("setup: index", a->list.items[2].i, 0, RL_MAX_OBSERVERS - 1) != 0 ||
        in_range("setup: generation", a->list.items[4].i, 0, (1 << 30) - 1) != 0)
        return -1;
    m->config = rpc_value_copy(&a->list.items[0]);
    m->policy = rref_retain(a->list.items[1].rref);
    m->index = (int)a->list.items[2].i;
    m->state = rpc_value_copy(&a->list.items[3]);
    m->generation = (int)a->list.items[4].i;
    m->norm = norm_copy(&a->list.items[5]);
    return 0;
}

void rl_setup_clear(struct rl_setup_msg *m)
{
    rpc_value_clear(&m->config);
    rpc_value_clear(&m->state);
    rpc_value_clear(&m->norm);
    rref_free(m->policy);
    m->policy = NULL;
}

/* ---- act / evaluate ---------------------------------------------------------- */

struct rpc_value rl_obs_pack(struct tensor *obs, bool last)
{
    struct rpc_value v = rpc_list(2);
    v.list.items[0] = rpc_tensor(obs);
    v.list.items[1] = rpc_bool(last);
    return v;
}

int rl_obs_unpack(const struct rpc_value *a, int obs_dim, struct tensor **obs, bool *last)
{
    *obs = NULL;
    if (!is_list(a, 2) || a->list.items[0].kind != RPC_TENSOR || a->list.items[1].kind != RPC_BOOL)
        return rl_set_error("expected (obs tensor, last)");
    struct tensor *t = a->list.items[0].tensor;
    if (!f32_matrix(t, -1, obs_dim))
        return rl_set_error("obs must be f32 [N,%d] with N >= 1, not %s %s[%lld,%lld]", obs_dim,
                            dtype_name(t->dtype), t->ndim == 2 ? "" : "ndim != 2 ",
                            t->ndim > 0 ? (long long)t->shape[0] : 0LL, t->ndim > 1 ? (long long)t->shape[1] : 0LL);
    *obs = tensor_retain(t);
    if (last) *last = a->list.items[1].b;
    return 0;
}

struct rpc_value rl_policy_out_pack(const struct rl_policy_out *o)
{
    struct rpc_value v = rpc_list(4);
    v.list.items[0] = rpc_tensor(o->a);
    v.list.items[1] = o->log_std ? rpc_tensor(o->log_std) : rpc_nil();
    v.list.items[2] = o->value ? rpc_tensor(o->value) : rpc_nil();
    v.list.items[3] = rpc_int(o->version);
    return v;
}

int rl_policy_out_unpack(const struct rpc_value *v, int rows, int act_dim, bool gaussian, bool value_head,
                         struct rl_policy_out *o)
{
    memset(o, 0, sizeof *o);
    if (!is_list(v, 4) || v->list.items[0].kind != RPC_TENSOR || v->list.items[3].kind != RPC_INT)
        return rl_set_error("policy output: expected (a, log_std, value, version)");
    struct tensor *a = v->list.items[0].tensor;
    if (!f32_matrix(a, rows, act_dim)) return rl_set_error("policy output: a must be f32 [%d,%d]", rows, act_dim);
    const struct rpc_value *ls = &v->list.items[1], *val = &v->list.items[2];
    if (gaussian) {
        if (ls->kind != RPC_TENSOR || ls->tensor->dtype != DTYPE_F32 || ls->tensor->ndim != 1 ||
            ls->tensor->shape[0] != act_dim)
            return rl_set_error("policy output: log_std must be f32 [%d]", act_dim);
    } else if (ls->kind != RPC_NIL) {
        return rl_set_error("policy output: unexpected log_std");
    }
    if (value_head) {
        if (val->kind != RPC_TENSOR || val->tensor->dtype != DTYPE_F32 || val->tensor->ndim != 1 ||
            val->tensor->shape[0] != rows)
            return rl_set_error("policy output: value must be f32 [%d]", rows);
    } else if (val->kind != RPC_NIL) {
        return rl_set_error("policy output: unexpected value");
    }
    if (in_range("policy output: version", v->list.items[3].i, 0, RL_MSG_MAX_VERSION) != 0) return -1;
    o->a = tensor_retain(a);
    o->log_std = gaussian ? tensor_retain(ls->tensor) : NULL;
    o->value = value_head ? tensor_retain(val->tensor) : NULL;
    o->version = v->list.items[3].i;
    return 0;
}

void rl_policy_out_clear(struct rl_policy_out *o)
{
    tensor_free(o->a);
    tensor_free(o->log_std);
    tensor_free(o->value);
    memset(o, 0, sizeof *o);
}

/* ---- reports ------------------------------------------------------------------ */

void rl_report_add(struct rl_report *r, double ret, int len)
{
    if (r->episodes == 0 || ret < r->min_return) r->min_return = ret;
    r->episodes++;
    if (r->n_returns == RL_REPORT_EPISODES) {
        memmove(r->returns, r->returns + 1, (RL_REPORT_EPISODES - 1) * sizeof r->returns[0]);
        memmove(r->lengths, r->lengths + 1, (RL_REPORT_EPISODES - 1) * sizeof r->lengths[0]);
        r->n_returns--;
    }
    r->returns[r->n_returns] = ret;
    r->lengths[r->n_returns++] = len;
}

struct rpc_value rl_report_pack(const struct rl_report *r)
{
    struct rpc_value v = rpc_list(9);
    v.list.items[0] = rpc_int(r->steps);
    v.list.items[1] = rpc_int(r->version0);
    v.list.items[2] = rpc_int(r->episodes);
    v.list.items[3] = rpc_bytes(r->returns, (size_t)r->n_returns * sizeof r->returns[0]);
    v.list.items[4] = rpc_bytes(r->lengths, (size_t)r->n_returns * sizeof r->lengths[0]);
    v.list.items[5] = rpc_double(r->min_return);
    v.list.items[6] = rpc_double(r->explained_var);
    v.list.items[7] = rpc_bytes(r->info_sum, (size_t)r->n_info * sizeof r->info_sum[0]);
    v.list.items[8] = rpc_int(r->info_steps);
    return v;
}

int rl_report_unpack(const struct rpc_value *v, struct rl_report *r)
{
    memset(r, 0, sizeof *r);
    if (!is_list(v, 9) || v->list.items[0].kind != RPC_INT || v->list.items[1].kind != RPC_INT ||
        v->list.items[2].kind != RPC_INT || v->list.items[3].kind != RPC_BYTES || v->list.items[4].kind != RPC_BYTES ||
        v->list.items[5].kind != RPC_DOUBLE || v->list.items[6].kind != RPC_DOUBLE ||
        v->list.items[7].kind != RPC_BYTES || v->list.items[8].kind != RPC_INT)
        return rl_set_error("report: expected (steps, version0, episodes, returns, lengths, min, explained_var, "
                            "info sums, info steps)");
    size_t ni = v->list.items[7].str.len;
    if (ni % sizeof(double) || ni / sizeof(double) > ENV_INFO_MAX)
        return rl_set_error("report: bad info sums size (%zu bytes, at most %d doubles)", ni, ENV_INFO_MAX);
    size_t nb = v->list.items[3].str.len, nl = v->list.items[4].str.len;
    if (nb % sizeof(double) || nb / sizeof(double) > RL_REPORT_EPISODES || nl != nb / sizeof(double) * sizeof(int))
        return rl_set_error("report: bad returns/lengths sizes (%zu, %zu bytes)", nb, nl);
    r->steps = v->list.items[0].i;
    r->version0 = v->list.items[1].i;
    r->episodes = v->list.items[2].i;
    r->n_returns = (int)(nb / sizeof(double));
    if (in_range("report: steps", r->steps, 0, RL_MSG_MAX_STEPS) != 0 ||
        in_range("report: version0", r->version0, 0, RL_MSG_MAX_VERSION) != 0)
        return -1;
    /* two bounds of different kinds: each says which it is */
    if (r->episodes < r->n_returns)
        return rl_set_error("report: episodes %lld is fewer than the %d returns it carries", (long long)r->episodes,
                            r->n_returns);
    if (r->episodes > r->steps)
        return rl_set_error("report: episodes %lld is more than its %lld steps (an episode takes at least one)",
                            (long long)r->episodes, (long long)r->steps);
    memcpy(r->returns, v->list.items[3].str.ptr, nb);
    memcpy(r->lengths, v->list.items[4].str.ptr, nl);
    r->min_return = v->list.items[5].d;
    r->explained_var = v->list.items[6].d;
    r->n_info = (int)(ni / sizeof(double));
    memcpy(r->info_sum, v->list.items[7].str.ptr, ni);
    r->info_steps = v->list.items[8].i;
    if (in_range("report: info steps", r->info_steps, 0, RL_MSG_MAX_VERSION) != 0) return -1;
    for (int k = 0; k < r->n_info; k++)
        if (!isfinite(r->info_sum[k])) return rl_set_error("report: info sum %d %g is not finite", k, r->info_sum[k]);
    if (r->episodes > 0 && !isfinite(r->min_return)) return rl_set_error("report: min_return %g is not finite", r->min_return);
    for (int i = 0; i < r->n_returns; i++) {
        if (!isfinite(r->returns[i])) return rl_set_error("report: returns[%d] %g is not finite", i, r->returns[i]);
        if (r->lengths[i] < 1 || r->lengths[i] > RL_MSG_MAX_STEPS)
            return rl_set_error("report: lengths[%d] %d is out of range 1..%d", i, r->lengths[i], RL_MSG_MAX_STEPS);
    }
    return 0;
}

int rl_report_fits(const struct rl_report *r, const struct rl_config *cfg, int max_episode_steps, int64_t version_now)
{
    const struct rl_algo *a = rl_algo_of(cfg);
    if (!a) return rl_set_error("report: unknown algorithm %d", cfg->algo);
    if (rl_algo_report_steps_fit(a, cfg, max_episode_steps, r->steps) != 0) return -1;
    if (r->version0 > version_now)
        return rl_set_error("report: version0 %lld is newer than the policy's version %lld", (long long)r->version0,
                            (long long)version_now);
    return 0;
}

/* ---- loss ------------------------------------------------------------------- */

struct rpc_value rl_loss_req_pack(const struct rl_loss_req *m)
{
    struct rpc_value v = rpc_list(4);
    v.list.items[0] = rpc_int(m->epoch);
    v.list.items[1] = rpc_int(m->minibatch);
    v.list.items[2] = rpc_double(m->weight);
    v.list.items[3] = rl_policy_out_pack(&m->out);
    return v;
}

int rl_loss_req_unpack(const struct rpc_value *a, int rows, int act_dim, bool gaussian, bool value_head,
                       struct rl_loss_req *m)
{
    memset(m, 0, sizeof *m);
    if (!is_list(a, 4) || a->list.items[0].kind != RPC_INT || a->list.items[1].kind != RPC_INT ||
        a->list.items[2].kind != RPC_DOUBLE)
        return rl_set_error("loss: expected (epoch, minibatch, weight, policy output)");
    if (in_range("loss: epoch", a->list.items[0].i, 0, 1000000) != 0 ||
        in_range("loss: minibatch", a->list.items[1].i, 0, 1000000) != 0)
        return -1;
    if (!(a->list.items[2].d > 0 && a->list.items[2].d <= 1))
        return rl_set_error("loss: weight %g is out of range (0, 1]", a->list.items[2].d);
    if (rl_policy_out_unpack(&a->list.items[3], rows, act_dim, gaussian, value_head, &m->out) != 0) return -1;
    m->epoch = (int)a->list.items[0].i;
    m->minibatch = (int)a->list.items[1].i;
    m->weight = a->list.items[2].d;
    return 0;
}

void rl_loss_req_clear(struct rl_loss_req *m) { rl_policy_out_clear(&m->out); }

/* obs or nil; rows < 0: nil only */
static int obs_unpack(const struct rpc_value *v, int rows, int obs_dim, bool nil_ok, struct tensor **obs,
                      const char *what)
{
    *obs = NULL;
    if (v->kind == RPC_NIL && nil_ok) return 0;
    if (v->kind != RPC_TENSOR || !f32_matrix(v->tensor, rows, obs_dim))
        return rl_set_error("%s: the next minibatch's observations must be f32 [%d,%d]", what, rows, obs_dim);
    *obs = tensor_retain(v->tensor);
    return 0;
}

struct rpc_value rl_rollout_reply_pack(const struct rl_rollout_reply *m)
{
    struct rpc_value v = rpc_list(3);
    v.list.items[0] = rl_report_pack(&m->report);
    v.list.items[1] = rpc_tensor(m->obs);
    v.list.items[2] = norm_copy(&m->norm);
    return v;
}

int rl_rollout_reply_unpack(const struct rpc_value *v, int rows, int obs_dim, struct rl_rollout_reply *m)
{
    memset(m, 0, sizeof *m);
    if (!is_list(v, 3) || !norm_kind(&v->list.items[2]))
        return rl_set_error("rollout reply: expected (report, obs, norm map or nil)");
    if (rl_report_unpack(&v->list.items[0], &m->report) != 0) return -1;
    if (obs_unpack(&v->list.items[1], rows, obs_dim, false, &m->obs, "rollout reply") != 0) return -1;
    m->norm = norm_copy(&v->list.items[2]);
    return 0;
}

void rl_rollout_reply_clear(struct rl_rollout_reply *m)
{
    tensor_free(m->obs);
    m->obs = NULL;
    rpc_value_clear(&m->norm);
}

struct rpc_value rl_rollout_req_pack(const struct rpc_value *norm)
{
    struct rpc_value v = rpc_list(1);
    v.list.items[0] = norm_copy(norm);
    return v;
}

int rl_rollout_req_unpack(const struct rpc_value *args, const struct rpc_value **norm)
{
    if (!is_list(args, 1) || !norm_kind(&args->list.items[0]))
        return rl_set_error("rollout: expected (norm map or nil)");
    *norm = &args->list.items[0];
    return 0;
}

static struct rpc_value stats_pack(const struct rl_update_stats *s)
{
    struct rpc_value v = rpc_bytes(s, sizeof *s);
    return v;
}

static int stats_unpack(const struct rpc_value *v, struct rl_update_stats *s)
{
    if (v->kind != RPC_BYTES || v->str.len != sizeof *s) return rl_set_error("stats: expected %zu bytes", sizeof *s);
    memcpy(s, v->str.ptr, sizeof *s);
    const double x[] = { s->policy_loss, s->value_loss, s->entropy, s->approx_kl, s->clipfrac };
    static const char *const names[] = { "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac" };
    for (int i = 0; i < 5; i++)
        if (!isfinite(x[i])) return rl_set_error("stats: %s %g is not finite", names[i], x[i]);
    return 0;
}

struct rpc_value rl_minibatch_reply_pack(const struct rl_minibatch_reply *m)
{
    struct rpc_value v = rpc_list(2);
    v.list.items[0] = stats_pack(&m->stats);
    v.list.items[1] = m->obs ? rpc_tensor(m->obs) : rpc_nil();
    return v;
}

int rl_minibatch_reply_unpack(const struct rpc_value *v, int rows, int obs_dim, struct rl_minibatch_reply *m)
{
    memset(m, 0, sizeof *m);
    if (!is_list(v, 2)) return rl_set_error("loss reply: expected (stats, obs or nil)");
    if (stats_unpack(&v->list.items[0], &m->stats) != 0) return -1;
    return obs_unpack(&v->list.items[1], rows, obs_dim, true, &m->obs, "loss reply");
}

void rl_minibatch_reply_clear(struct rl_minibatch_reply *m)
{
    tensor_free(m->obs);
    m->obs = NULL;
}

struct rpc_value rl_loss_reply_pack(const struct rl_loss_reply *m)
{
    struct rpc_value v = rpc_list(3);
    v.list.items[0] = rpc_tensor(m->loss);
    v.list.items[1] = stats_pack(&m->stats);
    v.list.items[2] = rl_report_pack(&m->report);
    return v;
}

int rl_loss_reply_unpack(const struct rpc_value *v, struct rl_loss_reply *m)
{
    memset(m, 0, sizeof *m);
    if (!is_list(v, 3) || v->list.items[0].kind != RPC_TENSOR) return rl_set_error("loss reply: expected (loss, stats, report)");
    struct tensor *l = v->list.items[0].tensor;
    if (l->dtype != DTYPE_F32 || l->numel != 1) return rl_set_error("loss reply: the loss must be one f32");
    if (stats_unpack(&v->list.items[1], &m->stats) != 0 || rl_report_unpack(&v->list.items[2], &m->report) != 0)
        return -1;
    m->loss = tensor_retain(l);
    return 0;
}

void rl_loss_reply_clear(struct rl_loss_reply *m)
{
    tensor_free(m->loss);
    m->loss = NULL;
}

/* ---- async updates -------------------------------------------------------------- */

struct rpc_value rl_update_req_pack(const struct rl_update_req *m)
{
    struct rpc_value v = rpc_list(7);
    v.list.items[0] = rpc_int(m->ctx);
    v.list.items[1] = rpc_int(m->version0);
    v.list.items[2] = rpc_bool(m->has_report);
    v.list.items[3] = m->has_report ? rl_report_pack(&m->report) : rpc_nil();
    v.list.items[4] = stats_pack(&m->stats);
    v.list.items[5] = m->next_obs ? rpc_tensor(m->next_obs) : rpc_nil();
    v.list.items[6] = norm_copy(&m->norm);
    return v;
}

int rl_update_req_unpack(const struct rpc_value *a, int obs_dim, struct rl_update_req *m)
{
    memset(m, 0, sizeof *m);
    if (!is_list(a, 7) || a->list.items[0].kind != RPC_INT || a->list.items[1].kind != RPC_INT ||
        a->list.items[2].kind != RPC_BOOL || !norm_kind(&a->list.items[6]))
        return rl_set_error("update: expected (ctx, version0, has_report, report, stats, next obs, norm map or nil)");
    if (in_range("ctx", a->list.items[0].i, 1, INT64_MAX) != 0 ||
        in_range("version0", a->list.items[1].i, 0, RL_MSG_MAX_VERSION) != 0)
        return -1;
    m->ctx = a->list.items[0].i;
    m->version0 = a->list.items[1].i;
    m->has_report = a->list.items[2].b;
    if (m->has_report && rl_report_unpack(&a->list.items[3], &m->report) != 0) return -1;
    if (stats_unpack(&a->list.items[4], &m->stats) != 0) return -1;
    const struct rpc_value *o = &a->list.items[5];
    if (o->kind != RPC_NIL && (o->kind != RPC_TENSOR || !f32_matrix(o->tensor, -1, obs_dim)))
        return rl_set_error("update: the next observations must be f32 [N,%d] with N >= 1", obs_dim);
    if (o->kind != RPC_NIL) m->next_obs = tensor_retain(o->tensor);
    m->norm = norm_copy(&a->list.items[6]);
    return 0;
}

void rl_update_req_clear(struct rl_update_req *m)
{
    tensor_free(m->next_obs);
    m->next_obs = NULL;
    rpc_value_clear(&m->norm);
}

int rl_update_req_fits(const struct rl_update_req *m, const struct rl_config *cfg, int max_episode_steps,
                       int64_t version_now)
{
    if (m->version0 > version_now)
        return rl_set_error("version0 %lld is newer than the policy's version %lld", (long long)m->version0,
                            (long long)version_now);
    return m->has_report ? rl_report_fits(&m->report, cfg, max_episode_steps, version_now) : 0;
}

struct rpc_value rl_update_reply_pack(const struct rl_update_reply *m)
{
    struct rpc_value v = rpc_list(4);
    v.list.items[0] = rpc_bool(m->stop);
    v.list.items[1] = m->has_out ? rl_policy_out_pack(&m->out) : rpc_nil();
    v.list.items[2] = rpc_bool(m->stale);
    v.list.items[3] = norm_copy(&m->norm);
    return v;
}

int rl_update_reply_unpack(const struct rpc_value *v, int rows, int act_dim, bool gaussian, bool value_head,
                           struct rl_update_reply *m)
{
    memset(m, 0, sizeof *m);
    if (!is_list(v, 4) || v->list.items[0].kind != RPC_BOOL || v->list.items[2].kind != RPC_BOOL ||
        !norm_kind(&v->list.items[3]))
        return rl_set_error("update reply: expected (stop, policy output or nil, stale, norm map or nil)");
    m->stop = v->list.items[0].b;
    m->stale = v->list.items[2].b;
    if (v->list.items[1].kind != RPC_NIL) {
        if (rl_policy_out_unpack(&v->list.items[1], rows, act_dim, gaussian, value_head, &m->out) != 0) return -1;
        m->has_out = true;
    }
    m->norm = norm_copy(&v->list.items[3]);   /* last: a refused reply holds nothing to clear */
    return 0;
}

void rl_update_reply_clear(struct rl_update_reply *m)
{
    rl_policy_out_clear(&m->out);
    m->has_out = false;
    rpc_value_clear(&m->norm);
}
