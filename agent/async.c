/* Async mode (state.h's agent_mode_async): every observer runs its own
 * loop (rl_run_async), computes its own loss and backward and sends the
 * gradients it left in its context here with rl_update, which steps the
 * policy (fn_update, on a handler thread, under agent.mu). The main thread
 * watches the loops: observers gone or rejoining, the progress line,
 * checkpoints (without the observers' states), the stop. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/policy.h"
#include "agent/state.h"
#include "agent/run_stats.h"
#include "common/clock.h"
#include "common/text.h"
#include "optim/dist_optim.h"
#include "rl/algo_shape.h"
#include "rl/finite.h"
#include "rl/messages.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"

/* Refuses an rl_update whose numbers fail their checks (rl_last_error()),
 * saying so naming the sender, and drops what m (unpacked, or NULL) holds
 * here. Returns -1. */
static int refuse_update(struct agent *a, struct rpc_request *req, struct rl_update_req *m)
{
    char why[512];
    snprintf(why, sizeof why, "%s", rl_last_error());
    if (m) {
        dist_autograd_release_local(m->ctx);
        rl_update_req_clear(m);
    }
    const char *who = rpc_request_caller(req);
    char said[TEXT_ESCAPED_CAP(sizeof why)], caller[TEXT_ESCAPED_CAP(63)], line[sizeof said + sizeof caller + 32];
    snprintf(line, sizeof line, "refused rl_update from %s: %s", text_escape(caller, sizeof caller, who, strlen(who)),
             text_escape(said, sizeof said, why, strlen(why)));
    agent_say_limited(a, line);
    return rpc_request_fail(req, "refused (from %s): %s", rpc_request_caller(req), why);
}

/* Observer k's statistics were refused (why): the main thread drops it
 * at once (agent_tend_gone), whatever its loop does next; the run's set
 * stays as it was. k < 0: no observer of the run. */
static void drop_for_norm(struct agent *a, int k, const char *why)
{
    if (k < 0) return;
    pthread_mutex_lock(&a->mu);
    snprintf(a->peers[k].going_why, sizeof a->peers[k].going_why, "sent statistics that were refused (%s)", why);
    pthread_mutex_unlock(&a->mu);
    atomic_store(&a->peers[k].going, true);
}

/* The update of m, under a->mu (rep->stop false): its report counted, then
 * dropped as stale (rep->stale) or one optimizer step. 0, or -1 after
 * rpc_request_fail. */
static int apply_update(struct agent *a, struct rpc_request *req, struct rl_update_req *m, struct rl_update_reply *rep)
{
    if (m->has_report) {
        run_stats_report(a->stats, &m->report);
        int k = agent_peer_by_id(a, rpc_request_caller_id(req));
        if (k >= 0) run_stats_observer_steps(a->stats, k, m->report.steps);
    }
    int64_t lag = dist_optim_local_version() - m->version0;   /* the lag this update would have */
    if (a->cfg.max_policy_lag > 0 && lag > a->cfg.max_policy_lag) {
        rep->stale = true;
        run_stats_dropped(a->stats, rl_algo_update_steps(rl_algo_of(&a->cfg), &a->cfg, m->report.steps));
        return 0;
    }
    if (agent_maybe_anneal(a) != 0) return rpc_request_fail(req, "update: set lr: %s", rpc_last_error());
    double t0 = trib_now_s();
    int rc = 0;
    if (dist_optim_step_clipped(a->opt, m->ctx, a->cfg.max_grad_norm) != 0)
        rc = rpc_request_fail(req, "update: %s", rpc_last_error());
    else
        run_stats_update(a->stats, dist_optim_local_version() - 1 - m->version0, &m->stats);
    run_stats_busy(a->stats, trib_now_s() - t0);
    return rc;
}

/* rl_update(ctx, version0, report, stats, next_obs) -> (stop, out): steps
 * the policy with the gradients the observer's backward left in ctx here,
 * then evaluates its next minibatch (with graph, in the request's context)
 * when it sent one. user: the agent. */
static int fn_update(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *user)
{
    struct agent *a = user;
    struct rl_update_req m;
    if (rl_update_req_unpack(args, a->spec->obs.dim, &m) != 0) {
        rl_update_req_clear(&m);
        return refuse_update(a, req, NULL);
    }
    if (rl_check_gradients(m.ctx) != 0) return refuse_update(a, req, &m);
    struct rl_norm_stats delta;
    bool has_delta = false;
    int k = agent_peer_by_id(a, rpc_request_caller_id(req));
    /* a member dropped (or going: it gave up, its statistics were refused)
     * takes no more part, its gradients included, until it rejoins */
    if (k < 0 || atomic_load(&a->peers[k].going)) {
        rl_set_error("%s", k < 0 ? "not one of the run's observers" : "dropped from the run: its updates are not taken");
        return refuse_update(a, req, &m);
    }
    if (agent_norm_unpack(a, k, &m.norm, m.has_report, m.report.steps, &delta, &has_delta) != 0) {
        drop_for_norm(a, k, rl_last_error());
        return refuse_update(a, req, &m);
    }
    pthread_mutex_lock(&a->mu);
    struct rl_update_reply rep = { .stop = atomic_load(&a->stop) };
    int rc = 0;
    bool fits =
        rep.stop || rl_update_req_fits(&m, &a->cfg, a->spec->max_episode_steps, dist_optim_local_version()) == 0;
    /* its observations count, the update then stepped or dropped as stale;
     * statistics that would break the run's set refuse the update */
    bool taken = fits && (!has_delta || rep.stop || agent_norm_merge_locked(a, &delta) == 0);
    if (taken && !rep.stop) rc = apply_update(a, req, &m, &rep);
    pthread_mutex_unlock(&a->mu);
    if (has_delta) rl_norm_stats_free(&delta);
    if (fits && !taken) drop_for_norm(a, k, rl_last_error());
    if (!taken) return refuse_update(a, req, &m);
    if (has_delta && rc == 0) rep.norm = agent_norm_pack(a);   /* the set this observer goes on with */
    /* the observer's context is done with here; it frees its own copy when
     * this reply reaches it */
    dist_autograd_release_local(m.ctx);
    if (rc == 0 && !rep.stop && !rep.stale && m.next_obs) {
        if (policy_evaluate(a->policy, m.next_obs, &rep.out, rpc_request_caller_id(req)) != 0) rc = rpc_request_fail(req, "update: %s", rpc_last_error());
        else rep.has_out = true;
    }
    rl_update_req_clear(&m);
    if (rc != 0) return rc;
    *res = rl_update_reply_pack(&rep);
    rl_update_reply_clear(&rep);
    return 0;
}

static void register_fns(struct agent *a) { rpc_register(RL_FN_UPDATE, fn_update, a); }

/* Starts observer k's loop. */
static void start_loop(struct agent *a, int k)
{
    struct rpc_value none = rpc_list(0);
    a->peers[k].run = rpc_async(a->peers[k].name, RL_FN_RUN_ASYNC, &none, -1);
    rpc_value_clear(&none);
}

/* A rejoined observer's loop starts, unless the run is stopping. */
static void rejoined(struct agent *a, int k)
{
    if (!atomic_load(&a->stop)) start_loop(a, k);
}

static int running_loops(const struct agent *a)
{
    int n = 0;
    for (int k = 0; k < a->n_peers; k++) n += a->peers[k].run != NULL || a->peers[k].setup != NULL;
    return n;
}

/* Once the stop is overdue: gives up the loops (and rejoin set-ups) still
 * running. Returns whether it did. */
static bool give_up_loops(struct agent *a)
{
    struct rpc_future *runs[RL_MAX_OBSERVERS] = { 0 }, *setups[RL_MAX_OBSERVERS] = { 0 };
    if (!agent_stop_overdue(a)) return false;
    for (int k = 0; k < a->n_peers; k++) {
        runs[k] = a->peers[k].run;
        setups[k] = a->peers[k].setup;
        a->peers[k].run = a->peers[k].setup = NULL;
    }
    agent_abandon_overdue(a, runs, RL_FN_RUN_ASYNC);
    agent_abandon_overdue(a, setups, RL_FN_SETUP);
    return true;
}

/* The loops that ended: one that failed loses its observer. */
static void reap_loops(struct agent *a)
{
    for (int k = 0; k < a->n_peers; k++) {
        struct obs_peer *p = &a->peers[k];
        if (!p->run || !rpc_future_done(p->run)) continue;
        if (rpc_future_wait(p->run, NULL) != 0) agent_lose_peer(a, k, rpc_future_error(p->run));
        rpc_future_free(p->run);
        p->run = NULL;
    }
}

static int train_async(struct agent *a, const char **why)
{
    for (int k = 0; k < a->n_peers; k++)
        if (a->peers[k].alive) start_loop(a, k);   /* not one lost during its set-up */
    *why = NULL;
    while (running_loops(a) > 0) {
        if (!atomic_load(&a->stop) && (*why = agent_stop_reason(a))) atomic_store(&a->stop, true);
        if (atomic_load(&a->stop) && give_up_loops(a)) break;
        agent_tend_gone(a, NULL);   /* frees the loops of those that are gone */
        reap_loops(a);
        agent_tend_rejoins(a, false);
        /* a copy of the policy, evaluated on a thread of its own: the updates and this loop go on */
        agent_log_interval(a, !atomic_load(&a->stop) && agent_maybe_evaluate(a, false));
        if (!atomic_load(&a->stop)) agent_maybe_checkpoint(a, a->mode->observer_states);
        if (running_loops(a) > 0) usleep(5000);
    }
    if (!*why) *why = agent_live_peers(a) ? "observers stopped" : "failure";
    if (agent_live_peers(a) == 0 && a->stop_due == 0) {   /* (given up on as the run stopped: not a failure) */
        agent_none_left(a);
        agent_say_error();
        return -1;
    }
    return 0;
}

const struct agent_mode agent_mode_async = {
    .observer_states = false,       /* each observer is somewhere in its own loop */
    .lockstep_act = false,          /* observers act on their own: a merge waits --max-wait-us at most */
    .stats = { .policy_lag = true, .running_per_report = true },   /* updates lag; episodes end anywhere */
    .register_fns = register_fns,
    .train = train_async,
    .rejoined = rejoined,
};
