/* The wire form of the run configuration: the map the agent sends to its
 * observers (rl_config_to_value), and reading it back, checked as the
 * command line is (rl_config_from_value). */
#define _GNU_SOURCE
#include "rl/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rl/algo.h"
#include "rl/config_internal.h"
#include "rl/rl.h"

struct wire_field {
    const char *key;
    char kind;                      /* i int, l int64, u uint64, d double, b bool, s string, a algorithm (by name) */
    size_t off;
    size_t size;                    /* bytes of the field (a string's room) */
};

#define W(k, t, f) { k, t, offsetof(struct rl_config, f), sizeof(((struct rl_config *)0)->f) }
static const struct wire_field wire[] = {
    W("preset", 's', preset), W("algo", 'a', algo), W("mode", 'i', mode), W("env", 's', env), W("env_args", 's', env_args),
    W("observers", 'i', observers), W("envs", 'i', envs_per_observer), W("steps", 'i', steps_per_rollout),
    W("seed", 'u', seed), W("n_hidden", 'i', n_hidden), W("h0", 'i', hidden[0]), W("h1", 'i', hidden[1]),
    W("h2", 'i', hidden[2]), W("h3", 'i', hidden[3]), W("tanh", 'b', tanh), W("dropout", 'd', dropout),
    W("init_log_std", 'd', init_log_std), W("cuda", 'b', cuda), W("optimizer", 'i', optimizer),
    W("opt_eps", 'd', opt_eps), W("lr", 'd', lr), W("gamma", 'd', gamma), W("gae_lambda", 'd', gae_lambda),
    W("anneal_lr", 'b', anneal_lr), W("minibatches", 'i', minibatches), W("epochs", 'i', epochs),
    W("clip", 'd', clip), W("ent_coef", 'd', ent_coef), W("vf_coef", 'd', vf_coef),
    W("max_grad_norm", 'd', max_grad_norm), W("norm_adv", 'b', norm_adv), W("clip_vloss", 'b', clip_vloss),
    W("reward_scale", 'd', reward_scale), W("max_policy_lag", 'i', max_policy_lag), W("vtrace", 'b', vtrace),
    W("rho_bar", 'd', rho_bar), W("c_bar", 'd', c_bar), W("max_batch", 'i', max_batch_rows), W("max_wait_us", 'i', max_wait_us),
    W("max_steps", 'l', max_steps), W("max_seconds", 'd', max_seconds), W("max_updates", 'l', max_updates), W("target", 'd', target),
    W("running_reward", 'b', running_reward), W("log_every_s", 'd', log_every_s),
    W("heartbeat_timeout_ms", 'i', heartbeat_timeout_ms), W("step_timeout_s", 'd', step_timeout_s), W("quiet", 'b', quiet), W("logdir", 's', logdir),
    W("checkpoint_every", 'l', checkpoint_every), W("resume", 's', resume),
};
#undef W
#define N_WIRE ((int)(sizeof wire / sizeof wire[0]))

struct rpc_value rl_config_to_value(const struct rl_config *c)
{
    struct rpc_value m = rpc_map(N_WIRE);
    for (int i = 0; i < N_WIRE; i++) {
        const char *p = (const char *)c + wire[i].off;
        struct rpc_value v;
        switch (wire[i].kind) {
        case 'i': v = rpc_int(*(const int *)p); break;
        case 'l': v = rpc_int(*(const int64_t *)p); break;
        case 'u': v = rpc_int((int64_t) * (const uint64_t *)p); break;
        case 'd': v = rpc_double(*(const double *)p); break;
        case 'b': v = rpc_bool(*(const bool *)p); break;
        case 'a': v = rpc_str(rl_algo_name(*(const int *)p) ? rl_algo_name(*(const int *)p) : ""); break;
        default: v = rpc_str(p); break;
        }
        rpc_map_set(&m, (size_t)i, wire[i].key, v);
    }
    return m;
}

int rl_config_from_value(const struct rpc_value *v, struct rl_config *out)
{
    if (!v || v->kind != RPC_MAP) return rl_set_error("config: expected a map");
    struct rl_config c;
    rl_config_base(&c);
    for (int i = 0; i < N_WIRE; i++) {
        const struct rpc_value *x = rpc_map_get(v, wire[i].key);
        char *p = (char *)&c + wire[i].off;
        char k = wire[i].kind;
        if (!x) return rl_set_error("config: missing '%s'", wire[i].key);
        bool ok = (k == 'd' && x->kind == RPC_DOUBLE) || (k == 'b' && x->kind == RPC_BOOL) ||
                  ((k == 's' || k == 'a') && x->kind == RPC_STR) || ((k == 'i' || k == 'l' || k == 'u') && x->kind == RPC_INT);
        if (!ok) return rl_set_error("config: '%s' has the wrong type (%s)", wire[i].key, rpc_kind_name(x->kind));
        switch (k) {
        case 'i':
            if (x->i < -2147483647LL || x->i > 2147483647LL) return rl_set_error("config: '%s' out of range", wire[i].key);
            *(int *)p = (int)x->i;
            break;
        case 'l': *(int64_t *)p = x->i; break;
        case 'u': *(uint64_t *)p = (uint64_t)x->i; break;
        case 'd': *(double *)p = x->d; break;
        case 'b': *(bool *)p = x->b; break;
        case 'a': {   /* the observer's registry must hold the agent's algorithm */
            char name[64];
            if (x->str.len >= sizeof name) return rl_set_error("config: '%s' too long", wire[i].key);
            memcpy(name, x->str.ptr, x->str.len);
            name[x->str.len] = 0;
            if ((*(int *)p = rl_algo_find(name)) < 0) return rl_set_error("config: %s", rl_last_error());
            break;
        }
        default: {
            if (x->str.len >= wire[i].size) return rl_set_error("config: '%s' too long", wire[i].key);
            memcpy(p, x->str.ptr, x->str.len + 1);
        }
        }
    }
    if (!rl_algo_get(c.algo) || (c.mode != RL_MODE_SYNC && c.mode != RL_MODE_ASYNC))
        return rl_set_error("config: unknown algorithm or mode");
    if (rl_config_check(&c) != 0) return rl_set_error("config: %s", rl_last_error());
    *out = c;
    return 0;
}
