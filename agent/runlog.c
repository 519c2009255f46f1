/* metrics.csv / metrics.jsonl / config.json / events.out.tfevents.* of a run. */
#include "agent/runlog.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "rl/rl.h"
#include "runfiles/metrics.h"
#include "runfiles/runfiles.h"
#include "runfiles/tfevents.h"

const char *const runlog_columns[] = {
    "env_steps", "wall_s", "sps", "episodes", "return_mean", "return_min", "return_max", "length_mean",
    "running_reward", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance", "lr",
    "version", "lag_mean", "lag_max", "updates", "updates_per_s", "eval_return", "eval_length", NULL,
};
#define N_FIXED 23

/* The TensorBoard tag of each column, grouped as CleanRL groups them
 * (charts/, losses/); the per-observer columns go under observers/. The
 * means over the last 100 episodes are ..._mean100 (min100, max100):
 * CleanRL's charts/episodic_return and charts/episodic_length are one point
 * per finished episode (RUNLOG_TAG_EPISODE_*). */
const char *const runlog_tags[] = {
    NULL, "charts/wall_s", "charts/SPS", "charts/episodes", "charts/episodic_return_mean100",
    "charts/episodic_return_min100", "charts/episodic_return_max100", "charts/episodic_length_mean100",
    "charts/running_reward", "losses/policy_loss",
    "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac", "losses/explained_variance",
    "charts/learning_rate", "charts/policy_version", "charts/policy_lag_mean", "charts/policy_lag_max",
    "charts/updates", "charts/updates_per_s", "charts/eval_return", "charts/eval_length",
};

struct runlog {
    struct metrics_log *m;
    struct tfevents_writer *tf;
    int ncols;
    int n_info;                     /* the last n_info columns: the env's info means */
    char **names;
    char **tags;
    double *row;
};

struct runlog *runlog_open(const char *dir, const struct rl_config *cfg, const struct env_spec *spec, bool resume)
{
    struct runlog *r = trib_xcalloc(1, sizeof *r);
    r->n_info = spec ? spec->info_count : 0;
    r->ncols = N_FIXED + cfg->observers + r->n_info;
    r->names = trib_xcalloc((size_t)r->ncols, sizeof *r->names);
    r->tags = trib_xcalloc((size_t)r->ncols, sizeof *r->tags);
    r->row = trib_xcalloc((size_t)r->ncols, sizeof *r->row);
    for (int i = 0; i < N_FIXED; i++) {
        r->names[i] = strdup(runlog_columns[i]);
        r->tags[i] = runlog_tags[i] ? strdup(runlog_tags[i]) : NULL;
    }
    for (int k = 0; k < cfg->observers; k++) {
        char n[32], t[48];
        snprintf(n, sizeof n, "sps_observer%d", k + 1);
        snprintf(t, sizeof t, "observers/sps_observer%d", k + 1);
        r->names[N_FIXED + k] = strdup(n);
        r->tags[N_FIXED + k] = strdup(t);
    }
    for (int k = 0; k < r->n_info; k++) {
        char n[96], t[96];
        snprintf(n, sizeof n, "info_%s", spec->info_names[k]);
        snprintf(t, sizeof t, "env/%s", spec->info_names[k]);
        r->names[N_FIXED + cfg->observers + k] = strdup(n);
        r->tags[N_FIXED + cfg->observers + k] = strdup(t);
    }
    cJSON *cj = rl_config_to_json(cfg);
    int rc = metrics_write_config(dir, cj);
    cJSON_Delete(cj);
    if (rc == 0) r->m = metrics_open(dir, (const char *const *)r->names, r->ncols, resume);
    if (r->m) r->tf = tfevents_open(dir);
    if (!r->tf) {
        rl_set_error("%s", runfiles_last_error());
        runlog_close(r);
        return NULL;
    }
    return r;
}

int runlog_write(struct runlog *r, const struct run_interval *iv, double lr)
{
    const double fixed[N_FIXED] = {
        (double)iv->env_steps, iv->wall_s, iv->sps, (double)iv->episodes, iv->return_mean, iv->return_min,
        iv->return_max, iv->length_mean, iv->running_reward, iv->policy_loss, iv->value_loss, iv->entropy,
        iv->approx_kl, iv->clipfrac, iv->explained_var, lr, (double)iv->version, iv->lag_mean, iv->lag_max, (double)iv->updates,
        iv->updates_per_s, iv->eval_return, iv->eval_length,
    };
    memcpy(r->row, fixed, sizeof fixed);
    int n_obs = r->ncols - N_FIXED - r->n_info;
    for (int k = 0; k < n_obs; k++) r->row[N_FIXED + k] = k < iv->n_observers ? iv->observer_sps[k] : NAN;
    for (int k = 0; k < r->n_info; k++) r->row[N_FIXED + n_obs + k] = k < iv->n_info ? iv->info_mean[k] : NAN;
    if (metrics_write(r->m, r->row) != 0) return rl_set_error("%s", runfiles_last_error());
    /* CleanRL's: a point per finished episode, at its env step */
    for (int64_t e = 0; e < iv->n_finished; e++) {
        const struct run_episode *ep = &iv->finished[e];
        if (tfevents_add_scalar(r->tf, RUNLOG_TAG_EPISODE_RETURN, (float)ep->ret, ep->env_steps) != 0 ||
            tfevents_add_scalar(r->tf, RUNLOG_TAG_EPISODE_LENGTH, (float)ep->length, ep->env_steps) != 0)
            return rl_set_error("%s", runfiles_last_error());
    }
    if (iv->unlogged > 0)
        fprintf(stderr, "agent: %lld episodes finished in one interval past the first %d are not in the "
                        "per-episode log (%s); the interval's row counts them\n",
                (long long)iv->unlogged, RUN_STATS_EPISODES_MAX, RUNLOG_TAG_EPISODE_RETURN);
    for (int i = 0; i < r->ncols; i++) {
        if (i == 0 || isnan(r->row[i])) continue;   /* env_steps is the step */
        if (tfevents_add_scalar(r->tf, r->tags[i], (float)r->row[i], iv->env_steps) != 0)
            return rl_set_error("%s", runfiles_last_error());
    }
    return 0;
}

void runlog_close(struct runlog *r)
{
    if (!r) return;
    metrics_close(r->m);
    tfevents_close(r->tf);
    for (int i = 0; i < r->ncols; i++) {
        free(r->names[i]);
        if (r->tags) free(r->tags[i]);
    }
    free(r->names);
    free(r->tags);
    free(r->row);
    free(r);
}
