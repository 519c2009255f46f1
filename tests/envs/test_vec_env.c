/* vec_env: the batched built-in path against the generic per-env path, the
 * autoreset and truncation semantics against a one-env reference model,
 * statistics, seeding, and errors. */
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/vec_env.h"
#include "kit.h"

static const char *const ids[] = {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1"};

/* Buffers for one vec_env of B envs. */
struct bufs {
    int B, D, A;
    float *obs, *final_obs, *reward, *fact;
    int *iact;
    bool *term, *trunc;
};

static void bufs_init(struct bufs *b, const struct env_spec *s, int B)
{
    b->B = B;
    b->D = s->obs.dim;
    b->A = s->act.kind == SPACE_BOX ? s->act.dim : 1;
    b->obs = calloc((size_t)B * b->D, sizeof(float));
    b->final_obs = calloc((size_t)B * b->D, sizeof(float));
    b->reward = calloc((size_t)B, sizeof(float));
    b->fact = calloc((size_t)B * b->A, sizeof(float));
    b->iact = calloc((size_t)B, sizeof(int));
    b->term = calloc((size_t)B, 1);
    b->trunc = calloc((size_t)B, 1);
}

static void bufs_free(struct bufs *b)
{
    free(b->obs), free(b->final_obs), free(b->reward), free(b->fact), free(b->iact);
    free(b->term), free(b->trunc);
}

static const void *random_actions(const struct env_spec *s, struct bufs *b, uint64_t *rng)
{
    for (int i = 0; i < b->B; i++) {
        if (s->act.kind == SPACE_DISCRETE)
            b->iact[i] = (int)(env_rng_next(rng) % (uint64_t)s->act.n);
        else
            for (int k = 0; k < b->A; k++)
                b->fact[i * b->A + k] = (float)env_rng_uniform(rng, -2.5, 2.5);
    }
    return s->act.kind == SPACE_DISCRETE ? (const void *)b->iact : (const void *)b->fact;
}

/* The batched fast path equals the generic per-env path bit for bit. */
START_TEST(fast_matches_generic)
{
    const struct env_spec *s = env_lookup(ids[_i]);
    const int B = 37;
    struct vec_env *fast = vec_env_new(s, B, 7, 0), *slow = vec_env_new(s, B, 7, VEC_ENV_GENERIC);
    struct bufs f, g;
    bufs_init(&f, s, B);
    bufs_init(&g, s, B);
    vec_env_reset(fast, f.obs);
    vec_env_reset(slow, g.obs);
    ck_assert_mem_eq(f.obs, g.obs, sizeof(float) * (size_t)B * f.D);
    uint64_t rng = 99;
    for (int t = 0; t < 1200; t++) {
        const void *a = random_actions(s, &f, &rng);
        memcpy(g.iact, f.iact, sizeof(int) * B);
        memcpy(g.fact, f.fact, sizeof(float) * (size_t)B * f.A);
        ck_assert_int_eq(vec_env_step(fast, a, f.obs, f.reward, f.term, f.trunc, f.final_obs), 0);
        const void *ag = s->act.kind == SPACE_DISCRETE ? (const void *)g.iact : (const void *)g.fact;
        ck_assert_int_eq(vec_env_step(slow, ag, g.obs, g.reward, g.term, g.trunc, g.final_obs), 0);
        ck_assert_mem_eq(f.obs, g.obs, sizeof(float) * (size_t)B * f.D);
        ck_assert_mem_eq(f.final_obs, g.final_obs, sizeof(float) * (size_t)B * f.D);
        ck_assert_mem_eq(f.reward, g.reward, sizeof(float) * B);
        ck_assert_mem_eq(f.term, g.term, B);
        ck_assert_mem_eq(f.trunc, g.trunc, B);
    }
    struct vec_env_stats sf, sg;
    vec_env_get_stats(fast, &sf);
    vec_env_get_stats(slow, &sg);
    ck_assert_mem_eq(&sf, &sg, sizeof sf);
    ck_assert_int_gt(sf.episodes, 0);
    vec_env_free(fast), vec_env_free(slow);
    bufs_free(&f), bufs_free(&g);
}
END_TEST

/* Stepping the envs in two ranges (vec_env_step_range, as a double-buffered
 * observer does) is one vec_env_step of them all, bit for bit (the
 * statistics' sums aside, whose order differs): the other range's envs
 * wait, their episodes' counters untouched. Out-of-range ranges refused. */
START_TEST(ranges_match_whole)
{
    const struct env_spec *s = env_lookup(ids[_i]);
    const int B = 10, H = 4;   /* ranges 0..3 and 4..9 */
    struct vec_env *whole = vec_env_new(s, B, 7, 0), *parts = vec_env_new(s, B, 7, 0);
    struct bufs f, g;
    bufs_init(&f, s, B);
    bufs_init(&g, s, B);
    vec_env_reset(whole, f.obs);
    vec_env_reset(parts, g.obs);
    uint64_t rng = 99;
    const size_t as = s->act.kind == SPACE_DISCRETE ? sizeof(int) : sizeof(float) * (size_t)f.A;
    for (int t = 0; t < 700; t++) {
        const void *a = random_actions(s, &f, &rng);
        ck_assert_int_eq(vec_env_step(whole, a, f.obs, f.reward, f.term, f.trunc, f.final_obs), 0);
        const int first[2] = { H, 0 }, n[2] = { B - H, H };   /* the second range first: order is free */
        for (int r = 0; r < 2; r++) {
            int b = first[r];
            const void *ab = (const char *)a + (size_t)b * as;
            ck_assert_int_eq(vec_env_step_range(parts, b, n[r], ab, g.obs + (size_t)b * g.D, g.reward + b, g.term + b,
                                                g.trunc + b, g.final_obs + (size_t)b * g.D),
                             0);
        }
        ck_assert_mem_eq(f.obs, g.obs, sizeof(float) * (size_t)B * f.D);
        ck_assert_mem_eq(f.final_obs, g.final_obs, sizeof(float) * (size_t)B * f.D);
        ck_assert_mem_eq(f.reward, g.reward, sizeof(float) * B);
        ck_assert_mem_eq(f.term, g.term, B);
        ck_assert_mem_eq(f.trunc, g.trunc, B);
    }
    struct vec_env_stats sf, sg;
    vec_env_get_stats(whole, &sf);
    vec_env_get_stats(parts, &sg);
    ck_assert_int_eq(sf.steps, sg.steps);
    ck_assert_int_eq(sf.episodes, sg.episodes);
    ck_assert_int_eq(sf.length_sum, sg.length_sum);
    ck_assert_int_gt(sf.episodes, 0);
    for (int i = 0; i < B; i++) ck_assert_int_eq(vec_env_episode_length(whole, i), vec_env_episode_length(parts, i));
    ck_assert_int_eq(vec_env_step_range(parts, 8, 3, f.iact, g.obs, g.reward, g.term, g.trunc, NULL), -1);
    ck_assert_ptr_nonnull(strstr(env_last_error(), "envs 8..10 of 10"));
    ck_assert_int_eq(vec_env_step_range(parts, -1, 2, f.iact, g.obs, g.reward, g.term, g.trunc, NULL), -1);
    ck_assert_int_eq(vec_env_step_range(parts, 0, 0, f.iact, g.obs, g.reward, g.term, g.trunc, NULL), -1);
    vec_env_free(whole), vec_env_free(parts);
    bufs_free(&f), bufs_free(&g);
}
END_TEST

/* Every env of a vec_env behaves as one env driven by hand: same RNG stream,
 * same step results, final observation in final_obs, reset observation in
 * obs, truncation at max_episode_steps; and the statistics add up. */
START_TEST(autoreset_matches_reference)
{
    const struct env_spec *s = env_lookup(ids[_i]);
    const int B = 8, T = 700;
    const uint64_t seed = 1234;
    struct vec_env *v = vec_env_new(s, B, seed, 0);
    struct bufs b;
    bufs_init(&b, s, B);
    const int D = b.D;
    char *ref = calloc((size_t)B, s->state_size);
    uint64_t *rrng = calloc((size_t)B, sizeof *rrng);
    int *len = calloc((size_t)B, sizeof *len);
    double *ret = calloc((size_t)B, sizeof *ret);
    float *robs = calloc((size_t)B * D, sizeof(float));
    for (int i = 0; i < B; i++) {
        rrng[i] = env_rng_seed(seed, (uint64_t)i);
        s->reset(ref + (size_t)i * s->state_size, &rrng[i], robs + i * D);
    }
    vec_env_reset(v, b.obs);
    ck_assert_mem_eq(b.obs, robs, sizeof(float) * (size_t)B * D);
    uint64_t rng = 5, episodes = 0, len_sum = 0;
    double ret_sum = 0, ret_min = INFINITY, ret_max = -INFINITY;
    int len_min = 1 << 30, len_max = 0, n_trunc = 0;
    for (int t = 0; t < T; t++) {
        const void *a = random_actions(s, &b, &rng);
        for (int i = 0; i < B * D; i++)
            b.final_obs[i] = NAN;  /* rows of envs that go on stay untouched */
        ck_assert_int_eq(vec_env_step(v, a, b.obs, b.reward, b.term, b.trunc, b.final_obs), 0);
        for (int i = 0; i < B; i++) {
            const char *ai = (const char *)a + (size_t)i * (s->act.kind == SPACE_DISCRETE
                                                               ? sizeof(int) : sizeof(float) * b.A);
            float o[8], r;
            bool term;
            void *st = ref + (size_t)i * s->state_size;
            s->step(st, ai, o, &r, &term);
            len[i]++;
            ret[i] += r;
            bool trunc = len[i] >= s->max_episode_steps;
            ck_assert(b.reward[i] == r);
            ck_assert_int_eq(b.term[i], term);
            ck_assert_int_eq(b.trunc[i], trunc);
            if (term || trunc) {
                ck_assert_mem_eq(b.final_obs + i * D, o, sizeof(float) * D);
                double lr;
                int ll;
                ck_assert_int_eq(vec_env_last_episode(v, i, &lr, &ll), 0);
                ck_assert(lr == ret[i]);
                ck_assert_int_eq(ll, len[i]);
                episodes++;
                len_sum += (uint64_t)len[i];
                ret_sum += ret[i];
                ret_min = fmin(ret_min, ret[i]);
                ret_max = fmax(ret_max, ret[i]);
                len_min = len[i] < len_min ? len[i] : len_min;
                len_max = len[i] > len_max ? len[i] : len_max;
                n_trunc += trunc;
                s->reset(st, &rrng[i], o);
                len[i] = 0;
                ret[i] = 0;
            } else {
                for (int k = 0; k < D; k++)
                    ck_assert(isnan(b.final_obs[i * D + k]));
            }
            ck_assert_mem_eq(b.obs + i * D, o, sizeof(float) * D);
            ck_assert_int_eq(vec_env_episode_length(v, i), len[i]);
            ck_assert(vec_env_episode_return(v, i) == ret[i]);
        }
    }
    struct vec_env_stats st;
    vec_env_get_stats(v, &st);
    ck_assert_uint_eq(st.steps, (uint64_t)B * T);
    ck_assert_uint_eq(st.episodes, episodes);
    ck_assert_uint_gt(episodes, 0);
    ck_assert_uint_eq(st.length_sum, len_sum);
    ck_assert_int_eq(st.length_min, len_min);
    ck_assert_int_eq(st.length_max, len_max);
    ck_assert(fabs(st.return_sum - ret_sum) <= 1e-9 * fabs(ret_sum));
    ck_assert(st.return_min == ret_min && st.return_max == ret_max);
    if (_i == 3) { /* Pendulum never terminates: every episode is 200 steps, truncated */
        ck_assert_uint_eq(episodes, (uint64_t)B * (T / 200));
        ck_assert_int_eq(n_trunc, (int)episodes);
        ck_assert_int_eq(len_min, 200);
        ck_assert_int_eq(len_max, 200);
    }
    vec_env_clear_stats(v);
    vec_env_get_stats(v, &st);
    ck_assert_uint_eq(st.episodes, 0);
    ck_assert_uint_eq(st.steps, 0);
    vec_env_free(v);
    bufs_free(&b);
    free(ref), free(rrng), free(len), free(ret), free(robs);
}
END_TEST

/* A counter env: terminates when its count reaches its target (2 or 3);
 * with max_episode_steps 3 both flags can come at once. Not a built-in, so
 * it also exercises the generic path and padded state slots. */
struct counter { int count, target; char pad[5]; };
static const double cobs_lo[1] = {0}, cobs_hi[1] = {10};
static void counter_reset(void *st, uint64_t *rng, float *obs)
{
    struct counter *c = st;
    c->count = 0;
    c->target = 2 + (int)(env_rng_next(rng) & 1);
    obs[0] = 100.0f + (float)c->target;
}
static void counter_step(void *st, const void *a, float *obs, float *r, bool *term)
{
    struct counter *c = st;
    c->count += *(const int *)a;
    obs[0] = (float)c->count;
    *r = 0.5f;
    *term = c->count >= c->target;
}
static const struct env_spec counter_spec = {
    .id = "Counter-v0",
    .obs = {.kind = SPACE_BOX, .dim = 1, .low = cobs_lo, .high = cobs_hi},
    .act = {.kind = SPACE_DISCRETE, .n = 2},
    .max_episode_steps = 3,
    .state_size = sizeof(struct counter),
    .reset = counter_reset,
    .step = counter_step,
};

START_TEST(terminated_and_truncated_together)
{
    const int B = 64;
    struct vec_env *v = vec_env_new(&counter_spec, B, 3, 0);
    struct bufs b;
    bufs_init(&b, &counter_spec, B);
    vec_env_reset(v, b.obs);
    int targets[64];
    for (int i = 0; i < B; i++) {
        targets[i] = (int)b.obs[i] - 100;
        ck_assert(targets[i] == 2 || targets[i] == 3);
        b.iact[i] = 1;
    }
    for (int t = 1; t <= 3; t++) {
        ck_assert_int_eq(vec_env_step(v, b.iact, b.obs, b.reward, b.term, b.trunc, b.final_obs), 0);
        for (int i = 0; i < B; i++) {
            if (targets[i] == 2 && t == 2) {
                ck_assert(b.term[i] && !b.trunc[i]);
                ck_assert(b.final_obs[i] == 2.0f && b.obs[i] >= 102.0f);
            } else if (targets[i] == 3 && t == 3) {
                ck_assert(b.term[i] && b.trunc[i]);   /* both, as Gymnasium's TimeLimit */
                ck_assert(b.final_obs[i] == 3.0f && b.obs[i] >= 102.0f);
            } else if (targets[i] == 2 && t == 3) {
                ck_assert(!b.term[i] && !b.trunc[i]); /* new episode, first step */
                ck_assert(b.obs[i] == 1.0f);
            } else {
                ck_assert(!b.term[i] && !b.trunc[i]);
                ck_assert(b.obs[i] == (float)t);
            }
        }
    }
    /* action 0 never terminates: truncation alone after 3 steps */
    vec_env_reset(v, b.obs);
    memset(b.iact, 0, sizeof(int) * B);
    for (int t = 1; t <= 3; t++) {
        ck_assert_int_eq(vec_env_step(v, b.iact, b.obs, b.reward, b.term, b.trunc, NULL), 0);
        for (int i = 0; i < B; i++)
            ck_assert(!b.term[i] && b.trunc[i] == (t == 3));
    }
    double r;
    int l;
    ck_assert_int_eq(vec_env_last_episode(v, 0, &r, &l), 0);
    ck_assert(r == 1.5 && l == 3);
    vec_env_free(v);
    bufs_free(&b);
}
END_TEST

START_TEST(seeds)
{
    const struct env_spec *s = env_lookup("CartPole-v1");
    const int B = 16;
    struct vec_env *a = vec_env_new(s, B, 11, 0), *b = vec_env_new(s, B, 11, 0),
                   *c = vec_env_new(s, B, 12, 0);
    struct bufs x, y, z;
    bufs_init(&x, s, B), bufs_init(&y, s, B), bufs_init(&z, s, B);
    vec_env_reset(a, x.obs), vec_env_reset(b, y.obs), vec_env_reset(c, z.obs);
    ck_assert_mem_eq(x.obs, y.obs, sizeof(float) * B * 4);
    ck_assert(memcmp(x.obs, z.obs, sizeof(float) * B * 4) != 0);
    for (int i = 0; i < B; i++)   /* envs of one vec_env start apart */
        for (int j = 0; j < i; j++)
            ck_assert(memcmp(x.obs + 4 * i, x.obs + 4 * j, sizeof(float) * 4) != 0);
    uint64_t rng = 1;
    for (int t = 0; t < 300; t++) {
        random_actions(s, &x, &rng);
        vec_env_step(a, x.iact, x.obs, x.reward, x.term, x.trunc, NULL);
        vec_env_step(b, x.iact, y.obs, y.reward, y.term, y.trunc, NULL);
        vec_env_step(c, x.iact, z.obs, z.reward, z.term, z.trunc, NULL);
        ck_assert_mem_eq(x.obs, y.obs, sizeof(float) * B * 4);
    }
    ck_assert(memcmp(x.obs, z.obs, sizeof(float) * B * 4) != 0);
    struct vec_env_stats sa, sc;
    vec_env_get_stats(a, &sa);
    vec_env_get_stats(c, &sc);
    ck_assert(sa.return_sum != sc.return_sum || sa.episodes != sc.episodes);
    vec_env_free(a), vec_env_free(b), vec_env_free(c);
    bufs_free(&x), bufs_free(&y), bufs_free(&z);
}
END_TEST

/* vec_env_reseed(v, seed, first): v's envs start as envs first.. of one
 * vec_env of them all (evaluation's waves). */
START_TEST(reseed)
{
    const struct env_spec *s = env_lookup("CartPole-v1");
    const int B = 4, ALL = 12;
    struct vec_env *all = vec_env_new(s, ALL, 11, 0), *w = vec_env_new(s, B, 99, 0);
    struct bufs x, y;
    bufs_init(&x, s, ALL), bufs_init(&y, s, B);
    vec_env_reset(all, x.obs);
    for (int first = 0; first < ALL; first += B) {
        vec_env_reseed(w, 11, first);
        vec_env_reset(w, y.obs);
        ck_assert_mem_eq(y.obs, x.obs + 4 * first, sizeof(float) * B * 4);
    }
    vec_env_free(all), vec_env_free(w);
    bufs_free(&x), bufs_free(&y);
}
END_TEST

START_TEST(errors)
{
    const struct env_spec *s = env_lookup("Acrobot-v1");
    ck_assert_ptr_null(vec_env_new(s, 0, 1, 0));
    ck_assert_str_eq(env_last_error(), "vec_env_new: num_envs must be >= 1 (got 0)");
    struct env_spec bad = *s;
    bad.step = NULL;
    ck_assert_ptr_null(vec_env_new(&bad, 4, 1, 0));
    ck_assert_str_eq(env_last_error(), "vec_env_new: step function is NULL");
    bad = *s;
    bad.state_size = SIZE_MAX / 2;   /* 4 slots overflow */
    ck_assert_ptr_null(vec_env_new(&bad, 4, 1, 0));
    ck_assert_str_eq(env_last_error(),
                     "vec_env_new: 4 envs of state_size 9223372036854775807 overflow the address space");
    bad.state_size = SIZE_MAX;       /* rounding one slot up to 16 bytes wraps */
    ck_assert_ptr_null(vec_env_new(&bad, 1, 1, 0));
    ck_assert_str_eq(env_last_error(),
                     "vec_env_new: 1 envs of state_size 18446744073709551615 overflow the address space");
    struct vec_env *v = vec_env_new(s, 4, 1, 0);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_eq(vec_env_spec(v), s);
    ck_assert_int_eq(vec_env_num_envs(v), 4);
    struct bufs b;
    bufs_init(&b, s, 4);
    ck_assert_int_eq(vec_env_step(v, b.iact, b.obs, b.reward, b.term, b.trunc, NULL), -1);
    ck_assert_str_eq(env_last_error(), "vec_env_step: called before vec_env_reset");
    vec_env_reset(v, b.obs);
    float before[24];
    memcpy(before, b.obs, sizeof before);
    b.iact[2] = 3;
    ck_assert_int_eq(vec_env_step(v, b.iact, b.obs, b.reward, b.term, b.trunc, NULL), -1);
    ck_assert_str_eq(env_last_error(), "vec_env_step: action 3 of env 2 is out of range [0, 3)");
    b.iact[2] = -1;
    ck_assert_int_eq(vec_env_step(v, b.iact, b.obs, b.reward, b.term, b.trunc, NULL), -1);
    ck_assert_str_eq(env_last_error(), "vec_env_step: action -1 of env 2 is out of range [0, 3)");
    ck_assert_mem_eq(b.obs, before, sizeof before);
    ck_assert_int_eq(vec_env_last_episode(v, 0, NULL, NULL), -1);
    vec_env_free(v);
    vec_env_free(NULL);
    bufs_free(&b);
}
END_TEST

/* A vec_env restored from vec_env_save continues exactly as the original:
 * observations, rewards, dones and statistics, across autoresets. */
START_TEST(save_and_load)
{
    const struct env_spec *spec = env_lookup("CartPole-v1");
    enum { B = 8, STEPS = 300 };
    struct vec_env *a = vec_env_new(spec, B, 42, 0), *b = vec_env_new(spec, B, 7, 0);
    float oa[B * 4], ob[B * 4], ra[B], rb[B];
    bool ta[B], tb[B], ua[B], ub[B];
    int act[B];
    vec_env_reset(a, oa);
    for (int t = 0; t < 37; t++) {
        for (int i = 0; i < B; i++) act[i] = (t + i) % 2;
        ck_assert_int_eq(vec_env_step(a, act, oa, ra, ta, ua, NULL), 0);
    }
    unsigned char *buf;
    size_t len;
    ck_assert_int_eq(vec_env_save(a, &buf, &len), 0);
    ck_assert_int_eq(vec_env_load(b, buf, len), 0);
    memcpy(ob, oa, sizeof oa);
    int finished = 0;
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < B; i++) act[i] = (t * 3 + i) % 2;
        ck_assert_int_eq(vec_env_step(a, act, oa, ra, ta, ua, NULL), 0);
        ck_assert_int_eq(vec_env_step(b, act, ob, rb, tb, ub, NULL), 0);
        ck_assert(memcmp(oa, ob, sizeof oa) == 0 && memcmp(ra, rb, sizeof ra) == 0);
        ck_assert(memcmp(ta, tb, sizeof ta) == 0 && memcmp(ua, ub, sizeof ua) == 0);
        for (int i = 0; i < B; i++) finished += ta[i] || ua[i];
    }
    ck_assert_int_gt(finished, B);   /* autoresets happened after the restore */
    struct vec_env_stats sa, sb;
    vec_env_get_stats(a, &sa);
    vec_env_get_stats(b, &sb);
    ck_assert(memcmp(&sa, &sb, sizeof sa) == 0);
    /* a different size or env is refused, naming both */
    struct vec_env *c = vec_env_new(spec, B + 1, 1, 0), *d = vec_env_new(env_lookup("Acrobot-v1"), B, 1, 0);
    ck_assert_int_eq(vec_env_load(c, buf, len), -1);
    ck_assert_str_eq(env_last_error(),
                     "vec_env_load: saved 8 envs of CartPole-v1 (state 40 bytes), this is 9 of CartPole-v1 (40 bytes)");
    ck_assert_int_eq(vec_env_load(d, buf, len), -1);
    ck_assert_int_eq(vec_env_load(a, buf, len - 1), -1);
    ck_assert_str_eq(env_last_error(), "vec_env_load: 735 bytes, expected 736");
    /* an episode length from a crafted checkpoint: INT_MAX was a signed
     * overflow at the next step, a negative one an episode never truncated */
    size_t el_off = len - sizeof(struct vec_env_stats) - B * (sizeof(int) + 2 * sizeof(double) + sizeof(int));
    int bad[] = { INT_MAX, -5, 501 };
    for (int k = 0; k < 3; k++) {
        unsigned char *crafted = malloc(len);
        memcpy(crafted, buf, len);
        memcpy(crafted + el_off + 3 * sizeof(int), &bad[k], sizeof(int));
        ck_assert_int_eq(vec_env_load(b, crafted, len), -1);
        char want[128];
        int last;
        memcpy(&last, buf + len - sizeof(struct vec_env_stats) - B * sizeof(int) + 3 * sizeof(int), sizeof last);
        snprintf(want, sizeof want, "vec_env_load: env 3: episode length %d or last length %d outside 0..500", bad[k],
                 last);
        ck_assert_str_eq(env_last_error(), want);
        free(crafted);
    }
    /* a number that is not finite: the state (get_state's values, named
     * for a built-in), a return, the statistics; refused naming the env
     * and the field, and b left as it was */
    size_t ret_off = el_off + B * sizeof(int), last_off = ret_off + B * sizeof(double);
    size_t states_off = el_off - B * sizeof(uint64_t) - B * spec->state_size;
    size_t stats_off = len - sizeof(struct vec_env_stats);
    struct {
        size_t off;
        double v;
        const char *want;
    } nf[] = {
        { states_off + 1 * spec->state_size + 1 * sizeof(double), NAN,
          "vec_env_load: env 1 of CartPole-v1: state[1] (x_dot) is nan" },
        { states_off + 7 * spec->state_size + 3 * sizeof(double), -INFINITY,
          "vec_env_load: env 7 of CartPole-v1: state[3] (theta_dot) is -inf" },
        { ret_off + 4 * sizeof(double), INFINITY,
          "vec_env_load: env 4 of CartPole-v1: the return of its episode in progress is inf" },
        { last_off + 2 * sizeof(double), NAN, "vec_env_load: env 2 of CartPole-v1: its last episode's return is nan" },
        { stats_off + offsetof(struct vec_env_stats, return_max), INFINITY,
          "vec_env_load: CartPole-v1's statistics: return_max is inf" },
    };
    unsigned char *b0, *b1;
    size_t l0, l1;
    ck_assert_int_eq(vec_env_save(b, &b0, &l0), 0);
    for (size_t k = 0; k < sizeof nf / sizeof nf[0]; k++) {
        unsigned char *crafted = malloc(len);
        memcpy(crafted, buf, len);
        memcpy(crafted + nf[k].off, &nf[k].v, sizeof(double));
        ck_assert_int_eq(vec_env_load(b, crafted, len), -1);
        ck_assert_str_eq(env_last_error(), nf[k].want);
        free(crafted);
    }
    ck_assert_int_eq(vec_env_save(b, &b1, &l1), 0);
    ck_assert(l0 == l1 && memcmp(b0, b1, l0) == 0);
    free(b0);
    free(b1);
    free(buf);
    vec_env_free(a);
    vec_env_free(b);
    vec_env_free(c);
    vec_env_free(d);
}
END_TEST

static Suite *vec_env_suite(void)
{
    Suite *s = suite_create("vec_env");
    TCase *tc = tcase_create("paths");
    tcase_add_loop_test(tc, fast_matches_generic, 0, 4);
    tcase_add_loop_test(tc, autoreset_matches_reference, 0, 4);
    tcase_add_loop_test(tc, ranges_match_whole, 0, 4);
    suite_add_tcase(s, tc);
    tc = tcase_create("semantics");
    tcase_add_test(tc, terminated_and_truncated_together);
    tcase_add_test(tc, seeds);
    tcase_add_test(tc, reseed);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, save_and_load);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return kit_run_suite(vec_env_suite());
}
