/* Sync mode (state.h's agent_mode_sync): the agent drives every update.
 * Each iteration is the driver of the algorithm's shape (rl/algo.h,
 * rl_algo_drive): rollouts everywhere, then updates in which the agent
 * evaluates every observer's minibatch in one forward, the observers answer
 * with their loss's gradients for it and the agent runs the backward (PPO,
 * A2C: one round trip an update); or one episode per observer
 * (REINFORCE); each update one dist_optim_step. Between iterations: rejoins,
 * the progress line, checkpoints with the observers' states. With overlap
 * (cfg.overlap, a rollouts algorithm; docs/design.md §6 "Overlap") the
 * next rollout is asked for before this one's updates, acted on by the
 * policy's frozen copy (policy_freeze): it is collected while the agent
 * learns; with --overlap-correction decoupled that copy is also the
 * proximal policy a lagged rollout's losses learn against. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/state.h"
#include "agent/policy.h"
#include "agent/policy_batch.h"
#include "agent/run_stats.h"
#include "common/check.h"
#include "common/clock.h"
#include "envs/env.h"
#include "optim/dist_optim.h"
#include "rl/algo_shape.h"
#include "rl/debug_dump.h"
#include "rl/finite.h"
#include "rl/messages.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"

/* Sync mode's overlap, on the main thread (one agent per process): the
 * rollout asked for ahead while the agent learns, and the policy lag of the
 * rollout being learnt from (with the decoupled correction, a lagged
 * rollout's loss calls carry the acting copy's answer too). */
static struct {
    bool on;                        /* cfg.overlap with a rollouts algorithm */
    bool prox;                      /* a lagged rollout's updates send the acting copy's answer (rl_algo_overlap_prox) */
    bool pending;                   /* futs are the next rollout's calls */
    struct rpc_future *futs[RL_MAX_OBSERVERS];
    int64_t version;                /* the acting copy's version the pending rollout is collected with */
    int64_t lag;                    /* versions between the behaviour policy and the learning's start */
} ahead;

/* Calls fn(args) on every live observer; futs[k] NULL for lost ones. */
static void call_live(struct agent *a, const char *fn, const struct rpc_value *args, struct rpc_future **futs)
{
    for (int k = 0; k < a->n_peers; k++)
        futs[k] = a->peers[k].alive ? rpc_async(a->peers[k].name, fn, args, 0) : NULL;
}

/* Waits for the episodes futs; a failed one, or one whose report is no
 * episode's, loses its observer. Replies unpacked into reps[k] (ok[k]
 * true). Returns the number that succeeded. */
static int wait_losses(struct agent *a, struct rpc_future **futs, struct rl_loss_reply *reps, bool *ok)
{
    int n = 0;
    agent_await_calls(a, futs, RL_FN_EPISODE);
    for (int k = 0; k < a->n_peers; k++) {
        ok[k] = false;
        if (!futs[k]) continue;
        struct rpc_value r = rpc_nil();
        if (rpc_future_wait(futs[k], &r) != 0) agent_lose_peer(a, k, rpc_future_error(futs[k]));
        else if (rl_loss_reply_unpack(&r, &reps[k]) != 0) agent_lose_peer(a, k, rl_last_error());
        else if (rl_report_fits(&reps[k].report, &a->cfg, a->spec->max_episode_steps, dist_optim_local_version()) != 0) {
            agent_lose_peer(a, k, rl_last_error());
            rl_loss_reply_clear(&reps[k]);
        } else ok[k] = true, n++;
        rpc_value_clear(&r);
        rpc_future_free(futs[k]);
        futs[k] = NULL;
    }
    return n;
}

/* TRIB_DEBUG_DUMP (rl/debug_dump.h): the parameters, CPU policies only. */
static void dump_params(struct agent *a, const char *name)
{
    struct tensor **params;
    int n = policy_params(a->policy, &params);
    const float *arrays[64];
    int64_t counts[64];
    if (n > 64 || params[0]->device != DEVICE_CPU) return;
    for (int i = 0; i < n; i++) {
        arrays[i] = tensor_data(params[i]);
        counts[i] = params[i]->numel;
    }
    if (rl_debug_dump(rl_debug_dump_dir(), name, n, arrays, counts) != 0) fprintf(stderr, PROG ": %s\n", rl_last_error());
}

/* The mean of the observers' update statistics into the run's. */
static void note_update(struct agent *a, const struct rl_update_stats *st, const bool *ok, int n, int64_t version0)
{
    struct rl_update_stats mean = { 0 };
    for (int k = 0; k < a->n_peers; k++) {
        if (!ok[k]) continue;
        mean.policy_loss += st[k].policy_loss / n;
        mean.value_loss += st[k].value_loss / n;
        mean.entropy += st[k].entropy / n;
        mean.approx_kl += st[k].approx_kl / n;
        mean.clipfrac += st[k].clipfrac / n;
    }
    /* with overlap: how far the rollout's behaviour policy is behind the
     * learning's start (0, or one rollout's updates) */
    run_stats_update(a->stats, ahead.on ? ahead.lag : dist_optim_local_version() - 1 - version0, &mean);
}

/* The optimizer step of ctx, timed as busy time; refused when a gradient
 * is not finite (the policy is unchanged). 0 or -1. */
static int step(struct agent *a, int64_t ctx)
{
    if (rl_check_gradients(ctx) != 0) return rl_set_error("update refused (the policy is unchanged): %s", rl_last_error());
    bool dump = rl_debug_dump_dir() && !a->dumped;
    if (dump) dump_params(a, "params_before.bin");
    double t0 = trib_now_s();
    if (dist_optim_step_clipped(a->opt, ctx, a->cfg.max_grad_norm) != 0)
        return rl_set_error("optimizer step: %s", rpc_last_error());
    run_stats_busy(a->stats, trib_now_s() - t0);
    if (dump) dump_params(a, "params_after.bin");
    a->dumped = true;
    return 0;
}

/* Lockstep: observers that the merged act calls have waited for for
 * --step-timeout (and AGENT_ACT_GRACE_S) are dropped (an honest one acts
 * within it, its env step bounded by the same timeout, or gives up itself
 * and says so): a member that takes the rollout and never acts would hold
 * every other observer up. Frees their rollouts' futures (futs[k]);
 * returns how many. */
static int drop_laggards(struct agent *a, struct rpc_future **futs)
{
    int ids[RL_MAX_OBSERVERS], n = 0;
    double wait_s = a->cfg.step_timeout + AGENT_ACT_GRACE_S;
    int m = a->cfg.step_timeout > 0 ? policy_sync_laggards(a->policy, wait_s, ids, RL_MAX_OBSERVERS) : 0;
    for (int i = 0; i < m; i++) {
        int k = agent_peer_by_id(a, ids[i]);
        if (k < 0 || !a->peers[k].alive) continue;
        char why[160];
        snprintf(why, sizeof why, "it did not act within the step timeout (--step-timeout %g s, and %g s more) while the "
                 "others' act calls waited for it", a->cfg.step_timeout, AGENT_ACT_GRACE_S);
        agent_lose_peer(a, k, why);
        a->abandoned = true;        /* its rollout call is given up on */
        rpc_future_free(futs[k]);
        futs[k] = NULL;
        n++;
    }
    return n;
}

/* Asks every live observer for a rollout (futs), with the statistics they
 * roll out with; with overlap, acted on by a fresh frozen copy of the
 * policy. 0, or -1 with rl_last_error() (no call made). */
static int rollouts_send(struct agent *a, struct rpc_future **futs)
{
    int ids[RL_MAX_OBSERVERS], n_ids = 0;
    for (int k = 0; k < a->n_peers; k++)
        if (a->peers[k].alive) ids[n_ids++] = a->peers[k].id;
    if (ahead.on && policy_freeze(a->policy) != 0) return rl_set_error("%s", rpc_last_error());
    ahead.version = dist_optim_local_version();
    policy_set_sync_callers(a->policy, ids, n_ids);
    struct rpc_value set = agent_norm_pack(a);   /* the statistics every observer rolls out with */
    struct rpc_value args = rl_rollout_req_pack(&set);
    call_live(a, RL_FN_ROLLOUT, &args, futs);
    rpc_value_clear(&args);
    rpc_value_clear(&set);
    return 0;
}

/* Sync rollouts (asked for by rollouts_send): every live observer's,
 * collected as they finish (a lost observer must be forgotten at once, or
 * the merged act calls of the others would keep waiting for it:
 * policy_set_sync_callers; so must one that does not act: drop_laggards);
 * statistics in observer order. in[k] and obs[k] (its first minibatch's
 * observations) for those that delivered. Returns how many did; futs are
 * freed. */
static int rollouts_collect(struct agent *a, struct rpc_future **futs, bool *in, struct tensor **obs)
{
    static _Thread_local struct rl_rollout_reply reps[RL_MAX_OBSERVERS];
    int rows = a->cfg.steps_per_rollout * a->cfg.envs_per_observer / a->cfg.minibatches;
    int n_in = 0, left = 0;
    for (int k = 0; k < a->n_peers; k++) {
        in[k] = false;
        obs[k] = NULL;
        left += futs[k] != NULL;
    }
    while (left > 0) {
        int k = rpc_future_wait_any(futs, (size_t)a->n_peers, 100);
        if (k < 0 && agent_abandon_overdue(a, futs, RL_FN_ROLLOUT)) return 0;
        if (k < 0) {
            if (agent_tend_gone(a, futs) > 0 || drop_laggards(a, futs) > 0) {   /* its rollout never comes */
                left = 0;
                for (int j = 0; j < a->n_peers; j++) left += futs[j] != NULL;
            }
            continue;
        }
        struct rpc_value r = rpc_nil();
        if (rpc_future_wait(futs[k], &r) != 0) agent_lose_peer(a, k, rpc_future_error(futs[k]));
        else if (rl_rollout_reply_unpack(&r, rows, a->spec->obs.dim, &reps[k]) != 0 ||
                 rl_report_fits(&reps[k].report, &a->cfg, a->spec->max_episode_steps, dist_optim_local_version()) != 0 ||
                 agent_norm_hold(a, k, &reps[k].norm, reps[k].report.steps) != 0) {
            rl_rollout_reply_clear(&reps[k]);
            agent_lose_peer(a, k, rl_last_error());
        } else {
            obs[k] = reps[k].obs;
            rpc_value_clear(&reps[k].norm);
            in[k] = true;
            n_in++;
        }
        rpc_value_clear(&r);
        rpc_future_free(futs[k]);
        futs[k] = NULL;
        left--;
    }
    for (int k = 0; k < a->n_peers; k++) {   /* statistics in worker order: reproducible */
        if (in[k] && agent_norm_merge_held(a, k) != 0) {   /* the set stays as it was */
            agent_lose_peer(a, k, rl_last_error());
            tensor_free(obs[k]);
            obs[k] = NULL;
            in[k] = false;
            n_in--;
        }
        agent_norm_drop(a, k);
    }
    for (int k = 0; k < a->n_peers; k++)
        if (in[k]) {
            run_stats_report(a->stats, &reps[k].report);
            run_stats_observer_steps(a->stats, k, reps[k].report.steps);
        }
    return n_in;
}

/* Asks for a rollout and collects it: rollouts_collect's result. */
static int sync_rollouts(struct agent *a, bool *in, struct tensor **obs)
{
    struct rpc_future *futs[RL_MAX_OBSERVERS];
    for (int k = 0; k < a->n_peers; k++) {
        in[k] = false;
        obs[k] = NULL;
    }
    if (rollouts_send(a, futs) != 0) return -1;
    return rollouts_collect(a, futs, in, obs);
}

/* Overlap: whether the boundary after this iteration's `updates` updates
 * will stop the run or write a checkpoint; then the next rollout is not
 * asked for ahead (drained), so that a checkpoint holds every observer at
 * a still point and nothing collected goes unlearnt. */
static bool boundary_is_still(struct agent *a, int updates)
{
    int64_t after = run_stats_updates(a->stats) + updates;
    if (agent_stop_reason(a) || atomic_load(&a->stop)) return true;
    if (a->cfg.max_updates > 0 && after >= a->cfg.max_updates) return true;
    return a->cfg.logdir[0] && a->cfg.checkpoint_every > 0 && after - a->ckpt_updates >= a->cfg.checkpoint_every;
}

/* Overlap: collects the rollout asked for ahead and learns nothing from it
 * (the run stops, or failed, during the updates before it): its steps and
 * episodes are counted, the observers are still again. */
static void drain_ahead(struct agent *a)
{
    if (!ahead.pending) return;
    bool in[RL_MAX_OBSERVERS];
    struct tensor *obs[RL_MAX_OBSERVERS];
    ahead.pending = false;
    rollouts_collect(a, ahead.futs, in, obs);
    for (int k = 0; k < a->n_peers; k++)
        if (in[k]) tensor_free(obs[k]);
}

/* One sync PPO/A2C update, one round trip: the agent evaluates every
 * observer's minibatch in one forward and sends each its part (plain data,
 * outside any context), with `prox` also the acting copy's answer for it
 * (the proximal policy: the one at the start of this rollout's updates);
 * each computes its loss, runs a local backward and
 * answers with d(loss)/d(its part), its statistics and its next minibatch;
 * one backward of those gradients through the forward into a context of
 * the agent's own (no message: the optimizer's step reads it there), one
 * step. 0; 1 when an observer was lost or its reply refused (no step: the
 * policy is unchanged); -1. */
static int sync_update(struct agent *a, int e, int mb, bool *in, struct tensor **obs, int n_in, int64_t version0,
                       bool prox)
{
    struct rpc_future *futs[RL_MAX_OBSERVERS] = { 0 };
    struct rl_policy_out outs[RL_MAX_OBSERVERS], proxs[RL_MAX_OBSERVERS] = { 0 };
    struct rl_policy_grad grads[RL_MAX_OBSERVERS] = { 0 };
    struct tensor *xs[RL_MAX_OBSERVERS];
    struct rl_update_stats st[RL_MAX_OBSERVERS];
    bool ok[RL_MAX_OBSERVERS] = { 0 };
    int who[RL_MAX_OBSERVERS], n = 0;
    int rows = a->cfg.steps_per_rollout * a->cfg.envs_per_observer / a->cfg.minibatches;
    for (int k = 0; k < a->n_peers; k++)
        if (in[k] && a->peers[k].alive && obs[k]) {
            who[n] = k;
            xs[n++] = obs[k];
        }
    if (n != n_in) return 1;
    struct policy_batch *b = policy_evaluate_batch(a->policy, n, xs, outs);
    if (!b) return rl_set_error("%s", rpc_last_error());
    if (prox && policy_evaluate_frozen_batch(a->policy, n, xs, proxs) != 0) {
        policy_batch_free(b);
        return rl_set_error("%s", rpc_last_error());
    }
    /* the calls carry no context: the observers keep none, and no gradient
     * comes back through distributed autograd */
    int64_t outer = dist_autograd_current();
    dist_autograd_set_current(0);
    for (int i = 0; i < n; i++) {
        struct rl_loss_req lr = { .epoch = e, .minibatch = mb, .weight = 1.0 / n_in, .out = outs[i],
                                  .has_prox = prox, .prox = proxs[i] };
        struct rpc_value args = rl_loss_req_pack(&lr);
        futs[who[i]] = rpc_async(a->peers[who[i]].name, RL_FN_LOSS, &args, 0);
        rpc_value_clear(&args);
    }
    dist_autograd_set_current(outer);
    int got = 0;
    agent_await_calls(a, futs, RL_FN_LOSS);
    for (int i = 0; i < n; i++) {
        int k = who[i];
        struct rpc_value r = rpc_nil();
        struct rl_minibatch_reply rep;
        tensor_free(obs[k]);
        obs[k] = NULL;
        if (!futs[k]) continue;   /* given up as the run stopped */
        /* the gradient must be the shape of what this observer was sent */
        const struct rl_policy_out *o = &outs[i];
        if (rpc_future_wait(futs[k], &r) != 0) agent_lose_peer(a, k, rpc_future_error(futs[k]));
        else if (rl_minibatch_reply_unpack(&r, rows, a->spec->obs.dim, (int)o->a->shape[1], o->log_std != NULL,
                                           o->value != NULL, &rep) != 0) {
            char why[1024];
            snprintf(why, sizeof why, "its loss reply: %s (this update is refused: the policy is unchanged)",
                     rl_last_error());
            agent_lose_peer(a, k, why);
        } else {
            st[k] = rep.stats;
            obs[k] = rep.obs;
            grads[i] = rep.grad;
            ok[k] = true;
            got++;
        }
        rpc_value_clear(&r);
        rpc_future_free(futs[k]);
    }
    int rc = 0;
    if (got != n_in) rc = 1;   /* an observer was lost: this update ends here */
    else {
        int64_t ctx = dist_autograd_context_new();
        if (ctx < 0) rc = rl_set_error("context: %s", rpc_last_error());
        else if (policy_batch_backward(b, grads, ctx) != 0) rc = rl_set_error("%s", rpc_last_error());
        else if ((rc = step(a, ctx)) == 0) note_update(a, st, ok, got, version0);
        /* this process's alone: freed without a message */
        if (ctx > 0) dist_autograd_release_local(ctx);
        dist_autograd_set_current(outer);
    }
    for (int i = 0; i < n; i++) {
        tensor_free(grads[i].a);
        tensor_free(grads[i].log_std);
        tensor_free(grads[i].value);
        rl_policy_out_clear(&proxs[i]);
    }
    policy_batch_free(b);
    return rc;
}

/* A rollouts algorithm (PPO, A2C: rl/algo.h): rollouts everywhere, then
 * epochs x minibatches of one update each. An observer lost mid-update
 * ends that update early; a stop overdue (agent_stop_overdue) ends the
 * iteration before its next update. 0 or -1. */
static int sync_rollouts_iteration(void *u)
{
    struct agent *a = u;
    bool in[RL_MAX_OBSERVERS];
    struct tensor *obs[RL_MAX_OBSERVERS];
    if (agent_maybe_anneal(a) != 0) return rl_set_error("set lr: %s", rpc_last_error());
    int64_t version0 = dist_optim_local_version();
    int total = a->cfg.epochs * a->cfg.minibatches;
    int n_in;
    if (ahead.pending) {   /* asked for during the last iteration's updates */
        for (int k = 0; k < a->n_peers; k++) {
            in[k] = false;
            obs[k] = NULL;
        }
        ahead.pending = false;
        n_in = rollouts_collect(a, ahead.futs, in, obs);
    } else n_in = sync_rollouts(a, in, obs);
    if (n_in < 0) return -1;
    ahead.lag = version0 - ahead.version;
    /* a lagged rollout learns against the policy as it is now (the
     * proximal policy): the acting copy, frozen below from the parameters
     * these updates start from */
    bool prox = ahead.prox && ahead.lag > 0;
    int rc = 0;
    if (ahead.on && n_in > 0) {
        n_in = 0;   /* those still in: one lost since would end every update */
        for (int k = 0; k < a->n_peers; k++) n_in += in[k] && a->peers[k].alive && obs[k];
        /* the next rollout, acted on by the policy as it is now, while this one is learnt */
        if (n_in > 0 && !boundary_is_still(a, total)) {
            rc = rollouts_send(a, ahead.futs);
            ahead.pending = rc == 0;
        } else if (n_in > 0 && prox && policy_freeze(a->policy) != 0) {   /* drained: no rollout froze it */
            rc = rl_set_error("%s", rpc_last_error());
        }
    }
    if (rc == 0 && n_in == 0) rc = agent_none_left(a);
    for (int u = 0; u < total && rc == 0; u++) {
        /* each update's calls may be quick while the iteration is long (many
         * epochs, a large network): the stop's grace bounds it too */
        if (agent_stop_overdue(a)) {
            fprintf(stderr, PROG ": ending the iteration after %d of its %d updates: the run has been due to stop for %g s\n",
                    u, total, AGENT_STOP_GRACE_S);
            break;
        }
        rc = sync_update(a, u / a->cfg.minibatches, u % a->cfg.minibatches, in, obs, n_in, version0, prox);
    }
    for (int k = 0; k < a->n_peers; k++) tensor_free(obs[k]);
    if (rc < 0) return -1;
    if (rc > 0) return agent_live_peers(a) ? 0 : agent_none_left(a);
    return 0;
}

/* An episodes iteration: one backward over the observers' losses and one optimizer
 * step, in ctx. 0; 1 when an observer was lost during the backward (no
 * step); -1. */
static int backward_and_step(struct agent *a, int64_t ctx, struct rl_loss_reply *reps, const bool *ok, int64_t version0)
{
    struct tensor *roots[RL_MAX_OBSERVERS];
    struct rl_update_stats st[RL_MAX_OBSERVERS];
    int n = 0;
    for (int k = 0; k < a->n_peers; k++)
        if (ok[k]) {
            roots[n++] = reps[k].loss;
            st[k] = reps[k].stats;
        }
    if (dist_autograd_backward(ctx, n, roots, false) != 0) {
        /* an observer lost during the backward costs this update, not the run */
        char why[1024];
        snprintf(why, sizeof why, "%s", rpc_last_error());
        if (agent_lose_dead_peers(a, why) > 0) return 1;
        return rl_set_error("backward: %s", why);
    }
    if (step(a, ctx) != 0) return -1;
    note_update(a, st, ok, n, version0);
    return 0;
}

/* An episodes algorithm (REINFORCE as PyTorch's example: rl/algo.h): one
 * episode per observer in one context, losses summed, one backward, one
 * step. */
static int sync_episodes_iteration(void *u)
{
    struct agent *a = u;
    struct rpc_future *futs[RL_MAX_OBSERVERS];
    struct rl_loss_reply reps[RL_MAX_OBSERVERS];
    bool ok[RL_MAX_OBSERVERS];
    int64_t version0 = dist_optim_local_version();
    policy_dropout_epoch(a->policy);
    int64_t ctx = dist_autograd_context_new();
    if (ctx < 0) return rl_set_error("context: %s", rpc_last_error());
    struct rpc_value none = rpc_list(0);
    call_live(a, RL_FN_EPISODE, &none, futs);
    rpc_value_clear(&none);
    int n = wait_losses(a, futs, reps, ok);
    int rc = 0;
    if (n == 0) rc = agent_none_left(a);
    else {
        double least = INFINITY;
        for (int k = 0; k < a->n_peers; k++)
            if (ok[k]) {
                run_stats_report(a->stats, &reps[k].report);
                run_stats_observer_steps(a->stats, k, reps[k].report.steps);
                least = fmin(least, reps[k].report.min_return);
            }
        rc = backward_and_step(a, ctx, reps, ok, version0);
        if (rc == 0) run_stats_running(a->stats, least);
        if (rc > 0) rc = agent_live_peers(a) ? 0 : agent_none_left(a);
    }
    for (int k = 0; k < a->n_peers; k++)
        if (ok[k]) rl_loss_reply_clear(&reps[k]);
    dist_autograd_release(ctx);
    return rc;
}

/* One sync iteration (rollouts, then its updates). An observer lost
 * mid-update ends that update early; 0, or -1 with rl_last_error(). */
static int sync_iteration(struct agent *a)
{
    const struct rl_drivers d = { .drive = { [RL_SHAPE_EPISODES] = sync_episodes_iteration,
                                             [RL_SHAPE_ROLLOUTS] = sync_rollouts_iteration },
                                  .ctx = a };
    return rl_algo_drive(rl_algo_of(&a->cfg), &d);
}

/* Gives up the rollout asked for ahead (a failed run ends). */
static void abandon_ahead(struct agent *a)
{
    if (!ahead.pending) return;
    ahead.pending = false;
    for (int k = 0; k < a->n_peers; k++) {
        if (ahead.futs[k] && !rpc_future_done(ahead.futs[k])) a->abandoned = true;
        rpc_future_free(ahead.futs[k]);
        ahead.futs[k] = NULL;
    }
}

static int train_sync(struct agent *a, const char **why)
{
    const struct rl_algo *algo = rl_algo_of(&a->cfg);
    ahead.on = a->cfg.overlap && algo && algo->shape == RL_SHAPE_ROLLOUTS;
    ahead.prox = ahead.on && rl_algo_overlap_prox(algo, &a->cfg);
    ahead.pending = false;
    ahead.lag = 0;
    if (a->cfg.overlap && !ahead.on)
        fprintf(stderr, PROG ": --overlap has no effect for %s (an episodes algorithm)\n", algo ? algo->name : "?");
    if (ahead.on) {   /* updates learn from a rollout one behind: the lag is recorded */
        struct run_stats_mode m = a->mode->stats;
        m.policy_lag = true;
        run_stats_set_mode(a->stats, &m);
    }
    while (!(*why = agent_stop_reason(a))) {
        agent_tend_rejoins(a, true);   /* a rejoined observer takes part from this iteration (or the next, with overlap) */
        agent_tend_gone(a, ahead.pending ? ahead.futs : NULL);
        int rc = agent_live_peers(a) ? sync_iteration(a) : agent_none_left(a);
        if (rc != 0 && a->stop_due > 0 && (*why = agent_stop_reason(a))) {   /* gave up on every observer */
            abandon_ahead(a);
            return 0;
        }
        if (rc != 0) {
            abandon_ahead(a);
            agent_say_error();
            *why = "failure";
            return -1;
        }
        /* a stop that came during the updates finds the next rollout asked for */
        if (agent_stop_reason(a)) drain_ahead(a);
        agent_log_interval(a, agent_maybe_evaluate(a, true));   /* between iterations: the observers are still, or collecting ahead */
        agent_maybe_checkpoint(a, a->mode->observer_states);
    }
    drain_ahead(a);
    return 0;
}

const struct agent_mode agent_mode_sync = {
    .observer_states = true,        /* between iterations every observer is still */
    .lockstep_act = true,           /* a merge of the same calls in the same order: reproducible */
    .stats = { .policy_lag = false, .running_per_report = false },   /* one version per update; run_stats_running */
    .train = train_sync,
};
