/* What an RRef's owner holds and does with it: the constructor and method
 * registries, building an object or value (rpc_remote on the creator,
 * __remote on the owner), fetching its value (__rref_fetch) and calling a
 * method on it (__rref_call). Above rref_owner.c and rref_fork.c
 * (rrefs.h lists the order), which it calls; calls nothing in
 * rref.c. Owns the registries below. */
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "rpc/rrefs.h"

struct ctor_entry { struct ctor_entry *next; char *name; struct rpc_type type; char *type_name; rpc_ctor ctor; void *user; };

/* The method registry. A type's methods live in its rref_type_methods,
 * found by name once, when an object of the type is built (and kept in
 * its owner entry); a call then finds its method by one hash probe in that
 * table, not by a scan of every registered method. Types, methods and
 * their implementations are never freed, so what a call resolved stays
 * valid; registering a method again swaps in a new implementation (the
 * old one is kept: a few bytes per re-registration), which every later
 * call sees, whether its object was built before or after. */
#define METHOD_BUCKETS 32
struct method_impl { rpc_method fn; void *user; unsigned flags; struct method_impl *older; /* the one it replaced */ };
struct method_entry {
    struct method_entry *next;
    char *name;
    size_t len;
    unsigned hash;
    _Atomic(struct method_impl *) impl;
};
struct rref_type_methods {
    struct rref_type_methods *next;
    char *type_name;
    struct method_entry *buckets[METHOD_BUCKETS];   /* under methods_lock */
};

/* Lock rules: reg_mu guards the lists ctors and types; methods_lock every
 * type's buckets (a method's impl is swapped atomically under it, read
 * without it by a call that resolved it). methods_lock may be taken with
 * rref_mu held (resolve), never the other way round; neither is held while
 * a constructor or method runs. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t methods_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct ctor_entry *ctors;
static struct rref_type_methods *types;

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    CHECK_ALLOC(d);
    return d;
}

static unsigned name_hash(const char *s, size_t n)
{
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
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

/* The method table of type_name, made on first use. Never NULL. */
static struct rref_type_methods *type_methods(const char *type_name)
{
    pthread_mutex_lock(&reg_mu);
    struct rref_type_methods *t = types;
    while (t && strcmp(t->type_name, type_name) != 0) t = t->next;
    if (!t) {
        t = trib_xcalloc(1, sizeof *t);
        t->type_name = xstrdup(type_name);
        t->next = types;
        types = t;
    }
    pthread_mutex_unlock(&reg_mu);
    return t;
}

static struct method_entry *method_find_locked(struct rref_type_methods *t, const char *name, size_t n, unsigned h)
{
    for (struct method_entry *m = t->buckets[h % METHOD_BUCKETS]; m; m = m->next)
        if (m->hash == h && m->len == n && memcmp(m->name, name, n) == 0) return m;
    return NULL;
}

void rpc_register_method_ex(const char *type_name, const char *name, rpc_method fn, void *user, unsigned flags)
{
    struct rref_type_methods *t = type_methods(type_name);
    struct method_impl *impl = trib_xmalloc(sizeof *impl);
    *impl = (struct method_impl){ .fn = fn, .user = user, .flags = flags };
    size_t n = strlen(name);
    unsigned h = name_hash(name, n);
    pthread_rwlock_wrlock(&methods_lock);
    struct method_entry *m = method_find_locked(t, name, n, h);
    if (!m) {
        m = trib_xcalloc(1, sizeof *m);
        m->name = xstrdup(name);
        m->len = n;
        m->hash = h;
        m->next = t->buckets[h % METHOD_BUCKETS];
        t->buckets[h % METHOD_BUCKETS] = m;
    }
    impl->older = atomic_load(&m->impl);
    atomic_store(&m->impl, impl);
    pthread_rwlock_unlock(&methods_lock);
}

void rpc_register_method(const char *type_name, const char *name, rpc_method fn, void *user)
{
    rpc_register_method_ex(type_name, name, fn, user, 0);
}

static struct ctor_entry *find_ctor(const char *name)
{
    pthread_mutex_lock(&reg_mu);
    struct ctor_entry *e = ctors;
    while (e && strcmp(e->name, name) != 0) e = e->next;
    pthread_mutex_unlock(&reg_mu);
    return e;
}

/* The implementation of method `name` of t now; NULL if none. */
static struct method_impl *find_method(struct rref_type_methods *t, const char *name)
{
    size_t n = strlen(name);
    unsigned h = name_hash(name, n);
    pthread_rwlock_rdlock(&methods_lock);
    struct method_entry *m = method_find_locked(t, name, n, h);
    struct method_impl *impl = m ? atomic_load(&m->impl) : NULL;
    pthread_rwlock_unlock(&methods_lock);
    return impl;
}

/* ---- construction ---------------------------------------------------------- */

/* Builds entry oe by running the constructor or function fn(args) on a
 * handler thread (construct), then answers req (the __remote to complete,
 * or NULL). */

struct remote_job {
    struct owner_entry *oe;
    struct rpc_request *req;       /* the "__remote" request to answer, or NULL */
    char fn[256];
    const struct rpc_value *args;  /* borrowed from req, or own_args */
    struct rpc_value own_args;
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
    struct rref_type_methods *methods = ce ? type_methods(ce->type.name) : NULL;
    if (ce) {
        obj = ce->ctor(lr, j->args, ce->user);
        ok = obj != NULL;
        if (!ok && !rpc_request_error_text(lr)) rpc_request_fail(lr, "constructor returned NULL");
    } else if (rpc_lookup_fn(j->fn, &fn, &user)) {
        int rc = fn(lr, j->args, &val, user);
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
    char errcopy[1024] = "";
    rref_lock();
    struct owner_entry *e = j->oe;
    if (ok && ce) rref_entry_set_object(e, obj, &ce->type, methods);
    else if (ok) rref_entry_set_value(e, &val);
    else {
        rref_entry_set_failed(e, rpc_request_error_text(lr));
        snprintf(errcopy, sizeof errcopy, "%s", e->err);
    }
    dead = rref_entry_unlink_if_unused(e);
    rref_unlock();
    rpc_value_clear(&val);
    if (j->req) {
        if (ok) rpc_request_complete(j->req, NULL);
        else {
            rpc_request_fail_text(j->req, errcopy);
            rpc_request_finish_error(j->req);
        }
    }
    rref_entry_destroy(dead);
    rpc_request_free_local(lr);
    rpc_value_clear(&j->own_args);
    free(j);
}

static void submit_construct(struct owner_entry *oe, struct rpc_request *req, const char *fn, const struct rpc_value *args)
{
    struct remote_job *j = trib_xcalloc(1, sizeof *j);
    j->oe = oe;
    j->req = req;
    snprintf(j->fn, sizeof j->fn, "%s", fn);
    /* A __remote's arguments live as long as its request, which construct
     * answers only after the constructor ran: borrowed, not copied. A
     * local rpc_remote's belong to its caller, who may free them at once. */
    if (req && args) {
        j->args = args;
    } else {
        j->own_args = args ? rpc_value_copy(args) : rpc_list(0);
        j->args = &j->own_args;
    }
    rpc_pool_submit(construct, j);
}

static void remote_acked(struct rpc_future *f, void *arg)
{
    struct rref *r = arg;
    rref_set_confirmed(r);
    rref_free(r);
}

/* The value hooks are in when this makes a handle: rpc_get_worker_info
 * succeeds only with the agent up, after rref_module_init. */
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
        rref_lock();
        struct owner_entry *e = rref_entry_new(id);
        struct rref *r = rref_entry_handle(e);
        rref_unlock();
        submit_construct(e, NULL, fn, args);
        return r;
    }
    uint64_t fork = rpc_gen_id();
    struct rref *r = rref_handle_new(id, fork, info.id, false);
    struct rpc_value a = rpc_list(4);
    a.list.items[0] = rpc_int((int64_t)id);
    a.list.items[1] = rpc_int((int64_t)fork);
    a.list.items[2] = rpc_str(fn);
    a.list.items[3] = args ? *args : (struct rpc_value){ .kind = RPC_LIST };   /* borrowed: encoded before the call returns */
    struct rpc_future *f = rpc_async_id(info.id, "__remote", &a, timeout_ms);
    a.list.items[3] = rpc_nil();
    rpc_value_clear(&a);
    rpc_call_track(f, remote_acked, rref_retain(r));
    return r;
}

/* inline: [id, fork, fn, args] from the creator */
static int bi_remote(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id, fork;
    if (!rref_arg_u64(args, 0, &id) || !rref_arg_u64(args, 1, &fork) || args->list.len != 4 ||
        args->list.items[2].kind != RPC_STR || args->list.items[3].kind != RPC_LIST)
        return rpc_request_fail(req, "bad arguments");
    struct owner_entry *e = rref_entry_new_remote(id, fork, rpc_request_caller_id(req));
    if (!e) return rpc_request_fail(req, "RRef %#llx exists", (unsigned long long)id);
    submit_construct(e, req, args->list.items[2].str.ptr, &args->list.items[3]);
    return RPC_DEFERRED;
}

/* ---- use ---------------------------------------------------------------------- */

/* The refusal of a worker that holds no fork of RRef id here (an unknown
 * RRef alike, so that ids cannot be probed). */
static void refuse_non_holder(struct rpc_request *req, uint64_t id)
{
    char who[64];
    rpc_peer_name(rpc_request_caller_id(req), who, sizeof who);
    rpc_request_fail(req, "%s holds no fork of RRef %#llx", who, (unsigned long long)id);
}

/* pool: [id], from a holder of one of its forks (as its connection proved) */
static int bi_fetch(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id;
    char err[1024];
    if (!rref_arg_u64(args, 0, &id)) return rpc_request_fail(req, "bad arguments");
    rref_lock();
    struct owner_entry *held = rref_entry_find(id);
    if (!held || !rref_entry_held_by(held, rpc_request_caller_id(req))) {
        rref_unlock();
        refuse_non_holder(req, id);
        return -1;
    }
    struct owner_entry *e = rref_entry_wait(id, 0, err, sizeof err);
    int rc = e ? rref_entry_value(e, result, err, sizeof err) : -1;
    rref_unlock();
    if (rc < 0) {
        rpc_request_fail_text(req, err);
        return -1;
    }
    return 0;
}

/* Runs the method a call resolved: pin (req->user) keeps the entry, and so
 * its object, alive until it returns. */
static int run_method(struct rpc_request *req, struct rref *pin, void *obj, const struct method_impl *impl,
                      const struct rpc_value *args, struct rpc_value *result)
{
    int rc = impl->fn(req, obj, &args->list.items[2], result, impl->user);
    rref_free(pin);
    return rc;
}

/* What a call needs to know of its entry: the object and the method to run
 * on it (rref_mu held; e ready). NULL with the request failed. */
static const struct method_impl *resolve(struct rpc_request *req, const struct owner_entry *e, const char *method)
{
    if (!e->is_object) {
        rpc_request_fail(req, "RRef %#llx holds a value, not an object", (unsigned long long)e->id);
        return NULL;
    }
    const struct method_impl *impl = find_method(e->methods, method);
    if (!impl) rpc_request_fail(req, "type %s has no method '%s'", e->type.name, method);
    return impl;
}

/* pool: a method call resolved on arrival (req->user the pin, req->user2
 * the method); the object is built, so no lock is taken. */
static int bi_call_ready(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    struct rref *pin = u;
    return run_method(req, pin, pin->oe->obj, req->user2, args, result);
}

/* pool: a method call on an object still being built: waits for it, then
 * resolves and runs the method. */
static int bi_call_wait(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    struct rref *pin = u;
    char err[1024];
    rref_lock();
    struct owner_entry *e = rref_entry_wait(pin->id, 0, err, sizeof err);
    const struct method_impl *impl = e ? resolve(req, e, args->list.items[1].str.ptr) : NULL;
    void *obj = e ? e->obj : NULL;
    rref_unlock();
    if (!e) rpc_request_fail_text(req, err);
    if (!impl) {
        rref_free(pin);
        return -1;
    }
    return run_method(req, pin, obj, impl, args, result);
}

/* inline: [id, method, [args...]], from a holder of one of the RRef's
 * forks (as its connection proved). Dispatched once: it pins the entry on
 * arrival (so that the caller's user deleted after the call, whose
 * __rref_del runs inline too, cannot destroy the object before or while
 * the method runs) and resolves the method; a method registered
 * RPC_FN_INLINE then runs right here, any other on a handler thread. */
static int bi_call(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id;
    if (!rref_arg_u64(args, 0, &id) || args->list.len != 3 || args->list.items[1].kind != RPC_STR ||
        args->list.items[2].kind != RPC_LIST)
        return rpc_request_fail(req, "bad arguments");
    const char *method = args->list.items[1].str.ptr;
    const struct method_impl *impl = NULL;
    void *obj = NULL;
    bool failed = false;
    rref_lock();
    struct owner_entry *e = rref_entry_find(id);
    if (!e || !rref_entry_held_by(e, rpc_request_caller_id(req))) {
        rref_unlock();
        refuse_non_holder(req, id);
        return -1;
    }
    struct rref *pin = rref_entry_handle(e);
    if (e && e->state == OE_READY) {
        impl = resolve(req, e, method);
        obj = e->obj;
        failed = !impl;
    } else if (e && e->state == OE_FAILED) {
        rpc_request_fail_text(req, e->err);
        failed = true;
    }
    rref_unlock();
    char err[128];
    if (failed) {
        rref_free(pin);
        return -1;
    }
    if (impl && (impl->flags & RPC_FN_INLINE)) return run_method(req, pin, obj, impl, args, result);
    rpc_request_route(req, impl ? bi_call_ready : bi_call_wait, pin, (void *)impl);
    if (!rpc_pool_push(req)) {
        rref_free(pin);
        snprintf(err, sizeof err, "rpc: %s: busy: %d requests waiting for a handler", rpc_self_name(), MAX_QUEUE);
        rpc_request_fail_text(req, err);
        return -1;
    }
    return RPC_DEFERRED;
}

void rref_objects_register_builtins(void)
{
    rpc_register_ex("__remote", bi_remote, NULL, RPC_FN_INLINE);
    rpc_register("__rref_fetch", bi_fetch, NULL);
    rpc_register_ex("__rref_call", bi_call, NULL, RPC_FN_INLINE);
}
