/* What the agent's policy becomes outside its memory (agent/policy_store.c):
 * the policy file, a checkpoint's bytes, and the copy an evaluation runs. */
#ifndef TRIB_AGENT_POLICY_STORE_H
#define TRIB_AGENT_POLICY_STORE_H

#include <stddef.h>

#include "agent/policy.h"

struct env_spec;

/* Checkpoints: the parameters (f32, actor's then critic's) and the dropout
 * RNG as bytes; load checks the sizes and writes them in (staged writes).
 * load: 0, or -1 with rl_last_error() (a size mismatch); the policy may
 * live on the GPU (the parameters are written there from the host). */
void policy_save_state(struct policy *p, unsigned char **out, size_t *len);
int policy_load_state(struct policy *p, const void *buf, size_t len);

/* Writes the policy as a .safetensors file (policy_file_write) recording
 * the env, its action space and, when norm is non-NULL with an obs side,
 * the observation statistics (rl/norm.h) the run normalised with. 0 or -1
 * with rl_last_error(). */
struct rl_norm_stats;
int policy_save(struct policy *p, const char *path, const struct env_spec *spec, const struct rl_norm_stats *norm);

/* A copy of the policy as it is now, on the CPU, for the agent's own
 * evaluations (--eval-every): its architecture, an actor in eval mode (no
 * dropout) and, with a value head, a critic holding the parameters' values.
 * The caller keeps updates out while it is made (the agent's mu: async
 * updates run on handler threads); later updates do not reach it. 0, or -1
 * with rl_last_error(). */
struct policy_copy {
    struct policy_arch arch;
    struct nn_module *actor, *critic;
};
int policy_copy_new(struct policy *p, struct policy_copy *c);
/* Accepts a zeroed copy. */
void policy_copy_free(struct policy_copy *c);
/* Writes a copy as policy_save writes the policy (norm: the statistics it
 * was evaluated with), with n_extra more metadata entries (policy_info's
 * meta). 0, or -1 with rl_last_error(). */
struct safetensors_meta;
struct rl_norm_stats;
int policy_copy_save(struct policy *p, const struct policy_copy *c, const char *path, const struct env_spec *spec,
                     const struct rl_norm_stats *norm, const struct safetensors_meta *extra, int n_extra);

#endif
