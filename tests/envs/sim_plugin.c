/* Sim-v0, a test plug-in of ABI 2 that behaves like a simulator: its model
 * is loaded by the entry point (its size from --env-arg dim=N, so the spec
 * is filled at load time), every env owns memory that create allocates and
 * destroy frees, its state is saved through save/load, and it reports named
 * per-step info. Arguments make each failure of the contract happen:
 *   dim=N            observation size (1..64, default 3)
 *   fail=load        the entry point fails, with a message
 *   create_fail_at=K the K-th create of the process fails (0-based)
 *   abi=N            the spec claims ABI N
 *   saved_size=N     the spec claims saved_size N (a hostile plug-in's)
 *   model=PATH       the observation size from a model file (its text: N),
 *                    PATH opened as given (a relative one from the current
 *                    directory, as a simulator's loader does)
 * Built with SIM_NEEDS_MODEL (the sim_model_plugin target), it cannot load
 * without model=PATH, like a simulator without its model.
 * sim_live() counts the envs created and not yet destroyed. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"

static int live, creates;

__attribute__((visibility("default"))) int sim_live(void) { return live; }

struct sim_model {
    int dim;
    int create_fail_at;     /* -1: never */
    double *low, *high;     /* obs bounds, dim each */
    double act_low[1], act_high[1];
};

struct sim {
    double *x;              /* dim doubles, from create */
    int t;
    double info[2];         /* x0, action of the last step */
};

static int sim_create(const struct env_spec *spec, void *state, char *err, size_t cap)
{
    const struct sim_model *m = spec->model;
    struct sim *s = state;
    if (creates++ == m->create_fail_at) {
        snprintf(err, cap, "out of simulator slots");
        return -1;
    }
    s->x = calloc((size_t)m->dim, sizeof *s->x);
    if (!s->x) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    live++;
    return 0;
}

static void sim_destroy(const struct env_spec *spec, void *state)
{
    struct sim *s = state;
    free(s->x);
    s->x = NULL;
    live--;
}

static void observe(const struct sim_model *m, const struct sim *s, float *obs)
{
    for (int k = 0; k < m->dim; k++) obs[k] = (float)s->x[k];
}

/* reset and step reach the model through the spec, which they are not given:
 * one model per process is enough for the tests (the last one loaded). */
static const struct sim_model *the_model;

static void sim_reset(void *state, uint64_t *rng, float *obs)
{
    struct sim *s = state;
    for (int k = 0; k < the_model->dim; k++) s->x[k] = env_rng_uniform(rng, -0.1, 0.1);
    s->t = 0;
    s->info[0] = s->info[1] = 0.0;
    observe(the_model, s, obs);
}

static void sim_step(void *state, const void *action, float *obs, float *reward, bool *terminated)
{
    struct sim *s = state;
    double a = ((const float *)action)[0], r = 0.0;
    for (int k = 0; k < the_model->dim; k++) {
        s->x[k] += a * (k + 1);
        r += s->x[k];
    }
    s->t++;
    s->info[0] = s->x[0];
    s->info[1] = a;
    *reward = (float)r;
    *terminated = s->t >= 7;
    observe(the_model, s, obs);
}

static int sim_get_state(const void *state, double *out, int cap)
{
    const struct sim *s = state;
    for (int k = 0; k < the_model->dim && k < cap; k++) out[k] = s->x[k];
    return the_model->dim;
}

static int sim_set_state(void *state, const double *in, int n)
{
    struct sim *s = state;
    if (n != the_model->dim) return -1;
    memcpy(s->x, in, (size_t)n * sizeof *in);
    return 0;
}

/* saved form: x[dim], t, info[2] */
static void sim_save(const struct env_spec *spec, const void *state, void *out)
{
    const struct sim *s = state;
    const struct sim_model *m = spec->model;
    double *o = out;
    memcpy(o, s->x, (size_t)m->dim * sizeof *o);
    o[m->dim] = s->t;
    o[m->dim + 1] = s->info[0];
    o[m->dim + 2] = s->info[1];
}

static int sim_load(const struct env_spec *spec, void *state, const void *in, char *err, size_t cap)
{
    struct sim *s = state;
    const struct sim_model *m = spec->model;
    double v[64 + 3];
    memcpy(v, in, (size_t)(m->dim + 3) * sizeof *v);
    for (int k = 0; k < m->dim + 3; k++)
        if (!isfinite(v[k])) {
            snprintf(err, cap, "saved value %d is %g", k, v[k]);
            return -1;
        }
    if (v[m->dim] < 0 || v[m->dim] > 7) {
        snprintf(err, cap, "saved step count %g is outside 0..7", v[m->dim]);
        return -1;
    }
    memcpy(s->x, v, (size_t)m->dim * sizeof *v);
    s->t = (int)v[m->dim];
    s->info[0] = v[m->dim + 1];
    s->info[1] = v[m->dim + 2];
    return 0;
}

static void sim_info(const struct env_spec *spec, const void *state, double *out)
{
    const struct sim *s = state;
    out[0] = s->info[0];
    out[1] = s->info[1];
}

static const char *const info_names[2] = {"x0", "action"};

static void sim_unload(struct env_spec *spec)
{
    struct sim_model *m = spec->model;
    free(m->low);
    free(m->high);
    free(m);
    free(spec);
}

__attribute__((visibility("default"))) const struct env_spec *
tributary_env_open(const struct env_args *args, char *err, size_t cap)
{
    int dim = 3, fail_at = -1, abi = ENV_ABI_VERSION;
    unsigned long long saved = 0;   /* 0: its own */
    bool has_model = false;
    for (int i = 0; i < args->n; i++) {
        const char *k = args->keys[i], *v = args->values[i];
        char *end;
        long x = strtol(v, &end, 10);
        if (strcmp(k, "fail") == 0 && strcmp(v, "load") == 0) {
            snprintf(err, cap, "model sim.xml: cannot parse (fail=load)");
            return NULL;
        } else if (strcmp(k, "dim") == 0 && *end == '\0' && x >= 1 && x <= 64) {
            dim = (int)x;
        } else if (strcmp(k, "create_fail_at") == 0 && *end == '\0') {
            fail_at = (int)x;
        } else if (strcmp(k, "abi") == 0 && *end == '\0') {
            abi = (int)x;
        } else if (strcmp(k, "saved_size") == 0) {
            saved = strtoull(v, NULL, 10);
        } else if (strcmp(k, "model") == 0) {
            FILE *f = fopen(v, "r");
            if (!f || fscanf(f, "%d", &dim) != 1 || dim < 1 || dim > 64) {
                snprintf(err, cap, "model %s: %s", v, f ? "not a size in 1..64" : strerror(errno));
                if (f) fclose(f);
                return NULL;
            }
            fclose(f);
            has_model = true;
        } else {
            snprintf(err, cap, "bad --env-arg %s=%s (takes dim=1..64, fail=load, create_fail_at=K, abi=N)", k, v);
            return NULL;
        }
    }
#ifdef SIM_NEEDS_MODEL
    if (!has_model) {
        snprintf(err, cap, "needs --env-arg model=PATH");
        return NULL;
    }
#endif
    (void)has_model;
    if (abi != ENV_ABI_VERSION) {   /* as a plug-in built against another header would */
        static struct env_spec other;
        other.abi_version = abi;
        return &other;
    }
    struct sim_model *m = calloc(1, sizeof *m);
    struct env_spec *spec = calloc(1, sizeof *spec);
    if (!m || !spec) abort();
    m->dim = dim;
    m->create_fail_at = fail_at;
    m->low = malloc((size_t)dim * sizeof *m->low);
    m->high = malloc((size_t)dim * sizeof *m->high);
    if (!m->low || !m->high) abort();
    for (int k = 0; k < dim; k++) m->low[k] = -INFINITY, m->high[k] = INFINITY;
    m->act_low[0] = -1, m->act_high[0] = 1;
    creates = 0;
    the_model = m;
    *spec = (struct env_spec){
        .id = "Sim-v0",
        .obs = {.kind = SPACE_BOX, .dim = dim, .low = m->low, .high = m->high},
        .act = {.kind = SPACE_BOX, .dim = 1, .low = m->act_low, .high = m->act_high},
        .max_episode_steps = 5,
        .reward_threshold = NAN,
        .state_size = sizeof(struct sim),
        .reset = sim_reset,
        .step = sim_step,
        .get_state = sim_get_state,
        .set_state = sim_set_state,
        .abi_version = ENV_ABI_VERSION,
        .model = m,
        .create = sim_create,
        .destroy = sim_destroy,
        .saved_size = (size_t)(dim + 3) * sizeof(double),
        .save = sim_save,
        .load = sim_load,
        .info_count = 2,
        .info_names = info_names,
        .info = sim_info,
        .unload = sim_unload,
    };
    if (saved) spec->saved_size = (size_t)saved;
    return spec;
}
