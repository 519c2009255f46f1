/* The RPC agent: rendezvous and membership, one I/O thread owning every
 * ZeroMQ socket, a pool of handler threads, calls, futures, deferred
 * replies, heartbeats, timeouts and graceful shutdown (DESIGN.md §4.1-4.3). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "rpc/rpc_internal.h"

#define ZMQ_CHECK(x)                                                               \
    do {                                                                           \
        if ((x) < 0) {                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,      \
                    zmq_strerror(zmq_errno()));                                    \
            abort();                                                               \
        }                                                                          \
    } while (0)

#define MAX_WORKERS 1024
#define NBUCKETS 4096
#define HWM 100000
#define MAX_QUEUE 65536             /* calls waiting for the I/O thread; requests waiting for a handler */
#define RECV_BATCH 256

/* ---- errors ------------------------------------------------------------- */

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

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- types ----------------------------------------------------------------- */

struct rpc_future {
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int state;               /* 0 pending, 1 ok, 2 error */
    struct rpc_value value;
    char *err;
    void (*cb)(struct rpc_future *, void *);
    void *cb_user;
    /* I/O-thread bookkeeping */
    uint64_t req_id;
    int peer;
    int64_t deadline;               /* 0: none */
    int timeout_ms;
    char fn[64];
    struct rpc_future *hnext;
};

struct rpc_request {
    struct rpc_request *next;
    uint64_t req_id;
    int caller;
    unsigned char rid[256];
    size_t rid_len;
    char fn[256];
    struct rpc_value args;
    int64_t ac_ctx, ac_msg;
    rpc_fn handler;
    void *user;
    char *err;
    void (*job)(void *);
    void *job_arg;
};

struct outmsg {
    struct outmsg *next;
    int peer;                        /* dealer to this worker, or -1: router reply */
    unsigned char rid[256];
    size_t rid_len;
    struct rpc_future *fut;          /* registered as pending when sent */
    int nframes;
    zmq_msg_t frames[];
};

struct peer {
    int id;
    char name[64];
    char endpoint[128];
    void *dealer;
    bool alive;
    bool dynamic;
    int64_t last_seen;
};

struct fn_entry {
    struct fn_entry *next;
    char *name;
    rpc_fn fn;
    void *user;
    unsigned flags;
};

static struct {
    bool up;
    struct rpc_opts opts;
    int world_size;
    int rank;
    bool dynamic;
    void *zctx;
    void *router;
    int efd;
    char endpoint[128];
    char master[128];
    struct rpc_worker_info self;
    atomic_int self_id;

    pthread_rwlock_t dir_lock;      /* guards peers[] names/alive (writes on I/O thread) */
    struct peer *peers[MAX_WORKERS];
    bool peers_changed;             /* I/O thread only */

    pthread_mutex_t out_mu;
    struct outmsg *out_head, *out_tail;
    int out_len;
    bool io_dead;                   /* under out_mu: the I/O thread has exited */

    pthread_t io_thread;
    atomic_bool io_stop;

    struct rpc_future *pending[NBUCKETS];   /* I/O thread only */
    int npending;
    atomic_int inflight;            /* outstanding futures this process started */

    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    struct rpc_request *jobs_head, *jobs_tail;
    int njobs;
    bool pool_stop;
    pthread_t *pool;
    int npool;

    pthread_mutex_t state_mu;       /* init / shutdown coordination */
    pthread_cond_t state_cv;
    bool dir_ready;
    int static_seen;                /* rank 0: static ranks that said hello */
    bool dir_sent;
    int sd_ready;                   /* rank 0: static members ready to shut down */
    bool sd_ready_from[MAX_WORKERS];
    bool sd_go;
    int byes;
    bool bye_from[MAX_WORKERS];

    pthread_mutex_t ev_mu;
    pthread_cond_t ev_cv;
    struct rpc_event events[256];
    int ev_head, ev_count;

    atomic_uint_fast64_t next_req;
    atomic_uint_fast64_t next_gid;
    int64_t last_hb;
    int64_t last_scan;
} A;

static pthread_rwlock_t fn_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct fn_entry *fn_table[256];
static struct rpc_autograd_hooks hooks;

void rpc_set_autograd_hooks(const struct rpc_autograd_hooks *h) { hooks = h ? *h : (struct rpc_autograd_hooks){ 0 }; }

void rpc_request_autograd_ids(const struct rpc_request *req, int64_t *ctx_id, int64_t *msg_id)
{
    *ctx_id = req->ac_ctx;
    *msg_id = req->ac_msg;
}

int rpc_self_id(void) { return atomic_load(&A.self_id); }
const char *rpc_self_name(void) { return A.self.name; }
const struct rpc_worker_info *rpc_self(void) { return &A.self; }
const char *rpc_master_endpoint(void) { return A.master; }
uint64_t rpc_gen_id(void) { return ((uint64_t)rpc_self_id() << 48) | (atomic_fetch_add(&A.next_gid, 1) & 0xffffffffffffull); }

/* ---- registry -------------------------------------------------------------- */

static unsigned hash_str(const char *s, size_t n)
{
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

void rpc_register_ex(const char *name, rpc_fn fn, void *user, unsigned flags)
{
    unsigned b = hash_str(name, strlen(name)) & 255;
    pthread_rwlock_wrlock(&fn_lock);
    struct fn_entry *e;
    for (e = fn_table[b]; e; e = e->next)
        if (strcmp(e->name, name) == 0) break;
    if (!e) {
        e = trib_xcalloc(1, sizeof *e);
        e->name = strdup(name);
        CHECK_ALLOC(e->name);
        e->next = fn_table[b];
        fn_table[b] = e;
    }
    e->fn = fn;
    e->user = user;
    e->flags = flags;
    pthread_rwlock_unlock(&fn_lock);
}

void rpc_register(const char *name, rpc_fn fn, void *user) { rpc_register_ex(name, fn, user, 0); }

static struct fn_entry *find_fn(const char *name, size_t n)
{
    unsigned b = hash_str(name, n) & 255;
    for (struct fn_entry *e = fn_table[b]; e; e = e->next)
        if (strlen(e->name) == n && memcmp(e->name, name, n) == 0) return e;
    return NULL;
}

bool rpc_lookup_fn(const char *name, rpc_fn *fn, void **user)
{
    pthread_rwlock_rdlock(&fn_lock);
    struct fn_entry *e = find_fn(name, strlen(name));
    if (e) { *fn = e->fn; *user = e->user; }
    pthread_rwlock_unlock(&fn_lock);
    return e != NULL;
}

/* ---- futures --------------------------------------------------------------- */

static struct rpc_future *future_new(void)
{
    struct rpc_future *f = trib_xcalloc(1, sizeof *f);
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
    free(f);
}

/* Completes f with *v (moved) or err (copied). First completion wins. The
 * `then` callback runs before waiters are released (state 3 = completing). */
static void future_complete(struct rpc_future *f, struct rpc_value *v, const char *err)
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
    pthread_mutex_unlock(&f->mu);
    if (cb) rpc_future_free(f);
}

static void future_fail(struct rpc_future *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void future_fail(struct rpc_future *f, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    future_complete(f, NULL, buf);
}

static bool settled(struct rpc_future *f) { int st = atomic_load(&f->state); return st == 1 || st == 2; }

bool rpc_future_done(struct rpc_future *f) { return settled(f); }

const char *rpc_future_error(struct rpc_future *f)
{
    int st = atomic_load(&f->state);
    return st == 2 || (st == 3 && f->err) ? f->err : NULL;
}

int rpc_future_wait(struct rpc_future *f, struct rpc_value *out)
{
    /* Adaptive wait: yield for a short while before sleeping. A small
     * call's reply lands within ~100 us, and a futex sleep plus wake of an
     * idle virtual CPU costs a large part of that; yielding keeps the
     * other threads of the round trip (ours and libzmq's) running. */
    if (!settled(f) && A.opts.spin_us > 0) {
        int64_t t0 = now_us();
        while (!settled(f) && now_us() - t0 < A.opts.spin_us) sched_yield();
    }
    if (!settled(f)) {
        pthread_mutex_lock(&f->mu);
        while (!settled(f)) pthread_cond_wait(&f->cv, &f->mu);
        pthread_mutex_unlock(&f->mu);
    }
    if (atomic_load(&f->state) == 2) return rpc_set_error("%s", f->err);
    if (out) *out = rpc_value_copy(&f->value);
    return 0;
}

/* Moves the value out of a done, successful future. */
static int future_take(struct rpc_future *f, struct rpc_value *out)
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
            snprintf(first, sizeof first, "%s", last_error);
        }
    if (rc) rpc_set_error("%s", first);
    return rc;
}

/* ---- out queue ------------------------------------------------------------- */

static void pending_done(struct rpc_future *f);
static void peer_name(int id, char *buf, size_t cap);
static void future_fail(struct rpc_future *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static struct outmsg *outmsg_new(int nframes)
{
    struct outmsg *m = trib_xmalloc(sizeof *m + (size_t)nframes * sizeof(zmq_msg_t));
    m->next = NULL;
    m->peer = -1;
    m->rid_len = 0;
    m->fut = NULL;
    m->nframes = nframes;
    return m;
}

static void outmsg_free(struct outmsg *m)
{
    for (int i = 0; i < m->nframes; i++) zmq_msg_close(&m->frames[i]);
    free(m);
}

static void wake_io(void)
{
    uint64_t one = 1;
    ssize_t r = write(A.efd, &one, sizeof one);
    (void)r;
}

static void out_push(struct outmsg *m)
{
    pthread_mutex_lock(&A.out_mu);
    const char *why = A.io_dead ? "shut down" : m->fut && A.out_len >= MAX_QUEUE ? "send queue full" : NULL;
    if (why) {
        pthread_mutex_unlock(&A.out_mu);
        if (m->fut) {
            char name[64];
            peer_name(m->peer, name, sizeof name);
            future_fail(m->fut, "rpc: %s calling %s.%s", why, name, m->fut->fn);
            pending_done(m->fut);
        }
        outmsg_free(m);
        return;
    }
    bool was_empty = A.out_head == NULL;
    if (A.out_tail) A.out_tail->next = m; else A.out_head = m;
    A.out_tail = m;
    A.out_len++;
    pthread_mutex_unlock(&A.out_mu);
    if (was_empty) wake_io();
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
static struct outmsg *build_msg(int type, uint64_t req_id, const char *fn, int to, bool is_response,
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
    if (hooks.on_send && tl->n > 0) hooks.on_send(to, is_response, tl->t, tl->n, &ac_ctx, &ac_msg, hooks.user);
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

/* ---- directory -------------------------------------------------------------- */

static int find_peer_by_name(const char *name)
{
    for (int i = 0; i < MAX_WORKERS; i++)
        if (A.peers[i] && A.peers[i]->alive && strcmp(A.peers[i]->name, name) == 0) return i;
    return -1;
}

bool rpc_worker_alive(int id)
{
    if (id < 0 || id >= MAX_WORKERS) return false;
    pthread_rwlock_rdlock(&A.dir_lock);
    bool ok = A.peers[id] && A.peers[id]->alive;
    pthread_rwlock_unlock(&A.dir_lock);
    return ok;
}

static void fill_info(const struct peer *p, struct rpc_worker_info *out)
{
    out->id = p->id;
    snprintf(out->name, sizeof out->name, "%s", p->name);
    snprintf(out->endpoint, sizeof out->endpoint, "%s", p->endpoint);
}

int rpc_get_worker_info(const char *name, struct rpc_worker_info *out)
{
    pthread_rwlock_rdlock(&A.dir_lock);
    int id = A.up ? find_peer_by_name(name) : -1;
    if (id >= 0) fill_info(A.peers[id], out);
    pthread_rwlock_unlock(&A.dir_lock);
    return id >= 0 ? 0 : rpc_set_error("rpc: unknown worker '%s'", name);
}

int rpc_get_worker_info_by_id(int id, struct rpc_worker_info *out)
{
    int rc = -1;
    pthread_rwlock_rdlock(&A.dir_lock);
    if (A.up && id >= 0 && id < MAX_WORKERS && A.peers[id] && A.peers[id]->alive) {
        fill_info(A.peers[id], out);
        rc = 0;
    }
    pthread_rwlock_unlock(&A.dir_lock);
    return rc == 0 ? 0 : rpc_set_error("rpc: unknown worker id %d", id);
}

int rpc_get_workers(struct rpc_worker_info *out, int cap)
{
    int n = 0;
    pthread_rwlock_rdlock(&A.dir_lock);
    for (int i = 0; i < MAX_WORKERS && n < cap; i++)
        if (A.peers[i] && A.peers[i]->alive) fill_info(A.peers[i], &out[n++]);
    pthread_rwlock_unlock(&A.dir_lock);
    return n;
}

static void peer_name(int id, char *buf, size_t cap)
{
    pthread_rwlock_rdlock(&A.dir_lock);
    if (id >= 0 && id < MAX_WORKERS && A.peers[id]) snprintf(buf, cap, "%s", A.peers[id]->name);
    else snprintf(buf, cap, "worker%d", id);
    pthread_rwlock_unlock(&A.dir_lock);
}

static void post_event(enum rpc_event_kind kind, int id, const char *name)
{
    struct rpc_event ev = { .kind = kind, .id = id };
    snprintf(ev.name, sizeof ev.name, "%s", name);
    pthread_mutex_lock(&A.ev_mu);
    if (A.ev_count == 256) {                 /* bounded: drop the oldest */
        A.ev_head = (A.ev_head + 1) % 256;
        A.ev_count--;
    }
    A.events[(A.ev_head + A.ev_count) % 256] = ev;
    A.ev_count++;
    pthread_cond_broadcast(&A.ev_cv);
    pthread_mutex_unlock(&A.ev_mu);
    if (A.opts.on_event) A.opts.on_event(&ev, A.opts.event_user);
}

int rpc_next_event(struct rpc_event *ev, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) % 1000 * 1000000;
    ts.tv_sec += (timeout_ms > 0 ? timeout_ms : 0) / 1000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_mutex_lock(&A.ev_mu);
    while (A.ev_count == 0) {
        if (timeout_ms < 0) pthread_cond_wait(&A.ev_cv, &A.ev_mu);
        else if (pthread_cond_timedwait(&A.ev_cv, &A.ev_mu, &ts) == ETIMEDOUT) break;
    }
    int got = 0;
    if (A.ev_count > 0) {
        *ev = A.events[A.ev_head];
        A.ev_head = (A.ev_head + 1) % 256;
        A.ev_count--;
        got = 1;
    }
    pthread_mutex_unlock(&A.ev_mu);
    return got;
}

/* I/O thread: adds (or revives) a peer and connects a dealer to it. */
static struct peer *add_peer(int id, const char *name, const char *endpoint, bool dynamic)
{
    CHECK(id >= 0 && id < MAX_WORKERS);
    struct peer *p = A.peers[id];
    if (p && p->alive && strcmp(p->endpoint, endpoint) == 0) {
        pthread_rwlock_wrlock(&A.dir_lock);
        snprintf(p->name, sizeof p->name, "%s", name);
        p->dynamic = dynamic;
        pthread_rwlock_unlock(&A.dir_lock);
        return p;
    }
    if (!p) p = trib_xcalloc(1, sizeof *p);
    if (p->dealer) ZMQ_CHECK(zmq_close(p->dealer));
    void *d = zmq_socket(A.zctx, ZMQ_DEALER);
    CHECK(d != NULL);
    int zero = 0, hwm = HWM;
    int64_t maxsz = (int64_t)A.opts.max_frame_bytes;
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_RCVHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz));
    ZMQ_CHECK(zmq_connect(d, endpoint));
    pthread_rwlock_wrlock(&A.dir_lock);
    p->id = id;
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->endpoint, sizeof p->endpoint, "%s", endpoint);
    p->dealer = d;
    p->alive = true;
    p->dynamic = dynamic;
    p->last_seen = now_ms();
    A.peers[id] = p;
    pthread_rwlock_unlock(&A.dir_lock);
    A.peers_changed = true;
    return p;
}


static void fail_pending_to(int peer, const char *why);

/* I/O thread: a peer left or died. */
static void drop_peer(int id, const char *why, enum rpc_event_kind ev)
{
    struct peer *p = A.peers[id];
    if (!p || !p->alive) return;
    pthread_rwlock_wrlock(&A.dir_lock);
    p->alive = false;
    pthread_rwlock_unlock(&A.dir_lock);
    ZMQ_CHECK(zmq_close(p->dealer));
    p->dealer = NULL;
    A.peers_changed = true;
    fail_pending_to(id, why);
    post_event(ev, id, p->name);
    pthread_mutex_lock(&A.state_mu);
    pthread_cond_broadcast(&A.state_cv);
    pthread_mutex_unlock(&A.state_mu);
}

/* ---- pending calls (I/O thread) ---------------------------------------- */

static void pending_add(struct rpc_future *f)
{
    unsigned b = (unsigned)(f->req_id & (NBUCKETS - 1));
    f->hnext = A.pending[b];
    A.pending[b] = f;
    A.npending++;
}

static struct rpc_future *pending_take(uint64_t req_id)
{
    unsigned b = (unsigned)(req_id & (NBUCKETS - 1));
    for (struct rpc_future **pp = &A.pending[b]; *pp; pp = &(*pp)->hnext)
        if ((*pp)->req_id == req_id) {
            struct rpc_future *f = *pp;
            *pp = f->hnext;
            A.npending--;
            return f;
        }
    return NULL;
}

/* Drops the table's reference after completing. */
static void pending_done(struct rpc_future *f)
{
    atomic_fetch_sub(&A.inflight, 1);
    rpc_future_free(f);
}

static void scan_pending(bool (*pred)(struct rpc_future *, void *), void *arg, const char *fmt_kind)
{
    (void)fmt_kind;
    for (int b = 0; b < NBUCKETS; b++)
        for (struct rpc_future **pp = &A.pending[b]; *pp;) {
            struct rpc_future *f = *pp;
            if (pred(f, arg)) {
                *pp = f->hnext;
                A.npending--;
                pending_done(f);
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
    future_fail(f, "rpc: %s calling %s.%s", a->why, name, f->fn);
    return true;
}

static void fail_pending_to(int peer, const char *why)
{
    struct fail_arg a = { peer, why };
    scan_pending(fail_if_peer, &a, NULL);
}

static bool fail_if_expired(struct rpc_future *f, void *arg)
{
    int64_t now = *(int64_t *)arg;
    if (!f->deadline || now < f->deadline) return false;
    char name[64];
    peer_name(f->peer, name, sizeof name);
    future_fail(f, "rpc: timed out after %d ms calling %s.%s", f->timeout_ms, name, f->fn);
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
        peer_name(m->peer, name, sizeof name);
        future_fail(m->fut, "rpc: cannot send to %s (%s) calling %s.%s", name, zmq_strerror(zmq_errno()),
                    name, m->fut->fn);
        pending_done(m->fut);
        m->fut = NULL;
    }
}

static void io_send(struct outmsg *m)
{
    if (m->peer < 0) {
        send_frames(A.router, m, true);
    } else {
        struct peer *p = m->peer < MAX_WORKERS ? A.peers[m->peer] : NULL;
        if (!p || !p->alive) {
            if (m->fut) {
                future_fail(m->fut, "rpc: worker %d is not reachable calling %s", m->peer, m->fut->fn);
                pending_done(m->fut);
            }
        } else {
            send_frames(p->dealer, m, false);   /* fails m->fut on error */
            if (m->fut) pending_add(m->fut);
        }
    }
    outmsg_free(m);
}

/* ---- requests -------------------------------------------------------------- */

static void reply(struct rpc_request *req, struct rpc_value *result, const char *err)
{
    if (req->req_id == 0 || req->rid_len == 0) return;       /* one-way */
    struct outmsg *m = NULL;
    if (!err) {
        m = build_msg(WIRE_RESP, req->req_id, NULL, req->caller, true, req->ac_ctx, req->ac_msg, 0, result, NULL);
        if (!m) err = last_error;
    }
    if (err) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", err);
        m = build_msg(WIRE_ERR, req->req_id, NULL, req->caller, true, 0, 0, 0, NULL, buf);
    }
    memcpy(m->rid, req->rid, req->rid_len);
    m->rid_len = req->rid_len;
    out_push(m);
}

static void request_free(struct rpc_request *req)
{
    rpc_value_clear(&req->args);
    free(req->err);
    free(req);
}

int rpc_request_fail(struct rpc_request *req, const char *fmt, ...)
{
    char buf[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(req->err);
    size_t n = strlen(buf) + strlen(req->fn) + 200;
    req->err = trib_xmalloc(n);
    snprintf(req->err, n, "rpc: %s: %s: %s", A.self.name, req->fn, buf);
    return -1;
}

const char *rpc_request_caller(const struct rpc_request *req)
{
    static _Thread_local char name[64];
    peer_name(req->caller, name, sizeof name);
    return name;
}

int rpc_request_caller_id(const struct rpc_request *req) { return req->caller; }

void rpc_request_complete(struct rpc_request *req, struct rpc_value *result)
{
    reply(req, result, NULL);
    if (result) rpc_value_clear(result);
    request_free(req);
}

void rpc_request_finish_error(struct rpc_request *req)
{
    if (!req->err) rpc_request_fail(req, "failed");
    reply(req, NULL, req->err);
    request_free(req);
}

struct rpc_request *rpc_request_new_local(const char *fn)
{
    struct rpc_request *req = trib_xcalloc(1, sizeof *req);
    snprintf(req->fn, sizeof req->fn, "%s", fn);
    req->caller = rpc_self_id();
    return req;
}

const char *rpc_request_error_text(const struct rpc_request *req) { return req->err; }

void rpc_request_free_local(struct rpc_request *req) { request_free(req); }

void rpc_request_fail_text(struct rpc_request *req, const char *text)
{
    free(req->err);
    req->err = strdup(text);
    CHECK_ALLOC(req->err);
}

static void run_request(struct rpc_request *req)
{
    if (req->job) {
        req->job(req->job_arg);
        free(req);
        return;
    }
    struct rpc_value result = rpc_nil();
    int rc = req->handler(req, &req->args, &result, req->user);
    if (rc == RPC_DEFERRED) return;
    if (rc == 0) rpc_request_complete(req, &result);
    else {
        rpc_value_clear(&result);
        rpc_request_finish_error(req);
    }
}

/* Queues a request for the handler threads; false if MAX_QUEUE are waiting
 * (internal jobs are always taken). */
static bool pool_push(struct rpc_request *req)
{
    pthread_mutex_lock(&A.pool_mu);
    if (!req->job && A.njobs >= MAX_QUEUE) {
        pthread_mutex_unlock(&A.pool_mu);
        return false;
    }
    req->next = NULL;
    if (A.jobs_tail) A.jobs_tail->next = req; else A.jobs_head = req;
    A.jobs_tail = req;
    A.njobs++;
    pthread_cond_signal(&A.pool_cv);
    pthread_mutex_unlock(&A.pool_mu);
    return true;
}

void rpc_pool_submit(void (*job)(void *), void *arg)
{
    struct rpc_request *req = trib_xcalloc(1, sizeof *req);
    req->job = job;
    req->job_arg = arg;
    pool_push(req);
}

static void *pool_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&A.pool_mu);
        while (!A.jobs_head && !A.pool_stop) pthread_cond_wait(&A.pool_cv, &A.pool_mu);
        struct rpc_request *req = A.jobs_head;
        if (!req) {
            pthread_mutex_unlock(&A.pool_mu);
            return NULL;
        }
        A.jobs_head = req->next;
        if (!A.jobs_head) A.jobs_tail = NULL;
        A.njobs--;
        pthread_mutex_unlock(&A.pool_mu);
        run_request(req);
    }
}

/* ---- receiving (I/O thread) ------------------------------------------------ */

static msgpack_zone zone;
static struct wire_tensors rx_tensors;      /* tensors of the message being decoded */

static void touch_peer(int id)
{
    if (id >= 0 && id < MAX_WORKERS && A.peers[id] && A.peers[id]->alive) A.peers[id]->last_seen = now_ms();
}

static void reply_bad(const unsigned char *rid, size_t rid_len, uint64_t req_id, const char *why)
{
    if (!req_id || !rid) return;
    char buf[1024];
    snprintf(buf, sizeof buf, "rpc: %s: bad message: %s", A.self.name, why);
    struct outmsg *m = build_msg(WIRE_ERR, req_id, NULL, -1, true, 0, 0, 0, NULL, buf);
    memcpy(m->rid, rid, rid_len);
    m->rid_len = rid_len;
    io_send(m);
}

/* Handles one message: frames[0] header, frames[1..n) bodies. rid is the
 * router envelope (NULL for a dealer message). */
static void handle_msg(const unsigned char *rid, size_t rid_len, zmq_msg_t *frames, int n)
{
    char err[512];
    struct wire_hdr h;
    msgpack_object root;
    const char *buf = zmq_msg_data(&frames[0]);
    size_t len = zmq_msg_size(&frames[0]);
    msgpack_zone_clear(&zone);
    if (wire_validate(buf, len, err, sizeof err) < 0) return;   /* no request id to answer */
    size_t off = 0;
    if (msgpack_unpack(buf, len, &off, &zone, &root) != MSGPACK_UNPACK_SUCCESS) return;
    if (wire_parse_hdr(&root, &h, err, sizeof err) < 0) {
        if (rid && root.type == MSGPACK_OBJECT_ARRAY) reply_bad(rid, rid_len, h.req_id, err);
        return;
    }
    touch_peer(h.sender);
    if (h.type == WIRE_PING) return;
    if (h.ntensors != n - 1) {
        snprintf(err, sizeof err, "header announces %d tensor frames, message has %d", h.ntensors, n - 1);
        if (rid && h.type == WIRE_REQ) reply_bad(rid, rid_len, h.req_id, err);
        return;
    }
    if (h.type == WIRE_REQ) {
        if (!rid) return;
        if (!h.fn) { reply_bad(rid, rid_len, h.req_id, "request without a function name"); return; }
        if (h.payload.type != MSGPACK_OBJECT_ARRAY && h.payload.type != MSGPACK_OBJECT_NIL) {
            reply_bad(rid, rid_len, h.req_id, "arguments are not a list");
            return;
        }
        pthread_rwlock_rdlock(&fn_lock);
        struct fn_entry *fe = find_fn(h.fn, h.fn_len);
        rpc_fn fn = fe ? fe->fn : NULL;
        void *user = fe ? fe->user : NULL;
        unsigned flags = fe ? fe->flags : 0;
        pthread_rwlock_unlock(&fn_lock);
        if (!fe) {
            if (h.req_id) {
                char msg[512];
                snprintf(msg, sizeof msg, "rpc: %s: unknown function '%.*s'", A.self.name, (int)h.fn_len, h.fn);
                struct outmsg *m = build_msg(WIRE_ERR, h.req_id, NULL, h.sender, true, 0, 0, 0, NULL, msg);
                memcpy(m->rid, rid, rid_len);
                m->rid_len = rid_len;
                io_send(m);
            }
            return;
        }
        struct rpc_request *req = trib_xmalloc(sizeof *req);
        req->next = NULL;
        req->req_id = h.req_id;
        req->caller = h.sender;
        memcpy(req->rid, rid, rid_len);
        req->rid_len = rid_len;
        memcpy(req->fn, h.fn, h.fn_len);
        req->fn[h.fn_len] = '\0';
        req->ac_ctx = h.ac_ctx;
        req->ac_msg = h.ac_msg;
        req->handler = fn;
        req->user = user;
        req->err = NULL;
        req->job = NULL;
        if (h.payload.type == MSGPACK_OBJECT_NIL) {
            req->args = rpc_list(0);
        } else if (wire_to_value(&h.payload, frames + 1, n - 1, h.sender, &req->args, &rx_tensors, err, sizeof err) < 0) {
            req->args.kind = RPC_NIL;
            reply_bad(rid, rid_len, h.req_id, err);
            request_free(req);
            return;
        }
        if (hooks.on_recv && rx_tensors.n > 0)
            hooks.on_recv(h.sender, false, rx_tensors.t, rx_tensors.n, h.ac_ctx, h.ac_msg, hooks.user);
        if (flags & RPC_FN_INLINE) {
            run_request(req);
        } else if (!pool_push(req)) {
            snprintf(err, sizeof err, "rpc: %s: busy: %d requests waiting for a handler", A.self.name, MAX_QUEUE);
            rpc_request_fail_text(req, err);
            rpc_request_finish_error(req);
        }
        return;
    }
    /* A response: only on a dealer. */
    if (rid) return;
    struct rpc_future *f = pending_take(h.req_id);
    if (!f) return;                     /* timed out already, or bogus */
    if (h.type == WIRE_ERR) {
        if (h.payload.type == MSGPACK_OBJECT_STR) {
            snprintf(err, sizeof err, "%.*s", (int)h.payload.via.str.size, h.payload.via.str.ptr);
            future_complete(f, NULL, err);
        } else {
            future_fail(f, "rpc: malformed error from worker %d", h.sender);
        }
    } else {
        struct rpc_value v;
        if (wire_to_value(&h.payload, frames + 1, n - 1, h.sender, &v, &rx_tensors, err, sizeof err) < 0) {
            future_fail(f, "rpc: bad response from worker %d: %s", h.sender, err);
        } else {
            if (hooks.on_recv && rx_tensors.n > 0)
                hooks.on_recv(h.sender, true, rx_tensors.t, rx_tensors.n, h.ac_ctx, h.ac_msg, hooks.user);
            future_complete(f, &v, NULL);
        }
    }
    pending_done(f);
}

static zmq_msg_t rx_frames[2 + WIRE_MAX_TENSORS];

/* Reads one whole message from sock; returns frames read, 0 if none. */
static int recv_one(void *sock, bool router, unsigned char *rid, size_t *rid_len)
{
    int n = 0;
    for (;;) {
        if (n < 2 + WIRE_MAX_TENSORS) {
            zmq_msg_init(&rx_frames[n]);
            if (zmq_msg_recv(&rx_frames[n], sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                zmq_msg_close(&rx_frames[n]);
                if (n == 0) return 0;
                CHECK(zmq_errno() == ETERM || zmq_errno() == EINTR);
                break;
            }
            n++;
            if (!zmq_msg_more(&rx_frames[n - 1])) break;
        } else {
            /* Too many frames: drain the rest and drop the message. */
            zmq_msg_t junk;
            zmq_msg_init(&junk);
            int more = 1;
            while (more && zmq_msg_recv(&junk, sock, 0) >= 0) more = zmq_msg_more(&junk);
            zmq_msg_close(&junk);
            for (int i = 0; i < n; i++) zmq_msg_close(&rx_frames[i]);
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

static void drain_socket(void *sock, bool router)
{
    unsigned char rid[256];
    size_t rid_len = 0;
    for (int k = 0; k < RECV_BATCH; k++) {
        int n = recv_one(sock, router, rid, &rid_len);
        if (n == 0) return;
        if (n < 0) continue;
        int first = router ? 1 : 0;
        if (n > first) handle_msg(router ? rid : NULL, rid_len, rx_frames + first, n - first);
        for (int i = 0; i < n; i++) zmq_msg_close(&rx_frames[i]);
    }
}

static void send_ping(struct peer *p)
{
    struct outmsg *m = build_msg(WIRE_PING, 0, NULL, p->id, false, 0, 0, 0, NULL, NULL);
    send_frames(p->dealer, m, false);
    outmsg_free(m);
}

static void io_timers(void)
{
    int64_t now = now_ms();
    if (now - A.last_hb >= A.opts.heartbeat_ms) {
        A.last_hb = now;
        int self = rpc_self_id();
        for (int i = 0; i < MAX_WORKERS; i++) {
            struct peer *p = A.peers[i];
            if (!p || !p->alive || i == self) continue;
            if (now - p->last_seen > A.opts.heartbeat_timeout_ms) {
                char why[128];
                snprintf(why, sizeof why, "lost %s (no heartbeat for %d ms)", p->name, A.opts.heartbeat_timeout_ms);
                drop_peer(i, why, RPC_EVENT_FAILED);
                continue;
            }
            send_ping(p);
        }
    }
    if (A.npending && now - A.last_scan >= 5) {
        A.last_scan = now;
        scan_pending(fail_if_expired, &now, NULL);
    }
}

static void *io_main(void *arg)
{
    (void)arg;
    zmq_pollitem_t items[2 + MAX_WORKERS];
    int map[2 + MAX_WORKERS];
    int nitems = 0;
    A.peers_changed = true;
    msgpack_zone_init(&zone, 8192);
    while (!atomic_load(&A.io_stop)) {
        if (A.peers_changed) {
            A.peers_changed = false;
            items[0] = (zmq_pollitem_t){ .socket = A.router, .events = ZMQ_POLLIN };
            items[1] = (zmq_pollitem_t){ .fd = A.efd, .events = ZMQ_POLLIN };
            nitems = 2;
            for (int i = 0; i < MAX_WORKERS; i++)
                if (A.peers[i] && A.peers[i]->alive) {
                    map[nitems] = i;
                    items[nitems++] = (zmq_pollitem_t){ .socket = A.peers[i]->dealer, .events = ZMQ_POLLIN };
                }
        }
        long timeout = A.opts.heartbeat_ms;
        if (A.npending) timeout = 5;
        int rc = zmq_poll(items, nitems, timeout);
        if (rc < 0) {
            CHECK(zmq_errno() == EINTR);
            continue;
        }
        if (items[1].revents & ZMQ_POLLIN) {
            uint64_t v;
            ssize_t r = read(A.efd, &v, sizeof v);
            (void)r;
        }
        pthread_mutex_lock(&A.out_mu);
        struct outmsg *m = A.out_head;
        A.out_head = A.out_tail = NULL;
        A.out_len = 0;
        pthread_mutex_unlock(&A.out_mu);
        while (m) {
            struct outmsg *next = m->next;
            io_send(m);
            m = next;
        }
        if (items[0].revents & ZMQ_POLLIN) drain_socket(A.router, true);
        bool changed = A.peers_changed;
        for (int i = 2; i < nitems && !changed; i++)
            if ((items[i].revents & ZMQ_POLLIN) && A.peers[map[i]] && A.peers[map[i]]->alive) {
                drain_socket(A.peers[map[i]]->dealer, false);
                changed = A.peers_changed;
            }
        io_timers();
    }
    /* Flush what is queued (replies, byes) before the sockets close. */
    pthread_mutex_lock(&A.out_mu);
    struct outmsg *m = A.out_head;
    A.out_head = A.out_tail = NULL;
    A.out_len = 0;
    A.io_dead = true;
    pthread_mutex_unlock(&A.out_mu);
    while (m) {
        struct outmsg *next = m->next;
        io_send(m);
        m = next;
    }
    fail_pending_to(-1, "shut down");
    msgpack_zone_destroy(&zone);
    return NULL;
}

/* ---- calls ------------------------------------------------------------------ */

struct rpc_future *rpc_async_id(int to, const char *fn, const struct rpc_value *args, int timeout_ms)
{
    struct rpc_future *f = future_new();
    snprintf(f->fn, sizeof f->fn, "%s", fn);
    f->peer = to;
    if (!A.up) {
        future_fail(f, "rpc: not initialised calling %s", fn);
        return f;
    }
    if (timeout_ms == 0) timeout_ms = A.opts.default_timeout_ms;
    f->timeout_ms = timeout_ms;
    f->deadline = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
    f->req_id = atomic_fetch_add(&A.next_req, 1);
    if (args && args->kind != RPC_LIST) {
        future_fail(f, "rpc: arguments to %s must be a list, not %s", fn, rpc_kind_name(args->kind));
        return f;
    }
    struct outmsg *m = build_msg(WIRE_REQ, f->req_id, fn, to, false, 0, 0, timeout_ms > 0 ? timeout_ms : 0, args, NULL);
    if (!m) {
        future_complete(f, NULL, last_error);
        return f;
    }
    m->peer = to;
    m->fut = f;
    atomic_fetch_add(&f->refs, 1);        /* the pending table's reference */
    atomic_fetch_add(&A.inflight, 1);
    out_push(m);
    return f;
}

static int lookup_id(const char *to)
{
    pthread_rwlock_rdlock(&A.dir_lock);
    int id = A.up ? find_peer_by_name(to) : -1;
    pthread_rwlock_unlock(&A.dir_lock);
    return id;
}

struct rpc_future *rpc_async(const char *to, const char *fn, const struct rpc_value *args, int timeout_ms)
{
    int id = lookup_id(to);
    if (id < 0) {
        struct rpc_future *f = future_new();
        future_fail(f, "rpc: unknown worker '%s' calling %s.%s", to, to, fn);
        return f;
    }
    return rpc_async_id(id, fn, args, timeout_ms);
}

int rpc_sync(const char *to, const char *fn, const struct rpc_value *args, struct rpc_value *result, int timeout_ms)
{
    struct rpc_future *f = rpc_async(to, fn, args, timeout_ms);
    int rc = future_take(f, result);
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

void rpc_call_internal(int to, const char *fn, struct rpc_value *args,
                       void (*cb)(struct rpc_future *, void *), void *user)
{
    struct rpc_future *f = rpc_async_id(to, fn, args, A.opts.default_timeout_ms);
    rpc_value_clear(args);
    struct internal_cb *ic = trib_xmalloc(sizeof *ic);
    ic->cb = cb;
    ic->user = user;
    rpc_future_then(f, internal_done, ic);
}

/* Sends a one-way request (no reply, not tracked) to worker `to`. */
static void send_oneway(int to, const char *fn, const struct rpc_value *args)
{
    struct outmsg *m = build_msg(WIRE_REQ, 0, fn, to, false, 0, 0, 0, args, NULL);
    CHECK(m != NULL);
    m->peer = to;
    out_push(m);
}

/* ---- builtins: rendezvous, membership, shutdown -------------------------- */

static const char *arg_str(const struct rpc_value *args, size_t i)
{
    if (args->kind != RPC_LIST || i >= args->list.len || args->list.items[i].kind != RPC_STR) return NULL;
    return args->list.items[i].str.ptr;
}

static bool arg_int(const struct rpc_value *args, size_t i, int64_t *out)
{
    if (args->kind != RPC_LIST || i >= args->list.len || args->list.items[i].kind != RPC_INT) return false;
    *out = args->list.items[i].i;
    return true;
}

static struct rpc_value dir_entry(const struct peer *p)
{
    struct rpc_value e = rpc_list(4);
    e.list.items[0] = rpc_int(p->id);
    e.list.items[1] = rpc_str(p->name);
    e.list.items[2] = rpc_str(p->endpoint);
    e.list.items[3] = rpc_bool(p->dynamic);
    return e;
}

static struct rpc_value directory_value(void)
{
    size_t n = 0;
    for (int i = 0; i < MAX_WORKERS; i++) if (A.peers[i] && A.peers[i]->alive) n++;
    struct rpc_value l = rpc_list(1);
    l.list.items[0] = rpc_list(n);
    n = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        if (A.peers[i] && A.peers[i]->alive) l.list.items[0].list.items[n++] = dir_entry(A.peers[i]);
    return l;
}

/* rank 0, inline: [name, rank, endpoint] -> [id] */
static int bi_hello(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    const char *name = arg_str(args, 0), *ep = arg_str(args, 2);
    int64_t rank;
    if (!name || !ep || !arg_int(args, 1, &rank) || strlen(name) >= 64 || strlen(ep) >= 128)
        return rpc_request_fail(req, "bad hello");
    if (A.rank != 0) return rpc_request_fail(req, "not the rendezvous (rank 0)");
    if (find_peer_by_name(name) >= 0) return rpc_request_fail(req, "worker name '%s' is taken", name);
    int id;
    bool dynamic = rank == RPC_RANK_DYNAMIC;
    if (dynamic) {
        for (id = A.world_size; id < MAX_WORKERS && A.peers[id] && A.peers[id]->alive; id++) {}
        if (id >= MAX_WORKERS) return rpc_request_fail(req, "too many workers");
    } else {
        if (rank < 1 || rank >= A.world_size) return rpc_request_fail(req, "rank %lld out of range 1..%d", (long long)rank, A.world_size - 1);
        if (A.peers[rank] && A.peers[rank]->alive) return rpc_request_fail(req, "rank %lld is taken", (long long)rank);
        id = (int)rank;
    }
    struct peer *p = add_peer(id, name, ep, dynamic);
    *result = rpc_list(1);
    result->list.items[0] = rpc_int(id);
    pthread_mutex_lock(&A.state_mu);
    if (!dynamic) A.static_seen++;
    bool complete = A.static_seen == A.world_size - 1;
    bool already = A.dir_sent;
    if (complete && !already) A.dir_sent = true;
    pthread_mutex_unlock(&A.state_mu);
    if (complete && !already) {
        struct rpc_value dir = directory_value();
        for (int i = 1; i < MAX_WORKERS; i++)
            if (A.peers[i] && A.peers[i]->alive) send_oneway(i, "__dir", &dir);
        rpc_value_clear(&dir);
        pthread_mutex_lock(&A.state_mu);
        A.dir_ready = true;
        pthread_cond_broadcast(&A.state_cv);
        pthread_mutex_unlock(&A.state_mu);
    } else if (already) {
        struct rpc_value dir = directory_value();
        send_oneway(id, "__dir", &dir);
        rpc_value_clear(&dir);
        struct rpc_value j = rpc_list(1);
        j.list.items[0] = dir_entry(p);
        for (int i = 1; i < MAX_WORKERS; i++)
            if (i != id && A.peers[i] && A.peers[i]->alive) send_oneway(i, "__join", &j);
        rpc_value_clear(&j);
    }
    if (dynamic || already) post_event(RPC_EVENT_JOIN, id, name);
    return 0;
}

static void add_entry(const struct rpc_value *e, bool event)
{
    if (e->kind != RPC_LIST || e->list.len != 4) return;
    int64_t id;
    const char *name = arg_str(e, 1), *ep = arg_str(e, 2);
    if (!arg_int(e, 0, &id) || id < 0 || id >= MAX_WORKERS || !name || !ep) return;
    if (strlen(name) >= 64 || strlen(ep) >= 128) return;
    add_peer((int)id, name, ep, e->list.items[3].kind == RPC_BOOL && e->list.items[3].b);
    if (event && id != rpc_self_id()) post_event(RPC_EVENT_JOIN, (int)id, name);
}

/* worker, inline, one-way: [[entry...]] */
static int bi_dir(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    if (req->caller != 0 || args->list.len != 1 || args->list.items[0].kind != RPC_LIST) return -1;
    const struct rpc_value *l = &args->list.items[0];
    for (size_t i = 0; i < l->list.len; i++) add_entry(&l->list.items[i], false);
    pthread_mutex_lock(&A.state_mu);
    A.dir_ready = true;
    pthread_cond_broadcast(&A.state_cv);
    pthread_mutex_unlock(&A.state_mu);
    return 0;
}

static int bi_join(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    if (req->caller != 0 || args->list.len != 1) return -1;
    add_entry(&args->list.items[0], true);
    return 0;
}

/* rank 0, inline: a worker leaves; tell the others. worker: [id] */
static int bi_leave(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    int64_t id;
    if (!arg_int(args, 0, &id) || id < 0 || id >= MAX_WORKERS || id == rpc_self_id()) return -1;
    if (A.rank == 0 && req->caller == id) {
        for (int i = 1; i < MAX_WORKERS; i++)
            if (i != id && A.peers[i] && A.peers[i]->alive) send_oneway(i, "__leave", args);
    } else if (req->caller != 0) {
        return -1;
    }
    char why[128];
    snprintf(why, sizeof why, "worker %lld left", (long long)id);
    /* Keep the dealer to the leaver long enough for the reply to go out
     * through the router (replies do not use dealers). */
    drop_peer((int)id, why, RPC_EVENT_LEAVE);
    return 0;
}

static int bi_sd_ready(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    pthread_mutex_lock(&A.state_mu);
    if (req->caller >= 0 && req->caller < MAX_WORKERS && !A.sd_ready_from[req->caller]) {
        A.sd_ready_from[req->caller] = true;
        A.sd_ready++;
    }
    pthread_cond_broadcast(&A.state_cv);
    pthread_mutex_unlock(&A.state_mu);
    return 0;
}

static int bi_sd_go(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    if (req->caller != 0) return rpc_request_fail(req, "not from rank 0");
    pthread_mutex_lock(&A.state_mu);
    A.sd_go = true;
    pthread_cond_broadcast(&A.state_cv);
    pthread_mutex_unlock(&A.state_mu);
    return 0;
}

static int bi_bye(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    pthread_mutex_lock(&A.state_mu);
    if (req->caller >= 0 && req->caller < MAX_WORKERS && !A.bye_from[req->caller]) {
        A.bye_from[req->caller] = true;
        A.byes++;
    }
    pthread_cond_broadcast(&A.state_cv);
    pthread_mutex_unlock(&A.state_mu);
    return 0;
}

/* ---- init / shutdown ---------------------------------------------------- */

static int env_int(const char *a, const char *b, int dflt)
{
    const char *v = getenv(a);
    if (!v && b) v = getenv(b);
    return v && *v ? atoi(v) : dflt;
}

static bool wait_state(bool (*pred)(void), int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    pthread_mutex_lock(&A.state_mu);
    while (!pred()) {
        int64_t left = deadline - now_ms();
        if (left <= 0) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t step = left < 50 ? left : 50;
        ts.tv_nsec += step * 1000000;
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&A.state_cv, &A.state_mu, &ts);
    }
    bool ok = pred();
    pthread_mutex_unlock(&A.state_mu);
    return ok;
}

static bool pred_dir(void) { return A.dir_ready; }

static void register_builtins(void)
{
    rpc_register_ex("__hello", bi_hello, NULL, RPC_FN_INLINE);
    rpc_register_ex("__dir", bi_dir, NULL, RPC_FN_INLINE);
    rpc_register_ex("__join", bi_join, NULL, RPC_FN_INLINE);
    rpc_register_ex("__leave", bi_leave, NULL, RPC_FN_INLINE);
    rpc_register_ex("__sd_ready", bi_sd_ready, NULL, RPC_FN_INLINE);
    rpc_register_ex("__sd_go", bi_sd_go, NULL, RPC_FN_INLINE);
    rpc_register_ex("__bye", bi_bye, NULL, RPC_FN_INLINE);
    rref_register_builtins();
}

static void teardown(void);

int rpc_init(const struct rpc_opts *opts)
{
    if (A.up) return rpc_set_error("rpc_init: already initialised");
    if (!opts || !opts->name || !*opts->name || strlen(opts->name) >= 64)
        return rpc_set_error("rpc_init: a worker name (1..63 bytes) is required");
    memset(&A, 0, sizeof A);
    A.opts = *opts;
    struct rpc_opts *o = &A.opts;
    A.rank = o->rank == RPC_RANK_ENV ? env_int("RANK", "SLURM_PROCID", -100) : o->rank;
    A.dynamic = A.rank == RPC_RANK_DYNAMIC;
    A.world_size = o->world_size > 0 ? o->world_size : env_int("WORLD_SIZE", "SLURM_NTASKS", 0);
    if (A.rank == -100) return rpc_set_error("rpc_init: no rank given and RANK/SLURM_PROCID unset");
    if (!A.dynamic && (A.world_size < 1 || A.rank < 0 || A.rank >= A.world_size))
        return rpc_set_error("rpc_init: rank %d out of range for world size %d", A.rank, A.world_size);
    if (o->master) {
        snprintf(A.master, sizeof A.master, "%s", o->master);
    } else {
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        if (!port) return rpc_set_error("rpc_init: no master address given and MASTER_PORT unset");
        snprintf(A.master, sizeof A.master, "tcp://%s:%s", addr ? addr : "127.0.0.1", port);
    }
    if (!o->default_timeout_ms) o->default_timeout_ms = 60000;
    if (!o->init_timeout_ms) o->init_timeout_ms = 30000;
    if (o->num_handler_threads <= 0) o->num_handler_threads = 4;
    if (o->heartbeat_ms <= 0) o->heartbeat_ms = 200;
    if (o->heartbeat_timeout_ms <= 0) o->heartbeat_timeout_ms = 5 * o->heartbeat_ms;
    if (!o->max_frame_bytes) o->max_frame_bytes = 1ull << 30;
    if (!o->spin_us) o->spin_us = 200;
    o->bind_host = o->bind_host ? o->bind_host : "127.0.0.1";
    o->name = NULL;

    pthread_rwlock_init(&A.dir_lock, NULL);
    pthread_mutex_init(&A.out_mu, NULL);
    pthread_mutex_init(&A.pool_mu, NULL);
    pthread_cond_init(&A.pool_cv, NULL);
    pthread_mutex_init(&A.state_mu, NULL);
    pthread_cond_init(&A.state_cv, NULL);
    pthread_mutex_init(&A.ev_mu, NULL);
    pthread_cond_init(&A.ev_cv, NULL);
    atomic_init(&A.next_req, 1);
    atomic_init(&A.next_gid, 1);
    snprintf(A.self.name, sizeof A.self.name, "%s", opts->name);
    atomic_store(&A.self_id, A.dynamic ? 0xffff : A.rank);
    register_builtins();
    rref_module_init();

    A.zctx = zmq_ctx_new();
    CHECK(A.zctx != NULL);
    A.router = zmq_socket(A.zctx, ZMQ_ROUTER);
    CHECK(A.router != NULL);
    int zero = 0, hwm = HWM;
    int64_t maxsz = (int64_t)o->max_frame_bytes;
    ZMQ_CHECK(zmq_setsockopt(A.router, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_setsockopt(A.router, ZMQ_SNDHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(A.router, ZMQ_RCVHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(A.router, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz));
    char bind_ep[160];
    if (A.rank == 0) {
        snprintf(bind_ep, sizeof bind_ep, "%s", A.master);
        size_t l = strlen(bind_ep);
        if (l > 2 && strcmp(bind_ep + l - 2, ":0") == 0) strcpy(bind_ep + l - 1, "*");
    } else {
        snprintf(bind_ep, sizeof bind_ep, "tcp://%s:*", o->bind_host);
    }
    if (zmq_bind(A.router, bind_ep) < 0) {
        rpc_set_error("rpc_init: cannot bind %s: %s", bind_ep, zmq_strerror(zmq_errno()));
        zmq_close(A.router);
        zmq_ctx_term(A.zctx);
        return -1;
    }
    size_t eplen = sizeof A.endpoint;
    ZMQ_CHECK(zmq_getsockopt(A.router, ZMQ_LAST_ENDPOINT, A.endpoint, &eplen));
    if (A.rank == 0) snprintf(A.master, sizeof A.master, "%s", A.endpoint);
    snprintf(A.self.endpoint, sizeof A.self.endpoint, "%s", A.endpoint);
    A.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    CHECK(A.efd >= 0);

    if (A.rank == 0) add_peer(0, A.self.name, A.endpoint, false);
    else add_peer(0, "(rendezvous)", A.master, false);
    A.up = true;
    CHECK(pthread_create(&A.io_thread, NULL, io_main, NULL) == 0);
    A.npool = o->num_handler_threads;
    A.pool = trib_xcalloc((size_t)A.npool, sizeof *A.pool);
    for (int i = 0; i < A.npool; i++) CHECK(pthread_create(&A.pool[i], NULL, pool_main, NULL) == 0);

    if (A.rank == 0 && o->on_listening) o->on_listening(A.master, o->listening_user);
    if (A.rank == 0) {
        if (A.world_size == 1) {
            A.dir_ready = A.dir_sent = true;
        } else if (!wait_state(pred_dir, o->init_timeout_ms)) {
            rpc_set_error("rpc_init: rendezvous timed out after %d ms (%d of %d workers arrived)",
                          o->init_timeout_ms, A.static_seen + 1, A.world_size);
            teardown();
            return -1;
        }
    } else {
        struct rpc_value args = rpc_list(3), res = rpc_nil();
        args.list.items[0] = rpc_str(A.self.name);
        args.list.items[1] = rpc_int(A.rank);
        args.list.items[2] = rpc_str(A.endpoint);
        struct rpc_future *f = rpc_async_id(0, "__hello", &args, o->init_timeout_ms);
        rpc_value_clear(&args);
        int rc = future_take(f, &res);
        rpc_future_free(f);
        int64_t id;
        if (rc < 0 || !arg_int(&res, 0, &id)) {
            char e[1024];
            snprintf(e, sizeof e, "%s", last_error);
            rpc_value_clear(&res);
            teardown();
            return rpc_set_error("rpc_init: rendezvous with %s failed: %s", A.master, e);
        }
        rpc_value_clear(&res);
        atomic_store(&A.self_id, (int)id);
        if (!wait_state(pred_dir, o->init_timeout_ms)) {
            teardown();
            return rpc_set_error("rpc_init: no directory from %s after %d ms", A.master, o->init_timeout_ms);
        }
    }
    A.self.id = rpc_self_id();
    return 0;
}

static void teardown(void)
{
    atomic_store(&A.io_stop, true);
    wake_io();
    pthread_join(A.io_thread, NULL);
    pthread_mutex_lock(&A.pool_mu);
    A.pool_stop = true;
    pthread_cond_broadcast(&A.pool_cv);
    pthread_mutex_unlock(&A.pool_mu);
    for (int i = 0; i < A.npool; i++) pthread_join(A.pool[i], NULL);
    free(A.pool);
    A.up = false;
    rref_module_shutdown();
    for (int i = 0; i < MAX_WORKERS; i++) {
        if (!A.peers[i]) continue;
        if (A.peers[i]->dealer) ZMQ_CHECK(zmq_close(A.peers[i]->dealer));
        free(A.peers[i]);
        A.peers[i] = NULL;
    }
    ZMQ_CHECK(zmq_close(A.router));
    ZMQ_CHECK(zmq_ctx_term(A.zctx));
    close(A.efd);
    struct outmsg *m = A.out_head;
    while (m) {
        struct outmsg *next = m->next;
        if (m->fut) pending_done(m->fut);
        outmsg_free(m);
        m = next;
    }
    A.out_head = A.out_tail = NULL;
    A.out_len = 0;
    pthread_rwlock_destroy(&A.dir_lock);
}

static bool pred_idle(void) { return atomic_load(&A.inflight) == 0; }
static bool pred_go(void) { return A.sd_go; }

static int static_alive(void)
{
    int n = 0;
    pthread_rwlock_rdlock(&A.dir_lock);
    for (int i = 1; i < A.world_size && i < MAX_WORKERS; i++)
        if (A.peers[i] && A.peers[i]->alive) n++;
    pthread_rwlock_unlock(&A.dir_lock);
    return n;
}

static bool pred_all_ready(void)
{
    int need = 0;
    for (int i = 1; i < A.world_size && i < MAX_WORKERS; i++)
        if (A.peers[i] && A.peers[i]->alive && !A.sd_ready_from[i]) need++;
    return need == 0;
}

static bool pred_all_bye(void)
{
    for (int i = 1; i < A.world_size && i < MAX_WORKERS; i++)
        if (A.peers[i] && A.peers[i]->alive && !A.bye_from[i]) return false;
    return true;
}

void rpc_shutdown(bool graceful)
{
    if (!A.up) return;
    const int long_wait = A.opts.default_timeout_ms;
    if (graceful) {
        wait_state(pred_idle, long_wait);
        if (A.dynamic) {
            struct rpc_value args = rpc_list(1);
            args.list.items[0] = rpc_int(rpc_self_id());
            struct rpc_future *f = rpc_async_id(0, "__leave", &args, 2000);
            rpc_value_clear(&args);
            rpc_future_wait(f, NULL);
            rpc_future_free(f);
        } else if (A.rank != 0) {
            struct rpc_future *f = rpc_async_id(0, "__sd_ready", NULL, long_wait);
            rpc_future_wait(f, NULL);
            rpc_future_free(f);
            wait_state(pred_go, long_wait);
            wait_state(pred_idle, long_wait);
            f = rpc_async_id(0, "__bye", NULL, 2000);
            rpc_future_wait(f, NULL);
            rpc_future_free(f);
        } else {
            if (static_alive() > 0) {
                wait_state(pred_all_ready, long_wait);
                for (int i = 1; i < A.world_size && i < MAX_WORKERS; i++)
                    if (rpc_worker_alive(i)) send_oneway(i, "__sd_go", NULL);
                wait_state(pred_all_bye, long_wait);
                /* let the bye replies leave before the sockets close */
                usleep(20000);
            }
            wait_state(pred_idle, long_wait);
        }
    }
    teardown();
}
