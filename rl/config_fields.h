/* The run configuration's fields: the one table that rl/config.h's struct
 * rl_config, the command line and its --help, --config's JSON keys, a run's
 * config.json and the wire form to the observers are all made from. A new
 * setting is one row here (and, when it has a range, a line in
 * rl_config_check).
 *
 *   X(name, kind, ctype, dim, default, choices, flags, example, help)
 *
 * name     the struct's field, the JSON and wire key; the flag is --name
 *          with '_' written '-' (envs_per_observer: --envs-per-observer).
 * kind     INT, I64, U64, DBL, BOOL, STR (a char array of dim), ENUM (an
 *          int-valued enum whose names are choices(0), choices(1), ... until
 *          NULL), LIST (struct rl_int_list: "64,64" or [64, 64]) or ENVARGS
 *          ("KEY=VALUE" lines, --env-arg repeatable).
 * default  the value every preset starts from (rl_config_base).
 * example  a value other than the default preset's (ppo-fast), as the command line writes it
 *          ("true"/"false" for a BOOL), such that all the examples together
 *          make a valid config: tests/rl/test_rl_config sets every field to
 *          its example and round-trips it through the command line, JSON
 *          and the wire (NULL: a field the test leaves alone, resume and
 *          overwrite, which name the run's own directory).
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

/* An enum field's values and their names, as one list of rows
 * X(P, ID, name, ...): RL_ENUM(type, P, LIST) makes `enum type { P_ID, ...,
 * P_COUNT }` and `type_choice(i)`, the name of value i (NULL past the
 * last), which is the field's choices column. Columns after the name are
 * the list's own (RL_MODES' lags). A value is one row: the enum, its
 * name in --help, errors, config.json and the wire, and every count follow. */
#define RL_ENUM_VALUE(P, id, name, ...) P##_##id,
#define RL_ENUM_NAME(P, id, name, ...) #name,
#define RL_ENUM(type, P, LIST)                                                                                   \
    enum type { LIST(RL_ENUM_VALUE, P) P##_COUNT };                                                             \
    static inline const char *type##_choice(int i)                                                               \
    {                                                                                                            \
        static const char *const names[] = { LIST(RL_ENUM_NAME, P) };                                            \
        _Static_assert(sizeof names / sizeof names[0] == P##_COUNT, "a name per value");                        \
        return i >= 0 && i < P##_COUNT ? names[i] : NULL;                                                        \
    }

/* The training modes: X(P, ID, name, lags). lags: an update may learn from
 * samples of an older policy than the one it updates (V-trace corrects
 * that, so --vtrace needs such a mode). The agent's side of each mode is
 * agent_mode_<name> (agent/sync.c, agent/async.c) and the observer's
 * observer_mode_<name> (observer/): a row without them does not build. */
#define RL_MODES(X, P) X(P, SYNC, sync, false) X(P, ASYNC, async, true)
RL_ENUM(rl_mode, RL_MODE, RL_MODES)
#define RL_MODE_LAGS(P, id, name, lags) lags,
static inline bool rl_mode_lags(enum rl_mode m)
{
    static const bool lags[] = { RL_MODES(RL_MODE_LAGS, RL_MODE) };
    return (unsigned)m < RL_MODE_COUNT && lags[m];
}
#undef RL_MODE_LAGS

#define RL_ACTIVATIONS(X, P) X(P, TANH, tanh) X(P, RELU, relu)
RL_ENUM(rl_activation, RL_ACT, RL_ACTIVATIONS)    /* between hidden layers */
#define RL_INITS(X, P) X(P, PYTORCH, pytorch) X(P, ORTHOGONAL, orthogonal)
RL_ENUM(rl_init, RL_INIT, RL_INITS)                /* how a new policy's layers are drawn */
#define RL_DEVICES(X, P) X(P, CPU, cpu) X(P, CUDA, cuda)
RL_ENUM(rl_device, RL_DEVICE, RL_DEVICES)          /* where the agent keeps the policy */
/* sync --overlap's correction of a lagged rollout (docs/design.md §6 "Overlap") */
#define RL_OVERLAP_CORRECTIONS(X, P) X(P, DECOUPLED, decoupled) X(P, NONE, none)
RL_ENUM(rl_overlap_correction, RL_OVERLAP_CORR, RL_OVERLAP_CORRECTIONS)

/* The built-in algorithms, X(ID, name), in their registry order: cfg->algo's
 * numbers since before the registry (config.json, checkpoints), so a row
 * is only ever added at the end. Each is `rl_algo_<name>`, the table in
 * rl/algo_<name>.c (rl/algo.c registers them from this list: a row without
 * its table does not link). Algorithms defined elsewhere are registered at
 * run time (rl_algo_register) and take the numbers after these. */
#define RL_BUILTIN_ALGOS(X) X(REINFORCE, reinforce) X(A2C, a2c) X(PPO, ppo)
#define RL_ALGO_ENUM_ROW(id, name) RL_ALGO_##id,
enum rl_algo_builtin { RL_BUILTIN_ALGOS(RL_ALGO_ENUM_ROW) RL_ALGO_BUILTIN_COUNT };
#undef RL_ALGO_ENUM_ROW

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
    X(preset, STR, char, [32], "", NULL, 0, "a2c", \
      "the preset this run started from (--preset NAME)") \
    X(algo, ENUM, int, , RL_ALGO_PPO, choice_algo, 0, "a2c", \
      "the algorithm") \
    X(mode, ENUM, enum rl_mode, , RL_MODE_SYNC, rl_mode_choice, 0, "async", \
      "sync (the agent drives; one update over every observer's samples,\n" \
      "all from one policy version) or async (each observer updates on its own)") \
    X(env, STR, char, [512], "CartPole-v1", NULL, 0, "Pendulum-v1", \
      "a built-in id (CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1, and\n" \
      "with MuJoCo the v4 suite: Hopper-v4, ...; trib-env --list names them)\n" \
      "or the path of a plug-in .so (envs/README.md)") \
    X(env_arg, ENVARGS, char, [1024], "", NULL, 0, "k=v", \
      "KEY=VALUE: an argument of a plug-in env (repeatable), handed to its\n" \
      "entry point on the agent and on every observer, and saved with the run\n" \
      "as typed (tributary-eval and --resume reuse it): a relative path in a\n" \
      "value is the plug-in's to open from the current directory, so give it\n" \
      "absolute (model=$PWD/robot.xml) to evaluate or resume from elsewhere") \
    X(observers, INT, int, , 1, NULL, 0, "3", "observer processes (1..64)") \
    X(envs_per_observer, INT, int, , 4, NULL, 0, "6", "B: envs each observer steps in one vec_env") \
    X(steps_per_rollout, INT, int, , 128, NULL, 0, "12", "T: steps of each env per update (A2C: n of n-step)") \
    X(seed, U64, uint64_t, , 1, NULL, 0, "12345678901", "seed of the policy's initialisation, the envs and sampling") \
    X(hidden, LIST, struct rl_int_list, , RL_HIDDEN_DEFAULT, NULL, 0, "16,8,4", "hidden layer sizes, e.g. 64,64") \
    X(activation, ENUM, enum rl_activation, , RL_ACT_TANH, rl_activation_choice, 0, "relu", \
      "the nonlinearity between hidden layers") \
    X(dropout, DBL, double, , 0.0, NULL, 0, "0.25", "dropout after each hidden layer") \
    X(init_log_std, DBL, double, , 0.0, NULL, 0, "-0.5", "a Gaussian head's initial log standard deviation") \
    X(init, ENUM, enum rl_init, , RL_INIT_PYTORCH, rl_init_choice, 0, "orthogonal", \
      "a new policy's weights: pytorch (nn.Linear's default, U(+-1/sqrt(in)))\n" \
      "or orthogonal (CleanRL's layer_init, SB3's ortho_init: hidden layers\n" \
      "gain sqrt(2), the actor's output 0.01, the critic's 1, biases 0)") \
    X(device, ENUM, enum rl_device, , RL_DEVICE_CPU, rl_device_choice, RLF_OWN_DEFAULT, "cpu", \
      "where the agent keeps the policy (default: cuda when a GPU is present\n" \
      "and the binary has the CUDA backend, else cpu)") \
    X(optimizer, ENUM, int, , OPTIM_ADAM, choice_optimizer, 0, "adamw", "the optimizer") \
    X(opt_eps, DBL, double, , 1e-5, NULL, 0, "1e-7", "the optimizer's eps (Adam, RMSprop), in (0, 1)") \
    X(lr, DBL, double, , 2.5e-4, NULL, 0, "0.00123", "learning rate, in [1e-10, 1]") \
    X(anneal_lr, BOOL, bool, , true, NULL, 0, "false", \
      "decay the lr linearly to 0 over --max-steps (a --resume with another\n" \
      "--max-steps goes on down from the lr it had there, one with another\n" \
      "--lr from that lr, to 0 at the end)") \
    X(gamma, DBL, double, , 0.99, NULL, 0, "0.97", "discount") \
    X(gae_lambda, DBL, double, , 0.95, NULL, 0, "0.9", "GAE lambda (1: n-step returns)") \
    X(minibatches, INT, int, , 4, NULL, 0, "3", "minibatches per epoch: an update has observers x envs x steps /\n" \
      "minibatches samples in both modes (async: each observer's rollout in\n" \
      "minibatches / observers, at least 1; the run's first line says when\n" \
      "--observers does not divide it and how async's differ)") \
    X(epochs, INT, int, , 4, NULL, 0, "7", "epochs over each rollout (PPO)") \
    X(clip, DBL, double, , 0.2, NULL, 0, "0.3", "PPO clip range (ratio and value)") \
    X(ent_coef, DBL, double, , 0.01, NULL, 0, "0.02", "entropy bonus coefficient, in [0, 10]") \
    X(vf_coef, DBL, double, , 0.5, NULL, 0, "0.7", "value loss coefficient, in [0, 10]") \
    X(max_grad_norm, DBL, double, , 0.5, NULL, 0, "0.9", "global gradient-norm clip (0: none)") \
    X(norm_adv, BOOL, bool, , true, NULL, 0, "false", "normalise advantages per minibatch") \
    X(clip_vloss, BOOL, bool, , true, NULL, 0, "false", "clip the value loss as CleanRL") \
    X(reward_scale, DBL, double, , 1.0, NULL, 0, "0.5", "rewards are multiplied by this for learning") \
    X(norm_obs, BOOL, bool, , false, NULL, 0, "true", \
      "normalise observations by the run's running mean and variance (one set\n" \
      "for every observer, as Gymnasium's NormalizeObservation), clipped to\n" \
      "--clip-obs; saved in checkpoints and the policy file") \
    X(norm_reward, BOOL, bool, , false, NULL, 0, "true", \
      "scale rewards by the running std of each env's discounted return (as\n" \
      "Gymnasium's NormalizeReward), clipped to --clip-reward; returns are\n" \
      "reported raw") \
    X(clip_obs, DBL, double, , 10.0, NULL, 0, "7", "--norm-obs: normalised observations are clipped to [-this, this]") \
    X(clip_reward, DBL, double, , 10.0, NULL, 0, "6", "--norm-reward: scaled rewards are clipped to [-this, this]") \
    X(max_policy_lag, INT, int, , 0, NULL, RLF_OWN_DEFAULT, "77", \
      "async: drop (and count) an update whose samples are more than this\n" \
      "many policy versions behind (0: no limit; default: 32 x observers\n" \
      "x epochs x minibatches, REINFORCE 32 x observers, at least 1000)") \
    X(vtrace, BOOL, bool, , false, NULL, 0, "true", \
      "async PPO/A2C: V-trace-corrected advantages and value targets\n" \
      "(IMPALA) from the policy at the update, not the one that acted") \
    X(rho_bar, DBL, double, , 1.0, NULL, 0, "0.8", "V-trace: truncation of the importance weights of the advantages") \
    X(c_bar, DBL, double, , 1.0, NULL, 0, "0.9", "V-trace: truncation of the traces") \
    X(max_batch, INT, int, , 4096, NULL, 0, "999", "the agent merges concurrent act calls up to this many rows") \
    X(max_wait_us, INT, int, , 2000, NULL, 0, "123", "... waiting at most this long for more calls") \
    X(overlap, BOOL, bool, , false, NULL, 0, "true", \
      "sync mode, a rollouts algorithm: observers collect the next rollout\n" \
      "while the agent learns from this one (a policy lag of one rollout,\n" \
      "corrected as --overlap-correction says); no effect in async mode or\n" \
      "for an episodes algorithm") \
    X(overlap_correction, ENUM, enum rl_overlap_correction, , RL_OVERLAP_CORR_DECOUPLED, rl_overlap_correction_choice, \
      0, "none", \
      "--overlap only: how PPO learns from a rollout collected one rollout\n" \
      "behind: decoupled (decoupled PPO, Hilton et al. 2021: the ratio's clip\n" \
      "centred on the policy at the start of the rollout's updates, each\n" \
      "sample weighted by its probability under that policy over the\n" \
      "behaviour policy's) or none (the clip centred on the behaviour policy,\n" \
      "as without overlap); ignored by an algorithm without a ratio (A2C)") \
    X(double_buffer, BOOL, bool, , false, NULL, 0, "true", \
      "a rollouts algorithm: each observer's envs in two halves, one\n" \
      "stepping while the other's act call is in flight (Sample Factory's\n" \
      "double buffering); costs two act calls and forwards of half the rows\n" \
      "per step instead of one; results may differ from the single-buffer\n" \
      "run's, still bit-reproducible per seed in sync mode; needs an even\n" \
      "--envs-per-observer, not an episodes algorithm") \
    X(max_steps, I64, int64_t, , 500000, NULL, RLF_ENV, "4242", \
      "stop after this many env steps of the whole run (0: no limit): exit 0\n" \
      "without a target, 1 with one missed") \
    X(max_seconds, DBL, double, , 0.0, NULL, 0, "3.5", \
      "stop (exit as --max-steps) after this many seconds of this process,\n" \
      "the wait for the observers included (0: no limit; a resumed run gets\n" \
      "this many more; passed before they joined: exit 1)") \
    X(max_updates, I64, int64_t, , 0, NULL, 0, "17", \
      "stop (exit as --max-steps) after this many optimizer updates (0: no limit)") \
    X(target, DBL, double, , NAN, NULL, RLF_ENV, "-123.5", \
      "solved (exit 0) when the mean return of the last 100 episodes\n" \
      "reaches this, for every algorithm") \
    X(stop_at_target, BOOL, bool, , true, NULL, 0, "false", \
      "stop (exit 0) once --target is reached (off: the run goes on to its\n" \
      "budget, as CleanRL's runs and the mujoco presets do)") \
    X(running_reward, BOOL, bool, , false, NULL, 0, "true", \
      "judge \"solved\" by PyTorch's example's running reward instead") \
    X(log_every, DBL, double, , 2.0, NULL, 0, "0.5", "seconds between progress lines") \
    X(heartbeat_timeout, INT, int, , 15000, NULL, 0, "2500", "ms of silence after which a peer is dead") \
    X(step_timeout, DBL, double, , RL_DEFAULT_STEP_TIMEOUT_S, NULL, 0, "9.5", \
      "seconds an env step (or reset) may run on an observer before it gives\n" \
      "up: it says so and exits, and the agent counts it lost (0: no limit)") \
    X(quiet, BOOL, bool, , false, NULL, 0, "true", "no progress lines (the summary line is still printed)") \
    X(logdir, STR, char, [512], "", NULL, 0, "/tmp/nowhere-cfg", \
      "write metrics.csv, metrics.jsonl, config.json, TensorBoard events\n" \
      "and, at the end, policy.safetensors into this directory (one run per\n" \
      "directory: one that holds a run is refused; see --resume, --overwrite)") \
    X(checkpoint_every, I64, int64_t, , 0, NULL, 0, "5", \
      "with --logdir: a checkpoint every N updates into LOGDIR/checkpoints\n" \
      "(the newest 3 kept; one is always written at the end, Ctrl-C too)") \
    X(eval_every, I64, int64_t, , 0, NULL, 0, "3", \
      "evaluate the policy every N env steps (0: never; as CleanRL's and SB3's\n" \
      "eval_freq: at the end of the update whose steps cross a multiple of N),\n" \
      "on the agent: greedy actions, normalisation frozen, --eval-episodes\n" \
      "episodes of envs seeded --seed + 1000 (tributary-eval --seed SEED+1000\n" \
      "gives the same number); logs eval_return and, with --logdir, keeps the\n" \
      "best policy so far in LOGDIR/policy_best.safetensors") \
    X(eval_episodes, INT, int, , 10, NULL, 0, "4", \
      "episodes of each --eval-every evaluation (one env each, at most 64 at\n" \
      "once; an env without max_episode_steps is cut at 10000 steps; a stop\n" \
      "signal or --max-seconds abandons the evaluation)") \
    X(resume, STR, char, [512], "", NULL, RLF_NOJSON, NULL, \
      "continue the run whose --logdir is DIR from its newest valid checkpoint,\n" \
      "with every flag of that run (DIR/config.json); flags given here override\n" \
      "them (e.g. a larger --max-steps), but not the env, algorithm, mode,\n" \
      "observers, envs, steps per rollout or architecture") \
    X(overwrite, BOOL, bool, , false, NULL, RLF_CLI, NULL, \
      "with --logdir DIR holding another run: remove that run's files\n" \
      "(metrics, config.json, event files, checkpoints, policy) first")
/* clang-format on */

/* The number of rows: what every table of the fields is sized by. */
#define RL_FIELD_ONE(...) +1
enum { RL_N_FIELDS = 0 RL_CONFIG_FIELDS(RL_FIELD_ONE) };
#undef RL_FIELD_ONE

/* The run configuration: one member per row of the table above, which says
 * what each is, its default and its flag. */
#define RL_FIELD_DECL(name, kind, ctype, dim, dflt, choices, flags, example, help) ctype name dim;
struct rl_config {
    RL_CONFIG_FIELDS(RL_FIELD_DECL)
};
#undef RL_FIELD_DECL

/* The minibatches one observer's rollout (T x B samples) splits into per
 * epoch, so that a minibatch is one size in samples in both modes: sync
 * mode's update joins minibatch i of every observer (observers x T x B /
 * minibatches samples), so there it is c->minibatches; in a mode whose
 * observers update alone (async) it is minibatches / observers, at least
 * 1: each update then has sync's samples and each sample makes sync's
 * updates whenever the observers divide the minibatches. Otherwise
 * (rl_observer_minibatches_even false) the sizes differ; the run's first
 * line says how (rl/algo_describe.c). */
static inline int rl_observer_minibatches(const struct rl_config *c)
{
    if (!rl_mode_lags(c->mode)) return c->minibatches;
    int k = c->minibatches / (c->observers > 0 ? c->observers : 1);
    return k < 1 ? 1 : k;
}
/* Whether an update has as many samples in c's mode as in sync mode. */
static inline bool rl_observer_minibatches_even(const struct rl_config *c)
{
    return !rl_mode_lags(c->mode) || (c->observers > 0 && c->minibatches % c->observers == 0);
}

#endif
