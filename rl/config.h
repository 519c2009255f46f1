/* The run configuration shared by the agent and its observers: algorithm,
 * env, sizes, hyper-parameters, presets, the command line that fills it,
 * and its wire form (the agent hands it to every observer at setup). */
#ifndef TRIB_RL_CONFIG_H
#define TRIB_RL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "envs/env.h"
#include "rl/config_env_args.h"      /* --env-arg: struct rl_env_args, RL_MAX_ENV_ARGS */
#include "rl/config_fields.h"        /* struct rl_config, its fields' types; RL_ALGO_* */
#include "rpc/rpc.h"

#define RL_MAX_OBSERVERS 64
#define RL_MAX_ENVS 4096            /* per observer */
#define RL_MAX_DIM 65536            /* a hidden layer's size, an observation's or an action's dims */
/* The most parameters a policy may have, actor and critic together: 2^27
 * floats, 512 MiB (the optimizer keeps up to three more copies). Checked
 * on --hidden and on every architecture read from a file, before it is
 * allocated. */
#define RL_MAX_POLICY_PARAMS (INT64_C(1) << 27)
/* The accepted ranges of the learning rate and of the loss coefficients
 * (--ent-coef, --vf-coef: each in [0, RL_MAX_LOSS_COEF]); a value outside
 * is refused naming the range, on the command line, in --config and in a
 * resumed run's config.json alike. */
#define RL_MIN_LR 1e-10
#define RL_MAX_LR 1.0
#define RL_MAX_LOSS_COEF 10.0

/* Fills cfg with the named preset: "ppo" (CleanRL ppo.py on CartPole-v1),
 * "ppo-fast" (the demo's: solves CartPole-v1 fastest here), "a2c",
 * "pendulum" (PPO, Gaussian head, Pendulum-v1) or "pytorch-rl-example"
 * (REINFORCE as PyTorch's RPC RL example). -1 with rl_last_error() for an
 * unknown name. */
int rl_config_preset(struct rl_config *cfg, const char *name);

/* Names of the presets, NULL-terminated. */
extern const char *const rl_preset_names[];

/* Checks ranges and combinations (e.g. REINFORCE needs 1 env per observer;
 * minibatches divide B*T). 0, or -1 with rl_last_error() naming the flag. */
int rl_config_check(const struct rl_config *cfg);

/* --max-policy-lag's default for cfg's shape when the flag is not given:
 * 32 x observers x epochs x minibatches (REINFORCE: 32 x observers), at
 * least 1000; far above a healthy async run's lag, far below what a
 * stopped observer sends when resumed minutes later. */
int rl_default_max_policy_lag(const struct rl_config *cfg);

/* Parses the trainer's flags (see rl_config_usage) into cfg, starting from
 * the preset named by --preset (default "ppo-fast"; a --preset flag applies
 * first wherever it stands, other flags override it), plus the program's own
 * flags `extra` (n_extra of them). With --resume DIR the run's own
 * DIR/config.json comes first (its preset, then its flags), then --config,
 * then the command line, and --logdir defaults to DIR. A --logdir that
 * already holds a run (metrics_dir_holds_run) is refused unless it is the
 * run being resumed or --overwrite is given (which clears it). Returns -1
 * to go on, 0 after --help (usage printed to stdout, with `about` first),
 * 2 for bad usage (message on stderr, naming `prog`). */
#define RL_MAX_EXTRA_OPTS 16         /* a program's own flags beside the run's (more aborts) */
struct argv_opt;
int rl_config_parse(struct rl_config *cfg, const char *prog, const char *about, int argc, char **argv,
                    const struct argv_opt *extra, int n_extra);

/* Prints the flags rl_config_parse takes. */
void rl_config_usage(FILE *f);

/* A mode's name; NULL past the last (the choices of --mode). An
 * algorithm's is rl_algo_name (rl/algo.h). */
const char *rl_mode_name(enum rl_mode m);

/* One line describing cfg (algorithm, env, sizes, main hyper-parameters). */
void rl_config_describe(const struct rl_config *cfg, char *out, size_t cap);

/* The configuration as a JSON object of flags, the form --config reads
 * back (so a run's config.json reproduces it). Caller frees (cJSON_Delete). */
struct cJSON;
struct cJSON *rl_config_to_json(const struct rl_config *cfg);

/* Parses rl_config_to_json's text (a checkpoint's config) into cfg. 0, or
 * -1 with rl_last_error(). */
int rl_config_from_json(const char *text, size_t len, struct rl_config *cfg);

/* A saved config's text (a checkpoint's, of this build or an older one
 * whose keys were dashed) as rl_config_to_json writes it now, for
 * comparing key by key. NULL with rl_last_error(). Caller frees. */
struct cJSON *rl_config_json_of(const char *text, size_t len);

/* The wire form (a map) and back. from_value checks every field and the
 * result with rl_config_check: 0, or -1 with rl_last_error(). */
struct rpc_value rl_config_to_value(const struct rl_config *cfg);
int rl_config_from_value(const struct rpc_value *v, struct rl_config *cfg);

/* The policy's architecture cfg asks for (struct policy_arch,
 * runfiles/policy_file.h; config_arch.c): on an env with these spaces, and
 * on the env spec, checked before anything is allocated for it (a plug-in
 * declares its own sizes): the env's observation dims and its actions (or
 * action dims) at most RL_MAX_DIM, and the policy's parameters at most
 * RL_MAX_POLICY_PARAMS. `what` names the env as given (an id or a
 * plug-in's path). 0 with *out set, or -1 with rl_last_error ("<what>: the
 * env <id> has <n> observation dims (at most 65536)", "... has <n> actions
 * (at most 65536)", "<what>: a policy of --hidden <h> for the env <id> (<o>
 * observation dims, <a> actions) has <n> parameters (at most 134217728)"). */
struct policy_arch;
struct policy_arch rl_arch_for(const struct rl_config *cfg, int obs_dim, bool discrete, int act_n_or_dim);
int rl_arch_for_env(const struct rl_config *cfg, const struct env_spec *spec, const char *what,
                    struct policy_arch *out);

#endif
