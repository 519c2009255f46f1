/* RemoteModule: an nn module built on another worker and driven through an
 * RRef. forward/forward_async are ordinary RPCs, so inside a distributed
 * autograd context they are recorded and gradients flow back to the
 * module's parameters (which may live on the owner's GPU: inputs move to
 * the module's device and gradients move back). */
#ifndef TRIB_RPC_REMOTE_MODULE_H
#define TRIB_RPC_REMOTE_MODULE_H

#include "rpc/rpc.h"
#include "tensor/nn.h"

/* Builds a module from args on the owner; NULL with rpc_request_fail. */
typedef struct nn_module *(*remote_module_ctor)(struct rpc_request *req, const struct rpc_value *args);

/* Registers a module constructor under name, in every process that may own
 * such modules (before rpc_init). Built in: "linear" (args: in, out[, bias])
 * and "mlp" (args: a list of sizes[, "relu"|"tanh"[, dropout]]). */
void remote_module_register(const char *name, remote_module_ctor ctor);
/* Registers the built-ins, the RPC methods and the owner side of remote
 * devices (placement.h: rpc_tensor_to). Call before rpc_init in every
 * process (after dist_autograd_init). */
int remote_module_init(void);

struct remote_module;

/* Builds module `ctor` with args on worker `on`, on `dev` there (CUDA when
 * asked and present, else an error at construction). Blocks until built.
 * NULL with rpc_last_error() (unknown worker, unknown constructor, the
 * constructor's error, device unavailable). */
struct remote_module *remote_module_new(const char *on, const char *ctor,
                                        const struct rpc_value *args, enum device dev);
/* The same at a placement (rpc/placement.h): "worker/cpu", "worker/cuda:0"
 * or "worker", as RemoteModule("worker1/cpu", nn.Linear, ...) is written.
 * NULL with rpc_last_error(): placement_resolve's errors ("placement
 * 'nobody/cpu': unknown worker 'nobody'", "placement 'w1/cuda:0': w1 has no
 * CUDA device", ...) or remote_module_new's. */
struct remote_module *remote_module_new_at(const char *placement, const char *ctor,
                                           const struct rpc_value *args);
void remote_module_free(struct remote_module *rm);
/* A handle over an RRef to a module (from remote_module_rref on another
 * worker, passed here as an RPC argument): takes a new reference to r. No
 * RPC; a wrong RRef surfaces as an error at the first forward. */
struct remote_module *remote_module_from_rref(struct rref *r);
/* The RRef to the module (borrowed). */
struct rref *remote_module_rref(struct remote_module *rm);
/* On the module's owner, for owner-side code (checkpoints): the module an
 * RRef from remote_module_rref holds (borrowed, alive as long as the RRef),
 * waiting for its construction. NULL with rpc_last_error() on another
 * worker or for an RRef that holds no module. Its parameters may be read
 * and written only while no forward or optimizer step runs on them. */
struct nn_module *remote_module_local(struct rref *r);

/* Runs forward on the owner with n_in tensors; writes *n_out new CPU tensor
 * references into out[NN_MAX_IO]. Blocks. 0 or -1 with rpc_last_error(). */
int remote_module_forward(struct remote_module *rm, int n_in, struct tensor **in,
                          int *n_out, struct tensor **out);
/* The same without blocking; collect with remote_module_forward_wait. */
struct rpc_future *remote_module_forward_async(struct remote_module *rm, int n_in, struct tensor **in);
int remote_module_forward_wait(struct rpc_future *f, int *n_out, struct tensor **out);

/* RRefs to the module's parameters (owned by the module's worker), usable
 * by dist_optim. Writes up to cap new references; returns the count or -1. */
int remote_module_parameters(struct remote_module *rm, struct rref **out, int cap);

#endif
