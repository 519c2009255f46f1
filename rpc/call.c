/* The caller's side: rpc_async and its kin build a request and queue it
 * for the I/O thread, which keeps it in the pending table (by request id)
 * until its reply, its timeout or its peer's death completes the future. */
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "rpc/rpc_internal.h"

static struct rpc_agent *const A = &rpc_agent_state;

/* Owned here: the calls this process started and not yet completed. */
static struct {
    struct rpc_future *buckets[NBUCKETS];   /* I/O thread only: sent, awaiting a reply, by request id */
    int n;                                  /* I/O thread only */
    int64_t last_scan;                      /* I/O thread only: the last timeout scan */
    atomic_int inflight;                    /* started and not yet completed (any thread) */
    atomic_uint_fast64_t next_req;          /* the next request id */
} calls = { .next_req = 1 };

int rpc_default_timeout_ms(void)
{
    return A->opts.default_timeout_ms;
}

/* ---- pending calls (I/O thread) ---------------------------------------- */

static void peer_pending(int id, int delta)
{
    if (id >= 0 && id < MAX_WORKERS && A->peers[id]) A->peers[id]->npending += delta;
}

void rpc_pending_add(struct rpc_future *f)
{
    peer_pending(f->peer, 1);
    unsigned b = (unsigned)(f->req_id & (NBUCKETS - 1));
    f->hnext = calls.buckets[b];
    calls.buckets[b] = f;
    calls.n++;
}

/* The pending call req_id made to worker `peer` (a reply only counts from
 * the worker that was called), unlinked; NULL if none. */
struct rpc_future *rpc_pending_take(uint64_t req_id, int peer)
{
    unsigned b = (unsigned)(req_id & (NBUCKETS - 1));
    for (struct rpc_future **pp = &calls.buckets[b]; *pp; pp = &(*pp)->hnext)
        if ((*pp)->req_id == req_id && (*pp)->peer == peer) {
            struct rpc_future *f = *pp;
            *pp = f->hnext;
            calls.n--;
            peer_pending(f->peer, -1);
            return f;
        }
    return NULL;
}

/* Drops the table's reference after completing. */
void rpc_pending_done(struct rpc_future *f)
{
    atomic_fetch_sub(&calls.inflight, 1);
    rpc_future_free(f);
}

static void scan_pending(bool (*pred)(struct rpc_future *, void *), void *arg, const char *fmt_kind)
{
    (void)fmt_kind;
    for (int b = 0; b < NBUCKETS; b++)
        for (struct rpc_future **pp = &calls.buckets[b]; *pp;) {
            struct rpc_future *f = *pp;
            if (pred(f, arg)) {
                *pp = f->hnext;
                calls.n--;
                peer_pending(f->peer, -1);
                rpc_pending_done(f);
            } else {
                pp = &f->hnext;
            }
        }
}

struct fail_arg { int peer; const char *why; };

static bool fail_if_peer(struct rpc_future *f, void *arg)
{
    struct fail_arg *a = arg;
    if (a->peer >= 0 && f->peer != a->peer) return false;
    char name[64];
    rpc_peer_name(f->peer, name, sizeof name);
    rpc_future_fail(f, "rpc: %s calling %s.%s", a->why, name, f->fn);
    return true;
}

void rpc_fail_pending_to(int peer, const char *why)
{
    struct fail_arg a = { peer, why };
    scan_pending(fail_if_peer, &a, NULL);
}

static bool fail_if_expired(struct rpc_future *f, void *arg)
{
    int64_t now = *(int64_t *)arg;
    if (!f->deadline || now < f->deadline) return false;
    char name[64];
    rpc_peer_name(f->peer, name, sizeof name);
    rpc_future_fail(f, "rpc: timed out after %d ms calling %s.%s", f->timeout_ms, name, f->fn);
    return true;
}

void rpc_expire_pending(int64_t now) { scan_pending(fail_if_expired, &now, NULL); }

/* ---- calls ------------------------------------------------------------------ */

struct rpc_future *rpc_async_id(int to, const char *fn, const struct rpc_value *args, int timeout_ms)
{
    struct rpc_future *f = rpc_future_new();
    snprintf(f->fn, sizeof f->fn, "%s", fn);
    f->peer = to;
    if (!A->up) {
        rpc_future_fail(f, "rpc: not initialised calling %s", fn);
        return f;
    }
    if (to < 0 || to >= MAX_WORKERS) {
        /* -1 would be taken for a router reply and the call never sent nor
         * tracked: its future would stay pending forever. */
        rpc_future_fail(f, "rpc: worker %d is not reachable calling %s", to, fn);
        return f;
    }
    if (timeout_ms == 0) timeout_ms = A->opts.default_timeout_ms;
    f->timeout_ms = timeout_ms;
    f->deadline = timeout_ms > 0 ? trib_now_ms() + timeout_ms : 0;
    f->req_id = atomic_fetch_add(&calls.next_req, 1);
    if (args && args->kind != RPC_LIST) {
        rpc_future_fail(f, "rpc: arguments to %s must be a list, not %s", fn, rpc_kind_name(args->kind));
        return f;
    }
    struct outmsg *m = rpc_build_msg(WIRE_REQ, f->req_id, fn, to, false, 0, 0, timeout_ms > 0 ? timeout_ms : 0, args, NULL);
    if (!m) {
        rpc_future_complete(f, NULL, rpc_last_error());
        return f;
    }
    m->peer = to;
    m->fut = f;
    size_t bytes = 0;
    for (int i = 0; i < m->nframes; i++) bytes += zmq_msg_size(&m->frames[i]);
    f->small = bytes <= RPC_SMALL_CALL_BYTES;
    atomic_fetch_add(&f->refs, 1);        /* the pending table's reference */
    atomic_fetch_add(&calls.inflight, 1);
    rpc_out_push(m);
    return f;
}

static int lookup_id(const char *to)
{
    pthread_rwlock_rdlock(&A->dir_lock);
    int id = A->up ? rpc_find_peer(to) : -1;
    pthread_rwlock_unlock(&A->dir_lock);
    return id;
}

struct rpc_future *rpc_async(const char *to, const char *fn, const struct rpc_value *args, int timeout_ms)
{
    int id = lookup_id(to);
    if (id < 0) {
        struct rpc_future *f = rpc_future_new();
        rpc_future_fail(f, "rpc: unknown worker '%s' calling %s.%s", to, to, fn);
        return f;
    }
    return rpc_async_id(id, fn, args, timeout_ms);
}

int rpc_sync(const char *to, const char *fn, const struct rpc_value *args, struct rpc_value *result, int timeout_ms)
{
    struct rpc_future *f = rpc_async(to, fn, args, timeout_ms);
    int rc = rpc_future_take(f, result);
    rpc_future_free(f);
    return rc;
}

struct internal_cb { void (*cb)(struct rpc_future *, void *); void *user; };

static void internal_done(struct rpc_future *f, void *arg)
{
    struct internal_cb *ic = arg;
    if (ic->cb) ic->cb(f, ic->user);
    free(ic);
    rpc_future_free(f);
}

void rpc_call_internal(int to, const char *fn, struct rpc_value *args, int timeout_ms,
                       void (*cb)(struct rpc_future *, void *), void *user)
{
    struct rpc_future *f = rpc_async_id(to, fn, args, timeout_ms);
    rpc_value_clear(args);
    rpc_call_track(f, cb, user);
}

void rpc_call_track(struct rpc_future *f, void (*cb)(struct rpc_future *, void *), void *user)
{
    struct internal_cb *ic = trib_xmalloc(sizeof *ic);
    ic->cb = cb;
    ic->user = user;
    rpc_future_then(f, internal_done, ic);
}

/* Sends a one-way request (no reply, not tracked) to worker `to`. */
void rpc_send_oneway(int to, const char *fn, const struct rpc_value *args)
{
    struct outmsg *m = rpc_build_msg(WIRE_REQ, 0, fn, to, false, 0, 0, 0, args, NULL);
    CHECK(m != NULL);
    m->peer = to;
    rpc_out_push(m);
}

int rpc_pending_count(void) { return calls.n; }

int rpc_calls_in_flight(void) { return atomic_load(&calls.inflight); }

void rpc_call_started(void) { atomic_fetch_add(&calls.inflight, 1); }

void rpc_pending_timers(int64_t now)
{
    if (calls.n && now - calls.last_scan >= 5) {
        calls.last_scan = now;
        rpc_expire_pending(now);
    }
}
