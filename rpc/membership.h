/* rpc/ internals, the membership layer (rpc/README.md "Layers"): this
 * worker's place in the world, the rendezvous, joins and leaves, the
 * shutdown protocol and membership events (membership.c). Below it:
 * calls.h. */
#ifndef TRIB_RPC_MEMBERSHIP_H
#define TRIB_RPC_MEMBERSHIP_H

#include "rpc/calls.h"

/* membership.c: this worker's place in the world, events, the rendezvous
 * and shutdown protocols and their builtins. */
void rpc_membership_init(const struct rpc_opts *o, int rank, int world_size, const char *master);
void rpc_membership_set_master(const char *master);
/* The offline agent: the world is complete without a rendezvous. */
void rpc_membership_set_complete(void);
/* rpc_init after the I/O thread started: rank 0 waits for the world, a
 * worker says hello and waits for the directory. -1 with error. */
int rpc_membership_join(const char *self_endpoint, int init_timeout_ms, const volatile sig_atomic_t *cancel);
/* rpc_shutdown: the graceful protocol (nothing unless graceful). */
void rpc_membership_leave(bool graceful, int long_wait);
/* A peer lost (peers.c's callback): rpc_drop_peer with RPC_EVENT_FAILED. */
void rpc_membership_lost(int id, const char *why);
void rpc_post_event(enum rpc_event_kind kind, int id, const char *name);
/* Empties the event ring. */
void rpc_events_reset(void);
void rpc_drop_peer(int id, const char *why, enum rpc_event_kind ev);
void rpc_membership_register(void);
const char *rpc_arg_str(const struct rpc_value *args, size_t i);
bool rpc_arg_int(const struct rpc_value *args, size_t i, int64_t *out);

/* placement.c: the owner-side functions of remote devices (remote_module_init
 * registers them: programs that use no remote modules serve none). */
void rpc_placement_register(void);
#endif
