/* The agent's training statistics: env steps, episodes and the window of
 * their returns, updates, policy lag, losses; the progress line, the stop
 * test and the JSON summary. Thread-safe (one lock). */
#ifndef TRIB_AGENT_RUN_STATS_H
#define TRIB_AGENT_RUN_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "rl/config.h"
#include "rl/messages.h"
#include "rl/rl_math.h"

struct run_stats;

#define RUN_STATS_LAG_BINS 256   /* lag histogram: 0..254, and >= 255 */

/* target: the solved threshold (NAN: never). */
struct run_stats *run_stats_new(const struct rl_config *cfg, double target);
void run_stats_free(struct run_stats *s);

/* What the training mode's figures are (its table's entry, state.h's
 * struct agent_mode.stats, handed over by agent_new through
 * run_stats_set_mode). All false until then: no mode's figures. */
struct run_stats_mode {
    /* Updates lag behind the rollouts they use (async): their policy lag
     * is recorded (run_stats_update), shown on the progress line ("lag"),
     * and the summary says it (lag_mean, lag_p95, lag_max, lag_hist), with
     * --max-policy-lag's drops and whether an estimator corrects for it
     * ("vtrace": the estimator's table, rl/estimators.h). Else every
     * sample of an update comes from the version its rollout began at: no
     * lag is recorded. */
    bool policy_lag;
    /* With the preset's running reward: it moves on every report that
     * finished an episode (async: each observer's episodes); else once an
     * iteration (run_stats_running, sync). */
    bool running_per_report;
};

/* The mode's figures (borrowed values, copied). Before any report. */
void run_stats_set_mode(struct run_stats *s, const struct run_stats_mode *mode);

/* The env the run trains (borrowed; it outlives s): its id names the env in
 * the summary (the plug-in's path, when it is one, follows as env_plugin),
 * and its named info gives the intervals' info means. Before any report. */
void run_stats_set_env(struct run_stats *s, const struct env_spec *spec);

/* A rollout's or episode's report (episodes, steps). */
void run_stats_report(struct run_stats *s, const struct rl_report *r);
/* One iteration of the sync REINFORCE example: running reward update. */
void run_stats_running(struct run_stats *s, double min_reward);
/* An optimizer update with this lag (recorded with the mode's policy_lag,
 * else ignored) and these loss statistics. */
void run_stats_update(struct run_stats *s, int64_t lag, const struct rl_update_stats *st);

/* An async update dropped by --max-policy-lag, its samples counted. */
void run_stats_dropped(struct run_stats *s, int64_t samples);

/* Adds agent time spent computing (forward, backward, optimizer step). */
void run_stats_busy(struct run_stats *s, double seconds);
/* The policy's act calls and the merged forwards that answered them (this
 * session's), for the summary. */
void run_stats_acting(struct run_stats *s, int64_t calls, int64_t forwards);

/* Solved by the configured criterion. */
bool run_stats_solved(struct run_stats *s);
/* Out of --max-steps / --max-updates (counted over the whole run, resumed
 * sessions included) or --max-seconds (counted from this process's start:
 * a resumed run gets --max-seconds more). */
bool run_stats_out_of_budget(struct run_stats *s);
/* The same, naming the budget that is spent in buf ("--max-steps 12000 (at
 * 12288 env steps)") and returning buf, or NULL when none is. */
const char *run_stats_budget_spent(struct run_stats *s, char *buf, size_t cap);
/* When --max-seconds runs out, on trib_now_s's clock (INFINITY without
 * one): what a long wait inside an iteration (an evaluation) polls. */
double run_stats_deadline(struct run_stats *s);
int64_t run_stats_env_steps(struct run_stats *s);
int64_t run_stats_updates(struct run_stats *s);
/* The largest env-step, episode, update or lag count a checkpoint may hold
 * (2^53: exact in a double; at a billion steps a second, 285 years), so
 * what a resumed run adds to them cannot overflow an int64. */
#define RUN_STATS_MAX_COUNT (INT64_C(1) << 53)

/* Checkpoints: the counters (env steps, episodes, updates, running reward,
 * the window of returns and lengths, lag figures) as bytes, and back: -1
 * with rl_last_error() ("counters: <what> <value> outside <range>", ...)
 * on a size mismatch or any number out of range (counts in
 * 0..RUN_STATS_MAX_COUNT, window count and head inside the window,
 * non-finite returns), before anything of s changes. */
void run_stats_save(struct run_stats *s, unsigned char **out, size_t *len);
int run_stats_load(struct run_stats *s, const unsigned char *buf, size_t len);
/* What run_stats_save writes (a checkpoint's counters section), field for
 * field: the one layout the agent, the fuzz seeds and the tests that craft
 * checkpoints share. */
struct run_stats_saved {
    uint64_t magic;                 /* RUN_STATS_SAVED_MAGIC */
    int64_t env_steps, episodes, updates;
    struct rl_window win, len_win;
    double running;
    bool have_running;
    double lag_sum;
    int64_t lag_n, lag_max;
    int64_t lag_hist[RUN_STATS_LAG_BINS];
    int64_t obs_steps[RL_MAX_OBSERVERS];
    double wall_s;
};
#define RUN_STATS_SAVED_MAGIC 0x5452494253544132ull   /* "TRIBSTA2" */

/* One finished episode, as CleanRL logs it (charts/episodic_return and
 * charts/episodic_length): its return and length, and the run's env-step
 * count when the report that finished it arrived (CleanRL's global_step of
 * its last step; here up to one rollout later). */
struct run_episode {
    int64_t env_steps;
    double ret;
    int length;
};
/* The most finished episodes one interval keeps for the per-episode log:
 * more (a million in one --log-every interval) are counted, not kept. */
#define RUN_STATS_EPISODES_MAX (1 << 20)

/* One logging interval's figures (the progress line and a metrics row). */
struct run_interval {
    double wall_s;                  /* since the start */
    int64_t env_steps, episodes, updates, version;
    double sps, updates_per_s;      /* over the interval */
    double return_mean, return_min, return_max, length_mean;   /* last 100 episodes; NaN before one */
    double running_reward;          /* NaN unless the preset uses it */
    /* means over the interval's updates; NaN without one, or where the
     * algorithm has no such figure */
    double policy_loss, value_loss, entropy, approx_kl, clipfrac;
    double explained_var;           /* mean over the interval's rollouts (PPO/A2C) */
    double lag_mean, lag_max;       /* over the interval's updates (async only); NaN without one */
    bool first;                     /* the run's first interval (the progress line's legend goes first) */
    double observer_sps[RL_MAX_OBSERVERS];
    int n_observers;
    /* the env's named info (run_stats_set_env): the mean per step over the
     * episodes the interval's reports finished; NaN without one */
    int n_info;
    double info_mean[ENV_INFO_MAX];
    /* the evaluation (--eval-every) that ended in the interval: its mean
     * return and length; NaN without one */
    double eval_return, eval_length;
    /* the episodes finished since the last interval, oldest first (a report
     * carries its last RL_REPORT_EPISODES): borrowed from the run_stats,
     * valid until its next run_stats_interval or run_stats_free;
     * unlogged: those past RUN_STATS_EPISODES_MAX, not kept */
    const struct run_episode *finished;
    int64_t n_finished, unlogged;
};

/* An evaluation's mean return and length, for the next interval (the
 * latest wins; a forced interval is then never empty). */
void run_stats_eval(struct run_stats *s, double mean_return, double mean_length);

/* Env steps reported by observer k (for per-observer steps/s). */
void run_stats_observer_steps(struct run_stats *s, int k, int64_t steps);

/* If --log-every seconds passed since the last interval (or force), fills
 * *out, starts the next interval and returns true. */
bool run_stats_interval(struct run_stats *s, int64_t version, bool force, struct run_interval *out);

/* The width a progress line to f must fit (the column count less one):
 * the terminal's where f is one (TIOCGWINSZ), else $COLUMNS (as tqdm);
 * 0 when neither says (a file or a pipe without $COLUMNS, which a shell
 * does not export: the whole line). */
int run_stats_line_width(FILE *f);
/* Prints the progress line of an interval (unless --quiet), fit to
 * run_stats_line_width: the least telling figures (the loss statistics,
 * then upd/s, ep, len, lag, eval, the time, sps) are left out until it
 * fits, env steps and the return never; the metrics files keep them all. */
void run_stats_print(const struct run_stats *s, FILE *f, const struct run_interval *iv);
/* How a run that stopped_by ("solved", "budget", "SIGINT", "SIGTERM",
 * "failure", "checkpoint-failures") ended: "solved"; "completed" (its
 * budget spent and no target: a success too); "target-missed" (its budget
 * spent short of its target); "interrupted"; "failed" (a failure, or a
 * budget spent before any env step: --max-seconds while waiting for the
 * observers, or after run_stats_failed). *success: solved or completed
 * (exit status 0). */
const char *run_stats_outcome(struct run_stats *s, bool solved, const char *stopped_by, bool *success);
/* The run's training failed, whatever stopped it: its outcome is "failed"
 * (solved or not). */
void run_stats_failed(struct run_stats *s);
/* The one-line JSON summary: its outcome (run_stats_outcome), counts, rates, what "solved" judged (target,
 * solved_when), with the mode's policy_lag the policy lag mean/p95/max and
 * its histogram (lag_hist[i]: updates with lag i; the last bin collects
 * lags >= RUN_STATS_LAG_BINS - 1), agent_busy_frac. */
void run_stats_summary(struct run_stats *s, FILE *f, bool solved, int observers_lost, int observers_rejoined,
                       const char *stopped_by);

#endif
