/* env_mujoco_spec: the suite's table, in MJ_SUITE_IDS order, each env's
 * model loaded on its first lookup (once per process, under a mutex) by
 * the MuJoCo env kit (envs/mujoco_env.h: env_mj_make_spec, its model the
 * row's embedded XML; never unloaded). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "envs/builtin.h"
#include "envs/mujoco/mj_env.h"
#include "envs/mujoco/mujoco_envs.h"

extern const struct env_mj_def mj_half_cheetah_def, mj_hopper_def, mj_walker2d_def, mj_ant_def,
    mj_humanoid_def;
extern const struct env_mj_def mj_inverted_pendulum_def, mj_inverted_double_pendulum_def,
    mj_reacher_def, mj_swimmer_def;

/* One row per env; NULL: not built yet (the message says so). */
static const struct env_mj_def *const suite[MJ_SUITE_COUNT] = {
    &mj_half_cheetah_def,
    &mj_hopper_def,
    &mj_walker2d_def,
    &mj_ant_def,
    &mj_humanoid_def,
    &mj_inverted_pendulum_def,
    &mj_inverted_double_pendulum_def,
    &mj_reacher_def,
    &mj_swimmer_def,
};
static const char *const suite_ids[MJ_SUITE_COUNT] = { MJ_SUITE_IDS };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const struct env_spec *loaded[MJ_SUITE_COUNT];
static char failed[MJ_SUITE_COUNT][512];   /* the first load's error, kept */

const struct env_spec *env_mujoco_spec(int k)
{
    if (k < 0 || k >= MJ_SUITE_COUNT) {
        env_set_error("MuJoCo suite index %d out of range [0, %d)", k, MJ_SUITE_COUNT);
        return NULL;
    }
    if (!suite[k]) {
        env_set_error("%s: not built yet", suite_ids[k]);
        return NULL;
    }
    char err[512];
    pthread_mutex_lock(&lock);
    if (!loaded[k] && !failed[k][0])
        loaded[k] = env_mj_make_spec(suite[k], NULL, NULL, failed[k], sizeof failed[k]);
    const struct env_spec *L = loaded[k];
    if (!L) memcpy(err, failed[k], sizeof err);
    pthread_mutex_unlock(&lock);
    if (!L) {
        env_set_error("%s", err);
        return NULL;
    }
    return L;
}
