/* Handshakes: optional CURVE encryption (docs/design.md §4.2, rpc/README.md; the router is a
 * CURVE server, dealers are CURVE clients, and a ZAP handler on the I/O
 * thread admits only clients whose public key is on the allow-list), and a
 * watch on the handshakes that fail: socket monitors on the router (refused
 * incoming connections are logged and counted) and on a worker's dealer to
 * the rendezvous (a handshake that cannot succeed ends rpc_init with the
 * reason rather than a timeout). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "common/check.h"
#include "rpc/transport.h"

/* Owned here: the keys, the ZAP handler and the handshake monitors. The
 * sockets are used on the I/O thread only (rpc_curve_sockets hands them to
 * its poll); they are made before it starts and closed after it stopped. */
static struct {
    void *zap;                      /* ZAP handler (REP), when curve is on */
    void *mon_router, *mon_rdv;     /* monitors of the router / the dealer to rank 0 (PAIR) */
    char rdv_refused[320];          /* I/O thread: why the rendezvous refused our handshake ("": it did not) */
    char public_key[41], secret_key[41], server_key[41];
    uint8_t allow[RPC_CURVE_MAX_ALLOW][32];
    int n_allow;
    bool on;                        /* rpc_opts.curve */
    void *zctx;
    int rank;
    char master[128];
    atomic_bool joined;             /* the directory is in: a failed handshake is only logged */
} cv;

void rpc_curve_set_joined(void) { atomic_store(&cv.joined, true); }

static bool z85_key(const char *k, uint8_t out[32])
{
    return k && strlen(k) == 40 && zmq_z85_decode(out, k) != NULL;
}

int rpc_curve_setup(const struct rpc_opts *o, void *zctx, int rank, const char *master)
{
    memset(&cv, 0, sizeof cv);          /* a new agent: nothing of the last one's */
    cv.on = o->curve;
    cv.zctx = zctx;
    cv.rank = rank;
    snprintf(cv.master, sizeof cv.master, "%s", master);
    if (!o->curve) return 0;
    if (!zmq_has("curve")) return rpc_set_error("rpc_init: this libzmq has no CURVE support");
    uint8_t bin[32];
    if (!z85_key(o->curve_public_key, bin) || !z85_key(o->curve_secret_key, bin))
        return rpc_set_error("rpc_init: curve needs a Z85 public and secret key (40 characters each)");
    snprintf(cv.public_key, sizeof cv.public_key, "%s", o->curve_public_key);
    snprintf(cv.secret_key, sizeof cv.secret_key, "%s", o->curve_secret_key);
    const char *server = o->curve_server_key ? o->curve_server_key : o->curve_public_key;
    if (!z85_key(server, bin)) return rpc_set_error("rpc_init: bad curve server key '%s'", server);
    snprintf(cv.server_key, sizeof cv.server_key, "%s", server);
    cv.n_allow = 0;
    if (o->curve_allow) {
        for (const char *const *k = o->curve_allow; *k; k++) {
            if (cv.n_allow == RPC_CURVE_MAX_ALLOW) return rpc_set_error("rpc_init: more than %d allowed keys", RPC_CURVE_MAX_ALLOW);
            if (!z85_key(*k, cv.allow[cv.n_allow])) return rpc_set_error("rpc_init: bad allowed key '%s'", *k);
            cv.n_allow++;
        }
    } else {
        z85_key(o->curve_public_key, cv.allow[0]);
        cv.n_allow = 1;
    }
    /* ZAP: libzmq asks this socket (in our context) about every handshake. */
    cv.zap = zmq_socket(cv.zctx, ZMQ_REP);
    CHECK(cv.zap != NULL);
    int zero = 0;
    ZMQ_CHECK(zmq_setsockopt(cv.zap, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_bind(cv.zap, "inproc://zeromq.zap.01"));
    return 0;
}

void rpc_curve_server(void *sock)
{
    if (!cv.on) return;
    int one = 1;
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one));
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, cv.secret_key, 40));
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "tributary", 9));
}

void rpc_curve_client(void *sock)
{
    if (!cv.on) return;
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, cv.server_key, 40));
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, cv.public_key, 40));
    ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, cv.secret_key, 40));
}

/* The first 8 characters of a binary key's Z85 form, for log lines. */
static void key_prefix(const uint8_t key[32], char out[9])
{
    char z[41];
    if (zmq_z85_encode(z, key, 32)) {
        memcpy(out, z, 8);
        out[8] = '\0';
    } else {
        snprintf(out, 9, "?");
    }
}

/* I/O thread: answers pending ZAP requests (RFC 27): frames version,
 * request id, domain, address, identity, mechanism, client key. A refusal
 * is counted and logged with the peer's address and the key's start. */
void rpc_curve_zap(void)
{
    for (;;) {
        zmq_msg_t f[8];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            ZMQ_CHECK(zmq_msg_init(&m));
            if (zmq_msg_recv(&m, cv.zap, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                ZMQ_CHECK(zmq_msg_close(&m));
                CHECK(n == 0);
                return;
            }
            more = zmq_msg_more(&m);
            if (n < 8) f[n++] = m;
            else ZMQ_CHECK(zmq_msg_close(&m));
        }
        bool curve = n == 7 && zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
                     zmq_msg_size(&f[6]) == 32;
        bool ok = false;
        for (int i = 0; curve && i < cv.n_allow && !ok; i++) ok = memcmp(zmq_msg_data(&f[6]), cv.allow[i], 32) == 0;
        if (!ok) {
            rpc_stat_add(RPC_STAT_REFUSED_AUTH, 1);
            char addr[64] = "(unknown address)", key[9] = "?";
            if (n >= 4 && zmq_msg_size(&f[3]) > 0)
                snprintf(addr, sizeof addr, "%.*s", (int)(zmq_msg_size(&f[3]) < 63 ? zmq_msg_size(&f[3]) : 63),
                         (const char *)zmq_msg_data(&f[3]));
            if (curve) key_prefix(zmq_msg_data(&f[6]), key);
            rpc_drop_log("rpc: %s: refused a connection from %s: its key (starting %s) is not on the allow-list", rpc_self_name(),
                         addr, key);
        }
        const char *status = ok ? "200" : "400", *text = ok ? "OK" : "key not allowed";
        ZMQ_CHECK(zmq_send(cv.zap, "1.0", 3, ZMQ_SNDMORE));
        if (n >= 2) ZMQ_CHECK(zmq_send(cv.zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE));
        else ZMQ_CHECK(zmq_send(cv.zap, "", 0, ZMQ_SNDMORE));
        ZMQ_CHECK(zmq_send(cv.zap, status, 3, ZMQ_SNDMORE));
        ZMQ_CHECK(zmq_send(cv.zap, text, strlen(text), ZMQ_SNDMORE));
        ZMQ_CHECK(zmq_send(cv.zap, "", 0, ZMQ_SNDMORE));
        ZMQ_CHECK(zmq_send(cv.zap, "", 0, 0));
        for (int i = 0; i < n; i++) ZMQ_CHECK(zmq_msg_close(&f[i]));
    }
}

/* ---- the handshake watch ------------------------------------------------------ */

#define HS_FAILED (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
/* Closed connections in a row during the handshake with the rendezvous
 * after which it counts as refused (libzmq retries every 100 ms). */
#define RDV_MAX_CLOSED 3

/* Monitors sock into a PAIR this process reads; NULL if libzmq refuses. */
static void *monitor(void *sock, const char *ep, int events)
{
    if (zmq_socket_monitor(sock, ep, events) != 0) return NULL;
    void *m = zmq_socket(cv.zctx, ZMQ_PAIR);
    CHECK(m != NULL);
    int zero = 0;
    ZMQ_CHECK(zmq_setsockopt(m, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_connect(m, ep));
    return m;
}

/* Router side. libzmq names a failed handshake's connection nowhere, but it
 * reports ACCEPTED (with the descriptor), then HANDSHAKE_FAILED_*, then
 * DISCONNECTED (same descriptor) in that order: the peer's address is read
 * when the connection is accepted (it may already be closed by then; rarely
 * the descriptor may even have been reused: best effort) and the failure
 * is logged when its DISCONNECTED names the descriptor. */
#define WATCH_FDS 64
static struct { int fd; char addr[64]; } accepted[WATCH_FDS];
static int n_accepted;
static int pending_fail;            /* the failure awaiting its DISCONNECTED: event, or 0 */
static uint32_t pending_value;

static int rdv_closed;              /* connections closed in a row during the handshake with the rendezvous */
/* A monitor said MONITOR_STOPPED (its socket closed): nothing more comes. */
static bool router_stopped, rdv_stopped;

static bool next_event(void *m, int *event, uint32_t *value);

/* Reads what a monitor still has until its MONITOR_STOPPED (at most
 * 200 ms): libzmq 4.3 leaks the event messages (an ipc:// address is too
 * long to fit in one) left in a monitor's pipe when it closes. */
static void drain_monitor(void *m, bool stopped)
{
    int64_t until = trib_now_ms() + 200;
    int ev;
    uint32_t v;
    while (!stopped) {
        zmq_pollitem_t it = { .socket = m, .events = ZMQ_POLLIN };
        int64_t left = until - trib_now_ms();
        if (left <= 0 || zmq_poll(&it, 1, (long)left) <= 0) break;
        while (!stopped && next_event(m, &ev, &v)) stopped = ev == ZMQ_EVENT_MONITOR_STOPPED;
    }
    while (next_event(m, &ev, &v)) {}
}

void rpc_watch_router_start(void *router)
{
    n_accepted = 0;
    pending_fail = 0;
    rdv_closed = 0;
    router_stopped = rdv_stopped = false;
    cv.mon_router = monitor(router, "inproc://trib-watch-router",
                            ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | HS_FAILED | ZMQ_EVENT_MONITOR_STOPPED);
}

void rpc_watch_dealer(void *dealer)
{
    if (cv.rank == 0 || cv.mon_rdv || !dealer) return;
    cv.mon_rdv = monitor(dealer, "inproc://trib-watch-rendezvous",
                         HS_FAILED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_MONITOR_STOPPED);
}

void rpc_curve_close(void)
{
    if (cv.zap) ZMQ_CHECK(zmq_close(cv.zap));
    if (cv.mon_router) {
        drain_monitor(cv.mon_router, router_stopped);
        ZMQ_CHECK(zmq_close(cv.mon_router));
    }
    if (cv.mon_rdv) {
        drain_monitor(cv.mon_rdv, rdv_stopped);
        ZMQ_CHECK(zmq_close(cv.mon_rdv));
    }
    cv.zap = cv.mon_router = cv.mon_rdv = NULL;
}

/* Reads one monitor event (libzmq's v1 format: u16 event + u32 value, then
 * the endpoint); false when none is waiting. */
static bool next_event(void *m, int *event, uint32_t *value)
{
    zmq_msg_t a, b;
    ZMQ_CHECK(zmq_msg_init(&a));
    if (zmq_msg_recv(&a, m, ZMQ_DONTWAIT) < 0) {
        ZMQ_CHECK(zmq_msg_close(&a));
        return false;
    }
    bool ok = zmq_msg_size(&a) == 6 && zmq_msg_more(&a);
    if (ok) {
        uint16_t ev;
        memcpy(&ev, zmq_msg_data(&a), 2);
        memcpy(value, (const char *)zmq_msg_data(&a) + 2, 4);
        *event = ev;
    }
    bool more = zmq_msg_more(&a);
    ZMQ_CHECK(zmq_msg_close(&a));
    while (more) {      /* the endpoint: libzmq names the bound one, not the peer */
        ZMQ_CHECK(zmq_msg_init(&b));
        ZMQ_CHECK(zmq_msg_recv(&b, m, 0));
        more = zmq_msg_more(&b);
        ZMQ_CHECK(zmq_msg_close(&b));
    }
    if (!ok) *event = 0;
    return true;
}

static void remember(int fd)
{
    int slot = -1;
    for (int i = 0; i < n_accepted && slot < 0; i++)
        if (accepted[i].fd == fd) slot = i;
    if (slot < 0) {
        if (n_accepted == WATCH_FDS) {  /* full: forget the oldest */
            memmove(&accepted[0], &accepted[1], (WATCH_FDS - 1) * sizeof accepted[0]);
            n_accepted--;
        }
        slot = n_accepted++;
    }
    accepted[slot].fd = fd;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char ip[INET6_ADDRSTRLEN];
    int port = -1;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET && inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip))
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6 && inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip))
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (port < 0 && ss.ss_family == AF_UNIX && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
        snprintf(accepted[slot].addr, sizeof accepted[slot].addr, "ipc pid %d", (int)cr.pid);
    else if (port >= 0) snprintf(accepted[slot].addr, sizeof accepted[slot].addr, "%s:%d", ip, port);
    else snprintf(accepted[slot].addr, sizeof accepted[slot].addr, "an address gone before it was read");
}

/* Forgets fd's entry; its address into addr (or a stand-in). */
static void forget(int fd, char *addr, size_t cap)
{
    snprintf(addr, cap, "an unknown address");
    for (int i = 0; i < n_accepted; i++)
        if (accepted[i].fd == fd) {
            snprintf(addr, cap, "%s", accepted[i].addr);
            memmove(&accepted[i], &accepted[i + 1], (size_t)(n_accepted - i - 1) * sizeof accepted[0]);
            n_accepted--;
            return;
        }
}

/* Why a refused incoming handshake failed, in words; NULL when it is not
 * a refusal (a ZAP refusal, already logged, or a plain worker's connection
 * closed early). */
static const char *refusal(int event, uint32_t value)
{
    bool curve = cv.on;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return NULL;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        return curve ? "it closed the connection during the CURVE handshake (a worker without this run's key?)" : NULL;
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        return curve ? "it does not use CURVE encryption (a worker without --keys?)"
                     : "it uses CURVE encryption and this worker does not (a worker with --keys?)";
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC || value == ZMQ_PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE)
        return "its CURVE handshake is not for this worker's key (a worker with another run's --keys?)";
    return "its handshake broke the protocol";
}

static void log_refusal(const char *addr)
{
    const char *why = refusal(pending_fail, pending_value);
    pending_fail = 0;
    if (!why) return;
    rpc_stat_add(RPC_STAT_REFUSED_AUTH, 1);
    rpc_drop_log("rpc: %s: refused a connection from %s: %s", rpc_self_name(), addr, why);
}

void rpc_watch_router(void)
{
    int ev;
    uint32_t v;
    while (next_event(cv.mon_router, &ev, &v)) {
        if (ev == ZMQ_EVENT_MONITOR_STOPPED) {
            router_stopped = true;
        } else if (ev == ZMQ_EVENT_ACCEPTED) {
            remember((int)v);
        } else if (ev & HS_FAILED) {
            if (pending_fail) log_refusal("an unknown address");
            pending_fail = ev;
            pending_value = v;
        } else if (ev == ZMQ_EVENT_DISCONNECTED) {
            char addr[64];
            forget((int)v, addr, sizeof addr);
            if (pending_fail) log_refusal(addr);
        }
    }
}

/* Dealer side: the handshakes with the rendezvous. */
void rpc_watch_rendezvous(void)
{
    if (!cv.mon_rdv) return;
    int ev;
    uint32_t v;
    while (next_event(cv.mon_rdv, &ev, &v)) {
        if (ev == ZMQ_EVENT_MONITOR_STOPPED) rdv_stopped = true;
        if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            rdv_closed = 0;
            continue;
        }
        if (!(ev & HS_FAILED)) continue;
        rpc_stat_add(RPC_STAT_HANDSHAKES_FAILED, 1);
        bool curve = cv.on;
        char why[256] = "";
        if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
            snprintf(why, sizeof why, "the peer refused this worker's key (ZAP status %u)", v);
        else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && ++rdv_closed >= RDV_MAX_CLOSED)
            snprintf(why, sizeof why, "the peer closed the connection during the %shandshake %d times in a row%s",
                     curve ? "CURVE " : "", rdv_closed,
                     curve ? " (does it use another key?)" : " (does it require CURVE encryption?)");
        else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && v == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
            snprintf(why, sizeof why, "%s",
                     curve ? "the peer does not use CURVE encryption and this worker does"
                           : "the peer requires CURVE encryption and this worker has no key");
        else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
            snprintf(why, sizeof why, "protocol error 0x%x (%s)", v,
                     curve ? "does the peer use another key?" : "does it require CURVE encryption?");
        if (!why[0]) continue;
        rdv_closed = 0;
        char text[320];
        snprintf(text, sizeof text, "security handshake with %s failed (%s)", cv.master, why);
        if (atomic_load(&cv.joined)) rpc_drop_log("rpc: %s: %s", rpc_self_name(), text);
        else {
            /* the rendezvous fails now, not at its timeout: what waits for
             * a reply, and what is sent from now on (io_send) */
            snprintf(cv.rdv_refused, sizeof cv.rdv_refused, "%s", text);
            rpc_fail_pending_to(0, text);
        }
    }
}

void rpc_curve_sockets(void **zap, void **mon_router, void **mon_rdv)
{
    *zap = cv.zap;
    *mon_router = cv.mon_router;
    *mon_rdv = cv.mon_rdv;
}

const char *rpc_rdv_refused(void) { return cv.rdv_refused[0] ? cv.rdv_refused : NULL; }
