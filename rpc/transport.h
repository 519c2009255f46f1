/* rpc/ internals, the transport layer (rpc/README.md "Layers"): tcp:// and
 * ipc:// endpoints (transport.c), the directory of peers and their dealers
 * (peers.c), the pending table (pending.c), CURVE and the handshake watch
 * (curve.c), and the I/O thread that owns every socket (io.c). It hands
 * what it receives up through the functions in struct rpc_io_cfg and
 * reports lost peers through the callback given to rpc_peers_init: it
 * calls nothing above it. Below it: wire.h. */
#ifndef TRIB_RPC_TRANSPORT_H
#define TRIB_RPC_TRANSPORT_H

#include "rpc/wire.h"

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
/* Whether the dealer to worker id, connected through via, reconnects once
 * its connection closes: not to a worker on this host (via is ipc:// or a
 * loopback address) other than rank 0. There a closed connection means
 * the worker's process is gone (io.c then declares it lost at once), and
 * a reconnect would hand whoever binds its freed port or twin next the
 * calls and heartbeats queued for the dead one; a restarted worker gets a
 * new dealer (rpc_add_peer). Rank 0's dealer reconnects (a worker may
 * start before its rendezvous binds), and so do links to other hosts (a
 * connection there can break and come back). */
bool rpc_link_reconnects(int id, const char *via);

/* The peer of socket fd, as a log names it: "ip:port" (TCP), "ipc pid N"
 * (a Unix socket, from SO_PEERCRED), into buf; false if it has none. */
bool rpc_fd_peer(int fd, char *buf, size_t cap);

/* A known worker and the dealer this process calls it through. Only
 * peers.c writes an entry; other files read one through rpc_peer. */
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
    unsigned char rid[RPC_RID_LEN]; /* the dealer's routing id (random, ours) */
    uint32_t bad;                   /* I/O thread: bad messages on the dealer */
    /* I/O thread: which process of this id the entry is: bumped each time
     * a new dealer is opened to it (a worker joined, restarted, or came
     * back), so a check begun on one process can tell when the entry has
     * moved on to another. */
    uint32_t incarnation;
    /* I/O thread: the routing ids of the dealers last closed to it and when,
     * still vouched for (rpc_own_dealer_rid) for a heartbeat timeout: what
     * the peer received from them before they closed is ours. */
    unsigned char old_rid[RPC_OLD_RIDS][RPC_RID_LEN];
    int64_t old_at[RPC_OLD_RIDS];
};

/* How the directory reaches a peer (rpc_agent.c assembles one): open returns the
 * dealer to worker `id` at `endpoint` with routing id rid (RPC_RID_LEN
 * bytes), writing what it connects through to via, or NULL with error;
 * close closes one. I/O thread (or rpc_init before it starts). */
struct rpc_link_ops {
    void *(*open)(int id, const char *endpoint, const unsigned char *rid, char *via, size_t cap);
    void (*close)(void *dealer);
};

/* peers.c: the directory (see the file for its lock rules). remember_ms:
 * how long the routing id of a closed dealer is still vouched for (the
 * heartbeat timeout). */
void rpc_peers_init(const struct rpc_link_ops *links, const char *name, int remember_ms,
                    void (*lost)(int id, const char *why));
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
/* I/O thread: heard from id (resets its heartbeat clock). */
void rpc_peer_touch(int id);
/* I/O thread: id's heartbeat clock starts ms from now (a worker that will
 * learn of this one up to ms later than this one learned of it). */
void rpc_peer_grace(int id, int ms);
/* Counts a bad message on the dealer to worker id; past the limit the peer is lost. */
void rpc_peer_bad(int id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether rid is the routing id of one of this worker's dealers, or of one
 * closed less than remember_ms ago (rpc_peers_init). I/O thread. */
bool rpc_own_dealer_rid(const unsigned char *rid, size_t len);
void rpc_new_rid(unsigned char rid[RPC_RID_LEN]);

bool rpc_worker_alive(int id);
/* True between a successful rpc_init and rpc_shutdown. */
bool rpc_is_up(void);
const char *rpc_self_name(void);

/* pending.c: the pending table (I/O thread) and the calls in flight. It
 * names peers in its errors through name_of (rpc_agent.c gives rpc_peer_name):
 * it calls nothing in peers.c, which calls into it. */
void rpc_pending_init(void (*name_of)(int id, char *buf, size_t cap));
/* I/O thread: the calls pending on worker peer. */
int rpc_pending_to(int peer);
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
/* I/O thread: fails the calls past their deadline, once the earliest
 * deadline has come (the table scanned then only). */
void rpc_pending_timers(int64_t now_ms);
/* I/O thread: a time (trib_now_ms) no pending call's deadline is before,
 * when the loop must look again; 0: no call has one. */
int64_t rpc_pending_next_deadline(void);
/* Calls started and not yet completed (any thread): a graceful shutdown
 * waits for 0. rpc_call_started counts one more (the offline agent's). */
int rpc_calls_in_flight(void);
void rpc_call_started(void);

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
    /* shared-memory links (shm_links.c): the listening Unix socket (-1:
     * off) and the worker a router connection is bound to (-1: none) */
    int shm_listen_fd;
    int (*conn_worker)(const unsigned char *rid, size_t len);
    void (*after_poll)(void);       /* after each round of receiving and timers */
};
void rpc_io_start(const struct rpc_io_cfg *cfg);
/* Stops and joins the thread (it flushes what is queued first). */
void rpc_io_stop(void);
/* Whether this worker may ping its peers (rank 0, or admitted by it). */
void rpc_io_set_admitted(bool on);
/* Queues m for the I/O thread (takes it; a call's future fails if the
 * queue is full or the agent down). Any thread. */
void rpc_out_push(struct outmsg *m);
/* Before the I/O thread starts: opens the queue. After it stopped: frees
 * what is queued (the queue stays closed until the next open). */
void rpc_out_open(void);
void rpc_out_reset(void);
void rpc_wake_io(void);

/* shm_links.c: this worker's shared-memory links (TRIB_RPC_TRANSPORT=shm),
 * I/O thread only; the file says how one is set up. */
struct rpc_shm_cfg {
    int listen_fd;                  /* -1: no links */
    int (*conn_worker)(const unsigned char *rid, size_t len);
    void (*on_router)(const unsigned char *rid, size_t rid_len, zmq_msg_t *frames, int n);
    void (*on_dealer)(int peer, zmq_msg_t *frames, int n);
    /* sends m (taken) on the dealer to peer; false if it cannot */
    bool (*send_dealer)(int peer, struct outmsg *m);
};
void rpc_shm_start(const struct rpc_shm_cfg *cfg);
bool rpc_shm_on(void);
/* A message came on the dealer to peer: offers it a link if it has none. */
void rpc_shm_heard(int peer);
/* A message on the router from rid: true if it was a link's marker (taken). */
bool rpc_shm_marker(const unsigned char *rid, size_t len, zmq_msg_t *frames, int n);
/* m to a peer whose link is open: sent or queued in order, m taken (its
 * call registered as pending); false: not linked, m untouched. */
bool rpc_shm_send_dealer(struct outmsg *m);
/* A reply for a linked routing id: true if it went into the link (m not
 * taken); false: the router must carry it. */
bool rpc_shm_send_reply(struct outmsg *m);
/* Appends the links' descriptors to items[n..cap) for POLLIN; *waiting
 * set when a link has something to do without waiting. New count. */
int rpc_shm_poll_items(zmq_pollitem_t *items, int n, int cap, bool *waiting);
/* After the poll: takes offered links, reads the links, flushes backlogs,
 * ends links whose peer ended. */
void rpc_shm_service(const zmq_pollitem_t *items);
/* Closes every link (after the loop ended). */
void rpc_shm_stop(void);

#endif
