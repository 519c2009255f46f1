/* rpc/ internals, the top: what rpc_agent.c (the assembly) offers beyond rpc.h,
 * the offline agent of the fuzz targets and their corpus replay. Below it:
 * every layer (membership.h, and rrefs.h for the RRef module). */
#ifndef TRIB_RPC_AGENT_H
#define TRIB_RPC_AGENT_H

#include "rpc/membership.h"
#include "rpc/rrefs.h"

/* rpc_agent.c: the offline agent, for fuzz targets and their corpus replay: the
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
