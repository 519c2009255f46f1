/* Sync mode's update on the agent (docs/design.md §6 "Sync on-policy"):
 * one recorded forward over every observer's minibatch and one backward
 * through it (agent/policy_batch.c). */
#ifndef TRIB_AGENT_POLICY_BATCH_H
#define TRIB_AGENT_POLICY_BATCH_H

#include <stdint.h>

#include "agent/policy.h"

/* Sync updates: one recorded forward over the observations of n
 * observers' minibatches (rows in that order), in the thread's current
 * distributed-autograd context. outs[k] gets observer k's part as leaf
 * tensors (requires grad, no graph) to send it: the gradients its backward
 * sends back accumulate on those leaves in the context. Then
 * policy_batch_backward(ctx) carries them, concatenated, through the one
 * forward to the parameters (one backward for the n observers: the same
 * arithmetic as a local update of the merged minibatch). NULL with
 * rpc_last_error(); free with policy_batch_free. */
struct policy_batch;
struct policy_batch *policy_evaluate_batch(struct policy *p, int n, struct tensor *const *obs,
                                           struct rl_policy_out *outs);
int policy_batch_backward(struct policy_batch *b, int64_t ctx);
void policy_batch_free(struct policy_batch *b);

#endif
