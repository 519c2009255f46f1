/* rpc/ internals, services layer (rpc/README.md "Layers"): what the two
 * files of distributed autograd share. dist_context.c owns the contexts (the
 * registry, their participants, send functions and gradients);
 * dist_autograd.c (the limits and backward hooks, send/recv functions, the
 * backward, the _backprop and _release handlers) calls into it, never the
 * other way, and hands it the limits; dist_context.c uses none of the
 * public header's names (a tool pairing dist_autograd.h with
 * dist_autograd.c sees no circle).
 * Below it: calls.h. Not installed. */
#ifndef TRIB_RPC_DIST_CONTEXT_H
#define TRIB_RPC_DIST_CONTEXT_H

#include <pthread.h>

#include "rpc/calls.h"
#include "rpc/dist_autograd.h"
#include "tensor/autograd.h"

/* A send function: the message id it went out under, its place in this
 * worker's sending order (what gradient parts sort by: ids are random),
 * and the worker it went to, the only one that may send gradients back
 * into it. */
struct send_entry { int64_t msg_id; uint64_t seq; int to; struct ag_node *node; };
/* A leaf's gradient in a context: one part per engine run that reached it,
 * summed in the order of their keys (not of their arrival), so the result
 * does not depend on how concurrent backwards from several workers
 * interleave: a sync RL update with N observers is reproducible. */
struct grad_part { uint64_t key; struct tensor *g; };
struct grad_entry {
    struct tensor *leaf;
    struct tensor *grad;                /* the sum of the parts; NULL when a part came since */
    struct grad_part *parts;
    int n_parts, cap_parts;
};

struct dist_ctx {
    int64_t id;
    struct dist_ctx *hnext;         /* registry bucket chain */
    int creator;                    /* the worker whose request created it here; -1: made here */
    atomic_int_fast64_t last_used;  /* ms; what the idle timeout measures (creator >= 0) */
    atomic_int refcount;
    pthread_mutex_t mu;
    struct send_entry *sends; int n_sends, cap_sends;
    struct grad_entry *grads; int n_grads, cap_grads;
    int *workers; int n_workers, cap_workers;   /* peers this context touched: its participants here */
};

/* An engine run within a context (struct dist_autograd_run of the header):
 * the context, the key its parts sort by (0 for a backward started here;
 * (sender id + 1) << 40 | message id for one a peer's gradient started),
 * and the run's leaf gradients, which join the context once the run and
 * the run-end hook are done. */
struct dist_autograd_run {
    struct dist_ctx *c;
    uint64_t key;
    struct tensor **leaves, **grads;    /* owned references */
    int n, cap;
};

/* ---- dist_context.c: the registry ---- */
/* Drops a reference to c (NULL is fine); the last one frees it. */
void dist_ctx_free(struct dist_ctx *c);
/* The context `id`, retained, or NULL. */
struct dist_ctx *dist_ctx_get(int64_t id);
/* The context `id`, retained, if worker w took part in it here; else NULL
 * (and an unknown context is not told apart). */
struct dist_ctx *dist_ctx_get_participant(int64_t id, int w);
/* The context `id`, retained, made if missing: by this worker (creator -1)
 * or for a request from worker `creator`, who may have at most `limit` of
 * them here (dist_autograd.c's setting). NULL with err past that limit. */
struct dist_ctx *dist_ctx_get_or_make(int64_t id, int creator, int limit, char *err, size_t cap);
/* Removes id from the registry; returns the registry's reference or NULL. */
struct dist_ctx *dist_ctx_remove(int64_t id);
/* As dist_ctx_remove, only if worker w took part in it here (NULL otherwise). */
struct dist_ctx *dist_ctx_remove_participant(int64_t id, int w);
/* Records that worker w sent to or received from c here. */
void dist_ctx_add_worker(struct dist_ctx *c, int w);
/* Frees what a run holds (not the run itself). */
void dist_run_clear(struct dist_autograd_run *run);
/* Adds the run's gradients to its context as parts of key run->key. */
void dist_run_deliver(struct dist_autograd_run *run);
/* I/O thread: a worker left or died (the core's hook, struct
 * rpc_autograd_hooks); at the heartbeat's tick, the contexts idle past
 * idle ms (< 0: never) go (dist_autograd.c's tick hook, with its setting). */
void dist_ctx_peer_gone(int worker, void *user);
void dist_ctx_expire(int64_t now, int idle);

#endif
