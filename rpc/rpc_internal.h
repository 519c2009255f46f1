/* Transitional (issue 20): the layered headers replace this one (base.h,
 * wire.h, transport.h, calls.h, membership.h, agent.h; rpc/README.md
 * "Layers"). Only the RRef files still include it. */
#ifndef TRIB_RPC_RPC_INTERNAL_H
#define TRIB_RPC_RPC_INTERNAL_H
#include "rpc/agent.h"
#endif
