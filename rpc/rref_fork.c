/* The fork protocol, which is how an RRef travels: the sender registers a
 * fork (with the owner directly, or by holding itself as the parent of the
 * child, G2) and writes a descriptor; the receiver turns the descriptor
 * into a handle, asks the owner to register a child whose parent was a
 * user (__rref_fork) and releases the parent's hold (__rref_accept). The
 * owner side parks a fork registration that arrives before its RRef.
 * Above rref_owner.c (the owner table and handles), which it calls; calls
 * nothing in rref_objects.c or rref.c. */
#include <stdio.h>

#include "common/check.h"
#include "rpc/rrefs.h"

/* This file's state, all under rref_mu (rref_lock, rref_owner.c).
 *
 * Fork registrations that reached the owner before the creator's __remote
 * (they travel on different connections: A creates on B, hands the RRef to
 * C, C's fork request may overtake A's __remote). Their replies wait here
 * until the entry exists, as PyTorch's owner does. The entry's creation
 * (rref_entry_new_remote) and the parking (bi_fork) each check the other
 * under one hold of rref_mu, so no registration is parked after its entry
 * appeared. */
struct parked_fork { struct parked_fork *next; uint64_t id, fork; int holder; int64_t deadline; struct rpc_request *req; };
static struct parked_fork *parked;
static int nparked;
/* Set when this worker starts shutting down: no fork waits any more. */
static bool closing;

/* The forks a user of this worker has sent (to worker `to`), each holding
 * that user (the parent) until the owner has confirmed the child, or `to`
 * is gone. */
struct child { struct child *next; uint64_t fork_id; int to; struct rref *r; };
static struct child *children;

/* ---- the owner side: fork registrations ------------------------------------- */

struct owner_entry *rref_entry_new_remote(uint64_t id, uint64_t fork, int creator)
{
    rref_lock();
    if (rref_entry_find(id)) {
        rref_unlock();
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
    rref_unlock();
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
    rref_lock();
    struct owner_entry *e = rref_entry_find(id);
    if (e) rref_entry_add_fork(e, fork, rpc_request_caller_id(req));
    /* Not created yet, by another live worker: its __remote is probably on
     * the way. It may also never come (a forged descriptor): the fork
     * waits at most the default timeout, never past the start of shutdown,
     * and does not hold a graceful shutdown up. */
    bool wait = !e && !rref_owner_is_down() && !closing && creator_alive;
    if (wait && nparked >= RREF_MAX_PARKED) {
        rref_unlock();
        rpc_stat_add(RPC_STAT_BUSY, 1);
        return rpc_request_fail(req, "%d fork registrations already wait for their RRefs", RREF_MAX_PARKED);
    }
    if (wait) {
        int t = rpc_default_timeout_ms();
        struct parked_fork *p = trib_xmalloc(sizeof *p);
        *p = (struct parked_fork){parked, id, fork, rpc_request_caller_id(req), trib_now_ms() + (t > 0 ? t : 60000), req};
        parked = p;
        nparked++;
        rpc_request_uncount(req);
        rref_unlock();
        return RPC_DEFERRED;
    }
    rref_unlock();
    return e ? 0 : rpc_request_fail(req, "unknown RRef %#llx", (unsigned long long)id);
}

/* Fails the parked forks whose deadline is past at `now` (all of them when
 * now is 0) that worker `holder` registered (any worker's when -1). */
static void fail_parked(int64_t now, int holder, const char *why)
{
    struct parked_fork *gone = NULL;
    rref_lock();
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
    rref_unlock();
    while (gone) {
        struct parked_fork *next = gone->next;
        if (now) rpc_stat_add(RPC_STAT_FORKS_EXPIRED, 1);
        rpc_request_fail(gone->req, "RRef %#llx %s", (unsigned long long)gone->id, why);
        rpc_request_finish_error(gone->req);
        free(gone);
        gone = next;
    }
}

void rref_fork_expire_parked(int64_t now)
{
    char why[128];
    snprintf(why, sizeof why, "was not created here within %d ms", rpc_default_timeout_ms());
    fail_parked(now, -1, why);
}


/* ---- sending ----------------------------------------------------------------- */

void rref_fork_out(struct rref *r, int to, struct wire_rref *out)
{
    uint64_t fork = rpc_gen_id();
    rref_lock();
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
    rref_unlock();
    *out = (struct wire_rref){ .owner = r->owner, .parent = rpc_self_id(), .id = r->id, .fork = fork };
}

/* Unlinks the children sent to `worker` (every child when -1) and drops
 * their parents' holds. */
static void release_children(int worker)
{
    struct child *gone = NULL;
    rref_lock();
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
    rref_unlock();
    while (gone) {
        struct child *next = gone->next;
        rref_free(gone->r);
        free(gone);
        gone = next;
    }
}

/* Worker `worker` is gone: the forks it held are released on this worker,
 * as owner (held, and parked) and as the parent of children it never
 * accepted. */
void rref_fork_peer_gone(int worker)
{
    rref_owner_peer_gone(worker);
    fail_parked(0, worker, "was registered by a worker that is gone");
    release_children(worker);
}

/* inline: [fork] the child of one of our users is confirmed, by the
 * worker it was sent to (as its connection proved), no other. */
static int bi_accept(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    uint64_t fork;
    if (!rref_arg_u64(args, 0, &fork)) return rpc_request_fail(req, "bad arguments");
    int caller = rpc_request_caller_id(req);
    rref_lock();
    struct child *c = NULL;
    for (struct child **pp = &children; *pp; pp = &(*pp)->next)
        if ((*pp)->fork_id == fork && (*pp)->to == caller) {
            c = *pp;
            *pp = c->next;
            break;
        }
    rref_unlock();
    if (!c) {
        char who[64];
        rpc_peer_name(caller, who, sizeof who);
        return rpc_request_fail(req, "no pending child %#llx sent to %s", (unsigned long long)fork, who);
    }
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
    if (!rpc_future_error(f)) rref_set_confirmed(c->r);
    send_accept(c->parent, c->r->fork_id);
    rref_free(c->r);
    free(c);
}

struct rref *rref_fork_in(const struct wire_rref *d, int from, char *err, size_t cap)
{
    int owner = d->owner, parent = d->parent;
    uint64_t id = d->id, fork = d->fork;
    int self = rpc_self_id();
    if (parent != from) {
        snprintf(err, cap, "RRef %#llx: parent %d is not the sender %d", (unsigned long long)id, parent, from);
        return NULL;
    }
    if (owner == self) {
        rref_lock();
        struct owner_entry *e = rref_entry_find(id);
        if (!e) {
            rref_unlock();
            snprintf(err, cap, "unknown RRef %#llx", (unsigned long long)id);
            return NULL;
        }
        struct rref *r = rref_entry_handle(e);
        if (parent == self) rref_entry_del_fork(e, fork, self);     /* sent to ourselves */
        rref_unlock();
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

/* ---- the module's life ------------------------------------------------------------ */

void rref_fork_open(void)
{
    rref_lock();
    closing = false;
    rref_unlock();
}

void rref_fork_closing(void)
{
    rref_lock();
    closing = true;
    rref_unlock();
    fail_parked(0, -1, "was not created here before shutdown");
}

void rref_fork_shutdown(void)
{
    rref_lock();
    struct parked_fork *pf = parked;    /* the I/O thread is gone: no replies */
    parked = NULL;
    nparked = 0;
    rref_unlock();
    while (pf) {
        struct parked_fork *next = pf->next;
        rpc_request_free(pf->req);
        free(pf);
        pf = next;
    }
    release_children(-1);
}

void rref_fork_register_builtins(void)
{
    rpc_register_ex("__rref_fork", bi_fork, NULL, RPC_FN_INLINE);
    rpc_register_ex("__rref_accept", bi_accept, NULL, RPC_FN_INLINE);
}
