/* The agent's evaluations while training (--eval-every, state.h): a copy
 * of the policy evaluated by agent/evaluate's runner, on the main thread
 * (sync, between iterations) or on a thread of its own (async, so the
 * watch loop goes on: stops, lost observers, checkpoints), its result
 * handed to the next metrics row, and the best copy kept as
 * LOGDIR/policy_best.safetensors. Above policy.c and run_stats.c, beside
 * progress.c, below the modes. */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "agent/evaluate.h"
#include "agent/norm_stats.h"
#include "agent/policy.h"
#include "agent/policy_store.h"
#include "agent/signals.h"
#include "agent/state.h"
#include "agent/run_stats.h"
#include "common/check.h"
#include "common/clock.h"
#include "rl/finite.h"
#include "rl/messages.h"
#include "rl/rl.h"
#include "runfiles/runfile.h"
#include "runfiles/runfiles.h"
#include "runfiles/safetensors.h"

/* One evaluation: the copy, what it ran, what came of it. Made and freed
 * on the main thread; the runner's thread (async) writes r, rc, why and
 * then done, and nothing after. */
struct agent_eval {
    struct policy_copy c;
    struct agent_eval_opts o;
    struct rl_norm_stats norm;      /* the run's statistics when the copy was made (has_norm), frozen */
    bool has_norm;
    int64_t updates, env_steps;     /* the run's when the copy was made */
    struct agent_eval_result r;
    int rc;
    char why[512];                  /* rc != 0: rl_last_error() of the runner's thread */
    bool threaded;
    pthread_t thread;
    atomic_bool done;
    double deadline;                /* --max-seconds's end (run_stats_deadline), INFINITY without */
    double max_seconds;
    char stop_why[64];              /* the runner's thread's, for agent_evaluate */
};

/* What ends an evaluation early (agent_eval_opts.stop, polled each step):
 * the signal that stops the run, or its --max-seconds, so the run stops as
 * it would between iterations. Not --max-steps or --max-updates: they are
 * spent at the update the last evaluation is of. */
static const char *eval_stop(void *user)
{
    struct agent_eval *e = user;
    int sig = agent_signal();
    if (sig) return sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (trib_now_s() < e->deadline) return NULL;
    snprintf(e->stop_why, sizeof e->stop_why, "--max-seconds %g", e->max_seconds);
    return e->stop_why;
}

static void *run_eval(void *arg)
{
    struct agent_eval *e = arg;
    e->rc = agent_evaluate(&e->o, &e->r);   /* 1: stopped */
    if (e->rc != 0) snprintf(e->why, sizeof e->why, "%s", rl_last_error());
    atomic_store(&e->done, true);
    return NULL;
}

/* A copy of the policy as it is now (its updates and env steps noted), to evaluate; NULL (said
 * on stderr) when it cannot be made. */
static struct agent_eval *eval_new(struct agent *a)
{
    struct agent_eval *e = trib_xcalloc(1, sizeof *e);
    pthread_mutex_lock(&a->mu);   /* no async update while the parameters are copied */
    e->updates = run_stats_updates(a->stats);
    e->env_steps = run_stats_env_steps(a->stats);
    int rc = policy_copy_new(a->policy, &e->c);
    pthread_mutex_unlock(&a->mu);
    a->eval_env_steps = e->env_steps;
    if (rc != 0) {
        fprintf(stderr, PROG ": evaluation at update %lld failed, no more this run: %s\n", (long long)e->updates,
                rl_last_error());
        a->eval_failed = true;
        free(e);
        return NULL;
    }
    /* the run's statistics, frozen; taken just after the parameters (a
     * merge may fall between them): the evaluation and the best file use
     * this one copy, so the file reproduces the evaluation */
    e->has_norm = agent_norm_copy(a, &e->norm);
    e->o = (struct agent_eval_opts){ .spec = a->spec, .forward = agent_eval_actor_forward, .user = e->c.actor,
                                     .episodes = a->cfg.eval_episodes, .seed = AGENT_EVAL_SEED(a->cfg.seed),
                                     .sample = false, .norm = e->has_norm ? &e->norm : NULL,
                                     .stop = eval_stop, .stop_user = e };
    e->deadline = run_stats_deadline(a->stats);
    e->max_seconds = a->cfg.max_seconds;
    return e;
}

/* The copy, evaluated as e->r, as LOGDIR/policy_best.safetensors when it
 * beats the best so far. */
static void keep_best(struct agent *a, const struct agent_eval *e)
{
    const struct agent_eval_result *r = &e->r;
    if (!a->cfg.logdir[0] || a->resume_refused || (a->eval_have_best && !(r->return_mean > a->eval_best))) return;
    char path[600], ret[32], len[32], upd[24], steps[24], seed[24], eps[16];
    snprintf(path, sizeof path, "%s/policy_best.safetensors", a->cfg.logdir);
    const struct policy_copy *c = &e->c;
    if (rl_check_params(c->actor->n_params, c->actor->params, NULL) != 0 ||
        (c->critic && rl_check_params(c->critic->n_params, c->critic->params, NULL) != 0)) {
        fprintf(stderr, PROG ": not writing %s: the policy is not finite: %s\n", path, rl_last_error());
        return;
    }
    snprintf(ret, sizeof ret, "%.17g", r->return_mean);
    snprintf(len, sizeof len, "%.17g", r->length_mean);
    snprintf(upd, sizeof upd, "%lld", (long long)e->updates);
    snprintf(steps, sizeof steps, "%lld", (long long)e->env_steps);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)e->o.seed);
    snprintf(eps, sizeof eps, "%d", r->episodes);
    const struct safetensors_meta extra[] = {
        { "eval_return", ret }, { "eval_length", len }, { "eval_update", upd }, { "eval_env_steps", steps },
        { "eval_seed", seed }, { "eval_episodes", eps },
    };
    if (policy_copy_save(a->policy, c, path, a->spec, e->o.norm, extra, (int)(sizeof extra / sizeof extra[0])) != 0) {
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        return;
    }
    a->eval_have_best = true;
    a->eval_best = r->return_mean;
}

/* The evaluation in flight, done (joined) or run here: its result to the
 * stats and the best file. Returns whether it gave one. */
static bool eval_finish(struct agent *a)
{
    struct agent_eval *e = a->eval;
    a->eval = NULL;
    if (e->threaded) pthread_join(e->thread, NULL);
    else run_eval(e);
    bool ok = e->rc == 0;
    if (ok) {
        run_stats_eval(a->stats, e->r.return_mean, e->r.length_mean);
        keep_best(a, e);
    } else if (e->rc == 1) {   /* the run is stopping: no row, no more */
        fprintf(stderr, PROG ": evaluation at update %lld abandoned: %s\n", (long long)e->updates, e->why);
        a->eval_failed = true;
    } else {
        fprintf(stderr, PROG ": evaluation at update %lld failed, no more this run: %s\n", (long long)e->updates,
                e->why);
        a->eval_failed = true;
    }
    policy_copy_free(&e->c);
    if (e->has_norm) rl_norm_stats_free(&e->norm);
    free(e);
    return ok;
}

bool agent_maybe_evaluate(struct agent *a, bool wait)
{
    bool logged = false;
    if (a->eval && (wait || atomic_load(&a->eval->done))) logged = eval_finish(a);
    /* at the end of the update whose env steps cross a multiple of --eval-every */
    int64_t every = a->cfg.eval_every, steps = run_stats_env_steps(a->stats);
    if (a->eval || every <= 0 || a->eval_failed || steps / every <= a->eval_env_steps / every) return logged;
    if (!(a->eval = eval_new(a))) return logged;
    if (!wait && pthread_create(&a->eval->thread, NULL, run_eval, a->eval) == 0) {
        a->eval->threaded = true;
        return logged;
    }
    return eval_finish(a) || logged;   /* wait (sync), or no thread to be had: here */
}

void agent_eval_join(struct agent *a)
{
    if (a->eval) eval_finish(a);
}

/* The most an evaluation of the run's env can score: rewards are floats,
 * episodes at most its max_episode_steps long (a report's bound without
 * one). A best file that records more was not written by an evaluation:
 * kept, it would block every later best. */
static double best_bound(const struct agent *a)
{
    double steps = a->spec->max_episode_steps > 0 ? a->spec->max_episode_steps : (double)RL_MSG_MAX_STEPS;
    return steps * FLT_MAX;
}

void agent_eval_resumed(struct agent *a)
{
    a->eval_env_steps = run_stats_env_steps(a->stats);   /* the next evaluation past the next multiple of --eval-every */
    if (!a->cfg.logdir[0]) return;
    char path[600];
    snprintf(path, sizeof path, "%s/policy_best.safetensors", a->cfg.logdir);
    if (access(path, F_OK) != 0) return;
    struct safetensors *st = runfile_check_file(path) == 0 ? safetensors_load(path) : NULL;
    const char *v = st ? safetensors_meta_get(st, "eval_return") : NULL;
    char *end = NULL;
    double best = v ? strtod(v, &end) : NAN, bound = best_bound(a);
    char why[300];
    if (!st) snprintf(why, sizeof why, "%s", runfiles_last_error());
    else if (!v || end == v || *end || !isfinite(best)) snprintf(why, sizeof why, "no finite eval_return in its metadata");
    else if (fabs(best) > bound)
        snprintf(why, sizeof why, "its eval_return %g is not an evaluation's (|return| <= %g: %s's episodes of at most %.0f "
                 "steps of float rewards)", best, bound, a->spec->id, bound / FLT_MAX);
    else why[0] = '\0';
    if (!why[0]) {
        a->eval_have_best = true;
        a->eval_best = best;
    } else {
        fprintf(stderr, PROG ": %s: %s; the next evaluation replaces it\n", path, why);
    }
    safetensors_free(st);
}
