/* --env-arg: the KEY=VALUE lines a run passes to its env, as the config
 * holds them (one line each in cfg->env_arg), and opening the env with them
 * (config_env_args.c). Below the rest of the config's files (rl_field_set
 * appends with rl_config_add_env_arg); included by rl/config.h. */
#ifndef TRIB_RL_CONFIG_ENV_ARGS_H
#define TRIB_RL_CONFIG_ENV_ARGS_H

#include "envs/env.h"
#include "rl/config_fields.h"

#define RL_MAX_ENV_ARGS 16          /* --env-arg KEY=VALUE, repeatable */

/* cfg's env arguments split for env_open_args: args points into out. */
struct rl_env_args {
    struct env_args args;
    const char *keys[RL_MAX_ENV_ARGS], *values[RL_MAX_ENV_ARGS];
    char buf[sizeof((struct rl_config *)0)->env_arg];
};
void rl_config_env_args(const struct rl_config *cfg, struct rl_env_args *out);

/* Appends one --env-arg KEY=VALUE to cfg->env_arg: KEY of letters, digits,
 * '_', '-' and '.', VALUE without a line break, keys unique, at most
 * RL_MAX_ENV_ARGS. 0, or -1 with rl_last_error() saying why. */
int rl_config_add_env_arg(struct rl_config *cfg, const char *kv);

/* The env of cfg, opened with its arguments (env_open_args): the spec, and
 * in *plugin the handle to close (NULL for a built-in). NULL with
 * rl_last_error() set to the envs module's message. */
struct env_plugin;
const struct env_spec *rl_config_open_env(const struct rl_config *cfg, struct env_plugin **plugin);

#endif
