/* Evaluation episodes (evaluate.h): the episodes run in waves of at most
 * AGENT_EVAL_MAX_ENVS envs of one vec_env, each env to the end (or the
 * cap) of its first episode under the policy's forward. */
#include "agent/evaluate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "envs/vec_env.h"
#include "rl/messages.h"
#include "rl/norm.h"
#include "rl/rl.h"
#include "rl/sample.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

/* The episodes' buffers: W envs at once (one wave), N episodes in all. */
struct episodes {
    int W, N, D, A;
    bool discrete;
    struct vec_env *v;
    float *obs, *x, *rew, *act_f;   /* W rows; x: the observations the policy sees (normalised) */
    int *act_i;
    bool *term, *trunc, *done;      /* W */
    int *len;                       /* N */
    double *ret;                    /* N */
};

static void episodes_free(struct episodes *e)
{
    free(e->obs); free(e->x); free(e->rew); free(e->act_f); free(e->act_i); free(e->term); free(e->trunc);
    free(e->done); free(e->ret); free(e->len);
    vec_env_free(e->v);
}

static int episodes_new(struct episodes *e, const struct env_spec *spec, int N, uint64_t seed)
{
    e->N = N;
    e->W = N < AGENT_EVAL_MAX_ENVS ? N : AGENT_EVAL_MAX_ENVS;
    size_t w = (size_t)e->W, n = (size_t)N;
    e->D = spec->obs.dim;
    e->discrete = spec->act.kind == SPACE_DISCRETE;
    e->A = e->discrete ? spec->act.n : spec->act.dim;
    e->v = vec_env_new(spec, e->W, seed, 0);
    if (!e->v) return rl_set_error("%s", env_last_error());
    e->obs = calloc(w * (size_t)e->D, sizeof *e->obs), e->x = calloc(w * (size_t)e->D, sizeof *e->x);
    e->rew = calloc(w, sizeof *e->rew);
    e->act_f = calloc(w * (size_t)e->A, sizeof *e->act_f), e->act_i = calloc(w, sizeof *e->act_i);
    e->term = calloc(w, sizeof *e->term), e->trunc = calloc(w, sizeof *e->trunc), e->done = calloc(w, 1);
    e->ret = calloc(n, sizeof *e->ret), e->len = calloc(n, sizeof *e->len);
    if (e->obs && e->x && e->rew && e->act_f && e->act_i && e->term && e->trunc && e->done && e->ret && e->len)
        return 0;
    return rl_set_error("out of memory for %d envs", e->W);
}

/* The observations as the policy sees them: frozen statistics applied. */
static void normalise(const struct episodes *e, const struct rl_norm_stats *norm)
{
    memcpy(e->x, e->obs, (size_t)e->W * (size_t)e->D * sizeof *e->x);
    if (norm) rl_norm_stats_apply(norm, e->x, e->W);
}

/* One step of every env by the policy's actions. 0, or -1 with rl_last_error(). */
static int step(struct episodes *e, const struct agent_eval_opts *o, uint64_t *rng)
{
    int64_t shape[2] = { e->W, e->D };
    normalise(e, o->norm);
    struct tensor *x = tensor_from_f32(2, shape, e->x);
    struct rl_policy_out out = { 0 };
    int B = e->W, A = e->A;
    if (!x || o->forward(o->user, x, &out) != 0) {
        tensor_free(x);
        return rl_set_error("forward: %s", tensor_last_error());
    }
    tensor_free(x);
    if (e->discrete) {
        rl_sample_categorical(B, A, tensor_data(out.a), rng, !o->sample, e->act_i, NULL);
    } else {
        rl_sample_gaussian(B, A, tensor_data(out.a), tensor_data(out.log_std), rng, !o->sample, e->act_f, NULL);
        for (int i = 0; i < B * A; i++)
            e->act_f[i] = (float)fmin(fmax(e->act_f[i], o->spec->act.low[i % A]), o->spec->act.high[i % A]);
    }
    rl_policy_out_clear(&out);
    const void *act = e->discrete ? (const void *)e->act_i : (const void *)e->act_f;
    if (vec_env_step(e->v, act, e->obs, e->rew, e->term, e->trunc, NULL) == 0) return 0;
    return rl_set_error("%s", env_last_error());
}

/* The cap of an episode's steps (evaluate.h). */
static int episode_cap(const struct env_spec *spec)
{
    return spec->max_episode_steps > 0 ? spec->max_episode_steps : AGENT_EVAL_MAX_STEPS;
}

/* Episodes first .. first + k - 1 (k <= W), in envs 0 .. k - 1, each to
 * its end or its cap. 0, 1 when o->stop said stop, or -1 with
 * rl_last_error(). */
static int wave(struct episodes *e, const struct agent_eval_opts *o, int first, int k, uint64_t *rng)
{
    int cap = episode_cap(o->spec);
    memset(e->done, 0, (size_t)e->W);
    vec_env_reseed(e->v, o->seed, first);
    vec_env_reset(e->v, e->obs);
    for (int finished = 0; finished < k;) {
        const char *why = o->stop ? o->stop(o->stop_user) : NULL;
        if (why) {
            rl_set_error("stopped by %s after %d of %d episodes", why, first + finished, e->N);
            return 1;
        }
        if (step(e, o, rng) != 0) return -1;
        for (int b = 0; b < k; b++) {
            if (e->done[b]) continue;
            e->ret[first + b] += e->rew[b];
            e->len[first + b]++;
            if (e->term[b] || e->trunc[b] || e->len[first + b] >= cap) {
                e->done[b] = true;
                finished++;
            }
        }
    }
    return 0;
}

/* Every episode, W at a time. 0, 1 when stopped, or -1 with rl_last_error(). */
static int run(struct episodes *e, const struct agent_eval_opts *o)
{
    uint64_t rng = o->seed ^ 0x5eed5eedull;
    for (int first = 0; first < e->N; first += e->W) {
        int rc = wave(e, o, first, e->N - first < e->W ? e->N - first : e->W, &rng);
        if (rc != 0) return rc;
    }
    return 0;
}

static void summarise(const struct episodes *e, struct agent_eval_result *r)
{
    int B = e->N;
    double m = 0, s = 0, ml = 0, sl = 0;
    for (int b = 0; b < B; b++) {
        m += e->ret[b];
        ml += e->len[b];
    }
    m /= B;
    ml /= B;
    for (int b = 0; b < B; b++) {
        s += (e->ret[b] - m) * (e->ret[b] - m);
        sl += (e->len[b] - ml) * (e->len[b] - ml);
    }
    *r = (struct agent_eval_result){ .episodes = B, .return_mean = m, .return_std = sqrt(s / B),
                                     .length_mean = ml, .length_std = sqrt(sl / B) };
}

int agent_eval_actor_forward(void *user, struct tensor *obs, struct rl_policy_out *out)
{
    struct nn_module *actor = user;
    struct tensor *o[NN_MAX_IO] = { 0 };
    int n_out = 0;
    memset(out, 0, sizeof *out);
    if (nn_forward(actor, 1, &obs, &n_out, o) != 0) return -1;
    out->a = o[0];
    out->log_std = n_out > 1 ? o[1] : NULL;
    for (int i = 2; i < n_out; i++) tensor_free(o[i]);
    return 0;
}

static int check_opts(const struct agent_eval_opts *o)
{
    if (o->episodes < 1) return rl_set_error("evaluation with %d episodes (at least 1)", o->episodes);
    if (!o->norm || o->norm->obs.dim == 0) return 0;
    if (o->norm->obs.dim != o->spec->obs.dim)
        return rl_set_error("evaluation with normalisation statistics of %d values, the env has %d", o->norm->obs.dim,
                            o->spec->obs.dim);
    return 0;
}

int agent_evaluate(const struct agent_eval_opts *o, struct agent_eval_result *out)
{
    if (check_opts(o) != 0) return -1;
    struct episodes e = { 0 };
    bool was = autograd_set_enabled(false);
    int rc = episodes_new(&e, o->spec, o->episodes, o->seed) == 0 ? run(&e, o) : -1;
    autograd_set_enabled(was);
    if (rc == 0) summarise(&e, out);
    episodes_free(&e);
    return rc;
}
