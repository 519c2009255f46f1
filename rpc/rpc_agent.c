/* The RPC agent's life (docs/design.md §4.1-4.3, rpc/README.md): rpc_agent.c
 * assembles the parts and nothing calls into it. It reads the options,
 * makes the sockets, hands each part its settings (calls, connections,
 * messages, membership, CURVE), installs the functions the I/O thread hands
 * received messages and ticks to, starts the I/O thread and the handler
 * pool, and leaves the rendezvous and the shutdown protocol to membership.
 * The offline agent of the fuzz targets is the same assembly without
 * sockets or threads. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/check.h"
#include "common/error.h"
#include "rpc/rpc_agent.h"

/* Owned here: the options after defaults, the context and router sockets
 * (handed to the I/O thread while it runs), and which agent this is. */
static struct {
    bool up;                        /* between rpc_init (or rpc_offline_init) and the shutdown */
    bool offline;
    struct rpc_opts opts;
    int rank, world_size;
    enum rpc_transport transport;   /* resolved: AUTO, TCP, IPC or SHM */
    void *zctx;
    void *router;
    int efd;
    char endpoint[128];
    char ipc_endpoint[160];         /* the router's ipc:// twin ("": none) */
    /* RPC_TRANSPORT_SHM: the Unix socket shared-memory links are offered on,
     * beside the twin ("": none; then shm_fd means nothing) */
    int shm_fd;
    char shm_path[170];
} ag;

/* ---- links: how the directory reaches a peer --------------------------------
 * A dealer socket per peer, connected through tcp:// or its ipc:// twin;
 * the offline agent (fuzz targets) links to nothing: a stand-in handle
 * that sends nowhere, so the rest of the agent runs unchanged. */

static void *zmq_link_open(int id, const char *endpoint, const unsigned char *rid, char *via, size_t cap)
{
    if (rpc_connect_endpoint(endpoint, ag.transport, via, cap) < 0) return NULL;
    void *d = zmq_socket(ag.zctx, ZMQ_DEALER);
    CHECK(d != NULL);
    int zero = 0, hwm = HWM;
    int64_t maxsz = (int64_t)ag.opts.max_frame_bytes;
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_RCVHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_ROUTING_ID, rid, RPC_RID_LEN));
    if (!rpc_link_reconnects(id, via)) {   /* why not: transport.c */
        int never = -1;
        ZMQ_CHECK(zmq_setsockopt(d, ZMQ_RECONNECT_IVL, &never, sizeof never));
    }
    rpc_curve_client(d);
    if (id == 0) rpc_watch_dealer(d);
    if (zmq_connect(d, via) < 0) {
        rpc_set_error("rpc: cannot connect to '%s': %s", via, zmq_strerror(zmq_errno()));
        ZMQ_CHECK(zmq_close(d));
        return NULL;
    }
    return d;
}

static void zmq_link_close(void *dealer) { ZMQ_CHECK(zmq_close(dealer)); }

static const struct rpc_link_ops zmq_links = { zmq_link_open, zmq_link_close };

static char null_link;

static void *null_link_open(int id, const char *endpoint, const unsigned char *rid, char *via, size_t cap)
{
    snprintf(via, cap, "%s", endpoint);
    return &null_link;
}

static void null_link_close(void *dealer) { (void)dealer; }

static const struct rpc_link_ops null_links = { null_link_open, null_link_close };

/* ---- what the I/O thread hands up --------------------------------------------- */

static void on_router(const unsigned char *rid, size_t rid_len, zmq_msg_t *frames, int n)
{
    struct conn *c = rpc_conn_get(rid, rid_len, &frames[0]);   /* from the wire: has its socket */
    if (c) rpc_handle_router(c, frames, n);
    else rpc_stat_add(RPC_STAT_UNVERIFIED, 1);     /* the table is full */
}

static void on_heartbeat(int64_t now)
{
    if (wire_hooks()->on_tick) wire_hooks()->on_tick(now, wire_hooks()->user);
    rref_expire_parked(now);
}

/* ---- init / shutdown ---------------------------------------------------- */

static int env_int(const char *a, const char *b, int dflt)
{
    const char *v = getenv(a);
    if (!v && b) v = getenv(b);
    return v && *v ? atoi(v) : dflt;
}

/* Fills in the defaults of the options left 0. */
static void apply_defaults(struct rpc_opts *o)
{
    if (!o->default_timeout_ms) o->default_timeout_ms = 60000;
    if (!o->init_timeout_ms) o->init_timeout_ms = 30000;
    if (o->num_handler_threads <= 0) o->num_handler_threads = 4;
    if (o->heartbeat_ms <= 0) o->heartbeat_ms = 200;
    if (o->heartbeat_timeout_ms <= 0) o->heartbeat_timeout_ms = 5000;
    if (!o->max_frame_bytes) o->max_frame_bytes = 1ull << 30;
    if (o->max_pending_per_worker <= 0) o->max_pending_per_worker = 16384;
    if (!o->max_pending_bytes_per_worker)
        o->max_pending_bytes_per_worker = 2 * o->max_frame_bytes > (1ull << 30) ? 2 * o->max_frame_bytes : 1ull << 30;
    if (!o->spin_us) {     /* the option wins; then TRIB_RPC_SPIN_US; then 200 */
        const char *e = getenv("TRIB_RPC_SPIN_US");
        o->spin_us = e && *e && atoi(e) != 0 ? atoi(e) : 200;
    }
    o->bind_host = o->bind_host ? o->bind_host : "127.0.0.1";
}

/* Each part's settings, this worker's name and id, and the builtins: what
 * both rpc_init and rpc_offline_init need. */
static void init_parts(const char *name, const char *master, const struct rpc_link_ops *links)
{
    const struct rpc_opts *o = &ag.opts;
    bool dynamic = ag.rank == RPC_RANK_DYNAMIC;
    rpc_counters_reset();
    rpc_pending_init(rpc_peer_name);
    rpc_future_set_spin(o->spin_us);
    rpc_call_init(o->default_timeout_ms);
    rpc_peers_init(links, name, o->heartbeat_timeout_ms, rpc_membership_lost);
    wire_set_self_id(dynamic ? RPC_UNASSIGNED_ID : ag.rank);
    wire_set_max_frame(o->max_frame_bytes);
    rpc_membership_init(o, ag.rank, ag.world_size, master);
    rpc_conn_init(o->heartbeat_timeout_ms, o->max_frame_bytes, rpc_handle_router);
    rpc_msg_init(o->max_pending_per_worker, o->max_pending_bytes_per_worker);
    rref_register_builtins();
    rref_module_init();
}

/* The other locks stay usable: calls after rpc_shutdown fail cleanly. */
static void fini_parts(void)
{
    rref_module_shutdown();
    rpc_conn_reset();
    rpc_peers_fini();
    rpc_msg_fini();
    rpc_outmsg_drain();
    rpc_requests_drain();
}

/* RPC_TRANSPORT_SHM: listens for shared-memory links on the twin's path +
 * ".shm" (in the private directory of the twin). -1 with error. */
static int shm_listen(void)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (snprintf(sa.sun_path, sizeof sa.sun_path, "%s.shm", ag.ipc_endpoint + 6) >= (int)sizeof sa.sun_path)
        return rpc_set_error("rpc_init: the shared-memory link socket's path is too long (%s.shm)", ag.ipc_endpoint + 6);
    unlink(sa.sun_path);            /* a killed worker's on this port */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 64) < 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return rpc_set_error("rpc_init: cannot listen for shared-memory links at %s: %s", sa.sun_path, strerror(e));
    }
    ag.shm_fd = fd;
    snprintf(ag.shm_path, sizeof ag.shm_path, "%s", sa.sun_path);
    return 0;
}

/* Closes the sockets rpc_init made (the router first: its monitor then stops). */
static void close_sockets(void)
{
    if (ag.shm_path[0]) {
        close(ag.shm_fd);
        unlink(ag.shm_path);
        ag.shm_path[0] = '\0';
    }
    rpc_ipc_unbind(ag.ipc_endpoint);
    ZMQ_CHECK(zmq_close(ag.router));
    rpc_curve_close();
    ZMQ_CHECK(zmq_ctx_term(ag.zctx));
    if (ag.efd >= 0) close(ag.efd);
    ag.efd = -1;
}

static void teardown(void)
{
    rpc_io_stop();
    rpc_pool_stop();
    rpc_out_reset();
    ag.up = false;
    rpc_peers_set_up(false);
    fini_parts();
    close_sockets();
}

/* Undoes a failed rpc_init before the I/O thread started; returns -1 with
 * the error as it was. */
static int init_failed(void)
{
    char e[1024];
    snprintf(e, sizeof e, "%s", rpc_last_error());
    fini_parts();
    close_sockets();
    return rpc_set_error("%s", e);
}

int rpc_init(const struct rpc_opts *opts)
{
    if (ag.up) return rpc_set_error("rpc_init: already initialised");
    if (!opts || !opts->name || !*opts->name || strlen(opts->name) >= 64)
        return rpc_set_error("rpc_init: a worker name (1..63 bytes) is required");
    memset(&ag, 0, sizeof ag);
    ag.efd = -1;
    ag.opts = *opts;
    struct rpc_opts *o = &ag.opts;
    ag.rank = o->rank == RPC_RANK_ENV ? env_int("RANK", "SLURM_PROCID", -100) : o->rank;
    bool dynamic = ag.rank == RPC_RANK_DYNAMIC;
    ag.world_size = o->world_size > 0 ? o->world_size : env_int("WORLD_SIZE", "SLURM_NTASKS", 0);
    if (ag.rank == -100) return rpc_set_error("rpc_init: no rank given and RANK/SLURM_PROCID unset");
    if (!dynamic && (ag.world_size < 1 || ag.rank < 0 || ag.rank >= ag.world_size))
        return rpc_set_error("rpc_init: rank %d out of range for world size %d", ag.rank, ag.world_size);
    char master[128];
    if (o->master) {
        snprintf(master, sizeof master, "%s", o->master);
    } else {
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        if (!port) return rpc_set_error("rpc_init: no master address given and MASTER_PORT unset");
        snprintf(master, sizeof master, "tcp://%s:%s", addr ? addr : "127.0.0.1", port);
    }
    apply_defaults(o);
    o->name = NULL;
    ag.transport = rpc_transport_resolve(o->transport);
    ag.shm_path[0] = '\0';
    ag.shm_fd = -1;
    ag.zctx = zmq_ctx_new();
    CHECK(ag.zctx != NULL);
    ag.router = zmq_socket(ag.zctx, ZMQ_ROUTER);
    CHECK(ag.router != NULL);
    int zero = 0, hwm = HWM;
    int64_t maxsz = (int64_t)o->max_frame_bytes;
    ZMQ_CHECK(zmq_setsockopt(ag.router, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_setsockopt(ag.router, ZMQ_SNDHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(ag.router, ZMQ_RCVHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(ag.router, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz));
    init_parts(opts->name, master, &zmq_links);
    if (rpc_curve_setup(o, ag.zctx, ag.rank, master) < 0) return init_failed();
    rpc_curve_server(ag.router);
    rpc_watch_router_start(ag.router);
    char bind_ep[160];
    if (ag.rank == 0) {
        snprintf(bind_ep, sizeof bind_ep, "%s", master);
        size_t l = strlen(bind_ep);
        if (l > 2 && strcmp(bind_ep + l - 2, ":0") == 0) strcpy(bind_ep + l - 1, "*");
    } else {
        snprintf(bind_ep, sizeof bind_ep, "tcp://%s:*", o->bind_host);
    }
    if (zmq_bind(ag.router, bind_ep) < 0) {
        rpc_set_error("rpc_init: cannot bind %s: %s", bind_ep, zmq_strerror(zmq_errno()));
        return init_failed();
    }
    size_t eplen = sizeof ag.endpoint;
    ZMQ_CHECK(zmq_getsockopt(ag.router, ZMQ_LAST_ENDPOINT, ag.endpoint, &eplen));
    if (ag.rank == 0) rpc_membership_set_master(ag.endpoint);
    if (rpc_ipc_bind(ag.router, ag.endpoint, ag.transport, ag.ipc_endpoint, sizeof ag.ipc_endpoint) < 0)
        return init_failed();
    rpc_peers_set_self(-1, ag.endpoint, ag.ipc_endpoint[0] ? ag.ipc_endpoint : ag.endpoint);
    if (ag.transport == RPC_TRANSPORT_SHM && ag.ipc_endpoint[0] && shm_listen() < 0) return init_failed();
    ag.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    CHECK(ag.efd >= 0);

    if (!rpc_add_peer(0, ag.rank == 0 ? rpc_self_name() : "(rendezvous)", ag.rank == 0 ? ag.endpoint : master, false)) {
        char e[1024];
        snprintf(e, sizeof e, "rpc_init: %s", rpc_last_error());
        rpc_set_error("%s", e);
        return init_failed();
    }
    ag.up = true;
    rpc_peers_set_up(true);
    rpc_io_set_admitted(ag.rank == 0);
    struct rpc_io_cfg io = {
        .router = ag.router, .efd = ag.efd,
        .heartbeat_ms = o->heartbeat_ms, .heartbeat_timeout_ms = o->heartbeat_timeout_ms,
        .on_router = on_router, .on_dealer = rpc_handle_dealer,
        .on_heartbeat = on_heartbeat, .after_poll = rpc_conn_poll,
        .shm_listen_fd = ag.shm_path[0] ? ag.shm_fd : -1, .conn_worker = rpc_conn_worker,
    };
    rpc_io_start(&io);
    rpc_pool_start(o->num_handler_threads);

    if (ag.rank == 0 && o->on_listening) o->on_listening(rpc_master_endpoint(), o->listening_user);
    if (rpc_membership_join(ag.endpoint, o->init_timeout_ms, o->cancel) < 0) {
        char e[1024];
        snprintf(e, sizeof e, "%s", rpc_last_error());
        teardown();
        return rpc_set_error("%s", e);
    }
    rpc_peers_set_self(rpc_self_id(), NULL, NULL);
    return 0;
}

void rpc_shutdown(bool graceful)
{
    if (!ag.up) return;
    if (ag.rank == 0) rpc_refuse_joins("the world is shutting down");
    rref_module_closing();
    rpc_membership_leave(graceful, ag.opts.default_timeout_ms);
    teardown();
}

/* ---- offline agent ---------------------------------------------------------
 * The agent without sockets or threads, for the fuzz targets and their
 * corpus replay: messages are handed to rpc_handle_router/rpc_handle_dealer
 * directly, whatever would be sent is dropped (calls fail at once), and
 * handler jobs run when rpc_offline_run_jobs is called. */

int rpc_offline_init(const char *name, int rank, int world)
{
    if (ag.up) return rpc_set_error("rpc_offline_init: already initialised");
    memset(&ag, 0, sizeof ag);
    ag.efd = -1;
    ag.rank = rank;
    ag.world_size = world;
    ag.opts.rank = rank;
    ag.opts.world_size = world;
    ag.opts.default_timeout_ms = 1000;
    ag.opts.heartbeat_timeout_ms = 1000;
    apply_defaults(&ag.opts);
    ag.offline = true;
    char master[160];
    snprintf(master, sizeof master, "offline://%s", name);
    init_parts(name, master, &null_links);
    rpc_peers_set_self(rank, master, master);
    rpc_membership_set_complete();
    rpc_io_set_admitted(true);
    ag.up = true;
    rpc_peers_set_up(true);
    return 0;
}

void rpc_offline_run_jobs(void) { rpc_pool_run_queued(); }

struct rpc_future *rpc_offline_expect(int peer, uint64_t req_id, const char *fn)
{
    struct rpc_future *f = rpc_future_new();
    snprintf(f->fn, sizeof f->fn, "%s", fn);
    f->peer = peer;
    f->req_id = req_id;
    atomic_fetch_add(&f->refs, 1);        /* the pending table's */
    rpc_call_started();
    rpc_pending_add(f);
    return f;
}

void rpc_offline_fini(void)
{
    if (!ag.up || !ag.offline) return;
    rref_module_closing();
    rpc_offline_run_jobs();
    for (int i = 0; i < MAX_WORKERS; i++)
        if (rpc_peer(i) && i != rpc_self_id() && wire_hooks()->on_peer_gone) wire_hooks()->on_peer_gone(i, wire_hooks()->user);
    rpc_fail_pending_to(-1, "shut down");
    rpc_offline_run_jobs();
    ag.up = false;
    rpc_peers_set_up(false);
    fini_parts();
}
