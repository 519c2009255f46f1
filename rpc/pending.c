/* The pending table: the calls this process sent and awaits replies to,
 * by request id, and the count of calls started and not yet completed.
 * Transport layer (rpc/README.md): the I/O thread adds a call when it
 * sends it and takes it when its reply, its timeout or its peer's loss
 * completes it; call.c counts calls in; membership waits for the count to
 * reach 0 before a graceful shutdown. */
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "rpc/transport.h"

/* Owned here. */
static struct {
    struct rpc_future *buckets[NBUCKETS];   /* I/O thread only: sent, awaiting a reply, by request id */
    int n;                                  /* I/O thread only */
    int64_t next_deadline;                  /* I/O thread only: no pending call's deadline is earlier (0: none);
                                               a call answered before it leaves it early, never late */
    atomic_int inflight;                    /* started and not yet completed (any thread) */
    int to[MAX_WORKERS];                    /* I/O thread only: pending calls per peer */
    void (*name_of)(int id, char *buf, size_t cap);   /* names a peer in error texts (rpc_pending_init) */
} calls;

void rpc_pending_init(void (*name_of)(int id, char *buf, size_t cap)) { calls.name_of = name_of; }

int rpc_pending_to(int peer) { return peer >= 0 && peer < MAX_WORKERS ? calls.to[peer] : 0; }

static void count_to(int peer, int delta)
{
    if (peer >= 0 && peer < MAX_WORKERS) calls.to[peer] += delta;
}

static void peer_name(int id, char *buf, size_t cap)
{
    if (calls.name_of) calls.name_of(id, buf, cap);
    else snprintf(buf, cap, "worker%d", id);
}

/* ---- pending calls (I/O thread) ---------------------------------------- */

void rpc_pending_add(struct rpc_future *f)
{
    count_to(f->peer, 1);
    unsigned b = (unsigned)(f->req_id & (NBUCKETS - 1));
    f->hnext = calls.buckets[b];
    calls.buckets[b] = f;
    calls.n++;
    if (f->deadline && (!calls.next_deadline || f->deadline < calls.next_deadline)) calls.next_deadline = f->deadline;
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
            count_to(f->peer, -1);
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
                count_to(f->peer, -1);
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
    peer_name(f->peer, name, sizeof name);
    rpc_future_fail(f, "rpc: %s calling %s.%s", a->why, name, f->fn);
    return true;
}

void rpc_fail_pending_to(int peer, const char *why)
{
    struct fail_arg a = { peer, why };
    scan_pending(fail_if_peer, &a, NULL);
}

struct expire_arg { int64_t now, next; };

static bool fail_if_expired(struct rpc_future *f, void *arg)
{
    struct expire_arg *a = arg;
    if (!f->deadline) return false;
    if (a->now < f->deadline) {
        if (!a->next || f->deadline < a->next) a->next = f->deadline;
        return false;
    }
    char name[64];
    peer_name(f->peer, name, sizeof name);
    rpc_future_fail(f, "rpc: timed out after %d ms calling %s.%s", f->timeout_ms, name, f->fn);
    return true;
}

void rpc_expire_pending(int64_t now)
{
    struct expire_arg a = { now, 0 };
    scan_pending(fail_if_expired, &a, NULL);
    calls.next_deadline = a.next;
}

int64_t rpc_pending_next_deadline(void) { return calls.n ? calls.next_deadline : 0; }

int rpc_pending_count(void) { return calls.n; }

int rpc_calls_in_flight(void) { return atomic_load(&calls.inflight); }

void rpc_call_started(void) { atomic_fetch_add(&calls.inflight, 1); }

void rpc_pending_timers(int64_t now)
{
    if (calls.n && calls.next_deadline && now >= calls.next_deadline) rpc_expire_pending(now);
}
