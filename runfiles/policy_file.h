/* The policy's file: its architecture (struct policy_arch, filled from the
 * run's config by rl/arch.h), the nets that architecture is (the actor and
 * a separate critic), and its file form: a .safetensors file whose tensor
 * names map onto PyTorch nn.Sequential modules ("actor.0.weight",
 * "actor.0.bias", "actor.2.weight", ..., "critic.0.weight", ...,
 * "actor_logstd") and whose metadata records the architecture, so
 * tributary-eval (or PyTorch) can rebuild it. Beside the nets it records
 * what acting needs (struct policy_extras): the action space (metadata
 * act_kind "box"|"discrete", act_low/act_high "%.17g" comma-separated, inf
 * as "inf") and, when the run normalised its observations, the statistics
 * it normalised with (F64 tensors obs_norm.mean [D], obs_norm.var [D],
 * obs_norm.count [], metadata obs_clip, obs_eps). A file without them (one
 * written before issue 25, or a run without normalisation) loads as
 * before. Knows nothing of the RL config or the algorithms: what it needs
 * is in struct policy_arch and struct policy_extras (rl/norm.h's
 * statistics are converted at the agent). */
#ifndef TRIB_RUNFILES_POLICY_FILE_H
#define TRIB_RUNFILES_POLICY_FILE_H

#include <float.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envs/env.h"
#include "runfiles/safetensors.h"
#include "tensor/nn.h"

/* The sizes a policy (and so a policy file) may have: hidden layers, the
 * size of a hidden layer and an observation's or an action's dims, and
 * the parameters of the actor and the critic together (2^27 floats, 512
 * MiB). rl/config_fields.h's RL_MAX_HIDDEN and rl/config.h's RL_MAX_DIM
 * and RL_MAX_POLICY_PARAMS are these (rl/config_arch.c checks it). */
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
    /* how policy_arch_build initialises the nets: false PyTorch's default,
     * true CleanRL's layer_init (orthogonal; not in the file: a loaded
     * policy's weights are the file's) */
    bool orthogonal;
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
 * (PyTorch's default initialisation; a->orthogonal: then every weight redrawn
 * orthogonal as CleanRL's layer_init, hidden layers gain sqrt(2), the
 * actor's output 0.01, the critic's 1, biases 0). 0, or -1 with tensor_last_error(). */
int policy_arch_build(const struct policy_arch *a, uint64_t seed, struct nn_module **actor,
                      struct nn_module **critic);

/* Number of parameter tensors (actor's, then critic's) and their names in
 * that order; names[i] has room for 64 bytes (POLICY_MAX_TENSORS of them
 * hold any architecture's). */
int policy_arch_param_names(const struct policy_arch *a, int cap, char (*names)[64]);

/* The bounds of a set of normalisation statistics (rl/norm.h's
 * RL_NORM_COUNT_MAX, RL_NORM_VALUE_MAX and RL_NORM_MOMENT_MAX are these):
 * a count is at most 2^53 (counts stay exact integers in float64); every
 * value a learner folds in is at most 2^53 x FLT_MAX in magnitude (a float
 * observation, or a discounted return of at most 2^53 float rewards with
 * gamma <= 1), so the rows a set summarises have mean^2 + var (their mean
 * square) at most VALUE_MAX^2 per component; a set may hold twice that,
 * the room the rounding of its merges takes. Within them no arithmetic of
 * a merge or of the normalisation overflows. */
#define POLICY_NORM_COUNT_MAX 0x1p53
#define POLICY_NORM_VALUE_MAX (0x1p53 * (double)FLT_MAX)
#define POLICY_NORM_MOMENT_MAX (2 * POLICY_NORM_VALUE_MAX * POLICY_NORM_VALUE_MAX)

/* Observation normalisation as a policy file records it (rl/norm.h's obs
 * side, frozen): an observation x becomes
 * clamp((x - mean) / sqrt(var + eps), -clip, clip), computed in double. */
struct policy_norm {
    int dim;                    /* 0: none (the run did not normalise) */
    double count, clip, eps;
    double *mean, *var;         /* [dim]; a loaded one's are its own (policy_extras_free) */
};

/* Normalises rows observations of n->dim floats in place (frozen: the
 * statistics are not updated): clamp((obs - mean) / sqrt(var + eps),
 * -clip, clip) in double. A NaN observation stays NaN (a clamp to -clip
 * would hide it; the finite checks downstream name it). The one home of
 * frozen normalisation: training's (rl_norm_stats_apply, through
 * rl_norm_stats_view), evaluation's and the export's. A no-op when n is
 * NULL or n->dim is 0. */
void policy_norm_apply(const struct policy_norm *n, float *obs, int rows);

/* The room of a file's env_args (rl/config_fields.h's env_arg is as large). */
#define POLICY_ENV_ARGS_MAX 1024

/* What a policy file records beside its nets. */
struct policy_extras {
    char env_args[POLICY_ENV_ARGS_MAX];   /* the plug-in's KEY=VALUE lines, '\n' between; "": none recorded
                                           * (a built-in, a plug-in run without --env-arg, or a file written
                                           * before issue 35) */
    bool has_act;               /* false: the file records no action space (written before issue 25) */
    struct env_space act;       /* the env's action space; a box's low/high are the extras' own */
    struct policy_norm norm;    /* dim 0: the run did not normalise its observations */
};
/* Frees what policy_file_read put in x (its bounds and statistics), and
 * zeroes it. Accepts NULL. */
void policy_extras_free(struct policy_extras *x);

/* What policy_file_write records beside the architecture and the nets.
 * Borrowed. */
struct policy_info {
    const char *env_id;                  /* "Hopper-v4" */
    const char *env_plugin;              /* a plug-in's path; NULL: a built-in */
    const char *env_args;                /* its arguments, KEY=VALUE lines ('\n' between); NULL or "": none */
    const struct env_space *act;         /* the env's action space; NULL: not recorded */
    const struct policy_norm *norm;      /* NULL or dim 0: no normalisation */
    int n_meta;                          /* more metadata, after the policy's own */
    const struct safetensors_meta *meta;
};

/* Writes the parameters (actor's then critic's, n of them, CPU or CUDA) as
 * a .safetensors file with the architecture, the env (its id, and for a
 * plug-in the path it was loaded from, metadata env_plugin, and the
 * arguments it was opened with, metadata env_args: the KEY=VALUE lines as
 * given, '\n' between, absent when none), the action space and the
 * normalisation statistics info gives. A norm whose dim is not the
 * policy's obs_dim, or whose numbers the reader would refuse, is refused
 * here. Atomic. 0, or -1 with runfiles_last_error(). */
int policy_file_write(const char *path, const struct policy_arch *a, const struct policy_info *info, int n,
                      struct tensor *const *params);
/* policy_file_write of a file that records the env alone (no action
 * space, no statistics). */
int policy_file_save(const char *path, const struct policy_arch *a, const char *env_id, const char *env_plugin, int n,
                     struct tensor *const *params);

/* Reads a file written by policy_file_write: the architecture, the env to
 * open for it (into env, cap bytes: its plug-in's path when it was one,
 * else its id), a new actor (and critic if the file has one, when critic
 * is non-NULL) holding its parameters, on the CPU, and into x (when
 * non-NULL) the action space, statistics and env arguments it records
 * (env_args longer than POLICY_ENV_ARGS_MAX - 1 bytes is refused; what
 * the lines hold is the caller's to check). Refused, naming
 * the file and the problem: a parameter that is not finite, an action
 * space that does not fit the head (act_kind "box" for a Gaussian) or
 * act_dim, bounds that are NaN or low > high, statistics that are
 * incomplete, of the wrong dtype or shape, not finite, a negative variance
 * or count, a count over POLICY_NORM_COUNT_MAX, a mean^2 + var over
 * POLICY_NORM_MOMENT_MAX, a clip or eps that is not a positive number. They are checked
 * whether or not x is asked for. 0, or -1 with runfiles_last_error(). */
int policy_file_read(const char *path, struct policy_arch *a, char *env, size_t cap, struct nn_module **actor,
                     struct nn_module **critic, struct policy_extras *x);
/* policy_file_read without the extras. */
int policy_file_load(const char *path, struct policy_arch *a, char *env, size_t cap, struct nn_module **actor,
                     struct nn_module **critic);

#endif
