/* The callee side: the function registry, requests (inline, pooled or
 * deferred), replies and the pool of handler threads. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "rpc/calls.h"

struct fn_entry {
    struct fn_entry *next;
    char *name;
    rpc_fn fn;
    void *user;
    unsigned flags;
};

static pthread_rwlock_t fn_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct trib_freelist rpc_request_fl = TRIB_FREELIST_INIT(sizeof(struct rpc_request), 0, RPC_FREELIST_MAX);
static struct fn_entry *fn_table[256];

/* Owned here: the requests received and not yet answered (queued, running
 * or deferred), in all and per calling worker, with their bytes: a
 * graceful shutdown waits for none, and a caller's bound is checked
 * against them (any thread). */
static struct {
    atomic_int active;
    atomic_int by[MAX_WORKERS];
    _Atomic int64_t bytes_by[MAX_WORKERS];
} received;

/* Owned here: the handler pool, its queue and its threads. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct rpc_request *head, *tail;    /* under mu */
    int n;                              /* under mu */
    bool stop;                          /* under mu */
    pthread_t *threads;                 /* rpc_pool_start/stop's thread */
    int nthreads;
} handlers = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

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

static struct fn_entry *find_locked(const char *name, size_t n)
{
    unsigned b = hash_str(name, n) & 255;
    for (struct fn_entry *e = fn_table[b]; e; e = e->next)
        if (strlen(e->name) == n && memcmp(e->name, name, n) == 0) return e;
    return NULL;
}

bool rpc_find_fn(const char *name, size_t n, rpc_fn *fn, void **user, unsigned *flags)
{
    pthread_rwlock_rdlock(&fn_lock);
    struct fn_entry *e = find_locked(name, n);
    if (e) {
        *fn = e->fn;
        *user = e->user;
        *flags = e->flags;
    }
    pthread_rwlock_unlock(&fn_lock);
    return e != NULL;
}

bool rpc_lookup_fn(const char *name, rpc_fn *fn, void **user)
{
    unsigned flags;
    return rpc_find_fn(name, strlen(name), fn, user, &flags);
}

/* ---- requests -------------------------------------------------------------- */

void rpc_reply(struct rpc_request *req, struct rpc_value *result, const char *err)
{
    if (req->req_id == 0 || req->rid_len == 0) return;       /* one-way */
    struct outmsg *m = NULL;
    char buf[1024];
    if (!err) {
        m = rpc_build_msg(WIRE_RESP, req->req_id, NULL, req->caller, true, req->ac_ctx, req->ac_msg, 0, result, NULL);
        if (!m) {   /* the answer cannot go (too big, or not encodable): say so, naming who could not answer */
            snprintf(buf, sizeof buf, "rpc: %s: %s: its answer: %s", rpc_self_name(), req->fn, rpc_last_error());
            err = buf;
        }
    }
    if (err) {
        if (err != buf) snprintf(buf, sizeof buf, "%s", err);
        m = rpc_build_msg(WIRE_ERR, req->req_id, NULL, req->caller, true, 0, 0, 0, NULL, buf);
    }
    memcpy(m->rid, req->rid, req->rid_len);
    m->rid_len = req->rid_len;
    rpc_out_push(m);
}

/* The caller's bounds (requests and bytes waiting per caller) let a request
 * go before its reply is queued: a caller may send its next request as soon
 * as the reply arrives, and must not find this one still counted ("busy").
 * The count of all active requests drops only when the request is freed,
 * after its reply is queued: a graceful shutdown waits for it. */
static void uncount_caller(struct rpc_request *req)
{
    if (!req->caller_counted) return;
    req->caller_counted = false;
    if (req->caller >= 0 && req->caller < MAX_WORKERS) {
        atomic_fetch_sub(&received.by[req->caller], 1);
        atomic_fetch_sub(&received.bytes_by[req->caller], (int64_t)req->bytes);
    }
}

void rpc_request_uncount(struct rpc_request *req)
{
    uncount_caller(req);
    if (!req->counted) return;
    req->counted = false;
    atomic_fetch_sub(&received.active, 1);
}

void rpc_request_free(struct rpc_request *req)
{
    rpc_request_uncount(req);
    rpc_value_clear(&req->args);
    free(req->err);
    trib_fl_put(&rpc_request_fl, req);
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
    snprintf(req->err, n, "rpc: %s: %s: %s", rpc_self_name(), req->fn, buf);
    return -1;
}

const char *rpc_request_caller(const struct rpc_request *req)
{
    static _Thread_local char name[64];
    rpc_peer_name(req->caller, name, sizeof name);
    return name;
}

int rpc_request_caller_id(const struct rpc_request *req) { return req->caller; }

void rpc_request_complete(struct rpc_request *req, struct rpc_value *result)
{
    uncount_caller(req);
    rpc_reply(req, result, NULL);
    if (result) rpc_value_clear(result);
    rpc_request_free(req);
}

void rpc_request_finish_error(struct rpc_request *req)
{
    if (!req->err) rpc_request_fail(req, "failed");
    uncount_caller(req);
    rpc_reply(req, NULL, req->err);
    rpc_request_free(req);
}

struct rpc_request *rpc_request_new_local(const char *fn)
{
    struct rpc_request *req = trib_fl_get(&rpc_request_fl);
    snprintf(req->fn, sizeof req->fn, "%s", fn);
    req->caller = rpc_self_id();
    return req;
}

const char *rpc_request_error_text(const struct rpc_request *req) { return req->err; }

void rpc_request_free_local(struct rpc_request *req) { rpc_request_free(req); }

void rpc_request_fail_text(struct rpc_request *req, const char *text)
{
    free(req->err);
    req->err = strdup(text);
    CHECK_ALLOC(req->err);
}

void rpc_run_request(struct rpc_request *req)
{
    if (req->job) {
        req->job(req->job_arg);
        trib_fl_put(&rpc_request_fl, req);
        return;
    }
    struct rpc_value result = rpc_nil();
    /* Read before the handler: a deferred request may be completed (and
     * freed) by another thread before the handler returns. */
    int64_t ac_ctx = req->ac_ctx;
    if (wire_hooks()->on_handler) wire_hooks()->on_handler(ac_ctx, true, wire_hooks()->user);
    int rc = req->handler(req, &req->args, &result, req->user);
    if (wire_hooks()->on_handler) wire_hooks()->on_handler(ac_ctx, false, wire_hooks()->user);
    if (rc == RPC_DEFERRED) return;
    if (rc == 0) rpc_request_complete(req, &result);
    else {
        rpc_value_clear(&result);
        rpc_request_finish_error(req);
    }
}

/* Queues a request for the handler threads; false if MAX_QUEUE are waiting
 * (internal jobs are always taken). */
bool rpc_pool_push(struct rpc_request *req)
{
    pthread_mutex_lock(&handlers.mu);
    if (!req->job && handlers.n >= MAX_QUEUE) {
        pthread_mutex_unlock(&handlers.mu);
        return false;
    }
    req->next = NULL;
    if (handlers.tail) handlers.tail->next = req; else handlers.head = req;
    handlers.tail = req;
    handlers.n++;
    pthread_cond_signal(&handlers.cv);
    pthread_mutex_unlock(&handlers.mu);
    return true;
}

void rpc_pool_submit(void (*job)(void *), void *arg)
{
    struct rpc_request *req = trib_fl_get(&rpc_request_fl);
    req->job = job;
    req->job_arg = arg;
    rpc_pool_push(req);
}

void *rpc_pool_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&handlers.mu);
        while (!handlers.head && !handlers.stop) pthread_cond_wait(&handlers.cv, &handlers.mu);
        struct rpc_request *req = handlers.head;
        if (!req) {
            pthread_mutex_unlock(&handlers.mu);
            return NULL;
        }
        handlers.head = req->next;
        if (!handlers.head) handlers.tail = NULL;
        handlers.n--;
        pthread_mutex_unlock(&handlers.mu);
        rpc_run_request(req);
    }
}


void rpc_pool_start(int nthreads)
{
    pthread_mutex_lock(&handlers.mu);
    handlers.stop = false;
    pthread_mutex_unlock(&handlers.mu);
    handlers.nthreads = nthreads;
    handlers.threads = trib_xcalloc((size_t)nthreads, sizeof *handlers.threads);
    for (int i = 0; i < nthreads; i++) CHECK(pthread_create(&handlers.threads[i], NULL, rpc_pool_main, NULL) == 0);
}

void rpc_pool_stop(void)
{
    pthread_mutex_lock(&handlers.mu);
    handlers.stop = true;
    pthread_cond_broadcast(&handlers.cv);
    pthread_mutex_unlock(&handlers.mu);
    for (int i = 0; i < handlers.nthreads; i++) pthread_join(handlers.threads[i], NULL);
    free(handlers.threads);
    handlers.threads = NULL;
    handlers.nthreads = 0;
}

void rpc_pool_run_queued(void)
{
    for (;;) {
        pthread_mutex_lock(&handlers.mu);
        struct rpc_request *req = handlers.head;
        if (req) {
            handlers.head = req->next;
            if (!handlers.head) handlers.tail = NULL;
            handlers.n--;
        }
        pthread_mutex_unlock(&handlers.mu);
        if (!req) return;
        rpc_run_request(req);
    }
}

bool rpc_requests_of(int worker, int *n, int64_t *bytes)
{
    if (worker < 0 || worker >= MAX_WORKERS) return false;
    *n = atomic_load(&received.by[worker]);
    *bytes = atomic_load(&received.bytes_by[worker]);
    return true;
}

int rpc_requests_active(void) { return atomic_load(&received.active); }

struct rpc_request *rpc_request_new_received(const struct rpc_request_in *in, struct rpc_value *args)
{
    struct rpc_request *req = trib_fl_get(&rpc_request_fl);      /* zeroed: next, err, job NULL */
    req->req_id = in->req_id;
    req->caller = in->caller;
    req->rid_len = in->rid_len < sizeof req->rid ? in->rid_len : sizeof req->rid;
    memcpy(req->rid, in->rid, req->rid_len);
    size_t fn_len = in->fn_len < sizeof req->fn ? in->fn_len : sizeof req->fn - 1;
    memcpy(req->fn, in->fn, fn_len);
    req->fn[fn_len] = '\0';
    req->ac_ctx = in->caller >= 0 ? in->ac_ctx : 0;
    req->ac_msg = in->caller >= 0 ? in->ac_msg : 0;
    req->handler = in->handler;
    req->user = in->user;
    req->args = *args;
    args->kind = RPC_NIL;
    req->counted = req->caller_counted = true;
    req->bytes = in->bytes;
    atomic_fetch_add(&received.active, 1);
    if (in->caller >= 0 && in->caller < MAX_WORKERS) {
        atomic_fetch_add(&received.by[in->caller], 1);
        atomic_fetch_add(&received.bytes_by[in->caller], (int64_t)in->bytes);
    }
    return req;
}

void rpc_request_route(struct rpc_request *req, rpc_fn handler, void *user, void *user2)
{
    req->handler = handler;
    req->user = user;
    req->user2 = user2;
}

void rpc_request_autograd_ids(const struct rpc_request *req, int64_t *ctx_id, int64_t *msg_id)
{
    *ctx_id = req->ac_ctx;
    *msg_id = req->ac_msg;
}

void rpc_requests_drain(void) { trib_fl_drain(&rpc_request_fl); }

void rpc_reply_error_to(const unsigned char *rid, size_t rid_len, uint64_t req_id, const char *text)
{
    if (!req_id || !rid || !rid_len) return;
    struct outmsg *m = rpc_build_msg(WIRE_ERR, req_id, NULL, -1, true, 0, 0, 0, NULL, text);
    memcpy(m->rid, rid, rid_len);
    m->rid_len = rid_len;
    rpc_out_push(m);
}
