/* The private interface between the RRef sources: rref.c (handles and what
 * a user does with them), rref_owner.c (the owner table and its reference
 * counting), rref_objects.c (building, fetching and calling what an owner
 * holds) and rref_fork.c (the fork protocol, which is how RRefs are
 * serialised). Only those files include it. */
#ifndef TRIB_RPC_RREF_INTERNAL_H
#define TRIB_RPC_RREF_INTERNAL_H

#include "rpc/rpc_internal.h"

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

/* One lock for the owner table, the parked fork registrations and the
 * children a parent holds (rref_fork.c); rref_ready_cv is broadcast under it
 * whenever a construction ends. */
extern pthread_mutex_t rref_mu;
extern pthread_cond_t rref_ready_cv;
/* Under rref_mu: no rpc agent (before rref_module_init, after
 * rref_module_shutdown), so no protocol message may be sent. */
extern bool rref_down;

/* ---- rref_owner.c: the owner table. Under rref_mu unless said. ---------- */
struct owner_entry *rref_entry_find(uint64_t id);
/* A new pending entry for id, linked into the table. */
struct owner_entry *rref_entry_new(uint64_t id);
void rref_entry_add_fork(struct owner_entry *e, uint64_t fork, int holder);
/* False if e had no such fork. */
bool rref_entry_del_fork(struct owner_entry *e, uint64_t fork);
/* Unlinks e if nobody can reach it any more and returns it for
 * rref_entry_destroy (called outside rref_mu); else NULL. */
struct owner_entry *rref_entry_unlink_if_unused(struct owner_entry *e);
/* Outside rref_mu; accepts NULL. */
void rref_entry_destroy(struct owner_entry *e);
/* The owner's handle on e (a new reference; made on first use). */
struct rref *rref_entry_handle(struct owner_entry *e);
/* Creates the entry of a __remote (id, with the fork of its creator,
 * worker `creator`) and registers the forks that waited for it; NULL if id
 * exists. Takes and releases rref_mu itself. */
struct owner_entry *rref_entry_new_remote(uint64_t id, uint64_t fork, int creator);
/* Worker `worker` is gone (left or dead): drops every fork it held, frees
 * the entries nobody can reach any more and fails the fork registrations
 * it parked. Takes rref_mu itself; on the I/O thread. */
void rref_owner_peer_gone(int worker);
/* Waits for entry id's construction, at most timeout_ms (<= 0: no limit);
 * the entry or NULL with err. */
struct owner_entry *rref_entry_wait(uint64_t id, int timeout_ms, char *err, size_t cap);
/* A copy of e's value (an object's through its type's to_value, which
 * runs with rref_mu released: e may be gone when this returns). 0 or -1
 * with err. */
int rref_entry_value(struct owner_entry *e, struct rpc_value *out, char *err, size_t cap);
void rref_owner_register_builtins(void);

/* ---- rref_objects.c ------------------------------------------------------ */
/* Builds entry oe by running the constructor or function fn(args) on a
 * handler thread, then answers req (the __remote to complete, or NULL). */
void rref_submit_construct(struct owner_entry *oe, struct rpc_request *req, const char *fn,
                           const struct rpc_value *args);
void rref_objects_register_builtins(void);


/* ---- rref_fork.c --------------------------------------------------------- */
void rref_fork_register_builtins(void);
/* At shutdown (no agent threads left): drops the children held for G2. */
void rref_fork_shutdown(void);

/* ---- rref.c -------------------------------------------------------------- */
/* A new handle (refs 1): a user's, unless the caller makes it the owner's. */
struct rref *rref_handle_new(uint64_t id, uint64_t fork, int owner, bool confirmed);

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
