/* Evaluation episodes (evaluate.h): every env of a vec_env runs to the end
 * of its first episode under the policy's forward. */
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

/* The episodes' buffers: B envs, one episode each. */
struct episodes {
    int B, D, A;
    bool discrete;
    struct vec_env *v;
    float *obs, *x, *rew, *act_f;   /* x: the observations the policy sees (normalised) */
    int *act_i, *len;
    bool *term, *trunc, *done;
    double *ret;
};

static void episodes_free(struct episodes *e)
{
    free(e->obs); free(e->x); free(e->rew); free(e->act_f); free(e->act_i); free(e->term); free(e->trunc);
    free(e->done); free(e->ret); free(e->len);
    vec_env_free(e->v);
}

static int episodes_new(struct episodes *e, const struct env_spec *spec, int B, uint64_t seed)
{
    size_t b = (size_t)B;
    e->B = B;
    e->D = spec->obs.dim;
    e->discrete = spec->act.kind == SPACE_DISCRETE;
    e->A = e->discrete ? spec->act.n : spec->act.dim;
    e->v = vec_env_new(spec, B, seed, 0);
    if (!e->v) return rl_set_error("%s", env_last_error());
    e->obs = calloc(b * (size_t)e->D, sizeof *e->obs), e->x = calloc(b * (size_t)e->D, sizeof *e->x);
    e->rew = calloc(b, sizeof *e->rew);
    e->act_f = calloc(b * (size_t)e->A, sizeof *e->act_f), e->act_i = calloc(b, sizeof *e->act_i);
    e->term = calloc(b, sizeof *e->term), e->trunc = calloc(b, sizeof *e->trunc), e->done = calloc(b, 1);
    e->ret = calloc(b, sizeof *e->ret), e->len = calloc(b, sizeof *e->len);
    if (e->obs && e->x && e->rew && e->act_f && e->act_i && e->term && e->trunc && e->done && e->ret && e->len)
        return 0;
    return rl_set_error("out of memory for %d envs", B);
}

/* The observations as the policy sees them: frozen statistics applied. */
static void normalise(const struct episodes *e, const struct rl_norm_stats *norm)
{
    memcpy(e->x, e->obs, (size_t)e->B * (size_t)e->D * sizeof *e->x);
    if (norm) rl_norm_stats_apply(norm, e->x, e->B);
}

/* One step of every env by the policy's actions. 0, or -1 with rl_last_error(). */
static int step(struct episodes *e, const struct agent_eval_opts *o, uint64_t *rng)
{
    int64_t shape[2] = { e->B, e->D };
    normalise(e, o->norm);
    struct tensor *x = tensor_from_f32(2, shape, e->x);
    struct rl_policy_out out = { 0 };
    int B = e->B, A = e->A;
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

/* Runs every env to the end of its first episode. 0, or -1 with rl_last_error(). */
static int run(struct episodes *e, const struct agent_eval_opts *o)
{
    uint64_t rng = o->seed ^ 0x5eed5eedull;
    vec_env_reset(e->v, e->obs);
    for (int finished = 0; finished < e->B;) {
        if (step(e, o, &rng) != 0) return -1;
        for (int b = 0; b < e->B; b++) {
            if (e->done[b]) continue;
            e->ret[b] += e->rew[b];
            e->len[b]++;
            if (e->term[b] || e->trunc[b]) {
                e->done[b] = true;
                finished++;
            }
        }
    }
    return 0;
}

static void summarise(const struct episodes *e, struct agent_eval_result *r)
{
    int B = e->B;
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
    int rc = episodes_new(&e, o->spec, o->episodes, o->seed) == 0 && run(&e, o) == 0 ? 0 : -1;
    autograd_set_enabled(was);
    if (rc == 0) summarise(&e, out);
    episodes_free(&e);
    return rc;
}
