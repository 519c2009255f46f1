/* The agent's counters (rpc_get_stats) and the rate-limited log of dropped
 * messages. Owned here: rpc_counters (atomics, any thread) and the log's
 * window (I/O thread only). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rpc/base.h"

struct rpc_counters rpc_counters;

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

void rpc_get_stats(struct rpc_stats *out)
{
    memset(out, 0, sizeof *out);
    out->dropped_spoofed = atomic_load(&rpc_counters.spoofed);
    out->dropped_unverified = atomic_load(&rpc_counters.unverified);
    out->dropped_malformed = atomic_load(&rpc_counters.malformed);
    out->dropped_cut = atomic_load(&rpc_counters.cut_dropped);
    out->connections_cut = atomic_load(&rpc_counters.cuts);
    out->refused_busy = atomic_load(&rpc_counters.busy);
    out->forks_expired = atomic_load(&rpc_counters.forks_expired);
    out->refused_auth = atomic_load(&rpc_counters.refused_auth);
    out->handshakes_failed = atomic_load(&rpc_counters.handshakes_failed);
    out->held_messages = atomic_load(&rpc_counters.held);
    out->msgs_sent = atomic_load_explicit(&rpc_counters.msgs_sent, memory_order_relaxed);
    out->msgs_recv = atomic_load_explicit(&rpc_counters.msgs_recv, memory_order_relaxed);
    out->bytes_sent = atomic_load_explicit(&rpc_counters.bytes_sent, memory_order_relaxed);
    out->bytes_recv = atomic_load_explicit(&rpc_counters.bytes_recv, memory_order_relaxed);
}

void rpc_counters_reset(void)
{
    atomic_uint_fast64_t *all[] = { &rpc_counters.spoofed, &rpc_counters.unverified, &rpc_counters.malformed,
                                    &rpc_counters.cut_dropped, &rpc_counters.cuts, &rpc_counters.busy,
                                    &rpc_counters.forks_expired, &rpc_counters.refused_auth,
                                    &rpc_counters.handshakes_failed, &rpc_counters.msgs_sent, &rpc_counters.msgs_recv,
                                    &rpc_counters.bytes_sent, &rpc_counters.bytes_recv };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) atomic_store(all[i], 0);
    atomic_store(&rpc_counters.held, 0);
    drop_log.window = 0;
    drop_log.lines = drop_log.suppressed = 0;
}
