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
#include "rl/algo_shape.h"
#include "rl/config.h"
#include "rl/debug_dump.h"
#include "rl/finite.h"
#include "rl/learner.h"
#include "rl/losses.h"
#include "rl/messages.h"
#include "common/notice.h"
#include "runfiles/policy_file.h"
#include "rl/rl.h"
#include "rl/sample.h"
#include "rl/last_word.h"
#include "common/watchdog.h"
#include "rpc/dist_autograd.h"
#include "tensor/ops.h"

struct observer {
    pthread_mutex_t mu;             /* one job at a time */
    pthread_mutex_t end_mu;         /* guards agent_gone; with end_cv, wakes observer_run */
    pthread_cond_t end_cv;
    int agent_gone;                 /* 0, or RPC_EVENT_FAILED / RPC_EVENT_LEAVE of the agent */
    bool ready;
    struct rl_config cfg;
    const struct rl_algo *algo;     /* cfg's */
    int index;
    struct rref *policy;
    struct env_plugin *plugin;
    const struct env_spec *spec;
    struct rl_learner ln;           /* envs, RNG, rollout buffer, minibatches */
    int B, D, A;
    bool discrete, value_head;
    struct tensor *obs_t;           /* [B,D] reused for act calls */
    int *trunc_idx;                 /* [B] envs to bootstrap after a step */
    /* an episodes algorithm's episode (RL_SHAPE_EPISODES) */
    int max_len;
    struct tensor **ep_logp;
    float *ep_rew;
    atomic_bool shutdown;
    bool dumped;                    /* TRIB_DEBUG_DUMP done */
    int64_t env_steps;              /* vec_env steps since set-up, for messages */
    struct watchdog *dog;        /* over env steps: --step-timeout */
};

/* The watchdog's verdict on a step that runs past --step-timeout: a plug-in
 * stuck in C cannot be interrupted, so this observer says so and exits at
 * once; the agent counts it lost (its heartbeats stop). */
static void step_overdue(void *u, double seconds)
{
    struct observer *o = u;
    char why[640];
    snprintf(why, sizeof why, "env %s: a step has run for %.1f s, longer than --step-timeout %g s", o->spec->id,
             seconds, o->cfg.step_timeout);
    fprintf(stderr, "%s: %s: giving up (exit 1)\n", rpc_self()->name, why);
    struct rpc_value a = rpc_list(1), r = rpc_nil();
    a.list.items[0] = rpc_str(why);
    rpc_sync("agent", RL_FN_GAVE_UP, &a, &r, 2000);   /* best effort: the agent's log says why too */
    _exit(1);
}

/* Refuses a non-finite observation or reward of the vec_env step just
 * taken (reward NULL: a reset), naming the env, this observer and the step.
 * 0 or -1 with rl_last_error(). */
static int check_step(struct observer *o, const float *reward, const float *final_obs)
{
    if (reward) o->env_steps++;
    return rl_check_env_step(o->spec->id, rpc_self()->name, o->env_steps, o->B, o->D, o->ln.env_obs, reward,
                             o->ln.trunc, final_obs);
}

/* rl_learner_step under the watchdog, its observations and rewards
 * checked: the count of envs to bootstrap, or -1 with rl_last_error(). */
static int learner_step(struct observer *o, int t, const struct rl_policy_out *out)
{
    watchdog_arm(o->dog);
    int n = rl_learner_step(&o->ln, t, out, o->trunc_idx);
    watchdog_disarm(o->dog);
    return n >= 0 && check_step(o, o->ln.reward, o->ln.final_obs) != 0 ? -1 : n;
}

/* One step of env 0 (an episodes algorithm's) under the watchdog, checked as
 * learner_step: 0 or -1 with rl_last_error(). */
static int step_envs(struct observer *o, const void *acts)
{
    struct rl_learner *l = &o->ln;
    watchdog_arm(o->dog);
    int rc = vec_env_step(l->venv, acts, l->cur_obs, l->reward, l->term, l->trunc, NULL);
    watchdog_disarm(o->dog);
    if (rc != 0) return rl_set_error("env step: %s", env_last_error());
    return check_step(o, l->reward, NULL);
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

/* rl_learner_loss, refused when it is not finite. */
static struct tensor *learner_loss(struct observer *o, const struct rl_policy_out *out, double weight,
                                   struct rl_update_stats *st)
{
    char what[64];
    snprintf(what, sizeof what, "minibatch %d of epoch %d", o->ln.mb_index, o->ln.mb_epoch);
    return finite_loss(o, rl_learner_loss(&o->ln, out, weight, st), what);
}

/* ---- setup ---------------------------------------------------------------------- */

static void release_env(struct observer *o)
{
    watchdog_free(o->dog);
    o->dog = NULL;
    rl_learner_deinit(&o->ln);
    env_plugin_close(o->plugin);
    tensor_free(o->obs_t);
    free(o->trunc_idx);
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

/* The agent's set v (setup, a sync rollout request, an async update's
 * reply: rl_norm_stats_pack's map; nil when the run normalises nothing)
 * becomes this observer's global. 0 or -1 with rl_last_error() naming what
 * carried it. */
static int adopt_norm(struct observer *o, const struct rpc_value *v, const char *what)
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
static struct rpc_value take_delta(struct observer *o)
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
    pthread_mutex_lock(&o->mu);
    if (o->ready) *res = save_state(o);
    bool ready = o->ready;
    pthread_mutex_unlock(&o->mu);
    return ready ? 0 : rpc_request_fail(req, "not set up");
}

static int fn_rollout(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u);
static int fn_loss(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u);
static int fn_episode(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u);

/* What an episodes algorithm needs: the episode's buffers and its one
 * function (the observer serves only its algorithm's: an agent calling
 * another one is told there is no such function). */
static int setup_episodes(void *u)
{
    struct observer *o = u;
    o->ep_logp = calloc((size_t)o->max_len, sizeof *o->ep_logp);
    o->ep_rew = calloc((size_t)o->max_len, sizeof *o->ep_rew);
    if (!o->ep_logp || !o->ep_rew) return rl_set_error("out of memory for episodes of %d steps", o->max_len);
    rpc_register(RL_FN_EPISODE, fn_episode, o);
    return 0;
}

/* A rollouts algorithm's functions: its rollout and its minibatch losses. */
static int setup_rollouts(void *u)
{
    struct observer *o = u;
    rpc_register(RL_FN_ROLLOUT, fn_rollout, o);
    rpc_register(RL_FN_LOSS, fn_loss, o);
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
    o->dog = watchdog_new(o->cfg.step_timeout, step_overdue, o);
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
    if (rl_algo_drive(o->algo, &(struct rl_drivers){ .drive = { [RL_SHAPE_EPISODES] = setup_episodes,
                                                                 [RL_SHAPE_ROLLOUTS] = setup_rollouts },
                                                      .ctx = o }) != 0)
        return -1;
    if (!o->obs_t || !o->trunc_idx) return rl_set_error("out of memory for %d envs", o->B);
    if (m->state.kind == RPC_BYTES && restore_state(o, (const unsigned char *)m->state.str.ptr, m->state.str.len) != 0)
        return -1;
    if (adopt_norm(o, &m->norm, "setup") != 0) return -1;
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

/* act on the learner's observation of step t (t == T: the bootstrap
 * values, marked last for the agent's merging). */
static int act(struct observer *o, int t, struct rl_policy_out *out)
{
    memcpy(tensor_data(o->obs_t), rl_learner_obs(&o->ln, t), (size_t)o->B * o->D * sizeof(float));
    return call_policy(o, RL_METHOD_ACT, o->obs_t, t == o->ln.ro.T, out);
}

/* ---- rollouts --------------------------------------------------------------------------- */

/* Values of the final observations of the n envs truncated (not
 * terminated) at step t. Rare (time limits), so it may allocate. */
static int bootstrap_truncated(struct observer *o, int t, int n)
{
    int64_t s[2] = { n, o->D };
    struct tensor *x = tensor_new(DTYPE_F32, DEVICE_CPU, 2, s);
    if (!x) return rl_set_error("%s", tensor_last_error());
    for (int i = 0; i < n; i++)
        memcpy((float *)tensor_data(x) + (size_t)i * o->D, rl_learner_final_obs(&o->ln, o->trunc_idx[i]),
               (size_t)o->D * sizeof(float));
    struct rl_policy_out out;
    int rc = call_policy(o, RL_METHOD_ACT, x, false, &out);
    tensor_free(x);
    if (rc != 0) return -1;
    rl_learner_bootstrap(&o->ln, t, n, o->trunc_idx, tensor_data(out.value));
    rl_policy_out_clear(&out);
    return 0;
}

/* T steps of every env into the rollout buffer, then advantages. */
static int rollout(struct observer *o)
{
    for (int t = 0; t < o->ln.ro.T; t++) {
        struct rl_policy_out out;
        if (act(o, t, &out) != 0) return -1;
        int n = learner_step(o, t, &out);
        rl_policy_out_clear(&out);
        if (n < 0 || (n > 0 && bootstrap_truncated(o, t, n) != 0)) return -1;
    }
    struct rl_policy_out out;
    if (act(o, o->ln.ro.T, &out) != 0) return -1;
    rl_learner_finish(&o->ln, tensor_data(out.value));
    rl_policy_out_clear(&out);
    return 0;
}

/* TRIB_DEBUG_DUMP (rl/debug_dump.h): the first minibatch. */
static void dump_minibatch(struct observer *o, double weight)
{
    o->dumped = true;
    char name[64];
    snprintf(name, sizeof name, "minibatch_%d.bin", o->index);
    if (rl_learner_dump_minibatch(&o->ln, name, weight) != 0) fprintf(stderr, "observer: %s\n", rl_last_error());
}

/* The minibatch after (epoch, mb), gathered; false after the last. */
static bool next_minibatch(const struct observer *o, int *epoch, int *mb)
{
    if (++*mb == o->cfg.minibatches) {
        *mb = 0;
        ++*epoch;
    }
    return *epoch < o->cfg.epochs;
}

/* Sync: rollout() -> (report, observations of minibatch 0 of epoch 0). */
static int fn_rollout(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    const struct rpc_value *set;
    if (rl_rollout_req_unpack(args, &set) != 0) return rpc_request_fail(req, "%s", rl_last_error());
    pthread_mutex_lock(&o->mu);
    int rc = !o->ready ? rl_set_error("not set up") : adopt_norm(o, set, "rollout");
    if (rc == 0) rc = rollout(o);
    if (rc == 0) rc = rl_learner_minibatch(&o->ln, 0, 0);
    if (rc == 0) {
        struct rl_rollout_reply rep = { .report = o->ln.report, .obs = o->ln.mb_obs, .norm = take_delta(o) };
        *res = rl_rollout_reply_pack(&rep);
        rpc_value_clear(&rep.norm);
    }
    pthread_mutex_unlock(&o->mu);
    return rc == 0 ? 0 : rpc_request_fail(req, "%s", rl_last_error());
}

/* ---- minibatch losses ----------------------------------------------------------------------- */

/* Sync: loss(epoch, mb, weight, the agent's evaluation of the minibatch
 * this observer sent last) in the update's context: the loss, its backward
 * (the gradients reach the agent's parameters), then the next minibatch
 * gathered and its observations sent back. */
static int fn_loss(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    int64_t ctx = dist_autograd_current();
    if (ctx == 0) return rpc_request_fail(req, "loss: must be called inside a context");
    pthread_mutex_lock(&o->mu);
    struct rl_loss_req m = { 0 };
    struct rl_minibatch_reply rep = { 0 };
    struct tensor *loss = NULL;
    int rc = 0;
    if (!o->ready) rc = rl_set_error("not set up");
    else if (!o->ln.mb_obs) rc = rl_set_error("loss: no minibatch is waiting (no rollout since the last update)");
    else if (rl_loss_req_unpack(args, o->ln.mb_rows, o->A, !o->discrete, o->value_head, &m) != 0) rc = -1;
    else if (m.epoch != o->ln.mb_epoch || m.minibatch != o->ln.mb_index)
        rc = rl_set_error("loss: minibatch %d of epoch %d asked, %d of epoch %d was sent", m.minibatch, m.epoch,
                          o->ln.mb_index, o->ln.mb_epoch);
    if (rc == 0) {
        if (rl_debug_dump_dir() && !o->dumped) dump_minibatch(o, m.weight);
        loss = learner_loss(o, &m.out, m.weight, &rep.stats);
        if (!loss) rc = -1;
        else if (dist_autograd_backward(ctx, 1, &loss, false) != 0) rc = rl_set_error("backward: %s", rpc_last_error());
    }
    int e = m.epoch, mb = m.minibatch;
    if (rc == 0 && next_minibatch(o, &e, &mb)) {
        if (rl_learner_minibatch(&o->ln, e, mb) != 0) rc = -1;
        else rep.obs = o->ln.mb_obs;
    }
    if (rc == 0) *res = rl_minibatch_reply_pack(&rep);
    pthread_mutex_unlock(&o->mu);
    tensor_free(loss);
    rl_loss_req_clear(&m);
    /* this observer's part of the update is over: its copy of the context
     * goes without a message (the agent frees its own after the step) */
    dist_autograd_release_local(ctx);
    return rc == 0 ? 0 : rpc_request_fail(req, "%s", rl_last_error());
}

/* ---- an episodes algorithm's episodes (RL_SHAPE_EPISODES) -------------------------------------------------------------------- */

/* One episode of env 0 (B is 1), forwards recorded in the current context.
 * Returns the algorithm's episode loss and fills the report. */
static struct tensor *episode(struct observer *o)
{
    struct rl_learner *l = &o->ln;
    memset(&l->report, 0, sizeof l->report);
    l->report.explained_var = NAN;
    int64_t is[2] = { 1, 1 };
    int n = 0;
    bool done = false;
    struct tensor *loss = NULL;
    while (!done && n < o->max_len) {
        memcpy(tensor_data(o->obs_t), l->cur_obs, (size_t)o->D * sizeof(float));
        struct rl_policy_out out;
        if (call_policy(o, RL_METHOD_EVALUATE, o->obs_t, false, &out) != 0) goto out;
        if (n == 0) l->report.version0 = out.version;
        int action = 0;
        rl_sample_categorical(1, o->A, tensor_data(out.a), &l->rng, false, &action, NULL);
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
        if (step_envs(o, &action) != 0) {
            n++;
            goto out;
        }
        o->ep_rew[n++] = (float)(l->reward[0] * o->cfg.reward_scale);
        done = l->term[0] || l->trunc[0];
    }
    double ret;
    int len;
    if (vec_env_last_episode(l->venv, 0, &ret, &len) == 0) rl_report_add(&l->report, ret, len);
    l->report.steps = n;
    rl_learner_note_info(l);
    struct tensor *lp = tensor_cat(n, o->ep_logp, 0);
    loss = lp ? finite_loss(o, o->algo->ep_loss(lp, o->ep_rew, n, &o->cfg), "the episode's loss") : NULL;
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
    rep.loss = !o->ready ? (rl_set_error("not set up"), NULL) : episode(o);
    if (rep.loss) {
        rep.report = o->ln.report;
        rep.stats.policy_loss = *(const float *)tensor_data(rep.loss);   /* the episode's own loss */
        *res = rl_loss_reply_pack(&rep);
    }
    pthread_mutex_unlock(&o->mu);
    if (!rep.loss) return rpc_request_fail(req, "%s", rl_last_error());
    tensor_free(rep.loss);
    return 0;
}

/* ---- async mode ---------------------------------------------------------------------------- */

/* rl_update of the pending update u (its context's backward done), with
 * next_obs (NULL: none) for the agent to evaluate in the thread's current
 * context: rep->out then holds its answer (rows of next_obs). The agent
 * frees its copy of u->ctx before answering; this one goes after. */
static int send_update(struct observer *o, struct rl_update_req *u, struct tensor *next_obs,
                       struct rl_update_reply *rep)
{
    u->next_obs = next_obs;
    struct rpc_value a = rl_update_req_pack(u), r = rpc_nil();
    u->next_obs = NULL;
    rpc_value_clear(&u->norm);
    int rc = 0;
    if (rpc_sync("agent", RL_FN_UPDATE, &a, &r, 0) != 0) rc = rl_set_error("update: %s", rpc_last_error());
    else if (rl_update_reply_unpack(&r, next_obs ? (int)next_obs->shape[0] : 0, o->A, !o->discrete, o->value_head,
                                    rep) != 0)
        rc = -1;
    else {
        if (rep->norm.kind == RPC_MAP && adopt_norm(o, &rep->norm, "update reply") != 0) rc = -1;
        else if (next_obs && !rep->stop && !rep->stale && !rep->has_out)
            rc = rl_set_error("update: the agent did not evaluate the next minibatch");
        rpc_value_clear(&rep->norm);   /* adopted here: the callers take only stop, stale and out */
    }
    rpc_value_clear(&a);
    rpc_value_clear(&r);
    dist_autograd_release_local(u->ctx);
    return rc;
}

/* The backward of loss in its context (the current one), then the update
 * it becomes: *u, to be sent with the next evaluation. */
static int backward_into(struct observer *o, struct tensor *loss, int64_t ctx, bool first, struct rl_update_req *u)
{
    int rc = loss ? 0 : -1;
    if (rc == 0 && dist_autograd_backward(ctx, 1, &loss, false) != 0) rc = rl_set_error("backward: %s", rpc_last_error());
    tensor_free(loss);
    if (rc != 0) {
        dist_autograd_release_local(ctx);
        return -1;
    }
    u->ctx = ctx;
    u->version0 = o->ln.report.version0;
    u->has_report = first;
    u->report = o->ln.report;
    if (first) u->norm = take_delta(o);   /* what its envs added to the statistics, with the report */
    return 0;
}

/* An estimator with a correction (--vtrace: V-trace): the policy as it is
 * now answers for the whole rollout and the observation after it (in calls of at most --max-batch rows, no graph),
 * and the rollout's advantages and returns become V-trace's for it. */
static int target_correct(struct observer *o)
{
    struct rl_learner *l = &o->ln;
    int T = l->ro.T, B = l->B, D = o->D, A = o->A, rows = (T + 1) * B;
    int chunk = o->cfg.max_batch / B * B;
    float *a = malloc((size_t)rows * A * sizeof(float)), *v = malloc((size_t)rows * sizeof(float));
    float *log_std = calloc((size_t)A, sizeof(float));
    int rc = a && v && log_std ? 0 : rl_set_error("vtrace: out of memory");
    for (int start = 0; rc == 0 && start < rows; start += chunk) {
        int n = rows - start < chunk ? rows - start : chunk;
        int64_t shape[2] = { n, D };
        struct tensor *obs = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape);
        if (!obs) {
            rc = rl_set_error("vtrace: %s", tensor_last_error());
            break;
        }
        float *dst = tensor_data(obs);
        for (int r = 0; r < n; r++) {
            int row = start + r;
            const float *src = row < T * B ? l->ro.obs + (size_t)row * D : l->cur_obs + (size_t)(row - T * B) * D;
            memcpy(dst + (size_t)r * D, src, (size_t)D * sizeof(float));
        }
        struct rl_policy_out out;
        rc = call_policy(o, RL_METHOD_ACT, obs, false, &out);
        tensor_free(obs);
        if (rc != 0) break;
        memcpy(a + (size_t)start * A, tensor_data(out.a), (size_t)n * A * sizeof(float));
        memcpy(v + start, tensor_data(out.value), (size_t)n * sizeof(float));
        if (out.log_std) memcpy(log_std, tensor_data(out.log_std), (size_t)A * sizeof(float));
        rl_policy_out_clear(&out);
    }
    if (rc == 0) rl_learner_correct(l, a, log_std, v, v + (size_t)T * B);
    free(a);
    free(v);
    free(log_std);
    return rc;
}

/* A rollout's updates (PPO/A2C), each in a context of its own: minibatch
 * i's update goes to the agent with minibatch i+1's observations, which
 * the agent evaluates right after its step (one round trip for both); the
 * first minibatch is evaluated through the policy's RRef, the last update
 * goes alone. Writes *stop. */
static int async_updates(struct observer *o, bool *stop)
{
    struct rl_update_req u = { 0 };
    bool pending = false;
    if (o->ln.est->correct && target_correct(o) != 0) return -1;
    bool stale = false;
    for (int e = 0; e < o->cfg.epochs && !*stop; e++)
        for (int mb = 0; mb < o->cfg.minibatches && !*stop; mb++) {
            int64_t ctx = dist_autograd_context_new();
            if (ctx < 0) return rl_set_error("context: %s", rpc_last_error());
            struct rl_policy_out out = { 0 };
            int rc = rl_learner_minibatch(&o->ln, e, mb);
            if (rc == 0 && rl_debug_dump_dir() && !o->dumped) dump_minibatch(o, 1.0);
            if (rc == 0 && pending) {
                struct rl_update_reply rep;
                rc = send_update(o, &u, o->ln.mb_obs, &rep);
                pending = false;
                if (rc == 0) {
                    *stop = rep.stop;
                    stale = rep.stale;
                    out = rep.out;      /* moved */
                    rep.has_out = false;
                }
            } else if (rc == 0) {
                rc = call_policy(o, RL_METHOD_EVALUATE, o->ln.mb_obs, false, &out);
            }
            /* dropped as too stale (--max-policy-lag): so is the rest of
             * this rollout; a new one follows */
            if (rc != 0 || *stop || stale) {
                rl_policy_out_clear(&out);
                dist_autograd_release_local(ctx);
                return rc;
            }
            struct rl_update_stats st;
            struct tensor *loss = learner_loss(o, &out, 1.0, &st);
            rl_policy_out_clear(&out);
            u = (struct rl_update_req){ .stats = st };
            if (backward_into(o, loss, ctx, e == 0 && mb == 0, &u) != 0) return -1;
            pending = true;
        }
    if (!pending) return 0;
    struct rl_update_reply rep;
    int rc = send_update(o, &u, NULL, &rep);
    if (rc == 0) *stop = rep.stop;
    return rc;
}

/* An episodes algorithm: an episode in a fresh context, its backward, the update. */
static int async_episode(struct observer *o, bool *stop)
{
    int64_t ctx = dist_autograd_context_new();
    if (ctx < 0) return rl_set_error("context: %s", rpc_last_error());
    struct rl_update_req u = { 0 };
    struct tensor *loss = episode(o);
    if (loss) u.stats.policy_loss = *(const float *)tensor_data(loss);   /* the episode's own loss */
    if (backward_into(o, loss, ctx, true, &u) != 0) return -1;
    struct rl_update_reply rep;
    int rc = send_update(o, &u, NULL, &rep);
    if (rc == 0) *stop = rep.stop;
    return rc;
}

/* The async loop's iteration per shape (rl_algo_drive). */
struct async_it {
    struct observer *o;
    bool stop;
};

static int async_episode_it(void *u)
{
    struct async_it *it = u;
    return async_episode(it->o, &it->stop);
}

static int async_rollout_it(void *u)
{
    struct async_it *it = u;
    return rollout(it->o) != 0 ? -1 : async_updates(it->o, &it->stop);
}

static int async_loop(struct observer *o)
{
    struct async_it it = { .o = o };
    const struct rl_drivers d = { .drive = { [RL_SHAPE_EPISODES] = async_episode_it,
                                             [RL_SHAPE_ROLLOUTS] = async_rollout_it },
                                  .ctx = &it };
    while (!it.stop && !atomic_load(&o->shutdown))
        if (rl_algo_drive(o->algo, &d) != 0) return -1;
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

/* Wakes observer_run. */
static void end_signal(struct observer *o)
{
    pthread_mutex_lock(&o->end_mu);
    pthread_cond_broadcast(&o->end_cv);
    pthread_mutex_unlock(&o->end_mu);
}

static int fn_shutdown(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    atomic_store(&o->shutdown, true);
    end_signal(o);
    *res = rpc_nil();
    return 0;
}

/* I/O thread: the agent (worker 0) failed or left. Must not block long. */
static void on_event(const struct rpc_event *ev, void *user)
{
    struct observer *o = user;
    if (ev->id != 0 || (ev->kind != RPC_EVENT_FAILED && ev->kind != RPC_EVENT_LEAVE)) return;
    pthread_mutex_lock(&o->end_mu);
    if (!o->agent_gone) o->agent_gone = ev->kind;
    pthread_cond_broadcast(&o->end_cv);
    pthread_mutex_unlock(&o->end_mu);
}

/* ---- the process ---------------------------------------------------------------------------- */

struct observer *observer_new(void)
{
    if (!getenv("OPENBLAS_NUM_THREADS")) tensor_set_cpu_threads(1);
    struct observer *o = trib_xcalloc(1, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    pthread_mutex_init(&o->end_mu, NULL);
    pthread_cond_init(&o->end_cv, NULL);
    rpc_register(RL_FN_SETUP, fn_setup, o);
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
    pthread_mutex_destroy(&o->end_mu);
    pthread_cond_destroy(&o->end_cv);
    free(o);
}

/* A crash's last word (rl/last_word.h), on its own thread: the agent is
 * told at once (rl_gave_up(why, "crashed")), so it drops this observer
 * saying it crashed instead of waiting for its heartbeats to stop. */
static bool crash_announce;
static char crash_who[64];
static void last_word(int sig, void *u)
{
    (void)u;
    char why[96];
    rl_describe_end(sig, 0, why, sizeof why);
    if (crash_announce) fprintf(stderr, "%s: %s: telling the agent\n", rpc_self()->name[0] ? rpc_self()->name : crash_who, why);
    struct rpc_value a = rpc_list(2), r = rpc_nil();
    a.list.items[0] = rpc_str(why);
    a.list.items[1] = rpc_str(RL_GONE_CRASHED);
    rpc_sync("agent", RL_FN_GAVE_UP, &a, &r, RL_LAST_WORD_MS - 500);
    rpc_value_clear(&a);
    rpc_value_clear(&r);
}

int observer_run(const struct rpc_opts *opts, bool announce)
{
    dist_autograd_init();
    struct observer *o = observer_new();
    const char *who = opts->name ? opts->name : "observer", *master = opts->master ? opts->master : "MASTER_ADDR";
    char what[512];
    snprintf(what, sizeof what, "the agent at %s (the run starts once the agent and all its observers have joined)",
             master);
    struct rpc_opts mine = *opts;
    mine.on_event = on_event;
    mine.event_user = o;
    /* before rpc_init: the agent's calls (set-up, the first steps) may be
     * served before rpc_init has returned here; a crash before the RPC
     * layer is up just has no one to tell (rpc_sync fails at once) */
    crash_announce = announce;
    snprintf(crash_who, sizeof crash_who, "%s", who);
    if (rl_last_word_install(last_word, NULL) != 0) fprintf(stderr, "%s: %s\n", who, rl_last_error());
    struct notice *wait = announce ? notice_start(who, what, 3, NULL, NULL) : NULL;
    int irc = rpc_init(&mine);
    notice_stop(wait);
    if (irc >= 0 && announce)
        fprintf(stderr, "%s: joined the agent at %s as rank %d\n", rpc_self()->name, rpc_master_endpoint(),
                rpc_self()->id);

    if (irc < 0) {
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
    /* Sleeps until rl_shutdown or the agent's loss wakes it (no polling: the
     * agent's graceful shutdown waits for this process to get there). */
    pthread_mutex_lock(&o->end_mu);
    while (!atomic_load(&o->shutdown) && !o->agent_gone) pthread_cond_wait(&o->end_cv, &o->end_mu);
    int gone = o->agent_gone;
    pthread_mutex_unlock(&o->end_mu);
    int rc = 0;
    if (gone && !atomic_load(&o->shutdown)) {
        if (gone == RPC_EVENT_FAILED)
            fprintf(stderr, "%s: lost the agent (no heartbeat within %d ms): exiting\n", me, opts->heartbeat_timeout_ms);
        else
            fprintf(stderr, "%s: lost the agent (it left): exiting\n", me);
        rc = 1;
    }
    rpc_shutdown(rc == 0);
    observer_free(o);
    return rc;
}
