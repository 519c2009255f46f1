/* rpc/ internals, the calls layer (rpc/README.md "Layers"): requests and
 * the handler pool (request.c), calls (call.c), who a connection on the
 * router is (conn.c), and received messages (message.c). conn.c and
 * message.c call each other (held requests are replayed through
 * message.c); nothing here calls membership or the RRef files. Below it:
 * transport.h. */
#ifndef TRIB_RPC_CALLS_H
#define TRIB_RPC_CALLS_H

#include "rpc/transport.h"

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
    bool caller_counted;            /* counted against its caller's bounds (request.c) until answered */
    size_t bytes;                   /* its frames' size (pending_bytes_by) */
};

/* ---- request.c ---- */
bool rpc_find_fn(const char *name, size_t n, rpc_fn *fn, void **user, unsigned *flags);
void rpc_reply(struct rpc_request *req, struct rpc_value *result, const char *err);
void rpc_request_free(struct rpc_request *req);
/* What a received request is made from (message.c fills it from the
 * wire header; the lengths are wire.c's checked ones: rid_len <= 256,
 * fn_len 1..255). */
struct rpc_request_in {
    uint64_t req_id;
    int caller;                     /* -1: none yet (before its hello) */
    const unsigned char *rid; size_t rid_len;
    const char *fn; size_t fn_len;
    int64_t ac_ctx, ac_msg;         /* kept only from a known caller */
    rpc_fn handler;
    void *user;
    size_t bytes;                   /* its frames' size */
};
/* The constructor of a received request, the only writer of its fields
 * with request.c's own functions: args are moved in (*args is NIL after).
 * Counted until freed (or rpc_request_uncount). */
struct rpc_request *rpc_request_new_received(const struct rpc_request_in *in, struct rpc_value *args);
/* Sends req to another handler (an RRef method call resolved on arrival:
 * rref_objects.c), with its two user pointers. */
void rpc_request_route(struct rpc_request *req, rpc_fn handler, void *user, void *user2);
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
/* Frees the pooled requests (at shutdown). */
void rpc_requests_drain(void);

/* Runs job(arg) on a handler thread. */
void rpc_pool_submit(void (*job)(void *arg), void *arg);
/* Looks up a registered function. */
bool rpc_lookup_fn(const char *name, rpc_fn *fn, void **user);
/* A request with no caller (replies go nowhere), for running handlers and
 * constructors locally; its error text is kept for the caller. */
struct rpc_request *rpc_request_new_local(const char *fn);
const char *rpc_request_error_text(const struct rpc_request *req);
void rpc_request_free_local(struct rpc_request *req);
/* Sets a request's error to `text` verbatim (already prefixed). */
void rpc_request_fail_text(struct rpc_request *req, const char *text);
/* Queues an error reply `text` to request req_id of router connection rid. */
void rpc_reply_error_to(const unsigned char *rid, size_t rid_len, uint64_t req_id, const char *text);
/* The autograd ids a request arrived with. */
void rpc_request_autograd_ids(const struct rpc_request *req, int64_t *ctx_id, int64_t *msg_id);

/* ---- call.c ---- */
/* call.c: the default timeout (rpc_opts.default_timeout_ms). */
void rpc_call_init(int default_timeout_ms);
/* rpc_opts.default_timeout_ms (after its default is applied). */
int rpc_default_timeout_ms(void);
struct rpc_future *rpc_async_id(int to, const char *fn, const struct rpc_value *args, int timeout_ms);
/* Fire-and-track internal call (timeout_ms 0: the default): runs
 * cb(f, user) on completion (I/O thread or caller thread), then frees the
 * future. Counted as in flight, so a graceful shutdown waits for it. */
void rpc_call_internal(int to, const char *fn, struct rpc_value *args_moved, int timeout_ms,
                       void (*cb)(struct rpc_future *f, void *user), void *user);
/* The rest of rpc_call_internal for a call already started: takes f. */
void rpc_call_track(struct rpc_future *f, void (*cb)(struct rpc_future *f, void *user), void *user);
/* Sends a one-way request (no reply, not tracked) to worker `to`. */
void rpc_send_oneway(int to, const char *fn, const struct rpc_value *args);


/* ---- conn.c ---- */
/* conn.c: who a connection on the router is (I/O thread, except the
 * counters). A routing id is bound to worker W when W vouches for it
 * (__conn_check, asked through our dealer to W's registered endpoint) or,
 * on rank 0, when W says hello on it. */
struct conn;
/* Why messages were dropped: enum rpc_drop, base.h. */
enum { CONN_ACCEPT, CONN_HOLD, CONN_REFUSE };
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
/* The directory is in: from now on a request from a connection in the name
 * of a worker unknown here waits only the hold time (before, such a worker
 * may be one this worker has yet to learn of, however long that takes). */
void rpc_conn_set_joined(void);
/* Unbinds every connection of a worker that left or died. */
void rpc_conn_forget_worker(int id);
/* I/O loop: replays what newly verified connections held, starts and
 * expires checks. */
void rpc_conn_poll(void);
/* After the I/O thread stopped: forgets every connection. */
void rpc_conn_reset(void);
/* The hold time (rpc_opts.heartbeat_timeout_ms), the frame bound, and the
 * function a verified connection's held requests are handed back to
 * (rpc_agent.c gives message.c's rpc_handle_router: conn.c calls nothing in
 * message.c, which calls into it); registers __conn_check. */
void rpc_conn_init(int hold_ms, size_t max_frame_bytes, void (*replay)(struct conn *c, zmq_msg_t *frames, int n));

/* ---- message.c ---- */
/* message.c: received messages (I/O thread). */
void rpc_msg_init(int max_pending_per_worker, size_t max_pending_bytes_per_worker);
void rpc_msg_fini(void);
/* Handles a message from router connection c (frames[0] the header). */
void rpc_handle_router(struct conn *c, zmq_msg_t *frames, int n);
/* Handles a message on the dealer to worker `peer` (its responses). */
void rpc_handle_dealer(int peer, zmq_msg_t *frames, int n);

#endif
