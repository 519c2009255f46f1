/* The I/O thread: it owns every ZeroMQ socket. Other threads queue
 * messages for it (the out queue) and wake it; it sends them, receives
 * whole messages from the router and the dealers and hands them to
 * message.c, and runs the timers: heartbeats, call timeouts, connection
 * checks. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/check.h"
#include "rpc/transport.h"

/* Owned here: the I/O thread, the sockets it was given (rpc_io_start),
 * the functions it hands received messages to, and its timers. Set before
 * the thread starts; then the I/O thread's only (stop and admitted: any). */
static struct {
    struct rpc_io_cfg cfg;
    pthread_t thread;
    atomic_bool stop;
    atomic_bool admitted;           /* rank 0, or a worker whose hello was answered: it may ping */
    int64_t last_hb;
} io;

/* ---- out queue ------------------------------------------------------------- */

/* Owned here: the messages other threads queue for the I/O thread. */
static struct {
    pthread_mutex_t mu;
    struct outmsg *head, *tail;     /* under mu */
    int len;                        /* under mu */
    bool io_dead;                   /* under mu: the I/O thread has exited */
} outq = { .mu = PTHREAD_MUTEX_INITIALIZER, .io_dead = true };   /* closed until rpc_out_open */

static _Thread_local bool on_io_thread;

void rpc_wake_io(void)
{
    uint64_t one = 1;
    ssize_t r = write(io.cfg.efd, &one, sizeof one);
    (void)r;
}

void rpc_out_push(struct outmsg *m)
{
    pthread_mutex_lock(&outq.mu);
    const char *why = outq.io_dead ? "shut down" : m->fut && outq.len >= MAX_QUEUE ? "send queue full" : NULL;
    if (why) {
        pthread_mutex_unlock(&outq.mu);
        if (m->fut) {
            char name[64];
            rpc_peer_name(m->peer, name, sizeof name);
            rpc_future_fail(m->fut, "rpc: %s calling %s.%s", why, name, m->fut->fn);
            rpc_pending_done(m->fut);
        }
        rpc_outmsg_free(m);
        return;
    }
    bool was_empty = outq.head == NULL;
    if (outq.tail) outq.tail->next = m; else outq.head = m;
    outq.tail = m;
    outq.len++;
    pthread_mutex_unlock(&outq.mu);
    /* The I/O thread flushes its own messages before it polls again. */
    if (was_empty && !on_io_thread) rpc_wake_io();
}

/* Before the I/O thread starts: the queue takes messages again. */
void rpc_out_open(void)
{
    pthread_mutex_lock(&outq.mu);
    outq.io_dead = false;
    pthread_mutex_unlock(&outq.mu);
}

/* After the I/O thread stopped: drops what is still queued (a call's
 * pending reference included); the queue stays closed. */
void rpc_out_reset(void)
{
    pthread_mutex_lock(&outq.mu);
    struct outmsg *m = outq.head;
    outq.head = outq.tail = NULL;
    outq.len = 0;
    pthread_mutex_unlock(&outq.mu);
    while (m) {
        struct outmsg *next = m->next;
        if (m->fut) rpc_pending_done(m->fut);
        rpc_outmsg_free(m);
        m = next;
    }
}

/* ---- sending (I/O thread) ------------------------------------------------- */

/* Whether a send to worker peer that failed with err failed for good: a
 * dealer that does not reconnect (rpc_link_reconnects: a worker on this
 * host) has no connection left, or HWM messages wait unsent on it. */
static bool closed_for_good(int peer, int err)
{
    if (err != EAGAIN || peer < 0) return false;
    struct peer *p = rpc_peer(peer);
    return p && p->alive && !rpc_link_reconnects(peer, p->via);
}

static void send_frames(void *sock, struct outmsg *m, bool with_rid)
{
    int rc = 0;
    size_t bytes = 0;
    if (with_rid) rc = zmq_send(sock, m->rid, m->rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    for (int i = 0; rc >= 0 && i < m->nframes; i++) {
        bytes += zmq_msg_size(&m->frames[i]);   /* before the send empties it */
        rc = zmq_msg_send(&m->frames[i], sock, (i + 1 < m->nframes ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT);
    }
    if (rc >= 0) {
        rpc_stat_add(RPC_STAT_MSGS_SENT, 1);
        rpc_stat_add(RPC_STAT_BYTES_SENT, bytes);
        return;
    }
    int err = zmq_errno();
    char name[64], why[160];
    rpc_peer_name(m->peer, name, sizeof name);
    if (closed_for_good(m->peer, err)) {
        /* Declared lost before m's call fails, so that whoever waits on it
         * finds the worker gone, not alive (the agent says "lost observer2") */
        snprintf(why, sizeof why, "its connection has closed: the process is gone; or %d messages wait unsent", HWM);
        char lost[256];
        snprintf(lost, sizeof lost, "lost %s (%s)", name, why);
        rpc_peer_lost(m->peer, lost);
    } else {
        snprintf(why, sizeof why, "%s", zmq_strerror(err));
    }
    if (!m->fut) return;
    /* A refused handshake with the rendezvous makes libzmq drop the
     * connection (nothing left to send to): its event is already in. */
    if (m->peer == 0) rpc_watch_rendezvous();      /* its event may be waiting */
    const char *refused = m->peer == 0 ? rpc_rdv_refused() : NULL;
    if (refused)
        rpc_future_fail(m->fut, "rpc: %s calling %s.%s", refused, name, m->fut->fn);
    else
        rpc_future_fail(m->fut, "rpc: cannot send to %s (%s) calling %s.%s", name, why, name, m->fut->fn);
    rpc_pending_done(m->fut);
    m->fut = NULL;
}

static void io_send(struct outmsg *m)
{
    if (m->peer < 0) {
        if (!rpc_shm_send_reply(m)) send_frames(io.cfg.router, m, true);
    } else {
        struct peer *p = rpc_peer(m->peer);
        const char *refused = m->peer == 0 && m->fut ? rpc_rdv_refused() : NULL;
        if (refused) {
            /* libzmq may have dropped the connection for good (a protocol
             * error is not retried): the handshake's failure is the reason */
            rpc_future_fail(m->fut, "rpc: %s calling %s.%s", refused, p ? p->name : "(rendezvous)", m->fut->fn);
            rpc_pending_done(m->fut);
        } else if (!p || !p->alive) {
            if (m->fut) {
                if (p) rpc_future_fail(m->fut, "rpc: %s is not reachable (dead or gone) calling %s.%s", p->name, p->name, m->fut->fn);
                else rpc_future_fail(m->fut, "rpc: worker %d is not reachable calling %s", m->peer, m->fut->fn);
                rpc_pending_done(m->fut);
            }
        } else if (rpc_shm_send_dealer(m)) {
            return;                             /* taken: sent or queued in order */
        } else {
            send_frames(p->dealer, m, false);   /* fails m->fut on error */
            if (m->fut) rpc_pending_add(m->fut);
        }
    }
    rpc_outmsg_free(m);
}

/* ---- receiving and the loop ------------------------------------------------ */

static zmq_msg_t rx_frames[2 + WIRE_MAX_TENSORS];

/* Reads one whole message from sock; returns frames read, 0 if none. */
static int recv_one(void *sock, bool router, unsigned char *rid, size_t *rid_len)
{
    int n = 0;
    for (;;) {
        if (n < 2 + WIRE_MAX_TENSORS) {
            ZMQ_CHECK(zmq_msg_init(&rx_frames[n]));
            if (zmq_msg_recv(&rx_frames[n], sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                ZMQ_CHECK(zmq_msg_close(&rx_frames[n]));
                if (n == 0) return 0;
                CHECK(zmq_errno() == ETERM || zmq_errno() == EINTR);
                break;
            }
            n++;
            if (!zmq_msg_more(&rx_frames[n - 1])) break;
        } else {
            /* Too many frames: drain the rest and drop the message. */
            zmq_msg_t junk;
            ZMQ_CHECK(zmq_msg_init(&junk));
            int more = 1;
            while (more && zmq_msg_recv(&junk, sock, 0) >= 0) more = zmq_msg_more(&junk);
            ZMQ_CHECK(zmq_msg_close(&junk));
            for (int i = 0; i < n; i++) ZMQ_CHECK(zmq_msg_close(&rx_frames[i]));
            return -1;
        }
    }
    size_t bytes = 0;
    for (int i = router ? 1 : 0; i < n; i++) bytes += zmq_msg_size(&rx_frames[i]);
    rpc_stat_add(RPC_STAT_MSGS_RECV, 1);
    rpc_stat_add(RPC_STAT_BYTES_RECV, bytes);
    if (router) {
        size_t l = zmq_msg_size(&rx_frames[0]);
        if (l > 255) l = 255;
        memcpy(rid, zmq_msg_data(&rx_frames[0]), l);
        *rid_len = l;
    }
    return n;
}

/* peer: the worker a dealer is connected to (-1 for the router). */
static void drain_socket(void *sock, bool router, int peer)
{
    unsigned char rid[256];
    size_t rid_len = 0;
    for (int k = 0; k < RECV_BATCH; k++) {
        int n = recv_one(sock, router, rid, &rid_len);
        if (n == 0) return;
        if (n < 0) continue;
        if (!router) {
            io.cfg.on_dealer(peer, rx_frames, n);
            rpc_shm_heard(peer);
        } else if (n > 1 && !rpc_shm_marker(rid, rid_len, rx_frames + 1, n - 1)) {
            io.cfg.on_router(rid, rid_len, rx_frames + 1, n - 1);
        }
        for (int i = 0; i < n; i++) ZMQ_CHECK(zmq_msg_close(&rx_frames[i]));
    }
}

static void send_ping(struct peer *p)
{
    struct outmsg *m = rpc_build_msg(WIRE_PING, 0, NULL, p->id, false, 0, 0, 0, NULL, NULL);
    send_frames(p->dealer, m, false);
    rpc_outmsg_free(m);
}

static void io_timers(void)
{
    int64_t now = trib_now_ms();
    if (now - io.last_hb >= io.cfg.heartbeat_ms) {
        io.last_hb = now;
        io.cfg.on_heartbeat(now);
        int self = rpc_self_id();
        for (int i = 0; i < MAX_WORKERS; i++) {
            struct peer *p = rpc_peer(i);
            if (p && p->left_at && (rpc_pending_to(i) == 0 || now - p->left_at > io.cfg.heartbeat_timeout_ms)) {
                char why[128];
                snprintf(why, sizeof why, "%s left", p->name);
                rpc_close_peer(i, why);
            }
            /* Until rank 0 has admitted us, its only peer is the rendezvous,
             * which says nothing before it answers our hello (bounded by
             * init_timeout_ms): no heartbeats either way. Pings in the name of
             * a rank whose dead worker we replace, or that rank 0 refuses us,
             * would count against our connection there. */
            if (!p || !p->alive || i == self || !atomic_load(&io.admitted)) continue;
            if (now - p->last_seen > io.cfg.heartbeat_timeout_ms) {
                char why[128];
                snprintf(why, sizeof why, "lost %s (no heartbeat for %d ms)", p->name, io.cfg.heartbeat_timeout_ms);
                rpc_peer_lost(i, why);
                continue;
            }
            send_ping(p);
        }
    }
    rpc_pending_timers(now);
}

/* Sends everything queued, including what sending itself queues (failure
 * callbacks that start new calls). */
static void flush_out(bool last)
{
    for (;;) {
        pthread_mutex_lock(&outq.mu);
        struct outmsg *m = outq.head;
        outq.head = outq.tail = NULL;
        outq.len = 0;
        if (last && !m) outq.io_dead = true;
        pthread_mutex_unlock(&outq.mu);
        if (!m) return;
        while (m) {
            struct outmsg *next = m->next;
            io_send(m);
            m = next;
        }
    }
}

/* Whether sock has a message to read (ZMQ_EVENTS; it takes the socket's
 * pending commands, and with them the signal on its ZMQ_FD). */
static bool readable(void *sock)
{
    int ev = 0;
    size_t len = sizeof ev;
    ZMQ_CHECK(zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len));
    return ev & ZMQ_POLLIN;
}

/* zmq_poll for POLLIN, with about half its system calls. A socket's
 * ZMQ_FD is edge-triggered (any operation on the socket may take the
 * signal), so before blocking every socket is asked ZMQ_EVENTS, as
 * zmq_poll does; after poll(2) returns, only the sockets whose descriptor
 * fired are asked again (one that did not fire has had no command since
 * it was asked, and no operation: nothing runs between). zmq_poll asks
 * every socket before and after (a poll and a getpid in libzmq's mailbox
 * each time): two thirds of the I/O thread's system calls. */
/* Poll items: the router, the eventfd, ZAP and two monitors, a dealer per
 * peer, and the shared-memory links (a listening socket, two descriptors a
 * link, a link per peer each way). */
#define IO_MAX_ITEMS (5 + MAX_WORKERS + 1 + 4 * MAX_WORKERS)

static int io_poll(zmq_pollitem_t *items, int n, long timeout)
{
    static struct pollfd fds[IO_MAX_ITEMS];
    int ready = 0;
    for (int i = 0; i < n; i++) {
        items[i].revents = 0;
        int fd = items[i].fd;
        if (items[i].socket) {
            size_t len = sizeof fd;
            ZMQ_CHECK(zmq_getsockopt(items[i].socket, ZMQ_FD, &fd, &len));
            if (readable(items[i].socket)) items[i].revents = ZMQ_POLLIN, ready++;
        }
        fds[i] = (struct pollfd){ .fd = fd, .events = POLLIN };
    }
    if (poll(fds, (nfds_t)n, ready ? 0 : (int)timeout) < 0) return -1;   /* errno: zmq_errno() */
    for (int i = 0; i < n; i++) {
        if (!(fds[i].revents & POLLIN) || items[i].revents) continue;
        if (!items[i].socket || readable(items[i].socket)) items[i].revents = ZMQ_POLLIN, ready++;
    }
    return ready;
}

/* How long the loop may sleep: until the next heartbeat or the earliest
 * deadline of a pending call, whichever comes first. (It was a 5 ms tick
 * while any call was pending: 200 wake-ups a second, each a dozen system
 * calls in zmq_poll, in every process waiting on a call, such as an
 * observer between two rollouts or an agent during a rollout.) */
static long poll_timeout(void)
{
    int64_t now = trib_now_ms(), due = rpc_pending_next_deadline();
    int64_t t = io.last_hb + io.cfg.heartbeat_ms - now;
    if (due && due - now < t) t = due - now;
    return t < 0 ? 0 : (long)t;
}

static void *io_main(void *arg)
{
    (void)arg;
    on_io_thread = true;
    rpc_future_mark_completer(true);
    static zmq_pollitem_t items[IO_MAX_ITEMS];
    static int map[IO_MAX_ITEMS];
    int nitems = 0, first_dealer = 2, i_zap = -1, i_mon = -1, i_rdv = -1;
    rpc_peers_changed(true);
    bool changed = true;
    while (!atomic_load(&io.stop)) {
        if (changed) {
            changed = false;
            items[0] = (zmq_pollitem_t){ .socket = io.cfg.router, .events = ZMQ_POLLIN };
            items[1] = (zmq_pollitem_t){ .fd = io.cfg.efd, .events = ZMQ_POLLIN };
            nitems = 2;
            i_zap = i_mon = i_rdv = -1;
            void *zap, *mon_router, *mon_rdv;
            rpc_curve_sockets(&zap, &mon_router, &mon_rdv);
            if (zap) {
                i_zap = nitems;
                items[nitems++] = (zmq_pollitem_t){ .socket = zap, .events = ZMQ_POLLIN };
            }
            if (mon_router) {
                i_mon = nitems;
                items[nitems++] = (zmq_pollitem_t){ .socket = mon_router, .events = ZMQ_POLLIN };
            }
            if (mon_rdv) {
                i_rdv = nitems;
                items[nitems++] = (zmq_pollitem_t){ .socket = mon_rdv, .events = ZMQ_POLLIN };
            }
            first_dealer = nitems;
            for (int i = 0; i < MAX_WORKERS; i++)
                if (rpc_peer(i) && rpc_peer(i)->dealer) {
                    map[nitems] = i;
                    items[nitems++] = (zmq_pollitem_t){ .socket = rpc_peer(i)->dealer, .events = ZMQ_POLLIN };
                }
        }
        bool waiting = false;
        int total = rpc_shm_poll_items(items, nitems, IO_MAX_ITEMS, &waiting);
        int rc = io_poll(items, total, waiting ? 0 : poll_timeout());
        if (rc < 0) {
            CHECK(zmq_errno() == EINTR);
            continue;
        }
        rpc_stat_add(RPC_STAT_IO_WAKEUPS, 1);
        if (items[1].revents & ZMQ_POLLIN) {
            uint64_t v;
            ssize_t r = read(io.cfg.efd, &v, sizeof v);
            (void)r;
        }
        flush_out(false);
        if (items[0].revents & ZMQ_POLLIN) drain_socket(io.cfg.router, true, -1);
        changed = rpc_peers_changed(false);
        if (i_zap >= 0 && (items[i_zap].revents & ZMQ_POLLIN)) rpc_curve_zap();
        if (i_mon >= 0 && (items[i_mon].revents & ZMQ_POLLIN)) rpc_watch_router();
        if (i_rdv >= 0 && (items[i_rdv].revents & ZMQ_POLLIN)) rpc_watch_rendezvous();
        for (int i = first_dealer; i < nitems && !changed; i++)
            if ((items[i].revents & ZMQ_POLLIN) && rpc_peer(map[i]) && rpc_peer(map[i])->dealer) {
                drain_socket(rpc_peer(map[i])->dealer, false, map[i]);
                changed = rpc_peers_changed(false);
            }
        rpc_shm_service(items);
        io_timers();
        io.cfg.after_poll();
        flush_out(false);               /* replies of inline handlers, pings */
        /* last: anything above may have closed a dealer (a send that finds
         * its connection gone loses the peer), and the next poll must not
         * ask a closed socket */
        changed = rpc_peers_changed(true);
    }
    /* Flush what is queued (replies, byes) before the sockets close. */
    flush_out(true);
    rpc_fail_pending_to(-1, "shut down");
    rpc_shm_stop();
    return NULL;
}

/* A link's marker, on the dealer to peer (shm_links.c). */
static bool send_on_dealer(int peer, struct outmsg *m)
{
    struct peer *p = rpc_peer(peer);
    bool ok = p && p->dealer;
    if (ok) send_frames(p->dealer, m, false);
    rpc_outmsg_free(m);
    return ok;
}

void rpc_io_start(const struct rpc_io_cfg *cfg)
{
    io.cfg = *cfg;
    rpc_shm_start(&(struct rpc_shm_cfg){ .listen_fd = cfg->shm_listen_fd, .conn_worker = cfg->conn_worker,
                                         .on_router = cfg->on_router, .on_dealer = cfg->on_dealer,
                                         .send_dealer = send_on_dealer });
    atomic_store(&io.stop, false);
    io.last_hb = 0;
    rpc_out_open();
    CHECK(pthread_create(&io.thread, NULL, io_main, NULL) == 0);
}

void rpc_io_stop(void)
{
    atomic_store(&io.stop, true);
    rpc_wake_io();
    pthread_join(io.thread, NULL);
}

void rpc_io_set_admitted(bool on) { atomic_store(&io.admitted, on); }
