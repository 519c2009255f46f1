/* The top of the RRef module (rrefs.h lists the order): its life,
 * which is all the core calls (rref_module_init/closing/shutdown,
 * rref_expire_parked, rref_register_builtins, rref_install_hooks), and
 * what a user does with a handle: to_here, the rref_rpc_sync/async
 * proxies, rref_new_local_value. Calls the files below it (rref_owner.c,
 * rref_fork.c, rref_objects.c); none of them calls this one. Keeps no
 * state of its own. */
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "rpc/rrefs.h"

/* ---- the module's life ------------------------------------------------------ */

static void install_hooks(void)
{
    static const struct rpc_rref_hooks hooks = {
        .fork = rref_fork_out, .unfork = rref_fork_in, .retain = rref_retain, .release = rref_free,
        .id = rref_id, .peer_gone = rref_fork_peer_gone,
    };
    rpc_set_rref_hooks(&hooks);
}

void rref_install_hooks(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_hooks);
}

void rref_register_builtins(void)
{
    rref_objects_register_builtins();
    rref_owner_register_builtins();
    rref_fork_register_builtins();
}

void rref_module_init(void)
{
    rref_install_hooks();
    rref_owner_open();
    rref_fork_open();
}

void rref_module_closing(void) { rref_fork_closing(); }

void rref_expire_parked(int64_t now) { rref_fork_expire_parked(now); }

void rref_module_shutdown(void)
{
    rref_owner_shutdown();
    rref_fork_shutdown();
}

/* ---- handles a user makes ------------------------------------------------------ */

/* The hooks first: an owner's handle can be made before rpc_init. */
struct rref *rref_new_local_value(struct rpc_value *v)
{
    CHECK(rpc_self_id() >= 0);
    rref_install_hooks();
    rref_lock();
    struct owner_entry *e = rref_entry_new(rpc_gen_id());
    rref_entry_set_value(e, v);
    struct rref *r = rref_entry_handle(e);
    rref_unlock();
    return r;
}

/* ---- user-facing operations ----------------------------------------------- */

int rref_to_here(struct rref *r, struct rpc_value *out, int timeout_ms)
{
    if (r->is_owner) {
        char err[1024];
        rref_lock();
        if (timeout_ms == 0) timeout_ms = rpc_default_timeout_ms();
        struct owner_entry *e = r->oe ? rref_entry_wait(r->id, timeout_ms, err, sizeof err) : NULL;
        if (!r->oe) snprintf(err, sizeof err, "rpc: RRef used after shutdown");
        int rc = e ? rref_entry_value(e, out, err, sizeof err) : -1;
        rref_unlock();
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
