/* The policy's file: its architecture (struct policy_arch, filled from the
 * run's config by rl/arch.h), the nets that architecture is (the actor and
 * a separate critic), and its file form: a .safetensors file whose tensor
 * names map onto PyTorch nn.Sequential modules ("actor.0.weight",
 * "actor.0.bias", "actor.2.weight", ..., "critic.0.weight", ...,
 * "actor_logstd") and whose metadata records the architecture, so
 * tributary-eval (or PyTorch) can rebuild it. Knows nothing of the RL
 * config or the algorithms: what it needs is in struct policy_arch. */
#ifndef TRIB_RUNFILES_POLICY_FILE_H
#define TRIB_RUNFILES_POLICY_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/nn.h"

/* The sizes a policy (and so a policy file) may have: hidden layers, the
 * size of a hidden layer and an observation's or an action's dims, and
 * the parameters of the actor and the critic together (2^27 floats, 512
 * MiB). rl/config.h's RL_MAX_HIDDEN, RL_MAX_DIM and RL_MAX_POLICY_PARAMS
 * are these (rl/arch.c checks it). */
#define POLICY_MAX_HIDDEN 4
#define POLICY_MAX_DIM 65536
#define POLICY_MAX_PARAMS (INT64_C(1) << 27)
/* Parameter tensors of the largest architecture: a weight and a bias per
 * layer of the actor and of the critic, and the Gaussian's log-std. */
#define POLICY_MAX_TENSORS (2 * (POLICY_MAX_HIDDEN + 1) * 2 + 1)

struct policy_arch {
    int obs_dim, act_dim;           /* act_dim: actions (categorical) or action dims (Gaussian) */
    bool gaussian, value_head;
    int n_hidden, hidden[POLICY_MAX_HIDDEN];
    bool tanh;
    double dropout, init_log_std;
};

/* Parameters (floats) of the actor and, with a value head, the critic. */
int64_t policy_arch_param_count(const struct policy_arch *a);

/* Checks an architecture read from a file (`what` names it in messages)
 * before anything is allocated for it: sizes in range (dims and hidden
 * sizes 1..POLICY_MAX_DIM), its parameters fit in the have_bytes the file
 * holds for them, and there are at most POLICY_MAX_PARAMS. 0, or -1 with
 * runfiles_last_error ("<what>: the architecture has <n> parameters (<b>
 * bytes), the file holds <h> bytes of them", or "... (at most <cap>)"). */
int policy_arch_check(const struct policy_arch *a, const char *what, uint64_t have_bytes);

/* Builds the actor (obs -> logits, or mean and log_std: nn_mlp / nn_policy)
 * and, with a value head, the critic (obs -> [N,1]), initialised from seed
 * (PyTorch's default initialisation). 0, or -1 with tensor_last_error(). */
int policy_arch_build(const struct policy_arch *a, uint64_t seed, struct nn_module **actor,
                      struct nn_module **critic);

/* Number of parameter tensors (actor's, then critic's) and their names in
 * that order; names[i] has room for 64 bytes (POLICY_MAX_TENSORS of them
 * hold any architecture's). */
int policy_arch_param_names(const struct policy_arch *a, int cap, char (*names)[64]);

/* Writes the parameters (actor's then critic's, n of them, CPU or CUDA) as
 * a .safetensors file with the architecture and the env in its metadata:
 * `env` its id ("Hopper-v4"), and for a plug-in `env_plugin` the path it
 * was loaded from (NULL: a built-in). Atomic. 0, or -1 with
 * runfiles_last_error(). */
int policy_file_save(const char *path, const struct policy_arch *a, const char *env_id, const char *env_plugin, int n,
                     struct tensor *const *params);

/* policy_file_save with n_extra (at most POLICY_MAX_EXTRA_META) more
 * metadata entries after the architecture's (e.g. the agent's best policy:
 * the evaluation that chose it), keys not among the architecture's. */
#define POLICY_MAX_EXTRA_META 8
struct safetensors_meta;
int policy_file_save_meta(const char *path, const struct policy_arch *a, const char *env_id, const char *env_plugin,
                          int n, struct tensor *const *params, const struct safetensors_meta *extra, int n_extra);

/* Reads a file written by policy_file_save: the architecture, the env to
 * open for it (into env, cap bytes: its plug-in's path when it was one,
 * else its id) and a new actor (and critic if the file has one, when
 * critic is non-NULL) holding its parameters, on the CPU; a parameter that
 * is not finite is refused, naming it. 0, or -1 with runfiles_last_error()
 * naming the file and what is wrong. */
int policy_file_load(const char *path, struct policy_arch *a, char *env, size_t cap, struct nn_module **actor,
                     struct nn_module **critic);

#endif
