/* rpc/ internals, the bottom layer (rpc/README.md "Layers"): limits, the
 * free lists, the counters and the drop log, futures' insides, and the
 * RRef hooks the value type calls. Files: error.c value.c
 * future.c stats.c. Not a public header: only rpc/ and its fuzz targets
 * include the internal headers. */
#ifndef TRIB_RPC_BASE_H
#define TRIB_RPC_BASE_H

#include <msgpack.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/freelist.h"
#include "rpc/rpc.h"

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
/* Routing ids of a peer's closed dealers still vouched for (peers.c). */
#define RPC_OLD_RIDS 4
/* Bad messages after which a connection is cut off. */
#define RPC_MAX_BAD 1000
/* Connections the router remembers (bound ones and strangers). */
#define RPC_MAX_CONNS 4096
/* Waiting on a call no bigger than this starts with a short yielding spin
 * (rpc_opts.spin_us); bigger ones leave both cores to the copies. */
#define RPC_SMALL_CALL_BYTES (256 * 1024)

/* ---- free lists ----------------------------------------------------------------
 * Messages, requests and futures come from common/freelist.h lists, each
 * owned by the file that defines it (future.c, request.c, wire.c), holding
 * at most this many blocks. */
#define RPC_FREELIST_MAX 4096
#define RPC_OUTMSG_POOLED_FRAMES 2

/* ---- stats.c: counters (any thread) and the drop log (I/O thread) -------- */
enum rpc_stat {
    RPC_STAT_SPOOFED, RPC_STAT_UNVERIFIED, RPC_STAT_MALFORMED, RPC_STAT_CUT_DROPPED, RPC_STAT_CUTS, RPC_STAT_BUSY,
    RPC_STAT_FORKS_EXPIRED, RPC_STAT_REFUSED_AUTH, RPC_STAT_HANDSHAKES_FAILED, RPC_STAT_GONE,
    RPC_STAT_HELD,                  /* messages held now (added and taken away) */
    /* Traffic on the sockets (the I/O thread adds): whole messages and
     * their frames' bytes, routing-id frames not counted. */
    RPC_STAT_MSGS_SENT, RPC_STAT_MSGS_RECV, RPC_STAT_BYTES_SENT, RPC_STAT_BYTES_RECV,
    RPC_STAT_IO_WAKEUPS,            /* passes of the I/O thread's loop */
    /* The part of the traffic above that went through shared-memory links. */
    RPC_STAT_SHM_MSGS_SENT, RPC_STAT_SHM_MSGS_RECV, RPC_STAT_SHM_BYTES_SENT, RPC_STAT_SHM_BYTES_RECV,
    RPC_STAT_N
};
/* Adds n to counter s (relaxed; any thread). rpc_get_stats reads them. */
void rpc_stat_add(enum rpc_stat s, int64_t n);
/* Why messages were dropped (conn.c), each kind with its counter
 * (rpc_drop_stat). GONE: held requests whose claimed worker died or was
 * replaced before it vouched for them (a dead process's last calls: nobody
 * waits for them). */
enum rpc_drop { RPC_DROP_SPOOFED, RPC_DROP_UNVERIFIED, RPC_DROP_MALFORMED, RPC_DROP_BUSY, RPC_DROP_GONE };
enum rpc_stat rpc_drop_stat(enum rpc_drop kind);
/* A line on stderr, at most 10 a second (the next line printed says how
 * many were suppressed). I/O thread only. */
void rpc_drop_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One source's dropped messages as drop-log lines (a connection's): the
 * first at once, later ones at most one a second, each with the count it
 * stands for and the last reason. Zero it to start. I/O thread only. */
struct rpc_drop_lines {
    int64_t logged_at;              /* its last line (0: none yet) */
    uint32_t unlogged;              /* messages dropped since, not yet in a line */
    char unlogged_why[512];         /* the last reason among them */
};
/* Counts n more messages dropped for `why`: true when a line is due now
 * (the first, or a second after the last), which the caller then writes
 * with rpc_drop_lines_write; false while they wait for a later line. */
bool rpc_drop_lines_add(struct rpc_drop_lines *l, uint32_t n, const char *why);
/* Whether what waits is due a line at now (trib_now_ms(); INT64_MAX: any
 * that waits). */
bool rpc_drop_lines_due(const struct rpc_drop_lines *l, int64_t now);
/* The line for every drop counted and not yet written: worker `self`
 * dropped them from `who` (with the `bad` count it has so far), the last
 * reason given. */
void rpc_drop_lines_write(struct rpc_drop_lines *l, const char *self, const char *who, uint32_t bad);
/* Zeroes the counters and the log's window (rpc_init). */
void rpc_counters_reset(void);

/* ---- value.c --------------------------------------------------------------------- */
/* A NUL-terminated copy of n bytes. */
char *rpc_dup_bytes(const void *p, size_t n);

/* RRef hooks. The value type (value.c) and the codec (wire.c) reach RRefs
 * only through these, as distributed autograd's are reached through its
 * hooks: neither calls into rref*.c. rref*.c installs them
 * (rref_install_hooks) at rpc_init and before it makes its first handle;
 * until then the codec refuses to send or accept an RRef.
 * fork: the fork protocol's sending side: registers a fork of r for a
 *   message to worker `to` and describes it in *out.
 * unfork: the receiving side: a new handle for the descriptor d from worker
 *   `from`; NULL with err.
 * retain, release, id: rref_retain, rref_free, rref_id.
 * The handle stays an incomplete type here (rrefs.h defines it). */
struct rref;
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
const struct rpc_rref_hooks *rref_hooks(void);
/* Copies *hooks in (NULL: none). Not thread-safe: rref_install_hooks calls
 * it once (pthread_once), before any RRef exists. */
void rpc_set_rref_hooks(const struct rpc_rref_hooks *hooks);

/* ---- future.c ---------------------------------------------------------------- */
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

#endif
