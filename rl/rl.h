/* rl/: the RL code shared by agent/ and observer/ (docs/design.md §6): only
 * those two programs (and bench/floor) include rl/. Below it, runfiles/
 * holds the files a run leaves behind (checkpoints, the policy file,
 * metrics, TensorBoard events); common/ the notice and watchdog threads.
 *
 * This header is rl/'s index: the module's last-error text, shared by every
 * rl/ file, and the list of its parts, each with its contract in its header.
 *
 *   The run's configuration
 *     config_fields.h struct rl_config: its fields (the one table), their
 *                     types and defaults; names no other rl/ header
 *     config_env_args.h  --env-arg, and opening the run's env with it
 *     config.h        presets, the command line, JSON, the wire form, the
 *                     checks, the run's description, the policy's
 *                     architecture it asks for (config.c, config_parse.c,
 *                     config_json.c, config_wire.c, config_check.c,
 *                     config_arch.c; config_internal.h between them); it
 *                     includes the two above and sits above the registry
 *   The algorithms and their arithmetic
 *     algo_table.h    what an algorithm is: struct rl_algo, one per file
 *                     (algo_reinforce.c, algo_a2c.c, algo_ppo.c)
 *     algo.h          the registry of them (algo.c names the built-ins)
 *     (what follows from a config's algorithm: algo_shape.h; the advantage
 *     estimators' table: estimators.h)
 *     rl_math.h       returns, GAE, normalisation, return windows and
 *                     minibatch permutations on plain float buffers
 *     losses.h        the PPO, A2C and REINFORCE losses from tensor ops
 *     rollout.h       a rollout buffer of T steps x B envs
 *     sample.h        action sampling from a caller-owned RNG
 *     learner.h       one observer's share of an algorithm, without RPC
 *     arch.h          the policy's forward on its architecture
 *                     (struct policy_arch, runfiles/policy_file.h)
 *   Between the agent and its observers
 *     messages.h      the RL messages: one struct and one pack/unpack each
 *     keys.h          the run key, --keys and --insecure
 *     last_word.h     how a process ended, and a crashing one's last word
 *   Checks and debugging
 *     finite.h        finiteness of observations, rewards, losses,
 *                     gradients and parameters
 *     debug_dump.h    TRIB_DEBUG_DUMP: an update's inputs for the tests */
#ifndef TRIB_RL_RL_H
#define TRIB_RL_RL_H

/* Message of the last recoverable error of an rl_* call on this thread
 * ("" if none). Every rl_* function that returns -1/NULL sets it. */
const char *rl_last_error(void);

/* Sets this thread's rl error text (printf-style); returns -1. */
int rl_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
