/* Sync mode's update on the agent (docs/design.md §6 "Sync on-policy"):
 * one recorded forward over every observer's minibatch and one backward
 * through it of the gradients the observers sent back, and with --overlap
 * the acting copy's answer for the same rows (agent/policy_batch.c). */
#ifndef TRIB_AGENT_POLICY_BATCH_H
#define TRIB_AGENT_POLICY_BATCH_H

#include <stdint.h>

#include "agent/policy.h"

/* Sync updates: one recorded forward over the observations of n
 * observers' minibatches (rows in that order), outside any
 * distributed-autograd context. outs[k] gets observer k's part as plain
 * tensors (no graph) to send it. policy_batch_backward(b, grads, ctx) then
 * carries the gradients the observers' losses gave those parts (grads[k],
 * d(loss_k)/d(outs[k]), shaped as outs[k]: the caller checked them),
 * concatenated in observer order (log_std's summed in observer order),
 * through the one forward to the parameters, accumulating them in ctx, a
 * context of this process only that the optimizer's step reads: one
 * backward for the n observers, the same arithmetic as a local update of
 * the merged minibatch, and no message. NULL or -1 with rpc_last_error();
 * free with policy_batch_free. */
struct policy_batch;
struct policy_batch *policy_evaluate_batch(struct policy *p, int n, struct tensor *const *obs,
                                           struct rl_policy_out *outs);
int policy_batch_backward(struct policy_batch *b, const struct rl_policy_grad *grads, int64_t ctx);
void policy_batch_free(struct policy_batch *b);

/* Sync --overlap's decoupled correction: the proximal policy's answer for
 * the same n minibatches, one forward of the acting copy
 * (policy_forward_frozen) over the rows in observer order, outs[k]
 * observer k's part (no graph; rl_policy_out_clear each). Main thread.
 * 0, or -1 with rpc_last_error() (outs then hold nothing). */
int policy_evaluate_frozen_batch(struct policy *p, int n, struct tensor *const *obs, struct rl_policy_out *outs);

#endif
