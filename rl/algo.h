/* The algorithm table (docs/design.md §6, docs/extending.md): one
 * `struct rl_algo` per algorithm, each in a file of its own
 * (algo_reinforce.c, algo_a2c.c, algo_ppo.c), and a registry. cfg->algo is
 * an index into the registry: the built-ins keep their numbers
 * (RL_ALGO_REINFORCE 0, RL_ALGO_A2C 1, RL_ALGO_PPO 2), so old config.json
 * files, checkpoints and the wire mean the same; the wire and config.json
 * carry the name, which an observer resolves in its own registry.
 *
 * This header and algo.c are the registry and read no config (so
 * rl/config.c may use them); what follows from a config's algorithm (its
 * shape's rollout length, checks, reports) is rl/algo_shape.h's.
 *
 * Nothing outside these files tests which algorithm runs: callers read the
 * table (its heads, its statistics, its loss, its checks) and drive it
 * through rl_algo_drive, which picks the caller's driver for the
 * algorithm's shape from a table the caller fills:
 *   RL_SHAPE_EPISODES: each observer plays one whole episode with a
 *     recorded forward per step and returns the episode's loss
 *     (ep_loss); the agent sums them, one backward, one step;
 *   RL_SHAPE_ROLLOUTS: each observer steps its B envs T steps into a
 *     rollout buffer, an advantage estimator (rl/estimators.h) fills
 *     advantages and returns, then epochs x minibatches of updates whose
 *     loss is mb_loss.
 * A mode (sync: the agent's iteration; async: the observer's loop) and an
 * algorithm combine as mode's drivers[algo->shape]: no if-chain. */
#ifndef TRIB_RL_ALGO_H
#define TRIB_RL_ALGO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl/losses.h"
#include "tensor/tensor.h"

struct rl_config;                   /* rl/config.h: this header's file (the registry) reads none of it */

/* The built-ins' indices in the registry: cfg->algo's numbers since before
 * the registry (config.json, checkpoints). */
enum rl_algo_builtin { RL_ALGO_REINFORCE, RL_ALGO_A2C, RL_ALGO_PPO };

/* Steps in an episodes algorithm's episode of an env without a time limit. */
#define RL_DEFAULT_MAX_EPISODE 10000

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
 * (old log-probs, advantages, returns, old values; n rows each). */
struct rl_mb_loss_in {
    struct tensor *logp, *entropy, *values;
    const float *old_logp, *adv, *ret, *old_values;
    int n;
    double weight;                  /* the caller's share of the update */
    const struct rl_config *cfg;
};

/* One caller's driver per shape, filled by the caller (the agent's sync
 * mode, the observer's async loop and set-up, the floor): rl/ never calls
 * up into them except through this table. */
struct rl_drivers {
    int (*drive[RL_SHAPE_COUNT])(void *ctx);
    void *ctx;
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

/* The registry. rl_algo_get: the algorithm of index i, NULL past the last
 * registered one (or below 0). rl_algo_name(i): its name, NULL likewise
 * (--algo's choices are listed by calling it until NULL). rl_algo_find: the
 * index of the one named `name`, or -1 with rl_last_error() listing them. */
const struct rl_algo *rl_algo_get(int i);
const char *rl_algo_name(int i);
int rl_algo_find(const char *name);

/* Registers an algorithm defined outside rl/ (the table is borrowed: it
 * must outlive the process's use of it): its index, or -1 with
 * rl_last_error() (no name, a name taken, a hook its shape needs missing,
 * the registry full). Its estimator's name is checked with the config
 * (rl_algo_check). Call it before parsing a config naming it, in the
 * agent and in every observer (they resolve it by name). Not thread-safe:
 * register at start-up. */
int rl_algo_register(const struct rl_algo *algo);

/* The built-ins (their own files). */
extern const struct rl_algo rl_algo_reinforce, rl_algo_a2c, rl_algo_ppo;

/* Runs d->drive[a->shape](d->ctx): the caller's way of doing one thing
 * (an iteration, a set-up) for the algorithm's shape. A missing driver is
 * refused (-1 with rl_last_error()). */
int rl_algo_drive(const struct rl_algo *a, const struct rl_drivers *d);

#endif
