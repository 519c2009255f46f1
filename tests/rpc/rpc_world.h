/* The world every test/rpc runner starts (test_rpc_calls, test_rpc_faults,
 * test_rpc_hostile, test_rpc_rref; once one test_rpc.c): the functions every
 * process registers, rank 0 and its forked workers on loopback (start_world,
 * stop_world and the knobs they read), the gate the tests hold workers at,
 * and the raw-socket helpers of the tests that speak the wire themselves
 * (a fake worker, a stranger, hand-packed frames). Static and inline like
 * the other harnesses: one includer per binary, whose main is tests/kit's
 * KIT_MAIN. */
#ifndef TRIB_TESTS_RPC_WORLD_H
#define TRIB_TESTS_RPC_WORLD_H

#include <dirent.h>
#include <fcntl.h>
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
#include "kit.h"

static const char *NAMES[] = { "w0", "w1", "w2", "w3" };

/* ---- functions every process registers ------------------------------------ */

static inline int fn_echo(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 1) return rpc_request_fail(req, "expected 1 argument");
    *res = rpc_value_copy(&args->list.items[0]);
    return 0;
}

/* [n] -> n bytes (a big answer to a small request) */
static inline int fn_big(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)u;
    if (args->list.len != 1 || args->list.items[0].kind != RPC_INT || args->list.items[0].i < 0 ||
        args->list.items[0].i > (1 << 26))
        return rpc_request_fail(req, "expected a size up to 64 MiB");
    size_t n = (size_t)args->list.items[0].i;
    char *p = calloc(n ? n : 1, 1);
    *res = rpc_bytes(p, n);
    free(p);
    return 0;
}

static inline int fn_add(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 2) return rpc_request_fail(req, "expected 2 arguments");
    if (args->list.items[0].kind != RPC_INT || args->list.items[1].kind != RPC_INT)
        return rpc_request_fail(req, "expected ints");
    *res = rpc_int(args->list.items[0].i + args->list.items[1].i);
    return 0;
}

static inline int fn_slow(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    usleep((useconds_t)(args->list.items[0].i * 1000));
    return 0;
}

/* [next, x]: returns next.add(x, 1) + 1000 (A -> B -> C) */
static inline int fn_chain(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
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

static inline void *complete_later(void *arg)
{
    struct deferred *d = arg;
    usleep(20000);
    struct rpc_value v = rpc_int(d->x * 2);
    rpc_request_complete(d->req, &v);
    free(d);
    return NULL;
}

/* Defers req's reply to a thread of its own running fn(d), d->x the
 * request's first argument. */
static inline int defer_to(struct rpc_request *req, const struct rpc_value *args, void *(*fn)(void *))
{
    struct deferred *d = malloc(sizeof *d);
    d->req = req;
    d->x = args->list.items[0].i;
    pthread_t t;
    pthread_create(&t, NULL, fn, d);
    pthread_detach(t);
    return RPC_DEFERRED;
}

static inline int fn_deferred(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    return defer_to(req, args, complete_later);
}

/* park(ms, ...): a deferred reply (nil) completed ms later by another thread. */
static inline void *unpark_later(void *arg)
{
    struct deferred *d = arg;
    usleep((useconds_t)d->x * 1000);
    rpc_request_complete(d->req, NULL);
    free(d);
    return NULL;
}

static inline int fn_park(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    return defer_to(req, args, unpark_later);
}

/* Batching, the agent's pattern: requests wait until 4 have arrived, then
 * one thread answers them all with the batch's sum. */
static pthread_mutex_t batch_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rpc_request *batch[4];
static int64_t batch_x[4];
static int nbatch;

static inline void *answer_batch(void *arg)
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

static inline int fn_batched(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
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
static inline int fn_count(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(atomic_fetch_add(&counter, 1) + 1);
    return 0;
}

/* relay(to, fn, args): this worker calls to.fn(args) through the public
 * SDK, as an attacker would (the tests make a third worker one); returns
 * "" on success, else the error text. */
static inline int fn_relay(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
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

static inline int fn_owned(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(rref_owned_count());
    return 0;
}

/* Counter objects for RRef tests. */
static atomic_int destroyed;
struct counter { int64_t v; };
static inline void counter_destroy(void *o) { free(o); atomic_fetch_add(&destroyed, 1); }
static inline int counter_value(void *o, struct rpc_value *out) { *out = rpc_int(((struct counter *)o)->v); return 0; }
static const struct rpc_type COUNTER = { "Counter", counter_destroy, counter_value };

static inline void *ctor_counter(struct rpc_request *req, const struct rpc_value *args, void *u)
{
    if (args->list.len != 1 || args->list.items[0].kind != RPC_INT) {
        rpc_request_fail(req, "expected an int");
        return NULL;
    }
    struct counter *c = malloc(sizeof *c);
    c->v = args->list.items[0].i;
    return c;
}

static inline int m_add(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct counter *c = obj;
    c->v += args->list.items[0].i;
    *res = rpc_int(c->v);
    return 0;
}

/* After swap_methods: add subtracts, and peek reads the counter inline. */
static inline int m_sub(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct counter *c = obj;
    c->v -= args->list.items[0].i;
    *res = rpc_int(c->v);
    return 0;
}

static inline int m_peek(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(((struct counter *)obj)->v);
    return 0;
}

/* Changes Counter's method table on this worker: "add" replaced (inline
 * now), "peek" added (inline). */
static inline int fn_swap_methods(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    rpc_register_method_ex("Counter", "add", m_sub, NULL, RPC_FN_INLINE);
    rpc_register_method_ex("Counter", "peek", m_peek, NULL, RPC_FN_INLINE);
    return 0;
}

/* [ms]: sleeps, then reads the counter; fails if the object was destroyed
 * while the method ran (the owner must keep it alive for the call). */
static inline int m_slow_get(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *res, void *u)
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

/* Maps the gate before main, so before anything forks. */
__attribute__((constructor)) static void gate_map(void)
{
    gate = mmap(NULL, sizeof *gate, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (gate == MAP_FAILED) {
        perror("rpc_world: mmap of the gate");
        exit(1);
    }
}

static inline void gate_pass(void)
{
    atomic_fetch_add(&gate->waiting, 1);
    for (double t0 = trib_now_s(); !atomic_load(&gate->open) && trib_now_s() - t0 < GATE_CAP_S;) usleep(1000);
    atomic_fetch_sub(&gate->waiting, 1);
}

/* Before a test's workers start. */
static inline void gate_close(void)
{
    atomic_store(&gate->open, 0);
    atomic_store(&gate->waiting, 0);
}

static inline void gate_open(void) { atomic_store(&gate->open, 1); }

/* Until n waiters are at the gate (60 s at most). */
static inline void gate_await(int n)
{
    double t0 = trib_now_s();
    while (atomic_load(&gate->waiting) < n) {
        ck_assert_msg(trib_now_s() - t0 < 60, "%d of %d waiters at the gate after 60 s", atomic_load(&gate->waiting), n);
        usleep(1000);
    }
}

/* gated(): returns nil once the gate opens. */
static inline int fn_gated(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    gate_pass();
    return 0;
}

/* park_gated(): a deferred reply (nil) completed by another thread once
 * the gate opens. */
static inline void *unpark_at_gate(void *arg)
{
    gate_pass();
    rpc_request_complete(arg, NULL);
    return NULL;
}

static inline int fn_park_gated(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_t t;
    pthread_create(&t, NULL, unpark_at_gate, req);
    pthread_detach(t);
    return RPC_DEFERRED;
}

/* SlowVal objects: to_value waits at the gate. */
static inline void slowval_destroy(void *o) { free(o); }
static inline int slowval_value(void *o, struct rpc_value *out)
{
    gate_pass();
    *out = rpc_int(*(int64_t *)o);
    return 0;
}
static const struct rpc_type SLOWVAL = { "SlowVal", slowval_destroy, slowval_value };
static inline void *ctor_slowval(struct rpc_request *req, const struct rpc_value *args, void *u)
{
    int64_t *v = malloc(sizeof *v);
    *v = 5;
    return v;
}

static inline int fn_destroyed(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(atomic_load(&destroyed));
    return 0;
}

static struct rref *held;
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;

static inline int fn_hold(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.items[0].kind != RPC_RREF) return rpc_request_fail(req, "not an RRef");
    pthread_mutex_lock(&held_mu);
    rref_free(held);
    held = rref_retain(args->list.items[0].rref);
    pthread_mutex_unlock(&held_mu);
    *res = rpc_bool(rref_is_owner(held));
    return 0;
}

static inline int fn_use_held(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
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

static inline int fn_drop(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_mutex_lock(&held_mu);
    rref_free(held);
    held = NULL;
    pthread_mutex_unlock(&held_mu);
    return 0;
}

/* [rref] on the owner: returns [is_owner, local object's value] */
static inline int fn_local(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rref *r = args->list.items[0].rref;
    struct counter *c = rref_local_object(r);
    *res = rpc_list(2);
    res->list.items[0] = rpc_bool(rref_is_owner(r));
    res->list.items[1] = rpc_int(c ? c->v : -1);
    return 0;
}

/* Returns an RRef it creates on `args[0]` (RRef as a result). */
static inline int fn_make_remote(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
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

static inline void on_event(const struct rpc_event *ev, void *u)
{
    static const char *k[] = { "join", "leave", "failed" };
    pthread_mutex_lock(&log_mu);
    size_t l = strlen(event_log);
    snprintf(event_log + l, sizeof event_log - l, "%s:%s,", k[ev->kind], ev->name);
    pthread_mutex_unlock(&log_mu);
}

static inline int fn_events(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_mutex_lock(&log_mu);
    *res = rpc_str(event_log);
    pthread_mutex_unlock(&log_mu);
    return 0;
}

/* This process's rpc_get_stats: [spoofed, unverified, malformed, cut
 * connections, forks expired]. */
/* A hostile member (issue 32): moves both positions of every ring in every
 * shared-memory link segment this process maps three rings ahead, as a
 * process writing into its own half of a link can. It does so 200 ms after
 * its reply is on its way (a position it writes itself would otherwise be
 * set right again by the reply), and answers how many segments it maps. */
static inline int shm_segments(bool scribble)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo;
        if (!strstr(line, "memfd:trib-shm") || sscanf(line, "%lx-", &lo) != 1) continue;
        n++;
        if (!scribble) continue;
        /* through /proc/self/mem: the link may be unmapped meanwhile (an
         * error then, not a fault) */
        int mem = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
        uint64_t cap = 0;
        if (mem >= 0 && pread(mem, &cap, 8, (off_t)(lo + 8)) == 8)
            for (int k = 0; k < 2; k++)
                for (int pos = 0; pos < 2; pos++) {
                    off_t at = (off_t)(lo + 16 + 192 * (unsigned long)k + 64 * (unsigned long)pos);
                    uint64_t v;
                    if (pread(mem, &v, 8, at) != 8) continue;
                    v += 3 * cap;
                    if (pwrite(mem, &v, 8, at) != 8) continue;
                }
        if (mem >= 0) close(mem);
    }
    if (f) fclose(f);
    return n;
}

static inline void *shm_scribble_later(void *arg)
{
    (void)arg;
    usleep(200000);
    shm_segments(true);
    return NULL;
}

static inline int fn_shm_scribble(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)req, (void)args, (void)u;
    pthread_t t;
    if (pthread_create(&t, NULL, shm_scribble_later, NULL) != 0) abort();
    pthread_detach(t);
    *res = rpc_int(shm_segments(false));
    return 0;
}

static inline int fn_stats(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
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
static inline void assert_nothing_dropped(const char *other)
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
static inline int fn_leave(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    atomic_store(&leave_now, true);
    return 0;
}

/* Distributed-autograd hook points: a request carrying a tensor that
 * requires grad gets ids 42/7 on the way out; the response is stamped
 * msg id 8. Every receive is logged. */
static char hook_log[512];
static pthread_mutex_t hook_mu = PTHREAD_MUTEX_INITIALIZER;

static inline void hook_send(int to, bool is_response, struct tensor **ts, int n, int64_t *ctx, int64_t *msg, void *u)
{
    bool grad = false;
    for (int i = 0; i < n; i++) grad |= ts[i]->requires_grad;
    if (!grad) return;
    if (!is_response) { *ctx = 42; *msg = 7; }
    else if (*ctx == 42) *msg = 8;
}

static inline int hook_recv(int from, bool is_response, struct tensor **ts, int n, int64_t ctx, int64_t msg,
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

static inline int fn_hook_log(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    pthread_mutex_lock(&hook_mu);
    *res = rpc_str(hook_log);
    pthread_mutex_unlock(&hook_mu);
    return 0;
}

/* The caller's requests this worker has received and not yet let go of,
 * this one included. */
static inline int fn_requests_of_caller(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    int n;
    int64_t bytes;
    if (!rpc_requests_of(rpc_request_caller_id(req), &n, &bytes)) return rpc_request_fail(req, "no such caller");
    *res = rpc_int(n);
    return 0;
}

/* [name]: this process's rpc_worker_info.via for worker `name`. */
static inline int fn_via(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rpc_worker_info wi;
    if (rpc_get_worker_info(args->list.items[0].str.ptr, &wi) < 0) return rpc_request_fail(req, "%s", rpc_last_error());
    *res = rpc_str(wi.via);
    return 0;
}

static inline void register_all(void)
{
    static const struct rpc_autograd_hooks hooks = { .on_send = hook_send, .on_recv = hook_recv };
    rpc_set_autograd_hooks(&hooks);
    rpc_register("hook_log", fn_hook_log, NULL);
    rpc_register("echo", fn_echo, NULL);
    rpc_register("big", fn_big, NULL);
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
    rpc_register("shm_scribble", fn_shm_scribble, NULL);
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
static size_t max_frame_bytes;      /* every worker's rpc_opts.max_frame_bytes (0: the default) */
/* Every worker's rpc_opts.transport. */
static enum rpc_transport transport;
/* Rank 0 admits RPC_RANK_DYNAMIC workers (the tests of late joiners). */
static bool allow_dynamic = true;

static inline struct rpc_opts opts_for(int rank, int world, const char *master)
{
    struct rpc_opts o = { .name = NAMES[rank], .rank = rank, .world_size = world, .master = master,
                          .heartbeat_ms = 100, .heartbeat_timeout_ms = hb_timeout_ms,
                          .default_timeout_ms = rank == 0 ? w0_timeout_ms : 20000, .on_event = on_event,
                          .max_pending_per_worker = max_pending, .max_pending_bytes_per_worker = max_pending_bytes,
                          .max_frame_bytes = max_frame_bytes,
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
static inline int serve_child(int idx, const char *master, void *arg)
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

static inline void start_world(int world)
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

static inline void stop_world(void)
{
    rpc_shutdown(true);
    for (int i = 0; i < H.n; i++) ck_assert_int_eq(proc_wait(&H, i, 30), 0);
}

static inline struct tensor *random_f32(int64_t n, unsigned seed)
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

static inline void echo_check(const char *to, struct rpc_value v)
{
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = v;
    int rc = rpc_sync(to, "echo", &args, &res, 0);
    ck_assert_msg(rc == 0, "echo %s: %s", rpc_kind_name(v.kind), rpc_last_error());
    ck_assert_msg(rpc_value_equal(&args.list.items[0], &res), "echo of %s differs", rpc_kind_name(v.kind));
    rpc_value_clear(&res);
    rpc_value_clear(&args);
}

/* ---- shared by more than one runner ----------------------------------------- */

static inline int64_t call_int(const char *to, const char *fn)
{
    struct rpc_value r;
    ck_assert_msg(rpc_sync(to, fn, NULL, &r, 0) == 0, "%s.%s: %s", to, fn, rpc_last_error());
    ck_assert_int_eq(r.kind, RPC_INT);
    return r.i;
}

/* ---- hostile input ------------------------------------------------------------ */

/* The nine header fields before the payload; fn NULL packs nil. */
static inline void pack_hdr_as(msgpack_packer *pk, int type, uint64_t req_id, int sender, const char *fn, int ntensors)
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

static inline void pack_hdr(msgpack_packer *pk, uint64_t req_id, const char *fn, int ntensors)
{
    pack_hdr_as(pk, 1, req_id, 0, fn, ntensors);
}

/* How long the raw calls below wait: for a reply that must come, as long as
 * a loaded box (ASan, another test beside it) may take to give one; where
 * none may come, a moment (a reply later than that would go unseen: such a
 * check can pass wrongly on a slow box, never fail wrongly). */
#define REPLY_WAIT_MS 30000

/* Sends frames and returns the reply's error text ("" if none came within
 * wait_ms). */
static inline void raw_call_wait(void *sock, zmq_msg_t *frames, int n, char *out, size_t cap, int wait_ms)
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
static inline void raw_call(void *sock, zmq_msg_t *frames, int n, char *out, size_t cap)
{
    raw_call_wait(sock, frames, n, out, cap, REPLY_WAIT_MS);
}

static inline void frame_from(zmq_msg_t *m, const void *p, size_t n)
{
    zmq_msg_init_size(m, n);
    if (n) memcpy(zmq_msg_data(m), p, n);
}

/* A raw dynamic worker: a ROUTER it serves on and a DEALER to the master. */
struct fake_worker { void *router, *dealer; char endpoint[128]; };

static inline void fake_join(void *zctx, struct fake_worker *fw, const char *name)
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

static inline void fake_close(struct fake_worker *fw)
{
    zmq_close(fw->router);
    zmq_close(fw->dealer);
}

/* A worker that just joined answers this one (echo of msg) and w1 (w1's
 * chain call to it), each within timeout_ms (0: the default). */
static inline void check_reachable(const char *name, const char *msg, int timeout_ms)
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

/* A malformed answer to a call without timeout fails the call at once,
 * naming the worker, instead of leaving it pending forever; so does an
 * answer whose header names another worker as its sender. */
/* Sends an internal RRef call [id, fork(, fn, args)] from fake worker `me`
 * to the master, as request req_id. */
static inline void fake_rref_msg(struct fake_worker *fw, int me, uint64_t req_id, const char *fn,
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
static inline uint64_t fake_reply(struct fake_worker *fw, int timeout_ms, bool *ok)
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

/* ---- identity ------------------------------------------------------------ */

/* A raw DEALER (a stranger speaking the wire format) connected to ep. */
static inline void *stranger(void *zctx, const char *ep)
{
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_connect(s, ep), 0);
    return s;
}

/* w2 has w_to call fn(args) (see fn_relay); the error text, "" if none. */
static inline void relay(const char *via, const char *to, const char *fn, struct rpc_value fargs, char *out, size_t cap)
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

#endif
