/* The agent's training statistics: env steps, episodes and the window of
 * their returns, updates, policy lag, losses; the progress line, the stop
 * test and the JSON summary. Thread-safe (one lock). */
#ifndef TRIB_AGENT_STATS_H
#define TRIB_AGENT_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "rl/config.h"
#include "rl/messages.h"

struct run_stats;

#define RUN_STATS_LAG_BINS 256   /* lag histogram: 0..254, and >= 255 */

/* target: the solved threshold (NAN: never). */
struct run_stats *run_stats_new(const struct rl_config *cfg, double target);
void run_stats_free(struct run_stats *s);

/* A rollout's or episode's report (episodes, steps). */
void run_stats_report(struct run_stats *s, const struct rl_report *r);
/* One iteration of the sync REINFORCE example: running reward update. */
void run_stats_running(struct run_stats *s, double min_reward);
/* An optimizer update with this lag and these loss statistics. */
void run_stats_update(struct run_stats *s, int64_t lag, const struct rl_update_stats *st);

/* Adds agent time spent computing (forward, backward, optimizer step). */
void run_stats_busy(struct run_stats *s, double seconds);

/* Solved by the configured criterion. */
bool run_stats_solved(struct run_stats *s);
/* Out of --max-steps / --max-seconds. */
bool run_stats_out_of_budget(struct run_stats *s);
int64_t run_stats_env_steps(struct run_stats *s);
/* Prints a progress line to f if --log-every seconds passed (or force). */
void run_stats_progress(struct run_stats *s, FILE *f, int64_t version, bool force);
/* The one-line JSON summary: counts, rates, lag mean/p95/max and its
 * histogram (lag_hist[i]: updates with lag i; the last bin collects lags
 * >= RUN_STATS_LAG_BINS - 1), agent_busy_frac. */
void run_stats_summary(struct run_stats *s, FILE *f, bool solved, int observers_lost, const char *stopped_by);

#endif
