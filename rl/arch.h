/* The policy's architecture as the run's config asks for it on an env
 * (struct policy_arch, runfiles/policy_file.h, which also builds its nets
 * and reads and writes its file), and the policy's forward. */
#ifndef TRIB_RL_ARCH_H
#define TRIB_RL_ARCH_H

#include <stdbool.h>

#include "rl/config.h"
#include "runfiles/policy_file.h"

/* The architecture cfg asks for on an env with these spaces. */
struct policy_arch rl_arch_for(const struct rl_config *cfg, int obs_dim, bool discrete, int act_n_or_dim);

/* The architecture cfg asks for on the env spec, checked before anything
 * is allocated for it (a plug-in declares its own sizes): the env's
 * observation dims and its actions (or action dims) at most RL_MAX_DIM,
 * and the policy's parameters at most RL_MAX_POLICY_PARAMS. `what` names
 * the env as given (an id or a plug-in's path). 0 with *out set, or -1
 * with rl_last_error ("<what>: the env <id> has <n> observation dims (at
 * most 65536)", "... has <n> actions (at most 65536)", "<what>: a policy
 * of --hidden <h> for the env <id> (<o> observation dims, <a> actions) has
 * <n> parameters (at most 134217728)"). */
struct env_spec;
int rl_arch_for_env(const struct rl_config *cfg, const struct env_spec *spec, const char *what,
                    struct policy_arch *out);

/* The policy's forward: the actor (and critic) on obs (CPU f32 [N,obs_dim])
 * on device dev, outputs moved back to the CPU (recorded when grad mode is
 * on): out->a (logits or mean), out->log_std (Gaussian), out->value [N]
 * (value head); out->version 0. 0, or -1 with tensor_last_error(). */
struct rl_policy_out;
int rl_arch_forward(const struct policy_arch *a, struct nn_module *actor, struct nn_module *critic, enum device dev,
                    struct tensor *obs, struct rl_policy_out *out);

#endif
