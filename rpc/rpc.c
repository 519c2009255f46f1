/* The RPC agent's life (docs/design.md §4.1-4.3, rpc/README.md): start-up (options, sockets,
 * the I/O thread and the handler pool, the rendezvous), graceful and
 * immediate shutdown, and the offline agent of the fuzz targets. The work
 * in between lives in io.c (the I/O thread), message.c (received
 * messages), call.c (calls and the pending table), request.c (handlers),
 * membership.c, conn.c, rref*.c and wire.c (the codec). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/error.h"
#include "rpc/rpc_internal.h"

struct rpc_agent rpc_agent_state;
static struct rpc_agent *const A = &rpc_agent_state;


void rpc_request_autograd_ids(const struct rpc_request *req, int64_t *ctx_id, int64_t *msg_id)
{
    *ctx_id = req->ac_ctx;
    *msg_id = req->ac_msg;
}

bool rpc_is_up(void) { return A->up; }
const char *rpc_self_name(void) { return A->self.name; }
const struct rpc_worker_info *rpc_self(void) { return &A->self; }
const char *rpc_master_endpoint(void) { return A->master; }
uint64_t rpc_gen_id(void) { return ((uint64_t)rpc_self_id() << 48) | (atomic_fetch_add(&A->next_gid, 1) & 0xffffffffffffull); }

/* ---- links: how membership reaches a peer ------------------------------------
 * A dealer socket per peer, connected through tcp:// or its ipc:// twin;
 * the offline agent (fuzz targets) links to nothing: a stand-in handle
 * that sends nowhere, so the rest of the agent runs unchanged. */

static void *zmq_link_open(int id, const char *endpoint, const unsigned char *rid, char *via, size_t cap)
{
    if (rpc_connect_endpoint(endpoint, A->transport, via, cap) < 0) return NULL;
    void *d = zmq_socket(A->zctx, ZMQ_DEALER);
    CHECK(d != NULL);
    int zero = 0, hwm = HWM;
    int64_t maxsz = (int64_t)A->opts.max_frame_bytes;
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_RCVHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz));
    ZMQ_CHECK(zmq_setsockopt(d, ZMQ_ROUTING_ID, rid, RPC_RID_LEN));
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

/* ---- init / shutdown ---------------------------------------------------- */

static int env_int(const char *a, const char *b, int dflt)
{
    const char *v = getenv(a);
    if (!v && b) v = getenv(b);
    return v && *v ? atoi(v) : dflt;
}

/* Waits until pred() holds, or timeout_ms (< 0: no limit) has passed. */
static bool wait_state(bool (*pred)(void), int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : trib_now_ms() + timeout_ms;
    pthread_mutex_lock(&A->state_mu);
    while (!pred()) {
        int64_t left = deadline - trib_now_ms();
        if (left <= 0) break;
        struct timespec ts = trib_deadline_ts(left < 50 ? left : 50);
        pthread_cond_timedwait(&A->state_cv, &A->state_mu, &ts);
    }
    bool ok = pred();
    pthread_mutex_unlock(&A->state_mu);
    return ok;
}

static bool pred_dir(void) { return A->dir_ready; }
static bool cancelled(void) { return A->opts.cancel && *A->opts.cancel; }
static bool pred_dir_or_cancel(void) { return A->dir_ready || cancelled(); }

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
    if (!o->spin_us) o->spin_us = 200;
    o->bind_host = o->bind_host ? o->bind_host : "127.0.0.1";
}

/* Locks, counters, this worker's name and id, and the builtins: what both
 * rpc_init and rpc_offline_init need. */
static void init_state(const char *name)
{
    pthread_rwlock_init(&A->dir_lock, NULL);
    pthread_mutex_init(&A->state_mu, NULL);
    pthread_cond_init(&A->state_cv, NULL);
    rpc_events_reset();
    rpc_counters_reset();
    atomic_init(&A->next_gid, 1);
    snprintf(A->self.name, sizeof A->self.name, "%s", name);
    wire_set_self_id(A->dynamic ? RPC_UNASSIGNED_ID : A->rank);
    rpc_membership_register();
    rpc_conn_register();
    rref_register_builtins();
    rref_module_init();
}

/* The other locks stay usable: calls after rpc_shutdown fail cleanly. */
static void destroy_state(void)
{
    pthread_rwlock_destroy(&A->dir_lock);
    rpc_fl_drain(&rpc_outmsg_fl);
    rpc_fl_drain(&rpc_request_fl);
}

static void teardown(void);

int rpc_init(const struct rpc_opts *opts)
{
    if (A->up) return rpc_set_error("rpc_init: already initialised");
    if (!opts || !opts->name || !*opts->name || strlen(opts->name) >= 64)
        return rpc_set_error("rpc_init: a worker name (1..63 bytes) is required");
    memset(A, 0, sizeof *A);
    A->opts = *opts;
    struct rpc_opts *o = &A->opts;
    A->rank = o->rank == RPC_RANK_ENV ? env_int("RANK", "SLURM_PROCID", -100) : o->rank;
    A->dynamic = A->rank == RPC_RANK_DYNAMIC;
    A->world_size = o->world_size > 0 ? o->world_size : env_int("WORLD_SIZE", "SLURM_NTASKS", 0);
    if (A->rank == -100) return rpc_set_error("rpc_init: no rank given and RANK/SLURM_PROCID unset");
    if (!A->dynamic && (A->world_size < 1 || A->rank < 0 || A->rank >= A->world_size))
        return rpc_set_error("rpc_init: rank %d out of range for world size %d", A->rank, A->world_size);
    if (o->master) {
        snprintf(A->master, sizeof A->master, "%s", o->master);
    } else {
        const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
        if (!port) return rpc_set_error("rpc_init: no master address given and MASTER_PORT unset");
        snprintf(A->master, sizeof A->master, "tcp://%s:%s", addr ? addr : "127.0.0.1", port);
    }
    apply_defaults(o);
    o->name = NULL;
    A->transport = rpc_transport_resolve(o->transport);
    A->links = &zmq_links;
    rpc_future_set_spin(o->spin_us);
    init_state(opts->name);
    A->zctx = zmq_ctx_new();
    CHECK(A->zctx != NULL);
    A->router = zmq_socket(A->zctx, ZMQ_ROUTER);
    CHECK(A->router != NULL);
    int zero = 0, hwm = HWM;
    int64_t maxsz = (int64_t)o->max_frame_bytes;
    ZMQ_CHECK(zmq_setsockopt(A->router, ZMQ_LINGER, &zero, sizeof zero));
    ZMQ_CHECK(zmq_setsockopt(A->router, ZMQ_SNDHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(A->router, ZMQ_RCVHWM, &hwm, sizeof hwm));
    ZMQ_CHECK(zmq_setsockopt(A->router, ZMQ_MAXMSGSIZE, &maxsz, sizeof maxsz));
    if (rpc_curve_setup() < 0) {
        char e[1024];
        snprintf(e, sizeof e, "%s", rpc_last_error());
        ZMQ_CHECK(zmq_close(A->router));      /* first: its monitor then stops */
        rpc_curve_close();
        ZMQ_CHECK(zmq_ctx_term(A->zctx));
        return rpc_set_error("%s", e);
    }
    rpc_curve_server(A->router);
    rpc_watch_router_start();
    char bind_ep[160];
    if (A->rank == 0) {
        snprintf(bind_ep, sizeof bind_ep, "%s", A->master);
        size_t l = strlen(bind_ep);
        if (l > 2 && strcmp(bind_ep + l - 2, ":0") == 0) strcpy(bind_ep + l - 1, "*");
    } else {
        snprintf(bind_ep, sizeof bind_ep, "tcp://%s:*", o->bind_host);
    }
    if (zmq_bind(A->router, bind_ep) < 0) {
        rpc_set_error("rpc_init: cannot bind %s: %s", bind_ep, zmq_strerror(zmq_errno()));
        ZMQ_CHECK(zmq_close(A->router));      /* first: its monitor then stops */
        rpc_curve_close();
        ZMQ_CHECK(zmq_ctx_term(A->zctx));
        return -1;
    }
    size_t eplen = sizeof A->endpoint;
    ZMQ_CHECK(zmq_getsockopt(A->router, ZMQ_LAST_ENDPOINT, A->endpoint, &eplen));
    if (A->rank == 0) snprintf(A->master, sizeof A->master, "%s", A->endpoint);
    snprintf(A->self.endpoint, sizeof A->self.endpoint, "%s", A->endpoint);
    if (rpc_ipc_bind(A->router, A->endpoint, A->transport, A->ipc_endpoint, sizeof A->ipc_endpoint) < 0) {
        char e[1024];
        snprintf(e, sizeof e, "%s", rpc_last_error());
        ZMQ_CHECK(zmq_close(A->router));      /* first: its monitor then stops */
        rpc_curve_close();
        ZMQ_CHECK(zmq_ctx_term(A->zctx));
        return rpc_set_error("%s", e);
    }
    snprintf(A->self.via, sizeof A->self.via, "%s", A->ipc_endpoint[0] ? A->ipc_endpoint : A->endpoint);
    A->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    CHECK(A->efd >= 0);

    if (!rpc_add_peer(0, A->rank == 0 ? A->self.name : "(rendezvous)", A->rank == 0 ? A->endpoint : A->master, false)) {
        char e[1024];
        snprintf(e, sizeof e, "%s", rpc_last_error());
        rpc_ipc_unbind(A->ipc_endpoint);
        ZMQ_CHECK(zmq_close(A->router));      /* first: its monitor then stops */
        rpc_curve_close();
        ZMQ_CHECK(zmq_ctx_term(A->zctx));
        close(A->efd);
        return rpc_set_error("rpc_init: %s", e);
    }
    A->up = true;
    atomic_store(&A->admitted, A->rank == 0);
    rpc_out_open();
    CHECK(pthread_create(&A->io_thread, NULL, rpc_io_main, NULL) == 0);
    rpc_pool_start(o->num_handler_threads);

    if (A->rank == 0 && o->on_listening) o->on_listening(A->master, o->listening_user);
    if (A->rank == 0) {
        if (A->world_size == 1) {
            A->dir_ready = A->dir_sent = true;
        } else if (!wait_state(pred_dir_or_cancel, o->init_timeout_ms) || !wait_state(pred_dir, 0)) {
            if (cancelled())
                rpc_set_error("rpc_init: interrupted while waiting for the rendezvous (%d of %d workers arrived)",
                              A->static_seen + 1, A->world_size);
            else
                rpc_set_error("rpc_init: rendezvous timed out after %d ms (%d of %d workers arrived)",
                              o->init_timeout_ms, A->static_seen + 1, A->world_size);
            teardown();
            return -1;
        }
    } else {
        struct rpc_value args = rpc_list(4), res = rpc_nil();
        args.list.items[0] = rpc_str(A->self.name);
        args.list.items[1] = rpc_int(A->rank);
        args.list.items[2] = rpc_str(A->endpoint);
        args.list.items[3] = rpc_int(A->dynamic ? 0 : A->world_size);
        struct rpc_future *f = rpc_async_id(0, "__hello", &args, o->init_timeout_ms);
        rpc_value_clear(&args);
        int rc = rpc_future_take(f, &res);
        rpc_future_free(f);
        int64_t id;
        if (rc < 0 || !rpc_arg_int(&res, 0, &id)) {
            char e[1024];
            snprintf(e, sizeof e, "%s", rpc_last_error());
            rpc_value_clear(&res);
            teardown();
            return rpc_set_error("rpc_init: rendezvous with %s failed: %s", A->master, e);
        }
        rpc_value_clear(&res);
        wire_set_self_id((int)id);
        atomic_store(&A->admitted, true);
        if (!wait_state(pred_dir, o->init_timeout_ms)) {
            teardown();
            return rpc_set_error("rpc_init: no directory from %s after %d ms", A->master, o->init_timeout_ms);
        }
    }
    A->self.id = rpc_self_id();
    return 0;
}

static void teardown(void)
{
    atomic_store(&A->io_stop, true);
    rpc_wake_io();
    pthread_join(A->io_thread, NULL);
    rpc_pool_stop();
    A->up = false;
    rref_module_shutdown();
    rpc_conn_reset();
    for (int i = 0; i < MAX_WORKERS; i++) {
        if (!A->peers[i]) continue;
        if (A->peers[i]->dealer) A->links->close(A->peers[i]->dealer);
        free(A->peers[i]);
        A->peers[i] = NULL;
    }
    rpc_ipc_unbind(A->ipc_endpoint);
    ZMQ_CHECK(zmq_close(A->router));
    rpc_curve_close();
    ZMQ_CHECK(zmq_ctx_term(A->zctx));
    close(A->efd);
    rpc_out_reset();
    destroy_state();
}

static bool pred_idle(void) { return rpc_calls_in_flight() == 0 && rpc_requests_active() == 0; }
/* rank 0 said go, or rank 0 is gone (nobody left to say it) */
static bool pred_go(void) { return A->sd_go || !rpc_worker_alive(0); }

static int static_alive(void)
{
    int n = 0;
    pthread_rwlock_rdlock(&A->dir_lock);
    for (int i = 1; i < A->world_size && i < MAX_WORKERS; i++)
        if (A->peers[i] && A->peers[i]->alive) n++;
    pthread_rwlock_unlock(&A->dir_lock);
    return n;
}

/* Under state_mu; liveness is read under dir_lock (never held while
 * taking state_mu, so the order is safe). */
static bool all_static(const bool *flags)
{
    bool ok = true;
    pthread_rwlock_rdlock(&A->dir_lock);
    for (int i = 1; i < A->world_size && i < MAX_WORKERS && ok; i++)
        if (A->peers[i] && A->peers[i]->alive && !flags[i]) ok = false;
    pthread_rwlock_unlock(&A->dir_lock);
    return ok;
}

static bool pred_all_ready(void) { return all_static(A->sd_ready_from); }
static bool pred_all_bye(void) { return all_static(A->bye_from); }

void rpc_shutdown(bool graceful)
{
    if (!A->up) return;
    if (A->rank == 0) rpc_refuse_joins("the world is shutting down");
    rref_module_closing();
    const int long_wait = A->opts.default_timeout_ms;
    if (graceful) {
        wait_state(pred_idle, long_wait);
        if (A->dynamic) {
            struct rpc_value args = rpc_list(1);
            args.list.items[0] = rpc_int(rpc_self_id());
            struct rpc_future *f = rpc_async_id(0, "__leave", &args, 2000);
            rpc_value_clear(&args);
            rpc_future_wait(f, NULL);
            rpc_future_free(f);
        } else if (A->rank != 0) {
            struct rpc_future *f = rpc_async_id(0, "__sd_ready", NULL, long_wait);
            rpc_future_wait(f, NULL);
            rpc_future_free(f);
            /* No time limit: the barrier is "every static member has called
             * rpc_shutdown", however long rank 0 still works; pred_go also
             * holds once rank 0 is dead, so this cannot hang on a corpse. */
            wait_state(pred_go, -1);
            wait_state(pred_idle, long_wait);
            f = rpc_async_id(0, "__bye", NULL, 2000);
            rpc_future_wait(f, NULL);
            rpc_future_free(f);
        } else {
            if (static_alive() > 0) {
                wait_state(pred_all_ready, -1);   /* dead members count as ready */
                for (int i = 1; i < A->world_size && i < MAX_WORKERS; i++)
                    if (rpc_worker_alive(i)) rpc_send_oneway(i, "__sd_go", NULL);
                wait_state(pred_all_bye, long_wait);
                /* let the bye replies leave before the sockets close */
                usleep(20000);
            }
            wait_state(pred_idle, long_wait);
        }
    }
    teardown();
}

/* ---- offline agent ---------------------------------------------------------
 * The agent without sockets or threads, for the fuzz targets and their
 * corpus replay: messages are handed to rpc_handle_router/rpc_handle_dealer
 * directly, whatever would be sent is dropped (calls fail at once), and
 * handler jobs run when rpc_offline_run_jobs is called. */

int rpc_offline_init(const char *name, int rank, int world)
{
    if (A->up) return rpc_set_error("rpc_offline_init: already initialised");
    memset(A, 0, sizeof *A);
    A->rank = rank;
    A->world_size = world;
    A->opts.rank = rank;
    A->opts.world_size = world;
    A->opts.default_timeout_ms = 1000;
    A->opts.heartbeat_timeout_ms = 1000;
    apply_defaults(&A->opts);
    A->offline = true;
    A->links = &null_links;
    A->efd = -1;
    init_state(name);
    rpc_msg_init();
    A->self.id = rank;
    snprintf(A->self.endpoint, sizeof A->self.endpoint, "offline://%s", name);
    A->dir_ready = A->dir_sent = true;
    atomic_store(&A->admitted, true);
    A->up = true;
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
    if (!A->up || !A->offline) return;
    rref_module_closing();
    rpc_offline_run_jobs();
    for (int i = 0; i < MAX_WORKERS; i++)
        if (A->peers[i] && i != rpc_self_id() && rpc_hooks.on_peer_gone) rpc_hooks.on_peer_gone(i, rpc_hooks.user);
    rpc_fail_pending_to(-1, "shut down");
    rpc_offline_run_jobs();
    A->up = false;
    rref_module_shutdown();
    rpc_conn_reset();
    for (int i = 0; i < MAX_WORKERS; i++) {
        free(A->peers[i]);
        A->peers[i] = NULL;
    }
    rpc_msg_fini();
    destroy_state();
}
