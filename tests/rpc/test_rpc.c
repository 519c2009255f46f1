/* Check suite for rpc/: real worker processes on loopback, each test with its
 * own ports. Values, nested and deferred calls, concurrency, errors,
 * timeouts, dead peers, RRef lifecycles, hostile input and membership. */
#define _GNU_SOURCE
#include <dirent.h>
#include <arpa/inet.h>
#include <check.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <zmq.h>

#include "common/clock.h"
#include "rpc/rpc.h"
#include "rpc/calls.h"
#include "rpc/rrefs.h"      /* a handle's fork id, which the attacker tests hand to the attacker */
#include "rpc_harness.h"

static const char *NAMES[] = { "w0", "w1", "w2", "w3" };

/* ---- functions every process registers ------------------------------------ */

static int fn_echo(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 1) return rpc_request_fail(req, "expected 1 argument");
    *res = rpc_value_copy(&args->list.items[0]);
    return 0;
}

static int fn_add(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 2) return rpc_request_fail(req, "expected 2 arguments");
    if (args->list.items[0].kind != RPC_INT || args->list.items[1].kind != RPC_INT)
        return rpc_request_fail(req, "expected ints");
    *res = rpc_int(args->list.items[0].i + args->list.items[1].i);
    return 0;
}

static int fn_slow(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    usleep((useconds_t)(args->list.items[0].i * 1000));
    return 0;
}

/* [next, x]: returns next.add(x, 1) + 1000 (A -> B -> C) */
static int fn_chain(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rpc_value a = rpc_list(2), r;
    a.list.items[0] = rpc_value_copy(&args->list.items[1]);
    a.list.items[1] = rpc_int(1);
    int rc = rpc_sync(args->list.items[0].str.ptr, "add", &a, &r, 0);
    rpc_value_clear(&a);
    if (rc < 0) return rpc_request_fail(req, "nested: %s", rpc_last_error());
    *res = rpc_int(r.i + 1000);
    return 0;
}

struct deferred { struct rpc_request *req; int64_t x; };

static void *complete_later(void *arg)
{
    struct deferred *d = arg;
    usleep(20000);
    struct rpc_value v = rpc_int(d->x * 2);
    rpc_request_complete(d->req, &v);
    free(d);
    return NULL;
}

static int fn_deferred(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct deferred *d = malloc(sizeof *d);
    d->req = req;
    d->x = args->list.items[0].i;
    pthread_t t;
    pthread_create(&t, NULL, complete_later, d);
    pthread_detach(t);
    return RPC_DEFERRED;
}

/* park(ms, ...): a deferred reply (nil) completed ms later by another thread. */
static void *unpark_later(void *arg)
{
    struct deferred *d = arg;
    usleep((useconds_t)d->x * 1000);
    rpc_request_complete(d->req, NULL);
    free(d);
    return NULL;
}

static int fn_park(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct deferred *d = malloc(sizeof *d);
    d->req = req;
    d->x = args->list.items[0].i;
    pthread_t t;
    pthread_create(&t, NULL, unpark_later, d);
    pthread_detach(t);
    return RPC_DEFERRED;
}

/* Batching, the agent's pattern: requests wait until 4 have arrived, then
 * one thread answers them all with the batch's sum. */
static pthread_mutex_t batch_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rpc_request *batch[4];
static int64_t batch_x[4];
static int nbatch;

static void *answer_batch(void *arg)
{
    struct rpc_request **reqs = arg;
    int64_t sum = 0;
    for (int i = 0; i < 4; i++) sum += batch_x[i];
    for (int i = 0; i < 4; i++) {
        struct rpc_value v = rpc_list(2);
        v.list.items[0] = rpc_int(sum);
        v.list.items[1] = rpc_int(batch_x[i]);
        rpc_request_complete(reqs[i], &v);
    }
    free(reqs);
    return NULL;
}

static int fn_batched(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_mutex_lock(&batch_mu);
    batch_x[nbatch] = args->list.items[0].i;
    batch[nbatch++] = req;
    if (nbatch == 4) {
        struct rpc_request **reqs = malloc(sizeof batch);
        memcpy(reqs, batch, sizeof batch);
        nbatch = 0;
        pthread_t t;
        pthread_create(&t, NULL, answer_batch, reqs);
        pthread_detach(t);
    }
    pthread_mutex_unlock(&batch_mu);
    return RPC_DEFERRED;
}

static atomic_long counter;
static int fn_count(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(atomic_fetch_add(&counter, 1) + 1);
    return 0;
}

/* relay(to, fn, args): this worker calls to.fn(args) through the public
 * SDK, as an attacker would (the tests make a third worker one); returns
 * "" on success, else the error text. */
static int fn_relay(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 3 || args->list.items[0].kind != RPC_STR || args->list.items[1].kind != RPC_STR ||
        args->list.items[2].kind != RPC_LIST)
        return rpc_request_fail(req, "expected (to, fn, args)");
    struct rpc_value out = rpc_nil();
    int rc = rpc_sync(args->list.items[0].str.ptr, args->list.items[1].str.ptr, &args->list.items[2], &out, 0);
    rpc_value_clear(&out);
    *res = rpc_str(rc == 0 ? "" : rpc_last_error());
    return 0;
}

static int fn_owned(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(rref_owned_count());
    return 0;
}

/* Counter objects for RRef tests. */
static atomic_int destroyed;
struct counter { int64_t v; };
static void counter_destroy(void *o) { free(o); atomic_fetch_add(&destroyed, 1); }
static int counter_value(void *o, struct rpc_value *out) { *out = rpc_int(((struct counter *)o)->v); return 0; }
static const struct rpc_type COUNTER = { "Counter", counter_destroy, counter_value };

static void *ctor_counter(struct rpc_request *req, const struct rpc_value *args, void *u)
{
    if (args->list.len != 1 || args->list.items[0].kind != RPC_INT) {
        rpc_request_fail(req, "expected an int");
        return NULL;
    }
    struct counter *c = malloc(sizeof *c);
    c->v = args->list.items[0].i;
    return c;
}

static int m_add(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct counter *c = obj;
    c->v += args->list.items[0].i;
    *res = rpc_int(c->v);
    return 0;
}

/* After swap_methods: add subtracts, and peek reads the counter inline. */
static int m_sub(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct counter *c = obj;
    c->v -= args->list.items[0].i;
    *res = rpc_int(c->v);
    return 0;
}

static int m_peek(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(((struct counter *)obj)->v);
    return 0;
}

/* Changes Counter's method table on this worker: "add" replaced (inline
 * now), "peek" added (inline). */
static int fn_swap_methods(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    rpc_register_method_ex("Counter", "add", m_sub, NULL, RPC_FN_INLINE);
    rpc_register_method_ex("Counter", "peek", m_peek, NULL, RPC_FN_INLINE);
    return 0;
}

/* [ms]: sleeps, then reads the counter; fails if the object was destroyed
 * while the method ran (the owner must keep it alive for the call). */
static int m_slow_get(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    int before = atomic_load(&destroyed);
    usleep((useconds_t)(args->list.items[0].i * 1000));
    if (atomic_load(&destroyed) != before) return rpc_request_fail(req, "Counter destroyed during the call");
    *res = rpc_int(((struct counter *)obj)->v);
    return 0;
}

/* A gate the tests open, shared with the forked workers (MAP_SHARED,
 * mapped in main before anything forks): the "gated" functions and
 * SlowVal's to_value wait at it until a test opens it (at most
 * GATE_CAP_S), so a test holds a worker busy exactly as long as it needs,
 * and sees who waits, without a message through that worker. */
#define GATE_CAP_S 30.0
struct gate { _Atomic int open, waiting; };
static struct gate *gate;

static void gate_pass(void)
{
    atomic_fetch_add(&gate->waiting, 1);
    for (double t0 = trib_now_s(); !atomic_load(&gate->open) && trib_now_s() - t0 < GATE_CAP_S;) usleep(1000);
    atomic_fetch_sub(&gate->waiting, 1);
}

/* Before a test's workers start. */
static void gate_close(void)
{
    atomic_store(&gate->open, 0);
    atomic_store(&gate->waiting, 0);
}

static void gate_open(void) { atomic_store(&gate->open, 1); }

/* Until n waiters are at the gate (60 s at most). */
static void gate_await(int n)
{
    double t0 = trib_now_s();
    while (atomic_load(&gate->waiting) < n) {
        ck_assert_msg(trib_now_s() - t0 < 60, "%d of %d waiters at the gate after 60 s", atomic_load(&gate->waiting), n);
        usleep(1000);
    }
}

/* gated(): returns nil once the gate opens. */
static int fn_gated(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    gate_pass();
    return 0;
}

/* park_gated(): a deferred reply (nil) completed by another thread once
 * the gate opens. */
static void *unpark_at_gate(void *arg)
{
    gate_pass();
    rpc_request_complete(arg, NULL);
    return NULL;
}

static int fn_park_gated(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_t t;
    pthread_create(&t, NULL, unpark_at_gate, req);
    pthread_detach(t);
    return RPC_DEFERRED;
}

/* SlowVal objects: to_value waits at the gate. */
static void slowval_destroy(void *o) { free(o); }
static int slowval_value(void *o, struct rpc_value *out)
{
    gate_pass();
    *out = rpc_int(*(int64_t *)o);
    return 0;
}
static const struct rpc_type SLOWVAL = { "SlowVal", slowval_destroy, slowval_value };
static void *ctor_slowval(struct rpc_request *req, const struct rpc_value *args, void *u)
{
    int64_t *v = malloc(sizeof *v);
    *v = 5;
    return v;
}

static int fn_destroyed(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(atomic_load(&destroyed));
    return 0;
}

static struct rref *held;
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;

static int fn_hold(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.items[0].kind != RPC_RREF) return rpc_request_fail(req, "not an RRef");
    pthread_mutex_lock(&held_mu);
    rref_free(held);
    held = rref_retain(args->list.items[0].rref);
    pthread_mutex_unlock(&held_mu);
    *res = rpc_bool(rref_is_owner(held));
    return 0;
}

static int fn_use_held(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rpc_value a = rpc_list(1);
    a.list.items[0] = rpc_int(1);
    pthread_mutex_lock(&held_mu);
    struct rref *r = held ? rref_retain(held) : NULL;
    pthread_mutex_unlock(&held_mu);
    if (!r) return rpc_request_fail(req, "nothing held");
    int rc = rref_rpc_sync(r, "add", &a, res, 0);
    rpc_value_clear(&a);
    rref_free(r);
    return rc < 0 ? rpc_request_fail(req, "%s", rpc_last_error()) : 0;
}

static int fn_drop(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_mutex_lock(&held_mu);
    rref_free(held);
    held = NULL;
    pthread_mutex_unlock(&held_mu);
    return 0;
}

/* [rref] on the owner: returns [is_owner, local object's value] */
static int fn_local(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rref *r = args->list.items[0].rref;
    struct counter *c = rref_local_object(r);
    *res = rpc_list(2);
    res->list.items[0] = rpc_bool(rref_is_owner(r));
    res->list.items[1] = rpc_int(c ? c->v : -1);
    return 0;
}

/* Returns an RRef it creates on `args[0]` (RRef as a result). */
static int fn_make_remote(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rpc_value a = rpc_list(1);
    a.list.items[0] = rpc_int(100);
    struct rref *r = rpc_remote(args->list.items[0].str.ptr, "counter", &a, 0);
    rpc_value_clear(&a);
    if (!r) return rpc_request_fail(req, "%s", rpc_last_error());
    *res = rpc_rref(r);
    rref_free(r);
    return 0;
}

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char event_log[512];

static void on_event(const struct rpc_event *ev, void *u)
{
    static const char *k[] = { "join", "leave", "failed" };
    pthread_mutex_lock(&log_mu);
    size_t l = strlen(event_log);
    snprintf(event_log + l, sizeof event_log - l, "%s:%s,", k[ev->kind], ev->name);
    pthread_mutex_unlock(&log_mu);
}

static int fn_events(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_mutex_lock(&log_mu);
    *res = rpc_str(event_log);
    pthread_mutex_unlock(&log_mu);
    return 0;
}

/* This process's rpc_get_stats: [spoofed, unverified, malformed, cut
 * connections, forks expired]. */
static int fn_stats(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rpc_stats st;
    rpc_get_stats(&st);
    *res = rpc_list(5);
    res->list.items[0] = rpc_int((int64_t)st.dropped_spoofed);
    res->list.items[1] = rpc_int((int64_t)st.dropped_unverified);
    res->list.items[2] = rpc_int((int64_t)st.dropped_malformed);
    res->list.items[3] = rpc_int((int64_t)st.connections_cut);
    res->list.items[4] = rpc_int((int64_t)st.forks_expired);
    return 0;
}

/* Nothing was dropped here nor on `other`: honest traffic is never refused. */
static void assert_nothing_dropped(const char *other)
{
    struct rpc_stats st;
    rpc_get_stats(&st);
    ck_assert_int_eq(st.dropped_spoofed + st.dropped_unverified + st.dropped_malformed + st.refused_busy, 0);
    ck_assert_int_eq(st.held_messages, 0);
    struct rpc_value r;
    ck_assert_msg(rpc_sync(other, "stats", NULL, &r, 0) == 0, "%s", rpc_last_error());
    for (int i = 0; i < 5; i++) ck_assert_int_eq(r.list.items[i].i, 0);
    rpc_value_clear(&r);
}

static atomic_bool leave_now;
static int fn_leave(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    atomic_store(&leave_now, true);
    return 0;
}

/* Distributed-autograd hook points: a request carrying a tensor that
 * requires grad gets ids 42/7 on the way out; the response is stamped
 * msg id 8. Every receive is logged. */
static char hook_log[512];
static pthread_mutex_t hook_mu = PTHREAD_MUTEX_INITIALIZER;

static void hook_send(int to, bool is_response, struct tensor **ts, int n, int64_t *ctx, int64_t *msg, void *u)
{
    bool grad = false;
    for (int i = 0; i < n; i++) grad |= ts[i]->requires_grad;
    if (!grad) return;
    if (!is_response) { *ctx = 42; *msg = 7; }
    else if (*ctx == 42) *msg = 8;
}

static int hook_recv(int from, bool is_response, struct tensor **ts, int n, int64_t ctx, int64_t msg,
                     char *err, size_t cap, void *u)
{
    if (!ctx) return 0;
    pthread_mutex_lock(&hook_mu);
    size_t l = strlen(hook_log);
    snprintf(hook_log + l, sizeof hook_log - l, "%s from %d ctx %lld msg %lld n %d grad %d;",
             is_response ? "resp" : "req", from, (long long)ctx, (long long)msg, n, n ? ts[n - 1]->requires_grad : -1);
    pthread_mutex_unlock(&hook_mu);
    return 0;
}

static int fn_hook_log(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_mutex_lock(&hook_mu);
    *res = rpc_str(hook_log);
    pthread_mutex_unlock(&hook_mu);
    return 0;
}

/* The caller's requests this worker has received and not yet let go of,
 * this one included. */
static int fn_requests_of_caller(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    int n;
    int64_t bytes;
    if (!rpc_requests_of(rpc_request_caller_id(req), &n, &bytes)) return rpc_request_fail(req, "no such caller");
    *res = rpc_int(n);
    return 0;
}

/* [name]: this process's rpc_worker_info.via for worker `name`. */
static int fn_via(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rpc_worker_info wi;
    if (rpc_get_worker_info(args->list.items[0].str.ptr, &wi) < 0) return rpc_request_fail(req, "%s", rpc_last_error());
    *res = rpc_str(wi.via);
    return 0;
}

static void register_all(void)
{
    static const struct rpc_autograd_hooks hooks = { .on_send = hook_send, .on_recv = hook_recv };
    rpc_set_autograd_hooks(&hooks);
    rpc_register("hook_log", fn_hook_log, NULL);
    rpc_register("echo", fn_echo, NULL);
    rpc_register_ex("add", fn_add, NULL, RPC_FN_INLINE);
    rpc_register("slow", fn_slow, NULL);
    rpc_register("chain", fn_chain, NULL);
    rpc_register("deferred", fn_deferred, NULL);
    rpc_register_ex("batched", fn_batched, NULL, RPC_FN_INLINE);
    rpc_register("count", fn_count, NULL);
    rpc_register("owned", fn_owned, NULL);
    rpc_register("relay", fn_relay, NULL);
    rpc_register("destroyed", fn_destroyed, NULL);
    rpc_register("hold", fn_hold, NULL);
    rpc_register("use_held", fn_use_held, NULL);
    rpc_register("drop", fn_drop, NULL);
    rpc_register("local", fn_local, NULL);
    rpc_register("make_remote", fn_make_remote, NULL);
    rpc_register("events", fn_events, NULL);
    rpc_register("leave", fn_leave, NULL);
    rpc_register("stats", fn_stats, NULL);
    rpc_register("via", fn_via, NULL);
    rpc_register("requests_of_caller", fn_requests_of_caller, NULL);
    rpc_register("swap_methods", fn_swap_methods, NULL);
    rpc_register("park", fn_park, NULL);
    rpc_register("gated", fn_gated, NULL);
    rpc_register("park_gated", fn_park_gated, NULL);
    rpc_register_ctor("counter", &COUNTER, ctor_counter, NULL);
    rpc_register_ctor("slowval", &SLOWVAL, ctor_slowval, NULL);
    rpc_register_method("Counter", "add", m_add, NULL);
    rpc_register_method("Counter", "slow_get", m_slow_get, NULL);
}

/* The cluster keypair when a test turns CURVE on (set before forking). */
static bool use_curve;
static char curve_pub[41], curve_sec[41];

/* Long unless a test that kills a peer shortens it: a healthy worker starved
 * of CPU on a loaded box must not be declared dead. Set before start_world
 * (children inherit it through fork). */
static int hb_timeout_ms = 10000;
/* Rank 0's default call timeout, and every worker's bound on one caller's
 * unanswered requests (0: the defaults). */
static int w0_timeout_ms = 20000;
static int max_pending;
static size_t max_pending_bytes;
/* Every worker's rpc_opts.transport. */
static enum rpc_transport transport;
/* Rank 0 admits RPC_RANK_DYNAMIC workers (the tests of late joiners). */
static bool allow_dynamic = true;

static struct rpc_opts opts_for(int rank, int world, const char *master)
{
    struct rpc_opts o = { .name = NAMES[rank], .rank = rank, .world_size = world, .master = master,
                          .heartbeat_ms = 100, .heartbeat_timeout_ms = hb_timeout_ms,
                          .default_timeout_ms = rank == 0 ? w0_timeout_ms : 20000, .on_event = on_event,
                          .max_pending_per_worker = max_pending, .max_pending_bytes_per_worker = max_pending_bytes,
                          .allow_dynamic = rank == 0 && allow_dynamic, .transport = transport };
    if (use_curve) {
        o.curve = true;
        o.curve_public_key = curve_pub;
        o.curve_secret_key = curve_sec;
    }
    return o;
}

/* A static worker that serves until everyone shuts down. Exit 0 only if no
 * RRef is left owned at the end. */
static int serve_child(int idx, const char *master, void *arg)
{
    int world = *(int *)arg;
    register_all();
    struct rpc_opts o = opts_for(idx + 1, world, master);
    if (rpc_init(&o) < 0) {
        fprintf(stderr, "child %d: %s\n", idx + 1, rpc_last_error());
        return 10;
    }
    rpc_shutdown(true);
    return 0;
}

static struct proc_group H;

static void start_world(int world)
{
    static int w;
    w = world;
    register_all();
    h_spawn(&H, world - 1, serve_child, &w);
    struct rpc_opts o = opts_for(0, world, "tcp://127.0.0.1:0");
    o.on_listening = proc_hand_out_all;
    o.listening_user = &H;
    int rc = rpc_init(&o);
    if (rc < 0) {
        proc_reap_all(&H, 10);
        ck_abort_msg("rpc_init: %s", rpc_last_error());
    }
}

static void stop_world(void)
{
    rpc_shutdown(true);
    for (int i = 0; i < H.n; i++) ck_assert_int_eq(proc_wait(&H, i, 30), 0);
}

static struct tensor *random_f32(int64_t n, unsigned seed)
{
    int64_t shape[1] = { n };
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 1, shape);
    uint32_t s = seed;
    float *d = tensor_f32(t);
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t bits = s;
        memcpy(&d[i], &bits, 4);      /* every bit pattern, NaNs included */
    }
    return t;
}

static void echo_check(const char *to, struct rpc_value v)
{
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = v;
    int rc = rpc_sync(to, "echo", &args, &res, 0);
    ck_assert_msg(rc == 0, "echo %s: %s", rpc_kind_name(v.kind), rpc_last_error());
    ck_assert_msg(rpc_value_equal(&args.list.items[0], &res), "echo of %s differs", rpc_kind_name(v.kind));
    rpc_value_clear(&res);
    rpc_value_clear(&args);
}

/* ---- tests ------------------------------------------------------------------ */

START_TEST(test_echo_values)
{
    start_world(2);
    struct rpc_worker_info info;
    ck_assert_int_eq(rpc_get_worker_info("w1", &info), 0);
    ck_assert_int_eq(info.id, 1);
    ck_assert_int_eq(rpc_get_worker_info_by_id(1, &info), 0);
    ck_assert_str_eq(info.name, "w1");
    ck_assert_int_eq(rpc_get_worker_info("nobody", &info), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: unknown worker 'nobody'");

    echo_check("w1", rpc_nil());
    echo_check("w1", rpc_bool(true));
    echo_check("w1", rpc_bool(false));
    echo_check("w1", rpc_int(INT64_MIN));
    echo_check("w1", rpc_int(INT64_MAX));
    echo_check("w1", rpc_int(-1));
    echo_check("w1", rpc_double(-0.0));
    echo_check("w1", rpc_double(1e-310));
    echo_check("w1", rpc_str(""));
    echo_check("w1", rpc_str("héllo wörld"));
    echo_check("w1", rpc_bytes("\0\1\2\377", 4));
    echo_check("w1", rpc_bytes("", 0));
    int64_t n[] = { 0, 1, 1048576 };
    for (int i = 0; i < 3; i++) {
        struct tensor *t = random_f32(n[i], 7u + (unsigned)i);
        echo_check("w1", rpc_tensor(t));
        tensor_free(t);
    }
    int64_t shape[3] = { 2, 3, 4 };
    struct tensor *ti = tensor_new(DTYPE_I64, DEVICE_CPU, 3, shape);
    for (int i = 0; i < 24; i++) ((int64_t *)tensor_data(ti))[i] = (int64_t)i * -123456789;
    tensor_set_requires_grad(ti, true);
    struct tensor *ts = tensor_scalar_f32(3.5f);
    /* requires_grad crosses the wire */
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_tensor(ti);
    ck_assert_int_eq(rpc_sync("w1", "echo", &args, &res, 0), 0);
    ck_assert(res.kind == RPC_TENSOR && res.tensor->requires_grad && res.tensor->ndim == 3);
    ck_assert(rpc_value_equal(&res, &args.list.items[0]));
    rpc_value_clear(&res);
    rpc_value_clear(&args);

    struct rpc_value l = rpc_list(4);
    l.list.items[0] = rpc_int(1);
    l.list.items[1] = rpc_tensor(ti);
    l.list.items[2] = rpc_list(2);
    l.list.items[2].list.items[0] = rpc_tensor(ts);
    l.list.items[2].list.items[1] = rpc_str("x");
    l.list.items[3] = rpc_map(2);
    rpc_map_set(&l.list.items[3], 0, "a", rpc_double(2.5));
    rpc_map_set(&l.list.items[3], 1, "b", rpc_list(0));
    echo_check("w1", l);
    tensor_free(ti);
    tensor_free(ts);

    /* calling ourselves works too */
    echo_check("w0", rpc_str("self"));

    /* Traffic counters: 10 echoes of a 4 MiB tensor are 10 messages and
     * at least 40 MiB each way, plus the heartbeats: a ping each way per
     * 100 ms (heartbeat_ms), however long a loaded box takes. */
    struct rpc_stats before, after;
    double t0 = trib_now_s();
    rpc_get_stats(&before);
    struct tensor *big = random_f32(1 << 20, 99u);
    for (int i = 0; i < 10; i++) {
        struct rpc_value a = rpc_list(1), r;
        a.list.items[0] = rpc_tensor(big);
        ck_assert_int_eq(rpc_sync("w1", "echo", &a, &r, 0), 0);
        rpc_value_clear(&r);
        rpc_value_clear(&a);
    }
    tensor_free(big);
    rpc_get_stats(&after);
    double secs = trib_now_s() - t0;
    uint64_t sent = after.msgs_sent - before.msgs_sent, recv = after.msgs_recv - before.msgs_recv;
    uint64_t most = 10 + (uint64_t)(secs / 0.1) + 5;
    ck_assert_msg(sent >= 10 && sent <= most, "sent %llu messages in %.2f s", (unsigned long long)sent, secs);
    ck_assert_msg(recv >= 10 && recv <= most, "received %llu messages in %.2f s", (unsigned long long)recv, secs);
    ck_assert_uint_ge(after.bytes_sent - before.bytes_sent, 10ull * 4 * 1048576);
    ck_assert_uint_lt(after.bytes_sent - before.bytes_sent, 10ull * 4 * 1048576 + 100000);
    ck_assert_uint_ge(after.bytes_recv - before.bytes_recv, 10ull * 4 * 1048576);
    /* A 4 MiB echo to ourselves goes through our own sockets both ways: the
     * request and the reply are each sent and received here. */
    big = random_f32(1 << 20, 98u);
    rpc_get_stats(&before);
    echo_check("w0", rpc_tensor(big));
    rpc_get_stats(&after);
    tensor_free(big);
    ck_assert_uint_ge(after.bytes_sent - before.bytes_sent, 2ull * 4 * 1048576);
    ck_assert_uint_lt(after.bytes_sent - before.bytes_sent, 2ull * 4 * 1048576 + 100000);
    ck_assert_uint_ge(after.bytes_recv - before.bytes_recv, 2ull * 4 * 1048576);
    ck_assert_uint_ge(after.msgs_sent - before.msgs_sent, 2);
    stop_world();
}
END_TEST

struct caller_arg { int calls; int ok; };

static void *caller_thread(void *arg)
{
    struct caller_arg *a = arg;
    for (int i = 0; i < a->calls; i++) {
        struct rpc_value r;
        if (rpc_sync("w1", "count", NULL, &r, 0) == 0 && r.kind == RPC_INT) a->ok++;
        rpc_value_clear(&r);
    }
    return NULL;
}

START_TEST(test_nested_deferred_concurrent)
{
    start_world(3);
    /* A -> B -> C */
    struct rpc_value args = rpc_list(2), res;
    args.list.items[0] = rpc_str("w2");
    args.list.items[1] = rpc_int(41);
    ck_assert_msg(rpc_sync("w1", "chain", &args, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 1042);
    rpc_value_clear(&args);

    /* deferred reply completed from another thread */
    args = rpc_list(1);
    args.list.items[0] = rpc_int(21);
    struct rpc_future *fs[8];
    for (int i = 0; i < 8; i++) fs[i] = rpc_async("w2", "deferred", &args, 0);
    ck_assert_int_eq(rpc_future_wait_all(fs, 8), 0);
    for (int i = 0; i < 8; i++) {
        ck_assert(rpc_future_done(fs[i]));
        ck_assert_int_eq(rpc_future_wait(fs[i], &res), 0);
        ck_assert_int_eq(res.i, 42);
        rpc_future_free(fs[i]);
    }
    rpc_value_clear(&args);

    /* four requests answered together by one thread (deferred, batched) */
    struct rpc_future *bf[4];
    for (int i = 0; i < 4; i++) {
        args = rpc_list(1);
        args.list.items[0] = rpc_int(10 + i);
        bf[i] = rpc_async("w1", "batched", &args, 0);
        rpc_value_clear(&args);
    }
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(rpc_future_wait(bf[i], &res) == 0, "%s", rpc_last_error());
        ck_assert_int_eq(res.list.items[0].i, 10 + 11 + 12 + 13);
        ck_assert_int_eq(res.list.items[1].i, 10 + i);
        rpc_value_clear(&res);
        rpc_future_free(bf[i]);
    }

    /* 64 concurrent callers to one worker */
    pthread_t th[64];
    struct caller_arg ca[64];
    for (int i = 0; i < 64; i++) {
        ca[i] = (struct caller_arg){ 20, 0 };
        pthread_create(&th[i], NULL, caller_thread, &ca[i]);
    }
    for (int i = 0; i < 64; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(ca[i].ok, 20);
    }
    ck_assert_int_eq(rpc_sync("w1", "count", NULL, &res, 0), 0);
    ck_assert_int_eq(res.i, 64 * 20 + 1);
    assert_nothing_dropped("w2");
    stop_world();
}
END_TEST

static atomic_int then_called;
static void then_cb(struct rpc_future *f, void *u) { if (!rpc_future_error(f)) atomic_fetch_add(&then_called, 1); }

/* rpc_future_wait_any: the lowest done index, NULL entries skipped, a
 * failed future counts as done, a timeout names itself, and more futures
 * than fit on its stack (40) work the same. */
START_TEST(test_future_wait_any)
{
    gate_close();
    start_world(2);
    struct rpc_future *fs[40] = { 0 };
    ck_assert_int_eq(rpc_future_wait_any(fs, 0, 10), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_future_wait_any: no future to wait on");
    ck_assert_int_eq(rpc_future_wait_any(fs, 3, -1), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_future_wait_any: no future to wait on");
    struct rpc_value add = rpc_list(2), res;
    add.list.items[0] = rpc_int(2);
    add.list.items[1] = rpc_int(3);
    /* replies that come only once the gate opens */
    for (int i = 1; i < 39; i++) fs[i] = rpc_async("w1", "park_gated", NULL, 0);
    double t0 = trib_now_s();
    ck_assert_int_eq(rpc_future_wait_any(fs, 39, 100), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: no future done within 100 ms");
    ck_assert_msg(trib_now_s() - t0 >= 0.095, "returned after %.3f s", trib_now_s() - t0);
    ck_assert_int_eq(rpc_future_wait_any(fs, 39, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: no future done within 0 ms");
    fs[39] = rpc_async("w1", "add", &add, 0);
    ck_assert_int_eq(rpc_future_wait_any(fs, 40, 20000), 39);
    ck_assert(!rpc_future_done(fs[1]));
    ck_assert_int_eq(rpc_future_wait(fs[39], &res), 0);
    ck_assert_int_eq(res.i, 5);
    rpc_value_clear(&res);
    /* the parked ones wake it when their replies come */
    gate_open();
    int k = rpc_future_wait_any(fs, 39, 20000);
    ck_assert_msg(k >= 1 && k < 39, "%d: %s", k, rpc_last_error());
    ck_assert_ptr_null(rpc_future_error(fs[k]));
    ck_assert_int_eq(rpc_future_wait_all(fs + 1, 39), 0);
    /* a failed future is done */
    fs[0] = rpc_async("nobody", "add", &add, 0);
    ck_assert_int_eq(rpc_future_wait_any(fs, 1, -1), 0);
    ck_assert_str_eq(rpc_future_error(fs[0]), "rpc: unknown worker 'nobody' calling nobody.add");
    for (int i = 0; i < 40; i++) rpc_future_free(fs[i]);
    rpc_value_clear(&add);
    stop_world();
}
END_TEST

START_TEST(test_errors_and_timeouts)
{
    gate_close();
    start_world(2);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(1);
    ck_assert_int_eq(rpc_sync("w1", "add", &args, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: add: expected 2 arguments");
    ck_assert_int_eq(rpc_sync("w1", "nosuch", &args, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: unknown function 'nosuch'");
    ck_assert_int_eq(rpc_sync("w9", "add", &args, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: unknown worker 'w9' calling w9.add");
    rpc_value_clear(&args);

    /* a call answered only once the gate opens (30 s at most): its 100 ms
     * timeout ends it */
    double t0 = trib_now_s();
    ck_assert_int_eq(rpc_sync("w1", "gated", NULL, &res, 100), -1);
    double dt = trib_now_s() - t0;
    ck_assert_str_eq(rpc_last_error(), "rpc: timed out after 100 ms calling w1.gated");
    ck_assert_msg(dt >= 0.095 && dt < GATE_CAP_S / 3, "timeout took %.3f s", dt);
    gate_open();
    /* the late reply is dropped; the worker keeps serving */
    args = rpc_list(1);
    args.list.items[0] = rpc_int(600);
    struct rpc_future *f = rpc_async("w1", "slow", &args, 0);
    rpc_future_then(f, then_cb, NULL);
    ck_assert_int_eq(rpc_future_wait(f, NULL), 0);
    rpc_future_free(f);
    ck_assert_int_eq(atomic_load(&then_called), 1);
    rpc_value_clear(&args);
    args = rpc_list(2);
    args.list.items[0] = rpc_int(2);
    args.list.items[1] = rpc_int(3);
    ck_assert_int_eq(rpc_sync("w1", "add", &args, &res, 0), 0);
    ck_assert_int_eq(res.i, 5);
    rpc_value_clear(&args);
    /* Internal calls to worker ids that cannot exist (a header's sender may
     * be -1, and a recv function calls its sender back) fail at once. */
    int bad[] = { -1, -2, 1 << 20 };
    for (int i = 0; i < 3; i++) {
        f = rpc_async_id(bad[i], "add", NULL, -1);
        t0 = trib_now_s();
        while (!rpc_future_done(f) && trib_now_s() - t0 < 30) usleep(1000);
        ck_assert_msg(rpc_future_done(f), "a call to worker %d is still pending", bad[i]);
        char want[128];
        snprintf(want, sizeof want, "rpc: worker %d is not reachable calling add", bad[i]);
        ck_assert_str_eq(rpc_future_error(f), want);
        rpc_future_free(f);
    }
    stop_world();
}
END_TEST

/* While a call waits for its answer, the I/O thread sleeps until the next
 * heartbeat or the call's deadline: about two wake-ups per heartbeat (its
 * own ping, the peer's), not a 5 ms tick (20 per 100 ms heartbeat). */
START_TEST(test_io_sleeps_while_a_call_waits)
{
    gate_close();
    start_world(2);
    struct rpc_future *f = rpc_async("w1", "gated", NULL, 0);
    struct rpc_stats before, after;
    rpc_get_stats(&before);
    double t0 = trib_now_s();
    do {
        usleep(1000);
        rpc_get_stats(&after);
    } while (after.msgs_recv - before.msgs_recv < 10 && trib_now_s() - t0 < GATE_CAP_S / 2);
    ck_assert_msg(!rpc_future_done(f), "the gated call was answered");
    uint64_t pings = after.msgs_recv - before.msgs_recv, woke = after.io_wakeups - before.io_wakeups;
    ck_assert_uint_ge(pings, 10);
    ck_assert_msg(woke <= 3 * pings + 10, "the I/O thread woke %llu times for %llu heartbeats",
                  (unsigned long long)woke, (unsigned long long)pings);
    gate_open();
    ck_assert_int_eq(rpc_future_wait(f, NULL), 0);
    rpc_future_free(f);
    stop_world();
}
END_TEST

START_TEST(test_kill9_peer)
{
    hb_timeout_ms = 1000;
    start_world(3);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(30000);
    struct rpc_future *fs[5];
    for (int i = 0; i < 5; i++) fs[i] = rpc_async("w1", "slow", &args, 60000);
    rpc_value_clear(&args);
    usleep(100000);
    kill(H.p[0].pid, SIGKILL);
    double t0 = trib_now_s();
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(rpc_future_wait(fs[i], NULL), -1);
        ck_assert_str_eq(rpc_last_error(), "rpc: lost w1 (no heartbeat for 1000 ms) calling w1.slow");
        rpc_future_free(fs[i]);
    }
    /* Promptly: a second after w1's last ping, give or take a loaded box's
     * delays; their own ends (the reply, the call timeout) are 30 and 60 s
     * away. */
    double dt = trib_now_s() - t0;
    ck_assert_msg(dt < 10.0, "pending calls failed after %.3f s (heartbeat timeout 1 s)", dt);
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 1000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_str_eq(ev.name, "w1");
    /* the others carry on */
    args = rpc_list(1);
    args.list.items[0] = rpc_str("still here");
    ck_assert_int_eq(rpc_sync("w2", "echo", &args, &res, 0), 0);
    ck_assert_str_eq(res.str.ptr, "still here");
    rpc_value_clear(&res);
    rpc_value_clear(&args);
    ck_assert_int_eq(rpc_sync("w1", "echo", NULL, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: unknown worker 'w1' calling w1.echo");
    rpc_shutdown(true);
    ck_assert_int_eq(proc_wait(&H, 0, 10), 128 + SIGKILL);
    ck_assert_int_eq(proc_wait(&H, 1, 30), 0);
}
END_TEST

static int64_t call_int(const char *to, const char *fn)
{
    struct rpc_value r;
    ck_assert_msg(rpc_sync(to, fn, NULL, &r, 0) == 0, "%s.%s: %s", to, fn, rpc_last_error());
    ck_assert_int_eq(r.kind, RPC_INT);
    return r.i;
}

static void wait_int(const char *to, const char *fn, int64_t want)
{
    double t0 = trib_now_s();
    int64_t got;
    while ((got = call_int(to, fn)) != want && trib_now_s() - t0 < 30) usleep(5000);
    ck_assert_msg(got == want, "%s.%s = %lld, want %lld", to, fn, (long long)got, (long long)want);
}

START_TEST(test_rref_lifecycle)
{
    gate_close();
    start_world(3);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(5);
    struct rref *r = rpc_remote("w1", "counter", &args, 0);
    ck_assert_ptr_nonnull(r);
    ck_assert(!rref_is_owner(r));
    ck_assert_int_eq(rref_owner(r), 1);
    ck_assert_uint_eq(rref_id(r) >> 48, 0);         /* created by worker 0 */
    args.list.items[0] = rpc_int(3);
    ck_assert_msg(rref_rpc_sync(r, "add", &args, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 8);
    ck_assert_int_eq(rref_to_here(r, &res, 0), 0);
    ck_assert_int_eq(res.i, 8);
    ck_assert(rref_confirmed_by_owner(r));
    ck_assert_ptr_null(rref_local_object(r));
    ck_assert_str_eq(rpc_last_error(), "rref_local_object: this worker is not the owner");
    ck_assert_int_eq(call_int("w1", "owned"), 1);

    /* user -> user fork across three workers (G2), then the first user goes */
    struct rpc_value a = rpc_list(1);
    a.list.items[0] = rpc_rref(r);
    ck_assert_int_eq(rpc_sync("w2", "hold", &a, &res, 0), 0);
    ck_assert(res.kind == RPC_BOOL && !res.b);
    rpc_value_clear(&a);
    rref_free(r);
    usleep(100000);
    ck_assert_int_eq(call_int("w1", "destroyed"), 0);
    ck_assert_int_eq(call_int("w1", "owned"), 1);
    ck_assert_int_eq(rpc_sync("w2", "use_held", NULL, &res, 0), 0);
    ck_assert_int_eq(res.i, 9);
    ck_assert_int_eq(rpc_sync("w2", "drop", NULL, &res, 0), 0);
    wait_int("w1", "destroyed", 1);
    wait_int("w1", "owned", 0);

    /* an RRef passed back to its owner resolves locally */
    args.list.items[0] = rpc_int(77);
    r = rpc_remote("w1", "counter", &args, 0);
    a = rpc_list(1);
    a.list.items[0] = rpc_rref(r);
    ck_assert_int_eq(rpc_sync("w1", "local", &a, &res, 0), 0);
    ck_assert(res.list.items[0].b);
    ck_assert_int_eq(res.list.items[1].i, 77);
    rpc_value_clear(&res);
    rpc_value_clear(&a);
    rref_free(r);
    wait_int("w1", "destroyed", 2);
    wait_int("w1", "owned", 0);

    /* an RRef returned as a result: w2 creates it on w1, hands it to us */
    a = rpc_list(1);
    a.list.items[0] = rpc_str("w1");
    ck_assert_int_eq(rpc_sync("w2", "make_remote", &a, &res, 0), 0);
    rpc_value_clear(&a);
    ck_assert_int_eq(res.kind, RPC_RREF);
    struct rpc_value v;
    ck_assert_int_eq(rref_to_here(res.rref, &v, 0), 0);
    ck_assert_int_eq(v.i, 100);
    rpc_value_clear(&res);
    wait_int("w1", "destroyed", 3);
    wait_int("w1", "owned", 0);

    /* remote over a plain function holds its value */
    args.list.items[0] = rpc_str("kept");
    r = rpc_remote("w2", "echo", &args, 0);
    ck_assert_int_eq(rref_to_here(r, &v, 0), 0);
    ck_assert_str_eq(v.str.ptr, "kept");
    rpc_value_clear(&v);
    rref_free(r);
    wait_int("w2", "owned", 0);

    /* a constructor error surfaces on use */
    rpc_value_clear(&args.list.items[0]);
    args.list.items[0] = rpc_str("not an int");
    r = rpc_remote("w1", "counter", &args, 0);
    ck_assert_int_eq(rref_to_here(r, &v, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: counter: expected an int");
    rref_free(r);
    wait_int("w1", "owned", 0);

    /* owner-local RRef */
    rpc_value_clear(&args.list.items[0]);
    args.list.items[0] = rpc_int(11);
    r = rpc_remote("w0", "counter", &args, 0);
    ck_assert(rref_is_owner(r));
    ck_assert_int_eq(rref_to_here(r, &v, 0), 0);
    ck_assert_int_eq(v.i, 11);
    ck_assert_ptr_nonnull(rref_local_object(r));
    ck_assert_ptr_null(rref_local_value(r));
    ck_assert_str_eq(rpc_last_error(), "rref_local_value: the RRef holds an object of type Counter");
    ck_assert_int_eq(rref_owned_count(), 1);
    rref_free(r);
    ck_assert_int_eq(rref_owned_count(), 0);

    /* an owner-local to_here honours its timeout while the construction
     * waits for a handler thread (all 4 of ours wait at the gate) */
    struct rpc_future *busy[4];
    for (int i = 0; i < 4; i++) busy[i] = rpc_async("w0", "gated", NULL, 0);
    gate_await(4);
    rpc_value_clear(&args.list.items[0]);
    args.list.items[0] = rpc_int(12);
    r = rpc_remote("w0", "counter", &args, 0);
    double t0 = trib_now_s();
    ck_assert_int_eq(rref_to_here(r, &v, 100), -1);
    double dt = trib_now_s() - t0;
    char want[128];
    snprintf(want, sizeof want, "rpc: timed out after 100 ms waiting for RRef %#llx to be built",
             (unsigned long long)rref_id(r));
    ck_assert_str_eq(rpc_last_error(), want);
    ck_assert_msg(dt < GATE_CAP_S / 3, "to_here took %.3f s", dt);
    gate_open();
    ck_assert_int_eq(rref_to_here(r, &v, 0), 0);       /* built once a thread is free */
    ck_assert_int_eq(v.i, 12);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(rpc_future_wait(busy[i], NULL), 0);
        rpc_future_free(busy[i]);
    }
    rref_free(r);
    ck_assert_int_eq(rref_owned_count(), 0);
    rpc_value_clear(&args);
    stop_world();
}
END_TEST

/* A user deleted right after a method call it made: the owner serves the
 * call, keeping the object until it returns, then destroys it (G1). */
/* A method call through an RRef made before its type's method table
 * changed runs what is registered now: a replaced method's new code, a
 * method added since. An inline method answers while every handler thread
 * of the owner is busy; an unknown one fails by name. */
START_TEST(test_rref_method_table_changed)
{
    gate_close();
    start_world(2);
    struct rpc_value a = rpc_list(1), res;
    a.list.items[0] = rpc_int(10);
    struct rref *r = rpc_remote("w1", "counter", &a, 0);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(rref_rpc_sync(r, "add", &a, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 20);
    ck_assert_int_eq(rref_rpc_sync(r, "peek", NULL, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: __rref_call: type Counter has no method 'peek'");
    ck_assert_int_eq(rpc_sync("w1", "swap_methods", NULL, &res, 0), 0);
    ck_assert_msg(rref_rpc_sync(r, "add", &a, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 10);                    /* the new add subtracts */
    ck_assert_msg(rref_rpc_sync(r, "peek", NULL, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 10);
    /* every handler thread of w1 held at the gate (4, the default): an
     * inline method still answers, a pooled one waits */
    struct rpc_future *busy[4];
    for (int i = 0; i < 4; i++) busy[i] = rpc_async("w1", "gated", NULL, 0);
    gate_await(4);
    struct rpc_value zero = rpc_list(1);
    zero.list.items[0] = rpc_int(0);
    struct rpc_future *pooled = rref_rpc_async(r, "slow_get", &zero, 0);
    rpc_value_clear(&zero);
    ck_assert_msg(rref_rpc_sync(r, "peek", NULL, &res, 10000) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 10);
    ck_assert(!rpc_future_done(pooled));
    gate_open();
    ck_assert_int_eq(rpc_future_wait_all(busy, 4), 0);
    for (int i = 0; i < 4; i++) rpc_future_free(busy[i]);
    ck_assert_msg(rpc_future_wait(pooled, NULL) == 0, "%s", rpc_last_error());
    rpc_future_free(pooled);
    rpc_value_clear(&a);
    rref_free(r);
    stop_world();
}
END_TEST

START_TEST(test_rref_del_during_call)
{
    start_world(2);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(5);
    struct rref *r = rpc_remote("w1", "counter", &args, 0);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(rref_to_here(r, &res, 0), 0);
    ck_assert_int_eq(res.i, 5);
    args.list.items[0] = rpc_int(300);
    /* the delete follows the call on the wire, before or while it runs */
    struct rpc_future *f = rref_rpc_async(r, "slow_get", &args, 0);
    rref_free(r);
    ck_assert_msg(rpc_future_wait(f, &res) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 5);
    rpc_future_free(f);
    wait_int("w1", "destroyed", 1);
    wait_int("w1", "owned", 0);
    rpc_value_clear(&args);
    stop_world();
}
END_TEST

static void *to_here_thread(void *arg)
{
    struct rpc_value v;
    intptr_t rc = rref_to_here(arg, &v, 0) == 0 && v.i == 5 ? 0 : 1;
    return (void *)rc;
}

/* A slow to_value on the owner does not stall its I/O thread: RRef
 * operations that run there (a method call arriving, a delete) go on. The
 * to_value runs until the method call has returned (the gate): were the
 * call stuck behind it, it would wait out the gate's 30 s. */
START_TEST(test_rref_slow_to_value)
{
    gate_close();
    start_world(2);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(1);
    struct rref *slow = rpc_remote("w1", "slowval", NULL, 0), *c = rpc_remote("w1", "counter", &args, 0);
    ck_assert_int_eq(rref_rpc_sync(c, "add", &args, &res, 0), 0);     /* both built */
    pthread_t t;
    pthread_create(&t, NULL, to_here_thread, slow);
    gate_await(1);                      /* w1 is in SlowVal's to_value */
    double t0 = trib_now_s();
    int rc = rref_rpc_sync(c, "add", &args, &res, 0);
    double dt = trib_now_s() - t0;
    gate_open();
    ck_assert_msg(rc == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 3);
    ck_assert_msg(dt < GATE_CAP_S / 3, "a method call waited %.3f s for another RRef's to_value", dt);
    void *trc;
    pthread_join(t, &trc);
    ck_assert_ptr_null(trc);
    rref_free(slow);
    rref_free(c);
    wait_int("w1", "owned", 0);
    rpc_value_clear(&args);
    stop_world();
}
END_TEST

/* ---- hostile input ------------------------------------------------------------ */

/* The nine header fields before the payload; fn NULL packs nil. */
static void pack_hdr_as(msgpack_packer *pk, int type, uint64_t req_id, int sender, const char *fn, int ntensors)
{
    msgpack_pack_array(pk, 10);
    msgpack_pack_int(pk, 1);
    msgpack_pack_int(pk, type);
    msgpack_pack_uint64(pk, req_id);
    msgpack_pack_int(pk, sender);
    if (fn) msgpack_pack_str_with_body(pk, fn, strlen(fn)); else msgpack_pack_nil(pk);
    msgpack_pack_int(pk, 0);
    msgpack_pack_int(pk, 0);
    msgpack_pack_int(pk, 0);
    msgpack_pack_int(pk, ntensors);
}

static void pack_hdr(msgpack_packer *pk, uint64_t req_id, const char *fn, int ntensors)
{
    pack_hdr_as(pk, 1, req_id, 0, fn, ntensors);
}

/* How long the raw calls below wait: for a reply that must come, as long as
 * a loaded box (ASan, another test beside it) may take to give one; where
 * none may come, a moment (a reply later than that would go unseen: such a
 * check can pass wrongly on a slow box, never fail wrongly). */
#define REPLY_WAIT_MS 30000
#define NO_REPLY_WAIT_MS 300

/* Sends frames and returns the reply's error text ("" if none came within
 * wait_ms). */
static void raw_call_wait(void *sock, zmq_msg_t *frames, int n, char *out, size_t cap, int wait_ms)
{
    for (int i = 0; i < n; i++) zmq_msg_send(&frames[i], sock, i + 1 < n ? ZMQ_SNDMORE : 0);
    out[0] = '\0';
    zmq_pollitem_t it = { .socket = sock, .events = ZMQ_POLLIN };
    if (zmq_poll(&it, 1, wait_ms) <= 0) return;
    zmq_msg_t m;
    zmq_msg_init(&m);
    zmq_msg_recv(&m, sock, 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, zmq_msg_data(&m), zmq_msg_size(&m), NULL) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 10 &&
        u.data.via.array.ptr[9].type == MSGPACK_OBJECT_STR)
        snprintf(out, cap, "%.*s", (int)u.data.via.array.ptr[9].via.str.size, u.data.via.array.ptr[9].via.str.ptr);
    else
        snprintf(out, cap, "(unparsable reply)");
    msgpack_unpacked_destroy(&u);
    int more = zmq_msg_more(&m);
    while (more) { zmq_msg_recv(&m, sock, 0); more = zmq_msg_more(&m); }
    zmq_msg_close(&m);
}

/* A call whose reply must come (REPLY_WAIT_MS). */
static void raw_call(void *sock, zmq_msg_t *frames, int n, char *out, size_t cap)
{
    raw_call_wait(sock, frames, n, out, cap, REPLY_WAIT_MS);
}

/* Sends frames that must get no reply: *out is "" unless one came within
 * NO_REPLY_WAIT_MS. */
static void raw_send_unanswered(void *sock, zmq_msg_t *frames, int n, char *out, size_t cap)
{
    raw_call_wait(sock, frames, n, out, cap, NO_REPLY_WAIT_MS);
}

static void frame_from(zmq_msg_t *m, const void *p, size_t n)
{
    zmq_msg_init_size(m, n);
    if (n) memcpy(zmq_msg_data(m), p, n);
}

static void tensor_desc(msgpack_packer *pk, int dtype, int ndim, const int64_t *shape, uint64_t nbytes)
{
    unsigned char d[48] = { 0 };
    d[0] = (unsigned char)dtype;
    d[1] = (unsigned char)ndim;
    for (int i = 0; i < 8; i++) d[8 + i] = (unsigned char)(nbytes >> (8 * i));
    for (int k = 0; k < ndim; k++)
        for (int i = 0; i < 8; i++) d[16 + 8 * k + i] = (unsigned char)((uint64_t)shape[k] >> (8 * i));
    msgpack_pack_ext_with_body(pk, d, 16 + 8 * (size_t)ndim, 1);
}

static void assert_alive(void)
{
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(7);
    ck_assert_msg(rpc_sync("w1", "echo", &args, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 7);
    rpc_value_clear(&args);
}

/* A raw dynamic worker: a ROUTER it serves on and a DEALER to the master. */
struct fake_worker { void *router, *dealer; char endpoint[128]; };

static void fake_join(void *zctx, struct fake_worker *fw, const char *name)
{
    int zero = 0;
    fw->router = zmq_socket(zctx, ZMQ_ROUTER);
    zmq_setsockopt(fw->router, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_bind(fw->router, "tcp://127.0.0.1:*"), 0);
    size_t len = sizeof fw->endpoint;
    zmq_getsockopt(fw->router, ZMQ_LAST_ENDPOINT, fw->endpoint, &len);
    fw->dealer = zmq_socket(zctx, ZMQ_DEALER);
    zmq_setsockopt(fw->dealer, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_connect(fw->dealer, rpc_master_endpoint()), 0);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 1, "__hello", 0);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_str_with_body(&pk, name, strlen(name));
    msgpack_pack_int(&pk, RPC_RANK_DYNAMIC);
    msgpack_pack_str_with_body(&pk, fw->endpoint, strlen(fw->endpoint));
    zmq_msg_t f;
    frame_from(&f, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    char err[256];
    raw_call(fw->dealer, &f, 1, err, sizeof err);
    ck_assert_str_eq(err, "(unparsable reply)");      /* [id], not an error text */
}

/* Receives requests on fw's router until one calls fn (without tensors);
 * leaves its envelope and header in in[0..1] and returns its request id. */
static uint64_t fake_recv_call(struct fake_worker *fw, const char *fn, zmq_msg_t in[2])
{
    uint64_t req_id = 0;
    while (!req_id) {                   /* skip the directory sent first */
        zmq_pollitem_t it = { .socket = fw->router, .events = ZMQ_POLLIN };
        ck_assert_int_eq(zmq_poll(&it, 1, 5000), 1);
        for (int i = 0; i < 2; i++) {
            zmq_msg_init(&in[i]);
            ck_assert_int_ge(zmq_msg_recv(&in[i], fw->router, 0), 0);
        }
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        ck_assert_int_eq(msgpack_unpack_next(&u, zmq_msg_data(&in[1]), zmq_msg_size(&in[1]), NULL),
                         MSGPACK_UNPACK_SUCCESS);
        const msgpack_object *f = &u.data.via.array.ptr[4];
        if (f->type == MSGPACK_OBJECT_STR && f->via.str.size == strlen(fn) && memcmp(f->via.str.ptr, fn, strlen(fn)) == 0)
            req_id = u.data.via.array.ptr[2].via.u64;
        msgpack_unpacked_destroy(&u);
        if (!req_id) for (int i = 0; i < 2; i++) zmq_msg_close(&in[i]);
    }
    return req_id;
}

/* A heartbeat from fw (worker `id`), so the master keeps it alive. */
static void fake_ping(struct fake_worker *fw, int id)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 4, 0, id, NULL, 0);
    msgpack_pack_nil(&pk);
    zmq_send(fw->dealer, sb.data, sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
}

static void fake_close(struct fake_worker *fw)
{
    zmq_close(fw->router);
    zmq_close(fw->dealer);
}

START_TEST(test_bad_input)
{
    start_world(2);
    struct rpc_worker_info w1;
    ck_assert_int_eq(rpc_get_worker_info("w1", &w1), 0);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_connect(s, w1.endpoint), 0);
    char err[1024];
    zmq_msg_t f[3];
    msgpack_sbuffer sb;
    msgpack_packer pk;

    /* garbage header: dropped */
    frame_from(&f[0], "\xc1garbage", 8);
    raw_send_unanswered(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "");
    assert_alive();

    /* an array header claiming 2^32-1 elements in 20 bytes: dropped, no allocation */
    unsigned char big[20] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
    frame_from(&f[0], big, sizeof big);
    raw_send_unanswered(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "");
    assert_alive();

    /* ...and the same claim inside the arguments of a well-formed header:
     * answered by request id */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 5, "echo", 0);
    msgpack_sbuffer_write(&sb, (const char *)big, 5);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: bad message: msgpack container count exceeds message size");
    /* a string claiming 4 GiB */
    unsigned char bigstr[5] = { 0xdb, 0xff, 0xff, 0xff, 0xff };
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 12, "echo", 0);
    msgpack_sbuffer_write(&sb, (const char *)bigstr, sizeof bigstr);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: bad message: truncated msgpack");
    assert_alive();
    /* 2^21 one-byte values (2 MiB that would cost ~100 MiB to decode):
     * refused by count, answered */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 13, "echo", 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, 1u << 21);
    for (int i = 0; i < (1 << 21); i++) msgpack_pack_nil(&pk);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);     /* 2 MiB */
    ck_assert_str_eq(err, "rpc: w1: bad message: more than 1048576 msgpack values in one message");
    assert_alive();

    /* wrong frame count */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 6, "echo", 1);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_nil(&pk);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: bad message: header announces 1 tensor frames, message has 0");
    assert_alive();

    /* unknown function: a stranger is told nothing about it (issue 24,
     * N16): refused as for any function, once w0 has disowned it */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 9, "nosuch", 0);
    msgpack_pack_array(&pk, 0);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: refused: w0 disowns this connection");

    /* arguments are decoded only for a verified sender: this connection
     * claims to be w0, which disowns it */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 14, "echo", 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 1);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: refused: w0 disowns this connection");
    assert_alive();

    /* Lying arguments from a verified worker: a fake one that said hello
     * to w0 (so w0 knows its connection) calls w0. */
    void *zctx = zmq_ctx_new();
    struct fake_worker fw;
    fake_join(zctx, &fw, "fakeA");
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);

    /* a shape that disagrees with its frame */
    int64_t shape[2] = { 2, 3 };
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 7, 2, "echo", 1);
    msgpack_pack_array(&pk, 1);
    tensor_desc(&pk, 0, 2, shape, 24);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    frame_from(&f[1], "12345678", 8);
    raw_call(fw.dealer, f, 2, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w0: bad message: tensor 0 shape [2,3] f32 needs 24 bytes, descriptor says 24, frame has 8");

    /* a bad dtype */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 8, 2, "echo", 1);
    msgpack_pack_array(&pk, 1);
    tensor_desc(&pk, 99, 1, shape, 8);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    frame_from(&f[1], "12345678", 8);
    raw_call(fw.dealer, f, 2, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w0: bad message: tensor dtype 99 unknown");

    /* unknown RRef id owned by w0, handed on by the fake (its parent) */
    unsigned char rd[24] = { 0, 0, 2, 0, 0, 0, 0, 0, 0x34, 0x12 };
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 10, 2, "echo", 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_ext_with_body(&pk, rd, sizeof rd, 2);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(fw.dealer, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w0: bad message: unknown RRef 0x1234");

    /* ...and one that names another parent than its sender */
    rd[2] = 1;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 11, 2, "echo", 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_ext_with_body(&pk, rd, sizeof rd, 2);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(fw.dealer, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w0: bad message: RRef 0x1234: parent 1 is not the sender 2");
    fake_close(&fw);
    zmq_ctx_term(zctx);

    /* a header that is not the expected array, with deep nesting */
    unsigned char deep[64];
    memset(deep, 0x91, sizeof deep);
    frame_from(&f[0], deep, sizeof deep);
    raw_send_unanswered(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "");
    assert_alive();

    /* arguments whose innermost (empty) array is the 33rd open container,
     * the header's included: more than msgpack-c unpacks; answered, not
     * dropped */
    unsigned char nest[WIRE_MAX_DEPTH];
    memset(nest, 0x91, sizeof nest);
    nest[sizeof nest - 1] = 0x90;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 13, "echo", 0);
    msgpack_sbuffer_write(&sb, (const char *)nest, sizeof nest);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: bad message: msgpack nested too deep");
    assert_alive();

    /* a hello to the rendezvous with an endpoint nobody can connect to */
    void *s0 = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(s0, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_connect(s0, rpc_master_endpoint()), 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 11, "__hello", 0);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_str_with_body(&pk, "evil", 4);
    msgpack_pack_int(&pk, RPC_RANK_DYNAMIC);
    msgpack_pack_str_with_body(&pk, "bogus://x", 9);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s0, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w0: __hello: cannot connect to endpoint 'bogus://x'");
    ck_assert_int_eq(rpc_get_worker_info("evil", &w1), -1);
    zmq_close(s0);

    zmq_close(s);
    zmq_ctx_term(ctx);
    stop_world();
}
END_TEST

/* A worker that just joined answers this one (echo of msg) and w1 (w1's
 * chain call to it), each within timeout_ms (0: the default). */
static void check_reachable(const char *name, const char *msg, int timeout_ms)
{
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_str(msg);
    ck_assert_msg(rpc_sync(name, "echo", &args, &res, timeout_ms) == 0, "%s", rpc_last_error());
    ck_assert_str_eq(res.str.ptr, msg);
    rpc_value_clear(&res);
    rpc_value_clear(&args);
    args = rpc_list(2);
    args.list.items[0] = rpc_str(name);
    args.list.items[1] = rpc_int(1);
    ck_assert_msg(rpc_sync("w1", "chain", &args, &res, timeout_ms) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 1002);
    rpc_value_clear(&args);
}

/* ---- membership ------------------------------------------------------------ */

static int late_child(int idx, const char *master, void *arg)
{
    register_all();
    struct rpc_opts o = { .name = "late", .rank = RPC_RANK_DYNAMIC, .master = master,
                          .heartbeat_ms = 100, .heartbeat_timeout_ms = hb_timeout_ms };
    if (rpc_init(&o) < 0) {
        fprintf(stderr, "late: %s\n", rpc_last_error());
        return 10;
    }
    int id = rpc_self()->id;
    while (!atomic_load(&leave_now)) usleep(2000);
    rpc_shutdown(true);
    return id == 2 ? 0 : 11;
}

/* A dynamic worker that a rank 0 without allow_dynamic must refuse. */
static int late_refused_child(int idx, const char *master, void *arg)
{
    register_all();
    struct rpc_opts o = { .name = "late", .rank = RPC_RANK_DYNAMIC, .master = master,
                          .heartbeat_ms = 100, .heartbeat_timeout_ms = hb_timeout_ms, .init_timeout_ms = 10000 };
    if (rpc_init(&o) == 0) {
        rpc_shutdown(false);
        return 11;
    }
    const char *want = "rpc: w0: __hello: rank -2 out of range 1..1";
    const char *e = rpc_last_error();
    size_t le = strlen(e), lw = strlen(want);
    if (le < lw || strcmp(e + le - lw, want) != 0) {
        fprintf(stderr, "late: '%s', not ending in '%s'\n", e, want);
        return 12;
    }
    return 0;
}

START_TEST(test_membership)
{
    static int w = 2;
    register_all();
    struct proc_group late;
    h_spawn(&H, 1, serve_child, &w);
    h_spawn(&late, 1, late_child, NULL);
    struct rpc_opts o = opts_for(0, 2, "tcp://127.0.0.1:0");
    o.on_listening = proc_hand_out_all;
    o.listening_user = &H;
    ck_assert_msg(rpc_init(&o) == 0, "%s", rpc_last_error());
    usleep(50000);
    proc_hand_out(&late, -1, rpc_master_endpoint());
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 10000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_JOIN);
    ck_assert_str_eq(ev.name, "late");
    ck_assert_int_eq(ev.id, 2);
    struct rpc_value res;
    /* the late worker answers, and the static worker can call it too */
    check_reachable("late", "hi late", 0);
    ck_assert_int_eq(rpc_sync("late", "leave", NULL, &res, 0), 0);
    ck_assert_int_eq(rpc_next_event(&ev, 10000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_LEAVE);
    ck_assert_str_eq(ev.name, "late");
    ck_assert_int_eq(proc_wait(&late, 0, 10), 0);
    /* the other worker heard of both */
    double t0 = trib_now_s();
    for (;;) {
        ck_assert_int_eq(rpc_sync("w1", "events", NULL, &res, 0), 0);
        bool done = strcmp(res.str.ptr, "join:late,leave:late,") == 0;
        if (done || trib_now_s() - t0 > 5) {
            ck_assert_str_eq(res.str.ptr, "join:late,leave:late,");
            rpc_value_clear(&res);
            break;
        }
        rpc_value_clear(&res);
        usleep(10000);
    }
    ck_assert_int_eq(rpc_get_worker_info("late", &(struct rpc_worker_info){ 0 }), -1);
    assert_nothing_dropped("w1");
    stop_world();
}
END_TEST

/* A dynamic worker that left with a call of ours unanswered keeps its id
 * while its reply may still come (a heartbeat timeout): a worker joining
 * meanwhile gets another id, and the late reply still completes the call. */
START_TEST(test_left_worker_id_not_reused_while_draining)
{
    /* a silent fake worker is dropped; 3 s, not 1: fakeA never pings, so
     * its leave, and its late reply after the leave, must each come within
     * the timeout of its last message, several round trips through w0 */
    hb_timeout_ms = 3000;
    start_world(2);
    void *zctx = zmq_ctx_new();
    struct fake_worker a, b;
    struct rpc_event ev;
    fake_join(zctx, &a, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_JOIN);
    ck_assert_int_eq(ev.id, 2);
    /* a call to fakeA, which it receives and holds */
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(42);
    struct rpc_future *f = rpc_async("fakeA", "echo", &args, -1);
    rpc_value_clear(&args);
    zmq_msg_t in[2];
    uint64_t req_id = fake_recv_call(&a, "echo", in);
    /* fakeA leaves (as worker 2), then fakeB joins at once */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 0, 2, "__leave", 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 2);
    zmq_send(a.dealer, sb.data, sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_LEAVE);
    ck_assert_str_eq(ev.name, "fakeA");
    fake_join(zctx, &b, "fakeB");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_JOIN);
    ck_assert_str_eq(ev.name, "fakeB");
    ck_assert_int_eq(ev.id, 3);
    /* fakeA's late reply still lands */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 2, req_id, 2, NULL, 0);
    msgpack_pack_int(&pk, 42);
    zmq_msg_send(&in[0], a.router, ZMQ_SNDMORE);
    zmq_send(a.router, sb.data, sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
    zmq_msg_close(&in[0]);
    zmq_msg_close(&in[1]);
    ck_assert_msg(rpc_future_wait(f, &res) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 42);
    rpc_future_free(f);
    fake_close(&a);
    fake_close(&b);
    zmq_ctx_term(zctx);
    /* fakeB, silent, is dropped after the heartbeat timeout */
    ck_assert_int_eq(rpc_next_event(&ev, 30000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_str_eq(ev.name, "fakeB");
    stop_world();
}
END_TEST

/* A malformed answer to a call without timeout fails the call at once,
 * naming the worker, instead of leaving it pending forever; so does an
 * answer whose header names another worker as its sender. */
/* Sends an internal RRef call [id, fork(, fn, args)] from fake worker `me`
 * to the master, as request req_id. */
static void fake_rref_msg(struct fake_worker *fw, int me, uint64_t req_id, const char *fn,
                          uint64_t id, uint64_t fork, const char *ctor)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, req_id, me, fn, 0);
    msgpack_pack_array(&pk, ctor ? 4 : 2);
    msgpack_pack_uint64(&pk, id);
    msgpack_pack_uint64(&pk, fork);
    if (ctor) {
        msgpack_pack_str_with_body(&pk, ctor, strlen(ctor));
        msgpack_pack_array(&pk, 1);
        msgpack_pack_int(&pk, 5);
    }
    zmq_send(fw->dealer, sb.data, sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
}

/* The next reply on fw's dealer within timeout_ms: its request id, and
 * whether it is a success (type 2); 0 if none came. */
static uint64_t fake_reply(struct fake_worker *fw, int timeout_ms, bool *ok)
{
    zmq_pollitem_t it = { .socket = fw->dealer, .events = ZMQ_POLLIN };
    if (zmq_poll(&it, 1, timeout_ms) <= 0) return 0;
    zmq_msg_t m;
    zmq_msg_init(&m);
    zmq_msg_recv(&m, fw->dealer, 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    uint64_t req_id = 0;
    if (msgpack_unpack_next(&u, zmq_msg_data(&m), zmq_msg_size(&m), NULL) == MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 10) {
        *ok = u.data.via.array.ptr[1].via.u64 == 2;
        req_id = u.data.via.array.ptr[2].via.u64;
    }
    msgpack_unpacked_destroy(&u);
    zmq_msg_close(&m);
    return req_id;
}

/* A child's fork registration that overtakes its creator's __remote (they
 * travel on different connections) waits at the owner for the creation and
 * then counts as a user: the owner keeps the value until that fork, too, is
 * deleted (G1). */
START_TEST(test_fork_before_remote)
{
    start_world(2);
    void *zctx = zmq_ctx_new();
    struct fake_worker a;
    struct rpc_event ev;
    fake_join(zctx, &a, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);
    uint64_t id = (2ull << 48) | 77, fork0 = (2ull << 48) | 78, fork1 = (5ull << 48) | 79;
    bool ok = false;
    /* the fork first: no answer while the RRef does not exist */
    fake_rref_msg(&a, 2, 11, "__rref_fork", id, fork1, NULL);
    ck_assert_int_eq(fake_reply(&a, 300, &ok), 0);
    ck_assert_int_eq(rref_owned_count(), 0);
    /* then the creation: the fork is answered (success), then the creation */
    fake_rref_msg(&a, 2, 12, "__remote", id, fork0, "echo");
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 11);
    ck_assert(ok);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 12);
    ck_assert(ok);
    ck_assert_int_eq(rref_owned_count(), 1);
    /* the creator's user goes: the early child still holds the value */
    fake_rref_msg(&a, 2, 13, "__rref_del", id, fork0, NULL);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 13);
    ck_assert_int_eq(rref_owned_count(), 1);
    fake_rref_msg(&a, 2, 14, "__rref_del", id, fork1, NULL);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 14);
    ck_assert_int_eq(rref_owned_count(), 0);
    /* a fork for an RRef whose creator is not a live worker fails at once */
    fake_rref_msg(&a, 2, 15, "__rref_fork", (7ull << 48) | 1, fork1, NULL);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 15);
    ck_assert(!ok);
    fake_close(&a);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

/* A worker that dies holding forks: the owner drops exactly its forks
 * (an RRef only it used is freed; one another live worker holds stays). */
START_TEST(test_forks_of_dead_worker_released)
{
    hb_timeout_ms = 3000;      /* the fake worker never pings: declared dead after 3 s */
    start_world(2);
    void *zctx = zmq_ctx_new();
    struct fake_worker a;
    struct rpc_event ev;
    fake_join(zctx, &a, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);
    /* fakeA creates an RRef here and registers a second fork of it */
    uint64_t id = (2ull << 48) | 77, fork0 = (2ull << 48) | 78, fork1 = (2ull << 48) | 79;
    bool ok = false;
    fake_rref_msg(&a, 2, 11, "__remote", id, fork0, "echo");
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 11);
    ck_assert(ok);
    fake_rref_msg(&a, 2, 12, "__rref_fork", id, fork1, NULL);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 12);
    ck_assert(ok);
    /* w1 holds a fork of another RRef owned here */
    struct rpc_value v = rpc_int(5), args = rpc_list(1), res;
    struct rref *r = rref_new_local_value(&v);
    args.list.items[0] = rpc_rref(r);
    ck_assert_msg(rpc_sync("w1", "hold", &args, &res, 5000) == 0, "%s", rpc_last_error());
    rpc_value_clear(&args);
    rref_free(r);
    ck_assert_int_eq(rref_owned_count(), 2);
    /* fakeA goes silent and is declared dead: its two forks go with it */
    fake_close(&a);
    ck_assert_int_eq(rpc_next_event(&ev, 15000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_int_eq(ev.id, 2);
    ck_assert_int_eq(rref_owned_count(), 1);
    /* w1's fork is untouched until w1 lets go */
    ck_assert_int_eq(rpc_sync("w1", "drop", NULL, &res, 5000), 0);
    for (double t0 = trib_now_s(); rref_owned_count() > 0 && trib_now_s() - t0 < 30;) usleep(10000);
    ck_assert_int_eq(rref_owned_count(), 0);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

START_TEST(test_bad_response_fails_call)
{
    hb_timeout_ms = 1000;      /* a silent fake worker is dropped */
    start_world(2);
    void *zctx = zmq_ctx_new();
    struct fake_worker a;
    struct rpc_event ev;
    fake_join(zctx, &a, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);
    static const char *const want[] = {
        "rpc: bad response from worker 2: header announces 1 tensor frames, message has 0",
        "rpc: bad response from worker 2: truncated msgpack",
        "rpc: bad response from worker 2: bad message type",
        "rpc: bad response from worker 2: sender 1 is not the worker called",
        NULL,
    };
    for (int k = 0; k < 5; k++) {
        fake_ping(&a, 2);
        struct rpc_value args = rpc_list(1);
        args.list.items[0] = rpc_int(k);
        struct rpc_future *f = rpc_async("fakeA", "echo", &args, -1);
        rpc_value_clear(&args);
        zmq_msg_t in[2];
        uint64_t req_id = fake_recv_call(&a, "echo", in);
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (k == 0) {               /* a tensor frame announced, none sent */
            pack_hdr_as(&pk, 2, req_id, 2, NULL, 1);
            msgpack_pack_nil(&pk);
        } else if (k == 1) {        /* a string claiming 4 GiB */
            pack_hdr_as(&pk, 2, req_id, 2, NULL, 0);
            msgpack_sbuffer_write(&sb, "\xdb\xff\xff\xff\xff", 5);
        } else if (k == 2) {        /* an unknown message type */
            pack_hdr_as(&pk, 9, req_id, 2, NULL, 0);
            msgpack_pack_nil(&pk);
        } else {                    /* claiming to be from w1; from a dynamic worker
                                       that has not learned its id yet: accepted */
            pack_hdr_as(&pk, 2, req_id, k == 3 ? 1 : RPC_UNASSIGNED_ID, NULL, 0);
            msgpack_pack_int(&pk, 3);
        }
        zmq_msg_send(&in[0], a.router, ZMQ_SNDMORE);
        zmq_send(a.router, sb.data, sb.size, 0);
        msgpack_sbuffer_destroy(&sb);
        zmq_msg_close(&in[0]);
        zmq_msg_close(&in[1]);
        double t0 = trib_now_s();
        while (!rpc_future_done(f) && trib_now_s() - t0 < 30) usleep(1000);
        ck_assert_msg(rpc_future_done(f), "case %d: the call is still pending", k);
        if (want[k]) {
            ck_assert_str_eq(rpc_future_error(f), want[k]);
        } else {
            struct rpc_value v;
            ck_assert_msg(rpc_future_wait(f, &v) == 0, "case %d: %s", k, rpc_last_error());
            ck_assert_int_eq(v.i, 3);
        }
        rpc_future_free(f);
    }
    fake_close(&a);
    zmq_ctx_term(zctx);
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    stop_world();
}
END_TEST


/* ---- identity ------------------------------------------------------------ */

/* A raw DEALER (a stranger speaking the wire format) connected to ep. */
static void *stranger(void *zctx, const char *ep)
{
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_connect(s, ep), 0);
    return s;
}

/* Sends request fn(args...) as worker `sender` and returns the reply's error
 * text ("" if none within wait_ms, "(unparsable reply)" for a success).
 * args: a msgpack array already packed into *body. */
static void spoof_call(void *sock, uint64_t req_id, int sender, const char *fn, const msgpack_sbuffer *body,
                       char *err, size_t cap, int wait_ms)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, req_id, sender, fn, 0);
    msgpack_sbuffer_write(&sb, body->data, body->size);
    zmq_msg_t f;
    frame_from(&f, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call_wait(sock, &f, 1, err, cap, wait_ms);
}

static void stats_of(const char *who, int64_t out[5])
{
    struct rpc_value r;
    ck_assert_msg(rpc_sync(who, "stats", NULL, &r, 0) == 0, "%s", rpc_last_error());
    for (int i = 0; i < 5; i++) out[i] = r.list.items[i].i;
    rpc_value_clear(&r);
}

/* A __leave in the name of w1 from a stranger's connection is refused:
 * w1 disowns it. So is one from a verified worker in another's name. */
START_TEST(test_spoofed_leave)
{
    start_world(2);
    void *zctx = zmq_ctx_new();
    void *s = stranger(zctx, rpc_master_endpoint());
    msgpack_sbuffer body;
    msgpack_packer pk;
    msgpack_sbuffer_init(&body);
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 1);
    char err[512];
    spoof_call(s, 5, 1, "__leave", &body, err, sizeof err, REPLY_WAIT_MS);
    ck_assert_str_eq(err, "rpc: w0: refused: w1 disowns this connection");
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 200), 0);
    assert_alive();
    /* the connection is known to be no w1's now: refused at once (well
     * within the 10 s a request from an unverified connection is held) */
    spoof_call(s, 6, 1, "__leave", &body, err, sizeof err, 5000);
    ck_assert_str_eq(err, "rpc: w0: refused: w1 disowns this connection");

    /* a worker that said hello (fakeA, id 2) speaking in w1's name */
    struct fake_worker fw;
    fake_join(zctx, &fw, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);
    spoof_call(fw.dealer, 7, 1, "__leave", &body, err, sizeof err, REPLY_WAIT_MS);
    ck_assert_str_eq(err, "rpc: w0: refused: this connection is fakeA's, not w1's");
    spoof_call(fw.dealer, 8, 1, "echo", &body, err, sizeof err, REPLY_WAIT_MS);
    ck_assert_str_eq(err, "rpc: w0: refused: this connection is fakeA's, not w1's");
    /* ...and in its own name, it may leave */
    msgpack_sbuffer_clear(&body);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 2);
    spoof_call(fw.dealer, 9, 2, "__leave", &body, err, sizeof err, REPLY_WAIT_MS);
    ck_assert_str_eq(err, "(unparsable reply)");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_LEAVE);
    ck_assert_str_eq(ev.name, "fakeA");
    msgpack_sbuffer_destroy(&body);
    assert_alive();
    struct rpc_stats st;
    rpc_get_stats(&st);
    ck_assert_int_eq(st.dropped_spoofed, 4);
    ck_assert_int_eq(st.held_messages, 0);
    fake_close(&fw);
    zmq_close(s);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

/* A __join sent to a non-master worker in rank 0's name neither adds a
 * worker nor re-points its master. */
START_TEST(test_spoofed_join)
{
    start_world(2);
    assert_alive();         /* after w0's directory, on the same connection */
    struct rpc_worker_info w1;
    ck_assert_int_eq(rpc_get_worker_info("w1", &w1), 0);
    void *zctx = zmq_ctx_new();
    void *trap = zmq_socket(zctx, ZMQ_ROUTER);          /* where the stranger wants w1's calls */
    int zero = 0;
    zmq_setsockopt(trap, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_bind(trap, "tcp://127.0.0.1:*"), 0);
    char trap_ep[128];
    size_t len = sizeof trap_ep;
    zmq_getsockopt(trap, ZMQ_LAST_ENDPOINT, trap_ep, &len);
    void *s = stranger(zctx, w1.endpoint);
    char err[512];
    for (int k = 0; k < 2; k++) {
        msgpack_sbuffer body;
        msgpack_packer pk;
        msgpack_sbuffer_init(&body);
        msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 1);
        msgpack_pack_array(&pk, 4);
        msgpack_pack_int(&pk, k == 0 ? 0 : 5);
        msgpack_pack_str_with_body(&pk, k == 0 ? "w0" : "evil", k == 0 ? 2 : 4);
        msgpack_pack_str_with_body(&pk, trap_ep, strlen(trap_ep));
        msgpack_pack_false(&pk);
        spoof_call(s, 20 + (uint64_t)k, 0, "__join", &body, err, sizeof err, REPLY_WAIT_MS);
        ck_assert_str_eq(err, "rpc: w1: refused: w0 disowns this connection");
        msgpack_sbuffer_destroy(&body);
    }
    /* w1 still reaches the real w0, and heard of nobody */
    struct rpc_value args = rpc_list(2), res;
    args.list.items[0] = rpc_str("w0");
    args.list.items[1] = rpc_int(1);
    ck_assert_msg(rpc_sync("w1", "chain", &args, &res, 3000) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 1002);
    rpc_value_clear(&args);
    ck_assert_int_eq(rpc_sync("w1", "events", NULL, &res, 0), 0);
    ck_assert_str_eq(res.str.ptr, "");
    rpc_value_clear(&res);
    int64_t st[5];
    stats_of("w1", st);
    ck_assert_int_eq(st[0], 2);
    zmq_close(s);
    zmq_close(trap);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

/* A hello cannot take a live worker's name, rank or endpoint, nor make a
 * connection that already is a worker a second one. */
START_TEST(test_hello_refusals)
{
    start_world(2);
    struct rpc_worker_info w1;
    ck_assert_int_eq(rpc_get_worker_info("w1", &w1), 0);
    void *zctx = zmq_ctx_new();
    void *s = stranger(zctx, rpc_master_endpoint());
    static const char long_name[] = "n123456789012345678901234567890123456789012345678901234567890123";
    /* world 0: no world size sent (a 3-item hello) */
    struct { const char *name; int rank; const char *ep; int world; const char *want; } cases[] = {
        { "w1", RPC_RANK_DYNAMIC, "tcp://127.0.0.1:1", 0, "rpc: w0: __hello: worker name 'w1' is taken" },
        { "x1", 1, "tcp://127.0.0.1:1", 0, "rpc: w0: __hello: rank 1 is taken by live worker w1" },
        { "x2", RPC_RANK_DYNAMIC, w1.endpoint, 0, NULL },
        /* the rules of a static rank hold for a dynamic one */
        { "x3", RPC_RANK_DYNAMIC, "tcp://127.0.0.1:1", 5, "rpc: w0: __hello: world size 5 does not match the master's 2" },
        { "", RPC_RANK_DYNAMIC, "tcp://127.0.0.1:1", 0, "rpc: w0: __hello: a worker name must be 1..63 bytes" },
        { long_name, RPC_RANK_DYNAMIC, "tcp://127.0.0.1:1", 0, "rpc: w0: __hello: a worker name must be 1..63 bytes" },
        { "", 1, "tcp://127.0.0.1:1", 0, "rpc: w0: __hello: a worker name must be 1..63 bytes" },
    };
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    ck_assert_int_eq(strlen(long_name), 64);
    char err[512], want[512];
    snprintf(want, sizeof want, "rpc: w0: __hello: endpoint '%s' is worker 1's (w1)", w1.endpoint);
    cases[2].want = want;
    for (int k = 0; k < N_CASES; k++) {
        msgpack_sbuffer body;
        msgpack_packer pk;
        msgpack_sbuffer_init(&body);
        msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, cases[k].world ? 4 : 3);
        msgpack_pack_str_with_body(&pk, cases[k].name, strlen(cases[k].name));
        msgpack_pack_int(&pk, cases[k].rank);
        msgpack_pack_str_with_body(&pk, cases[k].ep, strlen(cases[k].ep));
        if (cases[k].world) msgpack_pack_int(&pk, cases[k].world);
        spoof_call(s, 30 + (uint64_t)k, RPC_UNASSIGNED_ID, "__hello", &body, err, sizeof err, REPLY_WAIT_MS);
        ck_assert_msg(strcmp(err, cases[k].want) == 0, "case %d: '%s', not '%s'", k, err, cases[k].want);
        msgpack_sbuffer_destroy(&body);
    }
    ck_assert_int_eq(rpc_get_workers((struct rpc_worker_info[4]){ 0 }, 4), 2);
    /* a worker saying hello again on its connection */
    struct fake_worker fw;
    fake_join(zctx, &fw, "fakeA");
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    msgpack_sbuffer body;
    msgpack_packer pk;
    msgpack_sbuffer_init(&body);
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_str_with_body(&pk, "fakeB", 5);
    msgpack_pack_int(&pk, RPC_RANK_DYNAMIC);
    msgpack_pack_str_with_body(&pk, "tcp://127.0.0.1:2", 17);
    spoof_call(fw.dealer, 40, RPC_UNASSIGNED_ID, "__hello", &body, err, sizeof err, REPLY_WAIT_MS);
    ck_assert_str_eq(err, "rpc: w0: __hello: this connection is already worker 2 (fakeA)");
    msgpack_sbuffer_destroy(&body);
    ck_assert_int_eq(rpc_get_worker_info("fakeB", &w1), -1);
    ck_assert_int_eq(rpc_get_worker_info("x2", &w1), -1);
    fake_close(&fw);
    zmq_close(s);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

/* Without opts.allow_dynamic (the RL programs' default) only the declared
 * world joins: a dynamic rank, or any other rank outside 1..N, is refused
 * with the same message as a static rank outside the world, and nobody
 * joins. */
START_TEST(test_hello_declared_world_only)
{
    allow_dynamic = false;
    struct proc_group late;
    h_spawn(&late, 1, late_refused_child, NULL);    /* before this process is a worker */
    start_world(2);
    void *zctx = zmq_ctx_new();
    void *s = stranger(zctx, rpc_master_endpoint());
    static const int64_t ranks[] = { RPC_RANK_DYNAMIC, RPC_RANK_ENV, -3, 0, 2, INT64_MIN, INT64_MAX };
    char err[512], want[512], ep[64];
    for (size_t k = 0; k < sizeof ranks / sizeof ranks[0]; k++) {
        msgpack_sbuffer body;
        msgpack_packer pk;
        msgpack_sbuffer_init(&body);
        msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 4);
        msgpack_pack_str_with_body(&pk, "stranger", 8);
        msgpack_pack_int64(&pk, ranks[k]);
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%zu", k + 1);
        msgpack_pack_str_with_body(&pk, ep, strlen(ep));
        msgpack_pack_int(&pk, 0);          /* what a dynamic worker sends */
        spoof_call(s, 50 + (uint64_t)k, RPC_UNASSIGNED_ID, "__hello", &body, err, sizeof err, REPLY_WAIT_MS);
        snprintf(want, sizeof want, "rpc: w0: __hello: rank %lld out of range 1..1", (long long)ranks[k]);
        ck_assert_str_eq(err, want);
        msgpack_sbuffer_destroy(&body);
    }
    ck_assert_int_eq(rpc_get_worker_info("stranger", &(struct rpc_worker_info){ 0 }), -1);
    ck_assert_int_eq(rpc_get_workers((struct rpc_worker_info[4]){ 0 }, 4), 2);
    zmq_close(s);
    zmq_ctx_term(zctx);
    /* a real dynamic worker's rpc_init fails the same way */
    proc_hand_out(&late, -1, rpc_master_endpoint());
    ck_assert_int_eq(proc_wait(&late, 0, 30), 0);
    proc_group_deinit(&late);
    assert_nothing_dropped("w1");
    stop_world();
}
END_TEST

/* ---- transports --------------------------------------------------------------- */

/* Connected Unix-domain sockets on path (accepted ones carry their
 * listener's path in /proc/net/unix): the connections made through an
 * ipc:// twin. */
static int unix_conns(const char *ipc_ep)
{
    if (strncmp(ipc_ep, "ipc://", 6) != 0) return 0;
    FILE *f = fopen("/proc/net/unix", "r");
    ck_assert_ptr_nonnull(f);
    char line[512], path[400];
    unsigned st;
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%*s %*s %*s %*s %*s %x %*s %399s", &st, path) == 2 && st == 3 && strcmp(path, ipc_ep + 6) == 0) n++;
    fclose(f);
    return n;
}

/* What w1 reaches `name` through. */
static void via_from_w1(const char *name, char *out, size_t cap)
{
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_str(name);
    ck_assert_msg(rpc_sync("w1", "via", &args, &res, 0) == 0, "%s", rpc_last_error());
    snprintf(out, cap, "%s", res.str.ptr);
    rpc_value_clear(&res);
    rpc_value_clear(&args);
}

/* The transport every process of a 3-worker world uses: ipc:// twins on
 * this host by default and when forced, tcp:// when forced (by
 * TRIB_RPC_TRANSPORT or rpc_opts.transport); calls work either way, and
 * the Unix-domain connections on the twins exist exactly when ipc is used. */
static void check_world_transport(bool want_ipc)
{
    struct rpc_worker_info wi[3];
    char via[160];
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(rpc_get_worker_info(NAMES[k], &wi[k]), 0);
        ck_assert_msg(strncmp(wi[k].endpoint, "tcp://127.0.0.1:", 16) == 0, "%s", wi[k].endpoint);
        ck_assert_msg(strncmp(wi[k].via, want_ipc ? "ipc:///tmp/trib-rpc-" : "tcp://", 6) == 0 &&
                      (!want_ipc || strstr(wi[k].via, "-127.0.0.1-")), "%s: via %s", NAMES[k], wi[k].via);
        if (!want_ipc) ck_assert_str_eq(wi[k].via, wi[k].endpoint);
        via_from_w1(NAMES[k], via, sizeof via);
        ck_assert_str_eq(via, wi[k].via);          /* one twin per worker, whoever looks */
    }
    echo_check("w1", rpc_str("over the twin"));
    echo_check("w2", rpc_str("over the twin"));
    check_reachable("w2", "w1 to w2", 0);
    for (int k = 1; k < 3; k++) {
        int n = unix_conns(wi[k].via);
        if (want_ipc) ck_assert_msg(n >= 1, "%s: %d connections on %s", NAMES[k], n, wi[k].via);
        else ck_assert_int_eq(n, 0);
        /* and no twin is left lying around when tcp is forced */
        char twin[200];
        snprintf(twin, sizeof twin, "/tmp/trib-rpc-%u/", (unsigned)getuid());
        DIR *d = opendir(twin);
        if (!want_ipc && d) {
            const char *port = strrchr(wi[k].endpoint, ':');
            struct dirent *e;
            while ((e = readdir(d))) {
                const char *dash = strrchr(e->d_name, '-');
                ck_assert_msg(!dash || strcmp(dash + 1, port + 1) != 0, "a twin %s with tcp forced", e->d_name);
            }
        }
        if (d) closedir(d);
    }
}

START_TEST(test_transport_auto_ipc)
{
    unsetenv("TRIB_RPC_TRANSPORT");
    start_world(3);
    check_world_transport(true);
    stop_world();
}
END_TEST

START_TEST(test_transport_forced_tcp_env)
{
    setenv("TRIB_RPC_TRANSPORT", "tcp", 1);      /* the children inherit it */
    start_world(3);
    check_world_transport(false);
    stop_world();
}
END_TEST

START_TEST(test_transport_forced_ipc_opt)
{
    setenv("TRIB_RPC_TRANSPORT", "tcp", 1);      /* the option wins over the variable */
    transport = RPC_TRANSPORT_IPC;
    start_world(3);
    check_world_transport(true);
    stop_world();
}
END_TEST

/* A worker forced to ipc:// cannot join a rank 0 that listens on tcp://
 * only: its rpc_init fails at once, naming the endpoint. */
static int ipc_only_child(int idx, const char *master, void *arg)
{
    register_all();
    struct rpc_opts o = opts_for(1, 2, master);
    o.transport = RPC_TRANSPORT_IPC;
    if (rpc_init(&o) == 0) {
        rpc_shutdown(false);
        return 11;
    }
    char want[400];
    snprintf(want, sizeof want, "rpc_init: rpc: cannot reach %s by ipc:// (forced): no socket at its twin "
             "(not on this host, not started yet, or it does not listen on ipc)", master);
    if (strcmp(rpc_last_error(), want) != 0) {
        fprintf(stderr, "ipc child: '%s', not '%s'\n", rpc_last_error(), want);
        return 12;
    }
    return 0;
}

START_TEST(test_transport_forced_ipc_refused)
{
    register_all();
    struct proc_group c;
    h_spawn(&c, 1, ipc_only_child, NULL);      /* before this process is a worker */
    transport = RPC_TRANSPORT_TCP;
    struct rpc_opts o = opts_for(0, 1, "tcp://127.0.0.1:0");   /* the child fails before any hello */
    ck_assert_msg(rpc_init(&o) == 0, "%s", rpc_last_error());
    ck_assert_str_eq(rpc_self()->via, rpc_self()->endpoint);
    proc_hand_out(&c, 0, rpc_master_endpoint());
    ck_assert_int_eq(proc_wait(&c, 0, 30), 0);
    proc_group_deinit(&c);
    rpc_shutdown(true);
}
END_TEST

/* What a child of test_static_rank_rejoins tries: join as (rank, world,
 * name); want: the end of the error rpc_init must fail with, or NULL if it
 * must be admitted (it then serves until the world shuts down). */
struct join_try { int rank, world; const char *name, *want; };

static int join_child(int idx, const char *master, void *arg)
{
    const struct join_try *t = (const struct join_try *)arg + idx;
    register_all();
    struct rpc_opts o = opts_for(1, t->world, master);
    o.name = t->name;
    o.rank = t->rank;
    int rc = rpc_init(&o);
    if (!t->want) {
        if (rc < 0) {
            fprintf(stderr, "%s: %s\n", t->name, rpc_last_error());
            return 10;
        }
        rpc_shutdown(true);
        return 0;
    }
    if (rc == 0) {
        rpc_shutdown(false);
        return 11;
    }
    const char *e = rpc_last_error();
    size_t le = strlen(e), lw = strlen(t->want);
    if (le < lw || strcmp(e + le - lw, t->want) != 0) {
        fprintf(stderr, "%s: '%s', not ending in '%s'\n", t->name, e, t->want);
        return 12;
    }
    return 0;
}

/* A static worker killed and started again under its rank (and name) is
 * admitted once rank 0 has declared the old one dead: rank 0 and the other
 * worker both reach the new one. Refused: a live worker's rank (with its
 * name or another), a rank outside the world, another world size, and any
 * hello after rpc_refuse_joins. */
START_TEST(test_static_rank_rejoins)
{
    hb_timeout_ms = 1000;
    static int w = 3;
    static const struct join_try tries[] = {
        { 1, 3, "w1", "rpc: w0: __hello: rank 1 is taken by live worker w1" },
        { 3, 4, "w3", "rpc: w0: __hello: rank 3 out of range 1..2" },
        { 2, 4, "w2", "rpc: w0: __hello: world size 4 does not match the master's 3" },
        { 2, 3, "w2", NULL },
        { 2, 3, "x2", "rpc: w0: __hello: rank 2 is taken by live worker w2" },
        { RPC_RANK_DYNAMIC, 0, "late", "rpc: w0: __hello: the run is over" },
    };
    enum { N_TRIES = sizeof tries / sizeof tries[0] };
    register_all();
    struct proc_group J;
    h_spawn(&H, 2, serve_child, &w);
    h_spawn(&J, N_TRIES, join_child, (void *)tries);
    struct rpc_opts o = opts_for(0, 3, "tcp://127.0.0.1:0");
    o.on_listening = proc_hand_out_all;
    o.listening_user = &H;
    if (rpc_init(&o) < 0) {
        proc_reap_all(&H, 10);
        proc_reap_all(&J, 10);
        ck_abort_msg("rpc_init: %s", rpc_last_error());
    }
    for (int i = 0; i < 3; i++) {
        proc_hand_out(&J, i, rpc_master_endpoint());
        ck_assert_msg(proc_wait(&J, i, 30) == 0, "try %d", i);
    }
    ck_assert_int_eq(kill(H.p[1].pid, SIGKILL), 0);
    ck_assert_int_eq(proc_wait(&H, 1, 10), 128 + SIGKILL);
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 10000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_str_eq(ev.name, "w2");
    proc_hand_out(&J, 3, rpc_master_endpoint());
    ck_assert_int_eq(rpc_next_event(&ev, 10000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_JOIN);
    ck_assert_int_eq(ev.id, 2);
    ck_assert_str_eq(ev.name, "w2");
    struct rpc_value res;
    /* the other worker reaches the new w2 too (and verifies its connection) */
    check_reachable("w2", "hi again", 5000);
    ck_assert_int_eq(rpc_sync("w1", "events", NULL, &res, 0), 0);
    ck_assert_msg(strlen(res.str.ptr) >= 8 && strcmp(res.str.ptr + strlen(res.str.ptr) - 8, "join:w2,") == 0,
                  "w1's events: %s", res.str.ptr);
    rpc_value_clear(&res);
    proc_hand_out(&J, 4, rpc_master_endpoint());
    ck_assert_int_eq(proc_wait(&J, 4, 30), 0);
    rpc_refuse_joins("the run is over");
    proc_hand_out(&J, 5, rpc_master_endpoint());
    ck_assert_int_eq(proc_wait(&J, 5, 30), 0);
    assert_nothing_dropped("w1");
    rpc_shutdown(true);
    ck_assert_int_eq(proc_wait(&H, 0, 30), 0);   /* H's w2 was killed above */
    ck_assert_int_eq(proc_wait(&J, 3, 30), 0);
    proc_group_deinit(&J);
}
END_TEST


/* A worker started well before its rendezvous (several heartbeat timeouts)
 * waits for it, up to its init timeout, rather than declaring it dead. */
START_TEST(test_worker_waits_for_rendezvous)
{
    hb_timeout_ms = 500;
    static int w = 2;
    char master[64];
    int port = proc_free_port();
    ck_assert_int_gt(port, 0);
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", port);
    register_all();
    h_spawn(&H, 1, serve_child, &w);
    proc_hand_out(&H, -1, master);
    usleep(1500000);
    struct rpc_opts o = opts_for(0, 2, master);
    int rc = rpc_init(&o);
    if (rc < 0) {
        proc_reap_all(&H, 10);
        ck_abort_msg("rpc_init: %s", rpc_last_error());
    }
    struct rpc_value args = rpc_list(2), res;
    args.list.items[0] = rpc_int(2);
    args.list.items[1] = rpc_int(3);
    ck_assert_msg(rpc_sync("w1", "add", &args, &res, 5000) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 5);
    rpc_value_clear(&args);
    stop_world();
}
END_TEST

/* Pings in the name of a killed worker do not keep it alive. */
START_TEST(test_ping_for_dead_worker)
{
    hb_timeout_ms = 1000;
    start_world(2);
    void *zctx = zmq_ctx_new();
    void *s = stranger(zctx, rpc_master_endpoint());
    kill(H.p[0].pid, SIGKILL);
    double t0 = trib_now_s();
    struct rpc_event ev;
    int got = 0;
    while (!got && trib_now_s() - t0 < 30) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        pack_hdr_as(&pk, 4, 0, 1, NULL, 0);
        msgpack_pack_nil(&pk);
        zmq_send(s, sb.data, sb.size, 0);
        msgpack_sbuffer_destroy(&sb);
        got = rpc_next_event(&ev, 50);
    }
    ck_assert_msg(got, "w1 was not declared dead while a stranger pinged in its name");
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_str_eq(ev.name, "w1");
    /* its pings now count as bad */
    for (int i = 0; i < 5; i++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        pack_hdr_as(&pk, 4, 0, 1, NULL, 0);
        msgpack_pack_nil(&pk);
        zmq_send(s, sb.data, sb.size, 0);
        msgpack_sbuffer_destroy(&sb);
    }
    struct rpc_stats st;
    for (t0 = trib_now_s(); trib_now_s() - t0 < 30; usleep(10000)) {
        rpc_get_stats(&st);
        if (st.dropped_unverified >= 5) break;
    }
    ck_assert_int_ge(st.dropped_unverified, 5);
    zmq_close(s);
    zmq_ctx_term(zctx);
    rpc_shutdown(true);
    ck_assert_int_eq(proc_wait(&H, 0, 10), 128 + SIGKILL);
}
END_TEST

/* A connection that sends more than 1000 bad messages is cut off; the
 * others are served as before. */
START_TEST(test_garbage_cut_off)
{
    start_world(2);
    void *zctx = zmq_ctx_new();
    void *s = stranger(zctx, rpc_master_endpoint());
    for (int i = 0; i < 1100; i++) zmq_send(s, "\xc1garbage", 8, 0);
    struct rpc_stats st;
    double t0 = trib_now_s();
    do {
        usleep(10000);
        rpc_get_stats(&st);
    } while (st.connections_cut == 0 && trib_now_s() - t0 < 30);
    usleep(100000);
    rpc_get_stats(&st);
    /* What it had sent on when cut is dropped or lost; what it still had
     * queued arrives on its next connection (libzmq reconnects). */
    ck_assert_int_eq(st.connections_cut, 1);
    ck_assert_int_ge(st.dropped_malformed, 1001);
    ck_assert_int_le(st.dropped_malformed + st.dropped_cut, 1100);
    assert_alive();
    zmq_close(s);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST


/* ---- bounded remote-created state ---------------------------------------- */

/* A fork registration for an RRef that is never created waits at most the
 * default timeout, and neither it nor one forwarded by a receiver of a
 * forged RRef descriptor holds a graceful shutdown up (issue 11: 238 s). */
START_TEST(test_forged_fork)
{
    w0_timeout_ms = 1500;
    start_world(2);
    void *zctx = zmq_ctx_new();
    struct fake_worker a;
    struct rpc_event ev;
    fake_join(zctx, &a, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);
    /* creator w1 is alive: the fork waits for a creation that never comes */
    uint64_t id = (1ull << 48) | 5;
    bool ok = true;
    double sent = trib_now_s();
    fake_rref_msg(&a, 2, 11, "__rref_fork", id, (2ull << 48) | 6, NULL);
    ck_assert_int_eq(fake_reply(&a, REPLY_WAIT_MS, &ok), 11);
    ck_assert(!ok);
    /* refused when it expired (the 1.5 s default timeout), never before */
    ck_assert_msg(trib_now_s() - sent >= 1.4, "the fork was refused %.2f s after it was sent (timeout 1.5 s)",
                  trib_now_s() - sent);
    struct rpc_stats st;
    rpc_get_stats(&st);
    ck_assert_int_eq(st.forks_expired, 1);

    /* w1 is shutting down already (its serve loop): a fork forwarded to it
     * for a forged RRef (owner w1, creator w0, parent fakeA) is refused */
    unsigned char rd[24] = { 1, 0, 2, 0, 0, 0, 0, 0, 0x77, 0x07 };
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 12, 2, "add", 0);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_ext_with_body(&pk, rd, sizeof rd, 2);
    msgpack_pack_int(&pk, 1);
    zmq_send(a.dealer, sb.data, sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 12);
    ck_assert(!ok);
    /* and one more waiting here when the shutdown starts */
    sent = trib_now_s();
    fake_rref_msg(&a, 2, 13, "__rref_fork", id + 1, (2ull << 48) | 7, NULL);
    uint64_t early = fake_reply(&a, 300, &ok);
    /* no answer while it waits (a box that took 1.5 s to look has seen it expire) */
    ck_assert_msg(early == 0 || (early == 13 && !ok && trib_now_s() - sent >= 1.4), "reply %llu after %.2f s",
                  (unsigned long long)early, trib_now_s() - sent);
    double t0 = trib_now_s();
    stop_world();
    double secs = trib_now_s() - t0;
    ck_assert_msg(secs < 5.0, "graceful shutdown took %.2f s", secs);
    fake_close(&a);
    zmq_ctx_term(zctx);
}
END_TEST

/* One caller's requests received and not yet answered are bounded, in
 * number and in bytes. The ones that wait are parked at the gate until the
 * next one has been refused. */
START_TEST(test_pending_bound)
{
    max_pending = 8;
    max_pending_bytes = 64 << 10;
    gate_close();
    start_world(2);
    struct rpc_future *fs[9];
    for (int i = 0; i < 8; i++) fs[i] = rpc_async("w1", "park_gated", NULL, 0);
    struct rpc_value zero = rpc_list(1);
    zero.list.items[0] = rpc_int(0);
    fs[8] = rpc_async("w1", "park", &zero, 0);
    rpc_value_clear(&zero);
    ck_assert_int_eq(rpc_future_wait(fs[8], NULL), -1);
    const char *want = "rpc: w1: busy: w0 has 8 requests (";
    ck_assert_msg(strncmp(rpc_last_error(), want, strlen(want)) == 0, "got '%s'", rpc_last_error());
    ck_assert_msg(strstr(rpc_last_error(), "the limit is 8 requests, 65536 bytes") != NULL, "got '%s'", rpc_last_error());
    gate_open();
    for (int i = 0; i < 8; i++) ck_assert_msg(rpc_future_wait(fs[i], NULL) == 0, "%s", rpc_last_error());
    for (int i = 0; i < 9; i++) rpc_future_free(fs[i]);
    /* w1 let each request go before it queued the reply: it holds none of
     * ours but the asking one */
    ck_assert_int_eq(call_int("w1", "requests_of_caller"), 1);
    /* bytes: a 40 KiB request waits; a second one would pass 64 KiB */
    gate_close();
    for (int i = 0; i < 2; i++) {
        static char blob[40 << 10];
        struct rpc_value args = rpc_list(2);
        args.list.items[0] = rpc_int(0);
        args.list.items[1] = rpc_bytes(blob, sizeof blob);
        fs[i] = rpc_async("w1", i == 0 ? "park_gated" : "park", &args, 0);
        rpc_value_clear(&args);
    }
    ck_assert_int_eq(rpc_future_wait(fs[1], NULL), -1);
    ck_assert_msg(strncmp(rpc_last_error(), "rpc: w1: busy: w0 has 1 requests (", 34) == 0, "got '%s'", rpc_last_error());
    gate_open();
    ck_assert_msg(rpc_future_wait(fs[0], NULL) == 0, "%s", rpc_last_error());
    rpc_future_free(fs[0]);
    rpc_future_free(fs[1]);
    assert_alive();
    stop_world();
}
END_TEST

/* Rank 0's rendezvous wait ends, with its own error, once its cancel flag
 * is raised (what a signal handler does; tributary-agent's test raises it
 * with a real SIGINT mid-wait), not at init_timeout_ms. */
static volatile sig_atomic_t cancel_flag;

START_TEST(test_init_cancelled)
{
    struct rpc_opts o = { .name = "master", .rank = 0, .world_size = 3, .master = "tcp://127.0.0.1:0",
                          .init_timeout_ms = 60000, .cancel = &cancel_flag };
    cancel_flag = 1;
    int64_t t0 = trib_now_ms();
    ck_assert_int_eq(rpc_init(&o), -1);
    int64_t took = trib_now_ms() - t0;
    ck_assert_str_eq(rpc_last_error(), "rpc_init: interrupted while waiting for the rendezvous (1 of 3 workers arrived)");
    ck_assert_msg(took < 30000, "rpc_init returned after %lld ms", (long long)took);
    /* the agent is gone: a new one starts */
    cancel_flag = 0;
    o.world_size = 1;
    ck_assert_msg(rpc_init(&o) == 0, "%s", rpc_last_error());
    rpc_shutdown(false);
}
END_TEST

START_TEST(test_init_errors)
{
    struct rpc_opts o = { .name = "x", .rank = 3, .world_size = 2, .master = "tcp://127.0.0.1:0" };
    ck_assert_int_eq(rpc_init(&o), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_init: rank 3 out of range for world size 2");
    o.rank = 0;
    o.name = NULL;
    ck_assert_int_eq(rpc_init(&o), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_init: a worker name (1..63 bytes) is required");
    o.name = "x";
    o.rank = 1;
    o.master = "bogus://127.0.0.1:1";
    ck_assert_int_eq(rpc_init(&o), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_init: rpc: cannot connect to 'bogus://127.0.0.1:1': Protocol not supported");
    o.master = "tcp://127.0.0.1:1";      /* nobody there */
    o.init_timeout_ms = 300;
    ck_assert_int_eq(rpc_init(&o), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_init: rendezvous with tcp://127.0.0.1:1 failed: rpc: timed out after 300 ms calling (rendezvous).__hello");
    /* environment variables, torchrun style */
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "0", 1);
    struct rpc_opts e = { .name = "solo", .rank = RPC_RANK_ENV };
    register_all();         /* hooks before rpc_init: the I/O thread reads them */
    ck_assert_msg(rpc_init(&e) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(rpc_self()->id, 0);
    ck_assert(strncmp(rpc_master_endpoint(), "tcp://127.0.0.1:", 16) == 0);
    struct rpc_value args = rpc_list(2), res;
    args.list.items[0] = rpc_int(2);
    args.list.items[1] = rpc_int(2);
    ck_assert_int_eq(rpc_sync("solo", "add", &args, &res, 0), 0);
    ck_assert_int_eq(res.i, 4);
    rpc_value_clear(&args);
    rpc_shutdown(true);
    /* Slurm's names */
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    ck_assert_msg(rpc_init(&e) == 0, "%s", rpc_last_error());
    rpc_shutdown(false);
}
END_TEST

START_TEST(test_autograd_hooks)
{
    start_world(2);
    int64_t shape[1] = { 3 };
    struct tensor *plain = tensor_new(DTYPE_F32, DEVICE_CPU, 1, shape);
    struct tensor *g = tensor_new(DTYPE_F32, DEVICE_CPU, 1, shape);
    tensor_set_requires_grad(g, true);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_list(2);                   /* nested tensors are seen too */
    args.list.items[0].list.items[0] = rpc_tensor(plain);
    args.list.items[0].list.items[1] = rpc_tensor(g);
    ck_assert_int_eq(rpc_sync("w1", "echo", &args, &res, 0), 0);
    rpc_value_clear(&res);
    rpc_value_clear(&args);
    /* no tensor requiring grad: no ids */
    args = rpc_list(1);
    args.list.items[0] = rpc_tensor(plain);
    ck_assert_int_eq(rpc_sync("w1", "echo", &args, &res, 0), 0);
    rpc_value_clear(&res);
    rpc_value_clear(&args);
    ck_assert_int_eq(rpc_sync("w1", "hook_log", NULL, &res, 0), 0);
    ck_assert_str_eq(res.str.ptr, "req from 0 ctx 42 msg 7 n 2 grad 1;");
    rpc_value_clear(&res);
    pthread_mutex_lock(&hook_mu);
    ck_assert_str_eq(hook_log, "resp from 1 ctx 42 msg 8 n 2 grad 1;");
    pthread_mutex_unlock(&hook_mu);
    tensor_free(plain);
    tensor_free(g);
    stop_world();
}
END_TEST

START_TEST(test_graceful_shutdown_waits)
{
    start_world(2);
    /* a value nested too deep is refused at the sender */
    struct rpc_value deep = rpc_list(1), *cur = &deep.list.items[0];
    for (int i = 0; i < 40; i++) {
        *cur = rpc_list(1);
        cur = &cur->list.items[0];
    }
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = deep;
    ck_assert_int_eq(rpc_sync("w1", "echo", &args, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: value nested deeper than 32");
    rpc_value_clear(&args);
    /* arguments must be a list */
    struct rpc_value notlist = rpc_int(3);
    ck_assert_int_eq(rpc_sync("w1", "echo", &notlist, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: arguments to echo must be a list, not int");

    args = rpc_list(1);
    args.list.items[0] = rpc_int(300);
    double t0 = trib_now_s();
    struct rpc_future *f = rpc_async("w1", "slow", &args, 0);
    rpc_value_clear(&args);
    rpc_shutdown(true);                  /* waits for the call in flight */
    ck_assert(trib_now_s() - t0 >= 0.29);
    ck_assert(rpc_future_done(f));
    ck_assert_msg(rpc_future_wait(f, NULL) == 0, "%s", rpc_last_error());
    rpc_future_free(f);
    for (int i = 0; i < H.n; i++) ck_assert_int_eq(proc_wait(&H, i, 30), 0);
    /* after shutdown, calls fail cleanly */
    ck_assert_int_eq(rpc_sync("w1", "echo", NULL, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: unknown worker 'w1' calling w1.echo");
}
END_TEST

/* A raw dealer (CURVE client if pub/sec given) calls "nosuch" on w1;
 * returns the error text, or "" when nothing came back (within
 * REPLY_WAIT_MS if answered, else NO_REPLY_WAIT_MS). */
static void raw_probe(void *ctx, const char *ep, const char *pub, const char *sec, bool answered, char *err,
                      size_t cap)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (pub) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, curve_pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    ck_assert_int_eq(zmq_connect(s, ep), 0);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 3, "nosuch", 0);
    msgpack_pack_array(&pk, 0);
    zmq_msg_t f;
    frame_from(&f, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    if (answered) raw_call(s, &f, 1, err, cap);
    else raw_send_unanswered(s, &f, 1, err, cap);
    zmq_close(s);
}

START_TEST(test_curve)
{
    ck_assert_int_eq(zmq_curve_keypair(curve_pub, curve_sec), 0);
    struct rpc_opts bad = { .name = "x", .rank = 0, .world_size = 1, .master = "tcp://127.0.0.1:0",
                            .curve = true, .curve_public_key = "short", .curve_secret_key = curve_sec };
    ck_assert_int_eq(rpc_init(&bad), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_init: curve needs a Z85 public and secret key (40 characters each)");

    use_curve = true;
    start_world(2);
    assert_alive();
    struct rpc_worker_info w1;
    ck_assert_int_eq(rpc_get_worker_info("w1", &w1), 0);
    void *ctx = zmq_ctx_new();
    char err[1024], opub[41], osec[41];
    raw_probe(ctx, w1.endpoint, NULL, NULL, false, err, sizeof err);          /* plain text */
    ck_assert_str_eq(err, "");
    ck_assert_int_eq(zmq_curve_keypair(opub, osec), 0);
    raw_probe(ctx, w1.endpoint, opub, osec, false, err, sizeof err);          /* key not allowed */
    ck_assert_str_eq(err, "");
    raw_probe(ctx, w1.endpoint, curve_pub, curve_sec, true, err, sizeof err); /* the cluster key */
    ck_assert_str_eq(err, "rpc: w1: refused: w0 disowns this connection");   /* gets through CURVE, is nobody's */
    /* refusals are counted here too (each probe's connection at least once) */
    struct rpc_stats st;
    rpc_get_stats(&st);
    ck_assert_int_eq(st.refused_auth, 0);
    raw_probe(ctx, rpc_master_endpoint(), NULL, NULL, false, err, sizeof err);
    raw_probe(ctx, rpc_master_endpoint(), opub, osec, false, err, sizeof err);
    double t0 = trib_now_s();
    do {
        usleep(10000);
        rpc_get_stats(&st);
    } while (st.refused_auth < 2 && trib_now_s() - t0 < 30);
    ck_assert_int_ge(st.refused_auth, 2);
    ck_assert_int_eq(st.handshakes_failed, 0);
    zmq_ctx_term(ctx);
    assert_alive();
    stop_world();
    use_curve = false;
}
END_TEST

/* w2 has w_to call fn(args) (see fn_relay); the error text, "" if none. */
static void relay(const char *via, const char *to, const char *fn, struct rpc_value fargs, char *out, size_t cap)
{
    struct rpc_value a = rpc_list(3), res = rpc_nil();
    a.list.items[0] = rpc_str(to);
    a.list.items[1] = rpc_str(fn);
    a.list.items[2] = fargs;
    ck_assert_msg(rpc_sync(via, "relay", &a, &res, 0) == 0, "relay: %s", rpc_last_error());
    ck_assert_int_eq(res.kind, RPC_STR);
    snprintf(out, cap, "%.*s", (int)res.str.len, res.str.ptr);
    rpc_value_clear(&res);
    rpc_value_clear(&a);
}

/* N11 (issue 24): a member that holds no fork of an RRef can neither
 * delete one nor use the RRef. w0 holds an RRef owned by w1; w2, a
 * legitimate member that was handed the RRef's id and w0's fork id, asks
 * w1 to call a method on it, fetch it and delete w0's fork. The owner
 * knows the fork was given to w0 and refuses each; w0's RRef keeps
 * working, untouched, and its own delete still frees the object. Before:
 * w2's call changed the object, and its delete freed it so that w0's
 * to_here failed with "unknown RRef". */
START_TEST(test_rref_non_holder)
{
    start_world(3);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(5);
    struct rref *r = rpc_remote("w1", "counter", &args, 0);
    ck_assert_msg(r != NULL, "%s", rpc_last_error());
    rpc_value_clear(&args);
    ck_assert_int_eq(call_int("w1", "owned"), 1);
    char err[1024], want[256];
    struct rpc_value cargs = rpc_list(3);
    cargs.list.items[0] = rpc_int((int64_t)rref_id(r));
    cargs.list.items[1] = rpc_str("add");
    cargs.list.items[2] = rpc_list(1);
    cargs.list.items[2].list.items[0] = rpc_int(1000);
    relay("w2", "w1", "__rref_call", cargs, err, sizeof err);
    snprintf(want, sizeof want, "rpc: w1: __rref_call: w2 holds no fork of RRef %#llx", (unsigned long long)rref_id(r));
    ck_assert_str_eq(err, want);
    struct rpc_value fargs = rpc_list(1);
    fargs.list.items[0] = rpc_int((int64_t)rref_id(r));
    relay("w2", "w1", "__rref_fetch", fargs, err, sizeof err);
    snprintf(want, sizeof want, "rpc: w1: __rref_fetch: w2 holds no fork of RRef %#llx", (unsigned long long)rref_id(r));
    ck_assert_str_eq(err, want);
    snprintf(want, sizeof want, "rpc: w1: __rref_del: w2 holds no fork %#llx of RRef %#llx",
             (unsigned long long)r->fork_id, (unsigned long long)rref_id(r));
    for (int i = 0; i < 2; i++) {          /* a second try finds nothing freed either */
        relay("w2", "w1", "__rref_del", rref_two_ints(rref_id(r), r->fork_id), err, sizeof err);
        ck_assert_str_eq(err, want);
    }
    ck_assert_int_eq(call_int("w1", "owned"), 1);
    ck_assert_int_eq(call_int("w1", "destroyed"), 0);
    args = rpc_list(1);
    args.list.items[0] = rpc_int(2);
    ck_assert_msg(rref_rpc_sync(r, "add", &args, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 7);
    rpc_value_clear(&args);
    /* the owner's own fork table: w0 (the holder) deletes as before */
    rref_free(r);
    wait_int("w1", "destroyed", 1);
    wait_int("w1", "owned", 0);
    stop_world();
}
END_TEST

/* Ids are not guessable (issue 24, N11's second layer): RRef and fork ids
 * keep the creator in the top 16 bits, and the rest of consecutive ones
 * is no counter. */
START_TEST(test_rref_ids_unguessable)
{
    start_world(2);
    enum { N = 32 };
    uint64_t ids[N], forks[N];
    struct rref *rs[N];
    for (int i = 0; i < N; i++) {
        struct rpc_value args = rpc_list(1);
        args.list.items[0] = rpc_int(i);
        rs[i] = rpc_remote("w1", "counter", &args, 0);
        ck_assert_msg(rs[i] != NULL, "%s", rpc_last_error());
        rpc_value_clear(&args);
        ids[i] = rref_id(rs[i]);
        forks[i] = rs[i]->fork_id;
    }
    uint64_t all[2 * N];
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(ids[i] >> 48, 0);
        ck_assert_uint_eq(forks[i] >> 48, 0);
        all[2 * i] = ids[i];
        all[2 * i + 1] = forks[i];
    }
    int near = 0;           /* a counter puts all 64 within 64 of each other */
    for (int i = 0; i < 2 * N; i++)
        for (int j = i + 1; j < 2 * N; j++) {
            ck_assert_uint_ne(all[i], all[j]);
            near += (all[i] > all[j] ? all[i] - all[j] : all[j] - all[i]) < 1024;
        }
    ck_assert_msg(near == 0, "%d pairs of ids less than 1024 apart", near);
    for (int i = 0; i < N; i++) rref_free(rs[i]);
    wait_int("w1", "owned", 0);
    stop_world();
}
END_TEST

/* N16 (issue 24): a connection that is nobody's (it claims to be w0, which
 * disowns it) gets the same refusal whatever function it names, known or
 * not: it cannot learn which functions exist. Before: "unknown function". */
START_TEST(test_stranger_same_refusal)
{
    start_world(2);
    struct rpc_worker_info w1;
    ck_assert_int_eq(rpc_get_worker_info("w1", &w1), 0);
    /* w1 has the directory (it reaches w0 by name), so its refusals name
     * w0 rather than the rendezvous it first knew */
    char err[1024];
    double t0 = trib_now_s();
    do {
        struct rpc_value one = rpc_list(1);
        one.list.items[0] = rpc_int(1);
        relay("w1", "w0", "echo", one, err, sizeof err);
    } while (err[0] && trib_now_s() - t0 < 30 && usleep(5000) == 0);
    ck_assert_str_eq(err, "");
    void *ctx = zmq_ctx_new();
    static const char *const fns[] = { "nosuch", "echo", "__rref_del", "dist_autograd._release", "nosuch" };
    for (size_t k = 0; k < sizeof fns / sizeof *fns; k++) {
        void *s = zmq_socket(ctx, ZMQ_DEALER);      /* a fresh connection each */
        int zero = 0;
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        ck_assert_int_eq(zmq_connect(s, w1.endpoint), 0);
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        pack_hdr(&pk, 40 + k, fns[k], 0);
        msgpack_pack_array(&pk, 1);
        msgpack_pack_int(&pk, 1);
        zmq_msg_t f;
        frame_from(&f, sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
        raw_call(s, &f, 1, err, sizeof err);
        ck_assert_msg(strcmp(err, "rpc: w1: refused: w0 disowns this connection") == 0, "%s: %s", fns[k], err);
        zmq_close(s);
    }
    zmq_ctx_term(ctx);
    /* a member still learns that a function does not exist */
    struct rpc_value res = rpc_nil();
    ck_assert_int_eq(rpc_sync("w1", "nosuch", NULL, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: unknown function 'nosuch'");
    stop_world();
}
END_TEST

static Suite *rpc_suite(void)
{
    Suite *s = suite_create("rpc");
    TCase *tc = tcase_create("calls");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_init_errors);
    tcase_add_test(tc, test_init_cancelled);
    tcase_add_test(tc, test_echo_values);
    tcase_add_test(tc, test_nested_deferred_concurrent);
    tcase_add_test(tc, test_errors_and_timeouts);
    tcase_add_test(tc, test_io_sleeps_while_a_call_waits);
    tcase_add_test(tc, test_future_wait_any);
    tcase_add_test(tc, test_transport_auto_ipc);
    tcase_add_test(tc, test_transport_forced_tcp_env);
    tcase_add_test(tc, test_transport_forced_ipc_opt);
    tcase_add_test(tc, test_autograd_hooks);
    tcase_add_test(tc, test_graceful_shutdown_waits);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("failures");
    tcase_set_timeout(tf, 120);
    tcase_add_test(tf, test_kill9_peer);
    tcase_add_test(tf, test_bad_input);
    tcase_add_test(tf, test_membership);
    tcase_add_test(tf, test_left_worker_id_not_reused_while_draining);
    tcase_add_test(tf, test_bad_response_fails_call);
    tcase_add_test(tf, test_fork_before_remote);
    tcase_add_test(tf, test_forks_of_dead_worker_released);
    tcase_add_test(tf, test_curve);
    tcase_add_test(tf, test_spoofed_leave);
    tcase_add_test(tf, test_spoofed_join);
    tcase_add_test(tf, test_hello_refusals);
    tcase_add_test(tf, test_hello_declared_world_only);
    tcase_add_test(tf, test_transport_forced_ipc_refused);
    tcase_add_test(tf, test_static_rank_rejoins);
    tcase_add_test(tf, test_worker_waits_for_rendezvous);
    tcase_add_test(tf, test_ping_for_dead_worker);
    tcase_add_test(tf, test_garbage_cut_off);
    tcase_add_test(tf, test_forged_fork);
    tcase_add_test(tf, test_pending_bound);
    tcase_add_test(tf, test_stranger_same_refusal);
    suite_add_tcase(s, tf);
    TCase *tr = tcase_create("rrefs");
    tcase_set_timeout(tr, 120);
    tcase_add_test(tr, test_rref_lifecycle);
    tcase_add_test(tr, test_rref_del_during_call);
    tcase_add_test(tr, test_rref_method_table_changed);
    tcase_add_test(tr, test_rref_slow_to_value);
    tcase_add_test(tr, test_rref_non_holder);
    tcase_add_test(tr, test_rref_ids_unguessable);
    suite_add_tcase(s, tr);
    return s;
}

int main(void)
{
    gate = mmap(NULL, sizeof *gate, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (gate == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    SRunner *sr = srunner_create(rpc_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
