/* What both modes' loops and the run's end do between steps (state.h):
 * the progress line and metrics row of each interval, checkpoints (with
 * the observers' states where the mode keeps them), why the run stops, and
 * the next update's lr. Above observers.c, below the modes. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent/checkpoint.h"
#include "agent/policy.h"
#include "agent/runlog.h"
#include "agent/state.h"
#include "agent/run_stats.h"
#include "common/text.h"
#include "optim/dist_optim.h"
#include "optim/optim.h"
#include "rl/finite.h"
#include "rl/messages.h"
#include "rl/rl.h"

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
    if (a->log && runlog_write(a->log, &iv, dist_optim_lr(a->opt)) != 0) {
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
        if (futs[k] && rpc_future_wait(futs[k], &st[k]) != 0) {
            const char *err = rpc_future_error(futs[k]);
            char e[TEXT_ESCAPED_CAP(1024)];   /* its error reply: its own text */
            fprintf(stderr, PROG ": checkpoint without %s's state: %s\n", a->peers[k].label,
                    text_escape(e, sizeof e, err, strlen(err)));
        }
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
    size_t norm_len = 0;
    unsigned char *norm = agent_norm_save(a, &norm_len);
    struct agent_ckpt_in in = { .cfg = &a->cfg, .policy = a->policy, .opt = a->opt, .stats = a->stats,
                                .n_observers = a->n_peers, .obs_state = st, .norm = norm, .norm_len = norm_len,
                                .lr_from = a->lr_from };
    pthread_mutex_lock(&a->mu);
    if (agent_ckpt_save(a->cfg.logdir, updates, &in, &a->ckpt_failures) != 0) fprintf(stderr, PROG ": %s\n", rl_last_error());
    pthread_mutex_unlock(&a->mu);
    a->ckpt_updates = updates;
    free(norm);
    for (int k = 0; k < a->n_peers; k++) rpc_value_clear(&st[k]);
}

void agent_maybe_checkpoint(struct agent *a, bool with_observers)
{
    if (a->cfg.logdir[0] && a->cfg.checkpoint_every > 0 &&
        run_stats_updates(a->stats) - a->ckpt_updates >= a->cfg.checkpoint_every)
        agent_write_checkpoint(a, with_observers);
}

int agent_maybe_anneal(struct agent *a)
{
    if (!a->cfg.anneal_lr || a->cfg.max_steps <= 0) return 0;
    const struct agent_lr_from *f = &a->lr_from;   /* a run's start: 0, 1 (the lr as CleanRL's) */
    double lr = optim_lr_linear(a->cfg.lr * f->frac, 1.0, 0.0, a->cfg.max_steps - f->steps,
                                run_stats_env_steps(a->stats) - f->steps);
    return lr == dist_optim_lr(a->opt) ? 0 : dist_optim_set_lr(a->opt, lr);
}

int agent_lr_resumed(struct agent *a, const struct ckpt *c)
{
    struct agent_lr_from was;
    int64_t was_max;
    bool was_anneal;
    double was_lr;
    if (agent_ckpt_lr_schedule(c, &was, &was_max, &was_anneal, &was_lr) != 0) return -1;
    a->lr_from = was;
    const struct rl_config *cfg = &a->cfg;
    if (!cfg->anneal_lr || cfg->max_steps <= 0) return 0;   /* no line to follow */
    if (was_anneal && was_max == cfg->max_steps && was_lr == cfg->lr) return 0;   /* the same line */
    int64_t t = run_stats_env_steps(a->stats);
    if (t >= cfg->max_steps) return 0;   /* nothing left to train: said by the caller */
    const char *why;
    if (was_lr != cfg->lr) {   /* a new --lr: the line starts from it here */
        a->lr_from = (struct agent_lr_from){ t, 1.0 };
        why = "--lr";
    } else {   /* the lr the old line gives here, on down to 0 at the new end */
        double f = was.frac;
        if (was_anneal && was_max > 0)
            f = was_max > was.steps ? was.frac * fmin(fmax((double)(was_max - t) / (double)(was_max - was.steps), 0), 1) : 0;
        a->lr_from = (struct agent_lr_from){ t, f };
        why = "--max-steps";
    }
    printf("tributary: a new %s: the lr anneals from %g at env step %lld to 0 at %lld%s\n", why,
           cfg->lr * a->lr_from.frac, (long long)t, (long long)cfg->max_steps,
           a->lr_from.frac == 0 ? " (the run's anneal had ended; give --lr to train on from that lr)" : "");
    return 0;
}
