/* Remote devices, written as PyTorch writes them: "worker/cpu",
 * "worker/cuda:N", or "worker" alone (its CPU). Used by
 * remote_module_new_at and rpc_tensor_to; a worker uses one CUDA device,
 * cuda:0 (choose each worker process's GPU with CUDA_VISIBLE_DEVICES).
 * The worker a placement names must have called remote_module_init (which
 * registers the owner side of placements) before its rpc_init. */
#ifndef TRIB_RPC_PLACEMENT_H
#define TRIB_RPC_PLACEMENT_H

#include "rpc/rpc.h"

struct placement {
    char worker[64];
    enum device device;
    int index;                 /* N of cuda:N; 0 for cpu */
};

/* Parses s (syntax only, no RPC). 0, or -1 with rpc_last_error():
 *   "placement '/cpu': no worker name"
 *   "placement 'w1/gpu': unknown device 'gpu' (expected cpu or cuda:N)" */
int placement_parse(const char *s, struct placement *out);

/* Parses s and checks it against the world: the worker is live, and for
 * cuda:N, N is 0 and the worker has a CUDA device (one RPC). Blocks. 0, or
 * -1 with rpc_last_error(), the parse errors or:
 *   "placement 'nobody/cpu': unknown worker 'nobody'"
 *   "placement 'w1/cuda:1': only cuda:0 is supported (one CUDA device per
 *    worker process: choose its GPU with CUDA_VISIBLE_DEVICES)"
 *   "placement 'w1/cuda:0': w1 has no CUDA device" */
int placement_resolve(const char *s, struct placement *out);

/* Moves a copy of t (no graph) to the placement's worker and device, as
 * rpc.remote(worker, torch.Tensor.to, (t, device)) does: returns an RRef
 * owned by that worker holding the copy (the caller owns one reference),
 * or NULL with rpc_last_error() (placement_resolve's errors, prefixed
 * "rpc_tensor_to: "). Blocks for placement_resolve only; like rpc_remote,
 * a failure of the copy itself surfaces on rref_to_here. */
struct rref *rpc_tensor_to(const char *placement, struct tensor *t);

#endif
