/* trib-env: run any env (built-in id or plug-in .so) with random or scripted
 * actions and print episode statistics and steps/s; for checking a plug-in
 * before training on it. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "envs/mujoco/mujoco_envs.h"
#include "envs/plugin.h"
#include "envs/vec_env.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: trib-env [options] ENV      (or --env ENV)\n"
            "Run ENV (a built-in id or a path to a plug-in .so exporting tributary_env)\n"
            "and print episode statistics and steps/s.\n\n"
            "      --env ENV          the env, instead of the positional argument\n"
            "  -e, --episodes N       stop after N finished episodes (default 10)\n"
            "  -t, --steps N          stop after N env steps in all (default: no limit)\n"
            "  -n, --num-envs B       step B envs together in a vec_env (default 1)\n"
            "  -s, --seed S           RNG seed for resets and random actions (default 0)\n"
            "  -a, --actions LIST     scripted actions, comma/space separated, used in turn\n"
            "                         and cycled (a box action takes act.dim numbers)\n"
            "  -f, --actions-file F   the same, read from file F\n"
            "  -j, --json             print one JSON line instead of text\n"
            "  -l, --list             list the built-in envs and exit\n"
            "  -h, --help             this help\n\n"
            "Without --actions the actions are uniform random (box: within low/high,\n"
            "or [-1, 1] where a bound is infinite). Built-ins: CartPole-v1, Acrobot-v1,\n"
            "MountainCar-v0, Pendulum-v1 and, in a build with MuJoCo, the Gymnasium v4\n"
            "suite (HalfCheetah-v4, Hopper-v4, ...; see --list).\n");
}

static int parse_long(const char *s, const char *what, long lo, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo) {
        fprintf(stderr, "trib-env: %s must be an integer >= %ld (got '%s')\n", what, lo, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Parse numbers separated by commas/whitespace; returns the count or -1. */
static long parse_numbers(const char *text, double **out)
{
    long n = 0, cap = 16;
    double *v = malloc((size_t)cap * sizeof *v);
    const char *p = text;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *end;
        double x = strtod(p, &end);
        if (end == p) {
            fprintf(stderr, "trib-env: bad action '%.20s' (expected a number)\n", p);
            free(v);
            return -1;
        }
        if (n == cap)
            v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[n++] = x;
        p = end;
    }
    *out = v;
    return n;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "trib-env: cannot open actions file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    if (ferror(f)) {   /* a directory, an I/O error: not "no actions" */
        fprintf(stderr, "trib-env: cannot read actions file %s: %s\n", path, strerror(errno));
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* Print s as a JSON string: quotes, backslashes and control characters escaped
 * (a plug-in's id may hold any of them). */
static void print_json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* x as a JSON number, or null when it is NaN or infinite (which JSON lacks). */
static const char *json_number(char buf[32], double x)
{
    if (!isfinite(x))
        return "null";
    snprintf(buf, 32, "%.17g", x);
    return buf;
}

int main(int argc, char **argv)
{
    long episodes = 10, max_steps = -1, num_envs = 1, seed = 0;
    const char *actions_arg = NULL, *actions_file = NULL, *env_name = NULL;
    bool json = false;
    static const struct option opts[] = {
        {"episodes", required_argument, 0, 'e'}, {"steps", required_argument, 0, 't'},
        {"num-envs", required_argument, 0, 'n'}, {"seed", required_argument, 0, 's'},
        {"actions", required_argument, 0, 'a'},  {"actions-file", required_argument, 0, 'f'},
        {"json", no_argument, 0, 'j'},           {"list", no_argument, 0, 'l'},
        {"help", no_argument, 0, 'h'},           {"env", required_argument, 0, 'E'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "e:t:n:s:a:f:jlh", opts, NULL)) != -1) {
        switch (c) {
        case 'e': if (parse_long(optarg, "--episodes", 1, &episodes) < 0) return 2; break;
        case 't': if (parse_long(optarg, "--steps", 1, &max_steps) < 0) return 2; break;
        case 'n': if (parse_long(optarg, "--num-envs", 1, &num_envs) < 0) return 2; break;
        case 's': if (parse_long(optarg, "--seed", 0, &seed) < 0) return 2; break;
        case 'a': actions_arg = optarg; break;
        case 'E': env_name = optarg; break;
        case 'f': actions_file = optarg; break;
        case 'j': json = true; break;
        case 'l': {
            /* every built-in id; the MuJoCo suite's marked (and, in a build
             * without MuJoCo, listed as left out) */
            static const char *const mujoco_ids[MJ_SUITE_COUNT] = {MJ_SUITE_IDS};
            for (int i = 0; i < env_builtin_count(); i++) {
                bool mj = false;
                for (int k = 0; k < MJ_SUITE_COUNT; k++)
                    mj |= strcmp(env_builtin_id(i), mujoco_ids[k]) == 0;
                printf("%s%s\n", env_builtin_id(i), mj ? "  (MuJoCo)" : "");
            }
            if (!env_mujoco_available())
                for (int k = 0; k < MJ_SUITE_COUNT; k++)
                    printf("%s  (MuJoCo; not in this build)\n", mujoco_ids[k]);
            return 0;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!env_name && optind == argc - 1)
        env_name = argv[optind++];
    if (!env_name || optind != argc) {
        fprintf(stderr, "trib-env: expected exactly one ENV (see --help)\n");
        return 2;
    }
    if (actions_arg && actions_file) {
        fprintf(stderr, "trib-env: give --actions or --actions-file, not both\n");
        return 2;
    }
    if (num_envs > 1 << 20) {
        fprintf(stderr, "trib-env: --num-envs is too large (max %d)\n", 1 << 20);
        return 2;
    }

    struct env_plugin *plugin = NULL;
    const struct env_spec *spec = env_open(env_name, &plugin);
    if (!spec) {
        fprintf(stderr, "trib-env: %s\n", env_last_error());
        return 1;
    }
    const bool discrete = spec->act.kind == SPACE_DISCRETE;
    const int adim = discrete ? 1 : spec->act.dim;

    double *script = NULL;
    long nscript = 0;
    if (actions_arg || actions_file) {
        char *text = actions_file ? read_file(actions_file) : NULL;
        if (actions_file && !text)
            goto fail;
        nscript = parse_numbers(actions_file ? text : actions_arg, &script);
        free(text);
        if (nscript < 0)
            goto fail;
        if (nscript == 0 || nscript % adim) {
            fprintf(stderr, "trib-env: %ld scripted numbers do not make whole actions of %d\n",
                    nscript, adim);
            goto fail;
        }
        for (long k = 0; discrete && k < nscript; k++)
            if (script[k] != floor(script[k]) || script[k] < 0 || script[k] >= spec->act.n) {
                fprintf(stderr, "trib-env: scripted action %g is not an integer in [0, %d)\n",
                        script[k], spec->act.n);
                goto fail;
            }
        nscript /= adim;
    }

    struct vec_env *v = vec_env_new(spec, (int)num_envs, (uint64_t)seed, 0);
    if (!v) {
        fprintf(stderr, "trib-env: %s\n", env_last_error());
        goto fail;
    }
    const size_t B = (size_t)num_envs, D = (size_t)spec->obs.dim;
    float *obs = malloc(B * D * sizeof *obs);
    float *reward = malloc(B * sizeof *reward);
    bool *term = malloc(B), *trunc = malloc(B);
    int *iact = malloc(B * sizeof *iact);
    float *fact = malloc(B * (size_t)adim * sizeof *fact);
    if (!obs || !reward || !term || !trunc || !iact || !fact) {
        fprintf(stderr, "trib-env: out of memory for %ld envs of observation dim %d\n", num_envs,
                spec->obs.dim);
        free(obs), free(reward), free(term), free(trunc), free(iact), free(fact);
        vec_env_free(v);
        goto fail;
    }
    uint64_t arng = env_rng_seed((uint64_t)seed, 0xAC710A5ull);
    vec_env_reset(v, obs);

    struct vec_env_stats st;
    long t = 0;
    double t0 = trib_now_s();
    for (;; t++) {
        vec_env_get_stats(v, &st);
        if ((long)st.episodes >= episodes || (max_steps > 0 && (long)st.steps >= max_steps))
            break;
        for (size_t i = 0; i < B; i++) {
            for (int k = 0; k < adim; k++) {
                double a;
                if (script) {
                    a = script[(t % nscript) * adim + k];
                } else if (discrete) {
                    a = (double)(env_rng_next(&arng) % (uint64_t)spec->act.n);
                } else {
                    double lo = spec->act.low[k], hi = spec->act.high[k];
                    if (!isfinite(lo) || !isfinite(hi))
                        lo = -1.0, hi = 1.0;
                    a = env_rng_uniform(&arng, lo, hi);
                }
                if (discrete)
                    iact[i] = (int)a;
                else
                    fact[i * (size_t)adim + (size_t)k] = (float)a;
            }
        }
        if (vec_env_step(v, discrete ? (const void *)iact : (const void *)fact, obs, reward,
                         term, trunc, NULL) < 0) {
            fprintf(stderr, "trib-env: %s\n", env_last_error());
            break;
        }
    }
    double secs = trib_now_s() - t0;
    vec_env_get_stats(v, &st);
    double sps = secs > 0 ? (double)st.steps / secs : 0.0;
    double mean_ret = st.episodes ? st.return_sum / (double)st.episodes : 0.0;
    double mean_len = st.episodes ? (double)st.length_sum / (double)st.episodes : 0.0;
    if (json) {
        printf("{\"env\":");
        print_json_string(spec->id);
        char b0[32], b1[32], b2[32];
        printf(",\"num_envs\":%ld,\"seed\":%ld,\"episodes\":%llu,\"steps\":%llu,"
               "\"return_mean\":%s,\"return_min\":%s,\"return_max\":%s,"
               "\"length_mean\":%.17g,\"length_min\":%d,\"length_max\":%d,"
               "\"steps_per_s\":%.6g}\n",
               num_envs, seed, (unsigned long long)st.episodes,
               (unsigned long long)st.steps, json_number(b0, mean_ret),
               json_number(b1, st.return_min), json_number(b2, st.return_max), mean_len,
               st.length_min, st.length_max, sps);
    } else {
        printf("env: %s (obs dim %d, actions ", spec->id, spec->obs.dim);
        if (discrete)
            printf("discrete(%d)", spec->act.n);
        else
            printf("box(%d)", spec->act.dim);
        printf(", max_episode_steps %d)\n", spec->max_episode_steps);
        printf("episodes: %llu   steps: %llu   envs: %ld   seed: %ld   actions: %s\n",
               (unsigned long long)st.episodes, (unsigned long long)st.steps, num_envs, seed,
               script ? "scripted" : "random");
        if (st.episodes) {
            printf("return: mean %.4f   min %.4f   max %.4f\n", mean_ret, st.return_min,
                   st.return_max);
            printf("length: mean %.2f   min %d   max %d\n", mean_len, st.length_min,
                   st.length_max);
        } else {
            printf("no episode finished\n");
        }
        printf("steps/s: %.4g\n", sps);
    }
    free(obs), free(reward), free(term), free(trunc), free(iact), free(fact), free(script);
    vec_env_free(v);
    env_plugin_close(plugin);
    return 0;
fail:
    free(script);
    env_plugin_close(plugin);
    return 1;
}
