/* The run configuration's range checks (rl_config_check), whichever way the
 * config came (command line, --config JSON, the wire), and the default
 * --max-policy-lag. */
#define _GNU_SOURCE
#include "rl/config.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "optim/optim.h"
#include "rl/algo_shape.h"
#include "rl/rl.h"

#define RL_MAX_NORM_CLIP 1e6   /* --clip-obs, --clip-reward */

/* Every line of c->env_arg as --env-arg would take it (a config from a
 * file or the wire is checked as the command line is). */
static int check_env_args(const struct rl_config *c)
{
    struct rl_config scratch;
    scratch.env_arg[0] = '\0';
    char buf[sizeof c->env_arg];
    snprintf(buf, sizeof buf, "%s", c->env_arg);
    for (char *line = buf; *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (rl_config_add_env_arg(&scratch, line) != 0) return -1;
        if (!nl) break;
        line = nl + 1;
    }
    return 0;
}

int rl_default_max_policy_lag(const struct rl_config *c)
{
    /* A healthy async run's lag is about the updates the other observers
     * make during one rollout and its updates: observers x epochs x
     * minibatches (measured on CartPole, 2 cores: ppo-fast with 8
     * observers lag mean 44, p95 ~75, max ~250; REINFORCE 4 observers max
     * ~70; A2C 2 observers max ~115). 32 times that, at least 1000, drops
     * none of those, and does drop what a stopped observer sends when it is
     * resumed after seconds to minutes (300+ versions a second here). */
    const struct rl_algo *a = rl_algo_of(c);
    int64_t per_rollout = a ? rl_algo_updates_per_rollout(a, c) : 1;
    int64_t k = 32 * (int64_t)c->observers * per_rollout;
    return k < 1000 ? 1000 : k > INT_MAX ? INT_MAX : (int)k;
}

/* What an algorithm asks of the rest (the algorithm's own checks). */
static int check_algo(const struct rl_config *c)
{
    return rl_algo_check(rl_algo_of(c), c);   /* the algorithm's own and its shape's (rl/algo*.c) */
}

/* The run's shape and the policy's size. */
static int check_shape(const struct rl_config *c)
{
    if (c->observers < 1 || c->observers > RL_MAX_OBSERVERS)
        return rl_set_error("--observers must be in 1..%d, not %d", RL_MAX_OBSERVERS, c->observers);
    if (c->envs_per_observer < 1 || c->envs_per_observer > RL_MAX_ENVS)
        return rl_set_error("--envs-per-observer must be in 1..%d, not %d", RL_MAX_ENVS, c->envs_per_observer);
    if (c->steps_per_rollout < 1 || c->steps_per_rollout > 1000000)
        return rl_set_error("--steps-per-rollout must be in 1..1000000, not %d", c->steps_per_rollout);
    if ((int64_t)c->steps_per_rollout * c->envs_per_observer > 1 << 22)
        return rl_set_error("--steps-per-rollout x --envs-per-observer must be at most %d samples", 1 << 22);
    const struct rl_algo *a = rl_algo_of(c);
    if (!a) return rl_set_error("unknown algorithm %d", c->algo);
    if (c->hidden.n < 1 || c->hidden.n > RL_MAX_HIDDEN)
        return rl_set_error("--hidden takes 1..%d layer sizes", RL_MAX_HIDDEN);
    for (int i = 0; i < c->hidden.n; i++)
        if (c->hidden.v[i] < 1 || c->hidden.v[i] > RL_MAX_DIM)
            return rl_set_error("--hidden sizes must be in 1..%d", RL_MAX_DIM);
    /* the hidden layers alone (an env of one observation and one action),
     * actor and critic: a lower bound of the policy's size */
    int64_t params = 0;
    for (int i = 1; i < c->hidden.n; i++) params += ((int64_t)c->hidden.v[i - 1] + 1) * c->hidden.v[i];
    params *= a->value_head ? 2 : 1;
    if (params > RL_MAX_POLICY_PARAMS)
        return rl_set_error("--hidden: a policy of these layers has over %lld parameters (at most %lld)",
                            (long long)params, (long long)RL_MAX_POLICY_PARAMS);
    return 0;
}

/* The update's hyper-parameters. */
static int check_update(const struct rl_config *c)
{
    if (!(c->dropout >= 0 && c->dropout < 1)) return rl_set_error("--dropout must be in [0, 1)");
    if (c->optimizer < 0 || c->optimizer >= OPTIM_KIND_COUNT) return rl_set_error("unknown optimizer");
    if (!(c->lr >= RL_MIN_LR && c->lr <= RL_MAX_LR))
        return rl_set_error("--lr (the learning rate) must be in [%g, %g], not %g", RL_MIN_LR, RL_MAX_LR, c->lr);
    if (!(c->opt_eps > 0 && c->opt_eps < 1)) return rl_set_error("optimizer eps must be in (0, 1)");
    if (!(c->gamma >= 0 && c->gamma <= 1)) return rl_set_error("--gamma must be in [0, 1]");
    if (!(c->gae_lambda >= 0 && c->gae_lambda <= 1)) return rl_set_error("--gae-lambda must be in [0, 1]");
    if (c->minibatches < 1 || c->epochs < 1 || c->epochs > 1000)
        return rl_set_error("--minibatches must be >= 1 and --epochs in 1..1000");
    if (!(c->clip > 0 && c->clip < 10)) return rl_set_error("--clip must be in (0, 10)");
    /* a loss coefficient far outside these makes every loss overflow and
     * every observer drop out: refused before the run starts */
    if (!(c->ent_coef >= 0 && c->ent_coef <= RL_MAX_LOSS_COEF))
        return rl_set_error("--ent-coef (the entropy bonus's weight in the loss) must be in [0, %g], not %g",
                            RL_MAX_LOSS_COEF, c->ent_coef);
    if (!(c->vf_coef >= 0 && c->vf_coef <= RL_MAX_LOSS_COEF))
        return rl_set_error("--vf-coef (the value loss's weight in the loss) must be in [0, %g], not %g",
                            RL_MAX_LOSS_COEF, c->vf_coef);
    if (!(c->max_grad_norm >= 0 && isfinite(c->max_grad_norm)))
        return rl_set_error("--max-grad-norm must be a finite number >= 0 (0: no clipping), not %g", c->max_grad_norm);
    if (!(fabs(c->reward_scale) >= 1e-6 && fabs(c->reward_scale) <= 1e6))
        return rl_set_error("--reward-scale must be in [1e-06, 1e+06] or [-1e+06, -1e-06], not %g", c->reward_scale);
    if (!(c->clip_obs > 0 && c->clip_obs <= RL_MAX_NORM_CLIP))
        return rl_set_error("--clip-obs must be in (0, %g], not %g", RL_MAX_NORM_CLIP, c->clip_obs);
    if (!(c->clip_reward > 0 && c->clip_reward <= RL_MAX_NORM_CLIP))
        return rl_set_error("--clip-reward must be in (0, %g], not %g", RL_MAX_NORM_CLIP, c->clip_reward);
    if (c->max_policy_lag < 0) return rl_set_error("--max-policy-lag must be >= 0");
    if (!(c->rho_bar > 0 && c->rho_bar < 1e6) || !(c->c_bar > 0 && c->c_bar < 1e6))
        return rl_set_error("--rho-bar and --c-bar must be in (0, 1e+06), not %g and %g", c->rho_bar, c->c_bar);
    return 0;
}

/* Serving, stopping, logging. */
static int check_run(const struct rl_config *c)
{
    if (c->max_batch < c->envs_per_observer)
        return rl_set_error("--max-batch (%d) must be at least --envs-per-observer (%d): one act call has that many rows",
                            c->max_batch, c->envs_per_observer);
    const struct rl_algo *algo = rl_algo_of(c);
    if (c->double_buffer && algo && algo->shape == RL_SHAPE_EPISODES)
        return rl_set_error("--double-buffer splits a rollout's envs in two halves: --algo %s runs episodes of one env",
                            rl_algo_name(c->algo));
    if (c->double_buffer && c->envs_per_observer % 2 != 0)
        return rl_set_error("--double-buffer splits each observer's envs in two halves: --envs-per-observer must be "
                            "even, not %d", c->envs_per_observer);
    if (c->max_batch < 1 || c->max_wait_us < 0 || c->max_wait_us > 1000000)
        return rl_set_error("--max-batch must be >= 1 and --max-wait-us in 0..1000000");
    if (c->checkpoint_every < 0) return rl_set_error("--checkpoint-every must be >= 0");
    if (c->eval_every < 0) return rl_set_error("--eval-every must be >= 0");
    if (c->eval_episodes < 1 || c->eval_episodes > 100000)
        return rl_set_error("--eval-episodes must be in 1..100000, not %d", c->eval_episodes);
    if (c->max_steps < 0 || !(c->max_seconds >= 0) || c->max_updates < 0)
        return rl_set_error("--max-steps, --max-seconds and --max-updates must be >= 0");
    if (!(c->log_every > 0)) return rl_set_error("--log-every must be > 0 seconds");
    if (c->heartbeat_timeout < 100 || c->heartbeat_timeout > 3600000)
        return rl_set_error("--heartbeat-timeout must be in 100..3600000 ms");
    if (!(c->step_timeout >= 0 && c->step_timeout <= 86400))
        return rl_set_error("--step-timeout must be in 0..86400 seconds (0: no limit)");
    if (!c->env[0]) return rl_set_error("--env must not be empty");
    /* NaN: not given, the env's threshold; an infinity would be "solved"
     * at once (-inf) or never (inf) */
    if (isinf(c->target))
        return rl_set_error("--target (the mean return that counts as solved) must be a finite number, not %g",
                            c->target);
    return 0;
}

int rl_config_check(const struct rl_config *c)
{
    if (check_env_args(c) != 0 || check_shape(c) != 0 || check_update(c) != 0 || check_algo(c) != 0) return -1;
    return check_run(c);
}
