/* Process groups (torch.distributed's ProcessGroup): collectives among a
 * subset of the RPC world, named by worker names, on existing engines:
 * Gloo for CPU tensors, NCCL for CUDA tensors (when the build has NCCL).
 * The group's rendezvous goes through the RPC framework: its first member
 * (group rank 0) serves Gloo's key-value store and hands out the NCCL
 * unique id over RPC, so no second launcher or port is needed.
 *
 * Every member calls the same collectives in the same order (as with
 * torch.distributed). Before any data moves, the members compare what they
 * passed (the collective, its reduction or root, the tensor's dtype,
 * device class and shape): a mismatch fails the call on every member with
 * the same error naming both sides ("pg_allreduce: group 'g': rank 0
 * (worker 'w0') has f32[1000], rank 1 (worker 'w1') has f32[12]"), and the
 * group stays usable. A collective that cannot finish, because a member
 * died or stopped answering, fails after the group's timeout with an error
 * naming the member when the RPC layer knows it gone; the group is then
 * broken and every later call fails at once. No failure of Gloo or NCCL
 * ends the process. Calls on one group from several threads are
 * serialised.
 *
 * Trust: rank 0's store (the RPC functions pg._store_*) serves only the
 * groups it hosts, and only to their members as the RPC layer identified
 * them: a worker that is not in a group can neither read nor write its
 * rendezvous keys, and a member writes only its own, within a bound. */
#ifndef TRIB_PG_PROCESS_GROUP_H
#define TRIB_PG_PROCESS_GROUP_H

#include <stdbool.h>

#include "tensor/tensor.h"

struct process_group;

enum pg_reduce { PG_SUM, PG_AVG };   /* AVG: floating dtypes only */

#define PG_DEFAULT_TIMEOUT_MS 30000

/* Registers the RPC functions of the rendezvous store. Call once in every
 * process that may be in a group, before rpc_init (like dist_optim_init).
 * Returns 0. */
int pg_init(void);

/* Message of the last failure on this thread ("" if none). Every function
 * below that returns -1/NULL sets it, naming the function and the group. */
const char *pg_last_error(void);

/* Makes group `name` (unique among the groups alive in the world; at most
 * 47 bytes) of the n workers listed, in group-rank order; this worker must
 * be one of them. Every member calls it with the same name and list.
 * Blocks until all members are connected (at most timeout_ms; 0:
 * PG_DEFAULT_TIMEOUT_MS, which also bounds every collective). NULL with
 * pg_last_error(): bad arguments, an unknown worker, a member that never
 * came, a group of that name alive here already (rank 0), a rank 0 that
 * lists other members, Gloo's failure. RPC must be up. */
struct process_group *pg_new(const char *name, int n, const char *const *workers, int timeout_ms);
/* Frees the group (not a collective; call it when every member is done
 * with the group's collectives). Accepts NULL. */
void pg_free(struct process_group *g);

int pg_rank(const struct process_group *g);   /* this worker's group rank */
int pg_size(const struct process_group *g);
const char *pg_name(const struct process_group *g);
/* The worker name of group rank r (NULL if out of range). */
const char *pg_worker(const struct process_group *g, int r);

/* In place: t becomes the sum (or mean) of every member's t. Every member
 * passes a tensor of the same dtype, shape and device class, and the same
 * op; CPU tensors go through Gloo, CUDA tensors through NCCL. Writes
 * through tensor_mutable_data (a snapshot a graph saved keeps the old
 * values). Blocks. 0 or -1. */
int pg_allreduce(struct process_group *g, struct tensor *t, enum pg_reduce op);
/* In place: every member's t becomes group rank root's t (every member
 * passes the same root and a tensor of the same dtype, shape and device
 * class). 0 or -1. */
int pg_broadcast(struct process_group *g, struct tensor *t, int root);
/* Returns once every member has entered it. 0 or -1. */
int pg_barrier(struct process_group *g);
/* out (numel = size * in's numel, same dtype and device class CPU) gets
 * every member's in, in group-rank order (every member's in has the same
 * dtype and shape). CPU tensors only. 0 or -1. */
int pg_allgather(struct process_group *g, struct tensor *in, struct tensor *out);

/* Whether this build can run collectives on CUDA tensors (NCCL linked). */
bool pg_has_nccl(void);

#endif
