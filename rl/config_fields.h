/* The run configuration's fields: the one table that rl/config.h's struct
 * rl_config, the command line and its --help, --config's JSON keys, a run's
 * config.json and the wire form to the observers are all made from. A new
 * setting is one row here (and, when it has a range, a line in
 * rl_config_check).
 *
 *   X(name, kind, ctype, dim, default, choices, flags, help)
 *
 * name     the struct's field, the JSON and wire key; the flag is --name
 *          with '_' written '-' (envs_per_observer: --envs-per-observer).
 * kind     INT, I64, U64, DBL, BOOL, STR (a char array of dim), ENUM (an
 *          int-valued enum whose names are choices(0), choices(1), ... until
 *          NULL), LIST (struct rl_int_list: "64,64" or [64, 64]) or ENVARGS
 *          ("KEY=VALUE" lines, --env-arg repeatable).
 * default  the value every preset starts from (rl_config_base).
 * flags    RLF_ENV: belongs to the env: where --env names another env than
 *          the preset's, it takes its default unless given too;
 *          RLF_CLI: on the command line only (not in JSON, not on the wire);
 *          RLF_NOJSON: not in config.json (the wire has it);
 *          RLF_OWN_DEFAULT: the help says the default (worked out at parse).
 * This header also holds what the table is made of and what it makes:
 * the fields' own types (the enums, struct rl_int_list) and struct
 * rl_config. It names nothing of rl/config.h nor of the algorithm registry
 * (rl/algo.h), so the algorithms and everything below the registry read a
 * config without reaching the files that parse, check or describe one.
 * Included by rl/config.h; the descriptors are in config.c. */
#ifndef TRIB_RL_CONFIG_FIELDS_H
#define TRIB_RL_CONFIG_FIELDS_H

#include <stdbool.h>
#include <stdint.h>

#define RL_MAX_HIDDEN 4
#define RL_DEFAULT_STEP_TIMEOUT_S 60.0   /* --step-timeout */

/* The built-in algorithms' indices in the registry (rl/algo.h): cfg->algo's
 * numbers since before the registry (config.json, checkpoints). */
enum rl_algo_builtin { RL_ALGO_REINFORCE, RL_ALGO_A2C, RL_ALGO_PPO };
enum rl_mode { RL_MODE_SYNC, RL_MODE_ASYNC };
enum rl_activation { RL_ACT_TANH, RL_ACT_RELU };   /* between hidden layers */
enum rl_device { RL_DEVICE_CPU, RL_DEVICE_CUDA };  /* where the agent keeps the policy */

/* A list-typed field (hidden: the hidden layers' sizes). */
struct rl_int_list {
    int n;
    int v[RL_MAX_HIDDEN];
};

#define RLF_ENV 1u
#define RLF_CLI 2u
#define RLF_NOJSON 4u
#define RLF_OWN_DEFAULT 8u

#define RL_HIDDEN_DEFAULT { 2, { 64, 64 } }

/* clang-format off */
#define RL_CONFIG_FIELDS(X) \
    X(preset, STR, char, [32], "", NULL, 0, \
      "the preset this run started from (--preset NAME)") \
    X(algo, ENUM, int, , RL_ALGO_PPO, choice_algo, 0, \
      "the algorithm") \
    X(mode, ENUM, enum rl_mode, , RL_MODE_SYNC, choice_mode, 0, \
      "sync (the agent drives; one update over every observer's samples,\n" \
      "all from one policy version) or async (each observer updates on its own)") \
    X(env, STR, char, [512], "CartPole-v1", NULL, 0, \
      "a built-in id (CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1, and\n" \
      "with MuJoCo the v4 suite: Hopper-v4, ...; trib-env --list names them)\n" \
      "or the path of a plug-in .so (envs/README.md)") \
    X(env_arg, ENVARGS, char, [1024], "", NULL, 0, \
      "KEY=VALUE: an argument of a plug-in env (repeatable), handed to its\n" \
      "entry point on the agent and on every observer, and saved with the run") \
    X(observers, INT, int, , 1, NULL, 0, "observer processes (1..64)") \
    X(envs_per_observer, INT, int, , 4, NULL, 0, "B: envs each observer steps in one vec_env") \
    X(steps_per_rollout, INT, int, , 128, NULL, 0, "T: steps of each env per update (A2C: n of n-step)") \
    X(seed, U64, uint64_t, , 1, NULL, 0, "seed of the policy's initialisation, the envs and sampling") \
    X(hidden, LIST, struct rl_int_list, , RL_HIDDEN_DEFAULT, NULL, 0, "hidden layer sizes, e.g. 64,64") \
    X(activation, ENUM, enum rl_activation, , RL_ACT_TANH, choice_activation, 0, \
      "the nonlinearity between hidden layers") \
    X(dropout, DBL, double, , 0.0, NULL, 0, "dropout after each hidden layer") \
    X(init_log_std, DBL, double, , 0.0, NULL, 0, "a Gaussian head's initial log standard deviation") \
    X(device, ENUM, enum rl_device, , RL_DEVICE_CPU, choice_device, RLF_OWN_DEFAULT, \
      "where the agent keeps the policy (default: cuda when a GPU is present\n" \
      "and the binary has the CUDA backend, else cpu)") \
    X(optimizer, ENUM, int, , OPTIM_ADAM, choice_optimizer, 0, "the optimizer") \
    X(opt_eps, DBL, double, , 1e-5, NULL, 0, "the optimizer's eps (Adam, RMSprop), in (0, 1)") \
    X(lr, DBL, double, , 2.5e-4, NULL, 0, "learning rate, in [1e-10, 1]") \
    X(anneal_lr, BOOL, bool, , true, NULL, 0, "decay the lr linearly to 0 over --max-steps") \
    X(gamma, DBL, double, , 0.99, NULL, 0, "discount") \
    X(gae_lambda, DBL, double, , 0.95, NULL, 0, "GAE lambda (1: n-step returns)") \
    X(minibatches, INT, int, , 4, NULL, 0, "minibatches per epoch (each observer splits its samples)") \
    X(epochs, INT, int, , 4, NULL, 0, "epochs over each rollout (PPO)") \
    X(clip, DBL, double, , 0.2, NULL, 0, "PPO clip range (ratio and value)") \
    X(ent_coef, DBL, double, , 0.01, NULL, 0, "entropy bonus coefficient, in [0, 10]") \
    X(vf_coef, DBL, double, , 0.5, NULL, 0, "value loss coefficient, in [0, 10]") \
    X(max_grad_norm, DBL, double, , 0.5, NULL, 0, "global gradient-norm clip (0: none)") \
    X(norm_adv, BOOL, bool, , true, NULL, 0, "normalise advantages per minibatch") \
    X(clip_vloss, BOOL, bool, , true, NULL, 0, "clip the value loss as CleanRL") \
    X(reward_scale, DBL, double, , 1.0, NULL, 0, "rewards are multiplied by this for learning") \
    X(norm_obs, BOOL, bool, , false, NULL, 0, \
      "normalise observations by the run's running mean and variance (one set\n" \
      "for every observer, as Gymnasium's NormalizeObservation), clipped to\n" \
      "--clip-obs; saved in checkpoints and the policy file") \
    X(norm_reward, BOOL, bool, , false, NULL, 0, \
      "scale rewards by the running std of each env's discounted return (as\n" \
      "Gymnasium's NormalizeReward), clipped to --clip-reward; returns are\n" \
      "reported raw") \
    X(clip_obs, DBL, double, , 10.0, NULL, 0, "--norm-obs: normalised observations are clipped to [-this, this]") \
    X(clip_reward, DBL, double, , 10.0, NULL, 0, "--norm-reward: scaled rewards are clipped to [-this, this]") \
    X(max_policy_lag, INT, int, , 0, NULL, RLF_OWN_DEFAULT, \
      "async: drop (and count) an update whose samples are more than this\n" \
      "many policy versions behind (0: no limit; default: 32 x observers\n" \
      "x epochs x minibatches, REINFORCE 32 x observers, at least 1000)") \
    X(vtrace, BOOL, bool, , false, NULL, 0, \
      "async PPO/A2C: V-trace-corrected advantages and value targets\n" \
      "(IMPALA) from the policy at the update, not the one that acted") \
    X(rho_bar, DBL, double, , 1.0, NULL, 0, "V-trace: truncation of the importance weights of the advantages") \
    X(c_bar, DBL, double, , 1.0, NULL, 0, "V-trace: truncation of the traces") \
    X(max_batch, INT, int, , 4096, NULL, 0, "the agent merges concurrent act calls up to this many rows") \
    X(max_wait_us, INT, int, , 2000, NULL, 0, "... waiting at most this long for more calls") \
    X(max_steps, I64, int64_t, , 500000, NULL, RLF_ENV, \
      "stop (exit 1) after this many env steps of the whole run (0: no limit)") \
    X(max_seconds, DBL, double, , 0.0, NULL, 0, \
      "stop (exit 1) after this many seconds of this process, the wait for\n" \
      "the observers included (0: no limit; a resumed run gets this many more)") \
    X(max_updates, I64, int64_t, , 0, NULL, 0, "stop (exit 1) after this many optimizer updates (0: no limit)") \
    X(target, DBL, double, , NAN, NULL, RLF_ENV, \
      "solved (exit 0) when the mean return of the last 100 episodes\n" \
      "reaches this, for every algorithm") \
    X(stop_at_target, BOOL, bool, , true, NULL, 0, \
      "stop (exit 0) once --target is reached (off: the run goes on to its\n" \
      "budget, as CleanRL's runs and the mujoco presets do)") \
    X(running_reward, BOOL, bool, , false, NULL, 0, \
      "judge \"solved\" by PyTorch's example's running reward instead") \
    X(log_every, DBL, double, , 2.0, NULL, 0, "seconds between progress lines") \
    X(heartbeat_timeout, INT, int, , 15000, NULL, 0, "ms of silence after which a peer is dead") \
    X(step_timeout, DBL, double, , RL_DEFAULT_STEP_TIMEOUT_S, NULL, 0, \
      "seconds an env step (or reset) may run on an observer before it gives\n" \
      "up: it says so and exits, and the agent counts it lost (0: no limit)") \
    X(quiet, BOOL, bool, , false, NULL, 0, "no progress lines (the summary line is still printed)") \
    X(logdir, STR, char, [512], "", NULL, 0, \
      "write metrics.csv, metrics.jsonl, config.json, TensorBoard events\n" \
      "and, at the end, policy.safetensors into this directory (one run per\n" \
      "directory: one that holds a run is refused; see --resume, --overwrite)") \
    X(checkpoint_every, I64, int64_t, , 0, NULL, 0, \
      "with --logdir: a checkpoint every N updates into LOGDIR/checkpoints\n" \
      "(the newest 3 kept; one is always written at the end, Ctrl-C too)") \
    X(eval_every, I64, int64_t, , 0, NULL, 0, \
      "evaluate the policy every N updates (0: never), on the agent: greedy\n" \
      "actions, normalisation frozen, --eval-episodes episodes of envs seeded\n" \
      "--seed + 1000 (tributary-eval --seed SEED+1000 gives the same number);\n" \
      "logs eval_return and, with --logdir, keeps the best policy so far in\n" \
      "LOGDIR/policy_best.safetensors") \
    X(eval_episodes, INT, int, , 10, NULL, 0, \
      "episodes of each --eval-every evaluation (one env each, at most 64 at\n" \
      "once; an env without max_episode_steps is cut at 10000 steps; a stop\n" \
      "signal or --max-seconds abandons the evaluation)") \
    X(resume, STR, char, [512], "", NULL, RLF_NOJSON, \
      "continue the run whose --logdir is DIR from its newest valid checkpoint,\n" \
      "with every flag of that run (DIR/config.json); flags given here override\n" \
      "them (e.g. a larger --max-steps), but not the env, algorithm, mode,\n" \
      "observers, envs, steps per rollout or architecture") \
    X(overwrite, BOOL, bool, , false, NULL, RLF_CLI, \
      "with --logdir DIR holding another run: remove that run's files\n" \
      "(metrics, config.json, event files, checkpoints, policy) first")
/* clang-format on */

/* The run configuration: one member per row of the table above, which says
 * what each is, its default and its flag. */
#define RL_FIELD_DECL(name, kind, ctype, dim, dflt, choices, flags, help) ctype name dim;
struct rl_config {
    RL_CONFIG_FIELDS(RL_FIELD_DECL)
};
#undef RL_FIELD_DECL

#endif
