/* The private interface between the RRef sources, in layer order (each
 * file calls only the ones before it):
 *   rref_owner.c    the owner table, handles (G1 reference counting), the
 *                   module's lock;
 *   rref_fork.c     the fork protocol, which is how RRefs are serialised:
 *                   fork registrations (parked until their RRef exists),
 *                   children held for G2;
 *   rref_objects.c  the constructor and method registries, building,
 *                   fetching and calling what an owner holds;
 *   rref.c          the module's life (what the core calls), the value
 *                   hooks, and the user's operations (to_here, proxies).
 * Only those files include it. */
#ifndef TRIB_RPC_RREF_INTERNAL_H
#define TRIB_RPC_RREF_INTERNAL_H

#include "rpc/membership.h"

/* ---- what the core calls (rref.c; rpc_agent.c and the fuzz targets) ---------- */
/* Fork registrations that may wait at an owner for their RRef's creation. */
#define RREF_MAX_PARKED 16384
/* Installs the RRef hooks (rpc_set_rref_hooks) once; any thread. */
void rref_install_hooks(void);
/* Installs the hooks too. */
void rref_module_init(void);
/* At the start of rpc_shutdown: fails every waiting fork registration, and
 * every later one fails at once. */
void rref_module_closing(void);
/* I/O thread: fails the fork registrations that waited past the default timeout. */
void rref_expire_parked(int64_t now_ms);
void rref_module_shutdown(void);
void rref_register_builtins(void);

enum { OE_PENDING, OE_READY, OE_FAILED };

struct rref_type_methods;

/* A user the owner has not heard a delete from: its fork id and the
 * worker that holds it (whose loss releases it). */
struct fork_hold { uint64_t fork; int holder; };

/* What the owner keeps for one RRef: the object or value (once built) and
 * its users' forks. */
struct owner_entry {
    struct owner_entry *next;
    uint64_t id;
    int state;
    bool is_object;
    void *obj;
    struct rpc_type type;
    struct rref_type_methods *methods;  /* the object's type's methods (rref_objects.c), once built */
    struct rpc_value value;
    char *err;
    struct fork_hold *forks;
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

/* ---- rref_owner.c: the bottom. Owner table and handles. ------------------
 * rref_mu (static in rref_owner.c, taken through rref_lock/rref_unlock) is
 * the module's one lock: it guards the owner table and every entry's
 * fields, the "down" flag, and the state the files above keep under it
 * (rref_fork.c's parked fork registrations and children). Construction
 * ends wake waiters through rref_entry_set_* (the condition variable is
 * rref_owner.c's). Never held while user code (constructor, method,
 * to_value) runs, nor across a call into the call layer that may block. */
void rref_lock(void);
void rref_unlock(void);
/* Under rref_mu: no rpc agent (before rref_owner_open, after
 * rref_owner_shutdown), so no protocol message may be sent. */
bool rref_owner_is_down(void);
/* The agent is up: protocol messages may be sent. */
void rref_owner_open(void);
/* At shutdown (no agent threads left): marks the module down, detaches the
 * owner's handles from their entries and destroys every entry. */
void rref_owner_shutdown(void);

/* A new handle (refs 1): a user's, unless the caller makes it the owner's.
 * Does not install the value hooks: whoever hands a handle to user code
 * before rpc_init (rref_new_local_value) calls rref_install_hooks first. */
struct rref *rref_handle_new(uint64_t id, uint64_t fork, int owner, bool confirmed);
/* The owner has confirmed r (any thread; no lock). */
void rref_set_confirmed(struct rref *r);

/* Under rref_mu unless said. */
struct owner_entry *rref_entry_find(uint64_t id);
/* A new pending entry for id, linked into the table. */
struct owner_entry *rref_entry_new(uint64_t id);
void rref_entry_add_fork(struct owner_entry *e, uint64_t fork, int holder);
/* Deletes fork `fork` of e if worker `holder` holds it (the worker it was
 * given to); false if e has no such fork held by `holder`. */
bool rref_entry_del_fork(struct owner_entry *e, uint64_t fork, int holder);
/* Whether worker `worker` may use e: the owner (this worker), or a worker
 * holding one of its forks. */
bool rref_entry_held_by(const struct owner_entry *e, int worker);
/* Unlinks e if nobody can reach it any more and returns it for
 * rref_entry_destroy (called outside rref_mu); else NULL. */
struct owner_entry *rref_entry_unlink_if_unused(struct owner_entry *e);
/* Outside rref_mu; accepts NULL. */
void rref_entry_destroy(struct owner_entry *e);
/* The owner's handle on e (a new reference; made on first use). */
struct rref *rref_entry_handle(struct owner_entry *e);
/* The end of e's construction, each waking every waiter
 * (rref_entry_wait): an object obj of type (with its type's methods), a
 * value (moved out of *v), or a failure with err (copied). */
void rref_entry_set_object(struct owner_entry *e, void *obj, const struct rpc_type *type,
                           struct rref_type_methods *methods);
void rref_entry_set_value(struct owner_entry *e, struct rpc_value *v);
void rref_entry_set_failed(struct owner_entry *e, const char *err);
/* Worker `worker` is gone (left or dead): drops every fork it held and
 * frees the entries nobody can reach any more. Takes rref_mu itself. */
void rref_owner_peer_gone(int worker);
/* Waits for entry id's construction, at most timeout_ms (<= 0: no limit);
 * the entry or NULL with err. */
struct owner_entry *rref_entry_wait(uint64_t id, int timeout_ms, char *err, size_t cap);
/* A copy of e's value (an object's through its type's to_value, which
 * runs with rref_mu released: e may be gone when this returns). 0 or -1
 * with err. */
int rref_entry_value(struct owner_entry *e, struct rpc_value *out, char *err, size_t cap);
/* __rref_del (G1). */
void rref_owner_register_builtins(void);

/* ---- rref_fork.c: above rref_owner.c. The fork protocol. ----------------- */
/* Creates the entry of a __remote (id, with the fork of its creator,
 * worker `creator`) and registers the forks that waited for it; NULL if id
 * exists. Takes and releases rref_mu itself. */
struct owner_entry *rref_entry_new_remote(uint64_t id, uint64_t fork, int creator);
/* The value hooks' sides of the protocol (rref_install_hooks, rref.c,
 * puts them in the table). */
void rref_fork_out(struct rref *r, int to, struct wire_rref *out);
struct rref *rref_fork_in(const struct wire_rref *d, int from, char *err, size_t cap);
/* Worker `worker` is gone: the owner table's forks it held, the fork
 * registrations it parked and the children sent to it are released. */
void rref_fork_peer_gone(int worker);
/* Fails the parked fork registrations whose deadline is past at now_ms. */
void rref_fork_expire_parked(int64_t now_ms);
/* The agent is up: forks may wait for their RRef again. */
void rref_fork_open(void);
/* Shutdown begins: no fork waits any more; the parked ones fail. */
void rref_fork_closing(void);
/* At shutdown (no agent threads left, after rref_owner_shutdown): frees
 * the parked registrations unanswered and drops the children held for G2. */
void rref_fork_shutdown(void);
/* __rref_fork, __rref_accept. */
void rref_fork_register_builtins(void);

/* ---- rref_objects.c: above rref_fork.c. Registries, construction, calls. - */
/* __remote, __rref_fetch, __rref_call. */
void rref_objects_register_builtins(void);

/* ---- rref.c: the top. The module's life (declared at the top of this
 * header: the core calls it) and the user's operations. Nothing in the
 * rref files calls rref.c. */

/* [a, b] as two ints: the arguments of the protocol messages. */
static inline struct rpc_value rref_two_ints(uint64_t a, uint64_t b)
{
    struct rpc_value v = rpc_list(2);
    v.list.items[0] = rpc_int((int64_t)a);
    v.list.items[1] = rpc_int((int64_t)b);
    return v;
}

/* Argument i of a protocol message as an id. */
static inline bool rref_arg_u64(const struct rpc_value *args, size_t i, uint64_t *out)
{
    if (args->kind != RPC_LIST || i >= args->list.len || args->list.items[i].kind != RPC_INT) return false;
    *out = (uint64_t)args->list.items[i].i;
    return true;
}

#endif
