/* nn-style modules built from ops.h: Linear, MLP and an RL policy with a
 * categorical or Gaussian head and an optional value head. Every module is
 * reached through `struct nn_module` so layers above (RemoteModule, the
 * agent) can drive any of them the same way. Initialisation follows
 * PyTorch's defaults (Linear: U(-1/sqrt(in), 1/sqrt(in)) for weight and
 * bias) from a caller-owned RNG state; nn_module_init_orthogonal redraws a
 * built module's layers as CleanRL's layer_init. */
#ifndef TRIB_TENSOR_NN_H
#define TRIB_TENSOR_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/ops.h"
#include "tensor/tensor.h"

#define NN_MAX_IO 4

struct nn_module;

struct nn_module_ops {
    const char *kind;    /* "linear", "mlp", "policy", ... */
    /* n_in inputs -> *n_out new references in out[NN_MAX_IO]. Returns 0 or
     * -1 with tensor_last_error() naming the module and the problem. */
    int (*forward)(struct nn_module *m, int n_in, struct tensor **in,
                   int *n_out, struct tensor **out);
    void (*free)(struct nn_module *m);
};

struct nn_module {
    const struct nn_module_ops *ops;
    int n_params;
    struct tensor **params;  /* owned; requires_grad leaves */
    bool training;           /* dropout on/off */
    uint64_t rng;            /* state for dropout */
};

/* Runs m->ops->forward. A NULL module, n_out, out, in (n_in > 0) or input
 * is an error ("nn_forward: input 1 is NULL"), as is a NULL pointer given
 * to any function below but nn_module_free ("nn_linear_new: rng is NULL"). */
int nn_forward(struct nn_module *m, int n_in, struct tensor **in, int *n_out, struct tensor **out);
/* Single input, single output convenience; NULL with error. */
struct tensor *nn_forward1(struct nn_module *m, struct tensor *x);
/* Frees the module and its parameters' references. Accepts NULL. */
void nn_module_free(struct nn_module *m);
/* Moves every parameter to dev (in place in params[]); -1 with error. */
int nn_module_to(struct nn_module *m, enum device dev);

enum nn_activation { NN_RELU, NN_TANH };

/* y = x w^T + b, w [out,in], b [out] (no bias if !bias). */
struct nn_module *nn_linear_new(int in, int out, bool bias, uint64_t *rng);
/* sizes[0] -> sizes[1] -> ... -> sizes[n-1]; activation between layers,
 * none after the last; dropout p (0 = none) after each activation. */
struct nn_module *nn_mlp_new(int n, const int *sizes, enum nn_activation act,
                             float dropout, uint64_t *rng);

/* torch.nn.EmbeddingBag(num, dim, mode): one parameter, the table [num,dim]
 * drawn from N(0,1); forward(indices int64 [L], offsets int64 [B]) -> [B,dim]
 * (tensor_embedding_bag). */
struct nn_module *nn_embedding_bag_new(int num, int dim, enum tensor_bag_mode mode, uint64_t *rng);

/* torch.nn.init.orthogonal_(w, gain) on a CPU f32 weight [out,in]: a
 * Gaussian matrix from rng (max x min of the shape), its QR by LAPACK
 * (dgeqrf, dorgqr), Q's columns times the signs of R's diagonal, Q^T for a
 * wide weight, times gain: W W^T = gain^2 I (out <= in) or W^T W = gain^2 I
 * (out > in). 0, or -1 with tensor_last_error(). */
int nn_init_orthogonal(struct tensor *w, float gain, uint64_t *rng);
/* CleanRL's layer_init (SB3's ortho_init) over a linear, mlp or policy
 * module still on the CPU: every weight nn_init_orthogonal, hidden layers
 * with hidden_gain, the output layer (an mlp's last, a policy's head) with
 * out_gain, a policy's value head with 1; biases 0; a Gaussian head's
 * log-std is left as built. The draws follow the layers' order. 0, or -1
 * with tensor_last_error(). */
int nn_module_init_orthogonal(struct nn_module *m, float hidden_gain, float out_gain, uint64_t *rng);

enum nn_head { NN_HEAD_CATEGORICAL, NN_HEAD_GAUSSIAN };

struct nn_policy_config {
    int obs_dim;
    int act_dim;             /* number of actions (categorical) or action dims */
    int n_hidden;            /* hidden layers */
    int hidden[4];
    enum nn_activation act;
    float dropout;
    enum nn_head head;
    bool value_head;
    float init_log_std;      /* Gaussian head only */
};

/* forward(obs [B,obs_dim]) -> out[0] = logits [B,act_dim] (categorical) or
 * mean [B,act_dim] (Gaussian), out[1] = log_std [act_dim] (Gaussian only),
 * then value [B] if value_head. */
struct nn_module *nn_policy_new(const struct nn_policy_config *cfg, uint64_t *rng);

#endif
