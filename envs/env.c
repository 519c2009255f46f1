/* The built-in registry (env_lookup) and the envs module's thread-local last
 * error, shared by vec_env and the plug-in loader. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "envs/builtin.h"

static _Thread_local struct trib_error last_error;

void env_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    trib_error_vset(&last_error, fmt, ap);
    va_end(ap);
}

const char *env_last_error(void)
{
    return trib_error_get(&last_error);
}

static const struct env_spec *const builtins[] = {
    &env_cartpole_spec, &env_acrobot_spec, &env_mountaincar_spec, &env_pendulum_spec};
#define N_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

int env_builtin_count(void)
{
    return N_BUILTINS;
}

const struct env_spec *env_builtin(int i)
{
    if (i < 0 || i >= N_BUILTINS) {
        env_set_error("built-in env index %d out of range [0, %d)", i, N_BUILTINS);
        return NULL;
    }
    return builtins[i];
}

const struct env_spec *env_lookup(const char *id)
{
    if (!id || !*id) {
        env_set_error("env id is empty");
        return NULL;
    }
    for (int i = 0; i < N_BUILTINS; i++)
        if (strcmp(builtins[i]->id, id) == 0)
            return builtins[i];
    env_set_error("unknown env id '%s' (built-ins: CartPole-v1, Acrobot-v1, MountainCar-v0, "
                  "Pendulum-v1)", id);
    return NULL;
}

env_batch_step_fn env_builtin_batch_step(const struct env_spec *spec)
{
    if (spec == &env_cartpole_spec)
        return env_cartpole_step_batch;
    if (spec == &env_acrobot_spec)
        return env_acrobot_step_batch;
    if (spec == &env_mountaincar_spec)
        return env_mountaincar_step_batch;
    if (spec == &env_pendulum_spec)
        return env_pendulum_step_batch;
    return NULL;
}

const char *env_builtin_state_name(const struct env_spec *spec, int k)
{
    static const struct {
        const struct env_spec *spec;
        const char *names[4];
    } tab[] = {
        { &env_cartpole_spec, { "x", "x_dot", "theta", "theta_dot" } },
        { &env_acrobot_spec, { "theta1", "theta2", "dtheta1", "dtheta2" } },
        { &env_mountaincar_spec, { "position", "velocity", NULL, NULL } },
        { &env_pendulum_spec, { "th", "thdot", NULL, NULL } },
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (tab[i].spec == spec) return k >= 0 && k < 4 ? tab[i].names[k] : NULL;
    return NULL;
}

static int check_box(const struct env_space *sp, const char *what)
{
    if (sp->dim <= 0) {
        env_set_error("%s space has zero size (dim = %d)", what, sp->dim);
        return -1;
    }
    if (!sp->low || !sp->high) {
        env_set_error("%s space has no low/high bounds", what);
        return -1;
    }
    for (int k = 0; k < sp->dim; k++)
        if (!(sp->low[k] <= sp->high[k])) {
            env_set_error("%s space: low[%d] = %g is not <= high[%d] = %g", what, k, sp->low[k],
                          k, sp->high[k]);
            return -1;
        }
    return 0;
}

int env_spec_check(const struct env_spec *spec)
{
    if (!spec) {
        env_set_error("spec is NULL");
        return -1;
    }
    if (!spec->id || !*spec->id) {
        env_set_error("id is empty");
        return -1;
    }
    if (spec->state_size == 0) {
        env_set_error("state_size is 0");
        return -1;
    }
    if (spec->obs.kind != SPACE_BOX) {
        env_set_error("observation space must be a box (a float32 vector)");
        return -1;
    }
    if (check_box(&spec->obs, "observation") < 0)
        return -1;
    if (spec->act.kind == SPACE_DISCRETE) {
        if (spec->act.n <= 0) {
            env_set_error("action space is discrete with n = %d (need n > 0)", spec->act.n);
            return -1;
        }
    } else if (spec->act.kind == SPACE_BOX) {
        if (check_box(&spec->act, "action") < 0)
            return -1;
    } else {
        env_set_error("action space has unknown kind %d", (int)spec->act.kind);
        return -1;
    }
    if (!spec->reset) {
        env_set_error("reset function is NULL");
        return -1;
    }
    if (!spec->step) {
        env_set_error("step function is NULL");
        return -1;
    }
    if (spec->max_episode_steps < 0) {
        env_set_error("max_episode_steps is negative (%d)", spec->max_episode_steps);
        return -1;
    }
    return 0;
}
