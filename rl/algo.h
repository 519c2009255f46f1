/* The algorithm registry (docs/design.md §6, docs/extending.md): one
 * `struct rl_algo` (rl/algo_table.h) per algorithm, each in a file of its
 * own (algo_reinforce.c, algo_a2c.c, algo_ppo.c), and this registry of
 * them. cfg->algo is an index into the registry: the built-ins keep their
 * numbers (RL_ALGO_REINFORCE 0, RL_ALGO_A2C 1, RL_ALGO_PPO 2,
 * rl/config_fields.h), so old config.json files, checkpoints and the wire
 * mean the same; the wire and config.json carry the name, which an
 * observer resolves in its own registry.
 *
 * This header and algo.c are the registry: algo.c names the built-ins, so
 * they (and everything an algorithm's file uses) sit below it and name
 * nothing of it: an algorithm's file uses rl/algo_table.h and the config's
 * struct (rl/config_fields.h). rl/config.c, which lists --algo's choices
 * and describes a run, sits above it. What follows from a config's
 * algorithm (its shape's rollout length, checks, reports) is
 * rl/algo_shape.h's.
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

#include "rl/algo_table.h"           /* struct rl_algo, enum rl_shape, RL_STATS_* */
#include "rl/config_fields.h"          /* RL_BUILTIN_ALGOS: the built-ins' one list */

struct rl_config;                   /* rl/config_fields.h: this header's file (the registry) reads none of it */

/* Steps in an episodes algorithm's episode of an env without a time limit. */
#define RL_DEFAULT_MAX_EPISODE 10000

/* One caller's driver per shape, filled by the caller (the agent's sync
 * mode, the observer's async loop and set-up, the floor): rl/ never calls
 * up into them except through this table. */
struct rl_drivers {
    int (*drive[RL_SHAPE_COUNT])(void *ctx);
    void *ctx;
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

/* The built-ins (their own files), one per row of RL_BUILTIN_ALGOS
 * (rl/config_fields.h). */
#define RL_ALGO_DECL(id, name) extern const struct rl_algo rl_algo_##name;
RL_BUILTIN_ALGOS(RL_ALGO_DECL)
#undef RL_ALGO_DECL

/* The names of the registered algorithms of one shape, "a2c, ppo", into
 * out (cap bytes; cut short if it must be): for messages that say which
 * algorithms a flag goes with. Returns out. */
const char *rl_algo_names_of_shape(enum rl_shape shape, char *out, size_t cap);

/* Runs d->drive[a->shape](d->ctx): the caller's way of doing one thing
 * (an iteration, a set-up) for the algorithm's shape. A missing driver is
 * refused (-1 with rl_last_error()). */
int rl_algo_drive(const struct rl_algo *a, const struct rl_drivers *d);

#endif
