/* The owner side of RRefs: one entry per RRef this worker owns, counting
 * its users by fork id (G1: the entry lives until every user's delete has
 * arrived), the fork registrations that arrive before their RRef exists,
 * waiting for construction, and the module's lifetime. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "rpc/rref_internal.h"

pthread_mutex_t rref_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t rref_ready_cv = PTHREAD_COND_INITIALIZER;
bool rref_down = true;

static struct owner_entry *entries[256];
static int nentries;

/* Fork registrations that reached the owner before the creator's __remote
 * (they travel on different connections: A creates on B, hands the RRef to
 * C, C's fork request may overtake A's __remote). Their replies wait here,
 * under rref_mu, until the entry exists, as PyTorch's owner does. */
struct parked_fork { struct parked_fork *next; uint64_t id, fork; int holder; int64_t deadline; struct rpc_request *req; };
static struct parked_fork *parked;
static int nparked;
/* Set when this worker starts shutting down: no fork waits any more. */
static bool closing;

/* ---- owner entries (under rref_mu) --------------------------------------- */

struct owner_entry *rref_entry_find(uint64_t id)
{
    for (struct owner_entry *e = entries[id & 255]; e; e = e->next)
        if (e->id == id) return e;
    return NULL;
}

struct owner_entry *rref_entry_new(uint64_t id)
{
    struct owner_entry *e = trib_xcalloc(1, sizeof *e);
    e->id = id;
    e->state = OE_PENDING;
    e->next = entries[id & 255];
    entries[id & 255] = e;
    nentries++;
    return e;
}

void rref_entry_add_fork(struct owner_entry *e, uint64_t fork, int holder)
{
    if (e->nforks == e->cap) {
        e->cap = e->cap ? 2 * e->cap : 4;
        e->forks = trib_xrealloc(e->forks, e->cap * sizeof *e->forks);
    }
    e->forks[e->nforks++] = (struct fork_hold){ fork, holder };
}

bool rref_entry_del_fork(struct owner_entry *e, uint64_t fork)
{
    for (size_t i = 0; i < e->nforks; i++)
        if (e->forks[i].fork == fork) {
            e->forks[i] = e->forks[--e->nforks];
            return true;
        }
    return false;
}

struct owner_entry *rref_entry_unlink_if_unused(struct owner_entry *e)
{
    if (e->handle || e->nforks || e->state == OE_PENDING) return NULL;
    for (struct owner_entry **pp = &entries[e->id & 255]; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            nentries--;
            return e;
        }
    CHECK(!"owner entry not in table");
    return NULL;
}

void rref_entry_destroy(struct owner_entry *e)
{
    if (!e) return;
    if (e->is_object && e->obj && e->type.destroy) e->type.destroy(e->obj);
    rpc_value_clear(&e->value);
    free(e->err);
    free(e->forks);
    free(e);
}

struct rref *rref_entry_handle(struct owner_entry *e)
{
    if (e->handle) {
        atomic_fetch_add(&e->handle->refs, 1);
        return e->handle;
    }
    struct rref *r = rref_handle_new(e->id, 0, rpc_self_id(), true);
    r->is_owner = true;
    r->oe = e;
    e->handle = r;
    return r;
}

int rref_owned_count(void)
{
    pthread_mutex_lock(&rref_mu);
    int n = nentries;
    pthread_mutex_unlock(&rref_mu);
    return n;
}

struct rref *rref_new_local_value(struct rpc_value *v)
{
    CHECK(rpc_self_id() >= 0);
    pthread_mutex_lock(&rref_mu);
    struct owner_entry *e = rref_entry_new(rpc_gen_id());
    e->state = OE_READY;
    e->value = *v;
    *v = rpc_nil();
    struct rref *r = rref_entry_handle(e);
    pthread_mutex_unlock(&rref_mu);
    return r;
}

/* ---- fork registrations ---------------------------------------------------- */

struct owner_entry *rref_entry_new_remote(uint64_t id, uint64_t fork, int creator)
{
    pthread_mutex_lock(&rref_mu);
    if (rref_entry_find(id)) {
        pthread_mutex_unlock(&rref_mu);
        return NULL;
    }
    struct owner_entry *e = rref_entry_new(id);
    rref_entry_add_fork(e, fork, creator);
    struct parked_fork *ready = NULL;
    for (struct parked_fork **pp = &parked; *pp;) {
        struct parked_fork *p = *pp;
        if (p->id != id) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        nparked--;
        rref_entry_add_fork(e, p->fork, p->holder);
        p->next = ready;
        ready = p;
    }
    pthread_mutex_unlock(&rref_mu);
    while (ready) {                     /* the early forks are registered now */
        struct parked_fork *next = ready->next;
        rpc_request_complete(ready->req, NULL);
        free(ready);
        ready = next;
    }
    return e;
}

/* inline: [id, fork] from a child whose parent was a user */
static int bi_fork(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id, fork;
    if (!rref_arg_u64(args, 0, &id) || !rref_arg_u64(args, 1, &fork)) return rpc_request_fail(req, "bad arguments");
    int creator = (int)(id >> 48);
    bool creator_alive = creator != rpc_self_id() && rpc_worker_alive(creator);   /* before rref_mu */
    pthread_mutex_lock(&rref_mu);
    struct owner_entry *e = rref_entry_find(id);
    if (e) rref_entry_add_fork(e, fork, rpc_request_caller_id(req));
    /* Not created yet, by another live worker: its __remote is probably on
     * the way. It may also never come (a forged descriptor): the fork
     * waits at most the default timeout, never past the start of shutdown,
     * and does not hold a graceful shutdown up. */
    bool wait = !e && !rref_down && !closing && creator_alive;
    if (wait && nparked >= RREF_MAX_PARKED) {
        pthread_mutex_unlock(&rref_mu);
        atomic_fetch_add(&rpc_counters.busy, 1);
        return rpc_request_fail(req, "%d fork registrations already wait for their RRefs", RREF_MAX_PARKED);
    }
    if (wait) {
        int t = rpc_default_timeout_ms();
        struct parked_fork *p = trib_xmalloc(sizeof *p);
        *p = (struct parked_fork){parked, id, fork, rpc_request_caller_id(req), trib_now_ms() + (t > 0 ? t : 60000), req};
        parked = p;
        nparked++;
        rpc_request_uncount(req);
        pthread_mutex_unlock(&rref_mu);
        return RPC_DEFERRED;
    }
    pthread_mutex_unlock(&rref_mu);
    return e ? 0 : rpc_request_fail(req, "unknown RRef %#llx", (unsigned long long)id);
}

/* Fails the parked forks whose deadline is past at `now` (all of them when
 * now is 0) that worker `holder` registered (any worker's when -1). */
static void fail_parked(int64_t now, int holder, const char *why)
{
    struct parked_fork *gone = NULL;
    pthread_mutex_lock(&rref_mu);
    for (struct parked_fork **pp = &parked; *pp;) {
        struct parked_fork *p = *pp;
        if ((now && now < p->deadline) || (holder >= 0 && p->holder != holder)) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        nparked--;
        p->next = gone;
        gone = p;
    }
    pthread_mutex_unlock(&rref_mu);
    while (gone) {
        struct parked_fork *next = gone->next;
        if (now) atomic_fetch_add(&rpc_counters.forks_expired, 1);
        rpc_request_fail(gone->req, "RRef %#llx %s", (unsigned long long)gone->id, why);
        rpc_request_finish_error(gone->req);
        free(gone);
        gone = next;
    }
}

void rref_expire_parked(int64_t now)
{
    char why[128];
    snprintf(why, sizeof why, "was not created here within %d ms", rpc_default_timeout_ms());
    fail_parked(now, -1, why);
}

void rref_owner_peer_gone(int worker)
{
    struct owner_entry *dead = NULL;
    pthread_mutex_lock(&rref_mu);
    for (size_t b = 0; b < sizeof entries / sizeof *entries; b++)
        for (struct owner_entry *e = entries[b], *next; e; e = next) {
            next = e->next;
            size_t before = e->nforks;
            for (size_t i = 0; i < e->nforks;)
                if (e->forks[i].holder == worker) e->forks[i] = e->forks[--e->nforks];
                else i++;
            struct owner_entry *d = e->nforks < before ? rref_entry_unlink_if_unused(e) : NULL;
            if (d) {
                d->next = dead;
                dead = d;
            }
        }
    pthread_mutex_unlock(&rref_mu);
    while (dead) {
        struct owner_entry *next = dead->next;
        rref_entry_destroy(dead);
        dead = next;
    }
    fail_parked(0, worker, "was registered by a worker that is gone");
}

/* inline: [id, fork] a user is gone */
static int bi_del(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id, fork;
    if (!rref_arg_u64(args, 0, &id) || !rref_arg_u64(args, 1, &fork)) return rpc_request_fail(req, "bad arguments");
    pthread_mutex_lock(&rref_mu);
    struct owner_entry *e = rref_entry_find(id), *dead = NULL;
    bool had = e && rref_entry_del_fork(e, fork);
    if (had) dead = rref_entry_unlink_if_unused(e);
    pthread_mutex_unlock(&rref_mu);
    rref_entry_destroy(dead);
    if (!e) return rpc_request_fail(req, "unknown RRef %#llx", (unsigned long long)id);
    if (!had) return rpc_request_fail(req, "RRef %#llx has no fork %#llx", (unsigned long long)id, (unsigned long long)fork);
    return 0;
}

void rref_owner_register_builtins(void)
{
    rpc_register_ex("__rref_fork", bi_fork, NULL, RPC_FN_INLINE);
    rpc_register_ex("__rref_del", bi_del, NULL, RPC_FN_INLINE);
}

/* ---- what an entry holds ----------------------------------------------------- */

struct owner_entry *rref_entry_wait(uint64_t id, int timeout_ms, char *err, size_t cap)
{
    struct timespec until = trib_deadline_ts(timeout_ms);
    struct owner_entry *e = rref_entry_find(id);
    while (e && e->state == OE_PENDING) {
        if (timeout_ms <= 0) {
            pthread_cond_wait(&rref_ready_cv, &rref_mu);
        } else if (pthread_cond_timedwait(&rref_ready_cv, &rref_mu, &until) == ETIMEDOUT) {
            e = rref_entry_find(id);
            if (e && e->state == OE_PENDING) {
                snprintf(err, cap, "rpc: timed out after %d ms waiting for RRef %#llx to be built", timeout_ms,
                         (unsigned long long)id);
                return NULL;
            }
            continue;
        }
        e = rref_entry_find(id);
    }
    if (!e) snprintf(err, cap, "unknown RRef %#llx", (unsigned long long)id);
    else if (e->state == OE_FAILED) snprintf(err, cap, "%s", e->err);
    else return e;
    return NULL;
}

/* An object's to_value (user code, maybe slow) runs with rref_mu released
 * and the entry pinned, so that the inline RRef builtins on the I/O thread
 * never wait for it. */
int rref_entry_value(struct owner_entry *e, struct rpc_value *out, char *err, size_t cap)
{
    if (!e->is_object) {
        *out = rpc_value_copy(&e->value);
        return 0;
    }
    if (!e->type.to_value) {
        snprintf(err, cap, "objects of type %s have no to_value", e->type.name);
        return -1;
    }
    int (*to_value)(void *, struct rpc_value *) = e->type.to_value;
    void *obj = e->obj;
    const char *type_name = e->type.name;       /* the constructor registry's */
    struct rref *pin = rref_entry_handle(e);
    pthread_mutex_unlock(&rref_mu);
    int rc = to_value(obj, out);
    if (rc < 0) snprintf(err, cap, "%s to_value failed: %s", type_name, rpc_last_error());
    rref_free(pin);
    pthread_mutex_lock(&rref_mu);
    return rc < 0 ? -1 : 0;
}

/* Owner side: waits for construction; the entry (under rref_mu) or NULL. */
static struct owner_entry *local_entry(struct rref *r, const char *who, char *err, size_t cap)
{
    if (!r->is_owner || !r->oe) {
        snprintf(err, cap, "%s: this worker is not the owner", who);
        return NULL;
    }
    char why[1024];
    struct owner_entry *e = rref_entry_wait(r->id, 0, why, sizeof why);
    if (!e) snprintf(err, cap, "%s: %s", who, why);
    return e;
}

const struct rpc_value *rref_local_value(struct rref *r)
{
    char err[1200];
    pthread_mutex_lock(&rref_mu);
    struct owner_entry *e = local_entry(r, "rref_local_value", err, sizeof err);
    if (e && e->is_object) {
        snprintf(err, sizeof err, "rref_local_value: the RRef holds an object of type %s", e->type.name);
        e = NULL;
    }
    pthread_mutex_unlock(&rref_mu);
    if (!e) rpc_set_error("%s", err);
    return e ? &e->value : NULL;
}

void *rref_local_object(struct rref *r) { return rref_local_object_of(r, NULL); }

void *rref_local_object_of(struct rref *r, const char *type_name)
{
    char err[1200];
    pthread_mutex_lock(&rref_mu);
    struct owner_entry *e = local_entry(r, "rref_local_object", err, sizeof err);
    if (e && !e->is_object) {
        snprintf(err, sizeof err, "rref_local_object: the RRef holds a value");
        e = NULL;
    } else if (e && type_name && (!e->type.name || strcmp(e->type.name, type_name) != 0)) {
        snprintf(err, sizeof err, "rref_local_object: the RRef holds a %s, not a %s", e->type.name ? e->type.name : "nameless object", type_name);
        e = NULL;
    }
    void *obj = e ? e->obj : NULL;
    pthread_mutex_unlock(&rref_mu);
    if (!e) rpc_set_error("%s", err);
    return obj;
}

/* ---- lifetime of the module ----------------------------------------------- */

void rref_module_init(void)
{
    rref_install_hooks();
    pthread_mutex_lock(&rref_mu);
    rref_down = false;
    closing = false;
    pthread_mutex_unlock(&rref_mu);
}

void rref_module_closing(void)
{
    pthread_mutex_lock(&rref_mu);
    closing = true;
    pthread_mutex_unlock(&rref_mu);
    fail_parked(0, -1, "was not created here before shutdown");
}

void rref_module_shutdown(void)
{
    pthread_mutex_lock(&rref_mu);
    rref_down = true;
    struct owner_entry *all = NULL;
    for (int b = 0; b < 256; b++) {
        while (entries[b]) {
            struct owner_entry *e = entries[b];
            entries[b] = e->next;
            if (e->handle) e->handle->oe = NULL;
            e->next = all;
            all = e;
        }
    }
    nentries = 0;
    struct parked_fork *pf = parked;    /* the I/O thread is gone: no replies */
    parked = NULL;
    nparked = 0;
    pthread_mutex_unlock(&rref_mu);
    while (pf) {
        struct parked_fork *next = pf->next;
        rpc_request_free(pf->req);
        free(pf);
        pf = next;
    }
    while (all) {
        struct owner_entry *next = all->next;
        rref_entry_destroy(all);
        all = next;
    }
    rref_fork_shutdown();
}
