/* Autograd: node lifetime, grad edges, and the backward engine. */
#include "tensor/autograd.h"

#include <stdlib.h>

#include "common/check.h"

static atomic_uint_fast64_t next_seq = 1;
static _Thread_local bool grad_disabled;

bool autograd_set_enabled(bool on)
{
    bool old = !grad_disabled;
    grad_disabled = !on;
    return old;
}

bool autograd_enabled(void) { return !grad_disabled; }

struct ag_node *ag_node_new(const char *name, int n_out, int n_next,
                            ag_backward_fn backward, ag_release_fn release, void *ctx)
{
    CHECK(n_out >= 0 && n_next >= 0);
    struct ag_node *n = trib_xcalloc(1, sizeof *n);
    atomic_init(&n->refcount, 1);
    n->name = name;
    n->backward = backward;
    n->release = release;
    n->n_out = n_out;
    n->n_next = n_next;
    n->next = trib_xcalloc((size_t)n_next + 1, sizeof *n->next);
    n->seq = atomic_fetch_add(&next_seq, 1);
    n->ctx = ctx;
    return n;
}

struct ag_node *ag_node_retain(struct ag_node *n)
{
    if (n) atomic_fetch_add(&n->refcount, 1);
    return n;
}

void ag_node_free(struct ag_node *n)
{
    /* Iterative along the first edge so long chains do not overflow the stack. */
    while (n && atomic_fetch_sub(&n->refcount, 1) == 1) {
        if (!n->released && n->release) n->release(n);
        n->released = true;
        struct ag_node *first = n->n_next ? n->next[0].node : NULL;
        for (int i = 1; i < n->n_next; i++) ag_node_free(n->next[i].node);
        tensor_free(n->leaf);
        free(n->next);
        free(n);
        n = first;
    }
}

void tensor_set_grad_fn(struct tensor *t, struct ag_node *node, int output_nr)
{
    ag_node_free(t->grad_fn);
    t->grad_fn = ag_node_retain(node);
    t->output_nr = output_nr;
    t->requires_grad = true;
}
