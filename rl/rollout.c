/* Rollout buffers: one allocation per buffer at start, then reused. */
#include "rl/rollout.h"

#include <stdlib.h>
#include <string.h>

#include "rl/rl.h"
#include "rl/rl_math.h"

int rl_rollout_init(struct rl_rollout *r, int T, int B, int obs_dim, bool discrete, int act_dim)
{
    memset(r, 0, sizeof *r);
    r->T = T;
    r->B = B;
    r->obs_dim = obs_dim;
    r->act_dim = discrete ? 1 : act_dim;
    r->discrete = discrete;
    size_t n = (size_t)T * (size_t)B;
    r->obs = calloc(n * (size_t)obs_dim, sizeof *r->obs);
    if (discrete) r->act_i = calloc(n, sizeof *r->act_i);
    else r->act_f = calloc(n * (size_t)act_dim, sizeof *r->act_f);
    r->logp = calloc(n, sizeof(float));
    r->values = calloc(n, sizeof(float));
    r->rewards = calloc(n, sizeof(float));
    r->final_values = calloc(n, sizeof(float));
    r->adv = calloc(n, sizeof(float));
    r->ret = calloc(n, sizeof(float));
    r->terminated = calloc(n, sizeof(bool));
    r->truncated = calloc(n, sizeof(bool));
    r->next_values = calloc((size_t)B, sizeof(float));
    r->perm = calloc(n, sizeof(int));
    if (!r->obs || !(r->act_i || r->act_f) || !r->logp || !r->values || !r->rewards || !r->final_values || !r->adv ||
        !r->ret || !r->terminated || !r->truncated || !r->next_values || !r->perm) {
        rl_rollout_deinit(r);
        return rl_set_error("rollout: cannot allocate %d x %d steps of obs dim %d", T, B, obs_dim);
    }
    for (size_t i = 0; i < n; i++) r->perm[i] = (int)i;
    return 0;
}

void rl_rollout_deinit(struct rl_rollout *r)
{
    free(r->obs);
    free(r->act_i);
    free(r->act_f);
    free(r->logp);
    free(r->values);
    free(r->rewards);
    free(r->final_values);
    free(r->adv);
    free(r->ret);
    free(r->terminated);
    free(r->truncated);
    free(r->next_values);
    free(r->perm);
    memset(r, 0, sizeof *r);
}

void rl_rollout_advantages(struct rl_rollout *r, double gamma, double lambda)
{
    rl_gae(r->T, r->B, gamma, lambda, r->rewards, r->values, r->terminated, r->truncated, r->final_values,
           r->next_values, r->adv, r->ret);
    r->explained_var = rl_explained_variance(r->values, r->ret, r->T * r->B);
}

int rl_rollout_gather(const struct rl_rollout *r, int start, int n, struct tensor **obs, struct tensor **actions,
                      float *old_logp, float *adv, float *ret, float *old_values)
{
    int64_t os[2] = { n, r->obs_dim }, as[2] = { n, r->act_dim };
    *obs = tensor_new(DTYPE_F32, DEVICE_CPU, 2, os);
    *actions = r->discrete ? tensor_new(DTYPE_I64, DEVICE_CPU, 1, as) : tensor_new(DTYPE_F32, DEVICE_CPU, 2, as);
    if (!*obs || !*actions) {
        tensor_free(*obs);
        tensor_free(*actions);
        *obs = *actions = NULL;
        return rl_set_error("rollout: %s", tensor_last_error());
    }
    float *o = tensor_data(*obs);
    for (int k = 0; k < n; k++) {
        int i = r->perm[start + k];
        memcpy(o + (size_t)k * r->obs_dim, r->obs + (size_t)i * r->obs_dim, (size_t)r->obs_dim * sizeof *o);
        if (r->discrete) ((int64_t *)tensor_data(*actions))[k] = r->act_i[i];
        else
            memcpy((float *)tensor_data(*actions) + (size_t)k * r->act_dim, r->act_f + (size_t)i * r->act_dim,
                   (size_t)r->act_dim * sizeof(float));
        old_logp[k] = r->logp[i];
        adv[k] = r->adv[i];
        ret[k] = r->ret[i];
        old_values[k] = r->values[i];
    }
    return 0;
}
