/* RL losses built from tensor ops (tensor/ops.h), so they are differentiable
 * (locally or through distributed autograd) and run on whatever device the
 * policy's outputs are on: action log-probabilities and entropies, and the
 * PPO (CleanRL ppo.py), A2C and REINFORCE (PyTorch's RPC RL example) losses.
 * Plain float arrays (advantages, returns, old log-probs...) become constant
 * tensors off the graph. Inputs may come from the network: every function
 * checks counts, shapes, dtypes, devices and finiteness first and fails with
 * rl_last_error() naming itself and the problem. Thread-safe on distinct
 * tensors (errors are per thread). */
#ifndef TRIB_RL_LOSSES_H
#define TRIB_RL_LOSSES_H

#include <stdbool.h>

#include "tensor/tensor.h"

enum rl_dist { RL_DIST_CATEGORICAL, RL_DIST_GAUSSIAN };

/* Log-probability [N] and entropy [N] of `actions` under the policy output a:
 *   RL_DIST_CATEGORICAL: a = logits f32 [N,C], log_std NULL, actions i64 [N]
 *     or [N,1] in 0..C-1 -> logp = log_softmax(a)[n, action],
 *     entropy = -sum(p * logp) (torch.distributions.Categorical);
 *   RL_DIST_GAUSSIAN: a = mean f32 [N,D], log_std f32 [D] (state-independent,
 *     CleanRL ppo_continuous_action) or [N,D], actions f32 [N,D] -> the
 *     diagonal Normal's log-density and entropy summed over D.
 * All on one device. Writes new references into *logp and *entropy and
 * returns 0, or returns -1 with rl_last_error() (outputs untouched).
 * Differentiable w.r.t. a and log_std. */
int rl_dist_eval(enum rl_dist kind, struct tensor *a, struct tensor *log_std, struct tensor *actions,
                 struct tensor **logp, struct tensor **entropy);

struct rl_ppo_hyper {
    double clip;        /* PPO ratio clip (and value clip), >= 0 */
    double ent_coef, vf_coef;
    bool clip_vloss;    /* PPO only */
    bool norm_adv;      /* normalise advantages over the n samples */
};

/* Unweighted diagnostics of one loss evaluation (CleanRL's logged values). */
struct rl_loss_stats {
    double policy_loss, value_loss, entropy;
    double approx_kl;   /* mean((ratio - 1) - logratio); 0 for A2C */
    double clipfrac;    /* fraction with |ratio - 1| > clip; 0 for A2C */
};

/* CleanRL ppo.py's minibatch loss over n samples, times `weight` (observer k
 * returns weight n_k / N_total, so the agent's sum of the returned losses is
 * the loss over all N samples):
 *   logratio = new_logp - old_logp; ratio = exp(logratio);
 *   adv normalised over these n samples when norm_adv (mean, unbiased std
 *     + 1e-8; n == 1 gives adv 0, see rl_normalize);
 *   pg = mean(max(-adv*ratio, -adv*clamp(ratio, 1-clip, 1+clip)));
 *   v = clip_vloss ? 0.5*mean(max((V-R)^2, (oldV + clamp(V-oldV, -clip, clip) - R)^2))
 *                  : 0.5*mean((V-R)^2);
 *   loss = weight * (pg - ent_coef*mean(entropy) + vf_coef*v).
 * prox_logp (may be NULL: the loss above, bit for bit) makes it decoupled
 * PPO (Hilton, Cobbe, Schulman 2021, "Batch size-invariance for policy
 * optimization"): the clip is centred on a proximal policy, not on the
 * behaviour policy that collected the samples (old_logp), and each sample
 * is weighted by the constant pi_prox / pi_behav:
 *   logratio = new_logp - prox_logp; ratio = exp(logratio);
 *   w = exp(prox_logp - old_logp) (float, no gradient);
 *   pg = mean(max(-adv*w*ratio, -adv*w*clamp(ratio, 1-clip, 1+clip)))
 * (adv normalised first); approx_kl and clipfrac are then of this ratio
 * (against the proximal policy). prox_logp == old_logp gives w = 1 and
 * the loss without it, bit for bit. A weight that is not finite (prox_logp
 * - old_logp past ~88) is refused, naming the sample.
 * new_logp, entropy, new_values: f32 [n] or [n,1] on one device (with grad);
 * old_logp, prox_logp, adv, returns, old_values: n floats, borrowed, not
 * modified (old_values may be NULL when !clip_vloss). stats (may be NULL)
 * gets the unweighted terms; filling it copies the ratios to the host.
 * Returns a scalar tensor (new reference) or NULL with rl_last_error(). */
struct tensor *rl_ppo_loss(struct tensor *new_logp, struct tensor *entropy, struct tensor *new_values,
                           const float *old_logp, const float *prox_logp, const float *adv, const float *returns,
                           const float *old_values, int n, const struct rl_ppo_hyper *h, double weight,
                           struct rl_loss_stats *stats);

/* A2C: weight * (-mean(logp * adv) + vf_coef * 0.5 * mean((V - R)^2)
 *                - ent_coef * mean(entropy)),
 * adv normalised only when h->norm_adv (h->clip and h->clip_vloss unused).
 * Same conventions as rl_ppo_loss. */
struct tensor *rl_a2c_loss(struct tensor *logp, struct tensor *entropy, struct tensor *values,
                           const float *adv, const float *returns, int n, const struct rl_ppo_hyper *h,
                           double weight, struct rl_loss_stats *stats);

/* The normalisation epsilon of the PyTorch RPC RL example's returns:
 * np.finfo(np.float32).eps. */
#define RL_REINFORCE_EPS 1.1920928955078125e-07

/* The PyTorch RPC RL example's REINFORCE loss over n steps:
 * sum_t(-logp_t * w_t), w = rl_discounted_returns(rewards, gamma) then
 * rl_normalize(w, RL_REINFORCE_EPS). logp f32 [n] or [n,1]; rewards n floats
 * (borrowed). The example concatenates every observer's rewards into one
 * sequence before discounting; pass them the same way to reproduce it.
 * Returns a scalar tensor (new reference) or NULL with rl_last_error(). */
struct tensor *rl_reinforce_loss(struct tensor *logp, const float *rewards, int n, double gamma);

#endif
