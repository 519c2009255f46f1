/* The assembled agent's internal entry points (rpc.c), for the fuzz
 * targets and their corpus replay; and, until the RRef module's header
 * has them, the RRef module's entry points that rpc.c calls. */
#ifndef TRIB_RPC_AGENT_H
#define TRIB_RPC_AGENT_H

#include "rpc/membership.h"

/* rref*.c (the module's own interface is rref_internal.h) */
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

/* rpc.c: the offline agent, for fuzz targets and their corpus replay: the
 * agent's state and builtins without sockets or threads. Messages are
 * given to rpc_handle_router/rpc_handle_dealer directly; what would be sent
 * is dropped and calls fail at once; handler jobs run in
 * rpc_offline_run_jobs. Peers are added without connecting. */
int rpc_offline_init(const char *name, int rank, int world);
void rpc_offline_run_jobs(void);
/* A call to `peer` that awaits its reply with request id req_id. */
struct rpc_future *rpc_offline_expect(int peer, uint64_t req_id, const char *fn);
/* Fails what waits, runs what is queued and frees everything. */
void rpc_offline_fini(void);

#endif
