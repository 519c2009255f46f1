/* DistributedOptimizer (docs/design.md §5): one local optimizer per owner of the
 * given parameter RRefs; a step asks every owner to apply the gradients a
 * distributed-autograd context accumulated there, and waits. */
#ifndef TRIB_OPTIM_DIST_OPTIM_H
#define TRIB_OPTIM_DIST_OPTIM_H

#include <stdint.h>

#include "optim/optim.h"
#include "rpc/rpc.h"

struct dist_optim;

/* Registers the owner-side functions. Call in every process, before
 * rpc_init (after dist_autograd_init). Returns 0. */
int dist_optim_init(void);

/* Builds a local optimizer of `kind` with hyper on each owner of params
 * (RRefs holding f32 parameter tensors). Blocks. NULL with rpc_last_error()
 * (an owner's optim_new error, a dead owner, an RRef that holds no tensor). */
struct dist_optim *dist_optim_new(enum optim_kind kind, const struct optim_hyper *hyper,
                                  int n, struct rref **params);
/* Applies the gradients of context ctx on every owner (a parameter with no
 * gradient in ctx is skipped, like a None grad) and waits. Steps on one
 * owner are serialised; each bumps that owner's version. Returns 0 or -1
 * with rpc_last_error() naming the owner. */
int dist_optim_step(struct dist_optim *o, int64_t ctx);
/* The same, each owner first clipping its gradients of ctx to the global
 * norm max_norm (> 0; 0 is no clipping) as torch.nn.utils.clip_grad_norm_
 * does over that owner's parameters: global over the model when one worker
 * owns all of it, per owner otherwise. */
int dist_optim_step_clipped(struct dist_optim *o, int64_t ctx, double max_norm);

/* Sets the learning rate on every owner (blocks). 0, or -1 with
 * rpc_last_error() (the lr dist_optim_lr reports is then the one before). */
int dist_optim_set_lr(struct dist_optim *o, double lr);
/* The lr last set on every owner (hyper's at dist_optim_new, then each
 * successful dist_optim_set_lr's): the one live copy a program reads, for
 * its logs or its schedule. Any thread. */
double dist_optim_lr(const struct dist_optim *o);
/* Frees the handle and, through the RRefs, the owners' optimizers. */
void dist_optim_free(struct dist_optim *o);

/* Owners of o: count, and the version each reported at the last step. */
int dist_optim_num_owners(const struct dist_optim *o);
int64_t dist_optim_last_version(const struct dist_optim *o, int owner_index);

/* This process's version: optimizer steps applied here as an owner. */
int64_t dist_optim_local_version(void);
/* Sets it (a run resumed from a checkpoint continues its count). */
void dist_optim_set_local_version(int64_t v);

/* Checkpoints: the state (optim_save) of every local optimizer of o, which
 * must all be owned by this worker (the RL agent owns its whole policy).
 * save: a new malloc'ed buffer in *out. load: 0, or -1 with
 * rpc_last_error() (owners elsewhere, or optim_load's complaint). Not
 * concurrently with a step. */
int dist_optim_save_owned(struct dist_optim *o, uint8_t **out, size_t *len);
int dist_optim_load_owned(struct dist_optim *o, const uint8_t *buf, size_t len);
/* For distributed checkpoints (dist_ckpt.h): the RRef of owner i's local
 * optimizer (borrowed; 0 <= i < dist_optim_num_owners), and on that owner
 * its state (optim_save / optim_load format), serialised with its steps.
 * -1 with rpc_last_error() on another worker or optim_load's complaint. */
struct rref *dist_optim_local_rref(const struct dist_optim *o, int i);
int dist_optim_local_save(struct rref *local, uint8_t **out, size_t *len);
int dist_optim_local_load(struct rref *local, const uint8_t *buf, size_t len);

/* The version of worker `worker` (an RPC; blocks). 0 or -1 with error. */
int dist_optim_get_version(const char *worker, int64_t *out);

#endif
