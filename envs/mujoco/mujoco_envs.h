/* Private to envs/: the MuJoCo v4 suite as the registry (env.c) sees it.
 * Built only when CMake found MuJoCo (TRIB_WITH_MUJOCO). */
#ifndef TRIB_ENVS_MUJOCO_ENVS_H
#define TRIB_ENVS_MUJOCO_ENVS_H

#include "envs/env.h"

/* The suite, in this order (env.c lists the same ids for its messages when
 * MuJoCo is absent). */
#define MJ_SUITE_IDS                                                                               \
    "HalfCheetah-v4", "Hopper-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4", "InvertedPendulum-v4", \
        "InvertedDoublePendulum-v4", "Reacher-v4", "Swimmer-v4"
#define MJ_SUITE_COUNT 9

/* The spec of suite env k (0 <= k < MJ_SUITE_COUNT, in MJ_SUITE_IDS order).
 * Its model is loaded from the XML compiled into the library on the first
 * call (once per process, thread-safe); the spec then lives until the
 * process ends. NULL with env_set_error() ("Hopper-v4: model: ...") when
 * the load fails. */
const struct env_spec *env_mujoco_spec(int k);

#endif
