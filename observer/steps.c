/* The observer's steps (observer/state.h): its envs stepped under the
 * watchdog and checked, the policy's answers through the RRef, a rollout
 * of T steps and an episode: what every mode does with the envs. */
#define _GNU_SOURCE
#include "observer/state.h"

#include "common/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/watchdog.h"
#include "rl/debug_dump.h"
#include "rl/finite.h"
#include "rl/rl.h"
#include "rl/sample.h"
#include "tensor/ops.h"

/* The watchdog's verdict on a step that runs past --step-timeout: a plug-in
 * stuck in C cannot be interrupted, so this observer says so and exits at
 * once; the agent counts it lost (its heartbeats stop). */
void observer_step_overdue(void *u, double seconds)
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
int observer_check_step(struct observer *o, const float *reward, const float *final_obs)
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
    return n >= 0 && observer_check_step(o, o->ln.reward, o->ln.final_obs) != 0 ? -1 : n;
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
    return observer_check_step(o, l->reward, NULL);
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
struct tensor *observer_learner_loss(struct observer *o, const struct rl_policy_out *out,
                                     const struct rl_policy_out *prox, double weight, struct rl_update_stats *st)
{
    char what[64];
    snprintf(what, sizeof what, "minibatch %d of epoch %d", o->ln.mb_index, o->ln.mb_epoch);
    return finite_loss(o, rl_learner_loss(&o->ln, out, prox, weight, st), what);
}

/* method on obs (borrowed), unpacking the answer for `rows` rows. */
int observer_call_policy(struct observer *o, const char *method, struct tensor *obs, bool last, struct rl_policy_out *out)
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
    return observer_call_policy(o, RL_METHOD_ACT, o->obs_t, t == o->ln.ro.T, out);
}

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
    int rc = observer_call_policy(o, RL_METHOD_ACT, x, false, &out);
    tensor_free(x);
    if (rc != 0) return -1;
    rl_learner_bootstrap(&o->ln, t, n, o->trunc_idx, tensor_data(out.value));
    rl_policy_out_clear(&out);
    return 0;
}

/* Double buffering (cfg.double_buffer): half h's act call on the rows of
 * rl_learner_obs_rows(t), sent without waiting; last marks the rollout's
 * final call (half 1's at t == T). */
static struct rpc_future *act_half(struct observer *o, int t, int h)
{
    int H = o->B / 2;
    memcpy(tensor_data(o->half_obs[h]), rl_learner_obs_rows(&o->ln, t, h * H, H), (size_t)H * o->D * sizeof(float));
    struct rpc_value a = rl_obs_pack(o->half_obs[h], t == o->ln.ro.T && h == 1);
    struct rpc_future *f = rref_rpc_async(o->policy, RL_METHOD_ACT, &a, 0);
    rpc_value_clear(&a);
    return f;
}

/* Waits for half h's act call (*f freed and cleared) and unpacks its answer. */
static int wait_half(struct observer *o, struct rpc_future **f, struct rl_policy_out *out)
{
    struct rpc_value r = rpc_nil();
    int rc = rpc_future_wait(*f, &r);
    rpc_future_free(*f);
    *f = NULL;
    if (rc != 0) return rl_set_error("%s: %s", RL_METHOD_ACT, rpc_last_error());
    rc = rl_policy_out_unpack(&r, o->B / 2, o->A, !o->discrete, o->value_head, out);
    rpc_value_clear(&r);
    return rc;
}

/* The rollout with the envs in two halves (Sample Factory's double-buffered
 * sampling, docs/design.md §6): while half h steps, the other half's act
 * call is in flight. Each observer's calls come in one order (half 0's,
 * half 1's, with a truncated env's bootstrap call after its half's step),
 * so the agent's lockstep merge (agent/policy.c: each observer's next
 * call) stays reproducible. */
static int rollout_halves(struct observer *o)
{
    const int T = o->ln.ro.T, H = o->B / 2;
    struct rpc_future *f[2] = { act_half(o, 0, 0), act_half(o, 0, 1) };
    int rc = 0;
    for (int t = 0; t < T && rc == 0; t++)
        for (int h = 0; h < 2 && rc == 0; h++) {
            struct rl_policy_out out;
            if ((rc = wait_half(o, &f[h], &out)) != 0) break;
            watchdog_arm(o->dog);
            int n = rl_learner_step_rows(&o->ln, t, h * H, H, &out, o->trunc_idx);
            watchdog_disarm(o->dog);
            rl_policy_out_clear(&out);
            if (n >= 0) {
                bool bad = observer_check_step(o, o->ln.reward, o->ln.final_obs) != 0;
                if (h == 0) o->env_steps--;   /* a step of the envs is both halves' (its number for messages) */
                if (bad) n = -1;
            }
            if (n < 0 || (n > 0 && bootstrap_truncated(o, t, n) != 0)) rc = -1;
            else f[h] = act_half(o, t + 1, h);
        }
    for (int h = 0; h < 2 && rc == 0; h++) {
        struct rl_policy_out out;
        if ((rc = wait_half(o, &f[h], &out)) == 0) {
            memcpy(o->next_values + (size_t)h * H, tensor_data(out.value), (size_t)H * sizeof(float));
            rl_policy_out_clear(&out);
        }
    }
    for (int h = 0; h < 2; h++)
        if (f[h]) {   /* a failed rollout: the call in flight is waited for, not left behind */
            rpc_future_wait(f[h], NULL);
            rpc_future_free(f[h]);
        }
    if (rc == 0) rl_learner_finish(&o->ln, o->next_values);
    return rc;
}

/* T steps of every env into the rollout buffer, then advantages. */
int observer_rollout(struct observer *o)
{
    if (o->cfg.double_buffer) return rollout_halves(o);
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
void observer_dump_minibatch(struct observer *o, double weight)
{
    o->dumped = true;
    char name[64];
    snprintf(name, sizeof name, "minibatch_%d.bin", o->index);
    if (rl_learner_dump_minibatch(&o->ln, name, weight) != 0) fprintf(stderr, "observer: %s\n", rl_last_error());
}

/* One episode of env 0 (B is 1), forwards recorded in the current context.
 * Returns the algorithm's episode loss and fills the report. */
struct tensor *observer_episode(struct observer *o)
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
        if (observer_call_policy(o, RL_METHOD_EVALUATE, o->obs_t, false, &out) != 0) goto out;
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
