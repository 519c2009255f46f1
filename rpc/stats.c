/* The agent's counters (rpc_get_stats) and the rate-limited log of dropped
 * messages. Owned here: the counters (atomics: any thread adds, through
 * rpc_stat_add) and the log's
 * window (I/O thread only). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rpc/base.h"

static atomic_int_fast64_t stat[RPC_STAT_N];

void rpc_stat_add(enum rpc_stat s, int64_t n) { atomic_fetch_add_explicit(&stat[s], n, memory_order_relaxed); }

static struct {
    int64_t window;             /* start of the current second */
    int lines, suppressed;
} drop_log;

/* At most 10 lines a second; the next line printed says how many were not. */
void rpc_drop_log(const char *fmt, ...)
{
    int64_t now = trib_now_ms();
    if (now - drop_log.window >= 1000) {
        drop_log.window = now;
        drop_log.lines = 0;
    }
    if (drop_log.lines >= 10) {
        drop_log.suppressed++;
        return;
    }
    drop_log.lines++;
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (drop_log.suppressed) fprintf(stderr, "%s [%d similar lines suppressed]\n", line, drop_log.suppressed);
    else fprintf(stderr, "%s\n", line);
    drop_log.suppressed = 0;
}

#define DROP_LINES_MS 1000

void rpc_drop_lines_write(struct rpc_drop_lines *l, const char *self, const char *who, uint32_t bad)
{
    uint32_t n = l->unlogged;
    const char *why = l->unlogged_why;
    if (n == 1)
        rpc_drop_log("rpc: %s: dropped a message from %s: %s (%u bad from it)", self, who, why, bad);
    else if (!l->logged_at)
        rpc_drop_log("rpc: %s: dropped %u messages from %s: %s (%u bad from it)", self, n, who, why, bad);
    else
        rpc_drop_log("rpc: %s: dropped %u messages from %s in the last %.1f s, the last: %s (%u bad from it)", self,
                     n, who, (trib_now_ms() - l->logged_at) / 1000.0, why, bad);
    l->logged_at = trib_now_ms();
    l->unlogged = 0;
}

bool rpc_drop_lines_add(struct rpc_drop_lines *l, uint32_t n, const char *why)
{
    l->unlogged += n;
    snprintf(l->unlogged_why, sizeof l->unlogged_why, "%s", why);
    return !l->logged_at || trib_now_ms() - l->logged_at >= DROP_LINES_MS;
}

bool rpc_drop_lines_due(const struct rpc_drop_lines *l, int64_t now)
{
    return l->unlogged && now - l->logged_at >= DROP_LINES_MS;
}

static uint64_t get(enum rpc_stat s) { return (uint64_t)atomic_load_explicit(&stat[s], memory_order_relaxed); }

void rpc_get_stats(struct rpc_stats *out)
{
    memset(out, 0, sizeof *out);
    out->dropped_spoofed = get(RPC_STAT_SPOOFED);
    out->dropped_unverified = get(RPC_STAT_UNVERIFIED);
    out->dropped_malformed = get(RPC_STAT_MALFORMED);
    out->dropped_cut = get(RPC_STAT_CUT_DROPPED);
    out->dropped_gone = get(RPC_STAT_GONE);
    out->connections_cut = get(RPC_STAT_CUTS);
    out->refused_busy = get(RPC_STAT_BUSY);
    out->forks_expired = get(RPC_STAT_FORKS_EXPIRED);
    out->refused_auth = get(RPC_STAT_REFUSED_AUTH);
    out->handshakes_failed = get(RPC_STAT_HANDSHAKES_FAILED);
    out->held_messages = (int)get(RPC_STAT_HELD);
    out->msgs_sent = get(RPC_STAT_MSGS_SENT);
    out->shm_msgs_sent = get(RPC_STAT_SHM_MSGS_SENT);
    out->shm_msgs_recv = get(RPC_STAT_SHM_MSGS_RECV);
    out->shm_bytes_sent = get(RPC_STAT_SHM_BYTES_SENT);
    out->shm_bytes_recv = get(RPC_STAT_SHM_BYTES_RECV);
    out->msgs_recv = get(RPC_STAT_MSGS_RECV);
    out->bytes_sent = get(RPC_STAT_BYTES_SENT);
    out->bytes_recv = get(RPC_STAT_BYTES_RECV);
    out->io_wakeups = get(RPC_STAT_IO_WAKEUPS);
}

void rpc_counters_reset(void)
{
    for (int i = 0; i < RPC_STAT_N; i++) atomic_store(&stat[i], 0);
    drop_log.window = 0;
    drop_log.lines = drop_log.suppressed = 0;
}

enum rpc_stat rpc_drop_stat(enum rpc_drop kind)
{
    static const enum rpc_stat stat[] = { [RPC_DROP_SPOOFED] = RPC_STAT_SPOOFED,
                                          [RPC_DROP_UNVERIFIED] = RPC_STAT_UNVERIFIED,
                                          [RPC_DROP_MALFORMED] = RPC_STAT_MALFORMED,
                                          [RPC_DROP_BUSY] = RPC_STAT_BUSY,
                                          [RPC_DROP_GONE] = RPC_STAT_GONE };
    return (unsigned)kind < sizeof stat / sizeof *stat ? stat[kind] : RPC_STAT_MALFORMED;
}
