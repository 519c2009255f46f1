/* Public API of the RPC layer: processes and rendezvous, a tagged value type,
 * rpc_sync/rpc_async/rpc_remote, futures, deferred replies and RRefs with the
 * semantics of torch.distributed.rpc, over ZeroMQ + msgpack (docs/design.md §4; rpc/README.md: a worked example,
 * threads and who owns what, the wire format). */
#ifndef TRIB_RPC_RPC_H
#define TRIB_RPC_RPC_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

struct rref;
struct rpc_future;
struct rpc_request;

/* ---- errors ------------------------------------------------------------ */

/* Message of the last recoverable error on this thread ("" if none). Every
 * function below that returns -1/NULL sets it. */
const char *rpc_last_error(void);
/* Sets this thread's error text (printf-style); returns -1. For layers built
 * on rpc (distributed autograd, dist_optim) reporting through it. */
int rpc_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- values ------------------------------------------------------------ */

enum rpc_kind {
    RPC_NIL, RPC_BOOL, RPC_INT, RPC_DOUBLE, RPC_STR, RPC_BYTES,
    RPC_TENSOR, RPC_RREF, RPC_LIST, RPC_MAP
};

struct rpc_kv;

/* A tagged value. A struct value owns what it points to (strings, bytes,
 * items, one tensor reference, one RRef reference); rpc_value_clear releases
 * it. Map keys are strings. */
struct rpc_value {
    enum rpc_kind kind;
    union {
        bool b;
        int64_t i;
        double d;
        struct { char *ptr; size_t len; } str;      /* RPC_STR (NUL-terminated) and RPC_BYTES */
        struct tensor *tensor;
        struct rref *rref;
        struct { struct rpc_value *items; size_t len; } list;
        struct { struct rpc_kv *items; size_t len; } map;
    };
};
struct rpc_kv { char *key; struct rpc_value val; };

static inline struct rpc_value rpc_nil(void) { struct rpc_value v = { .kind = RPC_NIL }; return v; }
static inline struct rpc_value rpc_bool(bool b) { struct rpc_value v = { .kind = RPC_BOOL, .b = b }; return v; }
static inline struct rpc_value rpc_int(int64_t i) { struct rpc_value v = { .kind = RPC_INT, .i = i }; return v; }
static inline struct rpc_value rpc_double(double d) { struct rpc_value v = { .kind = RPC_DOUBLE, .d = d }; return v; }
/* Copies s. */
struct rpc_value rpc_str(const char *s);
/* Copies n bytes. */
struct rpc_value rpc_bytes(const void *p, size_t n);
/* Takes a new reference to t (the caller keeps its own). */
struct rpc_value rpc_tensor(struct tensor *t);
/* Takes a new reference to r (the caller keeps its own). */
struct rpc_value rpc_rref(struct rref *r);
/* A list of n nil items, to be filled in place (v.list.items[i] = ...). */
struct rpc_value rpc_list(size_t n);
/* A map of n entries with NULL keys and nil values; fill with rpc_map_set. */
struct rpc_value rpc_map(size_t n);
/* Sets entry i of a map to (key copied, val moved in). */
void rpc_map_set(struct rpc_value *map, size_t i, const char *key, struct rpc_value val);
/* Looks up a key in a map; NULL if absent or v is not a map. */
const struct rpc_value *rpc_map_get(const struct rpc_value *v, const char *key);
/* Releases what v owns and sets it to nil. Accepts NULL. */
void rpc_value_clear(struct rpc_value *v);
/* Deep copy (strings/items copied; tensors and RRefs retained). */
struct rpc_value rpc_value_copy(const struct rpc_value *v);
/* Structural equality; tensors compare dtype, shape and bytes. */
bool rpc_value_equal(const struct rpc_value *a, const struct rpc_value *b);
const char *rpc_kind_name(enum rpc_kind k);

/* ---- processes --------------------------------------------------------- */

#define RPC_RANK_ENV (-1)      /* read RANK or SLURM_PROCID */
#define RPC_RANK_DYNAMIC (-2)  /* join an existing world late; rank 0 assigns an id */

enum rpc_event_kind { RPC_EVENT_JOIN, RPC_EVENT_LEAVE, RPC_EVENT_FAILED };
struct rpc_event { enum rpc_event_kind kind; int id; char name[64]; };

/* How this process reaches the others: AUTO uses ipc:// (a Unix domain
 * socket) to a worker on this host and tcp:// to the others; TCP and IPC
 * force one (IPC fails to reach a worker on another host). SHM: as AUTO,
 * and then a shared-memory link to each worker on this host, under its
 * ipc:// connection (rpc/README.md "Transports"). */
enum rpc_transport { RPC_TRANSPORT_AUTO, RPC_TRANSPORT_TCP, RPC_TRANSPORT_IPC, RPC_TRANSPORT_SHM };

struct rpc_opts {
    const char *name;          /* unique worker name (required, < 64 bytes) */
    int rank;                  /* 0..world_size-1, RPC_RANK_ENV or RPC_RANK_DYNAMIC */
    int world_size;            /* static members; 0: WORLD_SIZE or SLURM_NTASKS */
    const char *master;        /* "tcp://host:port"; NULL: MASTER_ADDR/MASTER_PORT.
                                  Rank 0 binds it (port 0: any free port). */
    const char *bind_host;     /* interface non-zero ranks bind; NULL: 127.0.0.1 */
    int default_timeout_ms;    /* 0: 60000; per-call timeout 0 means this */
    int init_timeout_ms;       /* 0: 30000 */
    int num_handler_threads;   /* 0: 4 */
    int heartbeat_ms;          /* 0: 200 */
    int heartbeat_timeout_ms;  /* silence after which a peer is dead; 0: 5000 (a loaded box
                                  can starve a healthy process of CPU for a second) */
    size_t max_frame_bytes;    /* ZMQ_MAXMSGSIZE; 0: 1 GiB */
    /* Requests from one worker received here and not yet answered (queued,
     * running or deferred), beyond which its calls fail as busy: their
     * number (0: 16384) and bytes (0: 2 x max_frame_bytes, at least 1 GiB;
     * one request alone may always be as big as a frame). */
    int max_pending_per_worker;
    size_t max_pending_bytes_per_worker;
    int spin_us;               /* a thread waiting on a call of up to 256 KiB yields the CPU
                                  (sched_yield) up to this long before sleeping; 0: the
                                  environment's TRIB_RPC_SPIN_US, else 200; <0: never */
    /* CURVE encryption (all workers must agree): this worker's keypair (Z85,
     * 40 characters; zmq_curve_keypair makes one), the public key of the
     * workers it connects to (NULL: its own, i.e. one cluster keypair), and
     * the client public keys it admits (NULL-terminated; NULL: its own). */
    bool curve;
    const char *curve_public_key, *curve_secret_key, *curve_server_key;
    const char *const *curve_allow;
    /* Membership changes, called on the I/O thread (must not block). */
    void (*on_event)(const struct rpc_event *ev, void *user);
    void *event_user;
    /* Rank 0 only: called once its rendezvous socket is bound, before
     * rpc_init waits for the others, with the real endpoint (useful with
     * port 0: hand it to the other processes here). */
    void (*on_listening)(const char *endpoint, void *user);
    void *listening_user;
    /* Rank 0 only: rpc_init stops waiting for the other workers, and
     * fails, once *cancel is non-zero (a signal handler's flag; looked at
     * every 50 ms). NULL: it waits up to init_timeout_ms. */
    const volatile sig_atomic_t *cancel;
    /* Rank 0 only: admit workers that join with RPC_RANK_DYNAMIC (they get
     * ids from world_size up). false (the default): only the declared
     * world, ranks 1..world_size-1, can join; a dynamic hello is refused
     * like any other rank outside the world ("rank -2 out of range 1..N"). */
    bool allow_dynamic;
    /* RPC_TRANSPORT_AUTO (0): the environment variable TRIB_RPC_TRANSPORT
     * (tcp, ipc, shm or auto) decides, auto if unset. Every worker listens on
     * its TCP endpoint (the one in the directory) and, unless TCP is
     * forced, on an ipc:// twin of it in /tmp/trib-rpc-UID/ (a private
     * directory); a caller in the same network namespace finds the twin
     * and connects through it. */
    enum rpc_transport transport;
};

/* Starts this process's RPC agent and blocks until the rendezvous is done
 * (all static ranks present, or this dynamic worker admitted). Returns -1
 * with rpc_last_error() on bad options, a duplicate name/rank, or timeout.
 * A static rank whose worker died (or left) may be taken again by a new
 * process once rank 0 has declared the old one gone: it is admitted at
 * once with the current directory, and every other worker sees an
 * RPC_EVENT_JOIN for that id. Rank 0 refuses a rank that a live worker
 * holds, a rank outside the world (RPC_RANK_DYNAMIC too, unless
 * opts.allow_dynamic), a world size other than its own (a dynamic worker
 * may send 0), a name that is empty, 64 bytes or longer, or a live
 * worker's, and every hello after rpc_refuse_joins: the same rules for a
 * dynamic rank as for a static one.
 * One agent per process; not thread-safe against rpc_shutdown. */
int rpc_init(const struct rpc_opts *opts);
/* Stops the agent. graceful: static members wait until every static member
 * has called rpc_shutdown and no worker has calls in flight; a dynamic
 * worker waits for its own calls and leaves. Not graceful: fails pending
 * calls and leaves at once. Frees every RRef the process still owns. */
void rpc_shutdown(bool graceful);
/* "tcp://127.0.0.1:PORT" the master (rank 0) is bound to; valid after
 * rpc_init on rank 0 (the real port when 0 was asked). */
const char *rpc_master_endpoint(void);

/* endpoint: the worker's TCP endpoint (the directory's); via: what this
 * process connects to it through (that endpoint, or its ipc:// twin). */
struct rpc_worker_info { int id; char name[64]; char endpoint[128]; char via[160]; };
/* Fill *out; -1 with error if no such live worker. */
int rpc_get_worker_info(const char *name, struct rpc_worker_info *out);
int rpc_get_worker_info_by_id(int id, struct rpc_worker_info *out);
/* This worker's info. */
const struct rpc_worker_info *rpc_self(void);
/* Live workers (including self), up to cap; returns the count written. */
int rpc_get_workers(struct rpc_worker_info *out, int cap);
/* Waits up to timeout_ms (<0: forever) for the next membership event.
 * Returns 1 with *ev filled, 0 on timeout. */
int rpc_next_event(struct rpc_event *ev, int timeout_ms);
/* Rank 0: from now on every hello (a late dynamic worker, or a static
 * rank taken again after its worker died) is refused with `why` (copied),
 * so that nobody joins a world that is winding down. rpc_shutdown does it
 * too. Any thread; no effect on other ranks. */
void rpc_refuse_joins(const char *why);

/* ---- local worlds ------------------------------------------------------ */

/* One process of a local world: its rank, the world's size and the
 * rendezvous endpoint to put in rpc_opts.master. Returns its exit code. */
typedef int (*rpc_spawn_fn)(int rank, int world_size, const char *master, void *arg);
/* Runs fn in world_size forked processes on this machine, like
 * torch.multiprocessing.spawn: each gets its rank and one free loopback
 * endpoint, which rank 0's rpc_init binds. Call before this process starts
 * any thread (before rpc_init). Blocks until every rank has exited, at most
 * timeout_s (< 0: no limit). Returns 0 when all exited 0; otherwise kills
 * the ranks still running and returns -1 with rpc_last_error() naming the
 * first rank that failed ("rpc_spawn: rank 2 exited 1", "rpc_spawn: rank 1
 * killed by signal 9 (Killed)", "rpc_spawn: rank 0 still running after 60 s"). */
int rpc_spawn(int world_size, rpc_spawn_fn fn, void *arg, double timeout_s);

/* ---- statistics ---------------------------------------------------------- */

/* What this process's agent refused since rpc_init. Every connection on a
 * worker's router belongs to the worker that vouched for it (or, on rank 0,
 * said hello on it); a message whose claimed sender is another worker, or
 * that no live worker vouches for in time, is dropped with a rate-limited
 * line on stderr naming the connection, and a connection that sends more
 * than 1000 bad messages is cut off. */
struct rpc_stats {
    uint64_t dropped_spoofed;     /* claimed a sender its connection does not belong to */
    uint64_t dropped_unverified;  /* from a connection no live worker vouched for in time */
    uint64_t dropped_malformed;   /* undecodable or ill-formed */
    uint64_t dropped_cut;         /* from a connection already cut off */
    /* requests held for their connection's check whose claimed worker died
     * or was replaced before it vouched for them: a dead process's last
     * calls, which nobody waits for (not logged) */
    uint64_t dropped_gone;
    uint64_t connections_cut;     /* connections cut off for too many bad messages */
    uint64_t refused_busy;        /* requests refused by a bound on what may wait */
    uint64_t forks_expired;       /* RRef forks that waited in vain for their RRef */
    /* Incoming connections whose handshake this worker refused: no CURVE
     * facing its CURVE, another run's key, a key not on its allow-list, or
     * CURVE facing it without. Each is logged (rate-limited) naming the
     * peer's address when it can still be read, and for a key not on the
     * allow-list the key's first characters. */
    uint64_t refused_auth;
    /* This worker's own handshakes with the rendezvous (rank 0) that failed;
     * after a failed rpc_init, non-zero means "refused", not "unreachable". */
    uint64_t handshakes_failed;
    int held_messages;            /* requests now waiting for their connection's check */
    /* Traffic on this worker's sockets since rpc_init: whole messages (calls,
     * replies, heartbeats, membership) and the bytes of their frames (header
     * + tensor frames; ZeroMQ's framing and TCP/IP not counted). A call to
     * itself goes through its own sockets and counts twice: sent and
     * received, request and reply. */
    uint64_t msgs_sent, msgs_recv, bytes_sent, bytes_recv;
    /* The part of them that went through shared-memory links
     * (RPC_TRANSPORT_SHM); the rest went through the sockets. */
    uint64_t shm_msgs_sent, shm_msgs_recv, shm_bytes_sent, shm_bytes_recv;
    /* Times the I/O thread woke up (passes of its loop): about one per
     * message sent or received, and one per heartbeat otherwise, however
     * long a call takes to be answered. */
    uint64_t io_wakeups;
};
/* Fills *out (zeros before the first rpc_init). Any thread. */
void rpc_get_stats(struct rpc_stats *out);

/* ---- functions --------------------------------------------------------- */

#define RPC_DEFERRED 1
/* A handler: args is a list (borrowed). Return 0 with *result set (moved
 * out), -1 after rpc_request_fail, or RPC_DEFERRED after which the request
 * stays valid until rpc_request_complete/rpc_request_fail from any thread.
 * Runs on a handler thread (may block and make RPCs) unless registered
 * RPC_FN_INLINE (runs on the I/O thread: must be quick and never block). */
typedef int (*rpc_fn)(struct rpc_request *req, const struct rpc_value *args,
                      struct rpc_value *result, void *user);
#define RPC_FN_INLINE 1u

/* Registers fn under name (replacing one of the same name). Call before
 * peers may call it (before rpc_init is simplest). Thread-safe. */
void rpc_register(const char *name, rpc_fn fn, void *user);
void rpc_register_ex(const char *name, rpc_fn fn, void *user, unsigned flags);

/* Sets the error text of a failing request (printf-style); the caller sees
 * "rpc: <callee>: <fn>: <text>". Returns -1. */
int rpc_request_fail(struct rpc_request *req, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Completes a deferred request with *result (moved out; may be NULL for nil),
 * or fails it with the text from rpc_request_fail. Any thread; frees req. */
void rpc_request_complete(struct rpc_request *req, struct rpc_value *result);
void rpc_request_finish_error(struct rpc_request *req);
/* Name of the calling worker. */
const char *rpc_request_caller(const struct rpc_request *req);
int rpc_request_caller_id(const struct rpc_request *req);

/* ---- calls and futures ------------------------------------------------- */

/* Calls fn on worker `to` with args (a list, or NULL for none) and waits.
 * timeout_ms 0: the default; <0: none. Returns 0 with *result set (caller
 * owns), or -1 with error: callee error ("rpc: w1: add: ..."), timeout
 * ("rpc: timed out after 100 ms calling w1.slow"), dead peer, unknown worker. */
int rpc_sync(const char *to, const char *fn, const struct rpc_value *args,
             struct rpc_value *result, int timeout_ms);
/* Non-blocking: returns a future (never NULL; a failed start gives a failed
 * future). The caller frees it with rpc_future_free. */
struct rpc_future *rpc_async(const char *to, const char *fn, const struct rpc_value *args, int timeout_ms);
/* Blocks until done. Returns 0 and a copy of the value in *out (if out is
 * non-NULL), or -1 with the call's error in rpc_last_error(). Never from
 * the I/O thread (inline handlers, then-callbacks, event callbacks): that
 * aborts, as it could never return. rpc_sync/rref_to_here wait likewise. */
int rpc_future_wait(struct rpc_future *f, struct rpc_value *out);
bool rpc_future_done(struct rpc_future *f);
/* Error text of a failed, done future, else NULL. */
const char *rpc_future_error(struct rpc_future *f);
/* Calls cb(f, user) once when f completes: at once on this thread if it is
 * already done, else on the completing thread (I/O thread: must not block). */
void rpc_future_then(struct rpc_future *f, void (*cb)(struct rpc_future *f, void *user), void *user);
/* Waits for all; 0 if all succeeded, else -1 with the first error. */
int rpc_future_wait_all(struct rpc_future **fs, size_t n);
/* Blocks (on a condition variable, no polling) until at least one of
 * fs[0..n) is done, successfully or not, and returns the lowest index of a
 * done one (then rpc_future_error / rpc_future_wait tell how it ended). NULL
 * entries are skipped. timeout_ms < 0: no limit; 0: just looks. -1 with
 * rpc_last_error() when none is done within timeout_ms ("rpc: no future
 * done within 100 ms") or when there is no future to wait on. Never from
 * the I/O thread (aborts, as rpc_future_wait does). */
int rpc_future_wait_any(struct rpc_future **fs, size_t n, int timeout_ms);
/* Drops the caller's reference. Accepts NULL. */
void rpc_future_free(struct rpc_future *f);

/* ---- RRefs -------------------------------------------------------------- */

/* Object types for rpc_remote constructors: a destructor (called on the
 * owner when the last user anywhere is gone, on whichever thread noticed,
 * often the I/O thread: must be quick and must not block) and an optional
 * to_value (for rref_to_here of an object; runs on a handler thread). */
struct rpc_type {
    const char *name;
    void (*destroy)(void *obj);
    int (*to_value)(void *obj, struct rpc_value *out);
};
/* A constructor returns a new object or NULL after rpc_request_fail. */
typedef void *(*rpc_ctor)(struct rpc_request *req, const struct rpc_value *args, void *user);
/* A method on an owner's object (rref_rpc_sync/async): like rpc_fn. The
 * owner keeps obj alive until the method returns (not until a deferred
 * reply is completed). */
typedef int (*rpc_method)(struct rpc_request *req, void *obj, const struct rpc_value *args,
                          struct rpc_value *result, void *user);

/* Registers a constructor `name` building objects of *type (copied). */
void rpc_register_ctor(const char *name, const struct rpc_type *type, rpc_ctor ctor, void *user);
/* Registers method `name` of objects of type `type_name` (replacing one of
 * the same name: calls from then on run the new one, on objects built
 * before too). Any thread, any time. */
void rpc_register_method(const char *type_name, const char *name, rpc_method fn, void *user);
/* flags RPC_FN_INLINE: the method runs on the owner's I/O thread as the
 * call arrives (no thread hop), when the object is built; it must be quick
 * and never block (validate and queue, as the RL agent's act does). */
void rpc_register_method_ex(const char *type_name, const char *name, rpc_method fn, void *user, unsigned flags);

/* An owner RRef on this worker holding *v (moved in: *v becomes nil), like
 * torch's RRef(value): e.g. rpc_tensor(param) so a local parameter can be
 * handed to dist_optim beside remote ones. RPC must be initialised. The
 * caller owns one reference. */
struct rref *rref_new_local_value(struct rpc_value *v);
/* Builds an object on worker `to`: `fn` is a registered constructor (the
 * RRef holds the object) or a registered function (the RRef holds its
 * result value). Returns at once with a user RRef (owner RRef if to is this
 * worker); construction errors surface on to_here / method calls. NULL with
 * error only for an unknown worker or args that are not a list. timeout_ms (0: the default) bounds the
 * creation message. The caller owns one reference. */
struct rref *rpc_remote(const char *to, const char *fn, const struct rpc_value *args, int timeout_ms);
/* Copies the owner's value here (objects through their type's to_value).
 * timeout_ms (0: the default, <0: none) bounds the fetch, or on the owner
 * the wait for the construction. 0, or -1 with error. */
int rref_to_here(struct rref *r, struct rpc_value *out, int timeout_ms);
/* On the owner only: the value (borrowed) / the object, waiting for the
 * construction to finish (so not from an inline handler). NULL with error
 * on a user, after a failed construction, or for the other kind. */
const struct rpc_value *rref_local_value(struct rref *r);
void *rref_local_object(struct rref *r);
/* rref_local_object, checking that the object's rpc_type is named
 * type_name (NULL: any); NULL with error otherwise ("rref_local_object:
 * the RRef holds a T, not a U"). */
void *rref_local_object_of(struct rref *r, const char *type_name);
int rref_owner(const struct rref *r);
bool rref_is_owner(const struct rref *r);
/* True once the owner has acknowledged this user (always true on the owner). */
bool rref_confirmed_by_owner(const struct rref *r);
/* The RRef's id: the creating worker's id in the top 16 bits, the low 48
 * not guessable. Only the owner and the holders of its forks may use it
 * (call, fetch, delete their own fork); others are refused. */
uint64_t rref_id(const struct rref *r);
/* Calls method `method` on the owner's object with args (a list, or NULL);
 * waits like rpc_sync. -1 with error: the method's failure, an unknown
 * method or RRef, an RRef holding a value, timeout or a dead owner. */
int rref_rpc_sync(struct rref *r, const char *method, const struct rpc_value *args,
                  struct rpc_value *result, int timeout_ms);
struct rpc_future *rref_rpc_async(struct rref *r, const char *method, const struct rpc_value *args, int timeout_ms);
struct rref *rref_retain(struct rref *r);
/* Drops a local reference; the last one on a user tells the owner (G1). */
void rref_free(struct rref *r);
/* Owner side: number of live owner entries in this process (for tests). */
int rref_owned_count(void);

#endif
