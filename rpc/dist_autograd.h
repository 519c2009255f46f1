/* Distributed autograd (docs/design.md §4.4, rpc/README.md): contexts that span workers, send and
 * recv functions recorded on every RPC that carries tensors requiring grad,
 * and PyTorch's FAST-mode backward across workers. Gradients accumulate in
 * the context (dist_autograd_get_gradient), never in ->grad. */
#ifndef TRIB_RPC_DIST_AUTOGRAD_H
#define TRIB_RPC_DIST_AUTOGRAD_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/tensor.h"

/* Installs the RPC hooks and registers the internal functions. Call once in
 * every process, before rpc_init. Returns 0. */
int dist_autograd_init(void);

/* Bounds on the contexts that other workers' requests create here: at
 * most max_per_worker (0: DIST_AUTOGRAD_MAX_PER_WORKER) per creating worker
 * (a request that would make one more fails with an error naming the
 * limit), each freed when released, when its creator or the worker that
 * made it leaves or dies, or after idle_ms without use (0:
 * DIST_AUTOGRAD_IDLE_MS; < 0: never). Contexts made here with
 * dist_autograd_context_new are not bounded. Any thread, any time. */
#define DIST_AUTOGRAD_MAX_PER_WORKER 4096
#define DIST_AUTOGRAD_IDLE_MS (10 * 60 * 1000)
void dist_autograd_set_limits(int max_per_worker, int idle_ms);

/* A new context, made current on this thread. The id is unique across
 * workers (this worker's id in the top 16 bits, the low 48 not guessable:
 * rpc_gen_id). Returns the id (> 0), or
 * -1 with rpc_last_error() when RPC is not initialised. */
int64_t dist_autograd_context_new(void);
/* The thread's current context (0: none). RPCs made while a context is
 * current carry it: the callee runs its handler inside the same context,
 * and tensors requiring grad that cross record send/recv functions. */
int64_t dist_autograd_current(void);
/* Makes ctx current on this thread (0 clears). No check that it exists. */
void dist_autograd_set_current(int64_t ctx);

/* FAST-mode backward from n scalar roots (each seeded with 1) within ctx:
 * runs the local graph, sends gradients back over every recv function it
 * reaches, and waits until every worker involved has finished. Leaf
 * gradients accumulate in each worker's copy of the context (summed over
 * repeated backwards). Graphs are kept until the context is released, so
 * several backwards may run in one context (retain_graph is accepted for
 * PyTorch parity; graphs are always retained). Blocks. Returns 0, or -1 with
 * rpc_last_error(): unknown context, a non-scalar root, a local autograd
 * failure, or a peer's failure, death or silence past the default RPC
 * timeout (naming the peer). */
int dist_autograd_backward(int64_t ctx, int n, struct tensor **roots, bool retain_graph);

/* The gradient accumulated for leaf t in ctx on this worker: a new
 * reference, or NULL (none yet, or unknown context). */
struct tensor *dist_autograd_get_gradient(int64_t ctx, struct tensor *t);
/* Up to cap (leaf, gradient) pairs of ctx on this worker, as new references
 * the caller frees. Returns the count, or -1 for an unknown context. */
int dist_autograd_get_gradients(int64_t ctx, int cap, struct tensor **leaves, struct tensor **grads);

/* Hooks into every local engine run of a backward within a context, for
 * layers that act on a backward's gradients (DDP averages a module's
 * across a process group). Both run on the thread running the engine.
 * leaf_ready: a leaf's gradient for the run is complete (grad borrowed,
 * never to be written), while the rest of the run goes on.
 * run_end: the run is done and its leaf gradients, readable and
 * replaceable through `run` below, are about to join the context; the
 * gradients the run sent to other workers keep flowing meanwhile.
 * Returning -1 (after rpc_set_error) fails the backward with that error
 * and the run's gradients are dropped. One set per process (copied; NULL
 * removes them). Any thread. */
struct dist_autograd_run;
struct dist_autograd_hooks {
    void (*leaf_ready)(void *user, int64_t ctx, struct tensor *leaf, struct tensor *grad);
    int (*run_end)(void *user, int64_t ctx, struct dist_autograd_run *run);
    void *user;
};
void dist_autograd_set_backward_hooks(const struct dist_autograd_hooks *h);
/* The run's gradient for leaf (borrowed), or NULL if the run reached none. */
struct tensor *dist_autograd_run_gradient(const struct dist_autograd_run *run, const struct tensor *leaf);
/* Makes g (a new reference is taken; never written afterwards) the run's
 * gradient for leaf, replacing the run's own or adding one. */
void dist_autograd_run_set_gradient(struct dist_autograd_run *run, struct tensor *leaf, struct tensor *g);

/* Releases ctx here and on every worker it touched (waits for them, each
 * at most the default RPC timeout; a peer that does not answer in time frees
 * its copy when it gets to the request).
 * Clears it as the thread's current context. Returns 0, or -1 if unknown. */
int dist_autograd_release(int64_t ctx);
/* As dist_autograd_release, without waiting for the other workers: each
 * frees its copy when the request reaches it. For a context whose work is
 * over (its backward and step done): the hot path of a training loop. */
int dist_autograd_release_nowait(int64_t ctx);
/* Frees this worker's copy of ctx and tells nobody: for a protocol in which
 * every worker the context touched knows when its own part is over and
 * releases its own copy (a sync RL update: an observer once its backward
 * is done, the agent after its step), which saves the release messages.
 * A copy left behind by a worker that never does is freed by the idle
 * timeout or when its creator leaves. 0, or -1 if unknown here. */
int dist_autograd_release_local(int64_t ctx);

/* Contexts alive in this process (for tests and leak checks). */
int dist_autograd_num_contexts(void);

#endif
