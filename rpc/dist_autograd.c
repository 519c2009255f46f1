/* Distributed autograd over the RPC hooks of wire.h: send/recv functions as
 * autograd nodes, and the FAST-mode backward (a recv function's backward
 * ships its gradients to the sender, whose matching send function is run as
 * a root of the local engine), and the release of contexts across workers.
 * The contexts themselves live in dist_context.c. */
#include "rpc/dist_autograd.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "rpc/rpc.h"
#include "rpc/dist_context.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

static atomic_uint_fast64_t next_seq = 1;     /* send functions' order (struct send_entry) */
static _Thread_local int64_t current_ctx;

int64_t dist_autograd_current(void) { return current_ctx; }
void dist_autograd_set_current(int64_t ctx) { current_ctx = ctx; }

/* Context and message ids: rpc_gen_id's (this worker's id in the top 16
 * bits, the rest not guessable), so a worker that took no part cannot
 * name them; the participant checks come first all the same. */
static int64_t make_id(void) { return (int64_t)rpc_gen_id(); }

/* ---- settings -------------------------------------------------------------
 * Owned here: the limits (dist_autograd_set_limits) that dist_context.c's
 * registry is handed, and the backward hooks (under hooks_mu). */

static atomic_int limit_per_worker = DIST_AUTOGRAD_MAX_PER_WORKER;
static atomic_int idle_ms = DIST_AUTOGRAD_IDLE_MS;
static pthread_mutex_t hooks_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dist_autograd_hooks hooks;

void dist_autograd_set_limits(int max_per_worker, int idle)
{
    atomic_store(&limit_per_worker, max_per_worker > 0 ? max_per_worker : DIST_AUTOGRAD_MAX_PER_WORKER);
    atomic_store(&idle_ms, idle == 0 ? DIST_AUTOGRAD_IDLE_MS : idle);
}

void dist_autograd_set_backward_hooks(const struct dist_autograd_hooks *h)
{
    pthread_mutex_lock(&hooks_mu);
    hooks = h ? *h : (struct dist_autograd_hooks){0};
    pthread_mutex_unlock(&hooks_mu);
}

/* A copy of the hooks of dist_autograd_set_backward_hooks. */
static struct dist_autograd_hooks backward_hooks(void)
{
    pthread_mutex_lock(&hooks_mu);
    struct dist_autograd_hooks h = hooks;
    pthread_mutex_unlock(&hooks_mu);
    return h;
}

/* The core's tick hook (I/O thread): idle contexts go. */
static void on_tick(int64_t now, void *user) { dist_ctx_expire(now, atomic_load(&idle_ms)); }

int64_t dist_autograd_context_new(void)
{
    if (!rpc_is_up()) {
        rpc_set_error("dist_autograd_context_new: RPC is not initialised");
        return -1;
    }
    int64_t id = make_id();
    char err[16];
    dist_ctx_free(dist_ctx_get_or_make(id, -1, atomic_load(&limit_per_worker), err, sizeof err));
    current_ctx = id;
    return id;
}

/* ---- gradients sink ------------------------------------------------------- */

/* The sink: the run keeps a private copy of each leaf's gradient. */
static void sink_accumulate(void *user, struct tensor *leaf, struct tensor *grad)
{
    bool was = autograd_set_enabled(false);
    struct tensor *copy = tensor_detach(grad);
    autograd_set_enabled(was);
    CHECK(copy != NULL);
    dist_autograd_run_set_gradient(user, leaf, copy);
    tensor_free(copy);
}

static void sink_ready(void *user, struct tensor *leaf, struct tensor *grad)
{
    struct dist_autograd_run *run = user;
    struct dist_autograd_hooks h = backward_hooks();
    if (h.leaf_ready) h.leaf_ready(h.user, run->c->id, leaf, grad);
}

/* ---- send and recv functions --------------------------------------------- */

/* A send function passes each gradient straight to the tensor it sent,
 * moved back to that tensor's device (the wire carries host copies). */
static int send_backward(struct ag_node *self, struct tensor **grad_out, struct tensor **grad_in)
{
    const enum device *dev = self->ctx;
    for (int i = 0; i < self->n_next; i++) {
        struct tensor *g = grad_out[i];
        if (!g || g->device == dev[i]) {
            grad_in[i] = tensor_retain(g);
        } else if (!(grad_in[i] = tensor_clone_to(g, dev[i]))) {
            return -1;
        }
    }
    return 0;
}

static void send_release(struct ag_node *self)
{
    free(self->ctx);
    self->ctx = NULL;
}

struct recv_info { int from; int64_t ctx_id, msg_id; };

/* Futures of the backward pass running on this thread, waited for before the
 * pass returns (a backward is driven by one thread: the engine's caller). */
struct pending { struct rpc_future **f; int n, cap; };
static _Thread_local struct pending *pending_here;

static int recv_backward(struct ag_node *self, struct tensor **grad_out, struct tensor **grad_in)
{
    const struct recv_info *ri = self->ctx;
    if (!pending_here) {
        tensor_error("dist_autograd: a recv function ran outside dist_autograd_backward");
        return -1;
    }
    struct rpc_value args = rpc_list(3);
    args.list.items[0] = rpc_int(ri->ctx_id);
    args.list.items[1] = rpc_int(ri->msg_id);
    args.list.items[2] = rpc_list((size_t)self->n_out);
    for (int i = 0; i < self->n_out; i++)
        if (grad_out[i]) args.list.items[2].list.items[i] = rpc_tensor(grad_out[i]);
    int64_t saved = current_ctx;     /* internal call: carries no context */
    current_ctx = 0;
    /* The default timeout (as PyTorch): a live peer that never answers
     * fails the backward instead of hanging it. */
    struct rpc_future *f = rpc_async_id(ri->from, "dist_autograd._backprop", &args, 0);
    current_ctx = saved;
    rpc_value_clear(&args);
    struct pending *p = pending_here;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 8;
        p->f = trib_xrealloc(p->f, (size_t)p->cap * sizeof *p->f);
    }
    p->f[p->n++] = f;
    return 0;
}

static void recv_release(struct ag_node *self)
{
    free(self->ctx);
    self->ctx = NULL;
}

static void hook_send(int to, bool is_response, struct tensor **tensors, int n,
                      int64_t *ctx_id, int64_t *msg_id, void *user)
{
    int64_t id = is_response ? *ctx_id : current_ctx;
    *ctx_id = id;
    *msg_id = 0;
    if (!id) return;
    struct dist_ctx *c = dist_ctx_get(id);
    if (!c) {           /* released while in use: send without autograd */
        *ctx_id = 0;
        return;
    }
    dist_ctx_add_worker(c, to);
    int k = 0;
    for (int i = 0; i < n; i++) k += tensors[i]->requires_grad;
    if (k) {
        enum device *dev = trib_xcalloc((size_t)k, sizeof *dev);
        struct ag_node *node = ag_node_new("SendRpcBackward", k, k, send_backward, send_release, dev);
        for (int i = 0, j = 0; i < n; i++)
            if (tensors[i]->requires_grad) {
                dev[j] = tensors[i]->device;
                node->next[j++] = tensor_grad_edge(tensors[i]);
            }
        *msg_id = make_id();
        uint64_t seq = atomic_fetch_add(&next_seq, 1);
        pthread_mutex_lock(&c->mu);
        if (c->n_sends == c->cap_sends) {
            c->cap_sends = c->cap_sends ? 2 * c->cap_sends : 8;
            c->sends = trib_xrealloc(c->sends, (size_t)c->cap_sends * sizeof *c->sends);
        }
        c->sends[c->n_sends++] = (struct send_entry){*msg_id, seq, to, node};
        pthread_mutex_unlock(&c->mu);
    }
    dist_ctx_free(c);
}

static int hook_recv(int from, bool is_response, struct tensor **tensors, int n,
                     int64_t ctx_id, int64_t msg_id, char *err, size_t cap, void *user)
{
    if (!ctx_id) return 0;
    struct dist_ctx *c = is_response ? dist_ctx_get(ctx_id)
                                     : dist_ctx_get_or_make(ctx_id, from, atomic_load(&limit_per_worker), err, cap);
    if (!c) return is_response ? 0 : -1;    /* a response for a context released meanwhile */
    dist_ctx_add_worker(c, from);
    dist_ctx_free(c);
    int k = 0;
    for (int i = 0; i < n; i++) k += tensors[i]->requires_grad;
    if (!k || !msg_id) return 0;
    struct recv_info *ri = trib_xmalloc(sizeof *ri);
    *ri = (struct recv_info){from, ctx_id, msg_id};
    struct ag_node *node = ag_node_new("RecvRpcBackward", k, 0, recv_backward, recv_release, ri);
    for (int i = 0, j = 0; i < n; i++)
        if (tensors[i]->requires_grad) tensor_set_grad_fn(tensors[i], node, j++);
    ag_node_free(node);
    return 0;
}

static void hook_handler(int64_t ctx_id, bool enter, void *user)
{
    current_ctx = enter ? ctx_id : 0;
}

/* ---- backward ------------------------------------------------------------ */

/* Runs the local engine from the given roots within c, then waits for every
 * gradient it sent to other workers to be fully processed there. */
/* Runs the local engine from the given roots within c; the gradients it
 * sends to other workers leave as futures in *p. 0, or -1 with error. */
static int run_engine(struct dist_ctx *c, uint64_t key, int n, const struct ag_edge *roots, struct tensor **grads,
                      struct pending *p)
{
    struct pending *outer = pending_here;
    pending_here = p;
    struct dist_autograd_run run = { c, key, NULL, NULL, 0, 0 };
    struct ag_sink sink = {sink_accumulate, &run, sink_ready};
    int rc = autograd_run(n, roots, grads, &sink, true);
    pending_here = outer;
    if (rc != 0) rpc_set_error("dist_autograd_backward: %s", tensor_last_error());
    struct dist_autograd_hooks h = backward_hooks();
    if (rc == 0 && h.run_end && run.n && h.run_end(h.user, c->id, &run) != 0) rc = -1;
    if (rc == 0) dist_run_deliver(&run);
    dist_run_clear(&run);
    return rc;
}

/* Waits for (and frees) the futures of p; keeps rc, or -1 with the first
 * peer's error. */
static int wait_pending(struct pending *p, int rc)
{
    for (int i = 0; i < p->n; i++) {
        if (rpc_future_wait(p->f[i], NULL) != 0 && rc == 0) {
            rc = -1;
            rpc_set_error("dist_autograd_backward: %s", rpc_future_error(p->f[i]));
        }
        rpc_future_free(p->f[i]);
    }
    free(p->f);
    return rc;
}

/* Runs the local engine, then waits until every gradient it sent to other
 * workers has been fully processed there. */
static int run_local(struct dist_ctx *c, int n, const struct ag_edge *roots, struct tensor **grads)
{
    struct pending p = {0};
    return wait_pending(&p, run_engine(c, 0, n, roots, grads, &p));
}

int dist_autograd_backward(int64_t ctx, int n, struct tensor **roots, bool retain_graph)
{
    (void)retain_graph;
    struct dist_ctx *c = dist_ctx_get(ctx);
    if (!c) {
        rpc_set_error("dist_autograd_backward: unknown context %lld", (long long)ctx);
        return -1;
    }
    struct ag_edge *edges = trib_xcalloc((size_t)n, sizeof *edges);
    struct tensor **ones = trib_xcalloc((size_t)n, sizeof *ones);
    int rc = 0, m = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (roots[i]->numel != 1) {
            rpc_set_error("dist_autograd_backward: root %d has %lld elements, expected a scalar",
                          i, (long long)roots[i]->numel);
            rc = -1;
            break;
        }
        struct ag_edge e = tensor_grad_edge(roots[i]);
        if (!e.node) continue;
        edges[m] = e;
        float one = 1.0f;
        struct tensor *o = tensor_from_f32(roots[i]->ndim, roots[i]->shape, &one);
        ones[m] = roots[i]->device == DEVICE_CPU ? o : tensor_clone_to(o, roots[i]->device);
        if (ones[m] != o) tensor_free(o);
        m++;
    }
    if (rc == 0) rc = run_local(c, m, edges, ones);
    for (int i = 0; i < m; i++) {
        ag_node_free(edges[i].node);
        tensor_free(ones[i]);
    }
    free(edges);
    free(ones);
    dist_ctx_free(c);
    return rc;
}

/* A _backprop request whose downstream gradients are still travelling: it is
 * answered when the last of them is done, without holding a handler thread
 * meanwhile (so chains of hops through one worker cannot exhaust its pool). */
struct backprop_wait {
    struct rpc_request *req;
    struct pending p;
    atomic_int left;       /* futures not yet done, + 1 while registering */
};

/* On a handler thread, once every future is done: answer and clean up. */
static void backprop_finish(void *arg)
{
    struct backprop_wait *w = arg;
    if (wait_pending(&w->p, 0) == 0) {
        struct rpc_value nil = rpc_nil();
        rpc_request_complete(w->req, &nil);
    } else {
        rpc_request_fail(w->req, "%s", rpc_last_error());
        rpc_request_finish_error(w->req);
    }
    free(w);
}

static void backprop_step(struct backprop_wait *w)
{
    if (atomic_fetch_sub(&w->left, 1) == 1) rpc_pool_submit(backprop_finish, w);
}

static void backprop_then(struct rpc_future *f, void *arg) { backprop_step(arg); }

/* dist_autograd._backprop(ctx_id, msg_id, [grads]): runs the send function
 * msg_id of the context as a root, and answers when all it caused is done. */
static int fn_backprop(struct rpc_request *req, const struct rpc_value *args,
                       struct rpc_value *result, void *user)
{
    if (args->kind != RPC_LIST || args->list.len != 3 || args->list.items[0].kind != RPC_INT ||
        args->list.items[1].kind != RPC_INT || args->list.items[2].kind != RPC_LIST)
        return rpc_request_fail(req, "expected (ctx_id, msg_id, [grads])");
    int64_t ctx_id = args->list.items[0].i, msg_id = args->list.items[1].i;
    const struct rpc_value *gl = &args->list.items[2];
    /* The caller as its connection proved it: only a worker that took part
     * in the context here, and only into a send function whose message
     * went to it (the one whose recv function sends these gradients). */
    int caller = rpc_request_caller_id(req);
    char who[64];
    rpc_peer_name(caller, who, sizeof who);
    struct dist_ctx *c = dist_ctx_get_participant(ctx_id, caller);
    if (!c) return rpc_request_fail(req, "no context %lld that %s took part in", (long long)ctx_id, who);
    struct ag_node *node = NULL;
    uint64_t seq = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_sends; i++)
        if (c->sends[i].msg_id == msg_id && c->sends[i].to == caller) {
            node = ag_node_retain(c->sends[i].node);
            seq = c->sends[i].seq;
        }
    pthread_mutex_unlock(&c->mu);
    int rc;
    if (!node) {
        rc = rpc_request_fail(req, "message %lld of context %lld was not sent to %s",
                              (long long)msg_id, (long long)ctx_id, who);
    } else if ((int)gl->list.len != node->n_out) {
        rc = rpc_request_fail(req, "%zu gradients for a send function of %d tensors",
                              gl->list.len, node->n_out);
    } else {
        int n = node->n_out, m = 0;
        struct ag_edge *edges = trib_xcalloc((size_t)n, sizeof *edges);
        struct tensor **grads = trib_xcalloc((size_t)n, sizeof *grads);
        rc = 0;
        for (int i = 0; i < n; i++) {
            const struct rpc_value *g = &gl->list.items[i];
            if (g->kind == RPC_NIL) continue;
            if (g->kind != RPC_TENSOR) { rc = rpc_request_fail(req, "gradient %d is not a tensor", i); break; }
            edges[m] = (struct ag_edge){node, i};
            grads[m++] = g->tensor;
        }
        struct pending p = {0};
        uint64_t key = ((uint64_t)(caller + 1) << 40) | (seq & ((1ull << 40) - 1));
        if (rc == 0 && run_engine(c, key, m, edges, grads, &p) != 0) {
            wait_pending(&p, -1);
            rc = rpc_request_fail(req, "%s", rpc_last_error());
        } else if (rc == 0 && p.n > 0) {
            struct backprop_wait *w = trib_xcalloc(1, sizeof *w);
            w->req = req;
            w->p = p;
            atomic_init(&w->left, p.n + 1);
            for (int i = 0; i < p.n; i++) rpc_future_then(p.f[i], backprop_then, w);
            backprop_step(w);           /* registration done: w may go now */
            rc = RPC_DEFERRED;
        } else if (rc != 0) {
            wait_pending(&p, -1);
        } else {
            free(p.f);
        }
        free(edges);
        free(grads);
        ag_node_free(node);
    }
    dist_ctx_free(c);
    if (rc == 0) *result = rpc_nil();
    return rc;
}

/* ---- release ------------------------------------------------------------- */

enum release_mode { RELEASE_WAIT, RELEASE_NOWAIT, RELEASE_LOCAL };

/* Frees ctx here, then (but RELEASE_LOCAL) tells the workers it touched
 * (except `skip`), with RELEASE_WAIT until they answered. A release that
 * worker `skip` asked for frees only a context it took part in here. */
static int release_here(int64_t ctx, int skip, enum release_mode mode)
{
    struct dist_ctx *c = skip >= 0 ? dist_ctx_remove_participant(ctx, skip) : dist_ctx_remove(ctx);
    if (!c) return -1;
    if (current_ctx == ctx) current_ctx = 0;
    pthread_mutex_lock(&c->mu);
    int n = mode == RELEASE_LOCAL ? 0 : c->n_workers;
    int *ws = trib_xcalloc((size_t)n + 1, sizeof *ws);
    if (n) memcpy(ws, c->workers, (size_t)n * sizeof *ws);   /* none for a context that stayed local */
    pthread_mutex_unlock(&c->mu);
    dist_ctx_free(c);
    struct rpc_future **fs = trib_xcalloc((size_t)n + 1, sizeof *fs);
    int m = 0;
    int64_t saved = current_ctx;     /* internal calls: carry no context */
    current_ctx = 0;
    for (int i = 0; i < n; i++) {
        if (ws[i] == skip || !rpc_worker_alive(ws[i])) continue;
        struct rpc_value args = rpc_list(1);
        args.list.items[0] = rpc_int(ctx);
        fs[m++] = rpc_async_id(ws[i], "dist_autograd._release", &args, 0);
        rpc_value_clear(&args);
    }
    current_ctx = saved;
    for (int i = 0; i < m; i++) {
        if (mode == RELEASE_WAIT) rpc_future_wait(fs[i], NULL);     /* best effort: a dead peer has nothing to free */
        rpc_future_free(fs[i]);           /* not waited for: the pending table keeps it until answered */
    }
    free(fs);
    free(ws);
    return 0;
}

static int fn_release(struct rpc_request *req, const struct rpc_value *args,
                      struct rpc_value *result, void *user)
{
    if (args->kind != RPC_LIST || args->list.len != 1 || args->list.items[0].kind != RPC_INT)
        return rpc_request_fail(req, "expected (ctx_id)");
    /* The caller as its connection proved it: only a participant releases
     * (an unknown context is refused alike, so strangers learn nothing). */
    int caller = rpc_request_caller_id(req);
    int64_t ctx = args->list.items[0].i;
    if (caller < 0 || release_here(ctx, caller, RELEASE_WAIT) != 0) {
        char who[64];
        rpc_peer_name(caller, who, sizeof who);
        return rpc_request_fail(req, "no context %lld that %s took part in", (long long)ctx, who);
    }
    *result = rpc_nil();
    return 0;
}

int dist_autograd_release(int64_t ctx)
{
    if (release_here(ctx, -1, RELEASE_WAIT) != 0) {
        rpc_set_error("dist_autograd_release: unknown context %lld", (long long)ctx);
        return -1;
    }
    return 0;
}

int dist_autograd_release_nowait(int64_t ctx)
{
    if (release_here(ctx, -1, RELEASE_NOWAIT) != 0) {
        rpc_set_error("dist_autograd_release_nowait: unknown context %lld", (long long)ctx);
        return -1;
    }
    return 0;
}

int dist_autograd_release_local(int64_t ctx)
{
    if (release_here(ctx, -1, RELEASE_LOCAL) != 0) {
        rpc_set_error("dist_autograd_release_local: unknown context %lld", (long long)ctx);
        return -1;
    }
    return 0;
}

int dist_autograd_init(void)
{
    static const struct rpc_autograd_hooks core_hooks = {
        .on_send = hook_send, .on_recv = hook_recv, .on_handler = hook_handler,
        .on_peer_gone = dist_ctx_peer_gone, .on_tick = on_tick,
    };
    rpc_set_autograd_hooks(&core_hooks);
    rpc_register("dist_autograd._backprop", fn_backprop, NULL);
    rpc_register("dist_autograd._release", fn_release, NULL);
    return 0;
}
