/* --env-arg: the KEY=VALUE lines a run passes to its env, as the config
 * holds them (one line each in env_args), and opening the env with them
 * (config_env_args.h). */
#define _GNU_SOURCE
#include "rl/config_env_args.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "envs/env.h"
#include "envs/plugin.h"
#include "rl/rl.h"

/* Appends one --env-arg KEY=VALUE to c->env_arg: KEY of letters, digits,
 * '_', '-' and '.', VALUE without a line break, keys unique, at most
 * RL_MAX_ENV_ARGS. 0, or -1 with rl_last_error() saying why. */
int rl_config_add_env_arg(struct rl_config *c, const char *v)
{
    const char *eq = strchr(v, '=');
    size_t klen = eq ? (size_t)(eq - v) : 0;
    if (!eq || klen == 0 || klen > 63)
        return rl_set_error("--env-arg '%s': expected KEY=VALUE", v);
    for (size_t k = 0; k < klen; k++)
        if (!isalnum((unsigned char)v[k]) && v[k] != '_' && v[k] != '-' && v[k] != '.')
            return rl_set_error("--env-arg '%s': a key is letters, digits, '_', '-' and '.'", v);
    if (strchr(eq, '\n')) return rl_set_error("--env-arg '%.*s': the value has a line break", (int)klen, v);
    struct rl_env_args have;
    rl_config_env_args(c, &have);
    if (have.args.n == RL_MAX_ENV_ARGS) return rl_set_error("--env-arg: at most %d", RL_MAX_ENV_ARGS);
    for (int i = 0; i < have.args.n; i++)
        if (strlen(have.keys[i]) == klen && strncmp(have.keys[i], v, klen) == 0)
            return rl_set_error("--env-arg %.*s is given twice", (int)klen, v);
    size_t used = strlen(c->env_arg), add = strlen(v) + (used ? 1 : 0);
    if (used + add >= sizeof c->env_arg)
        return rl_set_error("--env-arg: the arguments are too long (at most %zu bytes)", sizeof c->env_arg - 1);
    snprintf(c->env_arg + used, sizeof c->env_arg - used, "%s%s", used ? "\n" : "", v);
    return 0;
}

void rl_config_env_args(const struct rl_config *cfg, struct rl_env_args *out)
{
    snprintf(out->buf, sizeof out->buf, "%s", cfg->env_arg);
    int n = 0;
    for (char *line = out->buf; *line && n < RL_MAX_ENV_ARGS;) {
        char *nl = strchr(line, '\n'), *eq = strchr(line, '=');
        if (nl) *nl = '\0';
        if (eq) {
            *eq = '\0';
            out->keys[n] = line;
            out->values[n++] = eq + 1;
        }
        if (!nl) break;
        line = nl + 1;
    }
    out->args = (struct env_args){ .n = n, .keys = out->keys, .values = out->values };
}

const struct env_spec *rl_config_open_env(const struct rl_config *cfg, struct env_plugin **plugin)
{
    struct rl_env_args ea;
    rl_config_env_args(cfg, &ea);
    const struct env_spec *spec = env_open_args(cfg->env, &ea.args, plugin);
    if (!spec) rl_set_error("%s", env_last_error());
    return spec;
}
