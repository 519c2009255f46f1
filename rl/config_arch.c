/* The policy's architecture a run's config asks for (rl/config.h,
 * rl_arch_for and rl_arch_for_env): struct policy_arch of
 * runfiles/policy_file.h filled from the config and the env's spaces. */
#include <stdio.h>

#include "envs/env.h"
#include "rl/algo.h"
#include "rl/config.h"
#include "rl/rl.h"
#include "runfiles/policy_file.h"

/* The config's limits are the policy file's: a policy the config allows
 * is one its file can hold, and a file's is one the config could ask for. */
_Static_assert(RL_MAX_HIDDEN == POLICY_MAX_HIDDEN && RL_MAX_DIM == POLICY_MAX_DIM &&
               RL_MAX_POLICY_PARAMS == POLICY_MAX_PARAMS, "rl/config.h's limits are runfiles/policy_file.h's");

struct policy_arch rl_arch_for(const struct rl_config *cfg, int obs_dim, bool discrete, int act_n_or_dim)
{
    struct policy_arch a = { .obs_dim = obs_dim, .act_dim = act_n_or_dim, .gaussian = !discrete,
                             .value_head = rl_algo_get(cfg->algo) && rl_algo_get(cfg->algo)->value_head,
                             .n_hidden = cfg->hidden.n, .tanh = cfg->activation == RL_ACT_TANH,
                             .dropout = cfg->dropout, .init_log_std = cfg->init_log_std,
                             .orthogonal = cfg->init == RL_INIT_ORTHOGONAL };
    for (int i = 0; i < cfg->hidden.n; i++) a.hidden[i] = cfg->hidden.v[i];
    return a;
}

int rl_arch_for_env(const struct rl_config *cfg, const struct env_spec *spec, const char *what,
                    struct policy_arch *out)
{
    bool discrete = spec->act.kind == SPACE_DISCRETE;
    int acts = discrete ? spec->act.n : spec->act.dim;
    const char *unit = discrete ? "actions" : "action dims";
    if (spec->obs.dim < 1 || spec->obs.dim > RL_MAX_DIM)
        return rl_set_error("%s: the env %s has %d observation dims (at most %d)", what, spec->id, spec->obs.dim,
                            RL_MAX_DIM);
    if (acts < 1 || acts > RL_MAX_DIM)
        return rl_set_error("%s: the env %s has %d %s (at most %d)", what, spec->id, acts, unit, RL_MAX_DIM);
    struct policy_arch a = rl_arch_for(cfg, spec->obs.dim, discrete, acts);
    int64_t n = policy_arch_param_count(&a);   /* dims and hidden sizes <= 2^16, 4 layers: no overflow */
    if (n > RL_MAX_POLICY_PARAMS) {
        char hid[64] = "";
        size_t k = 0;
        for (int i = 0; i < a.n_hidden && k < sizeof hid; i++)
            k += (size_t)snprintf(hid + k, sizeof hid - k, "%s%d", i ? "," : "", a.hidden[i]);
        return rl_set_error("%s: a policy of --hidden %s for the env %s (%d observation dims, %d %s) has %lld "
                            "parameters (at most %lld)",
                            what, hid, spec->id, spec->obs.dim, acts, unit, (long long)n,
                            (long long)RL_MAX_POLICY_PARAMS);
    }
    *out = a;
    return 0;
}
