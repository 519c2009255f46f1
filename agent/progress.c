/* What both modes' loops and the run's end do between steps (state.h):
 * the progress line and metrics row of each interval, checkpoints (with
 * the observers' states where the mode keeps them), and why the run stops.
 * Above peers.c, below the modes. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent/checkpoint.h"
#include "agent/evaluate.h"
#include "agent/policy.h"
#include "agent/runlog.h"
#include "agent/state.h"
#include "agent/stats.h"
#include "optim/dist_optim.h"
#include "rl/finite.h"
#include "rl/messages.h"
#include "rl/rl.h"
#include "runfiles/safetensors.h"

#define END_CALL_MS 3000            /* each call for an observer's state */

const char *agent_stop_reason(struct agent *a)
{
    if (agent_signal()) return agent_signal() == SIGINT ? "SIGINT" : "SIGTERM";
    if (a->ckpt_failures >= AGENT_CKPT_MAX_FAILURES) return "checkpoint-failures";
    if (run_stats_solved(a->stats)) return "solved";
    if (run_stats_out_of_budget(a->stats)) return "budget";
    return NULL;
}

void agent_log_interval(struct agent *a, bool force)
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

bool agent_policy_savable(struct agent *a, const char *what)
{
    struct tensor **params;
    int n = policy_params(a->policy, &params);
    pthread_mutex_lock(&a->mu);
    int rc = rl_check_params(n, params, NULL);
    pthread_mutex_unlock(&a->mu);
    if (rc != 0) fprintf(stderr, PROG ": not writing %s: the policy is not finite: %s\n", what, rl_last_error());
    return rc == 0;
}

/* Every live observer's rl_get_state into st[k] (nil for the others, and
 * for one whose call failed, said on stderr). */
static void observer_states(struct agent *a, struct rpc_value *st)
{
    struct rpc_future *futs[RL_MAX_OBSERVERS];
    struct rpc_value none = rpc_list(0);
    for (int k = 0; k < a->n_peers; k++) {
        st[k] = rpc_nil();
        futs[k] = a->peers[k].alive ? rpc_async(a->peers[k].name, RL_FN_GET_STATE, &none, END_CALL_MS) : NULL;
    }
    rpc_value_clear(&none);
    for (int k = 0; k < a->n_peers; k++) {
        if (futs[k] && rpc_future_wait(futs[k], &st[k]) != 0)
            fprintf(stderr, PROG ": checkpoint without %s's state: %s\n", a->peers[k].name, rpc_future_error(futs[k]));
        rpc_future_free(futs[k]);
    }
}

void agent_write_checkpoint(struct agent *a, bool with_observers)
{
    if (!agent_policy_savable(a, "a checkpoint")) return;
    struct rpc_value st[RL_MAX_OBSERVERS];
    if (with_observers) observer_states(a, st);
    else
        for (int k = 0; k < a->n_peers; k++) st[k] = rpc_nil();
    int64_t updates = run_stats_updates(a->stats);
    struct agent_ckpt_in in = { .cfg = &a->cfg, .policy = a->policy, .opt = a->opt, .stats = a->stats,
                                .n_observers = a->n_peers, .obs_state = st };
    pthread_mutex_lock(&a->mu);
    if (agent_ckpt_save(a->cfg.logdir, updates, &in, &a->ckpt_failures) != 0) fprintf(stderr, PROG ": %s\n", rl_last_error());
    pthread_mutex_unlock(&a->mu);
    a->ckpt_updates = updates;
    for (int k = 0; k < a->n_peers; k++) rpc_value_clear(&st[k]);
}

void agent_maybe_checkpoint(struct agent *a, bool with_observers)
{
    if (a->cfg.logdir[0] && a->cfg.checkpoint_every > 0 &&
        run_stats_updates(a->stats) - a->ckpt_updates >= a->cfg.checkpoint_every)
        agent_write_checkpoint(a, with_observers);
}

/* The copy c, evaluated as r at `updates`, as LOGDIR/policy_best.safetensors
 * when it beats the best so far. */
static void keep_best(struct agent *a, struct policy_copy *c, const struct agent_eval_result *r, int64_t updates,
                      int64_t env_steps)
{
    if (!a->cfg.logdir[0] || a->resume_refused || (a->eval_have_best && !(r->return_mean > a->eval_best))) return;
    char path[600], ret[32], len[32], upd[24], steps[24], seed[24], eps[16];
    snprintf(path, sizeof path, "%s/policy_best.safetensors", a->cfg.logdir);
    if (rl_check_params(c->actor->n_params, c->actor->params, NULL) != 0) {
        fprintf(stderr, PROG ": not writing %s: the policy is not finite: %s\n", path, rl_last_error());
        return;
    }
    snprintf(ret, sizeof ret, "%.17g", r->return_mean);
    snprintf(len, sizeof len, "%.17g", r->length_mean);
    snprintf(upd, sizeof upd, "%lld", (long long)updates);
    snprintf(steps, sizeof steps, "%lld", (long long)env_steps);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)AGENT_EVAL_SEED(a->cfg.seed));
    snprintf(eps, sizeof eps, "%d", r->episodes);
    const struct safetensors_meta extra[] = {
        { "eval_return", ret }, { "eval_length", len }, { "eval_update", upd }, { "eval_env_steps", steps },
        { "eval_seed", seed }, { "eval_episodes", eps },
    };
    if (policy_copy_save(a->policy, c, path, a->spec, extra, (int)(sizeof extra / sizeof extra[0])) != 0) {
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        return;
    }
    a->eval_have_best = true;
    a->eval_best = r->return_mean;
}

void agent_maybe_evaluate(struct agent *a)
{
    int64_t every = a->cfg.eval_every, updates = run_stats_updates(a->stats);
    if (every <= 0 || a->eval_failed || updates / every <= a->eval_updates / every) return;
    struct policy_copy c;
    pthread_mutex_lock(&a->mu);   /* no async update while the parameters are copied */
    updates = run_stats_updates(a->stats);
    int64_t env_steps = run_stats_env_steps(a->stats);
    int rc = policy_copy_new(a->policy, &c);
    pthread_mutex_unlock(&a->mu);
    a->eval_updates = updates;
    struct agent_eval_result r;
    /* the run's observation statistics, frozen: agent_norm(a) once rl/norm.c is in (NULL: none) */
    struct agent_eval_opts o = { .spec = a->spec, .forward = agent_eval_actor_forward, .user = c.actor,
                                 .episodes = a->cfg.eval_episodes, .seed = AGENT_EVAL_SEED(a->cfg.seed),
                                 .sample = false, .norm = NULL };
    if (rc != 0 || agent_evaluate(&o, &r) != 0) {
        fprintf(stderr, PROG ": evaluation at update %lld failed, no more this run: %s\n", (long long)updates,
                rl_last_error());
        a->eval_failed = true;
        policy_copy_free(&c);
        return;
    }
    run_stats_eval(a->stats, r.return_mean, r.length_mean);
    keep_best(a, &c, &r, updates, env_steps);
    policy_copy_free(&c);
    agent_log_interval(a, true);
}
