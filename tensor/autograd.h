/* Reverse-mode autograd: a dynamic tape of nodes built by the ops in ops.h,
 * and an engine that runs it backward. The node type is public so layers
 * above (rpc/dist_autograd) can insert their own nodes (send/recv functions)
 * and run the engine from any node with a custom gradient sink. */
#ifndef TRIB_TENSOR_AUTOGRAD_H
#define TRIB_TENSOR_AUTOGRAD_H

#include <stdbool.h>

#include "tensor/tensor.h"

/* An edge points at input `input_nr` of `node` (for a leaf: its accumulate
 * node, input 0). node == NULL means "no gradient flows here". */
struct ag_edge {
    struct ag_node *node;
    int input_nr;
};

/* backward: given the gradients of the node's outputs (grad_out[n_out],
 * an entry may be NULL = zero), writes one new tensor reference (or NULL) per
 * next edge into grad_in[n_next]; the engine takes ownership of them. Returns
 * 0, or -1 with tensor_error set (the engine stops and returns -1). */
typedef int (*ag_backward_fn)(struct ag_node *self, struct tensor **grad_out,
                              struct tensor **grad_in);
/* Frees what the node saved for backward (called once, on release, or after
 * a backward without retain_graph). Must accept being called on a node whose
 * saved state was already released. */
typedef void (*ag_release_fn)(struct ag_node *self);

struct ag_node {
    atomic_int refcount;
    const char *name;          /* "MatmulBackward", "SendRpcBackward", ... */
    ag_backward_fn backward;
    ag_release_fn release;
    int n_out;                 /* gradients this node receives */
    int n_next;                /* edges to the producers of its inputs */
    struct ag_edge *next;      /* owned refs to next[i].node */
    struct tensor *leaf;       /* accumulate nodes only: the leaf (owned ref) */
    uint64_t seq;              /* creation order; later nodes run first */
    bool released;             /* saved state freed (retain_graph was false) */
    void *ctx;                 /* op-specific saved state */
};

/* Makes a node with refcount 1, n_next edges all {NULL,0} and the given
 * functions; ctx is owned by the node (freed by release). */
struct ag_node *ag_node_new(const char *name, int n_out, int n_next,
                            ag_backward_fn backward, ag_release_fn release, void *ctx);
struct ag_node *ag_node_retain(struct ag_node *n);
/* Drops a reference; on the last, calls release (if not yet), drops its
 * next edges and leaf, frees it. Accepts NULL. */
void ag_node_free(struct ag_node *n);

/* The edge a gradient for t flows into: its grad_fn, or for a leaf that
 * requires grad a new accumulate node for t, or {NULL,0} when t needs no
 * gradient. The returned edge holds a new reference to its node. */
struct ag_edge tensor_grad_edge(struct tensor *t);
/* Makes t an output of node (t->grad_fn = retained node, requires_grad on). */
void tensor_set_grad_fn(struct tensor *t, struct ag_node *node, int output_nr);

/* Whether ops record graphs on this thread (default on). Returns the old
 * value. Off is the inference mode. */
bool autograd_set_enabled(bool on);
bool autograd_enabled(void);

/* Where leaf gradients go. Default (sink NULL): added into leaf->grad under
 * a lock private to the engine, which orders concurrent backwards only:
 * reading, zeroing or stepping on leaf->grad meanwhile is the caller's to
 * serialise (a delivery replaces and frees the old grad tensor).
 * Distributed autograd passes a sink that adds into its context.
 * accumulate is called once per leaf per run, with the leaf's gradient
 * summed over the run, after every node ran, on the thread running
 * autograd_run, and not at all when the run fails; grad is borrowed (retain
 * it to keep it). */
struct ag_sink {
    void (*accumulate)(void *user, struct tensor *leaf, struct tensor *grad);
    void *user;
    /* Optional (NULL: none): called once per leaf per run as soon as the
     * leaf's gradient for the run is complete (every accumulate node of the
     * leaf that the run reaches has run), on the thread running autograd_run
     * while the rest of the run goes on, with the same sum accumulate gets
     * at the end (borrowed; retain it to keep it, never write it). The run
     * may still fail afterwards. Lets a caller start work on early
     * gradients (DDP's allreduces) while the backward continues. */
    void (*ready)(void *user, struct tensor *leaf, struct tensor *grad);
};

/* Runs backward from n roots: root i receives gradient root_grads[i] (not
 * consumed; must match the root's output). Executes every node reachable
 * from the roots once all its gradients have arrived, in dependency order.
 * Without retain_graph, each executed node's saved state is released and a
 * second backward through it fails with a clear error. Returns 0 or -1 with
 * tensor_error set (shape mismatch, a leaf gradient that is not f32 (only
 * f32 tensors have gradients), released graph, a tensor saved for
 * backward modified in place, a node's own failure). Reentrant: different
 * threads may run backwards concurrently on disjoint graphs. */
int autograd_run(int n, const struct ag_edge *roots, struct tensor **root_grads,
                 const struct ag_sink *sink, bool retain_graph);

/* loss.backward(): grad NULL means ones (loss must have one element).
 * Accumulates into each leaf's ->grad. Returns 0 or -1 with error (loss
 * needs no grad or is not f32, grad does not match it, autograd_run's). */
int tensor_backward(struct tensor *loss, struct tensor *grad, bool retain_graph);

/* Checks a saved snapshot against its storage's current version; -1 with
 * "...modified by an in-place operation" if it changed. */
int ag_check_saved(const struct tensor *saved, const char *who);

#endif
