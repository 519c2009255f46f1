/* Connections arriving on this worker's router and whose they are. A routing
 * id is bound to worker W once W, asked through our dealer to the endpoint W
 * registered, vouches for it as the routing id of one of its own dealers
 * (__conn_check); rank 0 binds the connection a worker said hello on. Until
 * then a connection's requests wait here (bounded); a message whose claimed
 * sender is not its connection's worker is dropped, counted and logged
 * (per connection: the first refusal at once, then at most one line a
 * second with the count), and a connection that sends too many bad
 * messages is cut. I/O thread only, except the counters.
 *
 * A check lasts until the claimed worker answers or, here, is gone (lost,
 * or replaced by a new process: its incarnation moved on); one alive that
 * has not answered in twice the hold time is asked again. Requests of a
 * worker that died before it vouched for them are dropped as gone
 * (counted, not logged: nobody waits for them).
 * Why a live worker's messages are never refused here, through a restart
 * of it or of this worker: rpc/README.md "Joining, restarts and
 * verification". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "common/check.h"
#include "rpc/calls.h"

enum conn_state {
    CONN_NEW,           /* nothing known, nothing held */
    CONN_WAITING,       /* holds requests; the claimed worker is not (yet) a live peer */
    CONN_CHECKING,      /* the claimed worker was asked (__conn_check) */
    CONN_BOUND,         /* the connection is `worker`'s */
    CONN_CUT,           /* cut off: everything from it is dropped unread */
};

/* A message waiting for its connection to be verified: header + tensor frames. */
struct held {
    struct held *next;
    uint64_t req_id;
    int n;
    size_t bytes;
    zmq_msg_t f[];
};

struct conn {
    struct conn *hnext;
    unsigned char rid[255];
    size_t rid_len;
    enum conn_state state;
    int worker;                 /* CONN_BOUND */
    int claimed;                /* CONN_WAITING / CONN_CHECKING: who it says it is */
    int refuted;                /* a worker that disowned this connection, or -1 */
    uint64_t gen;               /* of the check in flight */
    uint32_t incarnation;       /* of the claimed worker's entry when the check began */
    uint32_t held_incarnation;  /* ... when the first held request came (0: no entry then) */
    int64_t since;              /* when the hold or check began */
    int64_t last_seen;
    struct held *held, *held_tail;
    int nheld;
    size_t held_bytes;
    uint32_t bad;
    struct rpc_drop_lines lines;    /* its drops' log lines (rpc_drop_lines_add) */
    int fd;                     /* the TCP socket it arrived on (ZMQ_SRCFD), or -1 */
    char addr[64];              /* its peer address "ip:port", to name it and to check fd */
};

#define CONN_BUCKETS 1024
/* How long a connection with nothing held and no binding is remembered. */
#define CONN_IDLE_MS 60000

/* Owned here (I/O thread only): the connection table, what it holds, and
 * the settings rpc_conn_init copied in. */
static struct {
    int hold_ms;                /* rpc_opts.heartbeat_timeout_ms: how long requests wait for verification */
    size_t max_frame_bytes;
    /* hands a held request back once its connection is verified (message.c's rpc_handle_router) */
    void (*replay)(struct conn *c, zmq_msg_t *frames, int n);
} settings;
static struct conn *table[CONN_BUCKETS];
static int nconns;
static int held_msgs;
static size_t held_bytes;
static uint64_t next_gen = 1;
static bool replay_due;         /* a check bound a connection that holds messages */
static bool joined;             /* the directory is in (rpc_conn_set_joined) */
static int nwaiting;            /* connections in CONN_WAITING */

static unsigned hash_seed;      /* random: strangers choose their routing ids */

static unsigned rid_hash(const unsigned char *rid, size_t len)
{
    while (!hash_seed) {
        unsigned char r[RPC_RID_LEN];
        rpc_new_rid(r);
        memcpy(&hash_seed, r + 1, sizeof hash_seed);
    }
    unsigned h = 2166136261u ^ hash_seed;
    for (size_t i = 0; i < len; i++) h = (h ^ rid[i]) * 16777619u;
    return h & (CONN_BUCKETS - 1);
}

static struct conn *find(const unsigned char *rid, size_t len)
{
    for (struct conn *c = table[rid_hash(rid, len)]; c; c = c->hnext)
        if (c->rid_len == len && memcmp(c->rid, rid, len) == 0) return c;
    return NULL;
}

/* Limits on what waits for verification: a burst of calls from a worker
 * that has just joined fits; a stranger cannot pin more than this. */
static size_t held_bytes_cap(void)
{
    size_t cap = 2 * settings.max_frame_bytes;
    return cap < ((size_t)256 << 20) ? (size_t)256 << 20 : cap;
}
#define HELD_MAX_MSGS_PER_CONN 4096
#define HELD_MAX_MSGS 65536

/* ---- logging ----------------------------------------------------------- */

static void conn_name(const struct conn *c, char *buf, size_t cap)
{
    char who[96] = "unverified connection";
    if (c->state == CONN_BOUND) {
        char name[64];
        rpc_peer_name(c->worker, name, sizeof name);
        snprintf(who, sizeof who, "%s's connection", name);
    }
    snprintf(buf, cap, "%s %s", who, c->addr);
}

/* One connection's drops, as base.h's drop lines: the first logged at
 * once, later ones at most once a second with their count (rpc_conn_poll
 * writes what is left of a second in which nothing else came). */
static void conn_log_write(struct conn *c)
{
    char name[192];
    conn_name(c, name, sizeof name);
    rpc_drop_lines_write(&c->lines, rpc_self_name(), name, c->bad);
}

static void conn_log(struct conn *c, uint32_t n, const char *why)
{
    if (rpc_drop_lines_add(&c->lines, n, why)) conn_log_write(c);
}

/* The drops of c held back for longer than a second, in one line. */
static void conn_log_flush(struct conn *c, int64_t now)
{
    if (rpc_drop_lines_due(&c->lines, now)) conn_log_write(c);
}

/* ---- the table ---------------------------------------------------------- */

static void held_free(struct held *m)
{
    for (int i = 0; i < m->n; i++) ZMQ_CHECK(zmq_msg_close(&m->f[i]));
    held_msgs--;
    held_bytes -= m->bytes;
    rpc_stat_add(RPC_STAT_HELD, -1);
    free(m);
}

/* Drops everything c holds; requests get `why` as their error. */
static void refuse_held(struct conn *c, enum rpc_drop kind, const char *why)
{
    while (c->held) {
        struct held *m = c->held;
        c->held = m->next;
        if (m->req_id) rpc_reply_error_to(c->rid, c->rid_len, m->req_id, why);
        rpc_stat_add(rpc_drop_stat(kind), 1);
        held_free(m);
    }
    c->held_tail = NULL;
    c->nheld = 0;
    c->held_bytes = 0;
}

static void set_state(struct conn *c, enum conn_state s)
{
    if (c->state == CONN_WAITING) nwaiting--;
    if (s == CONN_WAITING) nwaiting++;
    c->state = s;
}

static void unlink_free(struct conn *c)
{
    conn_log_flush(c, INT64_MAX);
    for (struct conn **pp = &table[rid_hash(c->rid, c->rid_len)]; *pp; pp = &(*pp)->hnext)
        if (*pp == c) {
            *pp = c->hnext;
            break;
        }
    refuse_held(c, RPC_DROP_UNVERIFIED, "rpc: connection forgotten");
    set_state(c, CONN_NEW);
    nconns--;
    free(c);
}

/* Frees the connection least recently heard from among those nothing
 * depends on (unbound, nothing held); false if there is none. */
static bool evict_one(void)
{
    struct conn *victim = NULL;
    for (int b = 0; b < CONN_BUCKETS; b++)
        for (struct conn *c = table[b]; c; c = c->hnext)
            if ((c->state == CONN_NEW || c->state == CONN_CUT) && !c->held &&
                (!victim || c->last_seen < victim->last_seen))
                victim = c;
    if (victim) unlink_free(victim);
    return victim != NULL;
}

struct conn *rpc_conn_get(const unsigned char *rid, size_t len, zmq_msg_t *first)
{
    if (len == 0 || len > 255) return NULL;
    struct conn *c = find(rid, len);
    if (!c) {
        if (nconns >= RPC_MAX_CONNS && !evict_one()) return NULL;
        c = trib_xcalloc(1, sizeof *c);
        memcpy(c->rid, rid, len);
        c->rid_len = len;
        c->worker = c->claimed = c->refuted = -1;
        c->fd = first ? zmq_msg_get(first, ZMQ_SRCFD) : -1;
        if (!rpc_fd_peer(c->fd, c->addr, sizeof c->addr)) {
            c->fd = -1;
            snprintf(c->addr, sizeof c->addr, "(no address)");
        }
        unsigned b = rid_hash(rid, len);
        c->hnext = table[b];
        table[b] = c;
        nconns++;
    }
    c->last_seen = trib_now_ms();
    return c;
}

bool rpc_conn_is_cut(const struct conn *c) { return c->state == CONN_CUT; }

const unsigned char *rpc_conn_rid(const struct conn *c, size_t *len)
{
    *len = c->rid_len;
    return c->rid;
}

int rpc_conn_worker(const unsigned char *rid, size_t len)
{
    struct conn *c = find(rid, len);
    return c && c->state == CONN_BOUND ? c->worker : -1;
}

void rpc_conn_bind(const unsigned char *rid, size_t len, int worker)
{
    struct conn *c = find(rid, len);
    if (!c) c = rpc_conn_get(rid, len, NULL);
    if (!c || c->state == CONN_CUT) return;
    set_state(c, CONN_BOUND);
    c->worker = worker;
    c->refuted = -1;
    if (c->held) replay_due = true;
}

void rpc_conn_forget_worker(int id)
{
    for (int b = 0; b < CONN_BUCKETS; b++)
        for (struct conn *c = table[b]; c; c = c->hnext)
            if (c->state == CONN_BOUND && c->worker == id) {
                set_state(c, CONN_NEW);
                c->worker = -1;
            }
}

/* Cuts c off: drops what it holds and everything it sends from now on,
 * and closes its TCP connection if the socket it arrived on still is that
 * connection (libzmq may have closed the descriptor and the number been
 * reused since). */
static void cut(struct conn *c)
{
    refuse_held(c, RPC_DROP_MALFORMED, "rpc: connection cut off for sending too many bad messages");
    set_state(c, CONN_CUT);
    c->worker = -1;
    rpc_stat_add(RPC_STAT_CUTS, 1);
    char now[64];
    if (rpc_fd_peer(c->fd, now, sizeof now) && strcmp(now, c->addr) == 0) shutdown(c->fd, SHUT_RDWR);
    c->fd = -1;
}

/* Counts n bad messages from c (logged as `why`, per conn_log); cuts c off past the limit. */
static void note_bad(struct conn *c, uint32_t n, const char *why)
{
    c->bad += n;
    conn_log(c, n, why);
    if (c->bad > RPC_MAX_BAD && c->state != CONN_CUT) {
        char name[192];
        conn_name(c, name, sizeof name);
        conn_log_flush(c, INT64_MAX);
        rpc_drop_log("rpc: %s: cutting off %s: more than %d bad messages", rpc_self_name(), name, RPC_MAX_BAD);
        cut(c);
    }
}

void rpc_conn_bad(struct conn *c, enum rpc_drop kind, const char *fmt, ...)
{
    rpc_stat_add(rpc_drop_stat(kind), 1);
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    note_bad(c, 1, why);
}

/* ---- verification ------------------------------------------------------ */

/* Whether the worker c's check asked is gone: no longer alive here, or its
 * entry now another process's. */
static bool claimed_gone(const struct conn *c)
{
    const struct peer *p = rpc_peer(c->claimed);
    return !p || !p->alive || p->incarnation != c->incarnation;
}

struct check { unsigned char rid[255]; size_t len; uint64_t gen; };

static void check_start(struct conn *c);

static void check_done(struct rpc_future *f, void *arg)
{
    struct check *ck = arg;
    struct conn *c = find(ck->rid, ck->len);
    if (c && c->state == CONN_CHECKING && c->gen == ck->gen) {
        char name[64], why[256];
        rpc_peer_name(c->claimed, name, sizeof name);
        const char *err = rpc_future_error(f);
        if (!err && f->value.kind == RPC_BOOL && f->value.b) {
            rpc_conn_bind(c->rid, c->rid_len, c->claimed);
        } else if (!err && c->nheld && c->held_incarnation != c->incarnation) {
            /* what it holds came before the process that disowns it was
             * known here: an earlier process of that id (which died while
             * they waited) sent them, or a stranger; refused either way,
             * counted as gone */
            snprintf(why, sizeof why, "rpc: %s: refused: %s disowns this connection", rpc_self_name(), name);
            c->refuted = c->claimed;
            set_state(c, CONN_NEW);
            refuse_held(c, RPC_DROP_GONE, why);
        } else if (!err) {
            snprintf(why, sizeof why, "rpc: %s: refused: %s disowns this connection", rpc_self_name(), name);
            c->refuted = c->claimed;
            set_state(c, CONN_NEW);
            int n = c->nheld;
            refuse_held(c, RPC_DROP_SPOOFED, why);
            if (n) {
                char log[128];
                snprintf(log, sizeof log, "%d request(s) in the name of %s, which disowns the connection", n, name);
                note_bad(c, (uint32_t)n, log);
            }
        } else if (claimed_gone(c)) {
            /* it died (or a new process took its id) before it answered:
             * what it sent will never be waited for */
            snprintf(why, sizeof why, "rpc: %s: refused: %s is gone (%s)", rpc_self_name(), name, err);
            set_state(c, CONN_NEW);
            refuse_held(c, RPC_DROP_GONE, why);
        } else if (trib_now_ms() - c->since >= 2 * (int64_t)settings.hold_ms) {
            /* no answer in time from a worker still alive here (slow, or
             * its I/O thread busy): not a refusal, it is asked again; it
             * answers or is declared lost meanwhile */
            check_start(c);
        } else {
            snprintf(why, sizeof why, "rpc: %s: refused: %s did not vouch for this connection (%s)", rpc_self_name(), name, err);
            set_state(c, CONN_NEW);
            int n = c->nheld;
            refuse_held(c, RPC_DROP_UNVERIFIED, why);
            if (n) {
                char log[320];
                snprintf(log, sizeof log, "%d request(s) in the name of %s, which did not vouch for it: %s", n, name, err);
                conn_log(c, (uint32_t)n, log);
            }
        }
    }
    free(ck);
}

/* Asks c->claimed whether c is one of its dealers (or answers it here when
 * it claims to be this worker). The call's deadline is twice the hold
 * time: a claimed worker that died is declared lost (a heartbeat timeout)
 * before it, so its end says "gone"; one still alive then is asked again. */
static void check_start(struct conn *c)
{
    if (c->claimed == rpc_self_id()) {
        if (rpc_own_dealer_rid(c->rid, c->rid_len)) {
            rpc_conn_bind(c->rid, c->rid_len, c->claimed);
            return;
        }
        char why[256];
        snprintf(why, sizeof why, "rpc: %s: refused: this connection is not %s's own", rpc_self_name(), rpc_self_name());
        c->refuted = c->claimed;
        set_state(c, CONN_NEW);
        int n = c->nheld;
        refuse_held(c, RPC_DROP_SPOOFED, why);
        if (n) note_bad(c, (uint32_t)n, "request(s) in this worker's own name");
        return;
    }
    set_state(c, CONN_CHECKING);
    c->since = trib_now_ms();
    c->gen = next_gen++;
    c->incarnation = rpc_peer(c->claimed)->incarnation;
    if (!c->nheld) c->held_incarnation = c->incarnation;
    struct check *ck = trib_xmalloc(sizeof *ck);
    memcpy(ck->rid, c->rid, c->rid_len);
    ck->len = c->rid_len;
    ck->gen = c->gen;
    struct rpc_value args = rpc_list(1);
    args.list.items[0] = rpc_bytes(c->rid, c->rid_len);
    rpc_call_internal(c->claimed, "__conn_check", &args, 2 * settings.hold_ms, check_done, ck);
}

/* A live peer this process can ask (it has a dealer to it). */
static bool askable(int id)
{
    return id >= 0 && id < MAX_WORKERS && rpc_peer(id) && rpc_peer(id)->alive && rpc_peer(id)->dealer;
}

static bool exempt(const struct wire_hdr *h)
{
    /* What a connection may ask before it belongs to anyone: to join (rank
     * 0 binds the connection to the new worker), and whether a connection
     * is ours (one bit about a 128-bit random id). */
    static const char *const fns[] = { "__hello", "__conn_check" };
    for (size_t i = 0; i < sizeof fns / sizeof *fns; i++)
        if (h->fn && h->fn_len == strlen(fns[i]) && memcmp(h->fn, fns[i], h->fn_len) == 0) return true;
    return false;
}

int rpc_conn_verdict(struct conn *c, const struct wire_hdr *h, int *from, char *why, size_t cap)
{
    char name[64];
    *from = -1;
    why[0] = '\0';
    if (c->state == CONN_CUT) {
        rpc_stat_add(RPC_STAT_CUT_DROPPED, 1);
        return CONN_REFUSE;
    }
    if (h->type != WIRE_REQ && h->type != WIRE_PING) {
        rpc_conn_bad(c, RPC_DROP_MALFORMED, "a response on the request socket");
        return CONN_REFUSE;
    }
    const char *what = h->type == WIRE_PING ? "a ping" : "a request";
    int fnl = h->type == WIRE_REQ ? (int)h->fn_len : 0;
    const char *fn = h->type == WIRE_REQ ? h->fn : "";
    if (c->state == CONN_BOUND) {
        /* A dynamic worker says RPC_UNASSIGNED_ID until it learns its id. */
        if (h->sender == c->worker || h->sender == RPC_UNASSIGNED_ID) {
            *from = c->worker;
            return CONN_ACCEPT;
        }
        char mine[64];
        rpc_peer_name(h->sender, name, sizeof name);
        rpc_peer_name(c->worker, mine, sizeof mine);
        snprintf(why, cap, "rpc: %s: refused: this connection is %s's, not %s's", rpc_self_name(), mine, name);
        rpc_conn_bad(c, RPC_DROP_SPOOFED, "%s %.*s in the name of %s", what, fnl, fn, name);
        return CONN_REFUSE;
    }
    if (h->type == WIRE_REQ && exempt(h)) return CONN_ACCEPT;
    if (h->sender == c->refuted) {
        rpc_peer_name(h->sender, name, sizeof name);
        snprintf(why, cap, "rpc: %s: refused: %s disowns this connection", rpc_self_name(), name);
        rpc_conn_bad(c, RPC_DROP_SPOOFED, "%s %.*s in the name of %s, which disowns the connection", what, fnl, fn, name);
        return CONN_REFUSE;
    }
    if (h->type == WIRE_PING) {
        /* Not credited. The first pings of a peer this worker is still
         * verifying (or has not heard of yet) are normal; pings in the
         * name of a worker that is gone are not. */
        int id = h->sender;
        if (askable(id)) {
            if (c->state == CONN_NEW) {
                c->claimed = id;
                check_start(c);
            }
            return CONN_REFUSE;
        }
        if (id >= 0 && id < MAX_WORKERS && rpc_peer(id) && id != rpc_self_id()) {
            rpc_peer_name(id, name, sizeof name);
            rpc_conn_bad(c, RPC_DROP_UNVERIFIED, "a ping in the name of %s, which is not a live worker", name);
        }
        return CONN_REFUSE;
    }
    return CONN_HOLD;
}

bool rpc_conn_hold(struct conn *c, const struct wire_hdr *h, zmq_msg_t *frames, int n, char *why, size_t cap)
{
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += zmq_msg_size(&frames[i]);
    if ((c->state == CONN_WAITING || c->state == CONN_CHECKING) && h->sender != c->claimed) {
        char a[64], b[64];
        rpc_peer_name(h->sender, a, sizeof a);
        rpc_peer_name(c->claimed, b, sizeof b);
        snprintf(why, cap, "rpc: %s: refused: this connection claims to be %s, not %s", rpc_self_name(), b, a);
        rpc_conn_bad(c, RPC_DROP_SPOOFED, "a request in the name of %s while claiming to be %s", a, b);
        return false;
    }
    if (c->nheld >= HELD_MAX_MSGS_PER_CONN || held_msgs >= HELD_MAX_MSGS || held_bytes + bytes > held_bytes_cap()) {
        rpc_stat_add(RPC_STAT_BUSY, 1);
        snprintf(why, cap, "rpc: %s: busy: too many requests wait for their connection to be verified", rpc_self_name());
        conn_log(c, 1, "a request: too much is waiting for verification");
        return false;
    }
    struct held *m = trib_xmalloc(sizeof *m + (size_t)n * sizeof(zmq_msg_t));
    m->next = NULL;
    m->req_id = h->req_id;
    m->n = n;
    m->bytes = bytes;
    for (int i = 0; i < n; i++) {
        ZMQ_CHECK(zmq_msg_init(&m->f[i]));
        ZMQ_CHECK(zmq_msg_move(&m->f[i], &frames[i]));
    }
    if (c->held_tail) c->held_tail->next = m; else c->held = m;
    c->held_tail = m;
    c->nheld++;
    c->held_bytes += bytes;
    held_msgs++;
    held_bytes += bytes;
    rpc_stat_add(RPC_STAT_HELD, 1);
    if (c->state == CONN_NEW) {
        c->claimed = h->sender;
        const struct peer *p = rpc_peer(c->claimed);
        c->held_incarnation = p ? p->incarnation : 0;
        c->since = trib_now_ms();
        set_state(c, CONN_WAITING);
        if (askable(c->claimed) || c->claimed == rpc_self_id()) check_start(c);
    }
    return true;
}

/* Replays what bound connections hold, in arrival order. */
static void replay(void)
{
    replay_due = false;
    for (int b = 0; b < CONN_BUCKETS; b++)
        for (struct conn *c = table[b]; c; c = c->hnext) {
            while (c->state == CONN_BOUND && c->held) {
                struct held *m = c->held;
                c->held = m->next;
                if (!c->held) c->held_tail = NULL;
                c->nheld--;
                c->held_bytes -= m->bytes;
                settings.replay(c, m->f, m->n);
                held_free(m);
            }
        }
}

static int64_t last_sweep;

void rpc_conn_poll(void)
{
    if (replay_due) replay();
    int64_t now = trib_now_ms();
    if (!nwaiting && now - last_sweep < 1000) return;
    last_sweep = now;
    int hold_ms = settings.hold_ms;
    for (int b = 0; b < CONN_BUCKETS; b++)
        for (struct conn *c = table[b], *next; c; c = next) {
            next = c->hnext;
            conn_log_flush(c, now);
            if (c->state == CONN_WAITING) {
                if (askable(c->claimed) || c->claimed == rpc_self_id()) {
                    check_start(c);
                } else if (joined && now - c->since > hold_ms) {
                    char name[64], why[256];
                    rpc_peer_name(c->claimed, name, sizeof name);
                    snprintf(why, sizeof why, "rpc: %s: refused: %s is not a live worker here", rpc_self_name(), name);
                    set_state(c, CONN_NEW);
                    int n = c->nheld;
                    refuse_held(c, RPC_DROP_UNVERIFIED, why);
                    char log[160];
                    snprintf(log, sizeof log, "%d request(s) in the name of %s, which is not a live worker", n, name);
                    conn_log(c, (uint32_t)n, log);
                }
            } else if ((c->state == CONN_NEW || c->state == CONN_CUT) && now - c->last_seen > CONN_IDLE_MS) {
                unlink_free(c);
            }
        }
    if (replay_due) replay();
}

void rpc_conn_set_joined(void)
{
    if (joined) return;
    joined = true;
    int64_t now = trib_now_ms();
    for (int b = 0; b < CONN_BUCKETS; b++)
        for (struct conn *c = table[b]; c; c = c->hnext)
            if (c->state == CONN_WAITING) c->since = now;
}

void rpc_conn_reset(void)
{
    joined = false;
    for (int b = 0; b < CONN_BUCKETS; b++)
        while (table[b]) {
            struct conn *c = table[b];
            table[b] = c->hnext;
            while (c->held) {
                struct held *m = c->held;
                c->held = m->next;
                held_free(m);
            }
            free(c);
        }
    nconns = 0;
    nwaiting = 0;
    replay_due = false;
    last_sweep = 0;
}

/* inline, answered from any connection: [rid] -> is rid one of this
 * worker's dealers? */
static int bi_conn_check(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    if (args->kind != RPC_LIST || args->list.len != 1 || args->list.items[0].kind != RPC_BYTES)
        return rpc_request_fail(req, "bad arguments");
    const struct rpc_value *r = &args->list.items[0];
    *result = rpc_bool(rpc_own_dealer_rid((const unsigned char *)r->str.ptr, r->str.len));
    return 0;
}

void rpc_conn_init(int hold_ms, size_t max_frame_bytes, void (*replay)(struct conn *c, zmq_msg_t *frames, int n))
{
    settings.hold_ms = hold_ms;
    settings.max_frame_bytes = max_frame_bytes;
    settings.replay = replay;
    rpc_register_ex("__conn_check", bi_conn_check, NULL, RPC_FN_INLINE);
}
