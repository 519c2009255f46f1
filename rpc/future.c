/* Futures of rpc_async: completion by the I/O thread (or a failing sender),
 * `then` callbacks, and an adaptive wait that yields briefly before
 * sleeping on the future's condition variable. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "rpc/base.h"

static struct trib_freelist rpc_future_fl = TRIB_FREELIST_INIT(sizeof(struct rpc_future), 0, RPC_FREELIST_MAX);

/* Owned here: how long a wait on a small call yields before it sleeps
 * (rpc_opts.spin_us; set by rpc_init), and which thread must never wait
 * (the I/O thread, which completes futures, marks itself). */
static atomic_int spin_us;
static _Thread_local bool completer_thread;

void rpc_future_set_spin(int us) { atomic_store(&spin_us, us); }
void rpc_future_mark_completer(bool on) { completer_thread = on; }

/* ---- futures --------------------------------------------------------------- */

struct rpc_future *rpc_future_new(void)
{
    struct rpc_future *f = trib_fl_get(&rpc_future_fl);
    atomic_init(&f->refs, 1);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    return f;
}

void rpc_future_free(struct rpc_future *f)
{
    if (!f || atomic_fetch_sub(&f->refs, 1) != 1) return;
    rpc_value_clear(&f->value);
    free(f->err);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    trib_fl_put(&rpc_future_fl, f);
}

/* Completes f with *v (moved) or err (copied). First completion wins. The
 * `then` callback runs before waiters are released (state 3 = completing). */
void rpc_future_complete(struct rpc_future *f, struct rpc_value *v, const char *err)
{
    pthread_mutex_lock(&f->mu);
    if (atomic_load(&f->state) != 0) {
        pthread_mutex_unlock(&f->mu);
        if (v) rpc_value_clear(v);
        return;
    }
    if (err) {
        f->err = strdup(err);
        CHECK_ALLOC(f->err);
    } else if (v) {
        f->value = *v;
        v->kind = RPC_NIL;
    }
    atomic_store(&f->state, 3);
    void (*cb)(struct rpc_future *, void *) = f->cb;
    void *cb_user = f->cb_user;
    f->cb = NULL;
    if (cb) {
        atomic_fetch_add(&f->refs, 1);
        pthread_mutex_unlock(&f->mu);
        cb(f, cb_user);
        pthread_mutex_lock(&f->mu);
    }
    atomic_store(&f->state, err ? 2 : 1);
    pthread_cond_broadcast(&f->cv);
    for (struct rpc_future_waiter *w = f->waiters; w; w = w->next) {
        pthread_mutex_lock(&w->wake->mu);
        w->wake->fired = true;
        pthread_cond_signal(&w->wake->cv);
        pthread_mutex_unlock(&w->wake->mu);
    }
    pthread_mutex_unlock(&f->mu);
    if (cb) rpc_future_free(f);
}

void rpc_future_fail(struct rpc_future *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rpc_future_fail(struct rpc_future *f, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    rpc_future_complete(f, NULL, buf);
}

static bool future_settled(struct rpc_future *f) { int st = atomic_load(&f->state); return st == 1 || st == 2; }

bool rpc_future_done(struct rpc_future *f) { return future_settled(f); }

const char *rpc_future_error(struct rpc_future *f)
{
    int st = atomic_load(&f->state);
    return st == 2 || (st == 3 && f->err) ? f->err : NULL;
}

int rpc_future_wait(struct rpc_future *f, struct rpc_value *out)
{
    /* The I/O thread completes futures: waiting on it would never return. */
    CHECK(future_settled(f) || !completer_thread);
    /* Adaptive wait: yield for a short while before sleeping. A small
     * call's reply lands within ~100 us, and a futex sleep plus wake of an
     * idle virtual CPU costs a large part of that; yielding keeps the
     * other threads of the round trip (ours and libzmq's) running. */
    int spin = atomic_load(&spin_us);
    if (!future_settled(f) && f->small && spin > 0) {
        int64_t t0 = trib_now_us();
        while (!future_settled(f) && trib_now_us() - t0 < spin) sched_yield();
    }
    if (!future_settled(f)) {
        pthread_mutex_lock(&f->mu);
        while (!future_settled(f)) pthread_cond_wait(&f->cv, &f->mu);
        pthread_mutex_unlock(&f->mu);
    }
    if (atomic_load(&f->state) == 2) return rpc_set_error("%s", f->err);
    if (out) *out = rpc_value_copy(&f->value);
    return 0;
}

/* Moves the value out of a done, successful future. */
int rpc_future_take(struct rpc_future *f, struct rpc_value *out)
{
    if (rpc_future_wait(f, NULL) < 0) return -1;
    if (out) {
        *out = f->value;
        f->value.kind = RPC_NIL;
    }
    return 0;
}

void rpc_future_then(struct rpc_future *f, void (*cb)(struct rpc_future *, void *), void *user)
{
    pthread_mutex_lock(&f->mu);
    if (atomic_load(&f->state) == 0) {
        f->cb = cb;
        f->cb_user = user;
        pthread_mutex_unlock(&f->mu);
        return;
    }
    pthread_mutex_unlock(&f->mu);
    cb(f, user);
}

int rpc_future_wait_all(struct rpc_future **fs, size_t n)
{
    int rc = 0;
    char first[1024] = "";
    for (size_t i = 0; i < n; i++)
        if (rpc_future_wait(fs[i], NULL) < 0 && rc == 0) {
            rc = -1;
            snprintf(first, sizeof first, "%s", rpc_last_error());
        }
    if (rc) rpc_set_error("%s", first);
    return rc;
}


/* Index of the first settled future, or -1. */
static int first_settled(struct rpc_future **fs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fs[i] && future_settled(fs[i])) return (int)i;
    return -1;
}

int rpc_future_wait_any(struct rpc_future **fs, size_t n, int timeout_ms)
{
    size_t live = 0;
    for (size_t i = 0; i < n; i++) live += fs[i] != NULL;
    if (live == 0) return rpc_set_error("rpc_future_wait_any: no future to wait on");
    int got = first_settled(fs, n);
    if (got >= 0) return got;
    if (timeout_ms == 0) return rpc_set_error("rpc: no future done within 0 ms");
    CHECK(!completer_thread);
    struct rpc_future_wake wake = { .fired = false };
    pthread_mutex_init(&wake.mu, NULL);
    pthread_cond_init(&wake.cv, NULL);
    struct rpc_future_waiter stack_nodes[32];
    struct rpc_future_waiter *nodes = n <= 32 ? stack_nodes : trib_xcalloc(n, sizeof *nodes);
    bool already = false;
    /* Register on every future; one that completes before its turn is
     * seen settled here (its completion holds the same mu). */
    for (size_t i = 0; i < n; i++) nodes[i].wake = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!fs[i]) continue;
        pthread_mutex_lock(&fs[i]->mu);
        if (!future_settled(fs[i])) {
            nodes[i].wake = &wake;
            nodes[i].next = fs[i]->waiters;
            fs[i]->waiters = &nodes[i];
        } else {
            already = true;
        }
        pthread_mutex_unlock(&fs[i]->mu);
        if (already) break;
    }
    struct timespec ts = trib_deadline_ts(timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&wake.mu);
    while (!wake.fired && !already) {
        if (timeout_ms < 0) pthread_cond_wait(&wake.cv, &wake.mu);
        else if (pthread_cond_timedwait(&wake.cv, &wake.mu, &ts) == ETIMEDOUT) break;
    }
    pthread_mutex_unlock(&wake.mu);
    /* Unregister: after this no completion touches wake. */
    for (size_t i = 0; i < n; i++) {
        if (!nodes[i].wake) continue;
        pthread_mutex_lock(&fs[i]->mu);
        for (struct rpc_future_waiter **pp = &fs[i]->waiters; *pp; pp = &(*pp)->next)
            if (*pp == &nodes[i]) {
                *pp = nodes[i].next;
                break;
            }
        pthread_mutex_unlock(&fs[i]->mu);
    }
    if (nodes != stack_nodes) free(nodes);
    pthread_cond_destroy(&wake.cv);
    pthread_mutex_destroy(&wake.mu);
    got = first_settled(fs, n);
    if (got < 0) return rpc_set_error("rpc: no future done within %d ms", timeout_ms);
    return got;
}
