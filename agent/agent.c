/* The agent: set-up of the world, the sync loop around sync.c's
 * iterations, the async update handler, checkpoints, and observers that
 * rejoin. What agent.c and sync.c both use (observers lost and gone, calls
 * awaited and given up, the stopping signal) is peers.c's, below both. */
#define _GNU_SOURCE
#include "agent/agent.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/state.h"
#include "agent/checkpoint.h"
#include "agent/policy.h"
#include "agent/runlog.h"
#include "agent/stats.h"
#include "common/check.h"
#include "common/clock.h"
#include "envs/plugin.h"
#include "optim/dist_optim.h"
#include "rl/finite.h"
#include "rl/messages.h"
#include "common/notice.h"
#include "rl/rl.h"
#include "rl/rl_math.h"
#include "rpc/dist_autograd.h"
#include "tensor/ops.h"

#define END_CALL_MS 3000            /* each call to an observer as the run ends (its state, rl_shutdown) */


static struct agent *the_agent;     /* for the rl_update handler and signals only */
static bool rendezvous_done;        /* agent_rendezvous_done */

bool agent_rendezvous_done(void) { return rendezvous_done; }

static bool abandoned_calls;        /* agent_gave_up */
bool agent_gave_up(void) { return abandoned_calls; }

static bool policy_savable(struct agent *a, const char *what)
{
    struct tensor **params;
    int n = policy_params(a->policy, &params);
    pthread_mutex_lock(&a->mu);
    int rc = rl_check_params(n, params, NULL);
    pthread_mutex_unlock(&a->mu);
    if (rc != 0) fprintf(stderr, PROG ": not writing %s: the policy is not finite: %s\n", what, rl_last_error());
    return rc == 0;
}

static struct rpc_future *send_setup(struct agent *a, int k, const void *state, size_t slen)
{
    struct rl_setup_msg m = { .config = rl_config_to_value(&a->cfg), .policy = policy_rref(a->policy), .index = k,
                              .state = state ? rpc_bytes(state, slen) : rpc_nil(),
                              .generation = a->peers[k].generation };
    struct rpc_value args = rl_setup_pack(&m);
    rpc_value_clear(&m.config);
    rpc_value_clear(&m.state);
    struct rpc_future *f = rpc_async(a->peers[k].name, RL_FN_SETUP, &args, 0);
    rpc_value_clear(&args);
    return f;
}

static int peer_by_id(const struct agent *a, int id)
{
    for (int k = 0; k < a->n_peers; k++)
        if (a->peers[k].id == id) return k;
    return -1;
}

/* A membership event: an observer found dead is lost; a new process that
 * took a run's observer rank (rank 0 admits one only once the old process
 * is declared gone) is set up by tend_rejoins. */
static void on_member_event(struct agent *a, const struct rpc_event *ev)
{
    int k = peer_by_id(a, ev->id);
    if (ev->kind != RPC_EVENT_JOIN) {
        if (k >= 0 && a->peers[k].alive) {
            char why[128];
            snprintf(why, sizeof why, "no heartbeat within %d ms", a->cfg.heartbeat_timeout_ms);
            agent_lose_peer(a, k, why);
        }
        if (k >= 0) a->peers[k].rejoining = false;
        return;
    }
    if (k < 0) {
        fprintf(stderr, PROG ": ignoring worker %s (id %d): not an observer rank of this run\n", ev->name, ev->id);
        return;
    }
    struct obs_peer *p = &a->peers[k];
    agent_lose_peer(a, k, "a new process took its rank");
    if (p->setup) {                 /* the set-up of a process that is gone already */
        rpc_future_wait(p->setup, NULL);
        rpc_future_free(p->setup);
        p->setup = NULL;
    }
    snprintf(p->name, sizeof p->name, "%s", ev->name);
    p->rejoining = true;
}

/* Sets up observers that rejoined (once the calls to their old process are
 * in) and lets those that are set up take part: in async mode their loop
 * starts. block: wait for set-ups in flight (sync mode, between
 * iterations: a rejoined observer takes part from the next one). Main
 * thread; never once the run is stopping. */
static void tend_rejoins(struct agent *a, bool block)
{
    struct rpc_event ev;
    while (rpc_next_event(&ev, 0) == 1) on_member_event(a, &ev);
    bool async = a->cfg.mode == RL_MODE_ASYNC;
    for (int k = 0; k < a->n_peers; k++) {
        struct obs_peer *p = &a->peers[k];
        if (p->rejoining && !p->run && !atomic_load(&a->stop)) {
            p->rejoining = false;
            p->generation++;
            p->setup = send_setup(a, k, NULL, 0);
        }
        if (!p->setup || (!block && !rpc_future_done(p->setup))) continue;
        if (rpc_future_wait(p->setup, NULL) != 0) {
            fprintf(stderr, PROG ": %s (rank %d) rejoined but its set-up failed: %s\n", p->name, p->id,
                    rpc_future_error(p->setup));
        } else {
            p->alive = true;
            atomic_store(&p->going, false);
            p->gone_why[0] = '\0';
            a->n_rejoined++;
            fprintf(stderr, PROG ": %s rejoined (rank %d); training with %d observer%s\n", p->name, p->id,
                    agent_live_peers(a), agent_live_peers(a) == 1 ? "" : "s");
            if (async && !atomic_load(&a->stop)) {
                struct rpc_value none = rpc_list(0);
                p->run = rpc_async(p->name, RL_FN_RUN_ASYNC, &none, -1);
                rpc_value_clear(&none);
            }
        }
        rpc_future_free(p->setup);
        p->setup = NULL;
    }
}

/* The progress line and metrics row of an interval, when one is due. */
static void log_interval(struct agent *a, bool force)
{
    struct run_interval iv;
    if (!run_stats_interval(a->stats, dist_optim_local_version(), force, &iv)) return;
    run_stats_print(a->stats, stdout, &iv);
    if (a->log && runlog_write(a->log, &iv, a->lr) != 0) {
        fprintf(stderr, PROG ": %s; no more metrics for this run\n", rl_last_error());
        runlog_close(a->log);
        a->log = NULL;
    }
}

/* A checkpoint into LOGDIR/checkpoints; with observers (sync mode, at an
 * iteration's end) their RNG and env states too. */
static void write_checkpoint(struct agent *a, bool with_observers)
{
    if (!policy_savable(a, "a checkpoint")) return;
    struct rpc_value st[RL_MAX_OBSERVERS];
    struct rpc_future *futs[RL_MAX_OBSERVERS];
    struct rpc_value none = rpc_list(0);
    for (int k = 0; k < a->n_peers; k++) {
        st[k] = rpc_nil();
        futs[k] = with_observers && a->peers[k].alive ? rpc_async(a->peers[k].name, RL_FN_GET_STATE, &none, END_CALL_MS)
                                                      : NULL;
    }
    rpc_value_clear(&none);
    for (int k = 0; k < a->n_peers; k++) {
        if (futs[k] && rpc_future_wait(futs[k], &st[k]) != 0)
            fprintf(stderr, PROG ": checkpoint without %s's state: %s\n", a->peers[k].name, rpc_future_error(futs[k]));
        rpc_future_free(futs[k]);
    }
    int64_t updates = run_stats_updates(a->stats);
    struct agent_ckpt_in in = { .cfg = &a->cfg, .policy = a->policy, .opt = a->opt, .stats = a->stats,
                                .n_observers = a->n_peers, .obs_state = st };
    pthread_mutex_lock(&a->mu);
    if (agent_ckpt_save(a->cfg.logdir, updates, &in, &a->ckpt_failures) != 0) fprintf(stderr, PROG ": %s\n", rl_last_error());
    pthread_mutex_unlock(&a->mu);
    a->ckpt_updates = updates;
    for (int k = 0; k < a->n_peers; k++) rpc_value_clear(&st[k]);
}

/* A checkpoint when --checkpoint-every updates were made since the last
 * (both modes; with_observers: sync mode, between iterations). */
static void maybe_checkpoint(struct agent *a, bool with_observers)
{
    if (a->cfg.logdir[0] && a->cfg.checkpoint_every > 0 &&
        run_stats_updates(a->stats) - a->ckpt_updates >= a->cfg.checkpoint_every)
        write_checkpoint(a, with_observers);
}

static const char *stop_reason(struct agent *a)
{
    if (agent_signal()) return agent_signal() == SIGINT ? "SIGINT" : "SIGTERM";
    if (a->ckpt_failures >= AGENT_CKPT_MAX_FAILURES) return "checkpoint-failures";
    if (run_stats_solved(a->stats)) return "solved";
    if (run_stats_out_of_budget(a->stats)) return "budget";
    return NULL;
}

static int train_sync(struct agent *a, const char **why)
{
    while (!(*why = stop_reason(a))) {
        tend_rejoins(a, true);
        agent_tend_gone(a, NULL);
        int rc = agent_live_peers(a) ? agent_sync_iteration(a) : agent_none_left(a);
        if (rc != 0 && a->stop_due > 0 && (*why = stop_reason(a))) return 0;   /* gave up on every observer */
        if (rc != 0) {
            fprintf(stderr, PROG ": %s\n", rl_last_error());
            *why = "failure";
            return -1;
        }
        log_interval(a, false);
        maybe_checkpoint(a, true);
    }
    return 0;
}

/* ---- async mode ------------------------------------------------------------------------ */

/* A line on stderr about what a peer sent, at most 10 a second (a peer
 * may send many). Any thread. */
static void say_limited(struct agent *a, const char *line)
{
    static double t_line;
    static int lines;
    pthread_mutex_lock(&a->mu);
    double now = trib_now_s();
    if (now - t_line >= 1.0) t_line = now, lines = 0;
    if (lines++ < 10) fprintf(stderr, PROG ": %s\n", line);
    pthread_mutex_unlock(&a->mu);
}

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
    char line[640];
    snprintf(line, sizeof line, "refused rl_update from %s: %s", rpc_request_caller(req), why);
    say_limited(a, line);
    return rpc_request_fail(req, "refused (from %s): %s", rpc_request_caller(req), why);
}

/* rl_gave_up(why): an observer whose env step ran past --step-timeout says
 * why before it exits (its loss follows at its heartbeat timeout). */
static int fn_gave_up(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct agent *a = the_agent;
    if (!a || args->list.len < 1 || args->list.len > 2 || args->list.items[0].kind != RPC_STR ||
        (args->list.len == 2 && args->list.items[1].kind != RPC_STR))
        return rpc_request_fail(req, "gave_up: expected (why[, how])");
    const struct rpc_value *why = &args->list.items[0];
    bool crashed = args->list.len == 2 && args->list.items[1].str.len == strlen(RL_GONE_CRASHED) &&
                   memcmp(args->list.items[1].str.ptr, RL_GONE_CRASHED, strlen(RL_GONE_CRASHED)) == 0;
    int wl = (int)(why->str.len < 500 ? why->str.len : 500);
    char line[640];
    snprintf(line, sizeof line, "%s gave up: %.*s", rpc_request_caller(req), wl, why->str.ptr);
    if (!crashed) say_limited(a, line);   /* a crash is said as its observer is lost, at once */
    /* the observer goes (it exits, or dies of its crash) right after: the
     * main thread drops it now rather than at its heartbeat timeout. The
     * caller is the connection's verified worker, so one observer cannot
     * speak for another. */
    int k = peer_by_id(a, rpc_request_caller_id(req));
    if (k >= 0 && a->peers[k].alive) {
        pthread_mutex_lock(&a->mu);
        if (crashed) snprintf(a->peers[k].going_why, sizeof a->peers[k].going_why, "%.*s", wl, why->str.ptr);
        else snprintf(a->peers[k].going_why, sizeof a->peers[k].going_why, "gave up (%.*s)", wl, why->str.ptr);
        pthread_mutex_unlock(&a->mu);
        atomic_store(&a->peers[k].going, true);
    }
    *res = rpc_nil();
    return 0;
}

/* rl_update(ctx, version0, report, stats, next_obs) -> (stop, out): steps
 * the policy with the gradients the observer's backward left in ctx here,
 * then evaluates its next minibatch (with graph, in the request's context)
 * when it sent one. */
static int fn_update(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct agent *a = the_agent;
    struct rl_update_req m;
    if (!a) return rpc_request_fail(req, "update: no training in progress");
    if (rl_update_req_unpack(args, a->spec->obs.dim, &m) != 0) {
        rl_update_req_clear(&m);
        return refuse_update(a, req, NULL);
    }
    if (rl_check_gradients(m.ctx) != 0) return refuse_update(a, req, &m);
    pthread_mutex_lock(&a->mu);
    struct rl_update_reply rep = { .stop = atomic_load(&a->stop) };
    int rc = 0;
    if (!rep.stop && rl_update_req_fits(&m, &a->cfg, a->spec->max_episode_steps, dist_optim_local_version()) != 0) {
        pthread_mutex_unlock(&a->mu);
        return refuse_update(a, req, &m);
    }
    if (!rep.stop) {
        if (m.has_report) {
            run_stats_report(a->stats, &m.report);
            int caller = rpc_request_caller_id(req);
            for (int k = 0; k < a->n_peers; k++)
                if (a->peers[k].id == caller) run_stats_observer_steps(a->stats, k, m.report.steps);
        }
        int64_t lag = dist_optim_local_version() - m.version0;   /* the lag this update would have */
        if (a->cfg.max_policy_lag > 0 && lag > a->cfg.max_policy_lag) {
            rep.stale = true;
            run_stats_dropped(a->stats, a->cfg.algo == RL_ALGO_REINFORCE
                                            ? m.report.steps
                                            : (int64_t)a->cfg.envs_per_observer * a->cfg.steps_per_rollout /
                                                  a->cfg.minibatches);
        } else if (agent_maybe_anneal(a) != 0) rc = rpc_request_fail(req, "update: set lr: %s", rpc_last_error());
        else {
            double t0 = trib_now_s();
            if (dist_optim_step_clipped(a->opt, m.ctx, a->cfg.max_grad_norm) != 0)
                rc = rpc_request_fail(req, "update: %s", rpc_last_error());
            else
                run_stats_update(a->stats, dist_optim_local_version() - 1 - m.version0, &m.stats);
            run_stats_busy(a->stats, trib_now_s() - t0);
        }
    }
    pthread_mutex_unlock(&a->mu);
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

static int running_loops(const struct agent *a)
{
    int n = 0;
    for (int k = 0; k < a->n_peers; k++) n += a->peers[k].run != NULL || a->peers[k].setup != NULL;
    return n;
}

/* Async mode, once the stop is overdue: gives up the loops (and rejoin
 * set-ups) still running. Returns whether it did. */
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

static int train_async(struct agent *a, const char **why)
{
    struct rpc_value none = rpc_list(0);
    for (int k = 0; k < a->n_peers; k++) a->peers[k].run = rpc_async(a->peers[k].name, RL_FN_RUN_ASYNC, &none, -1);
    rpc_value_clear(&none);
    *why = NULL;
    while (running_loops(a) > 0) {
        if (!atomic_load(&a->stop) && (*why = stop_reason(a))) atomic_store(&a->stop, true);
        if (atomic_load(&a->stop) && give_up_loops(a)) break;
        agent_tend_gone(a, NULL);   /* frees the loops of those that are gone */
        for (int k = 0; k < a->n_peers; k++) {
            struct obs_peer *p = &a->peers[k];
            if (!p->run || !rpc_future_done(p->run)) continue;
            if (rpc_future_wait(p->run, NULL) != 0) agent_lose_peer(a, k, rpc_future_error(p->run));
            rpc_future_free(p->run);
            p->run = NULL;
        }
        tend_rejoins(a, false);
        log_interval(a, false);
        if (!atomic_load(&a->stop)) maybe_checkpoint(a, false);
        if (running_loops(a) > 0) usleep(5000);
    }
    if (!*why) *why = agent_live_peers(a) ? "observers stopped" : "failure";
    if (agent_live_peers(a) == 0 && a->stop_due == 0) {   /* (given up on as the run stopped: not a failure) */
        agent_none_left(a);
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        return -1;
    }
    return 0;
}

/* ---- the run ---------------------------------------------------------------------------- */

void agent_register(void)
{
    if (!getenv("OPENBLAS_NUM_THREADS")) tensor_set_cpu_threads(1);
    policy_register();
    rpc_register(RL_FN_UPDATE, fn_update, NULL);
    rpc_register(RL_FN_GAVE_UP, fn_gave_up, NULL);
}

/* notice's done test of the first update's wait */
static bool stats_updated(void *stats) { return run_stats_updates(stats) > 0; }

struct rpc_opts agent_rpc_opts(const struct rl_config *cfg, const char *master)
{
    struct rpc_opts o = { .name = "agent", .rank = 0, .world_size = cfg->observers + 1, .master = master,
                          .default_timeout_ms = 120000, .heartbeat_ms = 200,
                          /* --max-seconds counts the wait for the observers too */
                          .init_timeout_ms = cfg->max_seconds > 0 ? (int)fmin(cfg->max_seconds * 1000, 1e9) : 60000,
                          .heartbeat_timeout_ms = cfg->heartbeat_timeout_ms,
                          .num_handler_threads = cfg->observers + 4, .cancel = agent_signal_flag() };
    return o;
}

/* Finds the observers, builds the policy and the optimizer, sets up every
 * observer. 0 or -1 with rl_last_error(). */
static int setup(struct agent *a)
{
    struct rpc_worker_info w[RL_MAX_OBSERVERS + 1];
    int n = rpc_get_workers(w, RL_MAX_OBSERVERS + 1);
    for (int i = 0; i < n; i++) {
        if (w[i].id == rpc_self()->id) continue;
        struct obs_peer *p = &a->peers[a->n_peers++];
        snprintf(p->name, sizeof p->name, "%s", w[i].name);
        p->id = w[i].id;
        p->alive = true;
    }
    struct policy_arch shape;
    if (rl_arch_for_env(&a->cfg, a->spec, a->cfg.env, &shape) != 0) return -1;
    a->policy = policy_new(&a->cfg, &shape);
    if (!a->policy) return rl_set_error("policy: %s", rpc_last_error());
    int np = 0;
    struct rref **params = policy_param_rrefs(a->policy, &np);
    struct optim_hyper h = optim_defaults((enum optim_kind)a->cfg.optimizer);
    h.lr = a->lr = a->cfg.lr;
    h.eps = a->cfg.opt_eps;
    a->opt = dist_optim_new((enum optim_kind)a->cfg.optimizer, &h, np, params);
    if (!a->opt) return rl_set_error("optimizer: %s", rpc_last_error());
    if (a->resume) {
        if (agent_ckpt_restore(a->resume, a->policy, a->opt, a->stats) != 0) {
            a->resume_refused = true;
            return -1;
        }
        a->ckpt_updates = run_stats_updates(a->stats);
        /* the saved optimizer state carries its lr: set the configured one
         * (maybe_anneal then sets the restored env steps' one) */
        if (dist_optim_set_lr(a->opt, a->cfg.lr) != 0) return rl_set_error("set lr: %s", rpc_last_error());
    }
    struct rpc_future *futs[RL_MAX_OBSERVERS];
    bool saved[RL_MAX_OBSERVERS];
    for (int k = 0; k < a->n_peers; k++) {
        size_t slen = 0;
        const void *state = a->resume && a->cfg.mode == RL_MODE_SYNC ? agent_ckpt_observer_state(a->resume, k, &slen) : NULL;
        saved[k] = state != NULL;
        futs[k] = send_setup(a, k, state, slen);
    }
    int rc = 0;
    agent_await_calls(a, futs, RL_FN_SETUP);   /* a reset stuck in a plug-in must not hold up a Ctrl-C */
    for (int k = 0; k < a->n_peers; k++) {
        if (!futs[k]) {
            if (!a->peers[k].alive && a->peers[k].gone_why[0])   /* gone during its set-up */
                rc = rc ? rc : rl_set_error("setting up %s: it %s", a->peers[k].name, a->peers[k].gone_why);
            else
                rc = rc ? rc : rl_set_error("setting up %s: given up as the run stopped", a->peers[k].name);
        } else if (rpc_future_wait(futs[k], NULL) != 0 && rc == 0) {
            if (saved[k]) {   /* the checkpoint's state refused (a NaN in it...): name the file, leave it be */
                rc = rl_set_error("checkpoint %s: observer%d: setting up %s: %s", a->resume->path, k,
                                  a->peers[k].name, rpc_future_error(futs[k]));
                a->resume_refused = true;
            } else {
                rc = rl_set_error("setting up %s: %s", a->peers[k].name, rpc_future_error(futs[k]));
            }
        }
        rpc_future_free(futs[k]);
    }
    if (rc == 0 && a->resume) {   /* said once the observers took their saved states too */
        printf("tributary: resumed from %s: %lld env steps, %lld updates\n", a->resume->path,
               (long long)run_stats_env_steps(a->stats), (long long)run_stats_updates(a->stats));
        char spent[160];
        if (run_stats_budget_spent(a->stats, spent, sizeof spent))
            fprintf(stderr, PROG ": the resumed run has already reached %s; give a larger one to train on\n", spent);
    }
    return rc;
}

/* Tells every worker the RPC layer still knows to shut down: the run's
 * observers, ones this run gave up on but that are alive (a failed call),
 * and one that took a lost observer's rank too late to be set up (joins
 * are refused by now): a graceful rpc_shutdown waits for every live
 * member. */
static void shutdown_observers(struct agent *a)
{
    struct rpc_worker_info w[RL_MAX_OBSERVERS + 1];
    struct rpc_future *futs[RL_MAX_OBSERVERS + 1];
    int n = rpc_get_workers(w, RL_MAX_OBSERVERS + 1);
    struct rpc_value none = rpc_list(0);
    for (int i = 0; i < n; i++)
        futs[i] = w[i].id != rpc_self()->id ? rpc_async(w[i].name, RL_FN_SHUTDOWN, &none, END_CALL_MS) : NULL;
    rpc_value_clear(&none);
    for (int i = 0; i < n; i++) {
        int k = peer_by_id(a, w[i].id);
        if (futs[i] && rpc_future_wait(futs[i], NULL) != 0) {
            a->abandoned = true;   /* a graceful rpc_shutdown would wait for it */
            if (k >= 0) agent_lose_peer(a, k, rpc_future_error(futs[i]));
        }
        rpc_future_free(futs[i]);
    }
}

int agent_run(const struct rl_config *cfg, const struct rpc_opts *opts)
{
    struct agent *a = trib_xcalloc(1, sizeof *a);
    a->cfg = *cfg;
    pthread_mutex_init(&a->mu, NULL);
    a->spec = rl_config_open_env(cfg, &a->plugin);
    if (!a->spec) {
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        free(a);
        return 1;
    }
    if (cfg->algo == RL_ALGO_REINFORCE && a->spec->act.kind != SPACE_DISCRETE) {
        fprintf(stderr, PROG ": REINFORCE here needs a discrete action space (%s has a box)\n", a->spec->id);
        env_plugin_close(a->plugin);
        free(a);
        return 1;
    }
    double target = isnan(cfg->target) ? a->spec->reward_threshold : cfg->target;
    if (cfg->resume[0] && !cfg->logdir[0]) snprintf(a->cfg.logdir, sizeof a->cfg.logdir, "%s", cfg->resume);
    cfg = &a->cfg;
    if (cfg->resume[0] && !(a->resume = agent_ckpt_open(cfg->resume, cfg))) {
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        env_plugin_close(a->plugin);
        free(a);
        return 1;
    }
    a->stats = run_stats_new(cfg, target);
    run_stats_set_env(a->stats, a->spec);
    if (cfg->logdir[0] && !(a->log = runlog_open(cfg->logdir, cfg, a->spec, a->resume != NULL))) {
        fprintf(stderr, PROG ": --logdir %s: %s\n", cfg->logdir, rl_last_error());
        run_stats_free(a->stats);
        env_plugin_close(a->plugin);
        free(a);
        return 1;
    }
    the_agent = a;
    rendezvous_done = false;
    char what[512];
    const char *m = opts->master ? opts->master : "";
    size_t ml = strlen(m);
    if (ml < 2 || strcmp(m + ml - 2, ":0") == 0)   /* a port chosen at bind: observers forked here */
        snprintf(what, sizeof what, "%d observer%s to join", cfg->observers, cfg->observers == 1 ? "" : "s");
    else
        snprintf(what, sizeof what, "%d observer%s to join at %s (tributary-observer --master %s --rank R --world-size %d)",
                 cfg->observers, cfg->observers == 1 ? "" : "s", m, m, cfg->observers + 1);
    double t_wait = trib_now_s();
    struct notice *wait = notice_start(PROG, what, 3, NULL, NULL);
    int irc = rpc_init(opts);
    notice_stop(wait);
    if (irc < 0) {
        bool budget = !agent_signal() && cfg->max_seconds > 0 && trib_now_s() - t_wait >= cfg->max_seconds - 0.05;
        if (budget)
            fprintf(stderr, PROG ": --max-seconds %g passed while waiting for %s; stopping\n", cfg->max_seconds, what);
        else fprintf(stderr, PROG ": %s\n", rpc_last_error());
        /* Ctrl-C or --max-seconds while waiting for the observers: the
         * summary of a run that never started, and the signal's status */
        int sig = agent_signal();
        if (sig) run_stats_summary(a->stats, stdout, false, 0, 0, sig == SIGINT ? "SIGINT" : "SIGTERM");
        else if (budget) run_stats_summary(a->stats, stdout, false, 0, 0, "budget");
        the_agent = NULL;
        runlog_close(a->log);
        run_stats_free(a->stats);
        env_plugin_close(a->plugin);
        free(a);
        return sig ? 128 + sig : 1;
    }
    rendezvous_done = true;
    char desc[512];
    rl_config_describe(cfg, desc, sizeof desc);
    printf("tributary: %s; target %g\n", desc, target);
    const char *why = "failure";
    /* a slow start says what it waits for */
    char first[256];
    if (cfg->algo == RL_ALGO_REINFORCE)
        snprintf(first, sizeof first, "the first update (each observer plays a whole episode first)");
    else
        snprintf(first, sizeof first, "the first update (each observer first steps %d env%s x %d steps)",
                 cfg->envs_per_observer, cfg->envs_per_observer == 1 ? "" : "s", cfg->steps_per_rollout);
    struct notice *first_update = notice_start(PROG, first, 5, stats_updated, a->stats);
    int rc = setup(a);
    if (rc != 0) fprintf(stderr, PROG ": %s\n", rl_last_error());
    else rc = cfg->mode == RL_MODE_SYNC ? train_sync(a, &why) : train_async(a, &why);
    notice_stop(first_update);
    /* nobody joins a run that is ending: a graceful shutdown would wait for it */
    rpc_refuse_joins("the run is ending");
    bool solved = run_stats_solved(a->stats);
    if (agent_signal()) why = agent_signal() == SIGINT ? "SIGINT" : "SIGTERM";
    if (a->policy) {
        struct policy_stats ps;
        policy_get_stats(a->policy, &ps);
        run_stats_busy(a->stats, ps.forward_s);
    }
    log_interval(a, true);
    atomic_store(&a->stop, true);
    if (a->policy && a->opt && cfg->logdir[0] && !a->resume_refused) write_checkpoint(a, cfg->mode == RL_MODE_SYNC);
    shutdown_observers(a);
    dist_optim_free(a->opt);
    if (a->policy) policy_stop(a->policy);
    if (a->policy && cfg->logdir[0] && !a->resume_refused) {
        char path[600];
        snprintf(path, sizeof path, "%s/policy.safetensors", cfg->logdir);
        if (policy_savable(a, path) && policy_save(a->policy, path, a->spec) != 0) fprintf(stderr, PROG ": %s\n", rl_last_error());
    }
    run_stats_summary(a->stats, stdout, solved, a->n_lost, a->n_rejoined, why);
    abandoned_calls = a->abandoned;
    rpc_shutdown(!a->abandoned);   /* not graceful: it would wait for the observers given up on */
    for (int k = 0; k < a->n_peers; k++) {
        rpc_future_free(a->peers[k].setup);
        rpc_future_free(a->peers[k].run);
    }
    the_agent = NULL;
    policy_free(a->policy);
    runlog_close(a->log);
    ckpt_free(a->resume);
    run_stats_free(a->stats);
    env_plugin_close(a->plugin);
    pthread_mutex_destroy(&a->mu);
    free(a);
    if (agent_signal()) return 128 + agent_signal();
    return rc == 0 && solved && strcmp(why, "checkpoint-failures") != 0 ? 0 : 1;
}
