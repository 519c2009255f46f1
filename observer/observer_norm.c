/* The normalisation statistics on an observer (docs/design.md §6
 * "Normalisation statistics"): the agent's set it adopts, checked, and
 * the delta its envs added, handed back with its report. */
#include "observer/state.h"

#include "common/check.h"

#include "rl/norm.h"
#include "rl/rl.h"

/* The agent's set v (setup, a sync rollout request, an async update's
 * reply: rl_norm_stats_pack's map; nil when the run normalises nothing)
 * becomes this observer's global. 0 or -1 with rl_last_error() naming what
 * carried it. */
int observer_norm_adopt(struct observer *o, const struct rpc_value *v, const char *what)
{
    struct rl_norm *nm = &o->ln.norm;
    if (!rl_norm_on(nm))
        return v->kind == RPC_NIL ? 0 : rl_set_error("%s: normalisation statistics sent, but this run normalises nothing", what);
    if (v->kind == RPC_NIL) return rl_set_error("%s: no normalisation statistics, but this run normalises", what);
    struct rl_norm_stats s;
    if (rl_norm_stats_unpack(v, nm->global.obs.dim, nm->global.ret.dim > 0, nm->global.clip_obs,
                             nm->global.clip_reward, &s) != 0)
        return rl_set_error("%s: %s", what, rl_last_error());
    rl_norm_adopt(nm, &s);
    rl_norm_stats_free(&s);
    return 0;
}

/* This observer's delta since it last sent one, in wire form (cleared
 * here), nil when the run normalises nothing. */
struct rpc_value observer_norm_take_delta(struct observer *o)
{
    struct rl_norm *nm = &o->ln.norm;
    if (!rl_norm_on(nm)) return rpc_nil();
    struct rl_norm_stats d;
    CHECK(rl_norm_stats_init(&d, nm->delta.obs.dim, nm->delta.ret.dim > 0, nm->delta.clip_obs, nm->delta.clip_reward) == 0);
    rl_norm_take_delta(nm, &d);
    struct rpc_value v = rl_norm_stats_pack(&d);
    rl_norm_stats_free(&d);
    return v;
}
