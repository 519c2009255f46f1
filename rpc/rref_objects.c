/* What an RRef's owner holds and does with it: the constructor and method
 * registries, building an object or value (rpc_remote on the creator,
 * __remote on the owner), fetching its value (__rref_fetch) and calling a
 * method on it (__rref_call). */
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "rpc/rref_internal.h"

struct ctor_entry { struct ctor_entry *next; char *name; struct rpc_type type; char *type_name; rpc_ctor ctor; void *user; };
struct method_entry { struct method_entry *next; char *type_name, *name; rpc_method fn; void *user; };

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
    pthread_mutex_lock(&rref_mu);
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
    pthread_cond_broadcast(&rref_ready_cv);
    const char *errtext = ok ? NULL : e->err;
    char errcopy[1024] = "";
    if (errtext) snprintf(errcopy, sizeof errcopy, "%s", errtext);
    dead = rref_entry_unlink_if_unused(e);
    pthread_mutex_unlock(&rref_mu);
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
    rpc_value_clear(&j->args);
    free(j);
}

void rref_submit_construct(struct owner_entry *oe, struct rpc_request *req, const char *fn, const struct rpc_value *args)
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
        pthread_mutex_lock(&rref_mu);
        struct owner_entry *e = rref_entry_new(id);
        struct rref *r = rref_entry_handle(e);
        pthread_mutex_unlock(&rref_mu);
        rref_submit_construct(e, NULL, fn, args);
        return r;
    }
    uint64_t fork = rpc_gen_id();
    struct rref *r = rref_handle_new(id, fork, info.id, false);
    struct rpc_value a = rpc_list(4);
    a.list.items[0] = rpc_int((int64_t)id);
    a.list.items[1] = rpc_int((int64_t)fork);
    a.list.items[2] = rpc_str(fn);
    a.list.items[3] = args ? rpc_value_copy(args) : rpc_list(0);
    rpc_call_internal(info.id, "__remote", &a, timeout_ms, remote_acked, rref_retain(r));
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
    rref_submit_construct(e, req, args->list.items[2].str.ptr, &args->list.items[3]);
    return RPC_DEFERRED;
}

/* ---- use ---------------------------------------------------------------------- */

/* pool: [id] */
static int bi_fetch(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t id;
    char err[1024];
    if (!rref_arg_u64(args, 0, &id)) return rpc_request_fail(req, "bad arguments");
    pthread_mutex_lock(&rref_mu);
    struct owner_entry *e = rref_entry_wait(id, 0, err, sizeof err);
    int rc = e ? rref_entry_value(e, result, err, sizeof err) : -1;
    pthread_mutex_unlock(&rref_mu);
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
    pthread_mutex_lock(&rref_mu);
    struct owner_entry *e = rref_entry_wait(id, 0, err, sizeof err);
    void *obj = e ? e->obj : NULL;
    bool is_object = e && e->is_object;
    const char *type_name = e ? e->type.name : NULL;
    pthread_mutex_unlock(&rref_mu);
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
    if (!rref_arg_u64(args, 0, &id) || args->list.len != 3 || args->list.items[1].kind != RPC_STR ||
        args->list.items[2].kind != RPC_LIST)
        return rpc_request_fail(req, "bad arguments");
    pthread_mutex_lock(&rref_mu);
    struct owner_entry *e = rref_entry_find(id);
    struct rref *pin = e ? rref_entry_handle(e) : NULL;
    pthread_mutex_unlock(&rref_mu);
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

void rref_objects_register_builtins(void)
{
    rpc_register_ex("__remote", bi_remote, NULL, RPC_FN_INLINE);
    rpc_register("__rref_fetch", bi_fetch, NULL);
    rpc_register_ex("__rref_call", bi_call, NULL, RPC_FN_INLINE);
}
