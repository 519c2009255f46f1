/* Directory and membership: worker lookups, membership events, peers
 * joining, leaving and dying, and the rendezvous/shutdown builtins that
 * rank 0 and the workers exchange. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "rpc/membership.h"


/* Owned here: the membership events not yet taken by rpc_next_event (a
 * bounded ring: the oldest is dropped when full). */
#define EVENTS_CAP 256
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct rpc_event ring[EVENTS_CAP];  /* under mu */
    int head, count;                    /* under mu */
} evq = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

/* Owned here: this worker's place in the world and the rendezvous and
 * shutdown protocols' state. Lock rule: ms.mu guards the fields marked so;
 * it is never held while taking the directory lock's write side (the
 * directory lock may be taken, for reading, under it). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;                  /* broadcast on every change below and on a peer's loss */
    int rank, world_size;               /* set by rpc_membership_init */
    bool dynamic, allow_dynamic;
    char master[128];
    void (*on_event)(const struct rpc_event *ev, void *user);
    void *event_user;
    bool dir_ready;                     /* under mu: the directory is in (the world is complete) */
    int static_seen;                    /* rank 0, under mu: static ranks that said hello */
    bool dir_sent;                      /* rank 0, under mu */
    int sd_ready;                       /* rank 0, under mu: static members ready to shut down */
    bool sd_ready_from[MAX_WORKERS];
    bool sd_go;                         /* under mu: rank 0 said go */
    int byes;
    bool bye_from[MAX_WORKERS];
    char joins_refused[128];            /* rank 0, under mu: why hellos are refused ("": open) */
    int join_timeout_ms;                /* how long a member may take to answer a __join (the heartbeat timeout) */
} ms = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

void rpc_events_reset(void)
{
    pthread_mutex_lock(&evq.mu);
    evq.head = evq.count = 0;
    pthread_mutex_unlock(&evq.mu);
}

/* ---- events ---------------------------------------------------------------- */

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
    if (ms.on_event) ms.on_event(&ev, ms.event_user);
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

/* I/O thread: a peer left or died. A peer that left gracefully keeps its
 * dealer until the replies it sent before leaving are in (or a heartbeat
 * timeout passes: see io_timers); a dead one fails its calls at once. */
void rpc_drop_peer(int id, const char *why, enum rpc_event_kind ev)
{
    if (!rpc_peer_gone(id, why, ev == RPC_EVENT_LEAVE)) return;
    rpc_conn_forget_worker(id);
    if (wire_hooks()->on_peer_gone) wire_hooks()->on_peer_gone(id, wire_hooks()->user);
    if (rref_hooks()->peer_gone) rref_hooks()->peer_gone(id);
    rpc_post_event(ev, id, rpc_peer(id)->name);
    pthread_mutex_lock(&ms.mu);
    pthread_cond_broadcast(&ms.cv);
    pthread_mutex_unlock(&ms.mu);
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
    for (int i = 0; i < MAX_WORKERS; i++) if (rpc_peer(i) && rpc_peer(i)->alive) n++;
    struct rpc_value l = rpc_list(1);
    l.list.items[0] = rpc_list(n);
    n = 0;
    for (int i = 0; i < MAX_WORKERS; i++)
        if (rpc_peer(i) && rpc_peer(i)->alive) l.list.items[0].list.items[n++] = dir_entry(rpc_peer(i));
    return l;
}

static int find_endpoint(const char *ep)
{
    for (int i = 0; i < MAX_WORKERS; i++)
        if (rpc_peer(i) && rpc_peer(i)->alive && strcmp(rpc_peer(i)->endpoint, ep) == 0) return i;
    return -1;
}

/* ---- admission of a worker after the directory went out -------------------
 * A late, restarted or dynamic worker. Every other live member is told
 * first (__join, a call), and the newcomer gets the directory only once
 * each of them has answered, failed or timed out. The newcomer learns of a
 * member only from that directory (or from a later __join), so its first
 * message to any member arrives after that member knows it: the member
 * asks the right process to vouch for the connection, never the dead one
 * it replaces, and never finds it "not a live worker" (rpc/README.md
 * "Joining, restarts and verification"). Rank 0, I/O thread. */
struct admission {
    int id;
    uint32_t incarnation;               /* the newcomer's entry (a newer one gets its own) */
    int waiting;                        /* answers still due, +1 while the calls go out */
};

static void admission_step(struct admission *a)
{
    if (--a->waiting > 0) return;
    const struct peer *p = rpc_peer(a->id);
    if (p && p->alive && p->incarnation == a->incarnation) {
        struct rpc_value dir = directory_value();
        rpc_send_oneway(a->id, "__dir", &dir);
        rpc_value_clear(&dir);
    }
    free(a);
}

static void join_answered(struct rpc_future *f, void *arg)
{
    (void)f;                            /* failed or timed out: that member is dying; it no longer holds the newcomer up */
    admission_step(arg);
}

static void admit_late(const struct peer *p)
{
    struct admission *a = trib_xmalloc(sizeof *a);
    a->id = p->id;
    a->incarnation = p->incarnation;
    a->waiting = 1;
    struct rpc_value j = rpc_list(1);
    j.list.items[0] = dir_entry(p);
    for (int i = 1; i < MAX_WORKERS; i++)
        if (i != p->id && rpc_peer(i) && rpc_peer(i)->alive) {
            a->waiting++;
            struct rpc_value args = rpc_value_copy(&j);
            rpc_call_internal(i, "__join", &args, ms.join_timeout_ms, join_answered, a);
        }
    rpc_value_clear(&j);
    admission_step(a);
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
    if (ms.rank != 0) return rpc_request_fail(req, "not the rendezvous (rank 0)");
    int owner = rpc_conn_worker(req->rid, req->rid_len);
    if (owner >= 0) {
        char who[64];
        rpc_peer_name(owner, who, sizeof who);
        return rpc_request_fail(req, "this connection is already worker %d (%s)", owner, who);
    }
    char refused[sizeof ms.joins_refused];
    pthread_mutex_lock(&ms.mu);
    snprintf(refused, sizeof refused, "%s", ms.joins_refused);
    pthread_mutex_unlock(&ms.mu);
    if (refused[0]) return rpc_request_fail(req, "%s", refused);
    /* A dynamic rank is one more rank, admitted only where the run asked
     * for late joiners (opts.allow_dynamic); every other rule below holds
     * for it as for a static one. Without it only the declared world joins. */
    bool dynamic = rank == RPC_RANK_DYNAMIC && ms.allow_dynamic;
    /* the rank first: a restarted worker asking for a live one's rank (and
     * so, by default, its name) is told that the rank is taken */
    if (!dynamic && (rank < 1 || rank >= ms.world_size))
        return rpc_request_fail(req, "rank %lld out of range 1..%d", (long long)rank, ms.world_size - 1);
    if (world < 0 || (world > 0 && world != ms.world_size))
        return rpc_request_fail(req, "world size %lld does not match the master's %d", (long long)world, ms.world_size);
    if (!dynamic && rpc_peer(rank) && rpc_peer(rank)->alive)
        return rpc_request_fail(req, "rank %lld is taken by live worker %s", (long long)rank, rpc_peer(rank)->name);
    if (rpc_find_peer(name) >= 0) return rpc_request_fail(req, "worker name '%s' is taken", name);
    int at = find_endpoint(ep);
    if (at >= 0) return rpc_request_fail(req, "endpoint '%s' is worker %d's (%s)", ep, at, rpc_peer(at)->name);
    int id;
    if (dynamic) {
        /* Not the id of a worker that left and whose dealer still drains
         * the replies it sent before leaving (io_timers closes it). */
        for (id = ms.world_size; id < MAX_WORKERS && rpc_peer(id) && (rpc_peer(id)->alive || rpc_peer(id)->dealer); id++) {}
        if (id >= MAX_WORKERS) return rpc_request_fail(req, "too many workers");
    } else {
        id = (int)rank;
    }
    struct peer *p = rpc_add_peer(id, name, ep, dynamic);
    if (!p) return rpc_request_fail(req, "cannot connect to endpoint '%s'", ep);
    rpc_conn_bind(req->rid, req->rid_len, id);
    *result = rpc_list(1);
    result->list.items[0] = rpc_int(id);
    pthread_mutex_lock(&ms.mu);
    bool already = ms.dir_sent;
    if (!dynamic && !already) ms.static_seen++;
    /* a rank taken again: what its dead worker said at shutdown is not the new one's */
    if (ms.sd_ready_from[id]) ms.sd_ready--;
    if (ms.bye_from[id]) ms.byes--;
    ms.sd_ready_from[id] = ms.bye_from[id] = false;
    bool complete = ms.static_seen == ms.world_size - 1;
    if (complete && !already) ms.dir_sent = true;
    pthread_mutex_unlock(&ms.mu);
    if (complete && !already) {
        struct rpc_value dir = directory_value();
        for (int i = 1; i < MAX_WORKERS; i++)
            if (rpc_peer(i) && rpc_peer(i)->alive) rpc_send_oneway(i, "__dir", &dir);
        rpc_value_clear(&dir);
        pthread_mutex_lock(&ms.mu);
        ms.dir_ready = true;
        pthread_cond_broadcast(&ms.cv);
        pthread_mutex_unlock(&ms.mu);
    } else if (already) {
        admit_late(p);
    }
    if (dynamic || already) rpc_post_event(RPC_EVENT_JOIN, id, name);
    return 0;
}

void rpc_refuse_joins(const char *why)
{
    pthread_mutex_lock(&ms.mu);
    snprintf(ms.joins_refused, sizeof ms.joins_refused, "%s", why && *why ? why : "joins are closed");
    pthread_mutex_unlock(&ms.mu);
}

static void add_entry(const struct rpc_value *e, bool event)
{
    if (e->kind != RPC_LIST || e->list.len != 4) return;
    int64_t id;
    const char *name = rpc_arg_str(e, 1), *ep = rpc_arg_str(e, 2);
    if (!rpc_arg_int(e, 0, &id) || id < 0 || id >= MAX_WORKERS || !name || !ep) return;
    if (strlen(name) >= 64 || strlen(ep) >= 128) return;
    const struct peer *was = rpc_peer((int)id);
    if (was && was->alive && id != 0 && id != rpc_self_id() && strcmp(was->endpoint, ep) != 0) {
        /* a new process under a live one's id: the old one died before we
         * noticed; it goes as a dead one does (its calls fail, its
         * connections are forgotten) before the new one comes */
        char why[128];
        snprintf(why, sizeof why, "%s was replaced by a new process", was->name);
        rpc_drop_peer((int)id, why, RPC_EVENT_FAILED);
    }
    if (!rpc_add_peer((int)id, name, ep, e->list.items[3].kind == RPC_BOOL && e->list.items[3].b)) return;
    if (event && id != rpc_self_id()) {
        /* a __join: the newcomer learns of us only once every member has
         * answered its __join (up to join_timeout_ms from now), and says
         * nothing to us before */
        rpc_peer_grace((int)id, ms.join_timeout_ms);
        rpc_post_event(RPC_EVENT_JOIN, (int)id, name);
    }
}

/* worker, inline, one-way: [[entry...]] */
static int bi_dir(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    if (req->caller != 0 || args->list.len != 1 || args->list.items[0].kind != RPC_LIST) return -1;
    const struct rpc_value *l = &args->list.items[0];
    for (size_t i = 0; i < l->list.len; i++) add_entry(&l->list.items[i], false);
    rpc_curve_set_joined();
    rpc_conn_set_joined();
    pthread_mutex_lock(&ms.mu);
    ms.dir_ready = true;
    pthread_cond_broadcast(&ms.cv);
    pthread_mutex_unlock(&ms.mu);
    return 0;
}

/* worker, inline, a call from rank 0: [entry] (answered once the entry is in) */
static int bi_join(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    if (req->caller != 0) return rpc_request_fail(req, "not from rank 0");
    if (args->list.len != 1) return rpc_request_fail(req, "bad join");
    add_entry(&args->list.items[0], true);
    return 0;
}

/* rank 0, inline: a worker leaves; tell the others. worker: [id] */
static int bi_leave(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    int64_t id;
    if (!rpc_arg_int(args, 0, &id) || id < 0 || id >= MAX_WORKERS || id == rpc_self_id()) return -1;
    if (ms.rank == 0 && req->caller == id) {
        for (int i = 1; i < MAX_WORKERS; i++)
            if (i != id && rpc_peer(i) && rpc_peer(i)->alive) rpc_send_oneway(i, "__leave", args);
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
    pthread_mutex_lock(&ms.mu);
    if (req->caller >= 0 && req->caller < MAX_WORKERS && !ms.sd_ready_from[req->caller]) {
        ms.sd_ready_from[req->caller] = true;
        ms.sd_ready++;
    }
    pthread_cond_broadcast(&ms.cv);
    pthread_mutex_unlock(&ms.mu);
    return 0;
}

static int bi_sd_go(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    if (req->caller != 0) return rpc_request_fail(req, "not from rank 0");
    pthread_mutex_lock(&ms.mu);
    ms.sd_go = true;
    pthread_cond_broadcast(&ms.cv);
    pthread_mutex_unlock(&ms.mu);
    return 0;
}

static int bi_bye(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    pthread_mutex_lock(&ms.mu);
    if (req->caller >= 0 && req->caller < MAX_WORKERS && !ms.bye_from[req->caller]) {
        ms.bye_from[req->caller] = true;
        ms.byes++;
    }
    pthread_cond_broadcast(&ms.cv);
    pthread_mutex_unlock(&ms.mu);
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

/* ---- the agent's life: set-up, rendezvous, shutdown ----------------------- */

void rpc_membership_lost(int id, const char *why) { rpc_drop_peer(id, why, RPC_EVENT_FAILED); }

void rpc_membership_init(const struct rpc_opts *o, int rank, int world_size, const char *master)
{
    pthread_mutex_lock(&ms.mu);
    ms.rank = rank;
    ms.world_size = world_size;
    ms.dynamic = rank == RPC_RANK_DYNAMIC;
    ms.allow_dynamic = o->allow_dynamic;
    ms.on_event = o->on_event;
    ms.join_timeout_ms = o->heartbeat_timeout_ms;
    ms.event_user = o->event_user;
    snprintf(ms.master, sizeof ms.master, "%s", master);
    ms.dir_ready = ms.dir_sent = ms.sd_go = false;
    ms.static_seen = ms.sd_ready = ms.byes = 0;
    memset(ms.sd_ready_from, 0, sizeof ms.sd_ready_from);
    memset(ms.bye_from, 0, sizeof ms.bye_from);
    ms.joins_refused[0] = '\0';
    pthread_mutex_unlock(&ms.mu);
    rpc_events_reset();
    rpc_membership_register();
}

const char *rpc_master_endpoint(void) { return ms.master; }

void rpc_membership_set_master(const char *master) { snprintf(ms.master, sizeof ms.master, "%s", master); }

bool rpc_membership_joined(void)
{
    pthread_mutex_lock(&ms.mu);
    bool j = ms.dir_ready;
    pthread_mutex_unlock(&ms.mu);
    return j;
}

void rpc_membership_set_complete(void)
{
    rpc_conn_set_joined();
    pthread_mutex_lock(&ms.mu);
    ms.dir_ready = ms.dir_sent = true;
    pthread_cond_broadcast(&ms.cv);
    pthread_mutex_unlock(&ms.mu);
}

/* Waits until pred() holds (under ms.mu), or timeout_ms (< 0: no limit) has passed. */
static bool wait_state(bool (*pred)(void), int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : trib_now_ms() + timeout_ms;
    pthread_mutex_lock(&ms.mu);
    while (!pred()) {
        int64_t left = deadline - trib_now_ms();
        if (left <= 0) break;
        struct timespec ts = trib_deadline_ts(left < 50 ? left : 50);
        pthread_cond_timedwait(&ms.cv, &ms.mu, &ts);
    }
    bool ok = pred();
    pthread_mutex_unlock(&ms.mu);
    return ok;
}

static const volatile sig_atomic_t *cancel_flag;
static bool pred_dir(void) { return ms.dir_ready; }
static bool cancelled(void) { return cancel_flag && *cancel_flag; }
static bool pred_dir_or_cancel(void) { return ms.dir_ready || cancelled(); }
/* the directory is in, or the rendezvous that would send it is lost */
static bool pred_dir_or_rdv_lost(void) { return ms.dir_ready || !rpc_worker_alive(0); }

int rpc_membership_join(const char *self_endpoint, int init_timeout_ms, const volatile sig_atomic_t *cancel)
{
    cancel_flag = cancel;
    if (ms.rank == 0) {
        rpc_conn_set_joined();          /* rank 0 learns every worker from its own hello */
        if (ms.world_size == 1) {
            rpc_membership_set_complete();
        } else if (!wait_state(pred_dir_or_cancel, init_timeout_ms) || !wait_state(pred_dir, 0)) {
            if (cancelled())
                return rpc_set_error("rpc_init: interrupted while waiting for the rendezvous (%d of %d workers arrived)",
                                     ms.static_seen + 1, ms.world_size);
            return rpc_set_error("rpc_init: rendezvous timed out after %d ms (%d of %d workers arrived)",
                                 init_timeout_ms, ms.static_seen + 1, ms.world_size);
        }
        return 0;
    }
    struct rpc_value args = rpc_list(4), res = rpc_nil();
    args.list.items[0] = rpc_str(rpc_self_name());
    args.list.items[1] = rpc_int(ms.rank);
    args.list.items[2] = rpc_str(self_endpoint);
    args.list.items[3] = rpc_int(ms.dynamic ? 0 : ms.world_size);
    struct rpc_future *f = rpc_async_id(0, "__hello", &args, init_timeout_ms);
    rpc_value_clear(&args);
    int rc = rpc_future_take(f, &res);
    rpc_future_free(f);
    int64_t id;
    if (rc < 0 || !rpc_arg_int(&res, 0, &id)) {
        char e[1024];
        snprintf(e, sizeof e, "%s", rpc_last_error());
        rpc_value_clear(&res);
        return rpc_set_error("rpc_init: rendezvous with %s failed: %s", ms.master, e);
    }
    rpc_value_clear(&res);
    wire_set_self_id((int)id);
    rpc_io_set_admitted(true);
    /* rank 0's loss (heartbeats run once it has admitted us) ends the wait:
     * a worker never outlives its rendezvous here */
    if (!wait_state(pred_dir_or_rdv_lost, init_timeout_ms) || !wait_state(pred_dir, 0)) {
        if (!rpc_worker_alive(0))
            return rpc_set_error("rpc_init: lost the rendezvous %s before it sent the directory", ms.master);
        return rpc_set_error("rpc_init: no directory from %s after %d ms", ms.master, init_timeout_ms);
    }
    return 0;
}

static bool pred_idle(void) { return rpc_calls_in_flight() == 0 && rpc_requests_active() == 0; }
/* rank 0 said go, or rank 0 is gone (nobody left to say it) */
static bool pred_go(void) { return ms.sd_go || !rpc_worker_alive(0); }

static int static_alive(void)
{
    int n = 0;
    for (int i = 1; i < ms.world_size && i < MAX_WORKERS; i++)
        if (rpc_worker_alive(i)) n++;
    return n;
}

/* Under ms.mu; liveness is read under the directory lock (never held
 * while taking ms.mu, so the order is safe). */
static bool all_static(const bool *flags)
{
    bool ok = true;
    rpc_dir_rdlock();
    for (int i = 1; i < ms.world_size && i < MAX_WORKERS && ok; i++)
        if (rpc_peer(i) && rpc_peer(i)->alive && !flags[i]) ok = false;
    rpc_dir_unlock();
    return ok;
}

static bool pred_all_ready(void) { return all_static(ms.sd_ready_from); }
static bool pred_all_bye(void) { return all_static(ms.bye_from); }

void rpc_membership_leave(bool graceful, int long_wait)
{
    if (!graceful) return;
    wait_state(pred_idle, long_wait);
    if (ms.dynamic) {
        struct rpc_value args = rpc_list(1);
        args.list.items[0] = rpc_int(rpc_self_id());
        struct rpc_future *f = rpc_async_id(0, "__leave", &args, 2000);
        rpc_value_clear(&args);
        rpc_future_wait(f, NULL);
        rpc_future_free(f);
    } else if (ms.rank != 0) {
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
            for (int i = 1; i < ms.world_size && i < MAX_WORKERS; i++)
                if (rpc_worker_alive(i)) rpc_send_oneway(i, "__sd_go", NULL);
            wait_state(pred_all_bye, long_wait);
            /* let the bye replies leave before the sockets close */
            usleep(20000);
        }
        wait_state(pred_idle, long_wait);
    }
}
