/* The policy's forward on its architecture (struct policy_arch,
 * runfiles/policy_file.h, which builds its nets and reads and writes its
 * file; rl/config.h's rl_arch_for gives the architecture a run asks for). */
#ifndef TRIB_RL_ARCH_H
#define TRIB_RL_ARCH_H

#include "runfiles/policy_file.h"

/* The policy's forward: the actor (and critic) on obs (CPU f32 [N,obs_dim])
 * on device dev, outputs moved back to the CPU (recorded when grad mode is
 * on): out->a (logits or mean), out->log_std (Gaussian), out->value [N]
 * (value head); out->version 0. 0, or -1 with tensor_last_error(). */
struct rl_policy_out;
int rl_arch_forward(const struct policy_arch *a, struct nn_module *actor, struct nn_module *critic, enum device dev,
                    struct tensor *obs, struct rl_policy_out *out);

#endif
