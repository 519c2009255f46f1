/* RRef handles and what a user does with them: references (a user's last
 * one tells the owner, G1), to_here and the rref_rpc_sync/async proxies.
 * The owner table is rref_owner.c's, what it holds rref_objects.c's and
 * the fork protocol, by which RRefs travel, rref_fork.c's. */
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "rpc/rref_internal.h"

/* ---- handles ---------------------------------------------------------------- */

struct rref *rref_handle_new(uint64_t id, uint64_t fork, int owner, bool confirmed)
{
    rref_install_hooks();        /* an owner's handle can be made before rpc_init */
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
    bool up = !rref_down;
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

/* ---- user-facing operations ----------------------------------------------- */

int rref_to_here(struct rref *r, struct rpc_value *out, int timeout_ms)
{
    if (r->is_owner) {
        char err[1024];
        pthread_mutex_lock(&rref_mu);
        if (timeout_ms == 0) timeout_ms = rpc_default_timeout_ms();
        struct owner_entry *e = r->oe ? rref_entry_wait(r->id, timeout_ms, err, sizeof err) : NULL;
        if (!r->oe) snprintf(err, sizeof err, "rpc: RRef used after shutdown");
        int rc = e ? rref_entry_value(e, out, err, sizeof err) : -1;
        pthread_mutex_unlock(&rref_mu);
        return rc < 0 ? rpc_set_error("%s", err) : 0;
    }
    struct rpc_value args = rpc_list(1);
    args.list.items[0] = rpc_int((int64_t)r->id);
    struct rpc_future *f = rpc_async_id(r->owner, "__rref_fetch", &args, timeout_ms);
    rpc_value_clear(&args);
    int rc = rpc_future_take(f, out);
    rpc_future_free(f);
    return rc;
}

struct rpc_future *rref_rpc_async(struct rref *r, const char *method, const struct rpc_value *args, int timeout_ms)
{
    /* [id, method, args]: built on the stack, the method name and the
     * arguments borrowed (the message is encoded before rpc_async_id
     * returns), so nothing is copied but into the wire buffer. */
    struct rpc_value items[3] = {
        rpc_int((int64_t)r->id),
        { .kind = RPC_STR, .str = { (char *)method, strlen(method) } },
        args && args->kind == RPC_LIST ? *args : (struct rpc_value){ .kind = RPC_LIST },
    };
    struct rpc_value a = { .kind = RPC_LIST, .list = { items, 3 } };
    return rpc_async_id(r->owner, "__rref_call", &a, timeout_ms);
}

int rref_rpc_sync(struct rref *r, const char *method, const struct rpc_value *args,
                  struct rpc_value *result, int timeout_ms)
{
    struct rpc_future *f = rref_rpc_async(r, method, args, timeout_ms);
    int rc = rpc_future_take(f, result);
    rpc_future_free(f);
    return rc;
}

void rref_register_builtins(void)
{
    rref_objects_register_builtins();
    rref_owner_register_builtins();
    rref_fork_register_builtins();
}
