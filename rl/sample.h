/* Action sampling on plain float buffers, from a caller-owned RNG state, so
 * an observer samples its own actions without allocating: reproducible for
 * a seed whatever the other observers do. References: tensor_categorical_
 * sample's and tensor_gaussian_log_prob's definitions (tests/rl). */
#ifndef TRIB_RL_SAMPLE_H
#define TRIB_RL_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

/* logits [B,C] -> actions[B] drawn from softmax(logits) (greedy: argmax),
 * logp[B] = log_softmax(logits)[action] (may be NULL). */
void rl_sample_categorical(int B, int C, const float *logits, uint64_t *rng, bool greedy, int *actions, float *logp);

/* mean [B,D], log_std [D] -> actions [B,D] = mean + exp(log_std) * N(0,1)
 * (greedy: the mean), logp[B] the diagonal Gaussian log-density of the
 * action (may be NULL). */
void rl_sample_gaussian(int B, int D, const float *mean, const float *log_std, uint64_t *rng, bool greedy,
                        float *actions, float *logp);

/* logp[b] of the given actions: log_softmax(logits)[actions[b]] (C
 * classes), or the diagonal Gaussian log-density (D dims, log_std[D]
 * shared by every row), computed as the samplers above compute theirs. */
void rl_logp_categorical(int B, int C, const float *logits, const int *actions, float *logp);
void rl_logp_gaussian(int B, int D, const float *mean, const float *log_std, const float *actions, float *logp);

#endif
