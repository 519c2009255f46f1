/* rpc/ internals, the wire layer (rpc/README.md "Layers"): the message
 * format, encoding and decoding, outgoing messages, this worker's id as
 * stamped on every message, and the distributed-autograd hooks the codec
 * calls. File: wire.c. Below it: base.h. */
#ifndef TRIB_RPC_WIRE_H
#define TRIB_RPC_WIRE_H

#include "rpc/base.h"

/* ---- distributed-autograd hooks ----------------------------------------
 * Every message header carries two int64 fields reserved for distributed
 * autograd: the autograd context id and the autograd message id (0 = none),
 * and every tensor descriptor carries requires_grad.
 *
 * on_send: called on the sending thread, after the payload's tensors are
 *   collected and before the header is written, for every request
 *   (is_response false; also when it carries no tensor, so a context
 *   propagates) and every successful response (true). tensors[0..n) are the tensors being sent
 *   (borrowed). The hook may record a "send" function for the thread's
 *   current context and set *ctx_id / *msg_id (both start at 0 for requests;
 *   for responses they start at the ids of the request being answered).
 * on_recv: called on the I/O thread right after a request or successful
 *   response is decoded, with the sender's worker id, the ids from the
 *   header and every received tensor (nested ones too, in wire order) (owned by the message; the hook may retain them, set grad_fn on
 *   those with requires_grad to a "recv" function). For a request, the ids
 *   are also available to the handler through rpc_request_autograd_ids so
 *   it can make the context current while it runs. Returns 0, or -1 with
 *   err to refuse a request (which then fails with that text; the return
 *   is ignored for responses).
 * on_peer_gone: on the I/O thread when a worker left or was found dead.
 * on_tick: on the I/O thread every heartbeat (must be quick).
 * Any may be NULL. Install before rpc_init; not thread-safe to change. */
struct rpc_autograd_hooks {
    void (*on_send)(int to_worker, bool is_response, struct tensor **tensors, int n,
                    int64_t *ctx_id, int64_t *msg_id, void *user);
    int (*on_recv)(int from_worker, bool is_response, struct tensor **tensors, int n,
                   int64_t ctx_id, int64_t msg_id, char *err, size_t cap, void *user);
    void (*on_peer_gone)(int worker, void *user);
    void (*on_tick)(int64_t now_ms, void *user);
    /* Called on the handler's thread right before (enter) and after a
     * request's handler runs, with the request's context id (0: none). */
    void (*on_handler)(int64_t ctx_id, bool enter, void *user);
    void *user;
};
void rpc_set_autograd_hooks(const struct rpc_autograd_hooks *hooks);

/* The installed hooks (all NULL until rpc_set_autograd_hooks). */
const struct rpc_autograd_hooks *wire_hooks(void);

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
/* msgpack values in one frame 0. Decoding costs ~50 bytes per value (a
 * msgpack_object and an rpc_value) whatever its wire size, so without a cap a
 * 1 GiB frame of one-byte values would cost tens of GiB. Bulk data travels
 * as tensor frames, which this does not count. */
#define WIRE_MAX_VALUES (1 << 20)
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
/* Tensors collected while encoding: t[] are retained host snapshots (what
 * goes on the wire), orig[] the payload's own tensors (borrowed; they carry
 * the grad_fn the autograd hook needs). */
struct wire_tensors { struct tensor *t[WIRE_MAX_TENSORS]; struct tensor *orig[WIRE_MAX_TENSORS]; int n; };


/* Writes an RRef descriptor (the body of ext type 2). */
void wire_rref_desc(unsigned char out[24], const struct wire_rref *d);

/* Encodes v; tensors are appended to *tl (retained), RRefs forked toward
 * worker `to`. -1 with error on too many tensors or an unencodable value. */
int wire_pack_value(msgpack_packer *pk, const struct rpc_value *v, struct wire_tensors *tl, int to, int depth);
/* Checks that buf[0..len) is exactly one msgpack object whose counts and
 * lengths fit in the buffer and whose depth is bounded. 0 or -1 (err set).
 * For a 10-element header array whose first nine fields are sound,
 * *payload_off is where the payload starts (else 0), so that a request
 * with a bad payload can still be answered. */
int wire_validate(const char *buf, size_t len, size_t *payload_off, char *err, size_t cap);
/* Decodes a received message: frames[0] the header (checked with
 * wire_validate, parsed with wire_parse_hdr), frames[1..n) tensor bodies,
 * as many as the header announces. 0, or -1 with err; then h->req_id is the
 * request id if it could be read (else 0) and *answerable says whether a
 * request's sender should hear of the error. The payload is not decoded. */
int wire_decode(zmq_msg_t *frames, int n, msgpack_zone *zone, struct wire_hdr *h, bool *answerable, char *err, size_t cap);
/* Parses the header array. 0 or -1 with err; req_id is filled as soon as
 * it is known (0 otherwise). */
int wire_parse_hdr(const msgpack_object *o, struct wire_hdr *h, char *err, size_t cap);
/* Converts a payload object to a value, building tensors from frames
 * (checked against their descriptors) and RRefs from descriptors (from =
 * sending worker). The tensors built are listed in *got (borrowed from
 * *out). -1 with err; *out is left nil. */
int wire_to_value(const msgpack_object *o, zmq_msg_t *frames, int nframes, int from,
                  struct rpc_value *out, struct wire_tensors *got, char *err, size_t cap);


/* A message on its way to the I/O thread: header frame + tensor frames. */
struct outmsg {
    struct outmsg *next;
    int peer;                        /* dealer to this worker, or -1: router reply */
    unsigned char rid[256];
    size_t rid_len;
    struct rpc_future *fut;          /* registered as pending when sent */
    int nframes;                     /* <= RPC_OUTMSG_POOLED_FRAMES: from rpc_outmsg_fl */
    zmq_msg_t frames[];
};
/* A message of nframes frames (pooled when small), for rpc_out_push or
 * rpc_outmsg_free. */
struct outmsg *rpc_outmsg_new(int nframes);
void rpc_outmsg_free(struct outmsg *m);
/* Frees the pooled messages (at shutdown). */
void rpc_outmsg_drain(void);
/* Builds a message. payload may be NULL (nil); err non-NULL makes an error
 * payload (a string). NULL with error if the payload cannot be encoded or
 * a frame would be over max_frame_bytes (wire_set_max_frame). */
struct outmsg *rpc_build_msg(int type, uint64_t req_id, const char *fn, int to, bool is_response,
                             int64_t ac_ctx, int64_t ac_msg, int64_t timeout_ms,
                             const struct rpc_value *payload, const char *err);

/* This worker's id, stamped as every message's sender (rpc_agent.c and
 * membership set it: the rank, or the id rank 0 assigned). */
int rpc_self_id(void);
void wire_set_self_id(int id);
/* Every frame's bound (rpc_opts.max_frame_bytes, set by rpc_agent.c; 0:
 * none): rpc_build_msg refuses a message with a bigger frame, naming it,
 * rather than send what the receiver's ZMQ_MAXMSGSIZE would answer by
 * dropping the connection (a dealer on this host does not reconnect). */
void wire_set_max_frame(size_t bytes);
/* A process-unique id, never 0: the worker id in the top 16 bits, the low
 * 48 a keyed permutation of a counter (unpredictable without this
 * process's random key; the checks of who may use an id come first). */
uint64_t rpc_gen_id(void);

#endif
