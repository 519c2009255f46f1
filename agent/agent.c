/* The agent's lifecycle (agent.h): agent_new opens the env, the checkpoint
 * to resume and the run directory, and picks the mode from the table
 * below; agent_register registers its RPC functions with the agent as
 * user data; agent_run meets the observers, builds the policy and the
 * optimizer, sets the observers up, trains in the mode's loop (sync.c,
 * async.c) and ends the run; agent_free frees what is left. */
#define _GNU_SOURCE
#include "agent/agent.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/state.h"
#include "agent/checkpoint.h"
#include "agent/norm_stats.h"
#include "agent/policy.h"
#include "agent/policy_store.h"
#include "agent/runlog.h"
#include "agent/run_stats.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/crash_note.h"
#include "envs/plugin.h"
#include "optim/dist_optim.h"
#include "rl/algo_shape.h"
#include "rl/messages.h"
#include "common/notice.h"
#include "common/text.h"
#include "rl/rl.h"
#include "tensor/ops.h"

#define END_CALL_MS 3000            /* each rl_shutdown as the run ends */

/* The modes, one per row of rl/config_fields.h's RL_MODES: agent_mode_<name>. */
#define MODE_ROW(P, id, name, ...) [P##_##id] = &agent_mode_##name,
static const struct agent_mode *const modes[RL_MODE_COUNT] = { RL_MODES(MODE_ROW, RL_MODE) };
#undef MODE_ROW

/* Opens what the run needs before it meets anyone. 0, or -1 with
 * rl_last_error(). */
static int agent_open(struct agent *a)
{
    struct rl_config *cfg = &a->cfg;
    if ((unsigned)cfg->mode >= RL_MODE_COUNT)
        return rl_set_error("no such mode: %d", (int)cfg->mode);
    a->mode = modes[cfg->mode];
    a->lr_from = (struct agent_lr_from){ 0, 1.0 };   /* CleanRL's line: from --lr at the start */
    crash_note_begin(PROG, "opening --env %s", cfg->env);   /* a plug-in's code: a crash in it says so */
    a->spec = rl_config_open_env(cfg, &a->plugin);
    crash_note_end();
    if (!a->spec) return -1;
    if (rl_algo_check_env(rl_algo_of(cfg), a->spec) != 0) return -1;
    a->target = !cfg->stop_at_target ? NAN : isnan(cfg->target) ? a->spec->reward_threshold : cfg->target;
    if (cfg->resume[0] && !cfg->logdir[0]) snprintf(cfg->logdir, sizeof cfg->logdir, "%s", cfg->resume);
    if (cfg->resume[0] && !(a->resume = agent_ckpt_open(cfg->resume, cfg))) return -1;
    a->stats = run_stats_new(cfg, a->target);
    run_stats_set_mode(a->stats, &a->mode->stats);
    run_stats_set_env(a->stats, a->spec);
    a->norm = agent_norm_new(cfg, a->spec->obs.dim);
    if (cfg->logdir[0] && !(a->log = runlog_open(cfg->logdir, cfg, a->spec, a->resume != NULL)))
        return rl_set_error("--logdir %s: %s", cfg->logdir, rl_last_error());   /* wraps its own text */
    return 0;
}

struct agent *agent_new(const struct rl_config *cfg)
{
    struct agent *a = trib_xcalloc(1, sizeof *a);
    a->cfg = *cfg;
    pthread_mutex_init(&a->mu, NULL);
    if (agent_open(a) != 0) goto err;
    return a;
err:
    fprintf(stderr, PROG ": %s\n", rl_last_error());
    agent_free(a);
    return NULL;
}

void agent_free(struct agent *a)
{
    if (!a) return;
    for (int k = 0; k < a->n_peers; k++) {
        rpc_future_free(a->peers[k].setup);
        rpc_future_free(a->peers[k].run);
    }
    dist_optim_free(a->opt);
    policy_free(a->policy);
    runlog_close(a->log);
    ckpt_free(a->resume);
    run_stats_free(a->stats);
    agent_norm_free(a->norm);
    if (a->plugin) crash_note_begin(PROG, "unloading --env %s", a->cfg.env);
    env_plugin_close(a->plugin);
    crash_note_end();
    pthread_mutex_destroy(&a->mu);
    free(a);
}

void agent_register(struct agent *a)
{
    if (!getenv("OPENBLAS_NUM_THREADS")) tensor_set_cpu_threads(1);
    policy_register();
    rpc_register(RL_FN_GAVE_UP, agent_fn_gave_up, a);
    if (a->mode->register_fns) a->mode->register_fns(a);
}

bool agent_rendezvous_done(const struct agent *a) { return a->rendezvous_done; }

bool agent_gave_up(const struct agent *a) { return a->abandoned; }

struct rpc_opts agent_rpc_opts(const struct rl_config *cfg, const char *master)
{
    struct rpc_opts o = { .name = "agent", .rank = 0, .world_size = cfg->observers + 1, .master = master,
                          .default_timeout_ms = 120000, .heartbeat_ms = 200,
                          /* --max-seconds counts the wait for the observers too */
                          .init_timeout_ms = cfg->max_seconds > 0 ? (int)fmin(cfg->max_seconds * 1000, 1e9) : 60000,
                          .heartbeat_timeout_ms = cfg->heartbeat_timeout,
                          .num_handler_threads = cfg->observers + 4, .cancel = agent_signal_flag() };
    return o;
}

/* The run's observers: every worker but this one. */
static void find_peers(struct agent *a)
{
    struct rpc_worker_info w[RL_MAX_OBSERVERS + 1];
    int n = rpc_get_workers(w, RL_MAX_OBSERVERS + 1);
    for (int i = 0; i < n; i++) {
        if (w[i].id == rpc_self()->id) continue;
        struct obs_peer *p = &a->peers[a->n_peers];
        agent_name_peer(a, a->n_peers++, w[i].name);
        p->id = w[i].id;
        p->alive = true;
    }
}

/* The checkpoint's normalisation statistics into the run's set (none
 * when the run normalises nothing). 0 or -1 with rl_last_error(). */
static int restore_norm(struct agent *a)
{
    size_t len = 0;
    const void *b = a->norm ? agent_ckpt_norm(a->resume, &len) : NULL;
    if (!a->norm) return 0;
    if (!b) return -1;
    if (agent_norm_load(a, b, len) != 0) return rl_set_error("checkpoint %s: %s", a->resume->path, rl_last_error());
    return 0;
}

/* The policy and the optimizer over its parameters, restored from the
 * checkpoint being resumed. 0 or -1 with rl_last_error(). */
static int build_policy(struct agent *a)
{
    struct policy_arch shape;
    if (rl_arch_for_env(&a->cfg, a->spec, a->cfg.env, &shape) != 0) return -1;
    a->policy = policy_new(&a->cfg, &shape, a->mode->lockstep_act);
    if (!a->policy) return rl_set_error("policy: %s", rpc_last_error());
    int np = 0;
    struct rref **params = policy_param_rrefs(a->policy, &np);
    struct optim_hyper h = optim_defaults((enum optim_kind)a->cfg.optimizer);
    h.lr = a->cfg.lr;   /* the base; the optimizer owns the live lr (dist_optim_lr) */
    h.eps = a->cfg.opt_eps;
    a->opt = dist_optim_new((enum optim_kind)a->cfg.optimizer, &h, np, params);
    if (!a->opt) return rl_set_error("optimizer: %s", rpc_last_error());
    if (!a->resume) return 0;
    if (agent_ckpt_restore(a->resume, a->policy, a->opt, a->stats) != 0 || restore_norm(a) != 0) {
        a->resume_refused = true;
        return -1;
    }
    a->ckpt_updates = run_stats_updates(a->stats);
    agent_eval_resumed(a);
    if (agent_lr_resumed(a, a->resume) != 0) return -1;
    /* the saved optimizer state carries its lr: set the configured one
     * (maybe_anneal then sets the restored env steps' one) */
    if (dist_optim_set_lr(a->opt, a->cfg.lr) != 0) return rl_set_error("set lr: %s", rpc_last_error());
    return 0;
}

/* How observer k's set-up went (fut: its future, NULL when it was dropped
 * meanwhile: gone, or given up on as the run stopped; saved: it was handed
 * a checkpoint's state). One lost during its set-up (its process ended,
 * it said it goes, or the RPC layer lost it) is dropped as one lost later
 * is, and the run goes on with the others: 0. A failure it answered is
 * the run's: -1 with rl_last_error(). */
static int setup_result(struct agent *a, int k, struct rpc_future *fut, bool saved)
{
    struct obs_peer *p = &a->peers[k];
    if (!fut) return 0;   /* dropped already, saying how */
    if (rpc_future_wait(fut, NULL) == 0) return 0;
    const char *err = rpc_future_error(fut);
    if (agent_peer_lost(a, k)) {
        agent_lose_peer(a, k, err);
        return 0;
    }
    char e[TEXT_ESCAPED_CAP(1024)];   /* its error reply: its own text */
    text_escape(e, sizeof e, err, strlen(err));
    if (!saved) return rl_set_error("setting up %s: %s", p->label, e);
    /* the checkpoint's state refused (a NaN in it...): name the file, leave it be */
    a->resume_refused = true;
    return rl_set_error("checkpoint %s: observer%d: setting up %s: %s", a->resume->path, k, p->label, e);
}

/* Sets up every observer, handing each its saved state when the run
 * resumes a checkpoint of a mode that keeps them. Those lost meanwhile are
 * dropped (setup_result). 0 while one is left, or -1 with rl_last_error()
 * (the first failure's; agent_none_left's when every one was lost). */
static int setup_observers(struct agent *a)
{
    struct rpc_future *futs[RL_MAX_OBSERVERS];
    bool saved[RL_MAX_OBSERVERS];
    for (int k = 0; k < a->n_peers; k++) {
        size_t slen = 0;
        const void *state = a->resume && a->mode->observer_states ? agent_ckpt_observer_state(a->resume, k, &slen) : NULL;
        saved[k] = state != NULL;
        futs[k] = agent_send_setup(a, k, state, slen);
    }
    int rc = 0;
    agent_await_calls(a, futs, RL_FN_SETUP);   /* a reset stuck in a plug-in must not hold up a Ctrl-C */
    for (int k = 0; k < a->n_peers; k++) {
        if (rc == 0) rc = setup_result(a, k, futs[k], saved[k]);
        else if (futs[k]) rpc_future_wait(futs[k], NULL);
        rpc_future_free(futs[k]);
    }
    if (rc == 0 && agent_live_peers(a) == 0) return agent_none_left(a);
    return rc;
}

/* Finds the observers, builds the policy and the optimizer, sets up every
 * observer. 0 or -1 with rl_last_error(). */
static int setup(struct agent *a)
{
    find_peers(a);
    if (build_policy(a) != 0 || setup_observers(a) != 0) return -1;
    if (a->resume) {   /* said once the observers took their saved states too */
        printf("tributary: resumed from %s: %lld env steps, %lld updates\n", a->resume->path,
               (long long)run_stats_env_steps(a->stats), (long long)run_stats_updates(a->stats));
        char spent[160];
        if (run_stats_budget_spent(a->stats, spent, sizeof spent))
            fprintf(stderr, PROG ": the resumed run has already reached %s; give a larger one to train on\n", spent);
    }
    return 0;
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
        int k = agent_peer_by_id(a, w[i].id);
        if (futs[i] && rpc_future_wait(futs[i], NULL) != 0) {
            a->abandoned = true;   /* a graceful rpc_shutdown would wait for it */
            if (k >= 0) agent_lose_peer(a, k, rpc_future_error(futs[i]));
        }
        rpc_future_free(futs[i]);
    }
}

/* rpc_init(opts), saying what it waits for. 0 once every observer joined;
 * else the run's exit status, said on stderr (Ctrl-C or --max-seconds
 * while waiting: the summary of a run that never started too). */
static int meet_observers(struct agent *a, const struct rpc_opts *opts)
{
    const struct rl_config *cfg = &a->cfg;
    char what[512];
    const char *m = opts->master ? opts->master : "";
    size_t ml = strlen(m);
    const char *s = cfg->observers == 1 ? "" : "s";
    if (ml < 2 || strcmp(m + ml - 2, ":0") == 0)   /* a port chosen at bind: observers forked here */
        snprintf(what, sizeof what, "%d observer%s to join", cfg->observers, s);
    else
        snprintf(what, sizeof what, "%d observer%s to join at %s (tributary-observer --master %s --rank R --world-size %d)",
                 cfg->observers, s, m, m, cfg->observers + 1);
    double t_wait = trib_now_s();
    struct notice *wait = notice_start(PROG, what, 3, NULL, NULL);
    int irc = rpc_init(opts);
    notice_stop(wait);
    if (irc >= 0) return 0;
    bool budget = !agent_signal() && cfg->max_seconds > 0 && trib_now_s() - t_wait >= cfg->max_seconds - 0.05;
    if (budget) fprintf(stderr, PROG ": --max-seconds %g passed while waiting for %s; stopping\n", cfg->max_seconds, what);
    else fprintf(stderr, PROG ": %s\n", rpc_last_error());
    int sig = agent_signal();
    if (sig) run_stats_summary(a->stats, stdout, false, 0, 0, sig == SIGINT ? "SIGINT" : "SIGTERM");
    else if (budget) run_stats_summary(a->stats, stdout, false, 0, 0, "budget");
    return sig ? 128 + sig : 1;
}

/* notice's done test of the first update's wait */
static bool stats_updated(void *stats) { return run_stats_updates(stats) > 0; }

/* A slow start says what it waits for. */
static struct notice *first_update_notice(struct agent *a)
{
    const struct rl_config *cfg = &a->cfg;
    char first[256];
    rl_algo_first_update(rl_algo_of(cfg), cfg, first, sizeof first);
    return notice_start(PROG, first, 5, stats_updated, a->stats);
}

/* The run's end, whatever ended it (rc: the training's 0 or -1; why: its
 * stop reason): the last progress line, the final checkpoint and policy
 * file, the observers shut down, the summary, rpc_shutdown. Returns the
 * exit status. */
static int finish(struct agent *a, int rc, const char *why)
{
    const struct rl_config *cfg = &a->cfg;
    /* nobody joins a run that is ending: a graceful shutdown would wait for it */
    rpc_refuse_joins("the run is ending");
    bool solved = run_stats_solved(a->stats);
    if (agent_signal()) why = agent_signal() == SIGINT ? "SIGINT" : "SIGTERM";
    if (a->policy) {
        struct policy_stats ps;
        policy_get_stats(a->policy, &ps);
        run_stats_busy(a->stats, ps.forward_s);
        run_stats_acting(a->stats, ps.act_calls, ps.act_forwards);
    }
    agent_eval_join(a);   /* an async evaluation in flight: its row is the last */
    agent_log_interval(a, true);
    atomic_store(&a->stop, true);
    bool save = a->policy && cfg->logdir[0] && !a->resume_refused;
    if (save && a->opt) agent_write_checkpoint(a, a->mode->observer_states);
    shutdown_observers(a);
    dist_optim_free(a->opt);
    a->opt = NULL;
    if (a->policy) policy_stop(a->policy);
    if (save) {
        char path[600];
        snprintf(path, sizeof path, "%s/policy.safetensors", cfg->logdir);
        /* the observers are gone: no update moves the statistics now */
        if (agent_policy_savable(a, path) && policy_save(a->policy, path, a->spec, agent_norm(a)) != 0)
            fprintf(stderr, PROG ": %s\n", rl_last_error());
    }
    if (rc != 0 && !agent_signal()) run_stats_failed(a->stats);   /* whatever else stopped it: "failed" */
    run_stats_summary(a->stats, stdout, solved, a->n_lost, a->n_rejoined, why);
    rpc_shutdown(!a->abandoned);   /* not graceful: it would wait for the observers given up on */
    if (agent_signal()) return 128 + agent_signal();
    /* solved, or its budget spent without a target to miss: a success */
    bool success = false;
    run_stats_outcome(a->stats, solved, why, &success);
    return success ? 0 : 1;
}

/* The first line's env: the env's id, and for a plug-in where its code
 * came from. */
static void describe_env(const struct agent *a, char *out, size_t cap)
{
    if (strcmp(a->spec->id, a->cfg.env) == 0) snprintf(out, cap, "%s", a->spec->id);
    else snprintf(out, cap, "%.100s (plug-in %.380s)", a->spec->id, a->cfg.env);
}

/* The first line's budget: what stops the run if no target does. */
static void describe_budget(const struct rl_config *c, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    if (c->max_steps > 0)
        n += (size_t)snprintf(out + n, cap - n, "%lld env step%s", (long long)c->max_steps, c->max_steps == 1 ? "" : "s");
    if (c->max_updates > 0 && n < cap)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld update%s", n ? " or " : "", (long long)c->max_updates,
                              c->max_updates == 1 ? "" : "s");
    if (c->max_seconds > 0 && n < cap) n += (size_t)snprintf(out + n, cap - n, "%s%g s", n ? " or " : "", c->max_seconds);
    if (!out[0]) snprintf(out, cap, "none");
}

int agent_run(struct agent *a, const struct rpc_opts *opts)
{
    a->rendezvous_done = false;
    int status = meet_observers(a, opts);
    if (status != 0) return status;
    a->rendezvous_done = true;
    char desc[1024], target[48], budget[128];
    struct rl_config *shown = trib_xcalloc(1, sizeof *shown);   /* the config, naming the env by its id */
    *shown = a->cfg;
    describe_env(a, shown->env, sizeof shown->env);
    rl_config_describe(shown, desc, sizeof desc);
    free(shown);
    if (isnan(a->target)) snprintf(target, sizeof target, "no target");
    else snprintf(target, sizeof target, "target %g", a->target);
    describe_budget(&a->cfg, budget, sizeof budget);
    printf("tributary: %s; %s; budget %s\n", desc, target, budget);
    const char *why = "failure";
    struct notice *first_update = first_update_notice(a);
    int rc = setup(a);
    if (rc != 0) agent_say_error();
    else rc = a->mode->train(a, &why);
    notice_stop(first_update);
    return finish(a, rc, why);
}
