/* Autograd: node lifetime, grad edges, and the backward engine (dependency
 * counting from the roots, later nodes first, leaf gradients summed per run
 * and delivered at the end to a sink or into leaf->grad). */
#include "tensor/autograd.h"

#include <pthread.h>
#include <stdlib.h>

#include "common/check.h"
#include "tensor/backend.h"

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
    /* Iterative, so long chains do not overflow the C stack whichever edge
     * they run through: a freed node's first edge is followed at once, its
     * other edges wait on a heap stack (allocated only for branching graphs). */
    struct ag_node **stack = NULL;
    size_t sp = 0, cap = 0;
    while (n) {
        struct ag_node *follow = NULL;
        if (atomic_fetch_sub(&n->refcount, 1) == 1) {
            if (!n->released && n->release) n->release(n);
            n->released = true;
            for (int i = 0; i < n->n_next; i++) {
                struct ag_node *m = n->next[i].node;
                if (!m) continue;
                if (!follow) {
                    follow = m;
                    continue;
                }
                if (sp == cap) stack = trib_xrealloc(stack, (cap = cap ? 2 * cap : 16) * sizeof *stack);
                stack[sp++] = m;
            }
            tensor_free(n->leaf);
            free(n->next);
            free(n);
        }
        n = follow ? follow : sp ? stack[--sp] : NULL;
    }
    free(stack);
}

void tensor_set_grad_fn(struct tensor *t, struct ag_node *node, int output_nr)
{
    ag_node_free(t->grad_fn);
    t->grad_fn = ag_node_retain(node);
    t->grad_fn_drop = ag_node_free;
    t->output_nr = output_nr;
    t->requires_grad = true;
}

/* ---- grad edges ------------------------------------------------------------ */

struct ag_edge tensor_grad_edge(struct tensor *t)
{
    if (t->grad_fn) return (struct ag_edge){ag_node_retain(t->grad_fn), t->output_nr};
    if (!t->requires_grad) return (struct ag_edge){NULL, 0};
    struct ag_node *acc = ag_node_new("AccumulateGrad", 1, 0, NULL, NULL, NULL);
    acc->leaf = tensor_retain(t);
    return (struct ag_edge){acc, 0};
}

int ag_check_saved(const struct tensor *saved, const char *who)
{
    uint64_t now = atomic_load(&saved->storage->version);
    if (now == saved->saved_version) return 0;
    tensor_error("%s: a tensor saved for backward was modified by an in-place operation "
                 "(saved at version %llu, now version %llu)",
                 who, (unsigned long long)saved->saved_version, (unsigned long long)now);
    return -1;
}

/* ---- the engine -------------------------------------------------------------- */

/* Per-run state of one node: dependencies still to arrive, gradients summed
 * per output. Kept in an open-addressing table keyed by node pointer. */
struct run_rec {
    struct ag_node *node;       /* retained for the run */
    int deps;
    struct tensor **grads;      /* n_out slots */
};

struct run {
    struct run_rec *recs;
    size_t n_recs, cap_recs;
    size_t *table;              /* index+1 into recs, 0 = empty */
    size_t table_cap;           /* power of two */
    size_t *heap;               /* ready records, max-heap on node->seq */
    size_t heap_n, heap_cap;
    /* leaf gradients summed over the run, delivered at the end */
    struct tensor **leaves, **leaf_grads;
    size_t n_leaves, cap_leaves;
    /* with a sink's ready callback: each leaf reached (borrowed from its
     * accumulate nodes) and how many of its accumulate nodes are still to run */
    const struct ag_sink *sink;
    struct tensor **acc_leaves;
    int *acc_left;
    size_t n_acc;
};

static size_t hash_ptr(const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29));
}

static void table_insert(struct run *r, size_t rec_index)
{
    size_t mask = r->table_cap - 1, i = hash_ptr(r->recs[rec_index].node) & mask;
    while (r->table[i]) i = (i + 1) & mask;
    r->table[i] = rec_index + 1;
}

static struct run_rec *run_find(struct run *r, const struct ag_node *n)
{
    if (!r->table_cap) return NULL;
    size_t mask = r->table_cap - 1;
    for (size_t i = hash_ptr(n) & mask; r->table[i]; i = (i + 1) & mask)
        if (r->recs[r->table[i] - 1].node == n) return &r->recs[r->table[i] - 1];
    return NULL;
}

/* Adds a record for n (retained); returns its index. */
static size_t run_add(struct run *r, struct ag_node *n)
{
    if (r->n_recs == r->cap_recs) {
        r->cap_recs = r->cap_recs ? 2 * r->cap_recs : 16;
        r->recs = trib_xrealloc(r->recs, r->cap_recs * sizeof *r->recs);
    }
    if (2 * (r->n_recs + 1) > r->table_cap) {
        free(r->table);
        r->table_cap = r->table_cap ? 2 * r->table_cap : 64;
        r->table = trib_xcalloc(r->table_cap, sizeof *r->table);
        for (size_t i = 0; i < r->n_recs; i++) table_insert(r, i);
    }
    size_t idx = r->n_recs++;
    r->recs[idx] = (struct run_rec){ag_node_retain(n), 0, trib_xcalloc((size_t)n->n_out + 1, sizeof(struct tensor *))};
    table_insert(r, idx);
    return idx;
}

static void heap_push(struct run *r, size_t rec)
{
    if (r->heap_n == r->heap_cap) {
        r->heap_cap = r->heap_cap ? 2 * r->heap_cap : 16;
        r->heap = trib_xrealloc(r->heap, r->heap_cap * sizeof *r->heap);
    }
    size_t i = r->heap_n++;
    r->heap[i] = rec;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (r->recs[r->heap[p]].node->seq >= r->recs[r->heap[i]].node->seq) break;
        size_t t = r->heap[p]; r->heap[p] = r->heap[i]; r->heap[i] = t;
        i = p;
    }
}

static size_t heap_pop(struct run *r)
{
    size_t top = r->heap[0];
    r->heap[0] = r->heap[--r->heap_n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < r->heap_n && r->recs[r->heap[l]].node->seq > r->recs[r->heap[m]].node->seq) m = l;
        if (l + 1 < r->heap_n && r->recs[r->heap[l + 1]].node->seq > r->recs[r->heap[m]].node->seq) m = l + 1;
        if (m == i) break;
        size_t t = r->heap[m]; r->heap[m] = r->heap[i]; r->heap[i] = t;
        i = m;
    }
    return top;
}

static void run_free(struct run *r)
{
    for (size_t i = 0; i < r->n_recs; i++) {
        for (int j = 0; j < r->recs[i].node->n_out; j++) tensor_free(r->recs[i].grads[j]);
        free(r->recs[i].grads);
        ag_node_free(r->recs[i].node);
    }
    for (size_t i = 0; i < r->n_leaves; i++) {
        tensor_free(r->leaves[i]);
        tensor_free(r->leaf_grads[i]);
    }
    free(r->recs);
    free(r->table);
    free(r->heap);
    free(r->leaves);
    free(r->leaf_grads);
    free(r->acc_leaves);
    free(r->acc_left);
}

/* For a ready callback: counts, per leaf, the accumulate nodes the run reaches. */
static void run_count_accumulates(struct run *r)
{
    r->acc_leaves = trib_xcalloc(r->n_recs + 1, sizeof *r->acc_leaves);
    r->acc_left = trib_xcalloc(r->n_recs + 1, sizeof *r->acc_left);
    for (size_t i = 0; i < r->n_recs; i++) {
        struct tensor *leaf = r->recs[i].node->leaf;
        if (!leaf) continue;
        size_t k = 0;
        while (k < r->n_acc && r->acc_leaves[k] != leaf) k++;
        if (k == r->n_acc) r->acc_leaves[r->n_acc++] = leaf;
        r->acc_left[k]++;
    }
}

/* An accumulate node of leaf has run: when it was the leaf's last, the
 * leaf's gradient for the run (if any) goes to the ready callback. */
static void run_leaf_done(struct run *r, struct tensor *leaf)
{
    size_t k = 0;
    while (k < r->n_acc && r->acc_leaves[k] != leaf) k++;
    if (k == r->n_acc || --r->acc_left[k] > 0) return;
    for (size_t i = 0; i < r->n_leaves; i++)
        if (r->leaves[i] == leaf) r->sink->ready(r->sink->user, leaf, r->leaf_grads[i]);
}

/* a + b as a new tensor (same shape, f32, one device), no graph. */
static struct tensor *grad_sum(struct tensor *a, struct tensor *b)
{
    const struct tensor_backend *be = tensor_backend_for(a->device);
    struct tensor *out = tensor_new(a->dtype, a->device, a->ndim, a->shape);
    if (!out) return NULL;
    struct kbcast bc = {{1, 1, 1, a->numel}, {0, 0, 0, 1}, {0, 0, 0, 1}};
    be->binary(KB_ADD, out->storage->data, a->storage->data, b->storage->data, &bc);
    return out;
}

/* Whether g can be a gradient for `have`: f32 (the engine sums gradients
 * with f32 kernels) with have's dtype, shape and device. */
static int check_grad_like(const char *who, const struct tensor *have, const struct tensor *g)
{
    char s1[96], s2[96];
    if (g->dtype != DTYPE_F32) {
        tensor_error("%s: gradient %s %s on %s is not f32", who, dtype_name(g->dtype),
                     shape_str(g->ndim, g->shape, s1, sizeof s1), device_name(g->device));
        return -1;
    }
    if (have->device == g->device && tensor_same_shape(have, g)) return 0;
    tensor_error("%s: gradient %s %s on %s does not match %s %s on %s", who, dtype_name(g->dtype),
                 shape_str(g->ndim, g->shape, s1, sizeof s1), device_name(g->device),
                 dtype_name(have->dtype), shape_str(have->ndim, have->shape, s2, sizeof s2),
                 device_name(have->device));
    return -1;
}

/* Adds g (borrowed) into slot *slot. */
static int slot_add(struct tensor **slot, struct tensor *g, const char *node_name)
{
    if (!*slot) {
        *slot = tensor_retain(g);
        return 0;
    }
    if (check_grad_like(node_name, *slot, g) < 0) return -1;
    struct tensor *sum = grad_sum(*slot, g);
    if (!sum) return -1;
    tensor_free(*slot);
    *slot = sum;
    return 0;
}

static int leaf_add(struct run *r, struct tensor *leaf, struct tensor *g)
{
    if (check_grad_like("autograd_run: AccumulateGrad", leaf, g) < 0) return -1;
    for (size_t i = 0; i < r->n_leaves; i++)
        if (r->leaves[i] == leaf) return slot_add(&r->leaf_grads[i], g, "autograd_run: AccumulateGrad");
    if (r->n_leaves == r->cap_leaves) {
        r->cap_leaves = r->cap_leaves ? 2 * r->cap_leaves : 8;
        r->leaves = trib_xrealloc(r->leaves, r->cap_leaves * sizeof *r->leaves);
        r->leaf_grads = trib_xrealloc(r->leaf_grads, r->cap_leaves * sizeof *r->leaf_grads);
    }
    r->leaves[r->n_leaves] = tensor_retain(leaf);
    /* a struct of its own: g may be the caller's root gradient itself, and
     * leaf->grad must not alias it (writes to either then copy-on-write) */
    r->leaf_grads[r->n_leaves++] = tensor_snapshot(g);
    return 0;
}

static pthread_mutex_t grad_lock = PTHREAD_MUTEX_INITIALIZER;

static void deliver_default(struct tensor *leaf, struct tensor *g)
{
    pthread_mutex_lock(&grad_lock);
    if (!leaf->grad) {
        leaf->grad = tensor_retain(g);
    } else {
        struct tensor *sum = grad_sum(leaf->grad, g);
        CHECK(sum);
        tensor_free(leaf->grad);
        leaf->grad = sum;
    }
    pthread_mutex_unlock(&grad_lock);
}

/* Finds every node reachable from the roots and counts, per node, the edges
 * that point at it from other reachable nodes. */
static void run_discover(struct run *r, int n, const struct ag_edge *roots)
{
    size_t *stack = NULL, sp = 0, cap = 0;
    for (int i = 0; i < n; i++) {
        if (!roots[i].node || run_find(r, roots[i].node)) continue;
        size_t idx = run_add(r, roots[i].node);
        if (sp == cap) stack = trib_xrealloc(stack, (cap = cap ? 2 * cap : 64) * sizeof *stack);
        stack[sp++] = idx;
    }
    while (sp) {
        struct ag_node *node = r->recs[stack[--sp]].node;
        for (int e = 0; e < node->n_next; e++) {
            struct ag_node *m = node->next[e].node;
            if (!m) continue;
            struct run_rec *rec = run_find(r, m);
            if (!rec) {
                size_t idx = run_add(r, m);
                rec = &r->recs[idx];
                if (sp == cap) stack = trib_xrealloc(stack, (cap = cap ? 2 * cap : 64) * sizeof *stack);
                stack[sp++] = idx;
            }
            rec->deps++;
        }
    }
    free(stack);
}

/* Runs one ready node: its backward, then hands the results to its edges. */
static int run_node(struct run *r, size_t idx, bool retain_graph)
{
    struct ag_node *node = r->recs[idx].node;
    struct tensor **grads = r->recs[idx].grads;
    if (node->leaf) {
        int rc = grads[0] ? leaf_add(r, node->leaf, grads[0]) : 0;
        if (rc == 0 && r->acc_left) run_leaf_done(r, node->leaf);
        return rc;
    }
    if (node->released) {
        tensor_error("autograd_run: %s: its saved state was already freed by an earlier backward; "
                     "pass retain_graph to backward through the graph a second time", node->name);
        return -1;
    }
    if (!node->backward) {
        tensor_error("autograd_run: %s has no backward function", node->name);
        return -1;
    }
    struct tensor **gin = trib_xcalloc((size_t)node->n_next + 1, sizeof *gin);
    int rc = node->backward(node, grads, gin);
    for (int j = 0; j < node->n_out; j++) {
        tensor_free(grads[j]);
        grads[j] = NULL;
    }
    if (!retain_graph) {
        if (node->release) node->release(node);
        node->released = true;
    }
    for (int e = 0; e < node->n_next; e++) {
        struct ag_node *m = node->next[e].node;
        if (rc == 0 && m && gin[e]) {
            struct run_rec *rec = run_find(r, m);
            int nr = node->next[e].input_nr;
            if (nr < 0 || nr >= m->n_out) {
                tensor_error("autograd_run: %s: edge %d points at input %d of %s, which has %d",
                             node->name, e, nr, m->name, m->n_out);
                rc = -1;
            } else if (slot_add(&rec->grads[nr], gin[e], node->name) < 0) {
                rc = -1;
            }
        }
        tensor_free(gin[e]);
        if (rc == 0 && m && --run_find(r, m)->deps == 0) heap_push(r, (size_t)(run_find(r, m) - r->recs));
    }
    free(gin);
    return rc;
}

int autograd_run(int n, const struct ag_edge *roots, struct tensor **root_grads,
                 const struct ag_sink *sink, bool retain_graph)
{
    if (n < 0) {
        tensor_error("autograd_run: negative root count %d", n);
        return -1;
    }
    struct run r = {0};
    run_discover(&r, n, roots);
    if (sink && sink->ready) {
        r.sink = sink;
        run_count_accumulates(&r);
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!roots[i].node || !root_grads[i]) continue;
        struct ag_node *node = roots[i].node;
        if (roots[i].input_nr < 0 || roots[i].input_nr >= node->n_out) {
            tensor_error("autograd_run: root %d points at input %d of %s, which has %d",
                         i, roots[i].input_nr, node->name, node->n_out);
            rc = -1;
        } else {
            rc = slot_add(&run_find(&r, node)->grads[roots[i].input_nr], root_grads[i], "autograd_run");
        }
    }
    for (size_t i = 0; i < r.n_recs && rc == 0; i++)
        if (r.recs[i].deps == 0) heap_push(&r, i);
    while (rc == 0 && r.heap_n) rc = run_node(&r, heap_pop(&r), retain_graph);
    if (rc == 0) {
        for (size_t i = 0; i < r.n_leaves; i++) {
            if (sink) sink->accumulate(sink->user, r.leaves[i], r.leaf_grads[i]);
            else deliver_default(r.leaves[i], r.leaf_grads[i]);
        }
    }
    run_free(&r);
    return rc;
}

int tensor_backward(struct tensor *loss, struct tensor *grad, bool retain_graph)
{
    if (!loss->requires_grad) {
        tensor_error("tensor_backward: the tensor does not require grad and has no grad_fn");
        return -1;
    }
    if (loss->dtype != DTYPE_F32) {
        tensor_error("tensor_backward: the tensor is %s; only f32 tensors have gradients", dtype_name(loss->dtype));
        return -1;
    }
    struct tensor *g = grad;
    if (!g) {
        if (loss->numel != 1) {
            char s[96];
            tensor_error("tensor_backward: grad can be implicit only for a one-element tensor, not %s",
                         shape_str(loss->ndim, loss->shape, s, sizeof s));
            return -1;
        }
        g = tensor_new(loss->dtype, loss->device, loss->ndim, loss->shape);
        if (!g) return -1;
        tensor_backend_for(g->device)->fill(g->storage->data, 1.0f, 1);
    } else if (check_grad_like("tensor_backward", loss, g) < 0) {
        return -1;
    }
    struct ag_edge e = tensor_grad_edge(loss);
    int rc = autograd_run(1, &e, &g, NULL, retain_graph);
    ag_node_free(e.node);
    if (g != grad) tensor_free(g);
    return rc;
}
