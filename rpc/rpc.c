/* The RPC agent: rendezvous and membership, one I/O thread owning every
 * ZeroMQ socket, a pool of handler threads, calls, futures, deferred
 * replies, heartbeats, timeouts and graceful shutdown (DESIGN.md §4.1-4.3). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "rpc/rpc_internal.h"

struct rpc_agent rpc_agent_state;
struct rpc_autograd_hooks rpc_hooks;
static struct rpc_agent *const A = &rpc_agent_state;

/* ---- errors and clocks ---------------------------------------------------- */

static _Thread_local char last_error[1024];

const char *rpc_last_error(void) { return last_error; }

int rpc_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}

int64_t rpc_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t rpc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rpc_set_autograd_hooks(const struct rpc_autograd_hooks *h) { rpc_hooks = h ? *h : (struct rpc_autograd_hooks){ 0 }; }

void rpc_request_autograd_ids(const struct rpc_request *req, int64_t *ctx_id, int64_t *msg_id)
{
    *ctx_id = req->ac_ctx;
    *msg_id = req->ac_msg;
}

int rpc_self_id(void) { return atomic_load(&A->self_id); }
bool rpc_is_up(void) { return A->up; }
const char *rpc_self_name(void) { return A->self.name; }
const struct rpc_worker_info *rpc_self(void) { return &A->self; }
const char *rpc_master_endpoint(void) { return A->master; }
uint64_t rpc_gen_id(void) { return ((uint64_t)rpc_self_id() << 48) | (atomic_fetch_add(&A->next_gid, 1) & 0xffffffffffffull); }

/* ---- out queue ------------------------------------------------------------- */

static _Thread_local bool on_io_thread;

struct rpc_freelist rpc_outmsg_fl =
    RPC_FREELIST_INIT(sizeof(struct outmsg) + RPC_OUTMSG_POOLED_FRAMES * sizeof(zmq_msg_t));

void *rpc_fl_get(struct rpc_freelist *fl)
{
    pthread_mutex_lock(&fl->mu);
    void *p = fl->head;
    if (p) {
        fl->head = *(void **)p;
        fl->n--;
    }
    pthread_mutex_unlock(&fl->mu);
    if (!p) p = trib_xmalloc(fl->size);
    memset(p, 0, fl->size);
    return p;
}

void rpc_fl_put(struct rpc_freelist *fl, void *p)
{
    pthread_mutex_lock(&fl->mu);
    if (fl->n < RPC_FREELIST_MAX) {
        *(void **)p = fl->head;
        fl->head = p;
        fl->n++;
        p = NULL;
    }
    pthread_mutex_unlock(&fl->mu);
    free(p);
}

void rpc_fl_drain(struct rpc_freelist *fl)
{
    pthread_mutex_lock(&fl->mu);
    void *p = fl->head;
    fl->head = NULL;
    fl->n = 0;
    pthread_mutex_unlock(&fl->mu);
    while (p) {
        void *next = *(void **)p;
        free(p);
        p = next;
    }
}

static struct outmsg *outmsg_new(int nframes)
{
    struct outmsg *m = nframes <= RPC_OUTMSG_POOLED_FRAMES
        ? rpc_fl_get(&rpc_outmsg_fl)
        : trib_xmalloc(sizeof *m + (size_t)nframes * sizeof(zmq_msg_t));
    m->next = NULL;
    m->peer = -1;
    m->rid_len = 0;
    m->fut = NULL;
    m->nframes = nframes;
    return m;
}

static void outmsg_free(struct outmsg *m)
{
    for (int i = 0; i < m->nframes; i++) ZMQ_CHECK(zmq_msg_close(&m->frames[i]));
    if (m->nframes <= RPC_OUTMSG_POOLED_FRAMES) rpc_fl_put(&rpc_outmsg_fl, m);
    else free(m);
}

void rpc_wake_io(void)
{
    uint64_t one = 1;
    ssize_t r = write(A->efd, &one, sizeof one);
    (void)r;
}

void rpc_out_push(struct outmsg *m)
{
    if (A->offline) {           /* nowhere to send: calls fail at once */
        if (m->fut) {
            rpc_future_fail(m->fut, "rpc: offline calling worker %d.%s", m->peer, m->fut->fn);
            rpc_pending_done(m->fut);
        }
        outmsg_free(m);
        return;
    }
    pthread_mutex_lock(&A->out_mu);
    const char *why = A->io_dead ? "shut down" : m->fut && A->out_len >= MAX_QUEUE ? "send queue full" : NULL;
    if (why) {
        pthread_mutex_unlock(&A->out_mu);
        if (m->fut) {
            char name[64];
            rpc_peer_name(m->peer, name, sizeof name);
            rpc_future_fail(m->fut, "rpc: %s calling %s.%s", why, name, m->fut->fn);
            rpc_pending_done(m->fut);
        }
        outmsg_free(m);
        return;
    }
    bool was_empty = A->out_head == NULL;
    if (A->out_tail) A->out_tail->next = m; else A->out_head = m;
    A->out_tail = m;
    A->out_len++;
    pthread_mutex_unlock(&A->out_mu);
    /* The I/O thread flushes its own messages before it polls again. */
    if (was_empty && !on_io_thread) rpc_wake_io();
}

static void free_tensor_hint(void *data, void *hint) { (void)data; tensor_free(hint); }

/* A write target for msgpack that starts on the stack and spills to the
 * heap only for large payloads. */
struct obuf { char *data; size_t size, cap; bool heap; char stack[1024]; };

static void obuf_init(struct obuf *b) { b->data = b->stack; b->size = 0; b->cap = sizeof b->stack; b->heap = false; }
static void obuf_fini(struct obuf *b) { if (b->heap) free(b->data); }

static int obuf_write(void *data, const char *buf, size_t len)
{
    struct obuf *b = data;
    if (b->size + len > b->cap) {
        size_t cap = b->cap * 2;
        while (cap < b->size + len) cap *= 2;
        if (b->heap) {
            b->data = trib_xrealloc(b->data, cap);
        } else {
            char *d = trib_xmalloc(cap);
            memcpy(d, b->data, b->size);
            b->data = d;
            b->heap = true;
        }
        b->cap = cap;
    }
    memcpy(b->data + b->size, buf, len);
    b->size += len;
    return 0;
}

static _Thread_local struct wire_tensors tl_tensors;

/* Builds a message. payload may be NULL (nil); err non-NULL makes an error
 * payload (a string). Returns NULL with error if the payload cannot be
 * encoded. */
struct outmsg *rpc_build_msg(int type, uint64_t req_id, const char *fn, int to, bool is_response,
                                int64_t ac_ctx, int64_t ac_msg, int64_t timeout_ms,
                                const struct rpc_value *payload, const char *err)
{
    struct wire_tensors *tl = &tl_tensors;
    tl->n = 0;
    /* The payload first, so its tensors are known (and the autograd hook
     * has run) before the header is written. */
    struct obuf pb, hb;
    obuf_init(&pb);
    obuf_init(&hb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &pb, obuf_write);
    if (err) {
        msgpack_pack_str_with_body(&pk, err, strlen(err));
    } else if (payload) {
        if (wire_pack_value(&pk, payload, tl, to, 0) < 0) {
            for (int i = 0; i < tl->n; i++) tensor_free(tl->t[i]);
            obuf_fini(&pb);
            return NULL;
        }
    } else {
        msgpack_pack_nil(&pk);
    }
    /* Every request and answer, tensors or not, so a context propagates;
     * the hook gets the payload's own tensors (they carry the grad_fn). */
    if (rpc_hooks.on_send && type != WIRE_PING && type != WIRE_ERR)
        rpc_hooks.on_send(to, is_response, tl->orig, tl->n, &ac_ctx, &ac_msg, rpc_hooks.user);
    msgpack_packer hp;
    msgpack_packer_init(&hp, &hb, obuf_write);
    msgpack_pack_array(&hp, 10);
    msgpack_pack_int(&hp, WIRE_VERSION);
    msgpack_pack_int(&hp, type);
    msgpack_pack_uint64(&hp, req_id);
    msgpack_pack_int(&hp, rpc_self_id());
    if (fn) msgpack_pack_str_with_body(&hp, fn, strlen(fn)); else msgpack_pack_nil(&hp);
    msgpack_pack_int64(&hp, ac_ctx);
    msgpack_pack_int64(&hp, ac_msg);
    msgpack_pack_int64(&hp, timeout_ms);
    msgpack_pack_int(&hp, tl->n);
    struct outmsg *m = outmsg_new(1 + tl->n);
    ZMQ_CHECK(zmq_msg_init_size(&m->frames[0], hb.size + pb.size));
    char *d = zmq_msg_data(&m->frames[0]);
    memcpy(d, hb.data, hb.size);
    memcpy(d + hb.size, pb.data, pb.size);
    obuf_fini(&hb);
    obuf_fini(&pb);
    for (int i = 0; i < tl->n; i++) {
        struct tensor *t = tl->t[i];
        size_t n = tensor_nbytes(t);
        if (n <= 256) {
            ZMQ_CHECK(zmq_msg_init_size(&m->frames[1 + i], n));
            if (n) memcpy(zmq_msg_data(&m->frames[1 + i]), tensor_data(t), n);
            tensor_free(t);
        } else {
            ZMQ_CHECK(zmq_msg_init_data(&m->frames[1 + i], tensor_data(t), n, free_tensor_hint, t));
        }
    }
    return m;
}

/* ---- pending calls (I/O thread) ---------------------------------------- */

static void peer_pending(int id, int delta)
{
    if (id >= 0 && id < MAX_WORKERS && A->peers[id]) A->peers[id]->npending += delta;
}

static void pending_add(struct rpc_future *f)
{
    peer_pending(f->peer, 1);
    unsigned b = (unsigned)(f->req_id & (NBUCKETS - 1));
    f->hnext = A->pending[b];
    A->pending[b] = f;
    A->npending++;
}

/* The pending call req_id made to worker `peer` (a reply only counts from
 * the worker that was called), unlinked; NULL if none. */
static struct rpc_future *pending_take(uint64_t req_id, int peer)
{
    unsigned b = (unsigned)(req_id & (NBUCKETS - 1));
    for (struct rpc_future **pp = &A->pending[b]; *pp; pp = &(*pp)->hnext)
        if ((*pp)->req_id == req_id && (*pp)->peer == peer) {
            struct rpc_future *f = *pp;
            *pp = f->hnext;
            A->npending--;
            peer_pending(f->peer, -1);
            return f;
        }
    return NULL;
}

/* Drops the table's reference after completing. */
void rpc_pending_done(struct rpc_future *f)
{
    atomic_fetch_sub(&A->inflight, 1);
    rpc_future_free(f);
}

static void scan_pending(bool (*pred)(struct rpc_future *, void *), void *arg, const char *fmt_kind)
{
    (void)fmt_kind;
    for (int b = 0; b < NBUCKETS; b++)
        for (struct rpc_future **pp = &A->pending[b]; *pp;) {
            struct rpc_future *f = *pp;
            if (pred(f, arg)) {
                *pp = f->hnext;
                A->npending--;
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

/* ---- sending (I/O thread) ------------------------------------------------- */

static void send_frames(void *sock, struct outmsg *m, bool with_rid)
{
    int rc = 0;
    if (with_rid) rc = zmq_send(sock, m->rid, m->rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    for (int i = 0; rc >= 0 && i < m->nframes; i++)
        rc = zmq_msg_send(&m->frames[i], sock, (i + 1 < m->nframes ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT);
    if (rc < 0 && m->fut) {
        char name[64];
        rpc_peer_name(m->peer, name, sizeof name);
        rpc_future_fail(m->fut, "rpc: cannot send to %s (%s) calling %s.%s", name, zmq_strerror(zmq_errno()),
                    name, m->fut->fn);
        rpc_pending_done(m->fut);
        m->fut = NULL;
    }
}

static void io_send(struct outmsg *m)
{
    if (m->peer < 0) {
        send_frames(A->router, m, true);
    } else {
        struct peer *p = m->peer < MAX_WORKERS ? A->peers[m->peer] : NULL;
        if (!p || !p->alive) {
            if (m->fut) {
                if (p) rpc_future_fail(m->fut, "rpc: %s is not reachable (dead or gone) calling %s.%s", p->name, p->name, m->fut->fn);
                else rpc_future_fail(m->fut, "rpc: worker %d is not reachable calling %s", m->peer, m->fut->fn);
                rpc_pending_done(m->fut);
            }
        } else {
            send_frames(p->dealer, m, false);   /* fails m->fut on error */
            if (m->fut) pending_add(m->fut);
        }
    }
    outmsg_free(m);
}

/* ---- receiving (I/O thread) ------------------------------------------------ */

static msgpack_zone zone;
static struct wire_tensors rx_tensors;      /* tensors of the message being decoded */

static void touch_peer(int id)
{
    if (id >= 0 && id < MAX_WORKERS && A->peers[id] && A->peers[id]->dealer) A->peers[id]->last_seen = rpc_now_ms();
}

void rpc_reply_error_to(const unsigned char *rid, size_t rid_len, uint64_t req_id, const char *text)
{
    if (!req_id || !rid || !rid_len) return;
    struct outmsg *m = rpc_build_msg(WIRE_ERR, req_id, NULL, -1, true, 0, 0, 0, NULL, text);
    memcpy(m->rid, rid, rid_len);
    m->rid_len = rid_len;
    rpc_out_push(m);
}

static void reply_bad(const unsigned char *rid, size_t rid_len, uint64_t req_id, const char *why)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "rpc: %s: bad message: %s", A->self.name, why);
    rpc_reply_error_to(rid, rid_len, req_id, buf);
}

/* A malformed message on the dealer to `peer` that names request req_id:
 * fails the call it answers rather than leave it to its timeout (or to
 * wait forever when it has none). */
static void fail_bad_response(int peer, uint64_t req_id, const char *why)
{
    struct rpc_future *f = req_id ? pending_take(req_id, peer) : NULL;
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
    if (from >= 0 && from < MAX_WORKERS) {
        int np = atomic_load(&A->pending_by[from]);
        int64_t nb = atomic_load(&A->pending_bytes_by[from]);
        if (np >= A->opts.max_pending_per_worker ||
            (np > 0 && (uint64_t)nb + bytes > A->opts.max_pending_bytes_per_worker)) {
            char name[64];
            rpc_peer_name(from, name, sizeof name);
            snprintf(err, sizeof err, "rpc: %s: busy: %s has %d requests (%lld bytes) here not answered yet; "
                     "the limit is %d requests, %zu bytes", A->self.name, name, np, (long long)nb,
                     A->opts.max_pending_per_worker, A->opts.max_pending_bytes_per_worker);
            atomic_fetch_add(&rpc_counters.busy, 1);
            rpc_reply_error_to(rid, rid_len, h->req_id, err);
            return;
        }
    }
    struct rpc_request *req = rpc_fl_get(&rpc_request_fl);
    req->counted = true;
    req->bytes = bytes;
    atomic_fetch_add(&A->active, 1);
    if (from >= 0 && from < MAX_WORKERS) {
        atomic_fetch_add(&A->pending_by[from], 1);
        atomic_fetch_add(&A->pending_bytes_by[from], (int64_t)bytes);
    }
    req->next = NULL;
    req->req_id = h->req_id;
    req->caller = from;
    memcpy(req->rid, rid, rid_len);
    req->rid_len = rid_len;
    memcpy(req->fn, h->fn, h->fn_len);
    req->fn[h->fn_len] = '\0';
    req->ac_ctx = from >= 0 ? h->ac_ctx : 0;
    req->ac_msg = from >= 0 ? h->ac_msg : 0;
    req->handler = fn;
    req->user = user;
    req->err = NULL;
    req->job = NULL;
    if (h->payload.type == MSGPACK_OBJECT_NIL) {
        req->args = rpc_list(0);
    } else if (wire_to_value(&h->payload, frames + 1, n - 1, from, &req->args, &rx_tensors, err, sizeof err) < 0) {
        req->args.kind = RPC_NIL;
        reply_bad(rid, rid_len, h->req_id, err);
        rpc_request_free(req);
        return;
    }
    if (rpc_hooks.on_recv && from >= 0 &&
        rpc_hooks.on_recv(from, false, rx_tensors.t, rx_tensors.n, req->ac_ctx, req->ac_msg, err, sizeof err,
                          rpc_hooks.user) < 0) {
        rpc_request_fail(req, "%s", err);
        rpc_request_finish_error(req);
        return;
    }
    if (flags & RPC_FN_INLINE) {
        rpc_run_request(req);
    } else if (!rpc_pool_push(req)) {
        snprintf(err, sizeof err, "rpc: %s: busy: %d requests waiting for a handler", A->self.name, MAX_QUEUE);
        rpc_request_fail_text(req, err);
        rpc_request_finish_error(req);
    }
}

/* A message on the router from connection c: frames[0] header, frames[1..n)
 * bodies. Requests are checked in this order: well-formed, a known
 * function (neither needs to know the sender), then the sender against the
 * connection; only then are the arguments decoded (RRefs in them start
 * protocol traffic) and the handler run. */
void rpc_handle_router(struct conn *c, zmq_msg_t *frames, int n)
{
    char err[512];
    struct wire_hdr h;
    bool answerable;
    size_t rid_len;
    const unsigned char *rid = rpc_conn_rid(c, &rid_len);
    if (rpc_conn_is_cut(c)) {
        atomic_fetch_add(&rpc_counters.cut_dropped, 1);
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
        if (!rpc_find_fn(h.fn, h.fn_len, &fn, &user, &flags)) {
            char msg[512];
            snprintf(msg, sizeof msg, "rpc: %s: unknown function '%.*s'", A->self.name, (int)h.fn_len, h.fn);
            rpc_reply_error_to(rid, rid_len, h.req_id, msg);
            return;
        }
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
    touch_peer(from);
    if (h.type == WIRE_PING) return;
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
    touch_peer(peer);
    if (h.type == WIRE_PING) return;
    if (h.type == WIRE_REQ) {
        rpc_peer_bad(peer, "a request on the response socket");
        return;
    }
    struct rpc_future *f = pending_take(h.req_id, peer);
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
            if (rpc_hooks.on_recv)
                rpc_hooks.on_recv(peer, true, rx_tensors.t, rx_tensors.n, h.ac_ctx, h.ac_msg, err, sizeof err,
                                  rpc_hooks.user);
            rpc_future_complete(f, &v, NULL);
        }
    }
    rpc_pending_done(f);
}

static zmq_msg_t rx_frames[2 + WIRE_MAX_TENSORS];

/* Reads one whole message from sock; returns frames read, 0 if none. */
static int recv_one(void *sock, bool router, unsigned char *rid, size_t *rid_len)
{
    int n = 0;
    for (;;) {
        if (n < 2 + WIRE_MAX_TENSORS) {
            ZMQ_CHECK(zmq_msg_init(&rx_frames[n]));
            if (zmq_msg_recv(&rx_frames[n], sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                ZMQ_CHECK(zmq_msg_close(&rx_frames[n]));
                if (n == 0) return 0;
                CHECK(zmq_errno() == ETERM || zmq_errno() == EINTR);
                break;
            }
            n++;
            if (!zmq_msg_more(&rx_frames[n - 1])) break;
        } else {
            /* Too many frames: drain the rest and drop the message. */
            zmq_msg_t junk;
            ZMQ_CHECK(zmq_msg_init(&junk));
            int more = 1;
            while (more && zmq_msg_recv(&junk, sock, 0) >= 0) more = zmq_msg_more(&junk);
            ZMQ_CHECK(zmq_msg_close(&junk));
            for (int i = 0; i < n; i++) ZMQ_CHECK(zmq_msg_close(&rx_frames[i]));
            return -1;
        }
    }
    if (router) {
        size_t l = zmq_msg_size(&rx_frames[0]);
        if (l > 255) l = 255;
        memcpy(rid, zmq_msg_data(&rx_frames[0]), l);
        *rid_len = l;
    }
    return n;
}

/* peer: the worker a dealer is connected to (-1 for the router). */
static void drain_socket(void *sock, bool router, int peer)
{
    unsigned char rid[256];
    size_t rid_len = 0;
    for (int k = 0; k < RECV_BATCH; k++) {
        int n = recv_one(sock, router, rid, &rid_len);
        if (n == 0) return;
        if (n < 0) continue;
        if (!router) {
            rpc_handle_dealer(peer, rx_frames, n);
        } else if (n > 1) {
            struct conn *c = rpc_conn_get(rid, rid_len, &rx_frames[1]);   /* from the wire: has its socket */
            if (c) rpc_handle_router(c, rx_frames + 1, n - 1);
            else atomic_fetch_add(&rpc_counters.unverified, 1);     /* the table is full */
        }
        for (int i = 0; i < n; i++) ZMQ_CHECK(zmq_msg_close(&rx_frames[i]));
    }
}

static void send_ping(struct peer *p)
{
    struct outmsg *m = rpc_build_msg(WIRE_PING, 0, NULL, p->id, false, 0, 0, 0, NULL, NULL);
    send_frames(p->dealer, m, false);
    outmsg_free(m);
}

static void io_timers(void)
{
    int64_t now = rpc_now_ms();
    if (now - A->last_hb >= A->opts.heartbeat_ms) {
        A->last_hb = now;
        if (rpc_hooks.on_tick) rpc_hooks.on_tick(now, rpc_hooks.user);
        rref_expire_parked(now);
        int self = rpc_self_id();
        for (int i = 0; i < MAX_WORKERS; i++) {
            struct peer *p = A->peers[i];
            if (p && p->left_at && (p->npending == 0 || now - p->left_at > A->opts.heartbeat_timeout_ms)) {
                char why[128];
                snprintf(why, sizeof why, "%s left", p->name);
                rpc_close_peer(i, why);
            }
            if (!p || !p->alive || i == self) continue;
            if (now - p->last_seen > A->opts.heartbeat_timeout_ms) {
                char why[128];
                snprintf(why, sizeof why, "lost %s (no heartbeat for %d ms)", p->name, A->opts.heartbeat_timeout_ms);
                rpc_drop_peer(i, why, RPC_EVENT_FAILED);
                continue;
            }
            send_ping(p);
        }
    }
    if (A->npending && now - A->last_scan >= 5) {
        A->last_scan = now;
        scan_pending(fail_if_expired, &now, NULL);
    }
}

/* Sends everything queued, including what sending itself queues (failure
 * callbacks that start new calls). */
static void flush_out(bool last)
{
    for (;;) {
        pthread_mutex_lock(&A->out_mu);
        struct outmsg *m = A->out_head;
        A->out_head = A->out_tail = NULL;
        A->out_len = 0;
        if (last && !m) A->io_dead = true;
        pthread_mutex_unlock(&A->out_mu);
        if (!m) return;
        while (m) {
            struct outmsg *next = m->next;
            io_send(m);
            m = next;
        }
    }
}

static void *io_main(void *arg)
{
    (void)arg;
    on_io_thread = true;
    zmq_pollitem_t items[3 + MAX_WORKERS];
    int map[3 + MAX_WORKERS];
    int nitems = 0, first_dealer = 2;
    A->peers_changed = true;
    msgpack_zone_init(&zone, 8192);
    while (!atomic_load(&A->io_stop)) {
        if (A->peers_changed) {
            A->peers_changed = false;
            items[0] = (zmq_pollitem_t){ .socket = A->router, .events = ZMQ_POLLIN };
            items[1] = (zmq_pollitem_t){ .fd = A->efd, .events = ZMQ_POLLIN };
            nitems = 2;
            if (A->zap) items[nitems++] = (zmq_pollitem_t){ .socket = A->zap, .events = ZMQ_POLLIN };
            first_dealer = nitems;
            for (int i = 0; i < MAX_WORKERS; i++)
                if (A->peers[i] && A->peers[i]->dealer) {
                    map[nitems] = i;
                    items[nitems++] = (zmq_pollitem_t){ .socket = A->peers[i]->dealer, .events = ZMQ_POLLIN };
                }
        }
        long timeout = A->opts.heartbeat_ms;
        if (A->npending) timeout = 5;
        int rc = zmq_poll(items, nitems, timeout);
        if (rc < 0) {
            CHECK(zmq_errno() == EINTR);
            continue;
        }
        if (items[1].revents & ZMQ_POLLIN) {
            uint64_t v;
            ssize_t r = read(A->efd, &v, sizeof v);
            (void)r;
        }
        flush_out(false);
        if (items[0].revents & ZMQ_POLLIN) drain_socket(A->router, true, -1);
        bool changed = A->peers_changed;
        if (A->zap && (items[2].revents & ZMQ_POLLIN)) rpc_curve_zap();
        for (int i = first_dealer; i < nitems && !changed; i++)
            if ((items[i].revents & ZMQ_POLLIN) && A->peers[map[i]] && A->peers[map[i]]->dealer) {
                drain_socket(A->peers[map[i]]->dealer, false, map[i]);
                changed = A->peers_changed;
            }
        io_timers();
        rpc_conn_poll();
        flush_out(false);               /* replies of inline handlers, pings */
    }
    /* Flush what is queued (replies, byes) before the sockets close. */
    flush_out(true);
    rpc_fail_pending_to(-1, "shut down");
    msgpack_zone_destroy(&zone);
    return NULL;
}

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
    f->deadline = timeout_ms > 0 ? rpc_now_ms() + timeout_ms : 0;
    f->req_id = atomic_fetch_add(&A->next_req, 1);
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
    atomic_fetch_add(&A->inflight, 1);
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

/* ---- init / shutdown ---------------------------------------------------- */

static int env_int(const char *a, const char *b, int dflt)
{
    const char *v = getenv(a);
    if (!v && b) v = getenv(b);
    return v && *v ? atoi(v) : dflt;
}

/* Waits until pred() holds, or timeout_ms (< 0: no limit) has passed. */
static bool wait_state(bool (*pred)(void), int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : rpc_now_ms() + timeout_ms;
    pthread_mutex_lock(&A->state_mu);
    while (!pred()) {
        int64_t left = deadline - rpc_now_ms();
        if (left <= 0) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t step = left < 50 ? left : 50;
        ts.tv_nsec += step * 1000000;
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&A->state_cv, &A->state_mu, &ts);
    }
    bool ok = pred();
    pthread_mutex_unlock(&A->state_mu);
    return ok;
}

static bool pred_dir(void) { return A->dir_ready; }

/* Fills in the defaults of the options left 0. */
static void apply_defaults(struct rpc_opts *o)
{
    if (!o->default_timeout_ms) o->default_timeout_ms = 60000;
    if (!o->init_timeout_ms) o->init_timeout_ms = 30000;
    if (o->num_handler_threads <= 0) o->num_handler_threads = 4;
    if (o->heartbeat_ms <= 0) o->heartbeat_ms = 200;
    if (o->heartbeat_timeout_ms <= 0) o->heartbeat_timeout_ms = 5000;
    if (!o->max_frame_bytes) o->max_frame_bytes = 1ull << 30;
    if (o->max_pending_per_worker <= 0) o->max_pending_per_worker = 16384;
    if (!o->max_pending_bytes_per_worker)
        o->max_pending_bytes_per_worker = 2 * o->max_frame_bytes > (1ull << 30) ? 2 * o->max_frame_bytes : 1ull << 30;
    if (!o->spin_us) o->spin_us = 200;
    o->bind_host = o->bind_host ? o->bind_host : "127.0.0.1";
}

/* Locks, counters, this worker's name and id, and the builtins: what both
 * rpc_init and rpc_offline_init need. */
static void init_state(const char *name)
{
    pthread_rwlock_init(&A->dir_lock, NULL);
    pthread_mutex_init(&A->out_mu, NULL);
    pthread_mutex_init(&A->pool_mu, NULL);
    pthread_cond_init(&A->pool_cv, NULL);
    pthread_mutex_init(&A->state_mu, NULL);
    pthread_cond_init(&A->state_cv, NULL);
    pthread_mutex_init(&A->ev_mu, NULL);
    pthread_cond_init(&A->ev_cv, NULL);
    atomic_init(&A->next_req, 1);
    rpc_counters_reset();
    atomic_init(&A->next_gid, 1);
    snprintf(A->self.name, sizeof A->self.name, "%s", name);
    atomic_store(&A->self_id, A->dynamic ? RPC_UNASSIGNED_ID : A->rank);
    rpc_membership_register();
    rpc_conn_register();
    rref_register_builtins();
    rref_module_init();
}

/* The other locks stay usable: calls after rpc_shutdown fail cleanly. */
static void destroy_state(void)
{
    pthread_rwlock_destroy(&A->dir_lock);
    rpc_fl_drain(&rpc_outmsg_fl);
    rpc_fl_drain(&rpc_request_fl);
}

static void teardown(void);

int rpc_init(const struct rpc_opts *opts)
{
    if (A->up) return rpc_set_error("rpc_init: already initialised");
    if (!opts || !opts->name || !*opts->name || strlen(opts->name) >= 64)
        return rpc_set_error("rpc_init: a worker name (1..63 bytes) is required");
    memset(A, 0, sizeof *A);
    A->opts = *opts;
    struct rpc_opts *o = &A->opts;
    A->rank = o->rank == RPC_RANK_ENV ? env_int("RANK", "SLURM_PROCID", -100) : o->rank;
    A->dynamic = A->rank == RPC_RANK_DYNAMIC;
    A->world_size = o->world_size > 0 ? o->world_size : env_int("WORLD_SIZE", "SLURM_NTASKS", 0);
    if (A->rank == -100) return rpc_set_error("rpc_init: no rank given and RANK/SLURM_PROCID unset");
    if (!A->dynamic && (A->world_size < 1 || A->rank < 0 || A->rank >= A->world_size))
        return rpc_set_error("rpc_init: rank %d out of range for world size %d", A->rank, A->world_size);
    if (o->master) {
        snprintf(A->master, sizeof A->master, "%s", o->master);
    } else {
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        if (!port) return rpc_set_error("rpc_init: no master address given and MASTER_PORT unset");
        snprintf(A->master, sizeof A->master, "tcp://%s:%s", addr ? addr : "127.0.0.1", port);
    }
    apply_defaults(o);
    o->name = NULL;
    init_state(opts->name);
    A->zctx = zmq_ctx_new();
    CHECK(A->zctx != NULL);
    A->router = zmq_socket(A->zctx, ZMQ_ROUTER);
    CHECK(A->router != NULL);
    int zero = 0, hwm = HWM;
    int64_t maxsz = (int64_t)o->max_frame_bytes;
    ZMQ_CHECK(zmq_setsockopt(A->router, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_setsockopt(A->router, ZMQ_SNDHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(A->router, ZMQ_RCVHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(A->router, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz));
    if (rpc_curve_setup() < 0) {
        char e[1024];
        snprintf(e, sizeof e, "%s", rpc_last_error());
        if (A->zap) ZMQ_CHECK(zmq_close(A->zap));
        ZMQ_CHECK(zmq_close(A->router));
        ZMQ_CHECK(zmq_ctx_term(A->zctx));
        return rpc_set_error("%s", e);
    }
    rpc_curve_server(A->router);
    char bind_ep[160];
    if (A->rank == 0) {
        snprintf(bind_ep, sizeof bind_ep, "%s", A->master);
        size_t l = strlen(bind_ep);
        if (l > 2 && strcmp(bind_ep + l - 2, ":0") == 0) strcpy(bind_ep + l - 1, "*");
    } else {
        snprintf(bind_ep, sizeof bind_ep, "tcp://%s:*", o->bind_host);
    }
    if (zmq_bind(A->router, bind_ep) < 0) {
        rpc_set_error("rpc_init: cannot bind %s: %s", bind_ep, zmq_strerror(zmq_errno()));
        if (A->zap) ZMQ_CHECK(zmq_close(A->zap));
        ZMQ_CHECK(zmq_close(A->router));
        ZMQ_CHECK(zmq_ctx_term(A->zctx));
        return -1;
    }
    size_t eplen = sizeof A->endpoint;
    ZMQ_CHECK(zmq_getsockopt(A->router, ZMQ_LAST_ENDPOINT, A->endpoint, &eplen));
    if (A->rank == 0) snprintf(A->master, sizeof A->master, "%s", A->endpoint);
    snprintf(A->self.endpoint, sizeof A->self.endpoint, "%s", A->endpoint);
    A->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    CHECK(A->efd >= 0);

    if (!rpc_add_peer(0, A->rank == 0 ? A->self.name : "(rendezvous)", A->rank == 0 ? A->endpoint : A->master, false)) {
        char e[1024];
        snprintf(e, sizeof e, "%s", rpc_last_error());
        if (A->zap) ZMQ_CHECK(zmq_close(A->zap));
        ZMQ_CHECK(zmq_close(A->router));
        ZMQ_CHECK(zmq_ctx_term(A->zctx));
        close(A->efd);
        return rpc_set_error("rpc_init: %s", e);
    }
    A->up = true;
    CHECK(pthread_create(&A->io_thread, NULL, io_main, NULL) == 0);
    A->npool = o->num_handler_threads;
    A->pool = trib_xcalloc((size_t)A->npool, sizeof *A->pool);
    for (int i = 0; i < A->npool; i++) CHECK(pthread_create(&A->pool[i], NULL, rpc_pool_main, NULL) == 0);

    if (A->rank == 0 && o->on_listening) o->on_listening(A->master, o->listening_user);
    if (A->rank == 0) {
        if (A->world_size == 1) {
            A->dir_ready = A->dir_sent = true;
        } else if (!wait_state(pred_dir, o->init_timeout_ms)) {
            rpc_set_error("rpc_init: rendezvous timed out after %d ms (%d of %d workers arrived)",
                          o->init_timeout_ms, A->static_seen + 1, A->world_size);
            teardown();
            return -1;
        }
    } else {
        struct rpc_value args = rpc_list(3), res = rpc_nil();
        args.list.items[0] = rpc_str(A->self.name);
        args.list.items[1] = rpc_int(A->rank);
        args.list.items[2] = rpc_str(A->endpoint);
        struct rpc_future *f = rpc_async_id(0, "__hello", &args, o->init_timeout_ms);
        rpc_value_clear(&args);
        int rc = rpc_future_take(f, &res);
        rpc_future_free(f);
        int64_t id;
        if (rc < 0 || !rpc_arg_int(&res, 0, &id)) {
            char e[1024];
            snprintf(e, sizeof e, "%s", last_error);
            rpc_value_clear(&res);
            teardown();
            return rpc_set_error("rpc_init: rendezvous with %s failed: %s", A->master, e);
        }
        rpc_value_clear(&res);
        atomic_store(&A->self_id, (int)id);
        if (!wait_state(pred_dir, o->init_timeout_ms)) {
            teardown();
            return rpc_set_error("rpc_init: no directory from %s after %d ms", A->master, o->init_timeout_ms);
        }
    }
    A->self.id = rpc_self_id();
    return 0;
}

static void teardown(void)
{
    atomic_store(&A->io_stop, true);
    rpc_wake_io();
    pthread_join(A->io_thread, NULL);
    pthread_mutex_lock(&A->pool_mu);
    A->pool_stop = true;
    pthread_cond_broadcast(&A->pool_cv);
    pthread_mutex_unlock(&A->pool_mu);
    for (int i = 0; i < A->npool; i++) pthread_join(A->pool[i], NULL);
    free(A->pool);
    A->up = false;
    rref_module_shutdown();
    rpc_conn_reset();
    for (int i = 0; i < MAX_WORKERS; i++) {
        if (!A->peers[i]) continue;
        if (A->peers[i]->dealer) ZMQ_CHECK(zmq_close(A->peers[i]->dealer));
        free(A->peers[i]);
        A->peers[i] = NULL;
    }
    ZMQ_CHECK(zmq_close(A->router));
    if (A->zap) ZMQ_CHECK(zmq_close(A->zap));
    ZMQ_CHECK(zmq_ctx_term(A->zctx));
    close(A->efd);
    struct outmsg *m = A->out_head;
    while (m) {
        struct outmsg *next = m->next;
        if (m->fut) rpc_pending_done(m->fut);
        outmsg_free(m);
        m = next;
    }
    A->out_head = A->out_tail = NULL;
    A->out_len = 0;
    destroy_state();
}

static bool pred_idle(void) { return atomic_load(&A->inflight) == 0 && atomic_load(&A->active) == 0; }
/* rank 0 said go, or rank 0 is gone (nobody left to say it) */
static bool pred_go(void) { return A->sd_go || !rpc_worker_alive(0); }

static int static_alive(void)
{
    int n = 0;
    pthread_rwlock_rdlock(&A->dir_lock);
    for (int i = 1; i < A->world_size && i < MAX_WORKERS; i++)
        if (A->peers[i] && A->peers[i]->alive) n++;
    pthread_rwlock_unlock(&A->dir_lock);
    return n;
}

/* Under state_mu; liveness is read under dir_lock (never held while
 * taking state_mu, so the order is safe). */
static bool all_static(const bool *flags)
{
    bool ok = true;
    pthread_rwlock_rdlock(&A->dir_lock);
    for (int i = 1; i < A->world_size && i < MAX_WORKERS && ok; i++)
        if (A->peers[i] && A->peers[i]->alive && !flags[i]) ok = false;
    pthread_rwlock_unlock(&A->dir_lock);
    return ok;
}

static bool pred_all_ready(void) { return all_static(A->sd_ready_from); }
static bool pred_all_bye(void) { return all_static(A->bye_from); }

void rpc_shutdown(bool graceful)
{
    if (!A->up) return;
    rref_module_closing();
    const int long_wait = A->opts.default_timeout_ms;
    if (graceful) {
        wait_state(pred_idle, long_wait);
        if (A->dynamic) {
            struct rpc_value args = rpc_list(1);
            args.list.items[0] = rpc_int(rpc_self_id());
            struct rpc_future *f = rpc_async_id(0, "__leave", &args, 2000);
            rpc_value_clear(&args);
            rpc_future_wait(f, NULL);
            rpc_future_free(f);
        } else if (A->rank != 0) {
            struct rpc_future *f = rpc_async_id(0, "__sd_ready", NULL, long_wait);
            rpc_future_wait(f, NULL);
            rpc_future_free(f);
            /* No time limit: the barrier is "every static member has called
             * rpc_shutdown", however long rank 0 still works; pred_go also
             * holds once rank 0 is dead, so this cannot hang on a corpse. */
            wait_state(pred_go, -1);
            wait_state(pred_idle, long_wait);
            f = rpc_async_id(0, "__bye", NULL, 2000);
            rpc_future_wait(f, NULL);
            rpc_future_free(f);
        } else {
            if (static_alive() > 0) {
                wait_state(pred_all_ready, -1);   /* dead members count as ready */
                for (int i = 1; i < A->world_size && i < MAX_WORKERS; i++)
                    if (rpc_worker_alive(i)) rpc_send_oneway(i, "__sd_go", NULL);
                wait_state(pred_all_bye, long_wait);
                /* let the bye replies leave before the sockets close */
                usleep(20000);
            }
            wait_state(pred_idle, long_wait);
        }
    }
    teardown();
}

/* ---- offline agent ---------------------------------------------------------
 * The agent without sockets or threads, for the fuzz targets and their
 * corpus replay: messages are handed to rpc_handle_router/rpc_handle_dealer
 * directly, whatever would be sent is dropped (calls fail at once), and
 * handler jobs run when rpc_offline_run_jobs is called. */

int rpc_offline_init(const char *name, int rank, int world)
{
    if (A->up) return rpc_set_error("rpc_offline_init: already initialised");
    memset(A, 0, sizeof *A);
    A->rank = rank;
    A->world_size = world;
    A->opts.rank = rank;
    A->opts.world_size = world;
    A->opts.default_timeout_ms = 1000;
    A->opts.heartbeat_timeout_ms = 1000;
    apply_defaults(&A->opts);
    A->offline = true;
    A->efd = -1;
    init_state(name);
    msgpack_zone_init(&zone, 8192);
    A->self.id = rank;
    snprintf(A->self.endpoint, sizeof A->self.endpoint, "offline://%s", name);
    A->dir_ready = A->dir_sent = true;
    A->up = true;
    return 0;
}

void rpc_offline_run_jobs(void)
{
    for (;;) {
        pthread_mutex_lock(&A->pool_mu);
        struct rpc_request *req = A->jobs_head;
        if (req) {
            A->jobs_head = req->next;
            if (!A->jobs_head) A->jobs_tail = NULL;
            A->njobs--;
        }
        pthread_mutex_unlock(&A->pool_mu);
        if (!req) return;
        rpc_run_request(req);
    }
}

struct rpc_future *rpc_offline_expect(int peer, uint64_t req_id, const char *fn)
{
    struct rpc_future *f = rpc_future_new();
    snprintf(f->fn, sizeof f->fn, "%s", fn);
    f->peer = peer;
    f->req_id = req_id;
    atomic_fetch_add(&f->refs, 1);        /* the pending table's */
    atomic_fetch_add(&A->inflight, 1);
    pending_add(f);
    return f;
}

void rpc_offline_fini(void)
{
    if (!A->up || !A->offline) return;
    rref_module_closing();
    rpc_offline_run_jobs();
    for (int i = 0; i < MAX_WORKERS; i++)
        if (A->peers[i] && i != rpc_self_id() && rpc_hooks.on_peer_gone) rpc_hooks.on_peer_gone(i, rpc_hooks.user);
    rpc_fail_pending_to(-1, "shut down");
    rpc_offline_run_jobs();
    A->up = false;
    rref_module_shutdown();
    rpc_conn_reset();
    for (int i = 0; i < MAX_WORKERS; i++) {
        free(A->peers[i]);
        A->peers[i] = NULL;
    }
    msgpack_zone_destroy(&zone);
    destroy_state();
}
