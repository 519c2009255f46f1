/* Finiteness checks on what flows into learning: an env's observations and
 * rewards, an observer's losses, the gradients an update would apply and
 * the parameters a run saves. Each returns 0, or -1 with rl_last_error()
 * naming what is not finite, where, and its value. Any thread. */
#ifndef TRIB_RL_FINITE_H
#define TRIB_RL_FINITE_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/tensor.h"

/* One vec_env step (or reset: reward NULL) of B envs of env `env_id` on
 * worker `who`, the step-th of its vec_env: obs [B,D], reward [B], and
 * final_obs [B,D] (may be NULL) of the envs done (done[b]; may be NULL). */
int rl_check_env_step(const char *env_id, const char *who, int64_t step, int B, int D, const float *obs,
                      const float *reward, const bool *done, const float *final_obs);

/* A scalar loss (f32, any device) of `what` (e.g. "minibatch 2 of epoch 0"). */
int rl_check_loss(const struct tensor *loss, const char *what);

/* Every gradient this worker holds in distributed-autograd context ctx
 * (those an optimizer step of ctx would apply here). */
int rl_check_gradients(int64_t ctx);

/* n f32 tensors (any device), params[i] called names[i] (or "parameter
 * i" when names is NULL). */
int rl_check_params(int n, struct tensor *const *params, const char *const *names);

#endif
