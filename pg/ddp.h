/* DistributedDataParallel: a local module replicated on every member of a
 * process group. Its parameters are broadcast from group rank 0 when it is
 * wrapped; during a distributed-autograd backward its gradients are
 * averaged across the group in buckets (flattened, allreduced by the
 * group's engine: Gloo on the CPU, NCCL on CUDA), and the averages are what
 * the backward leaves in the context, so a dist_optim_step on that context
 * applies them. A bucket's allreduce starts as soon as the engine has
 * completed every gradient in it (buckets hold the parameters in reverse
 * order, roughly the order the backward produces them), so it overlaps the
 * rest of the local backward and the part running on other workers; the
 * backward waits for the last one before its gradients join the context.
 *
 * Contract (as torch's DDP): every member runs the same number of
 * backwards through its replica, one at a time per process, each reaching
 * the module; a parameter without a gradient in a member's run counts as
 * zeros there (and gets the average). */
#ifndef TRIB_PG_DDP_H
#define TRIB_PG_DDP_H

#include <stddef.h>

#include "pg/process_group.h"
#include "tensor/nn.h"

#define DDP_BUCKET_BYTES (25u << 20)   /* torch's bucket_cap_mb default */

/* Installs DDP's hook into distributed autograd. Call once per process,
 * after dist_autograd_init. Returns 0. */
int ddp_init(void);

struct ddp;

/* Wraps m (borrowed: it must outlive the wrapper and keep its parameter
 * tensors; do not move it to another device afterwards) for group g
 * (borrowed). A collective: every member calls it. As torch's DDP, the
 * members first compare their parameters (count, then each one's dtype,
 * shape and device class): a mismatch fails ddp_new on every member,
 * naming the parameter and both sides ("ddp_new: group 'g': parameter 0:
 * rank 0 (worker 'w0') has f32[8,16], rank 1 (worker 'w1') has f32[9,16]").
 * Then rank 0's parameter values are broadcast to the others.
 * bucket_bytes 0: DDP_BUCKET_BYTES. NULL with pg_last_error(): parameters
 * on two devices or not f32 (this member only, before any
 * communication), a mismatch, the broadcast's failure. */
struct ddp *ddp_new(struct nn_module *m, struct process_group *g, size_t bucket_bytes);
/* Stops the wrapper (waits for a reduction under way). Accepts NULL. */
void ddp_free(struct ddp *d);

/* The module's forward (nn_forward). */
int ddp_forward(struct ddp *d, int n_in, struct tensor **in, int *n_out, struct tensor **out);
struct nn_module *ddp_module(struct ddp *d);
/* Buckets the parameters were split into (reverse order of the module's
 * parameters, each at most bucket_bytes unless one parameter is larger). */
int ddp_num_buckets(const struct ddp *d);
/* Reductions this wrapper has run (one per backward engine run reaching it). */
int64_t ddp_num_reductions(const struct ddp *d);
/* Buckets whose allreduce started while the engine was still running
 * (all but those completed only by its end, over every reduction). */
int64_t ddp_num_early_buckets(const struct ddp *d);

#endif
