/* Message handling on the I/O thread: a received request (checked, its
 * sender verified against its connection, its arguments decoded, then run
 * inline, queued for a handler thread or refused), and a received response
 * (matched to the call it answers). */
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "rpc/calls.h"

/* Owned here (I/O thread only): the decoder's zone, the tensors of the
 * message being decoded, and the bounds rpc_msg_init copied in. */
static msgpack_zone zone;
static struct wire_tensors rx_tensors;
static struct {
    int max_pending;            /* rpc_opts.max_pending_per_worker */
    size_t max_pending_bytes;   /* rpc_opts.max_pending_bytes_per_worker */
} bounds;

static void reply_bad(const unsigned char *rid, size_t rid_len, uint64_t req_id, const char *why)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "rpc: %s: bad message: %s", rpc_self_name(), why);
    rpc_reply_error_to(rid, rid_len, req_id, buf);
}

/* A malformed message on the dealer to `peer` that names request req_id:
 * fails the call it answers rather than leave it to its timeout (or to
 * wait forever when it has none). */
static void fail_bad_response(int peer, uint64_t req_id, const char *why)
{
    struct rpc_future *f = req_id ? rpc_pending_take(req_id, peer) : NULL;
    if (!f) return;
    rpc_future_fail(f, "rpc: bad response from worker %d: %s", peer, why);
    rpc_pending_done(f);
}

/* Runs (or queues) a request whose sender is known: `from` is the worker
 * its connection belongs to, or -1 for the few requests any connection may
 * make (__hello, __conn_check), which then carry no autograd context. */
static void dispatch_request(const unsigned char *rid, size_t rid_len, int from, const struct wire_hdr *h,
                             zmq_msg_t *frames, int n, rpc_fn fn, void *user, unsigned flags)
{
    char err[512];
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += zmq_msg_size(&frames[i]);
    int np;
    int64_t nb;
    if (rpc_requests_of(from, &np, &nb)) {
        if (np >= bounds.max_pending ||
            (np > 0 && (uint64_t)nb + bytes > bounds.max_pending_bytes)) {
            char name[64];
            rpc_peer_name(from, name, sizeof name);
            snprintf(err, sizeof err, "rpc: %s: busy: %s has %d requests (%lld bytes) here not answered yet; "
                     "the limit is %d requests, %zu bytes", rpc_self_name(), name, np, (long long)nb,
                     bounds.max_pending, bounds.max_pending_bytes);
            rpc_stat_add(RPC_STAT_BUSY, 1);
            rpc_reply_error_to(rid, rid_len, h->req_id, err);
            return;
        }
    }
    struct rpc_value args;
    if (h->payload.type == MSGPACK_OBJECT_NIL) {
        args = rpc_list(0);
        rx_tensors.n = 0;               /* not the previous message's (freed) tensors */
    } else if (wire_to_value(&h->payload, frames + 1, n - 1, from, &args, &rx_tensors, err, sizeof err) < 0) {
        reply_bad(rid, rid_len, h->req_id, err);
        return;
    }
    const struct rpc_request_in in = {
        .req_id = h->req_id, .caller = from, .rid = rid, .rid_len = rid_len, .fn = h->fn, .fn_len = h->fn_len,
        .ac_ctx = h->ac_ctx, .ac_msg = h->ac_msg, .handler = fn, .user = user, .bytes = bytes,
    };
    struct rpc_request *req = rpc_request_new_received(&in, &args);
    if (wire_hooks()->on_recv && from >= 0 &&
        wire_hooks()->on_recv(from, false, rx_tensors.t, rx_tensors.n, req->ac_ctx, req->ac_msg, err, sizeof err,
                          wire_hooks()->user) < 0) {
        rpc_request_fail(req, "%s", err);
        rpc_request_finish_error(req);
        return;
    }
    if (flags & RPC_FN_INLINE) {
        rpc_run_request(req);
    } else if (!rpc_pool_push(req)) {
        snprintf(err, sizeof err, "rpc: %s: busy: %d requests waiting for a handler", rpc_self_name(), MAX_QUEUE);
        rpc_request_fail_text(req, err);
        rpc_request_finish_error(req);
    }
}

/* A message on the router from connection c: frames[0] header, frames[1..n)
 * bodies. Requests are checked in this order: well-formed (which needs no
 * sender), then the sender against the connection, then a known function;
 * only then are the arguments decoded (RRefs in them start protocol
 * traffic) and the handler run. A connection not yet verified gets the
 * same answer (held, refused) whatever function it names: which functions
 * exist is told only to members. */
void rpc_handle_router(struct conn *c, zmq_msg_t *frames, int n)
{
    char err[512];
    struct wire_hdr h;
    bool answerable;
    size_t rid_len;
    const unsigned char *rid = rpc_conn_rid(c, &rid_len);
    if (rpc_conn_is_cut(c)) {
        rpc_stat_add(RPC_STAT_CUT_DROPPED, 1);
        return;
    }
    if (wire_decode(frames, n, &zone, &h, &answerable, err, sizeof err) < 0) {
        rpc_conn_bad(c, RPC_DROP_MALFORMED, "%s", err);
        if (answerable) reply_bad(rid, rid_len, h.req_id, err);
        return;
    }
    rpc_fn fn = NULL;
    void *user = NULL;
    unsigned flags = 0;
    if (h.type == WIRE_REQ) {
        const char *bad = !h.fn ? "request without a function name"
                        : h.payload.type != MSGPACK_OBJECT_ARRAY && h.payload.type != MSGPACK_OBJECT_NIL ? "arguments are not a list"
                        : NULL;
        if (bad) {
            rpc_conn_bad(c, RPC_DROP_MALFORMED, "%s", bad);
            reply_bad(rid, rid_len, h.req_id, bad);
            return;
        }
        rpc_find_fn(h.fn, h.fn_len, &fn, &user, &flags);     /* told after the verdict */
    }
    int from;
    char why[512];
    switch (rpc_conn_verdict(c, &h, &from, why, sizeof why)) {
    case CONN_REFUSE:
        if (h.type == WIRE_REQ && why[0]) rpc_reply_error_to(rid, rid_len, h.req_id, why);
        return;
    case CONN_HOLD:
        if (!rpc_conn_hold(c, &h, frames, n, why, sizeof why)) rpc_reply_error_to(rid, rid_len, h.req_id, why);
        return;
    default:
        break;
    }
    rpc_peer_touch(from);
    if (h.type == WIRE_PING) return;
    if (!fn) {      /* a member's (the exempt functions exist) */
        char msg[512];
        snprintf(msg, sizeof msg, "rpc: %s: unknown function '%.*s'", rpc_self_name(), (int)h.fn_len, h.fn);
        rpc_reply_error_to(rid, rid_len, h.req_id, msg);
        return;
    }
    dispatch_request(rid, rid_len, from, &h, frames, n, fn, user, flags);
}

/* A message on the dealer to worker `peer`: responses to our calls. */
void rpc_handle_dealer(int peer, zmq_msg_t *frames, int n)
{
    char err[512];
    struct wire_hdr h;
    bool answerable;
    if (wire_decode(frames, n, &zone, &h, &answerable, err, sizeof err) < 0) {
        rpc_peer_bad(peer, "%s", err);
        fail_bad_response(peer, h.req_id, err);
        return;
    }
    rpc_peer_touch(peer);
    if (h.type == WIRE_PING) return;
    if (h.type == WIRE_REQ) {
        rpc_peer_bad(peer, "a request on the response socket");
        return;
    }
    struct rpc_future *f = rpc_pending_take(h.req_id, peer);
    if (!f) return;                     /* timed out already, or bogus */
    if (h.sender != peer && h.sender != RPC_UNASSIGNED_ID) {
        /* The sender names the worker that recv functions send gradients
         * back to and that RRef forks come from: it must be the one called
         * (or a dynamic worker that has not yet learned its id). */
        rpc_peer_bad(peer, "a response in the name of worker %d", h.sender);
        rpc_future_fail(f, "rpc: bad response from worker %d: sender %d is not the worker called", peer, h.sender);
    } else if (h.type == WIRE_ERR) {
        if (h.payload.type == MSGPACK_OBJECT_STR) {
            snprintf(err, sizeof err, "%.*s", (int)h.payload.via.str.size, h.payload.via.str.ptr);
            rpc_future_complete(f, NULL, err);
        } else {
            rpc_future_fail(f, "rpc: malformed error from worker %d", peer);
        }
    } else {
        struct rpc_value v;
        if (wire_to_value(&h.payload, frames + 1, n - 1, peer, &v, &rx_tensors, err, sizeof err) < 0) {
            rpc_future_fail(f, "rpc: bad response from worker %d: %s", peer, err);
        } else {
            if (wire_hooks()->on_recv)
                wire_hooks()->on_recv(peer, true, rx_tensors.t, rx_tensors.n, h.ac_ctx, h.ac_msg, err, sizeof err,
                                  wire_hooks()->user);
            rpc_future_complete(f, &v, NULL);
        }
    }
    rpc_pending_done(f);
}

void rpc_msg_init(int max_pending, size_t max_pending_bytes)
{
    bounds.max_pending = max_pending;
    bounds.max_pending_bytes = max_pending_bytes;
    msgpack_zone_init(&zone, 8192);
}
void rpc_msg_fini(void) { msgpack_zone_destroy(&zone); }
