/* The policy's architecture from the config, and its forward (arch.h). */
#include "rl/arch.h"

#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "envs/env.h"
#include "rl/messages.h"
#include "rl/rl.h"
#include "tensor/ops.h"

/* The config's limits are the policy file's: a policy the config allows
 * is one its file can hold, and a file's is one the config could ask for. */
_Static_assert(RL_MAX_HIDDEN == POLICY_MAX_HIDDEN && RL_MAX_DIM == POLICY_MAX_DIM &&
               RL_MAX_POLICY_PARAMS == POLICY_MAX_PARAMS, "rl/config.h's limits are runfiles/policy_file.h's");

struct policy_arch rl_arch_for(const struct rl_config *cfg, int obs_dim, bool discrete, int act_n_or_dim)
{
    struct policy_arch a = { .obs_dim = obs_dim, .act_dim = act_n_or_dim, .gaussian = !discrete,
                             .value_head = cfg->algo != RL_ALGO_REINFORCE, .n_hidden = cfg->n_hidden,
                             .tanh = cfg->tanh, .dropout = cfg->dropout, .init_log_std = cfg->init_log_std };
    for (int i = 0; i < cfg->n_hidden; i++) a.hidden[i] = cfg->hidden[i];
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

int rl_arch_forward(const struct policy_arch *a, struct nn_module *actor, struct nn_module *critic, enum device dev,
                    struct tensor *obs, struct rl_policy_out *o)
{
    memset(o, 0, sizeof *o);
    struct tensor *x = dev == DEVICE_CPU ? tensor_retain(obs) : tensor_to(obs, dev);
    if (!x) return -1;
    struct tensor *out[NN_MAX_IO + 1] = { 0 };
    int n_out = 0;
    int rc = nn_forward(actor, 1, &x, &n_out, out);
    CHECK(rc != 0 || n_out == (a->gaussian ? 2 : 1));
    if (rc == 0 && critic) {
        struct tensor *v = nn_forward1(critic, x);
        int64_t len = x->shape[0];
        out[n_out] = v ? tensor_reshape(v, 1, &len) : NULL;
        tensor_free(v);
        if (!out[n_out++]) rc = -1;
    }
    tensor_free(x);
    struct tensor *cpu[NN_MAX_IO + 1] = { 0 };
    for (int i = 0; i < n_out; i++) {
        if (rc == 0) {
            cpu[i] = dev == DEVICE_CPU ? tensor_retain(out[i]) : tensor_to(out[i], DEVICE_CPU);
            if (!cpu[i]) rc = -1;
        }
        tensor_free(out[i]);
    }
    if (rc != 0) {
        for (int i = 0; i < n_out; i++) tensor_free(cpu[i]);
        return -1;
    }
    int k = 0;
    o->a = cpu[k++];
    o->log_std = a->gaussian ? cpu[k++] : NULL;
    o->value = a->value_head ? cpu[k++] : NULL;
    return 0;
}
