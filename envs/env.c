/* The built-in registry (env_lookup) and the envs module's thread-local last
 * error, shared by vec_env and the plug-in loader. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "envs/builtin.h"
#include "envs/mujoco/mujoco_envs.h"

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

/* The fields of ABI 2: all optional, but those that go together must. */
static int check_abi2(const struct env_spec *spec)
{
    if (spec->abi_version == 0) {   /* ABI 1: nothing below may be set */
        if (spec->create || spec->save || spec->load || spec->info_count || spec->unload) {
            env_set_error("abi_version is 0 but ABI 2 fields are set (set abi_version = "
                          "ENV_ABI_VERSION, %d)", ENV_ABI_VERSION);
            return -1;
        }
        return 0;
    }
    if (spec->abi_version != ENV_ABI_VERSION) {
        env_set_error("built for env ABI %d; this Tributary loads ABI 1 and %d", spec->abi_version,
                      ENV_ABI_VERSION);
        return -1;
    }
    if ((spec->save != NULL) != (spec->load != NULL)) {
        env_set_error("save and load go together (it has %s only)", spec->save ? "save" : "load");
        return -1;
    }
    if (spec->save && spec->saved_size == 0) {
        env_set_error("saved_size is 0 but save is set");
        return -1;
    }
    if (spec->create && !spec->save) {
        env_set_error("create is set without save and load: a state block that holds what "
                      "create made cannot be saved as raw bytes");
        return -1;
    }
    if (spec->destroy && !spec->create) {
        env_set_error("destroy is set without create");
        return -1;
    }
    if (spec->info_count < 0 || spec->info_count > ENV_INFO_MAX) {
        env_set_error("info_count is %d (0..%d)", spec->info_count, ENV_INFO_MAX);
        return -1;
    }
    if (spec->info_count > 0) {
        if (!spec->info || !spec->info_names) {
            env_set_error("info_count is %d but info%s is NULL", spec->info_count,
                          spec->info ? "_names" : "");
            return -1;
        }
        for (int k = 0; k < spec->info_count; k++)
            if (!spec->info_names[k] || !*spec->info_names[k]) {
                env_set_error("info_names[%d] is empty", k);
                return -1;
            }
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
    return check_abi2(spec);
}
