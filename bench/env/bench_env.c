/* bench_env: steps/s of a single-thread vec_env (B = 1024, float32
 * observations out, autoreset on) for each built-in. Random actions are drawn
 * INSIDE the timed loop with a cheap LCG (one multiply-add per env), so the
 * figure includes action generation. Best of several repeats is reported,
 * since the machine is shared.
 * --generic times the per-env function-pointer path instead of the batched one.
 * --step-times: instead, the CPU time of each step of ONE env (B = 1) over
 * --seconds of random actions: mean and quantiles, and the steps that ended
 * an episode (the autoreset inside) apart, since a MuJoCo step's cost varies
 * with its contacts and with resets.
 * A MuJoCo v4 env runs with B = 8 unless --B is given (each env holds an
 * mjData of up to a few MB); its line also carries the reference
 * figure (env steps/s on one core, measured with Gymnasium's call order).
 *   bench_env [--B N] [--seconds S] [--repeats R] [--generic] [--step-times] [ENV...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "envs/vec_env.h"

static double run_once(struct vec_env *v, const struct env_spec *s, int B, double seconds,
                       uint64_t *lcg, float *obs, float *reward, bool *term, bool *trunc,
                       int *iact, float *fact, double *per_cpu_s)
{
    const bool discrete = s->act.kind == SPACE_DISCRETE;
    const uint32_t n = discrete ? (uint32_t)s->act.n : 0;
    const float lo = discrete ? 0.0f : (float)s->act.low[0];
    const float span = discrete ? 0.0f : (float)(s->act.high[0] - s->act.low[0]);
    uint64_t x = *lcg, steps = 0;
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    double t0 = trib_now_s(), t;
    do {
        for (int k = 0; k < 64; k++) {
            if (discrete) {
                for (int i = 0; i < B; i++) {
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    iact[i] = (int)(((x >> 32) * n) >> 32);
                }
            } else {
                for (int i = 0; i < B * s->act.dim; i++) {
                    x = x * 6364136223846793005ull + 1442695040888963407ull;
                    fact[i] = lo + span * (float)(x >> 40) * 0x1.0p-24f;
                }
            }
            vec_env_step(v, discrete ? (const void *)iact : (const void *)fact, obs, reward, term,
                         trunc, NULL);
            steps += (uint64_t)B;
        }
        t = trib_now_s() - t0;
    } while (t < seconds);
    *lcg = x;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    *per_cpu_s = cpu > 0 ? (double)steps / cpu : 0;
    return (double)steps / t;
}

static double cpu_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The thread-CPU time of each step of one env of s (random actions) over
 * `seconds`, up to `cap` steps, into dt (microseconds); ended[i]: step i
 * finished an episode (its autoreset included). Returns the steps taken. */
static int time_steps(const struct env_spec *s, double seconds, int cap, double *dt, bool *ended)
{
    struct vec_env *v = vec_env_new(s, 1, 1, 0);
    if (!v) return -1;
    float *obs = malloc(sizeof(float) * (size_t)s->obs.dim), reward, fact[64];
    bool term, trunc;
    int iact, n = 0, adim = s->act.kind == SPACE_BOX ? s->act.dim : 1;
    uint64_t x = 12345;
    vec_env_reset(v, obs);
    double t_end = trib_now_s() + seconds;
    while (n < cap && adim <= 64 && (n % 64 || trib_now_s() < t_end)) {
        for (int i = 0; i < adim; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            if (s->act.kind == SPACE_DISCRETE) iact = (int)(((x >> 32) * (uint32_t)s->act.n) >> 32);
            else fact[i] = (float)s->act.low[i] + (float)(s->act.high[i] - s->act.low[i]) * (float)(x >> 40) * 0x1.0p-24f;
        }
        double c0 = cpu_now_s();
        vec_env_step(v, s->act.kind == SPACE_DISCRETE ? (const void *)&iact : (const void *)fact, obs, &reward, &term,
                     &trunc, NULL);
        dt[n] = 1e6 * (cpu_now_s() - c0);
        ended[n++] = term || trunc;
    }
    vec_env_free(v);
    free(obs);
    return n;
}

/* q-quantile of the sorted a[n] (nearest rank). */
static double quantile(const double *a, int n, double q)
{
    int k = (int)(q * n);
    return a[k < n ? k : n - 1];
}

/* --step-times: one JSON line for s. */
static int step_times(const struct env_spec *s, double seconds)
{
    enum { CAP = 2000000 };
    double *dt = malloc(sizeof(double) * CAP), sum = 0, rsum = 0, load = -1;
    bool *ended = malloc(CAP);
    int n = time_steps(s, seconds, CAP, dt, ended), nr = 0;
    if (n < 1) {
        fprintf(stderr, "bench_env: %s: %s\n", s->id, n < 0 ? env_last_error() : "no step timed");
        free(dt), free(ended);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        sum += dt[i];
        if (ended[i]) rsum += dt[i], nr++;
    }
    qsort(dt, (size_t)n, sizeof *dt, cmp_double);
    FILE *la = fopen("/proc/loadavg", "r");
    if (la && fscanf(la, "%lf", &load) != 1) load = -1;
    if (la) fclose(la);
    printf("{\"bench\":\"env_step_times\",\"env\":\"%s\",\"steps\":%d,\"clock\":\"thread CPU\",\"mean_us\":%.2f,"
           "\"p10_us\":%.2f,\"p50_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f,\"max_us\":%.2f,\"episodes\":%d,"
           "\"episode_end_mean_us\":%.2f,\"other_mean_us\":%.2f,\"loadavg_1min\":%.2f}\n",
           s->id, n, sum / n, quantile(dt, n, 0.1), quantile(dt, n, 0.5), quantile(dt, n, 0.9), quantile(dt, n, 0.99),
           dt[n - 1], nr, nr ? rsum / nr : 0.0, n > nr ? (sum - rsum) / (n - nr) : 0.0, load);
    fflush(stdout);
    free(dt), free(ended);
    return 0;
}

int main(int argc, char **argv)
{
    int B = 1024, repeats = 5, B_given = 0;
    unsigned flags = 0;
    bool times = false;
    double seconds = 0.4;
    const char *only[8];
    int nonly = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--B") && i + 1 < argc)
            B = atoi(argv[++i]), B_given = 1;
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc)
            repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--generic"))
            flags = VEC_ENV_GENERIC;
        else if (!strcmp(argv[i], "--step-times"))
            times = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: bench_env [--B N] [--seconds S] [--repeats R] [--generic] [--step-times] [ENV...]\n");
            return 0;
        } else if (!env_lookup(argv[i])) {   /* a typo must not print nothing, exit 0 */
            fprintf(stderr, "bench_env: %s\n", env_last_error());
            return 2;
        } else if (nonly < 8) {
            only[nonly++] = argv[i];
        }
    }
    if (B < 1 || repeats < 1 || seconds <= 0) {
        fprintf(stderr, "bench_env: bad --B/--seconds/--repeats\n");
        return 2;
    }
    /* The table: env steps/s/core of Gymnasium's v4 envs. */
    static const struct { const char *id; double sps; } reference[] = {
        {"HalfCheetah-v4", 36e3}, {"Hopper-v4", 16e3}, {"Walker2d-v4", 11e3},
        {"Ant-v4", 4.8e3}, {"Humanoid-v4", 3.9e3}, {"InvertedPendulum-v4", 61e3},
    };
    const int B_all = B;
    for (int e = 0; e < env_builtin_count(); e++) {
        const char *id = env_builtin_id(e);
        bool wanted = nonly == 0;
        for (int k = 0; k < nonly; k++)
            wanted |= !strcmp(only[k], id);
        if (!wanted)
            continue;
        const struct env_spec *s = env_builtin(e);
        if (!s) {   /* a MuJoCo env that failed to load: say so, go on */
            fprintf(stderr, "bench_env: %s\n", env_last_error());
            continue;
        }
        if (times) {
            step_times(s, seconds);
            continue;
        }
        bool mujoco = s->abi_version >= 2 && s->model != NULL;
        B = mujoco && !B_given ? 8 : B_all;
        struct vec_env *v = vec_env_new(s, B, 1, flags);
        if (!v) {
            fprintf(stderr, "bench_env: %s: %s\n", id, env_last_error());
            continue;
        }
        float *obs = malloc(sizeof(float) * (size_t)B * s->obs.dim);
        float *reward = malloc(sizeof(float) * (size_t)B);
        float *fact = malloc(sizeof(float) * (size_t)B * (size_t)(s->act.kind == SPACE_BOX ? s->act.dim : 1));
        int *iact = malloc(sizeof(int) * (size_t)B);
        bool *term = malloc((size_t)B), *trunc = malloc((size_t)B);
        uint64_t lcg = 12345;
        vec_env_reset(v, obs);
        double cps, best_cpu = 0;
        run_once(v, s, B, 0.1, &lcg, obs, reward, term, trunc, iact, fact, &cps); /* warm up */
        double best = 0;
        for (int r = 0; r < repeats; r++) {
            double sps = run_once(v, s, B, seconds, &lcg, obs, reward, term, trunc, iact, fact, &cps);
            best = sps > best ? sps : best;
            best_cpu = cps > best_cpu ? cps : best_cpu;
        }
        struct vec_env_stats st;
        vec_env_get_stats(v, &st);
        char ref[160] = "";
        for (size_t k = 0; k < sizeof reference / sizeof reference[0]; k++)
            if (!strcmp(reference[k].id, s->id))
                snprintf(ref, sizeof ref, ",\"issue_steps_per_s_per_core\":%.0f", reference[k].sps);
        double load = 0;
        FILE *la = mujoco ? fopen("/proc/loadavg", "r") : NULL;
        if (la) {
            if (fscanf(la, "%lf", &load) != 1) load = -1;
            fclose(la);
            snprintf(ref + strlen(ref), sizeof ref - strlen(ref),
                     ",\"steps_per_cpu_s\":%.0f,\"loadavg_1min\":%.2f", best_cpu, load);
        }
        printf("{\"bench\":\"env\",\"env\":\"%s\",\"B\":%d,\"steps_per_s_per_core\":%.0f,"
               "\"path\":\"%s\",\"repeats\":%d,\"episodes\":%llu,"
               "\"actions\":\"random, in timed loop\"%s}\n",
               s->id, B, best, flags || s->create ? "generic" : "batched",   /* a simulator steps env by env */
               repeats, (unsigned long long)st.episodes,
               ref);
        fflush(stdout);
        vec_env_free(v);
        free(obs), free(reward), free(fact), free(iact), free(term), free(trunc);
    }
    return 0;
}
