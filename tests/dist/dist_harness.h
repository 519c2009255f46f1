/* Multi-process harness for the distributed-autograd tests: forks the workers
 * before rank 0 ("w0", the test process) starts its agent on a free loopback
 * port, hands them the real endpoint (common/proc.h), always reaps them, and
 * registers the query functions every test uses ("t.grads", "t.pgrad",
 * "t.nctx", "t.rss"). Header-only: each test binary includes it once. */
#ifndef TRIB_TESTS_DIST_HARNESS_H
#define TRIB_TESTS_DIST_HARNESS_H

#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "optim/dist_optim.h"
#include "rpc/dist_autograd.h"
#include "rpc/placement.h"
#include "rpc/remote_module.h"
#include "rpc/rpc.h"
#include "tensor/autograd.h"
#include "tensor/nn.h"
#include "tensor/ops.h"

#include "../rpc/rpc_harness.h"    /* fork before rpc_init, hand out the endpoint */

#define DH_MAX H_MAX
#define DH_HEARTBEAT_MS 100
/* Long enough that a healthy worker starved of CPU on a loaded 2-core box
 * (ctest -j2 under ASan) is not declared dead; the dead-peer tests define a
 * short one before including this file. */
#ifndef DH_HEARTBEAT_TIMEOUT_MS
#define DH_HEARTBEAT_TIMEOUT_MS 10000
#endif

static const char *const DH_NAMES[DH_MAX] = { "w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7" };

/* Child body for rank idx+1: returns its exit code. Runs after the RPC
 * registrations (dh_register_all) but before rpc_init, which it must call
 * (dh_child_init) and end with rpc_shutdown. */
typedef int (*dh_child_fn)(int rank, const char *master, void *arg);

struct dh_world {
    int world;
    struct proc_group h;        /* children: ranks 1..world-1 at h.p[0..] */
};

static struct dh_world DH;

/* An extra registration hook run in every process before rpc_init. */
static void (*dh_extra_register)(void);
/* Rank 0's default RPC timeout (the others keep 30 s, which also bounds
 * their graceful shutdown); set before dh_start. */
static int dh_w0_timeout_ms = 30000;
/* Every process's rpc_opts.transport (AUTO: TRIB_RPC_TRANSPORT decides);
 * set before dh_start. */
static enum rpc_transport dh_transport = RPC_TRANSPORT_AUTO;

/* ---- query functions every process registers ------------------------------ */

/* t.grads(ctx) -> [grad...] of every leaf the context accumulated here. */
static inline int dh_fn_grads(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 1 || args->list.items[0].kind != RPC_INT) return rpc_request_fail(req, "expected (ctx)");
    struct tensor *leaves[64], *grads[64];
    int n = dist_autograd_get_gradients(args->list.items[0].i, 64, leaves, grads);
    if (n < 0) return rpc_request_fail(req, "%s", rpc_last_error());
    *res = rpc_list((size_t)n);
    for (int i = 0; i < n; i++) {
        struct tensor *h = grads[i]->device == DEVICE_CPU ? tensor_retain(grads[i]) : tensor_clone_to(grads[i], DEVICE_CPU);
        res->list.items[i] = rpc_tensor(h);
        tensor_free(h);
        tensor_free(grads[i]);
        tensor_free(leaves[i]);
    }
    return 0;
}

/* t.pgrad(ctx, param RRef owned here) -> [grad (CPU copy) or nil,
 * param->grad == NULL, the gradient's device or -1] */
static inline int dh_fn_pgrad(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 2 || args->list.items[0].kind != RPC_INT || args->list.items[1].kind != RPC_RREF)
        return rpc_request_fail(req, "expected (ctx, rref)");
    const struct rpc_value *v = rref_local_value(args->list.items[1].rref);
    if (!v || v->kind != RPC_TENSOR) return rpc_request_fail(req, "not a tensor RRef owned here");
    struct tensor *g = dist_autograd_get_gradient(args->list.items[0].i, v->tensor);
    *res = rpc_list(3);
    res->list.items[2] = rpc_int(g ? (int64_t)g->device : -1);
    if (g) {
        struct tensor *h = g->device == DEVICE_CPU ? tensor_retain(g) : tensor_clone_to(g, DEVICE_CPU);
        res->list.items[0] = rpc_tensor(h);
        tensor_free(h);
    }
    tensor_free(g);
    res->list.items[1] = rpc_bool(v->tensor->grad == NULL);
    return 0;
}

static inline int dh_fn_nctx(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(dist_autograd_num_contexts());
    return 0;
}

/* Resident set size of this process in bytes, from /proc/self/statm. */
static inline int64_t dh_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    long size = 0, resident = 0;
    int k = fscanf(f, "%ld %ld", &size, &resident);
    fclose(f);
    return k == 2 ? (int64_t)resident * sysconf(_SC_PAGESIZE) : -1;
}

static inline int dh_fn_rss(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(dh_rss_bytes());
    return 0;
}

static inline void dh_register_all(void)
{
    dist_autograd_init();
    remote_module_init();
    dist_optim_init();
    rpc_register("t.grads", dh_fn_grads, NULL);
    rpc_register("t.pgrad", dh_fn_pgrad, NULL);
    rpc_register("t.nctx", dh_fn_nctx, NULL);
    rpc_register("t.rss", dh_fn_rss, NULL);
    if (dh_extra_register) dh_extra_register();
}

static inline struct rpc_opts dh_opts(int rank, int world, const char *master)
{
    struct rpc_opts o = { .name = DH_NAMES[rank], .rank = rank, .world_size = world, .master = master,
                          .heartbeat_ms = DH_HEARTBEAT_MS, .heartbeat_timeout_ms = DH_HEARTBEAT_TIMEOUT_MS,
                          .default_timeout_ms = rank == 0 ? dh_w0_timeout_ms : 30000, .init_timeout_ms = 30000,
                          .transport = dh_transport };
    return o;
}

/* For child bodies: rpc_init as rank `rank`; 0 or -1 (message on stderr). */
static inline int dh_child_init(int rank, const char *master)
{
    struct rpc_opts o = dh_opts(rank, DH.world, master);
    if (rpc_init(&o) < 0) {
        fprintf(stderr, "%s: rpc_init: %s\n", DH_NAMES[rank], rpc_last_error());
        return -1;
    }
    return 0;
}

/* The default child: serves until everyone shuts down. */
static inline int dh_serve(int rank, const char *master, void *arg)
{
    if (dh_child_init(rank, master) < 0) return 10;
    rpc_shutdown(true);
    return 0;
}

/* ---- processes ------------------------------------------------------------ */

/* The child body and its argument, seen by the forked children. */
static dh_child_fn dh_body;
static void *dh_body_arg;

static inline int dh_trampoline(int idx, const char *master, void *arg)
{
    (void)arg;
    return dh_body(idx + 1, master, dh_body_arg);
}

static inline void dh_spawn(int n, dh_child_fn fn, void *arg)
{
    dh_body = fn;
    dh_body_arg = arg;
    h_spawn(&DH.h, n, dh_trampoline, NULL);
}

/* Starts a world of `world` processes: this one is rank 0 ("w0"), the others
 * run child (NULL: dh_serve). */
static inline void dh_start(int world, dh_child_fn child, void *arg)
{
    ck_assert_int_le(world, DH_MAX);
    DH.world = world;
    dh_register_all();
    dh_spawn(world - 1, child ? child : dh_serve, arg);
    struct rpc_opts o = dh_opts(0, world, "tcp://127.0.0.1:0");
    o.on_listening = proc_hand_out_all;
    o.listening_user = &DH.h;
    if (rpc_init(&o) < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rpc_last_error());
        proc_reap_all(&DH.h, 10);    /* the children still waiting exit 99 */
        ck_abort_msg("rpc_init: %s", msg);
    }
}

/* Graceful shutdown and reaping; every child must exit 0. */
static inline void dh_stop(void)
{
    rpc_shutdown(true);
    for (int i = 0; i < DH.h.n; i++) {
        if (DH.h.p[i].reaped) continue;             /* by the test (it killed it, say) */
        int rc = proc_wait(&DH.h, i, 60);
        ck_assert_msg(rc == 0, "%s exited with %d", DH_NAMES[i + 1], rc);
    }
}

/* ---- helpers ------------------------------------------------------------- */

/* rpc_sync with no current distributed-autograd context (queries must not
 * join the context under test). Consumes args. 0 or -1. */
static inline int dh_query(const char *to, const char *fn, struct rpc_value args, struct rpc_value *res)
{
    int64_t cur = dist_autograd_current();
    dist_autograd_set_current(0);
    int rc = rpc_sync(to, fn, &args, res, 0);
    dist_autograd_set_current(cur);
    rpc_value_clear(&args);
    return rc;
}

static inline int64_t dh_remote_nctx(const char *to)
{
    struct rpc_value res = rpc_nil();
    int rc = dh_query(to, "t.nctx", rpc_list(0), &res);
    ck_assert_msg(rc == 0, "t.nctx on %s: %s", to, rpc_last_error());
    ck_assert_int_eq(res.kind, RPC_INT);
    return res.i;
}

static inline int64_t dh_remote_rss(const char *to)
{
    struct rpc_value res = rpc_nil();
    int rc = dh_query(to, "t.rss", rpc_list(0), &res);
    ck_assert_msg(rc == 0, "t.rss on %s: %s", to, rpc_last_error());
    ck_assert_int_eq(res.kind, RPC_INT);
    return res.i;
}

/* Fetches the gradients of ctx held on worker `to` (caller clears *res). */
static inline void dh_remote_grads(const char *to, int64_t ctx, struct rpc_value *res)
{
    struct rpc_value a = rpc_list(1);
    a.list.items[0] = rpc_int(ctx);
    int rc = dh_query(to, "t.grads", a, res);
    ck_assert_msg(rc == 0, "t.grads on %s: %s", to, rpc_last_error());
    ck_assert_int_eq(res->kind, RPC_LIST);
}

/* The tensor of rank `ndim` in a t.grads result (exactly one expected). */
static inline struct tensor *dh_grad_by_ndim(const struct rpc_value *grads, int ndim)
{
    struct tensor *found = NULL;
    for (size_t i = 0; i < grads->list.len; i++) {
        ck_assert_int_eq(grads->list.items[i].kind, RPC_TENSOR);
        if (grads->list.items[i].tensor->ndim == ndim) {
            ck_assert_msg(found == NULL, "two gradients of rank %d", ndim);
            found = grads->list.items[i].tensor;
        }
    }
    ck_assert_msg(found != NULL, "no gradient of rank %d", ndim);
    return found;
}

/* A module parameter of rank ndim (weight 2, bias 1). */
static inline struct tensor *dh_param_by_ndim(struct nn_module *m, int ndim)
{
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i]->ndim == ndim) return m->params[i];
    ck_abort_msg("no parameter of rank %d", ndim);
    return NULL;
}

/* Asserts |a - scale*b| <= abs + rel*|scale*b| elementwise (CPU f32 copies). */
static inline void dh_assert_close_scaled(const struct tensor *a, const struct tensor *b, float scale,
                                   double rel, double abs_tol, const char *what)
{
    ck_assert_msg(a != NULL && b != NULL, "%s: missing tensor", what);
    ck_assert_msg(tensor_same_shape(a, b), "%s: shapes differ", what);
    size_t n = (size_t)a->numel;
    float *x = malloc(n * sizeof *x + 1), *y = malloc(n * sizeof *y + 1);
    tensor_copy_to_host(a, x);
    tensor_copy_to_host(b, y);
    for (size_t i = 0; i < n; i++) {
        double ref = (double)scale * y[i];
        double d = fabs((double)x[i] - ref);
        if (!(d <= abs_tol + rel * fabs(ref))) {
            double xi = x[i];
            free(x);
            free(y);
            ck_abort_msg("%s[%zu]: %.9g vs %.9g", what, i, xi, ref);
        }
    }
    free(x);
    free(y);
}

static inline void dh_assert_close(const struct tensor *a, const struct tensor *b, const char *what)
{
    dh_assert_close_scaled(a, b, 1.0f, 1e-5, 1e-6, what);
}

/* A [rows, cols] f32 CPU tensor of values in [-1, 1) from an LCG. */
static inline struct tensor *dh_random(int64_t rows, int64_t cols, uint32_t seed)
{
    int64_t shape[2] = { rows, cols };
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape);
    float *d = tensor_f32(t);
    uint32_t s = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < rows * cols; i++) {
        s = s * 1664525u + 1013904223u;
        d[i] = (float)((s >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    }
    return t;
}

/* args for the built-in "linear" constructor: (in, out, bias, seed) */
static inline struct rpc_value dh_linear_args(int in, int out, int64_t seed)
{
    struct rpc_value a = rpc_list(4);
    a.list.items[0] = rpc_int(in);
    a.list.items[1] = rpc_int(out);
    a.list.items[2] = rpc_bool(true);
    a.list.items[3] = rpc_int(seed);
    return a;
}

static inline struct remote_module *dh_remote_linear(const char *on, int in, int out, int64_t seed, enum device dev)
{
    struct rpc_value a = dh_linear_args(in, out, seed);
    struct remote_module *rm = remote_module_new(on, "linear", &a, dev);
    rpc_value_clear(&a);
    ck_assert_msg(rm != NULL, "remote_module_new(%s, linear): %s", on, rpc_last_error());
    return rm;
}

/* One-output remote forward (new reference). */
static inline struct tensor *dh_rforward(struct remote_module *rm, struct tensor *x)
{
    struct tensor *out[NN_MAX_IO] = { 0 };
    int n = 0;
    int rc = remote_module_forward(rm, 1, &x, &n, out);
    ck_assert_msg(rc == 0, "remote_module_forward: %s", rpc_last_error());
    ck_assert_int_eq(n, 1);
    return out[0];
}

#endif
