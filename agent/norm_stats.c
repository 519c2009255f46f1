/* The run's normalisation statistics on the agent's side (norm_stats.h). */
#include "agent/norm_stats.h"

#include <stdlib.h>
#include <string.h>

#include "agent/state.h"
#include "common/check.h"
#include "rl/rl.h"

struct agent_norm {
    int obs_dim, B;
    bool ret_on;
    double clip_obs, clip_reward;
    struct rl_norm_stats set;
    struct rl_norm_stats held[RL_MAX_OBSERVERS];   /* sync: the deltas of this iteration */
    bool has[RL_MAX_OBSERVERS];
    /* the reset observations observer k's next delta counts besides its
     * report's steps (agent_norm_set_up); under a->mu */
    double reset_rows[RL_MAX_OBSERVERS];
};

struct agent_norm *agent_norm_new(const struct rl_config *cfg, int obs_dim)
{
    if (!cfg->norm_obs && !cfg->norm_reward) return NULL;
    struct agent_norm *n = trib_xcalloc(1, sizeof *n);
    n->obs_dim = cfg->norm_obs ? obs_dim : 0;
    n->ret_on = cfg->norm_reward;
    n->B = cfg->envs_per_observer;
    n->clip_obs = cfg->clip_obs;
    n->clip_reward = cfg->clip_reward;
    CHECK(rl_norm_stats_init(&n->set, n->obs_dim, n->ret_on, n->clip_obs, n->clip_reward) == 0);
    return n;
}

void agent_norm_free(struct agent_norm *n)
{
    if (!n) return;
    rl_norm_stats_free(&n->set);
    for (int k = 0; k < RL_MAX_OBSERVERS; k++)
        if (n->has[k]) rl_norm_stats_free(&n->held[k]);
    free(n);
}

const struct rl_norm_stats *agent_norm(struct agent *a) { return a->norm ? &a->norm->set : NULL; }

bool agent_norm_copy(struct agent *a, struct rl_norm_stats *out)
{
    struct agent_norm *n = a->norm;
    if (!n) return false;
    CHECK(rl_norm_stats_init(out, n->obs_dim, n->ret_on, n->clip_obs, n->clip_reward) == 0);
    pthread_mutex_lock(&a->mu);
    rl_norm_stats_copy(out, &n->set);
    pthread_mutex_unlock(&a->mu);
    return true;
}

struct rpc_value agent_norm_pack(struct agent *a)
{
    if (!a->norm) return rpc_nil();
    pthread_mutex_lock(&a->mu);
    struct rpc_value v = rl_norm_stats_pack(&a->norm->set);
    pthread_mutex_unlock(&a->mu);
    return v;
}

/* delta unpacked into *out (the run's dims): nil is refused when the run
 * normalises, a map when it does not. */
static int unpack(const struct agent_norm *n, const struct rpc_value *delta, struct rl_norm_stats *out)
{
    if (!n) return delta->kind == RPC_NIL ? 0 : rl_set_error("norm: statistics sent, but this run normalises nothing");
    if (delta->kind == RPC_NIL) return rl_set_error("norm: no statistics sent, but this run normalises");
    return rl_norm_stats_unpack(delta, n->obs_dim, n->ret_on, n->clip_obs, n->clip_reward, out);
}

void agent_norm_set_up(struct agent *a, int k, bool restored)
{
    struct agent_norm *n = a->norm;
    if (!n) return;
    pthread_mutex_lock(&a->mu);
    n->reset_rows[k] = restored ? 0 : n->B;
    pthread_mutex_unlock(&a->mu);
}

/* d (unpacked) checked as the delta of observer k's report of `steps` env
 * steps; the set-up's reset rows are counted once. */
static int delta_check(struct agent *a, int k, const struct rl_norm_stats *d, int64_t steps)
{
    struct agent_norm *n = a->norm;
    pthread_mutex_lock(&a->mu);
    double resets = n->reset_rows[k];
    n->reset_rows[k] = 0;
    pthread_mutex_unlock(&a->mu);
    return rl_norm_delta_check(d, (double)steps + resets, (double)steps);
}

int agent_norm_hold(struct agent *a, int k, const struct rpc_value *delta, int64_t steps)
{
    struct agent_norm *n = a->norm;
    agent_norm_drop(a, k);
    if (unpack(n, delta, n ? &n->held[k] : NULL) != 0) return -1;
    if (!n) return 0;
    n->has[k] = true;
    if (delta_check(a, k, &n->held[k], steps) == 0) return 0;
    agent_norm_drop(a, k);
    return -1;
}

void agent_norm_drop(struct agent *a, int k)
{
    struct agent_norm *n = a->norm;
    if (!n || !n->has[k]) return;
    rl_norm_stats_free(&n->held[k]);
    n->has[k] = false;
}

int agent_norm_merge_held(struct agent *a, int k)
{
    struct agent_norm *n = a->norm;
    if (!n || !n->has[k]) return 0;
    int rc = rl_norm_stats_merge_checked(&n->set, &n->held[k]);
    agent_norm_drop(a, k);
    return rc;
}

int agent_norm_unpack(struct agent *a, int k, const struct rpc_value *delta, bool has_report, int64_t steps,
                      struct rl_norm_stats *d, bool *has)
{
    *has = false;
    if (!has_report || !a->norm) {   /* an update without a report carries none */
        if (delta->kind == RPC_NIL) return 0;
        return rl_set_error(!a->norm ? "norm: statistics sent, but this run normalises nothing"
                                     : "norm: statistics sent without a report");
    }
    if (k < 0) return rl_set_error("norm: statistics from a caller that is no observer of this run");
    if (unpack(a->norm, delta, d) != 0) return -1;
    if (delta_check(a, k, d, steps) != 0) {
        rl_norm_stats_free(d);
        return -1;
    }
    *has = true;
    return 0;
}

int agent_norm_merge_locked(struct agent *a, const struct rl_norm_stats *d)
{
    return rl_norm_stats_merge_checked(&a->norm->set, d);
}

unsigned char *agent_norm_save(struct agent *a, size_t *len)
{
    *len = 0;
    if (!a->norm) return NULL;
    *len = rl_norm_stats_size(&a->norm->set);
    unsigned char *b = trib_xmalloc(*len);
    pthread_mutex_lock(&a->mu);
    rl_norm_stats_save(&a->norm->set, b);
    pthread_mutex_unlock(&a->mu);
    return b;
}

int agent_norm_load(struct agent *a, const void *b, size_t len)
{
    if (!a->norm) return 0;
    return rl_norm_stats_load(&a->norm->set, b, len);
}
