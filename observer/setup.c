/* An observer's set-up (the agent's rl_setup: the run's config, the env,
 * the buffers, the mode's functions from the table) and the state a
 * checkpoint holds of it (rl_get_state; restored at set-up). */
#define _GNU_SOURCE
#include "observer/state.h"

#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/watchdog.h"
#include "envs/plugin.h"
#include "rl/algo_shape.h"
#include "rl/norm.h"
#include "rl/rl.h"
#include "runfiles/policy_file.h"
#include "tensor/ops.h"

/* The modes, one per row of rl/config_fields.h's RL_MODES. */
#define MODE_ROW(P, id, name, ...) [P##_##id] = &observer_mode_##name,
static const struct observer_mode *const modes[RL_MODE_COUNT] = { RL_MODES(MODE_ROW, RL_MODE) };
#undef MODE_ROW

void observer_release(struct observer *o)
{
    watchdog_free(o->dog);
    o->dog = NULL;
    rl_learner_deinit(&o->ln);
    env_plugin_close(o->plugin);
    tensor_free(o->obs_t);
    free(o->trunc_idx);
    for (int h = 0; h < 2; h++) {
        tensor_free(o->half_obs[h]);
        o->half_obs[h] = NULL;
    }
    free(o->next_values);
    o->next_values = NULL;
    free(o->ep_logp);
    free(o->ep_rew);
    rref_free(o->policy);
    o->plugin = NULL;
    o->obs_t = NULL;
    o->trunc_idx = NULL;
    o->ep_logp = NULL;
    o->ep_rew = NULL;
    o->policy = NULL;
    o->ready = false;
}

/* Bytes of each env's discounted return (--norm-reward), 0 without. */
static size_t ret_bytes(const struct observer *o)
{
    return o->ln.norm.ret ? (size_t)o->B * sizeof(double) : 0;
}

/* The state a checkpoint needs to continue this observer exactly: its RNG,
 * the observation the next step acts on (normalised as it was), each env's
 * discounted return (--norm-reward), and the vec_env. Taken between sync
 * iterations, when its delta of statistics is empty (the agent has it). */
static struct rpc_value save_state(struct observer *o)
{
    unsigned char *venv;
    size_t vl;
    vec_env_save(o->ln.venv, &venv, &vl);
    size_t ol = (size_t)o->B * o->D * sizeof(float), rl = ret_bytes(o), n = sizeof o->ln.rng + ol + rl + vl;
    unsigned char *b = trib_xmalloc(n);
    memcpy(b, &o->ln.rng, sizeof o->ln.rng);
    memcpy(b + sizeof o->ln.rng, o->ln.cur_obs, ol);
    if (rl) memcpy(b + sizeof o->ln.rng + ol, o->ln.norm.ret, rl);
    memcpy(b + sizeof o->ln.rng + ol + rl, venv, vl);
    struct rpc_value v = rpc_bytes(b, n);
    free(b);
    free(venv);
    return v;
}

/* Each env's saved discounted return, checked finite; the delta of the
 * resets just made is dropped (the saved run's was empty). */
static int restore_norm(struct observer *o, const unsigned char *b)
{
    struct rl_norm *nm = &o->ln.norm;
    if (!rl_norm_on(nm)) return 0;
    for (int i = 0; nm->ret && i < o->B; i++) {
        double r;
        memcpy(&r, b + (size_t)i * sizeof r, sizeof r);
        if (!isfinite(r)) return rl_set_error("observer state: discounted return of env %d is %g", i, r);
    }
    if (nm->ret) memcpy(nm->ret, b, ret_bytes(o));
    struct rl_norm_stats scratch;
    if (rl_norm_stats_init(&scratch, nm->delta.obs.dim, nm->delta.ret.dim > 0, 0, 0) != 0) return -1;
    rl_norm_take_delta(nm, &scratch);   /* the set-up's statistics (setup_env) then make `now` */
    rl_norm_stats_free(&scratch);
    return 0;
}

static int restore_state(struct observer *o, const unsigned char *b, size_t n)
{
    size_t ol = (size_t)o->B * o->D * sizeof(float), rl = ret_bytes(o);
    if (n < sizeof o->ln.rng + ol + rl) return rl_set_error("observer state: %zu bytes is too short", n);
    for (size_t i = 0; i < (size_t)o->B * o->D; i++) {   /* the observation the next step acts on */
        float x;
        memcpy(&x, b + sizeof o->ln.rng + i * sizeof x, sizeof x);
        if (!isfinite(x))
            return rl_set_error("observer state: observation[%zu] of env %zu is %g", i % (size_t)o->D,
                                i / (size_t)o->D, (double)x);
    }
    if (restore_norm(o, b + sizeof o->ln.rng + ol) != 0) return -1;
    if (vec_env_load(o->ln.venv, b + sizeof o->ln.rng + ol + rl, n - sizeof o->ln.rng - ol - rl) != 0)
        return rl_set_error("observer state: %s", env_last_error());
    memcpy(&o->ln.rng, b, sizeof o->ln.rng);
    memcpy(o->ln.cur_obs, b + sizeof o->ln.rng, ol);
    return 0;
}

static int fn_get_state(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    pthread_mutex_lock(&o->roll_mu);   /* no rollout in progress (sync mode's overlap) */
    pthread_mutex_lock(&o->mu);
    if (o->ready) *res = save_state(o);
    bool ready = o->ready;
    pthread_mutex_unlock(&o->mu);
    pthread_mutex_unlock(&o->roll_mu);
    return ready ? 0 : rpc_request_fail(req, "not set up");
}

/* What an episodes algorithm needs in every mode: the episode's buffers. */
static int setup_episodes(void *u)
{
    struct observer *o = u;
    o->ep_logp = calloc((size_t)o->max_len, sizeof *o->ep_logp);
    o->ep_rew = calloc((size_t)o->max_len, sizeof *o->ep_rew);
    if (!o->ep_logp || !o->ep_rew) return rl_set_error("out of memory for episodes of %d steps", o->max_len);
    return 0;
}

static int setup_rollouts(void *u)
{
    (void)u;
    return 0;
}

static int setup_env(struct observer *o, const struct rl_setup_msg *m)
{
    if (rl_config_from_value(&m->config, &o->cfg) != 0) return -1;
    o->index = m->index;
    o->spec = rl_config_open_env(&o->cfg, &o->plugin);
    if (!o->spec) return rl_set_error("env: %s", rl_last_error());
    struct policy_arch arch;   /* sizes the agent's policy cannot have: refused before the envs' buffers */
    if (rl_arch_for_env(&o->cfg, o->spec, o->cfg.env, &arch) != 0) return -1;
    o->algo = rl_algo_of(&o->cfg);
    if (rl_algo_check_env(o->algo, o->spec) != 0) return -1;
    o->dog = watchdog_new(o->cfg.step_timeout, observer_step_overdue, o);
    o->env_steps = 0;
    watchdog_arm(o->dog);   /* the envs' resets */
    int rc = rl_learner_init(&o->ln, &o->cfg, o->spec, o->index, m->generation);
    watchdog_disarm(o->dog);
    if (rc != 0) return -1;
    o->B = o->ln.B;
    o->D = o->ln.D;
    o->A = o->ln.A;
    o->discrete = o->ln.discrete;
    o->value_head = o->ln.value_head;
    int64_t os[2] = { o->B, o->D };
    o->obs_t = tensor_new(DTYPE_F32, DEVICE_CPU, 2, os);
    o->trunc_idx = calloc((size_t)o->B, sizeof *o->trunc_idx);
    o->max_len = o->spec->max_episode_steps > 0 ? o->spec->max_episode_steps : RL_DEFAULT_MAX_EPISODE;
    if (!o->obs_t || !o->trunc_idx) return rl_set_error("out of memory for %d envs", o->B);
    if (o->cfg.double_buffer) {   /* the rollout's halves (steps.c) */
        int64_t hs[2] = { o->B / 2, o->D };
        for (int h = 0; h < 2; h++) o->half_obs[h] = tensor_new(DTYPE_F32, DEVICE_CPU, 2, hs);
        o->next_values = calloc((size_t)o->B, sizeof *o->next_values);
        if (!o->half_obs[0] || !o->half_obs[1] || !o->next_values)
            return rl_set_error("out of memory for %d envs", o->B);
    }
    if (rl_algo_drive(o->algo, &(struct rl_drivers){ .drive = { [RL_SHAPE_EPISODES] = setup_episodes,
                                                                 [RL_SHAPE_ROLLOUTS] = setup_rollouts },
                                                      .ctx = o }) != 0)
        return -1;
    o->mode = modes[o->cfg.mode];
    if (o->mode->serve(o) != 0) return -1;
    if (m->state.kind == RPC_BYTES && restore_state(o, (const unsigned char *)m->state.str.ptr, m->state.str.len) != 0)
        return -1;
    if (observer_norm_adopt(o, &m->norm, "setup") != 0) return -1;
    if (observer_check_step(o, NULL, NULL) != 0) return -1;
    o->policy = rref_retain(m->policy);
    o->ready = true;
    return 0;
}

static int fn_setup(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    struct rl_setup_msg m;
    if (rl_setup_unpack(args, &m) != 0) return rpc_request_fail(req, "%s", rl_last_error());
    pthread_mutex_lock(&o->roll_mu);
    pthread_mutex_lock(&o->mu);
    observer_release(o);
    int rc = setup_env(o, &m);
    if (rc != 0) observer_release(o);
    pthread_mutex_unlock(&o->mu);
    pthread_mutex_unlock(&o->roll_mu);
    rl_setup_clear(&m);
    if (rc != 0) return rpc_request_fail(req, "%s", rl_last_error());
    *res = rpc_nil();
    return 0;
}

void observer_serve_setup(struct observer *o)
{
    rpc_register(RL_FN_SETUP, fn_setup, o);
    rpc_register(RL_FN_GET_STATE, fn_get_state, o);
}
