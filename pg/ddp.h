/* DistributedDataParallel: a local module replicated on every member of a
 * process group. Its parameters are broadcast from group rank 0 when it is
 * wrapped; during a distributed-autograd backward, once the local engine
 * has produced the module's gradients in a context, they are averaged
 * across the group in buckets (flattened, allreduced by the group's
 * engine: Gloo on the CPU, NCCL on CUDA) and written back into the
 * context, before the backward returns and so before a dist_optim_step on
 * that context. The allreduces overlap the part of the backward that runs
 * on other workers (gradients sent back through RPC keep flowing) and,
 * bucket by bucket, the flattening of the next bucket; they do not overlap
 * the local engine's own run (its leaf gradients are delivered at its end).
 *
 * Contract (as torch's DDP): every member runs the same number of
 * backwards through its replica, one at a time per process, each reaching
 * the module; a parameter without a gradient in a member's context counts
 * as zeros there (and gets the average). */
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
 * (borrowed). A collective: every member calls it; rank 0's parameter
 * values are broadcast to the others. bucket_bytes 0: DDP_BUCKET_BYTES.
 * NULL with pg_last_error(): parameters on two devices or not f32, the
 * broadcast's failure. */
struct ddp *ddp_new(struct nn_module *m, struct process_group *g, size_t bucket_bytes);
/* Stops the wrapper (waits for a reduction under way). Accepts NULL. */
void ddp_free(struct ddp *d);

/* The module's forward (nn_forward). */
int ddp_forward(struct ddp *d, int n_in, struct tensor **in, int *n_out, struct tensor **out);
struct nn_module *ddp_module(struct ddp *d);
/* Buckets the parameters were split into (reverse order of the module's
 * parameters, each at most bucket_bytes unless one parameter is larger). */
int ddp_num_buckets(const struct ddp *d);
/* Reductions this wrapper has run (one per backward run reaching it). */
int64_t ddp_num_reductions(const struct ddp *d);

#endif
