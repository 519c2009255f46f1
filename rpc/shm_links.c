/* This worker's shared-memory links (TRIB_RPC_TRANSPORT=shm; rpc/README.md
 * "Transports"), driven by the I/O thread: one per dealer whose peer is on
 * this host (the dealer side offers it), one per verified connection on
 * the router that took one (the router side).
 *
 * Setup, in order, so that a dealer's messages keep their order across the
 * switch from its socket to its link:
 *  1. the dealer side, once a reply came on the dealer (the router side has
 *     verified the connection, after CURVE's handshake in a CURVE run),
 *     connects to the peer's link socket (its ipc:// twin's path + ".shm",
 *     in the user's private directory) and offers a link tagged with its
 *     dealer's routing id, a random nonce and its worker id; it goes on
 *     sending on the dealer;
 *  2. the router side takes it only if its connection table has bound that
 *     routing id to that worker (cfg.conn_worker), and writes an ack into
 *     the link; it does not read the link yet;
 *  3. the dealer side reads the ack, sends a marker (a ping whose request
 *     id is the nonce) on the dealer, and from then on sends into the link;
 *  4. the router side reads the link once the marker came off the router:
 *     everything the dealer sent before it has been taken.
 * Replies for a linked routing id go into its link (back on the router
 * when the ring is full: replies carry their request's id). Requests that
 * find a full ring wait in the link's backlog, in order.
 *
 * A link whose peer broke its rules (out-of-bounds positions or records)
 * drops that peer with the reason (rpc_peer_lost), either side; one whose
 * peer ended is closed, and the peer found gone as over a socket (its
 * leave, its heartbeats); one refused or ended before step 3 is given up
 * quietly and the dealer stays on its socket (offered again after a while). Owned here (I/O thread only): the link tables. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/check.h"
#include "rpc/shm.h"
#include "rpc/transport.h"

#define ACK "trib-shm-ack"
#define RETRY_MS 2000
#define MAX_RLINKS 1024
#define TAG_LEN (RPC_RID_LEN + 8 + 4)

enum { D_NONE, D_OFFERED, D_OPEN, D_REFUSED };
enum { R_AWAIT_MARKER = 1, R_OPEN };

struct dlink {
    struct shm_link l;
    int state;
    uint32_t incarnation;           /* of the peer entry it was offered to */
    uint64_t nonce;
    int64_t retry_at;               /* D_REFUSED: try again after */
    struct outmsg *bl_head, *bl_tail;   /* requests waiting for room, in order */
    int item;                       /* its wake fd's index in the poll items, -1: none */
};

struct rlink {
    struct shm_link l;
    unsigned char rid[RPC_RID_LEN];
    int worker;
    int state;
    uint64_t nonce;
    int item;
};

static struct {
    struct rpc_shm_cfg cfg;
    bool on;
    struct dlink *d[MAX_WORKERS];
    struct rlink *r[MAX_RLINKS];
    int nr;
    int listen_item;
} sh = { .cfg = { .listen_fd = -1 } };

static zmq_msg_t rx[SHM_MAX_FRAMES];

void rpc_shm_start(const struct rpc_shm_cfg *cfg)
{
    sh.cfg = *cfg;
    sh.on = cfg->listen_fd >= 0;
    sh.nr = 0;
}

bool rpc_shm_on(void) { return sh.on; }

static void count_sent(size_t bytes)
{
    rpc_stat_add(RPC_STAT_MSGS_SENT, 1);
    rpc_stat_add(RPC_STAT_BYTES_SENT, (int64_t)bytes);
    rpc_stat_add(RPC_STAT_SHM_MSGS_SENT, 1);
    rpc_stat_add(RPC_STAT_SHM_BYTES_SENT, (int64_t)bytes);
}

static void count_recv(int n)
{
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += zmq_msg_size(&rx[i]);
    rpc_stat_add(RPC_STAT_MSGS_RECV, 1);
    rpc_stat_add(RPC_STAT_BYTES_RECV, (int64_t)bytes);
    rpc_stat_add(RPC_STAT_SHM_MSGS_RECV, 1);
    rpc_stat_add(RPC_STAT_SHM_BYTES_RECV, (int64_t)bytes);
}

static size_t msg_bytes(const struct outmsg *m)
{
    size_t b = 0;
    for (int i = 0; i < m->nframes; i++) b += zmq_msg_size(&m->frames[i]);
    return b;
}

/* ---- the dealer side ---------------------------------------------------------- */

static void dlink_free(int id, bool back_to_none)
{
    struct dlink *d = sh.d[id];
    if (!d) return;
    if (d->state != D_NONE && d->state != D_REFUSED) shm_link_close(&d->l);
    for (struct outmsg *m = d->bl_head, *next; m; m = next) {
        next = m->next;
        rpc_outmsg_free(m);         /* its call is in the pending table: failed with the peer */
    }
    d->bl_head = d->bl_tail = NULL;
    d->state = back_to_none ? D_NONE : D_REFUSED;
    d->retry_at = trib_now_ms() + RETRY_MS;
}

/* The link to peer id ended: before it opened, quietly; after, the peer is lost. */
static void dlink_ended(int id)
{
    struct dlink *d = sh.d[id];
    struct peer *p = rpc_peer(id);
    /* A peer that ended is found gone as over its socket (its leave, its
     * heartbeats): its link is only closed. One that broke the link's
     * rules is dropped now, with the reason. */
    bool broke = strncmp(d->l.why, "the peer ended", 14) != 0;
    if (d->state == D_OPEN && broke && p && p->alive) {
        char why[400];
        snprintf(why, sizeof why, "lost %s (its shared-memory link: %s)", p->name, d->l.why);
        rpc_drop_log("rpc: %s: %s", rpc_self_name(), why);
        dlink_free(id, false);
        rpc_peer_lost(id, why);
        return;
    }
    dlink_free(id, false);
}

/* Offers a link to peer p (step 1). */
static void offer(struct peer *p)
{
    struct dlink *d = sh.d[p->id];
    if (!d) d = sh.d[p->id] = trib_xcalloc(1, sizeof *d);
    d->state = D_REFUSED;
    d->retry_at = trib_now_ms() + RETRY_MS;
    d->incarnation = p->incarnation;
    if (strncmp(p->via, "ipc://", 6) != 0) return;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (snprintf(sa.sun_path, sizeof sa.sun_path, "%s.shm", p->via + 6) >= (int)sizeof sa.sun_path) return;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return;
    }
    unsigned char tag[TAG_LEN];
    memcpy(tag, p->rid, RPC_RID_LEN);
    CHECK(getrandom(&d->nonce, sizeof d->nonce, 0) == (ssize_t)sizeof d->nonce);
    d->nonce |= 1;                  /* never 0: heartbeats' pings carry 0 */
    memcpy(tag + RPC_RID_LEN, &d->nonce, 8);
    uint32_t self = (uint32_t)rpc_self_id();
    memcpy(tag + RPC_RID_LEN + 8, &self, 4);
    char err[256];
    if (shm_link_offer(fd, 0, tag, sizeof tag, &d->l, err, sizeof err) < 0) {
        close(fd);
        return;
    }
    d->state = D_OFFERED;
}

void rpc_shm_heard(int peer)
{
    if (!sh.on || peer == rpc_self_id()) return;
    struct peer *p = rpc_peer(peer);
    if (!p || !p->alive || !p->dealer) return;
    struct dlink *d = sh.d[peer];
    if (d && (d->state == D_OFFERED || d->state == D_OPEN)) return;
    if (d && d->state == D_REFUSED && trib_now_ms() < d->retry_at) return;
    offer(p);
}

/* Step 3: the ack read, the marker sent on the dealer. */
static void dlink_offered(int id)
{
    struct dlink *d = sh.d[id];
    int n = shm_link_recv(&d->l, rx, SHM_MAX_FRAMES, 0);
    if (n == 0) return;
    if (n < 0) {
        dlink_ended(id);
        return;
    }
    bool ack = n == 1 && zmq_msg_size(&rx[0]) == strlen(ACK) && memcmp(zmq_msg_data(&rx[0]), ACK, strlen(ACK)) == 0;
    for (int i = 0; i < n; i++) ZMQ_CHECK(zmq_msg_close(&rx[i]));
    if (!ack) {
        dlink_ended(id);
        return;
    }
    struct outmsg *m = rpc_build_msg(WIRE_PING, d->nonce, NULL, id, false, 0, 0, 0, NULL, NULL);
    CHECK(m != NULL);
    if (!sh.cfg.send_dealer(id, m)) {
        dlink_ended(id);
        return;
    }
    d->state = D_OPEN;
}

/* Sends m into d's link (1), or, when it is bigger than the ring, on the
 * dealer once everything sent into the link has been read (1; the peer
 * has taken those first: order kept); 0: not now (no room, or not yet
 * drained; or the link ended: then d->l.dead). */
static int dlink_put(int id, struct dlink *d, struct outmsg *m)
{
    size_t body = 4 + 4 * (size_t)m->nframes + msg_bytes(m);
    if (((12 + body + 7) & ~(size_t)7) > d->l.cap) {
        if (atomic_load_explicit(&d->l.tx->tail, memory_order_acquire) != d->l.head) {
            atomic_store(&d->l.tx->writer_sleeps, 1);   /* woken when it is read */
            return 0;
        }
        sh.cfg.send_dealer(id, m);  /* takes m */
        return 2;
    }
    char err[300];
    if (shm_link_send(&d->l, m->frames, m->nframes, 0, err, sizeof err) < 0) return 0;
    count_sent(msg_bytes(m));
    return 1;
}

static void dlink_flush(int id)
{
    struct dlink *d = sh.d[id];
    while (d->bl_head) {
        struct outmsg *m = d->bl_head, *next = m->next;
        int r = dlink_put(id, d, m);
        if (!r) {
            if (d->l.dead) dlink_ended(id);
            return;
        }
        d->bl_head = next;
        if (!d->bl_head) d->bl_tail = NULL;
        if (r == 1) rpc_outmsg_free(m);
    }
}

bool rpc_shm_send_dealer(struct outmsg *m)
{
    if (!sh.on || m->peer < 0) return false;
    struct dlink *d = sh.d[m->peer];
    if (!d || d->state != D_OPEN) return false;
    struct peer *p = rpc_peer(m->peer);
    if (!p || !p->alive || p->incarnation != d->incarnation) return false;
    if (m->fut) {
        rpc_pending_add(m->fut);
        m->fut = NULL;
    }
    int r = d->bl_head ? 0 : dlink_put(m->peer, d, m);
    if (r) {
        if (r == 1) rpc_outmsg_free(m);
        return true;
    }
    m->next = NULL;
    if (d->bl_tail) d->bl_tail->next = m; else d->bl_head = m;
    d->bl_tail = m;
    if (d->l.dead) dlink_ended(m->peer);
    return true;
}

/* ---- the router side ---------------------------------------------------------- */

static void rlink_drop(int k)
{
    shm_link_close(&sh.r[k]->l);
    free(sh.r[k]);
    sh.r[k] = sh.r[--sh.nr];
    sh.r[sh.nr] = NULL;
}

static void rlink_ended(int k)
{
    struct rlink *r = sh.r[k];
    /* a peer that ended is found gone by its heartbeats and its leave; one
     * that wrote out of bounds is cut off now */
    if (strncmp(r->l.why, "the peer ended", 14) != 0) {
        char name[64], why[400];
        rpc_peer_name(r->worker, name, sizeof name);
        snprintf(why, sizeof why, "%s broke its shared-memory link: %s", name, r->l.why);
        rpc_drop_log("rpc: %s: %s", rpc_self_name(), why);
        rpc_stat_add(RPC_STAT_CUTS, 1);
        int w = r->worker;
        rlink_drop(k);
        rpc_peer_lost(w, why);
        return;
    }
    rlink_drop(k);
}

/* Step 2: a link offered on the listening socket. */
static void take(void)
{
    int fd = accept4(sh.cfg.listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return;
    char who[64] = "?", err[300];
    rpc_fd_peer(fd, who, sizeof who);
    struct rlink *r = trib_xcalloc(1, sizeof *r);
    /* the offer follows the connect at once; a process that connects and
     * says nothing costs this thread at most this long */
    if (shm_link_take(fd, 100, &r->l, err, sizeof err) < 0) {
        rpc_drop_log("rpc: %s: refused a shared-memory link from %s: %s", rpc_self_name(), who, err);
        close(fd);
        free(r);
        return;
    }
    uint32_t worker = UINT32_MAX;
    if (r->l.tag_len == TAG_LEN) {
        memcpy(r->rid, r->l.tag, RPC_RID_LEN);
        memcpy(&r->nonce, r->l.tag + RPC_RID_LEN, 8);
        memcpy(&worker, r->l.tag + RPC_RID_LEN + 8, 4);
    }
    const char *bad = r->l.tag_len != TAG_LEN ? "its tag is not a connection's"
                    : r->nonce == 0 ? "its nonce is 0"
                    : sh.nr >= MAX_RLINKS ? "too many links"
                    : sh.cfg.conn_worker(r->rid, RPC_RID_LEN) != (int)worker || (int)worker < 0
                        ? "its connection is not one verified as the worker it names" : NULL;
    zmq_msg_t ack;
    ZMQ_CHECK(zmq_msg_init_size(&ack, strlen(ACK)));
    memcpy(zmq_msg_data(&ack), ACK, strlen(ACK));
    if (!bad && shm_link_send(&r->l, &ack, 1, 0, err, sizeof err) < 0) bad = "it cannot take the ack";
    ZMQ_CHECK(zmq_msg_close(&ack));
    if (bad) {
        /* not verified yet is the usual race (a reply to an exempt call
         * came first): the offer comes again later, unlogged */
        if (strncmp(bad, "its connection", 14) != 0)
            rpc_drop_log("rpc: %s: refused a shared-memory link from %s: %s", rpc_self_name(), who, bad);
        shm_link_close(&r->l);
        free(r);
        return;
    }
    /* one link per connection: a newer one replaces an older one */
    for (int k = 0; k < sh.nr; k++)
        if (memcmp(sh.r[k]->rid, r->rid, RPC_RID_LEN) == 0) {
            rlink_drop(k);
            break;
        }
    r->worker = (int)worker;
    r->state = R_AWAIT_MARKER;
    r->item = -1;
    sh.r[sh.nr++] = r;
}

bool rpc_shm_marker(const unsigned char *rid, size_t len, zmq_msg_t *frames, int n)
{
    if (!sh.on || len != RPC_RID_LEN || n != 1) return false;
    for (int k = 0; k < sh.nr; k++) {
        struct rlink *r = sh.r[k];
        if (r->state != R_AWAIT_MARKER || memcmp(r->rid, rid, RPC_RID_LEN) != 0) continue;
        msgpack_zone zone;
        msgpack_zone_init(&zone, 256);
        struct wire_hdr h;
        bool answerable;
        char err[128];
        bool marker = wire_decode(frames, n, &zone, &h, &answerable, err, sizeof err) == 0 && h.type == WIRE_PING &&
                      h.req_id == r->nonce;
        msgpack_zone_destroy(&zone);
        if (marker) r->state = R_OPEN;
        return marker;
    }
    return false;
}

bool rpc_shm_send_reply(struct outmsg *m)
{
    if (!sh.on || m->peer >= 0 || m->rid_len != RPC_RID_LEN) return false;
    for (int k = 0; k < sh.nr; k++) {
        struct rlink *r = sh.r[k];
        if (r->state != R_OPEN || memcmp(r->rid, m->rid, RPC_RID_LEN) != 0) continue;
        char err[300];
        if (shm_link_send(&r->l, m->frames, m->nframes, 0, err, sizeof err) == 0) {
            count_sent(msg_bytes(m));
            return true;
        }
        if (r->l.dead) rlink_ended(k);
        return false;               /* full: the router carries it */
    }
    return false;
}

/* ---- the poll ------------------------------------------------------------------ */

int rpc_shm_poll_items(zmq_pollitem_t *items, int n, int cap, bool *waiting)
{
    sh.listen_item = -1;
    if (!sh.on) return n;
    if (n < cap) {
        sh.listen_item = n;
        items[n++] = (zmq_pollitem_t){ .fd = sh.cfg.listen_fd, .events = ZMQ_POLLIN };
    }
    for (int id = 0; id < MAX_WORKERS; id++) {
        struct dlink *d = sh.d[id];
        if (!d) continue;
        d->item = -1;
        if (d->state != D_OFFERED && d->state != D_OPEN) continue;
        if (n + 2 > cap) break;
        if (!shm_link_arm(&d->l)) *waiting = true;
        if (d->bl_head) {
            /* woken by the reader once it takes something; go on now if
             * the first waiting message can be sent already */
            atomic_store(&d->l.tx->writer_sleeps, 1);
            atomic_thread_fence(memory_order_seq_cst);
            const struct outmsg *m = d->bl_head;
            uint64_t need = (12 + 4 + 4 * (uint64_t)m->nframes + msg_bytes(m) + 7) & ~(uint64_t)7;
            uint64_t used = d->l.head - atomic_load(&d->l.tx->tail);
            if (used > d->l.cap || (need > d->l.cap ? used == 0 : d->l.cap - used >= need)) *waiting = true;
        }
        d->item = n;
        items[n++] = (zmq_pollitem_t){ .fd = d->l.wake_self, .events = ZMQ_POLLIN };
        items[n++] = (zmq_pollitem_t){ .fd = d->l.sock, .events = ZMQ_POLLIN };
    }
    for (int k = 0; k < sh.nr; k++) {
        struct rlink *r = sh.r[k];
        r->item = -1;
        if (n + 2 > cap) break;
        if (r->state == R_OPEN && !shm_link_arm(&r->l)) *waiting = true;
        r->item = n;
        items[n++] = (zmq_pollitem_t){ .fd = r->l.wake_self, .events = ZMQ_POLLIN };
        items[n++] = (zmq_pollitem_t){ .fd = r->l.sock, .events = ZMQ_POLLIN };
    }
    return n;
}

static void drain_wake(const zmq_pollitem_t *items, int item, int fd)
{
    if (item >= 0 && (items[item].revents & ZMQ_POLLIN)) {
        uint64_t v;
        ssize_t r = read(fd, &v, sizeof v);
        (void)r;
    }
}

/* Reads up to RECV_BATCH messages from the open links, the oldest record
 * first whichever link it is on (shm_link_next_ts): on one host the send
 * times order messages that caused one another. */
static void read_links(const int *ids, int nids)
{
    for (int k = 0; k < RECV_BATCH; k++) {
        int64_t best = -1;
        int bd = -1, br = -1;
        for (int j = 0; j < nids; j++) {
            struct dlink *d = sh.d[ids[j]];
            if (!d || d->state != D_OPEN) continue;
            int64_t t = shm_link_next_ts(&d->l);
            if (t >= 0 && (best < 0 || t < best)) best = t, bd = ids[j], br = -1;
        }
        for (int j = 0; j < sh.nr; j++) {
            if (sh.r[j]->state != R_OPEN) continue;
            int64_t t = shm_link_next_ts(&sh.r[j]->l);
            if (t >= 0 && (best < 0 || t < best)) best = t, br = j, bd = -1;
        }
        if (best < 0) return;
        if (bd >= 0) {
            int n = shm_link_recv(&sh.d[bd]->l, rx, SHM_MAX_FRAMES, 0);
            if (n <= 0) continue;   /* ended: seen below */
            count_recv(n);
            sh.cfg.on_dealer(bd, rx, n);
            for (int i = 0; i < n; i++) ZMQ_CHECK(zmq_msg_close(&rx[i]));
        } else {
            struct rlink *r = sh.r[br];
            int n = shm_link_recv(&r->l, rx, SHM_MAX_FRAMES, 0);
            if (n <= 0) continue;
            count_recv(n);
            sh.cfg.on_router(r->rid, RPC_RID_LEN, rx, n);
            for (int i = 0; i < n; i++) ZMQ_CHECK(zmq_msg_close(&rx[i]));
        }
    }
}

void rpc_shm_service(const zmq_pollitem_t *items)
{
    if (!sh.on) return;
    if (sh.listen_item >= 0 && (items[sh.listen_item].revents & ZMQ_POLLIN)) take();
    static int ids[MAX_WORKERS];
    int nids = 0;
    for (int id = 0; id < MAX_WORKERS; id++) {
        struct dlink *d = sh.d[id];
        if (!d || (d->state != D_OFFERED && d->state != D_OPEN)) continue;
        struct peer *p = rpc_peer(id);
        if (!p || !p->dealer || p->incarnation != d->incarnation) {
            dlink_free(id, true);   /* its peer entry moved on: calls were failed with it */
            continue;
        }
        if (d->item >= 0) drain_wake(items, d->item, d->l.wake_self);
        d->l.rx->reader_sleeps = 0;
        if (d->state == D_OFFERED) {
            dlink_offered(id);
            continue;
        }
        dlink_flush(id);
        if (d->state == D_OPEN) ids[nids++] = id;
    }
    for (int k = 0; k < sh.nr; k++) {
        struct rlink *r = sh.r[k];
        if (r->item >= 0) drain_wake(items, r->item, r->l.wake_self);
        r->l.rx->reader_sleeps = 0;
    }
    read_links(ids, nids);
    for (int j = 0; j < nids; j++) {
        int id = ids[j];
        struct dlink *d = sh.d[id];
        if (!d || d->state != D_OPEN) continue;
        if (!d->l.dead && d->item >= 0 && items[d->item + 1].revents) shm_link_check_peer(&d->l);
        /* a peer that ended: what it published first is read first */
        if (d->l.dead && (strncmp(d->l.why, "the peer ended", 14) != 0 || atomic_load(&d->l.rx->head) == d->l.tail))
            dlink_ended(id);
    }
    for (int k = 0; k < sh.nr; k++) {
        struct rlink *r = sh.r[k];
        if (!r->l.dead && r->item >= 0 && items[r->item + 1].revents) shm_link_check_peer(&r->l);
        if (r->l.dead && (r->state != R_OPEN || strncmp(r->l.why, "the peer ended", 14) != 0 ||
                          atomic_load(&r->l.rx->head) == r->l.tail)) {
            rlink_ended(k);
            k--;
        }
    }
}

void rpc_shm_stop(void)
{
    for (int id = 0; id < MAX_WORKERS; id++) {
        if (!sh.d[id]) continue;
        dlink_free(id, true);
        free(sh.d[id]);
        sh.d[id] = NULL;
    }
    while (sh.nr > 0) rlink_drop(sh.nr - 1);
    sh.on = false;
}
