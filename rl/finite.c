/* Finiteness checks (see finite.h). */
#include "rl/finite.h"

#include <math.h>
#include <stdlib.h>

#include "common/check.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"

/* x as printed: NaN without its sign ("nan", never "-nan") */
static double shown(double x) { return isnan(x) ? fabs(x) : x; }

/* The index of the first non-finite of x[0..n-1], or -1. */
static int64_t first_nonfinite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

int rl_check_env_step(const char *env_id, const char *who, int64_t step, int B, int D, const float *obs,
                      const float *reward, const bool *done, const float *final_obs)
{
    int64_t i = first_nonfinite(obs, (int64_t)B * D);
    if (i >= 0)
        return rl_set_error("env %s on %s: step %lld: observation[%lld] of env %lld is %g", env_id, who,
                            (long long)step, (long long)(i % D), (long long)(i / D), shown(obs[i]));
    if (reward && (i = first_nonfinite(reward, B)) >= 0)
        return rl_set_error("env %s on %s: step %lld: the reward of env %lld is %g", env_id, who, (long long)step,
                            (long long)i, shown(reward[i]));
    for (int b = 0; final_obs && done && b < B; b++)
        if (done[b] && (i = first_nonfinite(final_obs + (size_t)b * D, D)) >= 0)
            return rl_set_error("env %s on %s: step %lld: final observation[%lld] of env %d is %g", env_id, who,
                                (long long)step, (long long)i, b, shown(final_obs[(size_t)b * D + i]));
    return 0;
}

/* f32 data of t on the host: t's own, or a copy into *tmp (freed by the caller). */
static const float *host_f32(const struct tensor *t, float **tmp)
{
    *tmp = NULL;
    if (t->device == DEVICE_CPU) return tensor_data(t);
    *tmp = trib_xmalloc(tensor_nbytes(t) ? tensor_nbytes(t) : 1);
    tensor_copy_to_host(t, *tmp);
    return *tmp;
}

int rl_check_loss(const struct tensor *loss, const char *what)
{
    float *tmp;
    const float *x = host_f32(loss, &tmp);
    float v = x[0];
    free(tmp);
    return isfinite(v) ? 0 : rl_set_error("%s: the loss is %g", what, shown(v));
}

/* 0, or -1 naming tensor `name` and its first non-finite element. */
static int check_tensor(const struct tensor *t, const char *what, const char *name, int idx)
{
    if (t->dtype != DTYPE_F32) return 0;
    float *tmp;
    const float *x = host_f32(t, &tmp);
    int64_t i = first_nonfinite(x, t->numel);
    double v = i >= 0 ? shown(x[i]) : 0;
    free(tmp);
    if (i < 0) return 0;
    if (name) return rl_set_error("%s %s[%lld] is %g", what, name, (long long)i, v);
    return rl_set_error("%s %d [%lld] is %g", what, idx, (long long)i, v);
}

int rl_check_gradients(int64_t ctx)
{
    enum { CAP = 256 };
    struct tensor *leaves[CAP], *grads[CAP];
    int n = dist_autograd_get_gradients(ctx, CAP, leaves, grads);
    if (n < 0) return rl_set_error("gradients: unknown context %lld", (long long)ctx);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0) rc = check_tensor(grads[i], "gradient", NULL, i);
        tensor_free(leaves[i]);
        tensor_free(grads[i]);
    }
    return rc;
}

int rl_check_params(int n, struct tensor *const *params, const char *const *names)
{
    for (int i = 0; i < n; i++)
        if (check_tensor(params[i], "parameter", names ? names[i] : NULL, i) != 0) return -1;
    return 0;
}
