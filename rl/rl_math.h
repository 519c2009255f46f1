/* The pure arithmetic of on-policy RL over plain float buffers: discounted
 * returns, normalisation, GAE with time-limit bootstrapping, the episode
 * return window and minibatch permutations. No allocation, no tensors, no
 * errors to report: every function is total over valid sizes and callable
 * from any thread on buffers it does not share. */
#ifndef TRIB_RL_RL_MATH_H
#define TRIB_RL_RL_MATH_H

#include <stdbool.h>
#include <stdint.h>

/* ret[t] = r[t] + gamma * ret[t+1] over one episode of n steps (ret[n] = 0),
 * accumulated in double. out may alias rewards. n <= 0 writes nothing. */
void rl_discounted_returns(int n, const float *rewards, double gamma, float *out);

/* In place: x = (x - mean) / (std + eps), std the unbiased standard
 * deviation (torch.Tensor.std()), computed in double. n == 1 treats std as 0
 * (torch gives nan there), so the single element becomes 0. n <= 0 does
 * nothing. */
void rl_normalize(int n, float *x, double eps);

/* Generalised advantage estimation over a rollout of T steps x B envs,
 * time-major (index t*B + b): CleanRL ppo.py's recursion with time-limit
 * bootstrapping.
 *   values[t*B+b]  V(s_t) recorded at rollout time;
 *   rewards, terminated, truncated  of the step taken at t (vec_env
 *     semantics: when an env finishes at t, the obs of t+1 starts its next
 *     episode);
 *   final_values[t*B+b]  V(final observation) for steps with truncated &&
 *     !terminated, ignored elsewhere; may be NULL only when no step is
 *     truncated without being terminated (aborts otherwise: a caller bug);
 *   next_values[b]  V(s_T), the bootstrap after the last step.
 * delta_t = r_t + gamma * nv_t * (1 - terminated_t) - V_t with
 *   nv_t = final_values_t if truncated_t && !terminated_t,
 *          else next_values (t == T-1) or values[t+1];
 * A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},
 *   done_t = terminated_t || truncated_t, A_T = 0;
 * returns = A + values. Accumulates in double. lambda = 1 gives n-step
 * returns (A2C), lambda = 0 one-step TD errors. T or B <= 0 writes nothing.
 * advantages and returns must not alias the inputs. */
void rl_gae(int T, int B, double gamma, double lambda, const float *rewards, const float *values,
            const bool *terminated, const bool *truncated, const float *final_values,
            const float *next_values, float *advantages, float *returns);

/* V-trace (IMPALA, Espeholt et al. 2018) over the same [T*B] time-major
 * buffers and episode ends as rl_gae, for samples acted by a behaviour
 * policy (log-probabilities behaviour_logp) and learnt by a target policy
 * (target_logp, e.g. the current one of an async run):
 *   rho_t = min(rho_bar, exp(target - behaviour)), c_t = min(c_bar, same);
 *   delta_t = rho_t (r_t + gamma nv_t (1 - terminated_t) - V_t), nv_t as rl_gae;
 *   vs_t = V_t + delta_t + gamma c_t (1 - done_t) (vs_{t+1} - V_{t+1});
 *   A_t = rho_t (r_t + gamma (1 - terminated_t) nvs_t - V_t), nvs_t = vs_{t+1}
 *     (final_values after a truncation, next_values after the last step).
 * vs are the value targets, A the policy-gradient advantages. With equal
 * policies and rho_bar, c_bar >= 1 it is rl_gae with lambda = 1 (n-step
 * returns). Accumulates in double; outputs must not alias the inputs. */
void rl_vtrace(int T, int B, double gamma, double rho_bar, double c_bar, const float *rewards, const float *values,
               const float *behaviour_logp, const float *target_logp, const bool *terminated, const bool *truncated,
               const float *final_values, const float *next_values, float *advantages, float *vs);

/* Episode-return window: the mean of the last `cap` finished episodes. A
 * plain caller-owned struct (no _deinit needed). */
#define RL_WINDOW_MAX 1024
struct rl_window {
    double buf[RL_WINDOW_MAX];
    int cap, n, head;   /* head: the slot the next push writes */
    double sum;         /* of the n values held */
};
/* Empties w and sets its capacity; cap must be 1..RL_WINDOW_MAX (aborts
 * otherwise: validate configuration before). */
void rl_window_init(struct rl_window *w, int cap);
/* Adds x, dropping the oldest value when the window is full. */
void rl_window_push(struct rl_window *w, double x);
/* Mean of the values held; 0 when empty. */
double rl_window_mean(const struct rl_window *w);

/* Explained variance of predictions y_pred for targets y (CleanRL's
 * 1 - Var[y - y_pred] / Var[y], population variances): 1 perfect, 0 no
 * better than the mean, negative worse. NaN when Var[y] is 0 or n < 1. */
double rl_explained_variance(const float *y_pred, const float *y, int n);

/* A uniformly random permutation of 0..n-1 into out (Fisher–Yates, unbiased
 * bounded draws from env_rng_next of envs/env.h), advancing *rng: the same
 * seed gives the same permutation. n <= 0 writes nothing. */
void rl_permutation(int n, uint64_t *rng, int *out);


#endif
