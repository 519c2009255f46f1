/* RL arithmetic over plain buffers (rl_math.h): returns, normalisation,
 * GAE, the return window and permutations. Everything accumulates in
 * double and stores float, like the f32 tensors it feeds. */
#include <math.h>

#include "common/check.h"
#include "envs/env.h"
#include "rl/rl_math.h"

void rl_discounted_returns(int n, const float *rewards, double gamma, float *out)
{
    double ret = 0.0;
    for (int t = n - 1; t >= 0; t--) {
        ret = (double)rewards[t] + gamma * ret;
        out[t] = (float)ret;
    }
}

void rl_normalize(int n, float *x, double eps)
{
    if (n <= 0) return;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += x[i];
    double mean = sum / n, ss = 0.0;
    for (int i = 0; i < n; i++) ss += ((double)x[i] - mean) * ((double)x[i] - mean);
    double std = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
    for (int i = 0; i < n; i++) x[i] = (float)(((double)x[i] - mean) / (std + eps));
}

void rl_gae(int T, int B, double gamma, double lambda, const float *rewards, const float *values,
            const bool *terminated, const bool *truncated, const float *final_values,
            const float *next_values, float *advantages, float *returns)
{
    if (T <= 0 || B <= 0) return;
    for (int b = 0; b < B; b++) {
        double next_adv = 0.0;   /* A_{t+1} */
        for (int t = T - 1; t >= 0; t--) {
            int i = t * B + b;
            double nv;
            if (truncated[i] && !terminated[i]) {
                CHECK(final_values != NULL);
                nv = final_values[i];
            } else {
                nv = t == T - 1 ? next_values[b] : values[i + B];
            }
            double delta = (double)rewards[i] + (terminated[i] ? 0.0 : gamma * nv) - values[i];
            bool done = terminated[i] || truncated[i];
            double adv = delta + (done ? 0.0 : gamma * lambda * next_adv);
            advantages[i] = (float)adv;
            returns[i] = (float)(adv + values[i]);
            next_adv = adv;
        }
    }
}

void rl_vtrace(int T, int B, double gamma, double rho_bar, double c_bar, const float *rewards, const float *values,
               const float *behaviour_logp, const float *target_logp, const bool *terminated, const bool *truncated,
               const float *final_values, const float *next_values, float *advantages, float *vs)
{
    if (T <= 0 || B <= 0) return;
    for (int b = 0; b < B; b++) {
        double next_acc = 0.0, next_vs = 0.0;   /* vs_{t+1} - V_{t+1}, vs_{t+1} */
        for (int t = T - 1; t >= 0; t--) {
            int i = t * B + b;
            double ratio = exp((double)target_logp[i] - behaviour_logp[i]);
            double rho = fmin(rho_bar, ratio), c = fmin(c_bar, ratio);
            bool boot = truncated[i] && !terminated[i], done = terminated[i] || truncated[i];
            CHECK(!boot || final_values != NULL);
            double nv = boot ? final_values[i] : t == T - 1 ? next_values[b] : values[i + B];
            double nvs = boot ? final_values[i] : t == T - 1 ? next_values[b] : next_vs;
            double keep = terminated[i] ? 0.0 : gamma;
            double delta = rho * ((double)rewards[i] + keep * nv - values[i]);
            double acc = delta + (done ? 0.0 : gamma * c * next_acc);
            double v = values[i] + acc;
            vs[i] = (float)v;
            advantages[i] = (float)(rho * ((double)rewards[i] + keep * nvs - values[i]));
            next_acc = acc;
            next_vs = v;
        }
    }
}

void rl_window_init(struct rl_window *w, int cap)
{
    CHECK(cap >= 1 && cap <= RL_WINDOW_MAX);
    w->cap = cap;
    w->n = w->head = 0;
    w->sum = 0.0;
}

void rl_window_push(struct rl_window *w, double x)
{
    if (w->n == w->cap) w->sum -= w->buf[w->head];
    else w->n++;
    w->buf[w->head] = x;
    w->sum += x;
    w->head = (w->head + 1) % w->cap;
    /* A running sum of add/subtract drifts; re-add once per lap. */
    if (w->head == 0) {
        double s = 0.0;
        for (int i = 0; i < w->n; i++) s += w->buf[i];
        w->sum = s;
    }
}

double rl_window_mean(const struct rl_window *w)
{
    return w->n ? w->sum / w->n : 0.0;
}

/* Uniform in [0, bound) without modulo bias (Lemire's multiply-shift with
 * rejection). */
static uint32_t uniform_below(uint64_t *rng, uint32_t bound)
{
    uint64_t m = (uint64_t)(uint32_t)(env_rng_next(rng) >> 32) * bound;
    uint32_t low = (uint32_t)m;
    if (low < bound) {
        uint32_t threshold = -bound % bound;
        while (low < threshold) {
            m = (uint64_t)(uint32_t)(env_rng_next(rng) >> 32) * bound;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

void rl_permutation(int n, uint64_t *rng, int *out)
{
    for (int i = 0; i < n; i++) out[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)uniform_below(rng, (uint32_t)i + 1);
        int tmp = out[i];
        out[i] = out[j];
        out[j] = tmp;
    }
}

double rl_explained_variance(const float *y_pred, const float *y, int n)
{
    if (n < 1) return NAN;
    double my = 0, md = 0;
    for (int i = 0; i < n; i++) {
        my += y[i];
        md += (double)y[i] - y_pred[i];
    }
    my /= n;
    md /= n;
    double vy = 0, vd = 0;
    for (int i = 0; i < n; i++) {
        double a = y[i] - my, d = (double)y[i] - y_pred[i] - md;
        vy += a * a;
        vd += d * d;
    }
    return vy == 0 ? NAN : 1.0 - vd / vy;
}

