/* Directory and membership: worker lookups, membership events, peers
 * joining, leaving and dying, and the rendezvous/shutdown builtins that
 * rank 0 and the workers exchange. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "rpc/rpc_internal.h"

static struct rpc_agent *const A = &rpc_agent_state;

/* Owned here: the membership events not yet taken by rpc_next_event (a
 * bounded ring: the oldest is dropped when full). */
#define EVENTS_CAP 256
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct rpc_event ring[EVENTS_CAP];  /* under mu */
    int head, count;                    /* under mu */
} evq = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

void rpc_events_reset(void)
{
    pthread_mutex_lock(&evq.mu);
    evq.head = evq.count = 0;
    pthread_mutex_unlock(&evq.mu);
}

/* ---- directory -------------------------------------------------------------- */

int rpc_find_peer(const char *name)
{
    for (int i = 0; i < MAX_WORKERS; i++)
        if (A->peers[i] && A->peers[i]->alive && strcmp(A->peers[i]->name, name) == 0) return i;
    return -1;
}

bool rpc_worker_alive(int id)
{
    if (id < 0 || id >= MAX_WORKERS) return false;
    pthread_rwlock_rdlock(&A->dir_lock);
    bool ok = A->peers[id] && A->peers[id]->alive;
    pthread_rwlock_unlock(&A->dir_lock);
    return ok;
}

static void fill_info(const struct peer *p, struct rpc_worker_info *out)
{
    out->id = p->id;
    snprintf(out->name, sizeof out->name, "%s", p->name);
    snprintf(out->endpoint, sizeof out->endpoint, "%s", p->endpoint);
    snprintf(out->via, sizeof out->via, "%s", p->via);
}

int rpc_get_worker_info(const char *name, struct rpc_worker_info *out)
{
    pthread_rwlock_rdlock(&A->dir_lock);
    int id = A->up ? rpc_find_peer(name) : -1;
    if (id >= 0) fill_info(A->peers[id], out);
    pthread_rwlock_unlock(&A->dir_lock);
    return id >= 0 ? 0 : rpc_set_error("rpc: unknown worker '%s'", name);
}

int rpc_get_worker_info_by_id(int id, struct rpc_worker_info *out)
{
    int rc = -1;
    pthread_rwlock_rdlock(&A->dir_lock);
    if (A->up && id >= 0 && id < MAX_WORKERS && A->peers[id] && A->peers[id]->alive) {
        fill_info(A->peers[id], out);
        rc = 0;
    }
    pthread_rwlock_unlock(&A->dir_lock);
    return rc == 0 ? 0 : rpc_set_error("rpc: unknown worker id %d", id);
}

int rpc_get_workers(struct rpc_worker_info *out, int cap)
{
    int n = 0;
    pthread_rwlock_rdlock(&A->dir_lock);
    for (int i = 0; i < MAX_WORKERS && n < cap; i++)
        if (A->peers[i] && A->peers[i]->alive) fill_info(A->peers[i], &out[n++]);
    pthread_rwlock_unlock(&A->dir_lock);
    return n;
}

void rpc_peer_name(int id, char *buf, size_t cap)
{
    pthread_rwlock_rdlock(&A->dir_lock);
    if (id >= 0 && id < MAX_WORKERS && A->peers[id]) snprintf(buf, cap, "%s", A->peers[id]->name);
    else snprintf(buf, cap, "worker%d", id);
    pthread_rwlock_unlock(&A->dir_lock);
}

void rpc_post_event(enum rpc_event_kind kind, int id, const char *name)
{
    struct rpc_event ev = { .kind = kind, .id = id };
    snprintf(ev.name, sizeof ev.name, "%s", name);
    pthread_mutex_lock(&evq.mu);
    if (evq.count == EVENTS_CAP) {                 /* bounded: drop the oldest */
        evq.head = (evq.head + 1) % EVENTS_CAP;
        evq.count--;
    }
    evq.ring[(evq.head + evq.count) % EVENTS_CAP] = ev;
    evq.count++;
    pthread_cond_broadcast(&evq.cv);
    pthread_mutex_unlock(&evq.mu);
    if (A->opts.on_event) A->opts.on_event(&ev, A->opts.event_user);
}

int rpc_next_event(struct rpc_event *ev, int timeout_ms)
{
    struct timespec ts = trib_deadline_ts(timeout_ms);
    pthread_mutex_lock(&evq.mu);
    while (evq.count == 0) {
        if (timeout_ms < 0) pthread_cond_wait(&evq.cv, &evq.mu);
        else if (pthread_cond_timedwait(&evq.cv, &evq.mu, &ts) == ETIMEDOUT) break;
    }
    int got = 0;
    if (evq.count > 0) {
        *ev = evq.ring[evq.head];
        evq.head = (evq.head + 1) % EVENTS_CAP;
        evq.count--;
        got = 1;
    }
    pthread_mutex_unlock(&evq.mu);
    return got;
}

/* I/O thread (or rpc_init before it starts): adds (or revives) a peer and
 * connects a dealer to it. NULL with error if the endpoint is unusable
 * (it comes from the network). */
struct peer *rpc_add_peer(int id, const char *name, const char *endpoint, bool dynamic)
{
    CHECK(id >= 0 && id < MAX_WORKERS);
    struct peer *p = A->peers[id];
    if (p && p->alive && strcmp(p->endpoint, endpoint) == 0) {
        pthread_rwlock_wrlock(&A->dir_lock);
        snprintf(p->name, sizeof p->name, "%s", name);
        p->dynamic = dynamic;
        pthread_rwlock_unlock(&A->dir_lock);
        return p;
    }
    unsigned char rid[RPC_RID_LEN];
    rpc_new_rid(rid);
    char via[160];
    void *d = A->links->open(id, endpoint, rid, via, sizeof via);
    if (!d) return NULL;
    if (!p) p = trib_xcalloc(1, sizeof *p);
    if (p->dealer && id != 0) {
        /* a worker restarted before we saw its old process die: what the
         * old one was asked will never be answered */
        char why[128];
        snprintf(why, sizeof why, "%s was replaced by a new process", p->name);
        rpc_fail_pending_to(id, why);
    }
    if (p->dealer) A->links->close(p->dealer);
    p->left_at = 0;
    pthread_rwlock_wrlock(&A->dir_lock);
    p->id = id;
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->endpoint, sizeof p->endpoint, "%s", endpoint);
    snprintf(p->via, sizeof p->via, "%s", via);
    p->dealer = d;
    memcpy(p->rid, rid, sizeof rid);
    p->bad = 0;
    p->alive = true;
    p->dynamic = dynamic;
    p->last_seen = trib_now_ms();
    A->peers[id] = p;
    pthread_rwlock_unlock(&A->dir_lock);
    A->peers_changed = true;
    return p;
}

/* I/O thread: closes the dealer of a peer that is no longer alive and
 * fails the calls still waiting on it. */
void rpc_close_peer(int id, const char *why)
{
    struct peer *p = A->peers[id];
    if (!p || !p->dealer) return;
    A->links->close(p->dealer);
    p->dealer = NULL;
    p->left_at = 0;
    A->peers_changed = true;
    rpc_fail_pending_to(id, why);
}

/* I/O thread: a peer left or died. A peer that left gracefully keeps its
 * dealer until the replies it sent before leaving are in (or a heartbeat
 * timeout passes: see io_timers); a dead one fails its calls at once. */
void rpc_drop_peer(int id, const char *why, enum rpc_event_kind ev)
{
    struct peer *p = A->peers[id];
    if (!p || !p->alive) return;
    pthread_rwlock_wrlock(&A->dir_lock);
    p->alive = false;
    pthread_rwlock_unlock(&A->dir_lock);
    if (ev == RPC_EVENT_LEAVE && p->npending > 0) p->left_at = trib_now_ms();
    else rpc_close_peer(id, why);
    rpc_conn_forget_worker(id);
    if (rpc_hooks.on_peer_gone) rpc_hooks.on_peer_gone(id, rpc_hooks.user);
    if (rpc_rref_hooks.peer_gone) rpc_rref_hooks.peer_gone(id);
    rpc_post_event(ev, id, p->name);
    pthread_mutex_lock(&A->state_mu);
    pthread_cond_broadcast(&A->state_cv);
    pthread_mutex_unlock(&A->state_mu);
}

/* ---- builtins: rendezvous, membership, shutdown -------------------------- */

const char *rpc_arg_str(const struct rpc_value *args, size_t i)
{
    if (args->kind != RPC_LIST || i >= args->list.len || args->list.items[i].kind != RPC_STR) return NULL;
    return args->list.items[i].str.ptr;
}

bool rpc_arg_int(const struct rpc_value *args, size_t i, int64_t *out)
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
    for (int i = 0; i < MAX_WORKERS; i++) if (A->peers[i] && A->peers[i]->alive) n++;
    struct rpc_value l = rpc_list(1);
    l.list.items[0] = rpc_list(n);
    n = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        if (A->peers[i] && A->peers[i]->alive) l.list.items[0].list.items[n++] = dir_entry(A->peers[i]);
    return l;
}

static int find_endpoint(const char *ep)
{
    for (int i = 0; i < MAX_WORKERS; i++)
        if (A->peers[i] && A->peers[i]->alive && strcmp(A->peers[i]->endpoint, ep) == 0) return i;
    return -1;
}

/* rank 0, inline, from any connection: [name, rank, endpoint(, world
 * size)] -> [id]. The connection it came on becomes the new worker's. A
 * static rank whose worker is gone may be taken again (a restarted
 * worker): it gets the directory and the others a __join, as a late one. */
static int bi_hello(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    const char *name = rpc_arg_str(args, 0), *ep = rpc_arg_str(args, 2);
    int64_t rank, world = 0;
    if (!name || !ep || !rpc_arg_int(args, 1, &rank) || strlen(ep) >= 128 ||
        (args->list.len > 3 && !rpc_arg_int(args, 3, &world)))
        return rpc_request_fail(req, "bad hello");
    if (!*name || strlen(name) >= 64) return rpc_request_fail(req, "a worker name must be 1..63 bytes");
    if (A->rank != 0) return rpc_request_fail(req, "not the rendezvous (rank 0)");
    int owner = rpc_conn_worker(req->rid, req->rid_len);
    if (owner >= 0) {
        char who[64];
        rpc_peer_name(owner, who, sizeof who);
        return rpc_request_fail(req, "this connection is already worker %d (%s)", owner, who);
    }
    char refused[sizeof A->joins_refused];
    pthread_mutex_lock(&A->state_mu);
    snprintf(refused, sizeof refused, "%s", A->joins_refused);
    pthread_mutex_unlock(&A->state_mu);
    if (refused[0]) return rpc_request_fail(req, "%s", refused);
    /* A dynamic rank is one more rank, admitted only where the run asked
     * for late joiners (opts.allow_dynamic); every other rule below holds
     * for it as for a static one. Without it only the declared world joins. */
    bool dynamic = rank == RPC_RANK_DYNAMIC && A->opts.allow_dynamic;
    /* the rank first: a restarted worker asking for a live one's rank (and
     * so, by default, its name) is told that the rank is taken */
    if (!dynamic && (rank < 1 || rank >= A->world_size))
        return rpc_request_fail(req, "rank %lld out of range 1..%d", (long long)rank, A->world_size - 1);
    if (world < 0 || (world > 0 && world != A->world_size))
        return rpc_request_fail(req, "world size %lld does not match the master's %d", (long long)world, A->world_size);
    if (!dynamic && A->peers[rank] && A->peers[rank]->alive)
        return rpc_request_fail(req, "rank %lld is taken by live worker %s", (long long)rank, A->peers[rank]->name);
    if (rpc_find_peer(name) >= 0) return rpc_request_fail(req, "worker name '%s' is taken", name);
    int at = find_endpoint(ep);
    if (at >= 0) return rpc_request_fail(req, "endpoint '%s' is worker %d's (%s)", ep, at, A->peers[at]->name);
    int id;
    if (dynamic) {
        /* Not the id of a worker that left and whose dealer still drains
         * the replies it sent before leaving (io_timers closes it). */
        for (id = A->world_size; id < MAX_WORKERS && A->peers[id] && (A->peers[id]->alive || A->peers[id]->dealer); id++) {}
        if (id >= MAX_WORKERS) return rpc_request_fail(req, "too many workers");
    } else {
        id = (int)rank;
    }
    struct peer *p = rpc_add_peer(id, name, ep, dynamic);
    if (!p) return rpc_request_fail(req, "cannot connect to endpoint '%s'", ep);
    rpc_conn_bind(req->rid, req->rid_len, id);
    *result = rpc_list(1);
    result->list.items[0] = rpc_int(id);
    pthread_mutex_lock(&A->state_mu);
    bool already = A->dir_sent;
    if (!dynamic && !already) A->static_seen++;
    /* a rank taken again: what its dead worker said at shutdown is not the new one's */
    if (A->sd_ready_from[id]) A->sd_ready--;
    if (A->bye_from[id]) A->byes--;
    A->sd_ready_from[id] = A->bye_from[id] = false;
    bool complete = A->static_seen == A->world_size - 1;
    if (complete && !already) A->dir_sent = true;
    pthread_mutex_unlock(&A->state_mu);
    if (complete && !already) {
        struct rpc_value dir = directory_value();
        for (int i = 1; i < MAX_WORKERS; i++)
            if (A->peers[i] && A->peers[i]->alive) rpc_send_oneway(i, "__dir", &dir);
        rpc_value_clear(&dir);
        pthread_mutex_lock(&A->state_mu);
        A->dir_ready = true;
        pthread_cond_broadcast(&A->state_cv);
        pthread_mutex_unlock(&A->state_mu);
    } else if (already) {
        struct rpc_value dir = directory_value();
        rpc_send_oneway(id, "__dir", &dir);
        rpc_value_clear(&dir);
        struct rpc_value j = rpc_list(1);
        j.list.items[0] = dir_entry(p);
        for (int i = 1; i < MAX_WORKERS; i++)
            if (i != id && A->peers[i] && A->peers[i]->alive) rpc_send_oneway(i, "__join", &j);
        rpc_value_clear(&j);
    }
    if (dynamic || already) rpc_post_event(RPC_EVENT_JOIN, id, name);
    return 0;
}

void rpc_refuse_joins(const char *why)
{
    pthread_mutex_lock(&A->state_mu);
    snprintf(A->joins_refused, sizeof A->joins_refused, "%s", why && *why ? why : "joins are closed");
    pthread_mutex_unlock(&A->state_mu);
}

static void add_entry(const struct rpc_value *e, bool event)
{
    if (e->kind != RPC_LIST || e->list.len != 4) return;
    int64_t id;
    const char *name = rpc_arg_str(e, 1), *ep = rpc_arg_str(e, 2);
    if (!rpc_arg_int(e, 0, &id) || id < 0 || id >= MAX_WORKERS || !name || !ep) return;
    if (strlen(name) >= 64 || strlen(ep) >= 128) return;
    rpc_add_peer((int)id, name, ep, e->list.items[3].kind == RPC_BOOL && e->list.items[3].b);
    if (event && id != rpc_self_id()) rpc_post_event(RPC_EVENT_JOIN, (int)id, name);
}

/* worker, inline, one-way: [[entry...]] */
static int bi_dir(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    if (req->caller != 0 || args->list.len != 1 || args->list.items[0].kind != RPC_LIST) return -1;
    const struct rpc_value *l = &args->list.items[0];
    for (size_t i = 0; i < l->list.len; i++) add_entry(&l->list.items[i], false);
    pthread_mutex_lock(&A->state_mu);
    A->dir_ready = true;
    pthread_cond_broadcast(&A->state_cv);
    pthread_mutex_unlock(&A->state_mu);
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
    if (!rpc_arg_int(args, 0, &id) || id < 0 || id >= MAX_WORKERS || id == rpc_self_id()) return -1;
    if (A->rank == 0 && req->caller == id) {
        for (int i = 1; i < MAX_WORKERS; i++)
            if (i != id && A->peers[i] && A->peers[i]->alive) rpc_send_oneway(i, "__leave", args);
    } else if (req->caller != 0) {
        return -1;
    }
    char why[128], name[64];
    rpc_peer_name((int)id, name, sizeof name);
    snprintf(why, sizeof why, "%s left", name);
    rpc_drop_peer((int)id, why, RPC_EVENT_LEAVE);
    return 0;
}

static int bi_sd_ready(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    pthread_mutex_lock(&A->state_mu);
    if (req->caller >= 0 && req->caller < MAX_WORKERS && !A->sd_ready_from[req->caller]) {
        A->sd_ready_from[req->caller] = true;
        A->sd_ready++;
    }
    pthread_cond_broadcast(&A->state_cv);
    pthread_mutex_unlock(&A->state_mu);
    return 0;
}

static int bi_sd_go(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    if (req->caller != 0) return rpc_request_fail(req, "not from rank 0");
    pthread_mutex_lock(&A->state_mu);
    A->sd_go = true;
    pthread_cond_broadcast(&A->state_cv);
    pthread_mutex_unlock(&A->state_mu);
    return 0;
}

static int bi_bye(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    pthread_mutex_lock(&A->state_mu);
    if (req->caller >= 0 && req->caller < MAX_WORKERS && !A->bye_from[req->caller]) {
        A->bye_from[req->caller] = true;
        A->byes++;
    }
    pthread_cond_broadcast(&A->state_cv);
    pthread_mutex_unlock(&A->state_mu);
    return 0;
}

void rpc_membership_register(void)
{
    rpc_register_ex("__hello", bi_hello, NULL, RPC_FN_INLINE);
    rpc_register_ex("__dir", bi_dir, NULL, RPC_FN_INLINE);
    rpc_register_ex("__join", bi_join, NULL, RPC_FN_INLINE);
    rpc_register_ex("__leave", bi_leave, NULL, RPC_FN_INLINE);
    rpc_register_ex("__sd_ready", bi_sd_ready, NULL, RPC_FN_INLINE);
    rpc_register_ex("__sd_go", bi_sd_go, NULL, RPC_FN_INLINE);
    rpc_register_ex("__bye", bi_bye, NULL, RPC_FN_INLINE);
}
