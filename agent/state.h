/* The agent's private state, its modes' table entry, and the functions its
 * files share. Layers, lowest first: signals.c (signals.h: the stopping
 * signal, observer processes that ended), observers.c (observers alive, lost,
 * gone and rejoining; calls awaited and given up), progress.c (the
 * progress line, checkpoints, why the run stops), the modes sync.c and
 * async.c (each one struct agent_mode), agent.c (agent_new, agent_run,
 * agent_free; the mode table). Not installed; nothing outside agent/
 * includes it. */
#ifndef TRIB_AGENT_STATE_H
#define TRIB_AGENT_STATE_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/checkpoint.h"
#include "agent/norm_stats.h"
#include "agent/signals.h"
#include "agent/run_stats.h"
#include "common/text.h"
#include "rl/config.h"
#include "rpc/rpc.h"

#define PROG "agent"
#define AGENT_STOP_GRACE_S 5.0      /* calls in flight may run this long after the run is due to stop */
/* Sync: the others' act calls wait --step-timeout and this much more for an
 * observer's before it is dropped as one that does not act; an honest one
 * whose env step overran gives up itself by then and says so (its
 * watchdog looks every 100 ms, then its word crosses the network). */
#define AGENT_ACT_GRACE_S 2.0

/* One observer rank of the run (slot k holds rank k + 1). Main thread
 * only, but for id, which never changes. */
struct obs_peer {
    char name[64];                  /* its RPC worker name, as it chose it: to call it */
    char label[TEXT_ESCAPED_CAP(63)];   /* the name escaped (common/text.h): to print it */
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
    char going_why[640];            /* escaped (common/text.h), as all it says */
    char gone_why[720];             /* how it went, once lost or dropped: for "no observer is left" */
};

struct agent;
struct agent_eval;

/* A training mode (rl/config.h's enum rl_mode): the agent's table of them
 * (agent.c) is indexed by cfg.mode and read once, in agent_new, which hands
 * the mode's properties to what it creates: nothing else asks which mode
 * runs. */
struct agent_mode {
    /* Observers step in lockstep: every merged act forward of the policy
     * waits for all of them and serves them in worker-id order (policy_new's
     * lockstep); else it waits at most --max-wait-us. */
    bool lockstep_act;
    /* The run's figures: policy lag, the running reward per report
     * (run_stats_set_mode). */
    struct run_stats_mode stats;
    /* Checkpoints carry every observer's RNG and env state (taken between
     * iterations, while the observers are still), and a resumed run hands
     * them back: a resumed run then continues bit for bit. */
    bool observer_states;
    /* Registers the mode's own RPC functions, a as their user data. NULL:
     * none. Before rpc_init. */
    void (*register_fns)(struct agent *a);
    /* Trains once every observer is set up, until a reason to stop
     * (*why: "solved", "budget", "SIGINT", ...). 0, or -1 said on stderr
     * (*why "failure"). Main thread. */
    int (*train)(struct agent *a, const char **why);
    /* Observer k rejoined and is set up (observers.c's agent_tend_rejoins):
     * the mode lets it take part. NULL: it takes part from the next
     * iteration on its own. Main thread. */
    void (*rejoined)(struct agent *a, int k);
};

struct agent {
    struct rl_config cfg;
    const struct agent_mode *mode;  /* cfg.mode's, set once by agent_new */
    double target;                  /* the return that counts as solved */
    struct env_plugin *plugin;
    const struct env_spec *spec;
    struct policy *policy;
    struct dist_optim *opt;
    struct run_stats *stats;
    struct agent_norm *norm;        /* the run's normalisation statistics (norm_stats.h), NULL: none */
    struct runlog *log;             /* --logdir, or NULL */
    struct obs_peer peers[RL_MAX_OBSERVERS];
    int n_peers, n_lost, n_rejoined;
    pthread_mutex_t mu;             /* async updates: the optimizer, lr, stop */
    atomic_bool stop;
    bool dumped;                    /* TRIB_DEBUG_DUMP done */
    struct ckpt *resume;            /* the checkpoint being resumed, until set-up */
    bool resume_refused;            /* its restore failed: the run writes no file */
    int ckpt_failures;              /* checkpoints failed in a row; at AGENT_CKPT_MAX_FAILURES the run stops */
    int64_t ckpt_updates;           /* updates at the last checkpoint */
    int64_t eval_env_steps;         /* env steps at the last evaluation (--eval-every) */
    struct agent_lr_from lr_from;   /* where --anneal-lr's line starts (agent_lr_resumed) */
    bool eval_have_best;            /* an evaluation was kept as LOGDIR/policy_best.safetensors */
    double eval_best;               /* its mean return */
    bool eval_failed;               /* an evaluation failed (said once): no more */
    struct agent_eval *eval;        /* the evaluation in flight (eval_every.c), or NULL */
    double stop_due;                /* when the run became due to stop (0: not yet); main thread */
    bool abandoned;                 /* a call to an observer was given up: no graceful rpc_shutdown */
    bool rendezvous_done;           /* agent_run got through rpc_init */
    double said_t;                  /* agent_say_limited: the second being counted, under mu */
    int said_lines;                 /* lines said in it, under mu */
};

/* observers.c. Main thread unless said otherwise. */

/* Observers taking part. */
int agent_live_peers(const struct agent *a);
/* Observer k is the RPC worker `name` (which its process chose): sets its
 * name and, escaped, the label every message prints. Any text a peer
 * chose (its name, its error replies, why it goes) is printed escaped
 * (common/text.h), so it cannot forge a line of the agent's. */
void agent_name_peer(struct agent *a, int k, const char *name);
/* Stops using observer k (lost, or dropped: why says how; printed
 * escaped). */
void agent_lose_peer(struct agent *a, int k, const char *why);
/* Whether observer k is lost: known to be gone (agent_tend_gone's), or no
 * longer a worker the RPC layer knows. */
bool agent_peer_lost(struct agent *a, int k);
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

/* rl_last_error() on stderr ("agent: ..."), escaped: the error that ends
 * the run may quote a peer (a remote error in a backward). */
void agent_say_error(void);
/* A line on stderr ("agent: line") about what a peer sent, at most 10 a
 * second (a peer may send many). Any thread. */
void agent_say_limited(struct agent *a, const char *line);
/* The index of the observer whose RPC worker id is id, or -1. */
int agent_peer_by_id(const struct agent *a, int id);
/* Sends rl_setup to observer k: the run's configuration, the policy, its
 * index, state (slen bytes, a checkpoint's; NULL: none) and its generation.
 * The future, or NULL with rpc_last_error(). */
struct rpc_future *agent_send_setup(struct agent *a, int k, const void *state, size_t slen);
/* Takes in the RPC layer's membership events (an observer found dead is
 * lost; a new process that took an observer's rank is to be set up), sets
 * up those that rejoined once the calls to their old process are in, and
 * lets those set up take part (a->mode->rejoined). block: waits for the
 * set-ups in flight. Main thread. */
void agent_tend_rejoins(struct agent *a, bool block);
/* The rl_gave_up handler (user: the agent): an observer says why it goes
 * (it gave up, it crashed), so it is dropped at once. */
int agent_fn_gave_up(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *user);

/* progress.c. Main thread. */

/* Why the run stops now ("SIGINT", "SIGTERM", "checkpoint-failures",
 * "solved", "budget"), or NULL: train on. */
const char *agent_stop_reason(struct agent *a);
/* Prints the progress line and writes the metrics row of an interval when
 * one is due (force: now). A failed row closes the metrics, said once. */
void agent_log_interval(struct agent *a, bool force);
/* Sets the lr of the next update (--anneal-lr: CleanRL's linear decay to 0
 * at --max-steps of the run's env steps from where the line starts,
 * a->lr_from: optim_lr_linear's closed form) on the optimizer, which owns
 * the live lr (dist_optim_lr). A function of the env steps alone, so a
 * resumed run with the same budget sets the same. 0, or -1 with
 * rpc_last_error(). Main thread (sync) or under agent.mu (async). */
int agent_maybe_anneal(struct agent *a);
/* Where a resumed run's anneal starts, from its checkpoint c: the
 * checkpoint's line when the budget, --lr and --anneal-lr are the same;
 * with another --max-steps, at the resumed env step from the lr the old
 * line gives there (it goes on down, to 0 at the new end: never up); with
 * another --lr, from that lr at the resumed env step. Said on stdout when
 * the line changes. 0, or -1 with rl_last_error(). */
int agent_lr_resumed(struct agent *a, const struct ckpt *c);
/* Whether the policy may be saved (what: the file, for the message): every
 * parameter finite, else said on stderr. */
bool agent_policy_savable(struct agent *a, const char *what);
/* A checkpoint into LOGDIR/checkpoints, with the observers' states when
 * with_observers (a->mode->observer_states, between iterations). Failures
 * are said on stderr and counted (a->ckpt_failures). */
void agent_write_checkpoint(struct agent *a, bool with_observers);
/* agent_write_checkpoint once --checkpoint-every updates were made since
 * the last one. */
void agent_maybe_checkpoint(struct agent *a, bool with_observers);
/* eval_every.c (--eval-every). Main thread. */

/* Once the run's env steps crossed a multiple of --eval-every (env steps,
 * as CleanRL's and SB3's eval_freq) since the last evaluation, at the end
 * of the update that crossed it: makes a copy of the policy (under the agent's mu, the only
 * time it is held) and evaluates it with evaluate.h's runner:
 * --eval-episodes episodes, greedy, envs seeded AGENT_EVAL_SEED, the
 * normalisation frozen. wait (sync): here, at once; else (async) on a
 * thread of its own, whose result a later call takes once it is done (one
 * evaluation at a time). A result goes to the next metrics row and, with
 * --logdir, when it beats the best so far, the copy is written as
 * LOGDIR/policy_best.safetensors (metadata eval_return, eval_length,
 * eval_update, eval_env_steps, eval_seed, eval_episodes). A failure is
 * said on stderr once and ends the run's evaluations, not the run; the
 * signal that stops the run or its --max-seconds abandons the evaluation
 * in flight within a step ("evaluation at update N abandoned: stopped by
 * SIGINT after 3 of 10 episodes", no row). Returns
 * whether a result came in: the caller then writes the row at once
 * (agent_log_interval(a, true)), so every evaluation has its row. */
bool agent_maybe_evaluate(struct agent *a, bool wait);
/* The run ends: waits for the evaluation in flight and takes its result. */
void agent_eval_join(struct agent *a);
/* A resumed run: the next evaluation at the next multiple of --eval-every,
 * and the best so far the one its LOGDIR/policy_best.safetensors records
 * (none, or one that cannot be read, said on stderr: the next evaluation
 * is the best). */
void agent_eval_resumed(struct agent *a);
#define AGENT_EVAL_SEED(seed) ((seed) + 1000u)   /* the evaluation envs' seed, from --seed */

/* The modes (agent.c's table). */
/* One per row of rl/config_fields.h's RL_MODES, each in its own file
 * (sync.c, async.c): agent_mode_<name>. */
#define AGENT_MODE_DECL(P, id, name, ...) extern const struct agent_mode agent_mode_##name;
RL_MODES(AGENT_MODE_DECL, RL_MODE)
#undef AGENT_MODE_DECL

#endif
