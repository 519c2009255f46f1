/* The fork protocol, which is how an RRef travels: the sender registers a
 * fork (with the owner directly, or by holding itself as the parent of the
 * child, G2) and writes a descriptor; the receiver turns the descriptor
 * into a handle, asks the owner to register a child whose parent was a
 * user (__rref_fork) and releases the parent's hold (__rref_accept). */
#include <stdio.h>

#include "common/check.h"
#include "rpc/rref_internal.h"

/* The forks a user of this worker has sent (to worker `to`), each holding
 * that user (the parent) until the owner has confirmed the child, or `to`
 * is gone. Under rref_mu. */
struct child { struct child *next; uint64_t fork_id; int to; struct rref *r; };
static struct child *children;

/* ---- sending ----------------------------------------------------------------- */

static void fork_out(struct rref *r, int to, struct wire_rref *out)
{
    uint64_t fork = rpc_gen_id();
    pthread_mutex_lock(&rref_mu);
    if (r->is_owner) {
        if (r->oe) rref_entry_add_fork(r->oe, fork, to);
    } else {
        /* G2: keep this user (the parent) alive until the child is accepted. */
        struct child *c = trib_xmalloc(sizeof *c);
        c->fork_id = fork;
        c->to = to;
        c->r = rref_retain(r);
        c->next = children;
        children = c;
    }
    pthread_mutex_unlock(&rref_mu);
    *out = (struct wire_rref){ .owner = r->owner, .parent = rpc_self_id(), .id = r->id, .fork = fork };
}

/* Unlinks the children sent to `worker` (every child when -1) and drops
 * their parents' holds. */
static void release_children(int worker)
{
    struct child *gone = NULL;
    pthread_mutex_lock(&rref_mu);
    for (struct child **pp = &children; *pp;) {
        struct child *c = *pp;
        if (worker >= 0 && c->to != worker) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        c->next = gone;
        gone = c;
    }
    pthread_mutex_unlock(&rref_mu);
    while (gone) {
        struct child *next = gone->next;
        rref_free(gone->r);
        free(gone);
        gone = next;
    }
}

/* Worker `worker` is gone: the forks it held are released on this worker,
 * as owner and as the parent of children it never accepted. */
static void peer_gone(int worker)
{
    rref_owner_peer_gone(worker);
    release_children(worker);
}

/* inline: [fork] the child of one of our users is confirmed */
static int bi_accept(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t fork;
    if (!rref_arg_u64(args, 0, &fork)) return rpc_request_fail(req, "bad arguments");
    pthread_mutex_lock(&rref_mu);
    struct child *c = NULL;
    for (struct child **pp = &children; *pp; pp = &(*pp)->next)
        if ((*pp)->fork_id == fork) {
            c = *pp;
            *pp = c->next;
            break;
        }
    pthread_mutex_unlock(&rref_mu);
    if (!c) return rpc_request_fail(req, "no pending child %#llx", (unsigned long long)fork);
    rref_free(c->r);
    free(c);
    return 0;
}

/* ---- receiving ----------------------------------------------------------------- */

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

static struct rref *fork_in(const struct wire_rref *d, int from, char *err, size_t cap)
{
    int owner = d->owner, parent = d->parent;
    uint64_t id = d->id, fork = d->fork;
    int self = rpc_self_id();
    if (parent != from) {
        snprintf(err, cap, "RRef %#llx: parent %d is not the sender %d", (unsigned long long)id, parent, from);
        return NULL;
    }
    if (owner == self) {
        pthread_mutex_lock(&rref_mu);
        struct owner_entry *e = rref_entry_find(id);
        if (!e) {
            pthread_mutex_unlock(&rref_mu);
            snprintf(err, cap, "unknown RRef %#llx", (unsigned long long)id);
            return NULL;
        }
        struct rref *r = rref_entry_handle(e);
        if (parent == self) rref_entry_del_fork(e, fork);     /* sent to ourselves */
        pthread_mutex_unlock(&rref_mu);
        /* From a user back to its owner: the fork is a phantom; release the
         * parent's hold on its child. */
        if (parent != self) send_accept(parent, fork);
        return r;
    }
    if (!rpc_worker_alive(owner)) {
        snprintf(err, cap, "RRef %#llx: owner %d is not a live worker", (unsigned long long)id, owner);
        return NULL;
    }
    if (parent == owner) return rref_handle_new(id, fork, owner, true);   /* the owner added the fork */
    struct rref *r = rref_handle_new(id, fork, owner, false);
    struct fork_ctx *c = trib_xmalloc(sizeof *c);
    c->r = rref_retain(r);
    c->parent = parent;
    struct rpc_value args = rref_two_ints(id, fork);
    rpc_call_internal(owner, "__rref_fork", &args, 0, fork_acked, c);
    return r;
}

/* ---- the module: its hooks in the value type and the codec ------------------------ */

static void install_hooks(void)
{
    static const struct rpc_rref_hooks hooks = {
        .fork = fork_out, .unfork = fork_in, .retain = rref_retain, .release = rref_free, .id = rref_id,
        .peer_gone = peer_gone,
    };
    rpc_set_rref_hooks(&hooks);
}

void rref_install_hooks(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_hooks);
}

void rref_fork_register_builtins(void)
{
    rpc_register_ex("__rref_accept", bi_accept, NULL, RPC_FN_INLINE);
}

void rref_fork_shutdown(void) { release_children(-1); }
