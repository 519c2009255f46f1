/* Training statistics: the counters and windows, checkpoint save/load and
 * the intervals (the progress line and the JSON summary: run_stats.c). */
#include "agent/run_stats_counters.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/run_stats.h"
#include "common/check.h"
#include "common/clock.h"
#include "rl/algo.h"
#include "rl/estimators.h"
#include "rl/rl.h"
#include "rl/rl_math.h"

/* *x += d, saturating (counts from peers are range-checked, but a run may
 * resume from a checkpoint's counters: never a signed overflow) */
static void add_sat(int64_t *x, int64_t d)
{
    if (__builtin_add_overflow(*x, d, x)) *x = d > 0 ? INT64_MAX : INT64_MIN;
}

struct run_stats *run_stats_new(const struct rl_config *cfg, double target)
{
    struct run_stats *s = trib_xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->cfg = *cfg;
    s->target = target;
    const struct rl_algo *algo = rl_algo_get(cfg->algo);
    const struct rl_estimator *est = algo ? rl_estimator_for(cfg, algo->estimator) : NULL;
    s->corrected = est && est->correct;
    s->t0 = s->t_log = s->t_start = trib_now_s();
    rl_window_init(&s->win, 100);
    rl_window_init(&s->len_win, 100);
    s->eval_return = s->eval_length = NAN;
    s->row_steps = s->row_updates = -1;
    return s;
}

void run_stats_free(struct run_stats *s)
{
    if (!s) return;
    pthread_mutex_destroy(&s->mu);
    free(s->ep[0].v);
    free(s->ep[1].v);
    free(s);
}

void run_stats_set_mode(struct run_stats *s, const struct run_stats_mode *mode)
{
    pthread_mutex_lock(&s->mu);
    s->mode = *mode;
    pthread_mutex_unlock(&s->mu);
}

void run_stats_set_env(struct run_stats *s, const struct env_spec *spec)
{
    pthread_mutex_lock(&s->mu);
    s->spec = spec;
    pthread_mutex_unlock(&s->mu);
}

/* A finished episode into the per-episode log, at the env steps so far
 * (s->mu held). */
static void episode_keep(struct run_stats *s, double ret, int length)
{
    struct episode_buf *e = &s->ep[s->ep_fill];
    if (e->n >= RUN_STATS_EPISODES_MAX) {
        s->ep_unlogged++;
        return;
    }
    if (e->n == e->cap) {
        e->cap = e->cap ? 2 * e->cap : 256;
        e->v = trib_xrealloc(e->v, (size_t)e->cap * sizeof *e->v);
    }
    e->v[e->n++] = (struct run_episode){ .env_steps = s->env_steps, .ret = ret, .length = length };
}

void run_stats_report(struct run_stats *s, const struct rl_report *r)
{
    pthread_mutex_lock(&s->mu);
    /* an observer of this run reports the spec's count (a peer is not trusted) */
    if (s->spec && r->n_info == s->spec->info_count) {
        for (int k = 0; k < r->n_info; k++) s->iv_info_sum[k] += r->info_sum[k];
        add_sat(&s->iv_info_steps, r->info_steps);
    }
    add_sat(&s->env_steps, r->steps);
    add_sat(&s->log_steps, r->steps);
    add_sat(&s->episodes, r->episodes);
    for (int i = 0; i < r->n_returns; i++) {
        rl_window_push(&s->win, r->returns[i]);
        rl_window_push(&s->len_win, r->lengths[i]);
        episode_keep(s, r->returns[i], r->lengths[i]);
    }
    if (isfinite(r->explained_var)) {
        s->iv_ev_sum += r->explained_var;
        s->iv_ev_n++;
    }
    if (s->mode.running_per_report && s->cfg.running_reward && r->episodes > 0) {
        s->running = 0.05 * r->min_return + 0.95 * s->running;
        s->have_running = true;
    }
    pthread_mutex_unlock(&s->mu);
}

void run_stats_running(struct run_stats *s, double min_reward)
{
    pthread_mutex_lock(&s->mu);
    s->running = 0.05 * min_reward + 0.95 * s->running;
    s->have_running = true;
    pthread_mutex_unlock(&s->mu);
}

void run_stats_update(struct run_stats *s, int64_t lag, const struct rl_update_stats *st)
{
    pthread_mutex_lock(&s->mu);
    if (lag < 0) lag = 0;   /* a version from the future is refused before this; never count one */
    add_sat(&s->updates, 1);
    add_sat(&s->log_updates, 1);
    /* Without the mode's policy_lag (sync) every sample of an update comes
     * from the version its rollout began at, and the update's index within
     * the rollout (epochs x minibatches) is PPO's design, not staleness: no
     * lag is recorded. */
    if (s->mode.policy_lag) {
        s->lag_sum += (double)lag;
        s->lag_n++;
        if (lag > s->lag_max) s->lag_max = lag;
        s->log_lag_sum += (double)lag;
        s->log_lag_n++;
        if (lag > s->log_lag_max) s->log_lag_max = lag;
        s->lag_hist[lag >= RUN_STATS_LAG_BINS ? RUN_STATS_LAG_BINS - 1 : lag]++;
    }
    if (st) {
        s->iv_sum.policy_loss += st->policy_loss;
        s->iv_sum.value_loss += st->value_loss;
        s->iv_sum.entropy += st->entropy;
        s->iv_sum.approx_kl += st->approx_kl;
        s->iv_sum.clipfrac += st->clipfrac;
        s->iv_n++;
    }
    pthread_mutex_unlock(&s->mu);
}

/* README's one rule for every algorithm: the mean return of the last 100
 * episodes reaches the target (REINFORCE's running reward is reported, not
 * judged). */
static bool solved_locked(struct run_stats *s)
{
    if (isnan(s->target)) return false;
    return s->win.n >= s->win.cap && rl_window_mean(&s->win) >= s->target;
}

int64_t run_stats_updates(struct run_stats *s)
{
    pthread_mutex_lock(&s->mu);
    int64_t r = s->updates;
    pthread_mutex_unlock(&s->mu);
    return r;
}

void run_stats_dropped(struct run_stats *s, int64_t samples)
{
    pthread_mutex_lock(&s->mu);
    s->dropped_updates++;
    s->dropped_samples += samples;
    pthread_mutex_unlock(&s->mu);
}

void run_stats_busy(struct run_stats *s, double seconds)
{
    pthread_mutex_lock(&s->mu);
    s->busy_s += seconds;
    pthread_mutex_unlock(&s->mu);
}

void run_stats_acting(struct run_stats *s, int64_t calls, int64_t forwards)
{
    pthread_mutex_lock(&s->mu);
    s->act_calls = calls;
    s->act_forwards = forwards;
    pthread_mutex_unlock(&s->mu);
}

bool run_stats_solved(struct run_stats *s)
{
    pthread_mutex_lock(&s->mu);
    bool r = solved_locked(s);
    pthread_mutex_unlock(&s->mu);
    return r;
}

const char *run_stats_budget_spent(struct run_stats *s, char *buf, size_t cap)
{
    pthread_mutex_lock(&s->mu);
    const struct rl_config *c = &s->cfg;
    const char *r = buf;
    if (c->max_steps > 0 && s->env_steps >= c->max_steps)
        snprintf(buf, cap, "--max-steps %lld (at %lld env steps)", (long long)c->max_steps, (long long)s->env_steps);
    else if (c->max_updates > 0 && s->updates >= c->max_updates)
        snprintf(buf, cap, "--max-updates %lld (at %lld updates)", (long long)c->max_updates, (long long)s->updates);
    else if (c->max_seconds > 0 && trib_now_s() - s->t_start >= c->max_seconds)
        snprintf(buf, cap, "--max-seconds %g", c->max_seconds);
    else r = NULL;
    pthread_mutex_unlock(&s->mu);
    return r;
}

double run_stats_deadline(struct run_stats *s)
{
    pthread_mutex_lock(&s->mu);
    double d = s->cfg.max_seconds > 0 ? s->t_start + s->cfg.max_seconds : INFINITY;
    pthread_mutex_unlock(&s->mu);
    return d;
}

bool run_stats_out_of_budget(struct run_stats *s)
{
    char buf[128];
    return run_stats_budget_spent(s, buf, sizeof buf) != NULL;
}

int64_t run_stats_env_steps(struct run_stats *s)
{
    pthread_mutex_lock(&s->mu);
    int64_t r = s->env_steps;
    pthread_mutex_unlock(&s->mu);
    return r;
}

void run_stats_save(struct run_stats *s, unsigned char **out, size_t *len)
{
    struct run_stats_saved *v = trib_xcalloc(1, sizeof *v);
    pthread_mutex_lock(&s->mu);
    *v = (struct run_stats_saved){ .magic = RUN_STATS_SAVED_MAGIC, .env_steps = s->env_steps,
                                   .episodes = s->episodes, .updates = s->updates, .win = s->win,
                                   .len_win = s->len_win, .running = s->running, .have_running = s->have_running,
                                   .lag_sum = s->lag_sum, .lag_n = s->lag_n, .lag_max = s->lag_max,
                                   .wall_s = trib_now_s() - s->t0 };
    memcpy(v->lag_hist, s->lag_hist, sizeof v->lag_hist);
    memcpy(v->obs_steps, s->obs_steps, sizeof v->obs_steps);
    pthread_mutex_unlock(&s->mu);
    *out = (unsigned char *)v;
    *len = sizeof *v;
}

/* A saved return window: the configured capacity, n and head in range,
 * finite values; its running sum is recomputed (never trusted). */
static int check_window(const char *what, struct rl_window *w, int cap)
{
    if (w->cap != cap) return rl_set_error("counters: %s window holds %d, this run keeps %d", what, w->cap, cap);
    if (w->n < 0 || w->n > cap) return rl_set_error("counters: %s window count %d outside 0..%d", what, w->n, cap);
    if (w->head < 0 || w->head >= cap)
        return rl_set_error("counters: %s window head %d outside 0..%d", what, w->head, cap - 1);
    double sum = 0;
    for (int i = 0; i < w->n; i++) {
        if (!isfinite(w->buf[i])) return rl_set_error("counters: %s window value %d is not finite", what, i);
        sum += w->buf[i];
    }
    w->sum = sum;
    return 0;
}

static int check_count(const char *what, int64_t v)
{
    if (v < 0 || v > RUN_STATS_MAX_COUNT)
        return rl_set_error("counters: %s %lld outside 0..%lld", what, (long long)v, (long long)RUN_STATS_MAX_COUNT);
    return 0;
}

/* Every number of a saved struct checked before any is used. */
static int check_saved(struct run_stats_saved *v, const unsigned char *buf, const struct run_stats *s)
{
    if (v->magic != RUN_STATS_SAVED_MAGIC) return rl_set_error("counters: not valid saved counters (bad magic)");
    /* read the bool as a byte: a value other than 0 or 1 is not a bool */
    unsigned char hr;
    memcpy(&hr, buf + offsetof(struct run_stats_saved, have_running), 1);
    if (hr > 1) return rl_set_error("counters: have_running byte %u is not 0 or 1", hr);
    if (check_count("env_steps", v->env_steps) || check_count("episodes", v->episodes) ||
        check_count("updates", v->updates) || check_count("lag_n", v->lag_n) || check_count("lag_max", v->lag_max))
        return -1;
    for (int i = 0; i < RUN_STATS_LAG_BINS; i++)
        if (check_count("lag_hist bin", v->lag_hist[i])) return -1;
    for (int k = 0; k < RL_MAX_OBSERVERS; k++)
        if (check_count("observer env_steps", v->obs_steps[k])) return -1;
    if (check_window("return", &v->win, s->win.cap) || check_window("length", &v->len_win, s->len_win.cap)) return -1;
    if (!isfinite(v->running)) return rl_set_error("counters: running reward is not finite");
    if (!(v->lag_sum >= 0 && v->lag_sum <= (double)RUN_STATS_MAX_COUNT * (double)RUN_STATS_MAX_COUNT))
        return rl_set_error("counters: lag_sum %g is not a finite non-negative sum", v->lag_sum);
    return 0;
}

int run_stats_load(struct run_stats *s, const unsigned char *buf, size_t len)
{
    struct run_stats_saved v;
    if (len != sizeof v) return rl_set_error("counters: %zu bytes, expected %zu", len, sizeof v);
    memcpy(&v, buf, sizeof v);
    if (check_saved(&v, buf, s) != 0) return -1;
    pthread_mutex_lock(&s->mu);
    s->env_steps = v.env_steps;
    s->episodes = v.episodes;
    s->updates = v.updates;
    s->win = v.win;
    s->len_win = v.len_win;
    s->running = v.running;
    s->have_running = v.have_running;
    s->lag_sum = v.lag_sum;
    s->lag_n = v.lag_n;
    s->lag_max = v.lag_max;
    memcpy(s->lag_hist, v.lag_hist, sizeof v.lag_hist);
    memcpy(s->obs_steps, v.obs_steps, sizeof v.obs_steps);
    /* the run's clock goes on from where the checkpoint left it */
    if (v.wall_s >= 0 && v.wall_s < 1e9) s->t0 = trib_now_s() - v.wall_s;
    s->row_steps = s->env_steps;   /* the checkpointed session's last row: not repeated */
    s->row_updates = s->updates;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void run_stats_observer_steps(struct run_stats *s, int k, int64_t steps)
{
    if (k < 0 || k >= RL_MAX_OBSERVERS) return;
    pthread_mutex_lock(&s->mu);
    add_sat(&s->obs_steps[k], steps);
    add_sat(&s->obs_log_steps[k], steps);
    pthread_mutex_unlock(&s->mu);
}

/* min and max of the window's values */
static void window_range(const struct rl_window *w, double *lo, double *hi)
{
    *lo = *hi = NAN;
    for (int i = 0; i < w->n; i++) {
        double x = w->buf[i];
        if (i == 0 || x < *lo) *lo = x;
        if (i == 0 || x > *hi) *hi = x;
    }
}

bool run_stats_interval(struct run_stats *s, int64_t version, bool force, struct run_interval *iv)
{
    pthread_mutex_lock(&s->mu);
    double t = trib_now_s(), dt = t - s->t_log;
    /* a forced interval with nothing new would repeat the last row (a
     * resumed run's last row is the checkpointed session's) */
    if ((!force && dt < s->cfg.log_every) ||
        (force && s->env_steps == s->row_steps && s->updates == s->row_updates && isnan(s->eval_return))) {
        pthread_mutex_unlock(&s->mu);
        return false;
    }
    dt = fmax(dt, 1e-9);
    memset(iv, 0, sizeof *iv);
    iv->wall_s = t - s->t0;
    iv->env_steps = s->env_steps;
    iv->episodes = s->episodes;
    iv->updates = s->updates;
    iv->version = version;
    /* A forced row (an evaluation's, the last one) may come just after the
     * last: its rates over so short a time would be noise (0 where no
     * report fell in it). Before --log-every has passed, its rates are
     * over the last full interval and the time since (NaN before any: "-",
     * an empty cell, no scalar), and the next row's go on from the last
     * full one's end. */
    bool partial = force && dt < s->cfg.log_every;
    double span = partial ? s->full_dt + dt : dt;
    bool unmeasured = partial && s->full_dt == 0 && s->log_steps == 0 && s->log_updates == 0;
    iv->sps = unmeasured ? NAN : (double)((partial ? s->full_steps : 0) + s->log_steps) / span;
    iv->updates_per_s = unmeasured ? NAN : (double)((partial ? s->full_updates : 0) + s->log_updates) / span;
    iv->n_observers = s->cfg.observers;
    for (int k = 0; k < s->cfg.observers && k < RL_MAX_OBSERVERS; k++)
        iv->observer_sps[k] = unmeasured ? NAN : (double)((partial ? s->full_obs[k] : 0) + s->obs_log_steps[k]) / span;
    if (!partial) {
        s->full_dt = dt;
        s->full_steps = s->log_steps;
        s->full_updates = s->log_updates;
        for (int k = 0; k < s->cfg.observers && k < RL_MAX_OBSERVERS; k++) {
            s->full_obs[k] = s->obs_log_steps[k];
            s->obs_log_steps[k] = 0;
        }
    }
    iv->return_mean = s->win.n ? rl_window_mean(&s->win) : NAN;
    window_range(&s->win, &iv->return_min, &iv->return_max);
    iv->length_mean = s->len_win.n ? rl_window_mean(&s->len_win) : NAN;
    iv->running_reward = s->cfg.running_reward ? s->running : NAN;
    double n = s->iv_n ? (double)s->iv_n : NAN;   /* means over the interval's updates */
    unsigned has = rl_algo_get(s->cfg.algo)->stats;   /* what the algorithm's updates report */
    bool ac = has & RL_STATS_VALUE, ppo = has & RL_STATS_CLIP;
    iv->policy_loss = s->iv_sum.policy_loss / n;
    iv->value_loss = ac ? s->iv_sum.value_loss / n : NAN;
    iv->entropy = ac ? s->iv_sum.entropy / n : NAN;
    iv->approx_kl = ppo ? s->iv_sum.approx_kl / n : NAN;
    iv->clipfrac = ppo ? s->iv_sum.clipfrac / n : NAN;
    iv->explained_var = ac && s->iv_ev_n ? s->iv_ev_sum / (double)s->iv_ev_n : NAN;
    iv->first = s->intervals == 0;
    iv->lag_mean = s->log_lag_n ? s->log_lag_sum / (double)s->log_lag_n : NAN;
    iv->lag_max = s->log_lag_n ? (double)s->log_lag_max : NAN;
    iv->n_info = s->spec ? s->spec->info_count : 0;
    for (int k = 0; k < iv->n_info; k++) {
        iv->info_mean[k] = s->iv_info_steps ? s->iv_info_sum[k] / (double)s->iv_info_steps : NAN;
        s->iv_info_sum[k] = 0;
    }
    s->iv_info_steps = 0;
    iv->eval_return = s->eval_return;
    iv->eval_length = s->eval_length;
    s->eval_return = s->eval_length = NAN;
    iv->finished = s->ep[s->ep_fill].v;
    iv->n_finished = s->ep[s->ep_fill].n;
    iv->unlogged = s->ep_unlogged;
    s->ep_fill ^= 1;
    s->ep[s->ep_fill].n = 0;
    s->ep_unlogged = 0;
    if (!partial) {
        s->t_log = t;
        s->log_steps = s->log_updates = 0;
    }
    s->row_steps = s->env_steps;
    s->row_updates = s->updates;
    s->intervals++;
    s->log_lag_sum = 0;
    s->log_lag_n = s->log_lag_max = 0;
    s->iv_sum = (struct rl_update_stats){ 0 };
    s->iv_n = 0;
    s->iv_ev_sum = 0;
    s->iv_ev_n = 0;
    pthread_mutex_unlock(&s->mu);
    return true;
}

void run_stats_failed(struct run_stats *s)
{
    pthread_mutex_lock(&s->mu);
    s->failed = true;
    pthread_mutex_unlock(&s->mu);
}

void run_stats_eval(struct run_stats *s, double mean_return, double mean_length)
{
    pthread_mutex_lock(&s->mu);
    s->eval_return = mean_return;
    s->eval_length = mean_length;
    pthread_mutex_unlock(&s->mu);
}
