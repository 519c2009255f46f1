/* What an algorithm is (docs/design.md §6, docs/extending.md): its table,
 * `struct rl_algo`, the one thing an algorithm's file (algo_reinforce.c,
 * algo_a2c.c, algo_ppo.c, or one outside rl/) defines. The registry that
 * lists them is rl/algo.h (which includes this header); this one names
 * nothing of it, nor of the config's files above the struct
 * (rl/config_fields.h), so an algorithm's file sits below both. */
#ifndef TRIB_RL_ALGO_TABLE_H
#define TRIB_RL_ALGO_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "rl/losses.h"
#include "tensor/tensor.h"

struct rl_config;                   /* rl/config_fields.h */

enum rl_shape { RL_SHAPE_EPISODES, RL_SHAPE_ROLLOUTS, RL_SHAPE_COUNT };

/* The figures an algorithm's updates report (rl_update_stats), beside the
 * policy loss every one has. */
enum {
    RL_STATS_VALUE = 1 << 0,        /* value loss, entropy, explained variance */
    RL_STATS_CLIP = 1 << 1,         /* approx KL, clip fraction */
};

/* A minibatch's loss inputs (RL_SHAPE_ROLLOUTS): the policy's recorded
 * answer for the minibatch's observations (logp and entropy of the taken
 * actions, values: NULL without a value head) and the rollout's constants
 * (old log-probs, advantages, returns, old values; n rows each).
 * prox_logp: NULL, or (an algorithm whose table sets `prox`) the log-probs
 * of the taken actions under the proximal policy (sync --overlap's
 * decoupled correction: the policy at the start of this rollout's updates). */
struct rl_mb_loss_in {
    struct tensor *logp, *entropy, *values;
    const float *old_logp, *prox_logp, *adv, *ret, *old_values;
    int n;
    double weight;                  /* the caller's share of the update */
    const struct rl_config *cfg;
};

struct rl_algo {
    const char *name;               /* --algo's value, config.json's and the wire's */
    const char *title;              /* in messages: "PPO" */
    const char *about;              /* one line for --help */
    enum rl_shape shape;            /* what a rollout records and how an iteration goes */
    bool value_head;                /* its heads: a critic beside the actor */
    bool discrete_only;             /* refuses a box action space */
    unsigned stats;                 /* RL_STATS_* its updates report */
    const char *stats_legend;       /* what the progress line's loss columns mean */
    const char *estimator;          /* RL_SHAPE_ROLLOUTS: its advantage estimator's name (rl/estimators.h) */
    bool prox;                      /* its mb_loss takes in->prox_logp (a ratio whose clip can be centred on a
                                     * proximal policy): sync --overlap's --overlap-correction decoupled applies */
    /* its loss: RL_SHAPE_ROLLOUTS a minibatch's (stats: unweighted terms);
     * RL_SHAPE_EPISODES an episode's from its n steps' log-probs [n,1] and
     * rewards. A new scalar tensor, or NULL with rl_last_error(). */
    struct tensor *(*mb_loss)(const struct rl_mb_loss_in *in, struct rl_loss_stats *st);
    struct tensor *(*ep_loss)(struct tensor *logp, const float *rewards, int n, const struct rl_config *cfg);
    /* the run's shape ("2 observers x 8 envs x 5 steps") and its update's
     * hyper-parameters in words, for the run's first line
     * (rl_config_describe); rl_describe_episodes and rl_describe_rollouts
     * (rl/algo_describe.h) do for most */
    void (*describe)(const struct rl_config *cfg, char *shape, size_t shape_cap, char *update, size_t update_cap);
    /* its config checks (NULL: none): 0, or -1 with rl_last_error() naming the flag */
    int (*check)(const struct rl_config *cfg);
};

#endif
