/* The built-in envs by id: the classic-control specs, and the MuJoCo v4
 * suite's (made on their first lookup), with the batched steps and state
 * names vec_env uses for the classic ones. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "envs/builtin.h"
#include "envs/mujoco/mujoco_envs.h"

/* Every built-in by id: the classic-control specs are static; a MuJoCo
 * env's spec is made on its first lookup (env_mujoco_spec loads its model). */
struct builtin {
    const char *id;
    const struct env_spec *spec;   /* static ones */
    int mujoco;                    /* else: index into the MuJoCo suite, + 1 */
};
static const char *const mujoco_ids[MJ_SUITE_COUNT] = { MJ_SUITE_IDS };
static const struct builtin builtins[] = {
    { "CartPole-v1", &env_cartpole_spec, 0 },
    { "Acrobot-v1", &env_acrobot_spec, 0 },
    { "MountainCar-v0", &env_mountaincar_spec, 0 },
    { "Pendulum-v1", &env_pendulum_spec, 0 },
#ifdef TRIB_WITH_MUJOCO
    { "HalfCheetah-v4", NULL, 1 }, { "Hopper-v4", NULL, 2 }, { "Walker2d-v4", NULL, 3 },
    { "Ant-v4", NULL, 4 }, { "Humanoid-v4", NULL, 5 }, { "InvertedPendulum-v4", NULL, 6 },
    { "InvertedDoublePendulum-v4", NULL, 7 }, { "Reacher-v4", NULL, 8 }, { "Swimmer-v4", NULL, 9 },
#endif
};
#define N_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

int env_mujoco_available(void)
{
#ifdef TRIB_WITH_MUJOCO
    return 1;
#else
    return 0;
#endif
}

static const struct env_spec *builtin_spec(const struct builtin *b)
{
    if (b->spec) return b->spec;
#ifdef TRIB_WITH_MUJOCO
    return env_mujoco_spec(b->mujoco - 1);
#else
    env_set_error("%s: this Tributary was built without MuJoCo", b->id);
    return NULL;
#endif
}

int env_builtin_count(void)
{
    return N_BUILTINS;
}

const char *env_builtin_id(int i)
{
    return i >= 0 && i < N_BUILTINS ? builtins[i].id : NULL;
}

const struct env_spec *env_builtin(int i)
{
    if (i < 0 || i >= N_BUILTINS) {
        env_set_error("built-in env index %d out of range [0, %d)", i, N_BUILTINS);
        return NULL;
    }
    return builtin_spec(&builtins[i]);
}

const struct env_spec *env_lookup(const char *id)
{
    if (!id || !*id) {
        env_set_error("env id is empty");
        return NULL;
    }
    for (int i = 0; i < N_BUILTINS; i++)
        if (strcmp(builtins[i].id, id) == 0)
            return builtin_spec(&builtins[i]);
    for (int k = 0; k < MJ_SUITE_COUNT; k++)
        if (strcmp(mujoco_ids[k], id) == 0) {
            env_set_error("env '%s' is one of the MuJoCo v4 envs, and this Tributary was built "
                          "without MuJoCo (Debian: apt-get install libmujoco-dev, then rebuild)", id);
            return NULL;
        }
    char list[600];
    size_t off = 0;
    const char *near = NULL;   /* the id that differs only in case */
    for (int i = 0; i < N_BUILTINS && off < sizeof list; i++) {
        off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", i ? ", " : "", builtins[i].id);
        if (strcasecmp(builtins[i].id, id) == 0) near = builtins[i].id;
    }
    if (near)
        env_set_error("unknown env id '%s' (did you mean %s?)", id, near);
    else
        env_set_error("unknown env id '%s' (built-ins: %s; or the path of a plug-in .so)", id, list);
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
