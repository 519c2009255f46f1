/* The observer's parts (docs/design.md §6, observer/README.md): the one
 * struct they share, the mode table's entry, and the functions one part
 * offers the others. Private to observer/ (not installed); observer.h is
 * the public face. The parts, bottom first (none calls up):
 *   steps.c           envs stepped under the watchdog, policy calls, a
 *                     rollout, an episode: what every mode does with the envs;
 *   observer_norm.c   the normalisation statistics this observer adopts from
 *                     the agent and the delta it hands back;
 *   observer_sync.c   sync mode's side (observer_mode_sync): serving the
 *                     agent's rollout, loss and episode calls;
 *   observer_async.c  async mode's side (observer_mode_async): the loop that
 *                     updates on its own;
 *   setup.c           set-up (which picks the mode from the table) and the
 *                     state a checkpoint holds;
 *   observer.c        the process: its functions, the agent's loss, the end. */
#ifndef TRIB_OBSERVER_STATE_H
#define TRIB_OBSERVER_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "rl/algo.h"
#include "rl/config.h"
#include "rl/learner.h"
#include "rl/messages.h"
#include "rpc/rpc.h"

struct watchdog;
struct env_plugin;

struct observer_mode;

/* One observer. o->mu is held by whichever RPC function is serving (one
 * job at a time); end_mu guards agent_gone. With sync mode's overlap
 * (cfg.overlap, observer_sync.c) a rollout holds roll_mu instead, for the
 * collecting side (ln.ro, the envs, ln.rng, ln.norm, ln.report, ln.cur_obs,
 * obs_t, trunc_idx, env_steps, the watchdog), while a loss call holds mu
 * for the learning side (ln.done[ln.learn_slot], ln.perms, ln.mb_*,
 * dumped, next_learn); the hand-over of a finished rollout (and
 * rollouts_done, slot_seq) takes both, roll_mu first, as set-up and
 * get_state do. */
struct observer {
    pthread_mutex_t mu;             /* one job at a time (with overlap: the learning side) */
    pthread_mutex_t roll_mu;        /* overlap: the collecting side; taken before mu */
    int64_t rollouts_done;          /* overlap: rollouts collected and handed over since set-up */
    int64_t next_learn;             /* overlap: the rollout the next minibatch 0 of epoch 0 is of */
    int64_t slot_seq[2];            /* overlap: the rollout in each of ln.done (-1: none) */
    pthread_mutex_t end_mu;         /* guards agent_gone; with end_cv, wakes observer_run */
    pthread_cond_t end_cv;
    int agent_gone;                 /* 0, or RPC_EVENT_FAILED / RPC_EVENT_LEAVE of the agent */
    bool ready;
    struct rl_config cfg;
    const struct rl_algo *algo;     /* cfg's */
    int index;
    struct rref *policy;
    struct env_plugin *plugin;
    const struct env_spec *spec;
    struct rl_learner ln;           /* envs, RNG, rollout buffer, minibatches */
    int B, D, A;
    bool discrete, value_head;
    struct tensor *obs_t;           /* [B,D] reused for act calls */
    int *trunc_idx;                 /* [B] envs to bootstrap after a step */
    struct tensor *half_obs[2];     /* cfg.double_buffer: [B/2,D] each half's act call */
    float *next_values;             /* cfg.double_buffer: [B] the values at T, both halves' */
    /* an episodes algorithm's episode (RL_SHAPE_EPISODES) */
    int max_len;
    struct tensor **ep_logp;
    float *ep_rew;
    const struct observer_mode *mode;   /* cfg.mode's (setup.c) */
    atomic_bool shutdown;
    bool dumped;                    /* TRIB_DEBUG_DUMP done */
    int64_t env_steps;              /* vec_env steps since set-up, for messages */
    struct watchdog *dog;        /* over env steps: --step-timeout */
};

/* A mode's side on the observer, one per row of rl/config_fields.h's
 * RL_MODES: observer_mode_<name>, in its own file (observer_sync.c, observer_async.c);
 * setup.c's table is made from the list, so a mode without its entry
 * does not build (their declarations close this header). */
struct observer_mode {
    /* At set-up, after the envs and buffers: registers the functions the
     * agent calls in this mode for o's algorithm (and only those). 0, or
     * -1 with rl_last_error(). Under o->mu. */
    int (*serve)(struct observer *o);
};

/* ---- steps.c ---- */
/* The watchdog's verdict on a step that runs past --step-timeout: tells
 * the agent and exits (a plug-in stuck in C cannot be interrupted). */
void observer_step_overdue(void *u, double seconds);
/* Refuses a non-finite observation or reward of the vec_env step just
 * taken (reward NULL: a reset). 0 or -1 with rl_last_error(). */
int observer_check_step(struct observer *o, const float *reward, const float *final_obs);
/* rl_learner_loss of the current minibatch (prox: NULL, or the proximal
 * policy's answer), refused when not finite. */
struct tensor *observer_learner_loss(struct observer *o, const struct rl_policy_out *out,
                                     const struct rl_policy_out *prox, double weight, struct rl_update_stats *st);
/* The policy's `method` (RL_METHOD_ACT/EVALUATE) on obs (borrowed) through
 * the RRef; last marks a rollout's bootstrap call. 0 or -1. */
int observer_call_policy(struct observer *o, const char *method, struct tensor *obs, bool last, struct rl_policy_out *out);
/* T steps of every env into the rollout buffer, then advantages. 0 or -1. */
int observer_rollout(struct observer *o);
/* One episode of env 0 (an episodes algorithm), forwards recorded in the
 * current context: the algorithm's episode loss (o->ln.report filled), or
 * NULL with rl_last_error(). */
struct tensor *observer_episode(struct observer *o);
/* TRIB_DEBUG_DUMP (rl/debug_dump.h): the first minibatch. */
void observer_dump_minibatch(struct observer *o, double weight);

/* ---- observer_norm.c ---- */
/* Adopts the agent's statistics v (a map; nil: none sent) after checking
 * them against the run's dims; `what` names the message. 0 or -1. */
int observer_norm_adopt(struct observer *o, const struct rpc_value *v, const char *what);
/* What this observer's envs added to the statistics since the last call,
 * as the wire carries it (nil without normalisation); clears it. */
struct rpc_value observer_norm_take_delta(struct observer *o);

/* ---- setup.c ---- */
/* Registers set-up and get_state (o as their user data). Before rpc_init. */
void observer_serve_setup(struct observer *o);
/* Frees the env, the buffers and the policy's RRef: not set up. */
void observer_release(struct observer *o);

/* The modes' entries (observer_sync.c, observer_async.c): one per row of RL_MODES. */
#define OBSERVER_MODE_DECL(P, id, name, ...) extern const struct observer_mode observer_mode_##name;
RL_MODES(OBSERVER_MODE_DECL, RL_MODE)
#undef OBSERVER_MODE_DECL

#endif
