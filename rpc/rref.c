/* RRefs with PyTorch's protocol: one owner entry per RRef holding an object
 * or a value, users identified by fork ids, fork requests, child accepts and
 * user deletes, so that the owner hears of every delete (G1) and a parent
 * outlives its child's confirmation (G2). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "rpc/rpc_internal.h"

enum { OE_PENDING, OE_READY, OE_FAILED };

struct owner_entry {
    struct owner_entry *next;
    uint64_t id;
    int state;
    bool is_object;
    void *obj;
    struct rpc_type type;
    struct rpc_value value;
    char *err;
    uint64_t *forks;
    size_t nforks, cap;
    struct rref *handle;            /* the owner's local RRef, if any */
};

struct rref {
    atomic_int refs;
    uint64_t id, fork_id;
    int owner;
    bool is_owner;
    atomic_bool confirmed;
    struct owner_entry *oe;         /* owner only; NULL after shutdown */
};

struct child { struct child *next; uint64_t fork_id; struct rref *r; };

struct ctor_entry { struct ctor_entry *next; char *name; struct rpc_type type; char *type_name; rpc_ctor ctor; void *user; };
struct method_entry { struct method_entry *next; char *type_name, *name; rpc_method fn; void *user; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cv = PTHREAD_COND_INITIALIZER;
static struct owner_entry *entries[256];
static int nentries;
static struct child *children;
static bool down = true;

/* Fork registrations that reached the owner before the creator's __remote
 * (they travel on different connections: A creates on B, hands the RRef to
 * C, C's fork request may overtake A's __remote). Their replies wait here,
 * under mu, until the entry exists, as PyTorch's owner does. */
struct parked_fork { struct parked_fork *next; uint64_t id, fork; int64_t deadline; struct rpc_request *req; };
static struct parked_fork *parked;
static int nparked;
/* Set when this worker starts shutting down: no fork waits any more. */
static bool closing;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ctor_entry *ctors;
static struct method_entry *methods;

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    CHECK_ALLOC(d);
    return d;
}

/* ---- registry ------------------------------------------------------------ */

void rpc_register_ctor(const char *name, const struct rpc_type *type, rpc_ctor ctor, void *user)
{
    struct ctor_entry *e = trib_xcalloc(1, sizeof *e);
    e->name = xstrdup(name);
    e->type = *type;
    e->type_name = xstrdup(type->name);
    e->type.name = e->type_name;
    e->ctor = ctor;
    e->user = user;
    pthread_mutex_lock(&reg_mu);
    e->next = ctors;
    ctors = e;
    pthread_mutex_unlock(&reg_mu);
}

void rpc_register_method(const char *type_name, const char *name, rpc_method fn, void *user)
{
    struct method_entry *e = trib_xcalloc(1, sizeof *e);
    e->type_name = xstrdup(type_name);
    e->name = xstrdup(name);
    e->fn = fn;
    e->user = user;
    pthread_mutex_lock(&reg_mu);
    e->next = methods;
    methods = e;
    pthread_mutex_unlock(&reg_mu);
}

static struct ctor_entry *find_ctor(const char *name)
{
    pthread_mutex_lock(&reg_mu);
    struct ctor_entry *e = ctors;
    while (e && strcmp(e->name, name) != 0) e = e->next;
    pthread_mutex_unlock(&reg_mu);
    return e;
}

static struct method_entry *find_method(const char *type_name, const char *name)
{
    pthread_mutex_lock(&reg_mu);
    struct method_entry *e = methods;
    while (e && (strcmp(e->type_name, type_name) != 0 || strcmp(e->name, name) != 0)) e = e->next;
    pthread_mutex_unlock(&reg_mu);
    return e;
}

/* ---- owner entries (under mu) ------------------------------------------- */

static struct owner_entry *entry_find(uint64_t id)
{
    for (struct owner_entry *e = entries[id & 255]; e; e = e->next)
        if (e->id == id) return e;
    return NULL;
}

static struct owner_entry *entry_new(uint64_t id)
{
    struct owner_entry *e = trib_xcalloc(1, sizeof *e);
    e->id = id;
    e->state = OE_PENDING;
    e->next = entries[id & 255];
    entries[id & 255] = e;
    nentries++;
    return e;
}

static void fork_add(struct owner_entry *e, uint64_t fork)
{
    if (e->nforks == e->cap) {
        e->cap = e->cap ? 2 * e->cap : 4;
        e->forks = trib_xrealloc(e->forks, e->cap * sizeof *e->forks);
    }
    e->forks[e->nforks++] = fork;
}

static bool fork_del(struct owner_entry *e, uint64_t fork)
{
    for (size_t i = 0; i < e->nforks; i++)
        if (e->forks[i] == fork) {
            e->forks[i] = e->forks[--e->nforks];
            return true;
        }
    return false;
}

/* Unlinks e if nobody can reach it any more; returns it for destroy_entry
 * (called outside mu), else NULL. */
static struct owner_entry *entry_maybe_unlink(struct owner_entry *e)
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

static void destroy_entry(struct owner_entry *e)
{
    if (!e) return;
    if (e->is_object && e->obj && e->type.destroy) e->type.destroy(e->obj);
    rpc_value_clear(&e->value);
    free(e->err);
    free(e->forks);
    free(e);
}

static struct rref *owner_handle(struct owner_entry *e)
{
    if (e->handle) {
        atomic_fetch_add(&e->handle->refs, 1);
        return e->handle;
    }
    struct rref *r = trib_xcalloc(1, sizeof *r);
    atomic_init(&r->refs, 1);
    r->id = e->id;
    r->owner = rpc_self_id();
    r->is_owner = true;
    atomic_init(&r->confirmed, true);
    r->oe = e;
    e->handle = r;
    return r;
}

static struct rref *user_new(uint64_t id, uint64_t fork, int owner, bool confirmed)
{
    struct rref *r = trib_xcalloc(1, sizeof *r);
    atomic_init(&r->refs, 1);
    r->id = id;
    r->fork_id = fork;
    r->owner = owner;
    atomic_init(&r->confirmed, confirmed);
    return r;
}

/* ---- handles ---------------------------------------------------------------- */

struct rref *rref_retain(struct rref *r)
{
    atomic_fetch_add(&r->refs, 1);
    return r;
}

static struct rpc_value two_ints(uint64_t a, uint64_t b)
{
    struct rpc_value v = rpc_list(2);
    v.list.items[0] = rpc_int((int64_t)a);
    v.list.items[1] = rpc_int((int64_t)b);
    return v;
}

void rref_free(struct rref *r)
{
    if (!r) return;
    if (r->is_owner) {
        struct owner_entry *dead = NULL;
        pthread_mutex_lock(&mu);
        if (atomic_fetch_sub(&r->refs, 1) == 1) {
            if (r->oe) {
                r->oe->handle = NULL;
                dead = entry_maybe_unlink(r->oe);
            }
            free(r);
        }
        pthread_mutex_unlock(&mu);
        destroy_entry(dead);
        return;
    }
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    pthread_mutex_lock(&mu);
    bool up = !down;
    pthread_mutex_unlock(&mu);
    if (up) {
        /* G1: the owner hears of every user delete (tracked, so a graceful
         * shutdown waits for it). */
        struct rpc_value args = two_ints(r->id, r->fork_id);
        rpc_call_internal(r->owner, "__rref_del", &args, 0, NULL, NULL);
    }
    free(r);
}

int rref_owner(const struct rref *r) { return r->owner; }
bool rref_is_owner(const struct rref *r) { return r->is_owner; }
bool rref_confirmed_by_owner(const struct rref *r) { return atomic_load(&r->confirmed); }
uint64_t rref_id(const struct rref *r) { return r->id; }

int rref_owned_count(void)
{
    pthread_mutex_lock(&mu);
    int n = nentries;
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- fork protocol ----------------------------------------------------------- */

static void rref_pack(msgpack_packer *pk, struct rref *r, int to)
{
    uint64_t fork = rpc_gen_id();
    pthread_mutex_lock(&mu);
    if (r->is_owner) {
        if (r->oe) fork_add(r->oe, fork);
    } else {
        /* G2: keep this user (the parent) alive until the child is accepted. */
        struct child *c = trib_xmalloc(sizeof *c);
        c->fork_id = fork;
        c->r = rref_retain(r);
        c->next = children;
        children = c;
    }
    pthread_mutex_unlock(&mu);
    unsigned char d[24];
    wire_rref_desc(d, r->owner, rpc_self_id(), r->id, fork);
    msgpack_pack_ext_with_body(pk, d, sizeof d, WIRE_EXT_RREF);
    (void)to;
}

struct fork_ctx { struct rref *r; int parent; };

static void send_accept(int parent, uint64_t fork)
{
    struct rpc_value args = rpc_list(1);
    args.list.items[0] = rpc_int((int64_t)fork);
    rpc_call_internal(parent, "__rref_accept", &args, 0, NULL, NULL);
}

static void fork_acked(struct rpc_future *f, void *arg)
{
    struct fork_ctx *c = arg;
    if (!rpc_future_error(f)) atomic_store(&c->r->confirmed, true);
    send_accept(c->parent, c->r->fork_id);
    rref_free(c->r);
    free(c);
}

static struct rref *rref_unpack(int owner, int parent, uint64_t id, uint64_t fork, int from, char *err, size_t cap)
{
    int self = rpc_self_id();
    if (parent != from) {
        snprintf(err, cap, "RRef %#llx: parent %d is not the sender %d", (unsigned long long)id, parent, from);
        return NULL;
    }
    if (owner == self) {
        pthread_mutex_lock(&mu);
        struct owner_entry *e = entry_find(id);
        if (!e) {
            pthread_mutex_unlock(&mu);
            snprintf(err, cap, "unknown RRef %#llx", (unsigned long long)id);
            return NULL;
        }
        struct rref *r = owner_handle(e);
        if (parent == self) fork_del(e, fork);     /* sent to ourselves */
        pthread_mutex_unlock(&mu);
        /* From a user back to its owner: the fork is a phantom; release the
         * parent's hold on its child. */
        if (parent != self) send_accept(parent, fork);
        return r;
    }
    if (!rpc_worker_alive(owner)) {
        snprintf(err, cap, "RRef %#llx: owner %d is not a live worker", (unsigned long long)id, owner);
        return NULL;
    }
    if (parent == owner) return user_new(id, fork, owner, true);   /* the owner added the fork */
    struct rref *r = user_new(id, fork, owner, false);
    struct fork_ctx *c = trib_xmalloc(sizeof *c);
    c->r = rref_retain(r);
    c->parent = parent;
    struct rpc_value args = two_ints(id, fork);
    rpc_call_internal(owner, "__rref_fork", &args, 0, fork_acked, c);
    return r;
}

void rref_install_wire_hooks(void)
{
    static const struct wire_rref_hooks hooks = { .pack = rref_pack, .unpack = rref_unpack };
    wire_set_rref_hooks(&hooks);
}

/* ---- construction ---------------------------------------------------------- */

struct remote_job {
    struct owner_entry *oe;
    struct rpc_request *req;       /* the "__remote" request to answer, or NULL */
    char fn[256];
    struct rpc_value args;
};

static void construct(void *arg)
{
    struct remote_job *j = arg;
    struct rpc_request *lr = rpc_request_new_local(j->fn);
    struct ctor_entry *ce = find_ctor(j->fn);
    rpc_fn fn;
    void *user;
    void *obj = NULL;
    struct rpc_value val = rpc_nil();
    bool ok = false;
    if (ce) {
        obj = ce->ctor(lr, &j->args, ce->user);
        ok = obj != NULL;
        if (!ok && !rpc_request_error_text(lr)) rpc_request_fail(lr, "constructor returned NULL");
    } else if (rpc_lookup_fn(j->fn, &fn, &user)) {
        int rc = fn(lr, &j->args, &val, user);
        if (rc == RPC_DEFERRED) {
            lr = rpc_request_new_local(j->fn);
            rpc_request_fail(lr, "a deferred function cannot build an RRef");
        } else {
            ok = rc == 0;
            if (!ok && !rpc_request_error_text(lr)) rpc_request_fail(lr, "failed");
        }
    } else {
        rpc_request_fail(lr, "no constructor or function of that name");
    }
    struct owner_entry *dead;
    pthread_mutex_lock(&mu);
    struct owner_entry *e = j->oe;
    if (ok) {
        e->state = OE_READY;
        e->is_object = ce != NULL;
        if (ce) {
            e->obj = obj;
            e->type = ce->type;
        } else {
            e->value = val;
            val.kind = RPC_NIL;
        }
    } else {
        e->state = OE_FAILED;
        e->err = xstrdup(rpc_request_error_text(lr));
    }
    pthread_cond_broadcast(&ready_cv);
    const char *errtext = ok ? NULL : e->err;
    char errcopy[1024] = "";
    if (errtext) snprintf(errcopy, sizeof errcopy, "%s", errtext);
    dead = entry_maybe_unlink(e);
    pthread_mutex_unlock(&mu);
    rpc_value_clear(&val);
    if (j->req) {
        if (ok) rpc_request_complete(j->req, NULL);
        else {
            rpc_request_fail_text(j->req, errcopy);
            rpc_request_finish_error(j->req);
        }
    }
    destroy_entry(dead);
    rpc_request_free_local(lr);
    rpc_value_clear(&j->args);
    free(j);
}

static void submit_construct(struct owner_entry *oe, struct rpc_request *req, const char *fn, const struct rpc_value *args)
{
    struct remote_job *j = trib_xcalloc(1, sizeof *j);
    j->oe = oe;
    j->req = req;
    snprintf(j->fn, sizeof j->fn, "%s", fn);
    j->args = args ? rpc_value_copy(args) : rpc_list(0);
    rpc_pool_submit(construct, j);
}

static void remote_acked(struct rpc_future *f, void *arg)
{
    struct rref *r = arg;
    atomic_store(&r->confirmed, true);
    rref_free(r);
}

struct rref *rpc_remote(const char *to, const char *fn, const struct rpc_value *args, int timeout_ms)
{
    struct rpc_worker_info info;
    if (rpc_get_worker_info(to, &info) < 0) return NULL;
    if (args && args->kind != RPC_LIST) {
        rpc_set_error("rpc_remote: arguments to %s must be a list", fn);
        return NULL;
    }
    uint64_t id = rpc_gen_id();
    if (info.id == rpc_self_id()) {
        pthread_mutex_lock(&mu);
        struct owner_entry *e = entry_new(id);
        struct rref *r = owner_handle(e);
        pthread_mutex_unlock(&mu);
        submit_construct(e, NULL, fn, args);
        return r;
    }
    uint64_t fork = rpc_gen_id();
    struct rref *r = user_new(id, fork, info.id, false);
    struct rpc_value a = rpc_list(4);
    a.list.items[0] = rpc_int((int64_t)id);
    a.list.items[1] = rpc_int((int64_t)fork);
    a.list.items[2] = rpc_str(fn);
    a.list.items[3] = args ? rpc_value_copy(args) : rpc_list(0);
    rpc_call_internal(info.id, "__remote", &a, timeout_ms, remote_acked, rref_retain(r));
    return r;
}

struct rref *rref_new_local_value(struct rpc_value *v)
{
    CHECK(rpc_self_id() >= 0);
    pthread_mutex_lock(&mu);
    struct owner_entry *e = entry_new(rpc_gen_id());
    e->state = OE_READY;
    e->value = *v;
    *v = rpc_nil();
    struct rref *r = owner_handle(e);
    pthread_mutex_unlock(&mu);
    return r;
}

/* ---- builtins ---------------------------------------------------------------- */

static bool arg_u64(const struct rpc_value *args, size_t i, uint64_t *out)
{
    if (args->kind != RPC_LIST || i >= args->list.len || args->list.items[i].kind != RPC_INT) return false;
    *out = (uint64_t)args->list.items[i].i;
    return true;
}

/* inline: [id, fork, fn, args] from the creator */
static int bi_remote(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id, fork;
    if (!arg_u64(args, 0, &id) || !arg_u64(args, 1, &fork) || args->list.len != 4 ||
        args->list.items[2].kind != RPC_STR || args->list.items[3].kind != RPC_LIST)
        return rpc_request_fail(req, "bad arguments");
    pthread_mutex_lock(&mu);
    if (entry_find(id)) {
        pthread_mutex_unlock(&mu);
        return rpc_request_fail(req, "RRef %#llx exists", (unsigned long long)id);
    }
    struct owner_entry *e = entry_new(id);
    fork_add(e, fork);
    struct parked_fork *ready = NULL;
    for (struct parked_fork **pp = &parked; *pp;) {
        struct parked_fork *p = *pp;
        if (p->id != id) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        nparked--;
        fork_add(e, p->fork);
        p->next = ready;
        ready = p;
    }
    pthread_mutex_unlock(&mu);
    while (ready) {                     /* the early forks are registered now */
        struct parked_fork *next = ready->next;
        rpc_request_complete(ready->req, NULL);
        free(ready);
        ready = next;
    }
    submit_construct(e, req, args->list.items[2].str.ptr, &args->list.items[3]);
    return RPC_DEFERRED;
}

/* inline: [id, fork] from a child whose parent was a user */
static int bi_fork(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id, fork;
    if (!arg_u64(args, 0, &id) || !arg_u64(args, 1, &fork)) return rpc_request_fail(req, "bad arguments");
    int creator = (int)(id >> 48);
    bool creator_alive = creator != rpc_self_id() && rpc_worker_alive(creator);   /* before mu */
    pthread_mutex_lock(&mu);
    struct owner_entry *e = entry_find(id);
    if (e) fork_add(e, fork);
    /* Not created yet, by another live worker: its __remote is probably on
     * the way. It may also never come (a forged descriptor): the fork
     * waits at most the default timeout, never past the start of shutdown,
     * and does not hold a graceful shutdown up. */
    bool wait = !e && !down && !closing && creator_alive;
    if (wait && nparked >= RREF_MAX_PARKED) {
        pthread_mutex_unlock(&mu);
        atomic_fetch_add(&rpc_counters.busy, 1);
        return rpc_request_fail(req, "%d fork registrations already wait for their RRefs", RREF_MAX_PARKED);
    }
    if (wait) {
        int t = rpc_agent_state.opts.default_timeout_ms;
        struct parked_fork *p = trib_xmalloc(sizeof *p);
        *p = (struct parked_fork){parked, id, fork, rpc_now_ms() + (t > 0 ? t : 60000), req};
        parked = p;
        nparked++;
        rpc_request_uncount(req);
        pthread_mutex_unlock(&mu);
        return RPC_DEFERRED;
    }
    pthread_mutex_unlock(&mu);
    return e ? 0 : rpc_request_fail(req, "unknown RRef %#llx", (unsigned long long)id);
}

/* Fails the parked forks whose deadline is past at `now` (all of them when now is 0). */
static void fail_parked(int64_t now, const char *why)
{
    struct parked_fork *gone = NULL;
    pthread_mutex_lock(&mu);
    for (struct parked_fork **pp = &parked; *pp;) {
        struct parked_fork *p = *pp;
        if (now && now < p->deadline) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        nparked--;
        p->next = gone;
        gone = p;
    }
    pthread_mutex_unlock(&mu);
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
    snprintf(why, sizeof why, "was not created here within %d ms", rpc_agent_state.opts.default_timeout_ms);
    fail_parked(now, why);
}

void rref_module_closing(void)
{
    pthread_mutex_lock(&mu);
    closing = true;
    pthread_mutex_unlock(&mu);
    fail_parked(0, "was not created here before shutdown");
}

/* inline: [id, fork] a user is gone */
static int bi_del(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id, fork;
    if (!arg_u64(args, 0, &id) || !arg_u64(args, 1, &fork)) return rpc_request_fail(req, "bad arguments");
    pthread_mutex_lock(&mu);
    struct owner_entry *e = entry_find(id), *dead = NULL;
    bool had = e && fork_del(e, fork);
    if (had) dead = entry_maybe_unlink(e);
    pthread_mutex_unlock(&mu);
    destroy_entry(dead);
    if (!e) return rpc_request_fail(req, "unknown RRef %#llx", (unsigned long long)id);
    if (!had) return rpc_request_fail(req, "RRef %#llx has no fork %#llx", (unsigned long long)id, (unsigned long long)fork);
    return 0;
}

/* inline: [fork] the child of one of our users is confirmed */
static int bi_accept(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t fork;
    if (!arg_u64(args, 0, &fork)) return rpc_request_fail(req, "bad arguments");
    pthread_mutex_lock(&mu);
    struct child *c = NULL;
    for (struct child **pp = &children; *pp; pp = &(*pp)->next)
        if ((*pp)->fork_id == fork) {
            c = *pp;
            *pp = c->next;
            break;
        }
    pthread_mutex_unlock(&mu);
    if (!c) return rpc_request_fail(req, "no pending child %#llx", (unsigned long long)fork);
    rref_free(c->r);
    free(c);
    return 0;
}

/* Waits for construction, at most timeout_ms (<= 0: no limit); returns the
 * entry (under mu) or NULL with err. */
static struct owner_entry *wait_ready_for(uint64_t id, int timeout_ms, char *err, size_t cap)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    struct owner_entry *e = entry_find(id);
    while (e && e->state == OE_PENDING) {
        if (timeout_ms <= 0) {
            pthread_cond_wait(&ready_cv, &mu);
        } else if (pthread_cond_timedwait(&ready_cv, &mu, &until) == ETIMEDOUT) {
            e = entry_find(id);
            if (e && e->state == OE_PENDING) {
                snprintf(err, cap, "rpc: timed out after %d ms waiting for RRef %#llx to be built", timeout_ms,
                         (unsigned long long)id);
                return NULL;
            }
            continue;
        }
        e = entry_find(id);
    }
    if (!e) snprintf(err, cap, "unknown RRef %#llx", (unsigned long long)id);
    else if (e->state == OE_FAILED) snprintf(err, cap, "%s", e->err);
    else return e;
    return NULL;
}

static struct owner_entry *wait_ready(uint64_t id, char *err, size_t cap) { return wait_ready_for(id, 0, err, cap); }

/* Under mu. An object's to_value (user code, maybe slow) runs with mu
 * released and the entry pinned, so that the inline RRef builtins on the
 * I/O thread never wait for it; e may be gone when this returns. */
static int entry_value(struct owner_entry *e, struct rpc_value *out, char *err, size_t cap)
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
    struct rref *pin = owner_handle(e);
    pthread_mutex_unlock(&mu);
    int rc = to_value(obj, out);
    if (rc < 0) snprintf(err, cap, "%s to_value failed: %s", type_name, rpc_last_error());
    rref_free(pin);
    pthread_mutex_lock(&mu);
    return rc < 0 ? -1 : 0;
}

/* pool: [id] */
static int bi_fetch(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id;
    char err[1024];
    if (!arg_u64(args, 0, &id)) return rpc_request_fail(req, "bad arguments");
    pthread_mutex_lock(&mu);
    struct owner_entry *e = wait_ready(id, err, sizeof err);
    int rc = e ? entry_value(e, result, err, sizeof err) : -1;
    pthread_mutex_unlock(&mu);
    if (rc < 0) {
        rpc_request_fail_text(req, err);
        return -1;
    }
    return 0;
}

/* pool, after bi_call: [id, method, [args...]], u = the pin on the entry */
static int bi_call_run(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    struct rref *pin = u;
    uint64_t id = pin->id;
    char err[1024];
    const char *method = args->list.items[1].str.ptr;
    pthread_mutex_lock(&mu);
    struct owner_entry *e = wait_ready(id, err, sizeof err);
    void *obj = e ? e->obj : NULL;
    bool is_object = e && e->is_object;
    const char *type_name = e ? e->type.name : NULL;
    pthread_mutex_unlock(&mu);
    int rc;
    if (!e) {
        rpc_request_fail_text(req, err);
        rc = -1;
    } else if (!is_object) {
        rc = rpc_request_fail(req, "RRef %#llx holds a value, not an object", (unsigned long long)id);
    } else {
        struct method_entry *m = find_method(type_name, method);
        rc = m ? m->fn(req, obj, &args->list.items[2], result, m->user)
               : rpc_request_fail(req, "type %s has no method '%s'", type_name, method);
    }
    rref_free(pin);
    return rc;
}

/* inline: [id, method, [args...]]. Pins the entry on arrival, so that the
 * caller's user deleted after the call (its __rref_del runs inline too)
 * cannot destroy the object before or while the method runs; the method
 * then runs on a handler thread. */
static int bi_call(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id;
    if (!arg_u64(args, 0, &id) || args->list.len != 3 || args->list.items[1].kind != RPC_STR ||
        args->list.items[2].kind != RPC_LIST)
        return rpc_request_fail(req, "bad arguments");
    pthread_mutex_lock(&mu);
    struct owner_entry *e = entry_find(id);
    struct rref *pin = e ? owner_handle(e) : NULL;
    pthread_mutex_unlock(&mu);
    char err[128];
    if (!pin) {
        snprintf(err, sizeof err, "unknown RRef %#llx", (unsigned long long)id);
        rpc_request_fail_text(req, err);
        return -1;
    }
    req->handler = bi_call_run;
    req->user = pin;
    if (!rpc_pool_push(req)) {
        rref_free(pin);
        snprintf(err, sizeof err, "rpc: %s: busy: %d requests waiting for a handler", rpc_self_name(), MAX_QUEUE);
        rpc_request_fail_text(req, err);
        return -1;
    }
    return RPC_DEFERRED;
}

void rref_register_builtins(void)
{
    rpc_register_ex("__remote", bi_remote, NULL, RPC_FN_INLINE);
    rpc_register_ex("__rref_fork", bi_fork, NULL, RPC_FN_INLINE);
    rpc_register_ex("__rref_del", bi_del, NULL, RPC_FN_INLINE);
    rpc_register_ex("__rref_accept", bi_accept, NULL, RPC_FN_INLINE);
    rpc_register("__rref_fetch", bi_fetch, NULL);
    rpc_register_ex("__rref_call", bi_call, NULL, RPC_FN_INLINE);
}

/* ---- user-facing operations ----------------------------------------------- */

int rref_to_here(struct rref *r, struct rpc_value *out, int timeout_ms)
{
    if (r->is_owner) {
        char err[1024];
        pthread_mutex_lock(&mu);
        if (timeout_ms == 0) timeout_ms = rpc_agent_state.opts.default_timeout_ms;
        struct owner_entry *e = r->oe ? wait_ready_for(r->id, timeout_ms, err, sizeof err) : NULL;
        if (!r->oe) snprintf(err, sizeof err, "rpc: RRef used after shutdown");
        int rc = e ? entry_value(e, out, err, sizeof err) : -1;
        pthread_mutex_unlock(&mu);
        return rc < 0 ? rpc_set_error("%s", err) : 0;
    }
    struct rpc_value args = rpc_list(1);
    args.list.items[0] = rpc_int((int64_t)r->id);
    struct rpc_future *f = rpc_async_id(r->owner, "__rref_fetch", &args, timeout_ms);
    rpc_value_clear(&args);
    int rc = rpc_future_wait(f, out);
    rpc_future_free(f);
    return rc;
}

/* Owner side: waits for construction; the entry (under mu) or NULL. */
static struct owner_entry *local_entry(struct rref *r, const char *who, char *err, size_t cap)
{
    if (!r->is_owner || !r->oe) {
        snprintf(err, cap, "%s: this worker is not the owner", who);
        return NULL;
    }
    char why[1024];
    struct owner_entry *e = wait_ready(r->id, why, sizeof why);
    if (!e) snprintf(err, cap, "%s: %s", who, why);
    return e;
}

const struct rpc_value *rref_local_value(struct rref *r)
{
    char err[1200];
    pthread_mutex_lock(&mu);
    struct owner_entry *e = local_entry(r, "rref_local_value", err, sizeof err);
    if (e && e->is_object) {
        snprintf(err, sizeof err, "rref_local_value: the RRef holds an object of type %s", e->type.name);
        e = NULL;
    }
    pthread_mutex_unlock(&mu);
    if (!e) rpc_set_error("%s", err);
    return e ? &e->value : NULL;
}

void *rref_local_object(struct rref *r)
{
    char err[1200];
    pthread_mutex_lock(&mu);
    struct owner_entry *e = local_entry(r, "rref_local_object", err, sizeof err);
    if (e && !e->is_object) {
        snprintf(err, sizeof err, "rref_local_object: the RRef holds a value");
        e = NULL;
    }
    void *obj = e ? e->obj : NULL;
    pthread_mutex_unlock(&mu);
    if (!e) rpc_set_error("%s", err);
    return obj;
}

struct rpc_future *rref_rpc_async(struct rref *r, const char *method, const struct rpc_value *args, int timeout_ms)
{
    struct rpc_value a = rpc_list(3);
    a.list.items[0] = rpc_int((int64_t)r->id);
    a.list.items[1] = rpc_str(method);
    a.list.items[2] = args && args->kind == RPC_LIST ? rpc_value_copy(args) : rpc_list(0);
    struct rpc_future *f = rpc_async_id(r->owner, "__rref_call", &a, timeout_ms);
    rpc_value_clear(&a);
    return f;
}

int rref_rpc_sync(struct rref *r, const char *method, const struct rpc_value *args,
                  struct rpc_value *result, int timeout_ms)
{
    struct rpc_future *f = rref_rpc_async(r, method, args, timeout_ms);
    int rc = rpc_future_wait(f, result);
    rpc_future_free(f);
    return rc;
}

/* ---- lifetime of the module ----------------------------------------------- */

void rref_module_init(void)
{
    pthread_mutex_lock(&mu);
    down = false;
    closing = false;
    pthread_mutex_unlock(&mu);
}

void rref_module_shutdown(void)
{
    pthread_mutex_lock(&mu);
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
    struct child *c = children;
    children = NULL;
    struct parked_fork *pf = parked;    /* the I/O thread is gone: no replies */
    parked = NULL;
    nparked = 0;
    pthread_mutex_unlock(&mu);
    while (pf) {
        struct parked_fork *next = pf->next;
        rpc_request_free(pf->req);
        free(pf);
        pf = next;
    }
    while (all) {
        struct owner_entry *next = all->next;
        destroy_entry(all);
        all = next;
    }
    while (c) {
        struct child *next = c->next;
        rref_free(c->r);
        free(c);
        c = next;
    }
}
