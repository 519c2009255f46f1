/* The caller's side: rpc_async and its kin build a request and queue it
 * for the I/O thread, which keeps it in the pending table (by request id)
 * until its reply, its timeout or its peer's death completes the future. */
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "rpc/calls.h"


/* Owned here: the next request id and the default timeout (rpc_call_init). */
static struct {
    atomic_uint_fast64_t next_req;
    int default_timeout_ms;
} calls = { .next_req = 1 };

void rpc_call_init(int default_timeout_ms) { calls.default_timeout_ms = default_timeout_ms; }

int rpc_default_timeout_ms(void) { return calls.default_timeout_ms; }

/* ---- calls ------------------------------------------------------------------ */

struct rpc_future *rpc_async_id(int to, const char *fn, const struct rpc_value *args, int timeout_ms)
{
    struct rpc_future *f = rpc_future_new();
    size_t fl = strnlen(fn, sizeof f->fn - 1);    /* snprintf's "%s" costs more than the rest of a call's set-up */
    memcpy(f->fn, fn, fl);
    f->fn[fl] = '\0';
    f->peer = to;
    if (!rpc_is_up()) {
        rpc_future_fail(f, "rpc: not initialised calling %s", fn);
        return f;
    }
    if (to < 0 || to >= MAX_WORKERS) {
        /* -1 would be taken for a router reply and the call never sent nor
         * tracked: its future would stay pending forever. */
        rpc_future_fail(f, "rpc: worker %d is not reachable calling %s", to, fn);
        return f;
    }
    if (timeout_ms == 0) timeout_ms = calls.default_timeout_ms;
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
    rpc_call_started();
    rpc_out_push(m);
    return f;
}

struct rpc_future *rpc_async(const char *to, const char *fn, const struct rpc_value *args, int timeout_ms)
{
    int id = rpc_peer_lookup(to);
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
