/* vec_env: one allocation holds every env's state, RNG and episode counters;
 * a step runs the env dynamics (batched for built-ins) then the bookkeeping
 * pass that truncates, records statistics and autoresets. */
#include "envs/vec_env.h"

#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "envs/builtin.h"

struct vec_env {
    const struct env_spec *spec;
    env_batch_step_fn batch_step; /* NULL: generic path */
    int n;
    int obs_dim;
    size_t stride;                /* bytes between env states */
    size_t act_stride;            /* bytes between env actions */
    bool was_reset;
    unsigned char *states;
    uint64_t *rng;
    int *elapsed;
    double *ret;
    double *last_ret;
    int *last_len;
    struct vec_env_stats stats;
    int created;                  /* envs spec->create has made (0 without create) */
    size_t saved_stride;          /* bytes of one env in vec_env_save's form */
    int info_count;
    double *info_run;             /* n x info_count: sums over the episode in progress */
    double *info_step;            /* info_count: scratch for one env's values */
    double info_sum[ENV_INFO_MAX];/* over the steps of finished episodes */
};

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* spec->create on every env in turn; on a failure the envs made so far
 * stay counted in v->created for vec_env_free to destroy. */
static int create_envs(struct vec_env *v)
{
    for (int i = 0; i < v->n; i++) {
        char err[512] = "";
        if (v->spec->create(v->spec, vec_env_state(v, i), err, sizeof err) != 0) {
            err[sizeof err - 1] = '\0';
            env_set_error("vec_env_new: env %d of %s: %s", i, v->spec->id,
                          err[0] ? err : "create failed without a message");
            return -1;
        }
        v->created = i + 1;
    }
    return 0;
}

struct vec_env *vec_env_new(const struct env_spec *spec, int num_envs, uint64_t seed,
                            unsigned flags)
{
    if (env_spec_check(spec) < 0) {
        char why[400];
        snprintf(why, sizeof why, "%s", env_last_error());
        env_set_error("vec_env_new: %s", why);
        return NULL;
    }
    if (num_envs < 1) {
        env_set_error("vec_env_new: num_envs must be >= 1 (got %d)", num_envs);
        return NULL;
    }
    size_t n = (size_t)num_envs;
    env_batch_step_fn batch = (flags & VEC_ENV_GENERIC) ? NULL : env_builtin_batch_step(spec);
    /* Built-in states are arrays of their struct; others get max_align_t slots. */
    size_t stride = batch ? spec->state_size : round_up(spec->state_size, 16);
    if (stride < spec->state_size || stride > (SIZE_MAX - 64) / n) {
        env_set_error("vec_env_new: %d envs of state_size %zu overflow the address space",
                      num_envs, spec->state_size);
        return NULL;
    }
    size_t saved_stride = spec->save ? spec->saved_size : stride;   /* at most ENV_SAVED_MAX */
    if (saved_stride > (SIZE_MAX / 2) / n) {
        env_set_error("vec_env_new: %d envs of saved_size %zu overflow the address space",
                      num_envs, saved_stride);
        return NULL;
    }
    struct vec_env *v = calloc(1, sizeof *v);
    if (!v)
        abort();
    v->spec = spec;
    v->batch_step = batch;
    v->n = num_envs;
    v->obs_dim = spec->obs.dim;
    v->stride = stride;
    v->act_stride = spec->act.kind == SPACE_DISCRETE ? sizeof(int)
                                                     : (size_t)spec->act.dim * sizeof(float);
    v->states = aligned_alloc(64, round_up(v->stride * n, 64));
    v->rng = malloc(n * sizeof *v->rng);
    v->elapsed = calloc(n, sizeof *v->elapsed);
    v->ret = calloc(n, sizeof *v->ret);
    v->last_ret = calloc(n, sizeof *v->last_ret);
    v->last_len = malloc(n * sizeof *v->last_len);
    v->info_count = spec->info_count;
    v->info_run = calloc(n * (size_t)spec->info_count + 1, sizeof *v->info_run);
    v->info_step = calloc((size_t)spec->info_count + 1, sizeof *v->info_step);
    v->saved_stride = saved_stride;
    if (!v->states || !v->rng || !v->elapsed || !v->ret || !v->last_ret || !v->last_len ||
        !v->info_run || !v->info_step) {
        env_set_error("vec_env_new: out of memory for %d envs of state_size %zu", num_envs,
                      spec->state_size);
        vec_env_free(v);
        return NULL;
    }
    memset(v->states, 0, v->stride * n);
    for (size_t i = 0; i < n; i++) {
        v->rng[i] = env_rng_seed(seed, i);
        v->last_len[i] = -1;
    }
    vec_env_clear_stats(v);
    if (spec->create && create_envs(v) < 0) {
        vec_env_free(v);
        return NULL;
    }
    return v;
}

void vec_env_free(struct vec_env *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->created && v->spec->destroy; i++)
        v->spec->destroy(v->spec, vec_env_state(v, i));
    free(v->info_run);
    free(v->info_step);
    free(v->states);
    free(v->rng);
    free(v->elapsed);
    free(v->ret);
    free(v->last_ret);
    free(v->last_len);
    free(v);
}

const struct env_spec *vec_env_spec(const struct vec_env *v)
{
    return v->spec;
}

int vec_env_num_envs(const struct vec_env *v)
{
    return v->n;
}

/* Header of a saved vec_env: checked on load. */
struct saved_head {
    char magic[8];
    uint64_t n, state_size, stride;
    char id[64];
    uint8_t was_reset;
};

/* What a save holds after its head and the envs' states, in this order:
 * one row per field of struct vec_env, with how many of its elements are
 * saved (one per env, per env and info, per info, or one). saved_size,
 * vec_env_save, vec_env_load and the load's checks all walk this list,
 * so a field is added to the saved form in one place. */
enum saved_count { PER_ENV, PER_ENV_INFO, PER_INFO, ONCE };
struct saved_field {
    const char *name;
    size_t off, elem;             /* the member's place in struct vec_env, one element's bytes */
    bool pointer;                 /* the member points at the elements (else it holds them) */
    enum saved_count count;
};
#define SAVED_ARRAY(f, count) { #f, offsetof(struct vec_env, f), sizeof *((struct vec_env *)0)->f, true, count }
#define SAVED_MEMBER(f, elem, count) { #f, offsetof(struct vec_env, f), elem, false, count }
static const struct saved_field saved_fields[] = {
    SAVED_ARRAY(rng, PER_ENV),          SAVED_ARRAY(elapsed, PER_ENV),  SAVED_ARRAY(ret, PER_ENV),
    SAVED_ARRAY(last_ret, PER_ENV),     SAVED_ARRAY(last_len, PER_ENV),
    SAVED_MEMBER(stats, sizeof(struct vec_env_stats), ONCE),
    SAVED_ARRAY(info_run, PER_ENV_INFO), SAVED_MEMBER(info_sum, sizeof(double), PER_INFO),
};
#define N_SAVED_FIELDS (sizeof saved_fields / sizeof saved_fields[0])

static size_t saved_field_bytes(const struct vec_env *v, const struct saved_field *f)
{
    size_t n = (size_t)v->n, k = (size_t)v->info_count;
    size_t count = f->count == PER_ENV ? n : f->count == PER_ENV_INFO ? n * k : f->count == PER_INFO ? k : 1;
    return f->elem * count;
}

static void *saved_field_at(const struct vec_env *v, const struct saved_field *f)
{
    char *m = (char *)v + f->off;
    return f->pointer ? *(void **)m : m;
}

/* Where field `name` starts in a save of v (its bytes after the head and
 * the states); the name must be a row's. */
static size_t saved_offset(const struct vec_env *v, const char *name)
{
    size_t at = sizeof(struct saved_head) + v->saved_stride * (size_t)v->n;
    for (size_t i = 0; i < N_SAVED_FIELDS; i++) {
        if (strcmp(saved_fields[i].name, name) == 0) return at;
        at += saved_field_bytes(v, &saved_fields[i]);
    }
    CHECK(!"a saved field's name");
    return 0;
}

static size_t saved_size(const struct vec_env *v)
{
    size_t total = sizeof(struct saved_head) + v->saved_stride * (size_t)v->n;
    for (size_t i = 0; i < N_SAVED_FIELDS; i++) total += saved_field_bytes(v, &saved_fields[i]);
    return total;
}

int vec_env_save(const struct vec_env *v, unsigned char **out, size_t *len)
{
    size_t n = (size_t)v->n, total = saved_size(v);
    unsigned char *b = malloc(total);
    if (!b) abort();
    struct saved_head h = { .magic = "TRIBVEC1", .n = n, .state_size = v->spec->state_size,
                            .stride = v->saved_stride, .was_reset = v->was_reset };
    snprintf(h.id, sizeof h.id, "%s", v->spec->id);
    unsigned char *p = b;
#define PUT(src, size) (memcpy(p, (src), (size)), p += (size))
    PUT(&h, sizeof h);
    if (v->spec->save)
        for (size_t i = 0; i < n; i++, p += v->saved_stride)
            v->spec->save(v->spec, vec_env_state((struct vec_env *)v, (int)i), p);
    else
        PUT(v->states, v->stride * n);
    for (size_t i = 0; i < N_SAVED_FIELDS; i++)
        PUT(saved_field_at(v, &saved_fields[i]), saved_field_bytes(v, &saved_fields[i]));
#undef PUT
    *out = b;
    *len = total;
    return 0;
}

/* The saved returns a resumed run adds to, before any is used: the returns
 * of the episodes in progress and finished, and the statistics' returns
 * must be finite. buf is a whole save that vec_env_load has
 * sized; 0, or -1 with env_last_error() naming the env, the field and the
 * value. */
static int check_returns(const struct vec_env *v, const unsigned char *buf)
{
    const struct env_spec *spec = v->spec;
    size_t n = (size_t)v->n;
    const unsigned char *ret = buf + saved_offset(v, "ret"), *last_ret = buf + saved_offset(v, "last_ret");
    for (size_t i = 0; i < n; i++) {
        double r, last;
        memcpy(&r, ret + i * sizeof r, sizeof r);
        memcpy(&last, last_ret + i * sizeof r, sizeof r);
        if (!isfinite(r) || !isfinite(last)) {
            env_set_error("vec_env_load: env %zu of %s: %s is %g", i, spec->id,
                          !isfinite(r) ? "the return of its episode in progress" : "its last episode's return",
                          !isfinite(r) ? r : last);
            return -1;
        }
    }
    struct vec_env_stats st;
    memcpy(&st, buf + saved_offset(v, "stats"), sizeof st);
    const double sv[3] = { st.return_sum, st.return_min, st.return_max };
    static const char *const sn[3] = { "return_sum", "return_min", "return_max" };
    for (int k = 0; k < 3; k++)
        if (!isfinite(sv[k])) {
            env_set_error("vec_env_load: %s's statistics: %s is %g", spec->id, sn[k], sv[k]);
            return -1;
        }
    return 0;
}

/* Saved env i (of v's saved form, at in) as a state block in scratch: a raw
 * copy, or the spec's load into scratch, which the spec has created. 0, or
 * -1 with the error set. */
static int stage_env(const struct vec_env *v, void *scratch, const unsigned char *in, size_t i)
{
    if (!v->spec->load) {
        memcpy(scratch, in, v->stride);
        return 0;
    }
    char err[512] = "";
    if (v->spec->load(v->spec, scratch, in, err, sizeof err) != 0) {
        err[sizeof err - 1] = '\0';
        env_set_error("vec_env_load: env %zu of %s: %s", i, v->spec->id,
                      err[0] ? err : "its saved state was refused without a message");
        return -1;
    }
    return 0;
}

/* Every saved env state, before any is used: each goes into a scratch state
 * (through the spec's load when it has one, which checks it), and its
 * dynamic state, where the env can say it (get_state: built-ins and the
 * plug-ins that have it; other plug-ins' raw states are opaque), must be
 * finite. 0, or -1 with env_last_error() naming the env and the value. */
static int check_states(const struct vec_env *v, const unsigned char *states)
{
    const struct env_spec *spec = v->spec;
    if (!spec->get_state && !spec->load) return 0;
    void *scratch = aligned_alloc(64, round_up(v->stride, 64));
    if (!scratch) abort();
    memset(scratch, 0, v->stride);
    char err[512] = "";
    if (spec->create && spec->create(spec, scratch, err, sizeof err) != 0) {
        err[sizeof err - 1] = '\0';
        env_set_error("vec_env_load: a scratch env of %s: %s", spec->id, err);
        free(scratch);
        return -1;
    }
    int rc = 0, room = 0;
    double *vals = NULL;
    for (size_t i = 0; i < (size_t)v->n && rc == 0; i++) {
        if (stage_env(v, scratch, states + i * v->saved_stride, i) != 0) {
            rc = -1;
            break;
        }
        int k = spec->get_state ? spec->get_state(scratch, NULL, 0) : 0;
        if (k <= 0) continue;
        if (k > 1 << 16) k = 1 << 16;   /* a plug-in's word: the first 65536 are checked */
        if (k > room) {
            free(vals);
            vals = malloc((size_t)k * sizeof *vals);
            if (!vals) abort();
            room = k;
        }
        int got = spec->get_state(scratch, vals, k);
        if (got > k) got = k;
        for (int j = 0; j < got; j++)
            if (!isfinite(vals[j])) {
                const char *name = env_builtin_state_name(spec, j);
                env_set_error("vec_env_load: env %zu of %s: state[%d]%s%s%s is %g", i, spec->id, j, name ? " (" : "",
                              name ? name : "", name ? ")" : "", vals[j]);
                rc = -1;
                break;
            }
    }
    free(vals);
    if (spec->destroy) spec->destroy(spec, scratch);
    free(scratch);
    return rc;
}

int vec_env_load(struct vec_env *v, const unsigned char *buf, size_t len)
{
    struct saved_head h;
    if (len < sizeof h) {
        env_set_error("vec_env_load: %zu bytes is too short", len);
        return -1;
    }
    memcpy(&h, buf, sizeof h);
    h.id[sizeof h.id - 1] = '\0';
    if (memcmp(h.magic, "TRIBVEC1", 8) != 0) {
        env_set_error("vec_env_load: not a saved vec_env");
        return -1;
    }
    if (h.n != (uint64_t)v->n || h.state_size != v->spec->state_size || h.stride != v->saved_stride ||
        strncmp(h.id, v->spec->id, sizeof h.id - 1) != 0) {
        env_set_error("vec_env_load: saved %llu envs of %s (state %llu bytes), this is %d of %s (%zu bytes)",
                      (unsigned long long)h.n, h.id, (unsigned long long)h.state_size, v->n, v->spec->id,
                      v->spec->state_size);
        return -1;
    }
    if (len != saved_size(v)) {
        env_set_error("vec_env_load: %zu bytes, expected %zu", len, saved_size(v));
        return -1;
    }
    size_t n = (size_t)v->n;
    /* the episode lengths are counted on: in 0..max_episode_steps (or, with
     * no truncation, below INT_MAX), last ones from -1 (none yet) */
    int cap = v->spec->max_episode_steps > 0 ? v->spec->max_episode_steps : INT_MAX - 1;
    const unsigned char *el = buf + saved_offset(v, "elapsed"), *ll = buf + saved_offset(v, "last_len");
    for (size_t i = 0; i < n; i++) {
        int e, l;
        memcpy(&e, el + i * sizeof e, sizeof e);
        memcpy(&l, ll + i * sizeof l, sizeof l);
        if (e < 0 || e > cap || l < -1 || l > cap) {
            env_set_error("vec_env_load: env %zu: episode length %d or last length %d outside 0..%d", i, e, l, cap);
            return -1;
        }
    }
    /* the info sums: info_run's then info_sum's, side by side */
    size_t ni = (n + 1) * (size_t)v->info_count;
    const unsigned char *info = buf + saved_offset(v, "info_run");
    for (size_t k = 0; k < ni; k++) {
        double x;
        memcpy(&x, info + k * sizeof x, sizeof x);
        if (!isfinite(x)) {
            env_set_error("vec_env_load: %s's info sums: value %zu is %g", v->spec->id, k, x);
            return -1;
        }
    }
    if (check_returns(v, buf) != 0 || check_states(v, buf + sizeof h) != 0)
        return -1;
    const unsigned char *p = buf + sizeof h;
#define GET(dst, size) (memcpy((dst), p, (size)), p += (size))
    if (v->spec->load)
        for (size_t i = 0; i < n; i++, p += v->saved_stride)
            CHECK(stage_env(v, vec_env_state(v, (int)i), p, i) == 0);   /* it loaded in the scratch env */
    else
        GET(v->states, v->stride * n);
    for (size_t i = 0; i < N_SAVED_FIELDS; i++)
        GET(saved_field_at(v, &saved_fields[i]), saved_field_bytes(v, &saved_fields[i]));
#undef GET
    v->was_reset = h.was_reset;
    return 0;
}

void *vec_env_state(struct vec_env *v, int i)
{
    return v->states + (size_t)i * v->stride;
}

void vec_env_reseed(struct vec_env *v, uint64_t seed, int first)
{
    for (int i = 0; i < v->n; i++)
        v->rng[i] = env_rng_seed(seed, (uint64_t)first + (uint64_t)i);
}

void vec_env_reset(struct vec_env *v, float *obs)
{
    for (int i = 0; i < v->n; i++) {
        v->spec->reset(vec_env_state(v, i), &v->rng[i], obs + (size_t)i * v->obs_dim);
        v->elapsed[i] = 0;
        v->ret[i] = 0.0;
    }
    memset(v->info_run, 0, (size_t)v->n * (size_t)v->info_count * sizeof *v->info_run);
    v->was_reset = true;
}

static void finish_episode(struct vec_env *v, int i)
{
    struct vec_env_stats *s = &v->stats;
    double r = v->ret[i];
    int len = v->elapsed[i];
    if (s->episodes == 0) {
        s->return_min = s->return_max = r;
        s->length_min = s->length_max = len;
    } else {
        s->return_min = r < s->return_min ? r : s->return_min;
        s->return_max = r > s->return_max ? r : s->return_max;
        s->length_min = len < s->length_min ? len : s->length_min;
        s->length_max = len > s->length_max ? len : s->length_max;
    }
    s->episodes++;
    s->return_sum += r;
    s->length_sum += (uint64_t)len;
    v->last_ret[i] = r;
    v->last_len[i] = len;
    double *run = v->info_run + (size_t)i * (size_t)v->info_count;
    for (int j = 0; j < v->info_count; j++) {
        v->info_sum[j] += run[j];
        run[j] = 0.0;
    }
    v->ret[i] = 0.0;
    v->elapsed[i] = 0;
}

int vec_env_step(struct vec_env *v, const void *actions, float *obs, float *reward,
                 bool *terminated, bool *truncated, float *final_obs)
{
    return vec_env_step_range(v, 0, v->n, actions, obs, reward, terminated, truncated, final_obs);
}

int vec_env_step_range(struct vec_env *v, int first, int n, const void *actions, float *obs, float *reward,
                       bool *terminated, bool *truncated, float *final_obs)
{
    if (!v->was_reset) {
        env_set_error("vec_env_step: called before vec_env_reset");
        return -1;
    }
    if (first < 0 || n < 1 || first > v->n - n) {
        env_set_error("vec_env_step: envs %d..%d of %d", first, first + n - 1, v->n);
        return -1;
    }
    const struct env_spec *spec = v->spec;
    const int d = v->obs_dim;
    if (spec->act.kind == SPACE_DISCRETE) {
        const int *a = actions;
        const unsigned na = (unsigned)spec->act.n;
        unsigned bad = 0;
        for (int i = 0; i < n; i++)
            bad |= (unsigned)a[i] >= na;
        if (bad)
            for (int i = 0; i < n; i++)
                if ((unsigned)a[i] >= na) {
                    env_set_error("vec_env_step: action %d of env %d is out of range [0, %d)",
                                  a[i], first + i, spec->act.n);
                    return -1;
                }
    }
    if (v->batch_step) {
        v->batch_step(v->states + (size_t)first * v->stride, actions, obs, reward, terminated, n);
    } else {
        const unsigned char *a = actions;
        for (int i = 0; i < n; i++)
            spec->step(vec_env_state(v, first + i), a + (size_t)i * v->act_stride,
                       obs + (size_t)i * d, &reward[i], &terminated[i]);
    }
    for (int i = 0, k = v->info_count; k > 0 && i < n; i++) {
        double *run = v->info_run + (size_t)(first + i) * (size_t)k;
        spec->info(spec, vec_env_state(v, first + i), v->info_step);
        for (int j = 0; j < k; j++)
            run[j] += v->info_step[j];
    }
    const int max_steps = spec->max_episode_steps > 0 ? spec->max_episode_steps : INT32_MAX;
    for (int i = 0; i < n; i++) {
        v->ret[first + i] += reward[i];
        int e = ++v->elapsed[first + i];
        bool trunc = e >= max_steps;
        truncated[i] = trunc;
        if (__builtin_expect(terminated[i] | trunc, 0)) {
            float *o = obs + (size_t)i * d;
            if (final_obs)
                memcpy(final_obs + (size_t)i * d, o, (size_t)d * sizeof(float));
            finish_episode(v, first + i);
            spec->reset(vec_env_state(v, first + i), &v->rng[first + i], o);
        }
    }
    v->stats.steps += (uint64_t)n;
    return 0;
}

void vec_env_get_stats(const struct vec_env *v, struct vec_env_stats *out)
{
    *out = v->stats;
}

void vec_env_clear_stats(struct vec_env *v)
{
    memset(&v->stats, 0, sizeof v->stats);
    memset(v->info_sum, 0, sizeof v->info_sum);
}

void vec_env_info_sums(const struct vec_env *v, double *out)
{
    memcpy(out, v->info_sum, (size_t)v->info_count * sizeof *out);
}

double vec_env_episode_return(const struct vec_env *v, int i)
{
    return v->ret[i];
}

int vec_env_episode_length(const struct vec_env *v, int i)
{
    return v->elapsed[i];
}

int vec_env_last_episode(const struct vec_env *v, int i, double *ret, int *len)
{
    if (v->last_len[i] < 0)
        return -1;
    if (ret)
        *ret = v->last_ret[i];
    if (len)
        *len = v->last_len[i];
    return 0;
}
