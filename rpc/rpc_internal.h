/* Internals shared by the rpc/ sources (agent, wire format, RRefs) and the
 * hook interface for the distributed-autograd module that will live in rpc/.
 * Not a public header: only rpc/ includes it. */
#ifndef TRIB_RPC_RPC_INTERNAL_H
#define TRIB_RPC_RPC_INTERNAL_H

#include <msgpack.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <zmq.h>

#include "common/clock.h"
#include "rpc/rpc.h"

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
void rpc_request_autograd_ids(const struct rpc_request *req, int64_t *ctx_id, int64_t *msg_id);

/* ---- errors ------------------------------------------------------------ */
/* rpc_set_error is public (rpc.h). */

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

/* ---- RRef hooks -----------------------------------------------------------
 * The value type (value.c) and the codec (wire.c) reach RRefs only through
 * these, as distributed autograd's are reached through its hooks: neither
 * calls into rref*.c. rref*.c installs them (rref_install_hooks) at
 * rpc_init and before it makes its first handle; until then the codec
 * refuses to send or accept an RRef.
 * fork: the fork protocol's sending side: registers a fork of r for a
 *   message to worker `to` and describes it in *out.
 * unfork: the receiving side: a new handle for the descriptor d from worker
 *   `from`; NULL with err.
 * retain, release, id: rref_retain, rref_free, rref_id. */
struct wire_rref { int owner, parent; uint64_t id, fork; };
struct rpc_rref_hooks {
    void (*fork)(struct rref *r, int to, struct wire_rref *out);
    struct rref *(*unfork)(const struct wire_rref *d, int from, char *err, size_t cap);
    struct rref *(*retain)(struct rref *r);
    void (*release)(struct rref *r);
    uint64_t (*id)(const struct rref *r);
    /* On the I/O thread when a worker left or was found dead. */
    void (*peer_gone)(int worker);
};
/* The installed hooks (value.c); all NULL until rpc_set_rref_hooks. */
extern struct rpc_rref_hooks rpc_rref_hooks;
/* Copies *hooks in (NULL: none). Not thread-safe: rref_install_hooks calls
 * it once (pthread_once), before any RRef exists. */
void rpc_set_rref_hooks(const struct rpc_rref_hooks *hooks);
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

/* ---- agent services used by rref.c ------------------------------------- */
int rpc_self_id(void);
/* rpc_opts.default_timeout_ms (after its default is applied). */
int rpc_default_timeout_ms(void);
/* True between a successful rpc_init and rpc_shutdown. */
bool rpc_is_up(void);
uint64_t rpc_gen_id(void);
bool rpc_worker_alive(int id);
/* Fire-and-track internal call (timeout_ms 0: the default): runs
 * cb(f, user) on completion (I/O thread or caller thread), then frees the
 * future. Counted as in flight, so a graceful shutdown waits for it. */
void rpc_call_internal(int to, const char *fn, struct rpc_value *args_moved, int timeout_ms,
                       void (*cb)(struct rpc_future *f, void *user), void *user);
/* The rest of rpc_call_internal for a call already started: takes f. */
void rpc_call_track(struct rpc_future *f, void (*cb)(struct rpc_future *f, void *user), void *user);
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

/* ---- agent internals (rpc.c owns the state; future.c, request.c and
 * membership.c share it) ------------------------------------------------ */

/* Every libzmq status goes through this: a failure is a broken invariant. */
#define ZMQ_CHECK(x)                                                               \
    do {                                                                           \
        if ((x) < 0) {                                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x,      \
                    zmq_strerror(zmq_errno()));                                    \
            abort();                                                               \
        }                                                                          \
    } while (0)

#define MAX_WORKERS 1024
/* The id a dynamic worker sends as until rank 0 has assigned it one. */
#define RPC_UNASSIGNED_ID 0xffff
#define NBUCKETS 4096
#define HWM 100000
#define MAX_QUEUE 65536             /* calls waiting for the I/O thread; requests waiting for a handler */
#define RECV_BATCH 256
#define RPC_CURVE_MAX_ALLOW 64
/* Routing id of every dealer: random, so that only the worker it connects
 * to learns it (first byte non-zero: libzmq reserves those). */
#define RPC_RID_LEN 16
/* Bad messages after which a connection is cut off. */
#define RPC_MAX_BAD 1000
/* Connections the router remembers (bound ones and strangers). */
#define RPC_MAX_CONNS 4096
/* Waiting on a call no bigger than this starts with a short yielding spin
 * (rpc_opts.spin_us); bigger ones leave both cores to the copies. */
#define RPC_SMALL_CALL_BYTES (256 * 1024)

/* A call in flight: completed once by the I/O thread (reply, timeout, dead
 * peer) or by a failing sender; refcounted by its holder and the pending
 * table. */
struct rpc_future {
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int state;               /* 0 pending, 1 ok, 2 error */
    struct rpc_value value;
    char *err;
    void (*cb)(struct rpc_future *, void *);
    void *cb_user;
    /* I/O-thread bookkeeping */
    uint64_t req_id;
    int peer;
    int64_t deadline;               /* 0: none */
    int timeout_ms;
    bool small;                     /* request <= RPC_SMALL_CALL_BYTES: wait by spinning first */
    char fn[64];
    struct rpc_future *hnext;
    /* under mu: rpc_future_wait_any callers to wake on completion */
    struct rpc_future_waiter *waiters;
};
/* One rpc_future_wait_any caller's entry on one future's waiters list. */
struct rpc_future_waiter {
    struct rpc_future_waiter *next;
    struct rpc_future_wake *wake;
};
/* What an rpc_future_wait_any caller sleeps on (lock order: a future's mu,
 * then this mu). */
struct rpc_future_wake {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool fired;
};

/* A received request (or, with job set, an internal job for the pool). */
struct rpc_request {
    struct rpc_request *next;
    uint64_t req_id;
    int caller;
    unsigned char rid[256];
    size_t rid_len;
    char fn[256];
    struct rpc_value args;
    int64_t ac_ctx, ac_msg;
    rpc_fn handler;
    void *user;
    void *user2;                    /* a second pointer for handler (the RRef method a call resolved) */
    char *err;
    void (*job)(void *);
    void *job_arg;
    bool counted;                   /* counted as received and not answered (request.c) until freed */
    size_t bytes;                   /* its frames' size (pending_bytes_by) */
};

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

/* A known worker and the dealer this process calls it through. */
struct peer {
    int id;
    char name[64];
    char endpoint[128];
    char via[160];                  /* what the dealer connected to: endpoint or its ipc:// twin */
    void *dealer;
    bool alive;
    bool dynamic;
    int64_t last_seen;
    int64_t left_at;                /* left gracefully: the dealer stays open to
                                       drain replies already on their way */
    int npending;                   /* I/O thread: calls awaiting its reply */
    unsigned char rid[RPC_RID_LEN]; /* the dealer's routing id (random, ours) */
    uint32_t bad;                   /* I/O thread: bad messages on the dealer */
};

/* How the directory reaches a peer (rpc.c assembles one): open returns the
 * dealer to worker `id` at `endpoint` with routing id rid (RPC_RID_LEN
 * bytes), writing what it connects through to via, or NULL with error;
 * close closes one. I/O thread (or rpc_init before it starts). */
struct rpc_link_ops {
    void *(*open)(int id, const char *endpoint, const unsigned char *rid, char *via, size_t cap);
    void (*close)(void *dealer);
};

/* freelist.c: a bounded free list of fixed-size blocks shared by threads,
 * so that steady-state messages, requests and futures reuse memory instead
 * of calling malloc (docs/conventions.md "Memory and hot paths"). */
struct rpc_freelist { pthread_mutex_t mu; void *head; int n; size_t size; };
#define RPC_FREELIST_INIT(sz) { PTHREAD_MUTEX_INITIALIZER, NULL, 0, (sz) }
#define RPC_FREELIST_MAX 4096
/* A zeroed block of fl->size bytes. */
void *rpc_fl_get(struct rpc_freelist *fl);
void rpc_fl_put(struct rpc_freelist *fl, void *p);
/* Frees every cached block (at shutdown). */
void rpc_fl_drain(struct rpc_freelist *fl);
extern struct rpc_freelist rpc_future_fl, rpc_request_fl, rpc_outmsg_fl;
#define RPC_OUTMSG_POOLED_FRAMES 2

/* wire.c: the installed autograd hooks. */
extern struct rpc_autograd_hooks rpc_hooks;

/* future.c */
/* rpc_opts.spin_us (after its default is applied). */
void rpc_future_set_spin(int us);
/* The calling thread completes futures (the I/O thread): waiting on one
 * from it aborts, as it could never return. */
void rpc_future_mark_completer(bool on);
struct rpc_future *rpc_future_new(void);
/* Completes f with *v (moved) or err (copied); the first completion wins. */
void rpc_future_complete(struct rpc_future *f, struct rpc_value *v, const char *err);
void rpc_future_fail(struct rpc_future *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Waits, then moves the value out. */
int rpc_future_take(struct rpc_future *f, struct rpc_value *out);

/* request.c */
bool rpc_find_fn(const char *name, size_t n, rpc_fn *fn, void **user, unsigned *flags);
void rpc_reply(struct rpc_request *req, struct rpc_value *result, const char *err);
void rpc_request_free(struct rpc_request *req);
/* A request received from worker `caller` (-1: none yet) with frames of
 * `bytes`, counted until freed (or rpc_request_uncount). */
struct rpc_request *rpc_request_new_counted(int caller, size_t bytes);
/* The requests of `worker` received and not yet answered, and their
 * bytes; false for an id out of range. */
bool rpc_requests_of(int worker, int *n, int64_t *bytes);
/* All requests received and not yet answered. */
int rpc_requests_active(void);
/* A deferred request that must not hold a graceful shutdown up (nor count
 * toward its caller's bound) while it waits. */
void rpc_request_uncount(struct rpc_request *req);
void rpc_run_request(struct rpc_request *req);
bool rpc_pool_push(struct rpc_request *req);
void *rpc_pool_main(void *arg);
/* Starts / stops (joins) the handler threads. */
void rpc_pool_start(int nthreads);
void rpc_pool_stop(void);
/* Runs what is queued on this thread (the offline agent). */
void rpc_pool_run_queued(void);

/* peers.c: the directory (see the file for its lock rules). */
void rpc_peers_init(const struct rpc_link_ops *links, const char *name, void (*lost)(int id, const char *why));
/* After the I/O thread stopped: closes every dealer, forgets every peer. */
void rpc_peers_fini(void);
void rpc_peers_set_up(bool up);
/* This worker's entry: id (< 0: unchanged), endpoint and via (NULL: unchanged). */
void rpc_peers_set_self(int id, const char *endpoint, const char *via);
/* Worker id's entry or NULL (I/O thread; others read names and alive under
 * rpc_dir_rdlock). */
struct peer *rpc_peer(int id);
void rpc_dir_rdlock(void);
void rpc_dir_unlock(void);
/* I/O thread: whether a dealer was opened or closed since it was last cleared. */
bool rpc_peers_changed(bool clear);
int rpc_find_peer(const char *name);          /* under the directory lock; -1 if none */
/* The live worker called name, or -1 (takes the lock; -1 when not up). */
int rpc_peer_lookup(const char *name);
void rpc_peer_name(int id, char *buf, size_t cap);
/* I/O thread: adds (or revives) a peer and connects a dealer to it. NULL
 * with error if the endpoint is unusable (it comes from the network). */
struct peer *rpc_add_peer(int id, const char *name, const char *endpoint, bool dynamic);
/* I/O thread: closes the dealer of a peer that is no longer alive and
 * fails the calls still waiting on it. */
void rpc_close_peer(int id, const char *why);
/* I/O thread: marks a peer dead; one that left (`left`) with calls pending
 * keeps its dealer until their replies are in or a heartbeat timeout
 * passes (io.c), a dead one's calls fail at once. False if it was not alive. */
bool rpc_peer_gone(int id, const char *why, bool left);
/* I/O thread: a peer found lost (silent, or too many bad messages): tells
 * membership (the callback given to rpc_peers_init). */
void rpc_peer_lost(int id, const char *why);
/* I/O thread: heard from id (resets its heartbeat clock); calls pending on it. */
void rpc_peer_touch(int id);
void rpc_peer_pending(int id, int delta);
/* Counts a bad message on the dealer to worker id; past the limit the peer is lost. */
void rpc_peer_bad(int id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool rpc_own_dealer_rid(const unsigned char *rid, size_t len);
void rpc_new_rid(unsigned char rid[RPC_RID_LEN]);

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

/* conn.c: who a connection on the router is (I/O thread, except the
 * counters). A routing id is bound to worker W when W vouches for it
 * (__conn_check, asked through our dealer to W's registered endpoint) or,
 * on rank 0, when W says hello on it. */
struct conn;
enum rpc_drop { RPC_DROP_SPOOFED, RPC_DROP_UNVERIFIED, RPC_DROP_MALFORMED, RPC_DROP_BUSY };
enum { CONN_ACCEPT, CONN_HOLD, CONN_REFUSE };
struct rpc_counters {
    atomic_uint_fast64_t spoofed, unverified, malformed, cut_dropped, cuts, busy, forks_expired;
    atomic_uint_fast64_t refused_auth, handshakes_failed;
    atomic_int held;
    /* Traffic on the sockets (I/O thread writes, relaxed): whole messages and
     * their frames' bytes, routing-id frames not counted. */
    atomic_uint_fast64_t msgs_sent, msgs_recv, bytes_sent, bytes_recv;
};
extern struct rpc_counters rpc_counters;
/* A line on stderr, at most 10 a second (the next line printed says how
 * many were suppressed). I/O thread only. */
void rpc_drop_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The connection of routing id rid, created on its first message (`first`:
 * a frame it sent, for its address); NULL if the table is full. */
struct conn *rpc_conn_get(const unsigned char *rid, size_t len, zmq_msg_t *first);
bool rpc_conn_is_cut(const struct conn *c);
const unsigned char *rpc_conn_rid(const struct conn *c, size_t *len);
/* Checks a decoded header's sender against c: CONN_ACCEPT with *from the
 * connection's worker (-1 for __hello/__conn_check from an unbound
 * connection), CONN_HOLD (then call rpc_conn_hold), or CONN_REFUSE
 * (counted and logged; why is the error for a request, "" for none). */
int rpc_conn_verdict(struct conn *c, const struct wire_hdr *h, int *from, char *why, size_t cap);
/* Keeps a request (frames moved out) until c is verified; false with why
 * if the bounds on held messages are reached. */
bool rpc_conn_hold(struct conn *c, const struct wire_hdr *h, zmq_msg_t *frames, int n, char *why, size_t cap);
/* Counts a bad message from c (log line, maybe the cut-off). */
void rpc_conn_bad(struct conn *c, enum rpc_drop kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void rpc_conn_bind(const unsigned char *rid, size_t len, int worker);
/* The worker rid is bound to, or -1. */
int rpc_conn_worker(const unsigned char *rid, size_t len);
/* Unbinds every connection of a worker that left or died. */
void rpc_conn_forget_worker(int id);
/* I/O loop: replays what newly verified connections held, starts and
 * expires checks. */
void rpc_conn_poll(void);
/* After the I/O thread stopped: forgets every connection. */
void rpc_conn_reset(void);
/* The hold time (rpc_opts.heartbeat_timeout_ms) and frame bound; registers __conn_check. */
void rpc_conn_init(int hold_ms, size_t max_frame_bytes);
/* placement.c: the owner-side functions of remote devices (remote_module_init
 * registers them: programs that use no remote modules serve none). */
void rpc_placement_register(void);
void rpc_counters_reset(void);

/* curve.c: no-ops unless opts.curve */
int rpc_curve_setup(const struct rpc_opts *o, void *zctx, int rank, const char *master); /* -1 with error on bad keys */
/* The directory is in: from now on a failed handshake with the rendezvous is only logged. */
void rpc_curve_set_joined(void);
void rpc_curve_server(void *sock);
void rpc_curve_client(void *sock);
void rpc_curve_zap(void);                     /* I/O thread: answer ZAP requests */
/* Handshake watch (curve.c, whether or not curve is on): a socket monitor
 * on the router (refused incoming handshakes are logged and counted) and,
 * on a worker that is not rank 0, on its dealer to the rendezvous (a
 * handshake that cannot succeed fails the rendezvous's calls with the
 * reason, instead of letting them time out). Attached before the socket
 * binds or connects (events before that are lost): the router's in
 * rpc_init, the dealer's by rpc_add_peer (the first dealer to rank 0). */
void rpc_watch_router_start(void *router);
void rpc_watch_dealer(void *dealer);
/* I/O thread: reads the monitors' events (the sockets of
 * rpc_curve_sockets, polled for POLLIN). */
void rpc_watch_router(void);
void rpc_watch_rendezvous(void);
/* The ZAP and monitor sockets for the I/O thread's poll (each NULL when
 * there is none). */
void rpc_curve_sockets(void **zap, void **mon_router, void **mon_rdv);
/* I/O thread: why the rendezvous refused our handshake, or NULL. */
const char *rpc_rdv_refused(void);
/* Closes the ZAP socket and the monitors (after the I/O thread stopped,
 * before the context terminates). */
void rpc_curve_close(void);

/* transport.c: tcp:// or ipc:// (pure functions, no state). */
/* t, or for AUTO what TRIB_RPC_TRANSPORT says. */
enum rpc_transport rpc_transport_resolve(enum rpc_transport t);
const char *rpc_transport_name(enum rpc_transport t);
/* The ipc:// twin of "tcp://HOST:PORT" in this user's private directory
 * (created when create_dir); false if it has none. */
bool rpc_ipc_twin(const char *tcp_ep, char *out, size_t cap, bool create_dir);
/* Binds router to the twin of its TCP endpoint unless t is TCP (then a
 * stale twin is removed); *ipc_ep is what was bound ("" if nothing). -1
 * with error only when t is IPC and it cannot. */
int rpc_ipc_bind(void *router, const char *tcp_ep, enum rpc_transport t, char *ipc_ep, size_t cap);
/* Removes the twin a router bound (before it closes: libzmq 4.3 leaves the
 * file behind). */
void rpc_ipc_unbind(const char *ipc_ep);
/* What to connect to for endpoint ep: its ipc:// twin when t allows it and
 * the twin exists, else ep. -1 with error when t is IPC and there is no twin. */
int rpc_connect_endpoint(const char *ep, enum rpc_transport t, char *via, size_t cap);

/* value.c: a NUL-terminated copy of n bytes. */
char *rpc_dup_bytes(const void *p, size_t n);

/* wire.c: the sender id stamped on every message (rpc_self_id reads it). */
void wire_set_self_id(int id);
/* wire.c: builds a message. payload may be NULL (nil); err non-NULL makes
 * an error payload (a string). NULL with error if the payload cannot be
 * encoded. */
struct outmsg *rpc_build_msg(int type, uint64_t req_id, const char *fn, int to, bool is_response,
                             int64_t ac_ctx, int64_t ac_msg, int64_t timeout_ms,
                             const struct rpc_value *payload, const char *err);

/* io.c: the I/O thread, the out queue and what it carries. What it
 * receives and its ticks go up through the functions in its settings. */
struct rpc_io_cfg {
    void *router;
    int efd;                        /* eventfd that wakes the thread */
    int heartbeat_ms, heartbeat_timeout_ms;
    /* a message on the router from routing id rid: frames[0] the header */
    void (*on_router)(const unsigned char *rid, size_t rid_len, zmq_msg_t *frames, int n);
    /* a message on the dealer to worker peer (responses) */
    void (*on_dealer)(int peer, zmq_msg_t *frames, int n);
    void (*on_heartbeat)(int64_t now_ms);
    void (*after_poll)(void);       /* after each round of receiving and timers */
};
void rpc_io_start(const struct rpc_io_cfg *cfg);
/* Stops and joins the thread (it flushes what is queued first). */
void rpc_io_stop(void);
/* Whether this worker may ping its peers (rank 0, or admitted by it). */
void rpc_io_set_admitted(bool on);
/* A message of nframes frames (pooled when small), for rpc_out_push or
 * rpc_outmsg_free. */
struct outmsg *rpc_outmsg_new(int nframes);
void rpc_outmsg_free(struct outmsg *m);
/* Queues m for the I/O thread (takes it; a call's future fails if the
 * queue is full or the agent down). Any thread. */
void rpc_out_push(struct outmsg *m);
/* Before the I/O thread starts: opens the queue. After it stopped: frees
 * what is queued (the queue stays closed until the next open). */
void rpc_out_open(void);
void rpc_out_reset(void);
void rpc_wake_io(void);

/* message.c: received messages (I/O thread). */
void rpc_msg_init(int max_pending_per_worker, size_t max_pending_bytes_per_worker);
void rpc_msg_fini(void);
/* Handles a message from router connection c (frames[0] the header). */
void rpc_handle_router(struct conn *c, zmq_msg_t *frames, int n);
/* Handles a message on the dealer to worker `peer` (its responses). */
void rpc_handle_dealer(int peer, zmq_msg_t *frames, int n);
/* Queues an error reply `text` to request req_id of router connection rid. */
void rpc_reply_error_to(const unsigned char *rid, size_t rid_len, uint64_t req_id, const char *text);

/* call.c: the default timeout (rpc_opts.default_timeout_ms). */
void rpc_call_init(int default_timeout_ms);
/* pending.c: the pending table (I/O thread) and the calls in flight. */
void rpc_pending_add(struct rpc_future *f);
/* The pending call req_id made to worker `peer`, unlinked; NULL if none. */
struct rpc_future *rpc_pending_take(uint64_t req_id, int peer);
/* Drops the table's reference to a completed call. */
void rpc_pending_done(struct rpc_future *f);
/* Fails the calls pending on worker `peer` (-1: all) with `why`. */
void rpc_fail_pending_to(int peer, const char *why);
/* Fails the calls whose deadline has passed. */
void rpc_expire_pending(int64_t now_ms);
/* Calls awaiting their reply (I/O thread). */
int rpc_pending_count(void);
/* I/O thread: fails the calls past their deadline (every 5 ms at most). */
void rpc_pending_timers(int64_t now_ms);
/* Calls started and not yet completed (any thread): a graceful shutdown
 * waits for 0. rpc_call_started counts one more (the offline agent's). */
int rpc_calls_in_flight(void);
void rpc_call_started(void);
/* Sends a one-way request (no reply, not tracked) to worker `to`. */
void rpc_send_oneway(int to, const char *fn, const struct rpc_value *args);

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
