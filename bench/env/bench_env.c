/* bench_env: steps/s of a single-thread vec_env (B = 1024, float32
 * observations out, autoreset on) for each built-in. Random actions are drawn
 * INSIDE the timed loop with a cheap LCG (one multiply-add per env), so the
 * figure includes action generation. Best of several repeats is reported,
 * since the machine is shared.
 * --generic times the per-env function-pointer path instead of the batched one.
 * A MuJoCo v4 env runs with B = 8 unless --B is given (each env holds an
 * mjData of up to a few MB); its line also carries the reference
 * figure (env steps/s on one core, measured with Gymnasium's call order).
 *   bench_env [--B N] [--seconds S] [--repeats R] [--generic] [ENV...] */
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

int main(int argc, char **argv)
{
    int B = 1024, repeats = 5, B_given = 0;
    unsigned flags = 0;
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
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: bench_env [--B N] [--seconds S] [--repeats R] [--generic] [ENV...]\n");
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
