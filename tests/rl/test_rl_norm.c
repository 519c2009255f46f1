/* Observation and reward normalisation (rl/norm.h, issue 25): the
 * arithmetic against Gymnasium's classes (tests/rl/fixtures/norm_fixture.txt,
 * scripts/gen_norm_fixtures.py with numpy), several observers' deltas merged
 * equal to one process's statistics, the wire and byte forms refusing what
 * is wrong and naming it, the config's checks and presets; then real runs:
 * a checkpoint refused by a run of another normalisation, and
 * InvertedPendulum-v4 learning (mean return >= 500 within 300k steps) in
 * sync and async mode. A normalised sync run resumed bit-exact is
 * test_rl_envs' test_norm_resume_exact (its resume helper).
 *
 * Statistics no member can poison (issue 33 F1): the finite extremes that
 * used to turn the run's set to inf/NaN (a count of 1.7e308; a mean of
 * 1e300 with var 0; var 1e308 with count 1e6) refused by the set's checks
 * (wire, bytes, merge result) and a delta's count checked against its
 * report; over the wire from hostile members (norm_member) beside an
 * honest observer in sync and async runs, which drop them and finish with
 * finite statistics that count the honest observer's rows alone; and in a
 * crafted checkpoint, refused at --resume and by tributary-eval. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/proc.h"
#include "envs/env.h"
#include "rl/config.h"
#include "rl/norm.h"
#include "rl/rl.h"
#include "runfiles/ckpt.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"

#include "rl_harness.h"
#include "kit.h"

#define MAXD 8
#define MAXB 4
#define MAXN 128

/* ---- the fixture ------------------------------------------------------------------- */

struct fx_step {
    double term[MAXB], rew[MAXB];
    float obs[MAXB * MAXD];
    double nobs[MAXB * MAXD], nrew[MAXB];
    double ocount, omean[MAXD], ovar[MAXD];
    double rcount, rmean, rvar;
};
struct fixture {
    int D, B, N;
    double gamma, clip_obs, clip_reward, eps;
    struct fx_step s[MAXN + 1];   /* s[0]: the reset */
};
static struct fixture FX;

/* n numbers after the line's tag into out (as doubles). */
static void numbers(const char *line, int n, double *out)
{
    const char *p = strchr(line, ' ');
    for (int i = 0; i < n; i++) {
        ck_assert_msg(p != NULL, "short line: %.60s", line);
        char *end;
        out[i] = strtod(p, &end);
        ck_assert_msg(end != p, "bad number in: %.60s", line);
        p = end;
    }
}

static void load_fixture(void)
{
    FILE *f = fopen(NORM_FIXTURE, "r");
    ck_assert_msg(f != NULL, "missing %s", NORM_FIXTURE);
    static char line[1 << 14];
    double h[7], buf[2 * MAXB + MAXB * MAXD];
    int t = -1;
    memset(&FX, 0, sizeof FX);
    while (fgets(line, sizeof line, f)) {
        struct fx_step *s = t >= 0 ? &FX.s[t] : NULL;
        int D = FX.D, B = FX.B;
        if (strncmp(line, "header ", 7) == 0) {
            numbers(line, 7, h);
            FX.D = (int)h[0], FX.B = (int)h[1], FX.N = (int)h[2];
            FX.gamma = h[3], FX.clip_obs = h[4], FX.clip_reward = h[5], FX.eps = h[6];
            ck_assert(FX.D <= MAXD && FX.B <= MAXB && FX.N <= MAXN);
        } else if (strncmp(line, "reset ", 6) == 0 || strncmp(line, "step ", 5) == 0) {
            bool step = line[0] == 's';
            s = &FX.s[++t];
            numbers(line, (step ? 2 * B : 0) + B * D, buf);
            for (int b = 0; step && b < B; b++) s->term[b] = buf[b], s->rew[b] = buf[B + b];
            for (int i = 0; i < B * D; i++) s->obs[i] = (float)buf[(step ? 2 * B : 0) + i];
        } else if (strncmp(line, "nobs ", 5) == 0) {
            numbers(line, B * D, s->nobs);
        } else if (strncmp(line, "nrew ", 5) == 0) {
            numbers(line, B, s->nrew);
        } else if (strncmp(line, "obsrms ", 7) == 0) {
            numbers(line, 1 + 2 * D, buf);
            s->ocount = buf[0];
            memcpy(s->omean, buf + 1, (size_t)D * sizeof(double));
            memcpy(s->ovar, buf + 1 + D, (size_t)D * sizeof(double));
        } else if (strncmp(line, "retrms ", 7) == 0) {
            numbers(line, 3, buf);
            s->rcount = buf[0], s->rmean = buf[1], s->rvar = buf[2];
        }
    }
    fclose(f);
    ck_assert_int_eq(t, FX.N);
}

static void close_rel(double got, double want, double rel, const char *what, int t, int i)
{
    double tol = rel * fmax(fabs(want), 1e-300) + 1e-300;
    ck_assert_msg(fabs(got - want) <= tol, "%s at step %d [%d]: %.17g, Gymnasium %.17g", what, t, i, got, want);
}

static void check_rms(const struct rl_rms *r, double count, const double *mean, const double *var, double rel,
                      const char *what, int t)
{
    close_rel(r->count, count, rel, what, t, -1);
    for (int i = 0; i < r->dim; i++) {
        close_rel(r->mean[i], mean[i], rel, what, t, i);
        close_rel(r->var[i], var[i], rel, what, t, i);
    }
}

/* the observations as rl/norm.c gives them: float32 of Gymnasium's float64 */
static void check_obs(const float *got, const double *want, int n, int t)
{
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs((double)got[i] - want[i]) <= 1e-6 * fmax(1.0, fabs(want[i])),
                      "normalised obs at step %d [%d]: %.9g, Gymnasium %.17g", t, i, (double)got[i], want[i]);
}

/* RunningMeanStd.update + NormalizeObservation + clip, step by step. */
START_TEST(test_rms_matches_gymnasium)
{
    load_fixture();
    struct rl_norm_stats s;
    ck_assert_int_eq(rl_norm_stats_init(&s, FX.D, false, FX.clip_obs, FX.clip_reward), 0);
    ck_assert(s.obs.count == RL_NORM_COUNT0 && s.obs.mean[0] == 0 && s.obs.var[0] == 1);
    bool clipped = false;
    for (int t = 0; t <= FX.N; t++) {
        float x[MAXB * MAXD];
        memcpy(x, FX.s[t].obs, sizeof x);
        rl_rms_update(&s.obs, x, FX.B);
        check_rms(&s.obs, FX.s[t].ocount, FX.s[t].omean, FX.s[t].ovar, 1e-12, "obs rms", t);
        rl_norm_stats_apply(&s, x, FX.B);
        check_obs(x, FX.s[t].nobs, FX.B * FX.D, t);
        for (int i = 0; i < FX.B * FX.D; i++) clipped |= fabs(FX.s[t].nobs[i]) == FX.clip_obs;
    }
    ck_assert_msg(clipped, "the fixture never reaches the clip");
    rl_norm_stats_free(&s);
}
END_TEST

/* An observer's side (rl_norm: the agent's set + its own delta) over the
 * same run: observations and rewards as Gymnasium's wrappers make them. */
START_TEST(test_observer_matches_gymnasium)
{
    load_fixture();
    struct rl_config cfg;
    ck_assert_int_eq(rl_config_preset(&cfg, "ppo"), 0);
    cfg.norm_obs = cfg.norm_reward = true;
    cfg.gamma = FX.gamma;
    cfg.clip_obs = FX.clip_obs;
    cfg.clip_reward = FX.clip_reward;
    struct rl_norm n;
    ck_assert_int_eq(rl_norm_init(&n, &cfg, FX.B, FX.D), 0);
    ck_assert(rl_norm_on(&n));
    bool clipped = false;
    for (int t = 0; t <= FX.N; t++) {
        const struct fx_step *s = &FX.s[t];
        float x[MAXB * MAXD];
        memcpy(x, s->obs, sizeof x);
        rl_norm_obs(&n, x, FX.B);
        check_obs(x, s->nobs, FX.B * FX.D, t);
        check_rms(&n.now.obs, s->ocount, s->omean, s->ovar, 1e-12, "obs (global + delta)", t);
        if (t == 0) continue;
        float r[MAXB], out[MAXB];
        bool term[MAXB];
        for (int b = 0; b < FX.B; b++) r[b] = (float)s->rew[b], term[b] = s->term[b] != 0;
        rl_norm_reward(&n, r, term, out);
        for (int b = 0; b < FX.B; b++) {
            ck_assert_msg(fabs((double)out[b] - s->nrew[b]) <= 1e-6 * fmax(1.0, fabs(s->nrew[b])),
                          "reward at step %d [%d]: %.9g, Gymnasium %.17g", t, b, (double)out[b], s->nrew[b]);
            clipped |= fabs(s->nrew[b]) == FX.clip_reward;
        }
        check_rms(&n.now.ret, s->rcount, &s->rmean, &s->rvar, 1e-12, "return rms", t);
    }
    ck_assert_msg(clipped, "the fixture's rewards never reach the clip");
    rl_norm_free(&n);
}
END_TEST

/* Three observers, each its share of the rows: their deltas taken and
 * merged in order into the agent's set make the statistics one process
 * has over all the rows (Chan's formula is exact up to rounding). */
START_TEST(test_merged_equal_one_process)
{
    enum { K = 3, B = 2, D = 4, STEPS = 50 };
    struct rl_config cfg;
    ck_assert_int_eq(rl_config_preset(&cfg, "ppo"), 0);
    cfg.norm_obs = cfg.norm_reward = true;
    struct rl_norm obs[K];
    struct rl_norm_stats agent, delta, one;
    ck_assert_int_eq(rl_norm_stats_init(&agent, D, true, 10, 10), 0);
    ck_assert_int_eq(rl_norm_stats_init(&delta, D, true, 10, 10), 0);
    ck_assert_int_eq(rl_norm_stats_init(&one, D, true, 10, 10), 0);
    for (int k = 0; k < K; k++) ck_assert_int_eq(rl_norm_init(&obs[k], &cfg, B, D), 0);
    uint64_t seed = 12345;
    for (int round = 0; round < 4; round++) {
        for (int k = 0; k < K; k++) rl_norm_adopt(&obs[k], &agent);
        for (int k = 0; k < K; k++)
            for (int t = 0; t < STEPS; t++) {
                float x[B * D], r[B], out[B];
                bool term[B];
                for (int i = 0; i < B * D; i++) {
                    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                    x[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * (i % D + 1) * 7.0 - k);
                }
                for (int b = 0; b < B; b++) r[b] = x[b * D] * 0.5f, term[b] = (t + b + k) % 13 == 0;
                rl_rms_update(&one.obs, x, B);   /* one process, batch by batch */
                rl_norm_obs(&obs[k], x, B);
                double before[B];
                memcpy(before, obs[k].ret, sizeof before);
                rl_norm_reward(&obs[k], r, term, out);
                double ret[B];
                for (int b = 0; b < B; b++) ret[b] = before[b] * cfg.gamma * (term[b] ? 0.0 : 1.0) + (double)r[b];
                rl_rms_update_d(&one.ret, ret, B);
            }
        for (int k = 0; k < K; k++) {
            rl_norm_take_delta(&obs[k], &delta);
            ck_assert(obs[k].delta.obs.count == 0 && obs[k].delta.ret.count == 0);
            rl_norm_stats_merge(&agent, &delta);
        }
    }
    check_rms(&agent.obs, one.obs.count, one.obs.mean, one.obs.var, 1e-12, "merged obs", 0);
    check_rms(&agent.ret, one.ret.count, one.ret.mean, one.ret.var, 1e-12, "merged return", 0);
    ck_assert(agent.obs.count == RL_NORM_COUNT0 + 4.0 * K * STEPS * B);
    for (int k = 0; k < K; k++) rl_norm_free(&obs[k]);
    rl_norm_stats_free(&agent);
    rl_norm_stats_free(&delta);
    rl_norm_stats_free(&one);
}
END_TEST

/* ---- the wire and the bytes ---------------------------------------------------------- */

static void set_bytes_item(struct rpc_value *v, const char *side, const char *key, const double *x, int n)
{
    struct rpc_value *m = (struct rpc_value *)rpc_map_get(v, side);
    for (size_t i = 0; i < m->map.len; i++)
        if (strcmp(m->map.items[i].key, key) == 0) {
            rpc_value_clear(&m->map.items[i].val);
            m->map.items[i].val = rpc_bytes(x, (size_t)n * sizeof(double));
        }
}

static void refused(const struct rpc_value *v, int obs_dim, bool ret_on, const char *want)
{
    struct rl_norm_stats s;
    ck_assert_int_eq(rl_norm_stats_unpack(v, obs_dim, ret_on, 10, 10, &s), -1);
    ck_assert_str_eq(rl_last_error(), want);
}

START_TEST(test_unpack_refuses)
{
    struct rl_norm_stats s, back;
    ck_assert_int_eq(rl_norm_stats_init(&s, 3, true, 10, 10), 0);
    s.obs.mean[1] = 2.5, s.obs.var[2] = 0.25, s.obs.count = 7, s.ret.var[0] = 3;
    struct rpc_value v = rl_norm_stats_pack(&s);
    ck_assert_int_eq(rl_norm_stats_unpack(&v, 3, true, 10, 10, &back), 0);
    ck_assert(back.obs.mean[1] == 2.5 && back.obs.var[2] == 0.25 && back.obs.count == 7 && back.ret.var[0] == 3);
    rl_norm_stats_free(&back);
    refused(&v, 4, true, "norm: obs.mean has 3 values, the run's has 4");
    refused(&v, 3, false, "norm: ret is off in this run, but the statistics carry it");
    struct rpc_value nil = rpc_nil();
    refused(&nil, 3, true, "norm: expected a map {obs, ret}");
    double bad[3] = { 0, NAN, 0 };
    set_bytes_item(&v, "obs", "mean", bad, 3);
    refused(&v, 3, true, "norm: obs.mean[1] nan must be finite");
    double ok[3] = { 0, 0, 0 }, neg[3] = { 1, 1, -1 };
    set_bytes_item(&v, "obs", "mean", ok, 3);
    set_bytes_item(&v, "obs", "var", neg, 3);
    refused(&v, 3, true, "norm: obs.var[2] -1 must be finite and >= 0");
    double inf[1] = { INFINITY };
    set_bytes_item(&v, "obs", "var", ok, 3);
    set_bytes_item(&v, "ret", "var", inf, 1);
    refused(&v, 3, true, "norm: ret.var[0] inf must be finite and >= 0");
    rpc_value_clear(&v);
    s.obs.count = -1;
    v = rl_norm_stats_pack(&s);
    refused(&v, 3, true, "norm: obs.count -1 must be finite and >= 0");
    rpc_value_clear(&v);
    rl_norm_stats_free(&s);
}
END_TEST

START_TEST(test_bytes_round_trip)
{
    struct rl_norm_stats s, back;
    ck_assert_int_eq(rl_norm_stats_init(&s, 2, true, 10, 10), 0);
    s.obs.mean[0] = -1.5, s.obs.var[1] = 4, s.obs.count = 9, s.ret.mean[0] = 0.5, s.ret.count = 3;
    size_t n = rl_norm_stats_size(&s);
    ck_assert_uint_eq(n, (size_t)(5 + 3) * sizeof(double));
    unsigned char b[64];
    rl_norm_stats_save(&s, b);
    ck_assert_int_eq(rl_norm_stats_init(&back, 2, true, 10, 10), 0);
    ck_assert_int_eq(rl_norm_stats_load(&back, b, n), 0);
    ck_assert(back.obs.mean[0] == -1.5 && back.obs.var[1] == 4 && back.obs.count == 9 && back.ret.mean[0] == 0.5 &&
              back.ret.count == 3);
    ck_assert_int_eq(rl_norm_stats_load(&back, b, n - 8), -1);
    ck_assert_str_eq(rl_last_error(), "norm: 56 bytes, the run's statistics (obs dim 2, ret on) take 64");
    double nan = NAN;
    memcpy(b + 8, &nan, sizeof nan);
    ck_assert_int_eq(rl_norm_stats_load(&back, b, n), -1);
    ck_assert_str_eq(rl_last_error(), "norm: obs.mean[0] nan must be finite");
    rl_norm_stats_free(&s);
    rl_norm_stats_free(&back);
}
END_TEST

/* ---- finite extremes (issue 33 F1) ------------------------------------------------------ */

#define MOMENT_MAX_G "1.87883e+109"   /* RL_NORM_MOMENT_MAX as %g prints it */

/* A run's set of obs dim 3 with the return side, as after some honest
 * merges. */
static void honest_set(struct rl_norm_stats *s)
{
    ck_assert_int_eq(rl_norm_stats_init(s, 3, true, 10, 10), 0);
    s->obs.count = s->ret.count = 8704;
    for (int i = 0; i < 3; i++) s->obs.mean[i] = 0.1 * i, s->obs.var[i] = 0.5 + i;
    s->ret.mean[0] = -3, s->ret.var[0] = 40;
}

/* The finding's three extremes, each a delta of 32 rows otherwise honest;
 * what the set's checks say of it. */
static const struct extreme {
    const char *what;
    double obs_count, obs_var0, ret_mean, ret_var;
    const char *why;
} extremes[] = {
    { "count 1.7e308", 1.7e308, 1, 0, 1, "norm: obs.count 1.7e+308 is more than 2^53" },
    { "mean 1e300, var 0", 32, 1, 1e300, 0, "norm: ret.mean[0] 1e+300 and var[0] 0: mean^2 + var must be at most " MOMENT_MAX_G },
    { "var 1e308, count 1e6", 1e6, 1e308, 0, 1, "norm: obs.mean[0] 0 and var[0] 1e+308: mean^2 + var must be at most " MOMENT_MAX_G },
};

static void extreme_delta(const struct extreme *e, struct rl_norm_stats *d)
{
    ck_assert_int_eq(rl_norm_stats_init(d, 3, true, 10, 10), 0);
    d->obs.count = e->obs_count;
    d->obs.var[0] = e->obs_var0;
    d->ret.count = 32;
    d->ret.mean[0] = e->ret_mean, d->ret.var[0] = e->ret_var;
}

static bool set_finite(const struct rl_norm_stats *s)
{
    bool ok = isfinite(s->obs.count) && isfinite(s->ret.count) && isfinite(s->ret.mean[0]) && isfinite(s->ret.var[0]);
    for (int i = 0; i < s->obs.dim; i++) ok = ok && isfinite(s->obs.mean[i]) && isfinite(s->obs.var[i]);
    return ok;
}

/* Each extreme: merged unchecked it breaks the run's set (the finding);
 * the checked merge refuses it naming the value its result would have and
 * leaves the set as it was; the wire and the bytes refuse it by name. */
START_TEST(test_finite_extremes_refused)
{
    for (size_t k = 0; k < sizeof extremes / sizeof extremes[0]; k++) {
        const struct extreme *e = &extremes[k];
        struct rl_norm_stats set, before, d, back;
        honest_set(&set);
        honest_set(&before);
        extreme_delta(e, &d);
        rl_norm_stats_merge(&set, &d);
        ck_assert_msg(!set_finite(&set), "%s: an unchecked merge stayed finite", e->what);
        rl_norm_stats_copy(&set, &before);
        ck_assert_int_eq(rl_norm_stats_merge_checked(&set, &d), -1);
        ck_assert_msg(strncmp(rl_last_error(), "norm: merged into the run's set, ", 33) == 0, "%s: %s", e->what,
                      rl_last_error());
        ck_assert(set.obs.count == before.obs.count && set.ret.count == before.ret.count &&
                  set.ret.mean[0] == before.ret.mean[0] && set.ret.var[0] == before.ret.var[0]);
        for (int i = 0; i < 3; i++) ck_assert(set.obs.mean[i] == before.obs.mean[i] && set.obs.var[i] == before.obs.var[i]);
        struct rpc_value v = rl_norm_stats_pack(&d);
        ck_assert_int_eq(rl_norm_stats_unpack(&v, 3, true, 10, 10, &back), -1);
        ck_assert_str_eq(rl_last_error(), e->why);
        rpc_value_clear(&v);
        unsigned char b[256];
        size_t n = rl_norm_stats_size(&d);
        rl_norm_stats_save(&d, b);
        ck_assert_int_eq(rl_norm_stats_init(&back, 3, true, 10, 10), 0);
        ck_assert_int_eq(rl_norm_stats_load(&back, b, n), -1);
        ck_assert_str_eq(rl_last_error(), e->why);
        rl_norm_stats_free(&back);
        rl_norm_stats_free(&set);
        rl_norm_stats_free(&before);
        rl_norm_stats_free(&d);
    }
    /* what the merge's own check names */
    struct rl_norm_stats set, d;
    honest_set(&set);
    extreme_delta(&extremes[1], &d);
    ck_assert_int_eq(rl_norm_stats_merge_checked(&set, &d), -1);
    ck_assert_str_eq(rl_last_error(), "norm: merged into the run's set, ret.var[0] inf must be finite and >= 0");
    set.obs.count = RL_NORM_COUNT_MAX - 10;
    rl_norm_stats_free(&d);
    extreme_delta(&extremes[0], &d);
    d.obs.count = 32;
    ck_assert_int_eq(rl_norm_stats_merge_checked(&set, &d), -1);
    ck_assert_str_eq(rl_last_error(), "norm: merged into the run's set, obs.count 9.0072e+15 is more than 2^53");
    rl_norm_stats_free(&set);
    rl_norm_stats_free(&d);
}
END_TEST

/* A delta's count must be the rows its report fed in, its values those of
 * rows within +-RL_NORM_VALUE_MAX; deltas at that bound, merged into a set
 * again and again, never make a result the merge's check refuses, so no
 * member can make the set refuse an honest delta after it. */
START_TEST(test_delta_bounds)
{
    struct rl_norm_stats d, set, honest;
    ck_assert_int_eq(rl_norm_stats_init(&d, 3, true, 10, 10), 0);
    d.obs.count = 34, d.ret.count = 32;
    ck_assert_int_eq(rl_norm_delta_check(&d, 34, 32), 0);
    ck_assert_int_eq(rl_norm_delta_check(&d, 32, 32), -1);
    ck_assert_str_eq(rl_last_error(), "norm: obs.count 34 is not the 32 observations its report carries");
    d.ret.count = 1e6;
    ck_assert_int_eq(rl_norm_delta_check(&d, 34, 32), -1);
    ck_assert_str_eq(rl_last_error(), "norm: ret.count 1e+06 is not the 32 discounted returns its report carries");
    d.ret.count = 32;
    d.obs.mean[2] = 1.2 * RL_NORM_VALUE_MAX;   /* a set may hold it, rows within the bound cannot */
    ck_assert_int_eq(rl_norm_stats_check(&d), 0);
    ck_assert_int_eq(rl_norm_delta_check(&d, 34, 32), -1);
    ck_assert_str_eq(rl_last_error(), "norm: obs.mean[2] 3.67799e+54 and var[2] 1: mean^2 + var must be at most 9.39417e+108");

    ck_assert_int_eq(rl_norm_stats_init(&set, 3, true, 10, 10), 0);
    ck_assert_int_eq(rl_norm_stats_init(&honest, 3, true, 10, 10), 0);
    honest.obs.count = honest.ret.count = 1;
    for (int i = 0; i < 3; i++) honest.obs.mean[i] = 1, honest.obs.var[i] = 2;
    uint64_t seed = 7;
    for (int it = 0; it < 3000; it++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(seed >> 11) / 9007199254740992.0;   /* [0, 1) */
        double R = RL_NORM_VALUE_MAX, count = 1 + (double)(seed >> 40 & 0xffff);
        d.obs.count = d.ret.count = count;
        for (int i = 0; i < 3; i++) {   /* mean^2 + var = R^2 exactly or just under */
            double mean = (2 * u - 1) * R * (i == 0 ? 1 : 0.5);
            d.obs.mean[i] = mean;
            d.obs.var[i] = R * R - mean * mean;
            if (d.obs.mean[i] * d.obs.mean[i] + d.obs.var[i] > R * R) d.obs.var[i] = nextafter(d.obs.var[i], 0);
        }
        d.ret.mean[0] = it % 2 ? R : -R, d.ret.var[0] = 0;
        ck_assert_int_eq(rl_norm_delta_check(&d, count, count), 0);
        ck_assert_msg(rl_norm_stats_merge_checked(&set, &d) == 0, "merge %d: %s", it, rl_last_error());
        ck_assert_msg(rl_norm_stats_merge_checked(&set, &honest) == 0, "honest merge %d: %s", it, rl_last_error());
    }
    ck_assert_int_eq(rl_norm_stats_check(&set), 0);
    rl_norm_stats_free(&d);
    rl_norm_stats_free(&set);
    rl_norm_stats_free(&honest);
}
END_TEST

/* ---- the config -------------------------------------------------------------------- */

/* One frozen normalisation (issue 31): training's (rl_norm_stats_apply, which
 * --eval-every uses too) and tributary-eval's and the export's (a policy
 * file written with the run's statistics, read back, policy_norm_apply)
 * give the same bits for the same observation, NaN, infinities and values
 * past the clip included; a NaN stays NaN on both paths. */
START_TEST(test_frozen_norm_one_rule)
{
    enum { D = 3, ROWS = 6 };
    struct rl_norm_stats s;
    ck_assert_int_eq(rl_norm_stats_init(&s, D, false, 5.0, 10.0), 0);
    const double mean[D] = { 0.5, -2.0, 1e3 }, var[D] = { 4.0, 0.25, 9e4 };
    memcpy(s.obs.mean, mean, sizeof mean);
    memcpy(s.obs.var, var, sizeof var);
    s.obs.count = 1234;
    static const float rows[ROWS][D] = {
        { 0.5f, -2.0f, 1000.0f }, { 1.25f, -1.5f, 1300.0f }, { NAN, 0.0f, -NAN },
        { INFINITY, -INFINITY, 1e30f }, { -1e30f, 7.0f, -4e3f }, { 3.0f, -2.25f, 1e3f + 0.5f },
    };
    float train[ROWS][D], file[ROWS][D];
    memcpy(train, rows, sizeof rows);
    memcpy(file, rows, sizeof rows);
    rl_norm_stats_apply(&s, &train[0][0], ROWS);
    /* the file's path: the statistics written by the export, read back */
    char dir[] = "/tmp/test_rl_norm_frozen_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/policy.safetensors", dir);
    struct policy_arch arch = { .obs_dim = D, .act_dim = 1, .gaussian = true, .n_hidden = 1, .hidden = { 4 } };
    struct nn_module *actor = NULL, *critic = NULL;
    ck_assert_int_eq(policy_arch_build(&arch, 1, &actor, &critic), 0);
    static const double lo[1] = { -1 }, hi[1] = { 1 };
    struct env_space act = { .kind = SPACE_BOX, .dim = 1, .low = lo, .high = hi };
    struct policy_norm view = rl_norm_stats_view(&s);
    struct policy_info info = { .env_id = "X-v0", .act = &act, .norm = &view };
    ck_assert_msg(policy_file_write(path, &arch, &info, actor->n_params, actor->params) == 0, "%s", runfiles_last_error());
    nn_module_free(actor);
    nn_module_free(critic);
    struct policy_extras x;
    char env[64];
    ck_assert_msg(policy_file_read(path, &arch, env, sizeof env, &actor, NULL, &x) == 0, "%s", runfiles_last_error());
    ck_assert_int_eq(x.norm.dim, D);
    policy_norm_apply(&x.norm, &file[0][0], ROWS);
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < D; i++) {
            ck_assert_msg(memcmp(&train[r][i], &file[r][i], sizeof(float)) == 0, "row %d dim %d: %g against %g", r, i,
                          train[r][i], file[r][i]);
            ck_assert_msg(isnan(rows[r][i]) == isnan(train[r][i]), "row %d dim %d: NaN in, %g out", r, i, train[r][i]);
            ck_assert(isnan(train[r][i]) || fabsf(train[r][i]) <= 5.0f);
        }
    ck_assert(train[3][0] == 5.0f && train[3][1] == -5.0f && train[0][0] == 0.0f);
    policy_extras_free(&x);
    nn_module_free(actor);
    rl_norm_stats_free(&s);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_config_checks)
{
    struct rl_config c;
    ck_assert_int_eq(rl_config_preset(&c, "ppo"), 0);
    ck_assert(!c.norm_obs && !c.norm_reward && c.clip_obs == 10 && c.clip_reward == 10 && c.stop_at_target);
    c.norm_obs = true;
    ck_assert_int_eq(rl_config_check(&c), 0);
    c.clip_obs = 0;
    ck_assert_int_eq(rl_config_check(&c), -1);
    ck_assert_str_eq(rl_last_error(), "--clip-obs must be in (0, 1e+06], not 0");
    c.clip_obs = 10;
    c.clip_reward = INFINITY;
    ck_assert_int_eq(rl_config_check(&c), -1);
    ck_assert_str_eq(rl_last_error(), "--clip-reward must be in (0, 1e+06], not inf");
    /* an episodes algorithm learns from raw whole episodes: refused by its shape's check */
    ck_assert_int_eq(rl_config_preset(&c, "pytorch-rl-example"), 0);
    c.norm_reward = true;
    ck_assert_int_eq(rl_config_check(&c), -1);
    ck_assert_str_eq(rl_last_error(), "--norm-obs and --norm-reward go with a rollouts algorithm (a2c, ppo): "
                                      "reinforce learns from whole episodes of raw rewards");
}
END_TEST

static void parse(struct rl_config *c, const char *const *args)
{
    char *argv[16] = { "test" };
    int n = 1;
    for (; args[n - 1]; n++) argv[n] = (char *)args[n - 1];
    ck_assert_int_eq(rl_config_parse(c, "test", "", n, argv, NULL, 0), -1);
}

/* CleanRL's ppo_continuous_action.py; its 1M-step budget and no target
 * hold for every env of the MuJoCo suite, not for another env. */
START_TEST(test_presets)
{
    struct rl_config c;
    parse(&c, (const char *const[]){ "--preset", "mujoco", NULL });
    ck_assert_str_eq(c.env, "Hopper-v4");
    ck_assert(c.observers == 1 && c.envs_per_observer == 1 && c.steps_per_rollout == 2048 && c.minibatches == 32 &&
              c.epochs == 10 && c.lr == 3e-4 && c.anneal_lr && c.gamma == 0.99 && c.gae_lambda == 0.95 &&
              c.clip == 0.2 && c.ent_coef == 0 && c.vf_coef == 0.5 && c.max_grad_norm == 0.5 && c.norm_adv &&
              c.clip_vloss && c.hidden.n == 2 && c.hidden.v[0] == 64 && c.hidden.v[1] == 64 &&
              c.activation == RL_ACT_TANH && c.init_log_std == 0 && c.norm_obs && c.norm_reward &&
              c.max_steps == 1000000 && !c.stop_at_target);
    parse(&c, (const char *const[]){ "--preset", "mujoco", "--env", "Walker2d-v4", NULL });
    ck_assert(c.max_steps == 1000000 && !c.stop_at_target && isnan(c.target));
    parse(&c, (const char *const[]){ "--preset", "mujoco-fast", "--env", "HalfCheetah-v4", NULL });
    ck_assert(c.observers == 2 && c.envs_per_observer == 8 && c.steps_per_rollout == 128 && c.minibatches == 8 &&
              c.epochs == 10 && c.norm_obs && c.max_steps == 1000000);
    parse(&c, (const char *const[]){ "--preset", "mujoco", "--env", "Pendulum-v1", NULL });
    ck_assert_int_eq(c.max_steps, 500000);   /* not of the suite: the env fields take their defaults */
}
END_TEST

/* A checkpoint of a normalised run is refused by a run of another
 * normalisation (its statistics and observers' states are made for it),
 * saying which flag, and nothing is resumed. (test_rl_envs'
 * test_norm_resume_exact: a normalised sync run resumes bit-exact.) */
START_TEST(test_resume_other_norm_refused)
{
    char d[] = "/tmp/test_rl_norm_r_XXXXXX";
    ck_assert(mkdtemp(d));
    const char *a[] = { "--env", "Pendulum-v1", "--observers", "1", "--envs-per-observer", "2", "--steps-per-rollout",
                        "16", "--minibatches", "1", "--epochs", "1", "--norm-obs", "--norm-reward", "--max-updates",
                        "2", "--logdir", d, "--quiet", NULL };
    ck_assert_msg(kit_run(TRIB_TRAIN_BIN, a, -1) == 0, "%s", kit_err);   /* no target: its budget spent, a success */
    const char *b[] = { "--resume", d, "--no-norm-reward", "--quiet", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, b, -1), 1);
    ck_assert_msg(strstr(kit_err, "was made with --norm-reward true, this run has false"), "%s", kit_err);
    ck_assert_msg(strstr(kit_out, "resumed from") == NULL, "%s", kit_out);
    ck_assert_int_eq(kit_rm_rf(d), 0);
}
END_TEST

/* ---- hostile members and a crafted checkpoint (issue 33 F1) ----------------------------- */

#define MEMBER_T 16                 /* the runs' --steps-per-rollout and --envs-per-observer */
#define MEMBER_B 2
#define HB_MS "2000"

static char scratch[64];            /* a test's --logdir, removed by the teardown */

static void teardown(void)
{
    rl_kill_all();
    if (scratch[0]) {
        if (kit_rm_rf(scratch) != 0) fprintf(stderr, "test_rl_norm: could not remove %s\n", scratch);
    }
    scratch[0] = '\0';
}

/* The kinds norm_member sends (see there), the reason the agent refuses
 * each with. */
static const char *const members[][2] = {
    { "count", "norm: obs.count 1.7e+308 is more than 2^53" },
    { "mean", "norm: ret.mean[0] 1e+300 and var[0] 0: mean^2 + var must be at most " MOMENT_MAX_G },
    { "var", "norm: obs.mean[0] 0 and var[0] 1e+308: mean^2 + var must be at most " MOMENT_MAX_G },
    { "rows", "norm: ret.count 1e+06 is not the 32 discounted returns its report carries" },
};
#define N_MEMBERS 4

/* The run's statistics in its newest checkpoint under dir, checked as a
 * resume checks them, into *s (dim 3, the return side on). */
static void checkpoint_set(const char *dir, struct rl_norm_stats *s, char *path, size_t cap, int64_t *step)
{
    char ck[128];
    snprintf(ck, sizeof ck, "%s/checkpoints", dir);
    struct ckpt *c = NULL;
    ck_assert_msg(ckpt_load_latest(ck, &c, NULL, 0) == 1, "%s: %s", ck, runfiles_last_error());
    size_t len = 0;
    const void *b = ckpt_get(c, "norm", &len);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(rl_norm_stats_init(s, 3, true, 10, 10), 0);
    ck_assert_msg(rl_norm_stats_load(s, b, len) == 0, "%s", rl_last_error());
    if (path) snprintf(path, cap, "%s/ckpt-%012lld.trib", ck, (long long)c->step);
    if (step) *step = c->step;
    ckpt_free(c);
}

/* tributary-agent (mode) with one honest tributary-observer (rank 1) and
 * the four hostile members (ranks 2..5) on Pendulum-v1, normalising
 * observations and rewards: each member is dropped saying why, the honest
 * observer goes on, and the run ends as asked (--max-updates 6) with a
 * policy file and a checkpoint whose statistics are finite and count the
 * honest observer's rows alone (its env steps, and its set-up's B reset
 * observations on the obs side). */
static void check_hostile_members(const char *mode)
{
    snprintf(scratch, sizeof scratch, "/tmp/test_rl_norm_m_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(scratch));
    char t[16], b[16];
    snprintf(t, sizeof t, "%d", MEMBER_T);
    snprintf(b, sizeof b, "%d", MEMBER_B);
    const char *args[] = { "--master", "tcp://127.0.0.1:0", "--observers", "5", "--mode", mode, "--env", "Pendulum-v1",
                           "--envs-per-observer", b, "--steps-per-rollout", t, "--minibatches", "1", "--epochs", "1",
                           "--norm-obs", "--norm-reward", "--max-updates", "6", "--logdir", scratch,
                           "--heartbeat-timeout", HB_MS, "--seed", "3", "--device", "cpu", NULL };
    struct rl_proc agent, honest, member[N_MEMBERS];
    char ep[128];
    rl_start(&agent, TRIB_AGENT_BIN, args, NULL);
    rl_agent_endpoint(&agent, ep, sizeof ep, 60);
    const char *oargs[] = { "--rank", "1", "--world-size", "6", "--master", ep, "--heartbeat-timeout", HB_MS, NULL };
    rl_start(&honest, TRIB_OBSERVER_BIN, oargs, NULL);
    for (int i = 0; i < N_MEMBERS; i++) {
        char rank[8];
        snprintf(rank, sizeof rank, "%d", i + 2);
        const char *margs[] = { ep, rank, "6", members[i][0], NULL };
        rl_start(&member[i], NORM_MEMBER_BIN, margs, NULL);
    }
    int rc = rl_wait(&agent, RUN_TIMEOUT_S);
    /* 0: no target, the budget ended it; not a failure */
    ck_assert_msg(rc == 0, "agent exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent.out), tail(agent.err));
    bool async = strcmp(mode, "async") == 0;
    for (int i = 0; i < N_MEMBERS; i++) {
        char line[512];
        if (async)
            snprintf(line, sizeof line, "agent: lost observer%d: it sent statistics that were refused (%s); continuing with ",
                     i + 2, members[i][1]);
        else
            snprintf(line, sizeof line, "agent: dropping observer%d (alive): %s; continuing with ", i + 2, members[i][1]);
        ck_assert_msg(strstr(agent.err, line), "'%s' not on the agent's stderr:\n%s", line, agent.err);
        rl_kill(&member[i]);
        if (async) {
            snprintf(line, sizeof line, "refused: rpc: agent: rl_update: refused (from observer%d): %s\n", i + 2,
                     members[i][1]);
            ck_assert_msg(strstr(member[i].out, line), "'%s' not on member %s's stdout:\n%s\n%s", line, members[i][0],
                          member[i].out, member[i].err);
            /* dropped, its gradients are not taken either (an update without a report or statistics) */
            ck_assert_msg(strstr(member[i].out, "then refused: ") && !strstr(member[i].out, "then accepted"),
                          "member %s's bare update after its drop:\n%s\n%s", members[i][0], member[i].out,
                          member[i].err);
        }
        rl_free(&member[i]);
    }
    rc = rl_wait(&honest, 60);
    ck_assert_msg(rc == 0, "honest observer exit %d\nstderr:\n%s\nagent stderr:\n%s", rc, tail(honest.err), tail(agent.err));
    rl_free(&honest);
    cJSON *j = summary(&agent);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_int_ge((int)jnum(j, "updates"), 6);
    ck_assert_int_eq((int)jnum(j, "observers_lost"), N_MEMBERS);
    double steps = jnum(j, "env_steps");
    ck_assert_msg(steps >= 6 * MEMBER_T * MEMBER_B, "env_steps %g", steps);
    cJSON_Delete(j);

    struct rl_norm_stats s;
    checkpoint_set(scratch, &s, NULL, 0, NULL);
    ck_assert_msg(fabs(s.obs.count - (RL_NORM_COUNT0 + steps + MEMBER_B)) < 1e-6, "obs.count %.17g, env steps %g",
                  s.obs.count, steps);
    ck_assert_msg(fabs(s.ret.count - (RL_NORM_COUNT0 + steps)) < 1e-6, "ret.count %.17g, env steps %g", s.ret.count, steps);
    ck_assert(set_finite(&s) && fabs(s.ret.mean[0]) < 1e4 && s.ret.var[0] < 1e8);
    rl_norm_stats_free(&s);
    char pf[128], env[256];
    snprintf(pf, sizeof pf, "%s/policy.safetensors", scratch);
    struct policy_arch arch;
    struct nn_module *actor = NULL;
    struct policy_extras x = { 0 };
    ck_assert_msg(policy_file_read(pf, &arch, env, sizeof env, &actor, NULL, &x) == 0, "%s", runfiles_last_error());
    ck_assert_int_eq(x.norm.dim, 3);
    ck_assert_msg(fabs(x.norm.count - (RL_NORM_COUNT0 + steps + MEMBER_B)) < 1e-6, "policy file count %.17g",
                  x.norm.count);
    for (int i = 0; i < 3; i++) ck_assert(fabs(x.norm.mean[i]) < 100 && x.norm.var[i] < 1e4);
    nn_module_free(actor);
    policy_extras_free(&x);
    rl_free(&agent);
}

START_TEST(test_hostile_members_sync) { check_hostile_members("sync"); }
END_TEST

/* A sync update is one round trip: each observer's loss reply carries its
 * gradients for the policy's output, which the agent carries into its
 * parameters. Two members (ranks 2, 3) beside an honest observer answer
 * their first update with a NaN in it, or one column too many: each is
 * dropped naming the field, that update is refused (no step: the honest
 * observer's 6 updates come from the next 6 rollouts, so the run takes 7
 * rollouts of it and the members' first), and the policy stays finite. */
START_TEST(test_hostile_gradients_sync)
{
    static const char *const kinds[][2] = {
        { "nan-gradient", "gradient: a[0] nan is not finite" },
        { "wide-gradient", "gradient: a must be f32 [32,1], not f32 [32,2]" },
    };
    snprintf(scratch, sizeof scratch, "/tmp/test_rl_norm_g_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(scratch));
    char t[16], b[16];
    snprintf(t, sizeof t, "%d", MEMBER_T);
    snprintf(b, sizeof b, "%d", MEMBER_B);
    const char *args[] = { "--master", "tcp://127.0.0.1:0", "--observers", "3", "--mode", "sync", "--env", "Pendulum-v1",
                           "--envs-per-observer", b, "--steps-per-rollout", t, "--minibatches", "1", "--epochs", "1",
                           "--norm-obs", "--norm-reward", "--max-updates", "6", "--logdir", scratch,
                           "--heartbeat-timeout", HB_MS, "--seed", "3", "--device", "cpu", NULL };
    struct rl_proc agent, honest, member[2];
    char ep[128];
    rl_start(&agent, TRIB_AGENT_BIN, args, NULL);
    rl_agent_endpoint(&agent, ep, sizeof ep, 60);
    const char *oargs[] = { "--rank", "1", "--world-size", "4", "--master", ep, "--heartbeat-timeout", HB_MS, NULL };
    rl_start(&honest, TRIB_OBSERVER_BIN, oargs, NULL);
    for (int i = 0; i < 2; i++) {
        char rank[8];
        snprintf(rank, sizeof rank, "%d", i + 2);
        const char *margs[] = { ep, rank, "4", kinds[i][0], NULL };
        rl_start(&member[i], NORM_MEMBER_BIN, margs, NULL);
    }
    int rc = rl_wait(&agent, RUN_TIMEOUT_S);   /* Pendulum has no target: its budget spent is a success */
    ck_assert_msg(rc == 0, "agent exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent.out), tail(agent.err));
    for (int i = 0; i < 2; i++) {
        char line[512];
        snprintf(line, sizeof line, "agent: dropping observer%d (alive): its loss reply: %s (this update is refused: the "
                 "policy is unchanged); continuing with ", i + 2, kinds[i][1]);
        ck_assert_msg(strstr(agent.err, line), "'%s' not on the agent's stderr:\n%s", line, agent.err);
        rl_kill(&member[i]);
        rl_free(&member[i]);
    }
    rc = rl_wait(&honest, 60);
    ck_assert_msg(rc == 0, "honest observer exit %d\nstderr:\n%s\nagent stderr:\n%s", rc, tail(honest.err), tail(agent.err));
    rl_free(&honest);
    cJSON *j = summary(&agent);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_int_eq((int)jnum(j, "updates"), 6);
    ck_assert_int_eq((int)jnum(j, "observers_lost"), 2);
    ck_assert_int_eq((int)jnum(j, "env_steps"), (7 + 2) * MEMBER_T * MEMBER_B);
    cJSON_Delete(j);
    char pf[128], env[256];
    snprintf(pf, sizeof pf, "%s/policy.safetensors", scratch);
    struct policy_arch arch;
    struct nn_module *actor = NULL;
    struct policy_extras x = { 0 };
    /* a policy file that is not finite is refused (runfiles' check) */
    ck_assert_msg(policy_file_read(pf, &arch, env, sizeof env, &actor, NULL, &x) == 0, "%s", runfiles_last_error());
    nn_module_free(actor);
    policy_extras_free(&x);
    rl_free(&agent);
}
END_TEST

START_TEST(test_hostile_members_async) { check_hostile_members("async"); }
END_TEST

/* Rewrites the checkpoint at path (the run in scratch, at step) with s
 * as its section 'norm' (same step, CRC made anew); frees s. */
static void norm_into_checkpoint(struct rl_norm_stats *s, const char *path, int64_t step)
{
    unsigned char bytes[256];
    size_t n = rl_norm_stats_size(s);
    ck_assert_uint_le(n, sizeof bytes);
    rl_norm_stats_save(s, bytes);
    rl_norm_stats_free(s);
    struct ckpt *c = ckpt_load(path);
    ck_assert_msg(c, "%s", runfiles_last_error());
    struct ckpt_section sec[64];
    ck_assert_int_le(c->n_sections, 64);
    for (int i = 0; i < c->n_sections; i++) {
        sec[i] = c->sections[i];
        if (strcmp(sec[i].name, "norm") == 0) sec[i].data = bytes, sec[i].size = n;
    }
    char dir[128];
    snprintf(dir, sizeof dir, "%s/checkpoints", scratch);
    ck_assert_msg(ckpt_write(dir, step, sec, c->n_sections, 0) == 0, "%s", runfiles_last_error());
    ckpt_free(c);
}

/* A checkpoint whose statistics hold each of the finding's extremes (its
 * section 'norm' rewritten in place: same step, CRC made anew) is refused
 * at --resume naming the value, nothing is resumed and the checkpoint is
 * left as it was; tributary-eval refuses it too. */
START_TEST(test_crafted_checkpoint_refused)
{
    snprintf(scratch, sizeof scratch, "/tmp/test_rl_norm_c_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(scratch));
    const char *a[] = { "--env", "Pendulum-v1", "--observers", "1", "--envs-per-observer", "2", "--steps-per-rollout",
                        "16", "--minibatches", "1", "--epochs", "1", "--norm-obs", "--norm-reward", "--max-updates",
                        "2", "--logdir", scratch, "--quiet", NULL };
    ck_assert_msg(kit_run(TRIB_TRAIN_BIN, a, -1) == 0, "%s", kit_err);   /* no target: the budget ended it */
    struct rl_norm_stats saved, s;
    char path[256];
    int64_t step;
    checkpoint_set(scratch, &saved, path, sizeof path, &step);
    for (size_t k = 0; k < sizeof extremes / sizeof extremes[0]; k++) {
        ck_assert_int_eq(rl_norm_stats_init(&s, 3, true, 10, 10), 0);
        rl_norm_stats_copy(&s, &saved);
        s.obs.count = extremes[k].obs_count;
        s.obs.mean[0] = 0, s.obs.var[0] = extremes[k].obs_var0;
        if (extremes[k].ret_mean != 0) s.ret.mean[0] = extremes[k].ret_mean, s.ret.var[0] = extremes[k].ret_var;
        norm_into_checkpoint(&s, path, step);
        const char *b[] = { "--resume", scratch, "--max-updates", "4", "--quiet", NULL };
        ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, b, -1), 1);
        char want[512];
        snprintf(want, sizeof want, "agent: checkpoint %s: %s\n", path, extremes[k].why);
        ck_assert_msg(strstr(kit_err, want), "'%s' not in:\n%s", want, kit_err);
        ck_assert_msg(strstr(kit_out, "resumed from") == NULL, "%s", kit_out);
        const char *e[] = { TRIB_EVAL_BIN, path, "--episodes", "1", NULL };
        int erc;
        ck_assert(proc_run(e, -1, kit_out, KIT_OUT_CAP, kit_err, KIT_OUT_CAP, &erc) == 0);
        snprintf(want, sizeof want, "%s: %s", path, extremes[k].why);
        ck_assert_msg(erc != 0 && strstr(kit_err, want), "tributary-eval exit %d, '%s' not in:\n%s", erc, want, kit_err);
    }
    /* a set at the count bound loads, but no delta can be merged into it:
     * the observer whose delta would take it past 2^53 is dropped at the
     * merge, naming it, and the run ends as a failure with none left */
    ck_assert_int_eq(rl_norm_stats_init(&s, 3, true, 10, 10), 0);
    rl_norm_stats_copy(&s, &saved);
    s.obs.count = RL_NORM_COUNT_MAX;
    norm_into_checkpoint(&s, path, step);
    const char *b[] = { "--resume", scratch, "--max-updates", "4", "--quiet", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, b, -1), 1);
    ck_assert_msg(strstr(kit_out, "resumed from"), "%s\n%s", kit_out, kit_err);
    ck_assert_msg(strstr(kit_err, "agent: dropping observer1 (alive): norm: merged into the run's set, obs.count 9.0072e+15 "
                              "is more than 2^53; continuing with 0 observers\n"),
                  "%s", kit_err);
    ck_assert_msg(strstr(kit_out, "\"stopped_by\":\"failure\""), "%s", kit_out);
    rl_norm_stats_free(&saved);
}
END_TEST

/* InvertedPendulum-v4 with the mujoco presets' settings (normalised
 * observations and rewards, 64x64 tanh, lr 3e-4 annealed over 300k steps)
 * in mujoco-fast's layout: solved (the mean return of the last 100
 * episodes >= 500) within 300k steps. Asserts the run's summary. */
static void learns(const char *mode)
{
    if (!env_mujoco_available()) {
        fprintf(stderr, "test_rl_norm: learning test skipped: built without MuJoCo\n");
        return;
    }
    const char *a[] = { "--preset", "mujoco-fast", "--env", "InvertedPendulum-v4", "--mode", mode, "--max-steps",
                        "300000", "--stop-at-target", "--target", "500", "--seed", "1", "--device", "cpu",
                        "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, a, -1);
    const char *last = strrchr(kit_out, '{');
    cJSON *j = last ? cJSON_Parse(last) : NULL;
    ck_assert_msg(j != NULL, "no summary: %s %s", kit_out, kit_err);
    const cJSON *solved = cJSON_GetObjectItem(j, "solved"), *ret = cJSON_GetObjectItem(j, "return_mean");
    const cJSON *steps = cJSON_GetObjectItem(j, "env_steps");
    ck_assert_msg(rc == 0 && cJSON_IsTrue(solved), "%s: not solved (exit %d): %s", mode, rc, last);
    ck_assert(cJSON_IsNumber(ret) && ret->valuedouble >= 500);
    ck_assert(cJSON_IsNumber(steps) && steps->valuedouble <= 300000 + 2048);
    cJSON_Delete(j);
}

START_TEST(test_learns_sync) { learns("sync"); }
END_TEST

START_TEST(test_learns_async) { learns("async"); }
END_TEST

/* argv[1] "learning": the learning runs only (ctest test_rl_norm_learning,
 * label "learning"); else the rest. */
static Suite *rl_norm_suite(bool learning)
{
    Suite *s = suite_create("rl_norm");
    TCase *tc;
    if (learning) {
        tc = tcase_create("learning");
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, test_learns_sync);
        tcase_add_test(tc, test_learns_async);
        suite_add_tcase(s, tc);
        return s;
    }
    tc = tcase_create("math");
    tcase_add_test(tc, test_rms_matches_gymnasium);
    tcase_add_test(tc, test_observer_matches_gymnasium);
    tcase_add_test(tc, test_merged_equal_one_process);
    tcase_add_test(tc, test_unpack_refuses);
    tcase_add_test(tc, test_finite_extremes_refused);
    tcase_add_test(tc, test_delta_bounds);
    tcase_add_test(tc, test_bytes_round_trip);
    tcase_add_test(tc, test_frozen_norm_one_rule);
    tcase_add_test(tc, test_config_checks);
    tcase_add_test(tc, test_presets);
    suite_add_tcase(s, tc);
    tc = tcase_create("runs");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_resume_other_norm_refused);
    suite_add_tcase(s, tc);
    tc = tcase_create("members");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, test_hostile_members_sync);
    tcase_add_test(tc, test_hostile_members_async);
    tcase_add_test(tc, test_hostile_gradients_sync);
    tcase_add_test(tc, test_crafted_checkpoint_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    return kit_run_suite(rl_norm_suite(argc > 1 && strcmp(argv[1], "learning") == 0));
}
