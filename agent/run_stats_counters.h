/* Private to agent/: struct run_stats, owned by run_stats_counters.c (the
 * counters and windows, checkpoint save/load, intervals) and read by
 * run_stats.c (the progress line and the JSON summary). */
#ifndef TRIB_AGENT_RUN_STATS_COUNTERS_H
#define TRIB_AGENT_RUN_STATS_COUNTERS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/run_stats.h"
#include "rl/rl.h"
#include "rl/rl_math.h"

/* Finished episodes for the per-episode log: n of cap. */
struct episode_buf {
    struct run_episode *v;
    int64_t n, cap;
};

struct run_stats {
    pthread_mutex_t mu;
    struct rl_config cfg;
    struct run_stats_mode mode;     /* run_stats_set_mode: the training mode's figures */
    bool corrected;                 /* the run's estimator corrects for policy lag (its correct) */
    double target;
    double t0, t_log;
    double t_start;                 /* this process's start: --max-seconds counts from here */
    int64_t env_steps, episodes, updates;
    int64_t log_steps, log_updates;
    struct rl_window win, len_win;
    double log_lag_sum;
    int64_t log_lag_n, log_lag_max;
    int64_t obs_steps[RL_MAX_OBSERVERS], obs_log_steps[RL_MAX_OBSERVERS];
    struct rl_update_stats iv_sum;  /* this interval's updates: sums of their figures */
    int64_t iv_n;
    double iv_ev_sum;               /* this interval's rollouts: sum of explained variances */
    int64_t iv_ev_n;
    int64_t intervals;              /* run_stats_interval calls that returned one */
    double running;                 /* PyTorch example's running reward */
    bool have_running;
    double lag_sum;
    int64_t lag_n, lag_max;
    int64_t lag_hist[RUN_STATS_LAG_BINS];   /* last bin: >= RUN_STATS_LAG_BINS - 1 */
    double busy_s;                          /* agent time in forward/backward/optimizer */
    int64_t act_calls, act_forwards;        /* the policy's act calls, and the forwards they were merged into */
    int64_t dropped_updates, dropped_samples;   /* --max-policy-lag */
    const struct env_spec *spec;                /* run_stats_set_env; NULL: cfg.env names it */
    double iv_info_sum[ENV_INFO_MAX];           /* this interval's reports: info sums and steps */
    int64_t iv_info_steps;
    double eval_return, eval_length;           /* run_stats_eval's, for the next interval; NaN: none */
    /* the per-episode log: reports fill ep[fill]; an interval hands it out
     * and fills the other (ep_unlogged: past RUN_STATS_EPISODES_MAX) */
    struct episode_buf ep[2];
    int ep_fill;
    int64_t ep_unlogged;
    int64_t row_steps, row_updates;             /* env_steps and updates at the last row (-1: none yet) */
    double full_dt;                             /* the last full interval: its length, steps and updates */
    int64_t full_steps, full_updates, full_obs[RL_MAX_OBSERVERS];
    bool failed;                                /* run_stats_failed */
};

#endif
