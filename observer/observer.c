/* The observer: its RPC functions (setup, rollout, loss, episode, run_async,
 * shutdown), the rollout loop over a vec_env, and the process body. */
#define _GNU_SOURCE
#include "observer/observer.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "envs/plugin.h"
#include "envs/vec_env.h"
#include "rl/config.h"
#include "rl/debug_dump.h"
#include "rl/finite.h"
#include "rl/losses.h"
#include "rl/messages.h"
#include "rl/rl.h"
#include "rl/rl_math.h"
#include "rl/rollout.h"
#include "rl/sample.h"
#include "rl/watchdog.h"
#include "rpc/dist_autograd.h"
#include "tensor/ops.h"

struct observer {
    pthread_mutex_t mu;             /* one job at a time */
    bool ready;
    struct rl_config cfg;
    int index;
    struct rref *policy;
    struct env_plugin *plugin;
    const struct env_spec *spec;
    struct vec_env *venv;
    int B, D, A;
    bool discrete, value_head;
    uint64_t rng;                   /* sampling and minibatch order */
    struct rl_rollout ro;
    float *cur_obs;                 /* [B,D]: the observation the next step acts on */
    struct tensor *obs_t;           /* [B,D] reused for act calls */
    float *env_act_f;               /* [B,A] clipped continuous actions */
    float *reward, *final_obs;      /* [B], [B,D] */
    bool *term, *trunc;             /* [B] */
    float *mb_logp, *mb_adv, *mb_ret, *mb_val;  /* one minibatch */
    struct rl_report report;        /* of the last rollout */
    int64_t version0;
    /* REINFORCE episodes */
    int max_len;
    struct tensor **ep_logp;
    float *ep_rew;
    atomic_bool shutdown;
    bool dumped;                    /* TRIB_DEBUG_DUMP done */
    int64_t env_steps;              /* vec_env steps since set-up, for messages */
    struct rl_watchdog *dog;        /* over env steps: --step-timeout */
};

/* The watchdog's verdict on a step that runs past --step-timeout: a plug-in
 * stuck in C cannot be interrupted, so this observer says so and exits at
 * once; the agent counts it lost (its heartbeats stop). */
static void step_overdue(void *u, double seconds)
{
    struct observer *o = u;
    fprintf(stderr, "%s: env %s: a step has run for %.1f s, longer than --step-timeout %g s: giving up (exit 1)\n",
            rpc_self()->name, o->spec->id, seconds, o->cfg.step_timeout_s);
    _exit(1);
}

/* Refuses a non-finite observation or reward of the vec_env step just
 * taken (reward NULL: a reset), naming the env, this observer and the step.
 * 0 or -1 with rl_last_error(). */
static int check_step(struct observer *o, const float *reward, const float *final_obs)
{
    if (reward) o->env_steps++;
    return rl_check_env_step(o->spec->id, rpc_self()->name, o->env_steps, o->B, o->D, o->cur_obs, reward, o->trunc,
                             final_obs);
}

/* One step of every env under the watchdog, its observations and rewards
 * checked: 0 or -1 with rl_last_error(). */
static int step_envs(struct observer *o, const void *acts, float *final_obs)
{
    rl_watchdog_arm(o->dog);
    int rc = vec_env_step(o->venv, acts, o->cur_obs, o->reward, o->term, o->trunc, final_obs);
    rl_watchdog_disarm(o->dog);
    if (rc != 0) return rl_set_error("env step: %s", env_last_error());
    return check_step(o, o->reward, final_obs);
}

/* loss, or NULL (freeing it) when it is not finite: `what` names it. */
static struct tensor *finite_loss(struct observer *o, struct tensor *loss, const char *what)
{
    char w[256];
    snprintf(w, sizeof w, "env %s on %s: %s", o->spec->id, rpc_self()->name, what);
    if (!loss || rl_check_loss(loss, w) == 0) return loss;
    tensor_free(loss);
    return NULL;
}

/* ---- setup ---------------------------------------------------------------------- */

static void release_env(struct observer *o)
{
    rl_watchdog_free(o->dog);
    o->dog = NULL;
    rl_rollout_deinit(&o->ro);
    vec_env_free(o->venv);
    env_plugin_close(o->plugin);
    tensor_free(o->obs_t);
    free(o->cur_obs);
    free(o->env_act_f);
    free(o->reward);
    free(o->final_obs);
    free(o->term);
    free(o->trunc);
    free(o->mb_logp);
    free(o->mb_adv);
    free(o->mb_ret);
    free(o->mb_val);
    free(o->ep_logp);
    free(o->ep_rew);
    rref_free(o->policy);
    o->venv = NULL;
    o->plugin = NULL;
    o->obs_t = NULL;
    o->cur_obs = o->env_act_f = o->reward = o->final_obs = NULL;
    o->term = o->trunc = NULL;
    o->mb_logp = o->mb_adv = o->mb_ret = o->mb_val = NULL;
    o->ep_logp = NULL;
    o->ep_rew = NULL;
    o->policy = NULL;
    o->ready = false;
}

/* The state a checkpoint needs to continue this observer exactly: its RNG,
 * the observation the next step acts on, and the vec_env. */
static struct rpc_value save_state(struct observer *o)
{
    unsigned char *venv;
    size_t vl;
    vec_env_save(o->venv, &venv, &vl);
    size_t ol = (size_t)o->B * o->D * sizeof(float), n = sizeof o->rng + ol + vl;
    unsigned char *b = trib_xmalloc(n);
    memcpy(b, &o->rng, sizeof o->rng);
    memcpy(b + sizeof o->rng, o->cur_obs, ol);
    memcpy(b + sizeof o->rng + ol, venv, vl);
    struct rpc_value v = rpc_bytes(b, n);
    free(b);
    free(venv);
    return v;
}

static int restore_state(struct observer *o, const unsigned char *b, size_t n)
{
    size_t ol = (size_t)o->B * o->D * sizeof(float);
    if (n < sizeof o->rng + ol) return rl_set_error("observer state: %zu bytes is too short", n);
    if (vec_env_load(o->venv, b + sizeof o->rng + ol, n - sizeof o->rng - ol) != 0)
        return rl_set_error("observer state: %s", env_last_error());
    memcpy(&o->rng, b, sizeof o->rng);
    memcpy(o->cur_obs, b + sizeof o->rng, ol);
    return 0;
}

static int fn_get_state(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    pthread_mutex_lock(&o->mu);
    if (o->ready) *res = save_state(o);
    bool ready = o->ready;
    pthread_mutex_unlock(&o->mu);
    return ready ? 0 : rpc_request_fail(req, "not set up");
}

static int setup_env(struct observer *o, const struct rl_setup_msg *m)
{
    if (rl_config_from_value(&m->config, &o->cfg) != 0) return -1;
    o->index = m->index;
    o->spec = env_open(o->cfg.env, &o->plugin);
    if (!o->spec) return rl_set_error("env: %s", env_last_error());
    o->B = o->cfg.envs_per_observer;
    o->D = o->spec->obs.dim;
    o->discrete = o->spec->act.kind == SPACE_DISCRETE;
    o->A = o->discrete ? o->spec->act.n : o->spec->act.dim;
    o->value_head = o->cfg.algo != RL_ALGO_REINFORCE;
    if (o->cfg.algo == RL_ALGO_REINFORCE && !o->discrete)
        return rl_set_error("REINFORCE here needs a discrete action space (%s has a box)", o->spec->id);
    /* a restarted observer (generation > 0) starts fresh envs on streams of
     * its own, not a replay of its predecessor's first episodes */
    uint64_t stream = (uint64_t)m->generation << 32 | (uint64_t)o->index;
    o->venv = vec_env_new(o->spec, o->B, env_rng_seed(o->cfg.seed, 1u << 20 | stream), 0);
    if (!o->venv) return rl_set_error("vec_env: %s", env_last_error());
    o->rng = env_rng_seed(o->cfg.seed, 2u << 20 | stream);
    int T = o->cfg.algo == RL_ALGO_REINFORCE ? 1 : o->cfg.steps_per_rollout;
    if (rl_rollout_init(&o->ro, T, o->B, o->D, o->discrete, o->A) != 0) return -1;
    size_t B = (size_t)o->B, D = (size_t)o->D, n = (size_t)T * B;
    int64_t os[2] = { o->B, o->D };
    o->obs_t = tensor_new(DTYPE_F32, DEVICE_CPU, 2, os);
    o->cur_obs = calloc(B * D, sizeof(float));
    o->env_act_f = calloc(B * (size_t)o->A, sizeof(float));
    o->reward = calloc(B, sizeof(float));
    o->final_obs = calloc(B * D, sizeof(float));
    o->term = calloc(B, sizeof(bool));
    o->trunc = calloc(B, sizeof(bool));
    o->mb_logp = calloc(n, sizeof(float));
    o->mb_adv = calloc(n, sizeof(float));
    o->mb_ret = calloc(n, sizeof(float));
    o->mb_val = calloc(n, sizeof(float));
    o->max_len = o->spec->max_episode_steps > 0 ? o->spec->max_episode_steps : RL_DEFAULT_MAX_EPISODE;
    if (o->cfg.algo == RL_ALGO_REINFORCE) {
        o->ep_logp = calloc((size_t)o->max_len, sizeof *o->ep_logp);
        o->ep_rew = calloc((size_t)o->max_len, sizeof *o->ep_rew);
        if (!o->ep_logp || !o->ep_rew) return rl_set_error("out of memory for episodes of %d steps", o->max_len);
    }
    if (!o->obs_t || !o->cur_obs || !o->env_act_f || !o->reward || !o->final_obs || !o->term || !o->trunc ||
        !o->mb_logp || !o->mb_adv || !o->mb_ret || !o->mb_val)
        return rl_set_error("out of memory for %d envs", o->B);
    o->dog = rl_watchdog_new(o->cfg.step_timeout_s, step_overdue, o);
    rl_watchdog_arm(o->dog);
    vec_env_reset(o->venv, o->cur_obs);
    rl_watchdog_disarm(o->dog);
    o->env_steps = 0;
    if (m->state.kind == RPC_BYTES && restore_state(o, (const unsigned char *)m->state.str.ptr, m->state.str.len) != 0)
        return -1;
    if (check_step(o, NULL, NULL) != 0) return -1;
    o->policy = rref_retain(m->policy);
    o->ready = true;
    return 0;
}

static int fn_setup(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    struct rl_setup_msg m;
    if (rl_setup_unpack(args, &m) != 0) return rpc_request_fail(req, "%s", rl_last_error());
    pthread_mutex_lock(&o->mu);
    release_env(o);
    int rc = setup_env(o, &m);
    if (rc != 0) release_env(o);
    pthread_mutex_unlock(&o->mu);
    rl_setup_clear(&m);
    if (rc != 0) return rpc_request_fail(req, "%s", rl_last_error());
    *res = rpc_nil();
    return 0;
}

/* ---- policy calls ------------------------------------------------------------------ */

/* method on obs (borrowed), unpacking the answer for `rows` rows. */
static int call_policy(struct observer *o, const char *method, struct tensor *obs, bool last, struct rl_policy_out *out)
{
    struct rpc_value a = rl_obs_pack(obs, last), r = rpc_nil();
    int rc = rref_rpc_sync(o->policy, method, &a, &r, 0);
    rpc_value_clear(&a);
    if (rc != 0) return rl_set_error("%s: %s", method, rpc_last_error());
    rc = rl_policy_out_unpack(&r, (int)obs->shape[0], o->A, !o->discrete, o->value_head, out);
    rpc_value_clear(&r);
    return rc;
}

/* ---- rollouts --------------------------------------------------------------------------- */

static void note_finished(struct observer *o, int b)
{
    double ret;
    int len;
    if (vec_env_last_episode(o->venv, b, &ret, &len) == 0) rl_report_add(&o->report, ret, len);
}

/* Values of the final observations of envs truncated (not terminated) at
 * step t, into final_values. Rare (time limits), so it may allocate. */
static int bootstrap_truncated(struct observer *o, int t)
{
    int k = 0, idx[RL_MAX_ENVS];
    for (int b = 0; b < o->B; b++)
        if (o->trunc[b] && !o->term[b]) idx[k++] = b;
    if (k == 0) return 0;
    int64_t s[2] = { k, o->D };
    struct tensor *x = tensor_new(DTYPE_F32, DEVICE_CPU, 2, s);
    if (!x) return rl_set_error("%s", tensor_last_error());
    for (int i = 0; i < k; i++)
        memcpy((float *)tensor_data(x) + (size_t)i * o->D, o->final_obs + (size_t)idx[i] * o->D,
               (size_t)o->D * sizeof(float));
    struct rl_policy_out out;
    int rc = call_policy(o, RL_METHOD_ACT, x, false, &out);
    tensor_free(x);
    if (rc != 0) return -1;
    const float *v = tensor_data(out.value);
    for (int i = 0; i < k; i++) o->ro.final_values[(size_t)t * o->B + idx[i]] = v[i] * 1.0f;
    rl_policy_out_clear(&out);
    return 0;
}

/* T steps of every env into the rollout buffer, then advantages. */
static int rollout(struct observer *o)
{
    struct rl_rollout *ro = &o->ro;
    const int B = o->B, D = o->D, A = o->A;
    memset(&o->report, 0, sizeof o->report);
    for (int t = 0; t < ro->T; t++) {
        size_t base = (size_t)t * B;
        memcpy(ro->obs + base * D, o->cur_obs, (size_t)B * D * sizeof(float));
        memcpy(tensor_data(o->obs_t), o->cur_obs, (size_t)B * D * sizeof(float));
        struct rl_policy_out out;
        if (call_policy(o, RL_METHOD_ACT, o->obs_t, false, &out) != 0) return -1;
        if (t == 0) o->report.version0 = out.version;
        const float *a = tensor_data(out.a);
        if (o->discrete) {
            rl_sample_categorical(B, A, a, &o->rng, false, ro->act_i + base, ro->logp + base);
        } else {
            rl_sample_gaussian(B, A, a, tensor_data(out.log_std), &o->rng, false, ro->act_f + base * A,
                               ro->logp + base);
            for (int i = 0; i < B * A; i++) {
                int d = i % A;
                double x = ro->act_f[base * A + i];
                x = fmin(fmax(x, o->spec->act.low[d]), o->spec->act.high[d]);
                o->env_act_f[i] = (float)x;
            }
        }
        memcpy(ro->values + base, tensor_data(out.value), (size_t)B * sizeof(float));
        rl_policy_out_clear(&out);
        const void *acts = o->discrete ? (const void *)(ro->act_i + base) : (const void *)o->env_act_f;
        if (step_envs(o, acts, o->final_obs) != 0) return -1;
        for (int b = 0; b < B; b++) {
            ro->rewards[base + b] = (float)(o->reward[b] * o->cfg.reward_scale);
            ro->terminated[base + b] = o->term[b];
            ro->truncated[base + b] = o->trunc[b];
            if (o->term[b] || o->trunc[b]) note_finished(o, b);
        }
        if (bootstrap_truncated(o, t) != 0) return -1;
    }
    o->report.steps = (int64_t)ro->T * B;
    /* V(s_T): the rollout's last act call, marked last for the agent's merging */
    memcpy(tensor_data(o->obs_t), o->cur_obs, (size_t)B * D * sizeof(float));
    struct rl_policy_out out;
    if (call_policy(o, RL_METHOD_ACT, o->obs_t, true, &out) != 0) return -1;
    memcpy(ro->next_values, tensor_data(out.value), (size_t)B * sizeof(float));
    rl_policy_out_clear(&out);
    rl_rollout_advantages(ro, o->cfg.gamma, o->cfg.gae_lambda);
    return 0;
}

static int fn_rollout(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    if (args->list.len != 0) return rpc_request_fail(req, "expected no arguments");
    pthread_mutex_lock(&o->mu);
    int rc = !o->ready ? rl_set_error("not set up") : o->cfg.algo == RL_ALGO_REINFORCE
                                                          ? rl_set_error("rollout: REINFORCE runs episodes")
                                                          : rollout(o);
    if (rc == 0) *res = rl_report_pack(&o->report);
    pthread_mutex_unlock(&o->mu);
    return rc == 0 ? 0 : rpc_request_fail(req, "%s", rl_last_error());
}

/* ---- minibatch losses ----------------------------------------------------------------------- */

/* TRIB_DEBUG_DUMP (rl/debug_dump.h): the first minibatch, actions as floats. */
static void dump_minibatch(struct observer *o, struct tensor *obs, struct tensor *acts, int M, double weight)
{
    o->dumped = true;
    float *a = calloc((size_t)M * o->ro.act_dim, sizeof *a);
    if (!a) return;
    for (int64_t i = 0; i < acts->numel; i++)
        a[i] = o->discrete ? (float)((const int64_t *)tensor_data(acts))[i] : ((const float *)tensor_data(acts))[i];
    float w = (float)weight;
    const float *arrays[] = { &w, tensor_data(obs), a, o->mb_logp, o->mb_adv, o->mb_ret, o->mb_val };
    int64_t counts[] = { 1, obs->numel, acts->numel, M, M, M, M };
    char name[64];
    snprintf(name, sizeof name, "minibatch_%d.bin", o->index);
    if (rl_debug_dump(rl_debug_dump_dir(), name, 7, arrays, counts) != 0) fprintf(stderr, "observer: %s\n", rl_last_error());
    free(a);
}

/* The loss of minibatch mb of epoch `epoch` (a new permutation at mb 0),
 * times weight, in the current context. */
static struct tensor *minibatch_loss(struct observer *o, int epoch, int mb, double weight, struct rl_update_stats *st)
{
    struct rl_rollout *ro = &o->ro;
    int N = ro->T * ro->B, M = N / o->cfg.minibatches;
    if (mb >= o->cfg.minibatches || epoch >= o->cfg.epochs) {
        rl_set_error("loss: minibatch %d of epoch %d is out of range", mb, epoch);
        return NULL;
    }
    if (mb == 0) rl_permutation(N, &o->rng, ro->perm);
    struct tensor *obs = NULL, *acts = NULL;
    if (rl_rollout_gather(ro, mb * M, M, &obs, &acts, o->mb_logp, o->mb_adv, o->mb_ret, o->mb_val) != 0) return NULL;
    if (rl_debug_dump_dir() && !o->dumped) dump_minibatch(o, obs, acts, M, weight);
    struct rl_policy_out out;
    struct tensor *loss = NULL, *logp = NULL, *ent = NULL;
    if (call_policy(o, RL_METHOD_EVALUATE, obs, false, &out) == 0) {
        if (rl_dist_eval(o->discrete ? RL_DIST_CATEGORICAL : RL_DIST_GAUSSIAN, out.a, out.log_std, acts, &logp,
                         &ent) == 0) {
            struct rl_ppo_hyper h = { .clip = o->cfg.clip, .ent_coef = o->cfg.ent_coef, .vf_coef = o->cfg.vf_coef,
                                      .clip_vloss = o->cfg.clip_vloss, .norm_adv = o->cfg.norm_adv };
            struct rl_loss_stats ls = { 0 };
            loss = o->cfg.algo == RL_ALGO_PPO
                       ? rl_ppo_loss(logp, ent, out.value, o->mb_logp, o->mb_adv, o->mb_ret, o->mb_val, M, &h,
                                     weight, &ls)
                       : rl_a2c_loss(logp, ent, out.value, o->mb_adv, o->mb_ret, M, &h, weight, &ls);
            *st = (struct rl_update_stats){ ls.policy_loss, ls.value_loss, ls.entropy, ls.approx_kl, ls.clipfrac };
        }
        rl_policy_out_clear(&out);
    }
    tensor_free(logp);
    tensor_free(ent);
    tensor_free(obs);
    tensor_free(acts);
    char what[64];
    snprintf(what, sizeof what, "minibatch %d of epoch %d", mb, epoch);
    return finite_loss(o, loss, what);
}

static int fn_loss(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    struct rl_loss_req m;
    if (rl_loss_req_unpack(args, &m) != 0) return rpc_request_fail(req, "%s", rl_last_error());
    if (dist_autograd_current() == 0) return rpc_request_fail(req, "loss: must be called inside a context");
    pthread_mutex_lock(&o->mu);
    struct rl_loss_reply rep = { 0 };
    rep.loss = !o->ready ? (rl_set_error("not set up"), NULL)
               : o->cfg.algo == RL_ALGO_REINFORCE
                   ? (rl_set_error("loss: REINFORCE runs episodes"), NULL)
                   : minibatch_loss(o, m.epoch, m.minibatch, m.weight, &rep.stats);
    if (rep.loss) *res = rl_loss_reply_pack(&rep);
    pthread_mutex_unlock(&o->mu);
    if (!rep.loss) return rpc_request_fail(req, "%s", rl_last_error());
    tensor_free(rep.loss);
    return 0;
}

/* ---- REINFORCE episodes -------------------------------------------------------------------- */

/* One episode of env 0 (B is 1), forwards recorded in the current context.
 * Returns the REINFORCE loss and fills the report. */
static struct tensor *episode(struct observer *o)
{
    memset(&o->report, 0, sizeof o->report);
    int64_t is[2] = { 1, 1 };
    int n = 0;
    bool done = false;
    struct tensor *loss = NULL;
    while (!done && n < o->max_len) {
        memcpy(tensor_data(o->obs_t), o->cur_obs, (size_t)o->D * sizeof(float));
        struct rl_policy_out out;
        if (call_policy(o, RL_METHOD_EVALUATE, o->obs_t, false, &out) != 0) goto out;
        if (n == 0) o->report.version0 = out.version;
        int action = 0;
        rl_sample_categorical(1, o->A, tensor_data(out.a), &o->rng, false, &action, NULL);
        int64_t a64 = action;
        struct tensor *idx = tensor_from_data(DTYPE_I64, 2, is, &a64);
        struct tensor *lsm = idx ? tensor_log_softmax(out.a) : NULL;
        o->ep_logp[n] = lsm ? tensor_gather(lsm, idx) : NULL;
        tensor_free(lsm);
        tensor_free(idx);
        rl_policy_out_clear(&out);
        if (!o->ep_logp[n]) {
            rl_set_error("episode: %s", tensor_last_error());
            goto out;
        }
        if (step_envs(o, &action, NULL) != 0) {
            n++;
            goto out;
        }
        o->ep_rew[n++] = (float)(o->reward[0] * o->cfg.reward_scale);
        done = o->term[0] || o->trunc[0];
    }
    note_finished(o, 0);
    o->report.steps = n;
    struct tensor *lp = tensor_cat(n, o->ep_logp, 0);
    loss = lp ? finite_loss(o, rl_reinforce_loss(lp, o->ep_rew, n, o->cfg.gamma), "the episode's loss") : NULL;
    if (!lp) rl_set_error("episode: %s", tensor_last_error());
    tensor_free(lp);
out:
    for (int i = 0; i < n; i++) {
        tensor_free(o->ep_logp[i]);
        o->ep_logp[i] = NULL;
    }
    return loss;
}

static int fn_episode(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    if (args->list.len != 0) return rpc_request_fail(req, "expected no arguments");
    if (dist_autograd_current() == 0) return rpc_request_fail(req, "episode: must be called inside a context");
    pthread_mutex_lock(&o->mu);
    struct rl_loss_reply rep = { 0 };
    rep.loss = !o->ready ? (rl_set_error("not set up"), NULL)
               : o->cfg.algo != RL_ALGO_REINFORCE ? (rl_set_error("episode: only REINFORCE runs episodes"), NULL)
                                                  : episode(o);
    if (rep.loss) {
        rep.report = o->report;
        *res = rl_loss_reply_pack(&rep);
    }
    pthread_mutex_unlock(&o->mu);
    if (!rep.loss) return rpc_request_fail(req, "%s", rl_last_error());
    tensor_free(rep.loss);
    return 0;
}

/* ---- async mode ---------------------------------------------------------------------------- */

/* In a fresh context: the loss, its backward (gradients reach the agent's
 * parameters), then the agent's update. Writes *stop. */
static int async_update(struct observer *o, int epoch, int mb, bool first, bool *stop)
{
    int64_t ctx = dist_autograd_context_new();
    if (ctx < 0) return rl_set_error("context: %s", rpc_last_error());
    struct rl_update_req u = { .ctx = ctx, .version0 = o->report.version0, .has_report = first };
    struct tensor *loss = o->cfg.algo == RL_ALGO_REINFORCE ? episode(o) : minibatch_loss(o, epoch, mb, 1.0, &u.stats);
    int rc = loss ? 0 : -1;
    if (rc == 0 && dist_autograd_backward(ctx, 1, &loss, false) != 0)
        rc = rl_set_error("backward: %s", rpc_last_error());
    if (rc == 0) {
        u.version0 = o->report.version0;
        u.report = o->report;
        struct rpc_value a = rl_update_req_pack(&u), r = rpc_nil();
        struct rl_update_reply rep;
        if (rpc_sync("agent", RL_FN_UPDATE, &a, &r, 0) != 0) rc = rl_set_error("update: %s", rpc_last_error());
        else if (rl_update_reply_unpack(&r, &rep) != 0) rc = -1;
        else *stop = rep.stop;
        rpc_value_clear(&a);
        rpc_value_clear(&r);
    }
    tensor_free(loss);
    char err[512];
    snprintf(err, sizeof err, "%s", rl_last_error());
    if (dist_autograd_release(ctx) != 0 && rc == 0) rc = rl_set_error("release: %s", rpc_last_error());
    else if (rc != 0) rl_set_error("%s", err);
    return rc;
}

static int async_loop(struct observer *o)
{
    bool stop = false;
    while (!stop && !atomic_load(&o->shutdown)) {
        if (o->cfg.algo == RL_ALGO_REINFORCE) {
            if (async_update(o, 0, 0, true, &stop) != 0) return -1;
            continue;
        }
        if (rollout(o) != 0) return -1;
        for (int e = 0; e < o->cfg.epochs && !stop; e++)
            for (int mb = 0; mb < o->cfg.minibatches && !stop; mb++)
                if (async_update(o, e, mb, e == 0 && mb == 0, &stop) != 0) return -1;
    }
    return 0;
}

static int fn_run_async(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    if (args->list.len != 0) return rpc_request_fail(req, "expected no arguments");
    pthread_mutex_lock(&o->mu);
    int rc = o->ready ? async_loop(o) : rl_set_error("not set up");
    pthread_mutex_unlock(&o->mu);
    if (rc != 0) return rpc_request_fail(req, "%s", rl_last_error());
    *res = rpc_nil();
    return 0;
}

static int fn_shutdown(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    atomic_store(&o->shutdown, true);
    *res = rpc_nil();
    return 0;
}

/* ---- the process ---------------------------------------------------------------------------- */

struct observer *observer_new(void)
{
    if (!getenv("OPENBLAS_NUM_THREADS")) tensor_set_cpu_threads(1);
    struct observer *o = trib_xcalloc(1, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    rpc_register(RL_FN_SETUP, fn_setup, o);
    rpc_register(RL_FN_ROLLOUT, fn_rollout, o);
    rpc_register(RL_FN_LOSS, fn_loss, o);
    rpc_register(RL_FN_EPISODE, fn_episode, o);
    rpc_register(RL_FN_RUN_ASYNC, fn_run_async, o);
    rpc_register(RL_FN_SHUTDOWN, fn_shutdown, o);
    rpc_register(RL_FN_GET_STATE, fn_get_state, o);
    return o;
}

void observer_free(struct observer *o)
{
    if (!o) return;
    release_env(o);
    pthread_mutex_destroy(&o->mu);
    free(o);
}

int observer_run(const struct rpc_opts *opts)
{
    dist_autograd_init();
    struct observer *o = observer_new();
    if (rpc_init(opts) < 0) {
        const char *me = opts->name ? opts->name : "observer";
        fprintf(stderr, "%s: %s\n", me, rpc_last_error());   /* "rpc_init: ..." */
        struct rpc_stats st;
        rpc_get_stats(&st);
        if (st.handshakes_failed)
            fprintf(stderr, "%s: could not reach the agent at %s; is it using --keys? %s\n", me, rpc_master_endpoint(),
                    opts->curve ? "(this observer has --keys: the agent needs the same key)"
                                : "(then give this observer the same --keys DIR)");
        observer_free(o);
        return 1;
    }
    const char *me = rpc_self()->name;
    int rc = 0;
    while (!atomic_load(&o->shutdown)) {
        struct rpc_event ev;
        if (rpc_next_event(&ev, 100) != 1) continue;
        if (ev.id == 0 && (ev.kind == RPC_EVENT_FAILED || ev.kind == RPC_EVENT_LEAVE)) {
            if (ev.kind == RPC_EVENT_FAILED)
                fprintf(stderr, "%s: lost the agent (no heartbeat within %d ms): exiting\n", me,
                        opts->heartbeat_timeout_ms);
            else
                fprintf(stderr, "%s: lost the agent (it left): exiting\n", me);
            rc = 1;
            break;
        }
    }
    rpc_shutdown(rc == 0);
    observer_free(o);
    return rc;
}
