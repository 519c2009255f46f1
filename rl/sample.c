/* Categorical and diagonal-Gaussian sampling over raw buffers. */
#include "rl/sample.h"

#include <math.h>

#include "envs/env.h"

void rl_sample_categorical(int B, int C, const float *logits, uint64_t *rng, bool greedy, int *actions, float *logp)
{
    for (int b = 0; b < B; b++) {
        const float *l = logits + (int64_t)b * C;
        int arg = 0;
        for (int c = 1; c < C; c++)
            if (l[c] > l[arg]) arg = c;
        double mx = l[arg], z = 0;
        for (int c = 0; c < C; c++) z += exp((double)l[c] - mx);
        int a = arg;
        if (!greedy) {
            double u = env_rng_double(rng) * z, acc = 0;
            a = C - 1;
            for (int c = 0; c < C; c++) {
                acc += exp((double)l[c] - mx);
                if (u < acc) {
                    a = c;
                    break;
                }
            }
        }
        actions[b] = a;
        if (logp) logp[b] = (float)((double)l[a] - mx - log(z));
    }
}

/* Standard normal by Box-Muller from two uniforms. */
static double normal(uint64_t *rng)
{
    double u1 = 1.0 - env_rng_double(rng), u2 = env_rng_double(rng);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void rl_sample_gaussian(int B, int D, const float *mean, const float *log_std, uint64_t *rng, bool greedy,
                        float *actions, float *logp)
{
    const double half_log_2pi = 0.5 * log(2.0 * M_PI);
    for (int b = 0; b < B; b++) {
        double lp = 0;
        for (int d = 0; d < D; d++) {
            double mu = mean[(int64_t)b * D + d], ls = log_std[d], sd = exp(ls);
            double x = greedy ? mu : mu + sd * normal(rng);
            float xf = (float)x;
            actions[(int64_t)b * D + d] = xf;
            double z = ((double)xf - mu) / sd;
            lp += -0.5 * z * z - ls - half_log_2pi;
        }
        if (logp) logp[b] = (float)lp;
    }
}

void rl_logp_categorical(int B, int C, const float *logits, const int *actions, float *logp)
{
    for (int b = 0; b < B; b++) {
        const float *l = logits + (int64_t)b * C;
        double mx = l[0], z = 0;
        for (int c = 1; c < C; c++) mx = fmax(mx, l[c]);
        for (int c = 0; c < C; c++) z += exp((double)l[c] - mx);
        logp[b] = (float)((double)l[actions[b]] - mx - log(z));
    }
}

void rl_logp_gaussian(int B, int D, const float *mean, const float *log_std, const float *actions, float *logp)
{
    const double half_log_2pi = 0.5 * log(2.0 * M_PI);
    for (int b = 0; b < B; b++) {
        double lp = 0;
        for (int d = 0; d < D; d++) {
            double ls = log_std[d], z = ((double)actions[(int64_t)b * D + d] - mean[(int64_t)b * D + d]) / exp(ls);
            lp += -0.5 * z * z - ls - half_log_2pi;
        }
        logp[b] = (float)lp;
    }
}
