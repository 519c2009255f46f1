/* The directory: this worker's own entry, the workers it knows and the
 * dealer socket it calls each one through, and whether the agent is up.
 * Transport layer (rpc/README.md): it opens and closes dealers through the
 * link operations rpc_agent.c installs, and reports a peer it finds lost (too
 * many bad messages) through the callback membership installs; it calls
 * nothing above it.
 *
 * Owned here (lock rules): the peer table. Entries are created, revived
 * and closed on the I/O thread (or by rpc_init before it starts) and freed
 * by rpc_peers_fini after it stopped. Names, endpoints and `alive` are
 * written under dir.lock (write) and may be read by any thread under it
 * (read); the other fields of struct peer are the I/O thread's. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "common/check.h"
#include "rpc/transport.h"

static struct {
    pthread_rwlock_t lock;
    struct peer *p[MAX_WORKERS];
    bool changed;                           /* I/O thread: a dealer was opened or closed */
    const struct rpc_link_ops *links;
    int remember_ms;                        /* a closed dealer's routing id is still ours this long */
    struct rpc_worker_info self;            /* written before the I/O thread starts */
    atomic_bool up;
    void (*lost)(int id, const char *why);  /* membership's: a peer found lost here */
} dir = { .lock = PTHREAD_RWLOCK_INITIALIZER };

void rpc_peers_init(const struct rpc_link_ops *links, const char *name, int remember_ms,
                    void (*lost)(int id, const char *why))
{
    dir.links = links;
    dir.remember_ms = remember_ms;
    dir.lost = lost;
    dir.changed = true;
    memset(&dir.self, 0, sizeof dir.self);
    snprintf(dir.self.name, sizeof dir.self.name, "%s", name);
}

void rpc_peers_fini(void)
{
    atomic_store(&dir.up, false);
    pthread_rwlock_wrlock(&dir.lock);
    for (int i = 0; i < MAX_WORKERS; i++) {
        if (!dir.p[i]) continue;
        if (dir.p[i]->dealer) dir.links->close(dir.p[i]->dealer);
        free(dir.p[i]);
        dir.p[i] = NULL;
    }
    pthread_rwlock_unlock(&dir.lock);
}

void rpc_peers_set_up(bool up) { atomic_store(&dir.up, up); }
bool rpc_is_up(void) { return atomic_load(&dir.up); }

const char *rpc_self_name(void) { return dir.self.name; }
const struct rpc_worker_info *rpc_self(void) { return &dir.self; }

void rpc_peers_set_self(int id, const char *endpoint, const char *via)
{
    if (id >= 0) dir.self.id = id;
    if (endpoint) snprintf(dir.self.endpoint, sizeof dir.self.endpoint, "%s", endpoint);
    if (via) snprintf(dir.self.via, sizeof dir.self.via, "%s", via);
}

struct peer *rpc_peer(int id) { return id >= 0 && id < MAX_WORKERS ? dir.p[id] : NULL; }

bool rpc_peers_changed(bool clear)
{
    bool c = dir.changed;
    if (clear) dir.changed = false;
    return c;
}

void rpc_dir_rdlock(void) { pthread_rwlock_rdlock(&dir.lock); }
void rpc_dir_unlock(void) { pthread_rwlock_unlock(&dir.lock); }

/* ---- lookups ---------------------------------------------------------------- */

int rpc_find_peer(const char *name)
{
    for (int i = 0; i < MAX_WORKERS; i++)
        if (dir.p[i] && dir.p[i]->alive && strcmp(dir.p[i]->name, name) == 0) return i;
    return -1;
}

/* The id this thread found last (a caller usually calls one worker many
 * times): checked against the table before it is used, so it is only a
 * hint and never stale. */
static _Thread_local int last_found = -1;

int rpc_peer_lookup(const char *name)
{
    pthread_rwlock_rdlock(&dir.lock);
    int id = -1;
    if (rpc_is_up()) {
        int h = last_found;
        struct peer *p = h >= 0 ? dir.p[h] : NULL;
        id = p && p->alive && strcmp(p->name, name) == 0 ? h : rpc_find_peer(name);
    }
    pthread_rwlock_unlock(&dir.lock);
    if (id >= 0) last_found = id;
    return id;
}

bool rpc_worker_alive(int id)
{
    if (id < 0 || id >= MAX_WORKERS) return false;
    pthread_rwlock_rdlock(&dir.lock);
    bool ok = dir.p[id] && dir.p[id]->alive;
    pthread_rwlock_unlock(&dir.lock);
    return ok;
}

static void fill_info(const struct peer *p, struct rpc_worker_info *out)
{
    out->id = p->id;
    snprintf(out->name, sizeof out->name, "%s", p->name);
    snprintf(out->endpoint, sizeof out->endpoint, "%s", p->endpoint);
    snprintf(out->via, sizeof out->via, "%s", p->via);
}

int rpc_get_worker_info(const char *name, struct rpc_worker_info *out)
{
    pthread_rwlock_rdlock(&dir.lock);
    int id = rpc_is_up() ? rpc_find_peer(name) : -1;
    if (id >= 0) fill_info(dir.p[id], out);
    pthread_rwlock_unlock(&dir.lock);
    return id >= 0 ? 0 : rpc_set_error("rpc: unknown worker '%s'", name);
}

int rpc_get_worker_info_by_id(int id, struct rpc_worker_info *out)
{
    int rc = -1;
    pthread_rwlock_rdlock(&dir.lock);
    if (rpc_is_up() && id >= 0 && id < MAX_WORKERS && dir.p[id] && dir.p[id]->alive) {
        fill_info(dir.p[id], out);
        rc = 0;
    }
    pthread_rwlock_unlock(&dir.lock);
    return rc == 0 ? 0 : rpc_set_error("rpc: unknown worker id %d", id);
}

int rpc_get_workers(struct rpc_worker_info *out, int cap)
{
    int n = 0;
    pthread_rwlock_rdlock(&dir.lock);
    for (int i = 0; i < MAX_WORKERS && n < cap; i++)
        if (dir.p[i] && dir.p[i]->alive) fill_info(dir.p[i], &out[n++]);
    pthread_rwlock_unlock(&dir.lock);
    return n;
}

void rpc_peer_name(int id, char *buf, size_t cap)
{
    pthread_rwlock_rdlock(&dir.lock);
    if (id >= 0 && id < MAX_WORKERS && dir.p[id]) snprintf(buf, cap, "%s", dir.p[id]->name);
    else snprintf(buf, cap, "worker%d", id);
    pthread_rwlock_unlock(&dir.lock);
}

bool rpc_own_dealer_rid(const unsigned char *rid, size_t len)
{
    if (len != RPC_RID_LEN) return false;
    int64_t now = trib_now_ms();
    for (int i = 0; i < MAX_WORKERS; i++) {
        struct peer *p = dir.p[i];
        if (!p) continue;
        if (p->dealer && memcmp(p->rid, rid, RPC_RID_LEN) == 0) return true;
        for (int k = 0; k < RPC_OLD_RIDS; k++)
            if (p->old_at[k] && now - p->old_at[k] <= dir.remember_ms && memcmp(p->old_rid[k], rid, RPC_RID_LEN) == 0)
                return true;
    }
    return false;
}

/* Closes p's dealer, remembering its routing id (rpc_own_dealer_rid). */
static void close_dealer(struct peer *p)
{
    int k = 0;
    for (int i = 1; i < RPC_OLD_RIDS; i++)
        if (p->old_at[i] < p->old_at[k]) k = i;
    memcpy(p->old_rid[k], p->rid, RPC_RID_LEN);
    p->old_at[k] = trib_now_ms();
    dir.links->close(p->dealer);
    p->dealer = NULL;
}

void rpc_new_rid(unsigned char rid[RPC_RID_LEN])
{
    size_t got = 0;
    while (got < RPC_RID_LEN) {
        ssize_t r = getrandom(rid + got, RPC_RID_LEN - got, 0);
        CHECK(r > 0);
        got += (size_t)r;
    }
    rid[0] |= 0x80;                 /* libzmq reserves ids starting with 0 */
}

/* ---- the I/O thread's changes ---------------------------------------------- */

void rpc_peer_touch(int id)
{
    struct peer *p = rpc_peer(id);
    if (p && p->dealer) p->last_seen = trib_now_ms();
}

void rpc_peer_grace(int id, int ms)
{
    struct peer *p = rpc_peer(id);
    if (p && p->dealer) p->last_seen = trib_now_ms() + ms;
}

/* A worker's id outlives its processes (a restart keeps rank and name and
 * brings a new endpoint and new dealers), and each worker learns of a new
 * process through rank 0 at its own pace. Issue 33 F11 was that gap: a
 * restarted R1 talked to X while X's entry was still the dead R0's, so X
 * asked R0's endpoint to vouch for R1 (no answer: R1's calls refused) or
 * found R0 dead ("not a live worker": R1's pings counted against it).
 * Closed here by: the incarnation count (a check knows which process it
 * asked, and that one's end is "gone", not "did not vouch"), closed
 * dealers' routing ids vouched for a while (what we sent through them is
 * still ours), rank 0's dealer kept; and, in membership.c, the newcomer's
 * directory sent only after every member took its __join.
 * rpc/README.md "Joining, restarts and verification" has the sequence. */
struct peer *rpc_add_peer(int id, const char *name, const char *endpoint, bool dynamic)
{
    CHECK(id >= 0 && id < MAX_WORKERS);
    struct peer *p = dir.p[id];
    /* The same process: a live entry at the same endpoint, or rank 0 (the
     * rendezvous is one process for the world's life; the directory may
     * write its endpoint otherwise than the master this worker was given,
     * and a new dealer would lose the replies on their way to this one). */
    if (p && p->alive && p->dealer && (strcmp(p->endpoint, endpoint) == 0 || id == 0)) {
        pthread_rwlock_wrlock(&dir.lock);
        snprintf(p->name, sizeof p->name, "%s", name);
        p->dynamic = dynamic;
        pthread_rwlock_unlock(&dir.lock);
        return p;
    }
    unsigned char rid[RPC_RID_LEN];
    rpc_new_rid(rid);
    char via[160];
    void *d = dir.links->open(id, endpoint, rid, via, sizeof via);
    if (!d) return NULL;
    if (!p) p = trib_xcalloc(1, sizeof *p);
    if (p->dealer && id != 0) {
        /* a worker restarted before we saw its old process die: what the
         * old one was asked will never be answered */
        char why[128];
        snprintf(why, sizeof why, "%s was replaced by a new process", p->name);
        rpc_fail_pending_to(id, why);
    }
    if (p->dealer) close_dealer(p);
    p->left_at = 0;
    pthread_rwlock_wrlock(&dir.lock);
    p->id = id;
    snprintf(p->name, sizeof p->name, "%s", name);
    snprintf(p->endpoint, sizeof p->endpoint, "%s", endpoint);
    snprintf(p->via, sizeof p->via, "%s", via);
    p->dealer = d;
    memcpy(p->rid, rid, sizeof rid);
    p->bad = 0;
    p->alive = true;
    p->dynamic = dynamic;
    p->incarnation++;
    p->last_seen = trib_now_ms();
    dir.p[id] = p;
    pthread_rwlock_unlock(&dir.lock);
    dir.changed = true;
    return p;
}

void rpc_close_peer(int id, const char *why)
{
    struct peer *p = rpc_peer(id);
    if (!p || !p->dealer) return;
    close_dealer(p);
    p->left_at = 0;
    dir.changed = true;
    rpc_fail_pending_to(id, why);
}

bool rpc_peer_gone(int id, const char *why, bool left)
{
    struct peer *p = rpc_peer(id);
    if (!p || !p->alive) return false;
    pthread_rwlock_wrlock(&dir.lock);
    p->alive = false;
    pthread_rwlock_unlock(&dir.lock);
    if (left && rpc_pending_to(id) > 0) p->left_at = trib_now_ms();
    else rpc_close_peer(id, why);
    return true;
}

void rpc_peer_bad(int id, const char *fmt, ...)
{
    rpc_stat_add(RPC_STAT_MALFORMED, 1);
    struct peer *p = rpc_peer(id);
    if (!p) return;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    p->bad++;
    rpc_drop_log("rpc: %s: dropped a message from %s (its endpoint %s): %s (%u bad from it)", dir.self.name, p->name,
                 p->endpoint, why, p->bad);
    if (p->bad > RPC_MAX_BAD && p->alive) {
        rpc_drop_log("rpc: %s: cutting off %s: more than %d bad messages", dir.self.name, p->name, RPC_MAX_BAD);
        rpc_stat_add(RPC_STAT_CUTS, 1);
        char reason[128];
        snprintf(reason, sizeof reason, "%s sent too many bad messages", p->name);
        if (dir.lost) dir.lost(id, reason);
    }
}

void rpc_peer_lost(int id, const char *why)
{
    if (dir.lost) dir.lost(id, why);
}
