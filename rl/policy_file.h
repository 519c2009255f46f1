/* The policy's architecture, its construction (the actor and a separate
 * critic), and its file form: a .safetensors file whose tensor names map
 * onto PyTorch nn.Sequential modules ("actor.0.weight", "actor.0.bias",
 * "actor.2.weight", ..., "critic.0.weight", ..., "actor_logstd") and whose
 * metadata records the architecture, so tributary-eval (or PyTorch) can
 * rebuild it. */
#ifndef TRIB_RL_POLICY_FILE_H
#define TRIB_RL_POLICY_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "rl/config.h"
#include "tensor/nn.h"

struct rl_arch {
    int obs_dim, act_dim;           /* act_dim: actions (categorical) or action dims (Gaussian) */
    bool gaussian, value_head;
    int n_hidden, hidden[RL_MAX_HIDDEN];
    bool tanh;
    double dropout, init_log_std;
};

/* The architecture cfg asks for on an env with these spaces. */
struct rl_arch rl_arch_for(const struct rl_config *cfg, int obs_dim, bool discrete, int act_n_or_dim);

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
int rl_arch_for_env(const struct rl_config *cfg, const struct env_spec *spec, const char *what, struct rl_arch *out);

/* Parameters (floats) of the actor and, with a value head, the critic. */
int64_t rl_arch_param_count(const struct rl_arch *a);

/* Checks an architecture read from a file (`what` names it in messages)
 * before anything is allocated for it: sizes in range (dims and hidden
 * sizes 1..RL_MAX_DIM), its parameters fit in the have_bytes the file
 * holds for them, and there are at most RL_MAX_POLICY_PARAMS. 0, or -1
 * with rl_last_error ("<what>: the architecture has <n> parameters (<b>
 * bytes), the file holds <h> bytes of them", or "... (at most <cap>)"). */
int rl_arch_check(const struct rl_arch *a, const char *what, uint64_t have_bytes);

/* Builds the actor (obs -> logits, or mean and log_std: nn_mlp / nn_policy)
 * and, with a value head, the critic (obs -> [N,1]), initialised from seed
 * (PyTorch's default initialisation). 0, or -1 with tensor_last_error(). */
int rl_arch_build(const struct rl_arch *a, uint64_t seed, struct nn_module **actor, struct nn_module **critic);

/* The policy's forward: the actor (and critic) on obs (CPU f32 [N,obs_dim])
 * on device dev, outputs moved back to the CPU (recorded when grad mode is
 * on): out->a (logits or mean), out->log_std (Gaussian), out->value [N]
 * (value head); out->version 0. 0, or -1 with tensor_last_error(). */
struct rl_policy_out;
int rl_arch_forward(const struct rl_arch *a, struct nn_module *actor, struct nn_module *critic, enum device dev,
                    struct tensor *obs, struct rl_policy_out *out);

/* Number of parameter tensors (actor's, then critic's) and their names in
 * that order; names[i] has room for 64 bytes. */
int rl_arch_param_names(const struct rl_arch *a, int cap, char (*names)[64]);

/* Writes the parameters (actor's then critic's, n of them, CPU or CUDA) as
 * a .safetensors file with the architecture and the env in its metadata:
 * `env` its id ("Hopper-v4"), and for a plug-in `env_plugin` the path it
 * was loaded from (NULL: a built-in). Atomic. 0, or -1 with rl_last_error(). */
int rl_policy_save(const char *path, const struct rl_arch *a, const char *env_id, const char *env_plugin, int n,
                   struct tensor *const *params);

/* Reads a file written by rl_policy_save: the architecture, the env to
 * open for it (into env, cap bytes: its plug-in's path when it was one,
 * else its id) and a new actor (and critic if the file has one, when
 * critic is non-NULL) holding its parameters, on the CPU.
 * 0, or -1 with rl_last_error() naming the file and what is wrong. */
int rl_policy_load(const char *path, struct rl_arch *a, char *env, size_t cap, struct nn_module **actor,
                   struct nn_module **critic);

#endif
