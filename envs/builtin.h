/* Private to envs/: the built-in specs and their batched step functions, which
 * vec_env uses instead of one call through spec->step per env. */
#ifndef TRIB_ENVS_BUILTIN_H
#define TRIB_ENVS_BUILTIN_H

#include "envs/env.h"

/* Step n envs whose states lie contiguously, spec->state_size bytes apart;
 * actions, obs, reward and terminated are the n-row batched buffers. Same
 * results, bit for bit, as calling spec->step on each env in turn. */
typedef void (*env_batch_step_fn)(void *states, const void *actions, float *obs,
                                  float *reward, bool *terminated, int n);

extern const struct env_spec env_cartpole_spec, env_acrobot_spec,
    env_mountaincar_spec, env_pendulum_spec;
void env_cartpole_step_batch(void *, const void *, float *, float *, bool *, int);
void env_acrobot_step_batch(void *, const void *, float *, float *, bool *, int);
void env_mountaincar_step_batch(void *, const void *, float *, float *, bool *, int);
void env_pendulum_step_batch(void *, const void *, float *, float *, bool *, int);

/* The batched step of a built-in spec, or NULL for any other spec. */
env_batch_step_fn env_builtin_batch_step(const struct env_spec *spec);

/* The name of value k of a built-in's get_state ("theta" for CartPole's
 * 2), or NULL for any other spec or k. */
const char *env_builtin_state_name(const struct env_spec *spec, int k);

/* Record an error message for env_last_error() (printf-style). */
int env_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));   /* -1 */

#endif
