/* Internals shared by the rpc/ sources (agent, wire format, RRefs) and the
 * hook interface for the distributed-autograd module that will live in rpc/.
 * Not a public header: only rpc/ includes it. */
#ifndef TRIB_RPC_RPC_INTERNAL_H
#define TRIB_RPC_RPC_INTERNAL_H

#include <msgpack.h>
#include <pthread.h>
#include <zmq.h>

#include "rpc/rpc.h"

/* ---- distributed-autograd hooks ----------------------------------------
 * Every message header carries two int64 fields reserved for distributed
 * autograd: the autograd context id and the autograd message id (0 = none),
 * and every tensor descriptor carries requires_grad.
 *
 * on_send: called on the sending thread, after the payload's tensors are
 *   collected and before the header is written, for requests (is_response
 *   false) and responses (true). tensors[0..n) are the tensors being sent
 *   (borrowed). The hook may record a "send" function for the thread's
 *   current context and set *ctx_id / *msg_id (both start at 0 for requests;
 *   for responses they start at the ids of the request being answered).
 * on_recv: called on the I/O thread right after a message is decoded, with
 *   the sender's worker id, the ids from the header and the received
 *   tensors (owned by the message; the hook may retain them, set grad_fn on
 *   those with requires_grad to a "recv" function). For a request, the ids
 *   are also available to the handler through rpc_request_autograd_ids so
 *   it can make the context current while it runs.
 * Both may be NULL. Install before rpc_init; not thread-safe to change. */
struct rpc_autograd_hooks {
    void (*on_send)(int to_worker, bool is_response, struct tensor **tensors, int n,
                    int64_t *ctx_id, int64_t *msg_id, void *user);
    void (*on_recv)(int from_worker, bool is_response, struct tensor **tensors, int n,
                    int64_t ctx_id, int64_t msg_id, void *user);
    void *user;
};
void rpc_set_autograd_hooks(const struct rpc_autograd_hooks *hooks);
void rpc_request_autograd_ids(const struct rpc_request *req, int64_t *ctx_id, int64_t *msg_id);

/* ---- errors ------------------------------------------------------------ */
int rpc_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- wire format ----------------------------------------------------------
 * frame 0: msgpack array [version, type, req_id, sender, fn|nil, ac_ctx,
 *          ac_msg, timeout_ms, ntensors, payload]
 * frames 1..ntensors: raw tensor bodies, in descriptor order.
 * Tensors in the payload are msgpack ext type 1: little-endian
 *   u8 dtype, u8 ndim, u8 flags (bit0 requires_grad), u8 0, u32 frame index,
 *   u64 nbytes, i64 shape[ndim].
 * RRefs are ext type 2: u16 owner, u16 parent, u32 0, u64 rref id, u64 fork id. */
#define WIRE_VERSION 1
enum wire_type { WIRE_REQ = 1, WIRE_RESP = 2, WIRE_ERR = 3, WIRE_PING = 4 };
#define WIRE_MAX_TENSORS 1024
#define WIRE_MAX_DEPTH 32
#define WIRE_EXT_TENSOR 1
#define WIRE_EXT_RREF 2

struct wire_hdr {
    int type;
    uint64_t req_id;
    int sender;
    const char *fn; size_t fn_len;       /* points into the zone */
    int64_t ac_ctx, ac_msg;
    int64_t timeout_ms;
    int ntensors;
    msgpack_object payload;
};

/* Tensors collected while encoding (retained snapshots). */
struct wire_tensors { struct tensor *t[WIRE_MAX_TENSORS]; int n; };

/* Encodes v; tensors are appended to *tl (retained), RRefs forked toward
 * worker `to`. -1 with error on too many tensors or an unencodable value. */
int wire_pack_value(msgpack_packer *pk, const struct rpc_value *v, struct wire_tensors *tl, int to, int depth);
/* Checks that buf[0..len) is exactly one msgpack object whose counts and
 * lengths fit in the buffer and whose depth is bounded. 0 or -1 (err set). */
int wire_validate(const char *buf, size_t len, char *err, size_t cap);
/* Parses the header array. 0 or -1 with err; req_id is filled as soon as
 * it is known (0 otherwise). */
int wire_parse_hdr(const msgpack_object *o, struct wire_hdr *h, char *err, size_t cap);
/* Converts a payload object to a value, building tensors from frames
 * (checked against their descriptors) and RRefs from descriptors (from =
 * sending worker). The tensors built are listed in *got (borrowed from
 * *out). -1 with err; *out is left nil. */
int wire_to_value(const msgpack_object *o, zmq_msg_t *frames, int nframes, int from,
                  struct rpc_value *out, struct wire_tensors *got, char *err, size_t cap);

/* ---- agent services used by rref.c ------------------------------------- */
int rpc_self_id(void);
uint64_t rpc_gen_id(void);
bool rpc_worker_alive(int id);
/* Fire-and-track internal call: runs cb(f, user) on completion (I/O thread
 * or caller thread), then frees the future. Counted as in flight. */
void rpc_call_internal(int to, const char *fn, struct rpc_value *args_moved,
                       void (*cb)(struct rpc_future *f, void *user), void *user);
struct rpc_future *rpc_async_id(int to, const char *fn, const struct rpc_value *args, int timeout_ms);
/* Runs job(arg) on a handler thread. */
void rpc_pool_submit(void (*job)(void *arg), void *arg);
/* Looks up a registered function. */
bool rpc_lookup_fn(const char *name, rpc_fn *fn, void **user);
const char *rpc_self_name(void);
/* A request with no caller (replies go nowhere), for running handlers and
 * constructors locally; its error text is kept for the caller. */
struct rpc_request *rpc_request_new_local(const char *fn);
const char *rpc_request_error_text(const struct rpc_request *req);
void rpc_request_free_local(struct rpc_request *req);
/* Sets a request's error to `text` verbatim (already prefixed). */
void rpc_request_fail_text(struct rpc_request *req, const char *text);
void rref_pack_desc(unsigned char out[24], int owner, int parent, uint64_t id, uint64_t fork);

/* rref.c */
void rref_module_init(void);
void rref_module_shutdown(void);
void rref_register_builtins(void);
/* Serialises r for a message to `to` (fork protocol, sending side). */
void rref_pack(msgpack_packer *pk, struct rref *r, int to);
/* Receiving side of the fork protocol; NULL with err on an unknown RRef. */
struct rref *rref_unpack(int owner, int parent, uint64_t rref_id, uint64_t fork_id, int from,
                         char *err, size_t cap);

#endif
