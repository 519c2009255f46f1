/* What a run leaves in --logdir: metrics.csv and metrics.jsonl (one row per
 * logging interval), config.json (the effective configuration) and a
 * TensorBoard event file with the same figures as scalars (step = env
 * steps) and a point per finished episode. Used by the agent's main thread only. */
#ifndef TRIB_AGENT_RUNLOG_H
#define TRIB_AGENT_RUNLOG_H

#include <stdbool.h>

#include "agent/run_stats.h"
#include "rl/config.h"

struct runlog;

/* Opens the files in dir (created if missing); resume appends to an
 * existing metrics log (its columns must match). NULL with rl_last_error(). */
struct runlog *runlog_open(const char *dir, const struct rl_config *cfg, const struct env_spec *spec, bool resume);

/* Writes one interval's row (and its scalars). 0, or -1 with rl_last_error()
 * (e.g. a full disk; the run goes on without its log after saying so). */
int runlog_write(struct runlog *r, const struct run_interval *iv, double lr);

/* Accepts NULL. */
void runlog_close(struct runlog *r);

/* The documented column names, NULL-terminated (per-observer columns
 * sps_observer1.. follow them, then one info_<name> column per named info
 * of the env, tagged env/<name>). */
extern const char *const runlog_columns[];
/* Their TensorBoard tags (charts/..., losses/...; NULL for env_steps, the
 * step), in the same order. */
extern const char *const runlog_tags[];
/* CleanRL's per-episode tags: one point per finished episode (its return,
 * its length) at its env step (struct run_episode), written with the
 * interval's row. */
#define RUNLOG_TAG_EPISODE_RETURN "charts/episodic_return"
#define RUNLOG_TAG_EPISODE_LENGTH "charts/episodic_length"

#endif
