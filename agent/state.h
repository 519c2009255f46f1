/* The agent's private state and the functions its files share: agent.c
 * (set-up, the run, async mode, observers lost and rejoining) and sync.c
 * (the sync iterations). Not installed; nothing outside agent/ includes it. */
#ifndef TRIB_AGENT_AGENT_INTERNAL_H
#define TRIB_AGENT_AGENT_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "rl/config.h"
#include "rpc/rpc.h"

#define PROG "agent"
#define AGENT_STOP_GRACE_S 5.0      /* calls in flight may run this long after the run is due to stop */

/* One observer rank of the run (slot k holds rank k + 1). Main thread
 * only, but for id, which never changes. */
struct obs_peer {
    char name[64];
    int id;                         /* its RPC worker id, which is its rank */
    bool alive;                     /* set up and taking part */
    bool rejoining;                 /* a new process took the rank: set it up when its old calls are in */
    int generation;                 /* processes that held the rank before the current one */
    struct rpc_future *setup;       /* a rejoining observer's set-up in flight */
    struct rpc_future *run;         /* async mode: its rl_run_async */
    /* Said by the observer as it goes (rl_gave_up: "gave up (...)",
     * "crashed (...)"): set on a handler thread under agent.mu, then
     * `going`; the main thread drops it at once (agent_tend_gone). */
    atomic_bool going;
    char going_why[560];
    char gone_why[640];             /* how it went, once lost or dropped: for "no observer is left" */
};

struct agent {
    struct rl_config cfg;
    struct env_plugin *plugin;
    const struct env_spec *spec;
    struct policy *policy;
    struct dist_optim *opt;
    struct run_stats *stats;
    struct runlog *log;             /* --logdir, or NULL */
    struct obs_peer peers[RL_MAX_OBSERVERS];
    int n_peers, n_lost, n_rejoined;
    pthread_mutex_t mu;             /* async updates: the optimizer, lr, stop */
    atomic_bool stop;
    double lr;                      /* the lr last set */
    bool dumped;                    /* TRIB_DEBUG_DUMP done */
    struct ckpt *resume;            /* the checkpoint being resumed, until set-up */
    bool resume_refused;            /* its restore failed: the run writes no file */
    int ckpt_failures;              /* checkpoints failed in a row; at AGENT_CKPT_MAX_FAILURES the run stops */
    int64_t ckpt_updates;           /* updates at the last checkpoint */
    double stop_due;                /* when the run became due to stop (0: not yet); main thread */
    bool abandoned;                 /* a call to an observer was given up: no graceful rpc_shutdown */
};

/* peers.c. Main thread unless said otherwise. */

/* The signal (SIGINT, SIGTERM) that stops the run, 0 before one; the flag
 * itself for rpc_opts.cancel. */
int agent_signal(void);
const volatile sig_atomic_t *agent_signal_flag(void);
/* Observers taking part. */
int agent_live_peers(const struct agent *a);
/* Stops using observer k (lost, or dropped: why says how). */
void agent_lose_peer(struct agent *a, int k, const char *why);
/* Loses every observer the RPC layer no longer knows; returns how many. */
int agent_lose_dead_peers(struct agent *a, const char *why);
/* Drops at once every observer known to be gone: one that said so as it
 * went (it gave up, it crashed) or whose process tributary-train saw end
 * (agent_watch_observers); frees its future in futs (may be NULL; slot k
 * for observer k) and its async loop's. Returns how many. */
int agent_tend_gone(struct agent *a, struct rpc_future **futs);
/* -1 with rl_last_error() "no observer is left: observer1 crashed (signal
 * 11, SIGSEGV); observer2 gave up (...); ..." (how each went). */
int agent_none_left(const struct agent *a);
/* Sets the annealed lr for the next update. 0, or -1 with rpc_last_error(). */
int agent_maybe_anneal(struct agent *a);
/* Whether the run has been due to stop (a signal, --max-seconds or another
 * budget, async mode's stop) for AGENT_STOP_GRACE_S: calls still in flight
 * then are given up, and a sync iteration makes no more updates. */
bool agent_stop_overdue(struct agent *a);
/* Waits for every future of futs (fn: what they are, for messages), giving
 * up those left once the run's stop is overdue. */
void agent_await_calls(struct agent *a, struct rpc_future **futs, const char *fn);
/* Once the stop is overdue: gives up the calls of futs still in flight and
 * frees every future of futs; returns whether it did. */
bool agent_abandon_overdue(struct agent *a, struct rpc_future **futs, const char *fn);

/* sync.c: one sync iteration (rollouts, then its updates). An observer lost
 * mid-update ends that update early; 0, or -1 with rl_last_error(). */
int agent_sync_iteration(struct agent *a);

#endif
