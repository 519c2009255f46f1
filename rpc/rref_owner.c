/* The bottom of the RRef module (rrefs.h lists the order): the
 * owner table, one entry per RRef this worker owns, counting its users by
 * fork id (G1: the entry lives until every user's delete has arrived);
 * waiting for construction and reading what an entry holds; handles and
 * their references (a user's last one tells the owner); the module's lock.
 * Calls nothing in the files above it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "rpc/rrefs.h"

/* The module's one lock. It guards, here: the table (entries, nentries),
 * every entry's fields and `down`; in rref_fork.c: the parked fork
 * registrations and the children. ready_cv is broadcast under it whenever
 * a construction ends (rref_entry_set_*). Never held while user code
 * (constructor, method, to_value) runs. */
static pthread_mutex_t rref_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cv = PTHREAD_COND_INITIALIZER;
/* No rpc agent (before rref_owner_open, after rref_owner_shutdown): no
 * protocol message may be sent. */
static bool down = true;

static struct owner_entry *entries[256];
static int nentries;

void rref_lock(void) { pthread_mutex_lock(&rref_mu); }
void rref_unlock(void) { pthread_mutex_unlock(&rref_mu); }
bool rref_owner_is_down(void) { return down; }

void rref_owner_open(void)
{
    pthread_mutex_lock(&rref_mu);
    down = false;
    pthread_mutex_unlock(&rref_mu);
}

/* ---- handles ---------------------------------------------------------------- */

struct rref *rref_handle_new(uint64_t id, uint64_t fork, int owner, bool confirmed)
{
    struct rref *r = trib_xcalloc(1, sizeof *r);
    atomic_init(&r->refs, 1);
    r->id = id;
    r->fork_id = fork;
    r->owner = owner;
    atomic_init(&r->confirmed, confirmed);
    return r;
}

struct rref *rref_retain(struct rref *r)
{
    atomic_fetch_add(&r->refs, 1);
    return r;
}

void rref_free(struct rref *r)
{
    if (!r) return;
    if (r->is_owner) {
        struct owner_entry *dead = NULL;
        pthread_mutex_lock(&rref_mu);
        if (atomic_fetch_sub(&r->refs, 1) == 1) {
            if (r->oe) {
                r->oe->handle = NULL;
                dead = rref_entry_unlink_if_unused(r->oe);
            }
            free(r);
        }
        pthread_mutex_unlock(&rref_mu);
        rref_entry_destroy(dead);
        return;
    }
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    pthread_mutex_lock(&rref_mu);
    bool up = !down;
    pthread_mutex_unlock(&rref_mu);
    if (up) {
        /* G1: the owner hears of every user delete (tracked, so a graceful
         * shutdown waits for it). */
        struct rpc_value args = rref_two_ints(r->id, r->fork_id);
        rpc_call_internal(r->owner, "__rref_del", &args, 0, NULL, NULL);
    }
    free(r);
}

int rref_owner(const struct rref *r) { return r->owner; }
bool rref_is_owner(const struct rref *r) { return r->is_owner; }
bool rref_confirmed_by_owner(const struct rref *r) { return atomic_load(&r->confirmed); }
uint64_t rref_id(const struct rref *r) { return r->id; }
void rref_set_confirmed(struct rref *r) { atomic_store(&r->confirmed, true); }

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

bool rref_entry_del_fork(struct owner_entry *e, uint64_t fork, int holder)
{
    for (size_t i = 0; i < e->nforks; i++)
        if (e->forks[i].fork == fork && e->forks[i].holder == holder) {
            e->forks[i] = e->forks[--e->nforks];
            return true;
        }
    return false;
}

bool rref_entry_held_by(const struct owner_entry *e, int worker)
{
    if (worker == rpc_self_id()) return true;
    for (size_t i = 0; i < e->nforks; i++)
        if (e->forks[i].holder == worker) return true;
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
}

/* inline: [id, fork] a user is gone. Only the fork's holder (the worker
 * it was given to, as its connection proved) deletes it; an unknown RRef,
 * an unknown fork and another worker's fork are refused alike. */
static int bi_del(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id, fork;
    if (!rref_arg_u64(args, 0, &id) || !rref_arg_u64(args, 1, &fork)) return rpc_request_fail(req, "bad arguments");
    int caller = rpc_request_caller_id(req);
    pthread_mutex_lock(&rref_mu);
    struct owner_entry *e = rref_entry_find(id), *dead = NULL;
    bool had = e && rref_entry_del_fork(e, fork, caller);
    if (had) dead = rref_entry_unlink_if_unused(e);
    pthread_mutex_unlock(&rref_mu);
    rref_entry_destroy(dead);
    if (!had) {
        char who[64];
        rpc_peer_name(caller, who, sizeof who);
        return rpc_request_fail(req, "%s holds no fork %#llx of RRef %#llx", who, (unsigned long long)fork,
                                (unsigned long long)id);
    }
    return 0;
}

void rref_owner_register_builtins(void)
{
    rpc_register_ex("__rref_del", bi_del, NULL, RPC_FN_INLINE);
}

/* ---- what an entry holds ----------------------------------------------------- */

struct owner_entry *rref_entry_wait(uint64_t id, int timeout_ms, char *err, size_t cap)
{
    struct timespec until = trib_deadline_ts(timeout_ms);
    struct owner_entry *e = rref_entry_find(id);
    while (e && e->state == OE_PENDING) {
        if (timeout_ms <= 0) {
            pthread_cond_wait(&ready_cv, &rref_mu);
        } else if (pthread_cond_timedwait(&ready_cv, &rref_mu, &until) == ETIMEDOUT) {
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

/* ---- the end of construction (under rref_mu) ---------------------------------- */

void rref_entry_set_object(struct owner_entry *e, void *obj, const struct rpc_type *type,
                           struct rref_type_methods *methods)
{
    e->state = OE_READY;
    e->is_object = true;
    e->obj = obj;
    e->type = *type;
    e->methods = methods;
    pthread_cond_broadcast(&ready_cv);
}

void rref_entry_set_value(struct owner_entry *e, struct rpc_value *v)
{
    e->state = OE_READY;
    e->is_object = false;
    e->value = *v;
    *v = rpc_nil();
    pthread_cond_broadcast(&ready_cv);
}

void rref_entry_set_failed(struct owner_entry *e, const char *err)
{
    e->state = OE_FAILED;
    e->err = strdup(err);
    CHECK_ALLOC(e->err);
    pthread_cond_broadcast(&ready_cv);
}

/* ---- shutdown ------------------------------------------------------------------- */

void rref_owner_shutdown(void)
{
    pthread_mutex_lock(&rref_mu);
    down = true;
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
    pthread_mutex_unlock(&rref_mu);
    while (all) {
        struct owner_entry *next = all->next;
        rref_entry_destroy(all);
        all = next;
    }
}
